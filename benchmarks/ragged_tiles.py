"""Experiment: 2-D transposes whose input rows are not a whole number of the table's tiles (the random
permute suite's ``transpose2d`` cases, e.g. int8 217600 x 384 under session 10's 128 x 256 skinny tile:
every second column of tiles half masked; fp32 89600 x 288 under 64 x 64). Times the table's
configuration against every tuning candidate whose block_n divides N (no masked column of tiles), in
every order and form the tuning sweep has, each against a same-run copy; checks each result's bits
(``tileflip.tune._measure``, the tuning sweep's own measurement).

``python benchmarks/ragged_tiles.py OUT.json`` (GPU). Prints one line per configuration, best first.
"""

import json
import sys

import torch

from tileflip import tuning
from tileflip.bench import Case, _make_input, _meta
from tileflip.tune import _measure, candidates

# (M, N) of the input view, element size: the random suite's transpose2d cases (bench.random_permute_cases)
SHAPES = [((217600, 384), 1), ((89600, 288), 4), ((47872, 1056), 2)]
DTYPE = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


def main(out_path: str) -> None:
    rows = []
    for (M, N), es in SHAPES:
        x = _make_input(Case((M, N), DTYPE[es]))
        out = torch.empty((N, M), dtype=x.dtype, device="cuda")
        src = torch.empty(x.numel() * es, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        table = tuning.triton_config(es, (M, N), N)
        configs = [table] + [c for c in candidates(es) if N % c.block_n == 0]
        about = dict(_meta(), element_size=es, shape=[M, N])
        mine = [dict(_measure(x, out, src, dst, config, about, log=lambda _: None), table=config == table)
                for config in dict.fromkeys(configs)]  # fmt: skip
        for r in sorted(mine, key=lambda r: -r["fraction_of_copy"]):
            print(f"{es} B {M}x{N} {r['config']}: {r['fraction_of_copy']:.3f}{' (table)' if r['table'] else ''}",
                  flush=True)  # fmt: skip
        rows += mine
    json.dump(rows, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
