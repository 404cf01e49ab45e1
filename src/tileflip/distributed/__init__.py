"""All-to-all transposes across GPUs (torch.distributed): ``transpose``, ``seq_to_head``, ``head_to_seq``.

Loaded on first use, so that ``import tileflip.distributed`` costs nothing until a call is made.
"""

__all__ = ["transpose", "seq_to_head", "head_to_seq", "DistributedError"]


def __getattr__(name):
    if name in __all__:
        from tileflip.distributed import core

        return getattr(core, name)
    raise AttributeError(f"module 'tileflip.distributed' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
