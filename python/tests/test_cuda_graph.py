"""A training step through gna captured in a CUDA graph (torch.cuda.graph) and replayed on new
input values computes what the eager step computes: small problems' training runs this way to
take the host out of the step. GPU only."""
import pytest

torch = pytest.importorskip("torch")

import gna  # noqa: E402
from conftest import cuda_devices_or_skip, device_backend_or_skip, rel_error  # noqa: E402

NA = {1: gna.na1d, 2: gna.na2d, 3: gna.na3d}

# (layout, heads, head dim, window, dilation): the halo kernels' regime (head dims 32 / 64) and
# the tile kernels' (head dim 128).
CASES = [
    ((16, 16), 2, 32, 7, 2),
    ((12, 20), 2, 64, (5, 7), 1),
    ((6, 10, 12), 2, 128, (3, 5, 7), 1),
    ((300,), 2, 128, 33, 3),
]


def _step(q, k, v, d_out, window, dilation):
    out = NA[q.dim() - 3](q, k, v, window, dilation=dilation)
    out.backward(d_out)
    return out


@pytest.mark.parametrize("layout,heads,dim,window,dilation", CASES)
def test_captured_step_equals_the_eager_step(layout, heads, dim, window, dilation):
    cuda_devices_or_skip()
    torch.manual_seed(7)
    shape = (2, *layout, heads, dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    d_out = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    device_backend_or_skip(q, k, v, window, backward=True, dilation=dilation)
    # Warm-up on a side stream (the library's caches and allocations happen outside the capture).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            _step(q, k, v, d_out, window, dilation)
    torch.cuda.current_stream().wait_stream(side)
    q.grad = k.grad = v.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _step(q, k, v, d_out, window, dilation)
    results = []
    for _ in range(2):
        with torch.no_grad():
            for t in (q, k, v, d_out):
                t.copy_(torch.randn_like(t))
        for t in (out, q.grad, k.grad, v.grad):
            t.fill_(float("nan"))  # poisoned: the replay must write every element
        graph.replay()
        torch.cuda.synchronize()
        qe, ke, ve = (t.detach().clone().requires_grad_() for t in (q, k, v))
        out_e = _step(qe, ke, ve, d_out, window, dilation)
        assert torch.equal(out, out_e), "the forward is deterministic: replay and eager agree"
        for name, got, want in (("dq", q.grad, qe.grad), ("dk", k.grad, ke.grad),
                                ("dv", v.grad, ve.grad)):
            assert rel_error(got, want) < 1e-2, name
        results.append(out.clone())
    assert not torch.equal(results[0], results[1]), "the replay computed on the new values"
