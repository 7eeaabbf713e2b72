"""The per-call caches of the Python path (checked rules, tensor descriptions): a cached entry
must never change what a call computes or which errors it raises."""
import pytest

torch = pytest.importorskip("torch")

import gna  # noqa: E402
from gna._tensors import view  # noqa: E402


def test_rule_cache_keeps_type_checks():
    q = torch.randn(1, 6, 6, 1, 4)
    gna.na2d(q, q, q, 3, dilation=1)
    for bad in (dict(kernel_size=True), dict(kernel_size=3, dilation=True),
                dict(kernel_size=3.0)):
        with pytest.raises(ValueError, match="must"):
            gna.na2d(q, q, q, **bad)


def test_rule_cache_gives_each_rule_its_result():
    q, k, v = (torch.randn(1, 9, 2, 3, dtype=torch.float64) for _ in range(3))
    a = gna.na1d(q, k, v, 3)
    b = gna.na1d(q, k, v, 5)
    assert not torch.equal(a, b)
    assert torch.equal(gna.na1d(q, k, v, 3), a) and torch.equal(gna.na1d(q, k, v, [5]), b)


def test_traced_calls_bypass_the_rule_cache(monkeypatch):
    """torch.compile cannot trace the cache's type-tagged keys: traced calls check the rule
    directly, with the same result and errors, and leave the cache alone."""
    from gna import functional
    monkeypatch.setattr(functional, "_is_compiling", lambda: True)
    before = dict(functional._rules)
    rule = functional._rule("na2d", 2, (3, 5), (1, 2), 1, (False, True), None)
    assert rule == ([3, 5], [1, 2], [1, 1], [False, True], 0.0)
    assert functional._rules == before
    with pytest.raises(ValueError, match="kernel_size"):
        functional._rule("na2d", 2, True, 1, 1, False, None)


def test_tensor_descriptions_follow_each_tensor():
    a = torch.randn(2, 3, 4)
    b = torch.randn(2, 3, 4)
    c = torch.randn(4, 3, 2).transpose(0, 2)  # same shape, other strides
    ga, gb, gc = view(a, "a"), view(b, "b"), view(c, "c")
    assert ga.data == a.data_ptr() and gb.data == b.data_ptr() and gc.data == c.data_ptr()
    assert list(ga.shape)[:3] == [2, 3, 4] and list(ga.strides)[:3] == [12, 4, 1]
    assert list(gc.strides)[:3] == list(c.stride())
    assert ga.rank == 3 and ga.device == -1
    with pytest.raises(ValueError, match="dtype"):
        view(torch.zeros(2, dtype=torch.int32), "x")


def test_prebuilt_calls_follow_the_data_and_the_strides():
    """A call of a cached signature reads the new tensors' data; other strides are another
    signature."""
    q, k, v = (torch.randn(2, 7, 8, 2, 4, dtype=torch.float64) for _ in range(3))
    a = gna.na2d(q, k, v, 3)
    q2, k2, v2 = (torch.randn_like(q) for _ in range(3))
    b = gna.na2d(q2, k2, v2, 3)
    assert not torch.equal(a, b)
    assert torch.equal(gna.na2d(q, k, v, 3), a)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # same values, other strides
    assert qt.stride() != q.stride()
    assert torch.allclose(gna.na2d(qt, k, v, 3), a)


def test_prebuilt_calls_from_several_threads():
    """The C call runs without the GIL: threads with one signature must not see each other's
    tensors."""
    import threading
    inputs = [[torch.randn(1, 40, 2, 8, dtype=torch.float64, requires_grad=True)
               for _ in range(3)] for _ in range(4)]
    expected = []
    for q, k, v in inputs:
        out = gna.na1d(q, k, v, 5)
        expected.append((out.detach(), torch.autograd.grad(out.sum(), (q, k, v))))
    errors = []

    def work(i):
        q, k, v = inputs[i]
        for _ in range(100):
            out = gna.na1d(q, k, v, 5)
            grads = torch.autograd.grad(out.sum(), (q, k, v))
            if not torch.equal(out.detach(), expected[i][0]) or not all(
                    torch.equal(a, b) for a, b in zip(grads, expected[i][1])):
                errors.append(i)
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
