"""Window search (STA Algorithm 1) on a small model whose answer is known: heads built local
(scores fall with the squared distance, text keys far away) pick the smallest window, heads
built global (uniform attention) pick the largest; dense steps are not recorded; the plan's JSON
round trip and application; gna.dense_attention(); install_processors."""
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import gna
from conftest import rel_error

W = gna.Window
LAYOUT, TEXT, HEADS, DIM = (6, 8), 3, 4, 8
CANDIDATES = [W.dense(), W(3), W((5, 5))]  # not in cost order on purpose


class DenseCore(nn.Module):
    """The model's own attention call (what gna replaces)."""

    def forward(self, q, k, v):
        return gna.dense_joint_attention(q, k, v, TEXT)


class Layer(nn.Module):
    def __init__(self, local_heads):
        super().__init__()
        self.local_heads = local_heads
        self.v_proj = nn.Linear(HEADS * DIM, HEADS * DIM).double()
        self.attn = DenseCore()
        coords = torch.stack(torch.meshgrid(*[torch.arange(n, dtype=torch.float64)
                                              for n in LAYOUT], indexing="ij"), -1).reshape(-1, 2)
        sharp = 10.0 * DIM ** 0.5
        q = torch.zeros(coords.shape[0] + TEXT, DIM, dtype=torch.float64)
        k = torch.zeros_like(q)
        q[:-TEXT, :2], q[:-TEXT, 2] = 2 * sharp * coords, sharp  # score: -sharp |p_q - p_k|^2
        k[:-TEXT, :2], k[:-TEXT, 2] = coords, -(coords ** 2).sum(-1)
        k[-TEXT:, 2] = -1e3  # text keys: far from every visual query of a local head
        self.register_buffer("q_local", q)
        self.register_buffer("k_local", k)

    def forward(self, x):
        b, s, _ = x.shape
        q = torch.zeros(b, s, HEADS, DIM, dtype=x.dtype)  # global heads: uniform attention
        k = torch.zeros_like(q)
        for h in self.local_heads:
            q[:, :, h], k[:, :, h] = self.q_local, self.k_local
        v = self.v_proj(x).reshape(b, s, HEADS, DIM)
        return x + self.attn(q, k, v).reshape(b, s, -1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList([Layer([0, 1]), Layer([2, 3])])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _model():
    model = Model()
    names = gna.install_processors(model, DenseCore, lambda name, m: gna.GnaAttentionProcessor(
        LAYOUT, text_len=TEXT))
    assert names == ["layers.0.attn", "layers.1.attn"]
    return model


def _inputs(count=2):
    return [torch.randn(2, 48 + TEXT, HEADS * DIM, dtype=torch.float64) for _ in range(count)]


def test_local_heads_pick_the_small_window_global_heads_the_largest():
    model = _model()
    steps = []
    plan = gna.search_windows(model, CANDIDATES, _inputs(),
                              forward=lambda m, x, step: steps.append(step) or m(x), steps=3,
                              dense_steps=1, threshold=1e-6)
    assert steps == [0, 1, 2, 0, 1, 2]
    assert plan.layers["layers.0.attn"] == [W(3), W(3), W.dense(), W.dense()]
    assert plan.layers["layers.1.attn"] == [W.dense(), W.dense(), W(3), W(3)]
    errors = plan.relative_errors["layers.0.attn"]  # [head][candidate]
    assert errors[0][1] < 1e-9 and errors[2][1] > 1e-2 and errors[2][0] < 1e-12
    strict = gna.search_windows(model, CANDIDATES, _inputs(1), threshold=0.0)
    assert strict.layers["layers.0.attn"][2:] == [W.dense(), W.dense()]


def test_dense_steps_are_not_recorded():
    model = _model()
    with gna.WindowSearch(model, CANDIDATES) as search, torch.no_grad():
        for x in _inputs(3):
            with gna.dense_attention():
                model(x)
            model(x)
    assert [s.calls for s in search.stats.values()] == [3, 3]
    assert all(p.mode == "sparse" for p in search.processors.values())


def test_plan_json_round_trip_and_apply(tmp_path):
    model = _model()
    plan = gna.search_windows(model, CANDIDATES, _inputs(1), threshold=1e-6)
    path = tmp_path / "plan.json"
    plan.save(path)
    loaded = gna.WindowPlan.load(path)
    assert loaded == plan and loaded.candidates == plan.candidates
    assert loaded.relative_errors == pytest.approx(plan.relative_errors)
    x = _inputs(1)[0]
    with torch.no_grad():
        dense = model(x)
        assert loaded.apply(model) == ["layers.0.attn", "layers.1.attn"]
        assert model.layers[0].attn.windows == [W(3), W(3), W.dense(), W.dense()]
        searched = model(x)
        gna.WindowPlan({n: [W(3)] * HEADS for n in plan.layers}).apply(model)
        small = model(x)
        with gna.dense_attention():
            forced = model(x)
    assert rel_error(searched, dense) < 1e-9
    assert rel_error(small, dense) > 1e-3
    assert rel_error(forced, dense) < 1e-12


def test_processor_is_differentiable_and_equals_joint_attention():
    p = gna.GnaAttentionProcessor(LAYOUT, [W(3), W((5, 5)), W.dense(), W(3)], text_len=TEXT,
                                  text_position="before")
    q, k, v = (torch.randn(2, 48 + TEXT, HEADS, DIM, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    out = p(q, k, v, text_lengths=[3, 2])
    ref = gna.joint_attention(q, k, v, LAYOUT, windows=p.windows, text_lengths=[3, 2],
                              text_position="before")
    assert rel_error(out, ref) < 1e-12
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_errors_name_the_parameter(tmp_path):
    model = _model()
    with pytest.raises(ValueError, match="mode"):
        model.layers[0].attn.mode = "fast"
    with pytest.raises(ValueError, match="distinct"):
        gna.WindowSearch(model, [W(3), W(3)])
    with pytest.raises(ValueError, match="modules"):
        gna.WindowSearch(model, CANDIDATES, modules=["layers.0.v_proj"])
    with pytest.raises(ValueError, match="GnaAttentionProcessor"):
        gna.WindowSearch(nn.Linear(2, 2), CANDIDATES)
    with pytest.raises(ValueError, match="no call"):
        gna.WindowSearch(model, CANDIDATES).plan()
    with pytest.raises(ValueError, match="dense_steps"):
        gna.search_windows(model, CANDIDATES, _inputs(1), dense_steps=2)
    with pytest.raises(ValueError, match="threshold"):
        gna.search_windows(model, CANDIDATES, _inputs(1), threshold=-1)
    with pytest.raises(ValueError, match="names modules"):
        gna.install_processors(model, ["layers.7.attn"], lambda n, m: m)
    path = tmp_path / "bad.json"
    path.write_text('{"format": "other", "version": 1}')
    with pytest.raises(ValueError, match="format"):
        gna.WindowPlan.load(path)
