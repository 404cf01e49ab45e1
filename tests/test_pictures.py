"""The pictures are written, non-empty and valid PNG files."""

from pathlib import Path

import pytest

from tileflip.analyze import pictures
from tileflip.analyze.model import analyze, warp_access
from tileflip.cli.analyze import main as cli

# pictures draws on matplotlib's Agg canvas itself; the backend is pinned for anything else.
matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

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
