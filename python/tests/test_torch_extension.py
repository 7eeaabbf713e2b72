"""The torch extension's ops (C++ custom ops with a C++ autograd kernel) against the ctypes path
on the same inputs: the same bits forward and backward (additional tokens, GQA, gradients
through the logsumexp, per-head rules, host half tensors, strided inputs), on random rules, on
the CPU and on CUDA; the same errors; double backward refused. Skipped where the extension is not
built or not in use (torch < 2.4, GNA_TORCH_EXTENSION=0): the rest of the suite then tests the
ctypes path, and scripts/python_tests.sh runs the suite once more with GNA_TORCH_EXTENSION=0
where the extension is in use."""
import os
import random
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import gna  # noqa: E402
from gna import ops  # noqa: E402
from conftest import qkv, randn  # noqa: E402

pytestmark = pytest.mark.skipif(not ops.HAS_TORCH_EXTENSION,
                                reason=f"torch extension: {ops._extension.reason}")


def _devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _dtypes(device):
    if device == "cpu":
        return [torch.float64, torch.float32, torch.bfloat16]  # bf16: computed in float32
    return [torch.bfloat16, torch.float16]


def _random_case(rng, device, dtype):
    """A random rule and inputs: rank 1-3, window / stride / dilation / causal per axis, GQA,
    a value head dim of its own on the CPU, additional tokens half of the time."""
    rank = rng.randint(1, 3)
    window, stride, dilation, causal, extent = [], [], [], [], []
    for _ in range(rank):
        w = rng.randint(2, 5)
        d = rng.randint(1, 2)
        window.append(w)
        stride.append(rng.randint(1, w))
        dilation.append(d)
        causal.append(rng.random() < 0.3)
        extent.append(w * d + rng.randint(0, 4))
    heads_kv = rng.choice([1, 2])
    heads = heads_kv * rng.choice([1, 2])
    dim = 32 if device == "cuda" else rng.choice([3, 4, 8])
    dim_v = dim if device == "cuda" else rng.choice([dim, 5])
    kw = dict(dtype=dtype, device=device, requires_grad=True)
    q, k, v = qkv(rng.randint(1, 2), extent, heads, dim, heads_kv=heads_kv, dim_v=dim_v, **kw)
    ak = av = None
    if rng.random() < 0.5:
        tokens = rng.randint(1, 5)
        ak = randn(q.shape[0], tokens, heads_kv, dim, **kw)
        av = randn(q.shape[0], tokens, heads_kv, dim_v, **kw)
    rule = (window, stride, dilation, causal, 0.0 if rng.random() < 0.5 else 0.3, "auto")
    return (q, k, v, ak, av), rule


def _run(path, inputs, rule, lse_grad, weights):
    """(out, lse, gradients of a weighted loss) through one path."""
    out, lse = path(*inputs, *rule, lse_grad)
    w_out, w_lse = weights
    loss = (out.double() * w_out).sum()
    if lse_grad:
        loss = loss + (lse.double() * w_lse).sum()
    given = [t for t in inputs if t is not None]
    return [out, lse] + list(torch.autograd.grad(loss, given)), out.grad_fn


def _assert_cpp_node(grad_fn):
    """The extension's autograd node: a C++ node, not a Python autograd.Function's."""
    assert grad_fn is not None
    assert not isinstance(grad_fn, torch.autograd.function.BackwardCFunction)
    assert "Attention" in grad_fn.name(), grad_fn.name()


def _cuda_runs(inputs, rule):
    q, k, v, ak, av = inputs
    try:
        ops.select_backend(q, k, v, ak, av, *rule[:5], backward=True)
        return True
    except gna.UnsupportedError:
        return False


@pytest.mark.parametrize("device", _devices())
def test_extension_and_ctypes_paths_give_the_same_bits(device):
    rng = random.Random(20261130)
    compared = 0
    for dtype in _dtypes(device):
        for _ in range(12):
            inputs, rule = _random_case(rng, device, dtype)
            if device == "cuda" and not _cuda_runs(inputs, rule):
                continue
            lse_grad = rng.random() < 0.5
            shape = inputs[0].shape[:-1]
            weights = (torch.randn(*shape, inputs[2].shape[-1], dtype=torch.float64,
                                   device=device), torch.randn(*shape, dtype=torch.float64,
                                                               device=device))
            cpp, node = _run(ops.attention, inputs, rule, lse_grad, weights)
            _assert_cpp_node(node)
            ref, ref_node = _run(ops.eager_attention, inputs, rule, lse_grad, weights)
            assert isinstance(ref_node, torch.autograd.function.BackwardCFunction)
            for name, a, b in zip(("out", "lse", "dq", "dk", "dv", "dak", "dav"), cpp, ref):
                assert a.dtype == b.dtype and a.shape == b.shape, name
                assert torch.equal(a, b), (name, dtype, rule)
            compared += 1
    assert compared >= (24 if device == "cpu" else 6), compared


def test_per_head_rules_give_the_same_bits():
    if not gna._lib.has_head_rules:
        pytest.skip("libgna without per-head rules")
    q, k, v = qkv(1, (6, 7), 4, 4, heads_kv=2, dtype=torch.float64, requires_grad=True)
    ak, av = (randn(1, 3, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(2))
    rule = ([3, 3, 5, 2], [1, 1, 2, 1], [1, 2, 1, 1], [False, False, True, False], [0, 1, 1, 0],
            0.0, "auto")
    results = []
    for path in (ops.attention_heads, ops._AttentionHeads.apply):
        out, lse = path(q, k, v, ak, av, *rule, True)
        loss = (out * out).sum() + lse.sum()
        results.append([out, lse] + list(torch.autograd.grad(loss, (q, k, v, ak, av))))
    _assert_cpp_node(ops.attention_heads(q, k, v, ak, av, *rule, False)[0].grad_fn)
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_strided_inputs_and_unused_outputs():
    """A strided last dim and a broadcast dim (copied for the kernels), and a loss on lse alone
    (out's gradient undefined)."""
    base = randn(1, 9, 2, 8, dtype=torch.float64)
    q = base.transpose(-1, -2).contiguous().transpose(-1, -2).requires_grad_()
    k = randn(1, 9, 1, 8, dtype=torch.float64).expand(1, 9, 2, 8).detach().requires_grad_()
    v = randn(1, 9, 2, 8, dtype=torch.float64)[..., ::2].detach().requires_grad_()
    rule = ([3], [1], [1], [False], 0.0, "auto")
    grads = []
    for path in (ops.attention, ops.eager_attention):
        _, lse = path(q, k, v, None, None, *rule, True)
        grads.append(torch.autograd.grad(lse.sum(), (q, k, v)))
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    assert grads[0][2].abs().max() == 0  # lse does not depend on the values


def test_errors_are_those_of_the_ctypes_path():
    q, k, v = qkv(1, (5, 6), 2, 4)
    bad = ([3, 9], [1, 1], [1, 1], [False, False], 0.0, "auto")
    messages = []
    for path in (ops.attention, ops.eager_attention):
        with pytest.raises(ValueError) as info:
            path(q, k, v, None, None, *bad, False)
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "axis 1" in messages[0]
    with pytest.raises(ValueError, match="dtype"):
        ops.attention(q.int(), k.int(), v.int(), None, None, [3, 3], [1, 1], [1, 1],
                      [False, False], 0.0, "auto", False)
    with pytest.raises(ValueError, match="2\\^31"):
        ops.attention(q, k, v, None, None, [3, 2**31], [1, 1], [1, 1], [False, False], 0.0,
                      "auto", False)
    with pytest.raises(ValueError, match="at most 3"):
        ops.attention(q, k, v, None, None, [3] * 4, [1] * 4, [1] * 4, [False] * 4, 0.0, "auto",
                      False)


def test_unsupported_backend_raises_unsupported_error():
    others = [b for b in gna.backend_names() if b != "reference"]
    if not others:
        pytest.skip("only the CPU reference is built")
    q, k, v = qkv(1, (5, 6), 2, 4)
    messages = []
    for path in (ops.attention, ops.eager_attention):
        with pytest.raises(gna.UnsupportedError) as info:
            path(q, k, v, None, None, [3, 3], [1, 1], [1, 1], [False, False], 0.0, others[0],
                 False)
        messages.append(str(info.value))
    assert messages[0] == messages[1] and others[0] in messages[0]


def test_double_backward_is_refused():
    q, k, v = qkv(1, (6,), 1, 4, dtype=torch.float64, requires_grad=True)
    out, _ = ops.attention(q, k, v, None, None, [3], [1], [1], [False], 0.0, "auto", False)
    (g,) = torch.autograd.grad(out.square().sum(), (q,), create_graph=True)
    with pytest.raises(RuntimeError, match="twice"):
        g.sum().backward()


def test_meta_kernels_validate_and_shape():
    q, k, v = (torch.empty(2, 5, 6, 2, 4, device="meta") for _ in range(3))
    out, lse = ops.na_forward(q, k, v, None, None, [3, 3], [1, 1], [1, 1], [False, False], 0.0,
                              "auto", False)
    assert out.shape == (2, 5, 6, 2, 4) and lse.shape == (2, 5, 6, 2)
    assert lse.dtype == torch.float32 and out.device.type == "meta"
    with pytest.raises(ValueError, match="axis 1"):
        ops.na_forward(q, k, v, None, None, [3, 9], [1, 1], [1, 1], [False, False], 0.0, "auto",
                       False)


def test_turned_off_by_the_environment():
    code = ("import gna.ops as o; import torch; q = torch.randn(1, 6, 1, 4);"
            "out = o.attention(q, q, q, None, None, [3], [1], [1], [False], 0.0, 'auto', False);"
            "print(o.HAS_TORCH_EXTENSION, o._extension.reason, out[0].shape)")
    package_root = os.path.dirname(os.path.dirname(gna.__file__))
    env = dict(os.environ, GNA_TORCH_EXTENSION="0",
               PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, check=True)
    assert result.stdout.startswith("False turned off by GNA_TORCH_EXTENSION=0"), result.stdout


def test_compile_reduce_overhead_step():
    """torch.compile(mode="reduce-overhead", fullgraph=True) over the extension's op: CUDA
    graphs replay the forward and the backward, on new input values each step."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from conftest import device_backend_or_skip, rel_error
    torch._dynamo.reset()
    shape = (2, 12, 12, 2, 32)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    device_backend_or_skip(q, k, v, 7, backward=True, dilation=1)
    step = torch.compile(lambda q, k, v: gna.na2d(q, k, v, 7), mode="reduce-overhead",
                         fullgraph=True)
    for _ in range(3):
        with torch.no_grad():
            for t in (q, k, v):
                t.copy_(torch.randn_like(t))
        d_out = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        torch.compiler.cudagraph_mark_step_begin()
        out = step(q, k, v)
        grads = torch.autograd.grad(out, (q, k, v), d_out)
        out_e = gna.na2d(q, k, v, 7)
        grads_e = torch.autograd.grad(out_e, (q, k, v), d_out)
        assert torch.equal(out, out_e), "the forward is deterministic: replay and eager agree"
        for g, e in zip(grads, grads_e):
            assert rel_error(g, e) < 1e-2


def test_counts_op_and_ctypes_path_give_the_same_bits():
    """Joint attention with per-batch counts of additional keys: the extension's
    gna::na_forward_counts (C++ autograd) against the ctypes path's autograd.Function, forward
    and backward, one rule and per-head rules, counts from below 0 to past the tokens."""
    if not gna._lib.has_counts:
        pytest.skip("libgna without per-batch counts")
    from gna import counted
    rng = random.Random(20261128)
    for case in range(8):
        per_head = case % 2 == 1
        extent = (rng.randint(4, 7), rng.randint(3, 6))
        heads_kv = rng.choice([1, 2])
        heads = 2 * heads_kv
        kw = dict(dtype=torch.float64, requires_grad=True)
        batch, tokens = 3, rng.randint(1, 5)
        q, k, v = qkv(batch, extent, heads, 4, heads_kv=heads_kv, **kw)
        ak, av = (randn(batch, tokens, heads_kv, 4, **kw) for _ in range(2))
        rules = [((3, rng.randint(2, 3)), (1, rng.randint(1, 2)), (1, 1),
                  (False, rng.random() < 0.5)) for _ in range(2 if per_head else 1)]
        groups = ([(rules[0], list(range(0, heads, 2))), (rules[1], list(range(1, heads, 2)))]
                  if per_head else [(rules[0], list(range(heads)))])
        counts = torch.tensor([rng.randint(-1, tokens + 1) for _ in range(batch)],
                              dtype=torch.int32)
        scale = None if case < 4 else 0.4
        weights = torch.randn(*q.shape[:-1], 4, dtype=torch.float64)
        results = []
        for path in ("extension", "ctypes"):
            if path == "extension":
                out = counted.counted_attention(q, k, v, ak, av, counts, groups, scale)
                _assert_cpp_node(out.grad_fn)
            else:
                out = counted._CountedAttention.apply(
                    q, k, v, ak, av, counts, groups, gna.functional._scale("t", scale), "auto")
                assert isinstance(out.grad_fn, torch.autograd.function.BackwardCFunction)
            grads = torch.autograd.grad((out * weights).sum(), (q, k, v, ak, av))
            results.append([out] + list(grads))
        for name, a, b in zip(("out", "dq", "dk", "dv", "dak", "dav"), *results):
            assert torch.equal(a, b), (name, case, counts.tolist())
        # Keys past a batch item's count get no gradient.
        for b in range(batch):
            past = max(int(counts[b]), 0)
            if past < tokens:
                assert results[0][4][b, past:].abs().max() == 0
