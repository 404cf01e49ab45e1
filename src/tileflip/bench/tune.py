"""Measure Triton tile configurations on the GPU and choose the tuning table ``tileflip.tuning`` reads.

``tileflip bench --suite tune`` times every candidate configuration on the representative shapes of
each (element size, shape class) against a same-run copy of the same bytes, and writes the measurements
and the chosen table as the ``tune`` results file; ``--write`` also merges the choice into the
committed table (``src/tileflip/data/``), which tileflip reads rather than measuring at run time.
"""

from __future__ import annotations

import json

from tileflip import tuning
from tileflip.bench import records as rec

# Representative shapes per class of tuning.triton_config. Thin shapes (a side under 64, under 16 when
# launch-bound) take tuning.thin_config, derived from the short side, and are not swept.
REPRESENTATIVE = {
    "large": [(16384, 16384), (8192, 8192)],
    "skinny": [(256, 65536), (65536, 256)],  # a column of tiles spans the short side
    "unaligned": [(8192, 8191)],  # rows not 16-aligned: scalar loads
    "tiny": [(1024, 512), (4096, 128), (31, 65)],  # launch-bound: fewer, smaller programs may win
}


# Shapes swept for one element size only: int8 217600 x 384 (the random permute suite's (80,68,40,384) by
# (3,0,1,2)) has rows of one and a half 256-wide tiles, which the int8 skinny tile has been.
EXTRA = {(1, "skinny"): [(217600, 384)]}


def representative(element_size: int, cls: str) -> list[tuple]:
    """The shapes a class is swept on for an element size."""
    return REPRESENTATIVE[cls] + EXTRA.get((element_size, cls), [])


def candidates(element_size: int) -> list[tuning.TileConfig]:
    """Tiles and warps, each in column order (``group_m=0``) and in row order (``group_m=1``) with
    ``tl.trans``, and in column order with the tile in the output's orientation (``out_tile=1``); tiles of
    up to 4096 elements also in torch.compile's form: column order on a 2-D grid (``group_m=-1``), the
    output's orientation and ``evict_last`` loads."""
    tiles = [(32, 32), (64, 64), (32, 128), (128, 32), (64, 128), (128, 64), (128, 128), (64, 256), (256, 64),
             (128, 256), (256, 128), (32, 256), (256, 32)]  # fmt: skip
    out = []
    for bm, bn in tiles:
        if bm * bn * element_size > 64 * 1024:  # the staging buffer of tl.trans must fit shared memory
            continue
        warps = (4, 8) if bm * bn <= 4096 else (8, 16)
        for w in warps:
            out += [tuning.TileConfig(bm, bn, w, 0), tuning.TileConfig(bm, bn, w, 1),
                    tuning.TileConfig(bm, bn, w, 0, out_tile=1)]  # fmt: skip
            if bm * bn <= 4096:
                out.append(tuning.TileConfig(bm, bn, w, -1, 1, 0, 1, 1))
    return out


def _measure(x, out, src, dst, config, about: dict, log) -> dict:
    """One configuration on one shape: its time and a same-run copy's, checked exact (on an output
    poisoned first: ``out`` may hold an earlier configuration's result)."""
    import torch

    from tileflip.kernels.triton import transpose as triton_transpose

    out.view(-1).view(torch.uint8).fill_(0xA5)
    triton_transpose.launch(x, out, config)
    assert torch.equal(out, x.t()), f"wrong result for {config} on {about['shape']}"
    copy_ms = rec.time_ms(lambda: dst.copy_(src), True)[0]
    ms = rec.time_ms(lambda: triton_transpose.launch(x, out, config), True)[0]
    row = dict(about, config=list(config), ms=ms, copy_ms=copy_ms, fraction_of_copy=copy_ms / ms,
               gbps=2 * x.numel() * x.element_size() / ms / 1e6)  # fmt: skip
    log(f"{about['element_size']} B {about['shape']} {row['config']}: {row['fraction_of_copy']:.1%}")
    return row


def sweep(element_sizes, log, classes=None) -> list[dict]:
    """Every candidate on every representative shape of ``classes`` (default: all) per element size."""
    import torch

    dtype_of = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}
    meta = rec.meta()
    rows = []
    for es in element_sizes:
        for cls in REPRESENTATIVE:
            if classes and cls not in classes:
                continue
            for shape in representative(es, cls):
                x = rec.make_input(shape, dtype_of[es])
                out = torch.empty(shape[::-1], dtype=x.dtype, device="cuda")
                src = torch.empty(x.numel() * es, dtype=torch.uint8, device="cuda")
                dst = torch.empty_like(src)
                about = dict(meta, element_size=es, shape_class=cls, shape=list(shape))
                mine = [_measure(x, out, src, dst, config, about, log) for config in candidates(es)]
                # Second pass over the three best: every tile masked (fewer registers), and programs in
                # bands of 8 tile rows.
                best = [tuning.TileConfig(*r["config"]) for r in sorted(mine, key=lambda r: -r["fraction_of_copy"])[:3]]
                seen = {tuple(r["config"]) for r in mine}
                variants = [c._replace(interior=0) for c in best] + [c._replace(group_m=8) for c in best]
                variants = [v for v in dict.fromkeys(variants) if tuple(v) not in seen]
                mine += [_measure(x, out, src, dst, variant, about, log) for variant in variants]
                rows += mine
                del x, out, src, dst
                torch.cuda.empty_cache()
    return rows


def choose(rows: list[dict]) -> dict:
    """For each (element size, class): the configuration with the best geometric-mean fraction of copy."""
    table = {}
    for es in sorted({r["element_size"] for r in rows}):
        for cls in REPRESENTATIVE:
            mine = [r for r in rows if r["element_size"] == es and r["shape_class"] == cls]
            by_config: dict = {}
            for r in mine:
                by_config.setdefault(tuple(r["config"]), {})[tuple(r["shape"])] = r["fraction_of_copy"]
            shapes = {tuple(s) for s in representative(es, cls)}
            # Only configurations measured on every representative shape of the class compete.
            scored = {c: _geomean(list(v.values())) for c, v in by_config.items() if set(v) == shapes}
            if not scored:
                continue
            best = max(scored, key=scored.get)
            table[f"{es}:{cls}"] = {"config": list(best), "fraction_of_copy": round(scored[best], 4)}
    return table


def _geomean(values):
    prod = 1.0
    for v in values:
        prod *= v
    return prod ** (1 / len(values))


def auto_from_bench(records: list[dict]) -> dict:
    """For each (element size, shape class) of a ``tileflip bench`` run: the tileflip backend whose worst
    ratio to the best tileflip backend over the class's cases is highest."""
    from tileflip.plan.dtypes import element_size

    med = rec.medians([r for r in records if r["op"] in ("copy", "transpose")])
    candidates = ["triton", "triton-gather", "cuda-naive", "cuda-tiled", "cuda-tiled-nopad", "cuda-vec"]
    classes: dict = {}
    for (shape, dtype, backend), (ms, _, _) in med.items():
        if backend in candidates:
            es = element_size(dtype)
            key = f"{es}:{tuning.shape_class(shape[0], shape[1], es, shape[1])}"  # bench inputs are contiguous
            classes.setdefault(key, {}).setdefault((shape, dtype), {})[backend] = ms
    table = {}
    for key, cases in classes.items():

        def worst(b):
            return min(min(t.values()) / t[b] if b in t else 0.0 for t in cases.values())

        best = max(candidates, key=worst)
        table[key] = best
    return table


def write_table(path, *, triton=None, auto=None, source: str = "", source_key: str = "") -> dict:
    """Merge measured entries into the committed table file (``source`` says which run they come from,
    recorded under ``source_key``, by default ``triton`` or ``auto``)."""
    from pathlib import Path

    path = Path(path)
    data = json.loads(path.read_text()) if path.exists() else {"triton": {}, "auto": {}}
    if triton:
        data["triton"].update(triton)
    if auto:
        data["auto"].update(auto)
    if source:
        data.setdefault("sources", {})[source_key or ("triton" if triton else "auto")] = source
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data


def run(*, sizes: list[int], classes: list[str], out_dir, command: str, table_file, write: bool,
        log=print) -> list[str]:  # fmt: skip
    """Sweep, write the ``tune`` results file (a sweep of some sizes or classes merges into it, replacing
    their rows) and, with ``write``, merge the chosen tiles into ``table_file``; returns the paths written."""
    unknown = [c for c in classes if c not in REPRESENTATIVE]
    if unknown:
        raise ValueError(f"classes: unknown class(es) {unknown}; known: {sorted(REPRESENTATIVE)}")
    rows = sweep(sizes, log=log, classes=classes)
    meta = rec.meta()
    device = rec.device_label(meta["gpu"])
    chosen = choose(rows)
    table, measurements = chosen, rows
    path = rec.results_path(out_dir, device, "tune")
    if (classes or set(sizes) != {1, 2, 4, 8}) and path.exists():  # a partial sweep: merged into the file
        old = json.loads(path.read_text())
        swept = {(r["element_size"], r["shape_class"]) for r in rows}
        kept = [r for r in old.get("measurements", []) if (r["element_size"], r["shape_class"]) not in swept]
        table, measurements = {**old.get("table", {}), **chosen}, kept + rows
    path = rec.write_results(None, "tune", out_dir, command, device=device, gpu=meta["gpu"],
                             extra={"meta": meta, "table": table, "measurements": measurements})
    written = [str(path)]
    if write and chosen:
        key = "triton" + (f" {','.join(classes)}" if classes else "")
        write_table(table_file, triton=chosen, source_key=key,
                    source=f"{command} on an {meta['gpu']}, {meta['time']} ({path})")
        written.append(str(table_file))
    print(json.dumps(chosen, indent=1))
    return written


def run_auto_from(bench_file, *, table_file, command: str) -> dict:
    """Derive the ``auto`` table from a 2-D suite's results file and merge it into ``table_file``."""
    auto = auto_from_bench(rec.load_records(bench_file, "--auto-from"))
    write_table(table_file, auto=auto, source=f"{command} ({bench_file})")
    print(json.dumps(auto, indent=1))
    return auto
