"""The one launch path of every Triton kernel in tileflip: a compiled class, once built, is launched
through its C launcher with the arguments the caller has already fixed.

A class is everything Triton specializes a launch on (the caller's key: constexprs, element size,
device, which integers equal 1 or are divisible by 16, the pointers' 16-byte alignment). Its first
launch goes through ``kernel[grid]`` (which compiles); later ones skip Triton's binder and cache lookup,
about 10 us of Python a call. Under TRITON_INTERPRET=1 every launch goes through ``kernel[grid]``.
(Program-order decoding is written out in each kernel rather than shared as a ``@triton.jit`` helper:
under the interpreter a helper becomes an interpreter object, and the ahead-of-time sm_90 compiles that
the tests and the analyzer run in the same process would fail.)
"""

from __future__ import annotations

import triton


def is_interpreted_kernel(kernel) -> bool:
    """True when ``kernel`` was decorated under TRITON_INTERPRET=1 (it then runs on the CPU)."""
    return not isinstance(kernel, triton.runtime.JITFunction)


def spec_key(v: int) -> int:
    """Triton's specialization of an integer argument as a small int (``plan.specialization_class``):
    equal to 1, divisible by 16, past int32."""
    return 1 if v == 1 else (2 if v % 16 == 0 else 0) | (4 if v >= 2**31 else 0)


def spec_of(values) -> tuple:
    """``spec_key`` of every int in ``values``, through nested tuples (Triton specializes tuple elements)."""
    out = []
    for v in values:
        if type(v) is tuple:
            out.append(spec_of(v))
        elif type(v) is int:
            out.append(spec_key(v))
        else:
            out.append(v)
    return tuple(out)


_raw_stream = None


def current_stream(device: int) -> int:
    """The raw handle of torch's current stream on ``device`` (~0.1 us; the getter is looked up on first
    use, since CPU builds of torch lack it)."""
    global _raw_stream
    if _raw_stream is None:
        from torch._C import _cuda_getCurrentRawStream

        _raw_stream = _cuda_getCurrentRawStream
    return _raw_stream(device)


# class key -> (C launcher, CUfunction, cooperative, pdl, packed metadata, compiled kernel), or the
# compiled kernel where it needs Triton's own launcher (scratch memory, launch hooks)
_compiled: dict = {}


def _fast_launcher(kernel):
    """The compiled kernel's C launcher and its fixed arguments, or None where it needs more than the
    plain call (scratch memory, launch hooks)."""
    run = kernel.run
    if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None
    hooks = (triton.knobs.runtime.launch_enter_hook, triton.knobs.runtime.launch_exit_hook)
    if any(getattr(h, "calls", h) for h in hooks):  # hooks set when the class was compiled keep triton's path
        return None
    return run.launch, kernel.function, run.launch_cooperative_grid, run.launch_pdl, kernel.packed_metadata, kernel


def launch(kernel_fn, key, grid: tuple, device: int, pointers: tuple, tensors, scalars: tuple, options: dict) -> None:
    """Launch ``kernel_fn`` on ``grid`` (x, y) with every argument positional: ``pointers`` (addresses,
    or tensors) then ``scalars`` (the constexprs too, in the kernel's order). ``tensors`` is a callable
    giving the pointer arguments as tensors for the compiling launch (the unsigned-integer views, so
    that one compiled class serves every dtype of a size); ``options`` are compile options (num_warps,
    maxnreg). ``key`` must hold everything Triton specializes the launch on."""
    fast = _compiled.get(key)
    gx, gy = grid
    if type(fast) is tuple:
        c_launch, function, cooperative, pdl, metadata, _ = fast
        c_launch(gx, gy, 1, current_stream(device), function, cooperative, pdl, None, None, metadata,
                 None, None, None, *pointers, *scalars)  # fmt: skip
    elif fast is None:
        kernel = kernel_fn[grid](*tensors(), *scalars, **options)
        _compiled[key] = _fast_launcher(kernel) or kernel
    else:
        fast.run(gx, gy, 1, current_stream(device), fast.function, fast.packed_metadata, None, None, None,
                 *pointers, *scalars)  # fmt: skip


def prepared(key, grid: tuple, device: int, scalars: tuple):
    """A callable ``go(x, out, xp, op)`` that launches the compiled class ``key`` through its C launcher
    with the two addresses, every other argument fixed; None until the class is compiled, or where it
    takes Triton's own launcher. The transpose's prepared-call fast path keeps one per call signature."""
    fast = _compiled.get(key)
    if type(fast) is not tuple:
        return None
    c_launch, function, cooperative, pdl, metadata, _ = fast
    gx, gy = grid

    def go(x, out, xp: int, op: int) -> None:
        c_launch(gx, gy, 1, current_stream(device), function, cooperative, pdl, None, None, metadata, None,
                 None, None, xp, op, *scalars)  # fmt: skip

    return go


def compiled_classes(kind: str | None = None) -> dict:
    """The compiled classes, by key (the first key element names the kernel), as Triton's compiled
    kernels (TTGIR, cubin); only those of ``kind`` where given."""
    return {key: v[-1] if type(v) is tuple else v for key, v in _compiled.items() if kind is None or key[0] == kind}


def direct_count(kind: str | None = None) -> int:
    """How many compiled classes launch through the C launcher directly (for tests)."""
    return sum(type(v) is tuple for key, v in _compiled.items() if kind is None or key[0] == kind)


def interpreted_module(module_name: str, path: str):
    """``module_name`` loaded a second time with the interpreter off, so that its kernels are JITFunctions
    that can be compiled ahead of time (the interpreter's wrappers cannot); the module itself where the
    interpreter is off."""
    import importlib.util
    import sys

    from triton import knobs

    if not knobs.runtime.interpret:
        return sys.modules[module_name]
    name = module_name + "_compiled"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        with knobs.runtime.scope():
            knobs.runtime.interpret = False
            spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]
