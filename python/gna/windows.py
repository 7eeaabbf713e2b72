"""gna.Window: one attention window as a value (GNA parameters, Sliding Tile Attention by its own
parameters, or the whole layout), resolved to GNA's per-axis rule for a given layout.

Windows are values (equal and hashed by their parameters; treat them as immutable), have a cost
(keys per query) and round-trip through plain dicts (JSON).
"""
from . import functional

__all__ = ["Window", "as_window"]

_KINDS = ("gna", "sta", "dense")


def _freeze(name, value):
    """An int, a bool or a tuple of them (lists become tuples), as given."""
    if isinstance(value, (list, tuple)):
        return tuple(value)
    if isinstance(value, (int, bool)):
        return value
    raise ValueError(f"Window: {name} must be an int or a tuple of ints, got {value!r}")


class Window:
    """One attention window.

    Window(kernel_size, stride=1, dilation=1, is_causal=False): GNA (ints for every axis or one
    per axis, as in gna.na3d). Window.sta(tile_shape, window_tiles): Sliding Tile Attention
    (window in tiles, odd per axis). Window.dense(): every token of the layout (full attention).
    """

    def __init__(self, kernel_size, stride=1, dilation=1, is_causal=False):
        self._set("gna", kernel_size=_freeze("kernel_size", kernel_size),
                  stride=_freeze("stride", stride), dilation=_freeze("dilation", dilation),
                  is_causal=_freeze("is_causal", is_causal))

    def _set(self, kind, kernel_size=None, stride=1, dilation=1, is_causal=False,
             tile_shape=None, window_tiles=None):
        self.kind, self.kernel_size, self.stride, self.dilation = kind, kernel_size, stride, dilation
        self.is_causal, self.tile_shape, self.window_tiles = is_causal, tile_shape, window_tiles

    @classmethod
    def sta(cls, tile_shape, window_tiles):
        w = cls.__new__(cls)
        w._set("sta", tile_shape=_freeze("tile_shape", tile_shape),
               window_tiles=_freeze("window_tiles", window_tiles))
        return w

    @classmethod
    def dense(cls):
        w = cls.__new__(cls)
        w._set("dense")
        return w

    def _key(self):
        return (self.kind, self.kernel_size, self.stride, self.dilation, self.is_causal,
                self.tile_shape, self.window_tiles)

    def __eq__(self, other):
        return isinstance(other, Window) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        if self.kind == "dense":
            return "Window.dense()"
        if self.kind == "sta":
            return f"Window.sta(tile_shape={self.tile_shape!r}, window_tiles={self.window_tiles!r})"
        extra = "".join(f", {n}={getattr(self, n)!r}" for n, d in
                        (("stride", 1), ("dilation", 1), ("is_causal", False))
                        if getattr(self, n) != d)
        return f"Window({self.kernel_size!r}{extra})"

    def resolve(self, extent):
        """GNA's (window, stride, dilation, is_causal) lists for a layout `extent` (one int per
        axis); STA's equivalence comes from the core (gna_sta_params)."""
        extent = tuple(int(e) for e in extent)
        rank = len(extent)
        if self.kind == "dense":
            return list(extent), [1] * rank, [1] * rank, [False] * rank
        if self.kind == "sta":
            tile = functional._per_axis("tile_shape", self.tile_shape, rank, "Window.sta", int)
            tiles = functional._per_axis("window_tiles", self.window_tiles, rank, "Window.sta",
                                         int)
            window, stride = functional._sta_rule(extent, tuple(tile),
                                                  tuple(t * w for t, w in zip(tile, tiles)))
            return list(window), list(stride), [1] * rank, [False] * rank
        window, stride, dilation, causal, _ = functional._rule(
            "Window", rank, self.kernel_size, self.stride, self.dilation, self.is_causal, None)
        return window, stride, dilation, causal

    def keys_per_query(self, extent):
        """Keys a (non-causal) query attends on the layout: the window's cost."""
        count = 1
        for w in self.resolve(extent)[0]:
            count *= w
        return count

    def to_dict(self):
        if self.kind == "dense":
            return {"kind": "dense"}
        if self.kind == "sta":
            return {"kind": "sta", "tile_shape": _jsonable(self.tile_shape),
                    "window_tiles": _jsonable(self.window_tiles)}
        return {"kind": "gna", "kernel_size": _jsonable(self.kernel_size),
                "stride": _jsonable(self.stride), "dilation": _jsonable(self.dilation),
                "is_causal": _jsonable(self.is_causal)}

    @classmethod
    def from_dict(cls, data):
        if not isinstance(data, dict) or data.get("kind") not in _KINDS:
            raise ValueError(f"Window.from_dict: expected a dict with kind one of {_KINDS}, "
                             f"got {data!r}")
        kind = data["kind"]
        if kind == "dense":
            return cls.dense()
        if kind == "sta":
            return cls.sta(data["tile_shape"], data["window_tiles"])
        return cls(data["kernel_size"], data.get("stride", 1), data.get("dilation", 1),
                   data.get("is_causal", False))


def _jsonable(value):
    return list(value) if isinstance(value, tuple) else value


def as_window(value, name="windows"):
    """A Window from a Window, None (dense) or a kernel size (int or tuple)."""
    if isinstance(value, Window):
        return value
    if value is None:
        return Window.dense()
    if isinstance(value, (int, tuple, list)) and not isinstance(value, bool):
        return Window(value)
    raise ValueError(f"{name}: expected a gna.Window, a kernel size or None, got {value!r}")
