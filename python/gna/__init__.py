"""gna: Generalized Neighborhood Attention for PyTorch, over libgna's C ABI.

Without torch installed, `import gna` still provides the simulator (gna.simulate,
gna.kernel_tiles, gna.predicted_speedup, gna.end_to_end_speedup) and the library's metadata;
the attention functions then raise an ImportError that says so.
"""
from ._lib import (UnsupportedError, GnaRuntimeError, abi_version, backend_names, library_path,
                   release_cached_memory)
from .simulator import (end_to_end_speedup, kernel_tiles, predicted_speedup, simulate,
                        stride_sweep)

__version__ = "0.1.0"

_TORCH_NAMES = ("na1d", "na2d", "na3d", "sta2d", "sta3d", "merge_attentions", "selected_backend",
                "NeighborhoodAttention1D", "NeighborhoodAttention2D", "NeighborhoodAttention3D",
                "functional", "modules", "ops", "unfused", "fp8",
                # video DiTs: joint attention, per-head windows, window search, dense steps
                "Window", "per_head_attention", "joint_attention", "dense_joint_attention",
                "GnaAttentionProcessor", "dense_attention", "install_processors",
                "WindowSearch", "WindowPlan", "search_windows")

try:
    import torch as _torch  # noqa: F401
except ImportError as _error:
    _torch_missing = _error

    def __getattr__(name):
        if name in _TORCH_NAMES:
            raise ImportError(f"gna.{name} needs PyTorch, which is not installed ({_torch_missing})."
                              " Install torch; gna.simulate works without it.")
        raise AttributeError(f"module 'gna' has no attribute {name!r}")
else:
    from . import fp8, functional, modules, ops, unfused
    from .functional import (merge_attentions, na1d, na2d, na3d, selected_backend, sta2d, sta3d)
    from .modules import (NeighborhoodAttention1D, NeighborhoodAttention2D,
                          NeighborhoodAttention3D)
    from .windows import Window
    from .per_head import per_head_attention
    from .joint import dense_joint_attention, joint_attention
    from .processor import GnaAttentionProcessor, dense_attention, install_processors
    from .sta_search import WindowPlan, WindowSearch, search_windows

__all__ = ["simulate", "kernel_tiles", "predicted_speedup", "stride_sweep", "end_to_end_speedup",
           "backend_names", "abi_version", "library_path", "release_cached_memory",
           "UnsupportedError", "GnaRuntimeError", *_TORCH_NAMES]
