"""The benchmark's use cases (docs/rule.md section 9): token layout, heads, head dim, batch, and the
GNA rule; `tile` is the token tile FlexAttention's tokens are reordered by (tiled token order)."""
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    name: str
    layout: tuple
    heads: int
    dim: int
    window: tuple
    stride: tuple = None
    batch: int = 1
    dilation: tuple = None
    tile: tuple = None  # None: row-major tokens for FlexAttention
    tags: tuple = field(default=())

    @property
    def dilations(self):
        return self.dilation or (1,) * self.rank

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
        b = f", batch {self.batch}" if self.batch > 1 else ""
        return (f"{self.name} {x(map(str, self.layout))}{b}, h{self.heads} d{self.dim}, window "
                f"{x(map(str, self.window))}{s}")


CASES = [
    Case("hunyuan", (30, 48, 80), 24, 128, (18, 24, 24), tile=(2, 8, 8)),
    Case("hunyuan", (30, 48, 80), 24, 128, (18, 24, 24), stride=(16, 8, 8), tile=(2, 8, 8)),
    Case("hunyuan", (30, 48, 80), 24, 128, (30, 40, 40), tile=(2, 8, 8)),
    Case("cosmos", (16, 44, 80), 32, 128, (16, 24, 16), tile=(4, 4, 8)),
    Case("cosmos", (16, 44, 80), 32, 128, (16, 32, 48), tile=(4, 4, 8)),
    Case("wan", (21, 45, 80), 40, 128, (15, 27, 48), tile=(3, 5, 8)),
    Case("flux4k", (256, 256), 24, 128, (80, 80), tile=(16, 8)),
    Case("flux4k", (256, 256), 24, 128, (80, 80), stride=(16, 16), tile=(16, 8)),
    # Image backbones (NAT / DiNAT) and pixel-space diffusion (hourglass DiT): small windows,
    # small head dims, large batches.
    Case("nat", (56, 56), 2, 32, (7, 7), batch=128),
    Case("nat", (28, 28), 4, 32, (7, 7), batch=128),
    Case("nat", (14, 14), 8, 32, (7, 7), batch=128),
    Case("dinat", (56, 56), 2, 32, (7, 7), batch=128, dilation=(8, 8)),
    Case("dinat", (28, 28), 4, 32, (7, 7), batch=128, dilation=(4, 4)),
    Case("hdit", (128, 128), 4, 64, (7, 7), batch=16),
    Case("hdit", (128, 128), 4, 64, (13, 13), batch=16),
    Case("na3d", (16, 32, 32), 4, 64, (7, 7, 7), batch=8),
    Case("long1d", (32768,), 8, 128, (2048,)),
    Case("long1d", (32768,), 8, 128, (2048,), stride=(256,)),
]

# A minute-sized smoke set: small enough for any GPU, every code path of the script.
QUICK = [
    Case("quick2d", (64, 64), 4, 64, (16, 16), tile=(16, 8)),
    Case("quick3d", (8, 16, 32), 4, 128, (4, 8, 8), stride=(2, 4, 4), tile=(2, 8, 8)),
]


def select(names, quick=False):
    """Cases by name ("hunyuan", or "hunyuan:2" for the second hunyuan case); all by default."""
    pool = QUICK if quick else CASES
    if not names:
        return list(pool)
    chosen = []
    for name in names:
        base, _, index = name.partition(":")
        matches = [c for c in pool if c.name == base]
        if not matches:
            raise ValueError(f"--cases: unknown case {name!r} (known: "
                             f"{sorted({c.name for c in pool})})")
        chosen += [matches[int(index) - 1]] if index else matches
    return chosen
