# Sourced by the GPU check scripts (from the repository root). Sets gtest_args to the CMake
# arguments that find GoogleTest: none when the system has it (or GTest_ROOT is set); otherwise
# it is built once from ${GTEST_SOURCE:-.carry/googletest} into /tmp/gtest (log: $1) and found
# there. GPU machines may lack the Debian package and cannot reach a network.
gtest_args=()
if [ ! -f /usr/include/gtest/gtest.h ] && [ -z "${GTest_ROOT:-}" ]; then
  gtest_src=${GTEST_SOURCE:-.carry/googletest}
  if [ -d /tmp/gtest ]; then
    gtest_args=(-DGTest_ROOT=/tmp/gtest)
  elif [ -d "$gtest_src" ]; then
    if { cmake -S "$gtest_src" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
           -DCMAKE_INSTALL_PREFIX=/tmp/gtest -DBUILD_GMOCK=OFF &&
         cmake --build /tmp/gtest-build -j "${JOBS:-16}" &&
         cmake --install /tmp/gtest-build; } >"$1" 2>&1; then
      gtest_args=(-DGTest_ROOT=/tmp/gtest)
    else
      echo "GoogleTest build failed (log: $1)"; tail "$1"
    fi
  fi
fi
