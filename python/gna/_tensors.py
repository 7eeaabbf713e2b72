"""torch.Tensor -> gna_tensor views for the C ABI, and the call options of a device."""
import ctypes

import torch

from . import _lib

_DTYPES = {
    torch.float32: _lib.DTYPE_F32,
    torch.float64: _lib.DTYPE_F64,
    torch.float16: _lib.DTYPE_F16,
    torch.bfloat16: _lib.DTYPE_BF16,
}

# Validation reads shapes, dtypes and strides only; it still refuses null data pointers, so a
# metadata-only view carries this stand-in address (never dereferenced).
_METADATA_ONLY = 64


def dtype_code(dtype, name):
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise ValueError(f"{name}: dtype must be float32, float64, float16 or bfloat16, "
                         f"got {dtype}") from None


def view(t, name, metadata_only=False):
    """A gna_tensor describing `t` (no copy). None stays None."""
    if t is None:
        return None
    if t.dim() > _lib.MAX_TENSOR_RANK:
        raise ValueError(f"{name}: at most {_lib.MAX_TENSOR_RANK} dims, got {t.dim()}")
    g = _lib.Tensor()
    g.data = _METADATA_ONLY if metadata_only else t.data_ptr()
    g.dtype = dtype_code(t.dtype, name)
    g.rank = t.dim()
    for i, (size, stride) in enumerate(zip(t.shape, t.stride())):
        g.shape[i] = int(size)
        g.strides[i] = int(stride)
    g.device = t.device.index if t.is_cuda else -1
    if t.is_cuda and t.device.index is None:
        g.device = torch.cuda.current_device()
    return g


def ref(g):
    return None if g is None else ctypes.byref(g)


def options(device, backend="auto"):
    o = _lib.Options()
    o.backend = backend.encode() if backend and backend != "auto" else None
    # torch.use_deterministic_algorithms(True) asks for the same bits every run: the backward
    # then runs a deterministic kernel (or a backend without atomics).
    o.deterministic = 1 if torch.are_deterministic_algorithms_enabled() else 0
    if device.type == "cuda":
        o.stream = torch.cuda.current_stream(device).cuda_stream
    return o


def kernel_ready(t):
    """`t` as the kernels want it: last dim contiguous and no broadcast (stride-0) dims; any other
    strides pass through without a copy."""
    if t is None:
        return None
    last_strided = t.dim() > 0 and t.stride(-1) != 1 and t.shape[-1] > 1
    broadcast = any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride()))
    if last_strided or broadcast:
        return t.contiguous()
    return t
