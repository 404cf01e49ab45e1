// N-D permute through shared memory (tileflip.staged): a block moves one box of the tensor, reading it as
// whole runs of the input and writing it as whole runs of the output.
//
// Shared memory holds the box twice. IN: one slot of `in_pitch` bytes a input run, holding the run's
// aligned 16-byte window as read (the run starts `mis` bytes in, its address mod 16). OUT: one row of
// `out_pitch` bytes an output run, holding the run from byte m, the block's output address mod 16 (the
// same for every row: the planner only takes boxes whose row dimensions step by whole 16-byte words).
// Three phases, each a loop whose addresses step by fixed amounts:
//   1. fill: every aligned 16-byte word of every input run's window into IN (a run's words across the
//      threads where a run has many, else a thread a run);
//   2. lines: a thread a line, the box's elements along the output's fastest dimension of the box (its
//      `line`): contiguous in OUT, `line_in_step` bytes apart in IN (in one slot, or one slot each where
//      the line dimension picks input runs, each with its own misalignment);
//   3. drain: every aligned 16-byte word of every OUT row to the output; words past either end of a run
//      are written byte by byte, so nothing outside the output's runs is touched.
// A box has up to 4 dimensions; one of them may be cut in chunks (`chunk`: the block's chunk is the
// fastest part of blockIdx.x, the rest decodes the up to 6 dimensions outside the box). Every division
// is by a size the host knows (a multiply-high by its magic number). Offsets in the tensors are 64-bit,
// in shared memory 32-bit. No header is included (NVRTC has no standard library search path).

typedef unsigned char tf_u8;
typedef unsigned short tf_u16;
typedef unsigned int tf_u32;
typedef unsigned long long tf_u64;
typedef long long tf_i64;

namespace tileflip_staged {

constexpr int THREADS = 256;
constexpr int U = 4;  // words a thread loads before storing them

// n / d = umulhi(n, magic) >> shift for n < 2**31 (tileflip.plan.magic_divisor); shift < 0 stands for d = 1.
__device__ __forceinline__ unsigned divide(unsigned n, unsigned magic, int shift) {
    return shift < 0 ? n : __umulhi(n, magic) >> shift;
}

struct Params {
    tf_i64 n_in[6], n_out[6];    // the dimensions outside the box, output-fastest first: strides (elements)
    tf_i64 cut_in, cut_out;      // the cut dimension's strides
    tf_i64 load_in[3];           // the dimensions that pick an input run: input strides
    tf_i64 row_out[3];           // the dimensions that pick an output row: output strides
    tf_i64 enum_in[3];           // the dimensions that pick a line: input strides where they pick a run, else 0
    tf_i64 line_in;              // the line dimension's input stride where it picks runs, else 0
    int n_size[6];
    unsigned n_magic[6];
    int n_shift[6];
    int load_ext[3], load_place[3];
    unsigned load_magic[3];
    int load_shift[3];
    int row_ext[3], row_place[3];
    unsigned row_magic[3];
    int row_shift[3];
    int enum_ext[3], enum_in_place[3], enum_out_place[3];
    unsigned enum_magic[3];
    int enum_shift[3];
    int nn, chunks, cut_ext, cut_size;  // outer dimensions; chunks of the cut dimension (1: none)
    unsigned chunk_magic;
    int chunk_shift;
    int cut_load, cut_row, cut_enum;    // the cut dimension's place among those dimensions, or -1
    int cut_run, cut_out_run, cut_line; // 1 where it is the input run's / the output run's last, the line's
    int run_len, out_len;               // elements of an input / output run in a whole box
    int words, owords;                  // 16-byte words of an input run's window / an OUT row, at most
    unsigned words_magic, owords_magic;
    int words_shift, owords_shift;
    int runs, rows, lines;              // in a whole box
    int line_ext, line_in_step;         // the line: its extent, bytes between its elements in IN
    int segs, seg_len;                  // a line is moved in `segs` pieces of `seg_len` elements (the last shorter)
    unsigned segs_magic;
    int segs_shift;
    int in_bytes;                       // IN's size: where OUT starts
    int pad;
};

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

// Input run r of the block: its first element's offset in the tensor and its slot's place in IN; false
// where the cut dimension runs past this block's chunk.
__device__ __forceinline__ bool run_of(unsigned r, const Params& p, const Block& b, tf_i64& off, int& place) {
    off = b.in_base;
    place = 0;
    bool live = true;
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        const unsigned q = divide(r, p.load_magic[k], p.load_shift[k]);
        const int c = static_cast<int>(r - q * static_cast<unsigned>(p.load_ext[k]));
        live = live && !(k == p.cut_load && c >= b.cut_e);
        off += c * p.load_in[k];
        place += c * p.load_place[k];
        r = q;
    }
    return live;
}

// Output row j of the block: its first element's offset in the output and its place in OUT.
__device__ __forceinline__ bool row_of(unsigned j, const Params& p, const Block& b, tf_i64& off, int& place) {
    off = b.out_base;
    place = 0;
    bool live = true;
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        const unsigned q = divide(j, p.row_magic[k], p.row_shift[k]);
        const int c = static_cast<int>(j - q * static_cast<unsigned>(p.row_ext[k]));
        live = live && !(k == p.cut_row && c >= b.cut_e);
        off += c * p.row_out[k];
        place += c * p.row_place[k];
        j = q;
    }
    return live;
}

template <int ES>
__device__ __forceinline__ void copy_element(tf_u8* dst, const tf_u8* src) {
    if (ES == 1) *dst = *src;
    else if (ES == 2) *reinterpret_cast<tf_u16*>(dst) = *reinterpret_cast<const tf_u16*>(src);
    else if (ES == 4) *reinterpret_cast<tf_u32*>(dst) = *reinterpret_cast<const tf_u32*>(src);
    else *reinterpret_cast<tf_u64*>(dst) = *reinterpret_cast<const tf_u64*>(src);
}

template <int ES>
__device__ __forceinline__ void permute_staged(const tf_u8* __restrict__ in, tf_u8* __restrict__ out,
                                               const Params& p) {
    extern __shared__ uint4 shared_words[];
    tf_u8* const sin = reinterpret_cast<tf_u8*>(shared_words);
    tf_u8* const sout = sin + p.in_bytes;
    const int tid = threadIdx.x;
    const Block blk = block_of<ES>(out, p);

    // 1. Fill IN.
    const int run_bytes = blk.run_len * ES;
    if (p.words >= THREADS / 4) {
        // Long runs: a run at a time, its words across the threads.
        for (int r = 0; r < p.runs; ++r) {
            tf_i64 off;
            int slot;
            if (!run_of(r, p, blk, off, slot)) continue;
            const tf_u8* g = in + off * ES;
            const int mis = static_cast<int>(reinterpret_cast<tf_u64>(g) & 15);
            const uint4* src = reinterpret_cast<const uint4*>(g - mis);
            const int n = (mis + run_bytes + 15) / 16;
            for (int w0 = tid; w0 < n; w0 += THREADS * U) {
                uint4 v[U];
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    if (w0 + u * THREADS < n) v[u] = src[w0 + u * THREADS];
                }
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    if (w0 + u * THREADS < n) *reinterpret_cast<uint4*>(sin + slot + 16 * (w0 + u * THREADS)) = v[u];
                }
            }
        }
    } else {
        // Short runs: a thread a (run, word), U at a time.
        const int items = p.runs * p.words;
        for (int base = tid; base < items; base += THREADS * U) {
            uint4 v[U];
            int at[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int item = base + u * THREADS;
                at[u] = -1;
                if (item < items) {
                    const unsigned r = divide(item, p.words_magic, p.words_shift);
                    const int w = item - static_cast<int>(r) * p.words;
                    tf_i64 off;
                    int slot;
                    const bool live = run_of(r, p, blk, off, slot);
                    const tf_u8* g = in + off * ES;
                    const int mis = static_cast<int>(reinterpret_cast<tf_u64>(g) & 15);
                    if (live && 16 * w < mis + run_bytes) {
                        v[u] = *reinterpret_cast<const uint4*>(g - mis + 16 * w);
                        at[u] = slot + 16 * w;
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (at[u] >= 0) *reinterpret_cast<uint4*>(sin + at[u]) = v[u];
            }
        }
    }
    __syncthreads();

    // 2. Lines: IN to OUT.
    const int line_n = p.cut_line ? blk.cut_e : p.line_ext;
    const int step = p.line_in_step;
    // where the line picks runs, its elements' misalignments step by this (mod 16)
    const unsigned mis_step = static_cast<unsigned>(p.line_in * ES) & 15;
    const int pieces = p.lines * p.segs;
    for (int li = tid; li < pieces; li += THREADS) {
        unsigned j = divide(li, p.segs_magic, p.segs_shift);
        const int x0 = (li - static_cast<int>(j) * p.segs) * p.seg_len;
        const int x1 = x0 + p.seg_len < line_n ? x0 + p.seg_len : line_n;
        int in_place = x0 * step, out_place = blk.m + x0 * ES;
        tf_i64 in_off = blk.in_base;
        bool live = true;
#pragma unroll
        for (int k = 0; k < 3; ++k) {
            const unsigned q = divide(j, p.enum_magic[k], p.enum_shift[k]);
            const int c = static_cast<int>(j - q * static_cast<unsigned>(p.enum_ext[k]));
            live = live && !(k == p.cut_enum && c >= blk.cut_e);
            in_place += c * p.enum_in_place[k];
            out_place += c * p.enum_out_place[k];
            in_off += c * p.enum_in[k];
            j = q;
        }
        if (!live) continue;
        // the piece's first element's run starts this far into its slot
        const unsigned g = static_cast<unsigned>(reinterpret_cast<tf_u64>(in) + static_cast<tf_u64>(in_off) * ES) +
                           static_cast<unsigned>(x0) * mis_step;
        const tf_u8* src = sin + in_place;
        tf_u8* dst = sout + out_place;
        if (mis_step == 0) {
            src += g & 15;
            int x = x0;
            for (; x + 4 <= x1; x += 4) {
                copy_element<ES>(dst, src);
                copy_element<ES>(dst + ES, src + step);
                copy_element<ES>(dst + 2 * ES, src + 2 * step);
                copy_element<ES>(dst + 3 * ES, src + 3 * step);
                src += 4 * step;
                dst += 4 * ES;
            }
            for (; x < x1; ++x) {
                copy_element<ES>(dst, src);
                src += step;
                dst += ES;
            }
        } else {
            unsigned gx = g;
            for (int x = x0; x < x1; ++x) {
                copy_element<ES>(dst, src + (gx & 15));
                src += step;
                dst += ES;
                gx += mis_step;
            }
        }
    }
    __syncthreads();

    // 3. Drain OUT.
    const int m = blk.m;
    const int out_bytes = blk.out_len * ES;
    const int out_items = p.rows * p.owords;
    for (int item = tid; item < out_items; item += THREADS) {
        const unsigned j = divide(item, p.owords_magic, p.owords_shift);
        const int w = item - static_cast<int>(j) * p.owords;
        const int first = 16 * w - m;
        if (first >= out_bytes) continue;
        tf_i64 off;
        int place;
        if (!row_of(j, p, blk, off, place)) continue;
        const uint4 val = *reinterpret_cast<const uint4*>(sout + place + 16 * w);
        tf_u8* dst = out + off * ES - m + 16 * w;
        if (first >= 0 && first + 16 <= out_bytes) {
            *reinterpret_cast<uint4*>(dst) = val;
        } else {
            const tf_u8* bytes = sout + place + 16 * w;
#pragma unroll
            for (int s = 0; s < 16; ++s) {
                if (first + s >= 0 && first + s < out_bytes) dst[s] = bytes[s];
            }
        }
    }
}

}  // namespace tileflip_staged

#define TILEFLIP_STAGED(ES)                                                                                      \
    extern "C" __global__ void __launch_bounds__(256) permute_staged_##ES(                                      \
        const tf_u8* __restrict__ in, tf_u8* __restrict__ out, const tileflip_staged::Params p) {               \
        tileflip_staged::permute_staged<ES>(in, out, p);                                                         \
    }
TILEFLIP_STAGED(1)
TILEFLIP_STAGED(2)
TILEFLIP_STAGED(4)
TILEFLIP_STAGED(8)
