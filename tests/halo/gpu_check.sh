#!/usr/bin/env bash
# One-call GPU check of the halo kernels: build (Release, Ninja) the halo tests and the kernel
# benchmark, run the CPU plan test, the random sweep, compute-sanitizer memcheck and racecheck
# on a subset, then gna-kernel-bench on the image-model cases (halo against hopper, CUDA-graph
# replays). Logs under $OUT; a short summary last.
# Environment: OUT, BUILD (default build-halo), JOBS (16), GNA_TEST_SEED, BENCH_ARGS,
# SKIP_SANITIZER=1, SKIP_BENCH=1, NCU_CASE (a gna-kernel-bench --image case name: Nsight Compute
# on its first halo launches, forward and backward).
set -u -o pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-halo}
OUT=${OUT:-$PWD/$BUILD/halo-check-out}
JOBS=${JOBS:-16}
mkdir -p "$OUT"
summary=()
note() { summary+=("$1"); echo "== $1"; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
source scripts/gtest_args.sh "$OUT/gtest.log"
if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGNA_CUDA=ON "${gtest_args[@]}" \
    >"$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log"; echo "configure failed"; exit 1
fi
if ! cmake --build "$BUILD" -j "$JOBS" --target test_halo test_halo_plan gna-kernel-bench \
    >>"$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40; echo "build failed"; exit 1
fi
note "build: ok ($(( $(date +%s) - t0 )) s)"

for t in test_halo_plan test_halo; do
  t1=$(date +%s)
  "$BUILD/bin/$t" >"$OUT/$t.log" 2>&1
  rc=$?
  grep -E "^rank|FAILED|Failure|error" "$OUT/$t.log" | head -30
  note "$t: rc $rc, $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/$t.log" | head -2 | tr '\n' ' ') ($(( $(date +%s) - t1 )) s)"
done

if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  for tool in memcheck racecheck; do
    log="$OUT/sanitize_$tool.log"
    GNA_TEST_CONFIGS=${GNA_SANITIZE_CONFIGS:-3} timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$BUILD/bin/test_halo" --gtest_filter='Halo.Rank*:Halo.Deterministic' >"$log" 2>&1
    rc=$?
    note "compute-sanitizer $tool test_halo (3 configurations per rank): rc $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1); $(grep -E '^\[  PASSED  \]' "$log" | tail -1)"
  done
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  "$BUILD/bin/gna-kernel-bench" --image --graph --backends halo,hopper --json "$OUT/bench.json" \
    ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
  note "bench: rc $?"
fi
if [ -n "${NCU_CASE:-}" ] && command -v ncu >/dev/null; then
  timeout 240 ncu --kernel-name regex:halo -c 3 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --section LaunchStats --section Occupancy \
    --section MemoryWorkloadAnalysis \
    "$BUILD/bin/gna-kernel-bench" --image --cases "$NCU_CASE" --backends halo --reps 1 --warmup 1 \
    >"$OUT/ncu.log" 2>&1
  note "ncu: rc $?"
fi
echo
echo "==================== halo check ($(cat "$OUT/device.txt"), $(( $(date +%s) - t0 )) s)"
for s in "${summary[@]}"; do echo "- $s"; done
[ -f "$OUT/bench.log" ] && sed -n '/^gna-kernel-bench on/,$p' "$OUT/bench.log"
grep "^#" "$OUT/bench.log" 2>/dev/null | head -10
