"""Instruction counts of the staged permute's kernels, from their sm_90 machine code (no GPU needed).

Each kernel of ``kernels/cuda/permute_staged.cu`` is compiled for sm_90 with NVRTC and disassembled with
``cuobjdump -sass`` (PyPI's ``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm``). Its box loop is the
span that the last unconditional backward branch closes. Inside it, the block that finds the next box's
place runs on one thread (a forward branch skips it for the others) and is counted apart: its inner loop
runs once a box dimension. Every store slot's gather and store sit between a ``BSSY`` and its
``BSYNC``: a slot that takes no vector skips them. The counts go to ``data/sass-staged.json``
(``python -m tileflip.bench.sass --write``); ``tileflip.plan.cost`` weighs them by how many slots a box
fills, and a CPU test recompiles the kernels and compares.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TABLE_FILE = Path(__file__).resolve().parents[1] / "data" / "sass-staged.json"
ARCH = 90
_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def cuobjdump() -> str:
    """The cuobjdump binary: on PATH, else the one PyPI's nvidia-cuda-cuobjdump installs."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    import nvidia

    for root in nvidia.__path__:
        for candidate in Path(root).glob("cu*/bin/cuobjdump"):
            return str(candidate)
    raise FileNotFoundError("cuobjdump not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")


def sass(cubin: bytes, name: str) -> list[tuple[int, str, str]]:
    """(address, opcode, operands) of kernel ``name`` of a cubin, in order."""
    tool = cuobjdump()
    env_path = str(Path(tool).parent)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "-sass", "-fun", name, f.name], check=True, capture_output=True, text=True,
                              env={"PATH": env_path, "NVDISASM_PATH": env_path}).stdout  # fmt: skip
    out = []
    for m in _LINE.finditer(text):
        out.append((int(m.group(1), 16), m.group(3), (m.group(2) or "") + m.group(4)))
    return out


def _target(operands: str) -> int | None:
    m = re.search(r"\b0x([0-9a-f]+)\b", operands)
    return int(m.group(1), 16) if m else None


def loop_counts(code: list[tuple[int, str, str]]) -> dict:
    """The box loop's counts: ``loop`` (instructions a warp issues a box, every slot taking a vector, the
    one-thread block left out), ``slots`` (each store slot's own instructions, in order), ``next_box``
    (the one-thread block's instructions outside its inner loop) and ``next_box_dim`` (its inner loop's, run
    once a box dimension), ``setup`` (instructions before the loop, its decode loops counted once)."""
    at = {a: i for i, (a, _, _) in enumerate(code)}

    def skipped(i):
        """The instructions a forward branch at i jumps over (indices), else None."""
        a, op, rest = code[i]
        t = _target(rest)
        if op != "BRA" or t is None or t <= a or "@" not in rest:
            return None
        return range(i + 1, at[t])

    def backward(i):
        a, op, rest = code[i]
        t = _target(rest)
        return op == "BRA" and t is not None and t < a

    loops = [(at[_target(code[i][2])], i) for i in range(len(code)) if backward(i)]
    # the box loop: the widest loop that holds a barrier
    head, end = max(((h, e) for h, e in loops if any(code[k][1].startswith("BAR") for k in range(h, e))),
                    key=lambda he: he[1] - he[0])  # fmt: skip
    block, inner, slots = 0, 0, []
    for i in range(head, end):
        span = skipped(i)
        if span is None or span.stop > end:
            continue
        ops = [code[k][1] for k in span]
        if any(backward(k) for k in span) and not any(op.startswith("STG") for op in ops) and not block:
            block = len(span)
            inner = max(k - at[_target(code[k][2])] + 1 for k in span if backward(k))
        elif sum(op.startswith("STG") for op in ops) == 1 and not any(op.startswith("BAR") for op in ops):
            slots.append(len(span))
    return {"loop": end - head + 1 - block, "slots": slots, "next_box": block - inner, "next_box_dim": inner,
            "setup": head}  # fmt: skip


def table() -> dict:
    """Every staged kernel's counts, compiled here for sm_90."""
    from tileflip.kernels.cuda import nvrtc
    from tileflip.kernels.cuda import staged as launcher

    cubin = nvrtc.compile_cubin(launcher.CU_FILE, ARCH)
    return {name: loop_counts(sass(cubin, name)) for name in launcher.kernel_names()}


def main(argv: list[str]) -> int:
    counts = table()
    text = json.dumps({"arch": f"sm_{ARCH}", "source": "python -m tileflip.bench.sass --write",
                       "kernels": counts}, indent=1) + "\n"  # fmt: skip
    if "--write" in argv:
        TABLE_FILE.write_text(text)
        print(f"wrote {TABLE_FILE}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
