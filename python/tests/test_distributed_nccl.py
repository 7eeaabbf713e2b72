"""Context parallelism with NCCL on 2 and 4 GPUs (skipped with fewer): every mode's output and
gradients against the single-GPU call on the whole problem, in bfloat16. Tolerances: the ranks
run the same kernels on fewer heads (Ulysses) or on an extended slab (halo: other tiles), so
outputs and gradients agree within bfloat16's rounding of the accumulated sums, 2e-2 absolute
and relative (the float64 CPU tests in test_distributed.py check exactness)."""
import os
import socket
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import gna  # noqa: E402
from gna import distributed as gd  # noqa: E402

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
if GPUS < 2 or not dist.is_available() or not dist.is_nccl_available():
    pytest.skip("needs two or more CUDA GPUs and NCCL", allow_module_level=True)

TOLERANCE = 2e-2
LAYOUT, WINDOW, HEADS, HEADS_KV, TEXT = (8, 12, 16), (3, 5, 7), 8, 4, 16


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _inputs(device, text=0):
    g = torch.Generator(device="cpu").manual_seed(0)
    tokens = LAYOUT[0] * LAYOUT[1] * LAYOUT[2] + text
    make = lambda h: torch.randn(2, tokens, h, 64, generator=g).to(device,  # noqa: E731
                                                                     torch.bfloat16)
    return make(HEADS), make(HEADS_KV), make(HEADS_KV), make(HEADS)


def _whole(q, k, v, w, text=0):
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    if text:
        out = gna.joint_attention(*inputs, LAYOUT, WINDOW, text_len=text)
    else:
        out = gna.na3d(*(t.reshape(2, *LAYOUT, *t.shape[2:]) for t in inputs),
                       WINDOW).reshape(w.shape)
    return [out.detach()] + list(torch.autograd.grad((out.float() * w.float()).sum(), inputs))


def _worst(got, expected):
    return max(((a.float() - b.float()).abs() - TOLERANCE * b.float().abs()).max().item()
               for a, b in zip(got, expected))


def _rank_main(rank, world, port, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    device = torch.device("cuda", rank)
    lines = []
    try:
        q, k, v, w = _inputs(device)
        expected = _whole(q, k, v, w)
        mine = lambda t: gd.shard_sequence(t).detach().clone().requires_grad_()  # noqa: E731
        modes = {"ulysses": lambda a, b, c: gd.ulysses_attention(a, b, c, LAYOUT, WINDOW),
                 "halo": lambda a, b, c: gd.halo_attention(
                     *(t.reshape(2, LAYOUT[0] // world, *LAYOUT[1:], *t.shape[2:])
                       for t in (a, b, c)), LAYOUT, WINDOW).reshape(a.shape[:-1] + (64,))}
        if world == 4:
            modes["hybrid"] = lambda a, b, c: gd.hybrid_attention(a, b, c, LAYOUT, WINDOW,
                                                                  ulysses_size=2)
        for name, attend in modes.items():
            shards = [mine(t) for t in (q, k, v)]
            out = attend(*shards)
            grads = torch.autograd.grad((out.float() * gd.shard_sequence(w).float()).sum(),
                                        shards)
            got = [gd.gather_sequence(t.detach().contiguous()) for t in (out, *grads)]
            lines.append(f"{name} {_worst(got, expected):.3g}")
        # Joint attention: visual and text tokens both sharded.
        q, k, v, w = _inputs(device, TEXT)
        expected = _whole(q, k, v, w, TEXT)
        visual = q.shape[1] - TEXT
        shards = [mine(t[:, :visual]) for t in (q, k, v)] + [mine(t[:, visual:])
                                                              for t in (q, k, v)]
        out, out_text = gd.ulysses_joint_attention(*shards, LAYOUT, WINDOW)
        loss = (out.float() * gd.shard_sequence(w[:, :visual]).float()).sum() + \
            (out_text.float() * gd.shard_sequence(w[:, visual:]).float()).sum()
        grads = torch.autograd.grad(loss, shards)
        both = lambda a, b: torch.cat([gd.gather_sequence(a.contiguous()),  # noqa: E731
                                       gd.gather_sequence(b.contiguous())], 1)
        got = [both(out.detach(), out_text.detach())] + [both(grads[i], grads[3 + i])
                                                         for i in range(3)]
        lines.append(f"joint {_worst(got, expected):.3g}")
        # The GPU backends do not take slabs: halo mode keeps the extended slab there.
        shard = q[:, :LAYOUT[0] // world]
        lines.append(f"slab_backend {gd._halo.slab_backend(shard, shard, shard, LAYOUT, WINDOW)}")
        link = gd.measure_link()
        lines.append(f"link {link.latency > 0 and link.bandwidth > 0}")
        Path(result_dir, f"nccl{rank}.txt").write_text("\n".join(lines))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_nccl_modes_equal_one_gpu(tmp_path, world):
    if GPUS < world:
        pytest.skip(f"needs {world} GPUs, {GPUS} present")
    torch.multiprocessing.spawn(_rank_main, args=(world, _free_port(), str(tmp_path)),
                                nprocs=world)
    for rank in range(world):
        lines = dict(line.split(" ", 1) for line in
                     (tmp_path / f"nccl{rank}.txt").read_text().splitlines())
        for mode in ("ulysses", "halo", "joint") + (("hybrid",) if world == 4 else ()):
            assert float(lines[mode]) <= TOLERANCE, (rank, mode, lines[mode])
        # The Hopper kernels take slabs on sm_90; elsewhere no CUDA backend does.
        hopper = torch.cuda.get_device_capability(0)[0] == 9
        assert lines["slab_backend"] in (("hopper", "None") if hopper else ("None",)), \
            lines["slab_backend"]
        assert lines["link"] == "True"
