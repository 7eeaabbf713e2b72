"""Prebuilt C ABI calls: per signature (the rule, the per-head rules where the entry takes them,
the backend, the device, and each tensor's shape, strides and dtype) the gna_tensor structs, the options and the argument list are built
once; a call then only sets the data pointers, the stream and the deterministic flag. Building
them on every call was most of the Python layer's host time in an eager training step, which on
small image problems is longer than the kernels. The fused attention ops and the unfused
operators both call through here."""
import ctypes
import threading

import torch

from . import _lib
from ._tensors import _stream_of, options, view

_FORWARD_NAMES = ("query", "key", "value", "additional_keys", "additional_values", "out", "lse")
_BACKWARD_NAMES = ("query", "key", "value", "additional_keys", "additional_values", "out", "lse",
                   "d_out", "dq", "dk", "dv", "d_additional_keys", "d_additional_values")
_FORWARD_COUNTS_NAMES = _FORWARD_NAMES[:5] + ("additional_kv_counts",) + _FORWARD_NAMES[5:]
_BACKWARD_COUNTS_NAMES = _BACKWARD_NAMES[:5] + ("additional_kv_counts",) + _BACKWARD_NAMES[5:]
_MAX_CALLS = 1024  # signatures kept per thread (a long-running process with varying shapes)


class _Call:
    """One entry point's call for one signature."""

    __slots__ = ("entry", "params", "rules", "views", "opts", "args", "cuda")

    def __init__(self, entry, params, tensors, names, device, backend, rules):
        self.entry = entry
        self.params = params
        self.rules = rules
        self.views = [view(t, n) for t, n in zip(tensors, names)]
        self.opts = options(device, backend)
        self.cuda = device if device.type == "cuda" else None
        self.args = ([ctypes.byref(params)] +
                     ([] if rules is None else [None if rules is NO_RULES else
                                                ctypes.byref(rules)]) +
                     [None if g is None else ctypes.byref(g) for g in self.views] +
                     [ctypes.byref(self.opts)])

    def __call__(self, tensors):
        for g, t in zip(self.views, tensors):
            if g is not None:
                g.data = t.data_ptr()
        self.opts.deterministic = 1 if torch.are_deterministic_algorithms_enabled() else 0
        if self.cuda is not None:
            self.opts.stream = _stream_of(self.cuda)
        _lib.check(self.entry(*self.args))


# The per-head entry points' rules argument when the call has none (NULL).
NO_RULES = ctypes.c_int32(0)


def _signature(t):
    return None if t is None else (t.shape, t.stride(), t.dtype)


# Per thread: a call's structs are written before the C call, which runs without the GIL, so two
# threads must not share them (autograd runs backward passes on its own threads).
_local = threading.local()


def call(entry, names, params, tensors, backend="auto", rules=None):
    """entry(params, tensors..., options) through the call prebuilt for this signature: the
    C ABI's attention and unfused entry points; entry(params, rules, tensors..., options) for
    the per-head entry points (rules: a gna_head_rules, built once per distinct set of rules,
    so that its identity stands for its content as the params' does). tensors: one per name,
    None where absent; the device is the first tensor's."""
    cache = getattr(_local, "calls", None)
    if cache is None:
        cache = _local.calls = {}
    device = tensors[0].device
    # ctypes structs and function pointers do not hash: the key holds their ids, and the call
    # the objects themselves, so a recycled id is noticed.
    key = (id(entry), id(params), id(rules), backend, device) + tuple(
        _signature(t) for t in tensors)
    prebuilt = cache.get(key)
    if (prebuilt is None or prebuilt.params is not params or prebuilt.entry is not entry or
            prebuilt.rules is not rules):
        if len(cache) >= _MAX_CALLS:
            cache.clear()
        prebuilt = cache[key] = _Call(entry, params, tensors, names, device, backend, rules)
    prebuilt(tensors)


def forward(params, tensors, backend):
    """gna_forward on (q, k, v, ak, av, out, lse); None for absent additional tokens / lse."""
    call(_lib.lib.gna_forward, _FORWARD_NAMES, params, tensors, backend)


def backward(params, tensors, backend):
    """gna_backward on (q, k, v, ak, av, out, lse, d_out, dq, dk, dv, dak, dav)."""
    call(_lib.lib.gna_backward, _BACKWARD_NAMES, params, tensors, backend)


def forward_heads(params, rules, tensors, backend):
    """gna_forward_heads (per-head rules) on (q, k, v, ak, av, out, lse)."""
    call(_lib.lib.gna_forward_heads, _FORWARD_NAMES, params, tensors, backend, rules)


def backward_heads(params, rules, tensors, backend):
    """gna_backward_heads (per-head rules) on (q, k, v, ak, av, out, lse, d_out, dq, dk, dv,
    dak, dav)."""
    call(_lib.lib.gna_backward_heads, _BACKWARD_NAMES, params, tensors, backend, rules)


def forward_counts(params, rules, tensors, backend):
    """gna_forward_counts on (q, k, v, ak, av, counts, out, lse); rules NO_RULES for none."""
    call(_lib.lib.gna_forward_counts, _FORWARD_COUNTS_NAMES, params, tensors, backend, rules)


def backward_counts(params, rules, tensors, backend):
    """gna_backward_counts on (q, k, v, ak, av, counts, out, lse, d_out, dq, dk, dv, dak, dav)."""
    call(_lib.lib.gna_backward_counts, _BACKWARD_COUNTS_NAMES, params, tensors, backend, rules)
