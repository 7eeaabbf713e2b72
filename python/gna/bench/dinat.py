"""Hugging Face DiNAT on gna: model throughput and per-operator times.

    python3 -m gna.bench.dinat --out results          # every model, dtype, pass and backend
    python3 -m gna.bench.dinat --models mini --dtypes fp16 --modes infer --no-ops

Models: transformers' DinatForImageClassification with the published DiNAT-Mini / Tiny / Small
/ Base shapes (VARIANTS), random weights, 1000 classes, 224x224 images. Throughput is images
per second of an inference pass (eval, inference_mode) and of a training step (forward with
labels, cross-entropy, backward, AdamW step), at batch 128 by default; "fp16" is autocast to
float16 (no loss scaling), "fp32" plain float32 (PyTorch's defaults: no TF32 in matmuls).

Backends, each behind gna.compat.natten_shim (the model code is transformers' own):
  gna-unfused  NATTEN's natten2dqkrpb / natten2dav on gna.unfused (PN, softmax, NN; the model)
  dense        a pure-PyTorch dense-masked baseline of the same two functions: dense Q K^T per
               (batch, head) in chunks, gathered at the windows; weights scattered into a dense
               matrix times V; backward likewise (chunks bound the memory, not the work)
  gna-fused    gna.compat.dinat.use_fused_attention(model, drop_rpb=True): gna.na2d with no
               relative positional bias, i.e. a different model (DiNAT without rpb); labelled so

Per operator (--ops): PN (na_qk with rpb), NN (na_av) forward and backward (PN's backward is
NN for dQ, the inverse-neighborhood operator IN for dK, and the rpb reduction; NN's backward is
PN for dA and IN for dV), on DiNAT-T's stages at batch 128, head dim 32, kernel 7: time,
effective TFLOP/s and GB/s (the fewest bytes the pass must move), beside the dense baseline.

Writes dinat.json and dinat.md under --out and prints the tables.
"""
import argparse
import datetime
import functools
import json
import math
import os
import platform
import sys
import time

import torch

# Published DiNAT shapes (the DiNAT paper's ImageNet-1K models at 224x224).
VARIANTS = {
    "mini": dict(depths=[3, 4, 6, 5], embed_dim=64, num_heads=[2, 4, 8, 16], mlp_ratio=3.0,
                 drop_path_rate=0.2, layer_scale_init_value=0.0),
    "tiny": dict(depths=[3, 4, 18, 5], embed_dim=64, num_heads=[2, 4, 8, 16], mlp_ratio=3.0,
                 drop_path_rate=0.2, layer_scale_init_value=0.0),
    "small": dict(depths=[3, 4, 18, 5], embed_dim=96, num_heads=[3, 6, 12, 24], mlp_ratio=2.0,
                  drop_path_rate=0.3, layer_scale_init_value=0.0),
    "base": dict(depths=[3, 4, 18, 5], embed_dim=128, num_heads=[4, 8, 16, 32], mlp_ratio=2.0,
                 drop_path_rate=0.5, layer_scale_init_value=1e-5),
}
KERNEL_SIZE = 7


def dilations(depths):
    """DiNAT's dilations at 224x224: stage 1 alternates 1 and 8, stage 2 1 and 4, stage 3 1 and
    2, stage 4 is 1 (every other layer dilated, the first not)."""
    per_stage = (8, 4, 2, 1)
    return [[1 if i % 2 == 0 else per_stage[s] for i in range(depth)]
            for s, depth in enumerate(depths)]


def dinat_config(variant, **overrides):
    """transformers.DinatConfig of a published DiNAT variant ('mini', 'tiny', 'small', 'base')."""
    from transformers import DinatConfig
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    shape = dict(VARIANTS[variant])
    shape.update(kernel_size=KERNEL_SIZE, dilations=dilations(shape["depths"]))
    shape.update(overrides)
    return DinatConfig(**shape)


# ---------------------------------------------------------------------------------------------
# The dense-masked baseline


@functools.lru_cache(maxsize=None)
def _window_table(spatial, kernel, dilation):
    """Key index and bias index [N, prod(K)] of every query's window slots (row-major), read
    off gna's CPU reference per axis (the first attended key of each query)."""
    from .peers import axis_key_ranges
    keys_flat = torch.zeros([1] * (2 * len(spatial)), dtype=torch.long)
    rel_flat = torch.zeros_like(keys_flat)
    rank = len(spatial)
    for a, (n, k, d) in enumerate(zip(spatial, kernel, dilation)):
        first, _ = axis_key_ranges(n, k, 1, d, False)
        slots = torch.arange(k)
        keys = first[:, None] + slots[None, :] * d
        rel = k - 1 + (first // d)[:, None] + slots[None, :] - (torch.arange(n) // d)[:, None]
        shape = [1] * (2 * rank)
        shape[a], shape[rank + a] = n, k
        keys_flat = keys_flat * n + keys.view(shape)
        rel_flat = rel_flat * (2 * k - 1) + rel.view(shape)
    full = list(spatial) + list(kernel)
    n, w = math.prod(spatial), math.prod(kernel)
    return keys_flat.expand(full).reshape(n, w), rel_flat.expand(full).reshape(n, w)


_DEVICE_TABLES = {}


def _tables(spatial, kernel, dilation, device):
    key = (spatial, kernel, dilation, str(device))
    if key not in _DEVICE_TABLES:
        idx, rel = _window_table(spatial, kernel, dilation)
        _DEVICE_TABLES[key] = (idx.to(device), rel.to(device))
    return _DEVICE_TABLES[key]


def _chunk(groups, n, element_size, budget=1 << 30):
    return max(1, min(groups, budget // max(1, n * n * element_size)))


class _DenseQK(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, idx):
        g, n, _ = q.shape
        w = idx.shape[1]
        out = q.new_empty(g, n, w)
        step = _chunk(g, n, q.element_size())
        for s in range(0, g, step):
            e = min(g, s + step)
            scores = torch.bmm(q[s:e], k[s:e].transpose(1, 2))
            out[s:e] = scores.gather(2, idx.expand(e - s, n, w))
        ctx.save_for_backward(q, k, idx)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, idx = ctx.saved_tensors
        g, n, _ = q.shape
        w = idx.shape[1]
        grad = grad.to(q.dtype)
        dq, dk = torch.empty_like(q), torch.empty_like(k)
        step = _chunk(g, n, q.element_size())
        for s in range(0, g, step):
            e = min(g, s + step)
            dense = q.new_zeros(e - s, n, n).scatter_(2, idx.expand(e - s, n, w), grad[s:e])
            dq[s:e] = torch.bmm(dense, k[s:e])
            dk[s:e] = torch.bmm(dense.transpose(1, 2), q[s:e])
        return dq, dk, None


class _DenseAV(torch.autograd.Function):
    @staticmethod
    def forward(ctx, attn, v, idx):
        g, n, _ = v.shape
        w = idx.shape[1]
        out = torch.empty_like(v)
        step = _chunk(g, n, v.element_size())
        for s in range(0, g, step):
            e = min(g, s + step)
            dense = v.new_zeros(e - s, n, n).scatter_(2, idx.expand(e - s, n, w), attn[s:e])
            out[s:e] = torch.bmm(dense, v[s:e])
        ctx.save_for_backward(attn, v, idx)
        return out

    @staticmethod
    def backward(ctx, grad):
        attn, v, idx = ctx.saved_tensors
        g, n, _ = v.shape
        w = idx.shape[1]
        grad = grad.to(v.dtype)
        d_attn, dv = torch.empty_like(attn), torch.empty_like(v)
        step = _chunk(g, n, v.element_size())
        for s in range(0, g, step):
            e = min(g, s + step)
            index = idx.expand(e - s, n, w)
            dense = v.new_zeros(e - s, n, n).scatter_(2, index, attn[s:e])
            dv[s:e] = torch.bmm(dense.transpose(1, 2), grad[s:e])
            d_attn[s:e] = torch.bmm(grad[s:e], v[s:e].transpose(1, 2)).gather(2, index)
        return d_attn, dv, None


def _pair(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x, x)


class DenseBaseline:
    """NATTEN's natten2dqkrpb / natten2dav as dense-masked PyTorch (non-causal, 2-D)."""

    @staticmethod
    def natten2dqkrpb(query, key, rpb, kernel_size, dilation):
        b, h, x, y, d = query.shape
        kernel, dil = _pair(kernel_size), _pair(dilation)
        idx, rel = _tables((x, y), kernel, dil, query.device)
        n, w = idx.shape
        attn = _DenseQK.apply(query.reshape(b * h, n, d), key.reshape(b * h, n, d), idx)
        attn = attn.view(b, h, n, w)
        if rpb is not None:
            attn = attn + rpb.to(attn.dtype).reshape(h, -1)[:, rel]
        return attn.view(b, h, x, y, w)

    @staticmethod
    def natten2dav(attn, value, kernel_size, dilation):
        b, h, x, y, d = value.shape
        kernel, dil = _pair(kernel_size), _pair(dilation)
        idx, _ = _tables((x, y), kernel, dil, value.device)
        n, w = idx.shape
        out = _DenseAV.apply(attn.to(value.dtype).reshape(b * h, n, w),
                             value.reshape(b * h, n, d), idx)
        return out.view(b, h, x, y, d)


# ---------------------------------------------------------------------------------------------
# Model throughput

BACKENDS = ("gna-unfused", "gna-fused", "dense")


def _install(backend):
    from ..compat import natten_shim
    natten_shim.install(backend=DenseBaseline if backend == "dense" else None)
    return natten_shim


def build_model(variant, backend, device="cuda", num_labels=1000):
    from transformers import DinatForImageClassification
    _install(backend)
    torch.manual_seed(0)
    model = DinatForImageClassification(dinat_config(variant, num_labels=num_labels)).to(device)
    if backend == "gna-fused":
        from ..compat.dinat import use_fused_attention
        use_fused_attention(model, drop_rpb=True)
    return model


def _time_steps(step, warmup, target_s, min_iters=2, max_iters=20):
    """Milliseconds per step: warmup steps, one timed step to size the run, then a timed run."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    one = time.perf_counter() - t0
    iters = int(max(min_iters, min(max_iters, target_s / max(one, 1e-6))))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters, iters


def model_rows(args):
    rows = []
    for variant in args.models:
        for backend in args.backends:
            model = None
            try:
                model = build_model(variant, backend)
            except Exception as e:
                rows.append(dict(model=variant, backend=backend, error=_err(e)))
                _print_row(rows[-1])
                continue
            params = sum(p.numel() for p in model.parameters())
            for dtype in args.dtypes:
                for mode in args.modes:
                    row = dict(model=variant, backend=backend, dtype=dtype, mode=mode,
                               batch=args.batch, params_m=params / 1e6)
                    try:
                        ms, iters, peak = _run_model(model, dtype, mode, args)
                        row.update(ms=ms, iters=iters, images_per_s=args.batch / ms * 1e3,
                                   peak_gib=peak)
                    except Exception as e:
                        row.update(error=_err(e))
                    rows.append(row)
                    _print_row(row)
                    torch.cuda.empty_cache()
            del model
            torch.cuda.empty_cache()
    return rows


def _run_model(model, dtype, mode, args):
    amp = dtype == "fp16"
    x = torch.randn(args.batch, 3, args.image, args.image, device="cuda")
    y = torch.randint(0, 1000, (args.batch,), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    if mode == "infer":
        model.eval()

        def step():
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16,
                                                         enabled=amp):
                model(pixel_values=x).logits
    else:
        model.train()
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

        def step():
            with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
                loss = model(pixel_values=x, labels=y).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    try:
        ms, iters = _time_steps(step, args.warmup, args.target_s)
    finally:
        model.zero_grad(set_to_none=True)
    return ms, iters, torch.cuda.max_memory_allocated() / 2 ** 30


def _err(e):
    text = f"{type(e).__name__}: {e}"
    if "out of memory" in text.lower():
        return "out of memory"
    return text.splitlines()[0][:200]


def _print_row(row):
    if "error" in row:
        print(f"  {row['model']:5} {row['backend']:11} {row.get('dtype', ''):4} "
              f"{row.get('mode', ''):5} error: {row['error']}", flush=True)
    else:
        print(f"  {row['model']:5} {row['backend']:11} {row['dtype']:4} {row['mode']:5} "
              f"{row['images_per_s']:9.1f} img/s  {row['ms']:8.2f} ms/step  "
              f"({row['iters']} steps, peak {row['peak_gib']:.1f} GiB)", flush=True)


# ---------------------------------------------------------------------------------------------
# Per operator

# DiNAT-T's attention layers at 224x224: (stage extent, heads, dilation).
STAGES = [(56, 2, 1), (56, 2, 8), (28, 4, 1), (28, 4, 4), (14, 8, 1), (14, 8, 2), (7, 16, 1)]


def op_rows(args):
    from .timing import bench_ms
    from .. import unfused
    rows = []
    batch, dim, k = args.batch, 32, KERNEL_SIZE
    w = k * k
    for dtype_name in args.op_dtypes:
        dtype = {"fp16": torch.float16, "fp32": torch.float32}[dtype_name]
        es = torch.tensor([], dtype=dtype).element_size()
        for extent, heads, dil in STAGES:
            n = extent * extent
            g = batch * heads
            shape = (batch, heads, extent, extent, dim)
            q, key, v = (torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
                         for _ in range(3))
            rpb = torch.randn(heads, 2 * k - 1, 2 * k - 1, device="cuda", dtype=dtype,
                              requires_grad=True)
            attn = torch.randn(batch, heads, extent, extent, w, device="cuda", dtype=dtype,
                               requires_grad=True)
            d_attn = torch.randn_like(attn)
            d_out = torch.randn_like(v)
            impls = [("gna", unfused.na_qk, unfused.na_av)]
            if dtype_name in args.dense_op_dtypes:
                impls.append(("dense",
                              lambda q_, k_, ks, dilation, rpb: DenseBaseline.natten2dqkrpb(
                                  q_, k_, rpb, ks, dilation),
                              lambda a_, v_, ks, dilation: DenseBaseline.natten2dav(
                                  a_, v_, ks, dilation)))
            gnd, gnw = g * n * dim * es, g * n * w * es
            for impl, qk, av in impls:
                def pn():
                    return qk(q, key, k, dilation=dil, rpb=rpb)

                def nn():
                    return av(attn, v, k, dilation=dil)
                passes = []
                passes.append(("PN fwd", pn, 2 * gnd + gnw, 2 * g * n * w * dim))
                passes.append(("NN fwd", nn, gnw + 2 * gnd, 2 * g * n * w * dim))
                pn_out = pn()
                passes.append(("PN bwd (NN dQ, IN dK, d rpb)",
                               lambda: torch.autograd.grad(pn_out, (q, key, rpb), d_attn,
                                                           retain_graph=True),
                               2 * gnd + gnw + 2 * gnd, 4 * g * n * w * dim))
                nn_out = nn()
                passes.append(("NN bwd (PN dA, IN dV)",
                               lambda: torch.autograd.grad(nn_out, (attn, v), d_out,
                                                           retain_graph=True),
                               gnw + 2 * gnd + gnw + gnd, 4 * g * n * w * dim))
                for name, fn, nbytes, flops in passes:
                    row = dict(dtype=dtype_name, extent=extent, heads=heads, dilation=dil,
                               batch=batch, dim=dim, kernel=k, op=name, impl=impl)
                    try:
                        ms = bench_ms(fn, args.op_warmup_ms, args.op_rep_ms)
                        row.update(ms=ms, gbps=nbytes / ms / 1e6, tflops=flops / ms / 1e9)
                    except Exception as e:
                        row.update(error=_err(e))
                    rows.append(row)
                    print(f"  {dtype_name} {extent}x{extent} h{heads} d{dil} {impl:5} {name:30} "
                          + (f"{row['ms']:8.3f} ms {row['gbps']:7.0f} GB/s "
                             f"{row['tflops']:6.1f} TFLOP/s" if "ms" in row
                             else row["error"]), flush=True)
                del pn_out, nn_out
                torch.cuda.empty_cache()
    return rows


# ---------------------------------------------------------------------------------------------
# Report


def model_table(rows):
    by = {}
    for r in rows:
        if "dtype" in r:
            by.setdefault((r["model"], r["dtype"], r["mode"]), {})[r["backend"]] = r

    def cell(r):
        if r is None:
            return "—"
        return r["error"] if "error" in r else f"{r['images_per_s']:.0f}"

    def ratio(a, b):
        if a is None or b is None or "error" in a or "error" in b:
            return "—"
        return f"{a['images_per_s'] / b['images_per_s']:.2f}x"

    lines = ["| model | dtype | pass | gna-unfused img/s | dense img/s | gna-fused (no rpb) "
             "img/s | unfused / dense | fused / unfused |", "|---|---|---|---|---|---|---|---|"]
    for (model, dtype, mode), r in by.items():
        u, d, f = r.get("gna-unfused"), r.get("dense"), r.get("gna-fused")
        lines.append(f"| {model} | {dtype} | {'training step' if mode == 'train' else 'inference'}"
                     f" | {cell(u)} | {cell(d)} | {cell(f)} | {ratio(u, d)} | {ratio(f, u)} |")
    return "\n".join(lines) + "\n"


def op_table(rows):
    lines = ["| dtype | stage | heads | dilation | pass | gna ms | gna GB/s | gna TFLOP/s | "
             "dense ms | dense / gna |", "|---|---|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in rows:
        by.setdefault((r["dtype"], r["extent"], r["heads"], r["dilation"], r["op"]),
                      {})[r["impl"]] = r
    for (dtype, extent, heads, dil, op), r in by.items():
        g, d = r.get("gna"), r.get("dense")
        gms = g.get("ms") if g else None
        dms = d.get("ms") if d else None
        def num(x, spec):
            return "—" if x is None else format(x, spec)
        lines.append(
            f"| {dtype} | {extent}x{extent} | {heads} | {dil} | {op} | {num(gms, '.3f')} | "
            f"{num(g.get('gbps') if g else None, '.0f')} | "
            f"{num(g.get('tflops') if g else None, '.1f')} | {num(dms, '.3f')} | "
            f"{num(dms / gms if gms and dms else None, '.1f')}{'x' if gms and dms else ''} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m gna.bench.dinat", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    p.add_argument("--dtypes", nargs="+", default=["fp16", "fp32"], choices=["fp16", "fp32"])
    p.add_argument("--modes", nargs="+", default=["infer", "train"], choices=["infer", "train"])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per measurement")
    p.add_argument("--target-s", type=float, default=1.0,
                   help="seconds of timed steps per measurement (2 to 20 steps)")
    p.add_argument("--no-models", action="store_true", help="skip the model throughput")
    p.add_argument("--no-ops", action="store_true", help="skip the per-operator times")
    p.add_argument("--op-dtypes", nargs="+", default=["fp16", "fp32"], choices=["fp16", "fp32"])
    p.add_argument("--dense-op-dtypes", nargs="*", default=["fp16"], choices=["fp16", "fp32"])
    p.add_argument("--op-warmup-ms", type=float, default=25)
    p.add_argument("--op-rep-ms", type=float, default=100)
    p.add_argument("--out", default=".", help="folder for dinat.json and dinat.md")
    args = p.parse_args(argv)
    for name in ("batch", "image", "warmup"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            p.error(f"--{name} must be positive, got {getattr(args, name)}")
    if not torch.cuda.is_available():
        p.error("needs a CUDA device")

    import transformers
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                device=torch.cuda.get_device_name(), torch=torch.__version__,
                transformers=transformers.__version__, python=platform.python_version(),
                commit=os.environ.get("GNA_COMMIT", ""), command=" ".join(sys.argv),
                batch=args.batch, image=args.image)
    print(f"DiNAT on gna: {meta['device']}, torch {meta['torch']}, transformers "
          f"{meta['transformers']}, batch {args.batch}, {args.image}x{args.image}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    model_results, op_results = [], []

    def save():
        with open(os.path.join(args.out, "dinat.json"), "w") as f:
            json.dump(dict(meta=meta, models=model_results, ops=op_results), f, indent=1)

    if not args.no_ops:
        print("per operator:", flush=True)
        op_results.extend(op_rows(args))
        save()
    if not args.no_models:
        print("models:", flush=True)
        model_results.extend(model_rows(args))
        save()
    text = ""
    if op_results:
        text += "Per operator (DiNAT-T stages, batch %d, head dim 32, kernel 7):\n\n" % args.batch
        text += op_table(op_results) + "\n"
    if model_results:
        text += "Model throughput (images/s, batch %d, %dx%d):\n\n" % (args.batch, args.image,
                                                                       args.image)
        text += model_table(model_results)
    with open(os.path.join(args.out, "dinat.md"), "w") as f:
        f.write(text)
    print()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
