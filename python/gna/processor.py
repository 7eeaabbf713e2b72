"""The attention a DiT calls, as a module the user installs in place of its own attention:
gna.GnaAttentionProcessor runs joint attention with its window (one per head, or one for all),
dense attention, or the window search; gna.dense_attention() switches every processor to dense
for a block of code (the first diffusion steps); gna.install_processors puts processors in
place of a model's attention modules without editing the model's code."""
import contextlib

from torch import nn

from .fp8 import check_precision
from .joint import _check_position, _layout, dense_joint_attention, joint_attention

__all__ = ["GnaAttentionProcessor", "dense_attention", "dense_forced", "install_processors"]

_MODES = ("sparse", "dense", "search")
_force_dense = False


@contextlib.contextmanager
def dense_attention(enabled=True):
    """Within the block, every GnaAttentionProcessor runs dense attention (when `enabled`):

        for step in range(steps):
            with gna.dense_attention(step < dense_steps):
                x = sampler.step(model(x, t[step]), x, step)
    """
    global _force_dense
    previous = _force_dense
    _force_dense = previous or bool(enabled)
    try:
        yield
    finally:
        _force_dense = previous


def dense_forced():
    """True inside an enabled gna.dense_attention() block."""
    return _force_dense


class GnaAttentionProcessor(nn.Module):
    """Joint (or visual-only) attention of one layer, called as processor(q, k, v) on
    [B, S, H, D] tensors with S = prod(layout) + text_len.

    layout: the visual tokens' shape, e.g. (T, H, W). windows: a gna.Window for every head, a
    list of one per head (per-head windows), or None (dense until a plan is applied). text_len,
    text_position, scale: as in gna.joint_attention. mode: "sparse" (the windows), "dense"
    (PyTorch SDPA over every valid token) or "search" (dense output, while a gna.WindowSearch
    records each candidate window's error). Inside gna.dense_attention() every mode runs dense.
    precision: "auto" or "fp8" (the sparse mode's neighborhood attention in FP8, as in
    gna.joint_attention; inference only).
    """

    def __init__(self, layout, windows=None, text_len=0, text_position="after", scale=None,
                 mode="sparse", backend="auto", precision="auto"):
        super().__init__()
        self.layout = _layout("GnaAttentionProcessor", layout)
        _check_position("GnaAttentionProcessor", text_position)
        if isinstance(text_len, bool) or not isinstance(text_len, int) or text_len < 0:
            raise ValueError(f"GnaAttentionProcessor: text_len must be a non-negative int, got "
                             f"{text_len!r}")
        self.text_len = text_len
        self.text_position = text_position
        self.scale = scale
        self.backend = backend
        check_precision("GnaAttentionProcessor", precision)
        self.precision = precision
        self.windows = windows
        self.mode = mode
        self.observer = None  # set by gna.WindowSearch while it runs

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, value):
        if value not in _MODES:
            raise ValueError(f"GnaAttentionProcessor: mode must be one of {_MODES}, got "
                             f"{value!r}")
        self._mode = value

    def forward(self, query, key, value, text_lengths=None):
        if _force_dense or self._mode == "dense":
            return self.dense(query, key, value, text_lengths)
        if self._mode == "search":
            if self.observer is None:
                raise ValueError("GnaAttentionProcessor: mode 'search' needs a running "
                                 "gna.WindowSearch, got none")
            return self.observer(self, query, key, value, text_lengths)
        if self.windows is None:
            return self.dense(query, key, value, text_lengths)
        return self.sparse(query, key, value, text_lengths, self.windows)

    def dense(self, query, key, value, text_lengths=None):
        return dense_joint_attention(query, key, value, self.text_len, text_lengths,
                                     self.text_position, self.scale)

    def sparse(self, query, key, value, text_lengths, windows):
        return joint_attention(query, key, value, self.layout, windows=windows,
                               text_len=self.text_len, text_lengths=text_lengths,
                               text_position=self.text_position, scale=self.scale,
                               backend=self.backend, precision=self.precision)

    def extra_repr(self):
        if self.windows is None:
            windows = "dense"
        elif isinstance(self.windows, list):
            distinct = []
            for w in self.windows:
                if w not in distinct:
                    distinct.append(w)
            windows = ", ".join(f"{w} x{self.windows.count(w)}" for w in distinct)
        else:
            windows = repr(self.windows)
        return (f"layout={self.layout}, text_len={self.text_len}, text_position="
                f"{self.text_position!r}, mode={self._mode!r}, windows=[{windows}]")


def install_processors(model, match, factory):
    """Replaces the submodules of `model` that `match` selects by factory(name, module) (e.g. a
    GnaAttentionProcessor), in place. match: a module class, a list of qualified names, or a
    callable (name, module) -> bool. Returns the replaced names."""
    if isinstance(match, type):
        selected = lambda name, module: isinstance(module, match)  # noqa: E731
    elif isinstance(match, (list, tuple, set)):
        names = set(match)
        known = {name for name, _ in model.named_modules()}
        missing = sorted(names - known)
        if missing:
            raise ValueError(f"install_processors: match names modules the model does not "
                             f"have: {missing}")
        selected = lambda name, module: name in names  # noqa: E731
    elif callable(match):
        selected = match
    else:
        raise ValueError(f"install_processors: match must be a class, a list of names or a "
                         f"callable, got {match!r}")
    chosen = [(name, m) for name, m in model.named_modules() if name and selected(name, m)]
    for name, module in chosen:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, factory(name, module))
    return [name for name, _ in chosen]
