"""The pictures are written, non-empty and valid PNG files; the benchmark's bar charts give each backend
its own colour and keep the legend off the bars."""

import json
from pathlib import Path

import pytest

from tileflip.analyze import pictures
from tileflip.analyze.model import analyze, warp_access
from tileflip.bench import plots
from tileflip.bench.cases import PEERS, TILEFLIP_BACKENDS
from tileflip.cli.analyze import main as cli

# pictures draws on matplotlib's Agg canvas itself; the backend is pinned for anything else.
matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
plt = pytest.importorskip("matplotlib.pyplot")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path) -> None:
    data = Path(path).read_bytes()
    assert len(data) > 1000 and data[:8] == PNG_SIGNATURE


def test_tile_grid_for_the_demo(tmp_path):
    path = pictures.draw_tile_grid(31, 65, 32, 32, tmp_path / "grid.png")
    assert isinstance(path, str)
    assert_png(path)
    assert_png(pictures.draw_tile_grid(1000, 3000, 64, 64, tmp_path / "big.png", title="many programs"))


def test_tile_grid_of_an_empty_matrix(tmp_path):
    assert_png(pictures.draw_tile_grid(0, 5, 4, 4, tmp_path / "empty.png"))


def test_bank_map_with_and_without_padding(tmp_path):
    assert_png(pictures.draw_bank_map(tmp_path / "banks.png"))
    assert_png(pictures.draw_bank_map(tmp_path / "banks_bf16.png", itemsize=2, pads=(0, 1, 2)))


@pytest.mark.parametrize("access", ["read", "write", "smem_load"])
def test_warp_access_from_object_and_dict(tmp_path, access):
    kernel = "tiled_nopad" if access == "smem_load" else "naive"
    warp = warp_access(kernel, (1024, 512), "float32", access)
    assert_png(pictures.draw_warp_access(warp, tmp_path / f"{access}.png"))
    assert_png(pictures.draw_warp_access(warp.to_dict(), tmp_path / f"{access}_dict.png"))


def test_report_of_every_variant(tmp_path):
    reports = [analyze(k, (2048, 2048)) for k in ("naive", "tiled_nopad", "tiled", "triton")]
    assert_png(pictures.draw_report(reports, tmp_path / "report.png"))


def test_cli_png(tmp_path, capsys):
    path = tmp_path / "cli.png"
    assert cli(["--kernel", "tiled", "--shape", "512x256", "--png", str(path)]) == 0
    assert_png(path)
    assert str(path) in capsys.readouterr().out


ALL_BACKENDS = [*TILEFLIP_BACKENDS, *PEERS]


def bench_records(backends, shapes=((1024, 512), (31, 65), (2, 100000)), dtype="float32"):
    """A small results file's records: a copy and each backend per shape, one round, bars up to 120%."""
    rows = []
    for s, shape in enumerate(shapes):
        base = {"gpu": "NVIDIA H200", "shape": list(shape), "perm": None, "dtype": dtype, "round": 0, "gbps": 1.0}
        rows.append(dict(base, op="copy", backend="copy", ms=1.0, fraction_of_copy=1.0))
        for b, backend in enumerate(backends):
            frac = 0.3 + 0.9 * ((b + s) % len(backends)) / max(len(backends) - 1, 1)
            rows.append(dict(base, op="transpose", backend=backend, ms=1 / frac, fraction_of_copy=frac))
    return rows


def test_every_backend_has_its_own_colour():
    colours = [matplotlib.colors.to_rgba(plots.BACKEND_COLORS[b]) for b in ALL_BACKENDS]
    assert len(set(colours)) == len(ALL_BACKENDS)


def test_bar_chart_colours_and_legend_clear_of_the_bars():
    fig = plots.figure(bench_records(ALL_BACKENDS), "float32")
    try:
        (ax,) = fig.axes
        bars = {c.get_label(): {p.get_facecolor() for p in c.patches} for c in ax.containers}
        assert list(bars) == ALL_BACKENDS
        for backend, faces in bars.items():
            assert faces == {matplotlib.colors.to_rgba(plots.BACKEND_COLORS[backend])}, backend
        fig.canvas.draw()
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == ALL_BACKENDS
        box, area, page = legend.get_window_extent(), ax.get_window_extent(), fig.bbox
        assert box.x0 >= area.x1  # beside the axes: no bar is under it
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1  # not cut off
    finally:
        plt.close(fig)


def test_bench_plot_file_draws_one_png_per_dtype(tmp_path):
    rows = bench_records(["auto", "triton", "torch-compile"]) + bench_records(["auto", "xla"], dtype="int8")
    path = tmp_path / "2d.json"
    path.write_text(json.dumps({"records": rows}))
    pngs = plots.draw(path, tmp_path / "pngs")
    assert [Path(p).name for p in pngs] == ["2d-float32.png", "2d-int8.png"]
    for png in pngs:
        assert_png(png)
