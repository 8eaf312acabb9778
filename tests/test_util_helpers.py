"""The shared test helpers of tests/_util.py: `assert_trees_allclose` fails on a missing or an
extra output, a shape, dtype or value mismatch (naming the leaf), and passes on equal trees of
stagecraft, JAX and NumPy leaves."""
import collections
import re

import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft.numpy as jnp
from _util import assert_trees_allclose

X = np.arange(6, dtype=np.float32).reshape(2, 3)


def _raises(match, actual, expected, **kw):
  with pytest.raises(AssertionError, match=match):
    assert_trees_allclose(actual, expected, **kw)


def test_passes_on_equal_trees_of_mixed_leaves():
  actual = (jnp.asarray(X), {"a": jnp.asarray(1.5), "b": [np.int32(3), None]})
  expected = (jjnp.asarray(X), {"b": [3, None], "a": np.float32(1.5)})
  assert_trees_allclose(actual, expected)
  assert_trees_allclose(jnp.asarray(X), X)            # bare leaves
  assert_trees_allclose([X, X], (X, X))               # tuple vs list is not told apart
  P = collections.namedtuple("P", "u v")
  assert_trees_allclose(P(X, 2.0), (X, 2.0))          # nor namedtuple vs tuple
  assert_trees_allclose((), [])


def test_within_tolerance_passes():
  assert_trees_allclose((X + 1e-4,), (X,), rtol=0, atol=2e-4)


def test_fails_on_a_missing_output():
  _raises(re.escape("actual has 1 leaves, expected 2; missing from actual: ['[1]']"),
          (X,), (X, X))
  _raises(re.escape("missing from actual: [\"[1]['h']\"]"),
          (X, {"s": X}), (X, {"s": X, "h": X}))


def test_fails_on_an_extra_output():
  _raises(re.escape("actual has 3 leaves, expected 2; missing from actual: []; "
                    "extra in actual: ['[2]']"), (X, X, X), (X, X))


def test_fails_on_none_against_an_array():
  _raises(re.escape("leaf [1]: actual None"), (X, None), (X, X))
  _raises(re.escape("missing from actual: ['[1]']"), (X,), (X, None))


def test_fails_on_a_leaf_against_a_tree():
  _raises("tree structures differ", X, (X,))


def test_fails_on_a_shape_mismatch():
  _raises(re.escape("leaf [0]['a']: shape (3,) != expected (1, 3)"),
          ({"a": jnp.asarray(X[0])},), ({"a": X[:1]},))
  _raises(re.escape("leaf <root>: shape () != expected (3,)"), 1.0, np.ones(3))


def test_fails_on_a_value_mismatch():
  bad = X.copy()
  bad[1, 2] += 1e-3
  _raises(r"leaf \[1\]", (X, jnp.asarray(X)), (X, bad), rtol=1e-5, atol=1e-5)
  assert_trees_allclose((X, jnp.asarray(X)), (X, bad), rtol=0, atol=2e-3)


def test_dtypes_checked_only_when_asked():
  assert_trees_allclose(jnp.asarray(X), X.astype(np.float64))
  _raises(re.escape("dtype float32 != expected float64"), jnp.asarray(X),
          X.astype(np.float64), check_dtypes=True)
  assert_trees_allclose(jnp.asarray(X), jjnp.asarray(X), check_dtypes=True)


def test_err_msg_is_included():
  _raises("while checking grads", (X,), (X + 1,), err_msg="while checking grads")
