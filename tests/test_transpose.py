"""tileflip.transpose: exact bits on adversarial shapes, strides and dtypes, and clear errors.

The same cases run in Triton's interpreter on the CPU and natively, on every backend, on a GPU
(marked ``gpu``). Outputs are poisoned before each call and compared bit for bit.
"""

import pytest
import torch
from conftest import HAS_GPU
from helpers import assert_bits_equal, bits, poisoned, random_bits, without_interpreter

import tileflip
from tileflip.kernels import dtypes
from tileflip.ops import backends

# Named shapes, each with the pitfall it exposes.
SHAPES = {
    "example_2x3": (2, 3),  # output offsets 0, 2, 4: the leading dimension is M
    "tail_31x65": (31, 65),  # a tail in both dimensions, one program keeps a 31x1 region
    "tail_65x31": (65, 31),  # the same, other orientation
    "row_1xN": (1, 1000),
    "col_Nx1": (1000, 1),
    "single": (1, 1),
    "primes_97x89": (97, 89),
    "past_tile_m_65x64": (65, 64),  # one dimension past a tile, the other exact
    "past_tile_n_64x65": (64, 65),
    "seed_128x96": (128, 96),
    "nonsquare_1024x512": (1024, 512),  # the shape that catches col*N+row
    "nonsquare_300x1030": (300, 1030),
}

GPU_BACKENDS = ["triton", "triton-gather", "cuda-naive", "cuda-tiled", "cuda-tiled-nopad", "auto"]
needs_interpreter = pytest.mark.skipif(HAS_GPU, reason="on a GPU machine the gpu-marked cases run these natively")


def device_backends(cpu=("triton", "triton-gather"), gpu=GPU_BACKENDS):
    params = [pytest.param("cpu", b, id=f"cpu-{b}", marks=needs_interpreter) for b in cpu]
    params += [pytest.param("cuda", b, id=f"cuda-{b}", marks=pytest.mark.gpu) for b in gpu]
    return params


ALL_DTYPES = sorted(dtypes.SUPPORTED, key=str)
# For the tests that launch the 2-D Triton kernel directly: the backend names no other path.
TRITON_ONLY = device_backends(cpu=("triton",), gpu=("triton",))


@pytest.mark.parametrize("device,backend", device_backends(cpu=("triton", "triton-gather", "auto")))
@pytest.mark.parametrize("name", list(SHAPES))
def test_shapes(name, device, backend):
    x = random_bits(SHAPES[name], torch.float32, device, seed=len(name))
    out = poisoned(SHAPES[name][::-1], torch.float32, device)
    result = tileflip.transpose(x, out, backend=backend)
    assert result is out
    assert_bits_equal(out, x.t())


@pytest.mark.parametrize("device,backend", device_backends())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(31, 65), (130, 67)], ids=str)
def test_dtypes(dtype, shape, device, backend):
    x = random_bits(shape, dtype, device, seed=3)
    y = tileflip.transpose(x, backend=backend)
    assert_bits_equal(y, x.t())


def _views(device):
    base = random_bits((96, 150), torch.float32, device, seed=7)
    wide = random_bits((40, 70), torch.float32, device, seed=8)
    return {
        "transposed_view": base.t(),  # input stride (1, 150): the column-major case
        "step_slices": base[1::3, ::2],  # strides (450, 2) and a storage offset
        "storage_offset": base[5:70, 17:130],
        "expanded_stride0": wide[:1].expand(33, 70),  # stride (0, 1): every row is the same memory
        "expanded_both": torch.tensor([1.5], device=device).expand(17, 23),  # strides (0, 0)
        "overlapping_rows": torch.as_strided(base, (50, 40), (3, 1)),  # rows overlap in memory: fine to read
        "column_slice": base[:, 77:78],
    }


@pytest.mark.parametrize("device,backend", device_backends())
@pytest.mark.parametrize("view", list(_views("cpu")))
def test_strided_inputs(view, device, backend):
    x = _views(device)[view]
    out = poisoned((x.shape[1], x.shape[0]), x.dtype, device)
    tileflip.transpose(x, out, backend=backend)
    assert_bits_equal(out, x.t())


@pytest.mark.parametrize("device,backend", device_backends())
def test_strided_small_dtypes(device, backend):
    for dtype in (torch.uint8, torch.bfloat16, torch.float64):
        x = random_bits((90, 140), dtype, device, seed=11)[3::2, 5:]
        assert_bits_equal(tileflip.transpose(x, backend=backend), x.t())


@pytest.mark.parametrize("device,backend", device_backends())
@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)], ids=str)
def test_empty(shape, device, backend):
    x = torch.empty(shape, device=device)
    y = tileflip.transpose(x, backend=backend)
    assert y.shape == shape[::-1] and y.is_contiguous()
    out = torch.empty(shape[::-1], device=device)
    assert tileflip.transpose(x, out, backend=backend) is out


def test_cpu_backends_torch_path():
    x = random_bits((31, 65), torch.bfloat16)
    assert_bits_equal(tileflip.transpose(x, backend="torch"), x.t())


# --------------------------------------------------------------------------------------------------
# Bad input: a clear error naming the argument, and nothing written to out.
# --------------------------------------------------------------------------------------------------


def _refused(exc, match, x, out=None, **kwargs):
    before = None if not isinstance(out, torch.Tensor) else bits(out).clone()
    with pytest.raises(exc, match=match):
        tileflip.transpose(x, out, **kwargs)
    if before is not None:
        assert torch.equal(bits(out), before), "a refused call wrote to out"


class TestErrors:
    def test_not_a_tensor(self):
        _refused(TypeError, "x must be a torch.Tensor", [[1.0, 2.0]])

    @pytest.mark.parametrize("shape", [(), (4,), (2, 3, 4)])
    def test_not_2d(self, shape):
        _refused(ValueError, "x must be 2-D", torch.ones(shape))

    def test_16_byte_dtype(self):
        _refused(TypeError, "x has the 16-byte dtype", torch.ones(3, 4, dtype=torch.complex128))

    def test_packed_dtype(self):
        x = torch.zeros(3, 4, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
        _refused(TypeError, "x has the packed dtype", x)

    def test_bad_backend(self):
        _refused(ValueError, "backend must be one of", torch.ones(3, 4), backend="cublas")

    def test_out_not_tensor(self):
        _refused(TypeError, "out must be a torch.Tensor", torch.ones(3, 4), out=[0])

    def test_out_wrong_shape(self):
        _refused(ValueError, r"out must have shape \(4, 3\)", torch.ones(3, 4), out=poisoned((3, 4), torch.float32))

    def test_out_wrong_dtype(self):
        _refused(TypeError, "out must have dtype torch.float32", torch.ones(3, 4), out=poisoned((4, 3), torch.int32))

    def test_out_not_contiguous(self):
        out = poisoned((3, 4), torch.float32).t()
        _refused(ValueError, "out must be contiguous", torch.ones(3, 4), out=out)

    def test_out_overlaps_x(self):
        buf = poisoned((64,), torch.float32)
        x = buf[:12].view(3, 4)
        _refused(ValueError, "out overlaps x", x, out=buf[6:18].view(4, 3))

    def test_out_is_x(self):
        x = random_bits((4, 4), torch.float32)
        _refused(ValueError, "out overlaps x", x, out=x)

    def test_cpu_tensor_to_cuda_backend(self):
        out = poisoned((4, 3), torch.float32)
        for backend in ("cuda-naive", "cuda-tiled", "cuda-tiled-nopad"):
            _refused(ValueError, "needs a CUDA tensor", random_bits((3, 4), torch.float32), out=out, backend=backend)

    @pytest.mark.gpu
    def test_out_on_other_device(self):
        x = random_bits((3, 4), torch.float32, "cuda")
        _refused(ValueError, "out must be on cuda", x, out=poisoned((4, 3), torch.float32, "cpu"))

    @pytest.mark.gpu
    @pytest.mark.parametrize("backend", ["auto", "triton", "triton-gather", "cuda-tiled"])
    def test_cuda_fast_path_refusals(self, backend):
        """The CUDA fast path hands every irregular call to the checked path, which names the problem."""
        x = random_bits((3, 4), torch.float32, "cuda")
        _refused(ValueError, r"out must have shape \(4, 3\)", x, out=poisoned((3, 4), torch.float32, "cuda"),
                 backend=backend)  # fmt: skip
        _refused(TypeError, "out must have dtype", x, out=poisoned((4, 3), torch.int32, "cuda"), backend=backend)
        _refused(ValueError, "out must be contiguous", x, out=poisoned((3, 4), torch.float32, "cuda").t(),
                 backend=backend)  # fmt: skip
        buf = poisoned((64,), torch.float32, "cuda")
        _refused(ValueError, "out overlaps x", buf[:12].view(3, 4), out=buf[6:18].view(4, 3), backend=backend)
        _refused(ValueError, "backend must be one of", x, backend="cublas")
        _refused(ValueError, "x must be 2-D", torch.ones(2, 3, 4, device="cuda"), backend=backend)

    def test_meta_device(self):
        _refused(ValueError, "x must be on a CPU or CUDA device", torch.empty(3, 4, device="meta"))


def test_triton_cpu_without_interpreter_is_refused(tmp_path):
    """Without TRITON_INTERPRET, backend='triton' refuses a CPU tensor and 'auto' falls back to torch."""
    import os
    import subprocess
    import sys

    code = (
        "import torch, tileflip\n"
        "x = torch.arange(12.).view(3, 4)\n"
        "assert torch.equal(tileflip.transpose(x), x.t())\n"
        "try:\n    tileflip.transpose(x, backend='triton')\nexcept ValueError as e:\n    print('refused:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "refused: backend='triton' got a CPU tensor" in result.stdout


# --------------------------------------------------------------------------------------------------
# Compilation: sm_90 without a GPU, and no new compile for new shapes of a known class (GPU).
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("element_size", [1, 2, 4, 8])
@without_interpreter
def test_compiles_for_sm90_without_gpu(element_size):
    from tileflip import tuning
    from tileflip.kernels.triton import transpose as triton_transpose

    config = tuning.triton_config(element_size)
    compiled = triton_transpose.compile_for_target(element_size, config, arch=90)
    assert len(compiled.asm["cubin"]) > 0
    # tl.trans goes through shared memory: the tile (padded or swizzled) must fit, and be reported.
    shared = compiled.metadata.shared
    print(f"{element_size}-byte {config}: shared memory {shared} B")
    assert config.block_m * config.block_n * element_size <= shared <= 228 * 1024
    assert compiled.metadata.num_warps == config.num_warps


@pytest.mark.gpu
def test_no_recompile_for_new_shapes_of_a_class():
    """20 new shapes whose sizes and strides share Triton's specialization keys compile nothing new."""
    import triton

    compiles = []

    def count(*args, **kwargs):
        compiles.append(kwargs.get("key"))

    tileflip.transpose(torch.ones(64, 96, device="cuda"), backend="triton")  # warm the class: i32, all D
    old = triton.knobs.runtime.jit_post_compile_hook
    triton.knobs.runtime.jit_post_compile_hook = count
    try:
        for k in range(20):
            M, N = 16 * (k + 5), 16 * (3 * k + 7)
            x = random_bits((M, N), torch.float32, "cuda", seed=k)
            assert_bits_equal(tileflip.transpose(x, backend="triton"), x.t())
    finally:
        triton.knobs.runtime.jit_post_compile_hook = old
    assert compiles == [], f"{len(compiles)} new compile(s) for shapes of a known class"
    # The counter does see a compile: a tile configuration no other test uses is a new kernel.
    from tileflip.kernels.triton import transpose as triton_transpose
    from tileflip.plan import TileConfig

    triton.knobs.runtime.jit_post_compile_hook = count
    try:
        x = random_bits((48, 80), torch.float32, "cuda", seed=1)
        out = poisoned((80, 48), torch.float32, "cuda")
        triton_transpose.launch(x, out, TileConfig(16, 32, 2))
        assert_bits_equal(out, x.t())
    finally:
        triton.knobs.runtime.jit_post_compile_hook = old
    assert len(compiles) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cuda-naive", "cuda-tiled"])
def test_past_int32_elements(backend):
    """More than 2**31 elements: offsets must be 64-bit (int8, 2.1 GiB in and out)."""
    M, N = 65537, 32769
    assert M * N > 2**31
    x = torch.randint(-128, 127, (M, N), dtype=torch.int8, device="cuda")
    out = torch.full((N, M), 0x5A, dtype=torch.int8, device="cuda")
    tileflip.transpose(x, out, backend=backend)
    assert torch.equal(out, x.t())
    del x, out
    torch.cuda.empty_cache()


@pytest.mark.parametrize("device,backend", TRITON_ONLY)
@pytest.mark.parametrize("group_m", [-1, 0, 1, 3, 8])
def test_program_orders(group_m, device, backend):
    """Every program order of the kernel (columns of tiles on a 2-D or a 1-D grid, rows of tiles, or bands
    of group_m tile rows) is exact."""
    from tileflip.kernels.triton import transpose as triton_transpose
    from tileflip.plan import TileConfig

    x = random_bits((200, 130), torch.int16, device, seed=group_m)[:, 1:]
    out = poisoned((129, 200), torch.int16, device)
    triton_transpose.launch(x, out, TileConfig(32, 64, 4, group_m))
    assert_bits_equal(out, x.t())


@pytest.mark.parametrize("device,backend", TRITON_ONLY)
@pytest.mark.parametrize("group_m", [-1, 0, 1, 3])
@pytest.mark.parametrize("programs", [1, 3, 7, 1000])
def test_looped_launch(programs, group_m, device, backend):
    """``launch_looped``: a grid of fewer programs than tiles, each looping over its share (the distributed
    moves beside a collective), is exact in every program order, into an output with a wider row stride;
    a cap above the tile count launches one program per tile."""
    from tileflip.kernels.triton import transpose as triton_transpose
    from tileflip.plan import TileConfig

    x = random_bits((150, 131), torch.float32, device, seed=programs)[:, 2:]  # 5 x 5 tiles of 32 x 32
    wide = poisoned((129, 160), torch.float32, device)
    config = TileConfig(32, 32, 4, group_m, 1, 0, int(group_m == 1), int(programs == 3))
    triton_transpose.launch_looped(x, wide[:, 3:153], config, programs)
    assert_bits_equal(wide[:, 3:153].contiguous(), x.t())
    assert (bits(wide[:, :3]) == bits(poisoned((129, 3), torch.float32, device))).all()
    assert (bits(wide[:, 153:]) == bits(poisoned((129, 7), torch.float32, device))).all()


def test_two_d_grid_launch_falls_back_past_grid_y():
    """group_m == -1 launches (grid_m, grid_n) while grid_n fits gridDim.y, else the same column order
    decoded from a 1-D grid (group_m 0), as the planner says."""
    from tileflip import plan
    from tileflip.kernels.triton import transpose as triton_transpose
    from tileflip.plan import TileConfig

    config = TileConfig(32, 32, 4, -1, 1, 0, 1, 1)
    for M, N in [(1024, 512), (64, 32 * 65535), (64, 32 * 65536)]:
        key, grid, scalars = triton_transpose._class_of(M, N, N, 1, M, 4, 0, config, 0, 0)
        assert (*grid, 1) == plan.transpose_grid(M, N, 32, 32, -1).launch
        assert scalars[9] == key[1].group_m == (-1 if grid[1] > 1 else 0)


@pytest.mark.parametrize("device,backend", device_backends(cpu=("triton-gather",), gpu=("triton-gather",)))
@pytest.mark.parametrize("view", ["contiguous", "sliced", "transposed"])
@pytest.mark.parametrize("M", [1, 2, 3, 7, 33, 100])
def test_gather_kernel_divisions(M, view, device, backend):
    """The gather kernel, whose division by M is a compiled-in constant for 2 <= M < 8 and a multiply-high
    past that (33, 100), and whose stores are dense, is exact on strided inputs."""
    base = random_bits((M * 3 + 5, 1100), torch.int32, device, seed=M)
    x = {"contiguous": base[:M, :1037], "sliced": base[1::3, 3:][:M], "transposed": base.t()[:M, :]}[view]
    out = poisoned(x.shape[::-1], torch.int32, device)
    tileflip.transpose(x, out, backend=backend)
    assert_bits_equal(out, x.t())


@pytest.mark.parametrize("device,backend", device_backends(cpu=("triton-gather",), gpu=("triton-gather", "auto")))
@pytest.mark.parametrize("dtype", [torch.int8, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("view", ["contiguous", "offset", "sliced", "expanded", "transposed"])
def test_gather_two_rows(dtype, view, device, backend):
    """The gather kernel's two-row form (each row read along itself, the pair interleaved in registers) is
    exact for every element size on rows at any offset, strided columns, a stride-0 row and a transposed
    input, with a masked last program (1037 columns)."""
    base = random_bits((6, 2 * 1037 + 9), dtype, device, seed=len(view))
    x = {"contiguous": base[:2, :1037], "offset": base[3:5, 1:1038], "sliced": base[1::3, 3::2][:, :1037],
         "expanded": base[4:5, 5:1042].expand(2, 1037),
         "transposed": base.t().contiguous().t()[:2, :1037]}[view]  # fmt: skip
    out = poisoned(x.shape[::-1], dtype, device)
    tileflip.transpose(x, out, backend=backend)
    assert_bits_equal(out, x.t())


@pytest.mark.parametrize("M", [2, 3, 33])
@without_interpreter
def test_gather_full_programs_move_vectors(M):
    """Compiled for sm_90 as a bf16 M x 100000 launch specializes it (``total`` unspecialized): the full
    programs' branch stores each thread's 8 output elements as one 16-byte vector (the last program's,
    masked by the unspecialized ``total``, one element at a time); with two rows the loads are vectors
    too (2 a branch), with more they gather one element a lane (8 a branch)."""
    import re

    from tileflip.kernels.triton import transpose as triton_transpose
    from tileflip.kernels.triton.layout import compile_launch

    _, _, scalars = triton_transpose._gather_class(M, 100000, 100000, 1, M, 2, 0, 0, 0)
    names = ("M", "N", "stride_xm", "stride_xn", "stride_om", "total", "magic", "shift")
    constexprs = dict(zip(("BLOCK", "INDEX_64", "MAGIC", "OUT_DENSE", "SHORT_M"), scalars[8:]))
    assert constexprs["OUT_DENSE"] and constexprs["BLOCK"] == 8 * 32 * triton_transpose.GATHER_WARPS
    args = dict(zip(names, scalars[:8]), x_ptr=None, out_ptr=None)
    ptx = compile_launch(triton_transpose.transpose_gather_kernel, args, constexprs,
                         triton_transpose.GATHER_WARPS, "*u16").asm["ptx"]  # fmt: skip
    loads, stores = re.findall(r"ld\.global\S*", ptx), re.findall(r"st\.global\S*", ptx)
    assert stores.count("st.global.v4.b32") == 1 and stores.count("st.global.b16") == 8, stores
    if M == 2:
        assert len(loads) == 4 and all(".v2." in op for op in loads), loads
    else:
        assert len(loads) == 16 and not any(".v" in op for op in loads), loads


@pytest.mark.parametrize("device,backend", TRITON_ONLY)
@pytest.mark.parametrize("interior", [1, 0])
@pytest.mark.parametrize("view", ["sliced", "transposed", "expanded"])
def test_output_oriented_tile(view, interior, device, backend):
    """The tile held in the output's orientation (``out_tile=1``, no tl.trans) is exact on tails, interior
    tiles, strided, transposed and stride-0 inputs."""
    from tileflip.kernels.triton import transpose as triton_transpose
    from tileflip.plan import TileConfig

    base = random_bits((200, 130), torch.int16, device, seed=len(view) + interior)
    x = {"sliced": base[3::2, 1:], "transposed": base.t()[5:, :150],
         "expanded": base[7, :].unsqueeze(0).expand(70, 130)}[view]  # fmt: skip
    out = poisoned(x.shape[::-1], torch.int16, device)
    triton_transpose.launch(x, out, TileConfig(32, 64, 4, 0, interior, out_tile=1))
    assert_bits_equal(out, x.t())


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["auto", "triton", "triton-gather", "cuda-tiled", "torch"])
def test_prepared_calls_stay_exact_and_checked(backend):
    """Repeated calls of one signature take the prepared launch (``ops.transpose._prepared``): new data and a new
    ``out`` each time stay exact, an ``out`` of another 16-byte alignment is another signature, and an
    overlapping ``out`` is refused on a prepared signature too."""
    from tileflip.ops import transpose as ops

    for k in range(3):
        x = random_bits((40, 72), torch.float32, "cuda", seed=10 + k)
        out = poisoned((72, 40), torch.float32, "cuda")
        assert tileflip.transpose(x, out, backend=backend) is out
        assert_bits_equal(out, x.t())
        assert_bits_equal(tileflip.transpose(x, backend=backend), x.t())
    assert any(key[:7] == (40, 72, 72, 1, torch.float32, x.get_device(), backend) for key in ops._prepared)
    raw = poisoned((72 * 40 + 1,), torch.float32, "cuda")
    out = raw[1:].view(72, 40)  # 4 bytes past a 16-byte boundary
    tileflip.transpose(x, out, backend=backend)
    assert_bits_equal(out, x.t())
    assert_bits_equal(raw[:1], poisoned((1,), torch.float32, "cuda"))
    buf = random_bits((8192,), torch.float32, "cuda", seed=3)
    x = buf[: 40 * 72].view(40, 72)
    tileflip.transpose(x, backend=backend)  # prepares the signature of x with a 16-byte-aligned out
    with pytest.raises(ValueError, match="out overlaps x"):
        tileflip.transpose(x, buf[16 : 16 + 72 * 40].view(72, 40), backend=backend)


@pytest.mark.gpu
def test_fast_path_refuses_an_unhashable_backend_by_name():
    """A backend that is not a string reaches the checked path's named error on a CUDA tensor too."""
    x = random_bits((8, 16), torch.float32, "cuda")
    with pytest.raises(ValueError, match="backend must be one of"):
        tileflip.transpose(x, backend=["triton"])


@pytest.mark.gpu
def test_fast_path_reuses_the_compiled_kernel():
    """The second call of a class goes through the cached launcher, with exact results."""
    from tileflip.kernels.triton import transpose as triton_transpose

    x = random_bits((96, 160), torch.bfloat16, "cuda", seed=5)
    tileflip.transpose(x, backend="triton")
    held = triton_transpose.launches_compiled()
    for k in range(3):
        y = random_bits((96 + 16 * k, 160), torch.float16, "cuda", seed=k)  # same element size and class
        out = poisoned((160, 96 + 16 * k), torch.float16, "cuda")
        tileflip.transpose(y, out, backend="triton")
        assert_bits_equal(out, y.t())
    assert triton_transpose.launches_compiled() == held
    # Plain kernels (no scratch memory, no launch hooks) go through triton's C launcher directly.
    assert triton_transpose.launches_direct() == held


def test_vec_refusal_names_the_requirement():
    """What the cuda-vec kernel cannot take, and why (a pure rule, checked on the CPU)."""
    from tileflip.ops.backends import vec_refusal

    assert vec_refusal(1, 1, 8192, 0) is None and vec_refusal(2, 1, 8, 4096) is None
    assert "1- and 2-byte" in vec_refusal(4, 1, 8192, 0)
    assert "stride 1" in vec_refusal(1, 8192, 8192, 0)
    assert "16-byte units" in vec_refusal(1, 1, 8191, 0) and "16-byte units" in vec_refusal(2, 1, 4, 0)
    assert "16-byte boundary" in vec_refusal(2, 1, 8, 2)


def test_cuda_vec_refuses_a_cpu_tensor():
    with pytest.raises(ValueError, match="backend='cuda-vec' needs a CUDA tensor"):
        tileflip.transpose(torch.zeros(16, 3, dtype=torch.int8), backend="cuda-vec")


def test_auto_keeps_off_the_cuda_kernels_without_nvrtc(monkeypatch):
    """The table names CUDA C++ kernels for some classes (cuda-vec, cuda-naive); where cuda-python or NVRTC
    is missing (the optional extra), 'auto' runs the Triton kernel instead of failing."""
    from tileflip.kernels.cuda import nvrtc

    monkeypatch.setattr(nvrtc, "available", lambda: False)
    assert backends.auto_kernel("cuda-vec", 1, 1, 4096, 0) == "triton"
    assert backends.auto_kernel("cuda-naive", 4, 1, 100, 0) == "triton"
    assert backends.auto_kernel("triton-gather", 4, 1, 100, 0) == "triton-gather"
    monkeypatch.setattr(nvrtc, "available", lambda: True)
    assert backends.auto_kernel("cuda-vec", 1, 1, 4096, 0) == "cuda-vec"
    assert backends.auto_kernel("cuda-vec", 1, 1, 4095, 0) == "triton"  # refused: rows not whole 16-byte units
    assert backends.auto_kernel("cuda-naive", 4, 1, 100, 0) == "cuda-naive"


@pytest.mark.gpu
def test_auto_without_nvrtc_runs_triton_exactly(monkeypatch):
    from tileflip import tuning
    from tileflip.kernels.cuda import nvrtc
    from tileflip.kernels.cuda import transpose as cuda_transpose
    from tileflip.ops import transpose as ops

    monkeypatch.setattr(nvrtc, "available", lambda: False)
    monkeypatch.setattr(cuda_transpose, "launch", lambda *a: pytest.fail("a CUDA C++ kernel was launched"))
    monkeypatch.setattr(cuda_transpose, "direct_launch", lambda *a: pytest.fail("a CUDA C++ kernel was prepared"))
    assert tuning.auto_for(2048, 4095, 1, 4095) == "cuda-vec" and tuning.auto_for(100000, 8, 4, 8) == "cuda-naive"
    ops._prepared.clear()
    try:
        for shape, dtype in [((2048, 4095), torch.int8), ((100000, 8), torch.float32)]:  # cuda-vec, cuda-naive
            x = random_bits(shape, dtype, "cuda", seed=4)
            for _ in range(2):  # the checked path, then the prepared one
                assert_bits_equal(tileflip.transpose(x), x.t())
    finally:
        ops._prepared.clear()


@pytest.mark.gpu
def test_cuda_vec_refusals_and_auto_fallback(monkeypatch):
    """backend='cuda-vec' refuses what it cannot take with the reason; 'auto' sends a 1-byte unaligned
    case to it where the call qualifies and to the Triton kernel where it does not, exact either way."""
    from tileflip import tuning
    from tileflip.kernels.cuda import transpose as cuda_transpose
    from tileflip.ops import transpose as ops

    x = random_bits((2048, 4095), torch.int8, "cuda", seed=3)  # 8 MiB, rows of 4095 bytes: "unaligned"
    for bad, fragment in [(x.to(torch.int32), "1- and 2-byte"), (x.t(), "stride 1"), (x[:2047], "16-byte units")]:
        with pytest.raises(ValueError, match=f"backend='cuda-vec' cannot take this call: .*{fragment}"):
            tileflip.transpose(bad, backend="cuda-vec")
    buffer = poisoned((4095 * 2048 + 1,), torch.int8, "cuda")
    with pytest.raises(ValueError, match="16-byte boundary"):
        tileflip.transpose(x, buffer[1:].view(4095, 2048), backend="cuda-vec")
    assert tuning.auto_for(2048, 4095, 1, 4095) == "cuda-vec"
    ran = []
    launch_known = cuda_transpose.launch_known
    monkeypatch.setattr(cuda_transpose, "direct_launch", lambda *args: None)  # every call takes launch_known
    monkeypatch.setattr(cuda_transpose, "launch_known", lambda *args: ran.append(args[-1]) or launch_known(*args))
    ops._prepared.clear()
    for source, out, kernel in [(x, None, ["vec"]), (x, buffer[1:].view(4095, 2048), []), (x[:2040], None, [])]:
        ran.clear()
        result = tileflip.transpose(source, out)
        assert_bits_equal(result.contiguous() if out is None else result.clone(), source.t())
        assert ran == kernel, (source.shape, ran)


@pytest.mark.parametrize("device,backend", TRITON_ONLY)
def test_ragged_skinny_tile_is_exact(device, backend):
    """The skinny tile on rows of one and a half tiles, with partial tiles down the columns."""
    from tileflip import tuning
    from tileflip.kernels.triton import transpose as triton_transpose

    config = tuning.triton_config(1, (217600, 384), 384)
    assert config == tuning.triton_config(1, (65536, 256), 256)
    x = random_bits((config.block_m + 37, 3 * config.block_n // 2), torch.int8, device, seed=3)
    out = poisoned(tuple(x.shape[::-1]), torch.int8, device)
    triton_transpose.launch(x, out, config)
    assert_bits_equal(out, x.t())
