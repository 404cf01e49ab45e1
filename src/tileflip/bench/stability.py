"""The stability suite: is a permute's time the same wherever its tensors lie and whatever ran before?

Each case of ``CASES`` is measured ``MEASUREMENTS`` times: ``triton.testing.do_bench`` (median) of
``tileflip.permute(x, perm, out=out)``, and of a copy of the same bytes between the same views. Each
measurement carves x and out out of one larger buffer per side at other offsets (whole 2 MiB steps,
and 16-byte-aligned offsets within 2 MiB: ``address_plan``), and runs the cases in another order
(seeded shuffles: ``order_plan``); every result is checked bit for bit. A case is stable when max/min
of its times is at most ``LIMIT``. The plans are pure functions, checked on the CPU; the method and
each case's reason: the text beside it in ``_CASES``; what the suite found: ``docs/design.md`` (The stability
suite).
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

from tileflip.bench import records as rec
from tileflip.bench.cases import Case, permute_wide_cases

STEP = 2 << 20  # the large-page size: offsets in whole steps keep a view's page alignment
ALIGN = 16  # every offset keeps 16-byte vector accesses possible
STEPS = 8  # offsets stay below STEPS * STEP
MEASUREMENTS = 10
LIMIT = 1.05  # the largest spread (max / min of a case's times) that counts as stable
SEED = 0

# (case, or (wide suite name, dtype), why it is here)
_CASES = [
    (Case((384, 355, 384), "int8", (2, 1, 0)), "int8 reversal that swung between 0.81 and 0.47 of copy in one process"),
    (Case((15, 15, 32, 15, 32, 16), "int8", (4, 1, 0, 3, 2, 5)), "int8 rank 6 that swung 0.47, 0.85, then 0.44"),
    (Case((75, 96, 12, 608), "int8", (2, 0, 3, 1)), "int8 steadily slow (0.21 of copy; bf16 0.97)"),
    (Case((28, 28, 4, 48, 352), "int8", (2, 0, 4, 1, 3)), "int8 steadily slow (0.33 of copy; bf16 0.96)"),
    (Case((384, 355, 384), "bfloat16", (2, 1, 0)), "the swinging int8 reversal in 2 bytes: is the swing 1-byte only?"),
    (Case((75, 96, 12, 608), "bfloat16", (2, 0, 3, 1)), "2-byte control of a slow int8 shape"),
    (Case((15, 15, 32, 15, 32, 16), "float32", (4, 1, 0, 3, 2, 5)), "4-byte control of the swinging rank 6"),
    (("random-1-14", "int8"), "random int8 full reversal, odd extents 9 and 471"),
    (("random-1-23", "int8"), "random int8 with short runs on both sides (2 bytes in, 22 bytes out)"),
    (("random-2-26", "bfloat16"), "random bf16 rank 6, odd extents, innermost dim moved"),
    (("random-2-29", "float32"), "random fp32 with odd extents, the (2, 0, 3, 1) pattern"),
    (("flashinfer-kv-nhd-hnd-fp8", "float8_e4m3fn"), "model layout: fp8 paged KV cache NHD to HND"),
    (("resnet18-int8-nchw-nhwc", "int8"), "model layout: int8 NCHW to NHWC, 3136-byte rows to 64-byte rows"),
    (("dinov2-l14-patchify", "bfloat16"), "model layout: ViT patchify p = 14, odd grid 37 x 37"),
    (("phi3-medium-kv-bshd-bhsd", "bfloat16"), "model layout: attention BSHD to BHSD, 10 KV heads"),
]  # fmt: skip


def cases() -> list[tuple[Case, str]]:
    """The suite's (case, why) pairs; the random and model cases are read from the wide suite's file."""
    wide = {(c.name, c.dtype): c for c in permute_wide_cases()}
    return [(c if isinstance(c, Case) else wide[c], why) for c, why in _CASES]


def address_plan(measurements: int = MEASUREMENTS, rng: random.Random | None = None) -> list[tuple[int, int]]:
    """(input offset, output offset) in bytes for each measurement of one case. Even measurements put
    both views at whole 2 MiB steps (the first at 0, 0), odd ones add a random 16-byte-aligned offset
    within 2 MiB to each; the steps are random in [0, STEPS), drawn apart for the two sides."""
    rng = rng or random.Random(SEED)
    plan = []
    for m in range(measurements):
        offsets = []
        for _side in range(2):
            step = 0 if m == 0 else rng.randrange(STEPS)
            sub = ALIGN * rng.randrange(1, STEP // ALIGN) if m % 2 else 0
            offsets.append(step * STEP + sub)
        plan.append((offsets[0], offsets[1]))
    return plan


def order_plan(n_cases: int, measurements: int = MEASUREMENTS, seed: int = SEED) -> list[list[int]]:
    """The order of the cases in each measurement: the suite's order first, then seeded shuffles."""
    rng = random.Random(seed)
    orders = [list(range(n_cases))]
    while len(orders) < measurements:
        order = list(range(n_cases))
        rng.shuffle(order)
        orders.append(order)
    return orders[:measurements]


@dataclass(frozen=True)
class Slot:
    measurement: int
    position: int  # place of the case in this measurement's order
    case: int  # index into the suite's cases
    in_offset: int
    out_offset: int


def schedule(n_cases: int, measurements: int = MEASUREMENTS, seed: int = SEED) -> list[Slot]:
    """Every (case, measurement) once, in the order they run; each case's offsets from its own
    ``address_plan`` (a generator seeded by the suite's seed and the case's index)."""
    plans = [address_plan(measurements, random.Random(f"stability {seed} {i}")) for i in range(n_cases)]
    return [Slot(m, p, c, *plans[c][m]) for m, order in enumerate(order_plan(n_cases, measurements, seed))
            for p, c in enumerate(order)]  # fmt: skip


def buffer_bytes(largest: int) -> int:
    """Bytes of each side's buffer: the largest case, every offset, and one step to align the base."""
    return largest + (STEPS + 1) * STEP


def aligned_start(address: int) -> int:
    """Bytes from ``address`` to the next multiple of STEP: offsets count from there, so that a whole
    step is a 2 MiB-aligned address."""
    return -address % STEP


def view_span(buffer_size: int, start: int, offset: int, nbytes: int) -> tuple[int, int]:
    """[begin, end) of a view of ``nbytes`` at ``offset`` past ``start`` in a buffer of ``buffer_size``;
    a ValueError where it is misaligned or does not fit."""
    if offset < 0 or offset % ALIGN:
        raise ValueError(f"offset: expected a non-negative multiple of {ALIGN}, got {offset}")
    begin = start + offset
    if begin + nbytes > buffer_size:
        raise ValueError(f"offset: a view of {nbytes} bytes at {begin} does not fit in {buffer_size} bytes")
    return begin, begin + nbytes


def carve(buffer, start: int, offset: int, shape, dtype):
    """A contiguous tensor of ``shape`` and ``dtype`` (torch) over ``buffer`` (1-D uint8) at ``offset``."""
    import torch

    nbytes = rec.numel(shape) * torch.empty((), dtype=dtype).element_size()
    begin, end = view_span(buffer.numel(), start, offset, nbytes)
    return buffer[begin:end].view(dtype).view(tuple(shape))


def _same_bits(a, b) -> bool:
    import torch

    from tileflip.kernels.dtypes import as_int

    return torch.equal(as_int(a), as_int(b.contiguous()))


def _do_bench(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, return_mode="median")


def measure(suite: list[tuple[Case, str]], *, measurements: int = MEASUREMENTS, seed: int = SEED,
            backend: str = "auto", device: str = "cuda", timer=None, log=print) -> list[dict]:  # fmt: skip
    """One record per (case, measurement): kernel and copy times with the views' offsets and addresses.
    ``timer(fn) -> ms`` defaults to ``do_bench``'s median; ``backend`` and ``device`` let the CPU run the
    same loop (``backend="torch"``) in tests."""
    import torch

    import tileflip

    meta = rec.meta() if device == "cuda" else {"gpu": device, "torch": torch.__version__, "time": rec.now()}
    meta["flush"] = "zero (do_bench)" if timer is None else "the given timer's"  # not the other suites' "l2"
    timer = timer or _do_bench
    sizes = [rec.numel(c.shape) * torch.empty((), dtype=getattr(torch, c.dtype)).element_size() for c, _ in suite]
    size = buffer_bytes(max(sizes))
    inbuf = torch.randint(1, 255, (size,), dtype=torch.uint8, device=device)  # non-zero: zeros cannot pass for a result
    outbuf = torch.empty(size, dtype=torch.uint8, device=device)
    in_start, out_start = aligned_start(inbuf.data_ptr()), aligned_start(outbuf.data_ptr())
    rows = []
    for slot in schedule(len(suite), measurements, seed):
        case, why = suite[slot.case]
        dtype = getattr(torch, case.dtype)
        x = carve(inbuf, in_start, slot.in_offset, case.shape, dtype)
        out = carve(outbuf, out_start, slot.out_offset, case.out_shape, dtype)
        out.view(-1).view(torch.uint8).fill_(0xA5)  # poison: a result not written shows

        def fn(x=x, out=out, perm=case.perm):
            tileflip.permute(x, perm, out=out, backend=backend)

        fn()
        exact = _same_bits(out, x.permute(case.perm))
        src, dst = x.reshape(-1).view(torch.uint8), out.view(-1).view(torch.uint8)
        ms = timer(fn)
        copy_ms = timer(lambda src=src, dst=dst: dst.copy_(src))
        nbytes = 2 * sizes[slot.case]
        rows.append(dict(meta, op="permute", backend=backend, name=case.name, shape=list(case.shape),
                         perm=list(case.perm), dtype=case.dtype, ms=ms, copy_ms=copy_ms, gbps=nbytes / ms / 1e6,
                         copy_gbps=nbytes / copy_ms / 1e6, fraction_of_copy=copy_ms / ms, exact=exact,
                         measurement=slot.measurement, position=slot.position, in_offset=slot.in_offset,
                         out_offset=slot.out_offset, in_address=x.data_ptr(), out_address=out.data_ptr(),
                         why=why))  # fmt: skip
        log(
            f"[{slot.measurement + 1}/{measurements}] {case.label}: {ms:.4f} ms, copy {copy_ms:.4f} ms, "
            f"offsets {slot.in_offset}/{slot.out_offset}" + ("" if exact else ", WRONG RESULT")
        )
    return rows


def summarize(rows: list[dict], limit: float = LIMIT) -> list[dict]:
    """Per case, in the suite's order: its times in measurement order, the spread (max / min) of the
    kernel's and of the copy's times, the range of fractions of copy, and whether it is stable."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((tuple(r["shape"]), tuple(r["perm"]), r["dtype"]), []).append(r)
    out = []
    for (shape, perm, dtype), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["measurement"])
        ms = [r["ms"] for r in rs]
        copy = [r["copy_ms"] for r in rs]
        spread = max(ms) / min(ms)
        out.append({"label": Case(shape, dtype, perm).label, "name": rs[0].get("name"), "why": rs[0].get("why"),
                    "ms": ms, "copy_ms": copy, "spread": spread, "copy_spread": max(copy) / min(copy),
                    "median_fraction_of_copy": statistics.median(r["fraction_of_copy"] for r in rs),
                    "min_fraction_of_copy": min(r["fraction_of_copy"] for r in rs),
                    "max_fraction_of_copy": max(r["fraction_of_copy"] for r in rs),
                    "exact": all(r["exact"] for r in rs), "stable": spread <= limit})  # fmt: skip
    return out


def table(summary: list[dict], limit: float = LIMIT) -> str:
    head = f"{'case':<44}{'min ms':>9}{'max ms':>9}{'spread':>8}{'copy':>7}{'of copy':>15}  stable"
    lines = [head, "-" * len(head)]
    for s in summary:
        frac = f"{s['min_fraction_of_copy']:.0%}-{s['max_fraction_of_copy']:.0%}"
        lines.append(f"{s['label']:<44}{min(s['ms']):>9.4f}{max(s['ms']):>9.4f}{s['spread']:>8.3f}"
                     f"{s['copy_spread']:>7.3f}{frac:>15}  {'yes' if s['stable'] else 'NO'}"
                     + ("" if s["exact"] else "  WRONG RESULT"))  # fmt: skip
    stable = sum(s["stable"] for s in summary)
    lines.append(f"spread: max / min of the kernel's do_bench medians over the measurements (copy: the same for "
                 f"the copy); stable: spread <= {limit}; {stable} of {len(summary)} stable")  # fmt: skip
    return "\n".join(lines)


def run(*, measurements: int, seed: int, out_dir, command: str, log=print) -> list[str]:
    """Measure the suite on the GPU, print its table, write ``<out>/<device>/stability.json``."""
    suite = cases()
    rows = measure(suite, measurements=measurements, seed=seed, log=log)
    summary = summarize(rows)
    print(table(summary))
    extra = {"limit": LIMIT, "measurements": measurements, "seed": seed, "stable": all(s["stable"] for s in summary),
             "exact": all(s["exact"] for s in summary), "summary": summary}  # fmt: skip
    return [str(rec.write_results(rows, "stability", out_dir, command, extra=extra))]
