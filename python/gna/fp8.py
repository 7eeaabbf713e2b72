"""The FP8 forward (docs/fp8.md): precision="fp8" quantizes float16 / bfloat16 / float32 inputs
inside the library (Q and K per token and head, K smoothed by its mean, V per channel, P per
row) and runs the e4m3 forward; float8_e4m3fn inputs (torch >= 2.1) come with their scales.
Forward only: inputs that require gradients are refused. Host tensors run the CPU reference's
emulation of the scheme (torch 1.13 included), CUDA tensors an FP8 backend."""
import ctypes
import math

import torch

from . import _lib
from ._tensors import E4M3, _stream_of, kernel_ready, ref, view

PRECISIONS = ("auto", "fp8")
_QUANTIZABLE = (torch.float16, torch.bfloat16, torch.float32)


def check_precision(fn, precision):
    if precision not in PRECISIONS:
        raise ValueError(f"{fn}: precision must be one of {PRECISIONS}, got {precision!r}")


def is_fp8(query, precision):
    """Whether a call runs the FP8 forward: precision "fp8", or float8_e4m3fn inputs."""
    return precision == "fp8" or (E4M3 is not None and isinstance(query, torch.Tensor) and
                                  query.dtype == E4M3)


def _check_forward_only(fn, tensors):
    for name, t in tensors:
        if t is not None and t.requires_grad:
            raise ValueError(f"{fn}: precision='fp8' is forward only (no backward through the "
                             f"FP8 forward), but {name} requires grad; run in the inputs' dtype "
                             f"to train, or call under torch.no_grad() / detach the inputs")


def _check_scale(fn, name, scale, shape, device):
    if not isinstance(scale, torch.Tensor):
        raise ValueError(f"{fn}: {name} must be a float32 torch.Tensor of shape {shape}, got "
                         f"{type(scale).__name__}")
    if scale.dtype != torch.float32:
        raise ValueError(f"{fn}: {name} must be float32, got {scale.dtype}")
    if tuple(scale.shape) != tuple(shape):
        raise ValueError(f"{fn}: {name} must have shape {tuple(shape)}, got "
                         f"{tuple(scale.shape)}")
    if scale.device != device:
        raise ValueError(f"{fn}: {name} is on {scale.device}, expected {device} (the query's)")
    if scale.numel() and not bool(torch.isfinite(scale).all() and (scale > 0).all()):
        raise ValueError(f"{fn}: {name} must hold finite scales > 0 (NaN, inf, 0 or a negative "
                         f"scale makes its rows' scores meaningless)")
    return kernel_ready(scale)


def _options(device, backend, precision):
    o = _lib.Options()
    if backend and backend != "auto":
        o.backend = backend.encode()
    o.precision = _lib.PRECISION_FP8 if precision == "fp8" else _lib.PRECISION_AUTO
    if device.type == "cuda":
        o.stream = _stream_of(device)
    return o


def _require_library(fn):
    if not _lib.has_fp8:
        raise _lib.UnsupportedError(f"{fn}: the loaded libgna (ABI version {_lib.abi_version()})"
                                    f" has no FP8 forward (ABI version 5)")


def fp8_attention(fn, query, key, value, additional_keys, additional_values, window, stride,
                  dilation, causal, scale, backend, return_lse, precision, scales, out_dtype):
    """(out, lse) of the FP8 forward; scales: dict of q_scale, k_scale, v_scale,
    additional_k_scale (float8_e4m3fn inputs only)."""
    _require_library(fn)
    tensors = (("query", query), ("key", key), ("value", value),
               ("additional_keys", additional_keys), ("additional_values", additional_values))
    _check_forward_only(fn, tensors)
    params = _lib.make_params(window, stride, dilation, causal, scale)
    given = {k: v for k, v in scales.items() if v is not None}
    device = query.device
    if E4M3 is not None and query.dtype == E4M3:
        return _e4m3_forward(fn, params, query, key, value, additional_keys, additional_values,
                             backend, given, out_dtype)
    if given:
        name = sorted(given)[0]
        raise ValueError(f"{fn}: {name} goes with float8_e4m3fn inputs only, got {query.dtype} "
                         f"inputs (precision='fp8' computes the scales itself)")
    if query.dtype not in _QUANTIZABLE:
        raise ValueError(f"{fn}: precision='fp8' quantizes float16, bfloat16 or float32 inputs, "
                         f"got {query.dtype}")
    inputs = [query, key, value, additional_keys, additional_values]
    if not query.is_cuda:  # the CPU reference's emulation runs on float32
        inputs = [None if t is None else t.to(torch.float32) for t in inputs]
    q, k, v, ak, av = [kernel_ready(t) for t in inputs]
    out = q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))
    lse = q.new_empty(tuple(q.shape[:-1]), dtype=torch.float32)
    names = ("query", "key", "value", "additional_keys", "additional_values", "out", "lse")
    g = [view(t, n) for t, n in zip((q, k, v, ak, av, out, lse), names)]
    opts = _options(device, backend, "fp8")
    with _device(device):
        _lib.check(_lib.lib.gna_forward(ctypes.byref(params), *[ref(x) for x in g],
                                        ctypes.byref(opts)))
    out = out.to(out_dtype or query.dtype)
    return out, lse


def _e4m3_forward(fn, params, q, k, v, ak, av, backend, scales, out_dtype):
    rank = q.dim() - 3
    batch, heads_kv, dim_v = q.shape[0], k.shape[-2], v.shape[-1]
    for required in ("q_scale", "k_scale", "v_scale"):
        if required not in scales:
            raise ValueError(f"{fn}: float8_e4m3fn inputs need {required} (q_scale [B, *spatial,"
                             f" Hq], k_scale [B, *spatial, Hkv], v_scale [B, Hkv, Dv])")
    for name, t in (("key", k), ("value", v), ("additional_keys", ak),
                    ("additional_values", av)):
        if t is not None and t.dtype != E4M3:
            raise ValueError(f"{fn}: {name} must be float8_e4m3fn like the query, got {t.dtype}")
    if (ak is None) != ("additional_k_scale" not in scales):
        raise ValueError(f"{fn}: additional_k_scale goes with float8_e4m3fn additional keys "
                         f"(both or neither)")
    device = q.device
    qs = _check_scale(fn, "q_scale", scales["q_scale"], q.shape[:-1], device)
    ks = _check_scale(fn, "k_scale", scales["k_scale"], k.shape[:-1], device)
    vs = _check_scale(fn, "v_scale", scales["v_scale"], (batch, heads_kv, dim_v), device)
    aks = None
    if ak is not None:
        aks = _check_scale(fn, "additional_k_scale", scales["additional_k_scale"], ak.shape[:-1],
                           device)
    out_dtype = out_dtype or torch.bfloat16
    if out_dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"{fn}: out_dtype must be float16, bfloat16 or float32, got {out_dtype}")
    compute = out_dtype if q.is_cuda else torch.float32
    q, k, v, ak, av = [kernel_ready(t) for t in (q, k, v, ak, av)]
    out = torch.empty(tuple(q.shape[:-1]) + (dim_v,), dtype=compute, device=device)
    lse = torch.empty(tuple(q.shape[:-1]), dtype=torch.float32, device=device)
    names = ("query", "key", "value", "additional_keys", "additional_values", "q_scale",
             "k_scale", "v_scale", "additional_k_scale", "out", "lse")
    g = [view(t, n) for t, n in zip((q, k, v, ak, av, qs, ks, vs, aks, out, lse), names)]
    opts = _options(device, backend, "auto")
    with _device(device):
        _lib.check(_lib.lib.gna_forward_e4m3(ctypes.byref(params), None, *[ref(x) for x in g],
                                             ctypes.byref(opts)))
    return out.to(out_dtype), lse


def _device(device):
    from .ops import _device_guard
    return _device_guard(device)


def quantize_e4m3(x, dim=-1):
    """x as float8_e4m3fn with its float32 scales, the largest magnitude of each slice along
    `dim` mapped to 448 (torch >= 2.1): (x8, scale), x ~ x8 * scale. For callers who keep FP8
    activations: q and k per token and head (dim=-1), v per channel (reduce over the tokens)."""
    if E4M3 is None:
        raise RuntimeError("quantize_e4m3: this torch has no float8_e4m3fn (torch >= 2.1)")
    amax = x.detach().abs().to(torch.float32).amax(dim=dim, keepdim=True)
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    x8 = (x.to(torch.float32) / scale).clamp(-448.0, 448.0).to(E4M3)
    return x8, scale.squeeze(dim)
