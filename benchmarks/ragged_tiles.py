"""Experiment: 2-D transposes whose input rows are not a whole number of the table's tiles (the random
permute suite's ``transpose2d`` cases, e.g. int8 217600 x 384 under session 10's 128 x 256 skinny tile:
every second column of tiles half masked; fp32 89600 x 288 under 64 x 64). Times the table's
configuration against every tuning candidate whose block_n divides N (no masked column of tiles), in
every order and form the tuning sweep has, each against a same-run copy; checks each result's bits
(``tileflip.tune._measure``, the tuning sweep's own measurement). Each shape also times torch.compile's
``x.t().contiguous()`` against the same copy, and prints the configuration its autotuner chose.

``python benchmarks/ragged_tiles.py OUT.json`` (GPU). Prints one line per configuration, best first.
``RAGGED_SHAPES="89600x288:4 65536x256:4"`` (M x N : element size) replaces the shapes;
``RAGGED_CONFIGS="256,16,8,-1,1,0,1,1 ..."`` (``tuning.TileConfig`` fields) replaces the candidates;
``RAGGED_ROUNDS`` (default 1) repeats the whole set, interleaved.
"""

import json
import os
import sys

import torch

from tileflip import tuning
from tileflip.bench import Case, _make_input, _meta, _time
from tileflip.tune import _measure, candidates

# (M, N) of the input view, element size: the random suite's transpose2d cases (bench.random_permute_cases)
SHAPES = [((217600, 384), 1), ((89600, 288), 4), ((47872, 1056), 2)]
DTYPE = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


def _shapes() -> list:
    spec = os.environ.get("RAGGED_SHAPES")
    if not spec:
        return SHAPES
    out = []
    for item in spec.split():
        shape, es = item.split(":")
        out.append((tuple(int(v) for v in shape.split("x")), int(es)))
    return out


def _configs(es: int, N: int, table) -> list:
    spec = os.environ.get("RAGGED_CONFIGS")
    if spec:
        given = [tuning.TileConfig(*(int(v) for v in c.split(","))) for c in spec.split()]
        return [table] + given
    return [table] + [c for c in candidates(es) if N % c.block_n == 0]


def inductor_choice() -> list:
    """The configurations inductor's autotuner kept, from the modules it has loaded (also printed by
    ``inductor_code.py``)."""
    from torch._inductor.codecache import PyCodeCache

    found = []
    for module in list(PyCodeCache.modules):
        for name in dir(module):
            kernel = getattr(module, name)
            for launcher in getattr(kernel, "launchers", None) or ():
                found.append(f"{name} (size hints {getattr(kernel, 'size_hints', '?')}): {launcher.config}")
    return found


def _compile_row(x, src, dst, about) -> dict:
    torch._dynamo.reset()
    fn = torch.compile(lambda t: t.t().contiguous(), dynamic=False)
    y = fn(x)
    assert torch.equal(y, x.t()), f"torch.compile wrong on {about['shape']}"
    choice = inductor_choice()
    copy_ms = _time(lambda: dst.copy_(src), True)[0]
    ms = _time(lambda: fn(x), True)[0]
    return dict(about, config="torch.compile", inductor=choice, ms=ms, copy_ms=copy_ms,
                fraction_of_copy=copy_ms / ms, gbps=2 * x.numel() * x.element_size() / ms / 1e6, table=False)


def main(out_path: str) -> None:
    rows = []
    for rnd in range(int(os.environ.get("RAGGED_ROUNDS", "1"))):
        for (M, N), es in _shapes():
            x = _make_input(Case((M, N), DTYPE[es]))
            out = torch.empty((N, M), dtype=x.dtype, device="cuda")
            src = torch.empty(x.numel() * es, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            table = tuning.triton_config(es, (M, N), N)
            about = dict(_meta(), element_size=es, shape=[M, N], round=rnd)
            mine = [dict(_measure(x, out, src, dst, config, about, log=lambda _: None), table=config == table)
                    for config in dict.fromkeys(_configs(es, N, table))]  # fmt: skip
            mine.append(_compile_row(x, src, dst, about))
            print(f"round {rnd} torch.compile chose: {mine[-1]['inductor']}", flush=True)
            for r in sorted(mine, key=lambda r: -r["fraction_of_copy"]):
                print(f"{es} B {M}x{N} {r['config']}: {r['fraction_of_copy']:.3f}{' (table)' if r['table'] else ''}",
                      flush=True)  # fmt: skip
            rows += mine
    json.dump(rows, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
