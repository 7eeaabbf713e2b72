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
