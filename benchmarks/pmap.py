"""pmap benchmarks against JAX's pmap in the same process (4 CPU devices).

1. Data-parallel SGD step: MLP 256-256-10, per-device batch 64, grads averaged with pmean;
   parameters stay on the devices between steps (sharded results fed back). Target <= 1.05.
2. Dispatch overhead of a pmapped call on tiny inputs already on the devices (x + 1, no
   collective). Target <= 1.5.

Each repeat blocks on its result, so neither side keeps more than one collective program in
flight (JAX's own pmap can hang the process otherwise, DESIGN.md). Interleaved ABBA order.

Run: python -m benchmarks.pmap [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import numpy as np  # noqa: E402

from benchmarks.common import report  # noqa: E402

NDEV = 4


def _init(rng, sizes):
  return [(rng.randn(m, n).astype(np.float32) / np.sqrt(m), np.zeros(n, np.float32))
          for m, n in zip(sizes[:-1], sizes[1:])]


def _make_step(mod, pmap, grad, lax, tree_map):
  def loss(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
      h = h @ w + b
      if i < len(params) - 1:
        h = mod.tanh(h)
    logp = h - mod.log(mod.sum(mod.exp(h), axis=-1, keepdims=True))
    return -mod.mean(mod.sum(logp * y, axis=-1))

  def step(params, x, y):
    g = lax.pmean(grad(loss)(params, x, y), "d")
    return tree_map(lambda p, gi: p - 0.1 * gi, params, g)
  return pmap(step, "d")


def _time(fn, n):
  t = time.perf_counter()
  for _ in range(n):
    fn()
  return (time.perf_counter() - t) / n


def bench(repeats: int, inner: int):
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  rng = np.random.RandomState(0)
  params = _init(rng, [256, 256, 10])
  rep = [tuple(np.broadcast_to(a, (NDEV,) + a.shape).copy() for a in layer) for layer in params]
  x = rng.randn(NDEV, 64, 256).astype(np.float32)
  y = np.eye(10, dtype=np.float32)[rng.randint(0, 10, (NDEV, 64))]

  s_step = _make_step(jnp, sc.pmap, sc.grad, sc.lax, sc.tree_util.tree_map)
  j_step = _make_step(jjnp, jax.pmap, jax.grad, jax.lax, jax.tree_util.tree_map)
  s_p, j_p = s_step(rep, x, y), j_step(rep, x, y)
  s_x, j_x = sc.pmap(lambda a: a)(x), jax.pmap(lambda a: a)(x)
  s_y, j_y = sc.pmap(lambda a: a)(y), jax.pmap(lambda a: a)(y)
  sc.block_until_ready(s_p), jax.block_until_ready(j_p)
  np.testing.assert_allclose(np.asarray(s_p[0][0]), np.asarray(j_p[0][0]), rtol=1e-4,
                             atol=1e-5)
  state = {"s": s_p, "j": j_p}

  def s_run():
    state["s"] = sc.block_until_ready(s_step(state["s"], s_x, s_y))

  def j_run():
    state["j"] = jax.block_until_ready(j_step(state["j"], j_x, j_y))

  s_add, j_add = sc.pmap(lambda a: a + 1), jax.pmap(lambda a: a + 1)
  s_small, j_small = sc.pmap(lambda a: a)(np.ones((NDEV, 4), np.float32)), \
      jax.pmap(lambda a: a)(np.ones((NDEV, 4), np.float32))
  s_add(s_small).block_until_ready(), j_add(j_small).block_until_ready()

  def s_disp():
    s_add(s_small).block_until_ready()

  def j_disp():
    j_add(j_small).block_until_ready()

  out = {}
  for key, (a, b, n) in {"step": (s_run, j_run, inner),
                         "dispatch": (s_disp, j_disp, inner * 20)}.items():
    ts, tj = [], []
    for i in range(repeats):
      order = (a, b) if i % 2 == 0 else (b, a)
      for fn in order:
        (ts if fn is a else tj).append(_time(fn, n))
    out[key] = (statistics.median(ts) * 1e6, statistics.median(tj) * 1e6)
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  args = ap.parse_args(argv)
  r = bench(2 if args.quick else 20, 3 if args.quick else 20)
  rows = [("pmap DP-SGD step MLP256 b64x4", *r["step"], "us", 1.05),
          ("pmap dispatch (x+1, 4 devices)", *r["dispatch"], "us", 1.5)]
  return report(rows, args.json)


if __name__ == "__main__":
  main()
