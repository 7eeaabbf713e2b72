#!/usr/bin/env python3
"""Runs hopper_bench (our kernel) and cuDNN SDPA dense attention (PyTorch, CUDNN_ATTENTION
backend) on the same problems in one process tree, and prints the table of docs/performance.md.

    python3 tools/hopper_bench/hopper_bench.py --bench build/bin/hopper_bench [--json out.json]
        [--schedules auto,grid,persistent]   (one row per case and schedule)

Ratio = cuDNN dense ms / our ms (higher is better); TFLOP/s counts attended pairs only.
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
    "hunyuan_30x40x40_s1": (1, 24, 30 * 48 * 80, 128),
    "flux4k_80x80_s16": (1, 24, 256 * 256, 128),
    "flux4k_80x80_s1": (1, 24, 256 * 256, 128),
    "hunyuan_dense_d64": (1, 24, 30 * 48 * 80, 64),
    "hunyuan_dense_d256": (1, 24, 30 * 48 * 80, 256),
    "nat_56x56_7x7_b128_d32": (128, 2, 56 * 56, 32),
}
TARGET = {
    "hunyuan_dense": ">= 0.95",
    "hunyuan_18x24x24_s16x8x8": ">= 10.5",
    "hunyuan_18x24x24_s1": ">= 3.6",
    "hunyuan_30x40x40_s1": "report",
    "flux4k_80x80_s16": ">= 9.8",
    "flux4k_80x80_s1": ">= 5.5",
    "hunyuan_dense_d64": ">= 0.9",
    "hunyuan_dense_d256": "report",
    "nat_56x56_7x7_b128_d32": "beat 1.57 / 1.24 ms",
}


def time_cudnn(b, h, n, d, reps):
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(2):
            F.scaled_dot_product_attention(q, k, v)
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            F.scaled_dot_product_attention(q, k, v)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--json")
    ap.add_argument("--cases", nargs="*")
    ap.add_argument("--reps", type=int, default=0,
                    help="repetitions of our kernel per case (0: about 2 s worth, 5 to 200)")
    ap.add_argument("--schedules", default="auto",
                    help="comma-separated hopper_bench --schedule values (A/B in one run)")
    args = ap.parse_args()
    cases = args.cases or list(DENSE)
    schedules = args.schedules.split(",")
    ours = {}
    for c in cases:
        for sched in schedules:
            try:
                out = subprocess.run([args.bench, "--case", c, "--reps", str(args.reps),
                                      "--schedule", sched],
                                     capture_output=True, text=True, timeout=120)
            except subprocess.TimeoutExpired:
                print(f"{c} ({sched}): timed out", file=sys.stderr)
                continue
            if out.returncode != 0:
                print(out.stdout, out.stderr, file=sys.stderr)
                continue
            for line in out.stdout.splitlines():
                if line.startswith("{"):
                    r = json.loads(line)
                    r["schedule"] = sched
                    ours[(r["case"], sched)] = r
    dense_ms = {}
    for sig in sorted(set(DENSE[c] for c in cases)):
        b, h, n, d = sig
        first = time_cudnn(b, h, n, d, 1)
        reps = max(5, min(100, int(2000 / max(first, 1e-3))))
        dense_ms[sig] = time_cudnn(b, h, n, d, reps)
    rows = []
    multi = len(schedules) > 1
    sched_col = "schedule | " if multi else ""
    print(f"| case | {sched_col}tiles (Q / KV) | ms | eff. TFLOP/s | cuDNN dense ms | x cuDNN | tile bound | FLOP bound | % of tile bound | target |")
    print("|---|" + ("---|" if multi else "") + "---|---|---|---|---|---|---|---|---|")
    for c in cases:
        for sched in schedules:
            r = ours.get((c, sched))
            dm = dense_ms[DENSE[c]]
            label = f"{c} | {sched}" if multi else c
            if r is None or "error" in r:
                print(f"| {label} | - | failed: {r} | | {dm:.3f} | | | | | {TARGET[c]} |")
                continue
            ratio = dm / r["ms"]
            tiles = "x".join(map(str, r["q_tile"])) + " / " + "x".join(map(str, r["kv_tile"]))
            pct = 100.0 * ratio / r["tile_bound"]
            print(f"| {label} | {tiles} | {r['ms']:.3f} | {r['tflops']:.0f} | {dm:.3f} | {ratio:.2f} | "
                  f"{r['tile_bound']:.2f} | {r['flop_bound']:.2f} | {pct:.0f}% | {TARGET[c]} |")
            rows.append(dict(r, cudnn_ms=dm, ratio=ratio))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
