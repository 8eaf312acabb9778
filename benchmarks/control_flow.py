"""Control-flow benchmarks against JAX in the same process.

1. `jit(grad)` of a 200-step tanh RNN written with `scan` (hidden 128, input 32, batch 16):
   steady-state runtime (target <= 1.05) and trace+lower time of a fresh function (target
   <= 1): stagecraft traces and lowers to StableHLO text, JAX runs `jit(f).lower(...)`.
2. A 10k-iteration `fori_loop` of a scalar update (static bounds, so a scan): runtime per
   iteration.

Run: python -m benchmarks.control_flow [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks.common import report
from benchmarks.convnet import paired


def make_rnn_loss(np_, lax_):
  def loss(params, xs, h0):
    W, U, b, V = params

    def step(h, x):
      h = np_.tanh(h @ W + x @ U + b)
      return h, h @ V
    _, ys = lax_.scan(step, h0, xs)
    return np_.mean(ys ** 2)
  return loss


def rnn_setup(T=200, H=128, D=32, B=16):
  rng = np.random.default_rng(0)
  params = ((rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32),
            (rng.standard_normal((D, H)) / np.sqrt(D)).astype(np.float32),
            np.zeros(H, np.float32),
            (rng.standard_normal((H, 1)) / np.sqrt(H)).astype(np.float32))
  xs = rng.standard_normal((T, B, D)).astype(np.float32)
  return params, xs, np.zeros((B, H), np.float32)


def bench_rnn(pairs: int, repeats: int):
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  from stagecraft import lax
  from stagecraft.interpreters import lowering
  args = rnn_setup()
  fs = sc.jit(sc.grad(make_rnn_loss(jnp, lax)))
  fj = jax.jit(jax.grad(make_rnn_loss(jjnp, jax.lax)))
  a_s = sc.device_put(args)
  a_j = jax.device_put(args)
  for x, y in zip(jax.tree.leaves(fs(*a_s)), jax.tree.leaves(fj(*a_j))):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-3, atol=1e-5)
  run = paired(lambda: sc.block_until_ready(fs(*a_s)),
               lambda: jax.block_until_ready(fj(*a_j)), pairs=pairs)

  def lower_s():
    f = sc.jit(sc.grad(make_rnn_loss(jnp, lax)))
    traced = f._trace(args, {}, ())
    lowering.lower_jaxpr_to_module("f", traced.jaxpr.jaxpr)

  def lower_j():
    jax.jit(jax.grad(make_rnn_loss(jjnp, jax.lax))).lower(*args)

  ts, tj = [], []
  for i in range(repeats):
    for fn, out in ((lower_s, ts), (lower_j, tj)) if i % 2 == 0 else ((lower_j, tj),
                                                                     (lower_s, ts)):
      t = time.perf_counter()
      fn()
      out.append((time.perf_counter() - t) * 1e3)
  return run, (statistics.median(ts), statistics.median(tj))


def bench_fori(pairs: int, n: int = 10_000):
  import jax
  import stagecraft as sc
  from stagecraft import lax
  body_s = lambda i, x: x * 0.999 + 0.001 * i
  fs = sc.jit(lambda x: lax.fori_loop(0, n, body_s, x))
  fj = jax.jit(lambda x: jax.lax.fori_loop(0, n, body_s, x))
  xs, xj = sc.device_put(np.float32(1.0)), jax.device_put(np.float32(1.0))
  np.testing.assert_allclose(np.asarray(fs(xs)), np.asarray(fj(xj)), rtol=1e-4)
  a, b = paired(lambda: sc.block_until_ready(fs(xs)), lambda: jax.block_until_ready(fj(xj)),
                pairs=pairs)
  return a / n * 1e3, b / n * 1e3    # ns per iteration


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  args = ap.parse_args(argv)
  (ra, rb), (la, lb) = bench_rnn(pairs=3 if args.quick else 100,
                                 repeats=2 if args.quick else 10)
  fa, fb = bench_fori(pairs=3 if args.quick else 200)
  rows = [("jit(grad) scan RNN T=200 H=128", ra, rb, "us", 1.05),
          ("trace+lower grad scan RNN", la, lb, "ms", 1.0),
          ("fori_loop 10k scalar, per iteration", fa, fb, "ns", 1.0)]
  return report(rows, args.json)


if __name__ == "__main__":
  main()
