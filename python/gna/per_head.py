"""Per-head windows: each query head (or group of heads) its own window, stride and dilation in
one call.

Heads whose windows resolve to the same rule form a group. Where the backend that would run the
call runs per-head rules (the library says so: gna_select_backend_heads; the CPU reference
does), every group runs in ONE library call with the rules per head (gna_forward_heads /
gna_backward_heads), forward and backward. Otherwise (a backend without per-head rules, more
than 8 distinct rules, more than 256 query heads, a library older than ABI version 4) each group
makes its own call: a group of contiguous heads is passed as a view (no copy), and grouped-query
attention is kept where a group holds whole KV groups (otherwise the group's KV heads are
gathered per query head, which is exact and costs a copy). The choice is made before any
tracing, from shapes, dtypes, devices and rules alone, so that torch.compile sees one static
graph; rules are plain tuples, so that it traces the grouping without graph breaks.
"""
import ctypes
import functools

import torch

from . import _lib, functional, ops
from ._tensors import dtype_code, ready_strides
from .windows import as_window

__all__ = ["per_head_attention", "resolve_groups", "grouped_attention", "head_rules_of",
           "one_call_backend"]

_NA = {1: functional.na1d, 2: functional.na2d, 3: functional.na3d}


def resolve_groups(windows, heads, extent, fn="per_head_attention"):
    """[(rule, [query heads])] in order of first appearance; rule = (window, stride, dilation,
    is_causal) tuples for the layout `extent`. windows: one gna.Window / kernel size / None
    (dense) for every head, or a list of one per query head."""
    if not isinstance(windows, list):
        return [(_rule_of(as_window(windows, f"{fn}: windows"), extent), list(range(heads)))]
    if len(windows) != heads:
        raise ValueError(f"{fn}: windows must hold one window per query head ({heads}), got "
                         f"{len(windows)}")
    groups = []
    for h, w in enumerate(windows):
        rule = _rule_of(as_window(w, f"{fn}: windows[{h}]"), extent)
        for known, members in groups:
            if known == rule:
                members.append(h)
                break
        else:
            groups.append((rule, [h]))
    return groups


def _rule_of(window, extent):
    return tuple(tuple(x) for x in window.resolve(extent))


def _select(t, heads):
    """t[..., heads, :] as a view when the heads are a contiguous run, else a gathered copy."""
    if heads == list(range(heads[0], heads[0] + len(heads))):
        return t[..., heads[0]:heads[0] + len(heads), :]
    return t.index_select(-2, torch.tensor(heads, device=t.device))


def _kv_heads(q_heads, ratio):
    """KV heads for a group of query heads (ascending): the group's KV heads when it holds
    whole KV groups (GQA kept), else one KV head per query head."""
    kv = sorted({h // ratio for h in q_heads})
    if q_heads == [k * ratio + i for k in kv for i in range(ratio)]:
        return kv
    return [h // ratio for h in q_heads]


def head_rules_of(groups, heads):
    """The C ABI's per-head rules of resolve_groups' output: (window, stride, dilation, causal,
    group_of_head), the first four each group's per-axis values group-major (group g's axis a
    at g * rank + a), the last a group per query head."""
    window, stride, dilation, causal = [], [], [], []
    group_of_head = [0] * heads
    for g, (rule, members) in enumerate(groups):
        w, s, d, c = rule
        window += list(w)
        stride += list(s)
        dilation += list(d)
        causal += [bool(x) for x in c]
        for h in members:
            group_of_head[h] = g
    return window, stride, dilation, causal, group_of_head


def _call_key(tensors, groups, heads, scale, backward, backend):
    """What decides which backend runs a per-head call, as plain values: the tensors' shapes,
    strides, dtype and device (host float16/bfloat16 count as the float32 the op computes
    in), the rules, the scale, the pass and the backend asked for."""
    query = tensors[0]
    host_dtype = ops._host_compute_dtype(tensors)
    dtype = dtype_code(host_dtype or query.dtype, "query")
    if query.is_cuda:
        device = query.device.index if query.device.index is not None else \
            torch.cuda.current_device()
    else:
        device = -1
    described = tuple(None if t is None else (tuple(int(n) for n in t.shape), ready_strides(t))
                      for t in tensors)
    rules = tuple(tuple(x) for x in head_rules_of(groups, heads))
    deterministic = torch.are_deterministic_algorithms_enabled()
    return (described, dtype, device, rules, scale, bool(backward), backend, deterministic)


@functools.lru_cache(maxsize=4096)
def _backend_for_key(key):
    (described, dtype, device, rules, scale, backward, backend, deterministic) = key
    rank = len(described[0][0]) - 3
    window, stride, dilation, causal, group_of_head = (list(x) for x in rules)
    params = _lib.make_params(window[:rank], stride[:rank], dilation[:rank], causal[:rank], scale)
    head_rules = _lib.make_head_rules(rank, window, stride, dilation, causal, group_of_head)
    dims = ctypes.c_int64 * _lib.MAX_TENSOR_RANK
    views = [None if d is None else
             _lib.Tensor(64, dtype, len(d[0]), dims(*d[0]), dims(*d[1]), device, 0)
             for d in described]  # 64: a stand-in address, never read (nothing runs)
    opts = _lib.Options()
    if backend and backend != "auto":
        opts.backend = backend.encode()
    opts.deterministic = 1 if deterministic else 0
    name = ctypes.create_string_buffer(64)
    status = _lib.lib.gna_select_backend_heads(
        ctypes.byref(params), ctypes.byref(head_rules),
        *[None if g is None else ctypes.byref(g) for g in views], 1 if backward else 0,
        ctypes.byref(opts), name, 64)
    if status == _lib.STATUS_UNSUPPORTED:
        return None
    _lib.check(status)
    return name.value.decode()


# torch.compile takes the answer as a constant of the traced graph (it depends on plain values).
@functional._constant_result
def _backend_for(key):
    return _backend_for_key(key)


def one_call_backend(query, key, value, groups, scale=None, additional_keys=None,
                     additional_values=None, backward=False, backend="auto"):
    """Name of the backend that runs every group of resolve_groups' output in one library call
    (the forward, or the backward with backward=True); None when the call must be made once per
    group (no backend runs per-head rules for it, more than 8 groups, more than 256 query heads,
    a library without per-head rules). Raises ValueError for invalid rules or tensors."""
    heads = int(query.shape[-2])
    if (not _lib.has_head_rules or len(groups) > _lib.MAX_HEAD_GROUPS or
            heads > _lib.MAX_HEADS_WITH_RULES):
        return None
    tensors = (query, key, value, additional_keys, additional_values)
    return _backend_for(_call_key(tensors, groups, heads, functional._scale(
        "per_head_attention", scale), backward, backend))


def _needs_backward(tensors):
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _one_call(query, key, value, groups, scale, additional_keys, additional_values, return_lse,
              backend):
    """(out, lse) through one library call with the rules per head, when a backend runs them
    for this call (forward, and backward where gradients are wanted); None otherwise."""
    if len(groups) < 2:
        return None  # one rule: the plain call
    tensors = (query, key, value, additional_keys, additional_values)
    for backward in (False, True) if _needs_backward(tensors) else (False,):
        if one_call_backend(query, key, value, groups, scale, additional_keys, additional_values,
                            backward, backend) is None:
            return None
    window, stride, dilation, causal, group_of_head = head_rules_of(groups, int(query.shape[-2]))
    return ops.attention_heads(query, key, value, additional_keys, additional_values, window,
                               stride, dilation, causal, group_of_head,
                               functional._scale("per_head_attention", scale), backend,
                               bool(return_lse))


def grouped_attention(query, key, value, groups, scale=None, additional_keys=None,
                      additional_values=None, return_lse=False, backend="auto",
                      precision="auto"):
    """GNA with the rule of each group of query heads (resolve_groups' output), heads-last
    tensors: one library call for every group where the backend runs per-head rules (see
    one_call_backend), else one gna.na*d call per group (always with precision "fp8": the
    scheme's scales are per head, so each group's call quantizes alike)."""
    rank = query.dim() - 3
    heads, heads_kv = int(query.shape[-2]), int(key.shape[-2])
    if heads_kv < 1 or heads % heads_kv:
        raise ValueError(f"per_head_attention: query heads ({heads}) must be a multiple of key "
                         f"heads ({heads_kv})")
    if not isinstance(backend, str):
        raise ValueError(f"per_head_attention: backend must be a string, got {backend!r}")
    functional._check_tensors("per_head_attention", query, key, value, additional_keys,
                              additional_values)
    fused = None if precision != "auto" else _one_call(
        query, key, value, groups, scale, additional_keys, additional_values, return_lse, backend)
    if fused is not None:
        return fused if return_lse else fused[0]
    ratio = heads // heads_kv
    outs, lses, order = [], [], []
    for rule, q_heads in groups:
        if len(groups) == 1:
            q, k, v, ak, av = query, key, value, additional_keys, additional_values
        else:
            kv_heads = _kv_heads(q_heads, ratio)
            q = _select(query, q_heads)
            k, v = _select(key, kv_heads), _select(value, kv_heads)
            ak, av = (None if t is None else _select(t, kv_heads)
                      for t in (additional_keys, additional_values))
        window, stride, dilation, causal = (list(x) for x in rule)
        result = _NA[rank](q, k, v, window, stride=stride, dilation=dilation, is_causal=causal,
                           scale=scale, additional_keys=ak, additional_values=av,
                           return_lse=return_lse, backend=backend, precision=precision)
        out, lse = result if return_lse else (result, None)
        outs.append(out)
        lses.append(lse)
        order += q_heads
    if len(groups) == 1:
        return (outs[0], lses[0]) if return_lse else outs[0]
    out = _restore(torch.cat(outs, dim=-2), order, -2)
    if not return_lse:
        return out
    return out, _restore(torch.cat(lses, dim=-1), order, -1)


def per_head_attention(query, key, value, windows, scale=None, additional_keys=None,
                       additional_values=None, return_lse=False, backend="auto"):
    """GNA with a window per query head on heads-last tensors [B, *spatial, H, D] (1 to 3
    spatial axes).

    windows: a gna.Window (or kernel size; None: the whole layout) for every head, or a list of
    one per query head. Other arguments as in gna.na3d; key / value may have fewer heads (GQA).
    Returns out [B, *spatial, Hq, Dv] (and lse [B, *spatial, Hq] with return_lse), equal to one
    gna.na*d call per head.
    """
    rank = query.dim() - 3
    if rank not in _NA:
        raise ValueError(f"per_head_attention: query must have 4 to 6 dims [B, *spatial, H, D], "
                         f"got shape {tuple(query.shape)}")
    extent = tuple(int(s) for s in query.shape[1:1 + rank])
    groups = resolve_groups(windows, int(query.shape[-2]), extent)
    return grouped_attention(query, key, value, groups, scale, additional_keys,
                             additional_values, return_lse, backend)


def _restore(t, order, dim):
    """Heads back in their original order, given the order they were computed in."""
    if order == sorted(order):
        return t
    inverse = [0] * len(order)
    for position, h in enumerate(order):
        inverse[h] = position
    return t.index_select(dim, torch.tensor(inverse, device=t.device))
