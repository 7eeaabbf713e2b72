"""An MMDiT transformer in plain PyTorch, shaped like HunyuanVideo and FLUX: dual-stream blocks
(image and text streams with their own weights, one joint attention) followed by single-stream
blocks (one sequence, attention and MLP in parallel), adaLN modulation from a conditioning
vector, RMS-normalised queries and keys, rotary position embedding over the visual layout's
axes. Weights are random: the model exists to time a forward pass at the real shapes.

Every block calls its attention through `block.attention(q, k, v)` on [B, S, heads, head_dim]
tensors (a DenseJointAttention by default), so gna.install_processors can put a
gna.GnaAttentionProcessor in its place without editing this file.

Simplifications against the published models, none of which changes the shapes or FLOPs of the
blocks: the text encoder output enters through one linear layer (HunyuanVideo refines it with
two more transformer blocks), there is no guidance embedding, and the patch embedding is a
linear layer on already patchified latents.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import gna


@dataclass
class Config:
    layout: tuple            # visual tokens per axis after patchification
    text_len: int            # text tokens (padded length)
    text_position: str       # "after" (HunyuanVideo) or "before" (FLUX)
    hidden: int = 3072
    heads: int = 24
    mlp_ratio: int = 4
    double_blocks: int = 20
    single_blocks: int = 40
    in_channels: int = 64    # latent channels x patch volume
    text_dim: int = 4096
    vector_dim: int = 768
    rope_axes: tuple = (16, 56, 56)  # head-dim share of each rotary axis
    rope_theta: float = 256.0

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @property
    def visual_tokens(self):
        return math.prod(self.layout)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (x.float() * scale).to(x.dtype) * self.weight


class DenseJointAttention(nn.Module):
    """The model's own attention: dense over the joint sequence (PyTorch SDPA)."""

    def __init__(self, text_len, text_position):
        super().__init__()
        self.text_len, self.text_position = text_len, text_position

    def forward(self, q, k, v):
        return gna.dense_joint_attention(q, k, v, self.text_len, text_position=self.text_position)


def rope_tables(cfg, device, dtype):
    """cos, sin [S, head_dim / 2] for the joint sequence: visual tokens rotate by their
    coordinate on each axis (the axis' share of the head dim), text tokens not at all."""
    coords = torch.stack(torch.meshgrid(*[torch.arange(n, device=device, dtype=torch.float32)
                                          for n in cfg.layout], indexing="ij"), -1)
    coords = coords.reshape(-1, len(cfg.layout))
    axes = cfg.rope_axes[-len(cfg.layout):]
    angles = []
    for a, dim in enumerate(axes):
        freqs = cfg.rope_theta ** (-torch.arange(0, dim, 2, device=device,
                                                 dtype=torch.float32) / dim)
        angles.append(coords[:, a:a + 1] * freqs)
    pad = cfg.head_dim // 2 - sum(d // 2 for d in axes)  # leading axes the layout lacks
    visual = torch.cat([torch.zeros(coords.shape[0], pad, device=device)] + angles, dim=-1)
    text = torch.zeros(cfg.text_len, cfg.head_dim // 2, device=device)
    full = torch.cat([visual, text] if cfg.text_position == "after" else [text, visual])
    return full.cos().to(dtype), full.sin().to(dtype)


def apply_rope(x, cos, sin):
    """Rotates (even, odd) channel pairs of x [B, S, H, D] by the tables' angles."""
    even, odd = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.stack([even * c - odd * s, even * s + odd * c], dim=-1).flatten(-2)


def modulate(x, shift, scale):
    return x * (1 + scale[:, None]) + shift[:, None]


class Modulation(nn.Module):
    def __init__(self, hidden, count):
        super().__init__()
        self.count = count
        self.linear = nn.Linear(hidden, count * hidden)

    def forward(self, vec):
        return self.linear(F.silu(vec)).chunk(self.count, dim=-1)


def _mlp(hidden, ratio):
    return nn.Sequential(nn.Linear(hidden, ratio * hidden), nn.GELU(approximate="tanh"),
                         nn.Linear(ratio * hidden, hidden))


class Stream(nn.Module):
    """One stream of a dual-stream block: modulation, qkv, q/k norms, output projection, MLP."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg.hidden
        self.mod = Modulation(h, 6)
        self.norm1 = nn.LayerNorm(h, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(h, 3 * h)
        self.q_norm, self.k_norm = RMSNorm(cfg.head_dim), RMSNorm(cfg.head_dim)
        self.proj = nn.Linear(h, h)
        self.norm2 = nn.LayerNorm(h, elementwise_affine=False, eps=1e-6)
        self.mlp = _mlp(h, cfg.mlp_ratio)
        self.heads = cfg.heads

    def qkv_of(self, x, mod):
        shift, scale = mod[0], mod[1]
        qkv = self.qkv(modulate(self.norm1(x), shift, scale))
        q, k, v = qkv.unflatten(-1, (3, self.heads, -1)).unbind(dim=2)
        return self.q_norm(q), self.k_norm(k), v

    def finish(self, x, attn, mod):
        gate1, shift2, scale2, gate2 = mod[2], mod[3], mod[4], mod[5]
        x = x + gate1[:, None] * self.proj(attn.flatten(-2))
        return x + gate2[:, None] * self.mlp(modulate(self.norm2(x), shift2, scale2))


class DoubleBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.img, self.txt = Stream(cfg), Stream(cfg)
        self.attention = DenseJointAttention(cfg.text_len, cfg.text_position)

    def forward(self, img, txt, vec, rope):
        img_mod, txt_mod = self.img.mod(vec), self.txt.mod(vec)
        iq, ik, iv = self.img.qkv_of(img, img_mod)
        tq, tk, tv = self.txt.qkv_of(txt, txt_mod)
        after = self.cfg.text_position == "after"
        join = lambda a, b: torch.cat([a, b] if after else [b, a], dim=1)  # noqa: E731
        q, k, v = join(iq, tq), join(ik, tk), join(iv, tv)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        out = self.attention(q, k, v)
        n = img.shape[1]
        img_out, txt_out = (out[:, :n], out[:, n:]) if after else (out[:, -n:], out[:, :-n])
        return self.img.finish(img, img_out, img_mod), self.txt.finish(txt, txt_out, txt_mod)


class SingleBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, self.heads, self.mlp_hidden = cfg.hidden, cfg.heads, cfg.mlp_ratio * cfg.hidden
        self.mod = Modulation(h, 3)
        self.norm = nn.LayerNorm(h, elementwise_affine=False, eps=1e-6)
        self.linear1 = nn.Linear(h, 3 * h + self.mlp_hidden)
        self.linear2 = nn.Linear(h + self.mlp_hidden, h)
        self.q_norm, self.k_norm = RMSNorm(cfg.head_dim), RMSNorm(cfg.head_dim)
        self.attention = DenseJointAttention(cfg.text_len, cfg.text_position)

    def forward(self, x, vec, rope):
        shift, scale, gate = self.mod(vec)
        qkv, mlp = self.linear1(modulate(self.norm(x), shift, scale)).split(
            [3 * x.shape[-1], self.mlp_hidden], dim=-1)
        q, k, v = qkv.unflatten(-1, (3, self.heads, -1)).unbind(dim=2)
        q, k = apply_rope(self.q_norm(q), *rope), apply_rope(self.k_norm(k), *rope)
        attn = self.attention(q, k, v).flatten(-2)
        return x + gate[:, None] * self.linear2(torch.cat([attn, F.gelu(mlp, approximate="tanh")],
                                                          dim=-1))


def timestep_embedding(t, dim=256):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device) / half)
    args = t.float()[:, None] * freqs
    return torch.cat([args.cos(), args.sin()], dim=-1)


class Embeddings(nn.Module):
    """Patch, text, timestep and pooled-text embeddings, and the final adaLN projection."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg.hidden
        self.img_in = nn.Linear(cfg.in_channels, h)
        self.txt_in = nn.Linear(cfg.text_dim, h)
        self.time_in = nn.Sequential(nn.Linear(256, h), nn.SiLU(), nn.Linear(h, h))
        self.vector_in = nn.Sequential(nn.Linear(cfg.vector_dim, h), nn.SiLU(), nn.Linear(h, h))
        self.final_mod = Modulation(h, 2)
        self.final_norm = nn.LayerNorm(h, elementwise_affine=False, eps=1e-6)
        self.final = nn.Linear(h, cfg.in_channels)

    def embed(self, x, text, t, pooled):
        vec = self.time_in(timestep_embedding(t).to(x.dtype)) + self.vector_in(pooled)
        return self.img_in(x), self.txt_in(text), vec

    def out(self, img, vec):
        shift, scale = self.final_mod(vec)
        return self.final(modulate(self.final_norm(img), shift, scale))


class MMDiT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embeddings = Embeddings(cfg)
        self.double_blocks = nn.ModuleList([DoubleBlock(cfg) for _ in range(cfg.double_blocks)])
        self.single_blocks = nn.ModuleList([SingleBlock(cfg) for _ in range(cfg.single_blocks)])

    def forward(self, x, text, t, pooled):
        """x [B, N, in_channels] patchified latents (row-major over the layout), text
        [B, text_len, text_dim], t [B] timesteps, pooled [B, vector_dim]."""
        cfg = self.cfg
        rope = rope_tables(cfg, x.device, x.dtype)
        img, txt, vec = self.embeddings.embed(x, text, t, pooled)
        for block in self.double_blocks:
            img, txt = block(img, txt, vec, rope)
        after = cfg.text_position == "after"
        seq = torch.cat([img, txt] if after else [txt, img], dim=1)
        for block in self.single_blocks:
            seq = block(seq, vec, rope)
        n = img.shape[1]
        img = seq[:, :n] if after else seq[:, -n:]
        return self.embeddings.out(img, vec)


def random_inputs(cfg, batch, device, dtype):
    return (torch.randn(batch, cfg.visual_tokens, cfg.in_channels, device=device, dtype=dtype),
            torch.randn(batch, cfg.text_len, cfg.text_dim, device=device, dtype=dtype),
            torch.full((batch,), 500.0, device=device),
            torch.randn(batch, cfg.vector_dim, device=device, dtype=dtype))
