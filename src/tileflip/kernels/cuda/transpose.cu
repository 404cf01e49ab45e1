// 2-D transposes out = in^T for elements of 1, 2, 4 or 8 bytes.
//
// in  is an M x N view with element strides (sxm, sxn): any non-negative values, 0 for expanded dims.
// out is a contiguous N x M tensor (row stride M) that never overlaps in, which is what makes
//     __restrict__ legal on both pointers; the Python wrapper refuses overlapping arguments.
//
// Kernels only move bits, so each one is written once over an unsigned type of the right width and
// instantiated under C names (transpose_<variant>_u<bits>) that the loader can look up without
// name mangling. The file is compiled both by NVRTC at run time and by nvcc in the tests, so it must
// not include any header: NVRTC has no standard library search path.
//
// Launch geometry, shared by every kernel: a 1-D grid of grid_m * grid_n blocks where block b handles
// tile (b / grid_n, b % grid_n), so gridDim.y stays 1 (its limit is 65535) whatever M is. All index
// arithmetic is 64-bit: M * N and row * sxm overflow 32 bits long before memory runs out.

typedef unsigned char tf_u8;
typedef unsigned short tf_u16;
typedef unsigned int tf_u32;
typedef unsigned long long tf_u64;
typedef long long tf_i64;

namespace tileflip {

// naive: 16 x 16 threads, one element each (the textbook kernel, made safe).
constexpr int NAIVE_TILE = 16;

// tiled: 32 x 32 tiles moved by 32 x 8 threads, 4 elements per thread. 256 threads per block keep
// enough blocks resident per SM, and the 4 loads per thread are issued back to back before the
// barrier, which is what hides the DRAM latency.
constexpr int TILE = 32;
constexpr int TILE_ROWS = 8;

// 32-bit division: blockIdx.x < 2^31 and grid_n < 2^31, and a 64-bit divide costs dozens of
// instructions per block, measurable in a kernel that does little else.
__device__ __forceinline__ void tile_of_block(tf_i64 grid_n, tf_i64& tile_m, tf_i64& tile_n) {
    const unsigned b = blockIdx.x;
    const unsigned gn = static_cast<unsigned>(grid_n);
    const unsigned tm = b / gn;
    tile_m = tm;
    tile_n = b - tm * gn;
}

template <typename T>
__device__ __forceinline__ void transpose_naive(const T* __restrict__ in, T* __restrict__ out, tf_i64 M, tf_i64 N,
                                                tf_i64 sxm, tf_i64 sxn, tf_i64 grid_n) {
    tf_i64 tile_m, tile_n;
    tile_of_block(grid_n, tile_m, tile_n);
    const tf_i64 row = tile_m * NAIVE_TILE + threadIdx.y;
    const tf_i64 col = tile_n * NAIVE_TILE + threadIdx.x;
    if (row < M && col < N) {
        // Adjacent threads read adjacent columns (coalesced when sxn == 1) but write M elements
        // apart: the strided store that the tiled kernels exist to remove.
        out[col * M + row] = in[row * sxm + col * sxn];
    }
}

// PAD = 1 shifts each tile row by one element so that a warp reading a tile column touches 32
// different banks; with PAD = 0 the row stride is 32 elements and the column read serialises (32-way
// for 4-byte elements, 16-way for 8-byte ones, whose accesses are served per half-warp). For 4- and
// 8-byte types one element of padding removes the conflict entirely; for 1- and 2-byte types the
// 33-element stride still puts some pairs of lanes in one bank (2-way at worst; `tileflip analyze`
// computes it), which is one reason those sizes are served by the Triton kernel.
template <typename T, int PAD>
__device__ __forceinline__ void transpose_tiled(const T* __restrict__ in, T* __restrict__ out, tf_i64 M, tf_i64 N,
                                                tf_i64 sxm, tf_i64 sxn, tf_i64 grid_n) {
    __shared__ T tile[TILE][TILE + PAD];
    constexpr int PER_THREAD = TILE / TILE_ROWS;

    tf_i64 tile_m, tile_n;
    tile_of_block(grid_n, tile_m, tile_n);
    const tf_i64 row0 = tile_m * TILE;
    const tf_i64 col0 = tile_n * TILE;
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;

    // Load: a warp (fixed ty) reads 32 consecutive columns of one input row; output row col0 + c holds
    // input column col0 + c, read back from a tile column, so the store is coalesced too. The values
    // go through registers first so that a thread's 4 global loads are all in flight before the first
    // has to land in shared memory.
    const T* src = in + (row0 + ty) * sxm + (col0 + tx) * sxn;
    T* dst = out + (col0 + ty) * M + (row0 + tx);
    T v[PER_THREAD];

    // Interior tiles (all but the last row and column of tiles) need no bounds checks; the test is
    // uniform over the block, so the barrier inside either branch is reached by every thread.
    if (row0 + TILE <= M && col0 + TILE <= N) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) v[i] = src[i * TILE_ROWS * sxm];
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) tile[ty + i * TILE_ROWS][tx] = v[i];
        __syncthreads();
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) dst[i * TILE_ROWS * M] = tile[tx][ty + i * TILE_ROWS];
        return;
    }

    const bool col_in = col0 + tx < N;
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        if (col_in && row0 + ty + i * TILE_ROWS < M) v[i] = src[i * TILE_ROWS * sxm];
    }
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
        if (col_in && row0 + ty + i * TILE_ROWS < M) tile[ty + i * TILE_ROWS][tx] = v[i];
    }
    __syncthreads();
    // Slots skipped by the load's mask are exactly the ones this mask skips, so uninitialised shared
    // memory is never written out.
    if (row0 + tx < M) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            if (col0 + ty + i * TILE_ROWS < N) dst[i * TILE_ROWS * M] = tile[tx][ty + i * TILE_ROWS];
        }
    }
}

// vec: 1- and 2-byte elements with 16-byte accesses on both sides, for input rows that need not start on
// a 16-byte boundary (an odd row stride: 8192 x 8191), where the other kernels (and Triton's, which
// cannot prove a row's start aligned) fall back to 1- or 2-byte accesses. Requires sxn == 1, M * sizeof(T)
// a multiple of 16 and out 16-byte aligned (tileflip.ops checks; others take another kernel).
//
// A block moves a tile of 128 input rows x 128 bytes. Load: each row's piece is read as 16-byte words
// from the 16-byte boundary below its start (a word never crosses a page and holds at least one byte of
// the row, so no load can fault; bytes outside the piece are never written out), 8 lanes a row; a lane
// takes the next lane's word by a warp shuffle (the last lane loads a ninth word) and funnel-shifts the
// pair by the row's misalignment into 16 aligned bytes. Every pass's loads are issued before the first
// shuffle. Store: a thread reads one 4-byte word column of 16 / sizeof(T) tile rows and a byte
// permutation (4 x 4 bytes, or 2 x 2 halves) turns them into one 16-byte piece of each of the 4 /
// sizeof(T) output rows; the 8 lanes of an output row write 128 contiguous bytes. Shared memory is
// swizzled (bits 2-4 of the word column XOR the row group) so that this read touches 32 banks.
// Blocks walk along rows of tiles (tile_of_block), which measured 0.875 / 0.911 of a copy for int8 /
// bf16 8192 x 8191 against 0.84 / 0.89 down columns of tiles (H200).
constexpr int VEC_ROWS = 128;
constexpr int VEC_ROW_BYTES = 128;
constexpr int VEC_WORDS = VEC_ROW_BYTES / 4;

__device__ __forceinline__ int vec_swizzle(int r, int w, int group_shift) {
    return r * VEC_WORDS + (w ^ (((r >> group_shift) & 7) << 2));
}

// Bytes [t, t + 16) of the 32 bytes lo ++ hi, t in 0..15, as a barrel shifter: words by 8 bytes where
// t & 8, then by 4 where t & 4, then a funnel shift by t & 3 bytes (15 instructions where a select of
// word t / 4 + i per output word takes about 40; int8 8192 x 8191 0.871 -> 0.889 of copy, H200).
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

template <typename T>
__device__ __forceinline__ void transpose_vec(const T* __restrict__ in_t, T* __restrict__ out_t, tf_i64 M, tf_i64 N,
                                              tf_i64 sxm, tf_i64 grid_n) {
    constexpr int ES = sizeof(T);
    constexpr int COLS = VEC_ROW_BYTES / ES;        // tile columns: output rows
    __shared__ tf_u32 tile[VEC_ROWS * VEC_WORDS];
    const tf_u8* in = reinterpret_cast<const tf_u8*>(in_t);
    tf_u8* out = reinterpret_cast<tf_u8*>(out_t);
    tf_i64 tile_m, tile_n;
    tile_of_block(grid_n, tile_m, tile_n);
    const tf_i64 row0 = tile_m * VEC_ROWS;
    const tf_i64 col0 = tile_n * COLS;
    const int tid = threadIdx.x;
    const tf_i64 valid_cols = N - col0 < COLS ? N - col0 : COLS;
    vec_load<ES>(tile, row0, M, valid_cols * ES, [&](tf_i64 grow) {
        return reinterpret_cast<tf_u64>(in) + static_cast<tf_u64>((grow * sxm + col0) * ES);
    });
    __syncthreads();

    constexpr int R = 16 / ES;                      // tile rows in one output piece
    constexpr int OUTS = 4 / ES;                    // output rows one word column holds
    constexpr int ITEMS = VEC_WORDS * (VEC_ROWS / R);
#pragma unroll
    for (int it = 0; it < ITEMS / 256; ++it) {
        const int g = (tid & 7) + 8 * it;
        const int cw = tid >> 3;
        uint4 o[OUTS];
        vec_pieces<ES>(tile, g, cw, o);
        const tf_i64 first = row0 + static_cast<tf_i64>(g) * R;  // first input row of the piece
#pragma unroll
        for (int j = 0; j < OUTS; ++j) {
            const tf_i64 col = col0 + cw * OUTS + j;  // input column: output row
            if (col >= N || first >= M) continue;
            tf_u8* dst = out + (col * M + first) * ES;
            if (first + R <= M) {
                *reinterpret_cast<uint4*>(dst) = o[j];
            } else {  // the last rows: byte by byte, out of the words by shifts (no local array)
                for (int t = 0; t < static_cast<int>((M - first) * ES); ++t) {
                    dst[t] = static_cast<tf_u8>(word_of(o[j], t >> 2) >> ((t & 3) * 8));
                }
            }
        }
    }
}

}  // namespace tileflip

#define TILEFLIP_ARGS(T) \
    const T* __restrict__ in, T* __restrict__ out, tf_i64 M, tf_i64 N, tf_i64 sxm, tf_i64 sxn, tf_i64 grid_n

#define TILEFLIP_INSTANTIATE(T, BITS)                                                                         \
    extern "C" __global__ void __launch_bounds__(256) transpose_naive_u##BITS(TILEFLIP_ARGS(T)) {            \
        tileflip::transpose_naive<T>(in, out, M, N, sxm, sxn, grid_n);                                       \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(256) transpose_tiled_u##BITS(TILEFLIP_ARGS(T)) {            \
        tileflip::transpose_tiled<T, 1>(in, out, M, N, sxm, sxn, grid_n);                                    \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(256) transpose_tiled_nopad_u##BITS(TILEFLIP_ARGS(T)) {      \
        tileflip::transpose_tiled<T, 0>(in, out, M, N, sxm, sxn, grid_n);                                    \
    }

// vec exists for 1- and 2-byte elements only.
extern "C" __global__ void __launch_bounds__(256) transpose_vec_u8(TILEFLIP_ARGS(tf_u8)) {
    tileflip::transpose_vec<tf_u8>(in, out, M, N, sxm, grid_n);
}
extern "C" __global__ void __launch_bounds__(256) transpose_vec_u16(TILEFLIP_ARGS(tf_u16)) {
    tileflip::transpose_vec<tf_u16>(in, out, M, N, sxm, grid_n);
}

TILEFLIP_INSTANTIATE(tf_u8, 8)
TILEFLIP_INSTANTIATE(tf_u16, 16)
TILEFLIP_INSTANTIATE(tf_u32, 32)
TILEFLIP_INSTANTIATE(tf_u64, 64)
