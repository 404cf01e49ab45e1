"""tileflip: tiled GPU data movement for PyTorch (transposes and permutes in Triton and CUDA C++).

``import tileflip`` stays light: the planner and the analyzer need neither torch's kernels nor triton,
so the public operations are loaded on first use.
"""

__version__ = "0.1.0"
__all__ = ["transpose", "permute", "cast_transpose"]


def __getattr__(name):
    if name == "cast_transpose":
        from tileflip.ops.cast import cast_transpose

        return cast_transpose
    if name in __all__:
        from tileflip.ops import core as ops

        return getattr(ops, name)
    raise AttributeError(f"module 'tileflip' has no attribute {name!r}")
