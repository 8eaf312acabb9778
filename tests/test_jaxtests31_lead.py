"""Details found by running JAX 0.10.2's own `tests/lax_numpy_ufuncs_test.py` on stagecraft
through a scratch harness: `ufunc.reduceat` takes traced and empty `indices`, `ufunc.outer`
works under `jax_numpy_rank_promotion='raise'`, a ufunc's `nin`/`nout`/`nargs`/`identity`/
`_func` are read-only. JAX is the oracle."""
import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp


def _same(got, want):
  assert got.shape == want.shape and got.dtype == want.dtype
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


UFUNCS = {"add": None, "multiply": None, "maximum": None, "bitwise_or": None,
          "pyfunc": (lambda x, y: x * y + 1, 1)}


def _pair(name):
  if name == "pyfunc":
    f, ident = UFUNCS[name]
    return jnp.frompyfunc(f, 2, 1, identity=ident), jax.numpy.frompyfunc(f, 2, 1, identity=ident)
  return getattr(jnp, name), getattr(jax.numpy, name)


@pytest.mark.parametrize("name", list(UFUNCS))
@pytest.mark.parametrize("idx", [[0, 2, 4], [3, 1, 4, 4], [], [5]])
@pytest.mark.parametrize("axis", [0, -1])
def test_reduceat_traced_and_empty_indices_as_jax(name, idx, axis):
  ours, theirs = _pair(name)
  x = np.arange(1, 13, dtype=np.int32).reshape(6, 2) if axis == 0 else \
      np.arange(1, 13, dtype=np.int32).reshape(2, 6)
  i = np.asarray(idx, np.int32)
  want = theirs.reduceat(x, i, axis=axis)
  _same(ours.reduceat(x, i, axis=axis), want)
  _same(sc.jit(lambda x, i: ours.reduceat(x, i, axis=axis))(x, i), want)
  np.testing.assert_array_equal(np.asarray(want),
                                np.frompyfunc(lambda a, b: a * b + 1, 2, 1, identity=1).reduceat(
                                    x, i, axis=axis).astype(np.int32)
                                if name == "pyfunc" and len(idx) else np.asarray(want))


@pytest.mark.parametrize("bad, match", [
    ((np.ones(3), np.zeros((2, 2), int)), "indices must be one-dimensional"),
    ((np.float32(1), np.zeros(2, int)), "a must have 1 or more dimension")])
def test_reduceat_errors_as_jax(bad, match):
  for mod in (jnp, jax.numpy):
    with pytest.raises(ValueError, match=match):
      mod.add.reduceat(*bad)
  with pytest.raises(ValueError, match="single integer axis"):
    jnp.add.reduceat(np.ones(3), np.zeros(2, int), axis=None)


@pytest.mark.parametrize("name", list(UFUNCS))
def test_outer_under_rank_promotion_raise_as_jax(name):
  ours, theirs = _pair(name)
  a, b = np.arange(6, dtype=np.int32).reshape(3, 2), np.arange(4, dtype=np.int32)
  with jax.numpy_rank_promotion("raise"):
    want = theirs.outer(a, b)
  with sc.numpy_rank_promotion("raise"):
    got = ours.outer(a, b)
    _same(sc.jit(ours.outer)(a, b), want)
  _same(got, want)
  assert got.shape == (3, 2, 4)


def test_outer_of_two_results_raises_as_jax():
  f = lambda x, y: (x + y, x - y)
  for mod in (jnp, jax.numpy):
    with pytest.raises(ValueError, match="functions returning a single value"):
      mod.frompyfunc(f, 2, 2).outer(np.ones(2), np.ones(3))


@pytest.mark.parametrize("make", [lambda m: m.add, lambda m: m.negative,
                                  lambda m: m.frompyfunc(lambda x: -x, 1, 1)])
@pytest.mark.parametrize("attr", ["nargs", "nin", "nout", "identity", "_func"])
def test_ufunc_properties_read_only_as_jax(make, attr):
  for mod in (jnp, jax.numpy):
    u = make(mod)
    before = getattr(u, attr)
    with pytest.raises(AttributeError):
      setattr(u, attr, None)
    assert getattr(u, attr) is before
  assert getattr(make(jnp), attr) == getattr(make(jax.numpy), attr) or attr == "_func"


@pytest.mark.parametrize("signature", ["(),()->()", None])
def test_vectorize_rank_promotion_as_jax(signature):
  """`jnp.vectorize` checks the ranks of its arguments' loop dimensions under
  `jax_numpy_rank_promotion` (JAX's lax_numpy_vectorize_test regression 22305)."""
  args = (np.zeros((10, 10), np.float32), np.zeros(10, np.float32))
  msg = "operands with shapes .* require rank promotion"
  for mod, lib in ((jnp, sc), (jax.numpy, jax)):
    f = mod.vectorize(mod.add, signature=signature)
    with lib.numpy_rank_promotion("raise"):
      with pytest.raises(ValueError, match=msg):
        f(*args)
      _same(f(args[0], np.float32(1)), jax.numpy.ones((10, 10)))   # a 0-d argument is fine
    with lib.numpy_rank_promotion("warn"):
      with pytest.warns(UserWarning, match=msg):
        f(*args)
  _same(jnp.vectorize(jnp.add, signature=signature)(*args),
        jax.numpy.vectorize(jax.numpy.add, signature=signature)(*args))
