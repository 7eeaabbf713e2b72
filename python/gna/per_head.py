"""Per-head windows: each query head (or group of heads) its own window, stride and dilation in
one call.

Heads whose windows resolve to the same rule run in one call of the kernels (one launch per
distinct rule); a group of contiguous heads is passed as a view (no copy), and grouped-query
attention is kept where a group holds whole KV groups (otherwise the group's KV heads are
gathered per query head, which is exact and costs a copy). Rules are plain tuples, so that
torch.compile traces the grouping without graph breaks.
"""
import torch

from . import functional
from .windows import as_window

__all__ = ["per_head_attention", "resolve_groups", "grouped_attention"]

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


def grouped_attention(query, key, value, groups, scale=None, additional_keys=None,
                      additional_values=None, return_lse=False, backend="auto"):
    """GNA with the rule of each group of query heads (resolve_groups' output), heads-last
    tensors; one gna.na*d call per group."""
    rank = query.dim() - 3
    heads, heads_kv = int(query.shape[-2]), int(key.shape[-2])
    if heads_kv < 1 or heads % heads_kv:
        raise ValueError(f"per_head_attention: query heads ({heads}) must be a multiple of key "
                         f"heads ({heads_kv})")
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
                           return_lse=return_lse, backend=backend)
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
