"""Dense softmax attention on [B, S, H, D] tensors with a key-padding mask: PyTorch's
scaled_dot_product_attention where torch has it (2.1 and newer; cuDNN / FlashAttention on CUDA),
matmul and softmax otherwise (torch 1.13). Also the logsumexp form the exact merge needs."""
import math

import torch
import torch.nn.functional as F


def _torch_version():
    parts = torch.__version__.split("+")[0].split(".")
    return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in parts[:2])


_VERSION = _torch_version()
HAS_SDPA = hasattr(F, "scaled_dot_product_attention") and _VERSION >= (2, 1)
_SDPA_GQA = _VERSION >= (2, 5)


def _accumulate_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _repeat_kv(t, heads):
    return t if t.shape[-2] == heads else t.repeat_interleave(heads // t.shape[-2], dim=-2)


def attend(query, key, value, key_mask=None, scale=None):
    """softmax(scale q.k) v. query [B, Sq, Hq, D], key [B, Sk, Hkv, D], value [B, Sk, Hkv, Dv]
    (Hq a multiple of Hkv); key_mask [B, Sk] bool (True: attended) or None. Every query must
    have a valid key. Returns [B, Sq, Hq, Dv] in the query's dtype."""
    heads = query.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if HAS_SDPA:
        kwargs = {}
        k, v = key, value
        if heads != key.shape[-2]:
            if _SDPA_GQA:
                kwargs["enable_gqa"] = True
            else:
                k, v = _repeat_kv(key, heads), _repeat_kv(value, heads)
        mask = None if key_mask is None else key_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(query.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), attn_mask=mask, scale=scale,
                                             **kwargs)
        return out.transpose(1, 2)
    acc = _accumulate_dtype(query.dtype)
    k, v = _repeat_kv(key, heads).to(acc), _repeat_kv(value, heads).to(acc)
    s = torch.einsum("bqhd,bkhd->bhqk", query.to(acc), k) * scale
    if key_mask is not None:
        s = s.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), v)
    return out.to(query.dtype)


def attend_with_lse(query, key, value, key_mask, scale=None):
    """attend() computed in float32 (float64 for float64 inputs), with the logsumexp
    [B, Sq, Hq]; a query without a valid key gets out 0 and lse -inf (so that merging by
    logsumexp ignores it), with finite gradients."""
    heads = query.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    acc = _accumulate_dtype(query.dtype)
    k, v = _repeat_kv(key, heads).to(acc), _repeat_kv(value, heads).to(acc)
    s = torch.einsum("bqhd,bkhd->bhqk", query.to(acc), k) * scale
    valid = key_mask[:, None, None, :]
    s = s.masked_fill(~valid, float("-inf"))
    m = s.amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    total = p.sum(dim=-1)
    tiny = torch.finfo(acc).tiny
    out = torch.einsum("bhqk,bkhd->bqhd", p / total.clamp_min(tiny).unsqueeze(-1), v)
    lse = torch.where(total > 0, m.squeeze(-1) + torch.log(total.clamp_min(tiny)),
                      torch.full_like(total, float("-inf")))
    return out.to(query.dtype), lse.transpose(1, 2)
