"""Launchers of the CUDA C++ permutes (compiled by NVRTC on first use):

- ``cuda/permute_realign.cu``: the launches that ``tileflip.tuning.realign_launch`` gives it, 1-byte
  elements whose output rows start at any byte, written as whole aligned 32-byte sectors;
- ``cuda/permute_staged.cu``: the launches that ``tileflip.tuning.staged_rule`` gives it, a box of the
  tensor moved through shared memory as whole input and output runs (``tileflip.staged``).

``launch(x, out, plan)`` is called by ``tileflip.ops`` once every argument check is done (``out``
contiguous, not overlapping ``x``); ``usable`` says whether a call may take one of them.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from pathlib import Path

import torch

from tileflip import tuning
from tileflip.kernels import nvrtc
from tileflip.kernels.cuda_transpose import _arch
from tileflip.kernels.triton_common import current_stream
from tileflip.plan import contiguous_strides, magic_divisor

CU_FILE = Path(__file__).with_name("cuda") / "permute_realign.cu"
KERNEL = "permute_realign_u8"
THREADS = 256
STAGED_CU_FILE = Path(__file__).with_name("cuda") / "permute_staged.cu"
MAX_DECODE = {"a": 4, "b": 4, "n": 6}  # dimensions each decode of the .cu file's Params holds


class _Params(ctypes.Structure):
    """The kernel's ``Params`` (permute_realign.cu), field for field."""

    _fields_ = [
        ("asz", ctypes.c_int64), ("bsz", ctypes.c_int64), ("tiles_a", ctypes.c_int64), ("tiles_b", ctypes.c_int64),
        ("na", ctypes.c_int32), ("nb", ctypes.c_int32), ("nn", ctypes.c_int32), ("pad", ctypes.c_int32),
        ("a_sizes", ctypes.c_int64 * 4), ("a_out", ctypes.c_int64 * 4),
        ("b_sizes", ctypes.c_int64 * 4), ("b_in", ctypes.c_int64 * 4),
        ("n_sizes", ctypes.c_int64 * 6), ("n_in", ctypes.c_int64 * 6), ("n_out", ctypes.c_int64 * 6),
    ]  # fmt: skip


def _i64(n):
    return ctypes.c_int64 * n


def _i32(n):
    return ctypes.c_int32 * n


class _StagedParams(ctypes.Structure):
    """The staged kernel's ``Params`` (permute_staged.cu), field for field."""

    _fields_ = [
        ("n_in", _i64(6)), ("n_out", _i64(6)), ("cut_in", ctypes.c_int64), ("cut_out", ctypes.c_int64),
        ("load_in", _i64(3)), ("row_out", _i64(3)), ("enum_in", _i64(3)), ("line_in", ctypes.c_int64),
        ("n_size", _i32(6)), ("n_magic", ctypes.c_uint32 * 6), ("n_shift", _i32(6)),
        ("load_ext", _i32(3)), ("load_place", _i32(3)), ("load_magic", ctypes.c_uint32 * 3), ("load_shift", _i32(3)),
        ("row_ext", _i32(3)), ("row_place", _i32(3)), ("row_magic", ctypes.c_uint32 * 3), ("row_shift", _i32(3)),
        ("enum_ext", _i32(3)), ("enum_in_place", _i32(3)), ("enum_out_place", _i32(3)),
        ("enum_magic", ctypes.c_uint32 * 3), ("enum_shift", _i32(3)),
        ("nn", ctypes.c_int32), ("chunks", ctypes.c_int32), ("cut_ext", ctypes.c_int32), ("cut_size", ctypes.c_int32),
        ("chunk_magic", ctypes.c_uint32), ("chunk_shift", ctypes.c_int32),
        ("cut_load", ctypes.c_int32), ("cut_row", ctypes.c_int32), ("cut_enum", ctypes.c_int32),
        ("cut_run", ctypes.c_int32), ("cut_out_run", ctypes.c_int32), ("cut_line", ctypes.c_int32),
        ("run_len", ctypes.c_int32), ("out_len", ctypes.c_int32), ("words", ctypes.c_int32), ("owords", ctypes.c_int32),
        ("words_magic", ctypes.c_uint32), ("owords_magic", ctypes.c_uint32),
        ("words_shift", ctypes.c_int32), ("owords_shift", ctypes.c_int32),
        ("runs", ctypes.c_int32), ("rows", ctypes.c_int32), ("lines", ctypes.c_int32),
        ("line_ext", ctypes.c_int32), ("line_in_step", ctypes.c_int32),
        ("segs", ctypes.c_int32), ("seg_len", ctypes.c_int32), ("segs_magic", ctypes.c_uint32),
        ("segs_shift", ctypes.c_int32), ("in_bytes", ctypes.c_int32), ("pad", ctypes.c_int32),
    ]  # fmt: skip


def compile_cubin(arch: int = 90, *, use_cache: bool = True) -> dict[str, bytes]:
    """Compile this backend's .cu files for ``sm_<arch>`` (no GPU needed): ``{file name: cubin}``."""
    return {f.name: nvrtc.compile_cubin(f, arch, use_cache=use_cache) for f in (CU_FILE, STAGED_CU_FILE)}


def _padded(values, n):
    return tuple(values) + (0,) * (n - len(values))


@functools.lru_cache(maxsize=256)
def params_of(plan) -> tuple[_Params, int] | None:
    """(the kernel's Params, filled once per plan, blocks) of ``plan``, or None where
    ``tuning.realign_launch`` leaves it to the Triton kernels (or a decode has more dimensions than the
    kernel holds)."""
    go = tuning.realign_launch(plan, 1)
    if go is None:
        return None
    sizes, in_strides, out_strides = plan.sizes, plan.in_strides, contiguous_strides(plan.sizes)
    groups = {"a": go.a_dims, "b": go.b_dims, "n": go.batch_dims}
    if any(len(dims) > MAX_DECODE[k] for k, dims in groups.items()):
        return None
    size_a = tuning._product(sizes[d] for d in go.a_dims)
    size_b = tuning._product(sizes[d] for d in go.b_dims)
    tiles_a, tiles_b, blocks = tuning.realign_grid(sizes, go)

    a = [sizes[d] for d in go.a_dims], [out_strides[d] for d in go.a_dims]
    b = [sizes[d] for d in go.b_dims], [in_strides[d] for d in go.b_dims]
    nd = go.batch_dims
    n = [sizes[d] for d in nd], [in_strides[d] for d in nd], [out_strides[d] for d in nd]
    fields = (size_a, size_b, tiles_a, tiles_b, len(a[0]), len(b[0]), len(n[0]), 0,
              _padded(a[0], 4), _padded(a[1], 4), _padded(b[0], 4), _padded(b[1], 4),
              _padded(n[0], 6), _padded(n[1], 6), _padded(n[2], 6))  # fmt: skip
    return _Params(*fields), blocks


def _divisor(d: int) -> tuple[int, int]:
    """(magic, shift) of a division by ``d`` in the staged kernel (``plan.magic_divisor``; shift -1 for 1)."""
    if d == 1:
        return 0, -1
    magic, shift = magic_divisor(d)
    return magic & 0xFFFFFFFF, shift


def _decode(extents, n: int):
    """(extents, magics, shifts) of a decode over ``extents``, padded to ``n`` dimensions of extent 1."""
    extents = tuple(extents) + (1,) * (n - len(extents))
    pairs = [_divisor(e) for e in extents]
    return extents, tuple(m for m, _ in pairs), tuple(s for _, s in pairs)


@functools.lru_cache(maxsize=256)
def staged_params_of(plan, element_size: int) -> tuple[_StagedParams, int, int] | None:
    """(the staged kernel's Params, blocks, bytes of shared memory) of ``plan``, or None where
    ``tuning.staged_rule`` leaves it to the other kernels."""
    go = tuning.staged_rule(plan, element_size)
    return None if go is None else (staged_params(plan, go), go.blocks, go.smem)


def staged_params(plan, go) -> _StagedParams:
    """The staged kernel's Params for ``plan`` moved in boxes ``go`` (a ``tileflip.staged.StagedLaunch``)."""
    sizes, in_strides, out_strides = plan.sizes, plan.in_strides, contiguous_strides(plan.sizes)
    es, ext, dims, k_run, cut = go.element_size, go.extents, go.dims, go.in_run, go.chunk
    load = list(range(k_run, len(dims)))
    n_ext, n_magic, n_shift = _decode([sizes[d] for d in go.outer], 6)
    load_ext, load_magic, load_shift = _decode([ext[k] for k in load], 3)
    row_ext, row_magic, row_shift = _decode([ext[k] for k in go.rows], 3)
    enum_ext, enum_magic, enum_shift = _decode([ext[k] for k in go.enum], 3)
    run_len = tuning._product(ext[:k_run])
    out_len = tuning._product(ext[k] for k in go.out_run)
    words = (run_len * es + 15) // 16 + 1
    owords = (15 + out_len * es + 15) // 16
    picks = [in_strides[dims[k]] if k >= k_run else 0 for k in range(len(dims))]  # dims that pick a run
    cut_dim = dims[cut] if cut >= 0 else None
    return _StagedParams(
        _padded([in_strides[d] for d in go.outer], 6), _padded([out_strides[d] for d in go.outer], 6),
        in_strides[cut_dim] if cut >= 0 else 0, out_strides[cut_dim] if cut >= 0 else 0,
        _padded([in_strides[dims[k]] for k in load], 3), _padded([out_strides[dims[k]] for k in go.rows], 3),
        _padded([picks[k] for k in go.enum], 3), picks[go.line],
        n_ext, n_magic, n_shift,
        load_ext, _padded([go.in_place[k] for k in load], 3), load_magic, load_shift,
        row_ext, _padded([go.out_place[k] for k in go.rows], 3), row_magic, row_shift,
        enum_ext, _padded([go.in_place[k] for k in go.enum], 3), _padded([go.out_place[k] for k in go.enum], 3),
        enum_magic, enum_shift,
        len(go.outer), go.chunks, ext[cut] if cut >= 0 else 1, sizes[cut_dim] if cut >= 0 else 1,
        *_divisor(go.chunks),
        load.index(cut) if cut in load else -1, go.rows.index(cut) if cut in go.rows else -1,
        go.enum.index(cut) if cut in go.enum else -1,
        int(cut >= 0 and cut == k_run - 1), int(cut >= 0 and cut in go.out_run), int(cut >= 0 and cut == go.line),
        run_len, out_len, words, owords, _divisor(words)[0], _divisor(owords)[0], _divisor(words)[1],
        _divisor(owords)[1], tuning._product(load_ext), tuning._product(row_ext), tuning._product(enum_ext),
        ext[go.line], go.in_place[go.line], go.segs, go.seg_len, *_divisor(go.segs), go.in_bytes, 0,
    )  # fmt: skip


def usable(x: torch.Tensor, plan) -> bool:
    """Whether this call of ``plan`` takes a CUDA kernel: the staged kernel where its rule takes the plan
    (``staged_params_of``), or the realigned one where its launch does (``params_of``) and x's address is
    16-byte aligned (its row pieces are read as aligned 16-byte words); and NVRTC is there (else the
    Triton kernels run it)."""
    if staged_params_of(plan, x.element_size()) is not None:
        return nvrtc.available()
    return x.element_size() == 1 and x.data_ptr() % 16 == 0 and params_of(plan) is not None and nvrtc.available()


class _ThreadArgs(threading.local):
    """One argument block per thread (the driver copies the values during cuLaunchKernel, which releases
    the GIL): the two pointers, the Params, and the array of pointers to them that the launch reads."""

    def __init__(self):
        self.x = ctypes.c_uint64()
        self.out = ctypes.c_uint64()
        self.params = _Params()
        self.staged = _StagedParams()
        self.pointers = (ctypes.c_void_p * 3)(
            ctypes.addressof(self.x), ctypes.addressof(self.out), ctypes.addressof(self.params)
        )
        self.staged_pointers = (ctypes.c_void_p * 3)(
            ctypes.addressof(self.x), ctypes.addressof(self.out), ctypes.addressof(self.staged)
        )
        self.address = ctypes.addressof(self.pointers)
        self.staged_address = ctypes.addressof(self.staged_pointers)
        self.params_address = ctypes.addressof(self.params)
        self.ready: set = set()


_args = _ThreadArgs()
_handles: dict = {}


def kernel_on(device: int, cu_file: Path = CU_FILE, name: str = KERNEL):
    """The handle of kernel ``name`` of ``cu_file`` on ``device`` (the staged kernels allowed all the
    dynamic shared memory a block may have there), a context made current on this thread first."""
    args = _args
    if device not in args.ready:
        with torch.cuda.device(device):
            nvrtc.ensure_context(device)
        args.ready.add(device)
    key = (device, name)
    kernel = _handles.get(key)
    if kernel is None:
        kernel = nvrtc.get_kernel(cu_file, name, device, _arch(device))
        if cu_file == STAGED_CU_FILE:
            optin = torch.cuda.get_device_properties(device).shared_memory_per_block_optin
            nvrtc.allow_dynamic_shared(kernel, optin, device)
        _handles[key] = kernel
    return kernel


def launch(x: torch.Tensor, out: torch.Tensor, plan) -> None:
    """Write ``x.permute(...)`` (``plan``) into the contiguous ``out``, for a call that is ``usable``."""
    device = x.get_device()
    args = _args
    staged = staged_params_of(plan, x.element_size())
    if staged is not None:
        params, blocks, shared = staged
        kernel = kernel_on(device, STAGED_CU_FILE, f"permute_staged_{x.element_size()}")
        args.x.value, args.out.value = x.data_ptr(), out.data_ptr()
        ctypes.memmove(ctypes.addressof(args.staged), ctypes.addressof(params), ctypes.sizeof(_StagedParams))
        nvrtc.launch(kernel, (blocks, 1, 1), (THREADS, 1, 1), current_stream(device), args.staged_address, shared)
        return
    params, blocks = params_of(plan)
    kernel = kernel_on(device)
    args.x.value, args.out.value = x.data_ptr(), out.data_ptr()
    ctypes.memmove(args.params_address, ctypes.addressof(params), ctypes.sizeof(_Params))
    nvrtc.launch(kernel, (blocks, 1, 1), (THREADS, 1, 1), current_stream(device), args.address)
