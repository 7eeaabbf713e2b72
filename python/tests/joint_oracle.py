"""A float64 oracle for joint attention and per-head windows, built independently of the
library from the rule of docs/rule.md section 2: per-axis masks, their AND over axes, the joint
sequence's mask (text keys valid up to each sample's length) and dense masked attention."""
import math

import torch


def axis_mask(extent, window, stride=1, dilation=1, causal=False):
    """[L, L] bool: query i attends key j on one axis."""
    mask = torch.zeros(extent, extent, dtype=torch.bool)
    for i in range(extent):
        group, inner = i % dilation, i // dilation
        n = -(-(extent - group) // dilation)
        if causal:
            leader = min((inner // stride) * stride + stride - 1, n - 1)
            keys = range(max(leader - window + 1, 0), inner + 1)
        else:
            leader = min((inner // stride) * stride + stride // 2, n - 1)
            start = min(max(leader - window // 2, 0), n - window)
            keys = range(start, start + window)
        for j in keys:
            mask[i, j * dilation + group] = True
    return mask


def _per_axis(value, rank):
    return list(value) if isinstance(value, (list, tuple)) else [value] * rank


def layout_mask(layout, window, stride=1, dilation=1, causal=False):
    """[N, N] bool over row-major tokens of `layout`: the AND of the per-axis masks."""
    rank = len(layout)
    w, s, d, c = (_per_axis(x, rank) for x in (window, stride, dilation, causal))
    mask = torch.ones(1, 1, dtype=torch.bool)
    for a in range(rank):
        m = axis_mask(layout[a], w[a], s[a], d[a], c[a])
        n = mask.shape[0]
        mask = (mask[:, None, :, None] & m[None, :, None, :]).reshape(n * layout[a],
                                                                      n * layout[a])
    return mask


def sta_as_gna(tile, window_tiles):
    """STA with tiles `tile` and `window_tiles` tiles per axis = GNA window tile*tiles, stride
    tile (docs/rule.md section 4, for layouts that are whole tiles)."""
    return [t * w for t, w in zip(tile, window_tiles)], list(tile)


def joint_mask(visual_masks, text_len, lengths, batch, position="after"):
    """[B, H, S, S] bool. visual_masks: [H, N, N] (per head) or [N, N]; lengths: valid text
    tokens per sample (None: all). Visual queries: their visual mask plus valid text keys; text
    queries (padding rows too): every valid key."""
    if visual_masks.dim() == 2:
        visual_masks = visual_masks[None]
    heads, n = visual_masks.shape[0], visual_masks.shape[1]
    s = n + text_len
    lengths = [text_len] * batch if lengths is None else [int(x) for x in lengths]
    out = torch.zeros(batch, heads, s, s, dtype=torch.bool)
    vis = slice(0, n) if position == "after" else slice(text_len, s)
    txt0 = n if position == "after" else 0
    for b in range(batch):
        valid_key = torch.zeros(s, dtype=torch.bool)
        valid_key[vis] = True
        valid_key[txt0:txt0 + lengths[b]] = True
        out[b, :, :, :] = valid_key  # text queries: every valid key
        out[b, :, vis, vis] = visual_masks
        out[b, :, vis, txt0:txt0 + text_len] = valid_key[txt0:txt0 + text_len]
    return out


def masked_attention(q, k, v, mask, scale=None):
    """float64 attention of q [B, S, Hq, D] over k, v [B, S, Hkv, D] with mask [B, H|1, S, S]."""
    hq, hkv = q.shape[2], k.shape[2]
    kf = k.double().repeat_interleave(hq // hkv, dim=2)
    vf = v.double().repeat_interleave(hq // hkv, dim=2)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), kf) * scale
    s = s.masked_fill(~mask, float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), vf)
