"""The planner: pure CPU index geometry of every launch (no torch, no triton)."""

from tileflip.plan.core import *  # noqa: F401,F403
from tileflip.plan.dtypes import ELEMENT_SIZE, dtype_name, element_size  # noqa: F401,E402
