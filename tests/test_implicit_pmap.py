"""Implicit arrays through pmap: a replicated NF4 weight reaches every device as its packed
codes and scales (never materialized); a mapped implicit operand is materialized first."""
import warnings

import numpy as np
import pytest

import stagecraft as sc
from stagecraft import lax
from stagecraft.implicit import MaterializationWarning, implicit
from stagecraft.implicit.quantization import ArrayNF4

RNG = np.random.RandomState(0)
W = RNG.randn(64, 32).astype(np.float32)
X = RNG.randn(4, 8, 64).astype(np.float32)


@pytest.fixture
def count_materialize(monkeypatch):
  calls = [0]
  orig = ArrayNF4.materialize

  def counting(self):
    calls[0] += 1
    return orig(self)
  monkeypatch.setattr(ArrayNF4, "materialize", counting)
  return calls, orig


def _dp(w, x):
  return sc.pmap(lambda w, x: lax.pmean(x @ w, "i"), "i", in_axes=(None, 0))(w, x)


def test_replicated_nf4_weight_is_not_materialized(count_materialize):
  calls, orig = count_materialize
  wq = ArrayNF4.quantize(W, block_size=64)
  ref = np.mean(X @ np.asarray(orig(wq)), axis=0)
  with warnings.catch_warnings():
    warnings.simplefilter("error", MaterializationWarning)
    out = implicit(_dp)(wq, X)
    out_jit = sc.jit(implicit(_dp))(wq, X)
  assert calls[0] == 0
  for o in (out, out_jit):
    assert o.shape == (4, 8, 32)
    for k in range(4):
      np.testing.assert_allclose(np.asarray(o)[k], ref, rtol=1e-4, atol=1e-4)
  # The program takes the packed codes, not a float32 weight.
  jaxpr = sc.make_jaxpr(implicit(_dp))(wq, X)
  in_avals = [v.aval for v in jaxpr.jaxpr.invars]
  assert not any(a.shape == W.shape and a.dtype == np.float32 for a in in_avals)


def test_mapped_implicit_operand_is_materialized_with_a_warning(count_materialize):
  calls, orig = count_materialize
  ws = np.stack([W * (k + 1) for k in range(4)])
  wq = ArrayNF4.quantize(ws, block_size=64)
  f = implicit(lambda w, x: sc.pmap(lambda w, x: x @ w, "i")(w, x))
  with pytest.warns(MaterializationWarning, match="ArrayNF4"):
    out = f(wq, X)
  assert calls[0] >= 1
  dense = np.asarray(orig(wq))
  np.testing.assert_allclose(np.asarray(out), np.einsum("dbk,dkn->dbn", X, dense), rtol=1e-4,
                             atol=1e-4)
