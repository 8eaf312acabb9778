"""Library functions against JAX in the same process, each jitted and timed in steady state
(compiled, inputs on device, results awaited; the two sides alternate, `paired`):

1. `scipy.linalg.cho_solve((cholesky(a, lower=True), True), b)`: a 512x512 SPD system with
   one right-hand side, float32.
2. `scipy.stats.norm.logpdf(x)` on 1M float32 points.
3. `ops.segment_sum(x, ids, num_segments=1000)`: 1M float32 values into 1k segments (ids
   uniform at random, unsorted).

Each ratio is stagecraft / JAX (lower is better; target <= 1.05). `lowered_text` gives both
StableHLO programs of a row, for comparing them when a ratio misses its target.

On CPU both libraries run the factorization with the LAPACK that jaxlib takes from SciPy
(OpenBLAS). The timings run with OpenBLAS limited to one thread (`threadpoolctl`, when it is
installed): with two threads on a loaded 2-core machine a 512x512 `spotrf` took ~400 ms
instead of ~2 ms on both sides, which measured the machine's scheduler, not the programs.

Run: python -m benchmarks.scipy_ops [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import contextlib

import numpy as np

from benchmarks.common import report
from benchmarks.convnet import paired

N_SPD = 512
N_POINTS = 1 << 20
N_SEGMENTS = 1000


def _spd_system(n: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  g = rng.standard_normal((n, n)).astype(np.float32)
  a = (g @ g.T / n + np.eye(n, dtype=np.float32)).astype(np.float32)
  return a, rng.standard_normal(n).astype(np.float32)


def _cho_solve(lib):
  linalg = lib.scipy.linalg
  return lambda a, b: linalg.cho_solve((linalg.cholesky(a, lower=True), True), b)


def _norm_logpdf(lib):
  return lambda x: lib.scipy.stats.norm.logpdf(x)


def _segment_sum(lib):
  return lambda x, ids: lib.ops.segment_sum(x, ids, num_segments=N_SEGMENTS)


def cases():
  """{row key: (function of a library's top-level module, host inputs, rtol)}."""
  rng = np.random.default_rng(1)
  a, b = _spd_system(N_SPD)
  x = rng.standard_normal(N_POINTS).astype(np.float32)
  ids = rng.integers(0, N_SEGMENTS, N_POINTS).astype(np.int32)
  return {"cho_solve": (_cho_solve, (a, b), 1e-3),
          "norm_logpdf": (_norm_logpdf, (x,), 1e-5),
          "segment_sum": (_segment_sum, (x, ids), 1e-3)}


def _libs():
  import jax
  import jax.numpy  # noqa: F401 - loads the submodules the cases use
  import jax.ops  # noqa: F401
  import jax.scipy.linalg  # noqa: F401
  import jax.scipy.stats  # noqa: F401
  import stagecraft as sc
  import stagecraft.ops  # noqa: F401
  import stagecraft.scipy.linalg  # noqa: F401
  import stagecraft.scipy.stats  # noqa: F401
  return sc, jax


def setup(key: str):
  """Both jitted calls of case `key` with their device inputs; checks that they agree."""
  sc, jax = _libs()
  make, args, rtol = cases()[key]
  fs, fj = sc.jit(make(sc)), jax.jit(make(jax))
  xs = [sc.device_put(v) for v in args]
  xj = [jax.device_put(v) for v in args]
  np.testing.assert_allclose(np.asarray(fs(*xs)), np.asarray(fj(*xj)), rtol=rtol,
                             atol=rtol)
  return (lambda: fs(*xs).block_until_ready()), (lambda: fj(*xj).block_until_ready())


def lowered_text(key: str) -> tuple[str, str]:
  """(stagecraft's, JAX's) StableHLO text of case `key`."""
  sc, jax = _libs()
  make, args, _ = cases()[key]
  return (sc.jit(make(sc)).lower(*args).as_text(), jax.jit(make(jax)).lower(*args).as_text())


def _one_blas_thread():
  try:
    from threadpoolctl import threadpool_limits
  except ImportError:
    return contextlib.nullcontext()
  return threadpool_limits(1, user_api="blas")


def bench(key: str, pairs: int):
  """(ours, JAX) median microseconds per call of case `key`."""
  ours, theirs = setup(key)
  with _one_blas_thread():
    return paired(ours, theirs, pairs=pairs, warmup=3)


ROWS = [("cho_solve", "scipy cho_solve+cholesky 512x512 SPD, jit"),
        ("norm_logpdf", "scipy.stats.norm.logpdf 1M f32, jit"),
        ("segment_sum", "ops.segment_sum 1M -> 1k segments, jit")]


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  args = ap.parse_args(argv)
  pairs = 4 if args.quick else 500
  rows = [(name, *bench(key, pairs), "us", 1.05) for key, name in ROWS]
  return report(rows, args.json)


if __name__ == "__main__":
  main()
