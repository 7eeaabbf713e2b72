"""A pure-PyTorch, dense-masked implementation of NATTEN's legacy QK / AV operators, for the tests:
the window rule of docs/rule.md section 2 (stride 1) written out here on its own, independent of the
library, and the operators computed through dense [N, N] score and weight matrices.

Layout as NATTEN's: heads-first [B, heads, *spatial, D]; weights [B, heads, *spatial, prod(K)],
slots row-major over the window, -inf in slots causal masking removes; rpb [heads, 2K-1 per
axis] added at index K-1 + (key' - query') per axis (coordinates inside the dilation group).
"""
import functools
import math

import torch


def axis_window(extent, kernel, dilation, causal):
    """For each query coordinate on one axis: the key coordinate of each of the K slots (-1
    where the slot is masked) and the bias index K-1 + (key' - query') of each slot."""
    keys = torch.empty(extent, kernel, dtype=torch.long)
    rel = torch.empty(extent, kernel, dtype=torch.long)
    for i in range(extent):
        group, i_g = i % dilation, i // dilation
        group_len = (extent - group + dilation - 1) // dilation
        if causal:
            start = max(i_g - kernel + 1, 0)
        else:
            start = min(max(i_g - kernel // 2, 0), group_len - kernel)
        for s in range(kernel):
            j_g = start + s
            keys[i, s] = j_g * dilation + group if (not causal or j_g <= i_g) else -1
            rel[i, s] = kernel - 1 + j_g - i_g
    return keys, rel


@functools.lru_cache(maxsize=None)
def window_table(spatial, kernel, dilation, causal):
    """Flattened key index [N, W] (0 where masked), validity [N, W] and flattened bias index
    [N, W] over all axes (N = prod(spatial), W = prod(kernel), both row-major)."""
    rank = len(spatial)
    key_flat = torch.zeros([1] * (2 * rank), dtype=torch.long)
    rel_flat = torch.zeros([1] * (2 * rank), dtype=torch.long)
    valid = torch.ones([1] * (2 * rank), dtype=torch.bool)
    for a in range(rank):
        keys, rel = axis_window(spatial[a], kernel[a], dilation[a], causal[a])
        shape = [1] * (2 * rank)
        shape[a], shape[rank + a] = spatial[a], kernel[a]
        keys, rel = keys.view(shape), rel.view(shape)
        key_flat = key_flat * spatial[a] + keys.clamp(min=0)
        rel_flat = rel_flat * (2 * kernel[a] - 1) + rel
        valid = valid & (keys >= 0)
    n, w = math.prod(spatial), math.prod(kernel)
    full = list(spatial) + list(kernel)
    return (key_flat.expand(full).reshape(n, w), valid.expand(full).reshape(n, w),
            rel_flat.expand(full).reshape(n, w))


def _per_axis(value, rank, kind=int):
    if isinstance(value, kind):
        return (value,) * rank
    return tuple(value)


def na_qk(query, key, kernel_size, dilation=1, is_causal=False, rpb=None):
    """Weights [B, H, *spatial, W]: dense Q K^T gathered at each query's window, plus rpb."""
    rank = query.dim() - 3
    b, h, d = query.shape[0], query.shape[1], query.shape[-1]
    spatial = tuple(query.shape[2:-1])
    kernel, dil = _per_axis(kernel_size, rank), _per_axis(dilation, rank)
    causal = _per_axis(is_causal, rank, bool)
    idx, valid, rel = (t.to(query.device) for t in window_table(spatial, kernel, dil, causal))
    n, w = idx.shape
    scores = torch.matmul(query.reshape(b, h, n, d), key.reshape(b, h, n, d).transpose(-1, -2))
    attn = scores.gather(-1, idx.expand(b, h, n, w))
    if rpb is not None:
        attn = attn + rpb.to(attn.dtype).reshape(h, -1)[:, rel]
    attn = attn.masked_fill(~valid, float("-inf"))
    return attn.reshape(b, h, *spatial, w)


def na_av(attn, value, kernel_size, dilation=1, is_causal=False):
    """Output [B, H, *spatial, D]: the weights scattered into a dense [N, N] matrix, times V."""
    rank = value.dim() - 3
    b, h, d = value.shape[0], value.shape[1], value.shape[-1]
    spatial = tuple(value.shape[2:-1])
    kernel, dil = _per_axis(kernel_size, rank), _per_axis(dilation, rank)
    causal = _per_axis(is_causal, rank, bool)
    idx, valid, _ = (t.to(value.device) for t in window_table(spatial, kernel, dil, causal))
    n, w = idx.shape
    weights = attn.to(value.dtype).reshape(b, h, n, w)
    weights = torch.where(valid, weights, torch.zeros((), dtype=weights.dtype,
                                                      device=weights.device))
    dense = torch.zeros(b, h, n, n, dtype=value.dtype, device=value.device)
    dense = dense.scatter_add(-1, idx.expand(b, h, n, w), weights)
    return torch.matmul(dense, value.reshape(b, h, n, d)).reshape(b, h, *spatial, d)


class LegacyBackend:
    """NATTEN's 2-D legacy names on the dense reference (a backend for the natten shim)."""

    @staticmethod
    def natten2dqkrpb(query, key, rpb, kernel_size, dilation):
        return na_qk(query, key, kernel_size, dilation, rpb=rpb)

    @staticmethod
    def natten2dav(attn, value, kernel_size, dilation):
        return na_av(attn, value, kernel_size, dilation)
