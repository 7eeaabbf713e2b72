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
    with pytest.raises(ValueError, match=r"outputs\[1\] has dtype torch.float64"):
        gna.merge_attentions([a, a.double()], [la, la])
    with pytest.raises(ValueError, match=r"lses\[0\] must be a torch.Tensor, got list"):
        gna.merge_attentions([a], [[1.0]])
    with pytest.raises(ValueError, match=r"outputs\[0\] must be floating point, got torch.int64"):
        gna.merge_attentions([a.long()], [la])
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"lses\[1\] is on cuda"):
            gna.merge_attentions([a, a], [la, la.cuda()])


def test_module_errors():
    with pytest.raises(ValueError, match="embed_dim"):
        gna.NeighborhoodAttention2D(10, 3, 3)
    with pytest.raises(ValueError, match="num_heads"):
        gna.NeighborhoodAttention1D(8, 0, 3)
    with pytest.raises(ValueError, match="num_heads must be a positive int, got True"):
        gna.NeighborhoodAttention1D(8, True, 3)
    with pytest.raises(ValueError, match="embed_dim.*got 8.0"):
        gna.NeighborhoodAttention1D(8.0, 2, 3)
    with pytest.raises(ValueError, match=r"kernel_size.*2\^31"):
        gna.NeighborhoodAttention1D(8, 2, 2**31)
    with pytest.raises(ValueError, match="kernel_size"):
        gna.NeighborhoodAttention3D(8, 2, (3, 3))
    layer = gna.NeighborhoodAttention2D(8, 2, 3)
    with pytest.raises(ValueError, match="input"):
        layer(randn(1, 6, 6, 4))
    with pytest.raises(ValueError, match="window"):
        layer(randn(1, 2, 6, 8))


@pytest.mark.parametrize("kwargs, words", [
    (dict(kernel_size=2**32 + 3), ["kernel_size", "2^31", "4294967299"]),  # never truncated
    (dict(kernel_size=3, stride=-2**31 - 1), ["stride", "2^31"]),
    (dict(kernel_size=3, dilation=(1, 2**40)), ["dilation", "2^31"]),
    (dict(kernel_size=-3), ["window", "-3"]),
    (dict(kernel_size=3, scale=0), ["scale", "> 0", "0"]),  # 0 would mean the default below
    (dict(kernel_size=3, scale=-0.5), ["scale", "-0.5"]),
    (dict(kernel_size=3, scale=float("nan")), ["scale", "nan"]),
    (dict(kernel_size=3, scale=float("-inf")), ["scale", "-inf"]),
    (dict(kernel_size=3, scale=1e39), ["scale", "1e+39"]),  # inf as a float32
    (dict(kernel_size=3, scale=1e-50), ["scale", "1e-50"]),  # 0 as a float32
    (dict(kernel_size=3, scale="0.5"), ["scale", "'0.5'"]),
    (dict(kernel_size=3, scale=True), ["scale", "True"]),
])
def test_hostile_rule_arguments(kwargs, words):
    q, k, v = _qkv2d()
    with pytest.raises(ValueError) as info:
        gna.na2d(q, k, v, **kwargs)
    for w in words:
        assert w in str(info.value), str(info.value)


def test_hostile_tensor_arguments():
    q, k, v = _qkv2d()
    cases = [
        (lambda: gna.na2d(q.numpy(), k, v, 3), ["query", "torch.Tensor", "ndarray"]),
        (lambda: gna.na2d(q, None, v, 3), ["key", "torch.Tensor", "NoneType"]),
        (lambda: gna.na2d(q, k, v, 3, additional_keys=[1], additional_values=[2]),
         ["additional_keys", "list"]),
        (lambda: gna.sta2d(q, k, 7, (2, 2), (1, 1)), ["value", "int"]),
        (lambda: gna.selected_backend(q, k, "v", 3), ["value", "str"]),
        (lambda: gna.na2d(torch.tensor(1.0), k, v, 3), ["query", "5 dims", "0 dims"]),  # rank 0
        (lambda: gna.na2d(q[..., None, :], k, v, 3), ["query", "5 dims", "6 dims"]),
        (lambda: gna.na2d(q.reshape(1, 1, 1, 1, 1, 1, 1, 8, 8, 8), k, v, 3),
         ["query", "at most 8 dims", "10"]),
        (lambda: gna.na2d(q[:0], k[:0], v[:0], 3), ["batch", "0"]),
        (lambda: gna.na2d(q, k, v.half(), 3), ["value", "dtype", "float16"]),
        (lambda: gna.na2d(q.half(), k.half(), v.bfloat16(), 3), ["value", "dtype", "bfloat16"]),
        (lambda: gna.na2d(q, k, v.to(torch.complex64), 3), ["value", "dtype", "complex64"]),
        (lambda: gna.na2d(q.bool(), k, v, 3), ["query", "dtype", "bool"]),
        (lambda: gna.na2d(q, k, v, 3, additional_keys=randn(1, 2, 2, 5),
                          additional_values=randn(1, 2, 2, 4)),
         ["additional keys", "[1, 2, 2, 4]", "[1, 2, 2, 5]"]),  # another head dim
        (lambda: gna.na2d(q, k, v, 3, additional_keys=randn(1, 2, 2, 4, dtype=torch.float64),
                          additional_values=randn(1, 2, 2, 4)),
         ["additional keys", "dtype", "float64"]),
        (lambda: gna.na2d(q, k, v, 3, additional_values=randn(1, 2, 2, 4)),
         ["additional", "together"]),
        (lambda: gna.sta2d(q, k, v, (2**16, 2**16), (2**16 + 1, 1)), ["window", "2^31"]),
    ]
    for call, words in cases:
        with pytest.raises(ValueError) as info:
            call()
        for w in words:
            assert w in str(info.value), (words, str(info.value))


def test_non_contiguous_last_dimension_is_copied_not_misread():
    q, k, v = _qkv2d(dtype=torch.float64)
    strided = torch.stack([q, torch.full_like(q, float("nan"))], dim=-1)[..., 0]  # stride 2
    assert strided.stride(-1) == 2
    assert torch.equal(gna.na2d(strided, k, v, 3), gna.na2d(q, k, v, 3))


def test_simulator_refuses_values_past_32_bits():
    with pytest.raises(ValueError, match=r"shape .*2\^31.*4294967296"):
        gna.simulate((2**32,), 3, q_tile=1, kv_tile=1)
    with pytest.raises(ValueError, match="q_tile"):
        gna.simulate((64, 64), 3, q_tile=(2**31, 1), kv_tile=1)


def test_forced_backend_on_the_wrong_device_says_why():
    q, k, v = _qkv2d()
    for name in gna.backend_names():
        if name == "reference":
            continue
        with pytest.raises(gna.UnsupportedError, match=name):
            gna.na2d(q, k, v, 3, backend=name)


def test_forced_cuda_backend_with_unsupported_head_dim_says_why():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for name in [b for b in gna.backend_names() if b in ("hopper", "portable")]:
        q, k, v = qkv(1, (8, 8), 2, 72, dtype=torch.bfloat16, device="cuda")  # head dim 72
        with pytest.raises(gna.UnsupportedError, match=name):
            gna.na2d(q, k, v, 3, backend=name)
