// Experiment (session 17, benchmarks/staged_specialized.py): the staged permute of bf16
// (A, B, D2, D3, D4, D5) by (0, 4, 1, 3, 5, 2) with every size compiled in, to see whether a box moved
// through shared memory with its places computed from constants beats the Triton tile where the library's
// run-time-addressed forms did not. A block takes one (d0, d1) slice: D2 x D3 x D4 x D5 contiguous
// elements, copied into shared memory as its aligned 16-byte window (chunks swizzled by SWZ: 16-byte chunk
// bits 4-6 XOR bits SWZ..SWZ+2 of the address, 0 for none), then each output word of the D4 rows of
// D3 x D5 x D2 elements gathered element by element (MAPB: consecutive threads take consecutive rows
// rather than consecutive words of a row) and stored as an aligned 16-byte word, byte by byte at a row's
// ends; U: words a thread loads before storing them. No header is included (NVRTC).

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#ifndef D1
#define D1 48
#endif
#ifndef D2
#define D2 47
#endif
#ifndef D3
#define D3 18
#endif
#ifndef D4
#define D4 10
#endif
#ifndef D5
#define D5 3
#endif
#ifndef SWZ
#define SWZ 0
#endif
#ifndef MAPB
#define MAPB 0
#endif
#ifndef U
#define U 4
#endif
#ifndef NC
#define NC 0  // 0: a block's slice as one run; k > 0: D3 cut in k chunks, a block's input as D2 runs
#endif

constexpr int SLICE = D2 * D3 * D4 * D5;  // elements of a block's input slice
constexpr int ROW = D3 * D5 * D2;         // elements of an output run
constexpr int THREADS = 256;

__device__ __forceinline__ int swz(int b) {
#if SWZ
    return b ^ (((b >> SWZ) & 7) << 4);
#else
    return b;
#endif
}

// An aligned output word whose first byte is byte `first` of a run of `bytes`: whole, or byte by byte
// where it passes either end of the run.
__device__ __forceinline__ void store_word(u8* dst, const u32 (&acc)[4], int first, int bytes) {
    if (first >= 0 && first + 16 <= bytes) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(acc[0], acc[1], acc[2], acc[3]);
    } else {
#pragma unroll
        for (int s = 0; s < 16; ++s) {
            if (first + s >= 0 && first + s < bytes) dst[s] = static_cast<u8>(acc[s >> 2] >> (8 * (s & 3)));
        }
    }
}

// The D4 output runs of LEN elements a block writes (each at `offset` elements into its row of ROW), every
// aligned word gathered from shared memory: element (d2, d3, d4, d5) at byte place(d2, d3, d4, d5).
template <int LEN, typename Place>
__device__ __forceinline__ void gather_rows(const u8* sm, u8* out, int d0, int d1, int offset, Place place) {
    constexpr int W = (15 + LEN * 2 + 15) / 16;
    for (int item = threadIdx.x; item < D4 * W; item += THREADS) {
#if MAPB
        const int d4 = item % D4, w = item / D4;
#else
        const int w = item % W, d4 = item / W;
#endif
        const long long rs = (static_cast<long long>(d0 * D4 + d4) * D1 + d1) * ROW + offset;
        u8* const rowp = out + rs * 2;
        const int m = static_cast<int>(reinterpret_cast<u64>(rowp) & 15);
        const int first = 16 * w - m;
        if (first >= LEN * 2) continue;
        u32 acc[4] = {0, 0, 0, 0};
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            const int p = (first >> 1) + s;
            const int pp = p >= 0 && p < LEN ? p : 0;
            const int d2 = pp % D2, t = pp / D2, d5 = t % D5, d3 = t / D5;
            const u32 val = *reinterpret_cast<const u16*>(sm + swz(place(d2, d3, d4, d5)));
            acc[s >> 1] |= val << (16 * (s & 1));
        }
        store_word(rowp - m + 16 * w, acc, first, LEN * 2);
    }
}

#if NC == 0
extern "C" __global__ void __launch_bounds__(256) staged_bf16(const u8* __restrict__ in, u8* __restrict__ out) {
    extern __shared__ uint4 shared_words[];
    u8* const sm = reinterpret_cast<u8*>(shared_words);
    const int d01 = blockIdx.x;
    const int d0 = d01 / D1, d1 = d01 % D1;
    const u8* g = in + static_cast<long long>(d01) * SLICE * 2;
    const int mis = static_cast<int>(reinterpret_cast<u64>(g) & 15);
    const uint4* src = reinterpret_cast<const uint4*>(g - mis);
    const int n = (mis + SLICE * 2 + 15) / 16;
    for (int w = threadIdx.x; w < n; w += THREADS * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (w + u * THREADS < n) v[u] = src[w + u * THREADS];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (w + u * THREADS < n) *reinterpret_cast<uint4*>(sm + swz(16 * (w + u * THREADS))) = v[u];
        }
    }
    __syncthreads();
    gather_rows<ROW>(sm, out, d0, d1, 0, [&](int d2, int d3, int d4, int d5) {
        return mis + 2 * (d2 * (D3 * D4 * D5) + d3 * (D4 * D5) + d4 * D5 + d5);
    });
}
#else
// D3 cut in NC chunks of D3C: a block takes (d0, d1, chunk): D2 input runs of D3C x D4 x D5 elements, each
// run's window in a slot of P bytes (its own misalignment: runs are D3 x D4 x D5 elements apart), and
// D4 output runs of D3C x D5 x D2 elements.
constexpr int D3C = D3 / NC;
constexpr int RUN = D3C * D4 * D5;                 // elements of an input run
constexpr int RSTEP = D3 * D4 * D5 * 2;            // bytes between input runs (d2)
constexpr int P = ((RUN * 2 + 15) / 16 + 1) * 16;  // bytes of a slot
constexpr int WR = P / 16;
constexpr int ROWC = D3C * D5 * D2;                // elements of an output run

extern "C" __global__ void __launch_bounds__(256) staged_bf16(const u8* __restrict__ in, u8* __restrict__ out) {
    extern __shared__ uint4 shared_words[];
    u8* const sm = reinterpret_cast<u8*>(shared_words);
    const int c = blockIdx.x % NC, d01 = blockIdx.x / NC;
    const int d0 = d01 / D1, d1 = d01 % D1;
    const u8* const g0 = in + (static_cast<long long>(d01) * SLICE + c * D3C * D4 * D5) * 2;
    const int mis0 = static_cast<int>(reinterpret_cast<u64>(g0) & 15);
    for (int i = threadIdx.x; i < D2 * WR; i += THREADS * U) {
        uint4 v[U];
        int at[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int item = i + u * THREADS;
            const int r = item / WR, w = item % WR;
            const int mis = (mis0 + r * RSTEP) & 15;
            at[u] = -1;
            if (item < D2 * WR && 16 * w < mis + RUN * 2) {
                v[u] = *reinterpret_cast<const uint4*>(g0 + static_cast<long long>(r) * RSTEP - mis + 16 * w);
                at[u] = r * P + 16 * w;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (at[u] >= 0) *reinterpret_cast<uint4*>(sm + swz(at[u])) = v[u];
        }
    }
    __syncthreads();
    gather_rows<ROWC>(sm, out, d0, d1, c * ROWC, [&](int d2, int d3, int d4, int d5) {
        return d2 * P + ((mis0 + d2 * RSTEP) & 15) + 2 * (d3 * (D4 * D5) + d4 * D5 + d5);
    });
}
#endif
