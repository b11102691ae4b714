#!/usr/bin/env bash
# Session 21, call 6: the A3B slice's one-stream decode, new (5d8a58d) before old (d317402) this
# time, two rounds: is the 2 % the A/Bs above showed the binaries or their order?
set -u
OLD=/tmp/fl_old; [ -x $OLD ] || { xz -dc bench/peers/flashlane_old.xz > $OLD; chmod +x $OLD; }
NEW=/tmp/fl_new; [ -x $NEW ] || { xz -dc bench/peers/flashlane.xz > $NEW; chmod +x $NEW; }
ROUNDS=2 STREAMS=1 timeout 170 bench/gpu_ab.sh /tmp/ab-order qwen3-next-a3b-slice $NEW $OLD > /dev/null 2>&1
cat /tmp/ab-order/ab.txt | tee $OUT/ab_order.txt
