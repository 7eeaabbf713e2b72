"""Invalid arguments raise ValueError naming the argument and the value (the core's messages)."""
import pytest

torch = pytest.importorskip("torch")

import gna
from conftest import qkv, randn


def _qkv2d(spatial=(8, 8), heads=2, dim=4, **kw):
    return qkv(1, spatial, heads, dim, **kw)


@pytest.mark.parametrize("kwargs, words", [
    (dict(kernel_size=1), ["window", "1"]),
    (dict(kernel_size=9), ["window", "9", "extent"]),
    (dict(kernel_size=3, stride=4), ["stride", "4"]),
    (dict(kernel_size=3, stride=0), ["stride", "0"]),
    (dict(kernel_size=3, dilation=0), ["dilation", "0"]),
    (dict(kernel_size=3, dilation=3), ["dilation", "3"]),
    (dict(kernel_size=(3, 9)), ["axis 1", "9"]),
    (dict(kernel_size=3, scale=-1.0), ["scale", "-1"]),
    (dict(kernel_size=3, scale=float("inf")), ["scale", "inf"]),
])
def test_rule_errors(kwargs, words):
    q, k, v = _qkv2d()
    with pytest.raises(ValueError) as info:
        gna.na2d(q, k, v, **kwargs)
    for w in words:
        assert w in str(info.value), str(info.value)


@pytest.mark.parametrize("kernel_size, words", [
    ((3, 3, 3), ["kernel_size", "(3, 3, 3)"]),
    (3.0, ["kernel_size", "3.0"]),
    (True, ["kernel_size"]),
])
def test_per_axis_argument_errors(kernel_size, words):
    q, k, v = _qkv2d()
    with pytest.raises(ValueError) as info:
        gna.na2d(q, k, v, kernel_size)
    for w in words:
        assert w in str(info.value)
    with pytest.raises(ValueError, match="is_causal"):
        gna.na2d(q, k, v, 3, is_causal=1)


def test_tensor_errors():
    q, k, v = _qkv2d()
    cases = [
        (lambda: gna.na2d(q[0], k, v, 3), ["query", "dims"]),
        (lambda: gna.na1d(q, k, v, 3), ["query", "dims"]),
        (lambda: gna.na2d(q, k[:, :7], v, 3), ["key", "shape"]),
        (lambda: gna.na2d(q, k, v[..., :1, :], 3), ["value", "shape"]),
        (lambda: gna.na2d(q, k.double(), v, 3), ["key", "dtype"]),
        (lambda: gna.na2d(q, k[..., :3], v, 3), ["key"]),
        (lambda: gna.na2d(q.int(), k, v, 3), ["query", "dtype", "int32"]),
        (lambda: gna.na2d(*qkv(1, (8, 8), 3, 4, heads_kv=2), 3), ["heads", "multiple"]),
        (lambda: gna.na2d(q, k, v, 3, additional_keys=randn(1, 2, 2, 4)), ["additional"]),
        (lambda: gna.na2d(q, k, v, 3, additional_keys=randn(1, 2, 2, 4),
                          additional_values=randn(2, 4)), ["additional values", "shape"]),
        (lambda: gna.na2d(q, k, v, 3, additional_keys=randn(1, 2, 2, 4),
                          additional_values=randn(1, 3, 2, 4)), ["additional values", "shape"]),
        (lambda: gna.na2d(q, k, v, 3, backend="nonexistent"), ["backend", "nonexistent"]),
        (lambda: gna.na2d(q, k, v, 3, backend=3), ["backend", "3"]),
    ]
    for call, words in cases:
        with pytest.raises(ValueError) as info:
            call()
        for w in words:
            assert w in str(info.value), (words, str(info.value))


def test_device_mismatch():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    q, k, v = _qkv2d()
    with pytest.raises(ValueError, match="device"):
        gna.na2d(q, k.cuda(), v, 3)


def test_sta_errors():
    q, k, v = qkv(1, (8, 12), 1, 4)
    for tile, tiles, words in [((2, 4), (2, 1), ["odd"]), ((3, 4), (1, 1), ["multiple", "3"]),
                               ((2, 4), (5, 5), ["extent"]), ((2, 4, 1), (1, 1), ["tile_shape"])]:
        with pytest.raises(ValueError) as info:
            gna.sta2d(q, k, v, tile, tiles)
        for w in words:
            assert w in str(info.value), (words, str(info.value))


def test_merge_errors():
    a, la = randn(1, 4, 2, 3), randn(1, 4, 2)
    with pytest.raises(ValueError, match="equal"):
        gna.merge_attentions([a, a], [la])
    with pytest.raises(ValueError, match=r"outputs\[1\]"):
        gna.merge_attentions([a, a[:, :3]], [la, la])
    with pytest.raises(ValueError, match=r"lses\[1\]"):
        gna.merge_attentions([a, a], [la, la[..., :1]])


def test_module_errors():
    with pytest.raises(ValueError, match="embed_dim"):
        gna.NeighborhoodAttention2D(10, 3, 3)
    with pytest.raises(ValueError, match="num_heads"):
        gna.NeighborhoodAttention1D(8, 0, 3)
    with pytest.raises(ValueError, match="kernel_size"):
        gna.NeighborhoodAttention3D(8, 2, (3, 3))
    layer = gna.NeighborhoodAttention2D(8, 2, 3)
    with pytest.raises(ValueError, match="input"):
        layer(randn(1, 6, 6, 4))
    with pytest.raises(ValueError, match="window"):
        layer(randn(1, 2, 6, 8))
