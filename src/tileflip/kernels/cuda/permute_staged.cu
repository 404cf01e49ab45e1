// The staged permute: any permute moved through shared memory one box of the tensor at a time.
//
// A box spans the input's fastest dimensions (an input segment: a contiguous run of the input) and the
// output's fastest ones (an output segment: a contiguous run of the output), cut along at most one
// dimension on each side (tileflip.plan.staged chooses the box). Every box of a launch has the same
// shape, so each thread's place in it is worked out once, when the block starts: the input offset and
// shared-memory offset of each of its load vectors, and the output offset of each of its store vectors
// with the shared-memory offset of every element in it. A block then walks boxes (a persistent grid):
//
//   load:   each load vector (VI bytes of one input segment) copied from global memory into the box's
//           shared buffer as the input segments lie (cp.async: no registers hold it);
//   store:  each store vector gathered from the buffer, element by element or whole, written as VO bytes.
//
// Copies run STAGES - 1 boxes ahead of the stores, each box in its own buffer, so that two boxes' loads are
// in flight while one is stored; one barrier a box keeps the buffers apart. A box cut short by the tensor's end
// (the last along a cut dimension) masks its vectors by their coordinates along the cut dimensions.
// Vectors are whole: every vector of every box starts on a multiple of its width (the launch's VI and VO
// are the widest widths that every segment's start, length and the pointers allow).

typedef unsigned char tf_u8;
typedef unsigned short tf_u16;
typedef unsigned int tf_u32;
typedef unsigned long long tf_u64;
typedef long long tf_i64;

constexpr int STAGED_THREADS = 256;
constexpr int STAGED_BOX_BYTES = 8192;   // bytes of the box a block moves at a time
constexpr int STAGED_BUF_BYTES = 9216;   // a buffer: the box with its segments' padding
constexpr int STAGED_STAGES = 3;         // buffers a block cycles through: two boxes' copies in flight
constexpr int STAGED_DIMS = 8;
constexpr int STAGED_UNCUT = 65535;      // a coordinate limit that no box coordinate reaches

struct StagedParams {
    int tiles;                 // boxes (< 2**31)
    int nl, ns;                // load and store vectors of a box
    int vps_in, vps_out;       // vectors of an input segment, of an output segment
    int inner_in, inner_out;   // elements of a segment before its cut dimension (0: the segment is whole)
    int n_oin;                 // box dimensions outside the input segment, in the order segments are counted
    int k_os_in;               // which of them is the output's cut dimension (-1: none, or the input's own)
    int n_sout;                // dimensions of the output segment, fastest first
    int n_oout;                // box dimensions outside the output segment
    int lanes_seg, nseg;       // lanes of a warp on one output segment's consecutive vectors; segments a box
    int vps_pad;               // vectors of a segment, rounded up to lanes_seg
    int k_is_out;              // which of them is the input's cut dimension (-1: none, or the output's own)
    int same_cut;              // 1 where both sides cut the same dimension
    int n_tile;                // dimensions boxes are counted over, fastest first
    int ti_is, ti_os;          // which of those are the input's and the output's cut dimensions (-1: none)
    int cut_is, size_is;       // the input's cut dimension: its extent in a box and its size
    int cut_os, size_os;       // the same for the output's
    int pitch, rot, shift;     // the buffer's rows: elements from one to the next; row r is turned by
                               // (r >> shift) * rot elements
    int oin_ext[STAGED_DIMS], oin_in[STAGED_DIMS], oin_row[STAGED_DIMS];
    int sout_ext[STAGED_DIMS], sout_row[STAGED_DIMS], sout_col[STAGED_DIMS];
    int oout_ext[STAGED_DIMS], oout_out[STAGED_DIMS], oout_row[STAGED_DIMS], oout_col[STAGED_DIMS];
    int tile_count[STAGED_DIMS], tile_magic[STAGED_DIMS], tile_shift[STAGED_DIMS];
    tf_i64 tile_in[STAGED_DIMS], tile_out[STAGED_DIMS];
};

// A vector's place in a box: its offset in global memory (elements, from the box's first element), its
// row and column in the buffer (elements), and its coordinates along the input's and the output's cut
// dimensions (STAGED_UNCUT for the slots past the box's vectors, which no box takes).
struct Slot {
    int at, row, col, cis, cos;
};

// A place in the buffer: row (an input segment) and column (a position in it).
struct RowCol {
    int row, col;
};

// A box's place in the tensor: its first element's offsets, and the extents left along the cut dimensions.
struct Box {
    tf_i64 at_in, at_out;
    int lim_is, lim_os;
};

__device__ __forceinline__ tf_u32 quotient(const tf_u32 n, const int magic, const int shift) {
    return __umulhi(n, static_cast<tf_u32>(magic)) >> shift;
}

// The buffer offset (elements) of row r, column c: rows turned by (r >> shift) * rot elements, so that the
// elements a warp gathers from one column of many rows fall in different banks.
__device__ __forceinline__ int buffer_at(const StagedParams& p, const int r, const int c) {
    return r * p.pitch + (c + (r >> p.shift) * p.rot) % p.pitch;
}

// Load vector v of a box (VE elements a vector): position q of input segment g, which lies in the buffer
// at row g; the segments are counted over the dimensions outside it, fastest first.
__device__ __forceinline__ Slot load_slot(const StagedParams& p, const int v, const int VE) {
    if (v >= p.nl) return Slot{0, 0, 0, STAGED_UNCUT, STAGED_UNCUT};
    int g = v / p.vps_in;
    const int q = (v - g * p.vps_in) * VE;
    int at = q;
    int row = 0;
    const int cis = p.inner_in > 0 ? q / p.inner_in : 0;
    int cos = p.same_cut ? cis : 0;
#pragma unroll 1
    for (int k = 0; k < p.n_oin; ++k) {
        const int c = g % p.oin_ext[k];
        g = g / p.oin_ext[k];
        at += c * p.oin_in[k];
        row += c * p.oin_row[k];
        if (k == p.k_os_in) cos = c;
    }
    return Slot{at, row, q, cis, cos};
}

// Which vector of which output segment store slot u takes: each warp's lanes take lanes_seg consecutive
// vectors of each of 32 / lanes_seg segments, so that a store instruction writes whole sectors while its
// gathers read many rows at once. Returns (segment, position in it), or segment -1 past the box's vectors.
__device__ __forceinline__ RowCol store_order(const StagedParams& p, const int u, const int VE) {
    const int groups = 32 / p.lanes_seg;
    const int k_lo = u % p.lanes_seg;
    const int t = u / p.lanes_seg;
    const int g_lo = t % groups;
    const int t2 = t / groups;
    const int chunks = p.vps_pad / p.lanes_seg;
    const int k = (t2 % chunks) * p.lanes_seg + k_lo;
    const int g = (t2 / chunks) * groups + g_lo;
    return g < p.nseg && k < p.vps_out ? RowCol{g, k * VE} : RowCol{-1, 0};
}

// Store vector at position q of output segment g of a box (the row and column are those of the segment's
// first element; segment_place and next_place give each element's).
__device__ __forceinline__ Slot store_slot(const StagedParams& p, const RowCol gq) {
    if (gq.row < 0) return Slot{0, 0, 0, STAGED_UNCUT, STAGED_UNCUT};
    int g = gq.row;
    const int q = gq.col;
    int at = q;
    int row = 0;
    int col = 0;
    const int cos = p.inner_out > 0 ? q / p.inner_out : 0;
    int cis = p.same_cut ? cos : 0;
#pragma unroll 1
    for (int k = 0; k < p.n_oout; ++k) {
        const int c = g % p.oout_ext[k];
        g = g / p.oout_ext[k];
        at += c * p.oout_out[k];
        row += c * p.oout_row[k];
        col += c * p.oout_col[k];
        if (k == p.k_is_out) cis = c;
    }
    return Slot{at, row, col, cis, cos};
}

// The buffer place of position q of an output segment whose first element is at s's row and column, with
// the position's coordinates (fastest first) left in c.
__device__ __forceinline__ RowCol segment_place(const StagedParams& p, const Slot& s, const int q, int* c) {
    int rest = q;
    int row = s.row;
    int col = s.col;
#pragma unroll 1
    for (int k = 0; k < p.n_sout; ++k) {
        c[k] = rest % p.sout_ext[k];
        rest = rest / p.sout_ext[k];
        row += c[k] * p.sout_row[k];
        col += c[k] * p.sout_col[k];
    }
    return RowCol{row, col};
}

// The buffer place of the next position of an output segment: coordinates c advanced by one, with carries.
__device__ __forceinline__ RowCol next_place(const StagedParams& p, const RowCol at, int* c) {
    int row = at.row;
    int col = at.col;
#pragma unroll 1
    for (int k = 0; k < p.n_sout; ++k) {
        c[k] += 1;
        row += p.sout_row[k];
        col += p.sout_col[k];
        if (c[k] < p.sout_ext[k]) return RowCol{row, col};
        row -= c[k] * p.sout_row[k];
        col -= c[k] * p.sout_col[k];
        c[k] = 0;
    }
    return RowCol{row, col};
}

// Box t: its offsets and the extents left along the cut dimensions.
__device__ __forceinline__ Box box_of(const StagedParams& p, const int t) {
    tf_u32 rest = static_cast<tf_u32>(t);
    tf_i64 at_in = 0;
    tf_i64 at_out = 0;
    int lim_is = p.cut_is;
    int lim_os = p.cut_os;
#pragma unroll 1
    for (int k = 0; k < p.n_tile; ++k) {
        const tf_u32 q = quotient(rest, p.tile_magic[k], p.tile_shift[k]);
        const int c = static_cast<int>(rest - q * static_cast<tf_u32>(p.tile_count[k]));
        rest = q;
        at_in += c * p.tile_in[k];
        at_out += c * p.tile_out[k];
        if (k == p.ti_is) lim_is = p.size_is - c * p.cut_is < p.cut_is ? p.size_is - c * p.cut_is : p.cut_is;
        if (k == p.ti_os) lim_os = p.size_os - c * p.cut_os < p.cut_os ? p.size_os - c * p.cut_os : p.cut_os;
    }
    return Box{at_in, at_out, lim_is, lim_os};
}

template <int N> struct Bytes;
template <> struct Bytes<4> { typedef tf_u32 T; };
template <> struct Bytes<8> { typedef uint2 T; };
template <> struct Bytes<16> { typedef uint4 T; };

// One element of ES bytes from the buffer, as the 32-bit words it fills (ES = 8: two).
template <int ES> __device__ __forceinline__ tf_u32 element(const tf_u8* at);
template <> __device__ __forceinline__ tf_u32 element<1>(const tf_u8* at) { return *at; }
template <> __device__ __forceinline__ tf_u32 element<2>(const tf_u8* at) {
    return *reinterpret_cast<const tf_u16*>(at);
}
template <> __device__ __forceinline__ tf_u32 element<4>(const tf_u8* at) {
    return *reinterpret_cast<const tf_u32*>(at);
}

// The VO bytes of a store vector as words: element e of ES bytes at byte offsets sm[e] of the buffer; where
// VEC, the elements lie in order at sm[0], which is VO-aligned, and are read in one access.
template <int ES, int VO, bool VEC>
__device__ __forceinline__ void gather(const tf_u8* buf, const int* sm, tf_u32* w) {
    if constexpr (VEC) {
        const typename Bytes<VO>::T v = *reinterpret_cast<const typename Bytes<VO>::T*>(buf + sm[0]);
        if constexpr (VO == 4) {
            w[0] = v;
        } else if constexpr (VO == 8) {
            w[0] = v.x;
            w[1] = v.y;
        } else {
            w[0] = v.x;
            w[1] = v.y;
            w[2] = v.z;
            w[3] = v.w;
        }
    } else if constexpr (ES == 8) {
#pragma unroll
        for (int e = 0; e < VO / 8; ++e) {
            const uint2 v = *reinterpret_cast<const uint2*>(buf + sm[e]);
            w[2 * e] = v.x;
            w[2 * e + 1] = v.y;
        }
    } else if constexpr (ES == 4) {
#pragma unroll
        for (int e = 0; e < VO / 4; ++e) w[e] = element<4>(buf + sm[e]);
    } else if constexpr (ES == 2) {
#pragma unroll
        for (int i = 0; i < VO / 4; ++i)
            w[i] = __byte_perm(element<2>(buf + sm[2 * i]), element<2>(buf + sm[2 * i + 1]), 0x5410);
    } else {
#pragma unroll
        for (int i = 0; i < VO / 4; ++i) {
            const tf_u32 lo = __byte_perm(element<1>(buf + sm[4 * i]), element<1>(buf + sm[4 * i + 1]), 0x0040);
            const tf_u32 hi = __byte_perm(element<1>(buf + sm[4 * i + 2]), element<1>(buf + sm[4 * i + 3]), 0x0040);
            w[i] = __byte_perm(lo, hi, 0x5410);
        }
    }
}

template <int N> __device__ __forceinline__ void put(tf_u8* at, const tf_u32* w);
template <> __device__ __forceinline__ void put<4>(tf_u8* at, const tf_u32* w) {
    *reinterpret_cast<tf_u32*>(at) = w[0];
}
template <> __device__ __forceinline__ void put<8>(tf_u8* at, const tf_u32* w) {
    *reinterpret_cast<uint2*>(at) = make_uint2(w[0], w[1]);
}
template <> __device__ __forceinline__ void put<16>(tf_u8* at, const tf_u32* w) {
    *reinterpret_cast<uint4*>(at) = make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ bool holds(const Slot& s, const Box& b) { return s.cis < b.lim_is && s.cos < b.lim_os; }

// One load vector copied from global to shared memory without passing through registers (cp.async): 16
// bytes through L2 only, 4 and 8 bytes through L1 (the only sizes the .cg form takes are 16).
template <int VI> __device__ __forceinline__ void copy_async(tf_u8* to, const tf_u8* from) {
    const tf_u32 at = static_cast<tf_u32>(__cvta_generic_to_shared(to));
    if constexpr (VI == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(at), "l"(from) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(at), "l"(from), "n"(VI) : "memory");
    }
}

template <int ES, int VI, int VO, bool VEC>
__device__ __forceinline__ void staged(const tf_u8* __restrict__ x, tf_u8* __restrict__ out, const StagedParams& p) {
    constexpr int LPT = STAGED_BOX_BYTES / (STAGED_THREADS * VI);
    constexpr int SPT = STAGED_BOX_BYTES / (STAGED_THREADS * VO);
    constexpr int EPV = VO / ES;
    __shared__ __align__(16) tf_u8 buf[STAGED_STAGES][STAGED_BUF_BYTES];
    __shared__ Box boxes[STAGED_STAGES + 1];
    const int tid = threadIdx.x;

    Slot ls[LPT];
    int lsm[LPT];
#pragma unroll
    for (int i = 0; i < LPT; ++i) {
        ls[i] = load_slot(p, tid + STAGED_THREADS * i, VI / ES);
        lsm[i] = ES * buffer_at(p, ls[i].row, ls[i].col);
    }
    Slot ss[SPT];
    int sm[SPT][EPV];
#pragma unroll
    for (int j = 0; j < SPT; ++j) {
        const RowCol gq = store_order(p, tid + STAGED_THREADS * j, EPV);
        ss[j] = store_slot(p, gq);
        int c[STAGED_DIMS];
        RowCol at = segment_place(p, ss[j], gq.row < 0 ? 0 : gq.col, c);
        sm[j][0] = ES * buffer_at(p, at.row, at.col);
#pragma unroll
        for (int e = 1; e < EPV; ++e) {
            at = next_place(p, at, c);
            sm[j][e] = ES * buffer_at(p, at.row, at.col);
        }
    }

    // Box k of this block is blockIdx.x + k * gridDim.x; its copies are issued STAGES - 1 boxes ahead,
    // into buffer k % STAGES, and thread 0 finds its place a box before that, in boxes[k % (STAGES + 1)].
    const int first = blockIdx.x;
    const int step = gridDim.x;
    if (tid == 0) {
#pragma unroll 1
        for (int k = 0; k < STAGED_STAGES - 1; ++k)
            if (first + k * step < p.tiles) boxes[k] = box_of(p, first + k * step);
    }
    __syncthreads();
#pragma unroll 1
    for (int k = 0; k < STAGED_STAGES - 1; ++k) {
        if (first + k * step < p.tiles) {
            const Box b = boxes[k];
            tf_u8* const to = buf[k];
#pragma unroll
            for (int i = 0; i < LPT; ++i)
                if (holds(ls[i], b)) copy_async<VI>(to + lsm[i], x + (b.at_in + ls[i].at) * ES);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
#pragma unroll 1
    for (int k = 0; first + k * step < p.tiles; ++k) {
        const int later = first + (k + STAGED_STAGES - 1) * step;
        const int later_info = (k + STAGED_STAGES - 1) % (STAGED_STAGES + 1);
        if (tid == 0 && later < p.tiles) boxes[later_info] = box_of(p, later);
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGED_STAGES - 2) : "memory");
        __syncthreads();  // box k is in its buffer; every thread is done with box k - 1's
        if (later < p.tiles) {
            const Box b = boxes[later_info];
            tf_u8* const to = buf[(k + STAGED_STAGES - 1) % STAGED_STAGES];
#pragma unroll
            for (int i = 0; i < LPT; ++i)
                if (holds(ls[i], b)) copy_async<VI>(to + lsm[i], x + (b.at_in + ls[i].at) * ES);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        const Box cur = boxes[k % (STAGED_STAGES + 1)];
        const tf_u8* const from = buf[k % STAGED_STAGES];
#pragma unroll
        for (int j = 0; j < SPT; ++j) {
            if (holds(ss[j], cur)) {
                tf_u32 w[VO / 4];
                gather<ES, VO, VEC>(from, sm[j], w);
                put<VO>(out + (cur.at_out + ss[j].at) * ES, w);
            }
        }
    }
}

#define STAGED_KERNEL(ES, VI, VO, VEC, SUFFIX)                                                              \
    extern "C" __global__ void __launch_bounds__(STAGED_THREADS)                                            \
        permute_staged_e##ES##_i##VI##_o##VO##SUFFIX(const tf_u8* __restrict__ x, tf_u8* __restrict__ out,  \
                                                      const StagedParams p) {                               \
        staged<ES, VI, VO, VEC>(x, out, p);                                                                 \
    }

// Each pair of widths twice: elements gathered one by one, and whole vectors that lie in order in the buffer.
#define STAGED_PAIR(ES, VI, VO) STAGED_KERNEL(ES, VI, VO, false, ) STAGED_KERNEL(ES, VI, VO, true, _v)

#define STAGED_WIDTHS(ES) \
    STAGED_PAIR(ES, 4, 4) STAGED_PAIR(ES, 4, 8) STAGED_PAIR(ES, 4, 16) \
    STAGED_PAIR(ES, 8, 4) STAGED_PAIR(ES, 8, 8) STAGED_PAIR(ES, 8, 16) \
    STAGED_PAIR(ES, 16, 4) STAGED_PAIR(ES, 16, 8) STAGED_PAIR(ES, 16, 16)

STAGED_WIDTHS(1)
STAGED_WIDTHS(2)
STAGED_WIDTHS(4)
STAGED_PAIR(8, 8, 8)
STAGED_PAIR(8, 8, 16)
STAGED_PAIR(8, 16, 8)
STAGED_PAIR(8, 16, 16)
