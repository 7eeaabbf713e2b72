"""Per-head windows: each query head (or group of heads) its own window, stride and dilation in
one call.

Heads that share a window run in one call of the kernels (one launch per distinct window); a
group of contiguous heads is passed as a view (no copy), and grouped-query attention is kept
where a group holds whole KV groups (otherwise the group's KV heads are gathered per query head,
which is exact and costs a copy).
"""
import torch

from . import functional
from .windows import as_window

__all__ = ["per_head_attention", "head_groups"]

_NA = {1: functional.na1d, 2: functional.na2d, 3: functional.na3d}


def head_groups(windows, heads, fn="per_head_attention"):
    """[(Window, [query heads])] in order of first appearance, from one window (a gna.Window, a
    kernel size or None: every head) or a list of one per query head."""
    if not isinstance(windows, list):  # one window (or kernel size) for every head
        return [(as_window(windows, "windows"), list(range(heads)))]
    if len(windows) != heads:
        raise ValueError(f"{fn}: windows must hold one window per query head ({heads}), got "
                         f"{len(windows)}")
    groups = {}
    for h, w in enumerate(windows):
        groups.setdefault(as_window(w, f"windows[{h}]"), []).append(h)
    return list(groups.items())


def _select(t, heads, device):
    """t[..., heads, :] as a view when the heads are a contiguous run, else a gathered copy."""
    if heads == list(range(heads[0], heads[0] + len(heads))):
        return t[..., heads[0]:heads[0] + len(heads), :]
    return t.index_select(-2, torch.tensor(heads, device=device))


def _kv_heads(q_heads, ratio):
    """KV heads for a group of query heads: the group's KV heads when it holds whole KV groups
    (GQA kept), else one KV head per query head."""
    kv = sorted({h // ratio for h in q_heads})
    if sorted(q_heads) == [k * ratio + i for k in kv for i in range(ratio)]:
        return kv
    return [h // ratio for h in q_heads]


def per_head_attention(query, key, value, windows, scale=None, additional_keys=None,
                       additional_values=None, return_lse=False, backend="auto"):
    """GNA with a window per query head on heads-last tensors [B, *spatial, H, D] (1 to 3
    spatial axes).

    windows: a gna.Window (every head), or a list of one gna.Window (or kernel size, or None for
    the whole layout) per query head. Other arguments as in gna.na3d; key / value may have fewer
    heads (GQA). Returns out [B, *spatial, Hq, Dv] (and lse [B, *spatial, Hq] with return_lse),
    equal to one gna.na*d call per head.
    """
    rank = query.dim() - 3
    if rank not in _NA:
        raise ValueError(f"per_head_attention: query must have 4 to 6 dims [B, *spatial, H, D], "
                         f"got shape {tuple(query.shape)}")
    heads, heads_kv = int(query.shape[-2]), int(key.shape[-2])
    if heads_kv < 1 or heads % heads_kv:
        raise ValueError(f"per_head_attention: query heads ({heads}) must be a multiple of key "
                         f"heads ({heads_kv})")
    extent = tuple(int(s) for s in query.shape[1:1 + rank])
    groups = head_groups(windows, heads)
    ratio = heads // heads_kv
    outs, lses, order = [], [], []
    for window, q_heads in groups:
        window_, stride, dilation, causal = window.resolve(extent)
        if len(groups) == 1:
            q, k, v, ak, av = query, key, value, additional_keys, additional_values
        else:
            kv_heads = _kv_heads(q_heads, ratio)
            q = _select(query, q_heads, query.device)
            k, v = (_select(t, kv_heads, t.device) for t in (key, value))
            ak, av = (None if t is None else _select(t, kv_heads, t.device)
                      for t in (additional_keys, additional_values))
        result = _NA[rank](q, k, v, window_, stride=stride, dilation=dilation, is_causal=causal,
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


def _restore(t, order, dim):
    """Heads back in their original order, given the order they were computed in."""
    if order == sorted(order):
        return t
    inverse = [0] * len(order)
    for position, h in enumerate(order):
        inverse[h] = position
    return t.index_select(dim, torch.tensor(inverse, device=t.device))
