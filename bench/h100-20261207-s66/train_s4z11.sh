#!/usr/bin/env bash
# Prepared in session 66 (not run): issue 18's stage s4z11, more capacity within 50 MB. Four stages
# of the same recipe from the 9-layer 4z6 (s4z7, s4z8, s4z10 and their means) left counting at
# 95.0 % of 953 held-out counts at T = 0 (bench/RESULTS.md session 66). Here 4z6's output head
# becomes its embedding too (tools/train_tiny/tie_embeddings.py --keep lm_head: 5.2 MB freed) and
# two linear layers are added as the identity (grow_depth.py --copy 1, then --copy 6): 11 layers,
# 49.2 MB. Tying breaks the model at first (on the CPU it answers "Count from 1 to 20." with
# noise, keeping either matrix), so this stage is an experiment: s4z10's recipe without the
# off-grid weight (which moved nothing), with the tied model relearning its input side (the
# shared matrix, named as the embedding, trains without weight decay, as the embedding did;
# the head it came from had 0.1). Ship
# only if the CPU evaluation beats 905 of the five sets' 953 (session 66's table) with the other
# skills kept and the MTP head's tokens a round on counting kept. Carry
# bench/peers/s4z6_model.tar.xz; keep bench/h100-20261206-s51, bench/cpu-20261205-s49,
# bench/h100-20261206-s54 and this folder in the tree. Limit 600.
set -u
rm -rf /tmp/s4z11_prep && mkdir -p /tmp/s4z11_prep/src
tar -C /tmp/s4z11_prep/src -xJf bench/peers/s4z6_model.tar.xz
src=/tmp/s4z11_prep/src/$(ls /tmp/s4z11_prep/src | head -1)
python3 tools/train_tiny/tie_embeddings.py $src /tmp/s4z11_prep/tied &&
  python3 tools/train_tiny/grow_depth.py /tmp/s4z11_prep/tied /tmp/s4z11_prep/g10 --copy 1 &&
  python3 tools/train_tiny/grow_depth.py /tmp/s4z11_prep/g10 /tmp/s4z11_prep/m_s4z11_init --copy 6 || exit 1
# (The fastest xz: the stage script only extracts it again.)
XZ_OPT='-0 -T0' tar -C /tmp/s4z11_prep -cJf /tmp/s4z11_init.tar.xz m_s4z11_init
# TRAIN_S 380, not s4z10's 420 (594 of 600 s): the tie, the grows and the whole model's xz here.
STAGE=${STAGE:-s4z11} SEED=${SEED:-6611} INIT_TAR=/tmp/s4z11_init.tar.xz SHORT_COUNT_FRAC=0.15 \
  COUNT_OFF_GRID=0.5 COUNT_KINDS=0.15,0.4,0.05,0.4 TRAIN_S=${TRAIN_S:-380} PACK_TRUNKS=0 \
  MINED_XZ=bench/h100-20261206-s54/mined_cpu_3000_s54.json.xz \
  EXTRA_TRAIN_ARGS="--distractor-weight ${DISTRACTOR_WEIGHT:-8}" \
  bash bench/h100-20261206-s51/next_train_s4z2.sh
# The whole model (its MTP head trained with the tied trunk), not the trunks (PACK_TRUNKS=0: a
# tied trunk under another model's head means nothing): ~35 MB in three 15 MiB parts, with its
# sha256, beside meta.tar.xz — five of the eight files a call brings back, within its 64 MiB.
S=${STAGE:-s4z11}
if [ -f /tmp/$S/model.safetensors ]; then
  (cd /tmp/$S && sha256sum model.safetensors) > $OUT/model_$S.sha256
  xz -T16 -6 -c /tmp/$S/model.safetensors | split -b 15M - $OUT/model_$S.safetensors.xz.part-
fi
ls -l $OUT
