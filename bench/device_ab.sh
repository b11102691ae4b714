# Sourced by a device call's script, from the repository root:
#   . bench/device_ab.sh
# It takes T0 (the call's start, for `el` and `room`) as the script set it, else now, and sources
# bench/unpack_peers.sh (the default model and $FL from the packs carried).
# el MESSAGE: MESSAGE after the seconds since T0.
# room SECONDS NAME: whether a step of SECONDS fits within $LIMIT (570 unset); else says so.
# gpu_info: the GPU's name, driver and memory, and its device-to-device copy bandwidth
#   (bench/copy_bandwidth.py: issue 12's ceiling for one stream), into $OUT/gpu.txt, and printed.
# kernel_tests NAME SECONDS FILTER...: the packed `backend_cuda` test binary
#   (bench/peers/gpu-tests.tar.xz) on the tests whose names hold a FILTER, at most SECONDS, its
#   log written to $OUT/tests_NAME.txt as it runs (a call cut short keeps what ran); one test at
#   a time, or $TEST_THREADS (each compiles its modules on the CPU).
# ab NAME SHAPE STREAMS SETTINGS BINARY...: bench/gpu_ab.sh into /tmp/ab_NAME (dummy weights,
#   prompt 128, 64 new tokens, $ROUNDS (2) interleaved rounds, 90 s a run), its runs and means appended to
#   $OUT/ab.txt and printed.
# timeline NAME SHAPE STREAMS SETTINGS BINARY: `ab` under SETTINGS (each with
#   FLASHLANE_TIMELINE=1), each setting's first-round kernel timeline (each round size's
#   kernels, without the launch-by-launch lines) appended to $OUT/timeline_NAME.txt.
# whole_model_tests: the five whole-model GPU test binaries (bench/gpu_tests.sh, all at once, 200 s
#   each at most) at the defaults into /tmp/tests, their summary to $OUT/tests_summary.txt
#   (printed) and their logs to $OUT/tests_logs.tar.xz.
# ncu_summary CSV: each kernel's metrics in ncu's --csv --metrics output (one metric a row),
#   averaged over its launches.
# ncu_metrics [EXTRA,...]: the metrics the session scripts ask ncu for (time, DRAM and L2
#   throughput, warps active, issue, the tensor and FMA pipes, the stall reasons), comma-joined,
#   with EXTRA after them; ncu_bin: the ncu this machine has.
T0=${T0:-$(date +%s)}
. bench/unpack_peers.sh
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
ncu_bin() { command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1; }
ncu_metrics() {
  local m=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
  m+=,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
  m+=,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
  m+=,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size
  local s
  for s in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait lg_throttle membar no_instruction; do
    m+=,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio
  done
  echo "$m${1:+,$1}"
}
ncu_summary() {
  python3 - "$1" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if len(rows) < 2: sys.exit("no rows")
head = rows[0]
if "Metric Name" not in head: sys.exit("no metric rows (sections?)")
k = head.index("Kernel Name"); m = head.index("Metric Name"); v = head.index("Metric Value")
by = collections.defaultdict(list)
for r in rows[1:]:
    try: value = float(r[v].replace(",", ""))
    except ValueError: continue
    by[(r[k], r[m])].append(value)
for (kern, metric), vals in sorted(by.items()):
    print(f"{kern[:40]:40} {metric[:80]:80} mean {sum(vals)/len(vals):12.2f} of {len(vals)}")
PY
}
room() { [ $(( $(date +%s) - T0 + $1 )) -le ${LIMIT:-570} ] || { el "skipped: $2 (no room)"; return 1; }; }
ab() {
  local name=$1 shape=$2 streams=$3 settings=$4; shift 4
  SETTINGS="$settings" STREAMS=$streams NEW_TOKENS=64 ROUNDS=${ROUNDS:-2} RUN_TIMEOUT=90 \
    bench/gpu_ab.sh /tmp/ab_$name $shape "$@" > /dev/null 2>&1
  el "A/B $name rc=$?"; cat /tmp/ab_$name/ab.txt /tmp/ab_$name/ab_means.txt | tee -a $OUT/ab.txt
}
gpu_info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1
  timeout 60 python3 bench/copy_bandwidth.py >> $OUT/gpu.txt 2>&1
  cat $OUT/gpu.txt
}
kernel_tests() {
  local name=$1 seconds=$2 b; shift 2
  b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
  FLASHLANE_REQUIRE_GPU=1 timeout $seconds $b/backend_cuda "$@" --test-threads ${TEST_THREADS:-1} \
    > $OUT/tests_$name.txt 2>&1
  el "backend_cuda $* rc=$?"; grep -E "^test |test result|panicked|FAILED" $OUT/tests_$name.txt | head -20
}
whole_model_tests() {
  PARALLEL=1 TESTS="gpu_conformance gpu_dense gpu_target gpu_fixtures gpu_faults" TEST_TIMEOUT=200 \
    bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
  el "whole-model tests rc=$?"; tee $OUT/tests_summary.txt < /tmp/tests/summary.txt
  tar -C /tmp/tests -cJf $OUT/tests_logs.tar.xz .
}
timeline() {
  local name=$1 shape=$2 streams=$3 settings="" setting f
  for setting in $4; do settings+="${settings:+ }$setting,FLASHLANE_TIMELINE=1"; done
  shift 4
  ROUNDS=1 ab tl_$name $shape $streams "$settings" "$@" > /dev/null
  for f in /tmp/ab_tl_$name/*.round1.err; do
    # Each round size's kernels (the launch-by-launch lines, numbered, left out).
    { echo "=== $(basename $f)"; sed -n '/kernel timeline/,$p' $f | grep -Ev '^ +[0-9]+ ' | head -120; } \
      >> $OUT/timeline_$name.txt
  done
  el "timeline $name"
}
