"""torch.compile(fullgraph=True) traces the ops without graph breaks, forward and backward, and
torch.library.opcheck passes on both custom ops (torch >= 2.4; older torch, which has neither,
skips these tests: there the ops run eagerly, through the torch extension's custom ops or
torch.autograd.Function)."""
import pytest

torch = pytest.importorskip("torch")

import gna

pytestmark = pytest.mark.skipif(
    not (gna.ops.HAS_CUSTOM_OPS and hasattr(torch.library, "opcheck")),
    reason=f"torch {torch.__version__} has neither torch.compile's custom ops nor "
           f"torch.library.opcheck (torch >= 2.4): the ops run eagerly")
from conftest import TOLERANCE, device_backend_or_skip, qkv, randn, rel_error


def _devices():
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    return devices


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


@pytest.mark.parametrize("device", _devices())
def test_compile_fullgraph_forward_backward(device):
    torch._dynamo.reset()
    dtype = _dtype(device)
    q, k, v = qkv(2, (6, 8), 4, 32, heads_kv=2, dtype=dtype, device=device, requires_grad=True)
    ek = randn(2, 3, 2, 32, dtype=dtype, device=device, requires_grad=True)
    ev = randn(2, 3, 2, 32, dtype=dtype, device=device, requires_grad=True)
    if device == "cuda":
        device_backend_or_skip(q, k, v, (3, 5), stride=(1, 2), dilation=(2, 1),
                               is_causal=(False, True), additional_keys=ek, additional_values=ev)

    def f(q, k, v, ek, ev):
        out, lse = gna.na2d(q, k, v, (3, 5), stride=(1, 2), dilation=(2, 1), is_causal=(False, True),
                            additional_keys=ek, additional_values=ev, return_lse=True)
        return (out.float() ** 2).sum() + lse.sum()

    compiled = torch.compile(f, fullgraph=True)
    inputs = (q, k, v, ek, ev)
    loss = compiled(*inputs)
    grads = torch.autograd.grad(loss, inputs)
    loss_ref = f(*inputs)
    grads_ref = torch.autograd.grad(loss_ref, inputs)
    assert rel_error(loss, loss_ref) < TOLERANCE[dtype]
    for g, r in zip(grads, grads_ref):
        assert rel_error(g, r) < TOLERANCE[dtype]


def test_compile_fullgraph_sta_merge_and_module():
    torch._dynamo.reset()
    q, k, v = qkv(1, (4, 6), 2, 8)
    ek, ev = randn(1, 2, 2, 8), randn(1, 2, 2, 8)

    def f(q, k, v):
        a, la = gna.sta2d(q, k, v, (2, 2), (1, 3), return_lse=True)
        b, lb = gna.na2d(q, k, v, 3, return_lse=True)
        return gna.merge_attentions([a, b], [la, lb])[0]

    assert rel_error(torch.compile(f, fullgraph=True)(q, k, v), f(q, k, v)) < 1e-5
    layer = gna.NeighborhoodAttention2D(16, 2, 3, dilation=(1, 2))
    x = randn(2, 5, 8, 16)
    assert rel_error(torch.compile(layer, fullgraph=True)(x), layer(x)) < 1e-5


def test_opcheck_forward_and_backward():
    q, k, v = qkv(1, (5, 6), 2, 4, heads_kv=1, dtype=torch.float64, requires_grad=True)
    ek = randn(1, 2, 1, 4, dtype=torch.float64, requires_grad=True)
    ev = randn(1, 2, 1, 4, dtype=torch.float64, requires_grad=True)
    rule = ([3, 2], [2, 1], [1, 2], [False, True], 0.0, "auto")
    torch.library.opcheck(torch.ops.gna.na_forward, (q, k, v, ek, ev, *rule, True))
    torch.library.opcheck(torch.ops.gna.na_forward, (q, k, v, None, None, *rule, False))
    with torch.no_grad():
        out, lse = torch.ops.gna.na_forward(q, k, v, ek, ev, *rule, False)
    d_out = torch.randn_like(out)
    args = [t.detach() for t in (q, k, v, ek, ev, out, lse, d_out)]
    torch.library.opcheck(torch.ops.gna.na_backward, (*args, *rule))


def test_opcheck_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    q, k, v = qkv(1, (8, 8), 2, 64, dtype=torch.float16, device="cuda", requires_grad=True)
    device_backend_or_skip(q, k, v, 3, backward=True)
    rule = ([3, 3], [1, 1], [1, 1], [False, False], 0.0, "auto")
    torch.library.opcheck(torch.ops.gna.na_forward, (q, k, v, None, None, *rule, False))
