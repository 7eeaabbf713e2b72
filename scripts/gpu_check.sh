#!/usr/bin/env bash
# The GPU check: one call on a CUDA machine runs the chosen steps, keeps every log under $OUT and
# prints a summary table last; exits non-zero when any step failed.
#
#   build     configure (Release, Ninja, -DGNA_CUDA=ON; GoogleTest through scripts/gtest_args.sh)
#             and build everything, or only $TARGETS
#   test      ctest -L $TEST_LABEL (default gpu), or ctest -R "$TESTS"
#   sanitize  compute-sanitizer memcheck and racecheck on small sweeps of the GPU tests: portable,
#             GPU reference, Hopper forward and backward, halo, unfused
#   sass      the Hopper forward and backward kernels of libgna: HGMMA in each, no local memory
#             (LDL / STL), no ptxas spill or wgmma-serialization warning in the build log (a
#             kernel spilling at most SPILL_BYTES_MAX bytes, default 8, is let through); the
#             KV loops' HGMMA blocks summarised by scripts/sass_gemm_blocks.py
#   profile   Nsight Compute on the first launches of one gna-kernel-bench case
#   bench     gna-kernel-bench (every device backend, forward and backward, JSON)
#   peers     python3 -m gna.bench: gna against cuDNN SDPA dense, FlashAttention SDPA dense and
#             FlexAttention in one process (needs a Python with torch; skipped without one)
#   torchext  the package's torch extension (python/cmake_build.py torch-extension python/gna)
#             against the Python's torch, so that the python and peers steps run through it
#             (skipped, with the reason, where it cannot be built)
#   python    the package's pytest suite against this build, in PYTEST_SHARDS shards at once
#             (default 3; the transformers DiNAT tests alone take minutes), each capped at
#             PYTEST_TIMEOUT seconds (default 400); fails on any failed test or a shard cut off;
#             PYTEST_FILES: only these test files
#
# Environment:
#   STEPS        default "build test sanitize sass bench" (also: profile, peers, python)
#   BUILD        build folder (default build-gpu); OUT log folder (default $BUILD/gpu-check-out)
#   CUDA_ARCHS   GNA_CUDA_ARCHS of the build (default native: this machine's GPUs alone)
#   JOBS         build parallelism (default 16)
#   TARGETS      build only these targets (e.g. "gna-kernel-bench test_halo")
#   TESTS        ctest -R regex instead of the label; TEST_LABEL (default gpu; empty: every test)
#   GNA_TEST_SEED, GNA_TEST_CONFIGS, GNA_HOPPER_SWEEP, GNA_HOPPER_BWD_SWEEP: read by the tests
#   SANITIZE_CONFIGS  configurations per rank under compute-sanitizer (default 3)
#   SPILL_BYTES_MAX   spilled bytes a Hopper kernel may have in the sass step (default 8)
#   SANITIZE_BINS     only these test binaries under compute-sanitizer (default: all six)
#   PROFILE_CASE (default "flux4k 80x80 s16x16"), PROFILE_BACKEND (hopper), PROFILE_KERNEL
#                (kernel-name regex, default forward_kernel), PROFILE_COUNT (launches, 1),
#                PROFILE_ARGS (more gna-kernel-bench arguments, default "--passes fwd"; for a
#                backward kernel: PROFILE_ARGS="--passes bwd" PROFILE_KERNEL=backward_kernel)
#   BENCH_ARGS   gna-kernel-bench arguments (e.g. "--image --graph --backends halo,hopper")
#   PEERS_ARGS   gna.bench arguments (default --quick); GNA_PYTHON: the Python for it
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$PWD/$BUILD/gpu-check-out}
JOBS=${JOBS:-16}
STEPS=${STEPS:-build test sanitize sass bench}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
mkdir -p "$OUT"
# compute-sanitizer, cuobjdump and ncu where the toolkit installs them, when not on PATH.
PATH=$PATH:/usr/local/cuda/bin
t0=$(date +%s)

rows=()
failed=0
# record STEP WHAT STATUS(ok|FAIL|skip) DETAIL SECONDS
record() {
  rows+=("$(printf '%-9s| %-42s| %-4s | %5s s | %s' "$1" "${2:0:42}" "$3" "$5" "$4")")
  [ "$3" = FAIL ] && failed=1
  echo "== $1 $2: $3 $4"
}
since() { echo $(( $(date +%s) - $1 )); }
# The words of an argument variable, shell quoting honoured (case names hold spaces):
# BENCH_ARGS="--cases 'nat 56x56 b128 h2 d32 7x7'".
words() { eval "words_=($1)"; }
bin() { echo "$BUILD/bin/$1"; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null ||
    echo "no nvidia-smi"; } | tee "$OUT/device.txt"
nvcc --version 2>/dev/null | tail -1

step_build() {
  local t=$(date +%s) target_args=() t_
  source scripts/gtest_args.sh "$OUT/gtest.log"
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGNA_CUDA=ON \
      -DGNA_CUDA_ARCHS="${CUDA_ARCHS:-native}" "${gtest_args[@]}" \
      >"$OUT/build.log" 2>&1; then
    tail -30 "$OUT/build.log"
    record build configure FAIL "log: build.log" "$(since $t)"
    return 1
  fi
  for t_ in ${TARGETS:-}; do target_args+=(--target "$t_"); done
  if ! cmake --build "$BUILD" -j "$JOBS" "${target_args[@]}" >>"$OUT/build.log" 2>&1; then
    grep -E "error|FAILED" "$OUT/build.log" | head -40
    record build "${TARGETS:-all}" FAIL "log: build.log" "$(since $t)"
    return 1
  fi
  record build "${TARGETS:-all}" ok "" "$(since $t)"
}

step_test() {
  local t=$(date +%s) args=() rc
  if [ -n "${TESTS:-}" ]; then
    args=(-R "$TESTS")
  elif [ -n "${TEST_LABEL-gpu}" ]; then
    args=(-L "${TEST_LABEL-gpu}")
  fi
  (cd "$BUILD" && ctest "${args[@]}" --output-on-failure --no-tests=error -j 4 --timeout 900) \
    >"$OUT/ctest.log" 2>&1
  rc=$?
  grep -hE "^\[  (FAILED|SKIPPED) \]" "$OUT/ctest.log" | sort -u | head -20
  record test "ctest ${args[*]}" "$([ $rc = 0 ] && echo ok || echo FAIL)" \
    "$(grep -E 'tests passed' "$OUT/ctest.log" | tail -1)" "$(since $t)"
}

# One compute-sanitizer run: TOOL BINARY GTEST_FILTER [VAR=VALUE...] (the sweep sizes).
sanitize_one() {
  local tool=$1 name=$2 filter=$3 t=$(date +%s) rc log
  shift 3
  log="$OUT/sanitize_${tool}_$name.log"
  if [ ! -x "$(bin "$name")" ]; then
    record sanitize "$tool $name" skip "not built" 0
    return
  fi
  env "$@" timeout 900 compute-sanitizer --tool "$tool" --error-exitcode 3 \
    "$(bin "$name")" --gtest_brief=1 --gtest_filter="$filter" >"$log" 2>&1
  rc=$?
  record sanitize "$tool $name" "$([ $rc = 0 ] && echo ok || echo FAIL)" \
    "rc $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1); $(grep -E '^\[  PASSED  \]' "$log" | tail -1)" \
    "$(since $t)"
}

step_sanitize() {
  local n=${SANITIZE_CONFIGS:-3} tool b
  if ! command -v compute-sanitizer >/dev/null; then
    record sanitize compute-sanitizer FAIL "not found" 0
    return
  fi
  for tool in memcheck racecheck; do
    for b in ${SANITIZE_BINS:-test_portable test_gpu_reference test_hopper_forward test_hopper_backward test_halo test_unfused_gpu}; do
      case $b in
        test_portable|test_gpu_reference|test_unfused_gpu) sanitize_one $tool $b '*' GNA_TEST_CONFIGS=$n ;;
        test_hopper_forward) sanitize_one $tool $b 'HopperForward.RandomSweep*' GNA_HOPPER_SWEEP=$n ;;
        test_hopper_backward) sanitize_one $tool $b 'HopperBackward.RandomSweep*' GNA_HOPPER_BWD_SWEEP=$n ;;
        test_halo) sanitize_one $tool $b 'Halo.Rank*:Halo.Deterministic' GNA_TEST_CONFIGS=$n ;;
        *) sanitize_one $tool $b '*' GNA_TEST_CONFIGS=$n ;;
      esac
    done
  done
}

step_sass() {
  local t=$(date +%s) lib="$BUILD/lib/libgna.so" all="$OUT/sass_all.tmp" pass kernels bad warnings
  if [ ! -f "$lib" ]; then
    record sass "hopper kernels" skip "no $lib" 0
    return
  fi
  if ! command -v cuobjdump >/dev/null; then
    record sass cuobjdump FAIL "not found" 0
    return
  fi
  # Kernels ptxas reported spilling at most SPILL_BYTES_MAX bytes (the accepted 8-byte spill of
  # the Hopper backward at head dim 128) may hold local memory; any larger spill fails.
  local budget=${SPILL_BYTES_MAX:-8} allowed="$OUT/spill_allowed.txt"
  grep -hoE "spilled to local memory in function '[^']+', [0-9]+ bytes spill stores" \
    "$OUT/build.log" 2>/dev/null |
    sed -E "s/.*function '([^']+)', ([0-9]+) bytes.*/\1 \2/" |
    awk -v m="$budget" '$2 <= m {print $1}' | sort -u >"$allowed"
  cuobjdump --dump-sass "$lib" >"$all" 2>"$OUT/cuobjdump.err"
  # Only the Hopper kernels are kept (the whole library's SASS is too large to keep).
  for pass in forward backward; do
    awk -v p="hopper.*${pass}_kernel" '/Function :/ {f = ($3 ~ p)} f' "$all" >"$OUT/sass_$pass.txt"
    awk '/Function :/ {k = $3; n[k] = 0; h[k] = 0; l[k] = 0}
         k && /HGMMA/ {h[k]++} k && /(LDL|STL)/ {l[k]++}
         END {for (k in n) printf "%s HGMMA %d LDL/STL %d\n", k, h[k], l[k]}' \
      "$OUT/sass_$pass.txt" | sort >"$OUT/sass_${pass}_counts.txt"
    kernels=$(wc -l <"$OUT/sass_${pass}_counts.txt")
    local failing='FILENAME == ARGV[1] {ok[$1] = 1; next} $3 == 0 || ($5 != 0 && !($1 in ok))'
    bad=$(awk "$failing" "$allowed" "$OUT/sass_${pass}_counts.txt" | wc -l)
    awk "$failing" "$allowed" "$OUT/sass_${pass}_counts.txt" | head -5
    python3 scripts/sass_gemm_blocks.py "hopper.*${pass}_kernel" <"$OUT/sass_$pass.txt" \
      >"$OUT/sass_${pass}_gemm_blocks.txt" 2>&1
    if [ "$kernels" = 0 ]; then
      record sass "hopper $pass kernels" FAIL "none found in $lib" "$(since $t)"
    else
      record sass "hopper $pass kernels" "$([ "$bad" = 0 ] && echo ok || echo FAIL)" \
        "$kernels kernels, $bad without HGMMA or with LDL/STL (sass_${pass}_counts.txt)" "$(since $t)"
    fi
  done
  rm -f "$all"
  # ptxas messages are in the build log only for what this run compiled: spills, and wgmmas
  # serialized (C75xx "... are serialized"); other C75xx notes (an injected warpgroup.arrive)
  # are not failures.
  warnings=$(( $(grep -i "spilled" "$OUT/build.log" 2>/dev/null | grep -i hopper |
                   grep -vFf "$allowed" | wc -l) +
               $(grep -i "serialized" "$OUT/build.log" 2>/dev/null | grep -ci hopper) ))
  grep -iE "spilled|serialized" "$OUT/build.log" 2>/dev/null | grep -i hopper | sort -u |
    head -5 | cut -c1-200
  record sass "ptxas spills / wgmma serialization" "$([ "$warnings" = 0 ] && echo ok || echo FAIL)" \
    "$warnings hopper warnings in build.log beyond $budget spilled bytes ($(wc -l <"$allowed") kernels within)" 0
}

step_profile() {
  local t=$(date +%s) rc
  if [ ! -x "$(bin gna-kernel-bench)" ] || ! command -v ncu >/dev/null; then
    record profile "ncu" skip "needs ncu and gna-kernel-bench" 0
    return
  fi
  words "${PROFILE_ARGS---passes fwd}"
  timeout 600 ncu --clock-control none -k "regex:${PROFILE_KERNEL:-forward_kernel}" \
    -c "${PROFILE_COUNT:-1}" --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats \
    --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
    "$(bin gna-kernel-bench)" --cases "${PROFILE_CASE:-flux4k 80x80 s16x16}" \
    --backends "${PROFILE_BACKEND:-hopper}" --reps 1 --warmup 1 "${words_[@]}" \
    >"$OUT/profile.txt" 2>&1
  rc=$?
  grep -E "Throughput|Busy|Stall|Issue|Eligible|Active Warps|Duration" "$OUT/profile.txt" | head -30
  record profile "${PROFILE_CASE:-flux4k 80x80 s16x16}" \
    "$([ $rc = 0 ] && grep -q "Duration" "$OUT/profile.txt" && echo ok || echo FAIL)" \
    "rc $rc, profile.txt" "$(since $t)"
}

step_bench() {
  local t=$(date +%s) rc
  if [ ! -x "$(bin gna-kernel-bench)" ]; then
    record bench gna-kernel-bench skip "not built" 0
    return
  fi
  words "${BENCH_ARGS:-}"
  "$(bin gna-kernel-bench)" --json "$OUT/bench.json" "${words_[@]}" >"$OUT/bench.log" 2>&1
  rc=$?
  grep -q "no CUDA device" "$OUT/bench.log" && rc=1  # the benchmark itself exits 0 there
  grep "^#" "$OUT/bench.log" | head -10
  record bench "gna-kernel-bench ${BENCH_ARGS:-}" "$([ $rc = 0 ] && echo ok || echo FAIL)" \
    "rc $rc, $(grep -c '^|' "$OUT/bench.log") table lines, $(grep -c '^#' "$OUT/bench.log") refused calls (bench.log)" \
    "$(since $t)"
}

step_peers() {
  local t=$(date +%s) rc py=${GNA_PYTHON:-python3}
  if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    record peers "gna.bench" skip "$py has no torch with CUDA" 0
    return
  fi
  words "${PEERS_ARGS:---quick}"
  GNA_LIBRARY="$BUILD/lib/libgna.so" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
    PYTHONUNBUFFERED=1 "$py" -m gna.bench --out "$OUT/peers" "${words_[@]}" \
    >"$OUT/peers.log" 2>&1
  rc=$?
  record peers "gna.bench ${PEERS_ARGS:---quick}" "$([ $rc = 0 ] && echo ok || echo FAIL)" \
    "rc $rc, peers/bench.md" "$(since $t)"
}

step_torchext() {
  local t=$(date +%s) py=${GNA_PYTHON:-python3} rc
  MAX_JOBS=$JOBS "$py" python/cmake_build.py torch-extension python/gna >"$OUT/torchext.log" 2>&1
  rc=$?
  case $rc in
    0) record torchext "python/gna/_torch_ops" ok "log: torchext.log" "$(since $t)" ;;
    2) record torchext "python/gna/_torch_ops" skip "$(tail -1 "$OUT/torchext.log")" "$(since $t)" ;;
    *) grep -E "error|Error" "$OUT/torchext.log" | head -20
       record torchext "python/gna/_torch_ops" FAIL "log: torchext.log" "$(since $t)" ;;
  esac
}

step_python() {
  local t=$(date +%s) py=${GNA_PYTHON:-python3} shards=${PYTEST_SHARDS:-3} i files=() pids=()
  if ! "$py" -c "import torch, pytest" 2>/dev/null; then
    record python "pytest python/tests" skip "$py has no torch and pytest" 0
    return
  fi
  mapfile -t files < <(ls ${PYTEST_FILES:-python/tests/test_*.py})
  # Shard i takes every shards-th file: the slow DiNAT / compat / compile files spread out.
  for ((i = 0; i < shards; i++)); do
    local mine=()
    for ((j = i; j < ${#files[@]}; j += shards)); do mine+=("${files[j]}"); done
    GNA_LIBRARY="$BUILD/lib/libgna.so" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
      timeout "${PYTEST_TIMEOUT:-400}" "$py" -m pytest -q -p no:cacheprovider -rfEs "${mine[@]}" \
      >"$OUT/pytest_$i.log" 2>&1 &
    pids+=($!)
  done
  local rcs=() summary=() bad=0
  for i in "${!pids[@]}"; do
    wait "${pids[i]}"
    rcs+=($?)
    summary+=("$(grep -E "^[0-9]+ (passed|failed)|passed|failed" "$OUT/pytest_$i.log" | tail -1)")
    [ "${rcs[i]}" != 0 ] && bad=1
  done
  record python "pytest python/tests ($shards shards)" "$([ $bad = 0 ] && echo ok || echo FAIL)" \
    "rc ${rcs[*]}; $(IFS='|'; echo "${summary[*]}")" "$(since $t)"
}

for step in $STEPS; do
  case $step in
    build) step_build || break ;;  # nothing else is worth running on a failed build
    test|sanitize|sass|profile|bench|peers|torchext|python) "step_$step" ;;
    *) record "$step" "unknown step" FAIL "steps: build test sanitize sass profile bench peers torchext python" 0 ;;
  esac
done

echo
echo "==================== gpu_check ($(cat "$OUT/device.txt"), $(since $t0) s, logs in $OUT)"
echo "step     | check                                     | res  |  time   | detail"
for r in "${rows[@]}"; do echo "$r"; done
[ -f "$OUT/bench.log" ] && sed -n '/^gna-kernel-bench on/,$p' "$OUT/bench.log"
[ -f "$OUT/peers/bench.md" ] && cat "$OUT/peers/bench.md"
exit $failed
