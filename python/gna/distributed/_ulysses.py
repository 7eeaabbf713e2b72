"""Ulysses (head-parallel) context parallelism with its all-to-alls pipelined with the attention.

Each rank holds a contiguous shard of the row-major token sequence of a layout, all heads. The
heads a rank computes are cut into head groups; per group, one all-to-all brings that group's
query, key and value heads of every token (packed in one buffer), the rank runs gna's attention
over the whole layout for them, and one all-to-all returns the group's output to sequence shards.
The exchange of group g + 1 is in flight (async_op) while group g's attention runs, and group g's
output travels while group g + 1's runs; the backward pipelines the gradients the same way.
"""
import contextlib
import math
import time

import torch
import torch.distributed as dist

from .. import functional, joint

_NA = {1: functional.na1d, 2: functional.na2d, 3: functional.na3d}


def world(group):
    return dist.get_world_size(group), dist.get_rank(group)


def layout_of(fn, layout):
    layout = tuple(int(e) for e in layout)
    if not 1 <= len(layout) <= 3:
        raise ValueError(f"{fn}: layout must have 1 to 3 axes, got {layout}")
    return layout


def _start(x, group):
    """An equal-split all-to-all of x's leading dim in flight: (result buffer, work handle)."""
    out = torch.empty_like(x)
    return out, dist.all_to_all_single(out, x, group=group, async_op=True)


def _finish(pending):
    out, work = pending
    work.wait()
    return out


def _pack(tensors):
    """Blocks by destination [P, ...] -> one [P, sum of their sizes] buffer, and their sizes."""
    flat = [t.reshape(t.shape[0], -1) for t in tensors]
    return torch.cat(flat, dim=1).contiguous(), [f.shape[1] for f in flat]


def _unpack(buffer, widths, shapes):
    return [part.reshape((buffer.shape[0],) + shape) for part, shape in
            zip(torch.split(buffer, widths, dim=1), shapes)]


_events = None  # the timeline being recorded: [(label, device, CUDA event or host time)]


@contextlib.contextmanager
def timeline():
    """Records when each head group's exchange is issued, has arrived (as the attention's stream
    sees it) and its attention has run, in every pipelined call inside the block; yields a list
    that holds (label, milliseconds since the first event) at the block's end (CUDA events on
    CUDA tensors: the device's order, not the host's)."""
    global _events
    recorded, result = [], []
    _events = recorded
    try:
        yield result
    finally:
        _events = None
        if any(device.type == "cuda" for _, device, _ in recorded):
            torch.cuda.synchronize()
        start = recorded[0][2] if recorded else None
        for label, device, mark in recorded:
            ms = start.elapsed_time(mark) if device.type == "cuda" else (mark - start) * 1e3
            result.append((label, ms))


def _mark(label, device):
    if _events is None:
        return
    if device.type == "cuda":
        mark = torch.cuda.Event(enable_timing=True)
        mark.record()
    else:
        mark = time.perf_counter()
    _events.append((label, device, mark))


def pipelined(groups, sends, compute, group):
    """Runs compute(g, received) for every head group g, group g + 1's all-to-all in flight while
    group g computes and group g's results in flight while group g + 1 computes.

    sends(g): the [P, ...] blocks (by destination) group g exchanges, packed in one buffer;
    compute(g, blocks received, by source): the blocks to send back. Returns, per group, the
    blocks received back.
    """
    def issue(blocks, label):
        buffer, widths = _pack(blocks)
        _mark(label, buffer.device)
        return _start(buffer, group), widths, [tuple(b.shape[1:]) for b in blocks]

    def arrived(inflight, label):
        pending, widths, shapes = inflight
        received = _finish(pending)
        _mark(label, received.device)
        return _unpack(received, widths, shapes)

    inflight, back = issue(sends(0), "group 0 sent"), []
    for g in range(groups):
        received = arrived(inflight, f"group {g} arrived")
        if g + 1 < groups:
            inflight = issue(sends(g + 1), f"group {g + 1} sent")
        back.append(issue(compute(g, received), f"group {g} computed, returned"))
    return [arrived(b, f"group {g} back") for g, b in enumerate(back)]


def _group_blocks(x, ranks, groups, g):
    """[B, n/P, H, D] sequence shard -> head group g's blocks by destination rank,
    [P, B, n/P, H/(P G), D] (rank r computes heads [r H/P, (r+1) H/P), in G groups)."""
    b, s, h, d = x.shape
    return x.reshape(b, s, ranks, groups, h // (ranks * groups), d)[:, :, :, g].permute(
        2, 0, 1, 3, 4)


def _whole(blocks):
    """[P (source shard), B, n/P, h, D] -> [B, n, h, D]: all tokens of the group's heads."""
    p, b, s, h, d = blocks.shape
    return blocks.permute(1, 0, 2, 3, 4).reshape(b, p * s, h, d)


def _by_destination(x, ranks):
    """[B, n, h, D] -> [P, B, n/P, h, D]: the sequence shard of every rank."""
    b, s, h, d = x.shape
    return x.reshape(b, ranks, s // ranks, h, d).permute(1, 0, 2, 3, 4)


def _sequence(parts):
    """Per head group, [P (source heads), B, n/P, h, D] -> [B, n/P, H, D], heads in rank then
    group order."""
    stacked = torch.stack(parts, dim=1)  # [P, G, B, n/P, h, D]
    p, groups, b, s, h, d = stacked.shape
    return stacked.permute(2, 3, 0, 1, 4, 5).reshape(b, s, p * groups * h, d)


def default_head_groups(heads_per_rank):
    """The most head groups, up to 4, that split a rank's key/value heads evenly: more groups
    hide more of the exchanges, fewer keep each attention call large."""
    return next(g for g in (4, 3, 2, 1) if heads_per_rank % g == 0)


class _Pipelined(torch.autograd.Function):
    """Ulysses over head groups; the backward runs each group's attention backward between the
    same exchanges of the gradients (an equal-split all-to-all is its own adjoint)."""

    @staticmethod
    def forward(ctx, plan, query, key, value, text_query, text_key, text_value, extra_k,
                extra_v):
        ranks, groups, group, attend = plan
        text = text_query is not None
        needs = ctx.needs_input_grad
        ctx.plan, ctx.graphs = plan, []
        seq = [query, key, value] + ([text_query, text_key, text_value] if text else [])
        heads_kv = key.shape[2] // (ranks * groups)
        rank = dist.get_rank(group)

        def sends(g):
            return [_group_blocks(t, ranks, groups, g) for t in seq]

        def extra_of(t, g):
            if t is None:
                return None
            first = rank * groups * heads_kv + g * heads_kv
            return t[:, :, first:first + heads_kv]

        def compute(g, received):
            leaves = [_whole(r).detach().requires_grad_(any(needs[1:7])) for r in received]
            extras = [extra_of(t, g) for t in (extra_k, extra_v)]
            extras = [e.detach().requires_grad_(need) if e is not None else None
                      for e, need in zip(extras, needs[7:])]
            with torch.enable_grad():
                outs = attend(leaves, extras)
            ctx.graphs.append((outs, leaves, extras))
            return [_by_destination(o.detach(), ranks) for o in outs]

        back = pipelined(groups, sends, compute, group)
        outs = [_sequence([b[i] for b in back]) for i in range(len(back[0]))]
        if not any(needs):
            ctx.graphs = []
        return tuple(outs) if text else outs[0]

    @staticmethod
    def backward(ctx, *d_outs):
        ranks, groups, group, _ = ctx.plan
        graphs, ctx.graphs = ctx.graphs, None
        d_outs = [d.contiguous() for d in d_outs]
        extras_grad = [None, None]

        def sends(g):
            return [_group_blocks(d, ranks, groups, g) for d in d_outs]

        def compute(g, received):
            outs, leaves, extras = graphs[g]
            inputs = leaves + [e for e in extras if e is not None]
            grads = torch.autograd.grad(outs, inputs, [_whole(r) for r in received],
                                        allow_unused=True)
            grads = [torch.zeros_like(t) if d is None else d for d, t in zip(grads, inputs)]
            for i, (e, d) in enumerate(zip(extras, grads[len(leaves):])):
                if e is not None:
                    extras_grad[i] = extras_grad[i] if extras_grad[i] is not None else []
                    extras_grad[i].append(d)
            return [_by_destination(d, ranks) for d in grads[:len(leaves)]]

        back = pipelined(groups, sends, compute, group)
        seq_grads = [_sequence([b[i] for b in back]) for i in range(len(back[0]))]
        seq_grads += [None] * (6 - len(seq_grads))
        return (None, *seq_grads, *(_extra_gradient(ctx, parts, ranks, group)
                                    for parts in extras_grad))


def _extra_gradient(ctx, parts, ranks, group):
    """This rank's heads' share of an additional-token gradient, zeros for the other ranks'
    heads (summing over ranks gives the whole gradient)."""
    if parts is None:
        return None
    mine = torch.cat(parts, dim=2)
    rank = dist.get_rank(group)
    full = mine.new_zeros(mine.shape[:2] + (mine.shape[2] * ranks,) + mine.shape[3:])
    full[:, :, rank * mine.shape[2]:(rank + 1) * mine.shape[2]] = mine
    return full


def _check(fn, name, t, tokens, ranks, what="layout"):
    if t.dim() != 4:
        raise ValueError(f"{fn}: {name} must be [B, S/P, H, D], got shape {tuple(t.shape)}")
    if t.shape[1] * ranks != tokens:
        raise ValueError(f"{fn}: {name} holds {t.shape[1]} tokens per rank; {what} over "
                         f"{ranks} ranks needs {tokens / ranks:g}")


def _check_divisible(fn, name, value, ranks):
    if value % ranks:
        raise ValueError(f"{fn}: {name} ({value}) must be divisible by the process group's "
                         f"size ({ranks})")


def _head_groups(fn, head_groups, heads_per_rank):
    if head_groups is None:
        return default_head_groups(heads_per_rank)
    if isinstance(head_groups, bool) or not isinstance(head_groups, int) or head_groups < 1 or \
            heads_per_rank % head_groups:
        raise ValueError(f"{fn}: head_groups must be a positive int dividing the key/value heads "
                         f"per rank ({heads_per_rank}), got {head_groups!r}")
    return head_groups


def ulysses_attention(query, key, value, layout, kernel_size, stride=1, dilation=1,
                      is_causal=False, scale=None, additional_keys=None, additional_values=None,
                      group=None, backend="auto", head_groups=None):
    """Neighborhood attention over a sequence sharded across `group` (default: the world).

    query [B, S/P, Hq, D], key [B, S/P, Hkv, D], value [B, S/P, Hkv, Dv]: this rank's contiguous
    shard (rank r holds tokens [r S/P, (r+1) S/P)) of the row-major token sequence of `layout`
    (1 to 3 axes, S = prod(layout)); Hq and Hkv divisible by the group's size P.
    additional_keys / additional_values [B, Nadd, Hkv, D / Dv]: tokens every query attends to
    (e.g. text), the same on every rank; their gradient on each rank is its own heads' share
    (zeros elsewhere: an all-reduce sum gives the whole). The rule's arguments are those of
    gna.na1d/2d/3d. head_groups: how many pieces each rank's heads are cut into, the exchange of
    one overlapping the attention of the previous (default: the most, up to 4, dividing Hkv / P).
    Returns this rank's shard of the output, [B, S/P, Hq, Dv]; gradients flow to every input.
    """
    fn = "ulysses_attention"
    ranks, _ = world(group)
    layout = layout_of(fn, layout)
    tokens = math.prod(layout)
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check(fn, name, t, tokens, ranks)
    _check_divisible(fn, "query heads", query.shape[2], ranks)
    _check_divisible(fn, "key/value heads", key.shape[2], ranks)
    if (additional_keys is None) != (additional_values is None):
        raise ValueError(f"{fn}: additional_keys and additional_values go together")
    groups = _head_groups(fn, head_groups, key.shape[2] // ranks)
    na = _NA[len(layout)]

    def attend(leaves, extras):
        q, k, v = (t.reshape(t.shape[0], *layout, *t.shape[2:]) for t in leaves)
        out = na(q, k, v, kernel_size, stride=stride, dilation=dilation, is_causal=is_causal,
                 scale=scale, backend=backend, additional_keys=extras[0],
                 additional_values=extras[1])
        return [out.reshape(out.shape[0], tokens, *out.shape[-2:])]

    return _Pipelined.apply((ranks, groups, group, attend), query, key, value, None, None, None,
                            additional_keys, additional_values)


def ulysses_joint_attention(query, key, value, text_query, text_key, text_value, layout,
                            kernel_size, stride=1, dilation=1, is_causal=False, scale=None,
                            group=None, backend="auto", head_groups=None):
    """Joint text + visual attention (gna.joint_attention, text after the visual tokens) over
    `group`, both sequences sharded: query/key/value [B, S/P, H, D] this rank's shard of the
    visual tokens (as ulysses_attention), text_query/text_key/text_value [B, T/P, H, D] its
    contiguous shard of the T text tokens. Visual queries attend their window and every text
    token; text queries attend every token. Returns (visual output shard, text output shard);
    gradients flow to all six inputs. head_groups as ulysses_attention's.
    """
    fn = "ulysses_joint_attention"
    ranks, _ = world(group)
    layout = layout_of(fn, layout)
    tokens = math.prod(layout)
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check(fn, name, t, tokens, ranks)
    text_tokens = text_query.shape[1] * ranks if text_query.dim() == 4 else 0
    for name, t in (("text_query", text_query), ("text_key", text_key),
                    ("text_value", text_value)):
        _check(fn, name, t, text_tokens, ranks, "the text")
        if t.shape[2] != (query if name == "text_query" else key).shape[2]:
            raise ValueError(f"{fn}: {name} has {t.shape[2]} heads, the visual tokens "
                             f"{(query if name == 'text_query' else key).shape[2]}")
    _check_divisible(fn, "query heads", query.shape[2], ranks)
    _check_divisible(fn, "key/value heads", key.shape[2], ranks)
    groups = _head_groups(fn, head_groups, key.shape[2] // ranks)

    def attend(leaves, extras):
        q, k, v = (torch.cat([a, t], dim=1) for a, t in zip(leaves[:3], leaves[3:]))
        out = joint.joint_attention(q, k, v, layout, kernel_size, stride=stride,
                                    dilation=dilation, is_causal=is_causal, text_len=text_tokens,
                                    scale=scale, backend=backend)
        return [out[:, :tokens], out[:, tokens:]]

    return _Pipelined.apply((ranks, groups, group, attend), query, key, value, text_query,
                            text_key, text_value, None, None)
