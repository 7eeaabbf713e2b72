"""The benchmark's cases, read from the library's case table (include/gna/sim/cases.hpp, the one
gna-kernel-bench and gna-sim's presets read too): token layout, heads, head dim, batch, dtype and
the GNA rule; `tile` is the token tile FlexAttention's tokens are reordered by (tiled token
order)."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str  # the use case (hunyuan, flux4k, nat, ...)
    layout: tuple
    heads: int
    dim: int
    window: tuple
    stride: tuple = None
    batch: int = 1
    dilation: tuple = None
    tile: tuple = None  # None: row-major tokens for FlexAttention
    causal: tuple = None
    dtype: str = "bf16"
    additional_tokens: int = 0
    key: str = None  # the case's name in the table
    sets: tuple = ()

    @property
    def dilations(self):
        return self.dilation or (1,) * self.rank

    @property
    def causals(self):
        return self.causal or (False,) * self.rank

    @property
    def rank(self):
        return len(self.layout)

    @property
    def strides(self):
        return self.stride or (1,) * self.rank

    @property
    def tokens(self):
        n = 1
        for e in self.layout:
            n *= e
        return n

    @property
    def label(self):
        x = "×".join
        s = "" if self.strides == (1,) * self.rank else f" stride {x(map(str, self.strides))}"
        if self.dilations != (1,) * self.rank:
            s += f" dilation {x(map(str, self.dilations))}"
        if any(self.causals):
            s += " causal " + x("c" if c else "-" for c in self.causals)
        b = f", batch {self.batch}" if self.batch > 1 else ""
        t = "" if self.dtype == "bf16" else f" {self.dtype}"
        return (f"{self.name} {x(map(str, self.layout))}{b}, h{self.heads} d{self.dim}{t}, window "
                f"{x(map(str, self.window))}{s}")


def _from_table(c):
    rank = c.rank
    axes = lambda values: tuple(int(v) for v in values[:rank])  # noqa: E731
    tile = axes(c.flex_tile)
    return Case(c.model.decode(), axes(c.extent), c.heads, c.head_dim, axes(c.window),
                stride=axes(c.stride), batch=c.batch, dilation=axes(c.dilation),
                tile=tile if all(tile) else None, causal=tuple(bool(v) for v in c.causal[:rank]),
                dtype=c.dtype.decode(), additional_tokens=c.additional_tokens,
                key=c.name.decode(), sets=tuple(c.sets.decode().split()))


def table():
    """Every case of the library's table, in its order."""
    from gna import _lib
    if not _lib.has_bench_cases:
        raise RuntimeError(f"{_lib.library_path} has no benchmark case table (rebuild it)")
    out = []
    for i in range(_lib.lib.gna_sim_bench_case_count()):
        c = _lib.SimBenchCase()
        _lib.check(_lib.lib.gna_sim_bench_case_at(i, c), _lib.lib.gna_sim_last_error)
        out.append(_from_table(c))
    return out


def in_set(name):
    return [c for c in table() if name in c.sets]


def select(names, quick=False, case_set=None):
    """Cases by name from a set (default: peers; quick: the smoke set): a use case ("hunyuan"),
    its i-th case ("hunyuan:2"), or a case's name in the table ("flux4k 80x80 s16x16", any set);
    the whole set by default."""
    name = case_set or ("quick" if quick else "peers")
    pool = in_set(name)
    if not pool:
        raise ValueError(f"--set: no case in set {name!r} (sets: "
                         f"{sorted({s for c in table() for s in c.sets})})")
    if not names:
        return list(pool)
    every = table()
    chosen = []
    for name in names:
        base, _, index = name.partition(":")
        matches = [c for c in pool if c.name == base]
        exact = [c for c in every if c.key == name]
        if exact and not matches:
            chosen += exact
            continue
        if not matches:
            raise ValueError(f"--cases: unknown case {name!r} (known: "
                             f"{sorted({c.name for c in pool})}, or a case's name in the table)")
        chosen += [matches[int(index) - 1]] if index else matches
    return chosen
