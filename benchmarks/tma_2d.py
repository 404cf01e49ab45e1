"""Experiment (session 18): the 2-D transpose moved by the Hopper tensor memory accelerator (TMA) on the
large cases, beside the table's tile, the copy and torch.compile, timed interleaved in one process.

``python benchmarks/tma_2d.py OUT.json [CASE...]`` (``bash benchmarks/gpu_run.sh tma-2d``), a CASE being
``dtype:MxN``; the default is every >= 64 MiB suite case whose rows are 16-byte aligned (a TMA descriptor
needs 16-byte strides). Every variant is checked bit for bit once (``order_2d.run_case``).

Each program loads a BM x BN box of the input through a tensor descriptor (one ``cp.async.bulk.tensor``
into shared memory, out-of-range elements read as zero), and stores its transpose through the output's
descriptor (clipped at the edges): no address arithmetic and no masks in the kernel. Two forms:

* ``tma-BMxBN-wW``: one box a program, programs in column order (consecutive programs walk down one
  band of the input's columns, as the table's tile does);
* ``tma-loop-BMxBN-wW-sS``: one program an SM (times ``PER_SM``), each looping over its share of the
  boxes in the same order, with ``S`` loads in flight (``tl.range``'s software pipelining).
"""

import json
import sys

import torch
import triton
import triton.language as tl
from order_2d import run_case, tile
from triton.tools.tensor_descriptor import TensorDescriptor

import tileflip
from tileflip import tuning
from tileflip.dtypes import as_uint


@triton.jit
def tma_box_kernel(x_desc, o_desc, grid_m, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    pm = pid % grid_m
    pn = pid // grid_m
    box = x_desc.load([pm * BM, pn * BN])
    o_desc.store([pn * BN, pm * BM], tl.trans(box))


@triton.jit
def tma_loop_kernel(x_desc, o_desc, grid_m, programs, ROUNDS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                    STAGES: tl.constexpr):  # fmt: skip
    # Past the last box the coordinates leave the tensor: the load reads zeros and the store writes nothing.
    for i in tl.range(0, ROUNDS, num_stages=STAGES):
        t = tl.program_id(0) + i * programs
        pm = t % grid_m
        pn = t // grid_m
        box = x_desc.load([pm * BM, pn * BN])
        o_desc.store([pn * BN, pm * BM], tl.trans(box))


def descriptors(x, out, bm, bn):
    xu, ou = as_uint(x), as_uint(out)
    return TensorDescriptor.from_tensor(xu, [bm, bn]), TensorDescriptor.from_tensor(ou, [bn, bm])


def tma_box(bm, bn, warps):
    def go(x, out):
        xd, od = descriptors(x, out, bm, bn)
        grid_m = triton.cdiv(x.shape[0], bm)
        tma_box_kernel[(grid_m * triton.cdiv(x.shape[1], bn),)](xd, od, grid_m, bm, bn, num_warps=warps)

    return go


PER_SM = 2


def tma_loop(bm, bn, warps, stages):
    def go(x, out):
        xd, od = descriptors(x, out, bm, bn)
        grid_m = triton.cdiv(x.shape[0], bm)
        boxes = grid_m * triton.cdiv(x.shape[1], bn)
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 3
        programs = min(boxes, PER_SM * sms)
        rounds = triton.cdiv(boxes, programs)
        tma_loop_kernel[(programs,)](xd, od, grid_m, programs, rounds, bm, bn, stages, num_warps=warps)

    return go


BOXES = {  # element size -> (BM, BN, warps)
    1: [(128, 128, 4), (128, 128, 8), (64, 128, 4), (128, 64, 4), (256, 128, 8)],
    2: [(64, 64, 4), (128, 64, 4), (64, 128, 4), (128, 128, 8)],
    4: [(32, 32, 4), (64, 32, 4), (32, 64, 4), (64, 64, 4), (64, 64, 8)],
    8: [(32, 32, 4), (32, 16, 4), (16, 32, 4), (64, 32, 4), (32, 64, 4), (64, 64, 8)],
}
LOOPS = {1: [(128, 128, 4, 3)], 2: [(64, 64, 4, 3)], 4: [(32, 32, 4, 3), (64, 32, 4, 3)],
         8: [(32, 32, 4, 3), (32, 32, 4, 4)]}
CASES = ["int8:16384x16384", "bfloat16:16384x16384", "float32:16384x16384", "float64:16384x16384",
         "float64:8192x8192", "float32:8192x8192", "float32:256x65536", "float64:256x65536", "float32:65536x256"]


def main(out_path, cases):
    torch.cuda.set_device(0)
    records = []
    for case in cases:
        dtype, shape = case.split(":")
        shape = tuple(int(s) for s in shape.split("x"))
        es = torch.empty((), dtype=getattr(torch, dtype)).element_size()
        variants = [("auto", lambda x, o: tileflip.transpose(x, out=o)),
                    ("table", tile(tuning.triton_config(es, shape, shape[1])))]  # fmt: skip
        for bm, bn, w in BOXES[es]:
            variants.append((f"tma-{bm}x{bn}-w{w}", tma_box(bm, bn, w)))
        for bm, bn, w, s in LOOPS[es]:
            variants.append((f"tma-loop-{bm}x{bn}-w{w}-s{s}", tma_loop(bm, bn, w, s)))
        run_case(shape, dtype, variants, records, compile_peer=True)
        torch.cuda.empty_cache()
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                   "records": records}, open(out_path, "w"), indent=1)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or CASES)
