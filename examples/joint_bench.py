"""Joint (MMDiT) attention on one GPU: gna.joint_attention (visual queries: GNA over the
visual tokens plus every text key in one softmax; text queries: dense) against cuDNN dense
attention over the same joint sequence, forward and forward+backward, bf16. The padded rows
give the text lengths as a tensor: one fused call with per-sample counts of text keys, and the
path without counts (the visual queries without the text, their text part dense, merged by
logsumexp) in the same run.

    PYTHONPATH=python python examples/joint_bench.py --case hunyuan
"""
import argparse
import contextlib
import json
import math
import sys
from pathlib import Path

import torch

import gna
import gna.joint
from dit_timing import cudnn_only, time_ms

CASES = {
    "hunyuan": dict(layout=(30, 48, 80), text=256, heads=24, position="after",
                    windows={"NA 18x24x24": gna.Window((18, 24, 24)),
                             "18x24x24 stride 16x8x8": gna.Window((18, 24, 24),
                                                                  stride=(16, 8, 8))}),
    "flux4k": dict(layout=(256, 256), text=512, heads=24, position="before",
                   windows={"NA 80x80": gna.Window((80, 80)),
                            "80x80 stride 16x16": gna.Window((80, 80), stride=(16, 16))}),
}


@contextlib.contextmanager
def _without_counts():
    """joint_attention as where no backend takes per-sample counts of text keys."""
    counts_run = gna.joint._counts_run
    gna.joint._counts_run = lambda *args: False
    try:
        yield
    finally:
        gna.joint._counts_run = counts_run


def _step(fn, inputs, grad):
    def run():
        for t in inputs:
            t.grad = None
        fn(*inputs).backward(grad)
    return run


def bench(case, reps, dim=128, padded=True, na_only=False):
    c = CASES[case]
    n = math.prod(c["layout"])
    s = n + c["text"]
    q, k, v = (torch.randn(1, s, c["heads"], dim, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    grad = torch.randn(1, s, c["heads"], dim, device="cuda", dtype=torch.bfloat16)

    def dense(q, k, v):
        return gna.dense_joint_attention(q, k, v, c["text"], text_position=c["position"])

    calls = {"cuDNN dense": (dense, cudnn_only)}
    for name, window in list(c["windows"].items())[:1 if na_only else None]:
        calls[f"gna {name}"] = (
            lambda q, k, v, w=window: gna.joint_attention(
                q, k, v, c["layout"], windows=w, text_position=c["position"]),
            contextlib.nullcontext)
    if padded:
        name, window = next(iter(c["windows"].items()))
        lengths = torch.tensor([c["text"] * 3 // 4], device="cuda")
        def padded_call(q, k, v):
            return gna.joint_attention(q, k, v, c["layout"], windows=window, text_lengths=lengths,
                                       text_position=c["position"])
        calls[f"gna {name}, text padded (tensor lengths)"] = (padded_call, contextlib.nullcontext)
        calls[f"gna {name}, text padded (tensor lengths), without counts"] = (padded_call,
                                                                               _without_counts)
    rows = []
    for name, (fn, context) in calls.items():
        with context():
            with torch.no_grad():
                fwd = time_ms(lambda: fn(q, k, v), 1, reps)
            both = time_ms(_step(fn, (q, k, v), grad), 1, reps)
        rows.append({"case": case, "call": name, "forward_ms": fwd, "forward_backward_ms": both})
        torch.cuda.empty_cache()
    for r in rows:
        r["forward_x_dense"] = rows[0]["forward_ms"] / r["forward_ms"]
        r["forward_backward_x_dense"] = rows[0]["forward_backward_ms"] / r["forward_backward_ms"]
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=sorted(CASES), nargs="+", default=["hunyuan"])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", type=Path)
    p.add_argument("--na-only", action="store_true",
                   help="only each case's first window (its NA rows)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a CUDA GPU")
    rows = [r for case in args.case for r in bench(case, args.reps, na_only=args.na_only)]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, bf16, head dim 128, "
          f"batch 1, median of {args.reps}")
    print("| case | call | forward ms | x cuDNN | fwd+bwd ms | x cuDNN |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['call']} | {r['forward_ms']:.2f} | {r['forward_x_dense']:.2f} "
              f"| {r['forward_backward_ms']:.2f} | {r['forward_backward_x_dense']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
