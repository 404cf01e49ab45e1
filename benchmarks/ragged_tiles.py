"""Experiment: 2-D transposes whose input rows are not a whole number of the table's tiles (the random
permute suite's ``transpose2d`` cases, e.g. int8 217600 x 384 under a 128 x 256 tile: every second
column of tiles is half masked). Times the table's configuration against every tuning candidate whose
block_n divides N (no masked column of tiles), in column and row order, each against a same-run copy;
checks each result's bits.

``python benchmarks/ragged_tiles.py OUT.json`` (GPU). Prints one line per configuration, best first.
"""

import json
import sys

import torch

from tileflip import tuning
from tileflip.bench import Case, _make_input, _meta, _time
from tileflip.kernels import triton_transpose
from tileflip.tune import candidates

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
        configs = [table] + [c for c in candidates(es) if N % c.block_n == 0 and c.group_m in (0, 1) and not c.out_tile]
        mine = []
        for config in dict.fromkeys(configs):
            out.fill_(0)
            triton_transpose.launch(x, out, config)
            exact = torch.equal(out, x.t())
            copy_ms = _time(lambda: dst.copy_(src), True)[0]
            ms = _time(lambda c=config: triton_transpose.launch(x, out, c), True)[0]
            mine.append(dict(_meta(), shape=[M, N], element_size=es, config=list(config), table=config == table,
                             ms=ms, copy_ms=copy_ms, fraction_of_copy=copy_ms / ms, exact=exact))  # fmt: skip
        for r in sorted(mine, key=lambda r: -r["fraction_of_copy"]):
            mark = " (table)" if r["table"] else ""
            print(f"{es} B {M}x{N} {r['config']}: {r['fraction_of_copy']:.3f}{mark}{'' if r['exact'] else ' WRONG'}",
                  flush=True)  # fmt: skip
        rows += mine
    json.dump(rows, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
