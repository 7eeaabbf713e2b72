"""NeighborhoodAttention1D/2D/3D: shapes, parameters, gradients, and agreement with the
functional form."""
import pytest

torch = pytest.importorskip("torch")

import gna
from conftest import randn, rel_error


@pytest.mark.parametrize("cls, shape, kw", [
    (gna.NeighborhoodAttention1D, (2, 11, 16), dict(kernel_size=5, dilation=2)),
    (gna.NeighborhoodAttention2D, (2, 6, 7, 16), dict(kernel_size=(3, 5), stride=(1, 2))),
    (gna.NeighborhoodAttention3D, (1, 3, 4, 5, 16), dict(kernel_size=3, is_causal=(True, False,
                                                                                   False))),
])
def test_shapes_and_gradients(cls, shape, kw):
    layer = cls(16, 4, **kw)
    x = randn(*shape, requires_grad=True)
    y = layer(x)
    assert y.shape == x.shape
    y.square().sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape and torch.isfinite(x.grad).all()
    assert layer.qkv.weight.grad is not None and layer.proj.weight.grad is not None


def test_module_matches_functional():
    torch.manual_seed(0)
    layer = gna.NeighborhoodAttention2D(12, 3, 3, qkv_bias=False, proj_drop=0.0)
    assert layer.qkv.bias is None
    x = randn(2, 5, 6, 12)
    q, k, v = (x @ layer.qkv.weight.T).unflatten(-1, (3, 3, 4)).unbind(-3)
    expected = layer.proj(gna.na2d(q, k, v, 3).flatten(-2))
    assert rel_error(layer(x), expected) < 1e-6


def test_module_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    layer = gna.NeighborhoodAttention2D(128, 2, 7).cuda().half()
    x = randn(2, 14, 14, 128, dtype=torch.float16, device="cuda")
    try:
        y = layer(x)
    except gna.UnsupportedError as e:
        pytest.skip(f"no CUDA backend: {e}")
    assert y.shape == x.shape and y.dtype == torch.float16 and torch.isfinite(y).all()
