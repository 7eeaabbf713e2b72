"""Window search (Sliding Tile Attention's mask search, STA Algorithm 1): for every
(layer, head), the candidate window whose output is closest (mean squared error) to full
attention, averaged over calibration inputs.

It runs through the GnaAttentionProcessor modules installed in a model: while a WindowSearch is
active they return dense attention (so the model follows its full-attention trajectory) and
record, per head, each candidate's squared error on the visual queries. Calls inside
gna.dense_attention() (the dense first steps) are not recorded. The result, a WindowPlan, is
saved and loaded as JSON and applied to the model's processors.
"""
import json

import torch

from .processor import GnaAttentionProcessor, dense_attention
from .windows import Window, as_window

__all__ = ["WindowSearch", "WindowPlan", "search_windows"]

_FORMAT = "gna.window_plan"
_VERSION = 1


def _processors(model, modules, fn):
    found = {name: m for name, m in model.named_modules() if isinstance(m, GnaAttentionProcessor)}
    if modules is None:
        if not found:
            raise ValueError(f"{fn}: the model has no GnaAttentionProcessor (install them with "
                             f"gna.install_processors), got none")
        return found
    missing = [n for n in modules if n not in found]
    if missing:
        raise ValueError(f"{fn}: modules must name GnaAttentionProcessor modules of the model, "
                         f"got {missing}")
    return {n: found[n] for n in modules}


class _Stats:
    """Per processor: summed per-head squared error of each candidate, summed per-head power
    of the dense output (visual queries), and the number of recorded calls."""

    def __init__(self, count):
        self.error = [None] * count
        self.power = None
        self.calls = 0

    def add(self, index, value):
        self.error[index] = value if self.error[index] is None else self.error[index] + value


class WindowSearch:
    """Records candidate windows' errors in the model's processors while active:

        with gna.WindowSearch(model, candidates) as search, torch.no_grad():
            for x in calibration_inputs:
                model(x)
        plan = search.plan(threshold=1e-3)

    candidates: gna.Window values (kernel sizes are taken as windows); modules: qualified names
    of the processors to search (default: every GnaAttentionProcessor of the model).
    """

    def __init__(self, model, candidates, modules=None):
        self.candidates = [as_window(c, f"candidates[{i}]") for i, c in enumerate(candidates)]
        if not self.candidates or len(set(self.candidates)) != len(self.candidates):
            raise ValueError(f"WindowSearch: candidates must be distinct windows, at least one, "
                             f"got {candidates!r}")
        self.processors = _processors(model, modules, "WindowSearch")
        self.stats = {name: _Stats(len(self.candidates)) for name in self.processors}
        self._names = {id(p): n for n, p in self.processors.items()}
        self._saved = {}

    def __enter__(self):
        for name, p in self.processors.items():
            self._saved[name] = (p.mode, p.observer)
            p.mode, p.observer = "search", self._observe
        return self

    def __exit__(self, *exc):
        for name, p in self.processors.items():
            p.mode, p.observer = self._saved.pop(name)
        return False

    def _observe(self, processor, query, key, value, text_lengths):
        dense = processor.dense(query, key, value, text_lengths)
        stats = self.stats[self._names[id(processor)]]
        visual = _visual(dense, processor).double()
        with torch.no_grad():
            power = (visual ** 2).mean(dim=(0, 1, 3))
            stats.power = power if stats.power is None else stats.power + power
            for i, window in enumerate(self.candidates):
                out = processor.sparse(query, key, value, text_lengths, window)
                stats.add(i, ((_visual(out, processor).double() - visual) ** 2)
                          .mean(dim=(0, 1, 3)))
            stats.calls += 1
        return dense

    def relative_errors(self):
        """{name: [[error / power per candidate] per head]} over the recorded calls."""
        out = {}
        for name, stats in self.stats.items():
            if stats.calls == 0:
                raise ValueError(f"WindowSearch: no call of {name!r} was recorded (dense steps "
                                 f"are not); run calibration inputs first")
            power = stats.power.clamp_min(torch.finfo(torch.float64).tiny)
            table = torch.stack([e / power for e in stats.error], dim=1)  # [heads, candidates]
            out[name] = table.cpu().tolist()
        return out

    def plan(self, threshold=0.0):
        """Per (layer, head): among the candidates whose relative error is at most the best
        one's plus `threshold`, the one with the fewest keys per query (0: the closest window,
        ties to the cheaper)."""
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or \
                threshold < 0:
            raise ValueError(f"WindowSearch.plan: threshold must be a non-negative number, got "
                             f"{threshold!r}")
        errors = self.relative_errors()
        layers = {}
        for name, table in errors.items():
            layout = self.processors[name].layout
            cost = [w.keys_per_query(layout) for w in self.candidates]
            by_cost = sorted(range(len(cost)), key=lambda i: cost[i])
            chosen = []
            for row in table:
                best = min(row)
                tie = best * 1e-9 + 1e-15
                pick = next(i for i in by_cost if row[i] <= best + threshold + tie)
                chosen.append(self.candidates[pick])
            layers[name] = chosen
        return WindowPlan(layers, errors, self.candidates)


class WindowPlan:
    """Searched windows: {processor name: [gna.Window per head]}, with the relative errors
    that chose them. JSON through save / load; apply(model) sets the processors' windows."""

    def __init__(self, layers, relative_errors=None, candidates=None):
        self.layers = {name: [as_window(w, f"{name}[{h}]") for h, w in enumerate(ws)]
                       for name, ws in layers.items()}
        self.relative_errors = relative_errors or {}
        self.candidates = list(candidates or [])

    def to_dict(self):
        return {"format": _FORMAT, "version": _VERSION,
                "candidates": [w.to_dict() for w in self.candidates],
                "layers": {n: [w.to_dict() for w in ws] for n, ws in self.layers.items()},
                "relative_errors": self.relative_errors}

    @classmethod
    def from_dict(cls, data):
        if not isinstance(data, dict) or data.get("format") != _FORMAT or \
                data.get("version") != _VERSION:
            got = data.get("format"), data.get("version") if isinstance(data, dict) else data
            raise ValueError(f"WindowPlan: expected format {_FORMAT!r} version {_VERSION}, got "
                             f"{got!r}")
        layers = {n: [Window.from_dict(w) for w in ws] for n, ws in data["layers"].items()}
        return cls(layers, data.get("relative_errors"),
                   [Window.from_dict(w) for w in data.get("candidates", [])])

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            return cls.from_dict(json.load(f))

    def apply(self, model):
        """Sets each named processor's per-head windows and mode "sparse". Returns the names."""
        processors = _processors(model, list(self.layers), "WindowPlan.apply")
        for name, p in processors.items():
            p.windows = list(self.layers[name])
            p.mode = "sparse"
        return list(processors)

    def __eq__(self, other):
        return isinstance(other, WindowPlan) and self.layers == other.layers

    def __repr__(self):
        return f"WindowPlan({len(self.layers)} layers)"


def _visual(out, processor):
    """The visual queries' rows of a joint output [B, S, H, D]."""
    visual = out.shape[1] - processor.text_len
    return out[:, :visual] if processor.text_position == "after" else out[:, -visual:]


def search_windows(model, candidates, calibration_inputs, forward=None, steps=None,
                   dense_steps=0, threshold=0.0, modules=None):
    """STA-style window search over a model's processors; returns a WindowPlan.

    calibration_inputs: an iterable of inputs. forward(model, x) runs one (default: model(*x)
    for a tuple, model(**x) for a dict, model(x) otherwise); with steps=n, forward(model, x,
    step) is called for step 0..n-1 and the first dense_steps steps run dense and are not
    recorded (a sampler's state can live in the forward function). Runs without gradients.
    threshold: see WindowSearch.plan.
    """
    if steps is None and dense_steps:
        raise ValueError(f"search_windows: dense_steps needs steps, got dense_steps="
                         f"{dense_steps!r} and steps=None")
    run = forward or _call
    with WindowSearch(model, candidates, modules) as search, torch.no_grad():
        for x in calibration_inputs:
            if steps is None:
                run(model, x)
                continue
            for step in range(steps):
                with dense_attention(step < dense_steps):
                    run(model, x, step)
    return search.plan(threshold)


def _call(model, x, *step):
    if step:
        raise ValueError("search_windows: steps needs a forward(model, x, step) function")
    if isinstance(x, tuple):
        return model(*x)
    if isinstance(x, dict):
        return model(**x)
    return model(x)
