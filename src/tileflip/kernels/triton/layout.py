"""Read Triton's real thread mapping of the transpose from a kernel compiled for sm_90, without a GPU.

``triton.compile`` runs the whole pipeline (TTIR, TTGIR, LLVM IR, PTX, cubin through the bundled
ptxas) for a ``GPUTarget("cuda", 90, 32)`` on any machine. The TTGIR names a blocked layout
(sizePerThread, threadsPerWarp, warpsPerCTA, order) for every tensor; the ones on ``tt.load`` and
``tt.store`` are how lanes map to addresses, which is what ``tileflip.analyze`` models.

The kernel compiled is the project's ``tileflip.kernels.triton.transpose.transpose_2d_kernel`` when
it imports, else the local copy below with the same signature.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

# The project launches the kernel on unsigned-integer views (one kernel per element size); a layout
# depends only on the element width, so the same types are used here.
_TRITON_TYPES = {8: "u64", 4: "u32", 2: "u16", 1: "u8"}


@triton.jit
def _local_transpose_2d_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, grid_n,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Same index math as the project's kernel: 1-D grid, tile divmod(pid, grid_n).
    pid = tl.program_id(0)
    pid_m = pid // grid_n
    pid_n = pid % grid_n
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    in_mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :] * stride_xn, mask=in_mask)
    out_mask = (rn[:, None] < N) & (rm[None, :] < M)
    tl.store(out_ptr + rn[:, None] * stride_om + rm[None, :], tl.trans(tile), mask=out_mask)


def _jit_function(fn):
    """A compilable JITFunction: unwraps autotune/heuristics wrappers and the interpreter's wrapper."""
    from triton.runtime.jit import JITFunction

    while not isinstance(fn, JITFunction) and hasattr(fn, "fn"):
        inner = fn.fn
        # TRITON_INTERPRET=1 turns @triton.jit into an InterpretedFunction around the plain function.
        fn = inner if hasattr(inner, "fn") or isinstance(inner, JITFunction) else JITFunction(inner)
    return fn


def project_kernel():
    """The project's Triton transpose kernel as a JITFunction, or None when it does not import."""
    try:
        from tileflip.kernels.triton.transpose import transpose_2d_kernel
    except Exception:  # noqa: BLE001 - any import failure means: fall back to the local copy
        return None
    return _jit_function(transpose_2d_kernel)


def _signature(fn, itemsize: int, block_m: int, block_n: int, divisible: bool):
    """Types, constants and divisibility hints a launch of a contiguous input would specialize to."""
    ptr = "*" + _TRITON_TYPES[itemsize]
    constexpr_names = {fn.arg_names[i] for i in getattr(fn, "constexprs", [])}
    given = {"BLOCK_M": block_m, "BLOCK_N": block_n, "GROUP_M": 1, "INDEX_64": False, "INTERIOR": 1, "OUT_TILE": 0,
             "EVICT_LAST": 0, "LOOP": 0}
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name.endswith("_ptr"):
            signature[name] = ptr
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in constexpr_names or name in given:
            if name not in given:
                raise ValueError(f"no value for the constexpr {name} of {fn.__name__}")
            signature[name], constexprs[name] = "constexpr", given[name]
        elif name == "stride_xn":
            # A unit stride is specialized to the constant 1, as a launch on a contiguous tensor does.
            signature[name], constexprs[name] = "constexpr", 1
        else:
            signature[name] = "i32"
            if divisible and not name.startswith("grid_"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, constexprs, attrs


def compile_transpose(block_m: int, block_n: int, num_warps: int, itemsize: int = 4, *, divisible: bool = True,
                      kernel=None):
    """Compile the transpose for sm_90; ``divisible`` says whether M, N and the strides are multiples of 16."""
    fn = _jit_function(kernel or project_kernel() or _local_transpose_2d_kernel)
    signature, constexprs, attrs = _signature(fn, itemsize, block_m, block_n, divisible)
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})


def compile_launch(fn, args: dict, constexprs: dict, num_warps: int, pointer_type: str, maxnreg: int = 0):
    """Compile ``fn`` for sm_90 as a launch with these argument values would specialize it.

    ``args`` maps each runtime parameter to its value: pointers as ``None`` (typed ``pointer_type``, e.g.
    ``"*u16"``, and 16-byte aligned, as torch allocates), ints and tuples of ints as the launch passes
    them (Triton's own specialization: i32 or i64, the constant 1, divisibility by 16, none of the last two
    for the kernel's ``do_not_specialize`` arguments). ``maxnreg``
    caps registers per thread (0: no cap), as the launch's own option does.
    """
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import find_paths_if, get_iterable_path

    fn = _jit_function(fn)
    unspecialized = {p.name for p in fn.params if p.do_not_specialize}
    values, types, hints = [], [], []
    for name in fn.arg_names:
        if name in constexprs:
            values.append(constexprs[name])
            types.append("constexpr")
            hints.append(None)
        elif args[name] is None:
            values.append(None)
            types.append(pointer_type)
            hints.append("D")
        else:
            # as the launch does: a do_not_specialize argument is typed by range only (no 1, no divisibility)
            kind, hint = native_specialize_impl(BaseBackend, args[name], False, name not in unspecialized, True)
            values.append(args[name])
            types.append(kind)
            hints.append(hint)
    signature = dict(zip(fn.arg_names, types))
    constants = {path: get_iterable_path(values, path) for path in find_paths_if(types, lambda _, t: t == "constexpr")}
    attrs = {path: [["tt.divisibility", 16]] for path in find_paths_if(hints, lambda _, h: h == "D")}
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constants, attrs=attrs)
    options = {"num_warps": num_warps} | ({"maxnreg": maxnreg} if maxnreg else {})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


_LAYOUT_DEF = re.compile(r"^(#\w+) = #ttg\.blocked<\{(.*)\}>", re.MULTILINE)
_FIELD = re.compile(r"(\w+) = \[([\d,\s]*)\]")


def blocked_layouts(ttgir: str) -> dict:
    """Every ``#blocked`` layout of a TTGIR module: name -> {sizePerThread, threadsPerWarp, warpsPerCTA, order}."""
    layouts = {}
    for name, body in _LAYOUT_DEF.findall(ttgir):
        layouts[name] = {k: [int(v) for v in vals.split(",") if v.strip()] for k, vals in _FIELD.findall(body)}
    return layouts


def every_access_layout(ttgir: str) -> list:
    """(``"load"`` or ``"store"``, layout, tile shape) of each global load and store of a TTGIR module."""
    layouts = blocked_layouts(ttgir)
    found = []
    for line in ttgir.splitlines():
        for op, key in (("tt.load", "load"), ("tt.store", "store")):
            if f"= {op} " in line or line.strip().startswith(f"{op} "):
                # The pointer operand's type is printed last on the line, before loc(...).
                types = re.findall(r"tensor<([\dx]+)x!tt\.ptr<\w+>, (#\w+)>", line)
                if types:
                    shape, name = types[-1]
                    found.append((key, layouts[name], tuple(int(v) for v in shape.split("x"))))
    return found


def access_layouts(ttgir: str) -> dict:
    """The layouts of the kernel's first global load and store: {"load": {...}, "store": {...}}."""
    found = {}
    for key, layout, _ in every_access_layout(ttgir):
        found.setdefault(key, layout)
    return found


def resource_usage(compiled) -> dict:
    """Registers, stack bytes per thread and shared memory of a compiled kernel (registers and stack from
    the bundled cuobjdump, else None)."""
    usage = {"shared": int(compiled.metadata.shared), "regs": None, "stack": None}
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    tool = str(tool) if tool.exists() else shutil.which("cuobjdump")
    if tool and "cubin" in compiled.asm:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "kernel.cubin"
            path.write_bytes(compiled.asm["cubin"])
            out = subprocess.run([tool, "-res-usage", str(path)], capture_output=True, text=True, check=False).stdout
        match = re.search(r"REG:(\d+)", out)
        usage["regs"] = int(match.group(1)) if match else None
        match = re.search(r"STACK:(\d+)", out)
        usage["stack"] = int(match.group(1)) if match else None
    return usage


def transpose_layout(block_m: int, block_n: int, num_warps: int, itemsize: int = 4, *, divisible: bool = True,
                     kernel=None) -> dict:
    """Layouts, registers and shared bytes of the sm_90 transpose, in the form of
    ``tileflip.analyze.triton_layout.TRITON_SM90_LAYOUTS``."""
    compiled = compile_transpose(block_m, block_n, num_warps, itemsize, divisible=divisible, kernel=kernel)
    record = {"itemsize": itemsize, "block": (block_m, block_n), "num_warps": num_warps, "divisible": divisible}
    record.update(resource_usage(compiled))
    record.update(access_layouts(compiled.asm["ttgir"]))
    return record


def layouts_of_compiled(compiled) -> dict:
    """Load/store layouts of a kernel already compiled (e.g. found in a JIT cache after a GPU launch)."""
    return access_layouts(compiled.asm["ttgir"])


if __name__ == "__main__":
    for cfg in ((64, 64, 8, 4), (32, 32, 4, 4), (128, 128, 16, 2)):
        print(transpose_layout(*cfg))
