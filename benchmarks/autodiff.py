"""Autodiff benchmarks against JAX in the same process.

1. Trace time of `make_jaxpr(grad(loss))` for a 100-layer tanh MLP of width 64 (batch 8,
   squared loss), and the equation counts of both jaxprs (sub-jaxprs counted recursively).
   Target: time ratio <= 1 (goal 0.5), equations <= JAX's.
2. Steady-state runtime of a jitted SGD step on a 784-512-512-10 tanh MLP with a softmax
   cross-entropy loss, batch 128 (parameters and batch on device, results awaited). Target
   <= 1.05.

The two sides run alternately (ABBA) and the report gives medians and stagecraft / JAX.

Run: python -m benchmarks.autodiff [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks.common import report
from benchmarks.convnet import paired


def init_mlp(sizes, seed=0):
  rng = np.random.default_rng(seed)
  return [(rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m),
           np.zeros(n, np.float32)) for m, n in zip(sizes, sizes[1:])]


def make_mse_loss(jnp):
  def loss(params, x, y):
    h = x
    for w, b in params[:-1]:
      h = jnp.tanh(h @ w + b)
    w, b = params[-1]
    return jnp.mean((h @ w + b - y) ** 2)
  return loss


def make_xent_loss(jnp, log_softmax):
  def loss(params, x, labels):
    h = x
    for w, b in params[:-1]:
      h = jnp.tanh(h @ w + b)
    w, b = params[-1]
    logp = log_softmax(h @ w + b)
    return -jnp.mean(jnp.sum(logp * labels, axis=-1))
  return loss


def count_eqns(jaxpr) -> int:
  j = getattr(jaxpr, "jaxpr", jaxpr)
  n = 0
  for e in j.eqns:
    subs = [v for v in e.params.values() if hasattr(v, "eqns") or hasattr(v, "jaxpr")]
    n += sum(count_eqns(s) for s in subs) if subs else 1
  return n


def bench_trace(reps: int):
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  params = init_mlp([64] * 101)
  x = np.ones((8, 64), np.float32)
  y = np.ones((8, 64), np.float32)
  ls, lj = make_mse_loss(jnp), make_mse_loss(jjnp)
  ours = lambda: sc.make_jaxpr(sc.grad(ls))(params, x, y)
  theirs = lambda: jax.make_jaxpr(jax.grad(lj))(params, x, y)
  n_ours, n_theirs = count_eqns(ours()), count_eqns(theirs())
  return (*_abba_ms(ours, theirs, reps), n_ours, n_theirs)


def _abba_ms(ours, theirs, reps: int):
  """Medians in ms of `reps` alternating (ABBA) calls of each side."""
  a, b = [], []
  for i in range(reps):
    for fn, out in ((ours, a), (theirs, b)) if i % 2 == 0 else ((theirs, b), (ours, a)):
      t = time.perf_counter()
      fn()
      out.append((time.perf_counter() - t) * 1e3)
  return statistics.median(a), statistics.median(b)


def bench_eager_grad(reps: int, warm: int = 3):
  """`grad` of a 4-layer tanh MLP loss (width 256, batch 32) outside `jit`: every primal
  operation runs eagerly (op-by-op dispatch, as in JAX) and the backward pass too. Returns
  medians in ms (stagecraft, JAX)."""
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  params = init_mlp([256] * 5)
  rng = np.random.default_rng(2)
  x = rng.standard_normal((32, 256)).astype(np.float32)
  y = rng.standard_normal((32, 256)).astype(np.float32)
  ps, xs, ys = sc.device_put(params), sc.device_put(x), sc.device_put(y)
  pj, xj, yj = jax.device_put(params), jax.device_put(x), jax.device_put(y)
  gs, gj = sc.grad(make_mse_loss(jnp)), jax.grad(make_mse_loss(jjnp))
  ours = lambda: sc.block_until_ready(gs(ps, xs, ys))
  theirs = lambda: jax.block_until_ready(gj(pj, xj, yj))
  for (a, b), (c, d) in zip(ours(), theirs()):
    np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=2e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(b), np.asarray(d), rtol=2e-4, atol=1e-5)
  for _ in range(warm):
    ours(), theirs()
  return _abba_ms(ours, theirs, reps)


def setup_sgd(batch: int = 128, lr: float = 0.01):
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  params = init_mlp([784, 512, 512, 10])
  rng = np.random.default_rng(1)
  x = rng.standard_normal((batch, 784)).astype(np.float32)
  labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]

  def make_step(grad, tree_map, loss):
    def step(params, x, labels):
      g = grad(loss)(params, x, labels)
      return tree_map(lambda p, g: p - lr * g, params, g)
    return step

  ss = sc.jit(make_step(sc.grad, sc.tree_util.tree_map, make_xent_loss(jnp, sc.nn.log_softmax)))
  sj = jax.jit(make_step(jax.grad, jax.tree_util.tree_map,
                         make_xent_loss(jjnp, jax.nn.log_softmax)))
  ps, xs, ls = sc.device_put(params), sc.device_put(x), sc.device_put(labels)
  pj, xj, lj = jax.device_put(params), jax.device_put(x), jax.device_put(labels)
  out_s, out_j = ss(ps, xs, ls), sj(pj, xj, lj)
  for (a, b), (c, d) in zip(out_s, out_j):
    np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(b), np.asarray(d), rtol=1e-4, atol=1e-5)

  def ours():
    sc.block_until_ready(ss(ps, xs, ls))

  def theirs():
    jax.block_until_ready(sj(pj, xj, lj))
  return ours, theirs


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  args = ap.parse_args(argv)
  rows = []
  a, b, n_ours, n_theirs = bench_trace(2 if args.quick else 20)
  rows.append(("make_jaxpr(grad) 100-layer MLP", a, b, "ms", 1.0))
  rows.append(("  equations in that jaxpr", float(n_ours), float(n_theirs), "  ", 1.0))
  ours, theirs = setup_sgd()
  a, b = paired(ours, theirs, pairs=4 if args.quick else 200)
  rows.append(("jit SGD step 784-512-512-10, b128", a, b, "us", 1.05))
  return report(rows, args.json)


if __name__ == "__main__":
  main()
