#!/usr/bin/env bash
# Sets gna up on a fresh machine and runs the built-in example:
#   installs the build dependencies (Debian packages) if they are missing, configures and builds
#   the project (CUDA kernels too when nvcc is found), then runs gna-demo on a GPU if there is
#   one, on the CPU otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
if [ ${#need[@]} -gt 0 ]; then
  source scripts/debian_packages.sh
  # Without a package index (an offline machine) the build goes on with what is there.
  install_debian_packages "${need[@]}" ||
    echo "continuing without ${need[*]} (tests are skipped without GoogleTest)"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
./build/bin/gna-demo
