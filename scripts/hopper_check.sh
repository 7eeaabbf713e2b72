#!/usr/bin/env bash
# One call on a Hopper machine: build (unless BUILD already holds the binaries), run the
# randomized correctness sweep, check the SASS (HGMMA, no local memory), optionally run
# compute-sanitizer on a small sweep, and benchmark against cuDNN SDPA.
#   scripts/hopper_check.sh [BUILD_DIR]
# Environment: GNA_HOPPER_SWEEP (configurations per rank, default 500),
#              HOPPER_CHECK_STEPS (default "test sass bench"; also "profile" after "sass",
#              "sanitize"),
#              OUT (log folder, default /tmp/hopper_check),
#              BENCH_ARGS (extra hopper_bench.py arguments, e.g. "--reps 10").
# GoogleTest: the system one, else built from .carry/googletest when present.
set -uo pipefail
BUILD=${1:-build-hopper}
OUT=${OUT:-/tmp/hopper_check}
mkdir -p "$OUT"
if [ ! -x "$BUILD/bin/test_hopper_forward" ] || [ ! -x "$BUILD/bin/hopper_bench" ]; then
  source scripts/gtest_args.sh "$OUT/gtest.log"
  cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "${gtest_args[@]}" >"$OUT/configure.log" 2>&1 || {
    tail -20 "$OUT/configure.log"; exit 1; }
  cmake --build "$BUILD" --target test_hopper_forward hopper_bench -j16 >"$OUT/build.log" 2>&1 || {
    grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
  grep -iE "spill|C75[0-9][0-9]" "$OUT/build.log" | head -5
fi
export LD_LIBRARY_PATH="$BUILD/lib:${LD_LIBRARY_PATH:-}"
export GNA_HOPPER_SWEEP=${GNA_HOPPER_SWEEP:-500}
status=0
for step in ${HOPPER_CHECK_STEPS:-test sass bench}; do
  echo "== $step"
  case $step in
    test)
      timeout ${HOPPER_TEST_TIMEOUT:-300} "$BUILD/bin/test_hopper_forward" >"$OUT/test.log" 2>&1 || status=1
      grep -E "hopper sweep|^\[  (PASSED|FAILED|SKIPPED) |Failure|bad O|threw|error" "$OUT/test.log" | head -40
      ;;
    sass)
      cuobjdump --dump-sass "$BUILD/lib/libgna.so" >/tmp/hopper_sass.txt 2>&1
      # The forward kernels only (the whole library's SASS is too large to keep).
      awk '/Function :/ {f = ($3 ~ /hopper.*forward_kernel/)} f' /tmp/hopper_sass.txt >"$OUT/sass.txt"
      awk '/Function :/ {f = ($3 ~ /hopper.*forward_kernel/) ? $3 : ""} f && /HGMMA/ {h[f]++} f && /(LDL|STL)/ {l[f]++}
           END {for (k in h) printf "%s HGMMA %d LDL/STL %d\n", k, h[k], l[k]+0}' "$OUT/sass.txt"
      ;;
    profile)
      ncu --clock-control none -k regex:forward_kernel -c 1 --section SpeedOfLight \
        --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy \
        "$BUILD/bin/hopper_bench" --case "${HOPPER_PROFILE_CASE:-flux4k_80x80_s16}" --reps 1 \
        >"$OUT/profile.txt" 2>&1
      grep -E "Throughput|Busy|Pipe|Stall|Issue|Eligible|Active Warps|Duration" "$OUT/profile.txt" | head -40
      awk '/Function :/ {f = ($3 ~ /forward_kernelILi128ENS0_7Bf16/)} f' "$OUT/sass.txt" >"$OUT/sass_d128_bf16.txt"
      ;;
    sanitize)
      for tool in memcheck racecheck; do
        GNA_HOPPER_SWEEP=${GNA_HOPPER_SANITIZE_SWEEP:-4} compute-sanitizer --tool $tool \
          "$BUILD/bin/test_hopper_forward" --gtest_filter='HopperForward.RandomSweep*' \
          >"$OUT/sanitize_$tool.log" 2>&1 || status=1
        echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tail -1)"
      done
      ;;
    bench)
      PYTHONUNBUFFERED=1 python3 tools/hopper_bench/hopper_bench.py --bench "$BUILD/bin/hopper_bench" \
        --json "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.md"
      ;;
  esac
done
exit $status
