"""tileflip's own backends as `tileflip check` targets, one ``f(x, out)`` per backend.

``tileflip check tileflip.check.targets:cuda_tiled`` checks one backend; ``tileflip:transpose``
itself is a target too (its ``backend="auto"``). ``returning`` is the ``f(x) -> y`` form. Only the
checker's child process imports this module: it imports torch (through ``tileflip.transpose``).
"""

from __future__ import annotations

from tileflip import transpose


def triton_backend(x, out):
    transpose(x, out, backend="triton")


def torch_backend(x, out):
    transpose(x, out, backend="torch")


def cuda_naive(x, out):
    transpose(x, out, backend="cuda-naive")


def cuda_tiled(x, out):
    transpose(x, out, backend="cuda-tiled")


def cuda_tiled_nopad(x, out):
    transpose(x, out, backend="cuda-tiled-nopad")


def auto_backend(x, out):
    transpose(x, out, backend="auto")


def returning(x):
    return transpose(x)


# The names the tests and the docs use for each backend.
BY_BACKEND = {
    "triton": "triton_backend",
    "torch": "torch_backend",
    "cuda-naive": "cuda_naive",
    "cuda-tiled": "cuda_tiled",
    "cuda-tiled-nopad": "cuda_tiled_nopad",
    "auto": "auto_backend",
}
