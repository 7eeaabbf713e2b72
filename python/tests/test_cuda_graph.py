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


def test_make_graphed_callables_trains_a_layer():
    """torch.cuda.make_graphed_callables over a gna layer: forward and backward replay as graphs
    and give the eager layer's output and parameter gradients."""
    cuda_devices_or_skip()
    torch.manual_seed(11)
    layer = gna.NeighborhoodAttention2D(64, 2, 7, dilation=2).cuda().to(torch.bfloat16)
    x = torch.randn(4, 20, 20, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    device_backend_or_skip(*(torch.empty(4, 20, 20, 2, 32, device="cuda", dtype=torch.bfloat16)
                             for _ in range(3)), 7, backward=True, dilation=2)
    eager = gna.NeighborhoodAttention2D(64, 2, 7, dilation=2).cuda().to(torch.bfloat16)
    eager.load_state_dict(layer.state_dict())
    graphed = torch.cuda.make_graphed_callables(layer, (x,))
    for _ in range(2):
        xs = torch.randn_like(x).requires_grad_()
        xe = xs.detach().clone().requires_grad_()
        g = torch.randn(4, 20, 20, 64, device="cuda", dtype=torch.bfloat16)
        layer.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
        out = graphed(xs)
        out.backward(g)
        out_e = eager(xe)
        out_e.backward(g)
        assert rel_error(out, out_e) < 1e-2  # cuBLAS may pick other algorithms when captured
        assert rel_error(xs.grad, xe.grad) < 1e-2
        for (name, p), pe in zip(layer.named_parameters(), eager.parameters()):
            assert rel_error(p.grad, pe.grad) < 1e-2, name
