"""Plain torch targets that exercise the checker itself: deaths, exceptions, unread strides, unwritten returns.

They run no kernel, so a check of them costs only the child's start.
"""

import os

import torch

# Emulates an offset that wraps past this many elements, on shapes small enough for the CPU.
WRAP_LIMIT = 2**16


def right(x, out):
    out.copy_(x.t())


def right_return(x):
    return x.t().contiguous()


def abort_on_tails(x, out):
    """Dies as a heap corruption does (SIGABRT) whenever a dimension is not a multiple of 16."""
    if x.shape[0] % 16 or x.shape[1] % 16:
        os.abort()
    out.copy_(x.t())


def raises(x, out):
    raise RuntimeError(f"deliberate failure for a {x.shape[0]}x{x.shape[1]} input")


def stride_blind(x, out):
    """Reads x's memory as if it were a contiguous M x N block, whatever its strides."""
    M, N = x.shape
    out.copy_(torch.as_strided(x, (M, N), (N, 1)).t())


def never_writes(x):
    return torch.empty((x.shape[1], x.shape[0]), dtype=x.dtype, device=x.device)


def wraps_past_limit(x, out):
    """Right below out flat WRAP_LIMIT, nothing written from there on: what a wrapped 32-bit offset does at 2**31."""
    flat = out.view(-1)
    flat[:WRAP_LIMIT] = x.t().reshape(-1)[:WRAP_LIMIT]
