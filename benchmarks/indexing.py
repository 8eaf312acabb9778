"""Indexing benchmark: a gather of table rows by an index vector followed by a segment sum
(scatter-add), written with NumPy-style indexing (`table[idx]`, `.at[seg].add`) against
stagecraft and against JAX.

Rows: the jitted function in steady state (compiled, inputs on device, results awaited), and
the same function run eagerly (op-by-op dispatch of the indexing ops). stagecraft and JAX run
alternately in the same process (alternating calls) and the report gives medians and the
ratio stagecraft / JAX (lower is better).

Run: python -m benchmarks.indexing [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse

import numpy as np

from benchmarks.common import report

from benchmarks.convnet import paired

ROWS, FEATURES, GATHERED, SEGMENTS = 10_000, 32, 100_000, 1_000


def make_inputs(seed: int = 0, gathered: int = GATHERED):
  rng = np.random.default_rng(seed)
  table = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
  idx = rng.integers(0, ROWS, gathered).astype(np.int32)
  seg = np.sort(rng.integers(0, SEGMENTS, gathered)).astype(np.int32)
  weights = rng.random(gathered).astype(np.float32)
  return table, idx, seg, weights


def make_segment_sum(jnp):
  """`out[s] = sum over i with seg[i] == s of weights[i] * table[idx[i]]`."""
  def segment_sum(table, idx, seg, weights):
    rows = table[idx] * weights[:, None]
    return jnp.zeros((SEGMENTS, table.shape[1]), table.dtype).at[seg].add(rows)
  return segment_sum


def setup(jit: bool, gathered: int = GATHERED):
  """The two callables (stagecraft's, JAX's) on device inputs; checks that they agree."""
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as jnp
  host = make_inputs(gathered=gathered)
  fs, fj = make_segment_sum(jnp), make_segment_sum(jjnp)
  if jit:
    fs, fj = sc.jit(fs), jax.jit(fj)
  xs, xj = sc.device_put(host), jax.device_put(host)
  expected = np.zeros((SEGMENTS, FEATURES), np.float64)
  np.add.at(expected, host[2], host[0][host[1]] * host[3][:, None])
  for out in (fs(*xs), fj(*xj)):
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-4, atol=1e-3)
  return (lambda: fs(*xs).block_until_ready()), (lambda: fj(*xj).block_until_ready())


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
  ap.add_argument("--json", help="write the results to this file")
  args = ap.parse_args(argv)
  pairs = 4 if args.quick else 300
  rows = []
  ours, theirs = setup(jit=True)
  a, b = paired(ours, theirs, pairs=pairs)
  rows.append(("gather + segment sum, jit", a, b, "us", 1.1))
  ours, theirs = setup(jit=False, gathered=1_000)
  a, b = paired(ours, theirs, pairs=pairs)
  rows.append(("gather + segment sum (1k), eager", a, b, "us", 1.5))
  return report(rows, args.json)


if __name__ == "__main__":
  main()
