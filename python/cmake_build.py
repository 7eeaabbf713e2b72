"""setuptools commands that build libgna with CMake and ship it inside the gna package (named in
pyproject.toml; not installed).

Environment: GNA_CMAKE_ARGS (extra configure arguments, e.g. "-DGNA_CUDA=OFF"),
GNA_BUILD_JOBS (parallel jobs), GNA_BUILD_DIR (the CMake build folder; default build/python).

libgna reports bad arguments by C++ exceptions that it catches at its C ABI. Some toolchains link
libstdc++ statically but leave the unwinder (libgcc_s) to the system, and a newer libstdc++ on an
older unwinder crashes on the first throw inside a library loaded from Python. So the built
library is probed in a child process (one invalid call must come back as an error, not a crash);
if it crashes, it is relinked with the toolchain's own unwinder (-static-libgcc), and failing
that, built with the system C++ compiler.
"""
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent.parent


# One invalid call through the C ABI: prints the library's message, or crashes.
_PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.gna_last_error.restype = ctypes.c_char_p
extent, tile, window = (ctypes.c_int32 * 3)(8, 1, 1), (ctypes.c_int32 * 3)(3, 1, 1), (ctypes.c_int32 * 3)(3, 1, 1)
params = ctypes.create_string_buffer(256)
status = lib.gna_sta_params(1, extent, tile, window, params)
sys.exit(0 if status == 1 and lib.gna_last_error() else 3)
"""


def _errors_come_back(library):
    return subprocess.call([sys.executable, "-c", _PROBE, str(library)]) == 0


def _build(build_dir, extra, env=None):
    configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                 "-DGNA_BUILD_TESTS=OFF", "-DGNA_BUILD_TOOLS=OFF"]
    if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    configure += shlex.split(os.environ.get("GNA_CMAKE_ARGS", "")) + extra
    jobs = os.environ.get("GNA_BUILD_JOBS", str(os.cpu_count() or 1))
    subprocess.check_call(configure, env=env)
    subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "gna", "-j", jobs],
                          env=env)
    library = build_dir / "lib" / "libgna.so"
    if not library.is_file():
        raise RuntimeError(f"CMake did not produce {library}")
    return library


def build_library():
    build_dir = Path(os.environ.get("GNA_BUILD_DIR", ROOT / "build" / "python"))
    library = _build(build_dir, [])
    if _errors_come_back(library):
        return library
    print("gna: libgna crashed on a C++ exception; relinking with -static-libgcc", flush=True)
    library = _build(build_dir, ["-DCMAKE_SHARED_LINKER_FLAGS=-static-libgcc"])
    if _errors_come_back(library):
        return library
    system_cxx = shutil.which("c++", path="/usr/bin") or shutil.which("g++", path="/usr/bin")
    if system_cxx:
        print(f"gna: still crashing; building with the system compiler {system_cxx}", flush=True)
        env = dict(os.environ, CXX=system_cxx, CUDAHOSTCXX=system_cxx)
        env.pop("CC", None)
        fresh = build_dir.parent / (build_dir.name + "-system-cxx")
        library = _build(fresh, ["-DCMAKE_SHARED_LINKER_FLAGS=", f"-DCMAKE_CXX_COMPILER={system_cxx}",
                                 f"-DCMAKE_CUDA_HOST_COMPILER={system_cxx}"], env)
        if _errors_come_back(library):
            return library
    raise RuntimeError("libgna crashes when it reports an error (a C++ exception inside a shared "
                       "library): use a C++ toolchain whose libstdc++ and unwinder match, e.g. "
                       "CXX=/usr/bin/g++")


class BuildPyWithLibrary(build_py):
    """build_py, plus libgna.so built by CMake and copied into the package."""

    def run(self):
        super().run()
        library = build_library()
        target = Path(self.build_lib) / "gna" / "libgna.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(library, target)


try:  # the wheel carries a native library: tag it for this platform
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel as _bdist_wheel
    except ImportError:
        _bdist_wheel = None

if _bdist_wheel is not None:
    class PlatformWheel(_bdist_wheel):
        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            _, _, platform = super().get_tag()
            return "py3", "none", platform
else:
    from setuptools import Command

    class PlatformWheel(Command):
        description = "unavailable: install the 'wheel' package"
        user_options = []

        def initialize_options(self):
            pass

        def finalize_options(self):
            pass

        def run(self):
            raise RuntimeError("building a wheel needs the 'wheel' package (or setuptools>=70.1)")
