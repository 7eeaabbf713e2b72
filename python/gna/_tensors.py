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
# torch >= 2.1: the FP8 forward's float8_e4m3fn inputs.
E4M3 = getattr(torch, "float8_e4m3fn", None)
if E4M3 is not None:
    _DTYPES[E4M3] = _lib.DTYPE_E4M3

# Per-batch counts of additional keys (ABI version 7) are int32; no other tensor is.
_COUNT_DTYPES = {torch.int32: _lib.DTYPE_I32}

# Validation reads shapes, dtypes and strides only; it still refuses null data pointers, so a
# metadata-only view carries this stand-in address (never dereferenced).
_METADATA_ONLY = 64


def dtype_code(dtype, name):
    if name == "additional_kv_counts" and dtype in _COUNT_DTYPES:
        return _COUNT_DTYPES[dtype]
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise ValueError(f"{name}: dtype must be float32, float64, float16 or bfloat16, "
                         f"got {dtype}") from None


_Dims = ctypes.c_int64 * _lib.MAX_TENSOR_RANK


# Descriptions by (shape, strides, dtype, device), without the data pointer: a call copies one
# and sets the pointer, a few times cheaper than building the struct and its two arrays.
_templates = {}


def view(t, name, metadata_only=False):
    """A gna_tensor describing `t` (no copy). None stays None."""
    if t is None:
        return None
    shape, strides = tuple(t.shape), t.stride()
    key = (shape, strides, t.dtype, t.device)
    template = _templates.get(key)
    if template is None:
        template = _describe(t, shape, strides, name)
        if len(_templates) > 4096:  # shapes of a long-running process with varying inputs
            _templates.clear()
        _templates[key] = template
    g = _lib.Tensor.from_buffer_copy(template)
    g.data = _METADATA_ONLY if metadata_only else t.data_ptr()
    return g


def _describe(t, shape, strides, name):
    rank = len(shape)
    if rank > _lib.MAX_TENSOR_RANK:
        raise ValueError(f"{name}: at most {_lib.MAX_TENSOR_RANK} dims, got {rank}")
    if t.is_cuda:
        index = t.device.index
        device = torch.cuda.current_device() if index is None else index
    else:
        device = -1
    return _lib.Tensor(0, dtype_code(t.dtype, name), rank, _Dims(*shape), _Dims(*strides),
                       device, 0)


def ref(g):
    return None if g is None else ctypes.byref(g)


# The raw current-stream query of torch's CUDA module where it has one (what torch's own
# generated code calls); the public current_stream() builds a Stream object on every call.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream_of(device):
    index = device.index if device.index is not None else torch.cuda.current_device()
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(device).cuda_stream


def options(device, backend="auto"):
    o = _lib.Options()
    if backend and backend != "auto":
        o.backend = backend.encode()
    # torch.use_deterministic_algorithms(True) asks for the same bits every run: the backward
    # then runs a deterministic kernel (or a backend without atomics).
    if torch.are_deterministic_algorithms_enabled():
        o.deterministic = 1
    if device.type == "cuda":
        o.stream = _stream_of(device)
    return o


def needs_copy(t):
    """Whether kernel_ready copies `t`: a strided last dim or a broadcast (stride-0) dim."""
    if t.is_contiguous():
        return False
    last_strided = t.dim() > 0 and t.stride(-1) != 1 and t.shape[-1] > 1
    return last_strided or any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride()))


def ready_strides(t):
    """The strides `t` has once kernel_ready made it fit for the kernels (without copying it)."""
    if not needs_copy(t):
        return tuple(t.stride())
    strides, step = [], 1
    for n in reversed(tuple(t.shape)):
        strides.append(step)
        step *= int(n)
    return tuple(reversed(strides))


def kernel_ready(t):
    """`t` as the kernels want it: last dim contiguous and no broadcast (stride-0) dims; any other
    strides pass through without a copy."""
    if t is None or not needs_copy(t):
        return t
    return t.contiguous()
