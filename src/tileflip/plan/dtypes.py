"""The one dtype table: every dtype tileflip moves, by torch name, with its size and short names, and
the one wording of a refusal (``refusal``), which the command line and the Python API both give.

Plain Python, so that the planner, the analyzer and the command line work without torch; the torch
dtype objects are derived from these names in ``tileflip.kernels.dtypes``.
"""

from __future__ import annotations

import difflib

# torch name -> bytes per element
ELEMENT_SIZE = {
    "bool": 1, "int8": 1, "uint8": 1,
    "float8_e4m3fn": 1, "float8_e4m3fnuz": 1, "float8_e5m2": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2,
    "float32": 4, "int32": 4, "uint32": 4, "complex32": 4,
    "float64": 8, "int64": 8, "uint64": 8, "complex64": 8,
}  # fmt: skip

# Unambiguous short spellings. The float8 types keep their full names: e4m3fn and e4m3fnuz both exist.
SHORT_NAMES = {
    "fp64": "float64", "f64": "float64", "double": "float64",
    "fp32": "float32", "f32": "float32", "float": "float32",
    "fp16": "float16", "f16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "i64": "int64", "long": "int64", "i32": "int32", "int": "int32", "i16": "int16", "short": "int16",
    "i8": "int8", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
}  # fmt: skip

# Types that pack several values into one byte: moving their storage would move pairs of values.
PACKED_NAMES = ("float4_e2m1fn_x2", "uint1", "uint2", "uint3", "uint4", "uint5", "uint6", "uint7",
                "int1", "int2", "int3", "int4", "int5", "int6", "int7")  # fmt: skip

# The rest of torch's dtypes, kept here so that a real name is told why it is refused, not that it is unknown.
WIDE_NAMES = {"complex128": 16}  # wider than the widest unsigned integer a kernel moves (8 bytes)
QUANTIZED_NAMES = ("qint8", "quint8", "qint32", "quint4x2", "quint2x4")
OTHER_NAMES = ("bits8", "bits16", "bits1x8", "bits2x4", "bits4x2")
# torch's other names for its dtypes, beyond the short names above.
TORCH_ALIASES = {"cfloat": "complex64", "chalf": "complex32", "cdouble": "complex128", "bit": "uint1"}

SIZES = "1, 2, 4 and 8 bytes"  # the element sizes of ELEMENT_SIZE


def _name(text: str) -> str:
    """The torch name a spelling stands for, known to this table or not."""
    name = text.removeprefix("torch.")
    return TORCH_ALIASES.get(name.lower(), SHORT_NAMES.get(name.lower(), name))


def _is_torch_dtype(dtype) -> bool:
    # Recognised by its type's name: the planner does not import torch.
    return type(dtype).__name__ == "dtype" and type(dtype).__module__ == "torch"


def refusal(dtype, arg: str | None = None) -> str | None:
    """Why tileflip does not move ``dtype``, or None where it does: the one wording of every entry point.

    ``dtype`` is any spelling ``dtype_name`` takes, or a torch dtype. ``arg`` names the tensor that has it
    (the Python API's ``x``); without it the message speaks of the spelling given (the command line's)."""
    text = str(dtype).strip()
    name = _name(text)
    if name in ELEMENT_SIZE:
        return None
    real = _is_torch_dtype(dtype)
    if not (real or name in WIDE_NAMES or name in PACKED_NAMES or name in QUANTIZED_NAMES or name in OTHER_NAMES):
        return _unknown(text)
    lead = f"{arg} has" if arg else f"{text} is"
    size = WIDE_NAMES.get(name, getattr(dtype, "itemsize", None) if real else None)
    if size is not None and size not in (1, 2, 4, 8):
        return f"{lead} the {size}-byte dtype torch.{name}; supported element sizes are {SIZES}"
    if name in PACKED_NAMES:
        return f"{lead} the packed dtype torch.{name} (several values per byte), which is not supported yet"
    kind = "quantized dtype" if name in QUANTIZED_NAMES else "dtype"
    return f"{lead} the {kind} torch.{name}, which is not supported; supported: {', '.join(ELEMENT_SIZE)}"


def _unknown(text: str) -> str:
    """The message for a spelling that names no torch dtype: the names that do, and the nearest one."""
    shorts = ", ".join(sorted(SHORT_NAMES))
    near = difflib.get_close_matches(text.removeprefix("torch."), [*ELEMENT_SIZE, *SHORT_NAMES], n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return (f"{text!r} is not a dtype name{hint}; dtype must be a torch dtype name such as float32, bfloat16, "
            f"int8 or float8_e4m3fn, or a short name. Supported: {', '.join(ELEMENT_SIZE)}; short names: {shorts}")


def dtype_name(dtype) -> str:
    """The torch name of ``dtype``, given as a torch name, ``torch.<name>``, a short name or a torch dtype;
    a ValueError with ``refusal``'s message for any other."""
    name = _name(str(dtype).strip())
    if name not in ELEMENT_SIZE:
        raise ValueError(refusal(dtype))
    return name


def element_size(dtype) -> int:
    """Bytes per element of ``dtype`` (any spelling ``dtype_name`` takes)."""
    return ELEMENT_SIZE[dtype_name(dtype)]
