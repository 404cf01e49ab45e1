"""The access analyzer: what each warp of a transpose asks of memory, and how long that takes (CPU only).

Modules, lowest first (none imports torch, triton or tileflip.bench; matplotlib only inside ``pictures``):
``access`` one warp access (sectors, lines, banks); ``triton_layout`` Triton's blocked layouts;
``variants`` the kernels as address generators; ``traffic`` launch totals and DRAM bytes after L2;
``timemodel`` device constants and the time model; ``report`` the report; ``model`` the entry points
``analyze`` and ``warp_access``; ``pictures`` PNG drawings. The public names below load on first use.
"""

_PUBLIC = {
    "analyze": "tileflip.analyze.model", "warp_access": "tileflip.analyze.model",
    "itemsize_of": "tileflip.analyze.model", "Report": "tileflip.analyze.report",
    "format_report": "tileflip.analyze.report", "load_device": "tileflip.analyze.timemodel",
    "KERNELS": "tileflip.analyze.variants", "WarpAccess": "tileflip.analyze.access",
    "bank_conflicts": "tileflip.analyze.access",
}  # fmt: skip
__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'tileflip.analyze' has no attribute {name!r}")
