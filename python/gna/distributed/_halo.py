"""Halo (sequence-parallel along one axis) context parallelism: each rank holds a slab of
consecutive coordinates of one axis of the layout, all heads, and receives from its neighbours
the key/value rows its queries' windows reach (the halo)."""
import functools

import torch
import torch.distributed as dist

from .. import _lib, functional, ops, simulator
from ..slab import key_range, slab_attention, slab_backend
from ._ulysses import _NA


def _world(group):
    return dist.get_world_size(group), dist.get_rank(group)


def _ceil_to(x, unit):
    return -(-x // unit) * unit


def _extended_ranges(extent, ranks, window, stride, dilation, causal):
    """[start, end) of every rank's extended slab along the sharded axis (global coordinates).

    The halo, dilation * (window - 1 + stride) rows, bounds how far a window reaches from its
    query (docs/rule.md 2.3: a window starts from its stride run's leader, within a run of the
    query, and the clamp at the layout's edges moves it towards the query), on the left, and on
    the right unless causal (a causal window ends at its query). Both ends of a slab sit on
    multiples of dilation * stride or on the layout's edges, so its dilation groups and stride
    runs are the global ones: every own query gets the global leader and, its window lying
    inside the slab or clamped at the same edge, the global window. A slab spans at least
    window * dilation rows, so that the rule is valid on it."""
    slab = extent // ranks
    unit = dilation * stride
    halo = _ceil_to(dilation * (window - 1 + stride), unit)
    ranges = []
    for r in range(ranks):
        start = max(0, (r * slab) // unit * unit - halo)
        end = _ceil_to((r + 1) * slab, unit) + (0 if causal else halo)
        end = max(end, _ceil_to(start + window * dilation, unit))
        ranges.append((start, min(extent, end)))
    return ranges


def _overlap(a0, a1, b0, b1):
    return max(a0, b0), min(a1, b1)


def _query_pads(layout, window, stride, dilation, causal, axis, ranks, head_dim, backward):
    """Per rank, the rows of axis `axis` its exact slab's queries start before its own in a
    forward-only call: the Hopper kernels start a Q tile on a tensor's first row only (a TMA box
    may not start before it), so a slab whose first row is off the grid of the whole layout's Q
    tile would run smaller, slower tiles; its queries start on that grid instead, the rows
    before its own being zero queries whose outputs are dropped. None where the backward runs
    too (the backward's tiles for such a padded slab measured slower than for the slab itself:
    hunyuan rank 1 of 2 on an H100, forward + backward 117.8 ms padded against 98.6), where the
    library cannot say which tile the forward runs (no simulator), or where the axis is dilated
    (its slabs start inside dilation groups)."""
    q_tile = None if backward else _forward_q_tile(
        tuple(layout), tuple(window), tuple(stride), tuple(dilation), tuple(causal), head_dim)
    if q_tile is None or dilation[axis] != 1:
        return [0] * ranks
    slab = layout[axis] // ranks
    return [(r * slab) % q_tile[axis] for r in range(ranks)]


@functools.lru_cache(maxsize=256)
def _forward_q_tile(layout, window, stride, dilation, causal, head_dim):
    """The whole layout's Hopper forward Q tile, or None where the library cannot say."""
    if not _lib.has_simulator or not hasattr(_lib.lib, "gna_sim_kernel_tiles"):
        return None
    try:
        return simulator.kernel_tiles(layout, window, stride, dilation, causal,
                                      kernel="hopper forward", head_dim=head_dim)[0]
    except (ValueError, RuntimeError):  # a head dim or rule the chooser does not take
        return None


def query_pads(layout, kernel_size, stride=1, dilation=1, is_causal=False, axis=0, *,
               world_size, head_dim=128, backward=False):
    """Per rank of `world_size`, the zero query rows halo_attention puts before the rank's own
    on exact slabs in a forward-only call, so that its queries start on the grid of the Hopper
    forward's Q tile (the whole layout's tiles run; a slab off that grid would run smaller,
    slower ones): the rank's first row modulo the tile's side on `axis`; zeros where the
    backward runs too (backward=True: inputs that require grad), on a dilated axis or where the
    library cannot say which tile runs."""
    fn = "query_pads"
    layout = _layout(fn, layout)
    window, strides, dilations, causal = _axis_rule(fn, layout, kernel_size, stride, dilation,
                                                    is_causal, axis)
    for name, n in (("world_size", world_size), ("head_dim", head_dim)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{fn}: {name} must be a positive int, got {n!r}")
    if layout[axis] % world_size:
        raise ValueError(f"{fn}: layout[{axis}] ({layout[axis]}) must be divisible by "
                         f"world_size ({world_size})")
    return _query_pads(layout, window, strides, dilations, causal, axis, world_size, head_dim,
                       bool(backward))


def _exact_ranges(layout, window, stride, dilation, causal, axis, ranks, pads=None):
    """[start, end) of the key rows every rank's queries attend along the sharded axis (global
    coordinates, from the library's rule: gna.slab.key_range), its own rows and the `pads` rows
    before them (query_pads), widened to the rank's own rows (which it holds anyway)."""
    slab = layout[axis] // ranks
    pads = pads or [0] * ranks
    ranges = []
    for r in range(ranks):
        begin, end = key_range(layout, window, stride, dilation, causal, axis=axis,
                               query_begin=r * slab - pads[r], query_end=(r + 1) * slab)
        ranges.append((min(begin, r * slab), max(end, (r + 1) * slab)))
    return ranges


def _halo_plan(extent, ranks, rank, ranges):
    """What this rank exchanges, for every rank's key range `ranges` (global [start, end) along
    the axis): (rows it sends, as (begin, end) of its slab per destination; rows it receives
    per source; its left halo's length; rows all ranks receive, the same on every rank). A
    destination's halo rows lie on one side of it, so each source sends it one run of rows;
    sources arrive in rank order, which is row order (left halo, then right halo)."""
    slab = extent // ranks

    def halo_rows(dest, src):
        (start, end), lo, hi = ranges[dest], dest * slab, (dest + 1) * slab
        if src == dest:
            return 0, 0
        b0, b1 = _overlap(start, lo, src * slab, (src + 1) * slab) if src < dest else \
            _overlap(hi, end, src * slab, (src + 1) * slab)
        return (b0 - src * slab, b1 - src * slab) if b1 > b0 else (0, 0)

    sends = [halo_rows(dest, rank) for dest in range(ranks)]
    receives = [b - a for a, b in (halo_rows(rank, src) for src in range(ranks))]
    total = sum(b - a for dest in range(ranks) for a, b in
                (halo_rows(dest, src) for src in range(ranks)))
    return sends, receives, rank * slab - ranges[rank][0], total


def _runs(sizes):
    """Consecutive (begin, end) row runs of the given sizes."""
    runs, at = [], 0
    for n in sizes:
        runs.append((at, at + n))
        at += n
    return runs


def _exchange_rows(x, sends, receives, group):
    """x [rows, C] -> the rows the other ranks send this one, [sum(receives), C]; rows
    x[a:b] go to rank r for sends[r] = (a, b)."""
    out = x.new_empty((sum(receives),) + tuple(x.shape[1:]))
    data = torch.cat([x[a:b] for a, b in sends]).contiguous()
    dist.all_to_all_single(out, data, output_split_sizes=list(receives),
                           input_split_sizes=[b - a for a, b in sends], group=group)
    return out


class _Halo(torch.autograd.Function):
    """The halo exchange; its adjoint sends each received row's gradient back to its owner,
    which adds it to that row's gradient (a row may go to several ranks)."""

    @staticmethod
    def forward(ctx, x, sends, receives, group):
        ctx.plan = (x.shape[0], sends, receives, group)
        return _exchange_rows(x, sends, receives, group)

    @staticmethod
    def backward(ctx, grad):
        rows, sends, receives, group = ctx.plan
        back = _exchange_rows(grad.contiguous(), _runs(receives), [b - a for a, b in sends],
                              group)
        index = torch.cat([torch.arange(a, b, device=grad.device) for a, b in sends])
        dx = grad.new_zeros((rows,) + tuple(grad.shape[1:]))
        return dx.index_add_(0, index, back), None, None, None


def _halo_error(message):
    return ValueError(f"halo_attention: {message}")


def _axis_rule(fn, layout, kernel_size, stride, dilation, is_causal, axis):
    """The rule's per-axis lists and the sharded axis, checked."""
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < len(layout):
        raise ValueError(f"{fn}: axis must be an int in [0, {len(layout)}) for layout {layout}, "
                         f"got {axis!r}")
    window, stride, dilation, causal, _ = functional._rule(fn, len(layout), kernel_size, stride,
                                                           dilation, is_causal, None)
    return window, stride, dilation, causal


def _layout(fn, layout):
    layout = tuple(int(e) for e in layout)
    if not 1 <= len(layout) <= 3:
        raise ValueError(f"{fn}: layout must have 1 to 3 axes, got {layout}")
    return layout


def _every_slab_taken(query, key, value, layout, window, strides, dilations, causal, axis, ranks,
                      exact_ranges, pads, backend):
    """Whether a backend takes every rank's slab (its queries from `pads` rows before its own,
    its exact key rows), forward and backward, for tensors like this rank's."""
    dims, slab = len(layout), layout[axis] // ranks

    def takes(r):
        q_rows = tuple((r * slab - pads[r], (r + 1) * slab) if a == axis else (0, layout[a])
                       for a in range(dims))
        rows = tuple(exact_ranges[r] if a == axis else (0, layout[a]) for a in range(dims))
        return all(slab_backend(query, key, value, layout, window, strides, dilations, causal,
                                query_rows=q_rows, key_rows=rows, backward=backward,
                                backend=backend) is not None for backward in (False, True))
    return all(takes(r) for r in range(ranks))


def exact_halo(query, key, value, layout, kernel_size, stride=1, dilation=1, is_causal=False,
               axis=0, group=None, backend="auto"):
    """Whether halo_attention (exact=None) on these tensors (this rank's slab, as it takes them)
    computes only its own queries on exact slabs: the `exact` to give choose_parallelism."""
    fn = "exact_halo"
    ranks, _ = _world(group)
    layout = _layout(fn, layout)
    window, strides, dilations, causal = _axis_rule(fn, layout, kernel_size, stride, dilation,
                                                    is_causal, axis)
    if layout[axis] % ranks:
        raise _halo_error(f"layout[{axis}] ({layout[axis]}) must be divisible by the process "
                          f"group's size ({ranks})")
    pads = _query_pads(layout, window, strides, dilations, causal, axis, ranks,
                       int(query.shape[-1]), _needs_grad(query, key, value))
    ranges = _exact_ranges(layout, window, strides, dilations, causal, axis, ranks, pads)
    return _every_slab_taken(query, key, value, layout, window, strides, dilations, causal, axis,
                             ranks, ranges, pads, backend)


_plans = {}


def _needs_grad(*tensors):
    """Whether a call on these tensors records its backward."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _metadata(t):
    return tuple(t.shape), t.stride(), t.dtype, t.device


def _plan(fn, query, key, value, layout, window, strides, dilations, causal, axis, ranks, rank,
          scale, exact, backend):
    """halo_attention's checks and plan for this rank: (exact, every rank's query pads, its
    sends, receives, left halo rows, rows all ranks receive)."""
    extent = layout[axis]
    if extent % ranks:
        raise _halo_error(f"layout[{axis}] ({extent}) must be divisible by the process group's "
                          f"size ({ranks})")
    slab = extent // ranks
    local = layout[:axis] + (slab,) + layout[axis + 1:]
    dims = len(layout)
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != dims + 3 or tuple(t.shape[1:1 + dims]) != local:
            raise _halo_error(f"{name} must be this rank's slab [B, {', '.join(map(str, local))}"
                              f", H, D] (layout {layout} over {ranks} ranks on axis {axis}), "
                              f"got shape {tuple(t.shape)}")
    # The whole problem's validation (rule against the global layout, heads, dims), with the
    # core's messages: the local call alone sees only the extended slab.
    whole = lambda t: torch.empty((t.shape[0],) + layout + tuple(t.shape[-2:]),  # noqa: E731
                                  dtype=t.dtype, device="meta")
    scale_value = functional._scale(fn, scale)
    params = ops._params(window, strides, dilations, causal, scale_value)
    ops._validate_metadata(params, whole(query), whole(key), whole(value), None, None)
    # Slabs where the backend takes every rank's (its queries, its exact key rows): only the own
    # queries computed. Every rank asks for every rank's slab, so that all of them plan alike.
    # Each rank's queries start on the grid of the kernel's Q tile (query_pads): zero queries
    # before its own where its first row is off it.
    exact_ranges, pads = None, [0] * ranks
    if exact is None or exact:
        pads = _query_pads(layout, window, strides, dilations, causal, axis, ranks,
                           int(query.shape[-1]), _needs_grad(query, key, value))
        exact_ranges = _exact_ranges(layout, window, strides, dilations, causal, axis, ranks,
                                     pads)
    if exact is None:
        exact = _every_slab_taken(query, key, value, layout, window, strides, dilations, causal,
                                  axis, ranks, exact_ranges, pads, backend)
    ranges = exact_ranges if exact else \
        _extended_ranges(extent, ranks, window[axis], strides[axis], dilations[axis],
                         causal[axis])
    sends, receives, left, total = _halo_plan(extent, ranks, rank, ranges)
    return exact, pads, sends, receives, left, total


def halo_attention(query, key, value, layout, kernel_size, stride=1, dilation=1, is_causal=False,
                   axis=0, scale=None, group=None, backend="auto", exact=None):
    """Neighborhood attention over a layout split into slabs along one axis across `group`
    (default: the world).

    query [B, *local, Hq, D], key [B, *local, Hkv, D], value [B, *local, Hkv, Dv]: this rank's
    slab, `local` being `layout` with layout[axis] / P on `axis` (rank r holds coordinates
    [r L / P, (r + 1) L / P) of that axis, L = layout[axis] divisible by the group's size P).
    The rule's arguments are those of gna.na1d/2d/3d over the whole layout. Returns this rank's
    slab of the output, [B, *local, Hq, Dv], equal to the same slab of the single-process call;
    gradients flow to query, key and value.

    exact (None: where a backend takes every rank's slab, forward and backward,
    gna.slab.slab_backend; True: required; False: never): each rank receives from its
    neighbours (several, when slabs are thinner than the halo) exactly the key/value rows its
    queries attend (gna.slab.key_range) and computes only its own queries (gna.slab.
    slab_attention: the rule at global coordinates), from the grid of the Hopper forward's Q
    tile on where its first row is off it (query_pads: a few zero queries before its own, so
    that it runs the whole layout's tiles). Otherwise it
    receives the rows within dilation * (window - 1 + stride) of its slab on that axis, rounded
    out to multiples of dilation * stride (none on the right of a causal axis), runs the rule on
    the extended slab with zero queries in the halo, and keeps its own rows. Every rank must
    take the same path (the same device type and `exact`).
    """
    fn = "halo_attention"
    ranks, rank = _world(group)
    layout = _layout(fn, layout)
    window, strides, dilations, causal = _axis_rule(fn, layout, kernel_size, stride, dilation,
                                                    is_causal, axis)
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise _halo_error(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    # Planned once per rule, group size and rank, tensors' metadata, exact and backend.
    plan_key = (layout, tuple(window), tuple(strides), tuple(dilations), tuple(causal), axis,
                ranks, rank, scale, exact, backend, _needs_grad(query, key, value),
                _metadata(query), _metadata(key), _metadata(value))
    try:
        plan = _plans.get(plan_key)
    except TypeError:  # an unhashable argument (its checks below name it): no caching
        plan_key, plan = None, None
    if plan is None:
        plan = _plan(fn, query, key, value, layout, window, strides, dilations, causal, axis,
                     ranks, rank, scale, exact, backend)
        if plan_key is not None:
            if len(_plans) > 256:
                _plans.clear()
            _plans[plan_key] = plan
    exact, pads, sends, receives, left, total = plan
    extent, dims, dim = layout[axis], len(layout), 1 + axis
    slab = extent // ranks
    offsets = [0] * dims
    query_offset = tuple(rank * slab if a == axis else 0 for a in range(dims))
    k, v, q = key, value, query
    if total:  # every rank computes the same plan, so all of them skip together
        rows = lambda t: t.movedim(dim, 0).reshape(slab, -1)  # noqa: E731
        key_rows = rows(key)
        kv = torch.cat([key_rows, rows(value)], dim=1)
        halo = _Halo.apply(kv, sends, receives, group)
        count = halo.shape[0]

        def unrows(h, like):
            shape = (count,) + tuple(like.movedim(dim, 0).shape[1:])
            return h.reshape(shape).movedim(0, dim)

        split = key_rows.shape[1]
        hk, hv = unrows(halo[:, :split], key), unrows(halo[:, split:], value)
        k = torch.cat([hk.narrow(dim, 0, left), key, hk.narrow(dim, left, count - left)], dim)
        v = torch.cat([hv.narrow(dim, 0, left), value, hv.narrow(dim, left, count - left)], dim)
        if not exact:
            zeros = lambda n: query.new_zeros(  # noqa: E731
                query.shape[:dim] + (n,) + query.shape[dim + 1:])
            q = torch.cat([zeros(left), query, zeros(count - left)], dim)
    if exact:
        offsets[axis] = rank * slab - left
        pad = pads[rank]
        if pad:
            q = torch.cat([query.new_zeros(query.shape[:dim] + (pad,) + query.shape[dim + 1:]),
                           query], dim)
            query_offset = tuple(o - pad if a == axis else o for a, o in enumerate(query_offset))
        out = slab_attention(q, k, v, layout, window, strides, dilations, causal,
                             query_offset=query_offset, key_offset=tuple(offsets), scale=scale,
                             backend=backend)
        return out.narrow(dim, pad, slab) if pad else out
    na = _NA[dims]
    out = na(q, k, v, window, stride=strides, dilation=dilations, is_causal=causal, scale=scale,
             backend=backend)
    return out.narrow(dim, left, slab)


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
