"""Nsight Compute metrics of the permute kernels on chosen cases, beside torch.compile's kernel for the same
permute (an experiment helper: what bounds the random suite's slow cases).

``python benchmarks/permute_ncu.py OUT.json [DTYPE:AxBxC:p,q,r ...]`` (GPU, ``ncu`` on the PATH); without
cases, the random suite's cases under 75% of copy in session 11 and two fast ones for reference (a 2-D case,
``int8:16384x16384:1,0``, runs tileflip's 2-D transpose kernel through the permute's plan). ncu
profiles one launch of each kernel after a warm-up; the JSON holds, per case and kernel, the metrics below
(raw values as ncu reports them, with their units).
"""

import csv
import io
import json
import shutil
import subprocess
import sys

METRICS = [
    "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__throughput.avg.pct_of_peak_sustained_elapsed", "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "smsp__inst_executed.sum", "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread",
    "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic", "launch__grid_size",
    "launch__block_size",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_write.sum",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
    "smsp__warp_issue_stalled_drain_per_warp_active.pct",
    "smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_wait_per_warp_active.pct",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed", "smsp__inst_executed_pipe_lsu.sum",
]  # fmt: skip

CASES = [
    "int8:11x39x29x21x42x24:5,4,2,3,1,0", "int8:42x9x11x29x38x29:2,1,4,5,3,0", "int8:28x86x14x2x40x28:0,2,4,3,5,1",
    "int8:11x8x80x264x44:1,0,2,4,3", "bfloat16:32x48x47x18x10x3:0,4,1,3,5,2", "float32:38x17x20x13x14x13:3,5,1,2,4,0",
    "int8:64x80x208x64:1,3,0,2", "float32:132x36x40x164:3,2,1,0",
]  # fmt: skip
KERNELS = "regex:permute_|triton_|transpose_"  # tileflip's permute and 2-D kernels, torch.compile's
# Printed per launch (short name -> metric); the JSON holds all of METRICS.
SHOWN = {
    "us": "gpu__time_duration.sum", "dram%": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1%": "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
    "issue%": "smsp__issue_active.avg.pct_of_peak_sustained_active", "regs": "launch__registers_per_thread",
    "warps%": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "ld_sect": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "ld_req": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "st_sect": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "st_req": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "sh_ld": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "sh_st": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "long_sb%": "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "lg_thr%": "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct",
    "mio%": "smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct",
    "bar%": "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
}  # fmt: skip


def parse(spec: str) -> tuple[str, tuple, tuple]:
    dtype, shape, perm = spec.split(":")
    return dtype, tuple(int(s) for s in shape.split("x")), tuple(int(p) for p in perm.split(","))


def child(specs) -> None:
    """One warm call, then one profiled call, of tileflip.permute and of torch.compile per case; prints the
    order of the profiled launches (``case|backend``) on stdout's last line."""
    import torch

    import tileflip
    from tileflip.bench import Case, _make_input

    order = []
    for spec in specs:
        dtype, shape, perm = parse(spec)
        x = _make_input(Case(shape, dtype))
        out = torch.empty(tuple(shape[p] for p in perm), dtype=x.dtype, device="cuda")
        torch._dynamo.reset()  # one code object for every case: without it, dynamo stops compiling after 8
        compiled = torch.compile(lambda t, perm=perm: t.permute(perm).contiguous(), dynamic=False)
        calls = (("tileflip", lambda: tileflip.permute(x, perm, out)), ("torch-compile", lambda: compiled(x)))
        for backend, fn in calls:
            fn()
            torch.cuda.synchronize()
            with torch.cuda.profiler.profile():
                fn()
                torch.cuda.synchronize()
            order.append(f"{spec}|{backend}")
    print("ORDER " + json.dumps(order), flush=True)


def main(out_path: str, specs: list[str]) -> int:
    cmd = [shutil.which("ncu") or "ncu", "--csv", "--profile-from-start", "off", "-k", KERNELS,
           "--metrics", ",".join(METRICS), sys.executable, __file__, "--child", *specs]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = proc.stdout.splitlines()
    order = next((json.loads(s[6:]) for s in lines if s.startswith("ORDER ")), [])
    table = [s for s in lines if s.startswith('"')]
    kernels: dict = {}
    for row in csv.DictReader(io.StringIO("\n".join(table))):
        k = kernels.setdefault(row["ID"], {"kernel": row["Kernel Name"][:80], "metrics": {}})
        k["metrics"][row["Metric Name"]] = [row["Metric Value"], row["Metric Unit"]]
    launches = [kernels[i] for i in sorted(kernels, key=int)]
    result = {"order": order, "launches": launches, "returncode": proc.returncode, "stderr": proc.stderr[-4000:]}
    if len(launches) == len(order):
        for label, launch in zip(order, launches):
            launch["case"], launch["backend"] = label.split("|")
    json.dump(result, open(out_path, "w"), indent=1)
    for launch in launches:
        m = launch["metrics"]
        cells = " ".join(f"{short}={m.get(name, ['?'])[0]}" for short, name in SHOWN.items())
        print(f"{launch.get('case', '?'):42s} {launch.get('backend', '?'):13s} {launch['kernel'][:28]:28s} {cells}",
              flush=True)  # fmt: skip
    if proc.returncode or len(launches) != len(order):
        print(f"ncu exit {proc.returncode}, {len(launches)} launches for {len(order)} calls\n{proc.stderr[-3000:]}")
    return proc.returncode


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--child":
        child(sys.argv[2:])
        sys.exit(0)
    sys.exit(main(sys.argv[1], sys.argv[2:] or CASES))
