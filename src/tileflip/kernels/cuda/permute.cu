// N-D permutes of 1- and 2-byte elements with 16-byte accesses on both sides, where neither the input's
// rows nor the output's need start on a 16-byte boundary (odd sizes: an int8 permute whose output runs
// are 429 bytes long), for tileflip.tuning.vec_permute_launch's plans.
//
// The permute is seen as a batch of 2-D transposes between two runs: axis A, a run of the input that is
// contiguous (unit stride over its merged dimensions), and axis B, a run of the output that is
// contiguous. Tile rows are B indices, tile columns A indices, as in transpose.cu's vec kernel (B is
// that kernel's M, the input rows; A its N). A block moves 128 rows x 128 bytes of one batch element:
//
// * Load (vec_load, vec_tile.cuh): each row's piece of A is read as 16-byte words from the 16-byte
//   boundary below its start and funnel-shifted into the swizzled shared tile.
// * Store: vec_pieces turns word columns of the tile into 16-byte pieces of output rows (one output row
//   per A index: its B run), 8 lanes holding 8 consecutive pieces of one output row. Where that row's
//   start is not 16-byte aligned (its misalignment s), a lane writes the aligned 16 bytes that end inside
//   its piece: the previous lane's piece funnel-shifted with its own (a warp shuffle). The two partial
//   chunks at the ends of a row (and a tail's last one) are written in aligned 8/4/2/1-byte stores, so
//   no byte outside the block's part of the output is written: neighbouring blocks write the rest of
//   those 16 bytes.
//
// Indices: the B index of a row decodes to its input offset over B's dimensions, the A index of a
// column to its output offset over A's dimensions, the batch element to both, with up to VEC_AXIS_DIMS
// (VEC_BATCH_DIMS) dimensions, innermost first; each division by a size is a multiply-high and a shift
// by host-computed magic numbers (tileflip.plan.magic_divisor: exact for indices below 2^31, which the
// planner guarantees). Offsets are 64-bit. The output must be 16-byte aligned (tileflip.ops checks).
// Includes no system header (NVRTC has no standard library search path), only vec_tile.cuh.

#include "vec_tile.cuh"

namespace tileflip {

constexpr int VEC_AXIS_DIMS = 4;
constexpr int VEC_BATCH_DIMS = 6;

// The kernel's one parameter, laid out as tileflip.kernels.cuda_permute._Args: 64-bit fields first.
struct PermuteVecArgs {
    const tf_u8* in;
    tf_u8* out;
    tf_i64 a_out[VEC_AXIS_DIMS];   // output strides (elements) of A's dimensions
    tf_i64 b_in[VEC_AXIS_DIMS];    // input strides of B's dimensions
    tf_i64 n_in[VEC_BATCH_DIMS];   // input and output strides of the batch's dimensions
    tf_i64 n_out[VEC_BATCH_DIMS];
    tf_u32 a_size[VEC_AXIS_DIMS], a_magic[VEC_AXIS_DIMS], a_shift[VEC_AXIS_DIMS];
    tf_u32 b_size[VEC_AXIS_DIMS], b_magic[VEC_AXIS_DIMS], b_shift[VEC_AXIS_DIMS];
    tf_u32 n_size[VEC_BATCH_DIMS], n_magic[VEC_BATCH_DIMS], n_shift[VEC_BATCH_DIMS];
    tf_u32 na, nb, nn;             // dimensions of A, B and the batch (at least 1 each)
    tf_u32 size_a, size_b;         // elements along A and B
    tf_u32 tiles_a, tiles_b;       // tiles along A (consecutive blocks) and along B
};
static_assert(sizeof(PermuteVecArgs) == 376, "the launcher's ctypes struct is laid out for 376 bytes");

// The offset of index i over n dimensions (innermost first): the outermost takes no division.
template <int MAXD>
__device__ __forceinline__ tf_i64 decode(tf_u32 i, tf_u32 n, const tf_u32* size, const tf_u32* magic,
                                         const tf_u32* shift, const tf_i64* stride) {
    tf_i64 off = 0;
#pragma unroll
    for (int d = 0; d < MAXD; ++d) {
        if (d + 1 >= static_cast<int>(n)) {
            off += static_cast<tf_i64>(i) * stride[d];
            break;
        }
        const tf_u32 q = __umulhi(i, magic[d]) >> shift[d];
        off += static_cast<tf_i64>(i - q * size[d]) * stride[d];
        i = q;
    }
    return off;
}

// Bytes [lo, hi) of v (0 <= lo < hi <= 16) to the same bytes of the 16-byte aligned chunk, in aligned
// stores of 8, 4, 2 or 1 bytes.
__device__ __forceinline__ void store_bytes(tf_u8* chunk, uint4 v, int lo, int hi) {
    const tf_u64 h0 = static_cast<tf_u64>(v.y) << 32 | v.x;
    const tf_u64 h1 = static_cast<tf_u64>(v.w) << 32 | v.z;
    while (lo < hi) {
        const tf_u64 word = (lo < 8 ? h0 : h1) >> ((lo & 7) * 8);
        if ((lo & 7) == 0 && lo + 8 <= hi) {
            *reinterpret_cast<tf_u64*>(chunk + lo) = word;
            lo += 8;
        } else if ((lo & 3) == 0 && lo + 4 <= hi) {
            *reinterpret_cast<tf_u32*>(chunk + lo) = static_cast<tf_u32>(word);
            lo += 4;
        } else if ((lo & 1) == 0 && lo + 2 <= hi) {
            *reinterpret_cast<tf_u16*>(chunk + lo) = static_cast<tf_u16>(word);
            lo += 2;
        } else {
            chunk[lo] = static_cast<tf_u8>(word);
            lo += 1;
        }
    }
}

__device__ __forceinline__ uint4 shfl_up1(uint4 v) {
    return make_uint4(__shfl_up_sync(0xffffffffu, v.x, 1), __shfl_up_sync(0xffffffffu, v.y, 1),
                      __shfl_up_sync(0xffffffffu, v.z, 1), __shfl_up_sync(0xffffffffu, v.w, 1));
}

__device__ __forceinline__ uint4 shfl_from(uint4 v, int lane) {
    return make_uint4(__shfl_sync(0xffffffffu, v.x, lane), __shfl_sync(0xffffffffu, v.y, lane),
                      __shfl_sync(0xffffffffu, v.z, lane), __shfl_sync(0xffffffffu, v.w, lane));
}

template <int ES>
__device__ __forceinline__ void permute_vec(const PermuteVecArgs& p) {
    constexpr int COLS = VEC_ROW_BYTES / ES;   // A indices per tile: output rows
    constexpr int R = 16 / ES;                 // tile rows in one 16-byte piece
    constexpr int OUTS = 4 / ES;               // output rows one word column holds
    constexpr int PIECES = VEC_ROWS / R;       // pieces of one output row's part: 8 (1 byte) or 16 (2 bytes)
    constexpr int ITERS = PIECES / 8;
    __shared__ tf_u32 tile[VEC_ROWS * VEC_WORDS];

    const tf_u32 b = blockIdx.x;
    const tf_u32 tile_a = b % p.tiles_a;
    const tf_u32 rest = b / p.tiles_a;
    const tf_u32 tile_b = rest % p.tiles_b;
    const tf_u32 batch = rest / p.tiles_b;
    const tf_i64 n_in = decode<VEC_BATCH_DIMS>(batch, p.nn, p.n_size, p.n_magic, p.n_shift, p.n_in);
    const tf_i64 n_out = decode<VEC_BATCH_DIMS>(batch, p.nn, p.n_size, p.n_magic, p.n_shift, p.n_out);
    const tf_u32 a0 = tile_a * COLS;
    const tf_u32 b0 = tile_b * VEC_ROWS;
    const tf_u32 cols = p.size_a - a0 < COLS ? p.size_a - a0 : COLS;
    const tf_u32 rows = p.size_b - b0 < VEC_ROWS ? p.size_b - b0 : VEC_ROWS;
    const tf_u64 in = reinterpret_cast<tf_u64>(p.in);

    vec_load<ES>(tile, b0, p.size_b, static_cast<tf_i64>(cols) * ES, [&](tf_i64 grow) {
        const tf_i64 off = n_in + a0 + decode<VEC_AXIS_DIMS>(static_cast<tf_u32>(grow), p.nb, p.b_size, p.b_magic,
                                                             p.b_shift, p.b_in);
        return in + static_cast<tf_u64>(off * ES);
    });
    __syncthreads();

    const int tid = threadIdx.x;
    const int part = tid & 7;
    const int cw = tid >> 3;
    const int group_last = (tid & 31 & ~7) | 7;  // the lane holding this row group's last piece
    const int valid = static_cast<int>(rows) * ES;  // bytes of each output row's part
    tf_u8* base[OUTS];  // the 16-byte boundary at or below each output row's part
    int s[OUTS];        // its misalignment
#pragma unroll
    for (int j = 0; j < OUTS; ++j) {
        const tf_u32 c = static_cast<tf_u32>(cw * OUTS + j);
        const tf_u32 a = a0 + (c < cols ? c : 0);
        const tf_i64 off = n_out + b0 + decode<VEC_AXIS_DIMS>(a, p.na, p.a_size, p.a_magic, p.a_shift, p.a_out);
        const tf_u64 start = reinterpret_cast<tf_u64>(p.out) + static_cast<tf_u64>(off * ES);
        s[j] = static_cast<int>(start & 15);
        base[j] = reinterpret_cast<tf_u8*>(start - s[j]);
    }
    uint4 carry[OUTS];  // the previous iteration's last piece of each row
#pragma unroll
    for (int j = 0; j < OUTS; ++j) carry[j] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        const int g = part + 8 * it;
        uint4 o[OUTS];
        vec_pieces<ES>(tile, g, cw, o);
#pragma unroll
        for (int j = 0; j < OUTS; ++j) {
            uint4 prev = shfl_up1(o[j]);
            if (part == 0) prev = it == 0 ? make_uint4(0, 0, 0, 0) : carry[j];
            carry[j] = shfl_from(o[j], group_last);
            if (cw * OUTS + j >= static_cast<int>(cols)) continue;
            // aligned chunk g: bytes [16 g - s, 16 g - s + 16) of the row's part; chunk PIECES (the bytes
            // past the last aligned boundary) by the lane of the last piece
            const int sh = s[j];
            const uint4 data = sh ? funnel16(prev, o[j], 16 - sh) : o[j];
            const int lo = sh - 16 * g > 0 ? sh - 16 * g : 0;
            const int hi = valid - 16 * g + sh < 16 ? valid - 16 * g + sh : 16;
            tf_u8* chunk = base[j] + 16 * g;
            if (lo == 0 && hi == 16) {
                *reinterpret_cast<uint4*>(chunk) = data;
            } else if (lo < hi) {
                store_bytes(chunk, data, lo, hi);
            }
            if (sh && g == PIECES - 1) {
                const int end = valid - 16 * PIECES + sh;  // bytes of the row in chunk PIECES
                if (end > 0) store_bytes(chunk + 16, funnel16(o[j], make_uint4(0, 0, 0, 0), 16 - sh), 0, end);
            }
        }
    }
}

}  // namespace tileflip

extern "C" __global__ void __launch_bounds__(256) permute_vec_u8(const tileflip::PermuteVecArgs args) {
    tileflip::permute_vec<1>(args);
}
extern "C" __global__ void __launch_bounds__(256) permute_vec_u16(const tileflip::PermuteVecArgs args) {
    tileflip::permute_vec<2>(args);
}
