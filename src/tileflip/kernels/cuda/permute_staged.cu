// N-D permute through shared memory (tileflip.staged): a block moves one box of the tensor, reading it as
// whole runs of the input and writing it as whole runs of the output; the permutation happens between
// the two, as each element is stored into shared memory at its place in the output's order.
//
// The box has up to 4 dimensions, listed input-fastest first: the first in_run of them form one
// contiguous input run (L_in elements), the others enumerate the runs. In shared memory the box is laid
// out in the output's order, one row of `pitch` bytes per output run (the dimensions in out_run_mask
// form the run, L_out elements; out_rows enumerate the rows, fastest first), each row holding its run at
// shift m, the byte offset mod 16 at which the block's output runs start (the same for all of them: the
// planner only takes boxes whose row dimensions step by multiples of 16 bytes). One dimension of the box
// may be cut in chunks (`chunk`, the block's chunk index is the fastest part of blockIdx.x); the rest of
// blockIdx.x decodes the dimensions outside the box (up to 6).
//
// Load: a thread reads one aligned 16-byte word of an input run's window (every word that holds a byte
// of the run is read whole: it lies in the tensor's allocation) and stores each of the run's elements in
// it into shared memory; the word's first element index is decoded once and an odometer walks the rest.
// U words a thread are loaded before the first is stored. Store: a thread writes one aligned 16-byte word
// of an output run from its shared row; words that run past either end of the run are written byte by
// byte, so nothing outside the output's runs is touched.
//
// Offsets in the tensors are 64-bit; counts within a block and shared offsets 32-bit (a box fits in
// shared memory). No header is included (NVRTC has no standard library search path).

typedef unsigned char tf_u8;
typedef unsigned short tf_u16;
typedef unsigned int tf_u32;
typedef unsigned long long tf_u64;
typedef long long tf_i64;

namespace tileflip_staged {

constexpr int THREADS = 256;
constexpr int U = 4;  // words a thread loads before storing them

// Every division here is by a size the host knows: n / d = umulhi(n, magic) >> shift for n < 2**31
// (tileflip.plan.magic_divisor); shift < 0 stands for d = 1.
__device__ __forceinline__ unsigned divide(unsigned n, unsigned magic, int shift) {
    return shift < 0 ? n : __umulhi(n, magic) >> shift;
}

struct Params {
    tf_i64 n_in[6], n_out[6];    // dimensions outside the box, output-fastest first: strides (elements)
    tf_i64 cut_in, cut_out;      // the cut dimension's strides
    tf_i64 load_in[3];           // the dimensions that enumerate a box's input runs: input strides
    tf_i64 row_out[3];           // the dimensions that enumerate its output rows: output strides
    tf_i64 row_in[3];            // gather: their input strides where they enumerate input runs too, else 0
    int n_size[6];
    unsigned n_magic[6];
    int n_shift[6];
    int run_ext[4], run_sm[4];   // the input run's dimensions, fastest first: extents, shared strides
    unsigned run_magic[4];
    int run_shift[4];
    int load_ext[3], load_sm[3];
    unsigned load_magic[3];
    int load_shift[3];
    int row_ext[3], row_sm[3];
    unsigned row_magic[3];
    int row_shift[3];
    int orun_ext[4], orun_sm[4]; // gather: the output run's dimensions, fastest first: extents, shared bytes
    unsigned orun_magic[4];
    int orun_shift[4];
    int nn, chunks, cut_ext, cut_size;   // outer dimensions; chunks of the cut dimension (1: none)
    unsigned chunk_magic;
    int chunk_shift;
    int cut_load, cut_row;       // the cut dimension's place among the load / row dimensions, or -1
    int cut_run, cut_out_run;    // 1 where it is the input run's / the output run's last dimension
    int run_len, out_len;        // elements of an input run / an output run, in a whole box
    int words, owords;           // 16-byte words of an input run's window / of an output row, at most
    unsigned words_magic, owords_magic;
    int words_shift, owords_shift;
    int runs, rows;              // input runs / output rows of a whole box
    int pitch;                   // scatter: bytes a shared output row; gather: bytes a shared input run
    int trash;                   // scatter: where 32 8-byte trash slots start in shared memory
};

template <int ES>
__device__ __forceinline__ void put(tf_u8* dst, const uint4& v, int s) {
    const tf_u32 w = s * ES / 4 == 0 ? v.x : s * ES / 4 == 1 ? v.y : s * ES / 4 == 2 ? v.z : v.w;
    if (ES == 1) {
        *dst = static_cast<tf_u8>(w >> (8 * (s & 3)));
    } else if (ES == 2) {
        *reinterpret_cast<tf_u16*>(dst) = static_cast<tf_u16>(w >> (16 * (s & 1)));
    } else if (ES == 4) {
        *reinterpret_cast<tf_u32*>(dst) = w;
    } else {
        const tf_u32 hi = s == 0 ? v.y : v.w;
        *reinterpret_cast<tf_u64*>(dst) = (static_cast<tf_u64>(hi) << 32) | w;
    }
}

// Element s of a 16-byte word, read from shared memory at src, placed into v (zeroed before).
template <int ES>
__device__ __forceinline__ void take(uint4& v, const tf_u8* src, int s) {
    tf_u32 w;
    if (ES == 1) w = static_cast<tf_u32>(*src) << (8 * (s & 3));
    else if (ES == 2) w = static_cast<tf_u32>(*reinterpret_cast<const tf_u16*>(src)) << (16 * (s & 1));
    else if (ES == 4) w = *reinterpret_cast<const tf_u32*>(src);
    if (ES == 8) {
        const tf_u64 d = *reinterpret_cast<const tf_u64*>(src);
        if (s == 0) { v.x = static_cast<tf_u32>(d); v.y = static_cast<tf_u32>(d >> 32); }
        else { v.z = static_cast<tf_u32>(d); v.w = static_cast<tf_u32>(d >> 32); }
        return;
    }
    const int k = s * ES / 4;
    if (k == 0) v.x |= w;
    else if (k == 1) v.y |= w;
    else if (k == 2) v.z |= w;
    else v.w |= w;
}

struct Block {
    tf_i64 in_base, out_base;
    int cut_e, run_len, out_len, m;
};

template <int ES>
__device__ __forceinline__ Block block_of(const tf_u8* out, const Params& p) {
    Block b;
    unsigned bid = blockIdx.x;
    int ck = 0;
    if (p.chunks > 1) {
        const unsigned q = divide(bid, p.chunk_magic, p.chunk_shift);
        ck = static_cast<int>(bid - q * p.chunks);
        bid = q;
    }
    b.in_base = 0;
    b.out_base = 0;
#pragma unroll
    for (int d = 0; d < 6; ++d) {
        if (d < p.nn) {
            const unsigned q = divide(bid, p.n_magic[d], p.n_shift[d]);
            const unsigned r = bid - q * static_cast<unsigned>(p.n_size[d]);
            b.in_base += r * p.n_in[d];
            b.out_base += r * p.n_out[d];
            bid = q;
        }
    }
    const int left = p.cut_size - ck * p.cut_ext;
    b.cut_e = left < p.cut_ext ? left : p.cut_ext;  // the cut dimension's extent in this block
    b.in_base += static_cast<tf_i64>(ck) * p.cut_ext * p.cut_in;
    b.out_base += static_cast<tf_i64>(ck) * p.cut_ext * p.cut_out;
    b.run_len = p.cut_run ? p.run_len / p.cut_ext * b.cut_e : p.run_len;
    b.out_len = p.cut_out_run ? p.out_len / p.cut_ext * b.cut_e : p.out_len;
    b.m = static_cast<int>((reinterpret_cast<tf_u64>(out) + static_cast<tf_u64>(b.out_base) * ES) & 15);
    return b;
}

// Scatter: input words' elements stored at their places in the output's order (rows of `pitch` bytes,
// each holding its run at shift m), then the rows copied out as aligned words.
template <int ES>
__device__ __forceinline__ void scatter(const tf_u8* __restrict__ in, tf_u8* __restrict__ out, const Params& p,
                                        tf_u8* sm) {
    const int tid = threadIdx.x;
    const Block blk = block_of<ES>(out, p);
    const int m = blk.m;
    const int run_bytes = blk.run_len * ES;
    const int items = p.runs * p.words;
    const int step = p.run_sm[0] * ES;  // bytes between the places of consecutive elements of a row
    tf_u8* const trash = sm + p.trash + 8 * (tid & 31);
    for (int base = tid; base < items; base += THREADS * U) {
        uint4 v[U];
        int lo[U], hi[U], first[U], pos0[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int item = base + u * THREADS;
            lo[u] = 16;
            hi[u] = 0;
            if (item < items) {
                unsigned r = divide(item, p.words_magic, p.words_shift);
                const int w = item - static_cast<int>(r) * p.words;
                tf_i64 off = blk.in_base;
                int so = 0;
                bool live = true;
#pragma unroll
                for (int k = 0; k < 3; ++k) {
                    const unsigned q = divide(r, p.load_magic[k], p.load_shift[k]);
                    const int c = static_cast<int>(r - q * static_cast<unsigned>(p.load_ext[k]));
                    live = live && !(k == p.cut_load && c >= blk.cut_e);
                    off += c * p.load_in[k];
                    so += c * p.load_sm[k];
                    r = q;
                }
                const tf_u8* g = in + off * ES;
                const int mis = static_cast<int>(reinterpret_cast<tf_u64>(g) & 15);
                const int start = 16 * w - mis;  // the word's first byte, counted from the run's start
                const int a = start > 0 ? start : 0;
                const int b = start + 16 < run_bytes ? start + 16 : run_bytes;
                if (live && a < b) {
                    v[u] = *reinterpret_cast<const uint4*>(g - mis + 16 * w);
                    lo[u] = a - start;
                    hi[u] = b - start;
                    first[u] = a / ES;
                    pos0[u] = so;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (lo[u] >= hi[u]) continue;
            unsigned i = first[u];
            int c[4];
            int pos = pos0[u];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const unsigned q = divide(i, p.run_magic[k], p.run_shift[k]);
                c[k] = static_cast<int>(i - q * static_cast<unsigned>(p.run_ext[k]));
                pos += c[k] * p.run_sm[k];
                i = q;
            }
            const int s0 = lo[u] / ES, n = (hi[u] - lo[u]) / ES;
            if (c[0] + n <= p.run_ext[0]) {
                // Within one row of the run's fastest dimension: places step by `step`. Every slot of the
                // word is stored, those outside the run into this lane's trash slot (no branches).
                tf_u8* at = sm + pos * ES + m - s0 * step;
#pragma unroll
                for (int s = 0; s < 16 / ES; ++s) {
                    put<ES>(static_cast<unsigned>(s - s0) < static_cast<unsigned>(n) ? at : trash, v[u], s);
                    at += step;
                }
                continue;
            }
#pragma unroll
            for (int s = 0; s < 16 / ES; ++s) {
                if (s * ES >= lo[u] && s * ES < hi[u]) {
                    put<ES>(sm + pos * ES + m, v[u], s);
                    pos += p.run_sm[0];
                    if (++c[0] == p.run_ext[0]) {
                        c[0] = 0;
                        pos += p.run_sm[1] - p.run_ext[0] * p.run_sm[0];
                        if (++c[1] == p.run_ext[1]) {
                            c[1] = 0;
                            pos += p.run_sm[2] - p.run_ext[1] * p.run_sm[1];
                            if (++c[2] == p.run_ext[2]) {
                                c[2] = 0;
                                pos += p.run_sm[3] - p.run_ext[2] * p.run_sm[2];
                            }
                        }
                    }
                }
            }
        }
    }
    __syncthreads();

    const int out_bytes = blk.out_len * ES;
    const int out_items = p.rows * p.owords;
    for (int item = tid; item < out_items; item += THREADS) {
        unsigned j = divide(item, p.owords_magic, p.owords_shift);
        const int w = item - static_cast<int>(j) * p.owords;
        const int first_byte = 16 * w - m;
        if (first_byte >= out_bytes) continue;
        tf_i64 off = blk.out_base;
        int row = 0;
        bool live = true;
#pragma unroll
        for (int k = 0; k < 3; ++k) {
            const unsigned q = divide(j, p.row_magic[k], p.row_shift[k]);
            const int c = static_cast<int>(j - q * static_cast<unsigned>(p.row_ext[k]));
            live = live && !(k == p.cut_row && c >= blk.cut_e);
            off += c * p.row_out[k];
            row += c * p.row_sm[k];
            j = q;
        }
        if (!live) continue;
        const uint4 val = *reinterpret_cast<const uint4*>(sm + row * ES + 16 * w);
        tf_u8* dst = out + off * ES - m + 16 * w;
        if (first_byte >= 0 && first_byte + 16 <= out_bytes) {
            *reinterpret_cast<uint4*>(dst) = val;
        } else {
#pragma unroll
            for (int s = 0; s < 16; ++s) {
                if (first_byte + s >= 0 && first_byte + s < out_bytes) put<1>(dst + s, val, s);
            }
        }
    }
}

// Gather: the input runs' aligned windows copied into shared memory as they are (one slot of `pitch`
// bytes a run), then each aligned word of an output row gathered element by element.
template <int ES>
__device__ __forceinline__ void gather(const tf_u8* __restrict__ in, tf_u8* __restrict__ out, const Params& p,
                                       tf_u8* sm) {
    const int tid = threadIdx.x;
    const Block blk = block_of<ES>(out, p);
    const int run_bytes = blk.run_len * ES;
    const int items = p.runs * p.words;
    for (int base = tid; base < items; base += THREADS * U) {
        uint4 v[U];
        int slot[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int item = base + u * THREADS;
            slot[u] = -1;
            if (item < items) {
                unsigned r = divide(item, p.words_magic, p.words_shift);
                const int w = item - static_cast<int>(r) * p.words;
                tf_i64 off = blk.in_base;
                int so = 0;
                bool live = true;
#pragma unroll
                for (int k = 0; k < 3; ++k) {
                    const unsigned q = divide(r, p.load_magic[k], p.load_shift[k]);
                    const int c = static_cast<int>(r - q * static_cast<unsigned>(p.load_ext[k]));
                    live = live && !(k == p.cut_load && c >= blk.cut_e);
                    off += c * p.load_in[k];
                    so += c * p.load_sm[k];
                    r = q;
                }
                const tf_u8* g = in + off * ES;
                const int mis = static_cast<int>(reinterpret_cast<tf_u64>(g) & 15);
                if (live && 16 * w < mis + run_bytes) {
                    v[u] = *reinterpret_cast<const uint4*>(g - mis + 16 * w);
                    slot[u] = so + 16 * w;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (slot[u] >= 0) *reinterpret_cast<uint4*>(sm + slot[u]) = v[u];
        }
    }
    __syncthreads();

    const int out_bytes = blk.out_len * ES;
    const int out_items = p.rows * p.owords;
    const int step = p.orun_sm[0];  // bytes between the places of consecutive elements of an output row
    // what a wrap of the output run's dimension k - 1 adds to a place (the next dimension's step, less the row)
    const int carry1 = p.orun_sm[1] - p.orun_ext[0] * p.orun_sm[0];
    const int carry2 = p.orun_sm[2] - p.orun_ext[1] * p.orun_sm[1];
    const int carry3 = p.orun_sm[3] - p.orun_ext[2] * p.orun_sm[2];
    for (int item = tid; item < out_items; item += THREADS) {
        unsigned j = divide(item, p.owords_magic, p.owords_shift);
        const int w = item - static_cast<int>(j) * p.owords;
        tf_i64 off = blk.out_base, in_off = blk.in_base;
        int place = 0;
        bool live = true;
#pragma unroll
        for (int k = 0; k < 3; ++k) {
            const unsigned q = divide(j, p.row_magic[k], p.row_shift[k]);
            const int c = static_cast<int>(j - q * static_cast<unsigned>(p.row_ext[k]));
            live = live && !(k == p.cut_row && c >= blk.cut_e);
            off += c * p.row_out[k];
            in_off += c * p.row_in[k];
            place += c * p.row_sm[k];
            j = q;
        }
        const int m = static_cast<int>((reinterpret_cast<tf_u64>(out) + static_cast<tf_u64>(off) * ES) & 15);
        const int first_byte = 16 * w - m;
        if (!live || first_byte >= out_bytes || first_byte + 16 <= 0) continue;
        const int a = first_byte > 0 ? first_byte : 0;
        const int b = first_byte + 16 < out_bytes ? first_byte + 16 : out_bytes;
        unsigned e = a / ES;
        int c[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const unsigned q = divide(e, p.orun_magic[k], p.orun_shift[k]);
            c[k] = static_cast<int>(e - q * static_cast<unsigned>(p.orun_ext[k]));
            place += c[k] * p.orun_sm[k];
            e = q;
        }
        // The run the row lies in starts `mis` bytes into its slot.
        place += static_cast<int>((reinterpret_cast<tf_u64>(in) + static_cast<tf_u64>(in_off) * ES) & 15);
        const int lo = a - first_byte, hi = b - first_byte;
        uint4 val = make_uint4(0, 0, 0, 0);
        // The word's elements from its first one on, their places walked by an odometer over the output run's
        // dimensions without branches (they all lie in the input run: one slot, one misalignment). Slots
        // outside the output row read shared memory's first element instead (their bytes are not stored).
        const int s0 = lo / ES, n = (hi - lo) / ES;
        const tf_u8* at = sm + place;
        int c0 = c[0], c1 = c[1], c2 = c[2];
#pragma unroll
        for (int s = 0; s < 16 / ES; ++s) {
            const bool ok = static_cast<unsigned>(s - s0) < static_cast<unsigned>(n);
            take<ES>(val, ok ? at : sm, s);
            if (s + 1 < 16 / ES) {
                at += ok ? step : 0;
                c0 += ok;
                const bool w0 = c0 == p.orun_ext[0];
                c0 = w0 ? 0 : c0;
                at += w0 ? carry1 : 0;
                c1 += w0;
                const bool w1 = c1 == p.orun_ext[1];
                c1 = w1 ? 0 : c1;
                at += w1 ? carry2 : 0;
                c2 += w1;
                const bool w2 = c2 == p.orun_ext[2];
                c2 = w2 ? 0 : c2;
                at += w2 ? carry3 : 0;
            }
        }
        tf_u8* dst = out + off * ES - m + 16 * w;
        if (lo == 0 && hi == 16) {
            *reinterpret_cast<uint4*>(dst) = val;
        } else {
#pragma unroll
            for (int s = 0; s < 16; ++s) {
                if (s >= lo && s < hi) put<1>(dst + s, val, s);
            }
        }
    }
}

}  // namespace tileflip_staged

#define TILEFLIP_STAGED(ES)                                                                                      \
    extern "C" __global__ void __launch_bounds__(256, 4) permute_staged_##ES(                                   \
        const tf_u8* __restrict__ in, tf_u8* __restrict__ out, const tileflip_staged::Params p) {               \
        extern __shared__ uint4 shared_words[];                                                                  \
        tileflip_staged::scatter<ES>(in, out, p, reinterpret_cast<tf_u8*>(shared_words));                      \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(256, 4) permute_gather_##ES(                                   \
        const tf_u8* __restrict__ in, tf_u8* __restrict__ out, const tileflip_staged::Params p) {               \
        extern __shared__ uint4 shared_words[];                                                                  \
        tileflip_staged::gather<ES>(in, out, p, reinterpret_cast<tf_u8*>(shared_words));                       \
    }
TILEFLIP_STAGED(1)
TILEFLIP_STAGED(2)
TILEFLIP_STAGED(4)
TILEFLIP_STAGED(8)
