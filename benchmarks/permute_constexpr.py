"""Experiment (session 18): the N-D permute tile kernel with every size, stride and grid figure compiled in
(``tl.constexpr``), beside the library's launch (sizes at run time, divisions by magic numbers), on the
cases whose index arithmetic is most of their instructions.

``python benchmarks/permute_constexpr.py OUT.json [CASE...]`` compiles both forms for sm_90 here (no GPU)
and counts their SASS instructions (the kernel is straight-line code, so the count is what each thread
runs, both of its tile branches included). A CASE is ``dtype:SHAPE:PERM``, e.g.
``bfloat16:32x48x47x18x10x3:0,4,1,3,5,2``. It was not taken to the GPU: the constexpr form came out
no shorter where it would matter (session 18): the same vectors, and on the two slowest cases 1520
instructions against 1000 (bf16 (32,48,...); why was not looked into) and 1368 against 1440 (int8
(42,9,...)).

The constexpr form is the library's kernel itself, called from a kernel whose parameters are all
constexpr: Triton inlines it with every value known, so a division by a size becomes the compiler's own
multiply-high by a constant, and products of constant strides fold. A new shape compiles a new kernel.
"""

import collections
import json
import re
import subprocess
import sys

import triton
import triton.language as tl

from tileflip import plan as planner
from tileflip import tuning
from tileflip.kernels import triton_permute
from tileflip.kernels.triton_permute import permute_tile_kernel

CASES = ["bfloat16:32x48x47x18x10x3:0,4,1,3,5,2", "int8:42x9x11x29x38x29:2,1,4,5,3,0",
         "int8:28x86x14x2x40x28:0,2,4,3,5,1", "int8:11x8x80x264x44:1,0,2,4,3",
         "float32:38x17x20x13x14x13:3,5,1,2,4,0", "bfloat16:21x23x45x11x12x42:1,2,5,0,3,4",
         "int8:11x39x29x21x42x24:5,4,2,3,1,0"]  # fmt: skip


@triton.jit
def const_tile_kernel(
    x_ptr, out_ptr, size_a: tl.constexpr, size_b: tl.constexpr, grid_fast: tl.constexpr, tiles: tl.constexpr,
    a_in_sizes: tl.constexpr, a_in: tl.constexpr, a_out_sizes: tl.constexpr, a_out: tl.constexpr,
    b_in_sizes: tl.constexpr, b_in: tl.constexpr, b_out_sizes: tl.constexpr, b_out: tl.constexpr,
    n_sizes: tl.constexpr, n_in: tl.constexpr, n_out: tl.constexpr,
    NA_IN: tl.constexpr, NA_OUT: tl.constexpr, NB_IN: tl.constexpr, NB_OUT: tl.constexpr, NN: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_A: tl.constexpr,
    VEC_LOAD: tl.constexpr, VEC_STORE: tl.constexpr, KEPT: tl.constexpr, WIDE: tl.constexpr,
    B_FAST: tl.constexpr, OFF64: tl.constexpr, EVICT_LAST: tl.constexpr,
):  # fmt: skip
    # MAGIC off: the sizes are constants, and the compiler divides by them as it sees fit.
    permute_tile_kernel(
        x_ptr, out_ptr, size_a, size_b, grid_fast, tiles,
        a_in_sizes, a_in, a_in_sizes, a_in_sizes, a_out_sizes, a_out, a_out_sizes, a_out_sizes,
        b_in_sizes, b_in, b_in_sizes, b_in_sizes, b_out_sizes, b_out, b_out_sizes, b_out_sizes,
        n_sizes, n_in, n_out, n_sizes, n_sizes,
        NA_IN, NA_OUT, NB_IN, NB_OUT, NN, BLOCK_B, BLOCK_A, VEC_LOAD, VEC_STORE, KEPT, WIDE, B_FAST, OFF64,
        EVICT_LAST, False,
    )  # fmt: skip


def parse(case):
    dtype, shape, perm = case.split(":")
    return dtype, tuple(int(s) for s in shape.split("x")), tuple(int(d) for d in perm.split(","))


ELEMENT = {"int8": 1, "bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}


def const_launch(shape, perm, es):
    """(kernel grid, constexprs, options) of the constexpr form, from the library's plan and launch."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    p = planner.plan_permute(shape, tuple(strides), perm, es)
    go = tuning.permute_launch(p, es)
    assert p.kind == "tiles" and not go.flat, (p.kind, "only tile launches")
    args, constexprs = triton_permute.tile_args(p, go)
    g = triton_permute.arg_groups(args)
    values = dict(size_a=args[0], size_b=args[1], grid_fast=args[2], tiles=args[3],
                  a_in_sizes=g["a_in"][0], a_in=g["a_in"][1], a_out_sizes=g["a_out"][0], a_out=g["a_out"][1],
                  b_in_sizes=g["b_in"][0], b_in=g["b_in"][1], b_out_sizes=g["b_out"][0], b_out=g["b_out"][1],
                  n_sizes=g["n"][0], n_in=g["n"][1], n_out=g["n"][2])  # fmt: skip
    values |= {k: v for k, v in constexprs.items() if k != "MAGIC"}
    return p, go, values


def sass_counts(cubin: bytes) -> collections.Counter:
    path = "/tmp/permute_constexpr.cubin"
    open(path, "wb").write(cubin)
    tool = triton.__path__[0] + "/backends/nvidia/bin/cuobjdump"
    sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout
    return collections.Counter(re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass, re.M))


def sass(out_path, cases):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    records = []
    for case in cases:
        dtype, shape, perm = parse(case)
        es = ELEMENT[dtype]
        p, go, values = const_launch(shape, perm, es)
        lib = triton_permute.compiled_tile_kernel(p, es)
        pointer = {1: "*u8", 2: "*u16", 4: "*u32", 8: "*u64"}[es]
        src = ASTSource(fn=const_tile_kernel, signature={"x_ptr": pointer, "out_ptr": pointer,
                        **{k: "constexpr" for k in values}}, constexprs=values,
                        attrs={(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]})  # fmt: skip
        options = {"num_warps": go.num_warps, **({"maxnreg": go.maxnreg} if go.maxnreg else {})}
        const = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
        a, b = sass_counts(lib.asm["cubin"]), sass_counts(const.asm["cubin"])
        records.append({"case": case, "library_sass": sum(a.values()), "constexpr_sass": sum(b.values()),
                        "library_ops": dict(a), "constexpr_ops": dict(b)})  # fmt: skip
        print(f"{case}: library {sum(a.values())} SASS instructions, constexpr {sum(b.values())}", flush=True)
    json.dump({"triton": triton.__version__, "target": "sm_90", "records": records}, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    sass(sys.argv[1], sys.argv[2:] or CASES)
