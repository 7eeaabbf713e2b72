#!/usr/bin/env bash
# Builds gna (if needed) and runs the whole test suite through CTest. GPU tests run on a machine
# with a CUDA GPU and report themselves skipped elsewhere. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build -j "$jobs"
# --no-tests=error: a build without GoogleTest must not pass as an empty run.
ctest --test-dir build --output-on-failure --no-tests=error -j "$jobs" "$@"
