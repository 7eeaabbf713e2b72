#!/usr/bin/env bash
# Runs the Python package's tests (python/tests, pytest) on the package in python/ and a built
# libgna (argument; default build/lib/libgna.so): on the CPU, and on the GPU when torch sees one.
# Prints the counts; exits non-zero on any failure, error, or a run in which nothing passed.
#
# The Python: $GNA_PYTHON if set; else the first of `python3` on PATH and /usr/bin/python3 that
# imports torch and pytest; else Debian's python3-torch, python3-numpy and python3-pytest are
# installed for /usr/bin/python3 (torch 1.13 on Debian 12).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/debian_packages.sh

library=${1:-build/lib/libgna.so}
if [ ! -f "$library" ]; then
  echo "python tests: no library at $library (build it first: cmake --build build)"
  exit 1
fi
library=$(realpath "$library")

can_test() { "$1" -c "import torch, pytest" >/dev/null 2>&1; }

pick_python() {
  if [ -n "${GNA_PYTHON:-}" ]; then
    can_test "$GNA_PYTHON" && echo "$GNA_PYTHON"
    return
  fi
  local py
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && can_test "$py"; then
      echo "$py"
      return
    fi
  done
  return 1
}

if ! py=$(pick_python); then
  if [ -n "${GNA_PYTHON:-}" ]; then
    echo "python tests: GNA_PYTHON=$GNA_PYTHON cannot import torch and pytest"
    exit 1
  fi
  echo "python tests: no Python here imports torch and pytest"
  if ! install_debian_packages python3-torch python3-numpy python3-pytest ||
     ! can_test /usr/bin/python3; then
    echo "python tests: not run: no Python with torch and pytest (install torch and pytest, or" \
         "set GNA_PYTHON to a Python that has them; scripts/test.sh skips these tests with" \
         "GNA_PYTHON_TESTS=0)"
    exit 1
  fi
  py=/usr/bin/python3
fi
echo "python tests: $("$py" -c 'import sys, torch; print(sys.executable, "with torch", torch.__version__)')"

reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT

# The torch extension, built into python/gna/ against this Python's torch (incrementally, in
# build/python-torch-extension) so that the suite tests both paths; GNA_TORCH_EXTENSION=0 leaves
# it out. A torch it is not built for is skipped (the builder says why); a failed build fails.
extension_build=ok
if [ "${GNA_TORCH_EXTENSION:-}" != 0 ]; then
  rc=0
  "$py" python/cmake_build.py torch-extension python/gna >"$reports/extension.log" 2>&1 || rc=$?
  case $rc in
    0) echo "python tests: torch extension built into python/gna" ;;
    2) echo "python tests: $(grep 'torch extension not built' "$reports/extension.log" | tail -1)" ;;
    *) tail -40 "$reports/extension.log"
       echo "python tests: the torch extension's build failed (exit $rc)"
       extension_build=failed ;;
  esac
fi

# The package from the source tree (first on the path, ahead of any installed copy), the library
# given; no caches written into the tree. run_suite NAME [VAR=VALUE...]: one pytest run.
run_suite() {
  local name=$1 rc=0
  shift
  env "$@" GNA_LIBRARY="$library" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
    PYTHONDONTWRITEBYTECODE=1 "$py" -m pytest python/tests -q -rs -p no:cacheprovider \
    --junitxml="$reports/$name.xml" || rc=$?
  echo "$rc" >"$reports/$name.rc"
}

# Where the torch extension (python/gna/_torch_ops*.so) is in use, the suite runs once through
# it and once more through the ctypes path (GNA_TORCH_EXTENSION=0).
extension=$(GNA_LIBRARY="$library" PYTHONPATH="$PWD/python" PYTHONDONTWRITEBYTECODE=1 "$py" -c \
  'import gna.ops as o; print(o._extension.reason)' 2>/dev/null || echo "unknown")
echo "python tests: torch extension: $extension"
if [ "$extension" = "in use" ]; then
  run_suite torch-extension
  run_suite ctypes GNA_TORCH_EXTENSION=0
else
  run_suite ctypes
fi

status=0
"$py" - "$reports" <<'PY' || status=$?
import pathlib
import sys
import xml.etree.ElementTree as ET

failed = False
for status in sorted(pathlib.Path(sys.argv[1]).glob("*.rc")):
    name, report = status.stem, status.with_suffix(".xml")
    rc = int(status.read_text())
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"python tests ({name}): no report ({e}); pytest exit status {rc}")
        failed = True
        continue
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors",
                                                                 "skipped")}
    passed = count["tests"] - count["failures"] - count["errors"] - count["skipped"]
    print(f"python tests ({name}): {passed} passed, {count['skipped']} skipped, "
          f"{count['failures']} failed, {count['errors']} errors ({count['tests']} in all)")
    if rc != 0 or count["failures"] or count["errors"]:
        failed = True
    if passed == 0:
        print(f"python tests ({name}): nothing passed (an empty or all-skipped run)")
        failed = True
if not list(pathlib.Path(sys.argv[1]).glob("*.rc")):
    print("python tests: no report")
    failed = True
sys.exit(1 if failed else 0)
PY
if [ "$extension_build" != ok ]; then
  echo "python tests: FAILED: the torch extension's build"
  status=1
fi
exit $status
