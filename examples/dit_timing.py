"""Times an MMDiT forward (examples/mmdit.py) with dense attention (cuDNN SDPA) and with gna
windows, block by block, and compares the model speedup with the simulator's end-to-end model.

A full-depth model is timed as embeddings + double_blocks x (one dual-stream block) +
single_blocks x (one single-stream block): blocks of one kind have the same shapes and cost,
so one block of each kind, timed at the real sequence length, is enough, and the weights of the
whole model never need to be held. `--check-depth D S` also times a whole model of D + S blocks
end to end against that sum.
"""
import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import gna
import mmdit


def time_ms(fn, warmup=1, reps=3):
    """Median milliseconds of fn() over reps CUDA-event-timed calls, after warmup calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def cudnn_only():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.CUDNN_ATTENTION])


def attention_module(cfg, window):
    if window is None:
        return mmdit.DenseJointAttention(cfg.text_len, cfg.text_position)
    return gna.GnaAttentionProcessor(cfg.layout, window, text_len=cfg.text_len,
                                     text_position=cfg.text_position)


def set_attention(model, cfg, window):
    """Every block's attention: dense (window None) or a gna processor with `window`."""
    for block in list(model.double_blocks) + list(model.single_blocks):
        block.attention = attention_module(cfg, window)


def _build(cls, cfg, device, dtype):
    with torch.device(device):
        return cls(cfg).to(dtype).eval()


def measure(cfg, variants, reps, device="cuda", dtype=torch.bfloat16):
    """{variant: {double_ms, single_ms, attention_ms, embed_ms}} at the config's shapes."""
    double = _build(mmdit.DoubleBlock, cfg, device, dtype)
    single = _build(mmdit.SingleBlock, cfg, device, dtype)
    emb = _build(mmdit.Embeddings, cfg, device, dtype)
    x, text, t, pooled = mmdit.random_inputs(cfg, 1, device, dtype)
    rope = mmdit.rope_tables(cfg, device, dtype)
    s = cfg.visual_tokens + cfg.text_len
    with torch.inference_mode():
        img, txt, vec = emb.embed(x, text, t, pooled)
        seq = torch.randn(1, s, cfg.hidden, device=device, dtype=dtype)
        q, k, v = (torch.randn(1, s, cfg.heads, cfg.head_dim, device=device, dtype=dtype)
                   for _ in range(3))
        embed_ms = time_ms(lambda: emb.out(emb.embed(x, text, t, pooled)[0], vec), 1, reps)
        results = {}
        for name, window in variants.items():
            double.attention = single.attention = attention_module(cfg, window)
            with cudnn_only() if window is None else contextlib.nullcontext():
                results[name] = {
                    "attention_ms": time_ms(lambda: double.attention(q, k, v), 1, reps),
                    "double_ms": time_ms(lambda: double(img, txt, vec, rope), 1, reps),
                    "single_ms": time_ms(lambda: single(seq, vec, rope), 1, reps),
                    "embed_ms": embed_ms}
            torch.cuda.empty_cache()
    return results


def check_depth(cfg, variants, depth, reps, device="cuda", dtype=torch.bfloat16):
    """Whole-model forward ms of a model of depth (double, single) blocks per variant."""
    small = mmdit.Config(**{**cfg.__dict__, "double_blocks": depth[0],
                            "single_blocks": depth[1]})
    model = _build(mmdit.MMDiT, small, device, dtype)
    inputs = mmdit.random_inputs(small, 1, device, dtype)
    out = {}
    with torch.inference_mode():
        for name, window in variants.items():
            set_attention(model, small, window)
            with cudnn_only() if window is None else contextlib.nullcontext():
                out[name] = time_ms(lambda: model(*inputs), 1, reps)
    return out


def model_ms(r, cfg):
    return cfg.double_blocks * r["double_ms"] + cfg.single_blocks * r["single_ms"] + r["embed_ms"]


def summarize(cfg, variants, results, checked=None, depth=None):
    """Rows: model ms, speedup over dense, attention share of the dense model, the
    simulator's end-to-end predictions (tile-wise bound at the Q / KV tiles the Hopper forward
    chooses for the window, and the measured operator speedup)."""
    dense = results["dense"]
    dense_model = model_ms(dense, cfg)
    blocks = cfg.double_blocks + cfg.single_blocks
    share = blocks * dense["attention_ms"] / dense_model
    rows = []
    for name, window in variants.items():
        r = results[name]
        row = {"variant": name, "model_ms": model_ms(r, cfg), "attention_ms": r["attention_ms"],
               "double_ms": r["double_ms"], "single_ms": r["single_ms"],
               "embed_ms": r["embed_ms"], "attention_share": share}
        row["speedup"] = dense_model / row["model_ms"]
        row["op_speedup"] = dense["attention_ms"] / r["attention_ms"]
        if window is not None:
            w, s, d, c = window.resolve(cfg.layout)
            sim = gna.simulate(cfg.layout, w, stride=s, dilation=d, is_causal=c,
                               kernel="hopper forward", head_dim=cfg.head_dim,
                               attention_share=share)
            row["q_tile"], row["kv_tile"], row["kv_tiling"] = (
                list(sim["q_tile"]), list(sim["kv_tile"]), sim["kv_tiling"])
            row["tile_bound"] = sim["tile_speedup"]
            row["sim_e2e_tile"] = sim["end_to_end_speedup"]
            row["sim_e2e_measured_op"] = gna.end_to_end_speedup(share, row["op_speedup"])
            row["vs_sim_tile"] = row["speedup"] / row["sim_e2e_tile"] - 1
            row["vs_sim_measured_op"] = row["speedup"] / row["sim_e2e_measured_op"] - 1
        if checked is not None:
            small = depth[0] * r["double_ms"] + depth[1] * r["single_ms"] + r["embed_ms"]
            row["check_depth"] = list(depth)
            row["check_measured_ms"] = checked[name]
            row["check_sum_ms"] = small
        rows.append(row)
    return rows


def table(rows):
    lines = ["| variant | model ms | x dense | attention ms | x dense attention | attention "
             "share (dense) | sim e2e (tile bound) | sim e2e (measured op) | vs sim (tile) |"
             " vs sim (op) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = lambda k, fmt: (fmt.format(r[k]) if k in r else "-")  # noqa: E731
        lines.append(f"| {r['variant']} | {r['model_ms']:.0f} | {r['speedup']:.2f} | "
                     f"{r['attention_ms']:.2f} | {r['op_speedup']:.2f} | "
                     f"{r['attention_share']:.3f} | {f('sim_e2e_tile', '{:.2f}')} | "
                     f"{f('sim_e2e_measured_op', '{:.2f}')} | {f('vs_sim_tile', '{:+.1%}')} | "
                     f"{f('vs_sim_measured_op', '{:+.1%}')} |")
    if rows and "check_measured_ms" in rows[0]:
        lines.append("")
        lines.append("| variant | depth checked | whole model ms | sum of blocks ms |")
        lines.append("|---|---|---|---|")
        for r in rows:
            d = r["check_depth"]
            lines.append(f"| {r['variant']} | {d[0]} + {d[1]} | {r['check_measured_ms']:.1f} | "
                         f"{r['check_sum_ms']:.1f} |")
    return "\n".join(lines)


def parser(description, defaults):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--double-blocks", type=int, default=defaults["double_blocks"])
    p.add_argument("--single-blocks", type=int, default=defaults["single_blocks"])
    p.add_argument("--hidden", type=int, default=3072)
    p.add_argument("--heads", type=int, default=24)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--check-depth", type=int, nargs=2, metavar=("DOUBLE", "SINGLE"),
                   help="also time a whole model of this many blocks end to end")
    p.add_argument("--json", type=Path, help="write the rows here")
    return p


def main(args, cfg, variants):
    if not torch.cuda.is_available():
        sys.exit("this example times CUDA kernels: it needs a CUDA GPU")
    start = time.time()
    results = measure(cfg, variants, args.reps)
    checked = check_depth(cfg, variants, args.check_depth, args.reps) if args.check_depth \
        else None
    rows = summarize(cfg, variants, results, checked, args.check_depth)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, layout "
          f"{'x'.join(map(str, cfg.layout))} + {cfg.text_len} text tokens, hidden {cfg.hidden}, "
          f"{cfg.heads} heads, {cfg.double_blocks} dual + {cfg.single_blocks} single blocks, "
          f"bf16, batch 1 ({time.time() - start:.0f} s)")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"config": {k: (list(v) if isinstance(v, tuple) else v)
                                                    for k, v in cfg.__dict__.items()},
                                         "device": torch.cuda.get_device_name(),
                                         "rows": rows}, indent=1))
    return rows

