"""Foundation benchmarks: jit dispatch, eager op dispatch, make_jaxpr of a long chain.

Each benchmark times stagecraft and JAX alternately in the same process (interleaved
repeats) and reports medians and the ratio stagecraft / JAX (lower is better).

Run: python -m benchmarks.foundation [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks.common import report


def _per_call_us(fn, n: int) -> float:
  t = time.perf_counter()
  for _ in range(n):
    fn()
  return (time.perf_counter() - t) / n * 1e6


def interleaved(ours, theirs, *, n: int, repeats: int, warmup: int = 200):
  for _ in range(warmup):
    ours(), theirs()
  a, b = [], []
  for _ in range(repeats):
    a.append(_per_call_us(ours, n))
    b.append(_per_call_us(theirs, n))
  return statistics.median(a), statistics.median(b)


def bench_jit_dispatch(n, repeats):
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  fs = sc.jit(lambda x, y: x * y + 1.0)
  fj = jax.jit(lambda x, y: x * y + 1.0)
  xs, ys = sc.device_put(np.float32(1)), sc.device_put(np.float32(2))
  xj, yj = jjnp.float32(1), jjnp.float32(2)
  return interleaved(lambda: fs(xs, ys), lambda: fj(xj, yj), n=n, repeats=repeats)


def bench_eager_add(n, repeats):
  import jax.numpy as jjnp
  import stagecraft.numpy as jnp
  xs, ys = jnp.ones(8), jnp.ones(8)
  xj, yj = jjnp.ones(8), jjnp.ones(8)
  return interleaved(lambda: xs + ys, lambda: xj + yj, n=n, repeats=repeats)


def bench_make_jaxpr_chain(length, repeats):
  """make_jaxpr of an elementwise chain; a fresh function each time (JAX caches traces of
  the same function object)."""
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  x = np.ones(8, np.float32)

  def make(mod):
    def chain(x):
      for i in range(length):
        x = mod.sin(x) if i % 2 else x * 1.5
      return x
    return chain

  def ours():
    sc.make_jaxpr(make(jnp))(x)

  def theirs():
    jax.make_jaxpr(make(jjnp))(x)

  ours(), theirs()
  a, b = [], []
  for _ in range(repeats):
    a.append(_per_call_us(ours, 1) / 1e3)
    b.append(_per_call_us(theirs, 1) / 1e3)
  return statistics.median(a), statistics.median(b)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  args = ap.parse_args(argv)
  n, reps = (500, 3) if args.quick else (20000, 7)
  rows = []
  a, b = bench_jit_dispatch(n, reps)
  rows.append(("jit dispatch, tiny fn on scalars", a, b, "us", 2.0))
  a, b = bench_eager_add(n, reps)
  rows.append(("eager x + y, f32[8]", a, b, "us", 1.5))
  a, b = bench_make_jaxpr_chain(2000 if not args.quick else 200, 5 if not args.quick else 2)
  rows.append(("make_jaxpr, 2000-eqn chain", a, b, "ms", 1.0))
  return report(rows, args.json)


if __name__ == "__main__":
  main()
