"""``docs/performance.md`` and the README's headline table from the committed results files: the method,
then each suite's medians beside its peers, with its plots. ``python -m tileflip.bench.performance``
rewrites both; a test checks that the committed text is what the files give, so no figure can drift
from its file.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from tileflip.bench.cases import PEERS, TILEFLIP_BACKENDS
from tileflip.bench.quantize import case_name
from tileflip.bench.records import load_results

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "performance.md"
RESULTS = ROOT / "benchmarks" / "results"

# What a reader needs to read a suite's table, beyond the method.
NOTES = {
    "permute-random": "Forty random permutes of ranks 3 to 6 in int8, bf16 and fp32, 64 to 512 MiB each.",
    "permute-wide": "270 random permutes (seeds 1-3, ranks 3 to 6, each in int8, bf16 and fp32, 64 to 512 MiB) "
                    "and 23 layouts from real models, measured in parts (`--part K/N`) merged into one file.",
    "permute-wide-strategies": "tileflip's strategies only, each forced (blank where it cannot take the case), "
                               "beside `auto`'s pick; no peers.",
    "quantize": "Row-wise, column-wise or both outputs; torchao's figure for both is its two kernels back to back. "
                "torch.compile compiles tileflip's plain-torch reference, one static graph a case.",
    "host": "Host time of one call on the CPU, in microseconds, with its parts measured alone.",
    "distributed": "Milliseconds per call on two GPUs over NCCL. `all_to_all_single` is the bare collective on the "
                   "same bytes (`-remote`: only the bytes that cross GPUs), `deepspeed` DeepSpeed's Ulysses "
                   "all-to-all; `tileflip-pack`, `tileflip-unpack` and `tileflip-own` time tileflip's pieces "
                   "alone (the local kernels and the rank's own block). A tileflip call is its pack, the "
                   "collective and its unpack, so it takes longer than the bare collective; design.md "
                   "(Distributed) has the breakdown.",
}

# (folder, suite, title, what one figure is)
SUITES = [
    ("h200", "2d", "2-D transposes", "fraction of copy"),
    ("h200", "square", "Square transposes", "fraction of copy"),
    ("h200", "permute", "Named permutes", "fraction of copy"),
    ("h200", "permute-random", "Random permutes (random seed 0)", "fraction of copy"),
    ("h200", "permute-wide", "Permutes from a wider generator", "fraction of copy"),
    ("h200", "permute-wide-strategies", "Every strategy on the wider generator's permutes", "fraction of copy"),
    ("h100", "permute-wide-strategies", "auto beside the staged permute on the wider generator's permutes",
     "fraction of copy"),
    ("h200", "cast", "fp8 cast-transpose", "fraction of copy"),
    ("h200", "quantize", "Block-scaled quantization", "fraction of copy"),
    ("h200", "host", "Host time per call", "microseconds"),
    ("h200x2", "distributed", "All-to-all transposes on two GPUs", "milliseconds"),
]
ORDER = list(dict.fromkeys(["auto", *TILEFLIP_BACKENDS, "tileflip", *PEERS, "torch-eager", "torchao"]))

METHOD = """\
Every figure is a median over the rounds of one run of `tileflip bench` on the device named, read
from the results file named under its table. Device time comes from CUDA events after an L2 flush,
with launch latency hidden behind a spin kernel. A "fraction of copy" is the operation's bandwidth
over the bytes it must move (each input read once, each output written once) divided by the
bandwidth of a device-to-device copy of the same bytes, timed in the same run and round: 100% is
the copy's speed, above 100% is faster. XLA runs in its own process, timed by wall clock without an
L2 flush; at launch-bound sizes (a few MiB and less) that clock measures XLA's host time, not its
kernel. The results files hold every round, the peers' figures and the provenance (device, date,
command)."""


def _order(backends) -> list[str]:
    known = [b for b in ORDER if b in backends]
    return known + sorted(set(backends) - set(known))


def _shape(key) -> str:
    if isinstance(key[0], tuple):  # a permute: (shape, perm)
        return "(" + ",".join(map(str, key[0])) + ") by (" + ",".join(map(str, key[1])) + ")"
    return "×".join(map(str, key))


def _row_key(r: dict, kind: str) -> tuple:
    shape = tuple(r["shape"]) if not r.get("perm") else (tuple(r["shape"]), tuple(r["perm"]))
    if kind == "quantize":
        return (shape, case_name(r), r["outputs"])
    if kind == "distributed":
        return (shape, r["dtype"], r["op"])
    return (shape, r["dtype"])


def _label(key: tuple, kind: str) -> str:
    if kind == "quantize":
        return f"{_shape(key[0])} bf16, {key[1]}, {key[2]}"
    if kind == "distributed":
        return f"{key[2]} {_shape(key[0])} {key[1]}"
    return f"{_shape(key[0])} {key[1]}"


def table(records: list[dict], kind: str, unit: str) -> list[str]:
    """A markdown table: a row per case, a column per backend, the median figure of each."""
    value = {"microseconds": "us", "milliseconds": "ms"}.get(unit, "fraction_of_copy")
    groups: dict = {}
    for r in records:
        if value in r and "backend" in r and r.get("shape") is not None and r["backend"] != "copy":
            groups.setdefault(_row_key(r, kind), {}).setdefault(r["backend"], []).append(r[value])
    backends = _order({b for cells in groups.values() for b in cells})
    if kind == "host":  # few cases, many measured parts: a row per part
        cases = sorted(groups, key=str)
        lines = ["| call | " + " | ".join(_label(c, kind) for c in cases) + " |", "|" + " --- |" * (len(cases) + 1)]
        for b in backends:
            cells = [f"{statistics.median(groups[c][b]):.1f}" if b in groups[c] else "" for c in cases]
            lines.append(f"| {b} | " + " | ".join(cells) + " |")
        return lines
    lines = ["| case | " + " | ".join(f"`{b}`" for b in backends) + " |", "|" + " --- |" * (len(backends) + 1)]
    for key in sorted(groups, key=lambda k: (str(k[1:]), str(k[0]))):
        cells = []
        for b in backends:
            v = [x for x in groups[key].get(b, []) if x is not None]
            if b not in groups[key]:
                cells.append("")
            elif not v:
                cells.append("n/a")
            elif value == "us":
                cells.append(f"{statistics.median(v):.1f}")
            elif value == "ms":
                cells.append(f"{statistics.median(v):.3f}")
            else:
                cells.append(f"{statistics.median(v):.1%}")
        lines.append(f"| {_label(key, kind)} | " + " | ".join(cells) + " |")
    return lines


def _parts(parts: dict) -> str:
    """The merged parts in order, each with its date where the parts were measured on different days."""
    order = sorted(parts, key=lambda k: tuple(int(v) for v in k.split("/")[::-1]))
    dated = len({parts[k].get("date") for k in order}) > 1
    return ", ".join(f"{k} ({parts[k].get('date')})" if dated else k for k in order)


def render(results: Path = RESULTS) -> str:
    """The whole page, from the results files under ``results``."""
    out = ["# Performance", "", "## Method", "", METHOD, ""]
    for folder, suite, title, unit in SUITES:
        path = results / folder / f"{suite}.json"
        if not path.exists():
            continue
        data = load_results(path, "results file")
        kind = suite if suite in ("quantize", "distributed", "host") else "cases"
        out += [f"## {title}", "", f"Device {data.get('gpu', folder)}, {data.get('date', '')}: "
                f"`{data.get('command', '')}` wrote `benchmarks/results/{folder}/{suite}.json`. "
                f"Each cell: {unit}." + (f" {NOTES[suite]}" if suite in NOTES else "")
                + (f" Parts merged so far: {_parts(data['parts'])}." if data.get("parts") else ""), ""]  # fmt: skip
        out += table(data["records"], kind, unit)
        longer = [f"{other}-" for _, other, _, _ in SUITES if other.startswith(f"{suite}-")]
        plots = sorted(p.name for p in (results / folder).glob(f"{suite}-*.png")
                       if not any(p.name.startswith(o) for o in longer))  # fmt: skip
        if plots:
            out.append("")
            out += [f"![{name}](../benchmarks/results/{folder}/{name})" for name in plots]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# The README's headline rows: (suite, row key as in ``table``, label).
HEADLINE = [
    ("2d", ((16384, 16384), "float32"), "transpose fp32 16384×16384"),
    ("2d", ((16384, 16384), "bfloat16"), "transpose bf16 16384×16384"),
    ("2d", ((16384, 16384), "int8"), "transpose int8 16384×16384"),
    ("2d", ((8192, 8191), "int8"), "transpose int8 8192×8191"),
    ("permute", (((8, 4096, 32, 128), (0, 2, 1, 3)), "bfloat16"), "permute bf16 (8,4096,32,128) by (0,2,1,3)"),
    ("permute", (((64, 256, 56, 56), (0, 2, 3, 1)), "float16"), "permute fp16 NCHW→NHWC (64,256,56,56)"),
    ("cast", ((16384, 16384), "bfloat16"), "fp8 cast-transpose bf16 16384×16384"),
    ("quantize", ((8192, 28672), "fp8_1x128", "rowwise"), "quantize fp8 1×128 row-wise, bf16 8192×28672"),
    ("quantize", ((8192, 28672), "fp8_1x128", "both"), "quantize fp8 1×128 both layouts, bf16 8192×28672"),
    ("quantize", ((8192, 28672), "fp8_128x128", "both"), "quantize fp8 128×128 both layouts, bf16 8192×28672"),
    ("quantize", ((8192, 28672), "nvfp4", "both"), "quantize nvfp4 both layouts, bf16 8192×28672"),
]
README = ROOT / "README.md"
BEGIN = "<!-- headline table: python -m tileflip.bench.performance writes it from the results files -->"
END = "<!-- end of headline table -->"


def _medians(records: list[dict], kind: str) -> dict:
    groups: dict = {}
    for r in records:
        if r.get("fraction_of_copy") is not None and r.get("shape") is not None and r.get("backend") != "copy":
            groups.setdefault(_row_key(r, kind), {}).setdefault(r["backend"], []).append(r["fraction_of_copy"])
    return {k: {b: statistics.median(v) for b, v in cells.items()} for k, cells in groups.items()}


def headline(results: Path = RESULTS) -> str:
    """The README's table: tileflip's figure, torch.compile's and the best other peer's, for a few cases."""
    lines = ["| case | tileflip | torch.compile | best other peer |", "| --- | --- | --- | --- |"]
    loaded: dict = {}
    for suite, key, label in HEADLINE:
        if suite not in loaded:
            kind = "quantize" if suite == "quantize" else "cases"
            loaded[suite] = _medians(load_results(results / "h200" / f"{suite}.json", "results file")["records"], kind)
        cells = loaded[suite][key]
        mine = cells.get("auto", cells.get("tileflip"))
        others = {b: v for b, v in cells.items() if b in (*PEERS, "torch-eager", "torchao") and b != "torch-compile"}
        best = max(others, key=others.get) if others else None
        other = f"{best} {others[best]:.1%}" if best else "none measured"
        lines.append(f"| {label} | {mine:.1%} | {cells['torch-compile']:.1%} | {other} |")
    return "\n".join(lines)


def readme_with_headline(text: str, results: Path = RESULTS) -> str:
    """``text`` (the README) with the block between BEGIN and END replaced by the headline table."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + headline(results) + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--check"]):
        print("usage: python -m tileflip.bench.performance [--check]", file=sys.stderr)
        return 2
    text, readme = render(), readme_with_headline(README.read_text())
    if argv == ["--check"]:
        same = PAGE.exists() and PAGE.read_text() == text and README.read_text() == readme
        print("docs/performance.md and the README's table match the results files" if same
              else "docs/performance.md or the README's table is out of date")  # fmt: skip
        return 0 if same else 1
    PAGE.write_text(text)
    README.write_text(readme)
    print(f"wrote {PAGE} and the table in {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
