"""Context parallelism over torch.distributed: neighborhood attention on a token sequence sharded
across the ranks of a process group (NCCL on GPUs, gloo on CPUs).

Ulysses (head-parallel): each rank holds a contiguous shard of the row-major token sequence of a
layout, all heads. One all-to-all regroups the shards into all tokens of H / P heads, each rank
runs gna's attention over the whole layout for its heads, and a second all-to-all returns the
output to sequence shards. Exact (every rank sees the full layout of its heads), differentiable
(the backward runs the same two exchanges on the gradients).
"""
import torch
import torch.distributed as dist

from . import functional

__all__ = ["ulysses_attention", "shard_sequence", "gather_sequence"]


def _world(group):
    return dist.get_world_size(group), dist.get_rank(group)


def _exchange(x, group):
    """Equal-split all-to-all of the leading dim (block r goes to rank r). Both buffers dense:
    the collective reads and writes them as such (a gradient may arrive with other strides)."""
    x = x.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dist.all_to_all_single(out, x, group=group)
    return out


class _AllToAll(torch.autograd.Function):
    """An equal-split all-to-all is its own adjoint: block (r, s) travels from rank r, slot s to
    rank s, slot r, and the gradient travels back the same way."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _exchange(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _exchange(grad, ctx.group), None


def _to_heads(x, ranks, group):
    """[B, S/P, H, D] sequence shard -> [B, S, H/P, D]: all tokens of this rank's heads."""
    b, s, h, d = x.shape
    blocks = x.reshape(b, s, ranks, h // ranks, d).permute(2, 0, 1, 3, 4)  # by destination
    got = _AllToAll.apply(blocks.contiguous(), group)  # [P (source shard), B, S/P, H/P, D]
    return got.permute(1, 0, 2, 3, 4).reshape(b, ranks * s, h // ranks, d)


def _to_sequence(x, ranks, group):
    """[B, S, H/P, D] -> [B, S/P, H, D]: the inverse of _to_heads."""
    b, s, h, d = x.shape
    blocks = x.reshape(b, ranks, s // ranks, h, d).permute(1, 0, 2, 3, 4)  # by destination
    got = _AllToAll.apply(blocks.contiguous(), group)  # [P (source heads), B, S/P, H/P, D]
    return got.permute(1, 2, 0, 3, 4).reshape(b, s // ranks, ranks * h, d)


def _check_divisible(name, value, ranks):
    if value % ranks:
        raise ValueError(f"ulysses_attention: {name} ({value}) must be divisible by the process "
                         f"group's size ({ranks})")


def ulysses_attention(query, key, value, layout, kernel_size, stride=1, dilation=1,
                      is_causal=False, scale=None, additional_keys=None, additional_values=None,
                      group=None, backend="auto"):
    """Neighborhood attention over a sequence sharded across `group` (default: the world).

    query [B, S/P, Hq, D], key [B, S/P, Hkv, D], value [B, S/P, Hkv, Dv]: this rank's contiguous
    shard (rank r holds tokens [r S/P, (r+1) S/P)) of the row-major token sequence of `layout`
    (1 to 3 axes, S = prod(layout)); Hq and Hkv divisible by the group's size P.
    additional_keys / additional_values [B, Nadd, Hkv, D / Dv]: tokens every query attends to
    (e.g. text), the same on every rank. The rule's arguments are those of gna.na1d/2d/3d.
    Returns this rank's shard of the output, [B, S/P, Hq, Dv]; gradients flow to every input.
    """
    ranks, rank = _world(group)
    layout = tuple(int(e) for e in layout)
    if not 1 <= len(layout) <= 3:
        raise ValueError(f"ulysses_attention: layout must have 1 to 3 axes, got {layout}")
    tokens = 1
    for e in layout:
        tokens *= e
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 4:
            raise ValueError(f"ulysses_attention: {name} must be [B, S/P, H, D], got shape "
                             f"{tuple(t.shape)}")
        if t.shape[1] * ranks != tokens:
            raise ValueError(f"ulysses_attention: {name} holds {t.shape[1]} tokens per rank; "
                             f"layout {layout} over {ranks} ranks needs {tokens / ranks:g}")
    _check_divisible("query heads", query.shape[2], ranks)
    _check_divisible("key/value heads", key.shape[2], ranks)
    q, k, v = (_to_heads(t, ranks, group) for t in (query, key, value))
    extra = {}
    if additional_keys is not None or additional_values is not None:
        if additional_keys is None or additional_values is None:
            raise ValueError("ulysses_attention: additional_keys and additional_values go "
                             "together")
        heads = key.shape[2] // ranks
        extra = dict(additional_keys=additional_keys[:, :, rank * heads:(rank + 1) * heads],
                     additional_values=additional_values[:, :, rank * heads:(rank + 1) * heads])
    na = (functional.na1d, functional.na2d, functional.na3d)[len(layout) - 1]
    spatial = lambda t: t.reshape(t.shape[0], *layout, t.shape[2], t.shape[3])  # noqa: E731
    out = na(spatial(q), spatial(k), spatial(v), kernel_size, stride=stride, dilation=dilation,
             is_causal=is_causal, scale=scale, backend=backend, **extra)
    return _to_sequence(out.reshape(q.shape[0], tokens, out.shape[-2], out.shape[-1]), ranks,
                        group)


def shard_sequence(x, group=None):
    """This rank's contiguous shard [B, S/P, ...] of a [B, S, ...] tensor (S divisible by P)."""
    ranks, rank = _world(group)
    if x.shape[1] % ranks:
        raise ValueError(f"shard_sequence: {x.shape[1]} tokens do not split over {ranks} ranks")
    n = x.shape[1] // ranks
    return x[:, rank * n:(rank + 1) * n]


def gather_sequence(x, group=None):
    """The whole [B, S, ...] tensor from every rank's shard [B, S/P, ...] (not differentiable)."""
    ranks, _ = _world(group)
    parts = [torch.empty_like(x) for _ in range(ranks)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=1)
