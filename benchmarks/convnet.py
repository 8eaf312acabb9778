"""Conv net forward benchmark: the same small CNN written with stagecraft and with JAX, both
jitted, timed in steady state (compiled, inputs on device, results awaited).

The net: a batch of 32 NHWC 28x28x1 images; three 3x3 SAME convolutions with 32, 64 and 64
channels (stride 1, 2, 2), each with a bias and relu (`maximum(x, 0)`); a global mean pool
over H and W; a dense layer to 10 logits. The two versions run alternately in the same process
(alternating calls) and the report gives medians and the ratio stagecraft / JAX (lower is
better; target <= 1.1).

Run: python -m benchmarks.convnet [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks.common import report

DN = ("NHWC", "HWIO", "NHWC")
LAYERS = [(1, 32, 1), (32, 64, 2), (64, 64, 2)]  # (in channels, out channels, stride)


def init_params(seed: int = 0):
  """Host (NumPy) parameters: one (w, b) per conv layer, then the dense (w, b)."""
  rng = np.random.default_rng(seed)
  params = []
  for cin, cout, _ in LAYERS:
    w = rng.standard_normal((3, 3, cin, cout)).astype(np.float32) / np.sqrt(9 * cin)
    params.append((w, np.zeros(cout, np.float32)))
  params.append((rng.standard_normal((64, 10)).astype(np.float32) / 8.0,
                 np.zeros(10, np.float32)))
  return params


def make_forward(lax, jnp):
  """The forward pass written against a `lax`/`numpy` pair (stagecraft's or JAX's)."""
  def forward(params, x):
    for (w, b), (_, _, stride) in zip(params[:-1], LAYERS):
      x = lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=DN)
      x = jnp.maximum(x + b, 0.0)
    x = jnp.mean(x, axis=(1, 2))
    w, b = params[-1]
    return x @ w + b
  return forward


def paired(ours, theirs, *, pairs: int, warmup: int = 5):
  """Per-call times (us) of `ours` and `theirs` called alternately (ABBA order, so neither
  always runs first): returns their medians. Per-call alternation keeps slow drifts in the
  machine's load (other processes) out of the ratio."""
  for _ in range(warmup):
    ours(), theirs()
  a, b = [], []
  clock = time.perf_counter
  for i in range(pairs):
    for fn, out in ((ours, a), (theirs, b)) if i % 2 == 0 else ((theirs, b), (ours, a)):
      t = clock()
      fn()
      out.append((clock() - t) * 1e6)
  return statistics.median(a), statistics.median(b)


def setup(batch: int = 32):
  """Both jitted forwards with their device inputs; checks that they agree."""
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  params = init_params()
  x = np.random.default_rng(1).standard_normal((batch, 28, 28, 1)).astype(np.float32)
  fs = sc.jit(make_forward(sc.lax, jnp))
  fj = jax.jit(make_forward(jax.lax, jjnp))
  ps, xs = sc.device_put(params), sc.device_put(x)
  pj, xj = jax.device_put(params), jax.device_put(x)
  np.testing.assert_allclose(np.asarray(fs(ps, xs)), np.asarray(fj(pj, xj)), rtol=1e-4,
                             atol=1e-4)
  return (lambda: fs(ps, xs).block_until_ready()), (lambda: fj(pj, xj).block_until_ready())


def bench_convnet_forward(pairs: int):
  ours, theirs = setup()
  return paired(ours, theirs, pairs=pairs)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  args = ap.parse_args(argv)
  rows = []
  a, b = bench_convnet_forward(4 if args.quick else 400)
  rows.append(("convnet forward, batch 32, 28x28x1", a, b, "us", 1.1))
  return report(rows, args.json)


if __name__ == "__main__":
  main()
