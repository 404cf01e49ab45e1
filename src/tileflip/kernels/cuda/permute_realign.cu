// N-D permute of 1-byte elements whose output rows start at any byte: a transposed tile (tileflip's tile
// kernel's axes A and B, tileflip.tuning.realign_launch) that writes every output row as whole 32-byte
// sectors from a 32-byte boundary.
//
// The problem, as the planner folds it: output row a (a in [0, asz), one per index of axis A) is a run of
// bsz contiguous bytes at out + out_row(a) + out_n; element (a, b) comes from in + a + in_b(b) + in_n.
// Axis A is one contiguous run of the input (every piece a tile reads is 16-byte aligned: a0, in_b(b) and
// in_n are multiples of 16, the caller checks), B one contiguous run of the output, and the batch n
// decodes over up to 6 dimensions. out_row and in_b decode the axis's linear index over up to 4
// dimensions (innermost first); indices fit 32 bits (the caller checks), offsets are 64-bit.
//
// Why: the Triton tile kernel stores such rows one byte per lane (its vectors need aligned addresses),
// so a warp's 32 bytes straddle two sectors of the L2 wherever the row starts off a boundary, and the
// L2's write requests, not DRAM, set the pace of those launches (Nsight Compute: ~15.5 us per million
// sectors written, the copy's rate; session 16). Here a block loads a tile of TA columns (a) x (STEP +
// HALO) rows (b) with 16-byte loads into shared memory as it lies in the input, then each thread
// gathers the 16 bytes of one aligned 16-byte piece of an output row from 16 tile rows (one byte each),
// packs them, and stores them with one 16-byte store. Output row a's piece in the block of B tile tb
// covers b in [tb * STEP - m_a, tb * STEP - m_a + STEP), m_a = the misalignment of the row's start
// mod 32 (STEP is a multiple of 32, so m_a is the same in every block and the pieces tile the row);
// the HALO rows before tb * STEP hold the bytes the pieces take from before it. Pieces that run past
// either end of the row are written byte by byte.
//
// No header is included (NVRTC has no standard library search path).

typedef unsigned char tf_u8;
typedef unsigned int tf_u32;
typedef unsigned long long tf_u64;
typedef long long tf_i64;

namespace tileflip_realign {

constexpr int TA = 64;                 // tile columns: output rows, a 64-byte piece of each input row
constexpr int STEP = 256;              // bytes of each output row a block writes
constexpr int HALO = 32;               // rows loaded before the block's first b (a row's start is off by < 32)
constexpr int ROWS = STEP + HALO;      // tile rows: input rows (b)
constexpr int PITCH = 68;              // bytes per tile row: 17 words, so that a column's bytes spread over banks
constexpr int THREADS = 256;

struct Params {
    tf_i64 asz, bsz;                   // axis sizes
    tf_i64 tiles_a, tiles_b, batch;    // tile t: A tile t % tiles_a, then B tile, then batch element
    tf_i64 tiles_per_block;
    int na, nb, nn, pad;               // dimensions in each decode
    tf_i64 a_sizes[4], a_out[4];       // out_row: output strides of A's dimensions
    tf_i64 b_sizes[4], b_in[4];        // in_b: input strides of B's dimensions
    tf_i64 n_sizes[6], n_in[6], n_out[6];
};

// The offset of linear index i over n dimensions (innermost first; the outermost takes no %).
__device__ __forceinline__ tf_i64 decode(unsigned i, int n, const tf_i64* sizes, const tf_i64* strides) {
    tf_i64 off = 0;
    for (int d = 0; d < n - 1; ++d) {
        const unsigned s = static_cast<unsigned>(sizes[d]);
        const unsigned q = i / s;
        off += static_cast<tf_i64>(i - q * s) * strides[d];
        i = q;
    }
    return off + static_cast<tf_i64>(i) * strides[n - 1];
}

__device__ __forceinline__ void batch_offsets(const Params& p, tf_i64 n, tf_i64& in_n, tf_i64& out_n) {
    in_n = 0;
    out_n = 0;
    for (int d = 0; d < p.nn; ++d) {
        const tf_i64 s = p.n_sizes[d];
        const tf_i64 q = d < p.nn - 1 ? n / s : 0;
        const tf_i64 r = d < p.nn - 1 ? n - q * s : n;
        in_n += r * p.n_in[d];
        out_n += r * p.n_out[d];
        n = q;
    }
}

// Four bytes (the low byte of each) as one word, first in the lowest byte.
__device__ __forceinline__ tf_u32 pack4(tf_u32 x0, tf_u32 x1, tf_u32 x2, tf_u32 x3) {
    return __byte_perm(__byte_perm(x0, x1, 0x0040), __byte_perm(x2, x3, 0x0040), 0x5410);
}

struct Tile {
    tf_i64 a0, b0, in_n, out_n;
    int valid_a;
};

__device__ __forceinline__ Tile tile_at(const Params& p, tf_i64 t) {
    Tile q;
    const tf_i64 ta = t % p.tiles_a;
    const tf_i64 rest = t / p.tiles_a;
    q.a0 = ta * TA;
    q.b0 = (rest % p.tiles_b) * STEP;
    q.valid_a = static_cast<int>(p.asz - q.a0 < TA ? p.asz - q.a0 : TA);
    batch_offsets(p, rest / p.tiles_b, q.in_n, q.out_n);
    return q;
}

// The tile's row tables: each input row's offset (-1 outside [0, bsz)) and each output row's.
__device__ __forceinline__ void tables(const Params& p, const Tile& q, tf_i64* row_in, tf_i64* row_out) {
    for (int r = threadIdx.x; r < ROWS; r += THREADS) {
        const tf_i64 b = q.b0 - HALO + r;
        row_in[r] = b >= 0 && b < p.bsz ? q.in_n + decode(static_cast<unsigned>(b), p.nb, p.b_sizes, p.b_in) + q.a0 : -1;
    }
    if (threadIdx.x < q.valid_a) {
        row_out[threadIdx.x] = q.out_n + decode(static_cast<unsigned>(q.a0 + threadIdx.x), p.na, p.a_sizes, p.a_out);
    }
}

constexpr int LOADS = (ROWS * 4 + THREADS - 1) / THREADS;  // 16-byte loads a thread makes per tile

// Load: 4 lanes a row (16 bytes each, a 64-byte piece), 8 rows a warp; a 16-byte word that holds any byte
// of the piece is read whole (aligned: it lies in the tensor's allocation); bytes past the piece's valid
// columns are never written out.
__device__ __forceinline__ void load_tile(const tf_u8* __restrict__ in, const Tile& q, const tf_i64* row_in,
                                          uint4 (&v)[LOADS]) {
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
        const int item = threadIdx.x + THREADS * i;
        const int r = item >> 2;
        const int k = item & 3;
        if (item < ROWS * 4) {
            const tf_i64 src = row_in[r];
            if (src >= 0 && 16 * k < q.valid_a) v[i] = *reinterpret_cast<const uint4*>(in + src + 16 * k);
        }
    }
}

__device__ __forceinline__ void place_tile(tf_u8* tile, const uint4 (&v)[LOADS]) {
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
        const int item = threadIdx.x + THREADS * i;
        if (item < ROWS * 4) {
            tf_u32* dst = reinterpret_cast<tf_u32*>(tile + (item >> 2) * PITCH + 16 * (item & 3));
            dst[0] = v[i].x;
            dst[1] = v[i].y;
            dst[2] = v[i].z;
            dst[3] = v[i].w;
        }
    }
}

// Store: a warp writes one aligned 32-byte sector (two 16-byte pieces) of each of 16 output rows.
__device__ __forceinline__ void store_tile(tf_u8* __restrict__ out, const Params& p, const Tile& q, const tf_u8* tile,
                                           const tf_i64* row_out) {
#pragma unroll
    for (int it = 0; it < TA * (STEP / 16) / THREADS; ++it) {
        const int item = threadIdx.x + THREADS * it;
        const int a = (item >> 1) & (TA - 1);
        const int j = (item & 1) | ((item >> 7) << 1);  // the row's 16-byte piece, 0 .. STEP / 16 - 1
        if (a >= q.valid_a) continue;
        const tf_i64 start = row_out[a];
        const int m = static_cast<int>((reinterpret_cast<tf_u64>(out) + static_cast<tf_u64>(start)) & 31);
        const tf_i64 first = q.b0 - m + 16 * j;  // b of the piece's first byte
        const tf_u8* col = tile + (HALO - m + 16 * j) * PITCH + a;
        tf_u32 x[16];
#pragma unroll
        for (int s = 0; s < 16; ++s) x[s] = col[s * PITCH];
        tf_u8* dst = out + (start - m + q.b0 + 16 * j);
        if (first >= 0 && first + 16 <= p.bsz) {
            *reinterpret_cast<uint4*>(dst) = make_uint4(pack4(x[0], x[1], x[2], x[3]), pack4(x[4], x[5], x[6], x[7]),
                                                        pack4(x[8], x[9], x[10], x[11]), pack4(x[12], x[13], x[14], x[15]));
        } else {
#pragma unroll
            for (int s = 0; s < 16; ++s) {
                if (first + s >= 0 && first + s < p.bsz) dst[s] = static_cast<tf_u8>(x[s]);
            }
        }
    }
}

// A block moves tiles_per_block consecutive tiles (A tiles first, then B tiles, then the batch), the loads
// of the next tile issued before the current one is written out.
__device__ __forceinline__ void permute_realign_u8(const tf_u8* __restrict__ in, tf_u8* __restrict__ out,
                                                   const Params& p) {
    __shared__ __align__(16) tf_u8 tile[ROWS * PITCH];
    __shared__ tf_i64 row_in[2][ROWS];
    __shared__ tf_i64 row_out[2][TA];
    const tf_i64 total = p.tiles_a * p.tiles_b * p.batch;
    tf_i64 t = static_cast<tf_i64>(blockIdx.x) * p.tiles_per_block;
    const tf_i64 end = t + p.tiles_per_block < total ? t + p.tiles_per_block : total;
    Tile q = tile_at(p, t);
    tables(p, q, row_in[0], row_out[0]);
    __syncthreads();
    uint4 v[LOADS];
    load_tile(in, q, row_in[0], v);
    for (int buf = 0; t < end; ++t, buf ^= 1) {
        place_tile(tile, v);
        const bool more = t + 1 < end;
        Tile next;
        if (more) {
            next = tile_at(p, t + 1);
            tables(p, next, row_in[buf ^ 1], row_out[buf ^ 1]);
        }
        __syncthreads();
        if (more) load_tile(in, next, row_in[buf ^ 1], v);
        store_tile(out, p, q, tile, row_out[buf]);
        __syncthreads();
        q = next;
    }
}

}  // namespace tileflip_realign

extern "C" __global__ void __launch_bounds__(256) permute_realign_u8(const tf_u8* __restrict__ in,
                                                                    tf_u8* __restrict__ out,
                                                                    const tileflip_realign::Params p) {
    tileflip_realign::permute_realign_u8(in, out, p);
}
