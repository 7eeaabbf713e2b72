"""choose_parallelism: the context-parallel mode a cost model predicts fastest. Per mode, the
bytes each rank exchanges times the link's cost (latency and bandwidth of the process group,
measured once by a tiny all-to-all timing and cached), plus the attention's kernel time from
the simulator's cost models (gna.predicted_speedup's ms_per_head)."""
import dataclasses
import math
import time

import torch
import torch.distributed as dist

from .. import simulator
from ._halo import _axis_rule, _exact_ranges, _extended_ranges, _layout, _query_pads

_links = {}


@dataclasses.dataclass(frozen=True)
class Link:
    """The cost of one all-to-all on a process group: latency (s) + bytes sent per rank /
    bandwidth (bytes/s)."""
    latency: float
    bandwidth: float

    def seconds(self, collectives, nbytes):
        return collectives * self.latency + nbytes / self.bandwidth


def measure_link(group=None, refresh=False):
    """The Link of `group` (default: the world), timed once per group and cached: all-to-alls
    of 64 KiB (the latency), 8 MiB and 64 MiB per rank (the bandwidth, from their difference:
    over NVLink 8 MiB take hardly longer than 64 KiB) on the group's device (CUDA under NCCL),
    the median of five each, the slowest rank's times (an all-reduce), so that every rank
    computes the same costs and chooses the same mode. Collective: every rank of the group must
    call it."""
    if not refresh and group in _links:
        return _links[group]
    ranks, _ = dist.get_world_size(group), dist.get_rank(group)
    device = torch.device("cuda", torch.cuda.current_device()) \
        if dist.get_backend(group) == "nccl" else torch.device("cpu")
    times = []
    sizes = (64 << 10, 8 << 20, 64 << 20)
    for size in sizes:
        x = torch.zeros(size // 4 // ranks * ranks, dtype=torch.float32, device=device)
        out = torch.empty_like(x)
        samples = []
        for _ in range(6):
            dist.barrier(group=group)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            dist.all_to_all_single(out, x, group=group)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            samples.append(time.perf_counter() - start)
        times.append(sorted(samples[1:])[2])  # the first is a warm-up
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    small, medium, large = slowest.tolist()
    sent = (sizes[2] - sizes[1]) * (ranks - 1) / ranks
    link = Link(latency=small, bandwidth=sent / max(large - medium, 1e-9))
    _links[group] = link
    return link


def _kernel_seconds(layout, window, stride, dilation, causal, head_dim, backward):
    """The predicted time of one (batch item, head) on `layout` (forward, + backward), in
    seconds: the simulator's Hopper cost models, measured at head dim 128 on an H100, scaled
    linearly to other head dims."""
    total = 0.0
    for kernel in ("hopper forward",) + (("hopper backward",) if backward else ()):
        ms = simulator.predicted_speedup(layout, window, stride, dilation, causal, kernel=kernel,
                                         head_dim=128)["ms_per_head"]
        total += ms * 1e-3 * head_dim / 128
    return total


def _ulysses_seconds(link, tokens, ranks, heads, heads_kv, head_dim, bytes_per_value, batch,
                     compute, passes, groups):
    """Q, K, V in and O out through all-to-alls that keep 1/P, per pass; with G head groups the
    first group's exchange and the last one's return are exposed, the rest hides behind the
    attention as far as it lasts."""
    per_token = (2 * heads + 2 * heads_kv) * head_dim * bytes_per_value
    nbytes = batch * tokens / ranks * per_token * (ranks - 1) / ranks * passes
    comm = link.seconds(2 * groups * passes, nbytes)
    return compute + comm / groups + max(0.0, comm * (groups - 1) / groups - compute)


@dataclasses.dataclass(frozen=True)
class Parallelism:
    """choose_parallelism's answer: the mode ("ulysses", "halo" or "hybrid"), the Ulysses group
    size (P for Ulysses, 1 for halo, U for the hybrid), its predicted seconds per step and every
    applicable mode's, keyed by (mode, ulysses_size)."""
    mode: str
    ulysses_size: int
    seconds: float
    costs: dict


def parallelism_costs(layout, kernel_size, stride, dilation, is_causal, heads, world_size,
                      axis=0, *, link, heads_kv=None, head_dim=128, batch=1, bytes_per_value=2,
                      backward=False, exact=False, text_tokens=0):
    """Predicted seconds per step of every mode that applies: {(mode, ulysses_size): seconds}.
    exact: whether halo attention runs exact slabs (only its own queries: gna.distributed.
    exact_halo) or the extended slab. text_tokens: joint attention's text tokens beside the
    layout's (ulysses_joint_attention: Ulysses alone applies, its exchanges carry them too)."""
    fn = "choose_parallelism"
    layout = _layout(fn, layout)
    window, strides, dilations, causal = _axis_rule(fn, layout, kernel_size, stride, dilation,
                                                    is_causal, axis)
    heads_kv = heads if heads_kv is None else heads_kv
    for name, n in (("heads", heads), ("heads_kv", heads_kv), ("world_size", world_size),
                    ("head_dim", head_dim), ("batch", batch)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{fn}: {name} must be a positive int, got {n!r}")
    if isinstance(text_tokens, bool) or not isinstance(text_tokens, int) or text_tokens < 0:
        raise ValueError(f"{fn}: text_tokens must be a non-negative int, got {text_tokens!r}")
    ranks, tokens, passes = world_size, math.prod(layout), 2 if backward else 1
    per_head = lambda shape: _kernel_seconds(shape, window, strides, dilations, causal,  # noqa
                                             head_dim, backward)
    whole = per_head(layout) * batch
    costs = {}

    def halo_seconds(slabs, heads_here, heads_kv_here):
        """Halo across `slabs` ranks on axis `axis` with these heads per rank."""
        extent = layout[axis]
        if extent % slabs:
            return None
        if slabs == 1:
            return whole * heads_here
        slab = extent // slabs
        if exact:
            pads = _query_pads(layout, window, strides, dilations, causal, axis, slabs, head_dim,
                               backward)
            ranges = _exact_ranges(layout, window, strides, dilations, causal, axis, slabs, pads)
            compute = whole * heads_here * (slab + max(pads)) / extent
        else:
            ranges = _extended_ranges(extent, slabs, window[axis], strides[axis], dilations[axis],
                                      causal[axis])
            longest = max(end - start for start, end in ranges)
            shape = layout[:axis] + (longest,) + layout[axis + 1:]
            compute = per_head(shape) * batch * heads_here
        rows = max(end - start - slab for start, end in ranges)
        nbytes = batch * rows * tokens / extent * heads_kv_here * 2 * head_dim * \
            bytes_per_value * passes
        return compute + link.seconds(passes, nbytes)

    for u in range(1, ranks + 1):
        if ranks % u or heads % u or heads_kv % u:
            continue
        v = ranks // u
        groups = next(g for g in (4, 3, 2, 1) if (heads_kv // u) % g == 0)
        if v == 1:
            if tokens % ranks == 0 and text_tokens % ranks == 0:
                costs[("ulysses", u)] = _ulysses_seconds(
                    link, tokens + text_tokens, ranks, heads, heads_kv, head_dim,
                    bytes_per_value, batch, whole * heads / ranks, passes, groups)
            continue
        if text_tokens:  # joint attention runs Ulysses alone
            continue
        halo = halo_seconds(v, heads // u, heads_kv // u)
        if halo is None:
            continue
        if u == 1:
            costs[("halo", 1)] = halo
        elif axis == 0 and tokens % ranks == 0:  # the hybrid's slabs are of axis 0
            costs[("hybrid", u)] = _ulysses_seconds(
                link, tokens // v, u, heads, heads_kv, head_dim, bytes_per_value, batch, halo,
                passes, groups)
    if not costs:
        raise ValueError(f"{fn}: no mode applies on {ranks} ranks: heads ({heads}) or tokens "
                         f"({tokens}) not divisible for Ulysses, layout[{axis}] "
                         f"({layout[axis]}) not divisible for halo, nor a hybrid of the two")
    return costs


def choose_parallelism(layout, kernel_size, stride, dilation, is_causal, heads, world_size,
                       axis=0, *, heads_kv=None, head_dim=128, batch=1, bytes_per_value=2,
                       backward=False, exact=False, link=None, group=None, text_tokens=0):
    """The context parallelism predicted fastest for this rule on `world_size` ranks: a
    Parallelism (mode "ulysses", "halo" along `axis`, or "hybrid": Ulysses within groups of
    ulysses_size ranks x halo along axis 0 across them).

    Per rank and step (backward: forward and backward, twice the exchanges):
        ulysses  kernel(layout) H / P + the exposed part of its all-to-alls (Q, K, V in, O out,
                 (P - 1) / P of them), pipelined over head groups
        halo     kernel(extended slab) H + the K and V halo rows' exchange (exact: kernel of the
                 own queries only, the exact key rows)
        hybrid   halo over P / U slabs with H / U heads, inside Ulysses over U ranks
    (text_tokens > 0, joint attention: Ulysses alone, its exchanges carrying the text tokens).
    kernel(...) is the simulator's predicted time per head (gna.predicted_speedup), an
    exchange's cost link.latency per collective + bytes / link.bandwidth; link: a Link, or
    None for measure_link(group) (collective: every rank must call). ValueError when no mode
    applies."""
    if link is None:
        link = measure_link(group)
    costs = parallelism_costs(layout, kernel_size, stride, dilation, is_causal, heads,
                              world_size, axis, link=link, heads_kv=heads_kv, head_dim=head_dim,
                              batch=batch, bytes_per_value=bytes_per_value, backward=backward,
                              exact=exact, text_tokens=text_tokens)
    (mode, size), seconds = min(costs.items(), key=lambda kv: (kv[1], kv[0]))
    return Parallelism(mode, size, seconds, costs)
