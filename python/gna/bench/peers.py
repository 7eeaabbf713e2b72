"""The peers, called as their users call them: dense SDPA through the cuDNN and FlashAttention
backends, and FlexAttention (compiled) with the same mask as gna, tokens in tiled order.

FlexAttention's mask is read off gna's own CPU reference, never re-derived: per axis, two 1-D
attention calls with sharp scores (key j scored -j, then +j) and values j return, for every
query, its first and last attended key; a key is attended iff on every axis it lies in that
range and in the query's dilation group.
"""
import math

import torch

import gna

_SHARP = 40.0  # neighbouring keys' weights differ by exp(-40): the soft argmin is exact


def axis_key_ranges(extent, window, stride, dilation, causal):
    """First and last attended key (full coordinates) of each query on one axis."""
    pos = torch.arange(extent, dtype=torch.float64).reshape(1, extent, 1, 1)
    ones = torch.ones_like(pos)
    kw = dict(stride=stride, dilation=dilation, is_causal=causal, scale=_SHARP)
    first = gna.na1d(ones, -pos, pos, window, **kw).flatten()
    last = gna.na1d(ones, pos, pos, window, **kw).flatten()
    return first.round().long(), last.round().long()


def token_coords(idx, layout, tile):
    """Per-axis coordinates of flattened token indices (row-major, or tile by tile)."""
    rank = len(layout)
    if tile is None:
        out, rem = [], idx
        for a in reversed(range(rank)):
            out.append(rem % layout[a])
            rem = rem // layout[a]
        return out[::-1]
    grid = [layout[a] // tile[a] for a in range(rank)]
    volume = math.prod(tile)
    t, o = idx // volume, idx % volume
    tc, oc = [], []
    for a in reversed(range(rank)):
        tc.append(t % grid[a])
        t = t // grid[a]
        oc.append(o % tile[a])
        o = o // tile[a]
    tc, oc = tc[::-1], oc[::-1]
    return [tc[a] * tile[a] + oc[a] for a in range(rank)]


def make_mask_mod(case, device):
    rank = case.rank
    dilation = case.dilations
    ranges = [axis_key_ranges(case.layout[a], case.window[a], case.strides[a], dilation[a],
                              case.causals[a])
              for a in range(rank)]
    first = [r[0].to(device) for r in ranges]
    last = [r[1].to(device) for r in ranges]
    layout, tile = case.layout, case.tile

    def mask_mod(b, h, q_idx, kv_idx):
        qc, kc = token_coords(q_idx, layout, tile), token_coords(kv_idx, layout, tile)
        ok = None
        for a in range(rank):
            m = (kc[a] >= first[a][qc[a]]) & (kc[a] <= last[a][qc[a]])
            if dilation[a] > 1:
                m = m & (kc[a] % dilation[a] == qc[a] % dilation[a])
            ok = m if ok is None else ok & m
        return ok

    return mask_mod


def to_tiled_tokens(x, case):
    """[B, *layout, H, D] -> [B, H, N, D] with tokens in the case's flex order."""
    b, h, d = x.shape[0], x.shape[-2], x.shape[-1]
    if case.tile is None:
        return x.reshape(b, -1, h, d).transpose(1, 2).contiguous()
    rank = case.rank
    split = []
    for a in range(rank):
        split += [case.layout[a] // case.tile[a], case.tile[a]]
    y = x.reshape(b, *split, h, d)
    grid_axes = [1 + 2 * a for a in range(rank)]
    tile_axes = [2 + 2 * a for a in range(rank)]
    head, dim = 1 + 2 * rank, 2 + 2 * rank
    y = y.permute(0, head, *grid_axes, *tile_axes, dim)
    return y.reshape(b, h, -1, d).contiguous()


def sdpa(backend_name):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[
        backend_name]

    def call(q, k, v):
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    return call


_flex_compiled = None


def flex_attention():
    global _flex_compiled
    if _flex_compiled is None:
        from torch.nn.attention.flex_attention import flex_attention as flex
        import torch._dynamo
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        _flex_compiled = torch.compile(flex, dynamic=False)
    return _flex_compiled


def flex_block_mask(case, device):
    from torch.nn.attention.flex_attention import create_block_mask
    n = case.tokens
    return create_block_mask(make_mask_mod(case, device), None, None, n, n, device=device,
                              _compile=True)
