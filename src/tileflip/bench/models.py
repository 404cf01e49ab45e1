"""The models suite: real models' eager steps with ``tileflip.enable()`` off and on.

Each model is built from its library's config with random weights (nothing is downloaded) and run as it
is: a forward pass, and a backward pass where the model trains. For each one the suite reports
- whether every output and every gradient with tileflip on is bit-identical to a run with it off (and
  that two runs with it off agree, so that a difference means something);
- the layout copies' device time in one step, from ``torch.profiler``: the kernels launched inside the
  ``aten::copy_`` calls whose source is in another layout than their destination (same dtype, other
  strides), off and on;
- the step time, off and on (CUDA events, median of interleaved rounds);
- what the override took and declined (``tileflip.enabled_stats()``).

It also measures the host time the override adds to one ``copy_`` call, declined and taken, against
PyTorch's own call. Models whose library is missing are listed as left out, with the reason.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field

from tileflip.bench import records as rec


@dataclass(frozen=True)
class Model:
    name: str
    library: str
    copies: str  # the layout copies it makes, and where
    build: object = field(repr=False, compare=False)  # () -> (module, inputs tuple, trains, dtype name)


def _swin_t():
    from torchvision.models import swin_t

    return swin_t(), (_image(32, 3, 224, 224),), False, "float32"


def _swin3d_t():
    from torchvision.models.video import swin3d_t

    return swin3d_t(), (_image(2, 3, 16, 224, 224),), False, "float32"


def _convnext_tiny():
    from torchvision.models import convnext_tiny

    return convnext_tiny(), (_image(16, 3, 224, 224),), True, "float32"


def _llama():
    import torch
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=2, num_attention_heads=16,
                         num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096,
                         attn_implementation="sdpa")  # fmt: skip
    model = LlamaModel(config).to(torch.bfloat16)
    return model, (_tokens(4, 1024, config.vocab_size),), True, "bfloat16"


def _mamba():
    from transformers import MambaConfig, MambaModel

    config = MambaConfig(hidden_size=768, state_size=16, num_hidden_layers=2, vocab_size=32000)
    return MambaModel(config), (_tokens(4, 256, config.vocab_size),), True, "float32"


def _einops_vit():
    import torch
    from einops.layers.torch import Rearrange

    dim, patch = 768, 16
    model = torch.nn.Sequential(
        Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=patch, p2=patch),
        torch.nn.Linear(3 * patch * patch, dim),
        torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(dim, 12, 4 * dim, dropout=0.0,
                                                                     batch_first=True), num_layers=2),
        torch.nn.Linear(dim, 3 * patch * patch),  # a reconstruction head, as a masked autoencoder's
        Rearrange("b (h w) (p1 p2 c) -> b c (h p1) (w p2)", h=224 // patch, p1=patch, p2=patch),
    )  # fmt: skip
    return model, (_image(32, 3, 224, 224),), True, "float32"


def _espcn():
    import torch

    scale = 3
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 5, padding=2), torch.nn.Tanh(),
                                torch.nn.Conv2d(64, 32, 3, padding=1), torch.nn.Tanh(),
                                torch.nn.Conv2d(32, 3 * scale * scale, 3, padding=1),
                                torch.nn.PixelShuffle(scale))  # fmt: skip
    return model.to(torch.float16), (_image(16, 3, 360, 640).half(),), False, "float16"


MODELS = [
    Model("swin-t", "torchvision", "window partition and reverse (view, permute, contiguous)", _swin_t),
    Model("swin3d-t", "torchvision", "NCDHW to NDHWC patch embedding and 3-D window partition", _swin3d_t),
    Model("convnext-tiny", "torchvision", "NCHW to NHWC around each block's LayerNorm, forward and backward",
          _convnext_tiny),
    Model("llama-2-layers", "transformers", "attention transposes, repeat_kv and contiguous, forward and "
          "backward", _llama),
    Model("mamba-2-layers", "transformers", "channel-last to channel-first around the convolution and scan, "
          "forward and backward", _mamba),
    Model("einops-vit", "einops", "rearrange patchify, and unpatchify of a reconstruction head, forward and "
          "backward", _einops_vit),
    Model("espcn-pixel-shuffle", "torch", "PixelShuffle of a super-resolution head", _espcn),
]  # fmt: skip


def _generator():
    import torch

    return torch.Generator(device="cuda").manual_seed(0)


def _image(*shape):
    import torch

    return torch.randn(*shape, device="cuda", generator=_generator())


def _tokens(batch, length, vocab):
    import torch

    return torch.randint(0, vocab, (batch, length), device="cuda", generator=_generator())


def _bits(t):
    from tileflip.kernels.dtypes import as_int

    return as_int(t.detach().contiguous())


def _tensors(value) -> list:
    """The tensors in a model's output (a tensor, a tuple or a transformers output object)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


class Step:
    """One eager step of a model: forward, and backward of the outputs' sum where it trains."""

    def __init__(self, model: Model):
        import torch

        torch.manual_seed(0)
        module, self.inputs, self.trains, self.dtype = model.build()
        self.module = module.to("cuda")
        self.module.train(False)  # dropout off: a step is deterministic

    def __call__(self):
        import torch

        if not self.trains:
            with torch.no_grad():
                return _tensors(self.module(*self.inputs)), []
        self.module.zero_grad(set_to_none=True)
        outputs = _tensors(self.module(*self.inputs))
        sum(o.float().sum() for o in outputs if o.is_floating_point()).backward()
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        return outputs, grads

    def result(self):
        outputs, grads = self()
        return [_bits(t).clone() for t in outputs + grads]


def identical(a: list, b: list) -> bool:
    import torch

    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def layout_copy(args: dict) -> bool:
    """Whether a profiled ``aten::copy_`` call (its trace arguments) copies between layouts: the same
    dtype on both sides, and the source's strides, broadcast to the destination's shape, differ from the
    destination's over the dimensions longer than 1."""
    dims, types, strides = args.get("Input Dims"), args.get("Input type"), args.get("Input Strides")
    if not dims or not types or not strides or len(dims) < 2 or len(strides) < 2:
        return False
    if types[0] != types[1] or not dims[0] or not isinstance(strides[1], list):
        return False
    shape, dst, src_shape, src = dims[0], strides[0], dims[1], strides[1]
    pad = len(shape) - len(src_shape)
    if pad < 0 or len(dst) != len(shape) or len(src) != len(src_shape):
        return False
    src_full = [0] * pad + [0 if n == 1 and m != 1 else s for n, m, s in zip(src_shape, shape[pad:], src)]
    return any(n > 1 and a != b for n, a, b in zip(shape, dst, src_full))


def copy_kernel_us(trace: dict) -> dict:
    """The device time (µs) and the count of kernels launched inside ``aten::copy_`` calls of a Chrome trace
    from ``torch.profiler``, split into layout copies and the rest. A kernel belongs to the innermost
    ``aten::copy_`` whose span holds its launch call on the same thread."""
    events = trace.get("traceEvents", [])
    copies = sorted(((e["ts"], e["ts"] + e.get("dur", 0), e.get("tid"), layout_copy(e.get("args", {})))
                     for e in events if e.get("cat") == "cpu_op" and e.get("name") == "aten::copy_"),
                    key=lambda c: c[0])  # fmt: skip
    launches = {e["args"]["correlation"]: (e["ts"], e.get("tid")) for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    out = {"layout_us": 0.0, "layout_kernels": 0, "other_copy_us": 0.0, "layout_calls": 0}
    out["layout_calls"] = sum(1 for c in copies if c[3])
    for e in events:
        if e.get("cat") != "kernel":
            continue
        launch = launches.get(e.get("args", {}).get("correlation"))
        if launch is None:
            continue
        ts, tid = launch
        inside = [c for c in copies if c[2] == tid and c[0] <= ts <= c[1]]
        if not inside:
            continue
        if max(inside, key=lambda c: c[0])[3]:
            out["layout_us"] += e.get("dur", 0)
            out["layout_kernels"] += 1
        else:
            out["other_copy_us"] += e.get("dur", 0)
    return out


def profile_step(step: Step) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        step()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return copy_kernel_us(json.load(f))


def step_ms(step: Step, steps: int) -> float:
    import torch

    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure_model(model: Model, rounds: int, steps: int, log=print) -> dict:
    import torch

    import tileflip

    row = {"model": model.name, "library": model.library, "copies": model.copies}
    step = Step(model)
    row.update(trains=step.trains, dtype=step.dtype, inputs=[list(t.shape) for t in step.inputs])
    tileflip.disable()
    step()  # warm-up: cuDNN and cuBLAS choices, allocator
    a, b = step.result(), step.result()
    row["reference_deterministic"] = identical(a, b)
    tileflip.enable()
    step()  # warm-up: tileflip's kernels compile
    got = step.result()
    row["stats"] = tileflip.enabled_stats()
    row["identical"] = identical(a, got)
    off, on = [], []
    for _ in range(rounds):
        tileflip.disable()
        off.append(step_ms(step, steps))
        tileflip.enable()
        on.append(step_ms(step, steps))
    tileflip.disable()
    row["step_ms_off"], row["step_ms_on"] = statistics.median(off), statistics.median(on)
    row["profile_off"] = profile_step(step)
    tileflip.enable()
    row["profile_on"] = profile_step(step)
    tileflip.disable()
    row["layout_copy_us_off"] = row["profile_off"]["layout_us"]
    row["layout_copy_us_on"] = row["profile_on"]["layout_us"]
    if row["layout_copy_us_on"] > 0:
        row["layout_copy_speedup"] = row["layout_copy_us_off"] / row["layout_copy_us_on"]
    row["step_change"] = row["step_ms_on"] / row["step_ms_off"] - 1
    log(f"{model.name}: identical {row['identical']} (reference deterministic {row['reference_deterministic']}); "
        f"layout copies {row['layout_copy_us_off']:.0f} -> {row['layout_copy_us_on']:.0f} us in "
        f"{row['profile_off']['layout_calls']} calls; step {row['step_ms_off']:.2f} -> {row['step_ms_on']:.2f} ms; "
        f"taken {row['stats']['taken']}, declined {row['stats']['declined']}")  # fmt: skip
    del step
    torch.cuda.empty_cache()
    return row


def overheads(calls: int = 50, reps: int = 15) -> list[dict]:
    """Host µs per ``copy_`` call with tileflip off and on: calls queued back to back without a
    synchronize (fewer than the launch queue holds), the fastest of ``reps`` batches."""
    import torch

    import tileflip

    g = _generator()

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, device="cuda", generator=g).to(dtype)

    small, plain, wide = rand(32, 32), rand(1 << 22), rand(4096, 4096, dtype=torch.bfloat16)
    heads = rand(8, 197, 12, 64, dtype=torch.bfloat16)
    images = rand(32, 64, 56, 56)
    cases = [
        ("declined: small (32 x 32 float32 .t())", torch.empty(32, 32, device="cuda"), small.t()),
        ("declined: plain copy (4 Mi float32)", torch.empty_like(plain), plain),
        ("declined: dtype cast (4 Mi float32 to bfloat16)", torch.empty_like(plain, dtype=torch.bfloat16), plain),
        ("taken: bfloat16 4096 x 4096 .t()", torch.empty_like(wide), wide.t()),
        ("taken: bfloat16 (8, 197, 12, 64) by (0, 2, 1, 3)", torch.empty(8, 12, 197, 64, dtype=torch.bfloat16,
                                                                          device="cuda"), heads.permute(0, 2, 1, 3)),
        ("taken: float32 (32, 64, 56, 56) to channels_last",
         torch.empty_like(images, memory_format=torch.channels_last), images),
    ]  # fmt: skip

    def host(dst, src):
        for _ in range(20):
            dst.copy_(src)
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(calls):
                dst.copy_(src)
            best = min(best, (time.perf_counter() - t0) / calls * 1e6)
            torch.cuda.synchronize()
        return best

    rows = []
    for name, dst, src in cases:
        tileflip.disable()
        off = host(dst, src)
        tileflip.enable()
        on = host(dst, src)
        stats = tileflip.enabled_stats()
        tileflip.disable()
        rows.append({"call": name, "off_us": off, "on_us": on, "added_us": on - off, "stats": stats})
    return rows


def available(model: Model) -> str | None:
    """Why a model cannot be built here (its library is missing), or None."""
    import importlib.util

    if model.library != "torch" and importlib.util.find_spec(model.library) is None:
        return f"{model.library} is not installed"
    return None


def summarize(rows: list[dict]) -> dict:
    measured = [r for r in rows if "layout_copy_us_off" in r]
    speedups = [r["layout_copy_us_off"] / r["layout_copy_us_on"] if r["layout_copy_us_on"] > 0 else float("inf")
                for r in measured]  # fmt: skip
    return {
        "models": len(measured),
        "median_layout_copy_speedup": statistics.median(speedups) if speedups else None,
        "layout_copy_grew": [r["model"] for r in measured if r["layout_copy_us_on"] > r["layout_copy_us_off"]],
        "all_identical": all(r["identical"] for r in measured),
        "step_changes": {r["model"]: r["step_change"] for r in measured},
    }


def table(rows: list[dict], summary: dict) -> str:
    lines = ["model | identical | layout copies off -> on (us) | speed-up | step off -> on (ms) | change",
             "--- | --- | --- | --- | --- | ---"]  # fmt: skip
    for r in rows:
        if "left_out" in r:
            lines.append(f"{r['model']} | left out: {r['left_out']} | | | |")
            continue
        speedup = r.get("layout_copy_speedup")
        lines.append(f"{r['model']} | {'yes' if r['identical'] else 'NO'} | {r['layout_copy_us_off']:.0f} -> "
                     f"{r['layout_copy_us_on']:.0f} | {f'{speedup:.2f}x' if speedup else '-'} | "
                     f"{r['step_ms_off']:.2f} -> {r['step_ms_on']:.2f} | {r['step_change']:+.1%}")  # fmt: skip
    med = summary["median_layout_copy_speedup"]
    lines.append(f"median layout-copy speed-up: {med:.2f}x" if med else "no model measured")
    return "\n".join(lines)


def run(*, rounds: int, steps: int, out_dir, command: str, log=print) -> list[str]:
    """Measure every model and the overheads, print the table, write ``<out>/<device>/models.json``."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, read at its init
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    meta = rec.meta()
    rows = []

    def write(over):  # after each model, so that a run cut short keeps what it measured
        extra = {"rounds": rounds, "steps": steps, "summary": summarize(rows), "overheads": over, "models": rows}
        return rec.write_results(None, "models", out_dir, command, gpu=meta["gpu"],
                                 extra={**extra, "torch": meta["torch"], "triton": meta["triton"]})  # fmt: skip

    over = overheads()  # first: it is the shortest measurement
    for o in over:
        log(f"{o['call']}: {o['off_us']:.2f} -> {o['on_us']:.2f} us per call (+{o['added_us']:.2f})")
    for model in MODELS:
        why = available(model)
        if why:
            log(f"{model.name}: left out ({why})")
            rows.append({"model": model.name, "library": model.library, "left_out": why})
            continue
        rows.append(measure_model(model, rounds, steps, log))
        write(over)
    print(table(rows, summarize(rows)))
    return [str(write(over))]
