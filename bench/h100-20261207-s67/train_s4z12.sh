#!/usr/bin/env bash
# Prepared in session 67: issue 18's capacity experiment (session 66's s4z11) from the shipped
# model, since 4z6's folder (bench/peers/s4z6_model.tar.xz) was lost with the last machine. The
# shipped 8-layer model's head becomes its embedding too (tie_embeddings.py --keep lm_head: 5.2 MB
# freed), then three linear layers are added as the identity: --copy 6 (4z6's layer, untrained
# here), --copy 1 and --copy 6 again, 11 layers, ~48.2 MB. Tying breaks the model at first, so
# this is an experiment: s4z10's recipe without the off-grid weight (which moved nothing), the
# distractor weight kept. Ship only above 905 of the five sets' 953 at T = 0 (RESULTS session 66)
# with the other skills and the MTP head's tokens a round on counting kept.
# Carry nothing (the training reads the tree's shipped model and tokenizer); keep
# bench/h100-20261206-s51, bench/cpu-20261205-s49, bench/h100-20261206-s54 and this folder in the
# tree. Limit 600.
set -u
P=/tmp/s4z12_prep
rm -rf $P && mkdir -p $P
python3 tools/train_tiny/tie_embeddings.py models/flashlane-tiny $P/tied &&
  python3 tools/train_tiny/grow_depth.py $P/tied $P/g9 --copy 6 &&
  python3 tools/train_tiny/grow_depth.py $P/g9 $P/g10 --copy 1 &&
  python3 tools/train_tiny/grow_depth.py $P/g10 $P/m_s4z12_init --copy 6 || exit 1
ls -l $P/m_s4z12_init
# (The fastest xz: the stage script only extracts it again.)
XZ_OPT='-0 -T0' tar -C $P -cJf /tmp/s4z12_init.tar.xz m_s4z12_init
STAGE=${STAGE:-s4z12} SEED=${SEED:-6712} INIT_TAR=/tmp/s4z12_init.tar.xz SHORT_COUNT_FRAC=0.15 \
  COUNT_OFF_GRID=0.5 COUNT_KINDS=0.15,0.4,0.05,0.4 TRAIN_S=${TRAIN_S:-400} PACK_TRUNKS=0 \
  MINED_XZ=bench/h100-20261206-s54/mined_cpu_3000_s54.json.xz \
  EXTRA_TRAIN_ARGS="--distractor-weight ${DISTRACTOR_WEIGHT:-8}" \
  bash bench/h100-20261206-s51/next_train_s4z2.sh
# The whole model (its MTP head trained with the tied trunk): ~34 MB of xz in 15 MiB parts with
# its sha256, beside meta.tar.xz.
S=${STAGE:-s4z12}
if [ -f /tmp/$S/model.safetensors ]; then
  (cd /tmp/$S && sha256sum model.safetensors) > $OUT/model_$S.sha256
  xz -T16 -6 -c /tmp/$S/model.safetensors | split -b 15M - $OUT/model_$S.safetensors.xz.part-
fi
ls -l $OUT
