"""Joint (MMDiT) attention: one sequence [B, S, H, D] holding the visual tokens of a layout and
text tokens (before or after them), as HunyuanVideo / Wan / FLUX / SD3-style blocks compute it.

Visual queries attend with GNA over the visual tokens plus every valid text key, in one softmax;
text queries (padding rows included) attend densely to every valid token. With per-sample text
lengths, the text tokens past a sample's length are padding: masked out as keys. The result
equals dense attention under that mask.
"""
import torch

from . import _dense, functional, ops
from .counted import counted_attention, counts_backend
from .functional import merge_attentions
from .per_head import grouped_attention, resolve_groups

__all__ = ["joint_attention", "dense_joint_attention", "text_key_mask"]

_POSITIONS = ("after", "before")


def _check_qkv(fn, query, key, value):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{fn}: {name} must be a tensor [B, S, H, D], got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else t!r}")
    if key.shape[:2] != query.shape[:2] or value.shape[:3] != key.shape[:3]:
        raise ValueError(f"{fn}: query, key and value must share [B, S] (key and value also H), "
                         f"got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")


def _text_count(fn, seq, visual, text_len):
    if text_len is None:
        if seq < visual:
            raise ValueError(f"{fn}: the sequence holds {seq} tokens, fewer than the layout's "
                             f"{visual}")
        text_len = seq - visual
    if isinstance(text_len, bool) or not isinstance(text_len, int) or text_len < 0:
        raise ValueError(f"{fn}: text_len must be a non-negative int, got {text_len!r}")
    if visual + text_len != seq:
        raise ValueError(f"{fn}: the sequence holds {seq} tokens, but the layout has {visual} "
                         f"and text_len is {text_len}")
    return text_len


def _check_lengths(fn, text_lengths, batch, text_len):
    """None, a list of ints (one per sample, 0..text_len) or an integer tensor [B]."""
    if text_lengths is None:
        return None
    if isinstance(text_lengths, torch.Tensor):
        if text_lengths.dim() != 1 or text_lengths.shape[0] != batch or \
                text_lengths.dtype.is_floating_point:
            raise ValueError(f"{fn}: text_lengths must be an integer tensor [B={batch}], got "
                             f"{text_lengths.dtype} {tuple(text_lengths.shape)}")
        return text_lengths
    lengths = list(text_lengths) if isinstance(text_lengths, (list, tuple)) else None
    if lengths is None or len(lengths) != batch or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 0 or n > text_len
            for n in lengths):
        raise ValueError(f"{fn}: text_lengths must hold {batch} ints in [0, text_len="
                         f"{text_len}], got {text_lengths!r}")
    return lengths


def _check_position(fn, text_position):
    if text_position not in _POSITIONS:
        raise ValueError(f"{fn}: text_position must be one of {_POSITIONS}, got "
                         f"{text_position!r}")


def _split(x, visual, text_position):
    """(visual tokens, text tokens) of [B, S, H, D], as views."""
    if text_position == "after":
        return x[:, :visual], x[:, visual:]
    return x[:, x.shape[1] - visual:], x[:, :x.shape[1] - visual]


def _join(visual, text, text_position):
    if text.shape[1] == 0:
        return visual
    return torch.cat([visual, text] if text_position == "after" else [text, visual], dim=1)


def text_key_mask(text_lengths, batch, visual, text_len, text_position="after", device=None):
    """[B, S] bool: True for the visual tokens and the first text_lengths[b] text tokens of
    sample b; None when every text token is valid (text_lengths None)."""
    if text_lengths is None:
        return None
    if not isinstance(text_lengths, torch.Tensor):
        text_lengths = torch.tensor(text_lengths, device=device)
    lengths = text_lengths.to(device=device, dtype=torch.long)
    text = torch.arange(text_len, device=device)[None, :] < lengths[:, None]
    vis = torch.ones(batch, visual, dtype=torch.bool, device=device)
    return torch.cat([vis, text] if text_position == "after" else [text, vis], dim=1)


def joint_attention(query, key, value, layout, kernel_size=None, stride=1, dilation=1,
                    is_causal=False, *, windows=None, text_len=None, text_lengths=None,
                    text_position="after", scale=None, backend="auto", precision="auto"):
    """Joint text + visual attention on one sequence.

    query [B, S, Hq, D], key [B, S, Hkv, D], value [B, S, Hkv, Dv] (Hq a multiple of Hkv); S =
    prod(layout) + text_len. layout: the visual tokens' shape (1 to 3 axes, row-major), e.g.
    (T, H, W). text_position: "after" (text tokens follow the visual ones) or "before".
    The visual queries' window: kernel_size / stride / dilation / is_causal as in gna.na3d, or
    windows= a gna.Window (every head) or a list of one per query head (per-head windows).
    text_len: text tokens in the sequence (default: S - prod(layout)). text_lengths: None (all
    valid), or per sample the valid text tokens (the first ones of the text; the rest is padding
    and never attended): a list of ints or an integer tensor [B] (a tensor's values are not
    read on the host, so nothing waits for them; values outside [0, text_len] are clamped).
    Eager calls run the visual queries in one fused call with the lengths as per-sample counts
    of text keys where a backend takes them (the CPU reference, the Hopper kernels; not the FP8
    forward); elsewhere (and under torch.compile) a list runs one fused call per distinct
    length, and a tensor the visual queries without the text, the text part apart, merged by
    logsumexp. Returns [B, S, Hq, Dv]; differentiable. precision "fp8": the visual queries'
    neighborhood attention (text keys included) runs the FP8 forward (as gna.na3d's
    precision; forward only), the text queries' dense attention stays in the inputs' dtype.
    """
    fn = "joint_attention"
    _check_qkv(fn, query, key, value)
    _check_position(fn, text_position)
    layout = _layout(fn, layout)
    batch, seq = int(query.shape[0]), int(query.shape[1])
    visual = _volume(layout)
    text_len = _text_count(fn, seq, visual, text_len)
    lengths = _check_lengths(fn, text_lengths, batch, text_len)
    groups = _groups(fn, kernel_size, stride, dilation, is_causal, windows, layout,
                     int(query.shape[2]))

    (qv, qt), (kv, kt), (vv, vt) = (_split(t, visual, text_position) for t in (query, key, value))
    grid = lambda t: t.reshape(t.shape[0], *layout, *t.shape[2:])  # noqa: E731
    kw = dict(scale=scale, backend=backend, precision=precision)
    if isinstance(lengths, list) and all(n == text_len for n in lengths):
        lengths = None
    # Per-sample counts of text keys, one fused call (eager calls: the call is an
    # autograd.Function over ctypes, which torch.compile and functorch do not trace).
    counts = None if lengths is None or precision != "auto" or text_len == 0 or \
        not ops._runs_eagerly(query) else _counts_of(lengths, query.device)
    if lengths is None:
        extra = (kt, vt) if text_len else (None, None)
        out_v = grouped_attention(grid(qv), grid(kv), grid(vv), groups, additional_keys=extra[0],
                                  additional_values=extra[1], **kw)
        out_v = out_v.reshape(batch, visual, *out_v.shape[-2:])
    elif counts is not None and _counts_run(qv, kv, vv, kt, vt, counts, grid, groups, scale,
                                            backend):
        out_v = _visual_with_counts(qv, kv, vv, kt, vt, counts, grid, groups, scale, backend)
    elif isinstance(lengths, list):
        out_v = _visual_by_length(qv, kv, vv, kt, vt, lengths, grid, groups, kw)
    else:
        out_v, lse_v = grouped_attention(grid(qv), grid(kv), grid(vv), groups, return_lse=True,
                                         **kw)
        valid = torch.arange(text_len, device=query.device)[None, :] < \
            lengths.to(query.device)[:, None]
        out_t, lse_t = _dense.attend_with_lse(qv, kt, vt, valid, scale)
        shape = (batch, visual) + tuple(out_v.shape[-2:])
        out_v, _ = merge_attentions([out_v.reshape(shape), out_t],
                                    [lse_v.reshape(shape[:-1]), lse_t])
    if text_len == 0:
        return out_v
    mask = text_key_mask(lengths, batch, visual, text_len, text_position, query.device)
    out_txt = _dense.attend(qt, key, value, mask, scale)
    return _join(out_v, out_txt, text_position)


def _counts_of(lengths, device):
    """Per-sample text lengths as the library's counts: int32 [B] on the query's device."""
    if isinstance(lengths, list):
        return torch.tensor(lengths, dtype=torch.int32, device=device)
    return lengths.to(device=device, dtype=torch.int32)


def _counts_run(qv, kv, vv, kt, vt, counts, grid, groups, scale, backend):
    """Whether one fused call with per-sample counts runs the visual queries (the forward, and
    the backward where gradients are wanted)."""
    tensors = (qv, kv, vv, kt, vt)
    wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    return all(counts_backend(grid(qv), grid(kv), grid(vv), kt, vt, counts, groups, scale,
                              backward, backend) is not None
               for backward in ((False, True) if wants_grad else (False,)))


def _visual_with_counts(qv, kv, vv, kt, vt, counts, grid, groups, scale, backend):
    """Visual queries with per-sample text lengths in one fused call: every sample's text
    tokens are its additional keys, of which it attends the first counts[b]."""
    out = counted_attention(grid(qv), grid(kv), grid(vv), kt, vt, counts, groups, scale,
                            backend)
    return out.reshape(qv.shape[0], qv.shape[1], *out.shape[-2:])


def _visual_by_length(qv, kv, vv, kt, vt, lengths, grid, groups, kw):
    """Visual queries with per-sample text lengths (ints): one fused call per distinct length,
    the sample's valid text tokens as additional keys. Samples are gathered and put back with
    slices and cat: with index_select there, torch.compile's inductor (torch 2.11) gave wrong key
    and value gradients for per-head windows whose samples came back reordered."""
    batch, visual = qv.shape[0], qv.shape[1]
    per_sample = [None] * batch
    for n in sorted(set(lengths)):
        samples = [b for b in range(batch) if lengths[b] == n]
        pick = (lambda t: t) if len(samples) == batch else \
            (lambda t: torch.cat([t[b:b + 1] for b in samples]))
        extra = (pick(kt[:, :n]), pick(vt[:, :n])) if n else (None, None)
        out = grouped_attention(grid(pick(qv)), grid(pick(kv)), grid(pick(vv)), groups,
                                additional_keys=extra[0], additional_values=extra[1], **kw)
        out = out.reshape(len(samples), visual, *out.shape[-2:])
        if len(samples) == batch:
            return out
        for i, b in enumerate(samples):
            per_sample[b] = out[i:i + 1]
    return torch.cat(per_sample)


def dense_joint_attention(query, key, value, text_len=0, text_lengths=None,
                          text_position="after", scale=None):
    """The dense counterpart of joint_attention: every query attends to every valid token
    (padding text tokens masked as keys). Same tensors and text arguments; the visual tokens'
    layout does not matter. PyTorch's scaled_dot_product_attention where torch has it."""
    fn = "dense_joint_attention"
    _check_qkv(fn, query, key, value)
    _check_position(fn, text_position)
    batch, seq = int(query.shape[0]), int(query.shape[1])
    if isinstance(text_len, bool) or not isinstance(text_len, int) or not 0 <= text_len <= seq:
        raise ValueError(f"{fn}: text_len must be an int in [0, {seq}], got {text_len!r}")
    lengths = _check_lengths(fn, text_lengths, batch, text_len)
    if isinstance(lengths, list) and all(n == text_len for n in lengths):
        lengths = None
    mask = text_key_mask(lengths, batch, seq - text_len, text_len, text_position, query.device)
    return _dense.attend(query, key, value, mask, scale)


def _layout(fn, layout):
    values = [layout] if isinstance(layout, int) else layout
    if not isinstance(values, (list, tuple)) or not 1 <= len(values) <= 3 or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in values):
        raise ValueError(f"{fn}: layout must be 1 to 3 positive ints (the visual tokens' shape), "
                         f"got {layout!r}")
    return tuple(values)


def _volume(layout):
    count = 1
    for n in layout:
        count *= n
    return count


def _groups(fn, kernel_size, stride, dilation, is_causal, windows, layout, heads):
    """The visual queries' rules per group of heads: one rule from kernel_size / stride /
    dilation / is_causal, or per-head windows."""
    if windows is not None:
        if kernel_size is not None:
            raise ValueError(f"{fn}: give kernel_size or windows, not both (got kernel_size="
                             f"{kernel_size!r} and windows={windows!r})")
        return resolve_groups(windows, heads, layout, fn)
    if kernel_size is None:
        raise ValueError(f"{fn}: kernel_size (or windows) is required, got None")
    rule = functional._rule(fn, len(layout), kernel_size, stride, dilation, is_causal, None)
    return [(tuple(tuple(x) for x in rule[:4]), list(range(heads)))]
