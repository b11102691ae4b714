#!/usr/bin/env bash
# For the next device session (written in session 26, not yet run): MTP's speed-up with the
# shipped 4p again, three interleaved passes (session 26 measured one: 1.79x at 1 stream, 1.497x
# at 8, just under issue 12's 1.5x), counting, 3 drafts against none, and 1 and 2 drafts beside.
# Carry bench/peers/{flashlane.xz,tiny_model.xz} with the default model moved out of the tree.
set -u
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
sha256sum models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
MODEL=models/flashlane-tiny FLASHLANE=$FL BENCH_ARGS="--device cuda" TASKS=counting \
    DRAFTS="none mtp:1 mtp:2 mtp:3" REPS=3 timeout 300 bench/mtp_speedup.sh /tmp/mtp > $OUT/mtp_speedup.txt 2>&1
echo "mtp rc=$?"; tail -10 $OUT/mtp_speedup.txt
