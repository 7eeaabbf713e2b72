"""gradcheck on small float64 CPU problems (the CPU reference's backward), including additional
keys, grouped heads, and gradients through the logsumexp."""
import pytest

torch = pytest.importorskip("torch")

import gna
from conftest import qkv, randn

CASES = [
    # rank, spatial, kernel_size, stride, dilation, is_causal
    (1, (7,), 3, 1, 1, False),
    (1, (8,), 4, 2, 2, True),
    (2, (4, 5), (2, 3), (1, 2), 1, (True, False)),
    (2, (6, 4), 3, 3, (2, 1), False),
    (3, (3, 4, 4), 2, (1, 2, 1), 1, (False, False, True)),
]
NA = {1: gna.na1d, 2: gna.na2d, 3: gna.na3d}


@pytest.mark.parametrize("rank, spatial, kernel_size, stride, dilation, is_causal", CASES)
def test_gradcheck(rank, spatial, kernel_size, stride, dilation, is_causal):
    q, k, v = qkv(1, spatial, 2, 3, heads_kv=1, dim_v=2, dtype=torch.float64,
                  requires_grad=True)

    def f(q, k, v):
        return NA[rank](q, k, v, kernel_size, stride=stride, dilation=dilation,
                        is_causal=is_causal)

    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_gradcheck_additional_keys_and_lse():
    q, k, v = qkv(1, (3, 4), 2, 3, dtype=torch.float64, requires_grad=True)
    ek = randn(1, 2, 2, 3, dtype=torch.float64, requires_grad=True)
    ev = randn(1, 2, 2, 3, dtype=torch.float64, requires_grad=True)

    def f(q, k, v, ek, ev):
        out, lse = gna.na2d(q, k, v, 2, stride=(1, 2), additional_keys=ek, additional_values=ev,
                            return_lse=True)
        return out, lse

    assert torch.autograd.gradcheck(f, (q, k, v, ek, ev), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_gradcheck_merge_attentions():
    a, b = randn(1, 4, 2, 3, dtype=torch.float64, requires_grad=True), randn(
        1, 4, 2, 3, dtype=torch.float64, requires_grad=True)
    la, lb = randn(1, 4, 2, dtype=torch.float64, requires_grad=True), randn(
        1, 4, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, la, lb: gna.merge_attentions([a, b], [la, lb]),
                                    (a, b, la, lb))


def test_sta_gradcheck():
    q, k, v = qkv(1, (4, 6), 1, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v: gna.sta2d(q, k, v, (2, 2), (1, 3)),
                                    (q, k, v), eps=1e-6, atol=1e-6, rtol=1e-5)


# ---- the two autograd paths: torch.library custom ops (torch >= 2.4, what torch.compile traces)
# and the torch.autograd.Function that eager calls on plain tensors take (every call on older
# torch), gna.ops.eager_attention ----

RULE = ([3, 2], [2, 1], [1, 2], [False, True], 0.0, "auto")


def _torch_version():
    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


def _op_path():
    """The custom op where torch has one (differentiable through its registered autograd)."""
    return gna.ops.na_forward if gna.ops.HAS_CUSTOM_OPS else gna.ops.eager_attention


def test_custom_ops_exactly_where_torch_has_them():
    # torch.library.custom_op came with torch 2.4; the extension registers its ops on any torch.
    assert gna.ops.HAS_CUSTOM_OPS == (_torch_version() >= (2, 4) or gna.ops.HAS_TORCH_EXTENSION)
    if gna.ops.HAS_CUSTOM_OPS:
        assert gna.ops.na_forward is torch.ops.gna.na_forward


def test_eager_calls_on_plain_tensors_skip_the_custom_op_dispatch():
    q, k, v = qkv(1, (6,), 1, 4)
    assert gna.ops._runs_eagerly(q)
    if gna.ops.HAS_CUSTOM_OPS:
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode() as mode:
            assert not gna.ops._runs_eagerly(mode.from_tensor(q))


@pytest.mark.parametrize("lse_grad", [False, True])
def test_eager_path_equals_ops_path(lse_grad):
    q, k, v = qkv(1, (5, 6), 2, 4, heads_kv=1, dim_v=3, dtype=torch.float64,
                  requires_grad=True)
    ek = randn(1, 2, 1, 4, dtype=torch.float64, requires_grad=True)
    ev = randn(1, 2, 1, 3, dtype=torch.float64, requires_grad=True)
    inputs = (q, k, v, ek, ev)
    w_out, w_lse = randn(1, 5, 6, 2, 3, dtype=torch.float64), randn(1, 5, 6, 2,
                                                                    dtype=torch.float64)
    results = []
    for fn in (_op_path(), gna.ops.eager_attention):
        out, lse = fn(*inputs, *RULE, lse_grad)
        loss = (out * w_out).sum() + ((lse * w_lse).sum() if lse_grad else 0)
        results.append((out, lse) + torch.autograd.grad(loss, inputs))
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_eager_path_gradcheck_with_lse():
    q, k, v = qkv(1, (4, 5), 2, 3, dtype=torch.float64, requires_grad=True)
    ek = randn(1, 2, 2, 3, dtype=torch.float64, requires_grad=True)
    ev = randn(1, 2, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda *t: gna.ops.eager_attention(*t, *RULE, True), (q, k, v, ek, ev), eps=1e-6,
        atol=1e-6, rtol=1e-5)


def test_eager_path_unused_output_and_no_additional_tokens():
    q, k, v = qkv(1, (6,), 1, 4, dtype=torch.float64, requires_grad=True)
    rule = ([3], [1], [1], [False], 0.0, "auto")
    _, lse = gna.ops.eager_attention(q, k, v, None, None, *rule, True)
    grads = torch.autograd.grad(lse.sum(), (q, k, v))  # out unused: its gradient is None
    _, lse_ref = _op_path()(q, k, v, None, None, *rule, True)
    for a, b in zip(grads, torch.autograd.grad(lse_ref.sum(), (q, k, v))):
        assert torch.equal(a, b)
    assert grads[2].abs().max() == 0  # lse does not depend on the values


def test_eager_path_errors_equal_ops_path():
    q, k, v = qkv(1, (5, 6), 2, 4)
    bad = ([3, 9], [1, 1], [1, 1], [False, False], 0.0, "auto")
    messages = []
    for fn in (_op_path(), gna.ops.eager_attention):
        with pytest.raises(ValueError) as info:
            fn(q, k, v, None, None, *bad, False)
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "axis 1" in messages[0] and "9" in messages[0]


def test_eager_path_refuses_double_backward():
    q, k, v = qkv(1, (6,), 1, 4, dtype=torch.float64, requires_grad=True)
    out, _ = gna.ops.eager_attention(q, k, v, None, None, [3], [1], [1], [False], 0.0, "auto",
                                     False)
    (g,) = torch.autograd.grad(out.square().sum(), (q,), create_graph=True)
    with pytest.raises(RuntimeError, match="twice"):
        g.sum().backward()
