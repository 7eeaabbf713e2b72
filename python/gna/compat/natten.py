"""NATTEN's legacy functional API (versions 0.14 to 0.17) on gna's unfused operators.

Models written against NATTEN before 0.20 call its unfused "QK" and "AV" operators; NATTEN
0.20 removed them, together with relative positional bias. This module offers the same names,
argument order and tensor layout, computed by `gna.unfused.na_qk` / `gna.unfused.na_av` (the
PN and NN operators of docs/rule.md section 6, differentiable in every input including the bias):

    natten1dqkrpb(query, key, rpb, kernel_size, dilation)
    natten2dqkrpb(query, key, rpb, kernel_size, dilation)
    natten3dqkrpb(query, key, rpb, kernel_size_d, kernel_size, dilation_d, dilation)
    natten1dqk / natten2dqk(query, key, kernel_size, dilation)
    natten3dqk(query, key, kernel_size_d, kernel_size, dilation_d, dilation)
    natten1dav / natten2dav(attn, value, kernel_size, dilation)
    natten3dav(attn, value, kernel_size_d, kernel_size, dilation_d, dilation)

    na1d_qk / na2d_qk / na3d_qk(query, key, kernel_size, dilation=1, additional_keys=None,
                                is_causal=False, rpb=None)
    na1d_av / na2d_av / na3d_av(attn, value, kernel_size, dilation=1, additional_values=None,
                                is_causal=False)
    na1d_qk_with_bias / na2d_qk_with_bias(query, key, bias, kernel_size, dilation,
                                          additional_keys=None)
    na3d_qk_with_bias(query, key, bias, kernel_size_d, kernel_size, dilation_d, dilation,
                      additional_keys=None)
    na1d / na2d / na3d(query, key, value, kernel_size, dilation=1, is_causal=False, rpb=None,
                       scale=None)

Layouts (as in NATTEN): the QK / AV operators take heads-first tensors
`query, key, value [B, heads, *spatial, D]` and return attention weights
`[B, heads, *spatial, prod(kernel_size) + extra]` (slots in row-major order over the window,
then one column per additional key) and outputs `[B, heads, *spatial, D]`. No scaling is
applied: callers scale the query. `rpb [heads, 2*K-1 per axis]` is added to the weight of a
(query, key) pair at index `K-1 + (key - query)` per axis, in coordinates of the dilation group.
With `is_causal`, slots past the query hold -inf. The fused `na1d/na2d/na3d` (NATTEN 0.17) take
heads-last tensors `[B, *spatial, heads, D]` and compute `softmax(scale * q.k + rpb) v`.

What NATTEN itself rejected raises ValueError here: kernel sizes that are even or below 3,
dilation below 1, kernel_size * dilation larger than the input on an axis, a bias together
with causal masking, and tensors whose shapes do not fit together.

The 3-D `na3d_qk` / `na3d_av` follow NATTEN 0.15 to 0.17 (kernel_size and dilation per axis);
NATTEN 0.14's split 3-D arguments (kernel_size_d, kernel_size, dilation_d, dilation) are those
of `natten3dqkrpb`, `natten3dqk`, `natten3dav` and `na3d_qk_with_bias`.
"""
import math

import torch

__all__ = [
    "natten1dqkrpb", "natten2dqkrpb", "natten3dqkrpb",
    "natten1dqk", "natten2dqk", "natten3dqk",
    "natten1dav", "natten2dav", "natten3dav",
    "na1d_qk", "na2d_qk", "na3d_qk", "na1d_av", "na2d_av", "na3d_av",
    "na1d_qk_with_bias", "na2d_qk_with_bias", "na3d_qk_with_bias",
    "na1d", "na2d", "na3d",
]


def _unfused():
    from .. import unfused
    return unfused


# ---------------------------------------------------------------------------------------------
# Argument checks (NATTEN's rules, errors that name the parameter and the value)


def _ints(fn, name, value, rank):
    """An int for every axis, or a tuple / list of `rank` ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * rank
    if isinstance(value, (tuple, list)) and len(value) == rank and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    raise ValueError(f"{fn}: {name} must be an int or a tuple of {rank} ints, got {value!r}")


def _flags(fn, value, rank):
    if value is None:
        return (False,) * rank
    if isinstance(value, bool):
        return (value,) * rank
    if isinstance(value, (tuple, list)) and len(value) == rank and all(
            isinstance(v, bool) for v in value):
        return tuple(value)
    raise ValueError(f"{fn}: is_causal must be a bool or a tuple of {rank} bools, got {value!r}")


def _rule(fn, rank, kernel_size, dilation, is_causal):
    kernel = _ints(fn, "kernel_size", kernel_size, rank)
    dil = _ints(fn, "dilation", 1 if dilation is None else dilation, rank)
    causal = _flags(fn, is_causal, rank)
    for axis, k in enumerate(kernel):
        if k < 3 or k % 2 == 0:
            raise ValueError(f"{fn}: kernel_size must be an odd integer greater than 1 on every "
                             f"axis (as NATTEN required), got {kernel_size!r} (axis {axis}: {k})")
    for axis, d in enumerate(dil):
        if d < 1:
            raise ValueError(f"{fn}: dilation must be at least 1 on every axis, got {dilation!r} "
                             f"(axis {axis}: {d})")
    return kernel, dil, causal


def _check_tensor(fn, name, t, rank, layout):
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != rank + 3:
        raise ValueError(f"{fn}: {name} must have {rank + 3} dims {layout}, got shape "
                         f"{tuple(t.shape)}")


def _spatial_names(rank):
    return ", ".join(("X", "Y", "Z")[:rank] if rank > 1 else ("L",))


def _check_extent(fn, spatial, kernel, dilation):
    for axis, (n, k, d) in enumerate(zip(spatial, kernel, dilation)):
        if k * d > n:
            raise ValueError(f"{fn}: kernel_size * dilation must not exceed the input extent on "
                             f"axis {axis}: kernel_size {k} * dilation {d} = {k * d} > {n}")


def _check_rpb(fn, name, rpb, heads, kernel, causal, like):
    if rpb is None:
        return None
    if any(causal):
        raise ValueError(f"{fn}: {name} (relative positional bias) cannot be combined with "
                         f"is_causal={causal} (NATTEN had no bias for causal attention)")
    if not isinstance(rpb, torch.Tensor):
        raise ValueError(f"{fn}: {name} must be a torch.Tensor or None, got {type(rpb).__name__}")
    expected = (heads,) + tuple(2 * k - 1 for k in kernel)
    if tuple(rpb.shape) != expected:
        raise ValueError(f"{fn}: {name} must have shape [heads, 2*kernel_size-1 per axis] = "
                         f"{list(expected)}, got {list(rpb.shape)}")
    if rpb.device != like.device:
        raise ValueError(f"{fn}: {name} must be on the inputs' device {like.device}, got "
                         f"{rpb.device}")
    # NATTEN computed the bias in the inputs' dtype; the cast is differentiable.
    return rpb if rpb.dtype == like.dtype else rpb.to(like.dtype)


def _check_same(fn, a_name, a, b_name, b):
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"{fn}: {a_name} and {b_name} must have the same shape, got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise ValueError(f"{fn}: {a_name} and {b_name} must have the same dtype, got {a.dtype} "
                         f"and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"{fn}: {a_name} and {b_name} must be on the same device, got "
                         f"{a.device} and {b.device}")


def _check_extra(fn, name, extra, like, rank):
    """Additional keys / values: [B, heads, N, D] beside heads-first [B, heads, *spatial, D]."""
    if extra is None:
        return 0
    if not isinstance(extra, torch.Tensor) or extra.dim() != 4:
        raise ValueError(f"{fn}: {name} must be a 4-dim tensor [B, heads, tokens, D], got "
                         f"{tuple(extra.shape) if isinstance(extra, torch.Tensor) else extra!r}")
    if (extra.shape[0], extra.shape[1], extra.shape[3]) != (like.shape[0], like.shape[1],
                                                            like.shape[-1]):
        raise ValueError(f"{fn}: {name} must be [B={like.shape[0]}, heads={like.shape[1]}, "
                         f"tokens, D={like.shape[-1]}], got {tuple(extra.shape)}")
    if extra.dtype != like.dtype or extra.device != like.device:
        raise ValueError(f"{fn}: {name} must match the inputs' dtype {like.dtype} and device "
                         f"{like.device}, got {extra.dtype} on {extra.device}")
    return extra.shape[2]


# ---------------------------------------------------------------------------------------------
# The operators


def _qk(fn, rank, query, key, kernel_size, dilation, is_causal, rpb, additional_keys,
        rpb_name="rpb"):
    kernel, dil, causal = _rule(fn, rank, kernel_size, dilation, is_causal)
    layout = f"[B, heads, {_spatial_names(rank)}, D]"
    _check_tensor(fn, "query", query, rank, layout)
    _check_tensor(fn, "key", key, rank, layout)
    _check_same(fn, "query", query, "key", key)
    _check_extent(fn, tuple(query.shape[2:2 + rank]), kernel, dil)
    bias = _check_rpb(fn, rpb_name, rpb, query.shape[1], kernel, causal, query)
    n_extra = _check_extra(fn, "additional_keys", additional_keys, query, rank)
    attn = _unfused().na_qk(query, key, kernel, dilation=dil, is_causal=causal, rpb=bias)
    if n_extra:
        b, h, d = query.shape[0], query.shape[1], query.shape[-1]
        extra = torch.matmul(query.reshape(b, h, -1, d), additional_keys.transpose(-1, -2))
        attn = torch.cat([attn, extra.reshape(*query.shape[:-1], n_extra)], dim=-1)
    return attn


def _av(fn, rank, attn, value, kernel_size, dilation, is_causal, additional_values):
    kernel, dil, causal = _rule(fn, rank, kernel_size, dilation, is_causal)
    layout = f"[B, heads, {_spatial_names(rank)}, D]"
    _check_tensor(fn, "value", value, rank, layout)
    _check_tensor(fn, "attn", attn, rank, f"[B, heads, {_spatial_names(rank)}, window]")
    if tuple(attn.shape[:-1]) != tuple(value.shape[:-1]):
        raise ValueError(f"{fn}: attn [B, heads, *spatial, window] must match value "
                         f"{tuple(value.shape)} in every dim but the last, got "
                         f"{tuple(attn.shape)}")
    if attn.device != value.device:
        raise ValueError(f"{fn}: attn and value must be on the same device, got {attn.device} "
                         f"and {value.device}")
    _check_extent(fn, tuple(value.shape[2:2 + rank]), kernel, dil)
    n_extra = _check_extra(fn, "additional_values", additional_values, value, rank)
    window = math.prod(kernel)
    if attn.shape[-1] != window + n_extra:
        what = f"prod(kernel_size) = {window}" + (
            f" + {n_extra} additional values" if n_extra else "")
        raise ValueError(f"{fn}: attn's last dim must be {what}, got {attn.shape[-1]}")
    # NATTEN computed the weights in the value's dtype (softmax under autocast returns float32).
    if attn.dtype != value.dtype:
        attn = attn.to(value.dtype)
    weights = attn if not n_extra else attn[..., :window]
    out = _unfused().na_av(weights, value, kernel, dilation=dil, is_causal=causal)
    if n_extra:
        b, h, d = value.shape[0], value.shape[1], value.shape[-1]
        extra = torch.matmul(attn[..., window:].reshape(b, h, -1, n_extra), additional_values)
        out = out + extra.reshape(out.shape)
    return out


def _fused(fn, rank, query, key, value, kernel_size, dilation, is_causal, rpb, scale):
    """NATTEN 0.17's fused entry points on heads-last tensors: gna's fused kernel without a
    bias; with one, PN + softmax + NN (the fused kernel has no bias)."""
    kernel, dil, causal = _rule(fn, rank, kernel_size, dilation, is_causal)
    layout = f"[B, {_spatial_names(rank)}, heads, D]"
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check_tensor(fn, name, t, rank, layout)
    _check_same(fn, "query", query, "key", key)
    if tuple(value.shape[:-1]) != tuple(query.shape[:-1]) or value.dtype != query.dtype or \
            value.device != query.device:
        raise ValueError(f"{fn}: value must match query {tuple(query.shape)} in every dim but "
                         f"the last, and its dtype and device; got {tuple(value.shape)}, "
                         f"{value.dtype} on {value.device}")
    _check_extent(fn, tuple(query.shape[1:1 + rank]), kernel, dil)
    if scale is not None and not isinstance(scale, (int, float)):
        raise ValueError(f"{fn}: scale must be a float or None, got {scale!r}")
    scale = float(scale) if scale else query.shape[-1] ** -0.5
    if rpb is None:
        import gna
        attend = (gna.na1d, gna.na2d, gna.na3d)[rank - 1]
        return attend(query, key, value, kernel, dilation=dil, is_causal=causal, scale=scale)
    heads_first = [t.movedim(-2, 1) for t in (query, key, value)]
    bias = _check_rpb(fn, "rpb", rpb, query.shape[-2], kernel, causal, query)
    unfused = _unfused()
    attn = unfused.na_qk(heads_first[0] * scale, heads_first[1], kernel, dilation=dil,
                         is_causal=causal, rpb=bias)
    out = unfused.na_av(torch.softmax(attn, dim=-1), heads_first[2], kernel, dilation=dil,
                        is_causal=causal)
    return out.movedim(1, -2)


# ---------------------------------------------------------------------------------------------
# NATTEN 0.15 to 0.17: na{1,2,3}d_qk / na{1,2,3}d_av (and 0.17's fused na{1,2,3}d)


def na1d_qk(query, key, kernel_size, dilation=1, additional_keys=None, is_causal=False,
            rpb=None):
    """Attention weights of 1-D neighborhood attention: query, key [B, heads, L, D] ->
    [B, heads, L, kernel_size (+ additional keys)]; rpb [heads, 2*kernel_size-1]."""
    return _qk("na1d_qk", 1, query, key, kernel_size, dilation, is_causal, rpb, additional_keys)


def na2d_qk(query, key, kernel_size, dilation=1, additional_keys=None, is_causal=False,
            rpb=None):
    """Attention weights of 2-D neighborhood attention: query, key [B, heads, X, Y, D] ->
    [B, heads, X, Y, prod(kernel_size) (+ additional keys)]; rpb [heads, 2*Kx-1, 2*Ky-1]."""
    return _qk("na2d_qk", 2, query, key, kernel_size, dilation, is_causal, rpb, additional_keys)


def na3d_qk(query, key, kernel_size, dilation=1, additional_keys=None, is_causal=False,
            rpb=None):
    """Attention weights of 3-D neighborhood attention: query, key [B, heads, X, Y, Z, D] ->
    [B, heads, X, Y, Z, prod(kernel_size) (+ additional keys)]; rpb [heads, 2*K-1 per axis]."""
    return _qk("na3d_qk", 3, query, key, kernel_size, dilation, is_causal, rpb, additional_keys)


def na1d_av(attn, value, kernel_size, dilation=1, additional_values=None, is_causal=False):
    """Weighted sum over each query's neighborhood: attn [B, heads, L, kernel_size (+ extra)],
    value [B, heads, L, D] -> [B, heads, L, D]."""
    return _av("na1d_av", 1, attn, value, kernel_size, dilation, is_causal, additional_values)


def na2d_av(attn, value, kernel_size, dilation=1, additional_values=None, is_causal=False):
    """Weighted sum over each query's neighborhood: attn [B, heads, X, Y, prod(kernel_size)
    (+ extra)], value [B, heads, X, Y, D] -> [B, heads, X, Y, D]."""
    return _av("na2d_av", 2, attn, value, kernel_size, dilation, is_causal, additional_values)


def na3d_av(attn, value, kernel_size, dilation=1, additional_values=None, is_causal=False):
    """Weighted sum over each query's neighborhood: attn [B, heads, X, Y, Z,
    prod(kernel_size) (+ extra)], value [B, heads, X, Y, Z, D] -> [B, heads, X, Y, Z, D]."""
    return _av("na3d_av", 3, attn, value, kernel_size, dilation, is_causal, additional_values)


def na1d(query, key, value, kernel_size, dilation=1, is_causal=False, rpb=None, scale=None):
    """NATTEN 0.17's fused 1-D call on heads-last [B, L, heads, D]: softmax(scale q.k + rpb) v
    (scale defaults to D ** -0.5). Without rpb this runs gna's fused kernel."""
    return _fused("na1d", 1, query, key, value, kernel_size, dilation, is_causal, rpb, scale)


def na2d(query, key, value, kernel_size, dilation=1, is_causal=False, rpb=None, scale=None):
    """NATTEN 0.17's fused 2-D call on heads-last [B, X, Y, heads, D]: softmax(scale q.k + rpb)
    v (scale defaults to D ** -0.5). Without rpb this runs gna's fused kernel."""
    return _fused("na2d", 2, query, key, value, kernel_size, dilation, is_causal, rpb, scale)


def na3d(query, key, value, kernel_size, dilation=1, is_causal=False, rpb=None, scale=None):
    """NATTEN 0.17's fused 3-D call on heads-last [B, X, Y, Z, heads, D]: softmax(scale q.k +
    rpb) v (scale defaults to D ** -0.5). Without rpb this runs gna's fused kernel."""
    return _fused("na3d", 3, query, key, value, kernel_size, dilation, is_causal, rpb, scale)


# ---------------------------------------------------------------------------------------------
# NATTEN 0.14: na{1,2,3}d_qk_with_bias


def na1d_qk_with_bias(query, key, bias, kernel_size, dilation, additional_keys=None):
    """na1d_qk with the bias (may be None) as the third argument."""
    return _qk("na1d_qk_with_bias", 1, query, key, kernel_size, dilation, False, bias,
               additional_keys, rpb_name="bias")


def na2d_qk_with_bias(query, key, bias, kernel_size, dilation, additional_keys=None):
    """na2d_qk with the bias (may be None) as the third argument."""
    return _qk("na2d_qk_with_bias", 2, query, key, kernel_size, dilation, False, bias,
               additional_keys, rpb_name="bias")


def na3d_qk_with_bias(query, key, bias, kernel_size_d, kernel_size, dilation_d, dilation,
                      additional_keys=None):
    """3-D QK with the bias (may be None) third, and the depth axis's kernel size and dilation
    given apart (kernel (kernel_size_d, kernel_size, kernel_size))."""
    fn = "na3d_qk_with_bias"
    kernel, dil = _split_3d(fn, kernel_size_d, kernel_size, dilation_d, dilation)
    return _qk(fn, 3, query, key, kernel, dil, False, bias, additional_keys, rpb_name="bias")


# ---------------------------------------------------------------------------------------------
# The names before 0.14 (kept through 0.17): natten{1,2,3}dqkrpb, natten{1,2,3}dqk,
# natten{1,2,3}dav


def _split_3d(fn, kernel_size_d, kernel_size, dilation_d, dilation):
    k_d = _ints(fn, "kernel_size_d", kernel_size_d, 1)[0]
    k = _ints(fn, "kernel_size", kernel_size, 1)[0]
    d_d = _ints(fn, "dilation_d", dilation_d, 1)[0]
    d = _ints(fn, "dilation", dilation, 1)[0]
    for name, value in (("kernel_size_d", k_d), ("kernel_size", k)):
        if value < 3 or value % 2 == 0:
            raise ValueError(f"{fn}: {name} must be an odd integer greater than 1 (as NATTEN "
                             f"required), got {value}")
    for name, value in (("dilation_d", d_d), ("dilation", d)):
        if value < 1:
            raise ValueError(f"{fn}: {name} must be at least 1, got {value}")
    return (k_d, k, k), (d_d, d, d)


def natten1dqkrpb(query, key, rpb, kernel_size, dilation):
    """1-D attention weights plus relative positional bias (rpb may be None)."""
    return _qk("natten1dqkrpb", 1, query, key, kernel_size, dilation, False, rpb, None)


def natten2dqkrpb(query, key, rpb, kernel_size, dilation):
    """2-D attention weights plus relative positional bias (rpb may be None); query, key
    [B, heads, X, Y, D] -> [B, heads, X, Y, kernel_size**2]."""
    return _qk("natten2dqkrpb", 2, query, key, kernel_size, dilation, False, rpb, None)


def natten3dqkrpb(query, key, rpb, kernel_size_d, kernel_size, dilation_d, dilation):
    """3-D attention weights plus relative positional bias (rpb may be None), the depth axis's
    kernel size and dilation given apart."""
    fn = "natten3dqkrpb"
    kernel, dil = _split_3d(fn, kernel_size_d, kernel_size, dilation_d, dilation)
    return _qk(fn, 3, query, key, kernel, dil, False, rpb, None)


def natten1dqk(query, key, kernel_size, dilation):
    """1-D attention weights without bias."""
    return _qk("natten1dqk", 1, query, key, kernel_size, dilation, False, None, None)


def natten2dqk(query, key, kernel_size, dilation):
    """2-D attention weights without bias."""
    return _qk("natten2dqk", 2, query, key, kernel_size, dilation, False, None, None)


def natten3dqk(query, key, kernel_size_d, kernel_size, dilation_d, dilation):
    """3-D attention weights without bias, the depth axis's kernel size and dilation apart."""
    fn = "natten3dqk"
    kernel, dil = _split_3d(fn, kernel_size_d, kernel_size, dilation_d, dilation)
    return _qk(fn, 3, query, key, kernel, dil, False, None, None)


def natten1dav(attn, value, kernel_size, dilation):
    """1-D weighted sum over each query's neighborhood."""
    return _av("natten1dav", 1, attn, value, kernel_size, dilation, False, None)


def natten2dav(attn, value, kernel_size, dilation):
    """2-D weighted sum over each query's neighborhood: attn [B, heads, X, Y, kernel_size**2],
    value [B, heads, X, Y, D] -> [B, heads, X, Y, D]."""
    return _av("natten2dav", 2, attn, value, kernel_size, dilation, False, None)


def natten3dav(attn, value, kernel_size_d, kernel_size, dilation_d, dilation):
    """3-D weighted sum over each query's neighborhood, the depth axis's kernel size and
    dilation given apart."""
    fn = "natten3dav"
    kernel, dil = _split_3d(fn, kernel_size_d, kernel_size, dilation_d, dilation)
    return _av(fn, 3, attn, value, kernel, dil, False, None)
