"""The docs against the repository: every figure in docs/performance.md and the README's headline table is
what the committed results files give, and no page uses the words of how the project was made."""

import re
from pathlib import Path

from tileflip.bench import performance

ROOT = Path(__file__).resolve().parent.parent


def test_performance_page_is_generated_from_the_results_files():
    assert (ROOT / "docs" / "performance.md").read_text() == performance.render(ROOT / "benchmarks" / "results"), (
        "docs/performance.md differs from the results files: run python -m tileflip.bench.performance"
    )


def test_readme_headline_table_is_generated_from_the_results_files():
    readme = (ROOT / "README.md").read_text()
    assert performance.readme_with_headline(readme, ROOT / "benchmarks" / "results") == readme
    assert readme.count(performance.BEGIN) == 1 and readme.count(performance.END) == 1


def test_every_figure_in_the_readme_table_is_on_the_performance_page():
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index(performance.BEGIN) : readme.index(performance.END)]
    page = (ROOT / "docs" / "performance.md").read_text()
    figures = re.findall(r"\d+\.\d%", block)
    assert len(figures) >= 2 * len(performance.HEADLINE)  # tileflip and torch.compile in every row
    assert all(f in page for f in figures)


def test_check_mode_reports_a_stale_page(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "performance.md"
    stale.write_text("# Performance\n")
    monkeypatch.setattr(performance, "PAGE", stale)
    assert performance.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().out
    assert performance.main(["--bogus"]) == 2


def test_pages_speak_to_users():
    """Provenance is device, date, command and results file; nothing about how the work was organised."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text().lower()
        for word in ("session", "lesson", "issue #", "todo"):
            assert word not in text, (page.name, word)
