"""`tileflip check`: run anyone's transpose kernel through an adversarial suite and name the pitfall it fell into.

``cases`` (codes and the suite), ``runner`` (child processes; ``check`` and ``check_many``), ``child``
(the child's entry point), ``evidence`` and ``diagnose`` (what came back, what went wrong), ``report``
(text, JSON, score), ``targets`` (tileflip's own backends as targets). Importing this package loads
none of them; ``check``, ``check_many``, ``Report`` and ``TargetError`` load ``runner`` on first use.
"""

_LAZY = {"check": "runner", "check_many": "runner", "TargetError": "runner", "Report": "report"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"tileflip.check.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'tileflip.check' has no attribute {name!r}")
