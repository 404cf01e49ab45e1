"""All-to-all transposes across GPUs (torch.distributed): ``transpose``, ``seq_to_head``, ``head_to_seq``.

Loaded on first use, so that ``import tileflip.distributed`` costs nothing until a call is made.
Modules: ``ops`` (the operations and their plans), ``group`` (process group, sizes exchange, errors),
``chunks`` (split sizes, ``chunks="auto"``, capped grids), ``pipeline`` (plans run on streams),
``moves`` (the local pack, unpack and own-block passes).
"""

__all__ = ["transpose", "seq_to_head", "head_to_seq", "DistributedError"]

_HOMES = {"transpose": "ops", "seq_to_head": "ops", "head_to_seq": "ops", "DistributedError": "group"}


def __getattr__(name):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"tileflip.distributed.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'tileflip.distributed' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
