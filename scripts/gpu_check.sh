#!/usr/bin/env bash
# One-call GPU check: configure and build (Release, Ninja, -j16), run every GPU test
# (ctest -L gpu), compute-sanitizer memcheck and racecheck on a subset of the portable,
# reference and layout tests, then gna-kernel-bench. Full logs go to $OUT (default
# $BUILD/gpu-check-out);
# a short summary table is printed last.
#
# Environment: OUT (log folder), BUILD (build folder, default build-gpu), JOBS (default 16),
# BENCH_ARGS (extra gna-kernel-bench arguments),
# GNA_TEST_SEED (fixed seed for the random sweeps), GNA_SANITIZE_CONFIGS (configurations per
# rank under compute-sanitizer, default 4), SKIP_BENCH=1, SKIP_SANITIZER=1.
# Quicker partial runs: TARGETS (build only these, e.g. "gna-kernel-bench test_portable"),
# TESTS (ctest -R regex instead of every GPU test), GNA_TEST_CONFIGS (configurations per rank).
# GoogleTest: the system one, else built from $GTEST_SOURCE (default .carry/googletest).
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$PWD/$BUILD/gpu-check-out}
JOBS=${JOBS:-16}
mkdir -p "$OUT"
summary=()
note() { summary+=("$1"); echo "== $1"; }
t0=$(date +%s)

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
nvcc --version | tail -1

source scripts/gtest_args.sh "$OUT/gtest.log"

if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGNA_CUDA=ON "${gtest_args[@]}" \
    >"$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log"; echo "configure failed"; exit 1
fi
target_args=()
for t in ${TARGETS:-}; do target_args+=(--target "$t"); done
if ! cmake --build "$BUILD" -j "$JOBS" "${target_args[@]}" >>"$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40; echo "build failed"; exit 1
fi
note "build: ok ($(( $(date +%s) - t0 )) s)"

# Every engineer's GPU tests.
t1=$(date +%s)
test_args=(-L gpu)
[ -n "${TESTS:-}" ] && test_args=(-R "$TESTS")
(cd "$BUILD" && ctest "${test_args[@]}" --output-on-failure -j 4 --timeout 900) >"$OUT/ctest_gpu.log" 2>&1
ctest_rc=$?
grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/ctest_gpu.log" | tail -20
note "ctest ${test_args[*]}: $(grep -E 'tests passed' "$OUT/ctest_gpu.log" | tail -1) (rc $ctest_rc, $(( $(date +%s) - t1 )) s)"
grep -hE "^\[  (FAILED|SKIPPED) \]" "$OUT/ctest_gpu.log" | sort -u | head -20

# Sanitizers on a subset: each test binary with GNA_TEST_CONFIGS small.
if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  n=${GNA_SANITIZE_CONFIGS:-4}
  for tool in memcheck racecheck; do
    for bin in test_portable test_gpu_reference; do
      [ -x "$BUILD/bin/$bin" ] || continue
      log="$OUT/sanitize_one.tmp"
      GNA_TEST_CONFIGS=$n timeout 600 compute-sanitizer --tool "$tool" --error-exitcode 3 \
        "$BUILD/bin/$bin" --gtest_brief=1 >"$log" 2>&1
      rc=$?
      { echo "#### $tool $bin (rc $rc)"; cat "$log"; } >>"$OUT/sanitize.log"
      errs=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
      tests=$(grep -E "^\[  PASSED  \]" "$log" | tail -1)
      note "compute-sanitizer $tool $bin (GNA_TEST_CONFIGS=$n): rc $rc; $errs; $tests"
    done
  done
  rm -f "$OUT/sanitize_one.tmp"
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  "$BUILD/bin/gna-kernel-bench" --json "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -40 >/dev/null
fi

echo
echo "==================== gpu_check summary ($(cat "$OUT/device.txt"), $(( $(date +%s) - t0 )) s)"
for s in "${summary[@]}"; do echo "- $s"; done
[ -f "$OUT/bench.log" ] && sed -n '/^gna-kernel-bench on/,$p' "$OUT/bench.log"
exit $ctest_rc
