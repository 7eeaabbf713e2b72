#!/usr/bin/env bash
# One call on a Hopper machine for the backward: configure and build (test + benchmark), run the
# randomized sweep, optionally compute-sanitizer on a small sweep, the SASS check and the
# benchmark against cuDNN SDPA backward.
#   tools/hopper_bwd_bench/check.sh [BUILD_DIR]
# Environment: STEPS (default "test sass bench"; also "sanitize"), GNA_HOPPER_BWD_SWEEP,
#              OUT (log folder), BENCH_ARGS (extra hopper_bwd_bench.py arguments).
set -uo pipefail
BUILD=${1:-build-hopper-bwd}
OUT=${OUT:-/tmp/hopper_bwd_check}
mkdir -p "$OUT"
source scripts/gtest_args.sh "$OUT/gtest.log"
cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "${gtest_args[@]}" >"$OUT/configure.log" 2>&1 || {
  tail -20 "$OUT/configure.log"; exit 1; }
cmake --build "$BUILD" --target test_hopper_backward -j16 >"$OUT/build.log" 2>&1 || {
  grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
cmake --build "$BUILD" --target hopper_bwd_bench -j16 >>"$OUT/build.log" 2>&1 || {
  grep -E "error|FAILED" "$OUT/build.log" | head -20; }
grep -iE "spill|C75[0-9][0-9]" "$OUT/build.log" | grep -i backward | head -8
export LD_LIBRARY_PATH="$BUILD/lib:${LD_LIBRARY_PATH:-}"
status=0
for step in ${STEPS:-test sass bench}; do
  echo "== $step"
  case $step in
    test)
      timeout ${TEST_TIMEOUT:-300} "$BUILD/bin/test_hopper_backward" ${TEST_ARGS:-} >"$OUT/test.log" 2>&1 || status=1
      grep -E "sweep rank|^\[  (PASSED|FAILED|SKIPPED) |Failure|config|threw|error|differs" "$OUT/test.log" | head -40
      ;;
    sass)
      cuobjdump --dump-sass "$BUILD/lib/libgna.so" >"$OUT/sass.txt" 2>&1
      awk '/Function :/ {f = ($3 ~ /backward_kernel/ && $3 ~ /hopper/) ? $3 : ""} f && /HGMMA/ {h[f]++} f && /(LDL|STL)/ {l[f]++}
           END {for (k in h) printf "%s HGMMA %d LDL/STL %d\n", k, h[k], l[k]+0}' "$OUT/sass.txt"
      ;;
    sanitize)
      for tool in memcheck racecheck; do
        GNA_HOPPER_BWD_SWEEP=${SANITIZE_SWEEP:-3} compute-sanitizer --tool $tool \
          "$BUILD/bin/test_hopper_backward" --gtest_filter='HopperBackward.RandomSweep*' \
          >"$OUT/sanitize_$tool.log" 2>&1 || status=1
        echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tail -1)"
      done
      ;;
    bench)
      PYTHONUNBUFFERED=1 python3 tools/hopper_bwd_bench/hopper_bwd_bench.py \
        --bench "$BUILD/bin/hopper_bwd_bench" --json "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.md"
      ;;
  esac
done
exit $status
