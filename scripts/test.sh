#!/usr/bin/env bash
# Builds gna (if needed) and runs the whole test suite: the C++ and CUDA tests through CTest
# (arguments go to ctest), then the Python package's tests through pytest (scripts/python_tests.sh:
# a Python with torch, Debian's python3-torch installed when there is none). GPU tests run on a
# machine with a CUDA GPU and report themselves skipped elsewhere. Both suites run; exits
# non-zero on any failure of either. GNA_PYTHON_TESTS=0 leaves the Python tests out.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build -j "$jobs"

failed=()
# The fuzz tests (C ABI, gna-sim) append their counts of distinct cases here; shown after ctest.
fuzz_report="$PWD/build/fuzz-report.txt"
rm -f "$fuzz_report"
# --no-tests=error: a build without GoogleTest must not pass as an empty run.
GNA_FUZZ_REPORT="$fuzz_report" ctest --test-dir build --output-on-failure --no-tests=error \
  -j "$jobs" "$@" || failed+=(ctest)
[ -f "$fuzz_report" ] && cat "$fuzz_report"
if [ "${GNA_PYTHON_TESTS:-1}" != 0 ]; then
  bash scripts/python_tests.sh build/lib/libgna.so || failed+=(pytest)
else
  echo "python tests: left out (GNA_PYTHON_TESTS=0)"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
