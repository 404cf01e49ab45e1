"""The one dtype table: every dtype tileflip moves, by torch name, with its size and short names.

Plain Python, so that the planner, the analyzer and the command line work without torch; the torch
dtype objects are derived from these names in ``tileflip.kernels.dtypes``.
"""

from __future__ import annotations

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


def dtype_name(dtype) -> str:
    """The torch name of ``dtype``, given as a torch name, ``torch.<name>``, a short name or a torch dtype."""
    text = str(dtype).strip()
    name = text.removeprefix("torch.")
    name = SHORT_NAMES.get(name.lower(), name)
    if name not in ELEMENT_SIZE:
        shorts = ", ".join(sorted(SHORT_NAMES))
        raise ValueError(f"dtype must be a torch dtype name such as float32, bfloat16, int8 or float8_e4m3fn "
                         f"(or a short name: {shorts}), got {dtype!r}")  # fmt: skip
    return name


def element_size(dtype) -> int:
    """Bytes per element of ``dtype`` (any spelling ``dtype_name`` takes)."""
    return ELEMENT_SIZE[dtype_name(dtype)]
