"""Slab attention (gna.slab) on the CPU reference: random rules and random query slabs on every
axis, the key slab from key_range (plus random margins); output and gradients equal to the same
rows of the whole layout's call (float64: 1e-10; float32: 1e-5 absolute and relative), the key
range exact (one row less at either end is refused), bad input named."""
import os
import random

import pytest

torch = pytest.importorskip("torch")

import gna  # noqa: E402
from gna import slab  # noqa: E402

SEED = int(os.environ.get("GNA_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
NA = (gna.na1d, gna.na2d, gna.na3d)
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}


def _config(rng):
    rank = rng.choice((1, 2, 2, 3))
    window, stride, dilation, causal, layout = [], [], [], [], []
    for _ in range(rank):
        k = rng.randint(2, 5 if rank < 3 else 3)
        d = rng.choice((1, 1, 2, 3)) if rank < 3 else rng.choice((1, 2))
        for values, value in ((window, k), (stride, rng.randint(1, k)), (dilation, d),
                              (causal, rng.random() < 0.35),
                              (layout, k * d + rng.randint(0, 9 if rank < 3 else 3))):
            values.append(value)
    return tuple(layout), tuple(window), tuple(stride), tuple(dilation), tuple(causal)


def _slabs(rng, config):
    """Per axis: the query rows [q0, q1) and the key rows [k0, k1) (key_range plus margins)."""
    layout, window, stride, dilation, causal = config
    queries, keys, exact = [], [], []
    for a, extent in enumerate(layout):
        q0 = rng.randrange(extent)
        q1 = rng.randint(q0 + 1, extent)
        k0, k1 = slab.key_range(layout, window, stride, dilation, causal, axis=a,
                                query_begin=q0, query_end=q1)
        exact.append((k0, k1))
        if rng.random() < 0.3:
            k0, k1 = rng.randint(0, k0), rng.randint(k1, extent)
        queries.append((q0, q1))
        keys.append((k0, k1))
    return queries, keys, exact


def _cut(t, ranges):
    for a, (b, e) in enumerate(ranges):
        t = t.narrow(1 + a, b, e - b)
    return t


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_slab_equals_the_whole_call(dtype):
    rng = random.Random(SEED)
    tol = TOLERANCE[dtype]
    seen = set()
    for i in range(40):
        config = _config(rng)
        layout, window, stride, dilation, causal = config
        queries, keys, _ = _slabs(rng, config)
        heads_kv = rng.choice((1, 2))
        heads = heads_kv * rng.choice((1, 2))
        g = torch.Generator().manual_seed(SEED + i)
        make = lambda h, d: torch.randn(2, *layout, h, d, generator=g, dtype=dtype)  # noqa
        q, k, v = make(heads, 4), make(heads_kv, 4), make(heads_kv, 3)
        w = torch.zeros(2, *layout, heads, 3, dtype=dtype)
        _cut(w, queries).copy_(_cut(make(heads, 3), queries))  # the slab's queries only
        rule = dict(stride=stride, dilation=dilation, is_causal=causal)
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        out = NA[len(layout) - 1](*inputs, window, **rule)
        expected = [out.detach()] + list(torch.autograd.grad((out * w).sum(), inputs))
        local = [_cut(q, queries).clone().requires_grad_(),
                 _cut(k, keys).clone().requires_grad_(), _cut(v, keys).clone().requires_grad_()]
        got = slab.slab_attention(*local, layout, window, **rule,
                                  query_offset=tuple(b for b, _ in queries),
                                  key_offset=tuple(b for b, _ in keys))
        grads = torch.autograd.grad((got * _cut(w, queries)).sum(), local)
        for name, a, b, ranges in (("out", got.detach(), expected[0], queries),
                                   ("dq", grads[0], expected[1], queries),
                                   ("dk", grads[1], expected[2], keys),
                                   ("dv", grads[2], expected[3], keys)):
            b = _cut(b, ranges)
            assert a.shape == b.shape, (name, a.shape, b.shape)
            assert torch.allclose(a, b, atol=tol, rtol=tol), (SEED, i, config, name,
                                                              (a - b).abs().max())
        seen.add(len(layout))
        seen.update(("strided" for s in stride if s > 1), ("dilated" for d in dilation if d > 1),
                    ("causal" for c in causal if c),
                    ("inner" for (b, e), n in zip(queries, layout) if 0 < b and e < n))
    assert seen >= {1, 2, 3, "strided", "dilated", "causal", "inner"}, seen


def test_key_range_is_exact():
    rng = random.Random(SEED + 1)
    checked = 0
    for _ in range(60):
        config = _config(rng)
        layout, window, stride, dilation, causal = config
        queries, _, exact = _slabs(rng, config)
        rule = dict(stride=stride, dilation=dilation, is_causal=causal)
        q = torch.zeros(1, *(e - b for b, e in queries), 1, 2, dtype=torch.float64)
        for a in range(len(layout)):
            for shrink in ((1, 0), (0, 1)):
                keys = list(exact)
                k0, k1 = keys[a][0] + shrink[0], keys[a][1] - shrink[1]
                if k1 <= k0:
                    continue
                keys[a] = (k0, k1)
                kv = torch.zeros(1, *(e - b for b, e in keys), 1, 2, dtype=torch.float64)
                with pytest.raises(ValueError, match=f"slab: axis {a}: queries"):
                    slab.slab_attention(q, kv, kv, layout, window, **rule,
                                        query_offset=tuple(b for b, _ in queries),
                                        key_offset=tuple(b for b, _ in keys))
                checked += 1
    assert checked > 50


def test_slab_bad_input_names_the_value():
    q = torch.zeros(1, 4, 1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"query_offset must be in \[0, 6\].*got 7"):
        slab.slab_attention(q, q, q, (10,), 3, query_offset=(7,), key_offset=(3,))
    with pytest.raises(ValueError, match=r"key_offset must be in \[0, 6\].*got -1"):
        slab.slab_attention(q, q, q, (10,), 3, query_offset=(0,), key_offset=(-1,))
    with pytest.raises(ValueError, match="query_offset must be 1 ints"):
        slab.slab_attention(q, q, q, (10,), 3, query_offset=(0, 0))
    with pytest.raises(ValueError, match=r"window\*dilation must be <= extent=2"):
        slab.slab_attention(q, q, q, (2,), 3)
    with pytest.raises(ValueError, match=r"queries \[8, 12\) must be a non-empty range"):
        slab.key_range((10,), 3, axis=0, query_begin=8, query_end=12)
    with pytest.raises(ValueError, match="axis must be an int in"):
        slab.key_range((10,), 3, axis=1, query_begin=0, query_end=2)


def test_slab_backends():
    q = torch.zeros(1, 4, 1, 2)
    assert slab.slab_backend(q, q, q, (10,), 3, query_offset=(2,)) == "reference"
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the GPU backends' refusal is not checked")
    c = q.cuda()
    assert slab.slab_backend(c, c, c, (10,), 3, query_offset=(2,)) is None
    with pytest.raises(gna.UnsupportedError, match="does not run slabs"):
        slab.slab_attention(c, c[:, :3], c[:, :3], (10,), 3, query_offset=(2,),
                            key_offset=(1,))
