"""Hugging Face transformers' DiNAT running on gna through gna.compat.natten_shim, against the
same model on the dense-masked PyTorch reference of NATTEN's operators
(natten_dense_reference.py, installed through the same shim): DiNAT-Mini / Tiny / Small / Base
with random weights, DinatForImageClassification forward and a training step (loss.backward,
SGD step, forward again), outputs and gradients compared; DinatModel and DinatBackbone; the
detection of NATTEN by transformers before and after install(), with transformers imported
before or after it. Skips without transformers (the CUDA machine has it)."""
import copy
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import rel_error, torch

if torch is None:
    pytest.skip("torch is not installed", allow_module_level=True)
transformers = pytest.importorskip("transformers")
pytest.importorskip("gna.unfused", reason="gna.unfused (PN / NN operators) missing")

import gna  # noqa: E402
import natten_dense_reference as ref  # noqa: E402
from gna.bench.dinat import VARIANTS, dinat_config  # noqa: E402
from gna.compat import natten_shim  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# On a CPU the float64-accumulating reference is slow: the smallest model only.
SIZES = list(VARIANTS) if DEVICE == "cuda" else ["mini"]
BATCH = 2
GNA_BACKEND = "gna.compat.natten"


def _real_natten():
    natten_shim.uninstall()
    return importlib.util.find_spec("natten") is not None


@pytest.fixture(autouse=True)
def clean_shim():
    yield
    natten_shim.uninstall()


def _use(backend):
    natten_shim.install(backend=None if backend == "gna" else ref.LegacyBackend)
    expected = GNA_BACKEND if backend == "gna" else ref.LegacyBackend.__name__
    assert natten_shim.status()["backend"] == expected


def _inputs(image=224, labels=10):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, 3, image, image, generator=g).to(DEVICE)
    y = torch.randint(0, labels, (BATCH,), generator=g).to(DEVICE)
    return x, y


def _step(model, backend, x, y, amp):
    """Forward with labels (training mode; drop path seeded), backward, SGD step, and an
    eval-mode forward with the updated weights."""
    _use(backend)
    model.train()
    torch.manual_seed(1234)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        out = model(pixel_values=x, labels=y)
    out.loss.backward()
    grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters()
             if p.grad is not None}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.step()
    opt.zero_grad(set_to_none=True)
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        after = model(pixel_values=x).logits
    return dict(logits=out.logits.detach().float(), loss=out.loss.detach().float(), grads=grads,
                after=after.float())


def _grad_errors(a, b):
    """Relative error of all gradients together and of the rpb gradients together."""
    assert set(a) == set(b), "different parameters got gradients"
    names = sorted(a)
    rpb = [n for n in names if n.endswith(".rpb")]
    assert rpb, "no rpb parameter received a gradient"
    flat = lambda g, ns: torch.cat([g[n].flatten().double().cpu() for n in ns])  # noqa: E731
    return rel_error(flat(a, names), flat(b, names)), rel_error(flat(a, rpb), flat(b, rpb))


def _model(size, **overrides):
    from transformers import DinatForImageClassification
    _use("gna")
    torch.manual_seed(0)
    model = DinatForImageClassification(dinat_config(size, num_labels=10, **overrides))
    # Random biases (transformers initializes them to zero), so that a wrong bias index shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".rpb"):
                p.normal_(0, 0.5)
    return model.to(DEVICE)


@pytest.mark.parametrize("size", SIZES)
def test_dinat_classification_fp32(size):
    model = _model(size)
    x, y = _inputs()
    reference = _step(copy.deepcopy(model), "dense", x, y, amp=False)
    ours = _step(model, "gna", x, y, amp=False)
    state = natten_shim.status()["model_modules"]["transformers.models.dinat.modeling_dinat"]
    assert state == "heads-first" or state.startswith("fixed"), state
    print(f"DiNAT-{size}: attention layout {state}")

    assert rel_error(ours["logits"], reference["logits"]) < 2e-4
    assert abs(ours["loss"].item() - reference["loss"].item()) < 2e-4 * max(
        1.0, abs(reference["loss"].item()))
    all_err, rpb_err = _grad_errors(ours["grads"], reference["grads"])
    assert all_err < 1e-3, f"gradients: relative error {all_err:.3g}"
    assert rpb_err < 1e-3, f"rpb gradients: relative error {rpb_err:.3g}"
    assert rel_error(ours["after"], reference["after"]) < 1e-3


@pytest.mark.skipif(DEVICE != "cuda", reason="float16 autocast needs CUDA")
@pytest.mark.parametrize("size", ["mini", "small"])
def test_dinat_classification_fp16_autocast(size):
    """gna under float16 autocast is as close to the float32 reference as the reference itself
    under float16 autocast (twice its error at most)."""
    model = _model(size)
    x, y = _inputs()
    exact = _step(copy.deepcopy(model), "dense", x, y, amp=False)
    dense16 = _step(copy.deepcopy(model), "dense", x, y, amp=True)
    ours = _step(model, "gna", x, y, amp=True)
    for what in ("logits", "after"):
        ours_err = rel_error(ours[what], exact[what])
        base_err = rel_error(dense16[what], exact[what])
        assert ours_err <= max(2 * base_err, 1e-3), (what, ours_err, base_err)
    ours_all, ours_rpb = _grad_errors(ours["grads"], exact["grads"])
    base_all, base_rpb = _grad_errors(dense16["grads"], exact["grads"])
    assert ours_all <= max(2 * base_all, 1e-3), ("gradients", ours_all, base_all)
    assert ours_rpb <= max(2 * base_rpb, 1e-3), ("rpb gradients", ours_rpb, base_rpb)


def test_dinat_model_and_backbone():
    from transformers import DinatBackbone, DinatModel
    x, _ = _inputs()
    for cls, kwargs in ((DinatModel, {}),
                        (DinatBackbone, dict(out_features=["stage1", "stage2", "stage3",
                                                           "stage4"]))):
        _use("gna")
        torch.manual_seed(0)
        model = cls(dinat_config("mini", **kwargs)).to(DEVICE).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(".rpb"):
                    p.normal_(0, 0.5)
            ours = model(pixel_values=x)
            _use("dense")
            reference = model(pixel_values=x)
        if cls is DinatModel:
            pairs = [(ours.last_hidden_state, reference.last_hidden_state),
                     (ours.pooler_output, reference.pooler_output)]
        else:
            assert len(ours.feature_maps) == 4
            pairs = list(zip(ours.feature_maps, reference.feature_maps))
        for a, b in pairs:
            assert rel_error(a, b) < 2e-4


def test_fused_attention_helper():
    """use_fused_attention: refuses non-zero biases; with drop_rpb the model equals the unfused
    model with zero biases; weights asked for still come from the unfused path."""
    from gna.compat.dinat import use_fused_attention
    model = _model("mini")
    with pytest.raises(ValueError, match="drop_rpb"):
        use_fused_attention(model)
    x, _ = _inputs()
    unfused = copy.deepcopy(model).eval()
    with torch.no_grad():
        for name, p in unfused.named_parameters():
            if name.endswith(".rpb"):
                p.zero_()
    count = use_fused_attention(model, drop_rpb=True)
    assert count == sum(VARIANTS["mini"]["depths"])
    model.eval()
    with torch.no_grad():
        fused_logits = model(pixel_values=x).logits
        expected = unfused(pixel_values=x).logits
        with_weights = model(pixel_values=x, output_attentions=True)
    assert rel_error(fused_logits, expected) < 2e-4
    assert len(with_weights.attentions) == len(VARIANTS["mini"]["depths"])
    assert with_weights.attentions[0].shape[-1] == 49


def test_detection_follows_install():
    if _real_natten():
        pytest.skip("a NATTEN is installed")
    from transformers import DinatModel
    from transformers.utils import is_natten_available
    assert not is_natten_available()
    with pytest.raises(ImportError):
        DinatModel(dinat_config("mini"))
    natten_shim.install()
    assert is_natten_available()
    DinatModel(dinat_config("mini"))
    natten_shim.uninstall()
    assert not is_natten_available()


SCRIPT = textwrap.dedent('''
    import sys
    import torch
    order = sys.argv[1]
    if order == "install first":
        import gna.compat.natten_shim as shim
        shim.install()
    from transformers.models.dinat import modeling_dinat
    from transformers import DinatConfig, DinatForImageClassification
    if order == "transformers first":
        import gna.compat.natten_shim as shim
        shim.install()
    config = DinatConfig(embed_dim=16, depths=[1, 2], num_heads=[2, 4], kernel_size=3,
                         dilations=[[1], [1, 2]], num_labels=3)
    model = DinatForImageClassification(config)
    out = model(pixel_values=torch.randn(2, 3, 64, 64), labels=torch.tensor([0, 2]))
    out.loss.backward()
    assert model.dinat.encoder.levels[0].layers[0].attention.self.rpb.grad is not None
    print("ran:", shim.status()["model_modules"][modeling_dinat.__name__])
''')


@pytest.mark.parametrize("order", ["install first", "transformers first"])
def test_import_order(order):
    """A fresh process: install() before or after importing transformers' DiNAT."""
    if _real_natten():
        pytest.skip("a NATTEN is installed")
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(gna.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [env.get("PYTHONPATH")]
                                                          if p])
    env["CUDA_VISIBLE_DEVICES"] = ""
    result = subprocess.run([sys.executable, "-c", SCRIPT, order], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ran:" in result.stdout
