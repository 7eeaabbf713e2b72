"""Runs a HunyuanVideo-shaped attention block (QKV projection, neighborhood attention over the
video's frames x height x width, output projection) over the ranks of a torchrun job in every
context-parallel mode that applies, against one rank running the whole problem, and prints each
mode's timeline: the block's time and speedup, its attention's (exchanges included), the time
of one all-to-all of Ulysses' volume (Q, K, V and O of the rank's shard) alone, and the cost
model's predicted attention time (its choice below the table).

    torchrun --nproc_per_node 4 examples/context_parallel.py              # NCCL, bf16, GPUs
    torchrun --nproc_per_node 4 examples/context_parallel.py --small      # gloo, CPU, float32

--small runs a shape the CPU reference handles in seconds (outputs checked against the single
rank's); the default is HunyuanVideo 720p: 30 x 48 x 80 tokens, 24 heads of 128, window
18 x 24 x 24, optional text tokens (--text 256, joint attention, Ulysses modes only);
--case long1d: 32768 tokens, 8 heads of 128, window 2048. Each mode's row gives the block's
speedup and the attention's alone (forward, or forward + backward with --backward) over one
rank running the whole problem.
"""
import argparse
import math
import os
import statistics
import time

import torch
import torch.distributed as dist

import gna
from gna import distributed as gd


# layout, window, heads, head dim
CASES = {"hunyuan": ((30, 48, 80), (18, 24, 24), 24, 128),
         "long1d": ((32768,), (2048,), 8, 128)}


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="a CPU-sized shape on gloo")
    p.add_argument("--text", type=int, default=0, help="text tokens (joint attention)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--backward", action="store_true", help="time forward + backward")
    p.add_argument("--case", default="hunyuan", choices=sorted(CASES), help="the problem")
    return p.parse_args()


def timed(fn, device, reps, alone=False):
    """Median seconds of fn() over reps calls after one warm-up, all ranks in step (alone: this
    rank only)."""
    fn()
    samples = []
    for _ in range(reps):
        if not alone:
            dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


class Block(torch.nn.Module):
    """QKV projection, attention through `attend`, output projection."""

    def __init__(self, heads, head_dim):
        super().__init__()
        width = heads * head_dim
        self.heads, self.head_dim = heads, head_dim
        self.qkv = torch.nn.Linear(width, 3 * width, bias=False)
        self.out = torch.nn.Linear(width, width, bias=False)

    def forward(self, x, attend):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).unbind(2)
        return self.out(attend(q, k, v).reshape(b, n, -1))


def main():
    args = parse()
    backend = "gloo" if args.small or not torch.cuda.is_available() else "nccl"
    dist.init_process_group(backend)
    ranks, rank = dist.get_world_size(), dist.get_rank()
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dtype = torch.bfloat16
    else:
        device, dtype = torch.device("cpu"), torch.float32
    if args.small:
        layout, window, heads, head_dim = (8, 6, 8), (3, 3, 5), 8, 16
    else:
        layout, window, heads, head_dim = CASES[args.case]
    tokens, text = math.prod(layout), args.text
    torch.manual_seed(0)
    block = Block(heads, head_dim).to(device, dtype)
    x = torch.randn(1, tokens + text, heads * head_dim, device=device, dtype=dtype)
    mine = lambda t: gd.shard_sequence(t)  # noqa: E731  (this rank's contiguous shard)
    na_rank = getattr(gna, f"na{len(layout)}d")
    na = lambda q, k, v: na_rank(  # noqa: E731
        q.reshape(1, *layout, *q.shape[2:]), k.reshape(1, *layout, *k.shape[2:]),
        v.reshape(1, *layout, *v.shape[2:]), window).reshape(q.shape)

    def whole(q, k, v):
        if not text:
            return na(q, k, v)
        return gna.joint_attention(q, k, v, layout, window, text_len=text)

    def sharded(mode, size):
        def attend(q, k, v):
            if text:
                split = lambda t: (t[:, :t.shape[1] - text // ranks],  # noqa: E731
                                   t[:, t.shape[1] - text // ranks:])
                (qv, qt), (kv, kt), (vv, vt) = split(q), split(k), split(v)
                out, out_text = gd.ulysses_joint_attention(qv, kv, vv, qt, kt, vt, layout,
                                                           window)
                return torch.cat([out, out_text], 1)
            if mode == "ulysses":
                return gd.ulysses_attention(q, k, v, layout, window)
            if mode == "halo":
                local = (layout[0] // ranks,) + layout[1:]
                grid = lambda t: t.reshape(1, *local, *t.shape[2:])  # noqa: E731
                return gd.halo_attention(grid(q), grid(k), grid(v), layout,
                                         window).reshape(q.shape)
            return gd.hybrid_attention(q, k, v, layout, window, ulysses_size=size)
        return attend

    def shard_input():
        if not text:
            return mine(x)
        return torch.cat([mine(x[:, :tokens]), mine(x[:, tokens:])], 1)

    def step(inputs, attend):
        def run():
            if args.backward:
                xi = inputs.detach().requires_grad_()
                block(xi, attend).float().sum().backward()
            else:
                with torch.no_grad():
                    block(inputs, attend)
        return run

    def attention_only(attend, q, k, v):
        if not args.backward:
            def run():
                with torch.no_grad():
                    attend(q, k, v)
            return run
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        grad = torch.randn_like(q)

        def run_backward():
            attend(*leaves).backward(grad)
        return run_backward

    link = gd.measure_link()
    shard = shard_input()
    q, k, v = (t.contiguous() for t in block.qkv(shard).view(
        1, shard.shape[1], 3, heads, head_dim).unbind(2))
    local = (layout[0] // ranks,) + layout[1:]
    grid = lambda t: t[:, :math.prod(local)].reshape(1, *local, *t.shape[2:])  # noqa: E731
    exact = layout[0] % ranks == 0 and gd.exact_halo(grid(q), grid(k), grid(v), layout, window)
    choice = gd.choose_parallelism(layout, window, 1, 1, False, heads, ranks, link=link,
                                   head_dim=head_dim, backward=args.backward, exact=exact,
                                   text_tokens=text)
    one, one_attention = 0.0, 0.0
    if rank == 0:
        one = timed(step(x, whole), device, args.reps, alone=True)
        qw, kw, vw = (t.contiguous() for t in block.qkv(x).view(
            1, x.shape[1], 3, heads, head_dim).unbind(2))
        one_attention = timed(attention_only(whole, qw, kw, vw), device, args.reps, alone=True)
        del qw, kw, vw
    ones = torch.tensor([one, one_attention], dtype=torch.float64, device=device)
    dist.broadcast(ones, 0)
    one, one_attention = ones.tolist()
    rows = []
    for (mode, size), predicted in sorted(choice.costs.items()):
        if text and mode != "ulysses":
            continue
        attend = sharded(mode, size)
        total = timed(step(shard, attend), device, args.reps)
        attention = timed(attention_only(attend, q, k, v), device, args.reps)
        # The exchanges alone: the same all-to-all volume as the mode's (Q, K, V in, O out).
        volume = torch.empty(4 * q.numel() // ranks * ranks, device=device, dtype=dtype)
        exchanges = timed(lambda: dist.all_to_all_single(torch.empty_like(volume), volume),
                          device, args.reps) if mode != "halo" else float("nan")
        rows.append((mode, size, total, attention, exchanges, predicted))
        if args.small and not args.backward:  # outputs equal to the single rank's
            with torch.no_grad():
                out, visual = block(shard, attend), tokens // ranks
                got = gd.gather_sequence(out[:, :visual])
                if text:
                    got = torch.cat([got, gd.gather_sequence(out[:, visual:])], 1)
                want = block(x, whole)
                assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), mode
    if rank == 0:
        what = "forward + backward" if args.backward else "forward"
        print(f"{ranks} ranks ({backend}, {dtype}), layout {layout}, window {window}, "
              f"{heads} heads of {head_dim}, {text} text tokens, {what}")
        print(f"link: latency {link.latency * 1e6:.1f} us, bandwidth "
              f"{link.bandwidth / 1e9:.2f} GB/s; one rank, whole problem: block {one * 1e3:.2f} "
              f"ms, attention {one_attention * 1e3:.2f} ms")
        print(f"{'mode':>10} {'U':>2} {'block ms':>9} {'speedup':>8} {'attention ms':>13} "
              f"{'speedup':>8} {'all-to-all ms':>14} {'predicted ms':>13}")
        for mode, size, total, attention, exchanges, predicted in rows:
            print(f"{mode:>10} {size:>2} {total * 1e3:9.2f} {one / total:7.2f}x "
                  f"{attention * 1e3:13.2f} {one_attention / attention:7.2f}x "
                  f"{exchanges * 1e3:14.2f} {predicted * 1e3:13.2f}")
        print(f"chosen: {choice.mode} (U = {choice.ulysses_size}); halo on exact slabs: {exact}")
    # The Ulysses pipeline's timeline on this rank: each head group's exchange sent, arrived,
    # computed and back (the attention hides an exchange when it arrives before it is needed).
    if any(mode == "ulysses" for mode, *_ in rows):
        attend = sharded("ulysses", ranks)
        with torch.no_grad(), gd.timeline() as events:
            attend(q, k, v)
        if rank == 0:
            print("Ulysses timeline (forward, rank 0): " +
                  ", ".join(f"{label} {ms:.2f} ms" for label, ms in events))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
