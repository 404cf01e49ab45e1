// Experiment (benchmarks/unaligned_vec.py): a transpose for 1- and 2-byte elements whose input rows do
// not start on 16-byte boundaries (an odd row stride), with 16-byte accesses on both sides.
//
// The Triton kernel cannot vectorize such loads: the compiler cannot prove a row's start aligned, so a
// bf16 8192 x 8191 transpose issues 2-byte loads (85% of a copy) and an int8 one 1-byte loads (73%).
// Here each row's 128-byte piece of a tile is read as 16-byte words from the 16-byte boundary below its
// start (a word never crosses a page, and holds at least one byte of the tensor, so no load can fault),
// and the words are shifted into place in registers: each lane takes the next lane's word by a warp
// shuffle and funnel-shifts the pair by the row's misalignment. The aligned tile goes to shared memory,
// and is read back transposed as 4-byte words that a byte permutation turns into 16-byte output pieces
// (4 x 4 bytes for int8, 2 x 2 halves for bf16). Shared memory is swizzled so that the transposed read
// (8 row groups x 4 words per warp) touches 32 different banks.
//
// Tile: 128 input rows x 128 bytes; 256 threads. Preconditions (checked by the caller): unit column
// stride, out contiguous N x M with M * es and out's address multiples of 16.
//
// Measured (session 8 runs 11-12, results/experiments/h200-2026-12-01-unaligned-vec-v*.json), fraction of
// a same-run copy, this kernel / tileflip's Triton kernel: int8 8192 x 8191 0.84 / 0.72, int8 16384 x
// 16383 0.84 / 0.68, bf16 8192 x 8191 0.89 / 0.86, bf16 16384 x 16383 0.84 / 0.84, the bf16 pack of the
// distributed benchmark 0.86 / 0.85; on aligned int8 8192 x 8192 0.92 / 0.95. Issuing every pass's
// loads before the first shuffle (v2) took int8 from 0.79-0.81 to 0.84 and bf16 from 0.82-0.83 to
// 0.84-0.89. Not wired into tileflip: a load phase and a store phase per block, without overlap inside
// the block, still cap it below the Triton kernel on aligned rows.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define ROWS 128
#define ROW_BYTES 128
#define WORDS (ROW_BYTES / 4)

// Word column w of tile row r, swizzled: XOR of bits 2-4 with the row group (16 rows for int8, 8 for
// bf16), which keeps each 16-byte piece contiguous.
__device__ __forceinline__ int swz(int r, int w, int group_shift) {
    return r * WORDS + (w ^ (((r >> group_shift) & 7) << 2));
}

// ALIGNED: every row piece starts on a 16-byte boundary (the caller checked the base and the row stride),
// so no shift and no shuffle. COL_ORDER: consecutive blocks walk down a column of tiles (else along a row).
template <int ES, bool ALIGNED, bool COL_ORDER>
__device__ __forceinline__ void transpose_vec(const u8* __restrict__ in, u8* __restrict__ out, i64 M, i64 N,
                                              i64 sxm, i64 grid_m) {
    __shared__ u32 tile[ROWS * WORDS];
    constexpr int COLS = ROW_BYTES / ES;           // tile columns (output rows)
    constexpr int GROUP_SHIFT = ES == 1 ? 4 : 3;   // log2 of the rows one 16-byte output piece holds
    const i64 grid_n = (N + COLS - 1) / COLS;
    const i64 tile_m = COL_ORDER ? blockIdx.x % grid_m : blockIdx.x / grid_n;
    const i64 tile_n = COL_ORDER ? blockIdx.x / grid_m : blockIdx.x % grid_n;
    const i64 row0 = tile_m * ROWS;
    const i64 col0 = tile_n * COLS;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const i64 valid_cols = N - col0 < COLS ? N - col0 : COLS;

    // Load: 8 lanes per row, 4 rows per warp, 4 passes; every pass's loads are issued before the first
    // is used, so that each thread has 64 bytes (and the last lane of a row 128) in flight.
    const int part = lane & 7;
    uint4 w[4], e[4];
    int shift[4];
#pragma unroll
    for (int pass = 0; pass < 4; ++pass) {
        const int r = pass * 32 + (tid >> 3);
        const i64 grow = row0 + r;
        const u64 start = reinterpret_cast<u64>(in) + (u64)((grow * sxm + col0) * ES);
        const u64 base = start & ~(u64)15;
        shift[pass] = (int)(start - base);
        const u64 last = start + (u64)(valid_cols * ES) - 1;  // last byte of the row piece
        const bool row_ok = grow < M;
        const u64 mine = base + 16 * part;
        w[pass] = make_uint4(0, 0, 0, 0);
        e[pass] = make_uint4(0, 0, 0, 0);
        if (row_ok && mine <= last) w[pass] = *reinterpret_cast<const uint4*>(mine);
        if (!ALIGNED && row_ok && part == 7 && shift[pass] && base + 128 <= last) {
            e[pass] = *reinterpret_cast<const uint4*>(base + 128);
        }
    }
#pragma unroll
    for (int pass = 0; pass < 4; ++pass) {
        const int r = pass * 32 + (tid >> 3);
        if (ALIGNED) {
            *reinterpret_cast<uint4*>(&tile[swz(r, 4 * part, GROUP_SHIFT)]) = w[pass];
            continue;
        }
        uint4 n;
        n.x = __shfl_down_sync(0xffffffffu, w[pass].x, 1);
        n.y = __shfl_down_sync(0xffffffffu, w[pass].y, 1);
        n.z = __shfl_down_sync(0xffffffffu, w[pass].z, 1);
        n.w = __shfl_down_sync(0xffffffffu, w[pass].w, 1);
        if (part == 7) n = e[pass];
        const u32 u[8] = {w[pass].x, w[pass].y, w[pass].z, w[pass].w, n.x, n.y, n.z, n.w};
        const int q = shift[pass] >> 2;
        const u32 b = (u32)(shift[pass] & 3) * 8;
        u32 c[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            // u[i + q] and u[i + q + 1] with q in 0..3: selects, not a local-memory array.
            u32 lo = q == 0 ? u[i] : q == 1 ? u[i + 1] : q == 2 ? u[i + 2] : u[i + 3];
            u32 hi = q == 0 ? u[i + 1] : q == 1 ? u[i + 2] : q == 2 ? u[i + 3] : u[i + 4];
            c[i] = __funnelshift_r(lo, hi, b);
        }
        *reinterpret_cast<uint4*>(&tile[swz(r, 4 * part, GROUP_SHIFT)]) = make_uint4(c[0], c[1], c[2], c[3]);
    }
    __syncthreads();

    // Store: a thread reads one word column (4 / ES tile columns) of 16 / ES rows and writes one 16-byte
    // piece to each of those 4 / ES output rows. Per warp: 8 row groups x 4 word columns, so the 8 lanes
    // of one output row write 128 contiguous bytes.
    constexpr int R = 16 / ES;               // rows per piece
    constexpr int GROUPS = ROWS / R;         // 8 (int8) or 16 (bf16)
    constexpr int ITEMS = WORDS * GROUPS;    // 256 or 512
#pragma unroll
    for (int it = 0; it < ITEMS / 256; ++it) {
        const int g = (tid & 7) + 8 * it;
        const int cw = tid >> 3;
        u32 v[R];
#pragma unroll
        for (int k = 0; k < R; ++k) v[k] = tile[swz(g * R + k, cw, GROUP_SHIFT)];
        const i64 orow0 = row0 + (i64)g * R;   // first output column of the piece
        constexpr int OUTS = 4 / ES;
        u32 o[OUTS][4];
        if (ES == 1) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const u32 t0 = __byte_perm(v[4 * k], v[4 * k + 1], 0x5140);
                const u32 t1 = __byte_perm(v[4 * k], v[4 * k + 1], 0x7362);
                const u32 t2 = __byte_perm(v[4 * k + 2], v[4 * k + 3], 0x5140);
                const u32 t3 = __byte_perm(v[4 * k + 2], v[4 * k + 3], 0x7362);
                o[0][k] = __byte_perm(t0, t2, 0x5410);
                o[1 % OUTS][k] = __byte_perm(t0, t2, 0x7632);
                o[2 % OUTS][k] = __byte_perm(t1, t3, 0x5410);
                o[3 % OUTS][k] = __byte_perm(t1, t3, 0x7632);
            }
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                o[0][k] = __byte_perm(v[2 * k], v[2 * k + 1], 0x5410);
                o[1 % OUTS][k] = __byte_perm(v[2 * k], v[2 * k + 1], 0x7632);
            }
        }
#pragma unroll
        for (int j = 0; j < OUTS; ++j) {
            const i64 ocol = col0 + cw * OUTS + j;  // output row
            if (ocol >= N) continue;
            u8* dst = out + (ocol * M + orow0) * ES;
            if (orow0 + R <= M) {
                *reinterpret_cast<uint4*>(dst) = make_uint4(o[j][0], o[j][1], o[j][2], o[j][3]);
            } else {
                // The last rows of the tensor: byte by byte, read out of the words by shifts (taking the
                // array's address would put it in local memory for every piece).
                for (int t = 0; t < (int)((M - orow0) * ES); ++t) {
                    const u32 word = t < 4 ? o[j][0] : t < 8 ? o[j][1] : t < 12 ? o[j][2] : o[j][3];
                    dst[t] = (u8)(word >> ((t & 3) * 8));
                }
            }
        }
    }
}

#define VEC_KERNEL(NAME, ES, ALIGNED, COL_ORDER)                                                            \
    extern "C" __global__ void __launch_bounds__(256) NAME(const u8* in, u8* out, i64 M, i64 N, i64 sxm, i64 grid_m) { \
        transpose_vec<ES, ALIGNED, COL_ORDER>(in, out, M, N, sxm, grid_m);                                  \
    }

VEC_KERNEL(transpose_vec_u8, 1, false, true)
VEC_KERNEL(transpose_vec_u16, 2, false, true)
VEC_KERNEL(transpose_vec_u8_rows, 1, false, false)
VEC_KERNEL(transpose_vec_u16_rows, 2, false, false)
VEC_KERNEL(transpose_vec_u8_aligned, 1, true, true)
VEC_KERNEL(transpose_vec_u16_aligned, 2, true, true)
VEC_KERNEL(transpose_vec_u8_aligned_rows, 1, true, false)
