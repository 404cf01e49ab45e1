"""The planner: pure CPU index geometry of every launch, 2-D and N-D, and the one dtype table.

No torch and no triton: ``tileflip plan``, the analyzer and the checker use it without a GPU stack.
"""

from tileflip.plan.dtypes import ELEMENT_SIZE, dtype_name, element_size  # noqa: F401
from tileflip.plan.grid import (  # noqa: F401
    MAX_GRID_X,
    MAX_GRID_YZ,
    MAX_TILE_ELEMENTS,
    WARP_COUNTS,
    TileConfig,
    TileMasks,
    TransposeGrid,
    cdiv,
    check_tile,
    loop_rounds,
    magic_divisor,
    owner_of,
    program_coverage,
    program_offsets,
    specialization_class,
    tile_layout,
    tile_masks,
    transpose_grid,
)
from tileflip.plan.permute import (  # noqa: F401
    MAX_RANK,
    MIN_RUN_BYTES,
    PERMUTE_KINDS,
    TRANSPOSE2D_MIN_BYTES,
    PermutePlan,
    check_perm,
    contiguous_strides,
    innermost_runs,
    merge_dims,
    plan_permute,
    regrouped,
)
