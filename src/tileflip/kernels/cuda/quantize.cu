// Block-scaled quantization of a 128 x 128 tile of x per block, for the row-wise output, the column-wise
// output, or both from one read of x. Recipes (RECIPE): 0 fp8_1x128, 1 fp8_128x128, 2 mxfp8 with the floor
// rule, 3 mxfp8 with the rceil rule, 4 nvfp4.
//
// The problem: x is M x K (bf16, fp16 or fp32; rows ld elements apart, columns contiguous, M and K
// multiples of 128). data (M, K / PACK) and data_t (K, M / PACK) are row-major (e4m3 bytes, or pairs of
// e2m1 codes, the even element in the low nibble). The scales: fp8_1x128's (M, K/128) with strides (1, M)
// and (K, M/128) with strides (1, K); fp8_128x128's (M/128, K/128) row-major and its transpose; mxfp8's
// e8m0 and nvfp4's e4m3 bytes (M, K/G) and (K, M/G) row-major, or in cuBLAS's blocked layout of 128 x 4
// tiles. The arithmetic is the Triton kernel's, bit for bit (docs/design.md, Block-scaled quantization):
// block maxima as integer maxima of |x|'s fp32 bits (a NaN block stays NaN), IEEE quotients, the
// hardware's e4m3 conversion (round to nearest even, saturating).
//
// Why: with both outputs each element belongs to a group along its row and another along its column, so
// a block holds a whole 128 x 128 tile; 256 threads hold 64 values each (8 consecutive rows x 8
// consecutive columns). Row maxima are shuffles among the lanes of a group, column maxima shuffles and
// shared memory, and the column-wise output of a thread's 8 rows (8 bytes, or 4 for fp4) is staged in a
// swizzled shared tile and written as whole rows of data_t.
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
constexpr int FP8_1X128 = 0, FP8_128X128 = 1, MX_FLOOR = 2, MX_RCEIL = 3, NVFP4 = 4;

// Elements per scale along the grouped dimension, values per stored data byte, scale bytes.
template <int R> struct Recipe {
    static constexpr int G = R <= FP8_128X128 ? 128 : (R == NVFP4 ? 16 : 32);
    static constexpr int PACK = R == NVFP4 ? 2 : 1;
    static constexpr bool SQUARE = R == FP8_128X128;
    static constexpr bool BYTE_SCALES = R >= MX_FLOOR;
};

// nvfp4 of bf16 or fp16 x (IN 0, 1) keeps x in its own type and converts by thresholds (e2m1x8_counted).
template <int R, int IN> constexpr bool counted = R == NVFP4 && IN != 2;

struct Vec8 { float v[8]; };

// The fp32 value of the bf16 (IN 0) or fp16 (IN 1) bits in h's low half.
template <int IN> __device__ __forceinline__ float half_value(tf_u32 h) {
    if (IN == 0) return __uint_as_float(h << 16);
    float f;
    asm("{ .reg .b16 t; cvt.u16.u32 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "r"(h));
    return f;
}

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
            r.v[2 * k] = half_value<IN>(w[k]);
            r.v[2 * k + 1] = half_value<IN>(w[k] >> 16);
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

// The e2m1 code (0..15) of clamp(y, +-6), rounded to nearest even, the sign kept, NaN as 4. Below 1 the
// grid is 0, 0.5, 1: adding 1.5 * 2^23 rounds 2|y| to an integer in the low mantissa bits. From 1 up the
// fp32 pattern is rounded to one mantissa bit, and its exponent and that bit are the code.
__device__ __forceinline__ tf_u32 e2m1(float y) {
    const tf_u32 u = __float_as_uint(y), a = u & 0x7FFFFFFFu;
    const tf_u32 sub = __float_as_uint(__fmaf_rn(__uint_as_float(a), 2.0f, 12582912.0f)) - 0x4B400000u;
    const tf_u32 normal = min((a + ((a >> 22) & 1u) + (0x1FFFFFu - (252u << 22))) >> 22, 7u);
    const tf_u32 code = (a < 0x3F800000u ? sub : normal) | ((u >> 28) & 8u);
    return a > 0x7F800000u ? 4u : code;
}

// e2m1 for y that is not NaN, in fewer instructions: one fp32 add rounds |y| (clamped to 6) to the grid's
// spacing where it lies (0.5 below 2, 1 below 4, 2 above): with C = 1.5 * 2^(22 + j), j = 0, 1, 2 for
// those ranges, |y| + C = C + m * 2^(j - 1), and the code is m + 2j; the tie goes to the even m, which is
// the even code. Only the low bits of (|y| + C)'s pattern are read: m + 2j + 2 = code (mod 16).
__device__ __forceinline__ tf_u32 e2m1_not_nan(float y) {
    const float a = fminf(fabsf(y), 6.0f);
    const tf_u32 jb = min(max(__float_as_uint(a) >> 23, 127u), 129u);  // 127 + j
    const tf_u32 sum = __float_as_uint(__fadd_rn(a, __uint_as_float((jb << 23) + 0x0B400000u)));
    return ((sum + 2 * jb + 2) & 7u) | ((__float_as_uint(y) >> 28) & 8u);
}

// Eight e2m1 codes of x times the multiplier m, as nibbles (value k in bits 4k). block_scale makes m NaN
// for a group holding a NaN, and m is 0 only with an infinite global scale, where an infinite x makes the
// group's scale NaN too; so where m is finite no product is NaN and the shorter conversion applies.
__device__ __forceinline__ tf_u32 e2m1x8(const Vec8& v, float m) {
    tf_u32 out = 0;
    if (fabsf(m) <= 3.402823466e38f) {
#pragma unroll
        for (int k = 0; k < 8; ++k) out += e2m1_not_nan(__fmul_rn(v.v[k], m)) << (4 * k);
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) out |= e2m1(__fmul_rn(v.v[k], m)) << (4 * k);
    }
    return out;
}

// nvfp4 of 2-byte x (IN 0 bf16, 1 fp16). For a multiplier m, the code of x * m is the count of thresholds at or
// below |x|: T_k, k = 1..7, is the least |x| of the input's type whose product rounds to code k or above (the
// product reaches the grid's midpoint below code k; at the midpoint itself where k is even). Comparing x's own
// values is exact and takes two values an instruction (set.ge on x2 pairs).

// The largest value of the input's type at or below q >= 0 (its bits).
template <int IN> __device__ __forceinline__ tf_u32 half_below(float q) {
    if (IN == 0) return __float_as_uint(q) >> 16;
    tf_u32 h;
    asm("{ .reg .b16 t; cvt.rz.f16.f32 t, %1; cvt.u32.u16 %0, t; }" : "=r"(h) : "f"(q));
    return h;
}

// T_1 .. T_7 for m (finite, above 0), each in both halves of a word, in words 0..6. q = T_k's value estimated
// from 0.25 / m (within 2^-21 of it), c the largest value at or below q: T_k is c, c + 1 or c + 2 (bits), the
// first whose product reaches code k; +inf where no finite value does.
template <int IN> __device__ __forceinline__ void e2m1_thresholds(float m, tf_u32 (&thr)[8]) {
    const tf_u32 inf = IN == 0 ? 0x7F80u : 0x7C00u;
    const float mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    const float q1 = __fdiv_rn(0.25f, m);
#pragma unroll
    for (int k = 0; k < 7; ++k) {
        tf_u32 c = min(half_below<IN>(__fmul_rn(mid[k] * 4.0f, q1)), inf);
        const float y0 = __fmul_rn(half_value<IN>(c), m), y1 = __fmul_rn(half_value<IN>(min(c + 1, inf)), m);
        const bool even = k & 1;  // code k + 1
        c += (even ? y0 < mid[k] : y0 <= mid[k]) + (even ? y1 < mid[k] : y1 <= mid[k]);
        c = min(c, inf);
        thr[k] = c | (c << 16);
    }
    thr[7] = 0;
}

// mask of a >= b in each half of two bf16 (fp16) pairs: 0xFFFF where it holds, 0 where not.
template <int IN> __device__ __forceinline__ tf_u32 ge2(tf_u32 a, tf_u32 b) {
    tf_u32 d;
    if (IN == 0) asm("set.ge.u32.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    else asm("set.ge.u32.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// a where the mask's bits are set, b elsewhere (one LOP3).
__device__ __forceinline__ tf_u32 pick(tf_u32 m, tf_u32 a, tf_u32 b) { return (m & a) | (~m & b); }

// Codes of a pair of values (the low and the high halves of mag, their magnitudes, and of sgn, whose bits 3
// and 19 are their signs), in bits 0-3 and 16-19. The thresholds rise with k, so the count of those at or
// below |x| is found by a search in each half: T_4 gives the code's bit 2, then T_6 or T_2 its bit 1, then
// the odd threshold between its bit 0 (three comparisons, where counting all seven took fourteen steps).
template <int IN>
__device__ __forceinline__ tf_u32 e2m1x2_counted(tf_u32 mag, tf_u32 sgn, const uint4& lo, const uint4& hi) {
    const tf_u32 m4 = ge2<IN>(mag, lo.w);                    // T_4
    const tf_u32 m2 = ge2<IN>(mag, pick(m4, hi.y, lo.y));    // T_6 or T_2
    const tf_u32 m1 = ge2<IN>(mag, pick(m4, pick(m2, hi.z, hi.x), pick(m2, lo.z, lo.x)));  // T_7, T_5, T_3, T_1
    return (m4 & 0x40004u) | (m2 & 0x20002u) | (m1 & 0x10001u) | (sgn & 0x80008u);
}

__device__ __forceinline__ tf_u32 prmt(tf_u32 a, tf_u32 b, tf_u32 sel) {
    tf_u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// Eight codes as nibbles (value j in bits 4j): value j (j < 4) is half (halves >> j) & 1 of word p[j] and value
// j + 4 the same half of q[j] (x's words; ap, aq their magnitudes), so that the pair j, j + 4 is one x2 word.
template <int IN>
__device__ __forceinline__ tf_u32 e2m1x8_counted(const tf_u32 (&p)[4], const tf_u32 (&q)[4], const tf_u32 (&ap)[4],
                                                 const tf_u32 (&aq)[4], int halves, const uint4& lo, const uint4& hi) {
    tf_u32 out = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const bool high = (halves >> j) & 1;
        const tf_u32 mag = prmt(ap[j], aq[j], high ? 0x7632u : 0x5410u);
        const tf_u32 sgn = prmt(p[j], q[j], high ? 0x0F0Bu : 0x0D09u);  // the high bytes' signs, replicated
        out |= e2m1x2_counted<IN>(mag, sgn, lo, hi) << (4 * j);
    }
    return out;
}

// The same eight values times m: counted against thr (the thresholds of the group's scale byte) where m is
// finite and above 0; otherwise (a NaN group, or a global scale that is 0, negative or not finite) e2m1 of
// the fp32 products.
template <int IN>
__device__ __forceinline__ tf_u32 e2m1x8_kept(const tf_u32 (&p)[4], const tf_u32 (&q)[4], const tf_u32 (&ap)[4],
                                              const tf_u32 (&aq)[4], int halves, float m, const uint4* thr) {
    if (m > 0.0f && m <= 3.402823466e38f) return e2m1x8_counted<IN>(p, q, ap, aq, halves, thr[0], thr[1]);
    Vec8 v;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int shift = (halves >> j) & 1 ? 16 : 0;
        v.v[j] = half_value<IN>((p[j] >> shift) & 0xFFFFu);
        v.v[j + 4] = half_value<IN>((q[j] >> shift) & 0xFFFFu);
    }
    return e2m1x8(v, m);
}

__device__ __forceinline__ tf_u32 max_u16x2(tf_u32 a, tf_u32 b) {
    tf_u32 d;
    asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// A group's max |x| as fp32 bits, from the bits of x's own type where x is kept in 2 bytes.
template <int IN, bool KEPT> __device__ __forceinline__ tf_u32 group_top(tf_u32 top) {
    return KEPT ? __float_as_uint(half_value<IN>(top)) : top;
}

// Four e4m3 bytes of a, b, c, d (a in the low byte), as e4m3x2 does them.
__device__ __forceinline__ tf_u32 e4m3x4(float a, float b, float c, float d) {
    tf_u32 r;
    asm("{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1; cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3; "
        "mov.b32 %0, {lo, hi}; }" : "=r"(r) : "f"(a), "f"(b), "f"(c), "f"(d));
    return r;
}

// What the scale rules read besides a block's max: ue8m0 (fp8 recipes); nvfp4's 1 / s for every e4m3
// scale byte s (in shared memory; NaN for 0x7F, a NaN group's), its thresholds for 2-byte x (two words a
// byte), and its global scale (gs, 1 without one).
struct Ctx {
    int ue8m0;
    float gs;
    float rgs;  // 1 / gs, rounded to nearest
    bool global;
    bool gs_normal;  // gs and rgs positive normal numbers
    const float* recip;
    const uint4* thr;
};

// top / 6 rounded to nearest even, for top a 2-byte type's value (at most 11 significant bits), inf or NaN: the
// product by 1/6 and one FMA correction (a CPU test checks every such top against the IEEE quotient).
__device__ __forceinline__ float div6_short(float top) {
    const float y = 0.16666667163372039795f;  // 1/6 rounded to nearest
    const float q = __fmul_rn(top, y);
    return top <= 3.402823466e38f ? __fmaf_rn(__fmaf_rn(-q, 6.0f, top), y, q) : q;  // inf and NaN: q
}

// What nvfp4's scale byte takes of block / gs: the product by rg = 1/gs (rounded to nearest) lies within 2
// ulps of the IEEE quotient, so it rounds to the same e4m3 byte (and clamps alike) unless it lies within 4
// ulps of a value of 5 significant bits (an e4m3 value, a midpoint between two, or a clamp bound); there, and
// for a global scale that is not a positive normal number, the IEEE quotient.
__device__ __forceinline__ float div_gs(float block, const Ctx& ctx) {
    const float v = __fmul_rn(block, ctx.rgs);
    const tf_u32 low = (__float_as_uint(v) + 4u) & 0x7FFFFu;
    return ctx.gs_normal && low > 8u ? v : __fdiv_rn(block, ctx.gs);
}

// From a block's max |x| as fp32 bits: the multiplier applied to x, and the stored scale (fp32 bits for
// the fp8 recipes, the e8m0 or e4m3 byte otherwise).
// SHORT: top is the max of a 2-byte type's values (nvfp4's quotients then take fewer instructions).
template <int R, bool SHORT = false>
__device__ __forceinline__ void block_scale(tf_u32 top, const Ctx& ctx, float& mult, tf_u32& stored) {
    const bool nan = top > 0x7F800000u;
    if (R <= FP8_128X128) {
        if (nan) {
            mult = __uint_as_float(0x7FFFFFFFu);
            stored = NAN_SCALE;
            return;
        }
        const float a = __uint_as_float(top > AMAX_FLOOR ? top : AMAX_FLOOR);
        float m = __fdiv_rn(448.0f, a);
        float s = __fdiv_rn(1.0f, m);
        if (ctx.ue8m0) {
            tf_u32 sb = __float_as_uint(s);
            if ((sb & 0x7FFFFFu) != 0 && (sb & 0x7F800000u) != 0x7F800000u) sb = (sb & 0x7F800000u) + (1u << 23);
            s = __uint_as_float(sb);
            m = sb == 0x7F800000u ? 0.0f : __uint_as_float((254u << 23) - sb);
        }
        mult = m;
        stored = __float_as_uint(s);
    } else if (R == MX_FLOOR) {
        // 2^(biased - 127) with biased = floor(log2(amax)) - 8 + 127, clamped; x times the divisor's exact
        // reciprocal (the divisor at least 2^-126); a NaN block's finite elements give +-0.
        const int biased = min(max((int)(top >> 23) - 135, -127), 128) + 127;
        mult = nan ? 0.0f : __uint_as_float((tf_u32)(254 - max(biased, 1)) << 23);
        stored = nan ? 255u : (tf_u32)biased;
    } else if (R == MX_RCEIL) {
        // The smallest power of two >= amax / 448: amax = 1.f * 2^E lies above 448 * 2^(E-8) exactly when
        // its mantissa exceeds 1.75's.
        const int field = (int)(top >> 23);
        int e = field - 135 + ((top & 0x7FFFFFu) > 0x600000u ? 1 : 0);
        e = field == 0 ? -127 : (field == 255 ? 127 : e);
        const int biased = min(max(e, -127), 127) + 127;
        float r = __uint_as_float((tf_u32)(254 - biased) << 23);
        r = biased == 0 ? 1.0f : (biased == 254 ? __uint_as_float(1u << 22) : r);
        mult = nan ? __uint_as_float(0x7FFFFFFFu) : r;
        stored = nan ? 255u : (tf_u32)biased;
    } else {
        float block = SHORT ? div6_short(__uint_as_float(top)) : __fdiv_rn(__uint_as_float(top), 6.0f);
        if (ctx.global) block = SHORT ? div_gs(block, ctx) : __fdiv_rn(block, ctx.gs);
        const bool bad = block != block;
        const float clamped = fminf(fmaxf(block, 0.015625f), 448.0f);
        const tf_u32 s8 = e4m3x2(clamped, 0.0f) & 0xFFu;  // a normal e4m3 (at least 2^-6)
        mult = bad ? __uint_as_float(0x7FFFFFFFu) : ctx.recip[s8];
        stored = bad ? 0x7Fu : s8;
    }
}

// The 8 row maxima of the G / 8 lanes of a row group, reduced and scattered: each exchange halves the rows
// a lane keeps (the lane bit picks the half), so that after them lane j of the group holds rows
// j * N .. j * N + N - 1 (N = 64 / G, at least 1; with G = 128 a pair of lanes holds one row).
template <int G>
__device__ __forceinline__ void reduce_rows(tf_u32 (&rmax)[8], int v) {
    constexpr int L = G / 8;
    int n = 8;
#pragma unroll
    for (int bit = L / 2; bit >= 1 && n > 1; bit >>= 1) {
        const int half = n / 2;
        const bool up = v & bit;
#pragma unroll
        for (int j = 0; j < half; ++j) {
            const tf_u32 keep = up ? rmax[j + half] : rmax[j], send = up ? rmax[j] : rmax[j + half];
            rmax[j] = max(keep, __shfl_xor_sync(0xFFFFFFFFu, send, bit));
        }
        n = half;
    }
    if (L == 16) rmax[0] = max(rmax[0], __shfl_xor_sync(0xFFFFFFFFu, rmax[0], 1));
}

// Where 4 byte scales go (byte offset): word q of scale row `row` within a tile whose groups start at group
// `g0`, of a scale matrix with `groups` scales a row; plain (row-major) or blocked (128 x 4 tiles, a tile's
// row r at (r % 32) * 16 + (r / 32) * 4).
__device__ __forceinline__ tf_i64 scale_word(bool blocked, tf_i64 row, tf_i64 g0, tf_i64 groups, int q) {
    if (!blocked) return row * groups + g0 + 4 * q;
    const tf_i64 r = row & 127;
    return 512 * ((row >> 7) * (groups >> 2) + (g0 >> 2) + q) + (r & 31) * 16 + (r >> 5) * 4;
}

// One tile (mb, kb): data, data_t and fp32 scales to memory, byte scales to rowscale_b and colscale
// (GROUPS bytes a tile row, and a tile column).
template <int IN, bool ROW, bool COL, int R>
__device__ __forceinline__ void quantize_tile(const tf_u8* __restrict__ x, tf_u8* __restrict__ data,
                                              tf_u8* __restrict__ scale, tf_u8* __restrict__ data_t,
                                              tf_u8* __restrict__ scale_t, const Ctx& ctx, tf_i64 M, tf_i64 K,
                                              tf_i64 ld, tf_i64 mb, tf_i64 kb, tf_u8* rowscale_b,
                                              tf_u8* colscale) {
    using RC = Recipe<R>;
    constexpr int G = RC::G, PACK = RC::PACK, GROUPS = TILE / G;  // groups a tile row (and column) holds
    constexpr int ES = IN == 2 ? 4 : 2;
    constexpr int TROW = TILE / PACK;           // bytes of a staged row of data_t's block
    constexpr int CW = G == 16 ? 1 : G / 16;    // warps a column group spans
    __shared__ __align__(16) tf_u8 stage[COL ? TILE * TROW : 16];  // data_t's bytes of the tile, swizzled
    __shared__ tf_u32 colmax[COL && !RC::SQUARE && G > 16 ? 8 * TILE : 1];
    __shared__ float colmult[COL && !RC::SQUARE && G > 16 ? GROUPS * TILE : 1];
    __shared__ tf_u32 rowscale[ROW && R == FP8_1X128 ? TILE : 1];
    __shared__ tf_u32 warpmax[8];

    const int t = threadIdx.x, w = t >> 5, lane = t & 31, h = lane >> 4, v = lane & 15;
    const tf_i64 tiles_k = K / TILE, tiles_m = M / TILE;
    const tf_i64 row0 = mb * TILE, col0 = kb * TILE;
    const int r0 = 16 * w + 8 * h;  // this thread's rows r0 .. r0 + 7 of the tile, columns 8v .. 8v + 7

    // nvfp4 of 2-byte x keeps x's words (w) and their magnitudes (a) and counts thresholds (e2m1x8_counted);
    // every other case converts x to fp32 (f). Maxima are of |x|'s bits, in x's own type where kept.
    constexpr bool COUNTED = counted<R, IN>;
    Vec8 f[COUNTED ? 1 : 8];
    tf_u32 xw[COUNTED ? 8 : 1][4], xa[COUNTED ? 8 : 1][4];
    tf_u32 rmax[8], cmax[8];
    if constexpr (COUNTED) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint4 u = __ldg(reinterpret_cast<const uint4*>(x + ((row0 + r0 + i) * ld + col0 + 8 * v) * ES));
            const tf_u32 words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                xw[i][q] = words[q];
                xa[i][q] = words[q] & 0x7FFF7FFFu;
            }
            const tf_u32 m2 = max_u16x2(max_u16x2(xa[i][0], xa[i][1]), max_u16x2(xa[i][2], xa[i][3]));
            rmax[i] = max(m2 & 0xFFFFu, m2 >> 16);
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            tf_u32 m2 = xa[0][q];
#pragma unroll
            for (int i = 1; i < 8; ++i) m2 = max_u16x2(m2, xa[i][q]);
            cmax[2 * q] = m2 & 0xFFFFu;
            cmax[2 * q + 1] = m2 >> 16;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) f[i] = load8<IN>(x + ((row0 + r0 + i) * ld + col0 + 8 * v) * ES);
        // Each row's max over the thread's 8 columns, each column's over its 8 rows.
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
    }

    // What converting each row's (and column's) group takes: the multiplier's bits, or nvfp4's scale byte, whose
    // multiplier ctx.recip holds (NaN for a NaN group's 0x7F), with the thresholds where x is kept in 2 bytes.
    tf_u32 rsel[8], csel[8];
    if (RC::SQUARE) {
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
        block_scale<R>(top, ctx, m, stored);
#pragma unroll
        for (int i = 0; i < 8; ++i) rsel[i] = csel[i] = __float_as_uint(m);
        if (t == 0) {
            if (ROW) reinterpret_cast<float*>(scale)[mb * tiles_k + kb] = __uint_as_float(stored);
            if (COL) reinterpret_cast<float*>(scale_t)[kb * tiles_m + mb] = __uint_as_float(stored);
        }
    } else {
        if (ROW) {
            constexpr int L = G / 8, N = G == 128 ? 1 : 64 / G;  // lanes of a row group, rows a lane keeps
            reduce_rows<G>(rmax, v);
            const int mine = G == 128 ? v >> 1 : (v & (L - 1)) * N;  // the first row this lane holds
            tf_u32 m[N];
#pragma unroll
            for (int j = 0; j < N; ++j) {
                tf_u32 stored;
                float mult;
                block_scale<R, COUNTED>(group_top<IN, COUNTED>(rmax[j]), ctx, mult, stored);
                m[j] = R == NVFP4 ? stored : __float_as_uint(mult);
                if (RC::BYTE_SCALES) {
                    rowscale_b[(r0 + mine + j) * GROUPS + v / L] = (tf_u8)stored;
                } else if ((v & 1) == 0) {
                    rowscale[r0 + mine] = stored;
                }
            }
            // Row i's multiplier, from the lane of the group that holds it.
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int src = G == 128 ? 2 * i : (v & ~(L - 1)) + i / N;
                rsel[i] = __shfl_sync(0xFFFFFFFFu, m[i % N], (h << 4) + src);
            }
        }
        if (COL) {
#pragma unroll
            for (int k = 0; k < 8; ++k) cmax[k] = max(cmax[k], __shfl_xor_sync(0xFFFFFFFFu, cmax[k], 16));
            if (G == 16) {
                // The warp's 16 rows are the column group (group w): the two halves share out its 8 scales.
                tf_u32 m[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    tf_u32 stored;
                    float mult;
                    block_scale<R, COUNTED>(group_top<IN, COUNTED>(h ? cmax[4 + j] : cmax[j]), ctx, mult, stored);
                    m[j] = R == NVFP4 ? stored : __float_as_uint(mult);
                    colscale[(8 * v + 4 * h + j) * GROUPS + w] = (tf_u8)stored;
                }
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const tf_u32 other = __shfl_xor_sync(0xFFFFFFFFu, m[j], 16);
                    csel[j] = h ? other : m[j];
                    csel[4 + j] = h ? m[j] : other;
                }
            } else if (h == 0) {
#pragma unroll
                for (int k = 0; k < 8; ++k) colmax[w * TILE + 8 * v + k] = cmax[k];
            }
        }
        __syncthreads();
        if (COL && G > 16) {
            // Column group q of column c: the maxima of its CW warps; GROUPS x 128 scales over the block.
#pragma unroll
            for (int idx = t; idx < GROUPS * TILE; idx += THREADS) {
                const int c = idx & (TILE - 1), q = idx >> 7;
                tf_u32 top = colmax[q * CW * TILE + c];
#pragma unroll
                for (int p = 1; p < CW; ++p) top = max(top, colmax[(q * CW + p) * TILE + c]);
                float m;
                tf_u32 stored;
                block_scale<R>(top, ctx, m, stored);
                colmult[q * TILE + c] = m;
                if (RC::BYTE_SCALES) {
                    colscale[c * GROUPS + q] = (tf_u8)stored;
                } else {
                    reinterpret_cast<float*>(scale_t)[mb * K + col0 + c] = __uint_as_float(stored);
                }
            }
        }
        if (COL && G > 16) __syncthreads();  // colmult complete
        if (ROW && R == FP8_1X128 && t >= TILE)
            reinterpret_cast<float*>(scale)[kb * M + row0 + (t - TILE)] = __uint_as_float(rowscale[t - TILE]);
        if (COL && G > 16) {
#pragma unroll
            for (int k = 0; k < 8; ++k) csel[k] = __float_as_uint(colmult[(w / CW) * TILE + 8 * v + k]);
        }
    }

    if (ROW) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float m = R == NVFP4 ? ctx.recip[rsel[i]] : __uint_as_float(rsel[i]);
            if constexpr (COUNTED) {
                // Row i's values j and j + 4 are half j & 1 of its words j / 2 and j / 2 + 2.
                const tf_u32 p[4] = {xw[i][0], xw[i][0], xw[i][1], xw[i][1]};
                const tf_u32 q[4] = {xw[i][2], xw[i][2], xw[i][3], xw[i][3]};
                const tf_u32 ap[4] = {xa[i][0], xa[i][0], xa[i][1], xa[i][1]};
                const tf_u32 aq[4] = {xa[i][2], xa[i][2], xa[i][3], xa[i][3]};
                *reinterpret_cast<tf_u32*>(data + (row0 + r0 + i) * (K / 2) + col0 / 2 + 4 * v) =
                    e2m1x8_kept<IN>(p, q, ap, aq, 0b1010, m, ctx.thr + 2 * rsel[i]);
            } else if (PACK == 2) {
                *reinterpret_cast<tf_u32*>(data + (row0 + r0 + i) * (K / 2) + col0 / 2 + 4 * v) = e2m1x8(f[i], m);
            } else {
                uint2 out;
                out.x = e4m3x4(__fmul_rn(f[i].v[0], m), __fmul_rn(f[i].v[1], m), __fmul_rn(f[i].v[2], m),
                               __fmul_rn(f[i].v[3], m));
                out.y = e4m3x4(__fmul_rn(f[i].v[4], m), __fmul_rn(f[i].v[5], m), __fmul_rn(f[i].v[6], m),
                               __fmul_rn(f[i].v[7], m));
                *reinterpret_cast<uint2*>(data + (row0 + r0 + i) * K + col0 + 8 * v) = out;
            }
        }
    }
    if (COL) {
        // Column c = 8v + k of the tile is row c of data_t's block; the thread's rows r0 .. r0 + 7 are its
        // chunk r0 / 8 (8 bytes, or 4 for fp4), stored at chunk (r0 / 8) ^ v of the stage's row c: a warp's
        // 32 chunks then fall on distinct banks, but for two a bank with fp4's 4-byte chunks.
        const int chunk = (r0 >> 3) ^ v;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float m = R == NVFP4 ? ctx.recip[csel[k]] : __uint_as_float(csel[k]);
            if constexpr (COUNTED) {
                // Column k's rows j and j + 4 are half k & 1 of word k / 2 of those rows.
                const tf_u32 p[4] = {xw[0][k / 2], xw[1][k / 2], xw[2][k / 2], xw[3][k / 2]};
                const tf_u32 q[4] = {xw[4][k / 2], xw[5][k / 2], xw[6][k / 2], xw[7][k / 2]};
                const tf_u32 ap[4] = {xa[0][k / 2], xa[1][k / 2], xa[2][k / 2], xa[3][k / 2]};
                const tf_u32 aq[4] = {xa[4][k / 2], xa[5][k / 2], xa[6][k / 2], xa[7][k / 2]};
                *reinterpret_cast<tf_u32*>(stage + (8 * v + k) * TROW + 4 * chunk) =
                    e2m1x8_kept<IN>(p, q, ap, aq, k & 1 ? 0b1111 : 0, m, ctx.thr + 2 * csel[k]);
            } else if (PACK == 2) {
                Vec8 column;
#pragma unroll
                for (int i = 0; i < 8; ++i) column.v[i] = f[i].v[k];
                *reinterpret_cast<tf_u32*>(stage + (8 * v + k) * TROW + 4 * chunk) = e2m1x8(column, m);
            } else {
                uint2 out;
                out.x = e4m3x4(__fmul_rn(f[0].v[k], m), __fmul_rn(f[1].v[k], m), __fmul_rn(f[2].v[k], m),
                               __fmul_rn(f[3].v[k], m));
                out.y = e4m3x4(__fmul_rn(f[4].v[k], m), __fmul_rn(f[5].v[k], m), __fmul_rn(f[6].v[k], m),
                               __fmul_rn(f[7].v[k], m));
                *reinterpret_cast<uint2*>(stage + (8 * v + k) * TROW + 8 * chunk) = out;
            }
        }
        __syncthreads();
        // 16 bytes of row c a thread (data_t's bytes 16p .. 16p + 15 of the block's row c), read from
        // where the swizzle put them: a warp writes whole rows of TROW bytes.
        constexpr int PIECES = TROW / 16;  // 16-byte pieces a row
#pragma unroll
        for (int j = 0; j < TILE * PIECES / THREADS; ++j) {
            const int g = t + THREADS * j, c = g / PIECES, p = g % PIECES, sw = (c >> 3) & 15;
            uint4 piece;
            if (PACK == 2) {
                // 4-byte chunks 4p .. 4p + 3 sit in piece p ^ (sw >> 2), word e ^ (sw & 3).
                piece = *reinterpret_cast<const uint4*>(stage + c * TROW + 16 * (p ^ (sw >> 2)));
                if (sw & 1) piece = make_uint4(piece.y, piece.x, piece.w, piece.z);
                if (sw & 2) piece = make_uint4(piece.z, piece.w, piece.x, piece.y);
            } else {
                // 8-byte chunks 2p, 2p + 1 sit in piece p ^ (sw >> 1), their halves swapped where sw is odd.
                piece = *reinterpret_cast<const uint4*>(stage + c * TROW + 8 * ((2 * p) ^ (sw & ~1)));
                if (sw & 1) {
                    const uint4 s = piece;
                    piece = make_uint4(s.z, s.w, s.x, s.y);
                }
            }
            *reinterpret_cast<uint4*>(data_t + (col0 + c) * (M / PACK) + row0 / PACK + 16 * p) = piece;
        }
    }
}

// One block a tile; the byte scales of its rows and columns leave from shared memory, 4 bytes a thread.
template <int IN, bool ROW, bool COL, int R>
__device__ __forceinline__ void quantize_block(const tf_u8* __restrict__ x, tf_u8* __restrict__ data,
                                               tf_u8* __restrict__ scale, tf_u8* __restrict__ data_t,
                                               tf_u8* __restrict__ scale_t, const float* __restrict__ gsp,
                                               tf_i64 M, tf_i64 K, tf_i64 ld, int ue8m0, int blocked) {
    using RC = Recipe<R>;
    constexpr int G = RC::G, GROUPS = TILE / G;
    __shared__ __align__(16) tf_u8 rowscale_b[ROW && RC::BYTE_SCALES ? TILE * GROUPS : 16];
    __shared__ __align__(16) tf_u8 colscale[COL && RC::BYTE_SCALES ? TILE * GROUPS : 16];
    __shared__ float recip[R == NVFP4 ? 128 : 1];
    __shared__ uint4 thr[counted<R, IN> ? 256 : 1];
    const int t = threadIdx.x;
    const tf_i64 tiles_k = K / TILE, mb = blockIdx.x / tiles_k, kb = blockIdx.x - mb * tiles_k;

    Ctx ctx;
    ctx.ue8m0 = ue8m0;
    ctx.global = gsp != nullptr;
    ctx.gs = ctx.global ? *gsp : 1.0f;
    ctx.rgs = R == NVFP4 ? __fdiv_rn(1.0f, ctx.gs) : 1.0f;
    ctx.gs_normal = ctx.gs >= 1.17549435e-38f && ctx.gs <= 3.402823466e38f && ctx.rgs >= 1.17549435e-38f &&
                    ctx.rgs <= 3.402823466e38f;
    ctx.recip = recip;
    ctx.thr = thr;
    if (R == NVFP4) {
        if (t < 128) {  // 1 / s (or (1 / gs) / s) for every e4m3 scale byte s: two IEEE quotients
            const float s = __uint_as_float((tf_u32)((t >> 3) + 120) << 23 | (tf_u32)(t & 7) << 20);
            const float r = t == 0x7F ? __uint_as_float(NAN_SCALE) : __fdiv_rn(ctx.global ? ctx.rgs : 1.0f, s);
            recip[t] = r;
            if constexpr (counted<R, IN>) {
                tf_u32 w[8];
                e2m1_thresholds<IN>(r, w);
                thr[2 * t] = make_uint4(w[0], w[1], w[2], w[3]);
                thr[2 * t + 1] = make_uint4(w[4], w[5], w[6], w[7]);
            }
        }
        __syncthreads();
    }
    quantize_tile<IN, ROW, COL, R>(x, data, scale, data_t, scale_t, ctx, M, K, ld, mb, kb, rowscale_b, colscale);
    if (RC::BYTE_SCALES) {
        __syncthreads();  // the scale bytes complete
        // 4-byte words of the tile's scale rows (GROUPS bytes each), then of its columns.
        constexpr int WORDS = GROUPS >= 4 ? GROUPS / 4 : 1, ROWS = ROW ? TILE * WORDS : 0;
        constexpr int TOTAL = ROWS + (COL ? TILE * WORDS : 0);
        const tf_i64 row0 = mb * TILE, col0 = kb * TILE;
#pragma unroll
        for (int idx = t; idx < TOTAL; idx += THREADS) {
            const bool col_side = idx >= ROWS;
            const int j = col_side ? idx - ROWS : idx, r = j / WORDS, q = j - r * WORDS;
            const tf_u32 word = *reinterpret_cast<const tf_u32*>((col_side ? colscale : rowscale_b) + r * GROUPS + 4 * q);
            const tf_i64 at = col_side ? scale_word(blocked, col0 + r, row0 / G, M / G, q)
                                       : scale_word(blocked, row0 + r, col0 / G, K / G, q);
            *reinterpret_cast<tf_u32*>((col_side ? scale_t : scale) + at) = word;
        }
    }
}

}  // namespace tileflip_quantize

// One kernel a (recipe, outputs, input dtype): tileflip.kernels.cuda.quantize names them. BOUNDS: with both
// outputs of bf16 input, three blocks an SM (80 registers; nvfp4 and fp8_1x128 spill 24 and 8 bytes) were
// 1-2 points faster; fp32 input lost 5 points that way, fp16 input spills more, and a bound of two blocks
// on one-output kernels cost them up to 8 points.
#define TILEFLIP_QUANTIZE(NAME, IN, ROW, COL, R, BOUNDS)                                                    \
    extern "C" __global__ void BOUNDS NAME(const tf_u8* x, tf_u8* data, tf_u8* scale, tf_u8* data_t,          \
                                           tf_u8* scale_t, const float* gs, tf_i64 M, tf_i64 K, tf_i64 ld,   \
                                           int ue8m0, int blocked) {                                         \
        tileflip_quantize::quantize_block<IN, ROW, COL, R>(x, data, scale, data_t, scale_t, gs, M, K, ld,   \
                                                           ue8m0, blocked);                                  \
    }
#define TILEFLIP_BOUNDS __launch_bounds__(tileflip_quantize::THREADS)
#define TILEFLIP_BOUNDS_3 __launch_bounds__(tileflip_quantize::THREADS, 3)

#define TILEFLIP_QUANTIZE_OUTPUTS(RECIPE, R, IN, SUFFIX, BOTH)                                           \
    TILEFLIP_QUANTIZE(quantize_##RECIPE##_row_##SUFFIX, IN, true, false, R, TILEFLIP_BOUNDS)            \
    TILEFLIP_QUANTIZE(quantize_##RECIPE##_col_##SUFFIX, IN, false, true, R, TILEFLIP_BOUNDS)            \
    TILEFLIP_QUANTIZE(quantize_##RECIPE##_both_##SUFFIX, IN, true, true, R, BOTH)

#define TILEFLIP_QUANTIZE_RECIPES(IN, SUFFIX, BOTH)                         \
    TILEFLIP_QUANTIZE_OUTPUTS(fp8_1x128, 0, IN, SUFFIX, BOTH)               \
    TILEFLIP_QUANTIZE_OUTPUTS(fp8_128x128, 1, IN, SUFFIX, BOTH)             \
    TILEFLIP_QUANTIZE_OUTPUTS(mxfp8_floor, 2, IN, SUFFIX, BOTH)             \
    TILEFLIP_QUANTIZE_OUTPUTS(mxfp8_rceil, 3, IN, SUFFIX, BOTH)             \
    TILEFLIP_QUANTIZE_OUTPUTS(nvfp4, 4, IN, SUFFIX, BOTH)

TILEFLIP_QUANTIZE_RECIPES(0, bf16, TILEFLIP_BOUNDS_3)
TILEFLIP_QUANTIZE_RECIPES(1, fp16, TILEFLIP_BOUNDS)
TILEFLIP_QUANTIZE_RECIPES(2, fp32, TILEFLIP_BOUNDS)
