// N-D permute of 1- and 2-byte elements whose input and output rows start at any element: a transposed
// tile (axes A and B as tileflip.plan.launch.realign_axes folds them) that reads every input row as
// aligned 16-byte words and writes every output row as whole 32-byte sectors from a 32-byte boundary.
//
// The problem, as the planner folds it, in elements of E bytes: output row a (a in [0, asz), one per index
// of axis A) is a run of bsz contiguous elements at out + out_row(a) + out_n; element (a, b) comes from
// in + a + in_b(b) + in_n. The kernel scales each offset by E.
// Axis A is one contiguous run of the input, B one contiguous run of the output, and the batch n decodes
// over up to 6 dimensions. out_row and in_b decode the axis's linear index over up to 4 dimensions
// (innermost first); indices fit 32 bits (the caller checks), offsets are 64-bit.
//
// Why: the Triton tile kernel moves such rows one element per lane (its vectors need aligned addresses),
// so a warp's accesses cost an instruction per 32 or 64 bytes and straddle sectors wherever a row starts
// off a boundary. Here a block moves a tile of 64 bytes of each input row (TA = 64 / E columns a) x STEP +
// HALO = 288 rows (b). A thread reads one 16-byte piece of 4 consecutive input rows (each piece from the
// one or two aligned 16-byte words that hold it, shifted into place), turns each 4 x 4 block of bytes
// (2 x 2 of halves for 2-byte elements) around with byte permutations and writes the words into shared
// memory, where the tile is held transposed, one row of words per output row. Output row a's piece in
// the block of B tile tb covers the row's bytes from E * tb * STEP - m_a on, E * STEP of them, m_a the
// misalignment of that place mod 32 (E * STEP is a multiple of 32, so m_a is the same in every block and
// the pieces tile the row; the HALO rows before tb * STEP hold the bytes it takes from before it): each
// aligned 16-byte piece is 5 words of its tile row funnel-shifted into place and stored whole, a warp
// writing whole sectors. Pieces that run past either end of the row are written element by element. Forms
// measured and rejected: docs/design.md (Designs measured and rejected).
//
// No header is included (NVRTC has no standard library search path).

typedef unsigned char tf_u8;
typedef unsigned short tf_u16;
typedef unsigned int tf_u32;
typedef unsigned long long tf_u64;
typedef long long tf_i64;

namespace tileflip_realign {

constexpr int HALO = 32;               // rows loaded before the block's first b (a row's start is off by < 32 bytes)
constexpr int THREADS = 288;  // one 16-byte piece of 4 rows each: (STEP + HALO) / 4 row groups x TA / 16

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

// Bytes off .. off + 15 of the 32 bytes lo, hi (little-endian: byte 0 is lo.x's lowest).
__device__ __forceinline__ uint4 shifted(const uint4 lo, const uint4 hi, const int off) {
    tf_u32 w0 = lo.x, w1 = lo.y, w2 = lo.z, w3 = lo.w, w4 = hi.x, w5 = hi.y, w6 = hi.z, w7 = hi.w;
    if (off & 8) {
        w0 = w2; w1 = w3; w2 = w4; w3 = w5; w4 = w6; w5 = w7;
    }
    if (off & 4) {
        w0 = w1; w1 = w2; w2 = w3; w3 = w4; w4 = w5;
    }
    const tf_u32 sh = static_cast<tf_u32>(off & 3) * 8;
    return make_uint4(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh), __funnelshift_r(w2, w3, sh),
                      __funnelshift_r(w3, w4, sh));
}

// One tile: TA columns (a: output rows; TA elements of E bytes of each input row) x STEP + HALO rows (b),
// held transposed in shared memory, one row of words per output row.
template <int E, int TA, int STEP, bool ALIGNED>
__device__ __forceinline__ void permute_realign(const tf_u8* __restrict__ in, tf_u8* __restrict__ out,
                                                      const Params& p) {
    constexpr int ROWS = STEP + HALO;
    constexpr int WORDS = E * ROWS / 4 + 1;  // words per tile row (output row a): odd, so rows spread over banks
    constexpr int CHUNKS = E * TA / 16;
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
        row_in[r] = b >= 0 && b < p.bsz ? E * (in_n + decode(static_cast<unsigned>(b), p.nb, p.b_sizes, p.b_in) + a0) : -1;
    }
    if (tid < valid_a) row_out[tid] = E * (out_n + decode(static_cast<unsigned>(a0 + tid), p.na, p.a_sizes, p.a_out));
    __syncthreads();
    // Load: a thread reads one 16-byte piece of 4 consecutive rows (4 lanes a row, 8 row groups a warp):
    // the aligned 16-byte word that holds its first byte, shifted into place with the next word where the
    // rows start off a 16-byte boundary. A word that holds any valid byte of a row is read whole (aligned,
    // it lies in the same page), and bytes past the valid columns are never written out. Every load is
    // issued before the first is used.
    constexpr int PASSES = (UNITS + THREADS - 1) / THREADS;
    // Unaligned: a row's pieces share one misalignment, so the word after a thread's first one is the next
    // lane's first (the 4 lanes of a row hold its pieces in order); only the row's last piece loads it.
    uint4 v[PASSES][4];
    uint4 hi[PASSES][4];
    int off[PASSES][4];
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
        const int unit = tid + THREADS * i;
        const int g = unit / CHUNKS;  // rows 4g .. 4g + 3
        const int k = unit % CHUNKS;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            v[i][e] = make_uint4(0, 0, 0, 0);
            hi[i][e] = make_uint4(0, 0, 0, 0);
            off[i][e] = 0;
            if (unit < UNITS && row_in[4 * g + e] >= 0) {
                const tf_u64 at = reinterpret_cast<tf_u64>(in + row_in[4 * g + e] + 16 * k);
                if (ALIGNED) {  // every piece starts on a 16-byte boundary (the caller checks)
                    if (16 * k < E * valid_a) v[i][e] = *reinterpret_cast<const uint4*>(at);
                } else {
                    const int o = static_cast<int>(at & 15);
                    const uint4* word = reinterpret_cast<const uint4*>(at - o);
                    if (16 * k - o < E * valid_a) v[i][e] = word[0];  // the word holds a valid byte
                    if (k == CHUNKS - 1 && 16 * k + 16 - o < E * valid_a) hi[i][e] = word[1];
                    off[i][e] = o;
                }
            }
        }
    }
    if (!ALIGNED) {
        const bool last = tid % CHUNKS == CHUNKS - 1;  // (THREADS is a multiple of CHUNKS)
#pragma unroll
        for (int i = 0; i < PASSES; ++i) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                uint4 next;
                next.x = __shfl_down_sync(0xffffffffu, v[i][e].x, 1);
                next.y = __shfl_down_sync(0xffffffffu, v[i][e].y, 1);
                next.z = __shfl_down_sync(0xffffffffu, v[i][e].z, 1);
                next.w = __shfl_down_sync(0xffffffffu, v[i][e].w, 1);
                v[i][e] = shifted(v[i][e], last ? hi[i][e] : next, off[i][e]);
            }
        }
    }
    // Each 4 x 4 block of bytes (4 rows' word w) turned around with byte permutations: word e of the
    // result holds column 16k + 4w + e of the 4 rows, written to that output row's words at the rows' place.
    // 2-byte elements: each row's word w holds columns 8k + 2w and 8k + 2w + 1, and a column's word g of
    // the tile row takes rows 2g, 2g + 1 (two words per group of 4 rows).
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
            if (E == 1) {
                const tf_u32 t0 = __byte_perm(x0, x1, 0x5140);  // bytes 0, 1 of rows 0, 1
                const tf_u32 t1 = __byte_perm(x0, x1, 0x7362);  // bytes 2, 3 of rows 0, 1
                const tf_u32 t2 = __byte_perm(x2, x3, 0x5140);
                const tf_u32 t3 = __byte_perm(x2, x3, 0x7362);
                const int c = 16 * k + 4 * w;  // the tile rows (output rows) c .. c + 3
                tile[(c + 0) * WORDS + g] = __byte_perm(t0, t2, 0x5410);
                tile[(c + 1) * WORDS + g] = __byte_perm(t0, t2, 0x7632);
                tile[(c + 2) * WORDS + g] = __byte_perm(t1, t3, 0x5410);
                tile[(c + 3) * WORDS + g] = __byte_perm(t1, t3, 0x7632);
            } else {
                const int c = 8 * k + 2 * w;  // the tile rows c, c + 1
                tile[c * WORDS + 2 * g] = __byte_perm(x0, x1, 0x5410);  // low halves of rows 0, 1
                tile[c * WORDS + 2 * g + 1] = __byte_perm(x2, x3, 0x5410);
                tile[(c + 1) * WORDS + 2 * g] = __byte_perm(x0, x1, 0x7632);  // high halves
                tile[(c + 1) * WORDS + 2 * g + 1] = __byte_perm(x2, x3, 0x7632);
            }
        }
    }
    __syncthreads();
    // Store: a warp writes one aligned 32-byte sector (two 16-byte pieces) of each of 16 output rows, each
    // piece 5 words of its tile row funnel-shifted into place. Places in a row count bytes here.
    constexpr int PIECES = TA * (E * STEP / 16);
#pragma unroll
    for (int it = 0; it < (PIECES + THREADS - 1) / THREADS; ++it) {
        const int item = tid + THREADS * it;
        const int a = (item >> 1) % TA;
        const int j = (item & 1) | ((item / (2 * TA)) << 1);
        if (item >= PIECES || a >= valid_a) continue;
        const tf_i64 start = row_out[a];
        const int m = static_cast<int>((reinterpret_cast<tf_u64>(out) + static_cast<tf_u64>(start)) & 31);
        const tf_i64 first = E * b0 - m + 16 * j;
        const int r0 = E * HALO - m + 16 * j;  // the piece's first byte in tile row a
        const tf_u32* row = tile + a * WORDS + (r0 >> 2);
        const tf_u32 sh = static_cast<tf_u32>(r0 & 3) * 8;
        const tf_u32 w0 = row[0], w1 = row[1], w2 = row[2], w3 = row[3], w4 = row[4];
        const uint4 o = make_uint4(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh), __funnelshift_r(w2, w3, sh),
                                   __funnelshift_r(w3, w4, sh));
        tf_u8* dst = out + (start - m + E * b0 + 16 * j);
        if (first >= 0 && first + 16 <= E * p.bsz) {
            *reinterpret_cast<uint4*>(dst) = o;
        } else {
            const tf_u32 ow[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
            for (int s = 0; s < 16; s += E) {
                if (first + s < 0 || first + s >= E * p.bsz) continue;
                const tf_u32 v = ow[s >> 2] >> (8 * (s & 3));
                if (E == 1) dst[s] = static_cast<tf_u8>(v);
                else *reinterpret_cast<tf_u16*>(dst + s) = static_cast<tf_u16>(v);
            }
        }
    }
}

}  // namespace tileflip_realign

// One kernel per element size, each in two forms: rows at any element, and every input piece on a
// 16-byte boundary (one load a piece, nothing to shift). A block moves 64 bytes of each of 288 input rows.
#define TILEFLIP_REALIGN_KERNEL(NAME, E, ALIGNED)                                                          \
    extern "C" __global__ void __launch_bounds__(288)                                                    \
        NAME(const tf_u8* __restrict__ in, tf_u8* __restrict__ out, const tileflip_realign::Params p) { \
        tileflip_realign::permute_realign<E, 64 / E, 256, ALIGNED>(in, out, p);                        \
    }

TILEFLIP_REALIGN_KERNEL(permute_realign_u8, 1, false)
TILEFLIP_REALIGN_KERNEL(permute_realign_u8_aligned, 1, true)
TILEFLIP_REALIGN_KERNEL(permute_realign_u16, 2, false)
TILEFLIP_REALIGN_KERNEL(permute_realign_u16_aligned, 2, true)
