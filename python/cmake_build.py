"""setuptools commands that build libgna with CMake and ship it inside the gna package (named in
pyproject.toml; not installed).

Environment: GNA_CMAKE_ARGS (extra configure arguments, e.g. "-DGNA_CUDA=OFF"),
GNA_BUILD_JOBS (parallel jobs), GNA_BUILD_DIR (the CMake build folder; default build/python),
GNA_TORCH_EXTENSION (0: do not build the torch extension; 1: fail when it cannot be built).

The torch extension (python/gna/csrc: the ops as C++ custom ops with a C++ autograd kernel) is
built against the torch that `import torch` finds, with torch's own extension builder, when that
torch is 1.13 or 2.4 and newer (the versions it is tested with) and a C++ compiler is there (and,
for a CUDA torch, the CUDA toolkit's headers); otherwise the build says why it skipped it and the package uses its ctypes path.
`python3 python/cmake_build.py torch-extension DIR` builds it alone into the package folder DIR
(e.g. python/gna, for the source tree).

libgna reports bad arguments by C++ exceptions that it catches at its C ABI. A toolchain that
links libstdc++ statically into the shared library used to crash on those throws once the library
was loaded next to torch (the static copy's symbols were exported and interposed with torch's
libstdc++); CMakeLists.txt now keeps symbols of static archives private. The built library is
still probed in a child process: invalid calls must come back as errors, not crash the process.
If they crash, the library is rebuilt with the system C++ compiler.
"""
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent.parent

# Invalid calls through the C ABI (rule validation, STA parameters, the simulator): each must
# return an error with a message; a crash fails the probe.
_PROBE = """
import ctypes, os, sys
os.environ["GNA_LIBRARY"] = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from gna import _lib
t = _lib.Tensor()
t.data, t.dtype, t.rank = 64, _lib.DTYPE_F32, 4
for i, n in enumerate((1, 8, 1, 4)):
    t.shape[i] = n
for i, s in enumerate((32, 4, 4, 1)):
    t.strides[i] = s
p = _lib.make_params([1], [1], [1], [False], 0.0)
calls = [
    lambda: _lib.lib.gna_validate(ctypes.byref(p), t, t, t, None, None),
    lambda: _lib.lib.gna_sta_params(1, _lib.int_array([8]), _lib.int_array([3]),
                                    _lib.int_array([3]), ctypes.byref(_lib.Params())),
]
if _lib.has_simulator:
    c = _lib.SimConfig()
    c.rank = 1
    c.extent, c.window, c.stride, c.dilation = (_lib.int_array(x) for x in ([8], [16], [1], [1]))
    c.q_tile, c.kv_tile = _lib.int_array([4]), _lib.int_array([4])
    calls.append(lambda: _lib.lib.gna_simulate(ctypes.byref(c), ctypes.byref(_lib.SimResult())))
ok = all(call() == _lib.STATUS_INVALID_ARGUMENT for call in calls)
sys.exit(0 if ok else 3)
"""


def _errors_come_back(library):
    probe = [sys.executable, "-c", _PROBE, str(library), str(ROOT / "python")]
    return subprocess.call(probe) == 0


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
    system_cxx = system_cxx_compiler()
    if system_cxx:
        print(f"gna: libgna crashed on a C++ exception; rebuilding with {system_cxx}", flush=True)
        env = dict(os.environ, CXX=system_cxx, CUDAHOSTCXX=system_cxx)
        env.pop("CC", None)
        fresh = build_dir.parent / (build_dir.name + "-system-cxx")
        library = _build(fresh, [f"-DCMAKE_CXX_COMPILER={system_cxx}",
                                 f"-DCMAKE_CUDA_HOST_COMPILER={system_cxx}"], env)
        if _errors_come_back(library):
            return library
    raise RuntimeError("libgna crashes when it reports an error (a C++ exception inside a shared "
                       "library): build with a C++ toolchain that links libstdc++ dynamically, "
                       "e.g. CXX=/usr/bin/g++")


# The torches the extension is built for: 1.13 (Debian's; its tests run in CI) and 2.4 on (the
# GPU machines'); 2.0-2.3 take the ctypes path, untested with the extension.
def _torch_extension_supported(version):
    return version[:2] == (1, 13) or version >= (2, 4)


_SKIPPED = 2  # the extension builder's exit status when it skips the build (reason printed)


class _Skip(Exception):
    pass


def _build_torch_extension(package_dir):
    """Builds gna/_torch_ops*.so into package_dir (a folder named gna) with torch's extension
    builder, and writes the torch version beside it. Raises _Skip with the reason where this
    torch or toolchain cannot build it."""
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError as e:
        raise _Skip(f"torch cannot be imported ({e})")
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if not _torch_extension_supported(version):
        raise _Skip(f"torch {torch.__version__} is neither 1.13 nor 2.4 or newer (the versions "
                    f"the ops' C++ code is tested with)")
    compiler = shlex.split(os.environ.get("CXX", "c++"))[0]
    if not shutil.which(compiler):
        raise _Skip(f"no C++ compiler ({compiler})")
    cuda = torch.version.cuda is not None
    if cuda and not (cpp_extension.CUDA_HOME and
                     (Path(cpp_extension.CUDA_HOME) / "include" / "cuda_runtime_api.h").is_file()):
        raise _Skip(f"torch {torch.__version__} runs CUDA but the CUDA toolkit's headers are not "
                    f"found (set CUDA_HOME)")
    package_dir = Path(package_dir).resolve()
    if package_dir.name != "gna":
        raise ValueError(f"the extension goes into the gna package folder, got {package_dir}")
    for stale in package_dir.glob("_torch_ops*.so"):
        stale.unlink()
    sources = sorted(str(p) for p in (ROOT / "python" / "gna" / "csrc").glob("*.cpp"))
    make = cpp_extension.CUDAExtension if cuda else cpp_extension.CppExtension
    macros = [("GNA_TORCH_MAJOR", str(version[0]))] + ([("GNA_TORCH_CUDA", "1")] if cuda else [])
    extension = make("gna._torch_ops", sources, include_dirs=[str(ROOT / "include")],
                     define_macros=macros,
                     extra_compile_args={"cxx": ["-O2"]},
                     # Symbols of static archives stay private (as libgna's, CMakeLists.txt): a
                     # compiler that links libstdc++ statically otherwise exports its copy,
                     # which then interposes with torch's (errors came back garbled or crashed).
                     extra_link_args=["-Wl,--exclude-libs,ALL"])
    from setuptools import Distribution
    builder = cpp_extension.BuildExtension.with_options(use_ninja=shutil.which("ninja") is not None)
    dist = Distribution({"name": "gna-torch-ops", "ext_modules": [extension],
                         "cmdclass": {"build_ext": builder}})
    command = dist.get_command_obj("build_ext")
    command.build_lib = str(package_dir.parent)
    build_root = Path(os.environ.get("GNA_BUILD_DIR", ROOT / "build" / "python"))
    command.build_temp = str(build_root.parent / (build_root.name + "-torch-extension"))
    dist.run_command("build_ext")
    if not list(package_dir.glob("_torch_ops*.so")):
        raise RuntimeError(f"torch's extension builder did not produce {package_dir}/_torch_ops*.so")
    (package_dir / "_torch_ops.torch-version").write_text(torch.__version__ + "\n")


# The built extension must raise a ValueError whose message formats a number (its own libstdc++
# code at work inside a process with torch); a crash or a garbled message fails the probe.
_EXTENSION_PROBE = """
import sys, torch
torch.ops.load_library(sys.argv[1])
q = torch.zeros(1, 4, 1, 2)
try:
    torch.ops.gna.na_forward(q, q, q, None, None, [2**31], [1], [1], [False], 0.0, "auto", False)
except ValueError as e:
    sys.exit(0 if "got 2147483648" in str(e) else 3)
sys.exit(3)
"""


def _extension_errors_come_back(package_dir):
    built = sorted(Path(package_dir).glob("_torch_ops*.so"))
    return bool(built) and subprocess.call([sys.executable, "-c", _EXTENSION_PROBE,
                                            str(built[0])]) == 0


def _torch_extension_main(package_dir, system_cxx):
    """The extension builder's process: builds, probes, and where the probe fails rebuilds once
    with the system C++ compiler (as build_library does for libgna). Exit status 0 (built),
    _SKIPPED (reason printed) or 1."""
    if system_cxx:
        cxx = system_cxx_compiler()
        os.environ.update(CXX=cxx, LDSHARED=f"{cxx} -shared")
        os.environ.pop("CC", None)
    try:
        _build_torch_extension(package_dir)
    except _Skip as skip:
        print(f"gna: torch extension not built: {skip}", flush=True)
        return _SKIPPED
    if _extension_errors_come_back(package_dir):
        return 0
    for built in Path(package_dir).glob("_torch_ops*.so"):
        built.unlink()
    (Path(package_dir) / "_torch_ops.torch-version").unlink(missing_ok=True)
    if not system_cxx and system_cxx_compiler():
        print(f"gna: the torch extension crashed or garbled an error message; rebuilding with "
              f"{system_cxx_compiler()}", flush=True)
        return subprocess.call([sys.executable, str(Path(__file__).resolve()), "torch-extension",
                                str(package_dir), "--system-cxx"])
    print("gna: torch extension not built: it crashes or garbles its error messages in a "
          "process with torch (a C++ toolchain that links libstdc++ statically?)", flush=True)
    return 1


def system_cxx_compiler():
    return shutil.which("c++", path="/usr/bin") or shutil.which("g++", path="/usr/bin")


def build_torch_extension(package_dir):
    """Builds the torch extension in a child process (it imports torch); True when built. A
    build that cannot run, or fails, leaves the package on its ctypes path, saying why, unless
    GNA_TORCH_EXTENSION=1 asks for the extension."""
    wanted = os.environ.get("GNA_TORCH_EXTENSION", "")
    if wanted == "0":
        print("gna: torch extension not built: GNA_TORCH_EXTENSION=0", flush=True)
        return False
    status = subprocess.call([sys.executable, str(Path(__file__).resolve()), "torch-extension",
                              str(package_dir)])
    if status == 0:
        return True
    if wanted == "1":
        raise RuntimeError("gna: GNA_TORCH_EXTENSION=1 but the torch extension was not built "
                           "(the log above says why)")
    if status != _SKIPPED:
        print("gna: torch extension not built: its build failed (log above); the package uses "
              "its ctypes path", flush=True)
    return False


class BuildPyWithLibrary(build_py):
    """build_py, plus libgna.so built by CMake and copied into the package, and the torch
    extension built beside it where it can be."""

    def run(self):
        super().run()
        library = build_library()
        target = Path(self.build_lib) / "gna" / "libgna.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(library, target)
        build_torch_extension(target.parent)


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


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[1] != "torch-extension" or (
            len(sys.argv) == 4 and sys.argv[3] != "--system-cxx"):
        sys.exit("usage: cmake_build.py torch-extension PACKAGE_DIR [--system-cxx]")
    sys.exit(_torch_extension_main(sys.argv[2], len(sys.argv) == 4))
