"""Neighborhood attention layers: qkv projection, attention, output projection, on channels-last
inputs [B, *spatial, C]."""
from torch import nn

from . import functional

__all__ = ["NeighborhoodAttention1D", "NeighborhoodAttention2D", "NeighborhoodAttention3D"]


class _NeighborhoodAttention(nn.Module):
    rank = 0
    _attend = None

    def __init__(self, embed_dim, num_heads, kernel_size, stride=1, dilation=1, is_causal=False,
                 qkv_bias=True, proj_drop=0.0):
        super().__init__()
        name = type(self).__name__
        if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
            raise ValueError(f"{name}: num_heads must be a positive int, got {num_heads!r}")
        if (isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim < 1 or
                embed_dim % num_heads):
            raise ValueError(f"{name}: embed_dim must be a positive multiple of num_heads="
                             f"{num_heads}, got {embed_dim!r}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        # The rule's per-axis expansion (and its errors) happen here once, not per call.
        self.kernel_size, self.stride, self.dilation, self.is_causal, _ = functional._rule(
            name, self.rank, kernel_size, stride, dilation, is_causal, None)
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim, bias=qkv_bias)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        if x.dim() != self.rank + 2 or x.shape[-1] != self.embed_dim:
            raise ValueError(f"{type(self).__name__}: input must be [B, {self.rank} spatial dims, "
                             f"{self.embed_dim}], got shape {tuple(x.shape)}")
        qkv = self.qkv(x).unflatten(-1, (3, self.num_heads, self.head_dim))
        q, k, v = qkv.unbind(dim=-3)
        attn = type(self)._attend(q, k, v, self.kernel_size, stride=self.stride,
                                  dilation=self.dilation, is_causal=self.is_causal)
        return self.proj_drop(self.proj(attn.flatten(-2)))

    def extra_repr(self):
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kernel_size="
                f"{tuple(self.kernel_size)}, stride={tuple(self.stride)}, dilation="
                f"{tuple(self.dilation)}, is_causal={tuple(self.is_causal)}")


class NeighborhoodAttention1D(_NeighborhoodAttention):
    """1-D neighborhood attention layer on [B, L, C]."""
    rank = 1
    _attend = staticmethod(functional.na1d)


class NeighborhoodAttention2D(_NeighborhoodAttention):
    """2-D neighborhood attention layer on [B, X, Y, C]."""
    rank = 2
    _attend = staticmethod(functional.na2d)


class NeighborhoodAttention3D(_NeighborhoodAttention):
    """3-D neighborhood attention layer on [B, X, Y, Z, C]."""
    rank = 3
    _attend = staticmethod(functional.na3d)
