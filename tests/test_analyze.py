"""The analyzer: warp accesses of the naive kernel, the bank rules, the planner, the time model against H200
measurements, and Triton's compiled layouts."""

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import without_interpreter

from tileflip.analyze.access import SECTOR, bank_conflicts
from tileflip.analyze.model import analyze, itemsize_of, warp_access
from tileflip.analyze.report import program_order
from tileflip.analyze.timemodel import load_device
from tileflip.analyze.traffic import footprint_bytes
from tileflip.analyze.triton_layout import TRITON_SM90_LAYOUTS, triton_blocked_layout
from tileflip.analyze.variants import KERNELS, build_variant
from tileflip.cli.analyze import main as cli_main
from tileflip.plan import owner_of, transpose_grid

SRC = Path(__file__).resolve().parents[1] / "src"

# Measured on an NVIDIA H200, 2026-11-30 (tileflip analyze --measure), fp32 16384 x 16384: fraction of a copy
# timed in the same process.
MEASURED_FP32_16K = {"naive": 0.241, "tiled_nopad": 0.417, "tiled": 0.829, "triton": 0.972}


# ---------------------------------------------------------------------------------------------------
# The naive transpose: one element per thread
# ---------------------------------------------------------------------------------------------------


def test_naive_32x8_reads_one_line_and_writes_one_element_per_sector():
    read = warp_access("naive", (1024, 512), "float32", "read", threads=(32, 8))
    write = warp_access("naive", (1024, 512), "float32", "write", threads=(32, 8))
    assert (read.useful_bytes, len(read.sectors), len(read.lines), read.efficiency) == (128, 4, 1, 1.0)
    assert (write.useful_bytes, len(write.sectors), write.efficiency) == (128, 32, 0.125)


@pytest.mark.parametrize("M", [8, 9, 64, 1000])
def test_naive_32x8_write_efficiency_is_an_eighth_once_m_reaches_8(M):
    report = analyze("naive", (M, 256), "float32", threads=(32, 8))
    assert report.read_efficiency == 1.0
    assert report.write_efficiency == pytest.approx(0.125)


def test_naive_32x8_short_columns_share_sectors():
    # With M = 4 an output row is 16 bytes, so two lanes' columns land in one sector.
    assert analyze("naive", (4, 256), "float32", threads=(32, 8)).write_efficiency == pytest.approx(0.25)


def test_naive_16x16_warp_spans_two_rows_so_writes_pair_up():
    write = warp_access("naive", (1024, 1024), "float32", "write", threads=(16, 16))
    assert len(write.sectors) == 16 and write.efficiency == 0.25
    # Lanes x and x + 16 are rows r and r + 1 of one column: adjacent addresses, one sector.
    assert write.addresses[16] - write.addresses[0] == 4
    report = analyze("naive", (16384, 16384), "float32", threads=(16, 16))
    assert report.read_efficiency == 1.0
    assert report.write_efficiency == pytest.approx(0.25)


def test_naive_2x3_write_offsets():
    write = warp_access("naive", (2, 3), "float32", "write", threads=(16, 16))
    offsets = write.element_offsets(4)
    assert offsets[:3] == [0, 2, 4]  # row 0: A[0,0], A[0,1], A[0,2] -> B[0,0], B[1,0], B[2,0]
    assert offsets[16:19] == [1, 3, 5]  # row 1 is the same warp's second half
    assert [o for o in offsets if o is not None] == [0, 2, 4, 1, 3, 5]


# ---------------------------------------------------------------------------------------------------
# Shared memory banks
# ---------------------------------------------------------------------------------------------------


def test_unpadded_fp32_tile_column_read_is_32_way_padded_is_free():
    nopad = warp_access("tiled_nopad", (64, 64), "float32", "smem_load")
    padded = warp_access("tiled", (64, 64), "float32", "smem_load")
    assert bank_conflicts(nopad.addresses, 4)["ways"] == 32
    assert bank_conflicts(padded.addresses, 4)["ways"] == 1
    assert bank_conflicts(warp_access("tiled_nopad", (64, 64), access="smem_store").addresses, 4)["ways"] == 1
    assert analyze("tiled_nopad", (1024, 1024)).smem_conflict_ways == 32
    assert analyze("tiled", (1024, 1024)).smem_conflict_ways == 1


def test_eight_byte_accesses_are_served_per_half_warp():
    contiguous = [8 * lane for lane in range(32)]  # 256 bytes: two conflict-free half-warps
    info = bank_conflicts(contiguous, 8)
    assert info["phase_ways"] == [1, 1] and info["wavefronts"] == 2
    # Both half-warps hit the same banks; served separately, neither conflicts.
    assert bank_conflicts([8 * (lane % 16) for lane in range(32)], 8)["ways"] == 1
    # A 256-byte stride puts a half-warp's 16 lanes in banks 0 and 1: 16-way.
    assert bank_conflicts([256 * lane for lane in range(32)], 8)["ways"] == 16
    # The padded fp64 tile stays conflict-free, the unpadded one is 16-way.
    assert analyze("tiled", (256, 256), "float64").smem_conflict_ways == 1
    assert analyze("tiled_nopad", (256, 256), "float64").smem_conflict_ways == 16


def test_lanes_reading_one_word_are_a_broadcast():
    assert bank_conflicts([0] * 32, 4)["ways"] == 1
    assert bank_conflicts([4 * (lane // 2) for lane in range(32)], 4)["ways"] == 1
    assert bank_conflicts([0, 128] + [None] * 30, 4)["ways"] == 2  # two words of bank 0
    assert bank_conflicts([0, 2] + [None] * 30, 2)["ways"] == 1  # two halves of one word


# ---------------------------------------------------------------------------------------------------
# The launch: planner, sampling, DRAM bytes, JSON
# ---------------------------------------------------------------------------------------------------


def test_programs_and_owners_come_from_the_planner():
    report = analyze("naive", (100, 70), threads=(16, 8))
    assert report.programs == transpose_grid(100, 70, 8, 16).programs
    variant = build_variant("tiled", 100, 70, 4, threads=None, block=None, num_warps=None, strides=None,
                                out_strides=None, layouts=None)
    for i, j in [(0, 0), (31, 33), (99, 69), (64, 5)]:
        pid_m, pid_n = owner_of(100, 70, 32, 32, i, j)
        assert variant.owner(np.array([i, j]), "x") == pid_m * variant.grid.grid_n + pid_n


def test_large_launches_are_sampled_and_say_so():
    big = analyze("naive", (16384, 16384), sample=64)
    assert big.sampled and big.programs_analyzed <= 64 < big.programs
    small = analyze("naive", (31, 65))
    assert not small.sampled and small.programs_analyzed == small.programs


def test_footprint_counts_the_sectors_the_elements_touch():
    """The DRAM footprint (distinct 32-byte sectors of a strided 2-D tensor, counted per period of lines
    where a line's span is a sector or less) against the sectors of every element, listed."""
    rng = np.random.default_rng(0)
    for _ in range(3000):
        itemsize = int(rng.choice([1, 2, 4, 8]))
        shape = (int(rng.integers(1, 60)), int(rng.integers(1, 60)))
        strides = (int(rng.integers(0, 90)), int(rng.integers(0, 12)))[:: 1 if rng.random() < 0.5 else -1]
        addr = (np.arange(shape[0])[:, None] * strides[0] + np.arange(shape[1])[None, :] * strides[1]) * itemsize
        sectors = set((addr // SECTOR).ravel()) | set(((addr + itemsize - 1) // SECTOR).ravel())
        assert footprint_bytes(shape, strides, itemsize) == len(sectors) * SECTOR, (shape, strides, itemsize)


def test_huge_shapes_are_analyzed_in_bounded_memory():
    """Neither the footprint nor the programs sampled list a tensor's lines or tiles: a launch of
    billions of programs is analyzed in a few hundred MB at most (it took memory in proportion before)."""
    import tracemalloc

    tracemalloc.start()
    try:
        for kernel in ("naive", "tiled"):
            report = analyze(kernel, (30_000_000_000, 3), "float32", sample=64)
            assert report.sampled and report.programs > 10**8
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 << 20, peak


def test_sampling_weights_reproduce_the_exact_totals():
    exact = analyze("tiled", (200, 300), "bfloat16", sample=10_000)
    sampled = analyze("tiled", (200, 300), "bfloat16", sample=8)
    assert not exact.sampled and sampled.sampled
    for a, b in zip(exact.accesses, sampled.accesses):
        assert b.requests == pytest.approx(a.requests, rel=0.02)
        assert b.sectors == pytest.approx(a.sectors, rel=0.02)
        assert b.wavefronts == pytest.approx(a.wavefronts, rel=0.02)


@pytest.mark.parametrize("kernel", KERNELS)
def test_l2_merges_partial_writes_so_dram_moves_the_minimum(kernel):
    report = analyze(kernel, (16384, 16384), "float32")
    assert report.dram_bytes == report.min_bytes
    assert report.l2_merge["store"]["merged_fraction"] == 1.0


def test_partial_sectors_shared_across_programs_are_found():
    # bf16 with 32x8 blocks: a 32-byte output sector spans 16 input rows, two programs a grid row apart.
    report = analyze("naive", (4096, 4096), "bfloat16", threads=(32, 8), sample=64)
    merge = report.l2_merge["store"]
    assert merge["partial_sectors_sampled"] > 0 and merge["max_span_programs"] == 4096 // 32
    assert merge["merged_fraction"] == 1.0


def test_transposed_input_view_reads_strided():
    report = analyze("tiled", (4096, 4096), strides=(1, 4096))
    assert report.read_efficiency == pytest.approx(0.125)
    assert report.dram_bytes == report.min_bytes


def test_json_has_the_promised_keys():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["--kernel", "naive", "--shape", "1024x512", "--dtype", "float32", "--threads", "16x16",
                         "--json"]) == 0
    payload = json.loads(out.getvalue())
    for key in ("read_efficiency", "write_efficiency", "smem_conflict_ways", "dram_bytes", "min_bytes",
                "predicted_fraction_of_copy", "accesses", "sampled"):
        assert key in payload
    assert payload["smem_conflict_ways"] == 1 and payload["write_efficiency"] == 0.25
    assert payload["accesses"][1]["example_warp"]["efficiency"] == 0.25


def test_table_output_names_the_bound():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli_main(["--kernel", "tiled_nopad", "--shape", "4096x4096"])
    assert "32-way" in out.getvalue() and "<- bound" in out.getvalue()


def test_dtype_names_and_sizes():
    assert itemsize_of("float32") == itemsize_of("torch.float32") == itemsize_of(4) == 4
    assert itemsize_of("bfloat16") == 2 and itemsize_of("int8") == 1 and itemsize_of("float64") == 8
    assert itemsize_of("bf16") == 2 and itemsize_of("float8_e4m3fn") == 1
    with pytest.raises(ValueError, match="dtype"):
        itemsize_of("float128")
    with pytest.raises(ValueError, match="element size"):
        itemsize_of(3)
    assert analyze("tiled", (64, 64), "fp32").dtype == "float32"  # the one table's torch name


def test_library_takes_tuples_and_refuses_text_naming_the_argument():
    assert analyze("naive", [64, 32], threads=[32, 8]).shape == (64, 32)
    for kwargs, what in [({"shape": "64x32"}, "shape"), ({"threads": "32x8"}, "threads"),
                         ({"strides": (32, 1, 1)}, "strides"), ({"shape": (64, -1)}, "shape")]:
        args = {"shape": (64, 32), **kwargs}
        with pytest.raises(ValueError, match=what):
            analyze("naive", args.pop("shape"), **args)
    with pytest.raises(ValueError, match="block"):
        analyze("triton", (64, 64), block="32x32")


def test_cli_parses_text_with_the_shared_parsers(capsys):
    assert cli_main(["--kernel", "naive", "--shape", "64x32", "--dtype", "bf16", "--threads", "32x8",
                     "--strides", "32,1", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["shape"] == [64, 32] and payload["dtype"] == "bfloat16" and payload["threads"] == [32, 8]
    for bad in (["--shape", "64"], ["--dtype", "float128"], ["--strides", "1,2,3"], ["--threads", "axb"]):
        with pytest.raises(SystemExit) as exit_info:
            cli_main(bad)
        assert exit_info.value.code == 2
        assert bad[0] in capsys.readouterr().err


ANALYZE_DIR = SRC / "tileflip" / "analyze"


def test_analyze_imports_no_gpu_stack():
    modules = sorted(f"tileflip.analyze.{p.stem}" for p in ANALYZE_DIR.glob("*.py") if p.stem != "__init__")
    assert {"tileflip.analyze.model", "tileflip.analyze.pictures", "tileflip.analyze.access"} <= set(modules)
    code = (
        "import sys; import tileflip; before = set(sys.modules); import tileflip.analyze; "
        f"[__import__(m) for m in {modules!r}]; "
        "new = set(sys.modules) - before; "
        "bad = sorted(m for m in new if m.split('.')[0] in ('torch', 'triton', 'matplotlib') "
        "or m.startswith(('tileflip.bench', 'tileflip.cli'))); "
        "print(','.join(bad))"
    )
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert proc.stdout.strip() == ""


def test_analyze_source_imports_no_gpu_stack_even_inside_functions():
    """Every import statement of the package, at any depth: no torch, triton, cuda, bench or cli."""
    import ast

    forbidden = ("torch", "triton", "cuda", "tileflip.bench", "tileflip.cli")
    for path in ANALYZE_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                    "import_module", "__import__"):
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            else:
                continue
            for name in names:
                assert not any(name == f or name.startswith(f + ".") for f in forbidden), (path.name, name)


# ---------------------------------------------------------------------------------------------------
# The time model
# ---------------------------------------------------------------------------------------------------


def test_prediction_within_10_points_of_the_h200_measurements():
    for kernel, measured in MEASURED_FP32_16K.items():
        predicted = analyze(kernel, (16384, 16384), "float32").predicted_fraction_of_copy
        assert abs(predicted - measured) <= 0.10, (kernel, predicted, measured)


def test_each_variant_is_bound_by_its_own_mechanism():
    bounds = {k: analyze(k, (16384, 16384)).bound for k in KERNELS}
    assert bounds == {"naive": "l2_write_sectors", "tiled_nopad": "l1_shared_wavefronts", "tiled": "memory",
                      "triton": "memory"}


def test_device_constants_are_the_only_knobs():
    dev = load_device()
    slower = dict(dev, l2_write_sectors_per_s=dev["l2_write_sectors_per_s"] / 2)
    base = analyze("naive", (4096, 4096)).predicted_time_s
    assert analyze("naive", (4096, 4096), device=slower).predicted_time_s > 1.5 * base
    for shape, dtype in [((4096, 4096), "float32"), ((16384, 16384), "bfloat16")]:
        f = [analyze(k, shape, dtype).predicted_fraction_of_copy for k in KERNELS]
        assert f == sorted(f), (shape, dtype, f)


# Twelve cases measured on an NVIDIA H200 (provenance inside the file).
MEASURED = Path(__file__).resolve().parent / "data" / "h200-analyze-measured.json"


# ---------------------------------------------------------------------------------------------------
# The CTA turnaround (per CTA, so per byte it doubles when the element halves) and the request rate
# ---------------------------------------------------------------------------------------------------


def _bf16_tile_column_wavefronts(c: int) -> int:
    """Wavefronts of tile[tx][c] for tx = 0..31 in a u16 tile with rows of 33 elements, counted by hand."""
    words_by_bank: dict[int, set] = {}
    for tx in range(32):
        word = (tx * 33 + c) * 2 // 4
        words_by_bank.setdefault(word % 32, set()).add(word)
    return max(len(w) for w in words_by_bank.values())


def test_bf16_padded_tile_column_reads_conflict_on_odd_columns_only():
    # Rows are 66 bytes. Column c: even lanes 2k sit at word 33k + c // 2, odd lanes 2k + 1 at word
    # 33k + 16 + (c + 1) // 2. For even c the two halves fill banks c/2..c/2+15 and c/2+16..c/2+31; for
    # odd c lane 31 wraps onto lane 0's bank (a different word): 2-way.
    assert [_bf16_tile_column_wavefronts(c) for c in range(4)] == [1, 2, 1, 2]
    for c in (0, 1, 9):
        lanes = [(tx * 33 + c) * 2 for tx in range(32)]
        assert bank_conflicts(lanes, 2)["wavefronts"] == _bf16_tile_column_wavefronts(c)
    # Warp ty reads columns ty, ty + 8, ty + 16, ty + 24: odd warps pay 2 wavefronts per read.
    smem_load = analyze("tiled", (256, 256), "bfloat16").access("smem_load")
    assert smem_load.wavefronts / smem_load.requests == 1.5


@pytest.mark.parametrize("kernel,dtype,per_cta", [
    ("tiled", "float32", 64),         # 8 warps x (4 stores + 4 loads), each one wavefront
    ("tiled", "bfloat16", 80),        # 32 stores + 4 warps x 4 x 1 + 4 warps x 4 x 2 loads
    ("tiled_nopad", "float32", 1056),  # 32 stores + 32 loads x 32-way
    ("naive", "float32", 0),           # no shared memory
    ("triton", "float32", 256),        # 64x64 fp32 = 16 KiB, 128 bytes a wavefront, each way
])
def test_shared_wavefronts_per_cta_are_counted_from_the_warps(kernel, dtype, per_cta):
    report = analyze(kernel, (256, 256), dtype)
    assert report.occupancy["smem_wavefronts_per_cta"] == per_cta


def test_turnaround_is_paid_once_per_round_of_cta_slots():
    # 256 x 256 fp32 tiled: 64 CTAs of 4 KiB loads. On 4 SMs: 16 CTAs per SM, 8 resident, so 2 rounds.
    dev = dict(load_device(), sm_count=4, cta_turnaround_s=300e-9, sm_clock_hz=2e9)
    report = analyze("tiled", (256, 256), "float32", device=dev)
    assert report.occupancy["resident_ctas_per_sm"] == 8
    assert report.occupancy["rounds"] == pytest.approx(2.0)
    assert report.occupancy["turnaround_per_cta_s"] == pytest.approx(300e-9 + 64 / 2e9)
    assert report.resources["turnaround"] == pytest.approx(2 * (300e-9 + 32e-9))
    r = report.resources
    assert r["memory"] == pytest.approx(r["dram"] + r["latency"] + r["turnaround"])


def test_bf16_tile_pays_the_fp32_tiles_turnaround_for_half_the_bytes():
    dev = dict(load_device(), cta_turnaround_s=200e-9, sm_clock_hz=2e9)
    fp32 = analyze("tiled", (16384, 16384), "float32", device=dev)
    bf16 = analyze("tiled", (16384, 16384), "bfloat16", device=dev)
    # Same CTAs, same rounds (262144 CTAs / 132 SMs -> 1986 each, 8 resident -> 248.25).
    assert fp32.occupancy["rounds"] == pytest.approx(bf16.occupancy["rounds"]) == pytest.approx(1986 / 8)
    assert bf16.resources["dram"] == pytest.approx(fp32.resources["dram"] / 2)
    per_byte = {r.itemsize: r.resources["turnaround"] / r.resources["dram"] for r in (fp32, bf16)}
    assert per_byte[2] / per_byte[4] == pytest.approx(2 * (200e-9 + 40e-9) / (200e-9 + 32e-9))


def test_without_the_constant_only_the_shared_phase_counts_and_the_report_says_so():
    dev = {k: v for k, v in load_device().items() if k != "cta_turnaround_s"}
    report = analyze("tiled", (4096, 4096), "float32", device=dev)
    assert report.occupancy["turnaround_per_cta_s"] == pytest.approx(64 / dev["sm_clock_hz"])
    assert any("no cta_turnaround_s" in a for a in report.assumptions)


def test_the_committed_turnaround_is_documented():
    dev = load_device()
    assert dev["cta_turnaround_s"] >= 0
    how = dev["provenance"]["cta_turnaround_s"]
    assert how
    if how.startswith("PLACEHOLDER"):
        assert any("placeholder" in a for a in analyze("tiled", (1024, 1024)).assumptions)


def test_narrow_requests_bind_bf16_tiled_but_not_fp32():
    """One request per warp instruction: bf16 tiled issues 2 x 512 MiB / 64 B of them, fp32 the same count
    for twice the bytes; at the measured request rate only bf16 is request-bound."""
    dev = load_device()
    bf16 = analyze("tiled", (16384, 16384), "bfloat16")
    fp32 = analyze("tiled", (16384, 16384), "float32")
    requests = 2 * (512 << 20) // 64
    assert bf16.resources["global_requests"] == pytest.approx(requests / dev["global_requests_per_s"])
    assert fp32.resources["global_requests"] == pytest.approx(requests / dev["global_requests_per_s"])
    assert bf16.bound == "global_requests" and fp32.bound != "global_requests"
    # Triton's 16-byte vectors: 512-byte requests, a quarter of the count per byte of bf16's 64 B... or less.
    triton = analyze("triton", (16384, 16384), "bfloat16")
    assert triton.resources["global_requests"] <= bf16.resources["global_requests"] / 4
    without = {k: v for k, v in dev.items() if k != "global_requests_per_s"}
    assert "global_requests" not in analyze("tiled", (1024, 1024), "bfloat16", device=without).resources


def test_all_twelve_h200_cases_within_10_points():
    # fp32 16384^2, fp32 4096^2 and bf16 16384^2, every kernel, with no device constant refitted.
    rows = json.loads(MEASURED.read_text())["rows"]
    assert len(rows) == 12
    for row in rows:
        predicted = analyze(row["kernel"], row["shape"], row["dtype"]).predicted_fraction_of_copy
        assert abs(predicted - row["measured"]) <= 0.10, (row["shape"], row["dtype"], row["kernel"], predicted)


# ---------------------------------------------------------------------------------------------------
# Triton's layouts, re-derived from the kernel compiled for sm_90
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rec", TRITON_SM90_LAYOUTS,
                         ids=lambda r: f"{r['itemsize']}B-{r['block'][0]}x{r['block'][1]}-w{r['num_warps']}")
@without_interpreter
def test_triton_layouts_match_compiled_kernel(rec):
    pytest.importorskip("triton")
    from tileflip.kernels.triton.layout import transpose_layout

    bm, bn = rec["block"]
    compiled = transpose_layout(bm, bn, rec["num_warps"], rec["itemsize"], divisible=rec["divisible"])
    assert compiled["load"] == rec["load"] and compiled["store"] == rec["store"]
    assert compiled["shared"] == rec["shared"]
    if compiled["regs"] is not None:
        assert compiled["regs"] == rec["regs"]
    rule = triton_blocked_layout((bm, bn), rec["itemsize"], rec["num_warps"], aligned=rec["divisible"])
    assert rule == rec["load"]
    rule = triton_blocked_layout((bn, bm), rec["itemsize"], rec["num_warps"], aligned=rec["divisible"])
    assert rule == rec["store"]


def test_triton_64x64_fp32_warp_reads_two_rows_of_256_bytes():
    read = warp_access("triton", (1024, 1024), "float32", "read", block=(64, 64), num_warps=8)
    assert read.width == 16 and len(read.lines) == 4 and read.efficiency == 1.0
    rows = {a // (1024 * 4) for a in read.active}
    assert len(rows) == 2


# ---------------------------------------------------------------------------------------------------
# The GPU side, as far as it runs without a GPU
# ---------------------------------------------------------------------------------------------------

NCU_FIELDS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
              "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value")
NCU_KERNEL = ("0", "4242", "python3", "127.0.0.1", "transpose_naive_u32", "1", "7", "(16, 16, 1)", "(16384, 1, 1)",
              "0", "9.0", "Command line profiler metrics")


def _csv_line(values) -> str:
    return ",".join(f'"{v}"' for v in values)


NCU_CSV = "\n".join([
    "==PROF== Connected to process 4242",
    "==PROF== Disconnected from process 4242",
    _csv_line(NCU_FIELDS),
    _csv_line(NCU_KERNEL + ("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "", "131,072")),
    _csv_line(NCU_KERNEL + ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "sector", "2,097,152")),
    _csv_line(NCU_KERNEL + ("dram__bytes_write.sum", "byte", "16777216")),
])


def test_ncu_csv_is_summed_per_metric():
    from tileflip.bench.measure import _measured_counters, parse_ncu_csv

    sums = parse_ncu_csv(NCU_CSV)
    assert sums["st_requests"] == 131072 and sums["st_sectors"] == 2097152 and sums["dram_write"] == 16777216
    assert _measured_counters(sums)["st_sectors_per_request"] == 16
    assert parse_ncu_csv("==ERROR== profiling is not supported") is None


def test_ncu_child_is_started_by_a_name_that_exists():
    import inspect

    from tileflip.bench import measure

    assert callable(measure.ncu_child)
    assert "from tileflip.bench.measure import ncu_child; ncu_child(sys.argv[1:])" in inspect.getsource(
        measure._ncu_metrics)


def test_measure_refuses_without_a_gpu():
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the real measurement is `tileflip analyze --measure`")
    assert cli_main(["--measure", "--shape", "256x256"]) == 2


@pytest.mark.parametrize("group_m", [0, 3])
def test_column_order_reaches_the_model(group_m):
    """group_m=0 (column order, the committed table's usual order) and bands of tile rows (3) are modelled
    as such, not quietly as row order: the analyzer's grid decodes programs the way the planner does, and
    ``pid_of`` inverts it (7 x 10 tiles: the last row band is partial)."""
    variant = build_variant("triton", 448, 640, 4, threads=None, block=(64, 64), num_warps=8, strides=None,
                                out_strides=None, layouts=None, group_m=group_m)  # fmt: skip
    assert variant.grid.group_m == group_m
    grid = transpose_grid(448, 640, 64, 64, group_m)
    pm, pn = variant.tiles(np.arange(grid.programs))
    assert [(int(m), int(n)) for m, n in zip(pm, pn)] == [grid.tile_of(p) for p in range(grid.programs)]
    assert variant.pid_of(pm, pn).tolist() == list(range(grid.programs))
    report = analyze("triton", (448, 640), "float32", block=(64, 64), num_warps=8, group_m=group_m)
    assert 0 < report.predicted_fraction_of_copy <= 1.0


# ---------------------------------------------------------------------------------------------------
# The command line's Triton tile: the one backend auto runs, unless an option sets it
# ---------------------------------------------------------------------------------------------------


def _cli_json(argv, capsys) -> dict:
    assert cli_main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _cli_text(argv, capsys) -> str:
    assert cli_main(argv) == 0
    return capsys.readouterr().out


def test_triton_report_models_the_tile_auto_runs(capsys):
    from tileflip import explain, tuning

    config = tuning.triton_config(4, (1024, 512), 512)
    assert tuning.auto_for(1024, 512, 4, 512) == "triton"
    assert f"tiles {config.block_m}x{config.block_n} " in explain.plan_text((1024, 512))  # what plan prints
    argv = ["--kernel", "triton", "--shape", "1024x512", "--dtype", "fp32"]
    payload = _cli_json(argv, capsys)
    assert payload["block"] == [config.block_m, config.block_n] == [32, 32]
    assert payload["num_warps"] == config.num_warps
    choice = payload["tile_choice"]
    assert choice["modelled_is_auto"] and choice["auto_backend"] == "triton" and choice["tile_options"] == []
    assert choice["modelled_tile"]["group_m"] == config.group_m
    same = analyze("triton", (1024, 512), "float32", block=(32, 32), num_warps=config.num_warps,
                   group_m=config.group_m)
    assert payload["predicted_fraction_of_copy"] == pytest.approx(same.predicted_fraction_of_copy)
    head, statement = _cli_text(argv, capsys).splitlines()[:2]
    assert "tile 32x32" in head
    assert statement.startswith(f"tile: 32x32, {config.num_warps} warps, group_m {config.group_m} (program order: "
                                f"{program_order(config.group_m)}): the tile backend auto runs for this shape and "
                                "dtype")
    assert "--block" in statement


def test_block_overrides_auto_and_the_output_says_so(capsys):
    argv = ["--kernel", "triton", "--shape", "1024x512", "--dtype", "fp32", "--block", "64x64"]
    payload = _cli_json(argv, capsys)
    assert payload["block"] == [64, 64]
    choice = payload["tile_choice"]
    assert not choice["modelled_is_auto"] and choice["tile_options"] == ["--block"]
    assert choice["auto_triton_tile"]["block"] == [32, 32] and choice["modelled_tile"]["group_m"] == 1
    text = _cli_text(argv, capsys)
    assert "tile 64x64" in text.splitlines()[0]
    assert ("tile: 64x64, 8 warps, group_m 1 (program order: row by row of tiles): from --block, not the tile "
            "backend auto runs for this shape and dtype, which is 32x32, 8 warps, group_m -1 (program order: "
            "column by column of tiles, on a 2-D grid): tileflip.tuning's choice") in text
    # Options that name auto's own tile are said to be it.
    text = _cli_text([*argv[:-1], "32x32", "--num-warps", "8", "--group-m", "-1"], capsys)
    assert "from --block, --num-warps, --group-m, the same as the tile backend auto runs" in text


@pytest.mark.parametrize("group_m,first_tiles,words", [
    (1, [(0, 0), (0, 1), (0, 2)], "row by row of tiles"),
    (0, [(0, 0), (1, 0), (2, 0)], "column by column of tiles"),
    (-1, [(0, 0), (1, 0), (2, 0)], "column by column of tiles, on a 2-D grid"),
    (2, [(0, 0), (1, 0), (0, 1)], "bands of 2 tile rows, column by column"),
])
def test_the_program_order_is_said_in_words(group_m, first_tiles, words, capsys):
    """The words for each group_m match the planner's decoding of the first programs, and the command
    prints them beside the number."""
    grid = transpose_grid(256, 256, 32, 32, group_m)
    assert [grid.tile_of(pid) for pid in range(3)] == first_tiles
    assert program_order(group_m) == words
    text = _cli_text(["--kernel", "triton", "--shape", "256x256", "--block", "32x32", "--group-m", str(group_m)],
                     capsys)
    assert f"group_m {group_m} (program order: {words}): from --block, --group-m" in text.splitlines()[1]
    payload = _cli_json(["--kernel", "triton", "--shape", "256x256", "--block", "32x32", "--group-m", str(group_m)],
                        capsys)
    assert payload["tile_choice"]["modelled_tile"]["program_order"] == words


def test_column_order_past_grid_y_is_said_to_run_on_a_1d_grid(capsys):
    """group_m -1 where grid_n passes gridDim.y's limit: the launch is 1-D, and the words say so."""
    grid = transpose_grid(4, 32 * 65536, 32, 32, -1)
    assert grid.grid_n > 65535 and grid.launch == (grid.programs, 1, 1)
    text = _cli_text(["--kernel", "triton", "--shape", f"4x{32 * 65536}", "--block", "32x32", "--group-m", "-1",
                      "--sample", "8"], capsys)
    assert ("group_m -1 (program order: column by column of tiles, on a 1-D grid since grid_n passes gridDim.y's "
            "limit)") in text


@pytest.mark.parametrize("shape,dtype,itemsize,runs", [
    ((8192, 8191), "int8", 1, "cuda-vec"),  # rows of 8191 bytes: the unaligned class
    ((4096, 8), "bf16", 2, "cuda-naive"),
    ((1024, 4), "fp32", 4, "triton-gather"),
])
def test_a_shape_auto_runs_elsewhere_names_that_kernel(shape, dtype, itemsize, runs, capsys):
    from tileflip import tuning

    M, N = shape
    assert tuning.auto_for(M, N, itemsize, N) == runs  # the committed table's choice
    argv = ["--kernel", "triton", "--shape", f"{M}x{N}", "--dtype", dtype, "--sample", "64"]
    payload = _cli_json(argv, capsys)
    config = tuning.triton_config(itemsize, shape, N)
    assert payload["block"] == [config.block_m, config.block_n] and payload["num_warps"] == config.num_warps
    assert payload["tile_choice"]["auto_backend"] == runs and not payload["tile_choice"]["modelled_is_auto"]
    auto_line, tile_line = _cli_text(argv, capsys).splitlines()[1:3]
    assert auto_line.startswith(f"auto: backend auto on a CUDA tensor runs {runs} for this shape and dtype")
    assert "this model is of the Triton tile kernel, which backend='triton' runs" in auto_line
    assert tile_line.startswith(f"tile: {config.block_m}x{config.block_n}, {config.num_warps} warps")
    assert "the tile backend='triton' runs" in tile_line


def test_a_call_cuda_vec_refuses_is_auto_running_the_triton_tile(capsys):
    pytest.importorskip("torch")
    # A transposed view: its columns are not adjacent, so auto leaves the table's cuda-vec for the Triton tile.
    payload = _cli_json(["--kernel", "triton", "--shape", "8192x8191", "--dtype", "int8", "--strides", "1,8192",
                         "--sample", "64"], capsys)
    choice = payload["tile_choice"]
    assert choice["auto_table_choice"] == "cuda-vec" and choice["auto_backend"] == "triton"
    assert choice["modelled_is_auto"]
    assert "the table names cuda-vec, which cannot take this call: x's columns must be adjacent" in (
        choice["statement"][-1])


def test_other_kernels_carry_no_tile_statement(capsys):
    payload = _cli_json(["--kernel", "all", "--shape", "256x256"], capsys)
    assert [("tile_choice" in r) for r in payload["reports"]] == [k == "triton" for k in KERNELS]


@pytest.mark.parametrize("argv,option", [
    (["--kernel", "triton", "--block", "48x64"], "--block"),
    (["--kernel", "triton", "--block", "2048x1024"], "--block"),
    (["--kernel", "naive", "--block", "32x32"], "--block"),
    (["--kernel", "triton", "--num-warps", "64"], "--num-warps"),
    (["--kernel", "tiled", "--num-warps", "4"], "--num-warps"),
    (["--kernel", "triton", "--group-m", "-4"], "--group-m"),
    (["--kernel", "triton", "--threads", "32x8"], "--threads"),
    (["--kernel", "tiled", "--threads", "32x5"], "--threads"),
    (["--threads", "0x16"], "--threads"),
    (["--strides=-1,1"], "--strides"),
    (["--sample", "-3"], "--sample"),
    (["--device", "{tmp}/missing.json"], "--device"),
    (["--png", "{tmp}"], "--png"),
    (["--png", "{tmp}/file/x.png"], "--png"),
])
def test_bad_arguments_are_refused_by_name_before_anything_is_written(argv, option, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    png = tmp_path / "out.png"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--shape", "64x64", *argv, *([] if "--png" in argv else ["--png", str(png)])])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and not png.exists()
    assert f"argument {option}: " in err.strip().splitlines()[-1]
