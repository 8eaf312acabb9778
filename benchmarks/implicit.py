"""Implicit-array benchmarks: an NF4-quantized weight (4096x4096, batch 16) under jit.

Rows (the "JAX" column holds the baseline each row compares against):
1. Memory of the stored weight: NF4 with QLoRA's double quantization (packed codes, int8
   block scales, f32 scale and offset per 256 blocks) vs the float32 weight. Target <= 0.13
   (4 + 8/64 + 64/(64*256) bits per value: 0.1290).
2. `jit(implicit(x @ W_nf4))` (the dequantizing dot_general handler) vs a float32 matmul
   `jit(x @ W)`: the price of dequantizing in the program (issue 25: <= 1.5).
3. The handler vs materialize-then-matmul (`jit(x @ W_nf4.materialize())`, dequantize the
   whole weight inside the program, then one dot).
4. The handler vs materializing outside the program (eager `materialize()`, then the float32
   matmul), which is what the memory saving forbids.
5. `jit(implicit(x @ W_int8))` (blockwise int8, `Array8bit`) vs the float32 matmul (<= 1.3).

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
  from stagecraft.implicit.quantization import Array8bit, ArrayNF4
  rng = np.random.default_rng(0)
  w = rng.standard_normal((n, n)).astype(np.float32)
  x = sc.device_put(rng.standard_normal((batch, n)).astype(np.float32))
  wd = sc.device_put(w)
  q = ArrayNF4.quantize(wd)
  q = sc.tree_util.tree_map(lambda a: a, q)
  q8 = Array8bit.quantize(wd)

  f32_mm = sc.jit(lambda x, w: x @ w)
  nf4_mm = sc.jit(implicit(lambda x, q: x @ q))
  mat_mm = sc.jit(lambda x, q: x @ q.materialize())

  def outside():
    return f32_mm(x, q.materialize())

  block = lambda out: out.block_until_ready()
  # The jitted matmuls are timed in interleaved rounds (each round runs every one of them
  # `inner` times; the median over rounds is reported), so drifts in the load of a shared
  # machine reach the baseline and the quantized rows alike.
  jitted = {"f32": lambda: block(f32_mm(x, wd)), "nf4": lambda: block(nf4_mm(x, q)),
            "mat": lambda: block(mat_mm(x, q)), "i8": lambda: block(nf4_mm(x, q8))}
  for fn in jitted.values():
    fn()   # compile and warm up
  inner = 5 if n <= 1024 else 1
  per_round: dict = {k: [] for k in jitted}
  for _ in range(max(7, 3 * repeats)):
    for k, fn in jitted.items():
      t = time.perf_counter()
      for _ in range(inner):
        fn()
      per_round[k].append((time.perf_counter() - t) / inner)
  t_f32, t_nf4, t_mat, t_i8 = (statistics.median(per_round[k]) * 1e3
                               for k in ("f32", "nf4", "mat", "i8"))
  t_out = _time(lambda: block(outside()), repeats)
  err = float(np.abs(np.asarray(nf4_mm(x, q)) - np.asarray(mat_mm(x, q))).max())
  mb = 1 / 2 ** 20
  return [
      (f"NF4 weight bytes vs f32 ({n}x{n}, MiB)", q.nbytes * mb, w.nbytes * mb, "MB", 0.13),
      (f"NF4 matmul vs f32 matmul ({n}x{n}, b={batch})", t_nf4, t_f32, "ms", 1.5),
      ("NF4 handler vs materialize-then-matmul", t_nf4, t_mat, "ms", 1.2),
      ("NF4 handler vs materialize outside", t_nf4, t_out, "ms", 1.0),
      (f"int8 matmul vs f32 matmul (b={batch})", t_i8, t_f32, "ms", 1.3),
  ], err


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
  ap.add_argument("--quick", action="store_true", help="a 1024x1024 weight, few repeats")
  ap.add_argument("--n", type=int, default=None, help="the weight's size (default 4096)")
  ap.add_argument("--json", default=None, help="write the results to this file")
  args = ap.parse_args(argv)
  n, repeats = (1024, 3) if args.quick else (4096, 10)
  n = args.n or n
  rows, err = run(n, 16, repeats)
  print(f"max |handler - materialize-then-matmul| = {err:.2e}")
  return report(rows, args.json)


if __name__ == "__main__":
  main()
