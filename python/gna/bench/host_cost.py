"""Host cost of a call through gna.na2d: forward and forward + backward on tensors so small that
the GPU idles, so the time per call is the host's (Python, autograd, the C ABI, the launches);
then a cProfile of the forward + backward loop.

    python3 -m gna.bench.host_cost [--device cuda] [--profile-rows 30]
"""
import argparse
import cProfile
import io
import pstats
import time

import torch

import gna

# (batch, extent, heads, head dim, dilation): tiny ones measure the host alone; the DiNAT 28x28
# one shows the host cost beside real kernels.
_SHAPES = [(1, 14, 1, 32, 1), (1, 28, 1, 32, 4), (128, 28, 4, 32, 4)]


def _inputs(batch, extent, heads, dim, device, grad):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    return [torch.randn(batch, extent, extent, heads, dim, device=device, dtype=dtype,
                        requires_grad=grad) for _ in range(3)]


def _step(q, k, v, dilation, backward):
    out = gna.na2d(q, k, v, 7, dilation=dilation)
    if backward:
        out.backward(torch.ones_like(out))


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_per_call(shape, device, backward, calls=300):
    batch, extent, heads, dim, dilation = shape
    q, k, v = _inputs(batch, extent, heads, dim, device, backward)
    for _ in range(20):
        _step(q, k, v, dilation, backward)
    _sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        _step(q, k, v, dilation, backward)
    _sync(device)
    return (time.perf_counter() - start) / calls * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--profile-rows", type=int, default=30)
    args = p.parse_args()
    for shape in _SHAPES if args.device == "cuda" else _SHAPES[:2]:  # the CPU reference is slow
        forward = time_per_call(shape, args.device, False)
        both = time_per_call(shape, args.device, True)
        b, x, h, d, dil = shape
        print(f"b{b} {x}x{x} h{h} d{d} dilation {dil}: forward {forward:.1f} us/call, "
              f"forward+backward {both:.1f} us/step")
    b, x, h, d, dil = _SHAPES[1]
    q, k, v = _inputs(b, x, h, d, args.device, True)
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
