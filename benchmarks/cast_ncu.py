"""Nsight Compute metrics of cast_transpose_kernel variants on one shape (an experiment helper).

python benchmarks/cast_ncu.py M N SPEC... : each SPEC as `tileflip bench --suite cast --tiles` takes it
(BMxBNwW[gG][-i64][-atomic]); ncu profiles one launch of each, after a warm-up, and prints its CSV.
"""

import shutil
import subprocess
import sys

METRICS = ",".join([
    "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread", "launch__occupancy_limit_registers", "sm__maximum_warps_per_active_cycle_pct",
    "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_write.sum",
    "lts__t_sector_hit_rate.pct", "smsp__average_warp_latency_issue_stalled_long_scoreboard",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct", "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_drain_per_warp_active.pct", "smsp__warp_issue_stalled_membar_per_warp_active.pct",
])


def child(M, N, specs):
    import torch

    from tileflip.bench_cast import _variant, parse_tiles
    from tileflip.kernels import triton_cast_transpose as k

    x = torch.randn(M, N, device="cuda").bfloat16()
    scale = torch.tensor(0.5, device="cuda")
    for spec, (config, options) in parse_tiles(",".join(specs)).items():
        fn = _variant(x, scale, torch.float8_e4m3fn, config, options, k)
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(spec)
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])
        sys.exit(0)
    M, N, *specs = sys.argv[1:]
    cmd = [shutil.which("ncu") or "ncu", "--csv", "--nvtx", "-k", "regex:cast_transpose", "--metrics", METRICS,
           sys.executable, __file__, "--child", M, N, *specs]
    sys.exit(subprocess.run(cmd, check=False).returncode)
