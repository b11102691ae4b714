# Sourced on the GPU machine, from the repository root, by the scripts of a device call:
#   . bench/unpack_peers.sh
# - puts the default model back in the tree from bench/peers/tiny_model.xz where a call moved it
#   out to carry more within the 64 MiB (bench/pack_gpu_tests.sh --flashlane makes the xz);
# - unpacks the CUDA flashlane binary from bench/peers/flashlane.xz, where carried, to $FL
#   (default /tmp/fl), and exports FL.
model=models/flashlane-tiny/model.safetensors
if [ ! -f "$model" ] && [ -f bench/peers/tiny_model.xz ]; then
  xz -T0 -dc bench/peers/tiny_model.xz >"$model"
fi
export FL=${FL:-/tmp/fl}
if [ -f bench/peers/flashlane.xz ] && [ ! -x "$FL" ]; then
  xz -dc bench/peers/flashlane.xz >"$FL" && chmod +x "$FL"
fi
