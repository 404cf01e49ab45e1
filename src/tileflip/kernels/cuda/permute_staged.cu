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

struct Params {
    tf_i64 in_stride[4];   // box dimensions, input-fastest first: input strides (elements)
    tf_i64 out_stride[4];  // output strides
    tf_i64 n_size[6], n_in[6], n_out[6];  // dimensions outside the box, output-fastest first
    int ext[4];            // extent in a block (the chunk length for the cut dimension)
    int size[4];           // the tensor's size
    int sm[4];             // stride in the shared layout (elements)
    int out_rows[4];       // box indices of the output row dimensions, fastest first
    int nt, in_run, out_run_mask, n_rows;
    int chunk, chunks, pitch, nn;
};

// ext[k] for a runtime k without indexing a register array (which would put it in local memory).
__device__ __forceinline__ int pick(const int (&v)[4], int k) {
    return k == 0 ? v[0] : k == 1 ? v[1] : k == 2 ? v[2] : v[3];
}

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

template <int ES>
__device__ __forceinline__ void permute_staged(const tf_u8* __restrict__ in, tf_u8* __restrict__ out,
                                               const Params& p) {
    extern __shared__ uint4 shared_words[];
    tf_u8* const sm = reinterpret_cast<tf_u8*>(shared_words);
    const int tid = threadIdx.x;

    // The block's chunk and outer offsets.
    tf_i64 bid = blockIdx.x;
    int ck = 0;
    if (p.chunk >= 0) {
        ck = static_cast<int>(bid % p.chunks);
        bid /= p.chunks;
    }
    tf_i64 in_base = 0, out_base = 0;
    for (int d = 0; d < p.nn; ++d) {
        const tf_i64 s = p.n_size[d];
        const tf_i64 q = d < p.nn - 1 ? bid / s : 0;
        const tf_i64 r = bid - q * s;
        in_base += r * p.n_in[d];
        out_base += r * p.n_out[d];
        bid = q;
    }
    int e[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        e[k] = k < p.nt ? p.ext[k] : 1;
        if (k == p.chunk) {
            const int left = p.size[k] - ck * p.ext[k];
            e[k] = left < p.ext[k] ? left : p.ext[k];
            in_base += static_cast<tf_i64>(ck) * p.ext[k] * p.in_stride[k];
            out_base += static_cast<tf_i64>(ck) * p.ext[k] * p.out_stride[k];
        }
    }
    const int m = static_cast<int>((reinterpret_cast<tf_u64>(out) + static_cast<tf_u64>(out_base) * ES) & 15);

    // The input run's odometer (levels past in_run have extent 1) and the runs' count.
    int rext[4], rsm[4];
    int run_len = 1, runs = 1;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const bool in_run = k < p.in_run;
        rext[k] = in_run ? e[k] : 1;
        rsm[k] = in_run ? p.sm[k] : 0;
        if (in_run) run_len *= e[k];
        else if (k < p.nt) runs *= e[k];
    }
    const int run_bytes = run_len * ES;
    const int words = (run_bytes + 15) / 16 + 1;  // words of a run's aligned window, at most
    const int items = runs * words;

    for (int base = tid; base < items; base += THREADS * U) {
        uint4 v[U];
        int lo[U], hi[U], first[U], pos0[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int item = base + u * THREADS;
            lo[u] = 16;
            hi[u] = 0;
            if (item < items) {
                int r = item / words;
                const int w = item - r * words;
                tf_i64 off = in_base;
                int so = 0;
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    if (k >= p.in_run && k < p.nt) {
                        const int q = r / e[k];
                        const int c = r - q * e[k];
                        off += c * p.in_stride[k];
                        so += c * p.sm[k];
                        r = q;
                    }
                }
                const tf_u8* g = in + off * ES;
                const int mis = static_cast<int>(reinterpret_cast<tf_u64>(g) & 15);
                const int start = 16 * w - mis;  // the word's first byte, counted from the run's start
                const int a = start > 0 ? start : 0;
                const int b = start + 16 < run_bytes ? start + 16 : run_bytes;
                if (a < b) {
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
            int i = first[u];
            int c0 = i % rext[0];
            i /= rext[0];
            int c1 = i % rext[1];
            i /= rext[1];
            int c2 = i % rext[2];
            const int c3 = i / rext[2];
            int pos = pos0[u] + c0 * rsm[0] + c1 * rsm[1] + c2 * rsm[2] + c3 * rsm[3];
#pragma unroll
            for (int s = 0; s < 16 / ES; ++s) {
                if (s * ES >= lo[u] && s * ES < hi[u]) {
                    put<ES>(sm + pos * ES + m, v[u], s);
                    pos += rsm[0];
                    if (++c0 == rext[0]) {
                        c0 = 0;
                        pos += rsm[1] - rext[0] * rsm[0];
                        if (++c1 == rext[1]) {
                            c1 = 0;
                            pos += rsm[2] - rext[1] * rsm[1];
                            if (++c2 == rext[2]) {
                                c2 = 0;
                                pos += rsm[3] - rext[2] * rsm[2];
                            }
                        }
                    }
                }
            }
        }
    }
    __syncthreads();

    // Store: the output runs, one aligned 16-byte word a thread.
    int out_len = 1, rows = 1;
    int rows_ext[3], rows_sm[3];
    tf_i64 rows_out[3];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if (k < p.nt && ((p.out_run_mask >> k) & 1)) out_len *= e[k];
    }
#pragma unroll
    for (int j = 0; j < 3; ++j) {
        const int k = p.out_rows[j];
        const bool live = j < p.n_rows;
        rows_ext[j] = live ? pick(e, k) : 1;
        rows_sm[j] = live ? (k == 0 ? p.sm[0] : k == 1 ? p.sm[1] : k == 2 ? p.sm[2] : p.sm[3]) : 0;
        rows_out[j] = live ? (k == 0 ? p.out_stride[0] : k == 1 ? p.out_stride[1] : k == 2 ? p.out_stride[2]
                                                                                            : p.out_stride[3])
                           : 0;
        rows *= rows_ext[j];
    }
    const int out_bytes = out_len * ES;
    const int out_words = (m + out_bytes + 15) / 16;
    const int out_items = rows * out_words;
    for (int item = tid; item < out_items; item += THREADS) {
        int j = item / out_words;
        const int w = item - j * out_words;
        tf_i64 off = out_base;
        int row = 0;
#pragma unroll
        for (int d = 0; d < 3; ++d) {
            const int q = j / rows_ext[d];
            const int c = j - q * rows_ext[d];
            off += c * rows_out[d];
            row += c * rows_sm[d];
            j = q;
        }
        const uint4 val = *reinterpret_cast<const uint4*>(sm + row * ES + 16 * w);
        tf_u8* dst = out + off * ES - m + 16 * w;
        const int first_byte = 16 * w - m;
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

}  // namespace tileflip_staged

#define TILEFLIP_STAGED(ES)                                                                                      \
    extern "C" __global__ void __launch_bounds__(256, 4) permute_staged_##ES(                                   \
        const tf_u8* __restrict__ in, tf_u8* __restrict__ out, const tileflip_staged::Params p) {               \
        tileflip_staged::permute_staged<ES>(in, out, p);                                                         \
    }
TILEFLIP_STAGED(1)
TILEFLIP_STAGED(2)
TILEFLIP_STAGED(4)
TILEFLIP_STAGED(8)
