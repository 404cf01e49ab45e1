"""Child process of ``tileflip bench``: JAX/XLA transposes, timed apart from torch.

Reads {"cases": [{"shape", "dtype", "perm" (null for a 2-D transpose), "label"}, ...], "quick": bool,
"check": bool} on stdin; prints {"ms": {label: ms}, "exact": {label: bool}, "jax": version}, "exact" when
"check" asked for each result to be compared bit for bit with numpy's (a host copy: for small cases).
JAX has no L2 flush or device events here, so each case is timed by wall clock over batches of
queued calls, blocked on once per batch (median over batches after warm-up). Without the flush the
small cases run from a warm L2, which favours XLA there.
"""

import json
import math
import statistics
import sys
import time


def main() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    req = json.loads(sys.stdin.read())
    uint = {"int8": jnp.uint8, "bfloat16": jnp.uint16, "float16": jnp.uint16, "float8_e4m3fn": jnp.uint8,
            "float32": jnp.uint32, "int32": jnp.uint32, "float64": jnp.uint64, "complex64": jnp.uint64}  # fmt: skip
    jax.config.update("jax_enable_x64", True)
    result, exact = {}, {}
    for case in req["cases"]:
        perm = tuple(case["perm"]) if case["perm"] else None
        transpose = jax.jit(lambda a, perm=perm: a.T if perm is None else jnp.transpose(a, perm))
        # Not all equal, so that a wrong result shows in the check.
        a = (jnp.arange(math.prod(case["shape"]), dtype=jnp.uint32) % 251 + 1).astype(uint[case["dtype"]])
        a = a.reshape(case["shape"])
        y = transpose(a).block_until_ready()
        if req.get("check"):
            exact[case["label"]] = bool(np.array_equal(np.asarray(y), np.transpose(np.asarray(a), perm)))
        # Calls are queued back to back and blocked on once per batch: the time per call is then
        # device time plus whatever host time the queue cannot hide, as for the torch figures.
        batch = 10
        times = []
        for _ in range(5 if req["quick"] else 15):
            t0 = time.perf_counter()
            for _ in range(batch):
                y = transpose(a)
            y.block_until_ready()
            times.append((time.perf_counter() - t0) * 1e3 / batch)
        result[case["label"]] = statistics.median(times)
        del a
    print(json.dumps({"ms": result, "exact": exact, "jax": jax.__version__}))


if __name__ == "__main__":
    main()
