"""Staging benchmarks against JAX in the same process.

1. `jit(f).lower(x)` of a 2000-equation elementwise chain, a fresh function each repeat
   (trace + lower to StableHLO text; JAX builds MLIR with Python builders). Target <= 0.7.
2. `lowered.compile()` of that chain: XLA's time in both (target ~1).
3. Warm start from the persistent compilation cache: time to the first result (after the
   imports) of a jitted MLP step in a fresh process with an empty cache directory (cold) and again with the cache
   the first process filled (warm); JAX is not involved (the row's "JAX" column is the cold
   time, so the ratio is warm / cold).
4. `jit(f).lower(x)` and `.compile()` of a function closing over a 4M-float (16 MB) array,
   which both libraries put in the program text as a dense constant (JAX 0.10.2's default):
   the text must stay linear in the constant's size (target ~1 for the sum of both).

Run: python -m benchmarks.staging [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks.common import report


def _chain(mod, length, scale=1.5):
  def chain(x):
    for i in range(length):
      x = mod.sin(x) if i % 2 else x * scale
    return x
  return chain


def bench_lower_compile(length: int, repeats: int):
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  x = np.ones(8, np.float32)
  lo_s, lo_j, co_s, co_j = [], [], [], []
  for i in range(repeats):
    for which in ((0, 1) if i % 2 == 0 else (1, 0)):
      t = time.perf_counter()
      if which == 0:
        # NB: a new constant each repeat, so no in-memory compile cache answers.
        lowered = sc.jit(_chain(jnp, length, 1.5 + i / 1024)).lower(x)
        lo_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        lowered.compile()
        co_s.append(time.perf_counter() - t)
      else:
        lowered = jax.jit(_chain(jjnp, length, 1.5 + i / 1024)).lower(x)
        lo_j.append(time.perf_counter() - t)
        t = time.perf_counter()
        lowered.compile()
        co_j.append(time.perf_counter() - t)
  med = lambda v: statistics.median(v) * 1e3
  return (med(lo_s), med(lo_j)), (med(co_s), med(co_j))


_FIRST_RESULT = """
import time, numpy as np
import stagecraft as sc, stagecraft.numpy as jnp
t0 = time.perf_counter()   # NB: after the imports, which the cache cannot speed up
sc.config.update("compilation_cache_dir", {cache!r})
sc.config.update("jax_persistent_cache_min_compile_time_secs", 0)
def loss(w, x):
  h = x
  for i in range(12):
    h = jnp.tanh(h @ w[i])
  return jnp.sum(h ** 2)
step = sc.jit(lambda w, x: sc.tree_util.tree_map(lambda a, g: a - 0.1 * g, w,
                                                 sc.grad(loss)(w, x)))
w = [np.eye(64, dtype=np.float32)] * 12
sc.block_until_ready(step(w, np.ones((32, 64), np.float32)))
print(time.perf_counter() - t0)
"""


def bench_warm_start(runs: int):
  cold, warm = [], []
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
  for _ in range(runs):
    with tempfile.TemporaryDirectory() as d:
      script = _FIRST_RESULT.format(cache=d)
      for out in (cold, warm):
        res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env=env, timeout=300, check=True)
        out.append(float(res.stdout.split()[-1]) * 1e3)
  return statistics.median(warm), statistics.median(cold)


def bench_big_constant(repeats: int, n: int = 4 * 1024 * 1024):
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  base = np.random.default_rng(0).standard_normal(n).astype(np.float32)
  x = np.float32(2.0)
  times = {0: [], 1: []}
  for i in range(repeats):
    c = base + np.float32(i)   # NB: a new constant each repeat: no cache answers
    for which in ((0, 1) if i % 2 == 0 else (1, 0)):
      lib, mod = (sc, jnp) if which == 0 else (jax, jjnp)
      t = time.perf_counter()
      compiled = lib.jit(lambda y: mod.sin(c) * y + c).lower(x).compile()
      times[which].append(time.perf_counter() - t)
      np.asarray(compiled(x))
  return statistics.median(times[0]) * 1e3, statistics.median(times[1]) * 1e3


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  args = ap.parse_args(argv)
  (ls, lj), (cs, cj) = bench_lower_compile(200 if args.quick else 2000,
                                           2 if args.quick else 6)
  ws, wc = bench_warm_start(1 if args.quick else 3)
  bs, bj = bench_big_constant(1 if args.quick else 3)
  rows = [("jit(f).lower(x), 2000-op chain", ls, lj, "ms", 0.7),
          ("lowered.compile(), same chain", cs, cj, "ms", 1.0),
          ("first result, warm cache vs cold", ws, wc, "ms", 1.0),
          ("lower+compile, 16 MB closed-over", bs, bj, "ms", 1.0)]
  return report(rows, args.json)


if __name__ == "__main__":
  main()
