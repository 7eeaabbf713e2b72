#!/usr/bin/env python3
"""Runs hopper_bwd_bench (our backward) and, in the same process tree, cuDNN SDPA dense
backward (PyTorch, CUDNN_ATTENTION backend) on the dense problem of each case, plus
FlexAttention forward + backward with the same neighborhood mask for the flux4k stride-1 case;
prints the table of docs/performance.md.

    python3 tools/hopper_bwd_bench/hopper_bwd_bench.py --bench build/bin/hopper_bwd_bench \
        [--json out.json] [--no-flex] [--deterministic]

x cuDNN = cuDNN dense backward ms / our backward ms; TFLOP/s counts attended pairs only
(backward = 2.5 x forward FLOPs).
"""
import argparse
import json
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# case -> (batch, heads, tokens, head dim) of the dense problem it is compared with.
DENSE = {
    "hunyuan_dense": (1, 24, 30 * 48 * 80, 128),
    "hunyuan_18x24x24_s16x8x8": (1, 24, 30 * 48 * 80, 128),
    "hunyuan_18x24x24_s1": (1, 24, 30 * 48 * 80, 128),
    "flux4k_80x80_s1": (1, 24, 256 * 256, 128),
    "flux4k_80x80_s16": (1, 24, 256 * 256, 128),
    "hunyuan_dense_d64": (1, 24, 30 * 48 * 80, 64),
}
TARGET = {
    "hunyuan_dense": ">= 0.85",
    "hunyuan_18x24x24_s16x8x8": ">= 9",
    "hunyuan_18x24x24_s1": ">= 3",
    "flux4k_80x80_s1": "fwd+bwd >= 3x Flex",
    "flux4k_80x80_s16": "report",
    "hunyuan_dense_d64": "report",
}


def median_ms(fn, reps):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def time_cudnn_backward(b, h, n, d, reps):
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    g = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(q, k, v)
        return median_ms(lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True), reps)


def time_flex_na2d(extent, window, heads, d, reps):
    """FlexAttention forward + backward, 2-D neighborhood attention (stride 1, non-causal),
    tokens in plain row-major order."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    X, Y = extent
    KX, KY = window

    def start(i, n, k):
        return torch.clamp(i - k // 2, 0, n - k)

    def mask_mod(b, h, qi, ki):
        qx, qy, kx, ky = qi // Y, qi % Y, ki // Y, ki % Y
        sx, sy = start(qx, X, KX), start(qy, Y, KY)
        return (kx >= sx) & (kx < sx + KX) & (ky >= sy) & (ky < sy + KY)

    n = X * Y
    bm = create_block_mask(mask_mod, 1, 1, n, n, device="cuda")
    flex = torch.compile(flex_attention)
    q, k, v = (torch.randn(1, heads, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    g = torch.randn(1, heads, n, d, device="cuda", dtype=torch.bfloat16)

    def step():
        out = flex(q, k, v, block_mask=bm)
        torch.autograd.grad(out, (q, k, v), g)

    return median_ms(step, reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--json")
    ap.add_argument("--cases", nargs="*")
    ap.add_argument("--reps", type=int, default=0)
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--forward", default="hopper", help="backend of the forward (O, LSE)")
    args = ap.parse_args()
    cases = args.cases or list(DENSE)
    ours = {}
    for c in cases:
        cmd = [args.bench, "--case", c, "--reps", str(args.reps), "--forward", args.forward]
        if args.deterministic:
            cmd.append("--deterministic")
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired:
            print(f"{c}: timed out", file=sys.stderr)
            continue
        if out.returncode != 0:
            print(out.stdout, out.stderr, file=sys.stderr)
            continue
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                ours[r["case"]] = r
    dense_ms = {}
    for sig in sorted(set(DENSE[c] for c in cases)):
        b, h, n, d = sig
        dense_ms[sig] = time_cudnn_backward(b, h, n, d, 10)
    flex_ms = None
    if not args.no_flex and "flux4k_80x80_s1" in cases:
        try:
            flex_ms = time_flex_na2d((256, 256), (80, 80), 24, 128, 10)
        except Exception as e:  # report, keep the rest of the table
            print(f"FlexAttention failed: {e}", file=sys.stderr)
    rows = []
    print("| case | tiles (Q / KV) | bwd ms | bwd TFLOP/s | cuDNN dense bwd ms | x cuDNN bwd | "
          "fwd+bwd ms | FLOP bound | target |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in cases:
        r = ours.get(c)
        dm = dense_ms[DENSE[c]]
        if r is None or "error" in r:
            print(f"| {c} | - | failed: {r} | | {dm:.2f} | | | | {TARGET[c]} |")
            continue
        ratio = dm / r["bwd_ms"]
        tiles = "x".join(map(str, r["q_tile"])) + " / " + "x".join(map(str, r["kv_tile"]))
        print(f"| {c} | {tiles} | {r['bwd_ms']:.2f} | {r['tflops']:.0f} | {dm:.2f} | {ratio:.2f} | "
              f"{r['fwd_bwd_ms']:.2f} | {r['flop_bound']:.2f} | {TARGET[c]} |")
        rows.append(dict(r, cudnn_bwd_ms=dm, ratio=ratio))
    if flex_ms is not None and "flux4k_80x80_s1" in ours:
        r = ours["flux4k_80x80_s1"]
        print(f"\nflux4k_80x80_s1 forward + backward: ours {r['fwd_bwd_ms']:.2f} ms, FlexAttention "
              f"{flex_ms:.2f} ms (same mask, plain token order): {flex_ms / r['fwd_bwd_ms']:.2f}x")
        rows.append({"case": "flux4k_80x80_s1_flex_fwd_bwd", "flex_ms": flex_ms,
                     "ours_ms": r["fwd_bwd_ms"], "ratio": flex_ms / r["fwd_bwd_ms"]})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
