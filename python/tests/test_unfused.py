"""gna.unfused (PN / NN with relative positional bias, heads-first tensors): CPU values and
gradients against a dense masked float64 computation written here from docs/rule.md section 2
(stride 1), gradcheck in float64, dtype and layout plumbing, errors, and CUDA against the CPU."""
import math
import random

import pytest

torch = pytest.importorskip("torch")

import gna  # noqa: E402
from conftest import cuda_devices_or_skip  # noqa: E402

SPATIAL = {1: [(11,), (16,)], 2: [(6, 7), (9, 5)], 3: [(4, 5, 6), (5, 4, 4)]}


def axis_pairs(extent, kernel, dilation, causal):
    """Per (query, key) on one axis: attended, the key's slot and its bias index (docs/rule.md
    section 6, written out independently of the library)."""
    attended = torch.zeros(extent, extent, dtype=torch.bool)
    slot = torch.zeros(extent, extent, dtype=torch.long)
    rel = torch.zeros(extent, extent, dtype=torch.long)
    for i in range(extent):
        g, ig = i % dilation, i // dilation
        n = (extent - g + dilation - 1) // dilation
        if causal:
            start, end = max(ig - kernel + 1, 0), ig + 1
        else:
            start = min(max(ig - kernel // 2, 0), n - kernel)
            end = start + kernel
        for jg in range(start, end):
            j = g + jg * dilation
            attended[i, j] = True
            slot[i, j] = jg - start
            rel[i, j] = kernel - 1 + jg - ig
    return attended, slot, rel


def dense_tables(spatial, kernel, dilation, causal):
    """[N, N] mask, flat slot and flat bias entry over every axis (row-major)."""
    mask = torch.ones(1, 1, dtype=torch.bool)
    slot = torch.zeros(1, 1, dtype=torch.long)
    rel = torch.zeros(1, 1, dtype=torch.long)
    for a, extent in enumerate(spatial):
        m, s, r = axis_pairs(extent, kernel[a], dilation[a], causal[a])
        n = mask.shape[0]
        mask = (mask[:, None, :, None] & m[None, :, None, :]).reshape(n * extent, n * extent)
        slot = (slot[:, None, :, None] * kernel[a] + s[None, :, None, :]).reshape(n * extent, n * extent)
        rel = (rel[:, None, :, None] * (2 * kernel[a] - 1) + r[None, :, None, :]).reshape(n * extent, n * extent)
    return mask, slot, rel


def dense_qk_av(q, k, v, rpb, attn_for_av, kernel, dilation, causal):
    """Dense masked PN(q, k) (+ rpb) and NN(attn_for_av, v), differentiable."""
    b, h = q.shape[:2]
    spatial = tuple(q.shape[2:-1])
    n, slots = math.prod(spatial), math.prod(kernel)
    mask, slot, rel = dense_tables(spatial, kernel, dilation, causal)
    qi, kj = mask.nonzero(as_tuple=True)
    s = slot[qi, kj]
    scores = q.reshape(b, h, n, -1) @ k.reshape(b, h, n, -1).transpose(-1, -2)
    picked = scores[:, :, qi, kj]
    if rpb is not None:
        picked = picked + rpb.reshape(h, -1)[:, rel[qi, kj]][None]
    attn = torch.full((b, h, n, slots), float("-inf"), dtype=q.dtype)
    attn = attn.index_put((torch.arange(b)[:, None, None], torch.arange(h)[None, :, None],
                           qi[None, None], s[None, None]), picked)
    weights = torch.zeros(b, h, n, n, dtype=v.dtype)
    w = attn_for_av.reshape(b, h, n, slots)[:, :, qi, s]
    weights = weights.index_put((torch.arange(b)[:, None, None], torch.arange(h)[None, :, None],
                                 qi[None, None], kj[None, None]), w)
    out = weights @ v.reshape(b, h, n, -1)
    return attn.reshape(b, h, *spatial, slots), out.reshape(b, h, *spatial, -1)


def random_case(rank, seed, dtype=torch.float64):
    rng = random.Random(seed)
    spatial = rng.choice(SPATIAL[rank])
    kernel, dilation = [], []
    for extent in spatial:
        d = rng.choice([1, 1, 2]) if extent >= 4 else 1
        kernel.append(rng.randint(2, min(5, extent // d)))
        dilation.append(d)
    causal = [rng.random() < 0.3 for _ in spatial]
    b, h, d = rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 6)
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, *spatial, d, generator=gen, dtype=dtype) for _ in range(3))
    rpb = torch.randn(h, *[2 * x - 1 for x in kernel], generator=gen, dtype=dtype)
    return q, k, v, rpb, tuple(kernel), tuple(dilation), tuple(causal)


def finite(attn):
    return attn.masked_fill(torch.isinf(attn), 0.0)


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("with_rpb", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_values_and_gradients_match_dense_masked(rank, with_rpb, seed):
    q, k, v, rpb, kernel, dilation, causal = random_case(rank, 100 * rank + seed)
    rpb = rpb if with_rpb else None
    inputs = [t.clone().requires_grad_() for t in (q, k, v)] + (
        [rpb.clone().requires_grad_()] if with_rpb else [])
    ref_inputs = [t.detach().clone().requires_grad_() for t in inputs]
    gen = torch.Generator().manual_seed(seed)

    attn = gna.unfused.na_qk(inputs[0], inputs[1], kernel, dilation, causal,
                             rpb=inputs[3] if with_rpb else None)
    soft = torch.softmax(attn, dim=-1)  # -inf slots get weight 0, as a model uses it
    out = gna.unfused.na_av(soft, inputs[2], kernel, dilation, causal)
    ref_attn, _ = dense_qk_av(ref_inputs[0], ref_inputs[1], ref_inputs[2],
                              ref_inputs[3] if with_rpb else None, torch.zeros_like(attn), kernel,
                              dilation, causal)
    ref_soft = torch.softmax(ref_attn, dim=-1)
    _, ref_out = dense_qk_av(ref_inputs[0], ref_inputs[1], ref_inputs[2], None, ref_soft, kernel,
                             dilation, causal)

    assert attn.shape == q.shape[:-1] + (math.prod(kernel),)
    assert torch.equal(torch.isinf(attn), torch.isinf(ref_attn))
    assert torch.allclose(finite(attn), finite(ref_attn), atol=1e-12, rtol=1e-12)
    assert torch.allclose(out, ref_out, atol=1e-12, rtol=1e-12)

    g_attn = torch.randn(attn.shape, generator=gen, dtype=attn.dtype)
    g_out = torch.randn(out.shape, generator=gen, dtype=out.dtype)
    ((finite(attn) * g_attn).sum() + (out * g_out).sum()).backward()
    ((finite(ref_attn) * g_attn).sum() + (ref_out * g_out).sum()).backward()
    for name, got, want in zip(("query", "key", "value", "rpb"), inputs, ref_inputs):
        assert torch.allclose(got.grad, want.grad, atol=1e-10, rtol=1e-10), name


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_gradcheck(rank):
    q, k, v, rpb, kernel, dilation, causal = random_case(rank, 7 + rank)
    q, k, v = (t[:1, :2, ..., :3].clone().requires_grad_() for t in (q, k, v))
    rpb = rpb[: q.shape[1]].clone().requires_grad_()

    def qk(q, k, rpb):
        return finite(gna.unfused.na_qk(q, k, kernel, dilation, causal, rpb=rpb))

    attn = torch.randn(q.shape[:-1] + (math.prod(kernel),), dtype=torch.float64,
                       requires_grad=True)

    def av(attn, v):
        return gna.unfused.na_av(attn, v, kernel, dilation, causal)

    assert torch.autograd.gradcheck(qk, (q, k, rpb))
    assert torch.autograd.gradcheck(av, (attn, v))


def test_gradients_only_where_asked_and_strided_inputs():
    q, k, v, rpb, kernel, dilation, causal = random_case(2, 3)
    # A strided (non-contiguous) query: heads and spatial dims permuted views of one buffer.
    base = torch.randn(q.shape[0], *q.shape[2:-1], q.shape[1], q.shape[-1], dtype=torch.float64)
    q_strided = base.permute(0, 3, 1, 2, 4)
    assert not q_strided.is_contiguous()
    a1 = gna.unfused.na_qk(q_strided, k, kernel, dilation, causal, rpb=rpb)
    a2 = gna.unfused.na_qk(q_strided.contiguous(), k, kernel, dilation, causal, rpb=rpb)
    assert torch.equal(a1, a2)
    k.requires_grad_()
    finite(gna.unfused.na_qk(q, k, kernel, dilation, causal, rpb=rpb)).sum().backward()
    assert k.grad is not None and q.grad is None and rpb.grad is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_host_low_precision_runs_in_float32(dtype):
    q, k, v, rpb, kernel, dilation, causal = random_case(2, 11, dtype=torch.float32)
    rpb32 = rpb.clone().requires_grad_()
    qd, kd, vd = (t.to(dtype).requires_grad_() for t in (q, k, v))
    attn = gna.unfused.na_qk(qd, kd, kernel, dilation, causal, rpb=rpb32)  # float32 bias
    assert attn.dtype == dtype
    out = gna.unfused.na_av(torch.softmax(attn.float(), -1).to(dtype), vd, kernel, dilation, causal)
    assert out.dtype == dtype
    want = gna.unfused.na_qk(qd.float(), kd.float(), kernel, dilation, causal, rpb=rpb)
    assert torch.allclose(finite(attn.float()), finite(want.to(dtype).float()), atol=1e-2, rtol=1e-2)
    (finite(attn.float()).sum() + out.float().sum()).backward()
    assert rpb32.grad.dtype == torch.float32 and qd.grad.dtype == dtype and vd.grad.dtype == dtype


def test_per_axis_arguments_and_errors():
    q, k, v, rpb, _, _, _ = random_case(2, 5)
    a = gna.unfused.na_qk(q, k, 3, 1, False)
    b = gna.unfused.na_qk(q, k, (3, 3), (1, 1), (False, False))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="kernel_size must be one int or 2 of them"):
        gna.unfused.na_qk(q, k, (3, 3, 3))
    with pytest.raises(ValueError, match="is_causal must hold bools"):
        gna.unfused.na_qk(q, k, 3, is_causal=1)
    with pytest.raises(ValueError, match="expected a \\[batch, heads, \\*spatial, dim\\] tensor"):
        gna.unfused.na_qk(q[0, 0], k[0, 0], 3)
    with pytest.raises(ValueError, match="window\\*dilation must be <= extent"):
        gna.unfused.na_qk(q, k, q.shape[2], dilation=2)
    with pytest.raises(ValueError, match="rpb: expected shape"):
        gna.unfused.na_qk(q, k, 3, rpb=torch.zeros(q.shape[1], 5, 4, dtype=q.dtype))
    attn = gna.unfused.na_qk(q, k, 3)
    with pytest.raises(ValueError, match="attn: last dim must be prod\\(kernel_size\\)=9, got 8"):
        gna.unfused.na_av(attn[..., :8], v, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_matches_cpu(dtype):
    cuda_devices_or_skip()
    device = "cuda"
    tol = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}[dtype]
    for rank in (1, 2, 3):
        q, k, v, rpb, kernel, dilation, causal = random_case(rank, 40 + rank, dtype=torch.float32)
        cpu = [t.clone().requires_grad_() for t in (q, k, v, rpb)]
        gpu = [t.to(device=device, dtype=dtype).requires_grad_() for t in (q, k, v, rpb)]
        outs = []
        for t in (cpu, gpu):
            attn = gna.unfused.na_qk(t[0], t[1], kernel, dilation, causal, rpb=t[3])
            out = gna.unfused.na_av(torch.softmax(attn.float(), -1).to(t[2].dtype), t[2], kernel,
                                    dilation, causal)
            (finite(attn.float()).sum() + out.float().square().sum()).backward()
            outs.append([finite(attn.float()), out.float()] + [x.grad.float() for x in t])
        for name, c, g in zip(("attn", "out", "dq", "dk", "dv", "d_rpb"), *outs):
            err = ((g.cpu() - c).norm() / c.norm().clamp_min(1e-30)).item()
            assert err < tol, f"{name}: {err}"
