"""The layers the package's tree shows, kept by import-linter's contracts (pyproject.toml), and the light
imports the command line relies on."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    tool = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(tool).exists():
        pytest.fail("lint-imports is missing: install the test extra (pip install -e '.[test]')")
    proc = subprocess.run([tool, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "0 broken" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("module", ["tileflip", "tileflip.plan", "tileflip.tuning", "tileflip.explain",
                                    "tileflip.analyze", "tileflip.ops", "tileflip.kernels", "tileflip.bench",
                                    "tileflip.check", "tileflip.distributed", "tileflip.cli"])
def test_packages_import_no_gpu_stack(module):
    code = f"import sys, {module}; print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr
