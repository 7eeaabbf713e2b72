"""gna.compat.natten (NATTEN's legacy functional API) and gna.compat.natten_shim (the `natten`
module for transformers) against the dense-masked float64 reference of
natten_dense_reference.py: random shapes, windows, dilations, causal axes and biases, forward
and every gradient, every compat name; NATTEN's argument errors; the shim's detection and its
adaptation of model modules imported before and after it."""
import importlib
import importlib.metadata
import importlib.util
import inspect
import math
import random
import sys
import textwrap

import pytest

from conftest import TOLERANCE, rel_error, torch

if torch is None:
    pytest.skip("torch is not installed", allow_module_level=True)

import gna  # noqa: E402

unfused = pytest.importorskip("gna.unfused", reason="gna.unfused (PN / NN operators) missing")

import natten_dense_reference as ref  # noqa: E402
from gna.compat import natten as N  # noqa: E402
from gna.compat import natten_shim  # noqa: E402

F64 = torch.float64


def devices_and_dtypes():
    out = [("cpu", F64)]
    if torch.cuda.is_available():
        out += [("cuda", torch.float32), ("cuda", torch.float16), ("cuda", torch.bfloat16)]
    return out


DEVICE_DTYPES = devices_and_dtypes()
DD_IDS = [f"{d}-{str(t).split('.')[-1]}" for d, t in DEVICE_DTYPES]


def random_case(rng, rank, causal_ok=True):
    """Extent per axis, odd kernel >= 3, dilation with kernel * dilation <= extent."""
    spatial, kernel, dilation, causal = [], [], [], []
    for _ in range(rank):
        k = rng.choice([3, 5] if rank == 3 else [3, 5, 7])
        d = rng.choice([1, 1, 2, 3])
        n = k * d + rng.randrange(0, 6 if rank == 3 else 9)
        spatial.append(n)
        kernel.append(k)
        dilation.append(d)
        causal.append(causal_ok and rng.random() < 0.3)
    return dict(batch=rng.choice([1, 2]), heads=rng.choice([1, 2, 3]), dim=rng.choice([2, 4, 8]),
                spatial=tuple(spatial), kernel=tuple(kernel), dilation=tuple(dilation),
                causal=tuple(causal))


def cases(count, seed, causal_ok=True):
    rng = random.Random(seed)
    out = []
    for i in range(count):
        rank = 1 + i % 3
        out.append(random_case(rng, rank, causal_ok))
    return out


def case_id(c):
    sp = "x".join(map(str, c["spatial"]))
    k = "x".join(map(str, c["kernel"]))
    d = "x".join(map(str, c["dilation"]))
    cz = "".join("c" if x else "n" for x in c["causal"])
    return f"{len(c['spatial'])}d-{sp}-k{k}-d{d}-{cz}-h{c['heads']}"


QK_CASES = cases(18, seed=1)
AV_CASES = cases(18, seed=2)


def heads_first(c, dim=None, dtype=F64, device="cpu", grad=True):
    shape = (c["batch"], c["heads"], *c["spatial"], dim or c["dim"])
    t = torch.randn(*shape, dtype=F64).to(device=device, dtype=dtype)
    return t.requires_grad_(grad)


def leaf(t):
    return t.detach().double().cpu().requires_grad_(True)


def check_close(actual, expected, dtype, what):
    """Relative-norm comparison; -inf (masked) slots must match exactly."""
    actual, expected = actual.detach().double().cpu(), expected.detach().double().cpu()
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    masked = torch.isinf(expected)
    assert torch.equal(torch.isinf(actual), masked), f"{what}: masked slots differ"
    err = rel_error(actual[~masked], expected[~masked])
    assert err < TOLERANCE[dtype], f"{what}: relative error {err:.3g} >= {TOLERANCE[dtype]}"


def qk_name(rank):
    return getattr(N, f"na{rank}d_qk")


def av_name(rank):
    return getattr(N, f"na{rank}d_av")


# ---------------------------------------------------------------------------------------------
# The reference's rule is the library's: softmax(QK) V through the reference equals gna's fused
# CPU reference (the core's rule), causal axes included.


@pytest.mark.parametrize("c", cases(12, seed=3), ids=case_id)
def test_dense_reference_rule_matches_gna_core(c):
    q, k, v = (heads_first(c, grad=False) for _ in range(3))
    scale = c["dim"] ** -0.5
    attn = ref.na_qk(q * scale, k, c["kernel"], c["dilation"], c["causal"])
    out = ref.na_av(torch.softmax(attn, -1), v, c["kernel"], c["dilation"], c["causal"])
    na = (gna.na1d, gna.na2d, gna.na3d)[len(c["spatial"]) - 1]
    last = [t.movedim(1, -2) for t in (q, k, v)]
    fused = na(*last, c["kernel"], dilation=c["dilation"], is_causal=c["causal"])
    err = rel_error(fused.movedim(-2, 1), out)
    assert err < 1e-9, f"dense reference disagrees with gna's fused reference: {err:.3g}"


# ---------------------------------------------------------------------------------------------
# na{1,2,3}d_qk / na{1,2,3}d_av: forward and every gradient


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=DD_IDS)
@pytest.mark.parametrize("c", QK_CASES, ids=case_id)
def test_qk(c, device, dtype):
    rank = len(c["spatial"])
    torch.manual_seed(hash(case_id(c)) % 1000)
    q, k = heads_first(c, dtype=dtype, device=device), heads_first(c, dtype=dtype, device=device)
    with_rpb = not any(c["causal"])
    rpb = torch.randn(c["heads"], *[2 * x - 1 for x in c["kernel"]], dtype=F64).to(
        device=device, dtype=dtype).requires_grad_(True) if with_rpb else None
    n_extra = 3 if c["batch"] == 2 else 0
    extra = torch.randn(c["batch"], c["heads"], n_extra, c["dim"], dtype=F64).to(
        device=device, dtype=dtype).requires_grad_(True) if n_extra else None

    out = qk_name(rank)(q, k, c["kernel"], c["dilation"], additional_keys=extra,
                        is_causal=c["causal"], rpb=rpb)
    rq, rk = leaf(q), leaf(k)
    rrpb = leaf(rpb) if with_rpb else None
    expected = ref.na_qk(rq, rk, c["kernel"], c["dilation"], c["causal"], rrpb)
    if n_extra:
        rextra = leaf(extra)
        b, h, d = c["batch"], c["heads"], c["dim"]
        cross = (rq.reshape(b, h, -1, d) @ rextra.transpose(-1, -2)).reshape(
            *rq.shape[:-1], n_extra)
        expected = torch.cat([expected, cross], -1)
    check_close(out, expected, dtype, "weights")

    grad = torch.randn(expected.shape, dtype=F64)
    out.backward(grad.to(device=device, dtype=dtype))
    expected.backward(grad)
    check_close(q.grad, rq.grad, dtype, "d query")
    check_close(k.grad, rk.grad, dtype, "d key")
    if with_rpb:
        assert rpb.grad is not None, "no gradient reached rpb"
        check_close(rpb.grad, rrpb.grad, dtype, "d rpb")
    if n_extra:
        check_close(extra.grad, rextra.grad, dtype, "d additional_keys")


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=DD_IDS)
@pytest.mark.parametrize("c", AV_CASES, ids=case_id)
def test_av(c, device, dtype):
    rank = len(c["spatial"])
    torch.manual_seed(hash(case_id(c)) % 1000 + 1)
    window = math.prod(c["kernel"])
    n_extra = 2 if c["batch"] == 2 else 0
    v = heads_first(c, dtype=dtype, device=device)
    attn = torch.randn(c["batch"], c["heads"], *c["spatial"], window + n_extra, dtype=F64)
    attn = attn.to(device=device, dtype=dtype).requires_grad_(True)
    extra = torch.randn(c["batch"], c["heads"], n_extra, c["dim"], dtype=F64).to(
        device=device, dtype=dtype).requires_grad_(True) if n_extra else None

    out = av_name(rank)(attn, v, c["kernel"], c["dilation"], additional_values=extra,
                        is_causal=c["causal"])
    ra, rv = leaf(attn), leaf(v)
    expected = ref.na_av(ra[..., :window], rv, c["kernel"], c["dilation"], c["causal"])
    if n_extra:
        rextra = leaf(extra)
        b, h, d = c["batch"], c["heads"], c["dim"]
        expected = expected + (ra[..., window:].reshape(b, h, -1, n_extra) @ rextra).reshape(
            expected.shape)
    check_close(out, expected, dtype, "output")

    grad = torch.randn(expected.shape, dtype=F64)
    out.backward(grad.to(device=device, dtype=dtype))
    expected.backward(grad)
    # Slots causal masking removes carry no weight; their gradient is not compared.
    _, valid, _ = ref.window_table(c["spatial"], c["kernel"], c["dilation"], c["causal"])
    valid = torch.cat([valid, torch.ones(valid.shape[0], n_extra, dtype=torch.bool)], -1)
    valid = valid.reshape(*c["spatial"], window + n_extra).expand(ra.shape)
    check_close(attn.grad.double().cpu()[valid], ra.grad[valid], dtype, "d attn")
    check_close(v.grad, rv.grad, dtype, "d value")
    if n_extra:
        check_close(extra.grad, rextra.grad, dtype, "d additional_values")


def test_mixed_dtypes_follow_natten():
    """rpb and attn in another dtype than the inputs are cast (differentiably), as NATTEN did."""
    c = dict(batch=1, heads=2, dim=4, spatial=(7, 8), kernel=(3, 3), dilation=(2, 1),
             causal=(False, False))
    q, k, v = (heads_first(c) for _ in range(3))
    rpb = torch.randn(2, 5, 5, dtype=torch.float32, requires_grad=True)
    attn = N.natten2dqkrpb(q, k, rpb, 3, (2, 1))
    assert attn.dtype == F64
    probs = torch.softmax(attn, -1).float()
    out = N.natten2dav(probs, v, 3, (2, 1))
    assert out.dtype == F64
    out.sum().backward()
    assert rpb.grad is not None and rpb.grad.dtype == torch.float32


# ---------------------------------------------------------------------------------------------
# Every compat name, with NATTEN's argument order


def legacy_calls():
    """(name, call(q, k, v, rpb) -> (weights, output), rank, kernel, dilation, causal, bias)."""
    def qkav(qk, av, kernel_args, rank):
        def call(q, k, v, rpb):
            a = qk(q, k, rpb, *kernel_args) if rpb is not None or qk.__name__.endswith("rpb") \
                else qk(q, k, *kernel_args)
            return a, av(torch.softmax(a, -1), v, *kernel_args)
        return call

    out = []
    for rank, qkrpb, qk, av in ((1, N.natten1dqkrpb, N.natten1dqk, N.natten1dav),
                                (2, N.natten2dqkrpb, N.natten2dqk, N.natten2dav)):
        out.append((qkrpb.__name__, qkav(qkrpb, av, (5, 2), rank), rank, 5, 2, True))
        out.append((qk.__name__, qkav(qk, av, (3, 1), rank), rank, 3, 1, False))
    out.append(("natten3dqkrpb", qkav(N.natten3dqkrpb, N.natten3dav, (3, 5, 1, 2), 3), 3,
                 (3, 5, 5), (1, 2, 2), True))
    out.append(("natten3dqk", qkav(N.natten3dqk, N.natten3dav, (5, 3, 2, 1), 3), 3,
                 (5, 3, 3), (2, 1, 1), False))
    for rank, with_bias in ((1, N.na1d_qk_with_bias), (2, N.na2d_qk_with_bias)):
        av = av_name(rank)

        def call(q, k, v, rpb, with_bias=with_bias, av=av):
            a = with_bias(q, k, rpb, 3, 2)
            return a, av(torch.softmax(a, -1), v, 3, 2)
        out.append((with_bias.__name__, call, rank, 3, 2, True))

    def call3(q, k, v, rpb):
        a = N.na3d_qk_with_bias(q, k, rpb, 5, 3, 1, 2)
        return a, N.na3d_av(torch.softmax(a, -1), v, (5, 3, 3), (1, 2, 2))
    out.append(("na3d_qk_with_bias", call3, 3, (5, 3, 3), (1, 2, 2), True))
    for rank in (1, 2, 3):
        qk, av = qk_name(rank), av_name(rank)

        def causal_call(q, k, v, rpb, qk=qk, av=av, rank=rank):
            causal = (True,) + (False,) * (rank - 1)
            a = qk(q, k, 3, dilation=2, is_causal=causal)
            return a, av(torch.softmax(a, -1), v, 3, dilation=2, is_causal=causal)
        out.append((f"{qk.__name__}+{av.__name__} causal", causal_call, rank, 3, 2, False))
    return out


LEGACY = legacy_calls()


@pytest.mark.parametrize("name,call,rank,kernel,dilation,bias", LEGACY,
                         ids=[x[0] for x in LEGACY])
def test_legacy_names(name, call, rank, kernel, dilation, bias):
    torch.manual_seed(7)
    kernel = kernel if isinstance(kernel, tuple) else (kernel,) * rank
    dilation = dilation if isinstance(dilation, tuple) else (dilation,) * rank
    causal = ((True,) + (False,) * (rank - 1)) if name.endswith("causal") else (False,) * rank
    spatial = tuple(k * d + 2 + a for a, (k, d) in enumerate(zip(kernel, dilation)))
    c = dict(batch=2, heads=2, dim=4, spatial=spatial, kernel=kernel, dilation=dilation,
             causal=causal)
    q, k, v = (heads_first(c) for _ in range(3))
    rpb = torch.randn(2, *[2 * x - 1 for x in kernel], dtype=F64,
                      requires_grad=True) if bias else None
    weights, out = call(q, k, v, rpb)

    rq, rk, rv = leaf(q), leaf(k), leaf(v)
    rrpb = leaf(rpb) if bias else None
    rw = ref.na_qk(rq, rk, kernel, dilation, causal, rrpb)
    rout = ref.na_av(torch.softmax(rw, -1), rv, kernel, dilation, causal)
    check_close(weights, rw, F64, f"{name} weights")
    check_close(out, rout, F64, f"{name} output")
    grad = torch.randn(rout.shape, dtype=F64)
    out.backward(grad)
    rout.backward(grad)
    for t, r, what in ((q, rq, "query"), (k, rk, "key"), (v, rv, "value")):
        check_close(t.grad, r.grad, F64, f"{name} d {what}")
    if bias:
        check_close(rpb.grad, rrpb.grad, F64, f"{name} d rpb")


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("with_rpb", [False, True])
def test_fused_names(rank, with_rpb):
    """NATTEN 0.17's fused na{1,2,3}d on heads-last tensors: softmax(scale q.k + rpb) v."""
    torch.manual_seed(11 + rank)
    kernel, dilation = (3, 5, 3)[:rank], (2, 1, 1)[:rank]
    spatial = tuple(k * d + 1 for k, d in zip(kernel, dilation))
    c = dict(batch=2, heads=2, dim=4, spatial=spatial, kernel=kernel, dilation=dilation,
             causal=(False,) * rank)
    q, k, v = (heads_first(c) for _ in range(3))
    rpb = torch.randn(2, *[2 * x - 1 for x in kernel], dtype=F64,
                      requires_grad=True) if with_rpb else None
    fused = getattr(N, f"na{rank}d")
    out = fused(q.movedim(1, -2), k.movedim(1, -2), v.movedim(1, -2), kernel, dilation,
                rpb=rpb, scale=0.3)
    rq, rk, rv = leaf(q), leaf(k), leaf(v)
    rrpb = leaf(rpb) if with_rpb else None
    rw = ref.na_qk(rq * 0.3, rk, kernel, dilation, rpb=rrpb)
    rout = ref.na_av(torch.softmax(rw, -1), rv, kernel, dilation).movedim(1, -2)
    check_close(out, rout, F64, "output")
    grad = torch.randn(rout.shape, dtype=F64)
    out.backward(grad)
    rout.backward(grad)
    for t, r, what in ((q, rq, "query"), (k, rk, "key"), (v, rv, "value")):
        check_close(t.grad, r.grad, F64, f"d {what}")
    if with_rpb:
        check_close(rpb.grad, rrpb.grad, F64, "d rpb")


# NATTEN's parameter names and order, per function (the public contract of the legacy API).
SIGNATURES = {
    "natten1dqkrpb": "query key rpb kernel_size dilation",
    "natten2dqkrpb": "query key rpb kernel_size dilation",
    "natten3dqkrpb": "query key rpb kernel_size_d kernel_size dilation_d dilation",
    "natten1dqk": "query key kernel_size dilation",
    "natten2dqk": "query key kernel_size dilation",
    "natten3dqk": "query key kernel_size_d kernel_size dilation_d dilation",
    "natten1dav": "attn value kernel_size dilation",
    "natten2dav": "attn value kernel_size dilation",
    "natten3dav": "attn value kernel_size_d kernel_size dilation_d dilation",
    "na1d_qk": "query key kernel_size dilation additional_keys is_causal rpb",
    "na2d_qk": "query key kernel_size dilation additional_keys is_causal rpb",
    "na3d_qk": "query key kernel_size dilation additional_keys is_causal rpb",
    "na1d_av": "attn value kernel_size dilation additional_values is_causal",
    "na2d_av": "attn value kernel_size dilation additional_values is_causal",
    "na3d_av": "attn value kernel_size dilation additional_values is_causal",
    "na1d_qk_with_bias": "query key bias kernel_size dilation additional_keys",
    "na2d_qk_with_bias": "query key bias kernel_size dilation additional_keys",
    "na3d_qk_with_bias": "query key bias kernel_size_d kernel_size dilation_d dilation "
                         "additional_keys",
    "na1d": "query key value kernel_size dilation is_causal rpb scale",
    "na2d": "query key value kernel_size dilation is_causal rpb scale",
    "na3d": "query key value kernel_size dilation is_causal rpb scale",
}


def test_signatures():
    assert sorted(SIGNATURES) == sorted(N.__all__)
    for name, params in SIGNATURES.items():
        got = " ".join(inspect.signature(getattr(N, name)).parameters)
        assert got == params, f"{name}({got}) differs from NATTEN's {name}({params})"


# ---------------------------------------------------------------------------------------------
# What NATTEN rejected


def _t(*shape, dtype=F64):
    return torch.randn(*shape, dtype=dtype)


Q2 = _t(1, 2, 9, 9, 4)
ATTN2 = _t(1, 2, 9, 9, 9)
ERRORS = [
    ("even kernel", lambda: N.natten2dqkrpb(Q2, Q2, None, 4, 1), "kernel_size"),
    ("kernel 1", lambda: N.na2d_qk(Q2, Q2, 1), "kernel_size"),
    ("even kernel per axis", lambda: N.na2d_qk(Q2, Q2, (3, 6)), "kernel_size"),
    ("even kernel_size_d", lambda: N.natten3dqkrpb(_t(1, 2, 9, 9, 9, 4), _t(1, 2, 9, 9, 9, 4),
                                                   None, 4, 3, 1, 1), "kernel_size_d"),
    ("dilation 0", lambda: N.natten2dqkrpb(Q2, Q2, None, 3, 0), "dilation"),
    ("dilation_d 0", lambda: N.natten3dav(_t(1, 2, 9, 9, 9, 27), _t(1, 2, 9, 9, 9, 4), 3, 3, 0,
                                          1), "dilation_d"),
    ("kernel * dilation > extent", lambda: N.natten2dqkrpb(Q2, Q2, None, 5, 2), "extent"),
    ("kernel > extent in av", lambda: N.na2d_av(_t(1, 2, 9, 9, 121), _t(1, 2, 9, 9, 4), 11),
     "extent"),
    ("rpb with causal", lambda: N.na2d_qk(Q2, Q2, 3, is_causal=(True, False),
                                          rpb=_t(2, 5, 5)), "rpb"),
    ("rpb shape", lambda: N.natten2dqkrpb(Q2, Q2, _t(2, 5, 4), 3, 1), "rpb"),
    ("rpb heads", lambda: N.natten2dqkrpb(Q2, Q2, _t(3, 5, 5), 3, 1), "rpb"),
    ("bias shape", lambda: N.na2d_qk_with_bias(Q2, Q2, _t(2, 3, 3), 3, 1), "bias"),
    ("query/key shapes", lambda: N.natten2dqkrpb(Q2, _t(1, 2, 9, 8, 4), None, 3, 1), "key"),
    ("query/key dtypes", lambda: N.natten2dqkrpb(Q2, Q2.float(), None, 3, 1), "dtype"),
    ("query rank", lambda: N.natten2dqkrpb(_t(1, 2, 9, 4), _t(1, 2, 9, 4), None, 3, 1),
     "query"),
    ("attn window", lambda: N.natten2dav(_t(1, 2, 9, 9, 8), Q2, 3, 1), "attn"),
    ("attn shape", lambda: N.natten2dav(_t(1, 2, 9, 8, 9), Q2, 3, 1), "attn"),
    ("is_causal type", lambda: N.na2d_qk(Q2, Q2, 3, is_causal=1), "is_causal"),
    ("kernel tuple length", lambda: N.na2d_qk(Q2, Q2, (3, 3, 3)), "kernel_size"),
    ("additional_keys shape", lambda: N.na2d_qk(Q2, Q2, 3, additional_keys=_t(1, 2, 5, 3)),
     "additional_keys"),
    ("additional_values count", lambda: N.na2d_av(ATTN2, Q2, 3, additional_values=_t(1, 2, 2, 4)),
     "attn"),
    ("fused rpb with causal", lambda: N.na2d(Q2.movedim(1, -2), Q2.movedim(1, -2),
                                             Q2.movedim(1, -2), 3, is_causal=True,
                                             rpb=_t(2, 5, 5)), "rpb"),
]


@pytest.mark.parametrize("what,call,fragment", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(what, call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()


# ---------------------------------------------------------------------------------------------
# The shim


@pytest.fixture
def shim():
    natten_shim.uninstall()
    yield natten_shim
    natten_shim.uninstall()


def _has_real_natten():
    natten_shim.uninstall()
    return importlib.util.find_spec("natten") is not None


def test_shim_detection(shim):
    real = _has_real_natten()
    module = shim.install()
    assert importlib.util.find_spec("natten") is not None
    assert importlib.util.find_spec("natten.functional") is not None
    assert importlib.metadata.version("natten") == shim.NATTEN_VERSION
    assert importlib.metadata.metadata("natten")["Name"] == "natten"
    import natten
    from natten.functional import natten2dav, natten2dqkrpb
    assert natten is module and natten.__version__ == shim.NATTEN_VERSION
    if hasattr(importlib.metadata, "packages_distributions"):
        assert "natten" in importlib.metadata.packages_distributions().get("natten", [])

    torch.manual_seed(3)
    q, k, v = (_t(1, 2, 8, 9, 4) for _ in range(3))
    rpb = _t(2, 5, 5)
    a = natten2dqkrpb(q, k, rpb, 3, 2)
    assert torch.equal(a, N.natten2dqkrpb(q, k, rpb, 3, 2))
    assert torch.equal(natten2dav(a.softmax(-1), v, 3, 2), N.natten2dav(a.softmax(-1), v, 3, 2))
    for name in N.__all__:
        assert callable(getattr(natten.functional, name))
    shim.uninstall()
    assert "natten" not in sys.modules or real
    if not real:
        assert importlib.util.find_spec("natten") is None


def test_shim_backend_switch(shim):
    calls = []

    class Recording(ref.LegacyBackend):
        @staticmethod
        def natten2dqkrpb(*args):
            calls.append("qk")
            return ref.LegacyBackend.natten2dqkrpb(*args)

    shim.install(backend=Recording)
    from natten.functional import natten2dqkrpb, natten1dav
    q = _t(1, 1, 5, 5, 2)
    natten2dqkrpb(q, q, None, 3, 1)
    assert calls == ["qk"]
    with pytest.raises(NotImplementedError, match="natten1dav"):
        natten1dav(_t(1, 1, 5, 3), _t(1, 1, 5, 2), 3, 1)
    shim.install()
    natten2dqkrpb(q, q, None, 3, 1)
    assert calls == ["qk"]


# A model module in the style of transformers' DiNAT: it imports NATTEN's functions if NATTEN is
# found, placeholders otherwise, and its layer builds query / key / value either in NATTEN's
# heads-first layout or with the transpose(1, 2) some transformers releases use.
FAKE_MODEL = textwrap.dedent('''
    import importlib.util
    import math
    import torch
    from torch import nn

    if importlib.util.find_spec("natten") is not None:
        from natten.functional import natten2dav, natten2dqkrpb
    else:
        def natten2dqkrpb(*args, **kwargs):
            raise RuntimeError("NATTEN is missing")

        def natten2dav(*args, **kwargs):
            raise RuntimeError("NATTEN is missing")


    class NeighborhoodAttention(nn.Module):
        def __init__(self, config, dim, num_heads, kernel_size, dilation):
            super().__init__()
            self.num_attention_heads = num_heads
            self.attention_head_size = dim // num_heads
            self.kernel_size, self.dilation = kernel_size, dilation
            self.rpb = nn.Parameter(torch.randn(num_heads, 2 * kernel_size - 1,
                                                2 * kernel_size - 1))
            self.query = nn.Linear(dim, dim, bias=config.qkv_bias)
            self.key = nn.Linear(dim, dim, bias=config.qkv_bias)
            self.value = nn.Linear(dim, dim, bias=config.qkv_bias)
            self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

        def forward(self, hidden_states, output_attentions=False):
            shape = (*hidden_states.shape[:-1], -1, self.attention_head_size)
            def split(x):
                if LAYOUT == "heads-first":
                    return x.view(shape).permute(0, 3, 1, 2, 4)
                return x.view(shape).transpose(1, 2)
            q = split(self.query(hidden_states)) / math.sqrt(self.attention_head_size)
            k, v = split(self.key(hidden_states)), split(self.value(hidden_states))
            a = natten2dqkrpb(q, k, self.rpb, self.kernel_size, self.dilation)
            p = self.dropout(a.softmax(-1))
            o = natten2dav(p, v, self.kernel_size, self.dilation)
            o = o.permute(0, 2, 3, 1, 4).reshape(*hidden_states.shape)
            return (o, p) if output_attentions else (o,)
''')


def _expected_attention(layer, x):
    """What NATTEN's DiNAT attention computes, by the dense reference."""
    b, X, Y, c = x.shape
    h, d = layer.num_attention_heads, layer.attention_head_size

    def split(t):
        return t.view(b, X, Y, h, d).permute(0, 3, 1, 2, 4)
    q = split(layer.query(x)) / math.sqrt(d)
    k, v = split(layer.key(x)), split(layer.value(x))
    a = ref.na_qk(q, k, layer.kernel_size, layer.dilation, rpb=layer.rpb)
    o = ref.na_av(a.softmax(-1), v, layer.kernel_size, layer.dilation)
    return o.permute(0, 2, 3, 1, 4).reshape(x.shape)


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    counter = [0]

    def make(layout):
        counter[0] += 1
        name = f"gna_fake_dinat_{counter[0]}"
        (tmp_path / f"{name}.py").write_text(f"LAYOUT = {layout!r}\n" + FAKE_MODEL)
        monkeypatch.setattr(natten_shim, "_MODEL_MODULES", natten_shim._MODEL_MODULES + (name,))
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    yield make
    for name in [n for n in sys.modules if n.startswith("gna_fake_dinat_")]:
        del sys.modules[name]


@pytest.mark.parametrize("order", ["imported after install", "imported before install"])
@pytest.mark.parametrize("layout", ["heads-first", "transposed"])
def test_shim_adapts_model_modules(shim, fake_model, order, layout):
    if _has_real_natten():
        pytest.skip("a NATTEN is installed: the before-install case would import it")
    name = fake_model(layout)
    if order == "imported before install":
        module = importlib.import_module(name)
        assert module.natten2dqkrpb.__module__ == name  # the placeholder
        shim.install()
    else:
        shim.install()
        module = importlib.import_module(name)
    assert module.natten2dqkrpb is sys.modules["natten.functional"].natten2dqkrpb
    state = shim.status()["model_modules"][name]
    assert state == "heads-first" if layout == "heads-first" else state.startswith("fixed")

    torch.manual_seed(5)
    config = type("Config", (), {"qkv_bias": True, "attention_probs_dropout_prob": 0.0})
    layer = module.NeighborhoodAttention(config, 8, 2, 3, 2).double()
    x = torch.randn(2, 7, 9, 8, dtype=F64)
    out, probs = layer(x, output_attentions=True)
    assert probs.shape == (2, 2, 7, 9, 9)
    expected = _expected_attention(layer, x)
    assert rel_error(out, expected) < 1e-9
    out.sum().backward()
    assert layer.rpb.grad is not None and layer.rpb.grad.abs().sum() > 0

    shim.uninstall()
    if layout == "transposed":
        assert not getattr(module.NeighborhoodAttention.forward, "__gna_shim__", False)


def test_fused_attention_helper(shim, fake_model):
    """gna.compat.dinat.use_fused_attention on a DiNAT-style layer: refuses a non-zero bias,
    with drop_rpb=True equals the unfused layer with a zero bias (gna's fused kernel), and
    keeps the unfused path when the weights are asked for."""
    from gna.compat.dinat import use_fused_attention
    shim.install()
    module = importlib.import_module(fake_model("transposed"))
    torch.manual_seed(6)
    config = type("Config", (), {"qkv_bias": True, "attention_probs_dropout_prob": 0.0})
    layer = module.NeighborhoodAttention(config, 8, 2, 3, 2).double()
    with pytest.raises(ValueError, match="drop_rpb"):
        use_fused_attention(layer)
    with pytest.raises(ValueError, match="NeighborhoodAttention"):
        use_fused_attention(torch.nn.Linear(2, 2))
    assert use_fused_attention(layer, drop_rpb=True) == 1
    assert not layer.rpb.requires_grad and layer.rpb.abs().max() == 0
    x = torch.randn(2, 7, 9, 8, dtype=F64)
    (out,) = layer(x)
    assert rel_error(out, _expected_attention(layer, x)) < 1e-9
    out2, probs = layer(x, output_attentions=True)
    assert probs.shape == (2, 2, 7, 9, 9) and rel_error(out2, out) < 1e-9
