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
// Why: the Triton tile kernel stores such rows one byte per lane (its vectors need aligned addresses), so
// each thread moves a byte per store and a warp's 32 bytes straddle two 32-byte sectors wherever a row
// starts off a boundary (int8 (11,39,29,21,42,24) (5,4,2,3,1,0): 11.3 M sectors written for 7.7 M of
// output). Here a block moves a tile of TA = 64 columns (a) x STEP + HALO = 288 rows (b). A
// thread loads one 16-byte piece of 4 consecutive input rows, turns each 4 x 4 block of bytes around
// with byte permutations and writes the words into shared memory, where the tile is held transposed,
// one row of words per output row. Output row a's piece in the block of B tile tb covers b in
// [tb * STEP - m_a, tb * STEP - m_a + STEP), m_a the misalignment of the row's start mod 32 (STEP is a
// multiple of 32, so m_a is the same in every block and the pieces tile the row; the HALO rows before
// tb * STEP hold the bytes it takes from before it): each aligned 16-byte piece is 5 words of its tile
// row funnel-shifted into place and stored whole, a warp writing whole sectors. Pieces that run past
// either end of the row are written byte by byte. Measured forms (H200): bytes gathered
// a tile row at a time from the untransposed tile (its writes 8.2 M sectors, yet 0.60-0.71 of copy
// against this form's 0.73-0.74), other tile sizes, several tiles a block with the next one's loads
// issued early, launch bounds for more blocks an SM: none faster.
//
// No header is included (NVRTC has no standard library search path).

typedef unsigned char tf_u8;
typedef unsigned int tf_u32;
typedef unsigned long long tf_u64;
typedef long long tf_i64;

namespace tileflip_realign {

constexpr int HALO = 32;               // rows loaded before the block's first b (a row's start is off by < 32)
constexpr int THREADS = 256;

struct Params {
    tf_i64 asz, bsz;                   // axis sizes
    tf_i64 tiles_a, tiles_b;           // block: A tile blockIdx % tiles_a, then B tile, then batch element
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

// One tile: TA columns (a: output rows; a TA-byte piece of each input row) x STEP + HALO rows (b), held
// transposed in shared memory, one row of words per output row.
template <int TA, int STEP>
__device__ __forceinline__ void permute_realign(const tf_u8* __restrict__ in, tf_u8* __restrict__ out,
                                                      const Params& p) {
    constexpr int ROWS = STEP + HALO;
    constexpr int WORDS = ROWS / 4 + 1;  // words per tile row (output row a): odd, so rows spread over banks
    constexpr int CHUNKS = TA / 16;
    constexpr int UNITS = ROWS / 4 * CHUNKS;  // (4 input rows, one 16-byte piece)
    __shared__ tf_u32 tile[TA * WORDS];
    __shared__ tf_i64 row_in[ROWS];
    __shared__ tf_i64 row_out[TA];
    const int tid = threadIdx.x;
    const tf_i64 bid = blockIdx.x;
    const tf_i64 ta = bid % p.tiles_a;
    const tf_i64 rest = bid / p.tiles_a;
    const tf_i64 a0 = ta * TA;
    const tf_i64 b0 = (rest % p.tiles_b) * STEP;
    const int valid_a = static_cast<int>(p.asz - a0 < TA ? p.asz - a0 : TA);
    tf_i64 in_n, out_n;
    batch_offsets(p, rest / p.tiles_b, in_n, out_n);
    for (int r = tid; r < ROWS; r += THREADS) {
        const tf_i64 b = b0 - HALO + r;
        row_in[r] = b >= 0 && b < p.bsz ? in_n + decode(static_cast<unsigned>(b), p.nb, p.b_sizes, p.b_in) + a0 : -1;
    }
    if (tid < valid_a) row_out[tid] = out_n + decode(static_cast<unsigned>(a0 + tid), p.na, p.a_sizes, p.a_out);
    __syncthreads();
    // Load: a thread reads one 16-byte piece of 4 consecutive rows (4 lanes a row, 8 row groups a warp);
    // a 16-byte word that holds any byte of a piece is read whole (aligned: it lies in the tensor's
    // allocation), and bytes past the valid columns are never written out. Every load is issued before
    // the first is used.
    constexpr int PASSES = (UNITS + THREADS - 1) / THREADS;
    uint4 v[PASSES][4];
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
        const int unit = tid + THREADS * i;
        const int g = unit / CHUNKS;  // rows 4g .. 4g + 3
        const int k = unit % CHUNKS;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            v[i][e] = make_uint4(0, 0, 0, 0);
            if (unit < UNITS && row_in[4 * g + e] >= 0 && 16 * k < valid_a) {
                v[i][e] = *reinterpret_cast<const uint4*>(in + row_in[4 * g + e] + 16 * k);
            }
        }
    }
    // Each 4 x 4 block of bytes (4 rows' word w) turned around with byte permutations: word e of the
    // result holds column 16k + 4w + e of the 4 rows, written to that output row's words at the rows' place.
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
        const int unit = tid + THREADS * i;
        if (unit >= UNITS) continue;
        const int g = unit / CHUNKS;
        const int k = unit % CHUNKS;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const tf_u32 x0 = w == 0 ? v[i][0].x : w == 1 ? v[i][0].y : w == 2 ? v[i][0].z : v[i][0].w;
            const tf_u32 x1 = w == 0 ? v[i][1].x : w == 1 ? v[i][1].y : w == 2 ? v[i][1].z : v[i][1].w;
            const tf_u32 x2 = w == 0 ? v[i][2].x : w == 1 ? v[i][2].y : w == 2 ? v[i][2].z : v[i][2].w;
            const tf_u32 x3 = w == 0 ? v[i][3].x : w == 1 ? v[i][3].y : w == 2 ? v[i][3].z : v[i][3].w;
            const tf_u32 t0 = __byte_perm(x0, x1, 0x5140);  // bytes 0, 1 of rows 0, 1
            const tf_u32 t1 = __byte_perm(x0, x1, 0x7362);  // bytes 2, 3 of rows 0, 1
            const tf_u32 t2 = __byte_perm(x2, x3, 0x5140);
            const tf_u32 t3 = __byte_perm(x2, x3, 0x7362);
            const int c = 16 * k + 4 * w;  // the tile rows (output rows) c .. c + 3
            tile[(c + 0) * WORDS + g] = __byte_perm(t0, t2, 0x5410);
            tile[(c + 1) * WORDS + g] = __byte_perm(t0, t2, 0x7632);
            tile[(c + 2) * WORDS + g] = __byte_perm(t1, t3, 0x5410);
            tile[(c + 3) * WORDS + g] = __byte_perm(t1, t3, 0x7632);
        }
    }
    __syncthreads();
    // Store: a warp writes one aligned 32-byte sector (two 16-byte pieces) of each of 16 output rows, each
    // piece 5 words of its tile row funnel-shifted into place.
    constexpr int PIECES = TA * (STEP / 16);
#pragma unroll
    for (int it = 0; it < (PIECES + THREADS - 1) / THREADS; ++it) {
        const int item = tid + THREADS * it;
        const int a = (item >> 1) % TA;
        const int j = (item & 1) | ((item / (2 * TA)) << 1);
        if (item >= PIECES || a >= valid_a) continue;
        const tf_i64 start = row_out[a];
        const int m = static_cast<int>((reinterpret_cast<tf_u64>(out) + static_cast<tf_u64>(start)) & 31);
        const tf_i64 first = b0 - m + 16 * j;
        const int r0 = HALO - m + 16 * j;  // the piece's first byte in tile row a
        const tf_u32* row = tile + a * WORDS + (r0 >> 2);
        const tf_u32 sh = static_cast<tf_u32>(r0 & 3) * 8;
        const tf_u32 w0 = row[0], w1 = row[1], w2 = row[2], w3 = row[3], w4 = row[4];
        const uint4 o = make_uint4(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh), __funnelshift_r(w2, w3, sh),
                                   __funnelshift_r(w3, w4, sh));
        tf_u8* dst = out + (start - m + b0 + 16 * j);
        if (first >= 0 && first + 16 <= p.bsz) {
            *reinterpret_cast<uint4*>(dst) = o;
        } else {
            const tf_u32 ow[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
            for (int s = 0; s < 16; ++s) {
                if (first + s >= 0 && first + s < p.bsz) dst[s] = static_cast<tf_u8>(ow[s >> 2] >> (8 * (s & 3)));
            }
        }
    }
}

}  // namespace tileflip_realign

extern "C" __global__ void __launch_bounds__(256)
    permute_realign_u8(const tf_u8* __restrict__ in, tf_u8* __restrict__ out, const tileflip_realign::Params p) {
    tileflip_realign::permute_realign<64, 256>(in, out, p);
}
