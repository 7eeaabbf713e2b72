"""The unfused neighborhood operators (docs/rule.md section 6) on heads-first tensors
[B, heads, *spatial, D] (NATTEN's legacy layout), with autograd:

    na_qk(query, key, kernel_size, dilation=1, is_causal=False, rpb=None)
        -> attn [B, heads, *spatial, prod(kernel_size)]    (PN: query . key over each window)
    na_av(attn, value, kernel_size, dilation=1, is_causal=False)
        -> out [B, heads, *spatial, D]                     (NN: attn . value over each window)

The rank is query.dim() - 3 (1, 2 or 3); kernel_size, dilation and is_causal are one int/bool
for every axis or one per axis. Window slots are row-major over the axes, slot = key - window
start per axis; rpb [heads, 2K-1 per axis] adds entry K-1 + (key - query) per axis (coordinates
inside the dilation group). Slots past the query in causal windows are -inf in attn and ignored
by na_av. No scale is applied: scale the query first. Gradients flow to query, key, value, attn
and rpb (the backward uses the inverse-neighborhood operator; every pass is deterministic).

Host tensors run the CPU reference (float16/bfloat16 host tensors are computed in float32 and
returned in their dtype), CUDA tensors the CUDA kernels on the current stream. rpb may have its
own dtype (for example a float32 parameter beside float16 activations): it is cast to the
query's dtype for the call and its gradient is returned in its own dtype.
"""
import contextlib

import torch
from torch.autograd.function import once_differentiable

from . import _calls, _lib
from ._tensors import kernel_ready

__all__ = ["na_qk", "na_av"]

_HALF = (torch.float16, torch.bfloat16)


def _per_axis(fn, name, value, rank, kind):
    values = list(value) if isinstance(value, (tuple, list)) else [value] * rank
    if len(values) != rank:
        raise ValueError(f"{fn}: {name} must be one {kind.__name__} or {rank} of them (one per "
                         f"spatial axis), got {value!r}")
    for v in values:
        ok = isinstance(v, bool) if kind is bool else (isinstance(v, int) and not isinstance(v, bool))
        if not ok:
            raise ValueError(f"{fn}: {name} must hold {kind.__name__}s, got {value!r}")
    return values


def _params(fn, tokens, kernel_size, dilation, is_causal):
    """gna_params of a call; the rank comes from a heads-first token tensor."""
    rank = tokens.dim() - 3
    if rank < 1 or rank > _lib.MAX_RANK:
        raise ValueError(f"{fn}: expected a [batch, heads, *spatial, dim] tensor with 1 to "
                         f"{_lib.MAX_RANK} spatial dims, got {tokens.dim()} dims")
    window = _per_axis(fn, "kernel_size", kernel_size, rank, int)
    dilation = _per_axis(fn, "dilation", dilation, rank, int)
    causal = _per_axis(fn, "is_causal", is_causal, rank, bool)
    return _lib.make_params(window, [1] * rank, dilation, causal, 0.0)


def _compute_dtype(t):
    """Host float16/bfloat16 run in float32 (the reference computes in float32/float64)."""
    return torch.float32 if (t.dtype in _HALF and not t.is_cuda) else t.dtype


def _inputs(dtype, *tensors):
    return [None if t is None else kernel_ready(t.to(dtype)) for t in tensors]


def _call(function, params, device, *tensors):
    """Calls a C entry point with (params, tensors..., options); tensors are (tensor, name)
    pairs or None."""
    names = tuple(None if t is None else t[1] for t in tensors)
    guard = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with guard:
        _calls.call(function, names, params, tuple(None if t is None else t[0] for t in tensors))


def _empty_like_shape(t, last, dtype):
    return torch.empty(tuple(t.shape[:-1]) + (last,), dtype=dtype, device=t.device)


class _NaQk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, rpb, params):
        dtype = _compute_dtype(query)
        q, k, bias = _inputs(dtype, query, key, rpb)
        slots = 1
        for i in range(params.rank):
            slots *= params.window[i]
        attn = _empty_like_shape(q, slots, dtype)
        _call(_lib.lib.gna_na_qk, params, q.device, (q, "query"), (k, "key"),
              None if bias is None else (bias, "rpb"), (attn, "attn"))
        ctx.save_for_backward(query, key)
        ctx.params = params
        ctx.rpb_dtype = None if rpb is None else rpb.dtype
        return attn.to(query.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_attn):
        query, key = ctx.saved_tensors
        want_q, want_k, want_rpb = ctx.needs_input_grad[:3]
        dtype = _compute_dtype(query)
        q, k, g = _inputs(dtype, query, key, d_attn)
        dq = torch.empty_like(q) if want_q else None
        dk = torch.empty_like(k) if want_k else None
        d_rpb = None
        if want_rpb:
            shape = [q.shape[1]] + [2 * ctx.params.window[i] - 1 for i in range(ctx.params.rank)]
            d_rpb = torch.empty(shape, dtype=dtype, device=q.device)
        if want_q or want_k or want_rpb:
            _call(_lib.lib.gna_na_qk_backward, ctx.params, q.device, (q, "query"), (k, "key"),
                  (g, "d_attn"), None if dq is None else (dq, "dq"),
                  None if dk is None else (dk, "dk"), None if d_rpb is None else (d_rpb, "d_rpb"))
        return (None if dq is None else dq.to(query.dtype),
                None if dk is None else dk.to(key.dtype),
                None if d_rpb is None else d_rpb.to(ctx.rpb_dtype), None)


class _NaAv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, attn, value, params):
        dtype = _compute_dtype(value)
        a, v = _inputs(dtype, attn, value)
        out = torch.empty(v.shape, dtype=dtype, device=v.device)
        _call(_lib.lib.gna_na_av, params, v.device, (a, "attn"), (v, "value"), (out, "out"))
        ctx.save_for_backward(attn, value)
        ctx.params = params
        return out.to(value.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        attn, value = ctx.saved_tensors
        want_attn, want_v = ctx.needs_input_grad[:2]
        dtype = _compute_dtype(value)
        a, v, g = _inputs(dtype, attn, value, d_out)
        d_attn = torch.empty(a.shape, dtype=dtype, device=a.device) if want_attn else None
        dv = torch.empty_like(v) if want_v else None
        if want_attn or want_v:
            _call(_lib.lib.gna_na_av_backward, ctx.params, v.device, (a, "attn"), (v, "value"),
                  (g, "d_out"), None if d_attn is None else (d_attn, "d_attn"),
                  None if dv is None else (dv, "dv"))
        return (None if d_attn is None else d_attn.to(attn.dtype),
                None if dv is None else dv.to(value.dtype), None)


def na_qk(query, key, kernel_size, dilation=1, is_causal=False, rpb=None):
    """PN: attention weights [B, heads, *spatial, prod(kernel_size)] of heads-first query and
    key, plus the relative positional bias rpb [heads, 2K-1 per axis] when given."""
    params = _params("na_qk", query, kernel_size, dilation, is_causal)
    return _NaQk.apply(query, key, rpb, params)


def na_av(attn, value, kernel_size, dilation=1, is_causal=False):
    """NN: weights [B, heads, *spatial, prod(kernel_size)] times heads-first value over each
    query's window -> [B, heads, *spatial, D]."""
    params = _params("na_av", value, kernel_size, dilation, is_causal)
    return _NaAv.apply(attn, value, params)
