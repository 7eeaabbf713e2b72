"""Values of the attention functions: CPU tensors against a dense float64 oracle on the cases
whose mask needs no window rule (full, blocked, causal-full), plumbing invariants (strides,
dtypes, GQA, scale, additional keys, merging), and CUDA tensors against the CPU reference."""
import ctypes
import math
import random

import pytest

torch = pytest.importorskip("torch")

import gna
from conftest import (TOLERANCE, block_mask, cuda_devices_or_skip, dense_attention,
                      device_backend_or_skip, device_backends, qkv, randn, rel_error)

F64 = TOLERANCE[torch.float64]
NA = {1: gna.na1d, 2: gna.na2d, 3: gna.na3d}
SPATIAL = {1: (9,), 2: (5, 6), 3: (3, 4, 5)}


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_window_equal_to_extent_is_full_attention(rank, dtype):
    spatial = SPATIAL[rank]
    q, k, v = qkv(2, spatial, 2, 8, dtype=dtype)
    out, lse = NA[rank](q, k, v, spatial, return_lse=True)
    ref_out, ref_lse = dense_attention(q, k, v)
    assert out.dtype == dtype and out.shape == q.shape
    assert lse.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert rel_error(out, ref_out) < TOLERANCE[dtype]
    assert rel_error(lse, ref_lse) < TOLERANCE[dtype]


@pytest.mark.parametrize("rank, spatial, block", [(1, (12,), (4,)), (2, (6, 8), (3, 4)),
                                                  (3, (4, 4, 6), (2, 2, 3))])
def test_stride_equal_to_window_is_blocked_attention(rank, spatial, block):
    q, k, v = qkv(1, spatial, 3, 4, dtype=torch.float64)
    out = NA[rank](q, k, v, block, stride=block)
    ref, _ = dense_attention(q, k, v, mask=block_mask(spatial, block))
    assert rel_error(out, ref) < F64


def test_causal_full_window_is_causal_attention():
    q, k, v = qkv(2, (10,), 2, 4, dtype=torch.float64)
    out = gna.na1d(q, k, v, 10, is_causal=True)
    ref, _ = dense_attention(q, k, v, mask=torch.ones(10, 10, dtype=torch.bool).tril())
    assert rel_error(out, ref) < F64


def test_additional_keys_join_the_softmax():
    q, k, v = qkv(2, (4, 5), 2, 8, dtype=torch.float64)
    ek, ev = randn(2, 3, 2, 8, dtype=torch.float64), randn(2, 3, 2, 8, dtype=torch.float64)
    out, lse = gna.na2d(q, k, v, (4, 5), additional_keys=ek, additional_values=ev,
                        return_lse=True)
    ref, ref_lse = dense_attention(q, k, v, extra_k=ek, extra_v=ev)
    assert rel_error(out, ref) < F64 and rel_error(lse, ref_lse) < F64


def test_grouped_query_heads_equal_repeated_kv_heads():
    q, k, v = qkv(1, (6, 6), 4, 8, heads_kv=2, dim_v=5, dtype=torch.float64)
    out = gna.na2d(q, k, v, 3, dilation=(2, 1), stride=(1, 2))
    rep = gna.na2d(q, k.repeat_interleave(2, dim=-2), v.repeat_interleave(2, dim=-2), 3,
                   dilation=(2, 1), stride=(1, 2))
    assert out.shape == (1, 6, 6, 4, 5)
    assert rel_error(out, rep) < 1e-12


def test_scale_argument():
    q, k, v = qkv(1, (8,), 1, 16, dtype=torch.float64)
    out = gna.na1d(q, k, v, 3, scale=0.5)
    ref = gna.na1d(q * (0.5 * math.sqrt(16)), k, v, 3)
    assert rel_error(out, ref) < 1e-12


def test_strided_views_equal_contiguous():
    base = randn(2, 7, 6, 3, 16, dtype=torch.float64)  # [B, X, Y, 3 * H?, D] packed
    q, k, v = base[:, :, :, 0:1], base[:, :, :, 1:2], base[:, :, :, 2:3]
    qt = randn(2, 6, 7, 1, 16, dtype=torch.float64).transpose(1, 2)  # non-contiguous spatial
    for query in (q, qt):
        out = gna.na2d(query, k, v, (3, 5), dilation=(2, 1), is_causal=(False, True))
        ref = gna.na2d(query.contiguous(), k.contiguous(), v.contiguous(), (3, 5),
                       dilation=(2, 1), is_causal=(False, True))
        assert torch.equal(out, ref)


def test_broadcast_inputs_are_accepted():
    q, k, _ = qkv(2, (6,), 2, 4, dtype=torch.float64)
    v = randn(1, 6, 2, 4, dtype=torch.float64).expand(2, 6, 2, 4)
    out = gna.na1d(q, k, v, 3)
    assert rel_error(out, gna.na1d(q, k, v.contiguous(), 3)) < 1e-12


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_host_tensors_compute_in_float32(dtype):
    q, k, v = qkv(1, (5, 6), 2, 8, dtype=dtype)
    out, lse = gna.na2d(q, k, v, 3, return_lse=True)
    ref, ref_lse = gna.na2d(q.float(), k.float(), v.float(), 3, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    assert rel_error(out, ref) < TOLERANCE[dtype]
    assert rel_error(lse, ref_lse) < 1e-6


def test_sta_equals_gna_with_window_tile_and_stride_tile():
    q, k, v = qkv(1, (8, 12), 2, 4, dtype=torch.float64)
    out = gna.sta2d(q, k, v, tile_shape=(2, 4), window_tiles=(3, 1))
    ref = gna.na2d(q, k, v, (6, 4), stride=(2, 4))
    assert torch.equal(out, ref)
    q3, k3, v3 = qkv(1, (4, 6, 6), 1, 4, dtype=torch.float64)
    assert torch.equal(gna.sta3d(q3, k3, v3, (2, 2, 2), (1, 3, 3)),
                       gna.na3d(q3, k3, v3, (2, 6, 6), stride=(2, 2, 2)))


def _merge_oracle(outputs, lses):
    """libgna's host merge (float64) through the C ABI."""
    from gna import _lib
    from gna._tensors import view
    outputs, lses = [o.contiguous() for o in outputs], [l.contiguous() for l in lses]
    out, lse = torch.empty_like(outputs[0]), torch.empty_like(lses[0])
    arr_o = (_lib.Tensor * len(outputs))(*[view(o, "o") for o in outputs])
    arr_l = (_lib.Tensor * len(lses))(*[view(l, "l") for l in lses])
    _lib.check(_lib.lib.gna_merge_attentions(len(outputs), arr_o, arr_l,
                                             ctypes.byref(view(out, "out")),
                                             ctypes.byref(view(lse, "lse"))))
    return out, lse


def test_merge_attentions_recovers_attention_over_the_union():
    q, k, v = qkv(2, (6, 5), 2, 8, dtype=torch.float64)
    ek, ev = randn(2, 4, 2, 8, dtype=torch.float64), randn(2, 4, 2, 8, dtype=torch.float64)
    main, main_lse = gna.na2d(q, k, v, 3, return_lse=True)
    extra, extra_lse = dense_attention(q, ek.reshape(2, 4, 1, 2, 8),
                                       ev.reshape(2, 4, 1, 2, 8))
    merged, merged_lse = gna.merge_attentions([main, extra], [main_lse, extra_lse])
    joint, joint_lse = gna.na2d(q, k, v, 3, additional_keys=ek, additional_values=ev,
                                return_lse=True)
    assert rel_error(merged, joint) < F64 and rel_error(merged_lse, joint_lse) < F64
    lib_out, lib_lse = _merge_oracle([main, extra], [main_lse, extra_lse])
    assert rel_error(merged, lib_out) < 1e-12 and rel_error(merged_lse, lib_lse) < 1e-12


def test_gradients_vs_dense_oracle_on_full_window():
    q, k, v = qkv(1, (3, 4), 2, 4, dtype=torch.float64, requires_grad=True)
    ek = randn(1, 2, 2, 4, dtype=torch.float64, requires_grad=True)
    ev = randn(1, 2, 2, 4, dtype=torch.float64, requires_grad=True)
    w_out, w_lse = randn(1, 3, 4, 2, 4, dtype=torch.float64), randn(1, 3, 4, 2,
                                                                    dtype=torch.float64)
    out, lse = gna.na2d(q, k, v, (3, 4), additional_keys=ek, additional_values=ev,
                        return_lse=True)
    grads = torch.autograd.grad((out * w_out).sum() + (lse * w_lse).sum(), (q, k, v, ek, ev))
    r_out, r_lse = dense_attention(q, k, v, extra_k=ek, extra_v=ev)
    ref = torch.autograd.grad((r_out * w_out).sum() + (r_lse * w_lse).sum(), (q, k, v, ek, ev))
    for g, r in zip(grads, ref):
        assert rel_error(g, r) < F64


# ---- CUDA tensors against the CPU reference -------------------------------------------------

def _random_case(rng, rank):
    """A valid random problem: per-axis extent, window, stride, dilation, causal."""
    spatial, window, stride, dilation, causal = [], [], [], [], []
    for _ in range(rank):
        d = rng.choice([1, 1, 2])
        k = rng.randint(2, 7)
        spatial.append(rng.randint(k * d, k * d + (9 if rank < 3 else 4)))
        window.append(k)
        stride.append(rng.randint(1, k))
        dilation.append(d)
        causal.append(rng.random() < 0.25)
    return tuple(spatial), window, stride, dilation, causal


def _cuda_case(rng, rank, dtype, dim, backend="auto", backward=False):
    cuda_devices_or_skip()
    spatial, window, stride, dilation, causal = _random_case(rng, rank)
    heads_kv = rng.choice([1, 2])
    heads = heads_kv * rng.choice([1, 2])
    q, k, v = qkv(rng.choice([1, 2]), spatial, heads, dim, heads_kv=heads_kv, dtype=dtype,
                  device="cuda")
    extra = rng.random() < 0.3
    ek = randn(q.shape[0], 5, heads_kv, dim, dtype=dtype, device="cuda") if extra else None
    ev = randn(q.shape[0], 5, heads_kv, dim, dtype=dtype, device="cuda") if extra else None
    kw = dict(stride=stride, dilation=dilation, is_causal=causal, additional_keys=ek,
              additional_values=ev)
    name = device_backend_or_skip(q, k, v, window, backward=backward, backend=backend, **kw)
    return q, k, v, window, kw, name


@pytest.mark.parametrize("backend", ["auto"] + device_backends())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_cuda_forward_matches_reference(rank, dtype, backend):
    rng = random.Random()
    for dim in (32, 64, 128):
        q, k, v, window, kw, name = _cuda_case(rng, rank, dtype, dim, backend)
        out, lse = NA[rank](q, k, v, window, return_lse=True, backend=backend, **kw)
        host = {n: (t.cpu().double() if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
        ref, ref_lse = NA[rank](q.cpu().double(), k.cpu().double(), v.cpu().double(), window,
                                return_lse=True, **host)
        assert out.is_cuda and out.dtype == dtype
        err = rel_error(out, ref)
        assert err < TOLERANCE[dtype], f"{name} {kw} error {err}"
        assert rel_error(lse, ref_lse) < 1e-3, name


@pytest.mark.parametrize("backend", ["auto"] + device_backends())
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_cuda_backward_matches_reference(rank, dtype, backend):
    rng = random.Random()
    ran = 0
    for dim in (32, 64, 128):
        q, k, v, window, kw, name = _cuda_case(rng, rank, dtype, dim)
        inputs = [t for t in (q, k, v, kw["additional_keys"], kw["additional_values"])
                  if t is not None]
        for t in inputs:
            t.requires_grad_(True)
        try:  # backward selection needs the gradient buffers, so ask by running it
            out = NA[rank](q, k, v, window, backend=backend, **kw)
            d_out = torch.randn_like(out)
            grads = torch.autograd.grad(out, inputs, d_out)
        except gna.UnsupportedError as e:
            print(f"{backend} backward unsupported for {kw}: {e}")
            continue
        ran += 1
        host = [t.detach().cpu().double().requires_grad_(True) for t in inputs]
        hk = dict(kw)
        if kw["additional_keys"] is not None:
            hk["additional_keys"], hk["additional_values"] = host[3], host[4]
        ref_out = NA[rank](host[0], host[1], host[2], window, **hk)
        ref = torch.autograd.grad(ref_out, host, d_out.cpu().double())
        for g, r, n in zip(grads, ref, ("dq", "dk", "dv", "dak", "dav")):
            assert g.dtype == dtype
            err = rel_error(g, r)
            assert err < 2 * TOLERANCE[dtype], f"{backend} {n} {kw} error {err}"
    if not ran:
        pytest.skip(f"no CUDA backward for backend {backend} on these cases")


def test_cuda_respects_current_stream():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    q, k, v = qkv(2, (16, 16), 4, 64, dtype=torch.float16, device="cuda")
    device_backend_or_skip(q, k, v, 5)
    expected = gna.na2d(q, k, v, 5)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # Work queued on the side stream right before the call: a call that ignored the current
        # stream would race with this scaling.
        q2 = q * 1.0
        torch.cuda._sleep(1_000_000)
        q2.mul_(2.0)
        out = gna.na2d(q2, k, v, 5)
    torch.cuda.current_stream().wait_stream(side)
    ref = gna.na2d(q * 2.0, k, v, 5)
    assert rel_error(out, ref) < 1e-3
    assert rel_error(expected, ref) > 1e-2


def test_cuda_deterministic_backward_is_bitwise_repeatable():
    """torch.use_deterministic_algorithms(True) selects a deterministic backward: the same bits
    on every run (the atomics-based kernels are not chosen then)."""
    cuda_devices_or_skip()
    q, k, v = qkv(2, (24, 40), 4, 128, dtype=torch.bfloat16, device="cuda")
    device_backend_or_skip(q, k, v, 13)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        backend = gna.selected_backend(q, k, v, 13, backward=True)
        assert backend != "portable", "the portable backward adds dQ with atomics"
        runs = []
        for _ in range(3):
            inputs = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
            out = gna.na2d(*inputs, 13)
            runs.append(torch.autograd.grad(out, inputs, torch.ones_like(out)))
    finally:
        torch.use_deterministic_algorithms(previous)
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a, b), f"backend {backend}: gradients differ between runs"


# ---- non-finite inputs and extreme logits: what dense attention gives ------------------------

def _assert_like_dense(out, lse, ref, ref_lse, tolerance):
    for got, want, name in ((out, ref, "out"), (lse, ref_lse, "lse")):
        got, want = got.double().cpu(), want.double().cpu()
        assert torch.equal(got.isnan(), want.isnan()), f"{name}: NaN where dense has none or " \
                                                       f"the reverse"
        assert torch.equal(got.isinf(), want.isinf()), f"{name}: inf pattern differs"
        finite = want.isfinite()
        err = (got[finite] - want[finite]).norm() / want[finite].norm().clamp_min(1e-30)
        assert err < tolerance, f"{name}: error {err}"


def _poisoned(t, index, value):
    t = t.clone()
    t[index] = value
    return t


@pytest.mark.parametrize("case", ["logits 1e4", "logits -1e4", "nan query", "nan key",
                                  "inf value", "+inf logit", "-inf query",
                                  "nan beside +inf logit"])
def test_non_finite_inputs_and_extreme_logits_match_dense(case):
    q, k, v = qkv(2, (4, 5), 2, 8, dtype=torch.float64)
    spot = (1, 2, 3, 1, 4)
    if case == "logits 1e4":  # |q.k| * scale up to ~1e4: softmax is nearly one-hot
        q, k = q * 40, k * 40
    elif case == "logits -1e4":
        q, k = q * 40, -k * 40
    elif case == "nan query":
        q = _poisoned(q, spot, float("nan"))
    elif case == "nan key":
        k = _poisoned(k, spot, float("nan"))
    elif case == "inf value":
        v = _poisoned(v, spot, float("inf"))
    elif case == "+inf logit":
        k = _poisoned(k, spot, float("inf"))
    elif case == "-inf query":
        q = _poisoned(q, (0, 1, 1, 0), float("-inf"))
    else:  # one row's logits: +inf for a key of negative components, NaN for mixed signs
        q = _poisoned(q, (0, 1, 1, 0), float("-inf"))
        k = k.clone()
        k[0, 2, 2, 0] = -k[0, 2, 2, 0].abs() - 0.1
        k[0, 0, 0, 0, :2] = torch.tensor([1.0, -1.0], dtype=k.dtype)
    if case.startswith("logits"):
        s = torch.einsum("bxyhd,bijhd->bxyhij", q, k).abs().max() / math.sqrt(8)
        assert s > 5e3
    out, lse = gna.na2d(q, k, v, (4, 5), return_lse=True)  # window = extent: dense attention
    ref, ref_lse = dense_attention(q, k, v)
    _assert_like_dense(out, lse, ref, ref_lse, F64)
    if case.startswith("logits"):
        assert out.isfinite().all() and lse.isfinite().all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_cuda_extreme_logits_and_nan_rows_match_reference(dtype):
    cuda_devices_or_skip()
    q, k, v = qkv(1, (16, 16), 2, 64, dtype=torch.float32)
    q, k = q * 25, k * 25  # logits up to ~1e4
    q[0, 3, 4, 1, 7] = float("nan")  # one query row
    q, k, v = (t.to(dtype) for t in (q, k, v))
    gq, gk, gv = (t.cuda() for t in (q, k, v))
    device_backend_or_skip(gq, gk, gv, 7)
    out, lse = gna.na2d(gq, gk, gv, 7, return_lse=True)
    ref, ref_lse = gna.na2d(q.double(), k.double(), v.double(), 7, return_lse=True)
    _assert_like_dense(out, lse, ref, ref_lse, 4 * TOLERANCE[dtype])
