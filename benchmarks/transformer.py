"""Transformer block benchmark against JAX in the same process: forward + backward of one
pre-LayerNorm block (multi-head self-attention with a causal mask, then a gelu MLP of width
4d, both residual), d=256, 4 heads, sequence 128, batch 8, loss `mean(out ** 2)`.

1. Steady-state runtime of `jit(value_and_grad(loss))` (parameters and batch on device,
   results awaited). Target <= 1.05.
2. Trace+lower time of a fresh `jit(value_and_grad(loss))` (stagecraft: trace and lower to
   StableHLO text; JAX: `jit(f).lower(...)`). Target <= 1.

The two sides run alternately (ABBA order) and the report gives medians and stagecraft / JAX.

Run: python -m benchmarks.transformer [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks.common import report
from benchmarks.convnet import paired

D, HEADS, SEQ, BATCH = 256, 4, 128, 8


def init_params(d: int = D, seed: int = 0):
  """Host (NumPy float32) parameters of one block, as a dict."""
  rng = np.random.default_rng(seed)
  dense = lambda m, n: (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32)
  return {
      "ln1_g": np.ones(d, np.float32), "ln1_b": np.zeros(d, np.float32),
      "wqkv": dense(d, 3 * d), "bqkv": np.zeros(3 * d, np.float32),
      "wo": dense(d, d), "bo": np.zeros(d, np.float32),
      "ln2_g": np.ones(d, np.float32), "ln2_b": np.zeros(d, np.float32),
      "w1": dense(d, 4 * d), "b1": np.zeros(4 * d, np.float32),
      "w2": dense(4 * d, d), "b2": np.zeros(d, np.float32),
  }


def make_loss(jnp, nn, heads: int = HEADS):
  """The block's loss written against a `numpy`/`nn` pair (stagecraft's or JAX's):
  params (dict of f32 arrays), x f32[batch, seq, d] -> f32[]."""
  def layer_norm(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + 1e-5) * g + b

  def block(p, x):
    b, t, d = x.shape
    hd = d // heads
    h = layer_norm(x, p["ln1_g"], p["ln1_b"])
    qkv = h @ p["wqkv"] + p["bqkv"]                              # [b, t, 3d]
    qkv = qkv.reshape(b, t, 3, heads, hd)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]           # [b, t, heads, hd]
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.float32(np.sqrt(hd))
    mask = jnp.tril(jnp.ones((t, t), bool))
    s = jnp.where(mask, s, np.float32(-1e9))
    a = nn.softmax(s, axis=-1)
    o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, t, d)
    x = x + o @ p["wo"] + p["bo"]
    h = layer_norm(x, p["ln2_g"], p["ln2_b"])
    h = nn.gelu(h @ p["w1"] + p["b1"])
    return x + h @ p["w2"] + p["b2"]

  def loss(p, x):
    return jnp.mean(block(p, x) ** 2)
  return loss


def setup(batch: int = BATCH, seq: int = SEQ):
  """Both jitted value_and_grad functions on device inputs (checked against each other),
  and fresh-function trace+lower callables. Returns (run_s, run_j, lower_s, lower_j)."""
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  from stagecraft.interpreters import lowering
  params = init_params()
  x = np.random.default_rng(1).standard_normal((batch, seq, D)).astype(np.float32)
  fs = sc.jit(sc.value_and_grad(make_loss(jnp, sc.nn)))
  fj = jax.jit(jax.value_and_grad(make_loss(jjnp, jax.nn)))
  ps, xs = sc.device_put(params), sc.device_put(x)
  pj, xj = jax.device_put(params), jax.device_put(x)
  (ls, gs), (lj, gj) = fs(ps, xs), fj(pj, xj)
  np.testing.assert_allclose(np.asarray(ls), np.asarray(lj), rtol=1e-4)
  for k in params:
    np.testing.assert_allclose(np.asarray(gs[k]), np.asarray(gj[k]), rtol=2e-3, atol=2e-5,
                               err_msg=k)

  def lower_s():
    f = sc.jit(sc.value_and_grad(make_loss(jnp, sc.nn)))
    traced = f._trace((params, x), {}, ())
    lowering.lower_jaxpr_to_module("f", traced.jaxpr.jaxpr)

  def lower_j():
    jax.jit(jax.value_and_grad(make_loss(jjnp, jax.nn))).lower(params, x)

  return (lambda: sc.block_until_ready(fs(ps, xs)),
          lambda: jax.block_until_ready(fj(pj, xj)), lower_s, lower_j)


def bench(pairs: int, repeats: int):
  """Returns ((run_s_us, run_j_us), (lower_s_ms, lower_j_ms)), medians."""
  run_s, run_j, lower_s, lower_j = setup()
  run = paired(run_s, run_j, pairs=pairs, warmup=2)
  ts, tj = [], []
  for i in range(repeats):
    for fn, out in ((lower_s, ts), (lower_j, tj)) if i % 2 == 0 else ((lower_j, tj),
                                                                     (lower_s, ts)):
      t = time.perf_counter()
      fn()
      out.append((time.perf_counter() - t) * 1e3)
  return run, (statistics.median(ts), statistics.median(tj))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  args = ap.parse_args(argv)
  (ra, rb), (la, lb) = bench(pairs=3 if args.quick else 100, repeats=2 if args.quick else 10)
  rows = [("transformer block fwd+bwd d256 b8 t128", ra, rb, "us", 1.05),
          ("trace+lower transformer block grad", la, lb, "ms", 1.0)]
  return report(rows, args.json)


if __name__ == "__main__":
  main()
