"""Shared test helpers: non-zero random bits, poisoning, and bit-for-bit comparison."""

from __future__ import annotations

import torch

INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
POISON_BYTE = 0xA5


def random_bits(shape, dtype, device="cpu", seed=0) -> torch.Tensor:
    """A tensor of ``dtype`` whose bytes are random (NaN payloads, denormals and all); bool gets 0/1."""
    gen = torch.Generator().manual_seed(seed)
    numel = 1
    for s in shape:
        numel *= s
    if dtype == torch.bool:
        return torch.randint(0, 2, tuple(shape), generator=gen).bool().to(device)
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(1, 256, (max(numel, 1) * size,), dtype=torch.uint8, generator=gen)
    return raw[: numel * size].view(dtype).reshape(shape).to(device)


def poisoned(shape, dtype, device="cpu") -> torch.Tensor:
    out = torch.empty(shape, dtype=dtype, device=device)
    out.view(-1).view(torch.uint8).fill_(POISON_BYTE)
    return out


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(INT_OF_SIZE[t.element_size()])


def assert_bits_equal(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Exact comparison: shape, dtype, device, contiguity, then every bit (as integers)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.device == expected.device
    assert actual.is_contiguous(), actual.stride()
    a, e = bits(actual).cpu(), bits(expected.contiguous()).cpu()
    diff = (a != e).nonzero()
    assert diff.numel() == 0, f"{len(diff)} of {a.numel()} elements differ; first at {diff[:5].tolist()}"
