"""Slab attention: the rule of a whole layout evaluated at global coordinates for a local slab of
queries and a local slab of keys (include/gna/core/slab.hpp), so that a rank of a context-
parallel run computes only its own queries, against exactly the key rows they attend. Runs on
the backends that take slabs (the CPU reference; on sm_90 GPUs the Hopper kernels, 16-bit
inputs, head dims 32-256 forward and 32-128 backward); slab_backend says which one would, or
None.
"""
import ctypes

import torch

from . import _calls, _lib, functional, ops
from ._tensors import options, view

__all__ = ["key_range", "slab_attention", "slab_backend"]

_slabs = {}


def _slab(layout, query_offset, key_offset):
    """The C slab struct, built once per (layout, offsets) (the C ABI only reads it)."""
    key = (layout, query_offset, key_offset)
    slab = _slabs.get(key)
    if slab is None:
        slab = _lib.Slab()
        slab.extent = _lib.int_array(layout, "layout")
        slab.query_offset = _lib.int_array(query_offset, "query_offset")
        slab.key_offset = _lib.int_array(key_offset, "key_offset")
        slab = _slabs.setdefault(key, slab)
    return slab


def _require():
    if not _lib.has_slabs:
        raise _lib.UnsupportedError(f"slabs need libgna ABI version 6, the loaded library "
                                    f"implements version {_lib.abi_version()}")


def _offsets(fn, name, offsets, rank):
    offsets = (0,) * rank if offsets is None else tuple(offsets)
    if len(offsets) != rank or not all(isinstance(o, int) and not isinstance(o, bool)
                                       for o in offsets):
        raise ValueError(f"{fn}: {name} must be {rank} ints (one per axis), got {offsets!r}")
    return offsets


def _rule(fn, layout, kernel_size, stride, dilation, is_causal, scale):
    layout = tuple(int(e) for e in layout)
    if not 1 <= len(layout) <= 3:
        raise ValueError(f"{fn}: layout must have 1 to 3 axes, got {layout}")
    window, strides, dilations, causal, _ = functional._rule(fn, len(layout), kernel_size, stride,
                                                             dilation, is_causal, None)
    params = ops._params(window, strides, dilations, causal, functional._scale(fn, scale))
    return layout, params


def key_range(layout, kernel_size, stride=1, dilation=1, is_causal=False, *, axis, query_begin,
              query_end):
    """The keys [begin, end) of `axis` (global coordinates) that the queries [query_begin,
    query_end) of that axis attend under the rule over `layout` (the core's rule, through the
    library: gna_key_range)."""
    _require()
    fn = "key_range"
    layout, params = _rule(fn, layout, kernel_size, stride, dilation, is_causal, None)
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < len(layout):
        raise ValueError(f"{fn}: axis must be an int in [0, {len(layout)}), got {axis!r}")
    begin, end = ctypes.c_int32(), ctypes.c_int32()
    _lib.check(_lib.lib.gna_key_range(ctypes.byref(params), axis, layout[axis],
                                      _lib.int32(query_begin, "query_begin"),
                                      _lib.int32(query_end, "query_end"), ctypes.byref(begin),
                                      ctypes.byref(end)))
    return begin.value, end.value


def _entry_call(entry, names, params, slab, backend):
    return lambda t: _calls.call(entry, names, params, t, backend, slab)


class _SlabAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, params, slab, backend, query, key, value):
        run = _entry_call(_lib.lib.gna_forward_slab, _calls._FORWARD_NAMES, params, slab, backend)
        out, lse = ops._forward_through(run, query, key, value, None, None)
        ctx.config = (params, slab, backend)
        ctx.save_for_backward(query, key, value, out, lse)
        return out

    @staticmethod
    def backward(ctx, d_out):
        params, slab, backend = ctx.config
        query, key, value, out, lse = ctx.saved_tensors
        run = _entry_call(_lib.lib.gna_backward_slab, _calls._BACKWARD_NAMES, params, slab,
                          backend)
        dq, dk, dv, _, _ = ops._backward_through(run, query, key, value, None, None, out, lse,
                                                 d_out)
        return None, None, None, dq, dk, dv


def slab_attention(query, key, value, layout, kernel_size, stride=1, dilation=1,
                   is_causal=False, *, query_offset=None, key_offset=None, scale=None,
                   backend="auto"):
    """Neighborhood attention of a slab of queries over a slab of keys of `layout`.

    query [B, *q_local, Hq, D]: the queries at global coordinates [query_offset[a],
    query_offset[a] + q_local[a]) of each axis a; key [B, *k_local, Hkv, D] and value
    [B, *k_local, Hkv, Dv]: the keys at [key_offset[a], key_offset[a] + k_local[a]). The rule's
    arguments are those of gna.na1d/2d/3d over the whole layout; every query's window must lie
    in the key slab (key_range says which keys it needs). Returns [B, *q_local, Hq, Dv], the
    same rows of the whole layout's output; differentiable (a key's gradient counts only the
    slab's queries). UnsupportedError where no backend takes the call (CUDA tensors other than
    the Hopper kernels', e.g. float32 or a GPU before sm_90).
    """
    _require()
    fn = "slab_attention"
    layout, params = _rule(fn, layout, kernel_size, stride, dilation, is_causal, scale)
    rank = len(layout)
    slab = _slab(layout, _offsets(fn, "query_offset", query_offset, rank),
                 _offsets(fn, "key_offset", key_offset, rank))
    return _SlabAttention.apply(params, slab, backend, query, key, value)


def _rows_of(t, name, extents):
    """A metadata-only view of token tensor t as if it held `extents` rows per axis."""
    g = view(t, name, metadata_only=True)
    shape = (t.shape[0],) + tuple(extents) + tuple(t.shape[-2:])
    stride = 1
    for d in reversed(range(len(shape))):
        g.shape[d], g.strides[d] = shape[d], stride
        stride *= shape[d]
    return g


def slab_backend(query, key, value, layout, kernel_size, stride=1, dilation=1, is_causal=False,
                 *, query_offset=None, key_rows=None, query_rows=None, backward=False,
                 backend="auto"):
    """The backend that would run slab_attention for these queries (at query_offset) with these
    tensors' device, dtype and heads, or None where none takes slabs (or the library predates
    them). key_rows: per axis the (begin, end) of the key slab (global coordinates); None: every
    row of the layout, so that the answer does not depend on which key rows are at hand (the
    Hopper kernels also ask where the key slab starts: a TMA box may not start before it).
    query_rows: likewise for the query slab, instead of query_offset and the query tensor's
    rows (another rank's slab, asked about with this rank's tensor)."""
    if not _lib.has_slabs:
        return None
    fn = "slab_backend"
    layout, params = _rule(fn, layout, kernel_size, stride, dilation, is_causal, None)
    rank = len(layout)
    rows = tuple((0, e) for e in layout) if key_rows is None else tuple(key_rows)
    if len(rows) != rank:
        raise ValueError(f"{fn}: key_rows must be {rank} (begin, end) pairs, got {key_rows!r}")
    if query_rows is not None:
        if len(query_rows) != rank:
            raise ValueError(f"{fn}: query_rows must be {rank} (begin, end) pairs, got "
                             f"{query_rows!r}")
        query_offset = tuple(b for b, _ in query_rows)
    slab = _slab(layout, _offsets(fn, "query_offset", query_offset, rank),
                 _offsets(fn, "key_offset", tuple(b for b, _ in rows), rank))
    extents = tuple(e - b for b, e in rows)
    query_view = view(query, "query", metadata_only=True) if query_rows is None else \
        _rows_of(query, "query", tuple(e - b for b, e in query_rows))
    views = [query_view, _rows_of(key, "key", extents), _rows_of(value, "value", extents)]
    name = ctypes.create_string_buffer(64)
    status = _lib.lib.gna_select_backend_slab(
        ctypes.byref(params), ctypes.byref(slab), *[ctypes.byref(v) for v in views], None, None,
        1 if backward else 0, ctypes.byref(options(query.device, backend)), name, len(name))
    if status != 0:
        return None
    return name.value.decode()
