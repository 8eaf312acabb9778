"""vmap benchmark against JAX in the same process: per-example gradients
`jit(vmap(grad(loss), in_axes=(None, 0, 0)))` of a small tanh MLP (32-64-64-10, squared loss),
batch 256.

1. Steady-state runtime of the jitted function (params and batch on device, results
   awaited). Target <= 1.05.
2. Trace time of `make_jaxpr(vmap(grad(loss), in_axes=(None, 0, 0)))` on a fresh function
   each repeat. Target <= 1.

Run: python -m benchmarks.vmap [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks.autodiff import init_mlp, make_mse_loss
from benchmarks.common import report
from benchmarks.convnet import paired


def setup(batch: int = 256):
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  params = init_mlp([32, 64, 64, 10])
  rng = np.random.default_rng(1)
  x = rng.standard_normal((batch, 32)).astype(np.float32)
  y = rng.standard_normal((batch, 10)).astype(np.float32)
  fs = sc.vmap(sc.grad(make_mse_loss(jnp)), in_axes=(None, 0, 0))
  fj = jax.vmap(jax.grad(make_mse_loss(jjnp)), in_axes=(None, 0, 0))
  js, jj = sc.jit(fs), jax.jit(fj)
  ps, xs, ys = sc.device_put(params), sc.device_put(x), sc.device_put(y)
  pj, xj, yj = jax.device_put(params), jax.device_put(x), jax.device_put(y)
  for (a, b), (c, d) in zip(js(ps, xs, ys), jj(pj, xj, yj)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(b), np.asarray(d), rtol=1e-4, atol=1e-5)
  run_s = lambda: sc.block_until_ready(js(ps, xs, ys))
  run_j = lambda: jax.block_until_ready(jj(pj, xj, yj))
  # Fresh functions each time: JAX caches the traces of a function it has seen.
  trace_s = lambda: sc.make_jaxpr(sc.vmap(sc.grad(make_mse_loss(jnp)), in_axes=(None, 0, 0)))(
      params, x, y)
  trace_j = lambda: jax.make_jaxpr(jax.vmap(jax.grad(make_mse_loss(jjnp)),
                                            in_axes=(None, 0, 0)))(params, x, y)
  return run_s, run_j, trace_s, trace_j


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  args = ap.parse_args(argv)
  run_s, run_j, trace_s, trace_j = setup()
  rows = []
  a, b = paired(run_s, run_j, pairs=4 if args.quick else 1000)
  rows.append(("jit(vmap(grad)) MLP, batch 256", a, b, "us", 1.05))
  ts, tj = [], []
  for i in range(2 if args.quick else 20):
    for fn, out in ((trace_s, ts), (trace_j, tj)) if i % 2 == 0 else ((trace_j, tj),
                                                                     (trace_s, ts)):
      t = time.perf_counter()
      fn()
      out.append((time.perf_counter() - t) * 1e3)
  rows.append(("make_jaxpr(vmap(grad)) MLP", statistics.median(ts), statistics.median(tj),
               "ms", 1.0))
  return report(rows, args.json)


if __name__ == "__main__":
  main()
