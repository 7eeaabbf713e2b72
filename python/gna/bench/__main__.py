"""gna-bench: times gna (end-to-end and kernel-only), cuDNN SDPA dense, FlashAttention SDPA
dense and FlexAttention (same mask, tokens in tiled order, compiled) in one process, forward and
forward+backward, on the use cases of docs/rule.md section 9.

Effective TFLOP/s count attended (query, key) pairs only: forward 4 * B * H * N * keys * D,
forward+backward 3.5 times that (backward 2.5x); keys per query come from gna's simulator.
GB/s counts the fewest bytes a pass must move (forward: Q, K, V read, O and the logsumexp
written; forward+backward adds O, dO, the logsumexp read and dQ, dK, dV written), and "% copy"
compares it with a device-to-device copy timed in the same run. "× cuDNN" and "× Flex" divide
cuDNN SDPA dense's and FlexAttention's time for the same pass by the row's time. On rows that
run on the Hopper backend at head dim 128, "gna-sim ms" is the kernels' time that their measured
cost models predict (gna.predicted_speedup: the forward's, plus the backward's for fwd+bwd), and
on rows of the portable backend the portable kernels' likewise; "gna-sim ×" is cuDNN's measured
time over it: the speedup the simulator predicts against the peer measured in the same run.

Every case's dense and gna rows are timed before any FlexAttention row: torch.compile leaves
host work behind that slows later eager calls. A FlexAttention row (its mask, compilation and
timing) gets --flex-budget-s seconds; past them it is cut off and its row gives the reason (the
case's later Flex pass is then skipped, with the reason).
"""
import argparse
import math
import os
import sys
import time

import torch

import gna
from . import cases as cases_mod
from . import gna_calls, peers, report
from .budget import BudgetExceeded, time_budget
from .timing import bench_ms, copy_bandwidth_gbps


DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def _attended_keys(case):
    sim = gna.simulate(case.layout, case.window, stride=case.strides, dilation=case.dilations,
                       is_causal=case.causals, q_tile=1, kv_tile=1)
    return sim["mean_keys_per_query"]


# The kernels whose cost models price a pass, by backend and pass (gna-sim --kernel).
_PREDICTED_KERNELS = {
    ("hopper", "fwd"): ("hopper forward",),
    ("hopper", "fwd+bwd"): ("hopper forward", "hopper backward"),
    ("portable", "fwd"): ("portable forward",),
    ("portable", "fwd+bwd"): ("portable forward", "portable backward"),
}


# Shared memory per block of the devices whose portable kernels gna-sim models apart (sm_86 /
# sm_89 / sm_120).
_SMEM_99KB = 101376


def _shared_memory_per_block():
    """What the library's kernels plan for on device 0: the device's opt-in limit, capped by
    GNA_MAX_SHARED_MEMORY_BYTES (docs/gpus.md); None where torch does not tell the limit."""
    limit = getattr(torch.cuda.get_device_properties(0), "shared_memory_per_block_optin", None) \
        if torch.cuda.is_available() else None
    cap = os.environ.get("GNA_MAX_SHARED_MEMORY_BYTES")
    if cap and cap.strip().isdigit():
        limit = min(limit, int(cap)) if limit else int(cap)
    return limit


def _predicted_ms(case, pass_name, backend, shared_memory=None):
    """The backend's kernels' predicted time of the pass (gna-sim's cost models: the Hopper
    forward's, plus the backward's for fwd+bwd; the portable kernels' likewise, as 99 KB
    devices run them where shared_memory, the bytes per block, is at most that) for the case in
    ms, or None where the simulator cannot tell (a pass without a cost model, a head dim whose
    times were not measured, a choice past its step limit)."""
    kernels = _PREDICTED_KERNELS.get((backend, pass_name))
    if kernels and backend == "portable" and shared_memory and shared_memory <= _SMEM_99KB:
        kernels = tuple(k + " 99kb" for k in kernels)
    if kernels is None:
        return None
    total = 0.0
    for kernel in kernels:
        try:
            ms = gna.predicted_speedup(case.layout, case.window, stride=case.strides,
                                       dilation=case.dilations, is_causal=case.causals,
                                       kernel=kernel, head_dim=case.dim)["ms_per_head"]
        except (ValueError, RuntimeError):
            return None
        if ms is None:
            return None
        total += ms * case.batch * case.heads
    return total


class Runner:
    def __init__(self, args):
        self.args = args
        self.rows = []
        self.masks = {}  # FlexAttention block masks by case (built once for both passes)
        self.dense = {}  # dense peers' rows by (layout, batch, heads, dim, pass), impl
        self.cudnn = {}  # cuDNN SDPA dense's eager ms by (case label, pass)
        self.attended = {}  # mean attended keys per query by case label (the simulator's)

    def record(self, case, pass_name, impl, fn, flops, backend=None, note="", skip=None):
        row = dict(case=case.label, pass_=pass_name, impl=impl, backend=backend, note=note)
        row_start = time.time()
        try:
            if skip:
                raise RuntimeError(skip)
            t0 = time.time()
            fn()
            torch.cuda.synchronize()
            first_s = time.time() - t0
            again_s = 0.0
            if first_s > self.args.slow_s:  # compilation, or really slow: time a second call
                t0 = time.time()
                fn()
                torch.cuda.synchronize()
                again_s = time.time() - t0
            if again_s > self.args.slow_s:  # too slow to repeat: that single call is the time
                ms = again_s * 1e3
                row["note"] = (note + " single call").strip()
            else:
                ms = bench_ms(fn, self.args.warmup_ms, self.args.rep_ms)
            row.update(ms=ms, tflops=flops / ms / 1e9, first_call_s=first_s)
        except Exception as e:  # a peer or backend may not run this case: report, go on
            row.update(ms=None, tflops=None, error=f"{type(e).__name__}: {str(e)[:300]}")
            if isinstance(e, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
        row["pass"] = row.pop("pass_")
        row["wall_s"] = time.time() - row_start  # the row's own cost to the run (a slow peer)
        self.rows.append(row)
        ms = "error " + row["error"][:90] if row.get("error") else (
            f"{row['ms']:10.3f} ms {row['tflops']:7.1f} TFLOP/s")
        print(f"{case.label[:58]:58s} {pass_name:7s} {impl:22s} {backend or '':14s} {ms} {note} "
              f"[{row['wall_s']:.1f} s]", flush=True)
        return row

    def run(self, selected, after_case):
        """Every case's dense and gna rows first, then every case's FlexAttention rows:
        torch.compile leaves work behind on the host (measured: a gna eager forward at nat 28²
        took 0.207 ms after FlexAttention's first compile in the process, 0.081 ms before), so
        the eager rows are timed before anything is compiled. after_case(rows) is called after
        each case of each phase (a cut-off run keeps its rows)."""
        for case in selected:
            self.run_case(case)
            after_case(self.rows)
        if not self.args.no_flex:
            for case in selected:
                self.run_flex(case)
                after_case(self.rows)

    def _inputs(self, case):
        shape = (case.batch, *case.layout, case.heads, case.dim)
        return [torch.randn(shape, device="cuda", dtype=DTYPES[case.dtype]) for _ in range(3)]

    def _passes(self):
        return [p for p in ("fwd", "fwd+bwd") if p in self.args.passes]

    def _pass_flops(self, case, pass_name):
        """Effective FLOPs of the pass: attended pairs only (module docstring)."""
        if case.label not in self.attended:
            self.attended[case.label] = _attended_keys(case)
        fwd = 4.0 * case.batch * case.heads * case.tokens * self.attended[case.label] * case.dim
        return fwd if pass_name == "fwd" else 3.5 * fwd

    @staticmethod
    def _pass_bytes(case, pass_name):
        """The fewest bytes the pass must move (module docstring)."""
        element = torch.finfo(DTYPES[case.dtype]).bits // 8
        tensor_bytes = case.batch * case.tokens * case.heads * case.dim * element
        lse_bytes = case.batch * case.tokens * case.heads * 4
        if pass_name == "fwd":
            return 4 * tensor_bytes + lse_bytes
        return 12 * tensor_bytes + 3 * lse_bytes

    def run_case(self, case):
        a = self.args
        b, h, d, n = case.batch, case.heads, case.dim, case.tokens
        if case.additional_tokens:
            print(f"{case.label}: additional tokens are not timed by gna-bench (the dense and "
                  "Flex peers have no such tokens); gna-kernel-bench times them", flush=True)
            return
        q, k, v = self._inputs(case)
        dense_flops = 4.0 * b * h * n * n * d
        # Dense peers read the same heads-last memory, viewed as [B, H, N, D].
        as_bhnd = lambda x: x.reshape(b, n, h, d).transpose(1, 2)  # noqa: E731
        for pass_name in self._passes():
            scale = 1.0 if pass_name == "fwd" else 3.5
            grad = pass_name != "fwd"
            qg, kg, vg = (t.detach().requires_grad_(grad) for t in (q, k, v))
            d_out = torch.randn_like(q)
            cudnn = None
            if not a.no_dense:
                # Dense attention ignores the window: measured once per layout and pass.
                key = (case.layout, case.batch, h, d, pass_name)
                impls = [("cuDNN SDPA dense", "cudnn", False), ("FA2 SDPA dense", "flash", False)]
                if a.cuda_graph:
                    impls.append(("cuDNN SDPA dense, CUDA graph", "cudnn", True))
                for impl, name, graphed in impls:
                    if (key, impl) in self.dense:
                        row = dict(self.dense[(key, impl)], case=case.label,
                                   note="measured with the first case of this layout")
                        self.rows.append(row)
                    else:
                        call = peers.sdpa(name)

                        def dense(q, k, v, call=call):
                            return self._dense(call, as_bhnd(q), as_bhnd(k), as_bhnd(v),
                                               as_bhnd(d_out), grad)

                        fn = _graphed(dense, qg, kg, vg) if graphed else dense(qg, kg, vg)
                        row = self.record(case, pass_name, impl, fn, dense_flops * scale)
                        self.dense[(key, impl)] = row
                    if name == "cudnn" and not graphed and row.get("ms"):
                        cudnn = row["ms"]
            self.cudnn[(case.label, pass_name)] = cudnn
            self._gna_rows(case, pass_name, qg, kg, vg, d_out, self._pass_flops(case, pass_name),
                           grad)
            self._derived_columns(case, pass_name, cudnn, self._pass_bytes(case, pass_name))
        del q, k, v
        torch.cuda.empty_cache()

    def run_flex(self, case):
        """The case's FlexAttention rows, each placed after the case's other rows of its pass,
        each within the Flex budget (a pass after one that ran out is skipped)."""
        if case.additional_tokens:
            return
        q, k, v = self._inputs(case)
        over = None  # the reason a pass ran out of budget
        for pass_name in self._passes():
            flops = self._pass_flops(case, pass_name)
            if over:
                self.record(case, pass_name, "FlexAttention", None, flops,
                            skip=f"skipped: {over}")
            else:
                try:
                    with time_budget(self.args.flex_budget_s, f"FlexAttention {pass_name} "
                                     f"(mask, compilation and timing)"):
                        self._flex_row(case, pass_name, q, k, v, flops, pass_name != "fwd")
                except BudgetExceeded as e:  # cut off outside the row's own error handling
                    self.record(case, pass_name, "FlexAttention", None, flops,
                                skip=f"skipped: {e}")
                error = self.rows[-1].get("error") or ""
                if "exceeded its" in error and "FlexAttention" in error:
                    over = error[error.index("FlexAttention"):]
            self._place_last_row(case.label, pass_name)
            self._derived_columns(case, pass_name, self.cudnn.get((case.label, pass_name)),
                                  self._pass_bytes(case, pass_name))
        del q, k, v
        self.masks.pop(case.label, None)
        torch.cuda.empty_cache()

    def _place_last_row(self, label, pass_name):
        """Moves the last row recorded to just after the other rows of its case and pass."""
        row = self.rows.pop()
        at = max((i for i, r in enumerate(self.rows)
                  if r["case"] == label and r["pass"] == pass_name), default=len(self.rows) - 1)
        self.rows.insert(at + 1, row)

    def _derived_columns(self, case, pass_name, cudnn, min_bytes):
        rows = [r for r in self.rows
                if r["case"] == case.label and r["pass"] == pass_name and r.get("ms")]
        flex = next((r["ms"] for r in rows if r["impl"] == "FlexAttention"), None)
        predicted = {}  # by backend, once per case and pass
        smem = _shared_memory_per_block()
        for backend in {r.get("backend") for r in rows if r["impl"].startswith("gna")}:
            predicted[backend] = _predicted_ms(case, pass_name, backend, smem)
        for row in rows:
            row["x_cudnn"] = cudnn / row["ms"] if cudnn else None
            row["x_flex"] = flex / row["ms"] if flex else None
            if row["impl"].startswith("gna"):
                row["gbps"] = min_bytes / row["ms"] / 1e6
                row["copy_pct"] = 100.0 * row["gbps"] / self.copy_gbps
                ms = predicted.get(row.get("backend"))
                if ms:
                    row["predicted_ms"] = ms
                    row["predicted"] = cudnn / ms if cudnn else None

    @staticmethod
    def _dense(call, q, k, v, d_out, grad):
        if not grad:
            return lambda: call(q, k, v)
        inputs = (q, k, v)
        return lambda: torch.autograd.grad(call(q, k, v), inputs, d_out)

    def _gna_rows(self, case, pass_name, q, k, v, d_out, flops, grad):
        backend = self.args.backend
        try:
            rule = dict(stride=case.strides, dilation=case.dilations, is_causal=case.causals)
            chosen = gna.selected_backend(q, k, v, case.window, backward=grad, backend=backend,
                                          **rule)
            if grad:
                fwd_name = gna.selected_backend(q, k, v, case.window, backend=backend, **rule)
                chosen = chosen if chosen == fwd_name else f"{fwd_name}/{chosen}"
        except Exception as e:
            chosen = f"none ({type(e).__name__})"
        skip = None
        if "gpu_reference" in chosen and flops > self.args.reference_limit * 1e12:
            skip = ("skipped: gpu_reference (the GPU test oracle) would take too long; "
                    "--reference-limit raises the limit")
        def end_to_end(q, k, v):
            if grad:
                return gna_calls.end_to_end_forward_backward(case, q, k, v, d_out, backend)
            return gna_calls.end_to_end_forward(case, q, k, v, backend)

        self.record(case, pass_name, "gna end-to-end", end_to_end(q, k, v), flops, chosen,
                    skip=skip)
        if self.args.cuda_graph:
            self.record(case, pass_name, "gna end-to-end, CUDA graph",
                        _graphed(end_to_end, q, k, v), flops, chosen, skip=skip)
        if self.args.compile:
            try:
                fn = gna_calls.compiled_end_to_end(case, q, k, v, d_out, backend, grad)
            except Exception as e:  # noqa: BLE001
                fn = _raiser(e)
            self.record(case, pass_name, "gna end-to-end, torch.compile reduce-overhead", fn,
                        flops, chosen, skip=skip)
        try:
            kernels = gna_calls.KernelCalls(case, q, k, v, backend)
            fn = kernels.forward_backward if grad else kernels.forward
        except Exception as e:  # noqa: BLE001
            fn = _raiser(e)
        self.record(case, pass_name, "gna kernel-only", fn, flops, chosen, skip=skip)
        if self.args.precision == "fp8" and not grad:
            self._fp8_row(case, pass_name, q, k, v, flops)

    def _fp8_row(self, case, pass_name, q, k, v, flops):
        """The FP8 forward end to end (quantization included) beside the bf16 rows, with its
        accuracy against float32 attention over the same rule."""
        backend = self.args.backend
        rule = dict(stride=case.strides, dilation=case.dilations, is_causal=case.causals)
        q, k, v = (t.detach() for t in (q, k, v))
        try:
            chosen = gna.selected_backend(q, k, v, case.window, backend=backend,
                                          precision="fp8", **rule)
        except Exception as e:  # noqa: BLE001
            chosen = f"none ({type(e).__name__})"
        skip = None
        if "gpu_reference" in chosen and flops > self.args.reference_limit * 1e12:
            skip = ("skipped: gpu_reference (the GPU test oracle) would take too long; "
                    "--reference-limit raises the limit")
        fn = gna_calls.end_to_end_forward(case, q, k, v, backend, precision="fp8")
        row = self.record(case, pass_name, "gna fp8 end-to-end", fn, flops, chosen, skip=skip)
        if row.get("ms"):
            try:
                row["cosine"], row["rel_l1"] = gna_calls.accuracy(case, q, k, v, fn())
                print(f"{'':58s} {'':7s} fp8 accuracy vs fp32: cosine {row['cosine']:.5f}, "
                      f"relative L1 {row['rel_l1']:.4f}", flush=True)
            except Exception as e:  # noqa: BLE001
                row["note"] = f"accuracy: {type(e).__name__}: {str(e)[:120]}"

    def _flex_row(self, case, pass_name, q, k, v, flops, grad):
        order = "tiled " + "×".join(map(str, case.tile)) if case.tile else "row-major"
        try:
            if case.label not in self.masks:
                t0 = time.time()
                self.masks[case.label] = (peers.flex_block_mask(case, q.device), time.time() - t0)
            block_mask, mask_s = self.masks[case.label]
            tq, tk, tv = (peers.to_tiled_tokens(t, case).requires_grad_(grad) for t in (q, k, v))
            flex = peers.flex_attention()
            if grad:
                d_out = torch.randn_like(tq)
                fn = lambda: torch.autograd.grad(flex(tq, tk, tv, block_mask=block_mask),  # noqa
                                                 (tq, tk, tv), d_out)
            else:
                fn = lambda: flex(tq, tk, tv, block_mask=block_mask)  # noqa: E731
            note = f"tokens {order}, mask {mask_s:.0f}s"
        except Exception as e:  # noqa: BLE001
            fn, note = _raiser(e), f"tokens {order}"
        self.record(case, pass_name, "FlexAttention", fn, flops, None, note)


def _graphed(make_step, *inputs):
    """make_step(*inputs)'s step captured in a CUDA graph on the first call and replayed on
    every call: the step without host work between the kernels, what torch.cuda.graph /
    make_graphed_callables give a small model's training. The step runs on fresh leaf copies of
    the inputs, first used on a side stream (warm-up, as torch.cuda.graph asks): autograd nodes
    made on the default stream by the eager rows would break the capture."""
    graph = []

    def replay():
        if not graph:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fresh = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
                step = make_step(*fresh)
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                step()
            graph.append((g, fresh))
        graph[0][0].replay()

    return replay


def _raiser(error):
    """A call that fails as setting it up did (so the row records the error)."""
    def fail():
        raise error
    return fail


def _write(args, meta, rows):
    table = report.markdown(rows)
    report.write_json(os.path.join(args.out, "bench.json"), meta, rows)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write(f"{meta['device']}, torch {meta['torch']}, CUDA {meta['cuda']}, cuDNN "
                f"{meta['cudnn']}; `{meta['command']}`\n\n" + table)
    if args.chart:
        report.write_chart(args.chart, rows, f"gna vs peers on {meta['device']} "
                                             "(× cuDNN SDPA dense, higher is better)")
    return table


def parse(argv):
    p = argparse.ArgumentParser(prog="gna-bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="*", default=[],
                   help="use cases of the set (hunyuan, cosmos, wan, flux4k, nat, dinat, hdit, "
                        "na3d, long1d; NAME:i for the i-th case of a name) or case names of "
                        "the table (--list shows them); default: the whole set")
    p.add_argument("--quick", action="store_true", help="two small cases (a smoke run)")
    p.add_argument("--set", default=None, dest="case_set",
                   help="a set of the case table (peers, the default; quick, kernel, image, "
                        "hopper, hopper-bwd)")
    p.add_argument("--passes", default="fwd,fwd+bwd", help="fwd, fwd+bwd or both (default)")
    p.add_argument("--backend", default="auto", help="gna backend (default: dispatch's choice)")
    p.add_argument("--precision", default="auto", choices=("auto", "fp8"),
                   help="fp8: also time the FP8 forward (quantization included) beside each "
                        "case's forward rows, with its cosine similarity and relative L1 error "
                        "against float32 attention over the same rule")
    p.add_argument("--no-flex", action="store_true", help="skip FlexAttention")
    p.add_argument("--no-dense", action="store_true", help="skip the dense SDPA peers")
    p.add_argument("--cuda-graph", action="store_true",
                   help="also time gna end-to-end and cuDNN SDPA captured in a CUDA graph and "
                        "replayed (no host work between kernels: small problems' training steps)")
    p.add_argument("--compile", action="store_true",
                   help="also time gna end-to-end under torch.compile(mode=\"reduce-overhead\") "
                        "(inductor's CUDA graphs of the forward and the backward), to set beside "
                        "--cuda-graph's hand-captured step; the eager rows of later cases then pay "
                        "the host work compilation leaves behind)")
    p.add_argument("--warmup-ms", type=float, default=25)
    p.add_argument("--rep-ms", type=float, default=200)
    p.add_argument("--flex-budget-s", type=float, default=120.0,
                   help="seconds a FlexAttention row may take (mask, compilation, timing) before "
                        "it is cut off and reported as skipped with the reason; 0: no limit")
    p.add_argument("--slow-s", type=float, default=5.0,
                   help="a call (after the first, which may compile) slower than this is "
                        "reported as a single call")
    p.add_argument("--reference-limit", type=float, default=0.05,
                   help="TFLOP above which gna rows on the gpu_reference backend are skipped")
    p.add_argument("--out", default=".", help="folder for bench.json and bench.md")
    p.add_argument("--chart", default=None, help="write the chart to this .svg or .png file")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    args = p.parse_args(argv)
    args.passes = [x.strip() for x in args.passes.split(",")]
    for x in args.passes:
        if x not in ("fwd", "fwd+bwd"):
            p.error(f"--passes: expected fwd and/or fwd+bwd, got {x!r}")
    # Times and limits: finite and in range (an infinite or NaN --rep-ms would never end).
    for flag, value, low in (("--warmup-ms", args.warmup_ms, 0.0), ("--rep-ms", args.rep_ms, 0.0),
                             ("--slow-s", args.slow_s, 0.0),
                             ("--flex-budget-s", args.flex_budget_s, 0.0),
                             ("--reference-limit", args.reference_limit, 0.0)):
        if not math.isfinite(value) or value < low or (flag == "--rep-ms" and value == 0):
            p.error(f"{flag}: expected a finite number {'> 0' if flag == '--rep-ms' else '>= 0'}"
                    f", got {value!r}")
    if not args.backend:
        p.error("--backend: expected a backend name or auto, got ''")
    return args


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        selected = cases_mod.select(args.cases, args.quick, args.case_set)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if args.list:
        for c in selected:
            print(f"{c.key}: {c.label}")
        return 0
    if not torch.cuda.is_available():
        print("gna-bench needs a CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                gna_backends=gna.backend_names(), command="gna-bench " + " ".join(
                    sys.argv[1:] if argv is None else argv),
                warmup_ms=args.warmup_ms, rep_ms=args.rep_ms)
    print(f"{meta['device']}, torch {meta['torch']}, CUDA {meta['cuda']}, cuDNN {meta['cudnn']}, "
          f"gna backends {' '.join(meta['gna_backends'])}", flush=True)
    runner = Runner(args)
    runner.copy_gbps = copy_bandwidth_gbps()
    meta["copy_gbps"] = runner.copy_gbps
    print(f"device-to-device copy: {runner.copy_gbps:.0f} GB/s (bytes read + written)", flush=True)
    os.makedirs(args.out, exist_ok=True)
    runner.run(selected, lambda rows: _write(args, meta, rows))
    print()
    print(report.markdown(runner.rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
