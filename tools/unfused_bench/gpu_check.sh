#!/usr/bin/env bash
# GPU check of the unfused operators from a source tree: builds libgna with only the kernel
# folders they need (common, unfused) so that the build takes seconds, runs their GPU and CPU
# tests, compute-sanitizer memcheck on a few configurations, and gna-unfused-bench (fp16, fp32).
# Environment: OUT (log folder), JOBS (default 16). GoogleTest as in scripts/gtest_args.sh.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/unfused-gpu-out}
JOBS=${JOBS:-16}
BUILD=build-unfused-gpu
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
source scripts/gtest_args.sh "$OUT/gtest.log"
# Other backends are not needed here: leave their folders out of this throwaway tree.
for d in src/kernels/*/ tests/*/ tools/*/; do
  case "$d" in
    src/kernels/common/|src/kernels/unfused/|tests/unfused/|tests/support/|tools/unfused_bench/|tools/sim/|tools/demo/) ;;
    src/kernels/*|tests/*|tools/*) rm -rf "$d" ;;
  esac
done
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGNA_CUDA=ON "${gtest_args[@]}" \
  >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
cmake --build "$BUILD" -j "$JOBS" --target test_unfused test_unfused_gpu gna-unfused-bench \
  >>"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -40; exit 1; }
echo "== build ok"
"$BUILD/bin/test_unfused" --gtest_brief=1 2>&1 | tee "$OUT/test_unfused.log" | tail -3
GNA_TEST_CONFIGS=${GNA_TEST_CONFIGS:-25} "$BUILD/bin/test_unfused_gpu" 2>&1 | tee "$OUT/test_unfused_gpu.log" | grep -E "OK|FAILED|PASSED|Failure|error|seed" | head -40
GNA_TEST_CONFIGS=3 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 \
  "$BUILD/bin/test_unfused_gpu" --gtest_brief=1 >"$OUT/memcheck.log" 2>&1
echo "== memcheck rc $? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
for t in f16 f32; do
  "$BUILD/bin/gna-unfused-bench" --dtype $t 2>&1 | tee "$OUT/bench_$t.log"
done
