"""Shared helpers of the gna package tests: the package from the installed copy or the source
tree, random inputs, a dense float64 oracle for the cases whose mask needs no window rule, and
the CUDA backends the library can run."""
import math
import sys
from pathlib import Path

import pytest

try:
    import gna  # noqa: F401  (the installed package, when there is one)
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import gna  # noqa: F401

try:
    import torch
except ImportError:  # the simulator tests still run; the torch tests skip themselves
    torch = None

# Relative-norm tolerances ||out - ref|| / ||ref|| per input dtype against a float64 oracle.
# float64 is bounded by the scale, a float32 parameter of the C ABI (1/sqrt(D) rounded).
TOLERANCE = {} if torch is None else {torch.float64: 1e-6, torch.float32: 1e-4,
                                      torch.float16: 5e-3, torch.bfloat16: 3e-2}


def rel_error(actual, expected):
    actual, expected = actual.double().cpu(), expected.double().cpu()
    assert torch.isfinite(actual).all(), "non-finite values in the result"
    return ((actual - expected).norm() / expected.norm().clamp_min(1e-30)).item()


def randn(*shape, dtype=None, device="cpu", requires_grad=False):
    dtype = dtype or torch.float32
    t = torch.randn(*shape, dtype=torch.float64).to(device=device, dtype=dtype)
    return t.requires_grad_(requires_grad)


def qkv(batch, spatial, heads, dim, heads_kv=None, dim_v=None, **kw):
    heads_kv = heads_kv or heads
    q = randn(batch, *spatial, heads, dim, **kw)
    k = randn(batch, *spatial, heads_kv, dim, **kw)
    v = randn(batch, *spatial, heads_kv, dim_v or dim, **kw)
    return q, k, v


def dense_attention(q, k, v, scale=None, mask=None, extra_k=None, extra_v=None):
    """float64 softmax attention over flattened tokens: q [B, *spatial, Hq, D], k/v likewise
    (Hkv heads); mask [N, N] (True: attended) or None; extra_k/v [B, M, Hkv, D] appended
    unmasked. Returns out [B, *spatial, Hq, Dv] and lse [B, *spatial, Hq]."""
    spatial = q.shape[1:-2]
    b, hq, d = q.shape[0], q.shape[-2], q.shape[-1]
    hkv = k.shape[-2]
    qf = q.double().reshape(b, -1, hq, d)
    kf = k.double().reshape(b, -1, hkv, d)
    vf = v.double().reshape(b, -1, hkv, v.shape[-1])
    n_main = kf.shape[1]
    if extra_k is not None:
        kf = torch.cat([kf, extra_k.double()], dim=1)
        vf = torch.cat([vf, extra_v.double()], dim=1)
    kf = kf.repeat_interleave(hq // hkv, dim=2)
    vf = vf.repeat_interleave(hq // hkv, dim=2)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = torch.einsum("bnhd,bmhd->bhnm", qf, kf) * scale
    if mask is not None:
        full = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool)
        full[:, :n_main] = mask
        s = s.masked_fill(~full, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.einsum("bhnm,bmhd->bnhd", torch.softmax(s, dim=-1), vf)
    return (out.reshape(b, *spatial, hq, vf.shape[-1]),
            lse.permute(0, 2, 1).reshape(b, *spatial, hq))


def block_mask(spatial, block):
    """Blocked (window = stride = block) attention mask: same block on every axis."""
    coords = torch.stack(torch.meshgrid(*[torch.arange(n) for n in spatial], indexing="ij"),
                         dim=-1).reshape(-1, len(spatial))
    blocks = coords // torch.tensor(block)
    return (blocks[:, None, :] == blocks[None, :, :]).all(dim=-1)


def cuda_devices_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


def device_backend_or_skip(q, k, v, kernel_size, backward=False, backend="auto", **kw):
    """The backend dispatch picks for this CUDA call; skips when none is built or supports it."""
    cuda_devices_or_skip()
    try:
        return gna.selected_backend(q, k, v, kernel_size, backward=backward, backend=backend,
                                    **kw)
    except gna.UnsupportedError as e:
        pytest.skip(f"no CUDA backend for this call: {e}")


def device_backends():
    """Names of the backends built into the library that run on CUDA tensors."""
    return [b for b in gna.backend_names() if b != "reference"]
