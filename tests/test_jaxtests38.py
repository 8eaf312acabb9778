"""Behaviours found running JAX 0.10.2's own test files (array_test) on stagecraft, each
checked against JAX in the same test."""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp


def _warned(fn):
  """(result or exception type name, [(category name, message)]) of `fn()`."""
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    try:
      out = fn()
    except Exception as e:   # noqa: BLE001
      out = type(e).__name__
  return out, [(m.category.__name__, str(m.message)) for m in w]


@pytest.mark.parametrize("use", [
    lambda m, x: np.dtype(x),
    lambda m, x: np.zeros(2, dtype=x).dtype,
    lambda m, x: np.issubdtype(x, np.floating),
    lambda m, x: np.result_type(x),
    lambda m, x: np.asarray(x).dtype,
    lambda m, x: np.dtype(m.float32),
    lambda m, x: np.dtype(m.int8),
], ids=["dtype", "zeros_dtype", "issubdtype", "result_type", "asarray", "scalar_type",
        "scalar_type_int8"])
def test_an_array_as_a_numpy_dtype_warns_as_jax(use):
  # NumPy >= 2.4 asks an object for `__numpy_dtype__`; JAX's Arrays answer with a
  # DeprecationWarning, its scalar types without one
  ours = _warned(lambda: use(jnp, jnp.arange(3.0)))
  theirs = _warned(lambda: use(jjnp, jjnp.arange(3.0)))
  assert ours == theirs
  assert ours[0] in (np.float32, np.int8, True)


def test_a_tracer_as_a_numpy_dtype_does_not_warn_as_jax():
  def probe(seen):
    def f(x):
      seen.append(_warned(lambda: np.dtype(x)))
      return x * 2
    return f
  ours, theirs = [], []
  sc.jit(probe(ours))(np.arange(3.0, dtype=np.float32))
  sc.grad(lambda x: probe(ours)(x).sum())(np.arange(3.0, dtype=np.float32))
  jax.jit(probe(theirs))(np.arange(3.0, dtype=np.float32))
  jax.grad(lambda x: probe(theirs)(x).sum())(np.arange(3.0, dtype=np.float32))
  assert ours == theirs == [(np.dtype(np.float32), [])] * 2
