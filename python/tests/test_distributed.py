"""Context parallelism on the CPU: gloo process groups of 2 and 4 ranks running Ulysses and halo
attention on the CPU reference; forward and every gradient equal to the single-process call."""
import os
import random
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
    ((4, 6), 16, 8, (3, 3), (1, 2), (1, 1), (False, True), 2),
]
# Head groups of the pipelined exchanges: None (the default), and every count that splits the
# key/value heads per rank; each case meets at least one count above 1 on 2 ranks.



# Fresh inputs and halo rules on every run; GNA_TEST_SEED repeats a run (failures name it).
SEED = int(os.environ.get("GNA_TEST_SEED", random.SystemRandom().randrange(1 << 30)))


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


def _head_group_counts(case, world):
    per_rank = case[2] // world
    return [None] + [g for g in range(1, per_rank + 1) if per_rank % g == 0]


def _rank_main(rank, world, port, case, seed, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        layout, _, _, window, stride, dilation, causal, _ = case
        for groups in _head_group_counts(case, world):
            q, k, v, ek, ev, w = _inputs(case, seed)
            shards = [gd.shard_sequence(t).detach().requires_grad_() for t in (q, k, v)]
            extras = [t.requires_grad_() for t in (ek, ev) if t is not None]
            extra = dict(additional_keys=ek, additional_values=ev) if extras else {}
            out = gd.ulysses_attention(*shards, layout, window, stride=stride, dilation=dilation,
                                       is_causal=causal, head_groups=groups, **extra)
            loss = (out * gd.shard_sequence(w)).sum()
            grads = torch.autograd.grad(loss, shards + extras)
            # Each rank's additional-token gradient covers its own heads' share: sum over ranks.
            extra_grads = [g.contiguous() for g in grads[3:]]
            for g in extra_grads:
                dist.all_reduce(g)
            full = [gd.gather_sequence(out.detach())] + [gd.gather_sequence(g) for g in grads[:3]]
            if rank == 0:
                torch.save(full + extra_grads, os.path.join(result_dir, f"result{groups}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("index", range(len(CASES)))
def test_ulysses_equals_single_process(tmp_path, world, index):
    case = CASES[index]
    if case[1] % world or case[2] % world:
        pytest.skip(f"heads {case[1]}/{case[2]} do not split over {world} ranks")
    seed = SEED + index
    torch.multiprocessing.spawn(_rank_main, args=(world, _free_port(), case, seed, str(tmp_path)),
                                nprocs=world)
    out, grads = _single_process(case, seed)
    expected = [out, *grads]
    counts = _head_group_counts(case, world)
    for groups in counts:
        got = torch.load(tmp_path / f"result{groups}.pt")
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert a.shape == b.shape
            assert torch.allclose(a, b, atol=1e-10, rtol=1e-9), (seed, groups,
                                                                 (a - b).abs().max())


def test_ulysses_cases_pipeline_head_groups():
    # The pipeline runs more than one head group, with GQA and with additional tokens.
    for world in (2, 4):
        piped = [c for c in CASES if c[2] % world == 0 and
                 max(g or 0 for g in _head_group_counts(c, world)) > 1]
        assert any(c[1] != c[2] for c in piped) and any(c[-1] for c in piped), world


# Joint text + visual attention: visual and text tokens both sharded; (layout, heads, heads_kv,
# window, stride, dilation, causal, text tokens).
JOINT_CASES = [
    ((4, 6), 4, 4, (3, 3), (1, 2), (1, 1), (False, False), 4),
    ((8,), 8, 4, (3,), (1,), (2,), (True,), 8),
]


def _joint_inputs(case, seed):
    layout, heads, heads_kv, *_, text = case
    g = torch.Generator().manual_seed(seed)
    tokens = 1
    for e in layout:
        tokens *= e
    make = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    n = tokens + text
    return make(2, n, heads, 4), make(2, n, heads_kv, 4), make(2, n, heads_kv, 3), \
        make(2, n, heads, 3)


def _joint_rank_main(rank, world, port, case, seed, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        layout, _, _, window, stride, dilation, causal, text = case
        tokens = len(_joint_inputs(case, seed)[0][0]) - text
        q, k, v, w = _joint_inputs(case, seed)
        shards = [gd.shard_sequence(t[:, :tokens]).detach().requires_grad_() for t in (q, k, v)]
        shards += [gd.shard_sequence(t[:, tokens:]).detach().requires_grad_() for t in (q, k, v)]
        out, out_text = gd.ulysses_joint_attention(*shards, layout, window, stride=stride,
                                                   dilation=dilation, is_causal=causal,
                                                   head_groups=2)
        loss = (out * gd.shard_sequence(w[:, :tokens])).sum() + \
            (out_text * gd.shard_sequence(w[:, tokens:])).sum()
        grads = torch.autograd.grad(loss, shards)
        whole = lambda a, b: torch.cat([gd.gather_sequence(a), gd.gather_sequence(b)], 1)  # noqa
        full = [whole(out.detach(), out_text.detach())] + \
            [whole(grads[i], grads[3 + i]) for i in range(3)]
        if rank == 0:
            torch.save(full, os.path.join(result_dir, "joint.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("index", range(len(JOINT_CASES)))
def test_ulysses_joint_equals_single_process(tmp_path, world, index):
    case = JOINT_CASES[index]
    if case[2] % (2 * world):
        pytest.skip(f"{case[2]} key/value heads do not make 2 head groups on {world} ranks")
    seed = SEED + 100 + index
    torch.multiprocessing.spawn(_joint_rank_main,
                                args=(world, _free_port(), case, seed, str(tmp_path)),
                                nprocs=world)
    got = torch.load(tmp_path / "joint.pt")
    layout, _, _, window, stride, dilation, causal, text = case
    q, k, v, w = (t.requires_grad_() for t in _joint_inputs(case, seed))
    out = gna.joint_attention(q, k, v, layout, window, stride=stride, dilation=dilation,
                              is_causal=causal, text_len=text)
    expected = [out.detach()] + list(torch.autograd.grad((out * w).sum(), (q, k, v)))
    for a, b in zip(got, expected):
        assert a.shape == b.shape
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-9), (seed, (a - b).abs().max())


def _bad_rank_main(rank, world, port, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        messages = []
        q = torch.randn(1, 12, 3, 4, dtype=torch.float64)  # 3 heads over 2 ranks
        q4 = torch.randn(1, 12, 4, 4, dtype=torch.float64)  # 4 heads over 2 ranks
        t = torch.randn(1, 3, 4, 4, dtype=torch.float64)
        for call in (lambda: gd.ulysses_attention(q, q, q, (24,), 3),
                     lambda: gd.ulysses_attention(q[:, :5], q[:, :5], q[:, :5], (12,), 3),
                     lambda: gd.ulysses_attention(q, q, q, (2, 3, 2, 2), 3),
                     lambda: gd.ulysses_attention(q4, q4, q4, (24,), 3, head_groups=3),
                     lambda: gd.hybrid_attention(q4, q4, q4, (24,), 3, ulysses_size=3),
                     lambda: gd.hybrid_attention(q4, q4, q4, (3, 8), 3, ulysses_size=1),
                     lambda: gd.ulysses_joint_attention(q4, q4, q4, t, t, t[..., :2, :], (24,),
                                                        3)):
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
    assert "head_groups must be a positive int dividing" in messages[3] and "got 3" in messages[3]
    assert "ulysses_size must be a positive int dividing" in messages[4] and "(2)" in messages[4]
    assert "layout[0] (3) must be divisible" in messages[5]
    assert "text_value has 2 heads, the visual tokens 4" in messages[6]


# Halo mode: randomized rules over slabs of one axis; every rank checks its own slab of the
# output and of the three gradients against the single-process call, for all the configurations
# in one process group per world size (spawning dominates the run time).

def _halo_configs(world, count, seed):
    """(layout, axis, heads, heads_kv, window, stride, dilation, causal, batch) tuples: random
    rules, plus slabs of one row (halos from several ranks), blocked and causal strided axes."""
    rng = random.Random(seed)
    configs = [
        ((world, 5), 0, 2, 1, (min(world, 3), 3), (2, 1), (1, 1), (False, False), 1),
        ((world * 4, 4), 0, 2, 2, (4, 2), (4, 2), (2, 1), (True, False), 1),
        ((3, world * 3), 1, 4, 2, (2, 3), (1, 3), (1, 2), (False, True), 2),
        ((world * 4,), 0, 1, 1, (4,), (4,), (1,), (False,), 1),
        ((world * 2, 3, 3), 0, 2, 2, (2, 3, 3), (1, 1, 1), (1, 1, 1), (False,) * 3, 1),
    ]
    while len(configs) < count:
        rank = rng.choice((1, 2, 2, 3))
        axis = rng.randrange(min(rank, 2))
        window, stride, dilation, causal, layout = [], [], [], [], []
        for i in range(rank):
            k = rng.randint(2, 5 if rank < 3 else 3)
            d = rng.choice((1, 1, 2, 3)) if rank < 3 else rng.choice((1, 2))
            s = rng.randint(1, k)
            if i == axis:  # slabs from the thinnest the rule allows
                thinnest = -(-k * d // world)
                extent = world * rng.randint(thinnest, max(thinnest, 6 if rank < 3 else 3))
            else:
                extent = k * d + rng.randint(0, 3 if rank < 3 else 1)
            for values, value in ((window, k), (stride, s), (dilation, d),
                                  (causal, rng.random() < 0.35), (layout, extent)):
                values.append(value)
        heads_kv = rng.choice((1, 2))
        heads = heads_kv * rng.choice((1, 2))
        configs.append((tuple(layout), axis, heads, heads_kv, tuple(window), tuple(stride),
                        tuple(dilation), tuple(causal), rng.choice((1, 2))))
    return configs


def _halo_check(config, seed, rank, world, exact):
    """Largest difference between this rank's halo slab (output, dq, dk, dv) and the same slab
    of the single-process call."""
    layout, axis, heads, heads_kv, window, stride, dilation, causal, batch = config
    g = torch.Generator().manual_seed(seed)
    make = lambda h, d: torch.randn(batch, *layout, h, d, generator=g,  # noqa: E731
                                    dtype=torch.float64)
    # Head dim 32 for Q and K: one the Hopper forward's tile chooser takes, so that exact slabs
    # off its Q tile's grid start before their own rows (query_pads).
    q, k, v, w = make(heads, 32), make(heads_kv, 32), make(heads_kv, 3), make(heads, 3)
    na = (gna.na1d, gna.na2d, gna.na3d)[len(layout) - 1]
    rule = dict(stride=stride, dilation=dilation, is_causal=causal)
    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    out = na(*inputs, window, **rule)
    expected = [out.detach()] + list(torch.autograd.grad((out * w).sum(), inputs))
    slab = layout[axis] // world
    mine = lambda t: t.narrow(1 + axis, rank * slab, slab)  # noqa: E731
    shards = [mine(t).detach().clone().requires_grad_() for t in (q, k, v)]
    out = gd.halo_attention(*shards, layout, window, axis=axis, exact=exact, **rule)
    got = [out.detach()] + list(torch.autograd.grad((out * mine(w)).sum(), shards))
    worst = 0.0
    for a, b in zip(got, expected):
        b = mine(b)
        assert a.shape == b.shape, (a.shape, b.shape)
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-9), (a - b).abs().max()
        worst = max(worst, (a - b).abs().max().item())
    # The forward alone pads (query_pads); this call's backward ran unpadded, check the forward.
    with torch.no_grad():
        alone = gd.halo_attention(*shards, layout, window, axis=axis, exact=exact, **rule)
    assert torch.allclose(alone, mine(expected[0]), atol=1e-10, rtol=1e-9)
    pads = gd.query_pads(layout, window, stride, dilation, causal, axis, world_size=world,
                         head_dim=32)
    return worst, max(pads) if exact is not False else 0


def _halo_errors():
    q = torch.randn(1, 4, 5, 2, 4, dtype=torch.float64)  # a slab of layout (8, 5) over 2 ranks
    calls = (lambda: gd.halo_attention(q, q, q, (8, 5), 3, axis=2),
             lambda: gd.halo_attention(q, q, q, (8, 10), 3, axis=1),
             lambda: gd.halo_attention(q, q, q, (7, 5), 3),
             lambda: gd.halo_attention(q, q, q[:, :3], (8, 5), 3),
             lambda: gd.halo_attention(q, q, q, (8, 5), (3, 6)),
             lambda: gd.halo_attention(q, q, q, (8, 5, 1, 1), 3))
    messages = []
    for call in calls:
        try:
            call()
            messages.append("no error")
        except ValueError as e:
            messages.append(str(e))
    return messages


def _halo_rank_main(rank, world, port, count, seed, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        lines = []
        for i, config in enumerate(_halo_configs(world, count, seed)):
            exact = i % 2 == 0  # exact slabs and the extended-slab path on alternate configs
            try:
                worst, pad = _halo_check(config, seed + i, rank, world, exact)
                lines.append(f"ok {worst:.3g} pad {pad}")
            except AssertionError as e:
                lines.append(f"FAIL exact={exact} {config}: {e}")
        if world == 2:
            lines += _halo_errors()
            # The CPU reference takes every slab: halo_attention's default runs exact slabs.
            shard = torch.zeros(1, 4, 5, 2, 4, dtype=torch.float64)
            lines.append(f"exact_halo {gd.exact_halo(shard, shard, shard, (8, 5), 3)}")
        Path(result_dir, f"halo{rank}.txt").write_text("\n".join(lines))
    finally:
        dist.destroy_process_group()


HALO_CONFIGS = 48


@pytest.mark.parametrize("world", [2, 4])
def test_halo_equals_single_process(tmp_path, world):
    seed = SEED + 1000 * world
    torch.multiprocessing.spawn(_halo_rank_main, args=(world, _free_port(), HALO_CONFIGS,
                                                       seed, str(tmp_path)), nprocs=world)
    for rank in range(world):
        lines = (tmp_path / f"halo{rank}.txt").read_text().splitlines()
        checks = lines[:HALO_CONFIGS]
        failed = [line for line in checks if not line.startswith("ok")]
        assert not failed and len(checks) == HALO_CONFIGS, (seed, failed)
        # Exact slabs whose queries start before their own rows were among them.
        assert any(int(line.split()[-1]) > 0 for line in checks), checks
        if world == 2:
            messages = lines[HALO_CONFIGS:]
            assert "axis must be an int in [0, 2)" in messages[0] and "got 2" in messages[0]
            assert "query must be this rank's slab [B, 8, 5, H, D]" in messages[1]
            assert "layout[0] (7) must be divisible" in messages[2] and "(2)" in messages[2]
            assert "value must be this rank's slab" in messages[3] and "(1, 3, 5, 2, 4)" in \
                messages[3]
            assert "axis 1" in messages[4] and "window=6" in messages[4]
            assert "1 to 3 axes" in messages[5]
            assert messages[6] == "exact_halo True"


def test_query_pads_put_slabs_on_the_forward_q_tile_grid():
    from gna import simulator
    if not gna._lib.has_simulator:
        pytest.skip("libgna without the simulator")
    # hunyuan 30x48x80 over 2 ranks along frames: the forward's Q tile is 2 frames deep, so
    # rank 1's slab (frames 15..29) starts one frame early; long1d's 16384-token slabs sit on
    # the 128-token grid already.
    q_tile = simulator.kernel_tiles((30, 48, 80), (18, 24, 24), head_dim=128)[0]
    assert gd.query_pads((30, 48, 80), (18, 24, 24), world_size=2) == [0, 15 % q_tile[0]]
    assert gd.query_pads((32768,), 2048, world_size=2) == [0, 0]
    # Dilated axes and head dims the chooser does not take: no pads.
    assert gd.query_pads((30, 48), 5, dilation=(2, 1), world_size=2) == [0, 0]
    assert gd.query_pads((30, 48, 80), (18, 24, 24), world_size=2, head_dim=4) == [0, 0]
    # Calls whose backward runs keep their first rows.
    assert gd.query_pads((30, 48, 80), (18, 24, 24), world_size=2, backward=True) == [0, 0]
    with pytest.raises(ValueError, match="world_size"):
        gd.query_pads((30, 48), 5, world_size=4)


def test_halo_configurations_cover_the_cases():
    for world in (2, 4):
        configs = _halo_configs(world, HALO_CONFIGS, SEED + 1000 * world)
        assert {len(c[0]) for c in configs} == {1, 2, 3}
        assert {c[1] for c in configs} == {0, 1}
        assert any(c[2] != c[3] for c in configs)  # GQA
        # The sharded axis's rule: (window, stride, dilation, causal, slab).
        axis = [(c[4][c[1]], c[5][c[1]], c[6][c[1]], c[7][c[1]], c[0][c[1]] // world)
                for c in configs]
        assert any(s > 1 for k, s, d, c, n in axis)
        assert any(s == k for k, s, d, c, n in axis)  # blocked
        assert any(d > 1 for k, s, d, c, n in axis)
        assert any(c and s > 1 for k, s, d, c, n in axis)
        assert any(c and d > 1 for k, s, d, c, n in axis)
        assert any(d * (k - 1 + s) > n for k, s, d, c, n in axis)  # halo from several ranks


# Hybrid: Ulysses within groups of U ranks x halo along axis 0 across them; the same input as
# Ulysses. (layout, heads, heads_kv, window, stride, dilation, causal, ulysses sizes per world)
HYBRID_CASES = [
    ((8, 6), 4, 2, (3, 3), (2, 1), (1, 2), (False, True), {2: [1], 4: [2]}),
    ((4, 3, 4), 4, 4, (3, 2, 3), (1, 2, 1), (1, 1, 1), (True, False, False), {2: [1], 4: [2]}),
]


def _hybrid_rank_main(rank, world, port, seed, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        lines = []
        for index, case in enumerate(HYBRID_CASES):
            layout, heads, heads_kv, window, stride, dilation, causal, sizes = case
            for size in sizes[world]:
                for exact in (None, False):
                    g = torch.Generator().manual_seed(seed + index)
                    tokens = 1
                    for e in layout:
                        tokens *= e
                    make = lambda h, d: torch.randn(2, tokens, h, d, generator=g,  # noqa
                                                    dtype=torch.float64)
                    q, k, v, w = make(heads, 4), make(heads_kv, 4), make(heads_kv, 3), \
                        make(heads, 3)
                    na = (gna.na1d, gna.na2d, gna.na3d)[len(layout) - 1]
                    spatial = lambda t: t.reshape(2, *layout, *t.shape[2:])  # noqa: E731
                    inputs = [t.clone().requires_grad_() for t in (q, k, v)]
                    out = na(*(spatial(t) for t in inputs), window, stride=stride,
                             dilation=dilation, is_causal=causal).reshape(w.shape)
                    expected = [out.detach()] + list(torch.autograd.grad((out * w).sum(),
                                                                         inputs))
                    shards = [gd.shard_sequence(t).detach().requires_grad_() for t in (q, k, v)]
                    got = gd.hybrid_attention(*shards, layout, window, stride=stride,
                                              dilation=dilation, is_causal=causal,
                                              ulysses_size=size, exact=exact)
                    grads = torch.autograd.grad((got * gd.shard_sequence(w)).sum(), shards)
                    worst = max((a - gd.shard_sequence(b)).abs().max().item() for a, b in
                                zip([got.detach(), *grads], expected))
                    lines.append(f"{index} {size} {exact} {worst:.3g}")
        Path(result_dir, f"hybrid{rank}.txt").write_text("\n".join(lines))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_hybrid_equals_single_process(tmp_path, world):
    seed = SEED + 2000 + world
    torch.multiprocessing.spawn(_hybrid_rank_main, args=(world, _free_port(), seed,
                                                         str(tmp_path)), nprocs=world)
    runs = sum(2 * len(c[-1][world]) for c in HYBRID_CASES)
    for rank in range(world):
        lines = (tmp_path / f"hybrid{rank}.txt").read_text().splitlines()
        assert len(lines) == runs
        for line in lines:
            assert float(line.split()[-1]) < 1e-10, (seed, rank, line)


def _link_rank_main(rank, world, port, result_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        link = gd.measure_link()
        again = gd.measure_link()  # cached: no second timing
        choice = gd.choose_parallelism((8, 6, 4), 3, 1, 1, False, 4, world)
        # The pipeline's timeline: each of 2 head groups sent, arrived, computed and back.
        q = torch.randn(1, 96 // world, 4, 2, dtype=torch.float64)
        with gd.timeline() as events:
            gd.ulysses_attention(q, q, q, (8, 12), 3, head_groups=2)
        labels = [label for label, _ in events]
        times = [ms for _, ms in events]
        ordered = times == sorted(times[:6]) + times[6:] and times[0] == 0
        Path(result_dir, f"link{rank}.txt").write_text(
            f"{link.latency!r} {link.bandwidth!r} {again is link} {choice.mode} "
            f"{choice.ulysses_size}\n{'|'.join(labels)}\n{ordered}")
    finally:
        dist.destroy_process_group()


def test_measure_link_and_timeline(tmp_path):
    torch.multiprocessing.spawn(_link_rank_main, args=(2, _free_port(), str(tmp_path)), nprocs=2)
    texts = [(tmp_path / f"link{r}.txt").read_text().splitlines() for r in range(2)]
    lines = [t[0].split() for t in texts]
    assert lines[0] == lines[1]  # every rank chooses the same mode
    latency, bandwidth, cached = float(lines[0][0]), float(lines[0][1]), lines[0][2]
    assert latency > 0 and bandwidth > 0 and cached == "True"
    for text in texts:
        assert text[1].split("|") == [
            "group 0 sent", "group 0 arrived", "group 1 sent", "group 0 computed, returned",
            "group 1 arrived", "group 1 computed, returned", "group 0 back", "group 1 back"]
        assert text[2] == "True"


FAST = gd.Link(latency=0.0, bandwidth=1e18)  # communication free: kernel time decides
SLOW = gd.Link(latency=1e-5, bandwidth=1e8)  # communication dominates: bytes decide
NVLINK = gd.Link(latency=20e-6, bandwidth=100e9)


def test_choose_parallelism_on_constructed_links():
    hunyuan = ((30, 48, 80), (18, 24, 24), 1, 1, False, 24)
    long1d = ((32768,), (2048,), 1, 1, False, 8)
    # Free communication: Ulysses splits the whole layout's kernel time P ways, a halo slab
    # (the fast kernels run the extended slab) costs more than 1/P of it.
    assert gd.choose_parallelism(*hunyuan, 4, link=FAST).mode == "ulysses"
    assert gd.choose_parallelism(*long1d, 4, link=FAST).mode == "ulysses"
    # Exact slabs compute only their own queries: 1/P of the kernel, as Ulysses.
    costs = gd.choose_parallelism(*long1d, 4, link=FAST, exact=True).costs
    assert costs[("halo", 1)] == pytest.approx(costs[("ulysses", 4)])
    assert costs[("halo", 1)] < gd.choose_parallelism(*long1d, 4, link=FAST).costs[("halo", 1)]
    # A slow link: the long 1-D window's halo (2 x 2048 rows of K and V) moves far less than
    # Ulysses' four all-to-alls of 8192 rows.
    assert gd.choose_parallelism(*long1d, 4, link=SLOW).mode == "halo"
    assert gd.choose_parallelism(*long1d, 4, link=NVLINK).mode == "halo"
    # Hunyuan's frames (30) do not split over 4: halo needs 2 slabs, so the hybrid (2 x 2)
    # competes with Ulysses; on a slow link the hybrid's smaller all-to-alls win.
    costs = gd.choose_parallelism(*hunyuan, 4, link=SLOW).costs
    assert set(costs) == {("ulysses", 4), ("hybrid", 2)}
    assert gd.choose_parallelism(*hunyuan, 4, link=SLOW).mode == "hybrid"
    assert gd.choose_parallelism(*hunyuan, 4, link=NVLINK).mode == "ulysses"
    # Heads that do not split over 4 ranks (6): the hybrid (U = 2) or halo, never Ulysses.
    choice = gd.choose_parallelism((8, 48, 80), (5, 9, 9), 1, 1, False, 6, 4, link=NVLINK)
    assert choice.mode == "hybrid" and choice.ulysses_size == 2
    assert ("ulysses", 4) not in choice.costs and ("halo", 1) in choice.costs
    # The backward doubles the exchanges and adds the backward kernel's time.
    fwd = gd.choose_parallelism(*long1d, 4, link=NVLINK)
    both = gd.choose_parallelism(*long1d, 4, link=NVLINK, backward=True)
    assert both.seconds > 2 * fwd.seconds
    # Joint attention (text tokens beside the layout) runs Ulysses alone, its exchanges carrying
    # the text too.
    joint = gd.choose_parallelism(*hunyuan, 2, link=NVLINK, text_tokens=256)
    assert joint.mode == "ulysses" and set(joint.costs) == {("ulysses", 2)}
    assert joint.seconds > gd.choose_parallelism(*hunyuan, 2, link=NVLINK).costs[("ulysses", 2)]
    with pytest.raises(ValueError, match="text_tokens must be a non-negative int, got -1"):
        gd.choose_parallelism(*hunyuan, 2, link=NVLINK, text_tokens=-1)
    # The cheapest applicable mode is the one chosen.
    assert fwd.seconds == min(fwd.costs.values())
    with pytest.raises(ValueError, match=r"no mode applies on 4 ranks: heads \(5\)"):
        gd.choose_parallelism((30, 48, 80), 5, 1, 1, False, 5, 4, link=FAST)
    with pytest.raises(ValueError, match="axis must be"):
        gd.choose_parallelism((30, 48), 5, 1, 1, False, 8, 4, axis=2, link=FAST)
    with pytest.raises(ValueError, match="heads_kv must be a positive int"):
        gd.choose_parallelism((30, 48), 5, 1, 1, False, 8, 4, heads_kv=0, link=FAST)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
