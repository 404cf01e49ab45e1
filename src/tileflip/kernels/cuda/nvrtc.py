"""Compile .cu files with NVRTC, cache the cubins on disk, load and launch their kernels with the driver API.

Everything goes through NVIDIA's ``cuda-python`` (``cuda.bindings``), imported lazily so that this module
imports without it; the ``tileflip[cuda]`` extra installs it together with the NVRTC library.

* ``compile_cubin(path, arch)`` turns one .cu file into a cubin for ``sm_<arch>``. The result is stored
  under ``$TILEFLIP_CACHE_DIR/cuda`` (default ``~/.cache/tileflip/cuda``) as ``<sha256>.cubin``, the hash
  covering everything that changes the binary, so other processes skip NVRTC entirely.
* ``get_kernel(path, name, device, arch)`` loads a cubin with ``cuLibraryLoadData``, whose libraries are
  not tied to a CUDA context, and returns the kernel handle; handles are cached per process.
* ``kernel_on(handles, path, name, device)`` is a launch's first step: this thread's context made ready
  and the handle, cached in the caller's dict.
* ``launch(kernel, grid, block, stream, params)`` calls ``cuLaunchKernel`` with laid-out parameters, such
  as a ``ThreadArgs`` block's.

Every failing CUDA or NVRTC call raises ``CudaError`` naming the call and the error.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import tempfile
import threading
from pathlib import Path

# Changing the compile pipeline in a way the other key parts do not capture must bump this.
_CACHE_FORMAT = "tileflip-nvrtc-cubin-1"
BASE_OPTIONS = ("-std=c++17",)

_libraries: dict[tuple, object] = {}  # (path, arch) -> CUlibrary, never unloaded
_kernels: dict[tuple, object] = {}  # (device, arch, name, path) -> kernel handle
_contexts: dict[int, object] = {}
_lock = threading.Lock()
_driver_ready = False


class CudaError(RuntimeError):
    """A CUDA driver or NVRTC call failed; ``call``, ``code`` and ``error`` say which and how, ``log`` holds
    the NVRTC program log of a failed compilation (empty otherwise)."""

    def __init__(self, call: str, code: int, error: str, log: str = ""):
        self.call, self.code, self.error, self.log = call, code, error, log
        message = f"{call} failed with {error} ({code})"
        if log:
            message += f"\n--- NVRTC log ---\n{log}"
        super().__init__(message)


_driver_module = None


def _bindings():
    global _driver_module
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError as exc:
        raise ImportError(
            "tileflip's CUDA C++ backend needs NVIDIA's cuda-python and NVRTC: pip install 'tileflip[cuda]'"
        ) from exc
    _driver_module = driver
    return driver, nvrtc


def _error_text(result) -> str:
    driver, nvrtc = _bindings()
    if isinstance(result, nvrtc.nvrtcResult):
        _, text = nvrtc.nvrtcGetErrorString(result)
        return text.decode()
    _, name = driver.cuGetErrorName(result)
    _, text = driver.cuGetErrorString(result)
    # Both come back None when the driver itself is unusable (e.g. not initialised).
    return f"{name.decode() if name else result!r}: {text.decode() if text else 'no description'}"


def _check(call: str, result: tuple, log: str = ""):
    """Unpack a cuda-python ``(status, *values)`` tuple: raise on failure, else return the value(s)."""
    status, *values = result
    if int(status) != 0:
        raise CudaError(call, int(status), _error_text(status), log=log)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def nvrtc_version() -> tuple[int, int]:
    _, nvrtc = _bindings()
    try:
        result = nvrtc.nvrtcVersion()
    except RuntimeError as exc:
        # cuda-bindings opens libnvrtc on first use; without the library that first call raises this.
        raise ImportError(f"NVRTC is not available ({exc}): pip install 'tileflip[cuda]'") from exc
    return _check("nvrtcVersion", result)


_available = None


def available() -> bool:
    """Whether cuda-python and NVRTC are installed (the optional extra ``tileflip[cuda]``): the CUDA C++
    kernels can be compiled and launched. Asked once per process."""
    global _available
    if _available is None:
        try:
            nvrtc_version()
            _available = True
        except ImportError:
            _available = False
    return _available


def compile_options(arch: int, extra=()) -> list[str]:
    return [f"--gpu-architecture=sm_{int(arch)}", *BASE_OPTIONS, *extra]


def cache_dir() -> Path:
    root = os.environ.get("TILEFLIP_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "tileflip"
    return base / "cuda"


def cache_key(source: bytes, name: str, options: list[str]) -> str:
    """The cubin's identity: source text, program name, every option (the arch among them), NVRTC version."""
    major, minor = nvrtc_version()
    h = hashlib.sha256()
    for part in (_CACHE_FORMAT, f"nvrtc-{major}.{minor}", name, *options):
        h.update(part.encode() + b"\0")
    h.update(source)
    return h.hexdigest()


def _nvrtc_compile(source: bytes, name: str, options: list[str]) -> bytes:
    _, nvrtc = _bindings()
    prog = _check("nvrtcCreateProgram", nvrtc.nvrtcCreateProgram(source, name.encode(), 0, [], []))
    try:
        status, *_ = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        if int(status) != 0:
            size = _check("nvrtcGetProgramLogSize", nvrtc.nvrtcGetProgramLogSize(prog))
            log = b" " * size
            _check("nvrtcGetProgramLog", nvrtc.nvrtcGetProgramLog(prog, log))
            log_text = log.rstrip(b"\0").decode(errors="replace").strip()
            _check(f"nvrtcCompileProgram({name}, {' '.join(options)})", (status,), log=log_text)
        size = _check("nvrtcGetCUBINSize", nvrtc.nvrtcGetCUBINSize(prog))
        cubin = b" " * size
        _check("nvrtcGetCUBIN", nvrtc.nvrtcGetCUBIN(prog, cubin))
        return cubin
    finally:
        _check("nvrtcDestroyProgram", nvrtc.nvrtcDestroyProgram(prog))


def compile_cubin(path, arch: int, *, extra_options=(), use_cache: bool = True) -> bytes:
    """The cubin of the .cu file ``path`` for ``sm_<arch>``, from the disk cache or freshly compiled."""
    path = Path(path)
    source = path.read_bytes()
    options = compile_options(arch, extra_options)
    target = cache_dir() / f"{cache_key(source, path.name, options)}.cubin"
    if use_cache and target.is_file():
        cubin = target.read_bytes()
        if cubin[:4] == b"\x7fELF":
            return cubin
    cubin = _nvrtc_compile(source, path.name, options)
    if use_cache:
        _write_atomically(target, cubin)
    return cubin


def _write_atomically(target: Path, data: bytes) -> None:
    # A reader must never see half a cubin: write a private temporary file, then rename it over the
    # target (atomic on POSIX, and concurrent writers of one key write identical bytes). The cache is
    # an optimisation, so an unwritable directory only costs a recompilation next time.
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.stem, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


def _init_driver() -> None:
    global _driver_ready
    if not _driver_ready:
        driver, _ = _bindings()
        _check("cuInit", driver.cuInit(0))
        _driver_ready = True


def ensure_context(device: int) -> None:
    """Make sure a context is current on this thread, binding ``device``'s primary context (the one PyTorch
    uses) when none is: a launch on the NULL stream runs in the current context, and a thread that has
    never touched the CUDA runtime has none, even if PyTorch already uses the device from another thread."""
    driver, _ = _bindings()
    _init_driver()
    if int(_check("cuCtxGetCurrent", driver.cuCtxGetCurrent())) != 0:
        return
    ctx = _contexts.get(device)
    if ctx is None:
        dev = _check("cuDeviceGet", driver.cuDeviceGet(device))
        # Retained for the life of the process, like PyTorch's own reference: never released here.
        ctx = _contexts[device] = _check("cuDevicePrimaryCtxRetain", driver.cuDevicePrimaryCtxRetain(dev))
    _check("cuCtxSetCurrent", driver.cuCtxSetCurrent(ctx))


class _ThreadState(threading.local):
    def __init__(self):
        self.ready: set = set()  # devices whose context this thread has made ready


_thread = _ThreadState()


def is_ready(device: int) -> bool:
    """Whether ``context_ready(device)`` has run on this thread."""
    return device in _thread.ready


def context_ready(device: int) -> None:
    """Make this thread's context ready for a launch on ``device`` (``ensure_context`` with the device
    current), the first time on each thread and device: the launches' first step."""
    ready = _thread.ready
    if device not in ready:
        import torch

        with torch.cuda.device(device):
            ensure_context(device)
        ready.add(device)


def get_kernel(path, name: str, device: int, arch: int):
    """The handle of kernel ``name`` (an ``extern "C"`` name) of the .cu file ``path``, compiled for
    ``sm_<arch>``, the architecture of ``device``; compiled, loaded and looked up once per process."""
    key = (device, arch, name, str(path))
    kernel = _kernels.get(key)
    if kernel is not None:
        return kernel
    driver, _ = _bindings()
    with _lock:
        if key not in _kernels:
            _init_driver()
            library = _libraries.get((str(path), arch))
            if library is None:
                cubin = compile_cubin(path, arch)
                # The driver keeps its own copy of the cubin (no CU_LIBRARY_BINARY_IS_PRESERVED).
                library = _check("cuLibraryLoadData", driver.cuLibraryLoadData(cubin, [], [], 0, [], [], 0))
                _libraries[(str(path), arch)] = library
            handle = _check(f"cuLibraryGetKernel({name})", driver.cuLibraryGetKernel(library, name.encode()))
            # cuLaunchKernel takes a CUkernel cast to CUfunction; casting once here keeps it off the hot path.
            _kernels[key] = driver.CUfunction(int(handle))
        return _kernels[key]


@functools.cache
def device_arch(device: int) -> int:
    """The compute capability of ``device`` as one number (90 for 9.0): the ``sm_<arch>`` to compile for."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def kernel_on(handles: dict, path, name: str, device: int):
    """The handle of kernel ``name`` of ``path`` on ``device``, with this thread's context made ready for a
    launch there (``context_ready``); ``handles`` is the caller's cache, keyed by (name, device)."""
    context_ready(device)
    kernel = handles.get((name, device))
    if kernel is None:
        kernel = handles[name, device] = get_kernel(path, name, device, device_arch(device))
    return kernel


class ThreadArgs(threading.local):
    """A kernel's argument block, the ctypes Structure ``struct`` laid out as its C signature, one per
    thread (the driver copies the values during cuLaunchKernel, which releases the GIL), with the array
    of pointers to its fields that the launch reads: ``block`` to fill, ``address`` to pass."""

    def __init__(self, struct):
        self.block = struct()
        base = ctypes.addressof(self.block)
        fields = struct._fields_
        self.pointers = (ctypes.c_void_p * len(fields))(*(base + getattr(struct, name).offset for name, _ in fields))
        self.address = ctypes.addressof(self.pointers)


def launch(kernel, grid: tuple, block: tuple, stream: int, params: int) -> None:
    """Launch ``kernel`` on ``stream`` (a raw ``cudaStream_t`` value, 0 for the legacy default stream).
    ``params`` is the address of an array of pointers to the argument values (the ``void**`` of
    cuLaunchKernel), laid out by the caller once, so nothing is packed per call."""
    driver = _driver_module or _bindings()[0]
    (status,) = driver.cuLaunchKernel(kernel, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, stream,
                                      params, 0)  # fmt: skip
    if status:
        _check("cuLaunchKernel", (status,))
