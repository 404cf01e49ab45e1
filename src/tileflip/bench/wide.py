"""The permute-wide suite's cases: random permutes drawn blind, and layouts of real models.

Pure Python, seeded ``random.Random``; nothing here reads tileflip's plans or results. ``document()``
is the content of ``data/permute-wide-cases.json``; ``python -m tileflip.bench.wide`` writes it (a test
regenerates it and compares the text). Random cases (``random_cases``): 30 per seed 1, 2 and 3; a rank
from 3 to 6, extents log-uniform over the integers 2 to 1000, a uniform non-identity permutation; per
dtype (int8, bfloat16, float32) a size T log-uniform in [64, 512) MiB and a shape of that size within
10%, from integer scalings of the largest extents (``fit_shape``). Model layouts: ``MODEL_LAYOUTS``.
The exact rules: ``docs/design.md`` (Benchmark).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from tileflip.plan.dtypes import element_size
from tileflip.plan.launch import product

MIB = 1 << 20
SEEDS = (1, 2, 3)
COUNT = 30  # random cases per seed
DTYPES = ("int8", "bfloat16", "float32")  # 1, 2 and 4 bytes
RANKS = (3, 6)
EXTENTS = (2, 1000)
SIZE_MIB = (64, 512)  # T's range, log-uniform
TOLERANCE = 0.10  # a shape holds T within 10%
FILE = Path(__file__).resolve().parent / "data" / "permute-wide-cases.json"
GENERATOR = f"python -m tileflip.bench.wide: tileflip.bench.wide.document(seeds={SEEDS}, count={COUNT})"


def shrunk(extent: int, k: int) -> int:
    """``extent / k`` rounded half up, at least 2 (an extent scaled down by the integer factor ``k``)."""
    return max(2, (2 * extent + k) // (2 * k))


def _choices(extent: int, scale: float) -> set[int]:
    """Extents reachable from ``extent`` by one integer factor near ``scale`` (up or down), and by the
    small factors 1 to 8 either way (where ``scale`` is near 1, a pair of small factors fits best)."""
    out = {extent * k for k in range(1, 9)} | {shrunk(extent, k) for k in range(2, 9)}
    if scale >= 1:
        k0 = round(scale)
        out |= {extent * k for k in range(max(1, k0 - 6), k0 + 7)}
    else:
        k0 = round(1 / scale)
        out |= {shrunk(extent, k) for k in range(max(2, k0 - 6), k0 + 7)}
    return out


def _neighbours(extent: int, wanted: float) -> set[int]:
    """The values of one integer factor of ``extent`` on either side of ``wanted``."""
    if wanted >= extent:
        k = int(wanted // extent)
        return {extent * k, extent * (k + 1)}
    k = int(extent // max(wanted, 1.0))
    return {extent if j == 1 else shrunk(extent, j) for j in (k - 1, k, k + 1, k + 2) if j >= 1}


def fit_shape(base, itemsize: int, target_bytes: int) -> tuple[int, ...]:
    """``base`` scaled so that ``numel * itemsize`` is within 10% of ``target_bytes``.

    Every extent ends as its base extent times an integer k or divided by one (``shrunk``). Dims are
    ranked by base extent, largest first (the earlier dim on ties); A and B are the top two.
    1. Only when the base is too large: a water level L with prod(min(e, L)) = target elements; every
       dim but A and B whose extent is above L is divided by k = round(e / L) (extents under L stay).
    2. A and B take what remains, q = target elements / product of the others: of the pairs of their
       reachable values (``_choices`` for A, ``_neighbours`` of q / A for B) within 10% of q, the one
       whose larger |log(new / base)| is least (balanced, least change), then the closer, then the
       smaller A; where no pair is within 10%, the closest.
    A fit further than 10% off is a ValueError (none of the committed cases is)."""
    base = tuple(int(e) for e in base)
    elements = target_bytes / itemsize
    order = sorted(range(len(base)), key=lambda d: (-base[d], d))
    a, b = order[0], order[1]
    shape = list(base)
    if product(base) > elements:
        lo, hi = 0.0, math.log(max(base))
        for _ in range(100):  # bisection on log L: sum(log min(e, L)) = log(elements)
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if sum(min(math.log(e), mid) for e in base) < math.log(elements) else (lo, mid)
        level = math.exp(hi)
        for d in order[2:]:
            k = round(base[d] / level)
            if k > 1:
                shape[d] = shrunk(base[d], k)
    rest = product(shape[d] for d in order[2:])
    q = elements / rest
    ea, eb = base[a], base[b]
    scale = math.sqrt(q / (ea * eb))
    best = None
    for va in sorted(_choices(ea, scale)):
        for vb in sorted(_neighbours(eb, q / va)):
            err = abs(va * vb / q - 1)
            change = max(abs(math.log(va / ea)), abs(math.log(vb / eb)))
            key = (err > TOLERANCE, change if err <= TOLERANCE else err, err, va)
            if best is None or key < best[0]:
                best = (key, va, vb)
    shape[a], shape[b] = best[1], best[2]
    size = product(shape) * itemsize
    if abs(size / target_bytes - 1) > TOLERANCE:
        raise ValueError(f"base {base}: no fit within {TOLERANCE:.0%} of {target_bytes} bytes (best {shape})")
    return tuple(shape)


def random_case(rng: random.Random) -> tuple[tuple[int, ...], tuple[int, ...], list[int]]:
    """(base extents, perm, target bytes per dtype of DTYPES), drawn in this order from ``rng``."""
    rank = rng.randint(*RANKS)
    lo, hi = math.log(EXTENTS[0]), math.log(EXTENTS[1] + 1)
    base = tuple(min(EXTENTS[1], int(math.exp(rng.uniform(lo, hi)))) for _ in range(rank))
    perm = list(range(rank))
    while perm == sorted(perm):  # rejection: uniform over the rank! - 1 others
        rng.shuffle(perm)
    ratio = SIZE_MIB[1] / SIZE_MIB[0]
    targets = [int(SIZE_MIB[0] * MIB * ratio ** rng.random()) for _ in DTYPES]
    return base, tuple(perm), targets


def random_cases(seeds=SEEDS, count: int = COUNT) -> list[dict]:
    """``count`` random cases per seed, each in every dtype of DTYPES: one entry per (case, dtype)."""
    out = []
    for seed in seeds:
        rng = random.Random(seed)
        for i in range(count):
            base, perm, targets = random_case(rng)
            for dtype, target in zip(DTYPES, targets):
                shape = fit_shape(base, element_size(dtype), target)
                out.append({"name": f"random-{seed}-{i:02d}", "kind": "random", "shape": list(shape),
                            "perm": list(perm), "dtype": dtype, "seed": seed, "base": list(base),
                            "target_bytes": target})  # fmt: skip
    return out


# (name, kind, shape, perm, dtype, source): layouts moved by real models, at realistic sizes (64 MiB-1 GiB).
MODEL_LAYOUTS = [
    # Phi-3-medium: 40 query heads, 10 KV heads of 128 (config.json); K/V written BSHD, read BHSD.
    ("phi3-medium-kv-bshd-bhsd", "attention", (4, 8192, 10, 128), (0, 2, 1, 3), "bfloat16",
     "Phi-3-medium config.json: num_key_value_heads 10, head_dim 128"),
    # Qwen2-1.5B: 12 query heads of 128 (config.json); attention output BHSD back to BSHD.
    ("qwen2-1.5b-q-bhsd-bshd", "attention", (8, 12, 4096, 128), (0, 2, 1, 3), "bfloat16",
     "Qwen2-1.5B config.json: num_attention_heads 12, hidden_size 1536"),
    # ViT-S/16 (DeiT-S): 6 heads of 64, 197 tokens; timm's qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).
    ("vit-s16-qkv-split", "attention", (256, 197, 3, 6, 64), (2, 0, 3, 1, 4), "bfloat16",
     "timm vision_transformer.Attention: qkv.reshape(B, N, 3, heads, head_dim).permute(2, 0, 3, 1, 4)"),
    # Llama-3-8B: 8 KV heads of 128; BHSD cache to BSHD for a kernel that takes (B, S, H, D), in fp32.
    ("llama3-8b-kv-bhsd-bshd-fp32", "attention", (2, 8, 8192, 128), (0, 2, 1, 3), "float32",
     "Llama-3-8B config.json: num_key_value_heads 8, head_dim 128"),
    # ResNet-50 stem output, 64 x 112 x 112, NCHW to channels-last.
    ("resnet50-stem-nchw-nhwc", "nchw-nhwc", (64, 64, 112, 112), (0, 2, 3, 1), "bfloat16",
     "torchvision resnet50: conv1 output 64 x 112 x 112; .to(memory_format=torch.channels_last)"),
    # Stable Diffusion VAE decoder at 512 x 512: 128 channels, channels-last back to NCHW.
    ("sd-vae-decoder-nhwc-nchw", "nchw-nhwc", (4, 512, 512, 128), (0, 3, 1, 2), "float16",
     "diffusers AutoencoderKL (SD 1.5) decoder up_blocks[3]: 128 channels at 512 x 512"),
    # Quantized ResNet-18 layer1 activations (8-bit, moved as int8), NCHW to NHWC for a channels-last kernel.
    ("resnet18-int8-nchw-nhwc", "nchw-nhwc", (512, 64, 56, 56), (0, 2, 3, 1), "int8",
     "torchvision quantization resnet18: layer1 output 64 x 56 x 56, 8-bit"),
    # nnU-Net 3-D full resolution: 32 channels at 128^3, NCDHW to NDHWC.
    ("nnunet-3d-ncdhw-ndhwc", "ncdhw-ndhwc", (2, 32, 128, 128, 128), (0, 2, 3, 4, 1), "float16",
     "nnU-Net 3d_fullres: first stage 32 features, patch 128 x 128 x 128"),
    # SlowFast R50 slow pathway res2: 256 channels, 8 frames at 56 x 56; NDHWC back to NCDHW.
    ("slowfast-res2-ndhwc-ncdhw", "ncdhw-ndhwc", (8, 8, 56, 56, 256), (0, 4, 1, 2, 3), "bfloat16",
     "PySlowFast SLOWFAST_8x8_R50: slow pathway res2 output 256 x 8 x 56 x 56"),
    # ViT-B/16 at 224: (B, C, H/p, p, W/p, p) -> (B, H/p, W/p, p, p, C), p = 16.
    ("vit-b16-patchify", "patchify", (512, 3, 14, 16, 14, 16), (0, 2, 4, 3, 5, 1), "float32",
     "MAE models_mae.patchify: einsum('nchpwq->nhwpqc'), p = 16, 224 x 224"),
    # DINOv2 ViT-L/14 at 518: p = 14, 37 x 37 patches.
    ("dinov2-l14-patchify", "patchify", (64, 3, 37, 14, 37, 14), (0, 2, 4, 3, 5, 1), "bfloat16",
     "DINOv2 ViT-L/14 at 518 x 518 (37 x 37 patches of 14)"),
    # MAE decoder output back to images: (B, H/p, W/p, p, p, C) -> (B, C, H/p, p, W/p, p), p = 16.
    ("mae-b16-unpatchify", "unpatchify", (512, 14, 14, 16, 16, 3), (0, 5, 1, 3, 2, 4), "float32",
     "MAE models_mae.unpatchify: einsum('nhwpqc->nchpwq'), p = 16"),
    # The same for p = 14 (DINOv2-sized patches), bf16.
    ("l14-unpatchify", "unpatchify", (64, 37, 37, 14, 14, 3), (0, 5, 1, 3, 2, 4), "bfloat16",
     "MAE-style unpatchify at p = 14, 518 x 518 (DINOv2 patch grid)"),
    # DiT-XL/2 final layer: p = 2, 8 output channels (learned sigma), 32 x 32 latents.
    ("dit-xl2-unpatchify", "unpatchify", (4096, 16, 16, 2, 2, 8), (0, 5, 1, 3, 2, 4), "float32",
     "DiT models.py unpatchify: einsum('nhwpqc->nchpwq'), p = 2, out_channels 8"),
    # EDSR-baseline x2 upsampler: pixel_shuffle(2) of 256 channels into 64 at 384 x 384.
    ("edsr-pixel-shuffle", "pixel-shuffle", (16, 64, 2, 2, 192, 192), (0, 1, 4, 2, 5, 3), "float16",
     "EDSR baseline Upsampler: conv to 4 x 64 channels, nn.PixelShuffle(2)"),
    # Real-ESRGAN x2 model input: pixel_unshuffle(2) of RGB images.
    ("realesrgan-pixel-unshuffle", "pixel-shuffle", (64, 3, 256, 2, 256, 2), (0, 1, 3, 5, 2, 4), "float32",
     "Real-ESRGAN RRDBNet scale 2: pixel_unshuffle(x, scale=2) of the input"),
    # Mixtral-8x7B: 8 experts, hidden 4096, capacity 4096 tokens: token-major (C, E, H) to expert-major.
    ("mixtral-token-to-expert", "moe", (4096, 8, 4096), (1, 0, 2), "bfloat16",
     "Mixtral-8x7B config.json: num_local_experts 8, hidden_size 4096"),
    # Qwen1.5-MoE-A2.7B: 60 experts, hidden 2048: expert-major (E, C, H) back to token-major.
    ("qwen-moe-expert-to-token", "moe", (60, 1024, 2048), (1, 0, 2), "bfloat16",
     "Qwen1.5-MoE-A2.7B config.json: num_experts 60, hidden_size 2048"),
    # DeepSeek-V3 fp8 dispatch: 256 routed experts, hidden 7168, token-major to expert-major.
    ("deepseek-v3-fp8-token-to-expert", "moe", (64, 256, 7168), (1, 0, 2), "float8_e4m3fn",
     "DeepSeek-V3 config.json: n_routed_experts 256, hidden_size 7168; fp8 e4m3 dispatch"),
    # Expert-parallel all-to-all output (ranks, local experts, C, H) regrouped expert-major.
    ("deepspeed-ep-alltoall-regroup", "moe", (8, 4, 2048, 2048), (1, 0, 2, 3), "bfloat16",
     "DeepSpeed MoE sharded_moe: dispatched_input.reshape(ep_size, num_local_experts, -1, d_model)"),
    # FlashInfer paged KV cache, NHD to HND: Llama-3-70B, 8 KV heads of 128, pages of 16.
    ("flashinfer-kv-nhd-hnd-fp8", "kv-cache-fp8", (8192, 16, 8, 128), (0, 2, 1, 3), "float8_e4m3fn",
     "FlashInfer paged KV cache kv_layout NHD -> HND; Llama-3-70B 8 KV heads, head_dim 128, page 16"),
    # The same, HND to NHD, Phi-3-medium's 10 KV heads.
    ("flashinfer-kv-hnd-nhd-fp8", "kv-cache-fp8", (6144, 10, 16, 128), (0, 2, 1, 3), "float8_e4m3fn",
     "FlashInfer paged KV cache kv_layout HND -> NHD; Phi-3-medium 10 KV heads, head_dim 128, page 16"),
    # vLLM's paged key cache (blocks, H, D/x, block, x) with x = 16 one-byte elements per 16 bytes.
    ("vllm-key-cache-fp8", "kv-cache-fp8", (8192, 16, 8, 8, 16), (0, 2, 3, 1, 4), "float8_e4m3fn",
     "vLLM paged_attention key cache [blocks, kv_heads, head_size/x, block_size, x], x = 16 for fp8"),
]  # fmt: skip


def model_cases() -> list[dict]:
    return [{"name": name, "kind": kind, "shape": list(shape), "perm": list(perm), "dtype": dtype, "source": src}
            for name, kind, shape, perm, dtype, src in MODEL_LAYOUTS]  # fmt: skip


def document(seeds=SEEDS, count: int = COUNT) -> dict:
    """The content of ``data/permute-wide-cases.json``."""
    return {"generator": GENERATOR, "cases": random_cases(seeds, count) + model_cases()}


def dumps(doc: dict) -> str:
    """The file's text: one case per line."""
    lines = ",\n".join("  " + json.dumps(c) for c in doc["cases"])
    return "{\n" + f' "generator": {json.dumps(doc["generator"])},\n "cases": [\n{lines}\n ]\n}}\n'


if __name__ == "__main__":
    FILE.write_text(dumps(document()))
    print(f"wrote {FILE}")
