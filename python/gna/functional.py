"""The functional API: neighborhood attention on heads-last tensors [B, *spatial, H, D]."""
import ctypes
import functools
import math

import torch

from . import _lib
from .fp8 import check_precision, fp8_attention, is_fp8
from .ops import _is_compiling, attention, select_backend

__all__ = ["na1d", "na2d", "na3d", "sta2d", "sta3d", "merge_attentions", "selected_backend"]


def _per_axis(name, value, rank, fn, kind):
    """An int (bool for flags) for every axis, or one per axis; the rule's limits are the
    core's to check."""
    if isinstance(value, kind) or (kind is int and isinstance(value, int)):
        values = [value] * rank
    elif isinstance(value, (tuple, list)):
        values = list(value)
        if len(values) != rank:
            raise ValueError(f"{fn}: {name} must be a {kind.__name__} or {rank} of them (one "
                             f"per spatial axis), got {value!r}")
    else:
        raise ValueError(f"{fn}: {name} must be a {kind.__name__} or a tuple of {rank}, "
                         f"got {value!r}")
    for v in values:
        if kind is int and (isinstance(v, bool) or not isinstance(v, int)):
            raise ValueError(f"{fn}: {name} must hold ints, got {value!r}")
        if kind is int and not -2**31 <= v < 2**31:  # the C ABI's int32, never truncated
            raise ValueError(f"{fn}: {name} must hold ints below 2^31 in magnitude, got "
                             f"{value!r}")
        if kind is bool and not isinstance(v, bool):
            raise ValueError(f"{fn}: {name} must hold bools, got {value!r}")
    return values


def _scale(fn, scale):
    """The C ABI's scale: 0.0 for None (1/sqrt(head dim)), else a finite float32 > 0 (a 0 would
    silently mean the default there)."""
    if scale is None:
        return 0.0
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"{fn}: scale must be a number or None, got {scale!r}")
    value = float(scale)
    if not math.isfinite(value) or not value > 0 or not math.isfinite(
            ctypes.c_float(value).value) or ctypes.c_float(value).value == 0:
        raise ValueError(f"{fn}: scale must be a finite float32 > 0 (None for 1/sqrt(head dim)), "
                         f"got {scale!r}")
    return value


_rules = {}


def _rule(fn, rank, kernel_size, stride, dilation, is_causal, scale):
    """The rule's per-axis lists, checked once per distinct argument set (hashable arguments:
    ints, bools, tuples; lists are checked on every call)."""
    if _is_compiling():  # traced once per graph: no cache (torch.compile cannot trace its keys)
        return _checked_rule(fn, rank, kernel_size, stride, dilation, is_causal, scale)
    # Types are part of the key: True == 1 and 1 == 1.0 must not share a checked rule.
    key = (fn, rank, _typed(kernel_size), _typed(stride), _typed(dilation), _typed(is_causal),
           _typed(scale))
    try:
        return _rules[key]
    except TypeError:
        return _checked_rule(fn, rank, kernel_size, stride, dilation, is_causal, scale)
    except KeyError:
        rule = _checked_rule(fn, rank, kernel_size, stride, dilation, is_causal, scale)
        if len(_rules) > 4096:
            _rules.clear()
        return _rules.setdefault(key, rule)


def _typed(value):
    if isinstance(value, tuple):
        return tuple((v.__class__, v) for v in value)
    return value.__class__, value


def _checked_rule(fn, rank, kernel_size, stride, dilation, is_causal, scale):
    window = _per_axis("kernel_size", kernel_size, rank, fn, int)
    stride = _per_axis("stride", stride, rank, fn, int)
    dilation = _per_axis("dilation", dilation, rank, fn, int)
    causal = _per_axis("is_causal", is_causal, rank, fn, bool)
    return window, stride, dilation, causal, _scale(fn, scale)


_TENSOR_ARGS = ("query", "key", "value", "additional_keys", "additional_values")


def _check_tensors(fn, *tensors):
    """query, key, value must be tensors; the additional tokens tensors or None."""
    for i, (name, t) in enumerate(zip(_TENSOR_ARGS, tensors)):
        if not isinstance(t, torch.Tensor) and (i < 3 or t is not None):
            raise ValueError(f"{fn}: {name} must be a torch.Tensor{'' if i < 3 else ' or None'}, "
                             f"got {type(t).__name__}")


def _attention(fn, rank, query, key, value, rule, additional_keys, additional_values,
               return_lse, backend, precision="auto", scales=None, out_dtype=None):
    if not isinstance(backend, str):
        raise ValueError(f"{fn}: backend must be a string, got {backend!r}")
    check_precision(fn, precision)
    _check_tensors(fn, query, key, value, additional_keys, additional_values)
    scales = scales or {}
    if is_fp8(query, precision):
        out, lse = fp8_attention(fn, query, key, value, additional_keys, additional_values,
                                 *rule, backend, bool(return_lse), precision, scales, out_dtype)
    else:
        given = [name for name, t in scales.items() if t is not None]
        if given or out_dtype is not None:
            raise ValueError(f"{fn}: {(given or ['out_dtype'])[0]} goes with float8_e4m3fn "
                             f"inputs only")
        out, lse = attention(query, key, value, additional_keys, additional_values, *rule,
                             backend, bool(return_lse))
    return (out, lse) if return_lse else out


_FP8_DOC = """
    precision: "auto" (the inputs' dtype) or "fp8": float16 / bfloat16 / float32 inputs
    quantized to e4m3 inside the call (per-token Q and K scales, K smoothed by its mean,
    per-channel V scales; docs/fp8.md), output in the inputs' dtype, lse float32; forward only
    (inputs requiring grad are refused). float8_e4m3fn inputs (torch >= 2.1) run the FP8
    forward with their float32 scales: q_scale [B, .., Hq] and k_scale [B, .., Hkv] per token
    and head, v_scale [B, Hkv, Dv] per channel, additional_k_scale [B, Nadd, Hkv]; out_dtype
    (default bfloat16) is their output's dtype. gna.fp8.quantize_e4m3 makes such tensors.
    """


def _na(fn, rank):
    def na(query, key, value, kernel_size, stride=1, dilation=1, is_causal=False, scale=None,
           additional_keys=None, additional_values=None, return_lse=False, backend="auto",
           precision="auto", q_scale=None, k_scale=None, v_scale=None, additional_k_scale=None,
           out_dtype=None):
        rule = _rule(fn, rank, kernel_size, stride, dilation, is_causal, scale)
        scales = dict(q_scale=q_scale, k_scale=k_scale, v_scale=v_scale,
                      additional_k_scale=additional_k_scale)
        return _attention(fn, rank, query, key, value, rule, additional_keys, additional_values,
                          return_lse, backend, precision, scales, out_dtype)

    na.__name__ = na.__qualname__ = fn
    na.__doc__ = f"""{rank}-D generalized neighborhood attention.

    query [B, {', '.join('XYZ'[:rank])}, Hq, D], key [.., Hkv, D], value [.., Hkv, Dv]
    (heads-last; Hq a multiple of Hkv). kernel_size, stride, dilation: an int for every axis or
    one per axis; is_causal: a bool or one per axis. scale: None for 1/sqrt(D).
    additional_keys / additional_values [B, Nadd, Hkv, D / Dv]: tokens every query attends to,
    in the same softmax. return_lse: also return the logsumexp [B, .., Hq] (float32; float64
    for float64 inputs), through which gradients flow. backend: "auto" or a backend name
    (gna.backend_names()).""" + _FP8_DOC
    return na


na1d = _na("na1d", 1)
na2d = _na("na2d", 2)
na3d = _na("na3d", 3)


@functools.lru_cache(maxsize=None)
def _sta_rule_cached(extent, tile, window):
    return _lib.sta_params(list(extent), list(tile), list(window))


def _identity(fn):
    return fn


# torch.compile (where torch has it) treats the STA rule as a constant of the traced graph.
_constant_result = getattr(getattr(torch, "compiler", None), "assume_constant_result", _identity)


@_constant_result
def _sta_rule(extent, tile, window):
    """GNA (window, stride) of Sliding Tile Attention, as the core defines it (constant under
    torch.compile)."""
    return _sta_rule_cached(tuple(extent), tuple(tile), tuple(window))


def _sta(fn, rank):
    def sta(query, key, value, tile_shape, window_tiles, scale=None, additional_keys=None,
            additional_values=None, return_lse=False, backend="auto", precision="auto",
            q_scale=None, k_scale=None, v_scale=None, additional_k_scale=None, out_dtype=None):
        tile = _per_axis("tile_shape", tile_shape, rank, fn, int)
        tiles = _per_axis("window_tiles", window_tiles, rank, fn, int)
        _check_tensors(fn, query, key, value, additional_keys, additional_values)
        if query.dim() != rank + 3:
            raise ValueError(f"{fn}: query must have {rank + 3} dims [B, {rank} spatial, H, D], "
                             f"got shape {tuple(query.shape)}")
        extent = tuple(int(s) for s in query.shape[1:1 + rank])
        window_tokens = tuple(t * w for t, w in zip(tile, tiles))
        window, stride = _sta_rule(extent, tuple(tile), window_tokens)
        rule = (list(window), list(stride), [1] * rank, [False] * rank, _scale(fn, scale))
        scales = dict(q_scale=q_scale, k_scale=k_scale, v_scale=v_scale,
                      additional_k_scale=additional_k_scale)
        return _attention(fn, rank, query, key, value, rule, additional_keys, additional_values,
                          return_lse, backend, precision, scales, out_dtype)

    sta.__name__ = sta.__qualname__ = fn
    sta.__doc__ = f"""{rank}-D Sliding Tile Attention on heads-last tensors.

    tile_shape: tokens per tile on each axis; window_tiles: the window in tiles on each axis
    (odd). Query tile qt attends key tile kt iff |clamp(qt) - kt| <= window_tiles // 2 on every
    axis; this equals GNA with window tile_shape * window_tiles and stride tile_shape.
    Other arguments (precision and the FP8 scales included) as in na{rank}d.
    """
    return sta


sta2d = _sta("sta2d", 2)
sta3d = _sta("sta3d", 3)


def merge_attentions(outputs, lses):
    """Exact merge of attention outputs over disjoint key sets, by their logsumexp:
    lse = log(sum_i exp(lse_i)), out = sum_i exp(lse_i - lse) * out_i.

    outputs: tensors [..., H, D] of one shape; lses: tensors [..., H]. Returns (out, lse), out in
    the outputs' dtype, lse float32 (float64 for float64 inputs). Differentiable.
    """
    outputs, lses = list(outputs), list(lses)
    if len(outputs) < 1 or len(outputs) != len(lses):
        raise ValueError(f"merge_attentions: outputs and lses must be non-empty and of equal "
                         f"length, got {len(outputs)} outputs and {len(lses)} lses")
    for name, items in (("outputs", outputs), ("lses", lses)):
        for i, t in enumerate(items):
            if not isinstance(t, torch.Tensor):
                raise ValueError(f"merge_attentions: {name}[{i}] must be a torch.Tensor, got "
                                 f"{type(t).__name__}")
            if not t.is_floating_point():
                raise ValueError(f"merge_attentions: {name}[{i}] must be floating point, got "
                                 f"{t.dtype}")
            if t.device != outputs[0].device:
                raise ValueError(f"merge_attentions: {name}[{i}] is on {t.device}, expected "
                                 f"{outputs[0].device} (the device of outputs[0])")
    shape = tuple(outputs[0].shape)
    for i, (o, l) in enumerate(zip(outputs, lses)):
        if o.dtype != outputs[0].dtype:
            raise ValueError(f"merge_attentions: outputs[{i}] has dtype {o.dtype}, expected "
                             f"{outputs[0].dtype}")
        if tuple(o.shape) != shape:
            raise ValueError(f"merge_attentions: outputs[{i}] has shape {tuple(o.shape)}, "
                             f"expected {shape}")
        if tuple(l.shape) != shape[:-1]:
            raise ValueError(f"merge_attentions: lses[{i}] has shape {tuple(l.shape)}, "
                             f"expected {shape[:-1]}")
    acc = torch.float64 if outputs[0].dtype == torch.float64 else torch.float32
    stacked = torch.stack([l.to(acc) for l in lses])
    lse = torch.logsumexp(stacked, dim=0)
    weights = torch.exp(stacked - lse).unsqueeze(-1)
    out = sum(weights[i] * outputs[i].to(acc) for i in range(len(outputs)))
    return out.to(outputs[0].dtype), lse


def selected_backend(query, key, value, kernel_size, stride=1, dilation=1, is_causal=False,
                     scale=None, additional_keys=None, additional_values=None, backward=False,
                     backend="auto", precision="auto"):
    """Name of the backend dispatch runs for this na1d/na2d/na3d call (forward, or backward
    with backward=True; precision "fp8": of the FP8 forward). Raises gna.UnsupportedError when
    none can."""
    _check_tensors("selected_backend", query, key, value, additional_keys, additional_values)
    rank = query.dim() - 3
    if rank < 1 or rank > 3:
        raise ValueError(f"selected_backend: query must have 4 to 6 dims, got shape "
                         f"{tuple(query.shape)}")
    rule = _rule("selected_backend", rank, kernel_size, stride, dilation, is_causal, scale)
    check_precision("selected_backend", precision)
    return select_backend(query, key, value, additional_keys, additional_values, *rule,
                          backward=backward, backend=backend, precision=precision)
