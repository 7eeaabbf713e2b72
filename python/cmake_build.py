"""setuptools commands that build libgna with CMake and ship it inside the gna package (named in
pyproject.toml; not installed).

Environment: GNA_CMAKE_ARGS (extra configure arguments, e.g. "-DGNA_CUDA=OFF"),
GNA_BUILD_JOBS (parallel jobs), GNA_BUILD_DIR (the CMake build folder; default build/python).
"""
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent.parent


def build_library():
    build_dir = Path(os.environ.get("GNA_BUILD_DIR", ROOT / "build" / "python"))
    configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                 "-DGNA_BUILD_TESTS=OFF", "-DGNA_BUILD_TOOLS=OFF"]
    if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    configure += shlex.split(os.environ.get("GNA_CMAKE_ARGS", ""))
    jobs = os.environ.get("GNA_BUILD_JOBS", str(os.cpu_count() or 1))
    subprocess.check_call(configure)
    subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "gna", "-j", jobs])
    library = build_dir / "lib" / "libgna.so"
    if not library.is_file():
        raise RuntimeError(f"CMake did not produce {library}")
    return library


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
