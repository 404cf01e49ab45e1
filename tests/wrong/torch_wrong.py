"""Plain torch stand-ins for a transpose that make its common mistakes, one per function.

They run no kernel, so a check of them costs only the child's start. ``reshape`` returns its output (the
``f(x) -> y`` form); the others write into ``out`` (the ``f(x, out)`` form).
"""

TILE = 16  # the tile of ``tiles_in_place``: another size than the Triton kernels', found from the output alone
CORNER = 32  # the side of the block ``corner_block`` transposes


def reshape(x):
    """x.reshape for x.t(): the right shape, x's elements in x's order."""
    return x.reshape(x.shape[1], x.shape[0]).clone()


def identity_copy(x, out):
    """x's elements copied into out in x's order, out.view(-1) == x.reshape(-1), as if it were the transpose."""
    out.view(-1).copy_(x.reshape(-1))


def corner_block(x, out):
    """Only the top-left CORNER x CORNER block of x is transposed; the rest of out is never written."""
    out[:CORNER, :CORNER] = x[:CORNER, :CORNER].t()


def tiles_in_place(x, out):
    """Each TILE x TILE tile transposed but stored at its own tile position: output block (tm, tn) gets
    x's tile (tm, tn) transposed, where x's tile (tn, tm) belongs; what falls outside out is dropped."""
    M, N = x.shape
    for r0 in range(0, M, TILE):
        for c0 in range(0, N, TILE):
            tile = x[r0 : r0 + TILE, c0 : c0 + TILE].t()  # rows from c0, columns from r0
            rows, cols = min(tile.shape[0], max(0, N - r0)), min(tile.shape[1], max(0, M - c0))
            out[r0 : r0 + rows, c0 : c0 + cols] = tile[:rows, :cols]
