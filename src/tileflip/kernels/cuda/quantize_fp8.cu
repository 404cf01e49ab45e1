// Blockwise fp8 quantization (recipes fp8_1x128 and fp8_128x128) of a 128 x 128 tile of x per block, for
// the row-wise output, the column-wise output, or both from one read of x.
//
// The problem: x is M x K (bf16, fp16 or fp32; rows ld elements apart, columns contiguous, M and K
// multiples of 128). data (M, K) and data_t (K, M) are row-major e4m3; fp8_1x128's scale (M, K/128) has
// strides (1, M) and scale_t (K, M/128) strides (1, K); fp8_128x128's scale is (M/128, K/128) row-major
// and scale_t its transpose, row-major. The arithmetic is docs/design.md's (Block-scaled quantization):
// amax as the integer max of |x|'s fp32 bits (a NaN block stays NaN), raised to 1e-12; m = 448 / amax
// and s = 1 / m as IEEE quotients; data = e4m3(satfinite(x * m)); the stored scale is s (NaN blocks:
// 0x7FC00000). With ue8m0, s is rounded up to a power of two and m is its reciprocal.
//
// Why: with both outputs of fp8_1x128 each element belongs to a 128-long group along its row and
// another along its column, so a program must hold a whole 128 x 128 tile; Triton keeps it in
// registers at 128 values a thread and spills. Here 256 threads hold 64 values each (8 consecutive rows
// x 8 consecutive columns); row maxima are shuffles within 16 lanes, column maxima go through shared
// memory, and the column-wise bytes of a thread's 8 rows are one 8-byte word, staged in a swizzled
// shared tile and written as whole 128-byte rows of data_t.
//
// No header is included (NVRTC has no standard library search path).

typedef unsigned char tf_u8;
typedef unsigned short tf_u16;
typedef unsigned int tf_u32;
typedef unsigned long long tf_u64;
typedef long long tf_i64;

namespace tileflip_quantize {

constexpr int TILE = 128;
constexpr int THREADS = 256;
constexpr tf_u32 AMAX_FLOOR = 0x2B8CBCCCu;  // fp32 1e-12
constexpr tf_u32 NAN_SCALE = 0x7FC00000u;

struct Vec8 { float v[8]; };

// 8 consecutive elements of x from p (16-byte aligned), as fp32. IN: 0 bf16, 1 fp16, 2 fp32.
template <int IN>
__device__ __forceinline__ Vec8 load8(const tf_u8* p) {
    Vec8 r;
    if (IN == 2) {
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
        const uint4 b = __ldg(reinterpret_cast<const uint4*>(p) + 1);
        const tf_u32 w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int k = 0; k < 8; ++k) r.v[k] = __uint_as_float(w[k]);
    } else {
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
        const tf_u32 w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if (IN == 0) {
                r.v[2 * k] = __uint_as_float(w[k] << 16);
                r.v[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
            } else {
                const tf_u16 lo = (tf_u16)(w[k] & 0xFFFFu), hi = (tf_u16)(w[k] >> 16);
                float f0, f1;
                asm("cvt.f32.f16 %0, %1;" : "=f"(f0) : "h"(lo));
                asm("cvt.f32.f16 %0, %1;" : "=f"(f1) : "h"(hi));
                r.v[2 * k] = f0;
                r.v[2 * k + 1] = f1;
            }
        }
    }
    return r;
}

__device__ __forceinline__ tf_u32 abs_bits(float f) { return __float_as_uint(f) & 0x7FFFFFFFu; }

// Two e4m3 bytes, lo in the low byte: the hardware conversion, rounding to nearest even, finite values
// past 448 and infinities saturated to +-448 (as clamping first does), NaN as 0x7F.
__device__ __forceinline__ tf_u32 e4m3x2(float lo, float hi) {
    tf_u32 r;
    asm("{ .reg .b16 t; cvt.rn.satfinite.e4m3x2.f32 t, %1, %2; cvt.u32.u16 %0, t; }" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// From a block's max |x| as fp32 bits: the multiplier applied to x, and the stored scale's bits.
__device__ __forceinline__ void block_scale(tf_u32 top, bool ue8m0, float& mult, tf_u32& stored) {
    if (top > 0x7F800000u) {  // a NaN in the block
        mult = __uint_as_float(0x7FFFFFFFu);
        stored = NAN_SCALE;
        return;
    }
    const float a = __uint_as_float(top > AMAX_FLOOR ? top : AMAX_FLOOR);
    float m = __fdiv_rn(448.0f, a);
    float s = __fdiv_rn(1.0f, m);
    if (ue8m0) {
        tf_u32 sb = __float_as_uint(s);
        if ((sb & 0x7FFFFFu) != 0 && (sb & 0x7F800000u) != 0x7F800000u) sb = (sb & 0x7F800000u) + (1u << 23);
        s = __uint_as_float(sb);
        m = sb == 0x7F800000u ? 0.0f : __uint_as_float((254u << 23) - sb);
    }
    mult = m;
    stored = __float_as_uint(s);
}

// One tile. ROW: data and scale; COL: data_t and scale_t; SQUARE: fp8_128x128 (one scale a tile).
template <int IN, bool ROW, bool COL, bool SQUARE>
__device__ __forceinline__ void quantize_tile(const tf_u8* __restrict__ x, tf_u8* __restrict__ data,
                                              float* __restrict__ scale, tf_u8* __restrict__ data_t,
                                              float* __restrict__ scale_t, tf_i64 M, tf_i64 K, tf_i64 ld,
                                              int ue8m0) {
    constexpr int ES = IN == 2 ? 4 : 2;
    __shared__ __align__(16) tf_u8 stage[COL ? TILE * TILE : 16];  // data_t's bytes of the tile, swizzled
    __shared__ tf_u32 colmax[COL && !SQUARE ? 8 * TILE : 1];
    __shared__ float colmult[COL && !SQUARE ? TILE : 1];
    __shared__ tf_u32 rowscale[ROW && !SQUARE ? TILE : 1];
    __shared__ tf_u32 warpmax[8];

    const int t = threadIdx.x, w = t >> 5, lane = t & 31, h = lane >> 4, v = lane & 15;
    const tf_i64 tiles_k = K / TILE;
    const tf_i64 mb = blockIdx.x / tiles_k, kb = blockIdx.x - mb * tiles_k;
    const tf_i64 row0 = mb * TILE, col0 = kb * TILE;
    const int r0 = 16 * w + 8 * h;  // this thread's rows r0 .. r0 + 7 of the tile, columns 8v .. 8v + 7

    Vec8 f[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = load8<IN>(x + ((row0 + r0 + i) * ld + col0 + 8 * v) * ES);

    // Each row's max over the thread's 8 columns, each column's over its 8 rows.
    tf_u32 rmax[8], cmax[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) cmax[k] = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        rmax[i] = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const tf_u32 b = abs_bits(f[i].v[k]);
            rmax[i] = max(rmax[i], b);
            cmax[k] = max(cmax[k], b);
        }
    }

    float rmult[8];
    float cmult[8];
    if (SQUARE) {
        tf_u32 top = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) top = max(top, rmax[i]);
#pragma unroll
        for (int o = 16; o; o >>= 1) top = max(top, __shfl_xor_sync(0xFFFFFFFFu, top, o));
        if (lane == 0) warpmax[w] = top;
        __syncthreads();
        top = warpmax[0];
#pragma unroll
        for (int q = 1; q < 8; ++q) top = max(top, warpmax[q]);
        float m;
        tf_u32 stored;
        block_scale(top, ue8m0, m, stored);
#pragma unroll
        for (int i = 0; i < 8; ++i) rmult[i] = cmult[i] = m;
        if (t == 0) {
            const tf_i64 tiles_m = M / TILE;
            if (ROW) scale[mb * tiles_k + kb] = __uint_as_float(stored);
            if (COL) scale_t[kb * tiles_m + mb] = __uint_as_float(stored);
        }
    } else {
        if (ROW) {
            // The 8 rows' maxima over the 16 lanes of a half-warp, reduced and scattered at once: each
            // exchange halves the rows a lane holds (bits 3, 2, 1 of v pick the half it keeps), so that
            // lanes 2j and 2j + 1 end with row j's max, in 8 shuffles rather than 32.
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const bool up = v & 8;
                const tf_u32 keep = up ? rmax[j + 4] : rmax[j], send = up ? rmax[j] : rmax[j + 4];
                rmax[j] = max(keep, __shfl_xor_sync(0xFFFFFFFFu, send, 8));
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const bool up = v & 4;
                const tf_u32 keep = up ? rmax[j + 2] : rmax[j], send = up ? rmax[j] : rmax[j + 2];
                rmax[j] = max(keep, __shfl_xor_sync(0xFFFFFFFFu, send, 4));
            }
            {
                const bool up = v & 2;
                const tf_u32 keep = up ? rmax[1] : rmax[0], send = up ? rmax[0] : rmax[1];
                rmax[0] = max(keep, __shfl_xor_sync(0xFFFFFFFFu, send, 2));
            }
            const tf_u32 mine = max(rmax[0], __shfl_xor_sync(0xFFFFFFFFu, rmax[0], 1));
            float m;
            tf_u32 stored;
            block_scale(mine, ue8m0, m, stored);
            if ((v & 1) == 0) rowscale[r0 + (v >> 1)] = stored;
#pragma unroll
            for (int i = 0; i < 8; ++i) rmult[i] = __shfl_sync(0xFFFFFFFFu, m, (h << 4) + 2 * i);
        }
        if (COL) {
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                cmax[k] = max(cmax[k], __shfl_xor_sync(0xFFFFFFFFu, cmax[k], 16));
                if (h == 0) colmax[w * TILE + 8 * v + k] = cmax[k];
            }
        }
        __syncthreads();
        if (COL && t < TILE) {
            tf_u32 top = colmax[t];
#pragma unroll
            for (int q = 1; q < 8; ++q) top = max(top, colmax[q * TILE + t]);
            float m;
            tf_u32 stored;
            block_scale(top, ue8m0, m, stored);
            colmult[t] = m;
            scale_t[mb * K + col0 + t] = __uint_as_float(stored);
        }
        if (ROW && t >= TILE) scale[kb * M + row0 + (t - TILE)] = __uint_as_float(rowscale[t - TILE]);
        if (COL) {
            __syncthreads();
#pragma unroll
            for (int k = 0; k < 8; ++k) cmult[k] = colmult[8 * v + k];
        }
    }

    if (ROW) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float m = rmult[i];
            uint2 out;
            out.x = e4m3x2(__fmul_rn(f[i].v[0], m), __fmul_rn(f[i].v[1], m)) |
                    e4m3x2(__fmul_rn(f[i].v[2], m), __fmul_rn(f[i].v[3], m)) << 16;
            out.y = e4m3x2(__fmul_rn(f[i].v[4], m), __fmul_rn(f[i].v[5], m)) |
                    e4m3x2(__fmul_rn(f[i].v[6], m), __fmul_rn(f[i].v[7], m)) << 16;
            *reinterpret_cast<uint2*>(data + (row0 + r0 + i) * K + col0 + 8 * v) = out;
        }
    }
    if (COL) {
        // Column c = 8v + k of the tile is row c of data_t's block; the thread's rows r0 .. r0 + 7 are its
        // 8-byte chunk r0 / 8, stored at chunk (r0 / 8) ^ v of the stage's row c: a warp's 32 chunks then
        // fall on distinct bank pairs.
        const int chunk = (r0 >> 3) ^ v;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float m = cmult[k];
            uint2 out;
            out.x = e4m3x2(__fmul_rn(f[0].v[k], m), __fmul_rn(f[1].v[k], m)) |
                    e4m3x2(__fmul_rn(f[2].v[k], m), __fmul_rn(f[3].v[k], m)) << 16;
            out.y = e4m3x2(__fmul_rn(f[4].v[k], m), __fmul_rn(f[5].v[k], m)) |
                    e4m3x2(__fmul_rn(f[6].v[k], m), __fmul_rn(f[7].v[k], m)) << 16;
            *reinterpret_cast<uint2*>(stage + (8 * v + k) * TILE + 8 * chunk) = out;
        }
        __syncthreads();
        // 16 bytes (chunks 2p and 2p + 1) of row c a thread, a warp writing 4 whole rows of 128 bytes.
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int g = t + THREADS * j, c = g >> 3, p = g & 7, sw = (c >> 3) & 15;
            uint4 piece = *reinterpret_cast<const uint4*>(stage + c * TILE + 8 * ((2 * p) ^ (sw & ~1)));
            if (sw & 1) {
                const uint4 s = piece;
                piece = make_uint4(s.z, s.w, s.x, s.y);
            }
            *reinterpret_cast<uint4*>(data_t + (col0 + c) * M + row0 + 16 * p) = piece;
        }
    }
}

}  // namespace tileflip_quantize

// One kernel a (input dtype, outputs, recipe): tileflip.kernels.cuda.quantize names them.
#define TILEFLIP_QUANTIZE(NAME, IN, ROW, COL, SQUARE)                                                     \
    extern "C" __global__ void __launch_bounds__(tileflip_quantize::THREADS)                               \
        NAME(const tf_u8* x, tf_u8* data, float* scale, tf_u8* data_t, float* scale_t, tf_i64 M, tf_i64 K, \
             tf_i64 ld, int ue8m0) {                                                                       \
        tileflip_quantize::quantize_tile<IN, ROW, COL, SQUARE>(x, data, scale, data_t, scale_t, M, K, ld,  \
                                                               ue8m0);                                     \
    }

#define TILEFLIP_QUANTIZE_OUTPUTS(IN, SUFFIX)                                         \
    TILEFLIP_QUANTIZE(quantize_fp8_1x128_row_##SUFFIX, IN, true, false, false)      \
    TILEFLIP_QUANTIZE(quantize_fp8_1x128_col_##SUFFIX, IN, false, true, false)      \
    TILEFLIP_QUANTIZE(quantize_fp8_1x128_both_##SUFFIX, IN, true, true, false)      \
    TILEFLIP_QUANTIZE(quantize_fp8_128x128_row_##SUFFIX, IN, true, false, true)     \
    TILEFLIP_QUANTIZE(quantize_fp8_128x128_col_##SUFFIX, IN, false, true, true)     \
    TILEFLIP_QUANTIZE(quantize_fp8_128x128_both_##SUFFIX, IN, true, true, true)

TILEFLIP_QUANTIZE_OUTPUTS(0, bf16)
TILEFLIP_QUANTIZE_OUTPUTS(1, fp16)
TILEFLIP_QUANTIZE_OUTPUTS(2, fp32)
