"""The CUDA C++ backend without a GPU: its .cu file compiles for sm_90 with NVRTC (through tileflip's
loader) and with nvcc, the cubins hold every kernel, and the NVRTC disk cache and errors behave."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"  # children get it on PYTHONPATH when tileflip is not installed

pytest.importorskip("cuda.bindings", reason="the CUDA backend needs cuda-python: pip install 'tileflip[cuda]'")

from tileflip.kernels.cuda import nvrtc  # noqa: E402 (after the importorskip)
from tileflip.kernels.cuda import permute as cuda_permute  # noqa: E402
from tileflip.kernels.cuda import quantize as cuda_quantize  # noqa: E402
from tileflip.kernels.cuda import staged as cuda_staged  # noqa: E402
from tileflip.kernels.cuda import transpose as cuda_transpose  # noqa: E402
from tileflip.kernels.cuda import words as cuda_words  # noqa: E402

ARCH = 90
ITEMSIZE = {f"u{bits}": bits // 8 for bits in cuda_transpose.ELEMENT_BITS}


# ---------------------------------------------------------------------------------------------------
# A minimal ELF64 reader: cuobjdump is not part of every toolkit install, the ELF layout always is.
# ---------------------------------------------------------------------------------------------------

EM_CUDA = 190
SHT_SYMTAB = 2
STT_FUNC = 2
STB_GLOBAL = 1


def _sections(elf: bytes) -> list[tuple[str, int, int, int, int]]:
    """(name, type, offset, size, link) of every section header."""
    assert elf[:4] == b"\x7fELF" and elf[4] == 2, "not a 64-bit ELF file"
    (shoff,) = struct.unpack_from("<Q", elf, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 58)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    return [(_cstr(elf, names_at + h[0]), h[1], h[4], h[5], h[6]) for h in headers]


def _cstr(elf: bytes, start: int) -> str:
    return elf[start : elf.index(b"\0", start)].decode()


def global_functions(elf: bytes) -> set[str]:
    """Names of the global function symbols (the kernel entry points) of a cubin."""
    sections = _sections(elf)
    _, _, sym_off, sym_size, strtab = next(s for s in sections if s[1] == SHT_SYMTAB)
    str_off = sections[strtab][2]
    names = set()
    for off in range(sym_off, sym_off + sym_size, 24):
        st_name, st_info = struct.unpack_from("<IB", elf, off)
        if st_info >> 4 == STB_GLOBAL and st_info & 0xF == STT_FUNC:
            names.add(_cstr(elf, str_off + st_name))
    return names


def cubin_arch(elf: bytes) -> int:
    """The SM version a cubin targets, from e_flags (its field moved with ELF ABI version 8, CUDA 12.x)."""
    assert struct.unpack_from("<H", elf, 18)[0] == EM_CUDA, "not a CUDA ELF file"
    (flags,) = struct.unpack_from("<I", elf, 48)
    return (flags >> 8) & 0xFF if elf[8] >= 8 else flags & 0xFF


def static_shared_bytes(elf: bytes, kernel: str) -> int:
    return sum(s[3] for s in _sections(elf) if s[0] == f".nv.shared.{kernel}")


def check_cubin(elf: bytes) -> None:
    assert cubin_arch(elf) == ARCH
    assert global_functions(elf) == set(cuda_transpose.kernel_names())
    for suffix, itemsize in ITEMSIZE.items():
        assert static_shared_bytes(elf, f"transpose_naive_{suffix}") == 0
        padded = static_shared_bytes(elf, f"transpose_tiled_{suffix}")
        unpadded = static_shared_bytes(elf, f"transpose_tiled_nopad_{suffix}")
        # Both tiles are 32 x 32 elements; the padded one has one more column of 32 elements.
        assert unpadded >= 32 * 32 * itemsize
        assert padded - unpadded == 32 * itemsize
    for bits in cuda_transpose.VARIANT_BITS["vec"]:  # a 128 x 128-byte tile, whatever the element size
        assert static_shared_bytes(elf, f"transpose_vec_u{bits}") >= 128 * 128


# ---------------------------------------------------------------------------------------------------
# Compilation of the real kernels
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nvrtc_cubin() -> bytes:
    cubins = cuda_transpose.compile_cubin(ARCH, use_cache=False)
    assert list(cubins) == ["transpose.cu"]
    return cubins["transpose.cu"]


def test_kernel_names_cover_every_variant_and_size():
    names = cuda_transpose.kernel_names()
    assert len(names) == len(set(names)) == 3 * 4 + 2  # vec: 1- and 2-byte elements only
    assert "transpose_naive_u32" in names and "transpose_tiled_nopad_u8" in names
    assert "transpose_vec_u8" in names and "transpose_vec_u16" in names and "transpose_vec_u32" not in names


@pytest.mark.parametrize("name", cuda_transpose.kernel_names())
def test_nvrtc_cubin_has_kernel(nvrtc_cubin, name):
    assert len(nvrtc_cubin) > 0
    assert name in global_functions(nvrtc_cubin)


def test_nvrtc_cubin_layout(nvrtc_cubin):
    check_cubin(nvrtc_cubin)


def check_realign_cubin(elf: bytes) -> None:
    assert cubin_arch(elf) == ARCH
    names = {name: size for size, pair in cuda_permute.KERNELS.items() for name in pair}
    assert global_functions(elf) == set(names) and len(names) == 4
    for name, size in names.items():  # the tile: 64 / size output rows of size * (256 + 32) / 4 + 1 words
        assert static_shared_bytes(elf, name) >= 64 // size * (size * 72 + 1) * 4


def test_nvrtc_compiles_the_realigned_permute():
    cubins = cuda_permute.compile_cubin(ARCH, use_cache=False)
    assert list(cubins) == ["permute_realign.cu"]
    check_realign_cubin(cubins["permute_realign.cu"])


def check_words_cubin(elf: bytes) -> None:
    assert cubin_arch(elf) == ARCH
    names = cuda_words.kernel_names()
    assert global_functions(elf) == set(names) and len(names) == 15 + 7 + 7 + 3 + 1
    for name in cuda_words.thin_kernel_names():  # four warps' staged output: 512 * S bytes and a word's
        s = int(name.rsplit("_", 1)[1])  # reach on either side (sm_90 cubins may count the 1 KiB the system reserves)
        assert 0 <= static_shared_bytes(elf, name) - 4 * (16 + 512 * s + 32) <= 1024, name
    assert static_shared_bytes(elf, cuda_words.SHIFT_KERNEL) <= 1024  # the row copy stages nothing
    for name in cuda_words.split_kernel_names():  # the split kernels move everything in registers
        assert static_shared_bytes(elf, name) <= 1024, name


def test_nvrtc_compiles_the_word_kernels():
    cubins = cuda_words.compile_cubin(ARCH, use_cache=False)
    assert list(cubins) == ["permute_words.cu"]
    check_words_cubin(cubins["permute_words.cu"])


def _declared_fields(struct_name: str) -> list[str]:
    source = cuda_words.CU_FILE.read_text()
    struct = re.search(r"struct " + struct_name + r" \{(.*?)\};", source, re.S).group(1)
    declared = re.findall(r"^\s*(tf_i64|int) ([^;]*);", struct, re.M)
    return [n.strip().split("[")[0] for _, group in declared for n in group.split(",")]


def test_thin_params_match_the_kernels_struct():
    # ThinParams: 3 int64, 4 int32, then 6 + 6 int64; the launcher fills it from thin_fields
    assert ctypes.sizeof(cuda_words._ThinParams) == 3 * 8 + 4 * 4 + 12 * 8
    assert _declared_fields("ThinParams") == [name for name, _ in cuda_words._ThinParams._fields_]


def test_split_params_match_the_kernels_struct():
    # SplitParams: 2 int64, 4 int32, then 6 + 6 + 6 int64; the launcher fills it from split_fields
    assert ctypes.sizeof(cuda_words._SplitParams) == 2 * 8 + 4 * 4 + 18 * 8
    assert _declared_fields("SplitParams") == [name for name, _ in cuda_words._SplitParams._fields_]


def test_shift_params_match_the_kernels_struct():
    # ShiftParams: 5 int64, 3 + 6 + 6 int32 (4 bytes of padding), then 6 + 6 int64; from shift_fields
    assert ctypes.sizeof(cuda_words._ShiftParams) == 5 * 8 + 15 * 4 + 4 + 12 * 8
    assert cuda_words._ShiftParams.sizes.offset == 5 * 8 + 15 * 4 + 4
    assert _declared_fields("ShiftParams") == [name for name, _ in cuda_words._ShiftParams._fields_]


def check_quantize_cubin(elf: bytes) -> None:
    assert cubin_arch(elf) == ARCH
    names = cuda_quantize.kernel_names()
    tags = ("fp8_1x128", "fp8_128x128", "mxfp8_floor", "mxfp8_rceil", "nvfp4")
    want = {f"quantize_{tag}_{side}_{dtype}" for tag in tags for side in ("row", "col", "both")
            for dtype in ("bf16", "fp16", "fp32")}  # fmt: skip
    assert len(names) == len(set(names)) == 45 and set(names) == want and global_functions(elf) == want
    for name in names:
        # Column-wise output is staged as data_t's block of the tile: 128 rows of 128 e4m3 bytes, or of 64
        # bytes of fp4 pairs; without it the tile's shared memory holds only maxima and scales.
        block = 128 * 64 if name.startswith("quantize_nvfp4_") else 128 * 128
        staged = static_shared_bytes(elf, name)
        assert staged >= block if "_col_" in name or "_both_" in name else staged < block, (name, staged)


def test_nvrtc_compiles_the_quantizer():
    cubins = cuda_quantize.compile_cubin(ARCH, use_cache=False)
    assert list(cubins) == ["quantize.cu"]
    check_quantize_cubin(cubins["quantize.cu"])


def test_quantizer_arguments_match_the_kernels_signature():
    """The launcher's argument block against the parameter list the .cu file's kernels are declared with:
    the same names in the same order, pointers and int64 as 8-byte fields, ints as 4-byte ones."""
    source = cuda_quantize.CU_FILE.read_text()
    declared = re.search(r"void BOUNDS NAME\((.*?)\) \{", source.replace("\\\n", " "), re.S)
    assert declared is not None
    params = [p.split() for p in " ".join(declared.group(1).split()).split(",")]
    kinds = {"tf_u8*": ctypes.c_uint64, "float*": ctypes.c_uint64, "tf_i64": ctypes.c_int64, "int": ctypes.c_int32}
    expected = [(words[-1], kinds[words[-2]]) for words in params]
    assert [name for name, _ in cuda_quantize._Args._fields_] == [name for name, _ in expected]
    assert [t for _, t in cuda_quantize._Args._fields_] == [t for _, t in expected]
    args = cuda_quantize._Args
    assert [args.ue8m0.offset, args.blocked.offset, ctypes.sizeof(args)] == [6 * 8 + 3 * 8, 6 * 8 + 3 * 8 + 4, 80]


def test_thread_args_are_a_block_per_thread_with_pointers_to_its_fields():
    """The argument block the CUDA launchers share: each thread gets its own Structure, and the pointer
    array the launch passes holds the address of each field, in the declared order."""
    import threading

    from tileflip.kernels.cuda import nvrtc

    args = nvrtc.ThreadArgs(cuda_quantize._Args)

    def layout():
        base = ctypes.addressof(args.block)
        fields = cuda_quantize._Args._fields_
        assert list(args.pointers) == [base + getattr(cuda_quantize._Args, name).offset for name, _ in fields]
        assert args.address == ctypes.addressof(args.pointers)
        return base

    seen = [layout()]
    worker = threading.Thread(target=lambda: seen.append(layout()))
    worker.start()
    worker.join()
    assert len(seen) == 2 and seen[0] != seen[1]


# each .cu file and the check of its cubin
CU_FILES = {"transpose.cu": (cuda_transpose.CU_FILE, check_cubin),
            "permute_realign.cu": (cuda_permute.CU_FILE, check_realign_cubin),
            "permute_words.cu": (cuda_words.CU_FILE, check_words_cubin),
            "quantize.cu": (cuda_quantize.CU_FILE, check_quantize_cubin)}  # fmt: skip


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH (the NVRTC tests still ran)")
@pytest.mark.parametrize("name", sorted(CU_FILES))
def test_nvcc_compiles_every_kernel(tmp_path, name):
    path, check = CU_FILES[name]
    out = tmp_path / "kernels.cubin"
    cmd = ["nvcc", "-cubin", f"-arch=sm_{ARCH}", "-std=c++17", "-Werror", "all-warnings", "-o", str(out)]
    result = subprocess.run([*cmd, str(path)], check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    check(out.read_bytes())


def test_realign_params_match_the_kernels_struct():
    # Params (permute_realign.cu): 4 int64, 4 int32, then 4 + 4 + 4 + 4 + 6 + 6 + 6 int64
    assert ctypes.sizeof(cuda_permute._Params) == 4 * 8 + 4 * 4 + 34 * 8


# ---------------------------------------------------------------------------------------------------
# Disk cache and errors, on a tiny .cu file so that NVRTC takes milliseconds
# ---------------------------------------------------------------------------------------------------

TINY = 'extern "C" __global__ void tiny(int* p) { p[threadIdx.x] = threadIdx.x; }\n'


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TILEFLIP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "cuda"


@pytest.fixture
def tiny_cu(tmp_path) -> Path:
    path = tmp_path / "tiny.cu"
    path.write_text(TINY)
    return path


def _no_nvrtc(*args, **kwargs):
    raise AssertionError("NVRTC was called although the cubin is in the disk cache")


def test_disk_cache_written_by_another_process_is_reused(cache, tiny_cu, monkeypatch):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])))
    code = f"from tileflip.kernels.cuda import nvrtc; nvrtc.compile_cubin({str(tiny_cu)!r}, {ARCH})"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    files = list(cache.glob("*.cubin"))
    assert len(files) == 1 and not list(cache.glob("*.tmp"))

    monkeypatch.setattr(nvrtc, "_nvrtc_compile", _no_nvrtc)
    cubin = nvrtc.compile_cubin(tiny_cu, ARCH)
    assert cubin == files[0].read_bytes()
    assert global_functions(cubin) == {"tiny"}


def test_cache_key_covers_arch_source_and_options(cache, tiny_cu):
    source = tiny_cu.read_bytes()
    key = nvrtc.cache_key(source, "tiny.cu", nvrtc.compile_options(ARCH))
    assert len(key) == 64
    assert key == nvrtc.cache_key(source, "tiny.cu", nvrtc.compile_options(ARCH))
    assert key != nvrtc.cache_key(source, "tiny.cu", nvrtc.compile_options(80))
    assert key != nvrtc.cache_key(source + b"\n", "tiny.cu", nvrtc.compile_options(ARCH))
    assert key != nvrtc.cache_key(source, "tiny.cu", nvrtc.compile_options(ARCH, ["-lineinfo"]))

    sm90 = nvrtc.compile_cubin(tiny_cu, ARCH)
    sm80 = nvrtc.compile_cubin(tiny_cu, 80)
    assert (cubin_arch(sm90), cubin_arch(sm80)) == (90, 80)
    assert sorted(p.name for p in cache.glob("*.cubin")) == sorted(
        f"{nvrtc.cache_key(source, 'tiny.cu', nvrtc.compile_options(a))}.cubin" for a in (ARCH, 80)
    )


def test_corrupt_cache_file_is_recompiled(cache, tiny_cu):
    good = nvrtc.compile_cubin(tiny_cu, ARCH)
    (target,) = cache.glob("*.cubin")
    target.write_bytes(b"garbage")
    assert nvrtc.compile_cubin(tiny_cu, ARCH) == good
    assert target.read_bytes() == good


def test_compile_error_reports_call_and_log(cache, tmp_path):
    broken = tmp_path / "broken.cu"
    broken.write_text('extern "C" __global__ void broken(int* p) { p[0] = no_such_variable; }\n')
    with pytest.raises(nvrtc.CudaError) as info:
        nvrtc.compile_cubin(broken, ARCH)
    message = str(info.value)
    assert "nvrtcCompileProgram" in message and "NVRTC_ERROR_COMPILATION" in message
    assert "no_such_variable" in info.value.log and info.value.log in message
    assert isinstance(info.value, RuntimeError)
    assert not cache.exists() or not list(cache.iterdir())


def test_unsupported_arch_is_a_cuda_error(cache, tiny_cu):
    with pytest.raises(nvrtc.CudaError, match="nvrtcCompileProgram"):
        nvrtc.compile_cubin(tiny_cu, 11)


def test_modules_import_without_cuda_python():
    # A None entry in sys.modules makes any import of the package fail, as if it were not installed.
    code = (
        "import sys; sys.modules['cuda'] = None\n"
        "from tileflip.kernels.cuda import nvrtc, transpose as cuda_transpose\n"
        "try:\n"
        "    cuda_transpose.compile_cubin(90)\n"
        "except ImportError as exc:\n"
        "    assert 'tileflip[cuda]' in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('no ImportError')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-c", code], env=env, check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def staged_cubin():
    cubins = cuda_staged.compile_cubin(ARCH, use_cache=False)
    assert list(cubins) == ["permute_staged.cu"]
    return cubins["permute_staged.cu"]


def test_nvrtc_compiles_the_staged_permute(staged_cubin):
    from tileflip.plan import staged

    assert cubin_arch(staged_cubin) == ARCH
    names = cuda_staged.kernel_names()
    assert global_functions(staged_cubin) == set(names) and len(names) == 2 * (3 * 9 + 4)
    for name in names:  # STAGES buffers of a box with its padding, the boxes' places, and the system's 1 KiB
        used = static_shared_bytes(staged_cubin, name) - staged.STAGES * staged.BUF_BYTES
        assert 0 <= used <= 1024 + 32 * (staged.STAGES + 1), (name, used)


def test_staged_instruction_counts_match_the_table(staged_cubin):
    """The committed counts (``python -m tileflip.bench.sass --write``) are those of the kernels as they are
    compiled now."""
    import json

    from tileflip.bench import sass

    table = json.loads(sass.TABLE_FILE.read_text())
    assert table["arch"] == f"sm_{ARCH}"
    counts = {name: sass.loop_counts(sass.sass(staged_cubin, name)) for name in cuda_staged.kernel_names()}
    assert counts == table["kernels"]
    from tileflip.plan import staged

    for name, c in counts.items():  # every store slot is a block of its own: BOX_BYTES / THREADS / VO of them
        vo = int(re.search(r"_o(\d+)", name).group(1))
        assert len(c["slots"]) == staged.BOX_BYTES // (staged.THREADS * vo), name
        assert c["loop"] > sum(c["slots"]) and c["next_box_dim"] > 0, name
