"""Prebuilt C ABI calls: per signature (the rule, the backend, the device, and each tensor's
shape, strides and dtype) the gna_tensor structs, the options and the argument list are built
once; a call then only sets the data pointers, the stream and the deterministic flag. Building
them on every call was most of the Python layer's host time in an eager training step, which on
small image problems is longer than the kernels."""
import ctypes
import threading

import torch

from . import _lib
from ._tensors import _stream_of, options, view

_FORWARD_NAMES = ("query", "key", "value", "additional_keys", "additional_values", "out", "lse")
_BACKWARD_NAMES = ("query", "key", "value", "additional_keys", "additional_values", "out", "lse",
                   "d_out", "dq", "dk", "dv", "d_additional_keys", "d_additional_values")
_MAX_CALLS = 1024  # signatures kept per entry point (a long-running process with varying shapes)


class _Call:
    """One entry point's call for one signature."""

    __slots__ = ("entry", "params", "views", "opts", "args", "cuda")

    def __init__(self, entry, params, tensors, names, device, backend):
        self.entry = entry
        self.params = params
        self.views = [view(t, n) for t, n in zip(tensors, names)]
        self.opts = options(device, backend)
        self.cuda = device if device.type == "cuda" else None
        self.args = ([ctypes.byref(params)] +
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


def _signature(t):
    return None if t is None else (t.shape, t.stride(), t.dtype)


def _call(cache, entry, names, params, tensors, backend):
    device = tensors[0].device
    # ctypes structs do not hash: the key holds the params' id, and the call the params
    # themselves, so a recycled id is noticed.
    key = (id(params), backend, device) + tuple(_signature(t) for t in tensors)
    call = cache.get(key)
    if call is None or call.params is not params:
        if len(cache) >= _MAX_CALLS:
            cache.clear()
        call = cache[key] = _Call(entry, params, tensors, names, device, backend)
    call(tensors)


# Per thread: a call's structs are written before the C call, which runs without the GIL, so two
# threads must not share them (autograd runs backward passes on its own threads).
_local = threading.local()


def _caches():
    try:
        return _local.forward, _local.backward
    except AttributeError:
        _local.forward, _local.backward = {}, {}
        return _local.forward, _local.backward


def forward(params, tensors, backend):
    """gna_forward on (q, k, v, ak, av, out, lse); None for absent additional tokens / lse."""
    _call(_caches()[0], _lib.lib.gna_forward, _FORWARD_NAMES, params, tensors, backend)


def backward(params, tensors, backend):
    """gna_backward on (q, k, v, ak, av, out, lse, d_out, dq, dk, dv, dak, dav)."""
    _call(_caches()[1], _lib.lib.gna_backward, _BACKWARD_NAMES, params, tensors, backend)
