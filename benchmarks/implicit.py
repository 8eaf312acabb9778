"""Implicit-array benchmarks: an NF4-quantized weight (4096x4096, batch 16) under jit.

Rows (the "JAX" column holds the baseline each row compares against):
1. Memory of the stored weight: NF4 (packed codes + f32 scales) vs the float32 weight.
   Target <= 0.14 (4 bits + 32 bits per 64 values = 0.1406).
2. `jit(implicit(x @ W_nf4))` (the dequantizing dot_general handler) vs a float32 matmul
   `jit(x @ W)`: the price of dequantizing in the program.
3. The handler vs materialize-then-matmul (`jit(x @ W_nf4.materialize())`, dequantize the
   whole weight inside the program, then one dot).
4. The handler vs materializing outside the program (eager `materialize()`, then the float32
   matmul), which is what the memory saving forbids.

Run: python -m benchmarks.implicit [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks.common import report


def _time(fn, repeats: int) -> float:
  fn()   # compile and warm up
  ts = []
  for _ in range(repeats):
    t = time.perf_counter()
    fn()
    ts.append(time.perf_counter() - t)
  return statistics.median(ts) * 1e3


def run(n: int, batch: int, repeats: int):
  import stagecraft as sc
  from stagecraft.implicit import implicit
  from stagecraft.implicit.quantization import ArrayNF4
  rng = np.random.default_rng(0)
  w = rng.standard_normal((n, n)).astype(np.float32)
  x = sc.device_put(rng.standard_normal((batch, n)).astype(np.float32))
  wd = sc.device_put(w)
  q = ArrayNF4.quantize(wd)
  q = sc.tree_util.tree_map(lambda a: a, q)

  f32_mm = sc.jit(lambda x, w: x @ w)
  nf4_mm = sc.jit(implicit(lambda x, q: x @ q))
  mat_mm = sc.jit(lambda x, q: x @ q.materialize())

  def outside():
    return f32_mm(x, q.materialize())

  block = lambda out: out.block_until_ready()
  t_f32 = _time(lambda: block(f32_mm(x, wd)), repeats)
  t_nf4 = _time(lambda: block(nf4_mm(x, q)), repeats)
  t_mat = _time(lambda: block(mat_mm(x, q)), repeats)
  t_out = _time(lambda: block(outside()), repeats)
  err = float(np.abs(np.asarray(nf4_mm(x, q)) - np.asarray(mat_mm(x, q))).max())
  mb = 1 / 2 ** 20
  return [
      (f"NF4 weight bytes vs f32 ({n}x{n}, MiB)", q.nbytes * mb, w.nbytes * mb, "MB", 0.1406),
      (f"NF4 matmul vs f32 matmul (b={batch})", t_nf4, t_f32, "ms", 3.0),
      ("NF4 handler vs materialize-then-matmul", t_nf4, t_mat, "ms", 1.2),
      ("NF4 handler vs materialize outside", t_nf4, t_out, "ms", 1.0),
  ], err


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
  ap.add_argument("--quick", action="store_true", help="a 1024x1024 weight, few repeats")
  ap.add_argument("--json", default=None, help="write the results to this file")
  args = ap.parse_args(argv)
  n, repeats = (1024, 3) if args.quick else (4096, 10)
  rows, err = run(n, 16, repeats)
  print(f"max |handler - materialize-then-matmul| = {err:.2e}")
  return report(rows, args.json)


if __name__ == "__main__":
  main()
