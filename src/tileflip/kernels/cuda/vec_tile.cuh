// The 16-byte "vec" tile shared by transpose.cu and permute.cu: 128 rows x 128 bytes in shared memory,
// loaded from rows that need not start on a 16-byte boundary and read back as 16-byte pieces of the
// transposed rows. Included by both files (NVRTC gets it as a named header; nvcc finds it beside them);
// it includes nothing itself.
#pragma once

typedef unsigned char tf_u8;
typedef unsigned short tf_u16;
typedef unsigned int tf_u32;
typedef unsigned long long tf_u64;
typedef long long tf_i64;

namespace tileflip {

constexpr int VEC_ROWS = 128;
constexpr int VEC_ROW_BYTES = 128;
constexpr int VEC_WORDS = VEC_ROW_BYTES / 4;

__device__ __forceinline__ int vec_swizzle(int r, int w, int group_shift) {
    return r * VEC_WORDS + (w ^ (((r >> group_shift) & 7) << 2));
}

// Bytes [t, t + 16) of the 32 bytes lo ++ hi, t in 0..15, as a barrel shifter: words by 8 bytes where
// t & 8, then by 4 where t & 4, then a funnel shift by t & 3 bytes (15 instructions where a select of
// word t / 4 + i per output word takes about 40; int8 8192 x 8191 0.871 -> 0.889 of copy, session 10
// run 6, benchmarks/results/experiments/h200-2026-12-01-unaligned-vec-barrel.json).
__device__ __forceinline__ uint4 funnel16(uint4 lo, uint4 hi, int t) {
    const tf_u32 u[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    tf_u32 v[6], w[5];
#pragma unroll
    for (int k = 0; k < 6; ++k) v[k] = t & 8 ? u[k + 2] : u[k];
#pragma unroll
    for (int k = 0; k < 5; ++k) w[k] = t & 4 ? v[k + 1] : v[k];
    const tf_u32 b = static_cast<tf_u32>(t & 3) * 8;
    return make_uint4(__funnelshift_r(w[0], w[1], b), __funnelshift_r(w[1], w[2], b), __funnelshift_r(w[2], w[3], b),
                      __funnelshift_r(w[3], w[4], b));
}

// The vec tile's load: 128 input rows x 128 bytes into the swizzled tile. start(grow) is the address of
// row grow's first byte in the tile (its column col0); rows at or past M and bytes past valid_bytes
// are loaded as zeros or left out, and never written out by the stores.
template <int ES, typename RowStart>
__device__ __forceinline__ void vec_load(tf_u32* tile, tf_i64 row0, tf_i64 M, tf_i64 valid_bytes, RowStart start_of) {
    constexpr int GROUP_SHIFT = ES == 1 ? 4 : 3;    // log2 of the tile rows in one 16-byte output piece
    const int tid = threadIdx.x;
    const int part = tid & 7;
    uint4 w[4], e[4];
    int shift[4];
#pragma unroll
    for (int pass = 0; pass < 4; ++pass) {
        const tf_i64 grow = row0 + pass * 32 + (tid >> 3);
        const tf_u64 start = start_of(grow);  // unused past M (its loads are skipped)
        const tf_u64 base = start & ~static_cast<tf_u64>(15);
        const tf_u64 last = start + static_cast<tf_u64>(valid_bytes) - 1;  // last byte of the piece
        shift[pass] = static_cast<int>(start - base);
        w[pass] = make_uint4(0, 0, 0, 0);
        e[pass] = make_uint4(0, 0, 0, 0);
        if (grow < M && base + 16 * part <= last) w[pass] = *reinterpret_cast<const uint4*>(base + 16 * part);
        if (grow < M && part == 7 && shift[pass] && base + VEC_ROW_BYTES <= last) {
            e[pass] = *reinterpret_cast<const uint4*>(base + VEC_ROW_BYTES);
        }
    }
#pragma unroll
    for (int pass = 0; pass < 4; ++pass) {
        uint4 n;
        n.x = __shfl_down_sync(0xffffffffu, w[pass].x, 1);
        n.y = __shfl_down_sync(0xffffffffu, w[pass].y, 1);
        n.z = __shfl_down_sync(0xffffffffu, w[pass].z, 1);
        n.w = __shfl_down_sync(0xffffffffu, w[pass].w, 1);
        if (part == 7) n = e[pass];
        const int r = pass * 32 + (tid >> 3);
        *reinterpret_cast<uint4*>(&tile[vec_swizzle(r, 4 * part, GROUP_SHIFT)]) = funnel16(w[pass], n, shift[pass]);
    }
}

// The vec tile's pieces: a thread reads one 4-byte word column cw of 16 / ES tile rows (from row g * R)
// and a byte permutation (4 x 4 bytes, or 2 x 2 halves) turns them into one 16-byte piece of each of
// the 4 / ES output rows that word column holds (o[j]: output row 4 / ES * cw + j).
template <int ES>
__device__ __forceinline__ void vec_pieces(const tf_u32* tile, int g, int cw, uint4 (&o)[4 / ES]) {
    constexpr int GROUP_SHIFT = ES == 1 ? 4 : 3;
    constexpr int R = 16 / ES;
    tf_u32 v[R];
#pragma unroll
    for (int k = 0; k < R; ++k) v[k] = tile[vec_swizzle(g * R + k, cw, GROUP_SHIFT)];
    tf_u32 p[4 / ES][4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if constexpr (ES == 1) {  // 4 x 4 bytes: rows 4k..4k+3 of columns 4cw..4cw+3
            const tf_u32 t0 = __byte_perm(v[4 * k], v[4 * k + 1], 0x5140);
            const tf_u32 t1 = __byte_perm(v[4 * k], v[4 * k + 1], 0x7362);
            const tf_u32 t2 = __byte_perm(v[4 * k + 2], v[4 * k + 3], 0x5140);
            const tf_u32 t3 = __byte_perm(v[4 * k + 2], v[4 * k + 3], 0x7362);
            p[0][k] = __byte_perm(t0, t2, 0x5410);
            p[1][k] = __byte_perm(t0, t2, 0x7632);
            p[2][k] = __byte_perm(t1, t3, 0x5410);
            p[3][k] = __byte_perm(t1, t3, 0x7632);
        } else {  // 2 x 2 halves: rows 2k, 2k+1 of columns 2cw, 2cw+1
            p[0][k] = __byte_perm(v[2 * k], v[2 * k + 1], 0x5410);
            p[1][k] = __byte_perm(v[2 * k], v[2 * k + 1], 0x7632);
        }
    }
#pragma unroll
    for (int j = 0; j < 4 / ES; ++j) o[j] = make_uint4(p[j][0], p[j][1], p[j][2], p[j][3]);
}

__device__ __forceinline__ tf_u32 word_of(uint4 v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

}  // namespace tileflip
