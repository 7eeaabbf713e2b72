"""Per-head windows in ONE library call (gna_forward_heads / gna_backward_heads): taken whenever
the backend runs per-head rules (always on the CPU, whose reference does), equal to the
per-group path (forward, logsumexp and every gradient), refused to backends without them by
falling back, and traced by torch.compile through gna::na_forward_heads."""
import random

import pytest

torch = pytest.importorskip("torch")

import gna  # noqa: E402
from gna import _calls, _lib, ops, per_head  # noqa: E402
from conftest import TOLERANCE, cuda_devices_or_skip, qkv, randn, rel_error  # noqa: E402
from joint_oracle import layout_mask, masked_attention  # noqa: E402

W = gna.Window

pytestmark = pytest.mark.skipif(not _lib.has_head_rules,
                                reason="the library predates per-head rules (ABI version 4)")


@pytest.fixture
def entries(monkeypatch):
    """Names of the C entry points called, in order (every attention call of the ctypes path
    goes through _calls.call; the torch extension's calls do not pass through Python, so these
    tests take the ctypes path)."""
    called = []
    real = _calls.call
    monkeypatch.setattr(gna.ops, "HAS_TORCH_EXTENSION", False)

    def spy(entry, *args, **kwargs):
        called.append(entry.__name__)
        return real(entry, *args, **kwargs)

    monkeypatch.setattr(_calls, "call", spy)
    return called


@pytest.fixture
def per_group_only(monkeypatch):
    """Makes per_head_attention take today's per-group path whatever the backend."""
    def no_backend(*args, **kwargs):
        return None

    monkeypatch.setattr(per_head, "one_call_backend", no_backend)


def _random_windows(rng, layout, heads, groups):
    """`groups` random distinct valid windows over `layout`, one per query head (every group
    used when heads allow), with strides, dilations and causal axes."""
    rules = set()
    while len(rules) < groups:
        rule = []
        for n in layout:
            dilation = rng.randint(1, max(1, min(3, n // 2)))
            window = rng.randint(2, max(2, min(7, n // dilation)))
            rule.append((window, rng.randint(1, window), dilation, rng.random() < 0.25))
        rules.add(tuple(rule))
    windows = [W(tuple(a[0] for a in r), stride=tuple(a[1] for a in r),
                 dilation=tuple(a[2] for a in r), is_causal=tuple(a[3] for a in r))
               for r in sorted(rules)]
    picks = list(range(groups)) * (heads // groups) + [rng.randrange(groups)
                                                      for _ in range(heads % groups)]
    rng.shuffle(picks)
    return [windows[g] for g in picks]


def _case(seed):
    rng = random.Random(seed)
    rank = rng.randint(1, 3)
    layout = tuple(rng.randint(3, {1: 18, 2: 8, 3: 5}[rank]) for _ in range(rank))
    heads_kv = rng.randint(1, 3)
    heads = heads_kv * rng.randint(2 if heads_kv == 1 else 1, 3)
    groups = rng.randint(2, min(8, heads))
    windows = _random_windows(rng, layout, heads, groups)
    extra = rng.choice([0, 0, 2])
    scale = rng.choice([None, 0.3])
    return rank, layout, heads, heads_kv, windows, extra, scale


def _inputs(layout, heads, heads_kv, extra, dtype=torch.float64, device="cpu"):
    q, k, v = qkv(2, layout, heads, 4, heads_kv=heads_kv, dim_v=3, dtype=dtype, device=device,
                  requires_grad=True)
    ak = av = None
    if extra:
        ak = randn(2, extra, heads_kv, 4, dtype=dtype, device=device, requires_grad=True)
        av = randn(2, extra, heads_kv, 3, dtype=dtype, device=device, requires_grad=True)
    return q, k, v, ak, av


def _run(q, k, v, ak, av, windows, scale, lse_weight=0.5):
    out, lse = gna.per_head_attention(q, k, v, windows, scale=scale, additional_keys=ak,
                                      additional_values=av, return_lse=True)
    leaves = [t for t in (q, k, v, ak, av) if t is not None]
    g = torch.randn_like(out)
    loss = (out * g).sum() + lse_weight * (lse * lse).sum()
    return out.detach(), lse.detach(), torch.autograd.grad(loss, leaves)


@pytest.mark.parametrize("seed", range(12))
def test_one_call_equals_the_per_group_path(seed, entries, monkeypatch):
    rank, layout, heads, heads_kv, windows, extra, scale = _case(seed)
    q, k, v, ak, av = _inputs(layout, heads, heads_kv, extra)
    torch.manual_seed(seed)
    one = _run(q, k, v, ak, av, windows, scale)
    assert entries and set(entries) == {"gna_forward_heads", "gna_backward_heads"}, entries
    monkeypatch.setattr(per_head, "one_call_backend", lambda *a, **kw: None)
    entries.clear()
    torch.manual_seed(seed)
    split = _run(q, k, v, ak, av, windows, scale)
    assert "gna_forward_heads" not in entries and "gna_forward" in entries
    trace = f"seed {seed}: layout {layout}, {heads}/{heads_kv} heads, extra {extra}, {windows}"
    assert rel_error(one[0], split[0]) < 1e-12, trace
    assert rel_error(one[1], split[1]) < 1e-12, trace
    for a, b in zip(one[2], split[2]):
        assert rel_error(a, b) < 1e-12, trace


def test_cpu_forward_and_backward_are_one_call_each(entries):
    layout = (4, 6, 6)
    windows = [W(3), W(3), W((3, 5, 3), stride=(1, 2, 3)), W.sta((2, 2, 2), (1, 3, 1)),
               W.dense(), W((3, 5, 3), stride=(1, 2, 3)),
               W((2, 3, 3), dilation=(2, 1, 2), is_causal=True),
               W((2, 3, 3), dilation=(2, 1, 2), is_causal=True)]
    q, k, v = qkv(1, layout, 8, 8, heads_kv=4, requires_grad=True)
    assert per_head.one_call_backend(q, k, v, per_head.resolve_groups(windows, 8, layout)) == \
        "reference"
    out = gna.per_head_attention(q, k, v, windows)
    assert entries == ["gna_forward_heads"]
    out.sum().backward()
    assert entries == ["gna_forward_heads", "gna_backward_heads"]
    # Without gradients wanted only the forward is asked about; the call is the same.
    entries.clear()
    with torch.no_grad():
        gna.per_head_attention(q, k, v, windows)
    assert entries == ["gna_forward_heads"]


def test_host_half_tensors_take_one_call(entries):
    layout = (6, 5)
    windows = [W(3), W((5, 3), stride=2), W(3), W((2, 4), is_causal=(True, False))]
    q, k, v = qkv(1, layout, 4, 8, heads_kv=2, dtype=torch.bfloat16)
    out = gna.per_head_attention(q, k, v, windows)
    assert entries == ["gna_forward_heads"] and out.dtype == torch.bfloat16
    masks = torch.stack([layout_mask(layout, w.kernel_size, w.stride, w.dilation, w.is_causal)
                         for w in windows])[None]
    flat = lambda t: t.reshape(t.shape[0], -1, *t.shape[-2:])  # noqa: E731
    ref = masked_attention(flat(q), flat(k), flat(v), masks)
    assert rel_error(flat(out), ref) < TOLERANCE[torch.bfloat16]


def test_joint_attention_with_per_head_windows_takes_one_call(entries):
    layout, text = (3, 4, 4), 5
    windows = [W(3), W((3, 3, 3), stride=(1, 3, 3)), W(3), W.dense()]
    q, k, v = qkv(2, (48 + text,), 4, 8, heads_kv=2, dtype=torch.float64)
    out = gna.joint_attention(q, k, v, layout, windows=windows)
    assert entries == ["gna_forward_heads"]
    assert out.shape == q.shape


def test_nine_rules_fall_back_to_one_call_per_rule(entries):
    layout = (20,)
    windows = [W(k) for k in range(2, 11)]  # 9 distinct rules: more than a call holds
    q, k, v = qkv(1, layout, 9, 4, dtype=torch.float64)
    groups = per_head.resolve_groups(windows, 9, layout)
    assert per_head.one_call_backend(q, k, v, groups) is None
    out = gna.per_head_attention(q, k, v, windows)
    assert entries == ["gna_forward"] * 9
    one = [gna.na1d(q[..., h:h + 1, :], k[..., h:h + 1, :], v[..., h:h + 1, :], h + 2)
           for h in range(9)]
    assert rel_error(out, torch.cat(one, dim=-2)) < 1e-12


def test_the_library_decides_which_path():
    """one_call_backend asks the library: the reference runs per-head rules; an unknown backend
    is an error; a call no backend runs with per-head rules (here CUDA tensors, described
    without data, in a build without CUDA backends) falls back (None)."""
    layout = (10,)
    q, k, v = qkv(1, layout, 2, 4, dtype=torch.float64)
    groups = per_head.resolve_groups([W(3), W(5)], 2, layout)
    assert per_head.one_call_backend(q, k, v, groups, backend="reference") == "reference"
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        per_head.one_call_backend(q, k, v, groups, backend="nope")
    key = list(per_head._call_key((q, k, v, None, None), groups, 2, 0.0, False, "auto"))
    key[2] = 0  # CUDA device 0
    on_cuda = per_head._backend_for_key(tuple(key))
    if gna.backend_names() == ["reference"]:
        assert on_cuda is None
    else:
        assert on_cuda is None or on_cuda in gna.backend_names()


def test_errors_name_the_group():
    q, k, v = qkv(1, (5, 7), 4, 8)
    with pytest.raises(ValueError, match=r"head rules: group 1 axis 0: window\*dilation must be "
                                         r"<= extent=5, got window=9"):
        gna.per_head_attention(q, k, v, [W(3), W(9), W(3), W(3)])
    with pytest.raises(ValueError, match="scale"):
        gna.per_head_attention(q, k, v, [W(3), W(5), W(3), W(3)], scale=-1.0)
    with pytest.raises(ValueError, match="backend must be a string"):
        gna.per_head_attention(q, k, v, [W(3), W(5), W(3), W(3)], backend=3)


def test_prebuilt_calls_key_on_the_rules(entries):
    """Two calls of one shape with other rules must not share a prebuilt call."""
    layout = (12,)
    q, k, v = qkv(1, layout, 2, 4, dtype=torch.float64)
    a = gna.per_head_attention(q, k, v, [W(3), W(5)])
    b = gna.per_head_attention(q, k, v, [W(5), W(3)])
    c = gna.per_head_attention(q, k, v, [W(3), W(5)])
    assert entries == ["gna_forward_heads"] * 3
    assert torch.equal(a, c) and not torch.equal(a, b)
    assert torch.equal(b[..., 0, :], gna.na1d(q[..., :1, :], k[..., :1, :], v[..., :1, :], 5)[..., 0, :])


def test_eager_function_equals_the_custom_op():
    """torch >= 2.4 has both paths (the autograd.Function and the custom op): equal results."""
    if not ops.HAS_CUSTOM_OPS:
        pytest.skip("no torch.library custom ops before torch 2.4")
    q, k, v = qkv(1, (9, 6), 4, 4, heads_kv=2, dtype=torch.float64, requires_grad=True)
    args = ([3, 2, 5, 4], [1, 1, 2, 4], [1, 1, 1, 1], [False, False, True, False],
            [0, 1, 1, 0], 0.0, "auto")
    out_a, lse_a = ops._AttentionHeads.apply(q, k, v, None, None, *args, True)
    out_b, lse_b = ops.na_forward_heads(q, k, v, None, None, *args, True)
    assert torch.equal(out_a, out_b) and torch.equal(lse_a, lse_b)
    g = torch.randn_like(out_a)
    ga = torch.autograd.grad((out_a * g).sum() + lse_a.sum(), (q, k, v))
    gb = torch.autograd.grad((out_b * g).sum() + lse_b.sum(), (q, k, v))
    for a, b in zip(ga, gb):
        assert rel_error(a, b) < 1e-12


@pytest.mark.skipif(not (hasattr(torch, "compile") and ops.HAS_CUSTOM_OPS),
                    reason="torch.compile of gna's ops needs torch >= 2.4")
def test_compile_fullgraph_through_the_per_head_op(entries):
    torch._dynamo.reset()
    layout = (4, 6, 6)
    windows = [W(3), W((3, 5, 3), stride=(1, 2, 3)), W(3), W.sta((2, 2, 2), (1, 3, 1))]
    q, k, v = qkv(2, layout, 4, 8, heads_kv=2, requires_grad=True)

    def f(q, k, v):
        return gna.per_head_attention(q, k, v, windows, return_lse=True)

    out, lse = torch.compile(f, fullgraph=True)(q, k, v)
    ref, ref_lse = f(q, k, v)
    assert "gna_forward" not in entries and "gna_forward_heads" in entries
    assert rel_error(out, ref) < 1e-5 and rel_error(lse, ref_lse) < 1e-5
    g = torch.randn_like(ref)
    entries.clear()
    got = torch.autograd.grad((out * g).sum(), (q, k, v))
    assert "gna_backward_heads" in entries and "gna_backward" not in entries
    want = torch.autograd.grad((ref * g).sum(), (q, k, v))
    for a, b in zip(got, want):
        assert rel_error(a, b) < 1e-4


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_one_call_or_fallback_against_the_oracle(dtype, entries):
    """On a GPU: whichever path the library picks, the result matches the float64 oracle, and
    the path taken is the one one_call_backend names (one call where a backend runs per-head
    rules, one call per rule otherwise)."""
    cuda_devices_or_skip()
    dtype = getattr(torch, dtype)
    for seed in range(6):
        rng = random.Random(seed)
        layout = (4, 8, 8) if seed % 2 else (16, 24)
        heads = 8
        windows = _random_windows(rng, layout, heads, rng.randint(2, 4))
        q, k, v = qkv(1, layout, heads, 64, heads_kv=4, dtype=dtype, device="cuda",
                      requires_grad=True)
        groups = per_head.resolve_groups(windows, heads, layout)
        entries.clear()
        try:
            backend = per_head.one_call_backend(q, k, v, groups)
            out = gna.per_head_attention(q, k, v, windows)
        except gna.UnsupportedError as e:
            pytest.skip(f"no CUDA backend for this call: {e}")
        if backend is None:
            assert "gna_forward_heads" not in entries and entries.count("gna_forward") == len(groups)
        else:
            assert entries == ["gna_forward_heads"], (backend, entries)
        masks = torch.stack([layout_mask(layout, w.kernel_size, w.stride, w.dilation,
                                         w.is_causal) for w in windows])[None].cuda()
        flat = lambda t: t.reshape(t.shape[0], -1, *t.shape[-2:])  # noqa: E731
        qd, kd, vd = (t.detach().double() for t in (q, k, v))
        for t in (qd, kd, vd):
            t.requires_grad_(True)
        ref = masked_attention(flat(qd), flat(kd), flat(vd), masks)
        assert rel_error(flat(out), ref) < TOLERANCE[dtype], (seed, backend)
        g = torch.randn_like(ref)
        got = torch.autograd.grad(flat(out), (q, k, v), g.to(dtype))
        want = torch.autograd.grad(ref, (qd, kd, vd), g)
        for a, b in zip(got, want):
            assert rel_error(a, b) < 4 * TOLERANCE[dtype], (seed, backend)
