"""gna as the benchmark times it: end-to-end (gna.na1d/2d/3d, what a user calls: allocation,
custom-op dispatch, any layout conversion) and kernel-only (the C ABI called directly on
preallocated outputs, so only the library's own launches are timed)."""
import ctypes

import torch

import gna
from gna import _lib
from gna._tensors import options, ref, view

NA = {1: gna.na1d, 2: gna.na2d, 3: gna.na3d}


def end_to_end_forward(case, q, k, v, backend, precision="auto"):
    na = NA[case.rank]
    return lambda: na(q, k, v, case.window, stride=case.strides, dilation=case.dilations,
                      is_causal=case.causals, backend=backend, precision=precision)


def accuracy(case, q, k, v, out, heads=2):
    """Cosine similarity and relative L1 error (sum |out - ref| / sum |ref|) of `out` against
    float32 attention over the same rule (gna on float32 inputs), on the first `heads` heads
    (the float32 forward runs on the GPU reference)."""
    h = min(heads, q.shape[-2])
    sl = lambda t: t[..., :h, :].float().contiguous()  # noqa: E731
    with torch.no_grad():
        ref = NA[case.rank](sl(q), sl(k), sl(v), case.window, stride=case.strides,
                            dilation=case.dilations, is_causal=case.causals).double().flatten()
    got = out[..., :h, :].double().flatten()
    cosine = (got @ ref / (got.norm() * ref.norm())).item()
    return cosine, ((got - ref).abs().sum() / ref.abs().sum()).item()


def end_to_end_forward_backward(case, q, k, v, d_out, backend):
    na = NA[case.rank]
    inputs = (q, k, v)

    def run():
        out = na(q, k, v, case.window, stride=case.strides, dilation=case.dilations,
                 is_causal=case.causals,
                 backend=backend)
        torch.autograd.grad(out, inputs, d_out)

    return run


def compiled_end_to_end(case, q, k, v, d_out, backend, grad, mode="reduce-overhead"):
    """end_to_end_forward(_backward)'s step with gna's call under torch.compile(mode=mode): with
    "reduce-overhead" inductor captures the forward and the backward graphs in CUDA graphs, each
    step begun with torch.compiler.cudagraph_mark_step_begin (torch >= 2.1)."""
    na = NA[case.rank]
    call = torch.compile(lambda q, k, v: na(q, k, v, case.window, stride=case.strides,
                                            dilation=case.dilations, is_causal=case.causals,
                                            backend=backend), mode=mode)
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", lambda: None)
    inputs = (q, k, v)

    def run():
        mark()
        out = call(q, k, v)
        if grad:
            torch.autograd.grad(out, inputs, d_out)

    return run


class KernelCalls:
    """Preallocated outputs and prebuilt C structs for direct gna_forward / gna_backward calls."""

    def __init__(self, case, q, k, v, backend):
        q, k, v = q.detach(), k.detach(), v.detach()
        self.params = _lib.make_params(case.window, case.strides, case.dilations,
                                       case.causals, 0.0)
        self.out = torch.empty_like(q)
        self.lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
        self.d_out = torch.randn_like(q)
        self.grads = [torch.empty_like(t) for t in (q, k, v)]
        self.keep = (q, k, v)
        self.views = [view(t, n) for t, n in zip((q, k, v), ("query", "key", "value"))]
        self.out_views = [view(self.out, "out"), view(self.lse, "lse")]
        self.d_out_view = view(self.d_out, "d_out")
        self.grad_views = [view(t, n) for t, n in zip(self.grads, ("dq", "dk", "dv"))]
        self.options = options(q.device, backend)

    def forward(self):
        _lib.check(_lib.lib.gna_forward(ctypes.byref(self.params), *[ref(x) for x in self.views],
                                        None, None, ref(self.out_views[0]),
                                        ref(self.out_views[1]), ctypes.byref(self.options)))

    def backward(self):
        _lib.check(_lib.lib.gna_backward(
            ctypes.byref(self.params), *[ref(x) for x in self.views], None, None,
            ref(self.out_views[0]), ref(self.out_views[1]), ref(self.d_out_view),
            *[ref(x) for x in self.grad_views], None, None, ctypes.byref(self.options)))

    def forward_backward(self):
        self.forward()
        self.backward()
