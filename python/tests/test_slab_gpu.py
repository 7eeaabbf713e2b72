"""Slabs on the GPU (the Hopper backend, sm_90 only; skipped elsewhere): slab_backend names it for
16-bit inputs (a 1-D slab only on multiples of 128 rows: the kernels' tiles start on the slab's
first rows), slab_attention's output and gradients equal the same rows of the whole layout's
call (its key gradients with the loss on the slab's queries only), and halo_attention over 2
processes (gloo, both on the one GPU; exact slabs on the 3-D cases) equals the single-process
call, forward and backward. Tolerances: bf16 / fp16 outputs to 2e-2 / 4e-3 and gradients to 5e-2 / 1.5e-2 of the
largest magnitude (the kernels round P and dS to the inputs' dtype; two calls may visit keys in
different tile orders)."""
import os
import random
import socket
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import gna  # noqa: E402
from gna import distributed as gd  # noqa: E402
from gna import slab  # noqa: E402
from gna.distributed._halo import _exact_ranges  # noqa: E402

if not torch.cuda.is_available() or torch.cuda.get_device_capability(0) != (9, 0):
    pytest.skip("needs an sm_90 GPU (the Hopper backend takes slabs)", allow_module_level=True)

SEED = int(os.environ.get("GNA_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
NA = (gna.na1d, gna.na2d, gna.na3d)
OUT_TOL = {torch.bfloat16: 2e-2, torch.float16: 4e-3}
GRAD_TOL = {torch.bfloat16: 5e-2, torch.float16: 1.5e-2}

# (layout, heads, heads_kv, dim, window, stride, dilation, causal)
CASES = [
    ((12, 16, 16), 2, 2, 128, (5, 7, 7), (1, 1, 1), (1, 1, 1), (False,) * 3),
    ((10, 12, 16), 4, 2, 64, (3, 5, 5), (2, 1, 2), (1, 2, 1), (True, False, False)),
    ((512,), 2, 1, 64, (96,), (1,), (1,), (False,)),
    ((24, 20), 2, 2, 64, (7, 5), (3, 1), (2, 1), (False, True)),
]


def _close(got, want, tol):
    scale = want.abs().max().item() + 1e-6
    return (got.float() - want.float()).abs().max().item() / scale <= tol


def _whole(case, dtype, seed, batch=1):
    layout, heads, heads_kv, dim, *_ = case
    g = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda h: torch.randn(batch, *layout, h, dim, generator=g, device="cuda",  # noqa
                                 dtype=torch.float32).to(dtype)
    return make(heads), make(heads_kv), make(heads_kv), make(heads)


def _reference(case, q, k, v, w):
    layout, _, _, _, window, stride, dilation, causal = case
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    out = NA[len(layout) - 1](*inputs, window, stride=stride, dilation=dilation, is_causal=causal)
    grads = torch.autograd.grad((out.float() * w.float()).sum(), inputs)
    return [out.detach()] + list(grads)


def test_slab_backend_is_hopper():
    q = torch.zeros(1, 4, 2, 64, device="cuda", dtype=torch.bfloat16)
    assert slab.slab_backend(q, q, q, (10,), 3, query_offset=(0,)) == "hopper"
    assert slab.slab_backend(q, q, q, (10,), 3, query_offset=(0,), backward=True) == "hopper"
    # Off the 1-D tile grid (128 rows): refused.
    assert slab.slab_backend(q, q, q, (300,), 3, query_offset=(2,)) is None
    v = torch.zeros(1, 3, 16, 16, 2, 64, device="cuda", dtype=torch.bfloat16)
    for backward in (False, True):
        assert slab.slab_backend(v, v, v, (12, 16, 16), (5, 7, 7), query_offset=(5, 0, 0),
                                 key_rows=((3, 10), (0, 16), (0, 16)),
                                 backward=backward) == "hopper"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("index", range(len(CASES)))
def test_slab_equals_the_whole_call(dtype, index):
    case = CASES[index]
    layout, _, _, _, window, stride, dilation, causal = case
    rng = random.Random(SEED + index)
    q, k, v, w = _whole(case, dtype, SEED + index)
    one_d = len(layout) == 1  # 1-D slabs run on multiples of 128 rows
    q0 = 128 * rng.randrange(layout[0] // 128) if one_d else rng.randrange(layout[0])
    q1 = rng.randint(q0 + 1, layout[0])
    k0, k1 = slab.key_range(layout, window, stride, dilation, causal, axis=0, query_begin=q0,
                            query_end=q1)
    if one_d:
        k0 = k0 // 128 * 128
    own = lambda t: t[:, q0:q1]  # noqa: E731
    # The loss on the slab's queries only: the whole call's key gradients are then the slab's.
    w_own = torch.zeros_like(w)
    w_own[:, q0:q1] = w[:, q0:q1]
    expected = _reference(case, q, k, v, w_own)
    inputs = [own(q).clone().requires_grad_(), k[:, k0:k1].clone().requires_grad_(),
              v[:, k0:k1].clone().requires_grad_()]
    zeros = (0,) * (len(layout) - 1)
    out = slab.slab_attention(*inputs, layout, window, stride, dilation, causal,
                              query_offset=(q0,) + zeros, key_offset=(k0,) + zeros)
    got = [out.detach()] + list(torch.autograd.grad((out.float() * own(w).float()).sum(),
                                                    inputs))
    where = f"{case} queries [{q0}, {q1}) keys [{k0}, {k1}) seed {SEED + index}"
    assert _close(got[0], own(expected[0]), OUT_TOL[dtype]), ("out", where)
    assert _close(got[1], own(expected[1]), GRAD_TOL[dtype]), ("dq", where)
    for name, g, e in (("dk", got[2], expected[2]), ("dv", got[3], expected[3])):
        assert _close(g, e[:, k0:k1], GRAD_TOL[dtype]), (name, where)
        # Keys outside the slab get no gradient from its queries.
        assert e[:, :k0].abs().max().item() == 0 if k0 else True
        assert e[:, k1:].abs().max().item() == 0 if k1 < layout[0] else True


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _halo_rank_main(rank, world, port, seed, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        lines = []
        for i, case in enumerate(CASES):
            layout, _, _, _, window, stride, dilation, causal = case
            for dtype in (torch.bfloat16, torch.float16):
                q, k, v, w = _whole(case, dtype, seed + i, batch=2)
                expected = _reference(case, q, k, v, w)
                n = layout[0] // world
                mine = lambda t: t.narrow(1, rank * n, n)  # noqa: E731
                shards = [mine(t).detach().clone().requires_grad_() for t in (q, k, v)]
                if len(layout) == 3:  # these take exact slabs on every rank
                    for r, rows in enumerate(_exact_ranges(layout, window, stride, dilation,
                                                           causal, 0, world)):
                        for backward in (False, True):
                            assert slab.slab_backend(
                                *shards, layout, window, stride, dilation, causal,
                                query_offset=(r * n, 0, 0),
                                key_rows=(rows, (0, layout[1]), (0, layout[2])),
                                backward=backward) == "hopper", (case, r, rows)
                # 3-D and 2-D slabs along axis 0 always fit the Hopper tiles; the 1-D case's
                # second key slab starts off a multiple of 128 rows, so every rank falls back to
                # the extended slab there (halo_attention's default, exact=None).
                exact = gd.exact_halo(*shards, layout, window, stride, dilation, causal)
                if exact != (len(layout) > 1):
                    lines.append(f"FAIL {case} {dtype}: exact_halo {exact}")
                    continue
                out = gd.halo_attention(*shards, layout, window, stride, dilation, causal)
                got = [out.detach()] + list(torch.autograd.grad(
                    (out.float() * mine(w).float()).sum(), shards))
                tols = (OUT_TOL[dtype],) + (GRAD_TOL[dtype],) * 3
                bad = [name for name, a, b, tol in zip(("out", "dq", "dk", "dv"), got, expected,
                                                       tols) if not _close(a, mine(b), tol)]
                lines.append(f"FAIL {case} {dtype}: {bad}" if bad else "ok")
        Path(result_dir, f"halo{rank}.txt").write_text("\n".join(lines))
    finally:
        dist.destroy_process_group()


def test_halo_exact_equals_single_process(tmp_path):
    if not dist.is_available():
        pytest.skip("torch.distributed is not built in")
    world = 2
    torch.multiprocessing.spawn(_halo_rank_main, args=(world, _free_port(), SEED, str(tmp_path)),
                                nprocs=world)
    for rank in range(world):
        lines = (tmp_path / f"halo{rank}.txt").read_text().splitlines()
        assert len(lines) == 2 * len(CASES) and all(line == "ok" for line in lines), (SEED, lines)
