"""The peers, called as their users call them: dense SDPA through the cuDNN and FlashAttention
backends, and FlexAttention (compiled) with the same mask as gna, tokens in tiled order.

FlexAttention's mask is arithmetic, as a FlexAttention user writes it: per axis, the window
start of docs/rule.md section 2 (include/gna/core/axis_rule.hpp's window_start, in torch integer
ops on the query's coordinate) and a range test on the key's. (A mask that gathers each query's
key range from tables was measured 4.8x slower on hdit 13x13: it overstated gna against Flex.)
It is checked, for every case it is built for, against gna's own rule: per axis, two 1-D
attention calls of gna's CPU reference with sharp scores (key j scored -j, then +j) and values j
return every query's first and last attended key, which must equal the arithmetic form's.
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


def axis_window(q, extent, window, stride, dilation, causal):
    """Keys [first, last] (full coordinates) attended by queries q (an integer tensor) on one
    axis: rule.md section 2 in torch integer ops, on the query's dilation group (g = q mod d,
    group length n = ceil((L - g) / d), ig = q div d)."""
    g, ig = q % dilation, q // dilation
    n = (extent - g + dilation - 1) // dilation
    base = (ig // stride) * stride
    if causal:
        leader = torch.minimum(base + (stride - 1), n - 1)
        start = torch.clamp(leader - window + 1, min=0)
        end = ig + 1
    else:
        leader = torch.minimum(base + stride // 2, n - 1)
        start = torch.minimum(torch.clamp(leader - window // 2, min=0), n - window)
        end = start + window
    return g + start * dilation, g + (end - 1) * dilation


def check_axis_window(extent, window, stride, dilation, causal):
    """The arithmetic window against gna's CPU reference on every query of the axis."""
    q = torch.arange(extent)
    first, last = axis_window(q, extent, window, stride, dilation, causal)
    want_first, want_last = axis_key_ranges(extent, window, stride, dilation, causal)
    bad = ((first != want_first) | (last != want_last)).nonzero().flatten()
    if bad.numel():
        i = int(bad[0])
        raise AssertionError(
            f"FlexAttention mask: axis (extent {extent}, window {window}, stride {stride}, "
            f"dilation {dilation}, causal {causal}): query {i} attends keys [{int(first[i])}, "
            f"{int(last[i])}] by the arithmetic form, [{int(want_first[i])}, "
            f"{int(want_last[i])}] by gna")


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


def make_mask_mod(case, device=None):
    """FlexAttention's mask_mod for the case (tokens in its tiled order), its arithmetic window
    checked against gna's rule on every axis first."""
    rank, layout, tile = case.rank, case.layout, case.tile
    rules = [(layout[a], case.window[a], case.strides[a], case.dilations[a], case.causals[a])
             for a in range(rank)]
    for rule in rules:
        check_axis_window(*rule)

    def mask_mod(b, h, q_idx, kv_idx):
        qc, kc = token_coords(q_idx, layout, tile), token_coords(kv_idx, layout, tile)
        ok = None
        for a, (extent, window, stride, dilation, causal) in enumerate(rules):
            first, last = axis_window(qc[a], extent, window, stride, dilation, causal)
            m = (kc[a] >= first) & (kc[a] <= last)
            if dilation > 1:
                m = m & (kc[a] % dilation == qc[a] % dilation)
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
