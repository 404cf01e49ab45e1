// Kernels that move whole aligned 16-byte words on both sides, shifted or permuted into place in registers:
// thin transposes of 1- and 2-byte elements (permute_thin_*) and their mirror, split transposes
// (permute_split_*), and the rows of permutes that keep the input's contiguous dimension innermost,
// whatever their alignments (permute_shift_rows).
//
// Thin transposes: out (batch, N, S) contiguous from input rows of N contiguous elements, one row per
// index b < S of the output's fastest dimension (S * E <= 16, compiled in).
// A warp takes 512 bytes of each of the S rows of one batch index, or, where a row is shorter, the rows of
// 32 / lanes consecutive batch indices (whose outputs are adjacent, the output being contiguous). Each lane
// loads 16 bytes of each of its S rows (aligned words shifted into place with the next lane's word), turns
// the S x 16 bytes around in registers with byte permutations whose selectors are compile-time constants,
// and stages its 16 * S output bytes in shared memory; the warp then writes its whole output range as
// aligned 16-byte words. Every access but the range's two ends is a whole 16-byte word.
typedef unsigned char tf_u8;
typedef unsigned short tf_u16;
typedef unsigned int tf_u32;
typedef unsigned long long tf_u64;
typedef long long tf_i64;

namespace tileflip_words {

constexpr int WARPS = 4;
constexpr int ROW_BYTES = 512;  // a warp's piece of a row: 16 bytes a lane

struct ThinParams {
    tf_i64 n;      // elements of each row (N)
    tf_i64 st_b;   // input stride of the output's fastest dimension (elements)
    tf_i64 batch;  // batch indices: the product of the batch dimensions' sizes (< 2**31)
    int chunks;    // pieces of ROW_BYTES a row takes
    int items;     // chunks x row groups
    int lanes;     // lanes a row takes: a power of two, 32 where a row spans more than 256 bytes
    int nn;        // batch dimensions
    tf_i64 n_sizes[6], n_in[6];  // the batch dimensions, innermost first: sizes, input strides (elements)
};

__device__ __forceinline__ uint4 shifted(const uint4 lo, const uint4 hi, const int off) {
    tf_u32 w0 = lo.x, w1 = lo.y, w2 = lo.z, w3 = lo.w, w4 = hi.x, w5 = hi.y, w6 = hi.z, w7 = hi.w;
    if (off & 8) { w0 = w2; w1 = w3; w2 = w4; w3 = w5; w4 = w6; w5 = w7; }
    if (off & 4) { w0 = w1; w1 = w2; w2 = w3; w3 = w4; w4 = w5; }
    const tf_u32 sh = static_cast<tf_u32>(off & 3) * 8;
    return make_uint4(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh), __funnelshift_r(w2, w3, sh),
                      __funnelshift_r(w3, w4, sh));
}

__device__ __forceinline__ tf_u32 word_of(const uint4 w, const int i) {
    return i == 0 ? w.x : i == 1 ? w.y : i == 2 ? w.z : w.w;
}

// Byte j (0..3) of word w of a lane's 16 * S output bytes (16 / E elements of a row, S outputs each): the
// row b it comes from and its byte in that row's 16 loaded bytes.
template <int S, int E>
__device__ __forceinline__ constexpr int src_row(const int w, const int j) { return ((4 * w + j) / E) % S; }
template <int S, int E>
__device__ __forceinline__ constexpr int src_byte(const int w, const int j) {
    return ((4 * w + j) / E) / S * E + (4 * w + j) % E;
}

template <int S, int E>
__device__ __forceinline__ tf_u32 out_word(const uint4 (&v)[S], const int w) {
    const tf_u32 x0 = word_of(v[src_row<S, E>(w, 0)], src_byte<S, E>(w, 0) >> 2);
    const tf_u32 x1 = word_of(v[src_row<S, E>(w, 1)], src_byte<S, E>(w, 1) >> 2);
    const tf_u32 x2 = word_of(v[src_row<S, E>(w, 2)], src_byte<S, E>(w, 2) >> 2);
    const tf_u32 x3 = word_of(v[src_row<S, E>(w, 3)], src_byte<S, E>(w, 3) >> 2);
    const tf_u32 lo = __byte_perm(x0, x1, (src_byte<S, E>(w, 0) & 3) | ((4 + (src_byte<S, E>(w, 1) & 3)) << 4));
    const tf_u32 hi = __byte_perm(x2, x3, (src_byte<S, E>(w, 2) & 3) | ((4 + (src_byte<S, E>(w, 3) & 3)) << 4));
    return __byte_perm(lo, hi, 0x5410);
}

// The input offset (elements) of batch index g.
__device__ __forceinline__ tf_i64 batch_offset(const tf_u32 g, const ThinParams& p) {
    tf_u32 rest = g;
    tf_i64 off = 0;
    for (int d = 0; d < p.nn - 1; ++d) {
        const tf_u32 size = static_cast<tf_u32>(p.n_sizes[d]);
        const tf_u32 q = rest / size;
        off += static_cast<tf_i64>(rest - q * size) * p.n_in[d];
        rest = q;
    }
    return p.nn > 0 ? off + static_cast<tf_i64>(rest) * p.n_in[p.nn - 1] : 0;
}

// Bytes 0 .. 15 of the staged output from byte `from` on (any alignment): five words funnel-shifted.
__device__ __forceinline__ uint4 staged_word(const tf_u8* sm, const int from) {
    const tf_u32* src = reinterpret_cast<const tf_u32*>(sm + (from & ~3));
    const tf_u32 sh = static_cast<tf_u32>(from & 3) * 8;
    const tf_u32 w0 = src[0], w1 = src[1], w2 = src[2], w3 = src[3], w4 = src[4];
    return make_uint4(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh), __funnelshift_r(w2, w3, sh),
                      __funnelshift_r(w3, w4, sh));
}

// Word i of a's first `cut` bytes followed by b's: byte j from a where j < cut - 4 i, else from b.
__device__ __forceinline__ tf_u32 merged(const tf_u32 a, const tf_u32 b, const int cut) {
    if (cut >= 4) return a;
    if (cut <= 0) return b;
    const tf_u32 low = (1u << (4 * cut)) - 1;
    return __byte_perm(a, b, (0x3210u & low) | (0x7654u & ~low));
}

// The 16 bytes of a's first `cut` bytes followed by b's.
__device__ __forceinline__ uint4 merged_words(const uint4 a, const uint4 b, const int cut) {
    return make_uint4(merged(a.x, b.x, cut), merged(a.y, b.y, cut - 4), merged(a.z, b.z, cut - 8),
                      merged(a.w, b.w, cut - 12));
}

template <int S, int E>
__device__ __forceinline__ void thin(const tf_u8* __restrict__ in, tf_u8* __restrict__ out, const ThinParams& p) {
    // 16 bytes before each warp's stage: a word whose first bytes lie before the range reads them there
    __shared__ __align__(16) tf_u8 stage[WARPS][16 + ROW_BYTES * S + 32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int L = p.lanes, G = 32 / p.lanes;
    const int gi = lane / L, k = lane % L;  // the lane's row group and its piece of the row
    tf_u8* sm = stage[warp] + 16;
    for (int item = blockIdx.x * WARPS + warp; item < p.items; item += gridDim.x * WARPS) {
        const int c = item % p.chunks;
        const tf_i64 g0 = static_cast<tf_i64>(item / p.chunks) * G;
        const bool mine = g0 + gi < p.batch;
        const tf_i64 in_n = mine ? batch_offset(static_cast<tf_u32>(g0 + gi), p) : 0;
        const tf_i64 a0 = static_cast<tf_i64>(c) * (ROW_BYTES / E);
        const int valid = static_cast<int>(E * (p.n - a0 < ROW_BYTES / E ? p.n - a0 : ROW_BYTES / E));
        const bool own = k == L - 1 || 16 * k + 16 >= valid;  // loads the word after its piece itself
        // Every load of the item is issued before any is used: one memory latency an item, not S.
        uint4 lo[S], hi[S];
        int off[S];
#pragma unroll
        for (int b = 0; b < S; ++b) {
            const tf_u64 at = reinterpret_cast<tf_u64>(in) + E * (in_n + b * p.st_b + a0);
            off[b] = static_cast<int>(at & 15);
            const uint4* word = reinterpret_cast<const uint4*>(at - off[b]) + k;
            lo[b] = mine && 16 * k - off[b] < valid ? word[0] : make_uint4(0, 0, 0, 0);
            hi[b] = mine && own && 16 * k + 16 - off[b] < valid ? word[1] : make_uint4(0, 0, 0, 0);
        }
        uint4 v[S];
#pragma unroll
        for (int b = 0; b < S; ++b) {
            uint4 next;
            next.x = __shfl_down_sync(0xffffffffu, lo[b].x, 1);
            next.y = __shfl_down_sync(0xffffffffu, lo[b].y, 1);
            next.z = __shfl_down_sync(0xffffffffu, lo[b].z, 1);
            next.w = __shfl_down_sync(0xffffffffu, lo[b].w, 1);
            v[b] = shifted(lo[b], own ? hi[b] : next, off[b]);
        }
        // The lane's output bytes at 16 * S * lane: a group's slot of 16 * S * L bytes holds its output.
        uint4* dst = reinterpret_cast<uint4*>(sm + 16 * S * lane);
#pragma unroll
        for (int q = 0; q < S; ++q) {
            dst[q] = make_uint4(out_word<S, E>(v, 4 * q), out_word<S, E>(v, 4 * q + 1), out_word<S, E>(v, 4 * q + 2),
                                out_word<S, E>(v, 4 * q + 3));
        }
        __syncwarp();
        // The groups' outputs are adjacent: one range of ng * len bytes from o0, written as the aligned
        // 16-byte words that cover it (a word takes bytes of at most two groups: len >= 16).
        const int ng = static_cast<int>(p.batch - g0 < G ? p.batch - g0 : G);
        const int len = valid * S;
        const int total = ng * len;
        const int slot = 16 * S * L;
        const tf_u64 o0 = reinterpret_cast<tf_u64>(out) + E * (g0 * p.n * S + a0 * S);
        const int m = static_cast<int>(o0 & 15);
        const int words = (m + total + 15) >> 4;
        int h = 0, end = len;  // the group of the word's first byte (0 before the range), where it ends
        for (int kk = lane; kk < words; kk += 32) {
            const int first = 16 * kk - m;  // the word's first byte as a place in the range
            while (first >= end) {
                ++h;
                end += len;
            }
            uint4 word = staged_word(sm, slot * h + first - (end - len));
            if (first + 16 > end && end < total) {  // its last bytes are the next group's first
                word = merged_words(word, staged_word(sm, slot * (h + 1) + first - end), end - first);
            }
            tf_u8* g = reinterpret_cast<tf_u8*>(o0 - m) + 16 * kk;
            if (first >= 0 && first + 16 <= total) {
                *reinterpret_cast<uint4*>(g) = word;
                continue;
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {  // the range's first or last word: its bytes in the range
                const tf_u32 x = word_of(word, i);
                const int from = first + 4 * i;
                if (from >= 0 && from + 4 <= total) {
                    *reinterpret_cast<tf_u32*>(g + 4 * i) = x;
                    continue;
                }
                for (int j = 0; j < 4; j += E) {
                    if (from + j < 0 || from + j >= total) continue;
                    if (E == 1) g[4 * i + j] = static_cast<tf_u8>(x >> (8 * j));
                    else *reinterpret_cast<tf_u16*>(g + 4 * i + j) = static_cast<tf_u16>(x >> (8 * j));
                }
            }
        }
        __syncwarp();
    }
}

// ---------------------------------------------------------------------------------------------------
// Split transposes: output rows of N contiguous elements, S of them (S * E <= 8, compiled in) from each
// input block of N x S contiguous elements, in which element n of row s lies at n * S + s (an image's
// HWC to CHW, pairs to planes). A warp takes 512 bytes of the S rows of one batch index: each lane loads
// its 16 * S contiguous input bytes as aligned words shifted into place with the next lane's, splits them
// into 16 bytes of each row with byte permutations whose selectors are compile-time constants, and the
// warp writes each row's piece as the aligned 16-byte words that cover it, each word from two lanes'
// registers; the piece's two end words, shared with other warps' pieces, go an element a lane.
// ---------------------------------------------------------------------------------------------------

struct SplitParams {
    tf_i64 n;      // elements of each output row (N)
    tf_i64 st_s;   // output stride of the S dimension (elements)
    int chunks;    // pieces of ROW_BYTES a row takes
    int items;     // chunks x batch indices (< 2**30)
    int nn;        // batch dimensions
    int pad;
    tf_i64 n_sizes[6], n_in[6], n_out[6];  // the batch dimensions, innermost first: sizes, input and output strides
};

// Byte j (0..3) of word w of a lane's 16 bytes of row b: its byte in the lane's 16 * S input bytes.
__device__ __forceinline__ constexpr int split_src(const int S, const int E, const int b, const int w, const int j) {
    return ((4 * w + j) / E * S + b) * E + (4 * w + j) % E;
}

template <int S, int E>
__device__ __forceinline__ tf_u32 split_word(const uint4 (&v)[S], const int b, const int w) {
    const int s0 = split_src(S, E, b, w, 0);
    const int s1 = split_src(S, E, b, w, 1);
    const int s2 = split_src(S, E, b, w, 2);
    const int s3 = split_src(S, E, b, w, 3);
    const tf_u32 x0 = word_of(v[s0 >> 4], (s0 & 15) >> 2), x1 = word_of(v[s1 >> 4], (s1 & 15) >> 2);
    const tf_u32 x2 = word_of(v[s2 >> 4], (s2 & 15) >> 2), x3 = word_of(v[s3 >> 4], (s3 & 15) >> 2);
    const tf_u32 lo = __byte_perm(x0, x1, (s0 & 3) | ((4 + (s1 & 3)) << 4));
    const tf_u32 hi = __byte_perm(x2, x3, (s2 & 3) | ((4 + (s3 & 3)) << 4));
    return __byte_perm(lo, hi, 0x5410);
}

// The input and output offsets (elements) of batch index g.
struct SplitAt {
    tf_i64 src, dst;
};

__device__ __forceinline__ SplitAt split_offsets(const tf_u32 g, const SplitParams& p) {
    tf_u32 rest = g;
    tf_i64 src = 0, dst = 0;
    for (int d = 0; d < p.nn; ++d) {
        const tf_u32 size = static_cast<tf_u32>(p.n_sizes[d]);
        const tf_u32 q = d == p.nn - 1 ? 0 : rest / size;
        src += static_cast<tf_i64>(rest - q * size) * p.n_in[d];
        dst += static_cast<tf_i64>(rest - q * size) * p.n_out[d];
        rest = q;
    }
    return SplitAt{src, dst};
}

// Whether aligned word w of a range of nbytes bytes starting `off` bytes into its first word holds any.
__device__ __forceinline__ bool split_holds(const int w, const int off, const int nbytes) { return 16 * w - off < nbytes; }

// Aligned output word `lane` of a row's piece that starts m bytes into its first word: the lane's own 16
// bytes where m is 0, else the last m bytes of the previous lane's and the first 16 - m of its own.
__device__ __forceinline__ uint4 split_aligned(const uint4 prev, const uint4 r, const int m) {
    return m ? shifted(prev, r, 16 - m) : r;
}

// The ragged end words of a piece of `valid` bytes starting m bytes into its first word: the first word
// where m > 0, the last where the piece ends inside it (one word where both are the same). Lanes 0-15
// take the bytes of the first, lanes 16-31 those of the last: the byte's place in the piece, or -1 where
// the lane stores nothing (its byte outside the piece, or not an element's first byte).
__device__ __forceinline__ int split_ragged(const int lane, const int m, const int valid, const int E) {
    const int last = (m + valid - 1) >> 4;
    const int k = lane < 16 ? 0 : last;
    const int pos = 16 * k - m + (lane & 15);
    const bool ragged = lane < 16 ? m != 0 : ((m + valid) & 15) != 0 && (last > 0 || m == 0);
    const bool mine = ragged && pos >= 0 && pos < valid && pos % E == 0;
    return mine ? pos : -1;
}

// Bytes pos & 3 .. 3 of the word of `held` (a lane's 16 bytes) that holds the piece's byte pos.
__device__ __forceinline__ tf_u32 split_byte(const uint4 held, const int pos) {
    return word_of(held, (pos & 15) >> 2) >> (8 * (pos & 3));
}

template <int S, int E>
__device__ __forceinline__ void split(const tf_u8* __restrict__ in, tf_u8* __restrict__ out, const SplitParams& p) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    for (int item = blockIdx.x * WARPS + warp; item < p.items; item += gridDim.x * WARPS) {
        const int c = item % p.chunks;
        const SplitAt g = split_offsets(static_cast<tf_u32>(item / p.chunks), p);
        const tf_i64 a0 = static_cast<tf_i64>(c) * (ROW_BYTES / E);
        const int valid = static_cast<int>(E * (p.n - a0 < ROW_BYTES / E ? p.n - a0 : ROW_BYTES / E));
        // The lane's input bytes 16 S lane .. 16 S (lane + 1) of the item's valid * S: word j of them is
        // the aligned word j of its range, shifted by the range's phase with the word after it.
        const tf_u64 at = reinterpret_cast<tf_u64>(in) + E * (g.src + a0 * S);
        const int off = static_cast<int>(at & 15);
        const uint4* base = reinterpret_cast<const uint4*>(at - off) + S * lane;
        uint4 lo[S];
#pragma unroll
        for (int j = 0; j < S; ++j) lo[j] = split_holds(S * lane + j, off, valid * S) ? base[j] : make_uint4(0, 0, 0, 0);
        const bool tail = lane == 31 && off != 0 && split_holds(S * lane + S, off, valid * S);
        const uint4 after = tail ? base[S] : make_uint4(0, 0, 0, 0);
        uint4 first;  // the next lane's first word
        first.x = __shfl_down_sync(0xffffffffu, lo[0].x, 1);
        first.y = __shfl_down_sync(0xffffffffu, lo[0].y, 1);
        first.z = __shfl_down_sync(0xffffffffu, lo[0].z, 1);
        first.w = __shfl_down_sync(0xffffffffu, lo[0].w, 1);
        uint4 v[S];
#pragma unroll
        for (int j = 0; j < S; ++j) {
            const uint4 next = j + 1 < S ? lo[j + 1 < S ? j + 1 : 0] : (lane == 31 ? after : first);
            v[j] = off ? shifted(lo[j], next, off) : lo[j];
        }
#pragma unroll
        for (int b = 0; b < S; ++b) {
            // The lane's bytes 16 lane .. 16 lane + 15 of row b's piece; aligned word k of the piece's
            // output covers its bytes 16 k - m .. 16 k - m + 15.
            const uint4 r = make_uint4(split_word<S, E>(v, b, 0), split_word<S, E>(v, b, 1), split_word<S, E>(v, b, 2),
                                       split_word<S, E>(v, b, 3));
            const tf_u64 o = reinterpret_cast<tf_u64>(out) + E * (g.dst + b * p.st_s + a0);
            const int m = static_cast<int>(o & 15);
            tf_u8* const aligned = reinterpret_cast<tf_u8*>(o - m);
            uint4 prev;
            prev.x = __shfl_up_sync(0xffffffffu, r.x, 1);
            prev.y = __shfl_up_sync(0xffffffffu, r.y, 1);
            prev.z = __shfl_up_sync(0xffffffffu, r.z, 1);
            prev.w = __shfl_up_sync(0xffffffffu, r.w, 1);
            const int lead = 16 * lane - m;  // this lane's word k = lane: whole where it lies in the piece
            if (lead >= 0 && lead + 16 <= valid) *reinterpret_cast<uint4*>(aligned + 16 * lane) = split_aligned(prev, r, m);
            const int pos = split_ragged(lane, m, valid, E);
            const int src = pos < 0 ? 0 : (pos >> 4);  // the lane whose 16 bytes hold it
            uint4 held;
            held.x = __shfl_sync(0xffffffffu, r.x, src);
            held.y = __shfl_sync(0xffffffffu, r.y, src);
            held.z = __shfl_sync(0xffffffffu, r.z, src);
            held.w = __shfl_sync(0xffffffffu, r.w, src);
            if (pos >= 0) {
                const tf_u32 x = split_byte(held, pos);
                tf_u8* to = aligned + m + pos;
                if (E == 1) *to = static_cast<tf_u8>(x);
                else *reinterpret_cast<tf_u16*>(to) = static_cast<tf_u16>(x);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Realigned row copies: the output (rows x R bytes, contiguous) cut into the aligned 16-byte words that
// cover it. A lane finds where each of its words' bytes lie (a row, and the next row's first bytes where
// the word reaches past a row's end), issues the aligned loads of every word's row piece of its item, then
// funnel-shifts each word into place and stores it whole; only the range's two end words are written
// byte by byte. The copy is of bytes: any element size, rows of R >= 16 bytes (a word spans at most two
// rows).
// ---------------------------------------------------------------------------------------------------

constexpr int SHIFT_WARPS = 4;
constexpr int SHIFT_LANE_WORDS = 4;  // a lane's words an item, 32 apart: an item is 2 KiB of output
constexpr int SHIFT_OUTER_DIMS = 6;

struct ShiftParams {
    tf_i64 row;        // bytes of each row: R, 16 <= R < 2**30
    tf_i64 total;      // output bytes: rows x R (rows < 2**31)
    tf_i64 items;      // warp items of 32 x SHIFT_LANE_WORDS output words
    tf_i64 step_rows;  // the grid's stride over items, in output bytes: whole rows ...
    tf_i64 step_cols;  // ... and the bytes past them
    int nn;            // outer dimensions (1 to 6)
    int row_magic;     // c / R == umulhi(c, row_magic) >> row_shift for c < 2**31
    int row_shift;
    int magic[6], shift[6];        // the same for each outer dimension's size (each >= 2)
    tf_i64 sizes[6], strides[6];   // outer dimensions, innermost first: sizes, input strides (bytes)
};

// Where an output word's positions lo .. hi - 1 come from: position i < cut is the input byte at a + i,
// position i >= cut the one at b + i (the next row's first bytes; cut == hi where the word stays in a row).
struct Src {
    tf_u64 a, b;
    int lo, cut, hi;
};

// A lane's place in the rows: byte c (< R) of row r.
struct RowCol {
    tf_i64 r, c;
};

__device__ __forceinline__ tf_u32 quotient(const tf_u32 n, const int magic, const int shift) {
    return __umulhi(n, static_cast<tf_u32>(magic)) >> shift;
}

// The input offset (bytes) of row r (r < 2**31), over a fixed number of steps so that no loop is left
// between a word's address and its loads.
__device__ __forceinline__ tf_i64 row_offset(const tf_u32 r, const ShiftParams& p) {
    tf_u32 rest = r;
    tf_i64 off = 0;
#pragma unroll
    for (int d = 0; d < SHIFT_OUTER_DIMS - 1; ++d) {
        if (d < p.nn - 1) {
            const tf_u32 q = quotient(rest, p.magic[d], p.shift[d]);
            off += static_cast<tf_i64>(rest - q * static_cast<tf_u32>(p.sizes[d])) * p.strides[d];
            rest = q;
        }
    }
    return off + static_cast<tf_i64>(rest) * p.strides[p.nn - 1];
}

// The first output position of a lane's word j of an item: word kk holds output bytes 16 kk - m onwards.
__device__ __forceinline__ tf_i64 word_first(const tf_i64 item, const int j, const int lane, const int m) {
    return 16 * (item * 32 * SHIFT_LANE_WORDS + 32 * j + lane) - m;
}

// The row and byte of output position `at` (at >= -R): row -1 where it lies before the output.
__device__ __forceinline__ RowCol row_col(const tf_i64 at, const ShiftParams& p) {
    const tf_i64 q = (at + p.row) / p.row;
    return RowCol{q - 1, at + p.row - q * p.row};
}

// rc advanced by the grid's stride over items (whole rows and the bytes past them; step_cols < R).
__device__ __forceinline__ RowCol advanced(const RowCol rc, const ShiftParams& p) {
    const tf_i64 c = rc.c + p.step_cols;
    return c >= p.row ? RowCol{rc.r + p.step_rows + 1, c - p.row} : RowCol{rc.r + p.step_rows, c};
}

// The sources of the word at output position `first`, the lane's word j of an item whose word 0 starts at
// rc (row -1 for the range's first word where the output starts off a boundary).
__device__ __forceinline__ Src word_source(const tf_u64 base, const RowCol rc, const tf_i64 first, const int j,
                                           const ShiftParams& p) {
    const tf_i64 left = p.total - first;
    const tf_i64 end = left < 16 ? left : 16;
    const int lo = first < 0 ? static_cast<int>(-first) : 0;
    const int hi = end > 0 ? static_cast<int>(end) : 0;
    const tf_i64 cj = rc.c + 16 * 32 * j + lo;  // words j of a lane are 32 words apart
    const tf_i64 k = quotient(static_cast<tf_u32>(cj), p.row_magic, p.row_shift);
    const tf_i64 col = cj - k * p.row;
    const tf_i64 room = p.row - col;
    const int cut = room < hi - lo ? lo + static_cast<int>(room) : hi;
    const tf_u64 a = base + row_offset(rc.r + k, p) + col - lo;
    const tf_u64 b = cut < hi ? base + row_offset(rc.r + k + 1, p) - cut : a;
    return Src{a, b, lo, cut, hi};
}

__device__ __forceinline__ uint4 load_word(const tf_u64 at) { return __ldg(reinterpret_cast<const uint4*>(at)); }

// The aligned words holding the bytes at + lo .. at + hi - 1 (at most two: the one holding at, and the
// next): each is loaded only where it holds one of them, else zero.
__device__ __forceinline__ uint4 first_word(const tf_u64 at, const int lo, const int hi) {
    const int off = static_cast<int>(at & 15);
    return lo < hi && lo < 16 - off ? load_word(at - off) : make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ uint4 second_word(const tf_u64 at, const int lo, const int hi) {
    const int off = static_cast<int>(at & 15);
    return lo < hi && off > 0 && hi > 16 - off ? load_word(at - off + 16) : make_uint4(0, 0, 0, 0);
}

// The output word of source s from its row's loaded words: a's bytes shifted into place, and where the word
// reaches into the next row, that row's words loaded here and merged in from cut. Those loads wait on the
// row's: they are a word in a row or less, and holding them beside the row's would take the registers
// that let six blocks share an SM (118 against 80 registers; 0.77 against 0.91 of copy on long rows).
__device__ __forceinline__ uint4 source_word(const Src s, const uint4 a0, const uint4 a1) {
    const uint4 a = shifted(a0, a1, static_cast<int>(s.a & 15));
    if (s.cut == s.hi) return a;
    const uint4 b0 = first_word(s.b, s.cut, s.hi), b1 = second_word(s.b, s.cut, s.hi);
    return merged_words(a, shifted(b0, b1, static_cast<int>(s.b & 15)), s.cut);
}

__device__ __forceinline__ void shift_rows(const tf_u8* __restrict__ in, tf_u8* __restrict__ out,
                                           const ShiftParams& p) {
    const int lane = threadIdx.x & 31;
    const tf_u64 base = reinterpret_cast<tf_u64>(in);
    const tf_u64 o = reinterpret_cast<tf_u64>(out);
    const int m = static_cast<int>(o & 15);
    tf_i64 item = static_cast<tf_i64>(blockIdx.x) * SHIFT_WARPS + (threadIdx.x >> 5);
    RowCol rc = row_col(word_first(item, 0, lane, m), p);  // the lane's word 0 of each item
    for (; item < p.items; item += static_cast<tf_i64>(gridDim.x) * SHIFT_WARPS, rc = advanced(rc, p)) {
        Src s[SHIFT_LANE_WORDS];
        uint4 a0[SHIFT_LANE_WORDS], a1[SHIFT_LANE_WORDS];
#pragma unroll
        for (int j = 0; j < SHIFT_LANE_WORDS; ++j) s[j] = word_source(base, rc, word_first(item, j, lane, m), j, p);
#pragma unroll
        for (int j = 0; j < SHIFT_LANE_WORDS; ++j) {  // every row load of the item before any is used
            a0[j] = first_word(s[j].a, s[j].lo, s[j].cut);
            a1[j] = second_word(s[j].a, s[j].lo, s[j].cut);
        }
#pragma unroll
        for (int j = 0; j < SHIFT_LANE_WORDS; ++j) {
            if (s[j].lo >= s[j].hi) continue;  // past the range's end
            const uint4 v = source_word(s[j], a0[j], a1[j]);
            tf_u8* g = reinterpret_cast<tf_u8*>(o + word_first(item, j, lane, m));  // an aligned word
            if (s[j].lo == 0 && s[j].hi == 16) {
                *reinterpret_cast<uint4*>(g) = v;
                continue;
            }
            for (int i = s[j].lo; i < s[j].hi; ++i) g[i] = static_cast<tf_u8>(word_of(v, i >> 2) >> (8 * (i & 3)));
        }
    }
}

}  // namespace tileflip_words

// One kernel per element size and S: permute_thin_u8_<S> (S = 2..16), permute_thin_u16_<S> (S = 2..8).
#define TILEFLIP_THIN_KERNEL(S, E, T)                                                                     \
    extern "C" __global__ void __launch_bounds__(128)                                                      \
        permute_thin_##T##_##S(const tf_u8* __restrict__ in, tf_u8* __restrict__ out,                      \
                               const tileflip_words::ThinParams p) {                                            \
        tileflip_words::thin<S, E>(in, out, p);                                                            \
    }

TILEFLIP_THIN_KERNEL(2, 1, u8) TILEFLIP_THIN_KERNEL(3, 1, u8) TILEFLIP_THIN_KERNEL(4, 1, u8)
TILEFLIP_THIN_KERNEL(5, 1, u8) TILEFLIP_THIN_KERNEL(6, 1, u8) TILEFLIP_THIN_KERNEL(7, 1, u8)
TILEFLIP_THIN_KERNEL(8, 1, u8) TILEFLIP_THIN_KERNEL(9, 1, u8) TILEFLIP_THIN_KERNEL(10, 1, u8)
TILEFLIP_THIN_KERNEL(11, 1, u8) TILEFLIP_THIN_KERNEL(12, 1, u8) TILEFLIP_THIN_KERNEL(13, 1, u8)
TILEFLIP_THIN_KERNEL(14, 1, u8) TILEFLIP_THIN_KERNEL(15, 1, u8) TILEFLIP_THIN_KERNEL(16, 1, u8)
TILEFLIP_THIN_KERNEL(2, 2, u16) TILEFLIP_THIN_KERNEL(3, 2, u16) TILEFLIP_THIN_KERNEL(4, 2, u16)
TILEFLIP_THIN_KERNEL(5, 2, u16) TILEFLIP_THIN_KERNEL(6, 2, u16) TILEFLIP_THIN_KERNEL(7, 2, u16)
TILEFLIP_THIN_KERNEL(8, 2, u16)

// One kernel per element size and S: permute_split_u8_<S> (S = 2..8), permute_split_u16_<S> (S = 2..4).
#define TILEFLIP_SPLIT_KERNEL(S, E, T)                                                                    \
    extern "C" __global__ void __launch_bounds__(128)                                                      \
        permute_split_##T##_##S(const tf_u8* __restrict__ in, tf_u8* __restrict__ out,                     \
                                const tileflip_words::SplitParams p) {                                     \
        tileflip_words::split<S, E>(in, out, p);                                                           \
    }

TILEFLIP_SPLIT_KERNEL(2, 1, u8) TILEFLIP_SPLIT_KERNEL(3, 1, u8) TILEFLIP_SPLIT_KERNEL(4, 1, u8)
TILEFLIP_SPLIT_KERNEL(5, 1, u8) TILEFLIP_SPLIT_KERNEL(6, 1, u8) TILEFLIP_SPLIT_KERNEL(7, 1, u8)
TILEFLIP_SPLIT_KERNEL(8, 1, u8) TILEFLIP_SPLIT_KERNEL(2, 2, u16) TILEFLIP_SPLIT_KERNEL(3, 2, u16)
TILEFLIP_SPLIT_KERNEL(4, 2, u16)

// At most 80 registers, so that six blocks fit an SM (tileflip.tuning.SHIFT_BLOCKS).
extern "C" __global__ void __launch_bounds__(128, 6)
    permute_shift_rows(const tf_u8* __restrict__ in, tf_u8* __restrict__ out, const tileflip_words::ShiftParams p) {
    tileflip_words::shift_rows(in, out, p);
}
