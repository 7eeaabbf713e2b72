"""The gna torch extension (python/gna/csrc): gna::na_forward, na_backward and their per-head
variants as C++ custom ops, with CPU, CUDA and Meta kernels and a C++ autograd kernel, so that an
eager training step runs no Python in the ops or their backward node. `pip install` builds it
against the installed torch (1.13, or 2.4 and newer: python/cmake_build.py) next to libgna.so; the ops then call the same libgna
the ctypes path loads.

`load()` registers the ops when the extension is there and fits this torch; otherwise ops.py
registers the ctypes path's ops (torch.library) as before. GNA_TORCH_EXTENSION=0 turns the
extension off. `reason` says why it is not in use.
"""
import ctypes
import os
import warnings
from pathlib import Path

import torch

from . import _lib

# The extension's file name (its suffix names the Python it was built by) and the torch version
# it was built against, written beside it by the build.
GLOB = "_torch_ops*.so"
VERSION_FILE = "_torch_ops.torch-version"

path = None
reason = "not loaded"


def _find():
    here = Path(__file__).resolve().parent
    found = sorted(here.glob(GLOB))
    return (found[0], here / VERSION_FILE) if found else (None, None)


def load():
    """Loads and binds the extension; True when its ops are registered."""
    global path, reason
    if os.environ.get("GNA_TORCH_EXTENSION", "1") == "0":
        reason = "turned off by GNA_TORCH_EXTENSION=0"
        return False
    library, version_file = _find()
    if library is None:
        reason = "not built (pip install builds it when it can; its log says why not)"
        return False
    built_for = version_file.read_text().strip() if version_file.is_file() else "unknown"
    if built_for != torch.__version__:
        reason = f"built for torch {built_for}, not for this torch {torch.__version__}"
        warnings.warn(f"gna: the torch extension {library.name} was {reason}; using the ctypes "
                      f"path (reinstall gna to rebuild it)")
        return False
    try:
        torch.ops.load_library(str(library))
    except OSError as e:
        reason = f"cannot be loaded: {e}"
        warnings.warn(f"gna: the torch extension {reason}; using the ctypes path")
        return False
    # Loaded: its ops are registered, so the ctypes path's registrations cannot take their place.
    message = ctypes.create_string_buffer(512)
    bind = ctypes.CDLL(str(library)).gna_torch_bind
    bind.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
    bind.restype = ctypes.c_int
    if bind(str(_lib.library_path).encode(), message, len(message)) != 0:
        raise ImportError(f"gna: the torch extension {library} cannot use "
                          f"{_lib.library_path}: {message.value.decode(errors='replace')}")
    path = library
    reason = "in use"
    return True
