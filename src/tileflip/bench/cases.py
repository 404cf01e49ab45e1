"""The benchmark's cases: the 2-D shape suites, the named permutes, the random and the wide permute suites.

The random suite's 40 cases are package data (``data/permute-random-cases.json``), written once by
``random_permute_cases(seed=0, count=40)``; the wide suite's (``data/permute-wide-cases.json``) by
``python -m tileflip.bench.wide``. Tests check that each file is its generator's output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources

from tileflip.plan.dtypes import element_size

SUITES = {
    # The foundation's figure: the large square in fp32.
    "square": {"shapes": [(16384, 16384)], "dtypes": ["float32"]},
    "2d": {
        "shapes": [
            (16384, 16384), (8192, 8192), (8192, 8191), (65536, 256), (256, 65536),
            (4096, 128), (2, 100000), (1024, 512), (31, 65),
        ],
        "dtypes": ["int8", "bfloat16", "float32", "float64"],
    },
    "2d-extra": {
        "shapes": [(16384, 16384), (8192, 8191), (65536, 256)],
        "dtypes": ["float8_e4m3fn", "float16", "int32", "complex64"],
    },
}  # fmt: skip
PERMUTE_SUITES = ("permute", "permute-random", "permute-wide")

TILEFLIP_BACKENDS = ["triton", "triton-gather", "cuda-naive", "cuda-tiled", "cuda-tiled-nopad", "cuda-vec", "auto"]
PEERS = ["torch-contiguous", "torch-copy", "torch-compile", "cupy", "xla"]

HOST_SHAPES = [(31, 65), (1024, 512)]  # the host suite's small fp32 transposes

RANDOM_CASES_FILE = "permute-random-cases.json"  # in tileflip.bench's data/
RANDOM_DTYPES = ("bfloat16", "float32", "int8")
WIDE_CASES_FILE = "permute-wide-cases.json"  # in tileflip.bench's data/; written by tileflip.bench.wide


@dataclass(frozen=True)
class Case:
    shape: tuple
    dtype: str
    perm: tuple | None = None  # None: a 2-D transpose; else an N-D permute
    name: str | None = field(default=None, compare=False)  # the wide suite's case name, carried into records

    @property
    def label(self) -> str:
        return f"{'x'.join(map(str, self.shape))} {self.dtype}" + (f" {self.perm}" if self.perm else "")

    @property
    def op(self) -> str:
        return "transpose" if self.perm is None else "permute"

    @property
    def out_shape(self) -> tuple:
        return self.shape[::-1] if self.perm is None else tuple(self.shape[d] for d in self.perm)


PERMUTE_NAMED = [
    Case((8, 4096, 32, 128), "bfloat16", (0, 2, 1, 3)),
    Case((8, 4096, 32, 128), "bfloat16", (0, 3, 2, 1)),
    Case((8, 4096, 32, 128), "bfloat16", (0, 2, 3, 1)),
    Case((64, 256, 56, 56), "float16", (0, 2, 3, 1)),
    Case((64, 56, 56, 256), "float16", (0, 3, 1, 2)),
]


def random_permute_cases(seed: int = 0, count: int = 40) -> list[Case]:
    """Random permutes: ranks 3 to 6, fp32/bf16/int8, every dimension >= 2, 64 to 512 MiB each."""
    import random

    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        rank = rng.randint(3, 6)
        dtype = rng.choice(RANDOM_DTYPES)
        shape = [rng.randint(2, 48) for _ in range(rank)]
        while _numel(shape) * element_size(dtype) < 64 << 20:
            shape[rng.randrange(rank)] *= 2
        perm = list(range(rank))
        while perm == sorted(perm):
            rng.shuffle(perm)
        if _numel(shape) * element_size(dtype) <= 512 << 20:
            cases.append(Case(tuple(shape), dtype, tuple(perm)))
    return cases


def permute_random_cases() -> list[Case]:
    """The random permute suite, read from the package's data file."""
    text = resources.files("tileflip.bench").joinpath("data", RANDOM_CASES_FILE).read_text()
    return [Case(tuple(c["shape"]), c["dtype"], tuple(c["perm"])) for c in json.loads(text)["cases"]]


def permute_wide_cases() -> list[Case]:
    """The wide permute suite (random cases in int8, bf16 and fp32, then model layouts), from its data file."""
    text = resources.files("tileflip.bench").joinpath("data", WIDE_CASES_FILE).read_text()
    return [Case(tuple(c["shape"]), c["dtype"], tuple(c["perm"]), c["name"]) for c in json.loads(text)["cases"]]


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def parse_part(part: str) -> tuple[int, int]:
    """'2/3' -> (2, 3): the second of three interleaved slices of a suite."""
    try:
        k, n = (int(v) for v in part.split("/"))
    except ValueError:
        raise ValueError(f"part: expected K/N such as 2/3, got {part!r}") from None
    if not 1 <= k <= n:
        raise ValueError(f"part: expected K/N with 1 <= K <= N, got {part!r}")
    return k, n


def suite_cases(name: str, part: str | None = None) -> list[Case]:
    """The cases of a suite (``part`` "K/N": every N-th case from the K-th)."""
    if name == "permute":
        cases = list(PERMUTE_NAMED)
    elif name == "permute-random":
        cases = permute_random_cases()
    elif name == "permute-wide":
        cases = permute_wide_cases()
    elif name in SUITES:
        spec = SUITES[name]
        cases = [Case(tuple(s), d) for d in spec["dtypes"] for s in spec["shapes"]]
    else:
        raise ValueError(f"suite: expected one of {sorted(SUITES) + list(PERMUTE_SUITES)}, got {name!r}")
    if part:
        k, n = parse_part(part)
        cases = cases[k - 1 :: n]
    return cases
