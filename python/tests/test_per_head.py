"""Per-head windows (gna.per_head_attention, and joint attention with windows=[...]) against a
float64 per-head oracle from docs/rule.md section 2 and against one gna call per head: GQA with
groups that keep or split KV groups, STA and dense windows, logsumexp, gradients, errors."""
import pytest

torch = pytest.importorskip("torch")

import gna
from conftest import TOLERANCE, cuda_devices_or_skip, qkv, rel_error
from joint_oracle import joint_mask, layout_mask, masked_attention, sta_as_gna

F64 = TOLERANCE[torch.float64]
W = gna.Window
LAYOUT = (4, 6, 6)
# Heads 0-1 (KV head 0) share one window; 2 and 5 share another (KV groups split); 3 is STA,
# 4 dense, 6-7 (KV head 3) a causal dilated window.
WINDOWS = [W(3), W(3), W((3, 5, 3), stride=(1, 2, 3)), W.sta((2, 2, 2), (1, 3, 1)), W.dense(),
           W((3, 5, 3), stride=(1, 2, 3)), W((2, 3, 3), dilation=(2, 1, 2), is_causal=True),
           W((2, 3, 3), dilation=(2, 1, 2), is_causal=True)]


def _mask(window, layout):
    if window.kind == "dense":
        n = int(torch.tensor(layout).prod())
        return torch.ones(n, n, dtype=torch.bool)
    if window.kind == "sta":
        w, s = sta_as_gna(window.tile_shape, window.window_tiles)
        return layout_mask(layout, w, s)
    return layout_mask(layout, window.kernel_size, window.stride, window.dilation,
                       window.is_causal)


def _flat(t):
    return t.reshape(t.shape[0], -1, *t.shape[-2:])


def test_oracle_masks_differ_per_head():
    masks = [_mask(w, LAYOUT) for w in WINDOWS]
    assert not torch.equal(masks[0], masks[2]) and not torch.equal(masks[2], masks[3])
    assert masks[4].all() and not masks[6].all()


@pytest.mark.parametrize("heads_kv", [8, 4, 2])
def test_per_head_equals_the_oracle(heads_kv):
    q, k, v = qkv(2, LAYOUT, 8, 8, heads_kv=heads_kv, dim_v=6, dtype=torch.float64)
    out, lse = gna.per_head_attention(q, k, v, WINDOWS, return_lse=True)
    mask = torch.stack([_mask(w, LAYOUT) for w in WINDOWS])[None]
    ref = masked_attention(_flat(q), _flat(k), _flat(v), mask)
    assert out.shape == (2, *LAYOUT, 8, 6) and lse.shape == (2, *LAYOUT, 8)
    assert rel_error(_flat(out), ref) < F64
    kv = lambda t, h: t[..., h * heads_kv // 8:h * heads_kv // 8 + 1, :]  # noqa: E731
    one = [gna.per_head_attention(q[..., h:h + 1, :], kv(k, h), kv(v, h), WINDOWS[h],
                                  return_lse=True) for h in range(8)]
    assert rel_error(lse, torch.cat([l for _, l in one], dim=-1)) < 1e-12
    assert rel_error(out, torch.cat([o for o, _ in one], dim=-2)) < 1e-12


def test_one_window_for_all_heads_is_one_call():
    q, k, v = qkv(1, (5, 7), 4, 8, heads_kv=2, dtype=torch.float64)
    out = gna.per_head_attention(q, k, v, W((3, 5), stride=(1, 2)))
    assert rel_error(out, gna.na2d(q, k, v, (3, 5), stride=(1, 2))) < 1e-12
    assert rel_error(gna.per_head_attention(q, k, v, (3, 5)), gna.na2d(q, k, v, (3, 5))) < 1e-12


def test_gradients_equal_the_oracle():
    q, k, v = qkv(1, LAYOUT, 8, 8, heads_kv=4, dtype=torch.float64, requires_grad=True)
    out = gna.per_head_attention(q, k, v, WINDOWS)
    mask = torch.stack([_mask(w, LAYOUT) for w in WINDOWS])[None]
    ref = masked_attention(_flat(q), _flat(k), _flat(v), mask)
    g = torch.randn_like(ref)
    grads = torch.autograd.grad(_flat(out), (q, k, v), g)
    refs = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(grads, refs):
        assert rel_error(a, b) < F64


@pytest.mark.parametrize("lengths", [None, [3, 1], "tensor"])
def test_joint_attention_with_per_head_windows(lengths):
    text_len, heads = 3, 8
    n = 4 * 6 * 6
    q, k, v = qkv(2, (n + text_len,), heads, 8, heads_kv=4, dtype=torch.float64,
                  requires_grad=True)
    given = torch.tensor([3, 1]) if lengths == "tensor" else lengths
    out = gna.joint_attention(q, k, v, LAYOUT, windows=WINDOWS, text_lengths=given,
                              text_position="before")
    masks = torch.stack([_mask(w, LAYOUT) for w in WINDOWS])
    ref = masked_attention(q, k, v, joint_mask(masks, text_len, None if lengths is None else
                                               [3, 1], 2, "before"))
    assert rel_error(out, ref) < F64
    g = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        assert rel_error(a, b) < F64


def test_errors_name_the_parameter():
    q, k, v = qkv(1, (5, 7), 4, 8)
    with pytest.raises(ValueError, match="one window per query head"):
        gna.per_head_attention(q, k, v, [W(3)] * 3)
    with pytest.raises(ValueError, match=r"windows\[1\]"):
        gna.per_head_attention(q, k, v, [W(3), "big", W(3), W(3)])
    with pytest.raises(ValueError, match="window=9"):
        gna.per_head_attention(q, k, v, [W(3), W(9), W(3), W(3)])
    with pytest.raises(ValueError, match="multiple"):
        gna.per_head_attention(q, k[..., :3, :], v[..., :3, :], W(3))


def test_window_values_and_json_dicts():
    for w in WINDOWS:
        assert W.from_dict(w.to_dict()) == w and hash(W.from_dict(w.to_dict())) == hash(w)
    assert W(3) != W(3, stride=2) and W.dense() == W.dense()
    assert W.sta((2, 2, 2), (1, 3, 1)).resolve(LAYOUT)[:2] == ([2, 6, 2], [2, 2, 2])
    assert W.dense().keys_per_query(LAYOUT) == 144 and W(3).keys_per_query(LAYOUT) == 27
    with pytest.raises(ValueError, match="kind"):
        W.from_dict({"kind": "square"})
    with pytest.raises(ValueError, match="stride"):
        W(3, stride=1.5)


@pytest.mark.skipif(not (hasattr(torch, "compile") and hasattr(torch.library, "custom_op")),
                    reason="torch.compile of gna's ops needs torch >= 2.4")
def test_compile_fullgraph_per_head_processor():
    torch._dynamo.reset()
    p = gna.GnaAttentionProcessor(LAYOUT, WINDOWS, text_len=3)
    q, k, v = qkv(2, (4 * 6 * 6 + 3,), 8, 8, heads_kv=4, requires_grad=True)
    out = torch.compile(p, fullgraph=True)(q, k, v, [3, 1])
    ref = p(q, k, v, [3, 1])
    assert rel_error(out, ref) < 1e-5
    g = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        assert rel_error(a, b) < 1e-4


def test_cuda_per_head_against_the_oracle():
    cuda_devices_or_skip()
    layout = (4, 8, 8)
    windows = [W(3), W(3), W((3, 5, 5), stride=(1, 2, 2)), W((3, 5, 5), stride=(1, 2, 2))]
    q, k, v = qkv(1, layout, 4, 64, heads_kv=2, dtype=torch.bfloat16, device="cuda")
    try:
        out = gna.per_head_attention(q, k, v, windows)
    except gna.UnsupportedError as e:
        pytest.skip(f"no CUDA backend for this call: {e}")
    mask = torch.stack([_mask(w, layout) for w in windows])[None].cuda()
    ref = masked_attention(_flat(q), _flat(k), _flat(v), mask)
    assert rel_error(_flat(out), ref) < TOLERANCE[torch.bfloat16]
