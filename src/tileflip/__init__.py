"""tileflip: tiled GPU data movement for PyTorch (transposes, permutes and fp8 casts in Triton and CUDA C++).

``import tileflip`` stays light: the planner and the analyzer need neither torch's kernels nor triton,
so the public operations are loaded on first use.
"""

__version__ = "0.1.0"
__all__ = ["transpose", "permute", "cast_transpose", "quantize", "distributed", "enable", "disable", "enabled",
           "enabled_stats", "transpose_in_place"]

_HOMES = {
    "transpose": "tileflip.ops.transpose",
    "permute": "tileflip.ops.permute",
    "cast_transpose": "tileflip.ops.cast",
    "quantize": "tileflip.ops.quantize",
    "enable": "tileflip.ops.enable",
    "disable": "tileflip.ops.enable",
    "enabled": "tileflip.ops.enable",
    "enabled_stats": "tileflip.ops.enable",
    "transpose_in_place": "tileflip.ops.inplace",
}


def __getattr__(name):
    if name in _HOMES:
        import importlib

        importlib.import_module("tileflip.ops.library")  # registers the ops torch.compile traces
        value = getattr(importlib.import_module(_HOMES[name]), name)
    elif name == "distributed":
        import importlib

        value = importlib.import_module("tileflip.distributed")
    else:
        raise AttributeError(f"module 'tileflip' has no attribute {name!r}")
    globals()[name] = value  # later lookups are plain attribute reads: host time counts on every call
    return value


def __dir__():
    return sorted(__all__ + ["__version__"])


def _enable_from_environment():
    import os

    if os.environ.get("TILEFLIP_ENABLE", "") not in ("", "0"):  # torch is imported only where it is asked for
        import importlib

        importlib.import_module("tileflip.ops.enable").from_environment()


_enable_from_environment()
