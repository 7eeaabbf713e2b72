"""Times one rank's share of halo context parallelism on one GPU: slab_attention for rank R of P
(its own slab of the sharded axis, the key rows its queries attend) against the whole problem's
call (gna.na1d/na3d), forward and forward+backward, CUDA events (median of --reps after
warm-up). The ratio whole / share bounds what P GPUs can reach in halo mode before the exchange.

    python3 examples/slab_share.py                      # hunyuan 30x48x80, h24 d128, 18x24x24
    python3 examples/slab_share.py --case long1d        # 32768 tokens, window 2048, 8 heads
"""
import argparse
import statistics

import torch

import gna
from gna import slab
from gna.distributed import query_pads

CASES = {
    # layout, heads, dim, window
    "hunyuan": ((30, 48, 80), 24, 128, (18, 24, 24)),
    "long1d": ((32768,), 8, 128, (2048,)),
}


def timed(fn, reps):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=sorted(CASES), default="hunyuan")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    layout, heads, dim, window = CASES[a.case]
    n = layout[0] // a.ranks
    make = lambda rows, h: torch.randn(1, rows, *layout[1:], h, dim, device="cuda",  # noqa
                                       dtype=torch.bfloat16, requires_grad=True)
    q, k, v = make(layout[0], heads), make(layout[0], heads), make(layout[0], heads)
    na = (gna.na1d, gna.na2d, gna.na3d)[len(layout) - 1]
    zeros = (0,) * (len(layout) - 1)

    def share(backward):
        """The rank's slab as halo_attention runs it: a forward-only call's queries from the
        grid of the forward's Q tile on (query_pads), a training call's from its first row."""
        pad = query_pads(layout, window, world_size=a.ranks, head_dim=dim,
                         backward=backward)[a.rank]
        q0, q1 = a.rank * n - pad, (a.rank + 1) * n
        k0, k1 = slab.key_range(layout, window, axis=0, query_begin=q0, query_end=q1)
        k0, k1 = min(k0, q0), max(k1, q1)
        sq, sk, sv = (make(q1 - q0, heads), make(k1 - k0, heads), make(k1 - k0, heads))
        backend = slab.slab_backend(sq, sk, sv, layout, window, query_offset=(q0,) + zeros,
                                    backward=backward)
        print(f"{'training' if backward else 'forward'}: queries [{q0}, {q1}) keys [{k0}, "
              f"{k1}) of axis 0, slab backend {backend}")
        return lambda: slab.slab_attention(sq, sk, sv, layout, window,  # noqa: E731
                                           query_offset=(q0,) + zeros,
                                           key_offset=(k0,) + zeros)

    def step(fn):
        grad = torch.randn_like(fn())
        return lambda: fn().backward(grad)

    whole = lambda: na(q, k, v, window)  # noqa: E731
    padded, unpadded = share(False), share(True)
    with torch.no_grad():
        whole_fwd, share_fwd, unpadded_fwd = (timed(fn, a.reps)
                                              for fn in (whole, padded, unpadded))
    rows = [("whole", whole_fwd, timed(step(whole), a.reps)),
            (f"rank {a.rank}/{a.ranks}", share_fwd, timed(step(unpadded), a.reps))]
    # The forward from the slab's first row too (what a padded forward saves).
    print(f"forward from the slab's first row: {unpadded_fwd:.2f} ms")
    print(f"{a.case} {layout} h{heads} d{dim} window {window}; rank {a.rank} of {a.ranks}; "
          f"{torch.cuda.get_device_name()}")
    print(f"{'call':<14}{'fwd ms':>10}{'fwd+bwd ms':>12}")
    for name, fwd, both in rows:
        print(f"{name:<14}{fwd:>10.2f}{both:>12.2f}")
    print(f"{'whole/share':<14}{rows[0][1] / rows[1][1]:>10.3f}{rows[0][2] / rows[1][2]:>12.3f}")


if __name__ == "__main__":
    main()
