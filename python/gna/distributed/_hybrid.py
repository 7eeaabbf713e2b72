"""The hybrid of the two modes, for more ranks than the heads allow: P = U x V ranks, rank
r = i U + j; the U ranks of slab i (a slab of axis 0) run Ulysses among themselves (head
groups pipelined, ulysses_attention's exchanges), and the V ranks that hold the same heads j run
halo attention across the slabs. The input is the same as Ulysses': rank r's contiguous shard
of the row-major token sequence (slab i's tokens are contiguous, cut into U shards)."""
import math

import torch.distributed as dist

from ._halo import halo_attention
from ._ulysses import _Pipelined, _check, _check_divisible, _head_groups, layout_of, world

_subgroups = {}


def _global_ranks(group, ranks):
    if group is None:
        return list(range(ranks))
    if hasattr(dist, "get_process_group_ranks"):
        return dist.get_process_group_ranks(group)
    # torch < 2.0: a group's global ranks through the private helper
    return [dist.distributed_c10d._get_global_rank(group, r) for r in range(ranks)]


def subgroups(group, ulysses_size):
    """(the Ulysses group of this rank's slab, the halo group of this rank's heads), created
    once per (group, ulysses_size): every rank of `group` must call this with the same size."""
    key = (group, ulysses_size)
    if key not in _subgroups:
        ranks, rank = world(group)
        members = _global_ranks(group, ranks)
        slabs = ranks // ulysses_size
        mine = [None, None]
        # new_group is collective over the world: every rank creates every group, in order.
        for i in range(slabs):
            g = dist.new_group([members[i * ulysses_size + j] for j in range(ulysses_size)])
            if rank // ulysses_size == i:
                mine[0] = g
        for j in range(ulysses_size):
            g = dist.new_group([members[i * ulysses_size + j] for i in range(slabs)])
            if rank % ulysses_size == j:
                mine[1] = g
        _subgroups[key] = tuple(mine)
    return _subgroups[key]


def hybrid_attention(query, key, value, layout, kernel_size, stride=1, dilation=1,
                     is_causal=False, *, ulysses_size, scale=None, group=None, backend="auto",
                     head_groups=None, exact=None):
    """Neighborhood attention over `group` (P ranks) in the hybrid of Ulysses (within groups of
    ulysses_size = U ranks) and halo attention along axis 0 (across the V = P / U groups).

    query [B, S/P, Hq, D], key [B, S/P, Hkv, D], value [B, S/P, Hkv, Dv]: this rank's contiguous
    shard of the row-major token sequence of `layout` (as ulysses_attention); Hq and Hkv
    divisible by U, layout[0] by V. head_groups as ulysses_attention's (its default from the
    heads per rank, Hkv / U), exact as halo_attention's. Returns this rank's shard of the
    output, [B, S/P, Hq, Dv]; gradients flow to query, key and value.
    """
    fn = "hybrid_attention"
    ranks, _ = world(group)
    layout = layout_of(fn, layout)
    if isinstance(ulysses_size, bool) or not isinstance(ulysses_size, int) or \
            ulysses_size < 1 or ranks % ulysses_size:
        raise ValueError(f"{fn}: ulysses_size must be a positive int dividing the process "
                         f"group's size ({ranks}), got {ulysses_size!r}")
    slabs = ranks // ulysses_size
    if layout[0] % slabs:
        raise ValueError(f"{fn}: layout[0] ({layout[0]}) must be divisible by the halo groups' "
                         f"count ({ranks} ranks / ulysses_size {ulysses_size} = {slabs})")
    tokens = math.prod(layout)
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check(fn, name, t, tokens, ranks)
    _check_divisible(fn, "query heads", query.shape[2], ulysses_size)
    _check_divisible(fn, "key/value heads", key.shape[2], ulysses_size)
    groups = _head_groups(fn, head_groups, key.shape[2] // ulysses_size)
    ulysses_group, halo_group = subgroups(group, ulysses_size)
    local = (layout[0] // slabs,) + layout[1:]

    def attend(leaves, extras):
        q, k, v = (t.reshape(t.shape[0], *local, *t.shape[2:]) for t in leaves)
        out = halo_attention(q, k, v, layout, kernel_size, stride=stride, dilation=dilation,
                             is_causal=is_causal, axis=0, scale=scale, group=halo_group,
                             backend=backend, exact=exact)
        return [out.reshape(out.shape[0], -1, *out.shape[-2:])]

    return _Pipelined.apply((ulysses_size, groups, ulysses_group, attend), query, key, value,
                            None, None, None, None, None)
