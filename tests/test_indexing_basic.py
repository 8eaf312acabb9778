"""Basic indexing (`x[...]`: integers, slices, None, Ellipsis) against NumPy, eagerly and
under jit; traced integer indices; and the IndexError messages."""
import re

import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp

A1 = np.arange(5, dtype=np.float32) * 1.5            # (5,)
A2 = np.arange(24, dtype=np.float32).reshape(4, 6)    # (4, 6)
A3 = np.arange(24, dtype=np.int32).reshape(2, 3, 4)   # (2, 3, 4)
ARRAYS = {"a1": A1, "a2": A2, "a3": A3}

S = slice
E = Ellipsis
CASES = [
    # (5,)
    ("a1", 2), ("a1", 0), ("a1", -1), ("a1", -5), ("a1", np.int32(3)), ("a1", np.int8(-2)),
    ("a1", S(None)), ("a1", S(1, 4)), ("a1", S(None, None, -1)), ("a1", S(10, -10, -1)),
    ("a1", S(-10, 10, 3)), ("a1", S(3, 1)), ("a1", S(4, 0, -2)), ("a1", S(1, -1, 2)),
    ("a1", S(-2, None, -3)), ("a1", S(7, 9)), ("a1", S(None, None, 7)), ("a1", None),
    ("a1", (None, S(1, 3))), ("a1", E), ("a1", (E, None)), ("a1", (S(None), None)),
    ("a1", (None, E, None, 1)), ("a1", ()),
    # (4, 6)
    ("a2", (1, 2)), ("a2", (-1, -6)), ("a2", 1), ("a2", -4), ("a2", (S(None), 2)),
    ("a2", (S(None, None, -2), S(1, None, 3))), ("a2", (E, 0)), ("a2", (None, 1, None)),
    ("a2", (S(5, 10), S(None))), ("a2", (S(0, 4, 5), S(-1, -7, -1))), ("a2", ()),
    ("a2", (S(2, 2), 3)), ("a2", (S(1, 3), S(-3, None))), ("a2", (3, S(None, None, -1))),
    ("a2", (E, S(None, None, 2))), ("a2", (S(-100, 100), S(5, 0, -3))),
    # (2, 3, 4)
    ("a3", (0, 1, 2)), ("a3", (E, 1)), ("a3", (1, E)), ("a3", (None, E, None)),
    ("a3", (S(None), None, S(None, None, -1), 2)),
    ("a3", (-1, S(None, None, 2), S(3, 0, -2))), ("a3", (0, E, S(1, 3), None)),
    ("a3", (E, -1)), ("a3", (1,)), ("a3", (S(1, None), 0)), ("a3", (0, S(3, None))),
    ("a3", (E, None, 2, S(None))), ("a3", (-2, -3, -4)), ("a3", (S(0, 0), E)),
]


def _id(case):
  return f"{case[0]}-{case[1]!r}".replace(" ", "")


def _check(got, want):
  got_np = np.asarray(got)
  assert got.shape == want.shape, (got.shape, want.shape)
  assert got.dtype == want.dtype, (got.dtype, want.dtype)
  np.testing.assert_array_equal(got_np, want)


def test_table_size():
  assert len(CASES) >= 40
  assert {c[0] for c in CASES} == set(ARRAYS)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_basic_index_eager_and_jit(case):
  name, idx = case
  x = ARRAYS[name]
  want = x[idx]
  _check(jnp.asarray(x)[idx], want)
  _check(sc.jit(lambda v: v[idx])(x), want)


@pytest.mark.parametrize("name", list(ARRAYS))
@pytest.mark.parametrize("i", [0, 1, -1, -2])
def test_traced_integer_index(name, i):
  x = ARRAYS[name]
  f = sc.jit(lambda v, k: v[k])
  _check(f(x, i), x[i])
  _check(f(x, np.int32(i)), x[i])
  _check(f(x, np.int8(i)), x[i])


def test_traced_integer_index_values():
  f = sc.jit(lambda v, k: v[k])
  for i in range(-5, 5):
    assert f(A1, i).item() == A1[i]
  assert f(A1, 2).item() == A1[2]
  # Out-of-range traced indices clamp (as in jax.numpy; NumPy would raise), wrapping
  # negative indices once only: x[-7] of size 5 is x[0], not x[3].
  assert f(A1, 7).item() == A1[4] and f(A1, 100).item() == A1[4]
  assert f(A1, -7).item() == A1[0] and f(A1, -100).item() == A1[0]
  np.testing.assert_array_equal(f(A2, -5), A2[0])


def test_traced_indices_mixed_with_static():
  g = sc.jit(lambda v, i, j: v[i, 1:, j])
  _check(g(A3, 1, -1), A3[1, 1:, -1])
  _check(g(A3, -2, 2), A3[-2, 1:, 2])
  h = sc.jit(lambda v, i: v[None, ::-1, i, ...])
  _check(h(A3, 2), A3[None, ::-1, 2, ...])
  k = sc.jit(lambda v, i: v[..., i])
  _check(k(A2, -1), A2[..., -1])


def test_scalar_array_index_eager():
  x = jnp.asarray(A1)
  _check(x[jnp.asarray(3)], A1[3])
  _check(x[jnp.asarray(-1)], A1[-1])
  _check(jnp.asarray(A2)[jnp.int32(1), 2:], A2[1, 2:])


def test_index_of_results_chain():
  x = jnp.asarray(A3)
  _check(x[1][2][3], A3[1][2][3])
  _check(x[:, 1][::-1], A3[:, 1][::-1])
  _check(x.T[0], A3.T[0])


ERROR_CASES = [
    (A1, (1, 2), re.escape("Too many indices: array is 1-dimensional, but 2 were "
                           "indexed")),
    (A2, (0, E, 0, 0), re.escape("Too many indices: array is 2-dimensional, but 3 "
                                 "were indexed")),
    (A1, (E, E), re.escape("an index can only have a single ellipsis ('...')")),
]


@pytest.mark.parametrize("x,idx,msg", ERROR_CASES, ids=lambda v: repr(v)[:30])
def test_index_errors(x, idx, msg):
  with pytest.raises(IndexError, match=msg):
    jnp.asarray(x)[idx]
  with pytest.raises(IndexError, match=msg):
    sc.jit(lambda v: v[idx])(x)


def test_index_type_errors():
  # Advanced (array) indexing is tested in test_indexing_advanced.py; these index types stay
  # errors, with JAX's messages.
  with pytest.raises(TypeError, match="Using a non-tuple sequence"):
    jnp.asarray(A1)[[1, 2]]
  with pytest.raises(TypeError, match="Indexer must have integer or boolean type"):
    jnp.asarray(A1)[2.5]
  with pytest.raises(TypeError, match="Indexer must have integer or boolean type"):
    sc.jit(lambda v, i: v[i])(A1, np.float32(1.0))


def test_traced_array_index_errors():
  np.testing.assert_array_equal(sc.jit(lambda v, i: v[i])(A1, np.array([1, 2], np.int32)),
                                np.asarray(A1)[[1, 2]])
  # a static out-of-bounds integer clamps, as in JAX 0.10.2
  _check(sc.jit(lambda v, i: v[i, 5])(A2.T, 0), np.asarray(A2.T)[0, 3])


@pytest.mark.parametrize("x,idx", [(A1, 7), (A1, -6), (A2, (0, 6)), (A2, (-9, 1)),
                                   (A2, (7, slice(None))), (A3, (1, Ellipsis, -6))],
                         ids=lambda v: repr(v)[:30])
def test_static_out_of_bounds_integers_clamp_as_jax(x, idx):
  import jax
  import jax.numpy as jjnp
  want = np.asarray(jjnp.asarray(x)[idx])
  _check(jnp.asarray(x)[idx], want)
  _check(sc.jit(lambda v: v[idx])(x), want)
  _check(jnp.asarray(x).at[idx].get(), want)
  np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: v[idx])(x)), want)


def test_index_into_size_zero_axis_raises():
  with pytest.raises(IndexError, match="index 0 is out of bounds for axis 0 with size 0"):
    jnp.zeros(0)[0]
