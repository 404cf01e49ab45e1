"""Child process of ``tileflip bench``: JAX/XLA transposes, timed apart from torch.

Reads {"cases": [[shape, dtype], ...], "quick": bool} on stdin; prints {"ms": {label: ms}, "jax": version}.
JAX has no L2 flush or device events here, so each case is timed by wall clock around a blocked
call (median of repetitions after warm-up); for the small cases that includes JAX's dispatch.
"""

import json
import statistics
import sys
import time


def main() -> None:
    import jax
    import jax.numpy as jnp

    req = json.loads(sys.stdin.read())
    uint = {"int8": jnp.uint8, "bfloat16": jnp.uint16, "float16": jnp.uint16, "float8_e4m3fn": jnp.uint8,
            "float32": jnp.uint32, "int32": jnp.uint32, "float64": jnp.uint64, "complex64": jnp.uint64}  # fmt: skip
    jax.config.update("jax_enable_x64", True)
    transpose = jax.jit(lambda a: a.T)
    result = {}
    for shape, dtype in req["cases"]:
        a = jnp.ones(shape, dtype=uint[dtype])
        transpose(a).block_until_ready()
        times = []
        for _ in range(20 if req["quick"] else 50):
            t0 = time.perf_counter()
            transpose(a).block_until_ready()
            times.append((time.perf_counter() - t0) * 1e3)
        result[f"{'x'.join(map(str, shape))} {dtype}"] = statistics.median(times)
        del a
    print(json.dumps({"ms": result, "jax": jax.__version__}))


if __name__ == "__main__":
    main()
