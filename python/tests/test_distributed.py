"""Context parallelism on the CPU: gloo process groups of 2 and 4 ranks running Ulysses attention
on the CPU reference; forward and every gradient equal to the single-process call."""
import os
import socket
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not built in", allow_module_level=True)

import gna  # noqa: E402
from gna import distributed as gd  # noqa: E402

# (layout, heads, heads_kv, window, stride, dilation, causal, additional tokens)
CASES = [
    ((8, 6), 4, 4, (3, 5), (1, 2), (2, 1), (False, False), 0),
    ((4, 4, 6), 4, 2, (3, 2, 3), (1, 1, 3), (1, 2, 1), (True, False, False), 3),
    ((24,), 8, 4, (5,), (2,), (1,), (False,), 0),
]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _inputs(case, seed):
    layout, heads, heads_kv, *_, extra = case
    g = torch.Generator().manual_seed(seed)
    tokens = 1
    for e in layout:
        tokens *= e
    make = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    q, k, v = make(2, tokens, heads, 4), make(2, tokens, heads_kv, 4), make(2, tokens, heads_kv, 3)
    ek = make(2, extra, heads_kv, 4) if extra else None
    ev = make(2, extra, heads_kv, 3) if extra else None
    w = make(2, tokens, heads, 3)  # weights of the loss, so every output element matters
    return q, k, v, ek, ev, w


def _single_process(case, seed):
    layout, _, _, window, stride, dilation, causal, _ = case
    q, k, v, ek, ev, w = _inputs(case, seed)
    inputs = [t.requires_grad_() for t in (q, k, v, ek, ev) if t is not None]
    na = (gna.na1d, gna.na2d, gna.na3d)[len(layout) - 1]
    spatial = lambda t: t.reshape(t.shape[0], *layout, *t.shape[2:])  # noqa: E731
    out = na(spatial(q), spatial(k), spatial(v), window, stride=stride, dilation=dilation,
             is_causal=causal, additional_keys=ek, additional_values=ev)
    out = out.reshape(w.shape)
    grads = torch.autograd.grad((out * w).sum(), inputs)
    return out.detach(), grads


def _rank_main(rank, world, port, case, seed, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        layout, _, _, window, stride, dilation, causal, _ = case
        q, k, v, ek, ev, w = _inputs(case, seed)
        shards = [gd.shard_sequence(t).detach().requires_grad_() for t in (q, k, v)]
        extras = [t.requires_grad_() for t in (ek, ev) if t is not None]
        extra = dict(additional_keys=ek, additional_values=ev) if extras else {}
        out = gd.ulysses_attention(*shards, layout, window, stride=stride, dilation=dilation,
                                   is_causal=causal, **extra)
        loss = (out * gd.shard_sequence(w)).sum()
        grads = torch.autograd.grad(loss, shards + extras)
        # Each rank's additional-token gradient covers its own heads' share: sum over ranks.
        extra_grads = [g.contiguous() for g in grads[3:]]
        for g in extra_grads:
            dist.all_reduce(g)
        full = [gd.gather_sequence(out.detach())] + [gd.gather_sequence(g) for g in grads[:3]]
        if rank == 0:
            torch.save(full + extra_grads, os.path.join(result_dir, "result.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("index", range(len(CASES)))
def test_ulysses_equals_single_process(tmp_path, world, index):
    case = CASES[index]
    if case[1] % world or case[2] % world:
        pytest.skip(f"heads {case[1]}/{case[2]} do not split over {world} ranks")
    seed = 100 + index
    torch.multiprocessing.spawn(_rank_main, args=(world, _free_port(), case, seed, str(tmp_path)),
                                nprocs=world)
    got = torch.load(tmp_path / "result.pt")
    out, grads = _single_process(case, seed)
    expected = [out, *grads]
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a.shape == b.shape
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-9), (a - b).abs().max()


def _bad_rank_main(rank, world, port, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        messages = []
        q = torch.randn(1, 12, 3, 4, dtype=torch.float64)  # 3 heads over 2 ranks
        for call in (lambda: gd.ulysses_attention(q, q, q, (24,), 3),
                     lambda: gd.ulysses_attention(q[:, :5], q[:, :5], q[:, :5], (12,), 3),
                     lambda: gd.ulysses_attention(q, q, q, (2, 3, 2, 2), 3)):
            try:
                call()
                messages.append("no error")
            except ValueError as e:
                messages.append(str(e))
        if rank == 0:
            Path(result_dir, "messages.txt").write_text("\n".join(messages))
    finally:
        dist.destroy_process_group()


def test_ulysses_bad_input_names_the_value(tmp_path):
    torch.multiprocessing.spawn(_bad_rank_main, args=(2, _free_port(), str(tmp_path)), nprocs=2)
    messages = (tmp_path / "messages.txt").read_text().splitlines()
    assert "query heads (3)" in messages[0]
    assert "5 tokens per rank" in messages[1]
    assert "1 to 3 axes" in messages[2]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
