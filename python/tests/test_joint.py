"""gna.joint_attention against dense attention under the joint mask (a float64 oracle built
from docs/rule.md section 2): both text positions, per-sample text padding (lengths as ints and as a
tensor), GQA, gradients, dense_joint_attention, errors, torch.compile, and CUDA tensors. Padded
text runs as per-sample counts of text keys in one fused call where the backend takes them
(asserted): random lengths (0, all, in between, and tensor values outside [0, text_len], which
are clamped) against dense_joint_attention, gradients too, on the CPU and on CUDA."""
import pytest

torch = pytest.importorskip("torch")

import gna
import gna.joint as joint_module
from conftest import TOLERANCE, cuda_devices_or_skip, randn, rel_error
from joint_oracle import joint_mask, layout_mask, masked_attention

F64 = TOLERANCE[torch.float64]
CASES = [  # layout, window, stride, dilation, causal
    ((3, 6, 5), (3, 3, 3), (1, 2, 1), 1, False),
    ((6, 7), (3, 5), (2, 1), (2, 1), (False, True)),
]


def _inputs(batch, layout, text_len, heads=4, heads_kv=2, dim=8, dtype=torch.float64,
            device="cpu", requires_grad=False):
    s = 1
    for n in layout:
        s *= n
    s += text_len
    q = randn(batch, s, heads, dim, dtype=dtype, device=device, requires_grad=requires_grad)
    k = randn(batch, s, heads_kv, dim, dtype=dtype, device=device, requires_grad=requires_grad)
    v = randn(batch, s, heads_kv, dim + 2, dtype=dtype, device=device,
              requires_grad=requires_grad)
    return q, k, v


def _oracle(q, k, v, layout, window, stride, dilation, causal, text_len, lengths, position):
    mask = joint_mask(layout_mask(layout, window, stride, dilation, causal), text_len, lengths,
                      q.shape[0], position)
    return masked_attention(q, k, v, mask.to(q.device))


def _lengths(kind, values):
    return {"none": None, "list": values, "tensor": torch.tensor(values)}[kind]


@pytest.mark.parametrize("layout, window, stride, dilation, causal", CASES)
@pytest.mark.parametrize("position", ["after", "before"])
@pytest.mark.parametrize("kind", ["none", "list", "tensor"])
def test_joint_equals_dense_masked_attention(layout, window, stride, dilation, causal, position,
                                            kind):
    text_len, values = 5, [5, 2, 0]
    q, k, v = _inputs(3, layout, text_len)
    lengths = _lengths(kind, values)
    out = gna.joint_attention(q, k, v, layout, window, stride, dilation, causal,
                              text_lengths=lengths, text_position=position)
    ref = _oracle(q, k, v, layout, window, stride, dilation, causal, text_len,
                  None if kind == "none" else values, position)
    assert out.shape == (3, q.shape[1], 4, 10)
    assert rel_error(out, ref) < F64


def test_padding_tokens_do_not_change_the_result():
    layout, text_len = (3, 4, 5), 4
    q, k, v = _inputs(2, layout, text_len)
    k2, v2 = k.clone(), v.clone()
    k2[:, -1:], v2[:, -1:] = 100.0, -100.0  # the last text token is padding for both samples
    for lengths in ([3, 3], torch.tensor([3, 3])):
        a = gna.joint_attention(q, k, v, layout, 3, text_lengths=lengths)
        b = gna.joint_attention(q, k2, v2, layout, 3, text_lengths=lengths)
        assert rel_error(a[:, :-1], b[:, :-1]) < 1e-12


def test_without_text_is_plain_gna():
    layout = (4, 6)
    q, k, v = _inputs(2, layout, 0, heads_kv=4)
    out = gna.joint_attention(q, k, v, layout, (3, 5), stride=(1, 2))
    ref = gna.na2d(*(t.reshape(2, 4, 6, 4, -1) for t in (q, k, v)), (3, 5), stride=(1, 2))
    assert rel_error(out, ref.reshape(out.shape)) < 1e-12


@pytest.mark.parametrize("position", ["after", "before"])
@pytest.mark.parametrize("kind", ["none", "list", "tensor"])
def test_gradients_equal_the_oracle(position, kind):
    layout, window, text_len, values = (3, 4, 5), (3, 3, 3), 4, [4, 1]
    q, k, v = _inputs(2, layout, text_len, requires_grad=True)
    out = gna.joint_attention(q, k, v, layout, window, stride=(1, 1, 2),
                              text_lengths=_lengths(kind, values), text_position=position)
    ref = _oracle(q, k, v, layout, window, (1, 1, 2), 1, False, text_len,
                  None if kind == "none" else values, position)
    g = torch.randn_like(ref)
    grads = torch.autograd.grad(out, (q, k, v), g)
    refs = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(grads, refs):
        assert rel_error(a, b) < F64


@pytest.mark.parametrize("position", ["after", "before"])
def test_dense_joint_attention(position):
    layout, text_len = (3, 4), 3
    q, k, v = _inputs(2, layout, text_len)
    out = gna.dense_joint_attention(q, k, v, text_len, [1, 3], position)
    full = torch.ones(12, 12, dtype=torch.bool)
    ref = masked_attention(q, k, v, joint_mask(full, text_len, [1, 3], 2, position))
    assert rel_error(out, ref) < F64


@pytest.mark.parametrize("kwargs, message", [
    (dict(layout=(3, 4, 4), text_len=2), "the sequence holds"),
    (dict(layout=(3, 4, 6)), "the sequence holds"),
    (dict(text_position="middle"), "text_position"),
    (dict(text_lengths=[1]), "text_lengths"),
    (dict(text_lengths=[1, 9]), "text_lengths"),
    (dict(text_lengths=torch.tensor([1.0, 2.0])), "text_lengths"),
    (dict(kernel_size=None), "kernel_size"),
    (dict(windows=gna.Window(3)), "not both"),
    (dict(layout=(3, 0, 5)), "layout"),
    (dict(kernel_size=9), "window"),
])
def test_errors_name_the_parameter(kwargs, message):
    q, k, v = _inputs(2, (3, 4, 5), 2)
    args = dict(layout=(3, 4, 5), kernel_size=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        gna.joint_attention(q, k, v, **args)


def _has_compile():
    return hasattr(torch, "compile") and hasattr(torch.library, "custom_op")


@pytest.mark.skipif(not _has_compile(), reason="torch.compile of gna's ops needs torch >= 2.4")
@pytest.mark.parametrize("kind", ["none", "list", "tensor"])
def test_compile_fullgraph(kind):
    torch._dynamo.reset()
    layout = (3, 4, 5)
    q, k, v = _inputs(2, layout, 3, dtype=torch.float32, requires_grad=True)
    lengths = _lengths(kind, [3, 1])

    def f(q, k, v):
        out = gna.joint_attention(q, k, v, layout, 3, stride=(1, 2, 1), text_lengths=lengths,
                                  text_position="before")
        return (out ** 2).sum()

    loss = torch.compile(f, fullgraph=True)(q, k, v)
    grads = torch.autograd.grad(loss, (q, k, v))
    loss_ref = f(q, k, v)
    refs = torch.autograd.grad(loss_ref, (q, k, v))
    assert rel_error(loss, loss_ref) < 1e-4
    for a, b in zip(grads, refs):
        assert rel_error(a, b) < 1e-4


@pytest.mark.parametrize("kind", ["none", "list", "tensor"])
def test_cuda_against_the_oracle(kind):
    cuda_devices_or_skip()
    layout, window, text_len, values = (4, 8, 8), (3, 5, 5), 16, [16, 5]
    q, k, v = _inputs(2, layout, text_len, heads=4, heads_kv=2, dim=64, dtype=torch.bfloat16,
                      device="cuda", requires_grad=True)
    v = v[..., :64].detach().contiguous().requires_grad_()
    try:
        out = gna.joint_attention(q, k, v, layout, window, stride=(1, 1, 2),
                                  text_lengths=_lengths(kind, values))
    except gna.UnsupportedError as e:
        pytest.skip(f"no CUDA backend for this call: {e}")
    ref = _oracle(q, k, v, layout, window, (1, 1, 2), 1, False, text_len,
                  None if kind == "none" else values, "after")
    assert rel_error(out, ref) < TOLERANCE[torch.bfloat16]
    g = torch.randn_like(ref)
    grads = torch.autograd.grad(out, (q, k, v), g.to(out.dtype))
    refs = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(grads, refs):
        assert rel_error(a, b) < 2 * TOLERANCE[torch.bfloat16]


def _clamped(values, text_len):
    return [min(max(n, 0), text_len) for n in values]


def _random_lengths(gen, batch, text_len, clamp_kinds):
    """Per-sample lengths: 0, all, in between, and (clamp_kinds) below 0 or above text_len."""
    kinds = 5 if clamp_kinds else 3
    values = []
    for _ in range(batch):
        kind = int(torch.randint(kinds, (1,), generator=gen))
        values.append([0, text_len, int(torch.randint(0, text_len + 1, (1,), generator=gen)),
                       -3, text_len + 7][kind])
    return values


class _PathCounter:
    """Counts the fused calls with per-sample counts and the fallbacks of joint_attention."""

    def __init__(self, monkeypatch):
        self.counted = self.by_length = 0
        counted, by_length = joint_module._visual_with_counts, joint_module._visual_by_length

        def count_counted(*args):
            self.counted += 1
            return counted(*args)

        def count_by_length(*args):
            self.by_length += 1
            return by_length(*args)

        monkeypatch.setattr(joint_module, "_visual_with_counts", count_counted)
        monkeypatch.setattr(joint_module, "_visual_by_length", count_by_length)


@pytest.mark.parametrize("kind", ["list", "tensor"])
def test_counts_sweep_equals_dense_joint_attention(kind, monkeypatch):
    gen = torch.Generator().manual_seed(34)
    paths = _PathCounter(monkeypatch)
    seen = set()
    for trial in range(12):
        layout = [(3, 4, 5), (6, 7), (9,)][trial % 3]
        batch, text_len = 2 + trial % 3, 1 + trial % 6
        values = _random_lengths(gen, batch, text_len, kind == "tensor")
        seen.update("zero" if n <= 0 else "all" if n >= text_len else "between" for n in values)
        position = ["after", "before"][trial % 2]
        q, k, v = _inputs(batch, layout, text_len, requires_grad=True)
        lengths = values if kind == "list" else torch.tensor(values)
        # The window of the whole layout: dense_joint_attention; a window of 3: the oracle.
        for window in (layout, 3):
            out = gna.joint_attention(q, k, v, layout, window, text_lengths=lengths,
                                      text_position=position)
            ref = gna.dense_joint_attention(q, k, v, text_len, _clamped(values, text_len),
                                            position) if window == layout else \
                _oracle(q, k, v, layout, window, 1, 1, False, text_len,
                        _clamped(values, text_len), position)
            assert rel_error(out, ref) < F64, (trial, values, window)
            g = torch.randn_like(ref)
            grads = torch.autograd.grad(out, (q, k, v), g)
            refs = torch.autograd.grad(ref, (q, k, v), g)
            for a, b in zip(grads, refs):
                assert rel_error(a, b) < F64, (trial, values, window)
    assert seen == {"zero", "all", "between"}
    # Every call with padding ran the fused call with counts (lengths all equal to text_len
    # need none), none the call per length.
    assert paths.counted > 0 and paths.by_length == 0


def test_counts_path_and_backends():
    layout, text_len = (3, 4, 5), 4
    q, k, v = _inputs(2, layout, text_len)
    counts = torch.tensor([1, 4], dtype=torch.int32)
    grid = lambda t: t[:, :60].reshape(2, *layout, *t.shape[2:])  # noqa: E731
    kt, vt = k[:, 60:], v[:, 60:]
    groups = joint_module._groups("t", 3, 1, 1, False, None, layout, 4)
    from gna.counted import counts_backend
    for backward in (False, True):
        assert counts_backend(grid(q), grid(k), grid(v), kt, vt, counts, groups,
                              backward=backward) == "reference"
    with pytest.raises(ValueError, match="additional_kv_counts"):
        counts_backend(grid(q), grid(k), grid(v), kt, vt, counts[:1], groups)


@pytest.mark.parametrize("kind", ["list", "tensor"])
def test_cuda_counts_against_dense(kind, monkeypatch):
    cuda_devices_or_skip()
    paths = _PathCounter(monkeypatch)
    gen = torch.Generator().manual_seed(7)
    layout, text_len, batch = (4, 8, 8), 77, 4
    values = [0, text_len, 30, 64] if kind == "list" else [0, text_len, 30, 500]
    q, k, v = _inputs(batch, layout, text_len, heads=4, heads_kv=2, dim=64, dtype=torch.bfloat16,
                      device="cuda", requires_grad=True)
    v = v[..., :64].detach().contiguous().requires_grad_()
    lengths = values if kind == "list" else torch.tensor(values, device="cuda")
    out = gna.joint_attention(q, k, v, layout, (3, 5, 5), stride=(1, 1, 2), text_lengths=lengths)
    ref = _oracle(q, k, v, layout, (3, 5, 5), (1, 1, 2), 1, False, text_len,
                  _clamped(values, text_len), "after")
    assert rel_error(out, ref) < TOLERANCE[torch.bfloat16]
    g = torch.randn(ref.shape, generator=gen).to("cuda")
    grads = torch.autograd.grad(out, (q, k, v), g.to(out.dtype))
    refs = torch.autograd.grad(ref, (q, k, v), g.to(ref.dtype))
    for a, b in zip(grads, refs):
        assert rel_error(a, b) < 2 * TOLERANCE[torch.bfloat16]
    if torch.cuda.get_device_capability() == (9, 0):
        assert paths.counted == 1 and paths.by_length == 0  # the Hopper kernels take counts
