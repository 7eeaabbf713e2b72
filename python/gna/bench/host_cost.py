"""Host cost of a call through gna.na2d: forward and forward + backward on tensors so small that
the GPU idles, so the time per call is the host's (Python, autograd, the C ABI, the launches),
beside the same step through torch's own SDPA and its parts (the op without autograd, the
prebuilt C ABI call alone, an autograd.Function that computes nothing); then profiles of the
forward + backward loop (torch.profiler's host time per op, cProfile's per Python function).

    python3 -m gna.bench.host_cost [--device cuda] [--profile-rows 30]
"""
import argparse
import cProfile
import io
import pstats
import time

import torch
import torch.nn.functional as F

import gna
from gna import _calls, ops

# (batch, extent, heads, head dim, dilation): tiny ones measure the host alone; the DiNAT 28x28
# one shows the host cost beside real kernels.
_SHAPES = [(1, 14, 1, 32, 1), (1, 28, 1, 32, 4), (128, 28, 4, 32, 4)]
_WINDOW = 7


def _inputs(batch, extent, heads, dim, device, grad):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    return [torch.randn(batch, extent, extent, heads, dim, device=device, dtype=dtype,
                        requires_grad=grad) for _ in range(3)]


def _step(q, k, v, dilation, backward):
    out = gna.na2d(q, k, v, _WINDOW, dilation=dilation)
    if backward:
        out.backward(torch.ones_like(out))


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _per_call(fn, device, calls=300):
    """Microseconds per fn() call, after a warmup, the device drained before and after."""
    for _ in range(20):
        fn()
    _sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / calls * 1e6


class _Nothing(torch.autograd.Function):
    """What autograd costs around an op that computes nothing."""

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return torch.empty_like(q)

    @staticmethod
    def backward(ctx, d_out):
        q, k, v = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def parts(shape, device, calls=300):
    """(name, microseconds per call) of each way through one step on this shape."""
    batch, extent, heads, dim, dilation = shape
    q, k, v = _inputs(batch, extent, heads, dim, device, True)
    rule = ([_WINDOW] * 2, [1, 1], [dilation] * 2, [False, False], 0.0)

    def timed(fn):
        return _per_call(fn, device, calls)

    rows = [("gna.na2d forward", timed(lambda: _step(q, k, v, dilation, False))),
            ("gna.na2d forward + backward", timed(lambda: _step(q, k, v, dilation, True)))]
    if device == "cuda" and hasattr(torch.autograd, "set_multithreading_enabled"):
        # The autograd engine runs CUDA backward passes on a thread of its own per device; the
        # hand-over and back costs host time on every step.
        with torch.autograd.set_multithreading_enabled(False):
            rows.append(("gna.na2d forward + backward, backward on the calling thread",
                         timed(lambda: _step(q, k, v, dilation, True))))
    with torch.no_grad():
        out, lse = ops._na_forward(q, k, v, None, None, *rule, "auto", False)
        d_out = torch.ones_like(out)
        rows.append(("op forward, no autograd",
                     timed(lambda: ops._na_forward(q, k, v, None, None, *rule, "auto", False))))
        rows.append(("op backward, no autograd", timed(
            lambda: ops._na_backward_eager(q, k, v, None, None, out, lse, d_out, *rule, "auto"))))
        params = ops._params(*rule)
        fwd = (q, k, v, None, None, out, lse)
        grads = [torch.empty_like(t) for t in (q, k, v)]
        bwd = (q, k, v, None, None, out, lse, d_out, *grads, None, None)
        rows.append(("C ABI forward (prebuilt call)",
                     timed(lambda: _calls.forward(params, fwd, "auto"))))
        rows.append(("C ABI backward (prebuilt call)",
                     timed(lambda: _calls.backward(params, bwd, "auto"))))

    def nothing_step():
        o = _Nothing.apply(q, k, v)
        o.backward(torch.ones_like(o))

    rows.append(("autograd.Function computing nothing, fwd + bwd", timed(nothing_step)))
    if device == "cuda":
        # torch's own dense attention on the same tokens: [B, H, N, D]
        qd, kd, vd = [t.detach().flatten(1, 2).transpose(1, 2).contiguous().requires_grad_()
                      for t in (q, k, v)]

        def sdpa_step(backward):
            o = F.scaled_dot_product_attention(qd, kd, vd)
            if backward:
                o.backward(torch.ones_like(o))

        rows.append(("torch SDPA forward", timed(lambda: sdpa_step(False))))
        rows.append(("torch SDPA forward + backward", timed(lambda: sdpa_step(True))))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--profile-rows", type=int, default=30)
    args = p.parse_args()
    shapes = _SHAPES if args.device == "cuda" else _SHAPES[:1]  # the CPU reference is slow
    for shape in shapes:
        b, x, h, d, dil = shape
        print(f"b{b} {x}x{x} h{h} d{d} {_WINDOW}x{_WINDOW} dilation {dil} ({args.device}), "
              "host microseconds per call:")
        for name, us in parts(shape, args.device):
            print(f"  {name:<60} {us:8.1f}")
    b, x, h, d, dil = _SHAPES[0]
    q, k, v = _inputs(b, x, h, d, args.device, True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(100):
            _step(q, k, v, dil, True)
        _sync(args.device)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.profile_rows))
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(300):
        _step(q, k, v, dil, True)
    _sync(args.device)
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.profile_rows)
    print(text.getvalue())


if __name__ == "__main__":
    main()
