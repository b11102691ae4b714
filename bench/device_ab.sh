# Sourced by a device call's script, from the repository root, after `T0=$(date +%s)`:
#   . bench/device_ab.sh
# el MESSAGE: MESSAGE after the seconds since T0.
# ab NAME SHAPE STREAMS SETTINGS BINARY...: bench/gpu_ab.sh into /tmp/ab_NAME (dummy weights,
#   prompt 128, 64 new tokens, 2 interleaved rounds, 90 s a run), its runs and means appended to
#   $OUT/ab.txt and printed.
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
ab() {
  local name=$1 shape=$2 streams=$3 settings=$4; shift 4
  SETTINGS="$settings" STREAMS=$streams NEW_TOKENS=64 ROUNDS=2 RUN_TIMEOUT=90 \
    bench/gpu_ab.sh /tmp/ab_$name $shape "$@" > /dev/null 2>&1
  el "A/B $name rc=$?"; cat /tmp/ab_$name/ab.txt /tmp/ab_$name/ab_means.txt | tee -a $OUT/ab.txt
}
