"""Advanced NumPy indexing (integer arrays, boolean masks, mixed with slices, None and
Ellipsis) against NumPy, eagerly and under jit; `x.at[idx]` updates against NumPy's in-place
equivalents (`np.add.at` for repeated indices); take, take_along_axis, put, nonzero,
argwhere, flatnonzero and where(cond) against NumPy (and JAX for the out-of-bounds modes);
and the error messages."""
import re

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.errors import ConcretizationTypeError
from stagecraft.numpy.indexing import NonConcreteBooleanIndexError

from _util import assert_trees_allclose

A0 = np.array(5.0, np.float32)
A1 = np.arange(7, dtype=np.float32) * 1.5 - 3            # (7,)
A2 = np.arange(24, dtype=np.int32).reshape(4, 6)          # (4, 6)
A3 = np.arange(60, dtype=np.float32).reshape(3, 4, 5)     # (3, 4, 5)
ARRAYS = {"a0": A0, "a1": A1, "a2": A2, "a3": A3}

S, E, I = slice, Ellipsis, np.array
B = lambda *v: np.array(v, bool)
CASES = [
    # basic, for reference (the basic path is tested in test_indexing_basic.py)
    ("a1", 3), ("a1", S(None, None, -2)), ("a2", (E, 1)), ("a3", (None, 1, S(1, 3))),
    ("a0", ()), ("a0", None), ("a0", E),
    # integer arrays
    ("a1", I([0, 2, -1])), ("a1", I([[0, 1], [2, 3]])), ("a1", I([], np.int32)),
    ("a1", I([6, 6, 0, 0])), ("a1", I([3], np.uint8)), ("a1", I([-1, -7], np.int8)),
    ("a1", (I([1, 2]), None)), ("a1", (None, I([1, 2]))),
    ("a2", (I([0, 3]), I([1, 5]))), ("a2", (I([[0], [3]]), I([1, 5, 2]))),
    ("a2", (S(None), I([0, -1]))), ("a2", (I([1, 2]), S(None))), ("a2", I([1, 2])),
    ("a2", (I([1, 2]), S(1, 5, 2))), ("a2", (S(None, None, -1), I([1, 2]))),
    ("a2", (I([1, 2]), S(None, None, -2))), ("a2", (None, I([1, 2]), None)),
    ("a2", (E, I([0, 5]))), ("a2", (I([3, 0]), E, None)), ("a2", (I(1), I([0, 2]))),
    ("a2", (I([1, 3], np.uint8), 2)), ("a2", (S(None), I([-1, -6], np.int8))),
    ("a2", ([0, 2], [1, 1])), ("a2", ((0, 2), 3)), ("a2", (I([[1, 2], [3, 0]]), S(2, 4))),
    ("a3", (I([0, 2]), S(None), I([1, 4]))), ("a3", (S(None), I([0, 2]), I([1, 4]))),
    ("a3", (1, S(None), I([1, 4]))), ("a3", (S(None), 1, I([1, 4]))),
    ("a3", (I([0, 2]), 1, S(None))), ("a3", (I([[0], [2]]), I([[1, 3]]), I([4]))),
    ("a3", (I([0, 1]), None, I([2, 3]))), ("a3", (S(None), I([0, 1]), E, I([2, 3]))),
    ("a3", (I([0, 1]), E, I([2, 3]))), ("a3", (I(2), I([0, 2]))), ("a3", I(2)),
    ("a3", (np.int32(1), I([0, 2]), S(1, 3))), ("a3", I([[0, 1], [2, 0]])),
    ("a3", ([0, 2], S(None), [1, 1])), ("a3", (I([-1, -3]), I([-4]))),
    ("a3", (S(1, 3), I([0, 3]), S(None, None, -2))),
    ("a3", (I([2, 0]), S(4, 0, -2), I([1, 0]))), ("a3", (I([], np.int32), S(None), 1)),
    ("a3", (E, I([[4, 0]]), None)), ("a3", (None, S(None), None, I([1]), S(None, 2))),
    # boolean masks
    ("a1", A1 > 1), ("a1", B(1, 0, 1, 1, 0, 0, 1)), ("a1", np.zeros(7, bool)),
    ("a2", A2 % 3 == 0), ("a2", B(1, 0, 1, 0)), ("a2", (S(None), B(0, 1, 1, 0, 0, 1))),
    ("a2", ([True, False, True, False], 1)), ("a3", A3[:, :, 0] > 20),
    ("a3", (S(None), B(1, 0, 1, 1), 1)), ("a3", (B(1, 0, 1), S(None), I([0, 4]))),
    ("a3", (E, np.zeros(5, bool))), ("a3", (1, A3[1] > 30)), ("a3", (None, A3[..., 1] > 7)),
    # scalar booleans (a new axis of size 1 or 0, an advanced index as in NumPy)
    ("a2", True), ("a2", False), ("a2", (E, True)), ("a2", (None, False)),
    ("a3", (S(None), True, I([0, 1]))), ("a3", (0, S(None), True)),
    ("a3", (S(None), 0, True, 1)), ("a0", True), ("a0", False), ("a0", (None, True)),
]


def _id(case):
  return f"{case[0]}-{case[1]!r}".replace(" ", "").replace("\n", "")[:60]


def _check(got, want):
  assert got.shape == want.shape, (got.shape, want.shape)
  assert np.dtype(got.dtype) == want.dtype, (got.dtype, want.dtype)
  np.testing.assert_array_equal(np.asarray(got), want)


def _check_all(got, want):
  """`_check` for each output of a multi-output function (the same number of outputs)."""
  assert_trees_allclose(got, want, rtol=0, atol=0, check_dtypes=True)


def test_table_size():
  assert len(CASES) >= 60
  assert {c[0] for c in CASES} == set(ARRAYS)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_index_eager_and_jit_vs_numpy(case):
  name, idx = case
  x = ARRAYS[name]
  want = x[idx]
  _check(jnp.asarray(x)[idx], want)
  _check(sc.jit(lambda v: v[idx])(x), want)


TRACED_CASES = [  # integer-array entries become jit arguments (traced indices)
    ("a1", (I([0, 2, -1]),)), ("a2", (I([0, 3]), I([1, 5]))), ("a2", (S(None), I([0, -1]))),
    ("a3", (I([0, 2]), S(None), I([1, 4]))), ("a3", (S(None), I([0, 2]), I([1, 4]))),
    ("a3", (I([[0], [2]]), 1, I([[1, 3]]))), ("a3", (None, I([1, 0]), E, S(None, None, -1))),
    ("a3", (I(2), S(1, 3), I([4, 4, 0]))),
]


@pytest.mark.parametrize("case", TRACED_CASES, ids=_id)
def test_traced_integer_array_indices(case):
  name, idx = case
  x = ARRAYS[name]
  arrays = [i for i in idx if isinstance(i, np.ndarray)]

  def f(v, *arrs):
    it = iter(arrs)
    return v[tuple(next(it) if isinstance(i, np.ndarray) else i for i in idx)]
  _check(sc.jit(f)(x, *arrays), x[idx])
  _check(sc.jit(f)(x, *[a.astype(np.int8) for a in arrays]), x[idx])


def test_out_of_bounds_array_indices_clamp_as_jax():
  x = np.arange(5.0, dtype=np.float32)
  idx = np.array([7, -9, 2])
  want = jjnp.asarray(x)[idx]
  _check(jnp.asarray(x)[idx], np.asarray(want))
  _check(sc.jit(lambda v, i: v[i])(x, idx), np.asarray(want))
  _check(jnp.asarray(x).at[idx].get(mode="fill"),
         np.asarray(jjnp.asarray(x).at[idx].get(mode="fill")))
  _check(jnp.asarray(x).at[idx].get(mode="fill", fill_value=-1),
         np.array([-1, -1, 2], np.float32))
  _check(jnp.asarray(x).at[idx].get(mode="clip"), np.array([4, 0, 2], np.float32))
  _check(jnp.asarray(x).at[9].get(mode="fill"), np.float32(np.nan) * np.ones((), np.float32))
  _check(jnp.asarray(x).at[-1].get(mode="fill", wrap_negative_indices=False),
         np.array(np.nan, np.float32))
  _check(jnp.asarray(A2).at[1, 9].get(mode="fill"), np.array(np.iinfo(np.int32).min, np.int32))


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_random_advanced_indices_vs_numpy(data):
  shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
  x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
  idx = []
  bshape = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
  for d in shape:
    kind = data.draw(st.sampled_from(["array", "slice", "int", "none"]))
    if kind == "array":
      idx.append(data.draw(hnp.arrays(np.int32, bshape, elements=st.integers(-d, d - 1))))
    elif kind == "slice":
      idx.append(slice(*data.draw(st.tuples(st.integers(-d, d), st.integers(-d, d),
                                            st.sampled_from([1, 2, -1, -3])))))
    elif kind == "int":
      idx.append(data.draw(st.integers(-d, d - 1)))
    else:
      idx.append(None)
      idx.append(slice(None))
  idx = tuple(idx)
  _check(jnp.asarray(x)[idx], x[idx])


# ---------------------------------------------------------------------------
# x.at[idx] updates


def _np_update(op, x, idx, v):
  out = np.array(x, copy=True)
  if op == "set":
    out[idx] = v
  else:
    ufunc = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
             "min": np.minimum, "max": np.maximum, "divide": np.true_divide,
             "power": np.power}[op]
    if op in ("divide", "power"):
      out = out.astype(np.result_type(out, np.float32)) if op == "divide" else out
    ufunc.at(out, idx, v)
  return out


UPDATE_CASES = [  # array, index, values (repeated indices only where the op accumulates)
    ("a1", I([0, 2, 5]), np.float32(2.5)), ("a1", I([1, 1, 3, 1]), I([1, 2, 3, 4], np.float32)),
    ("a1", A1 > 0, np.float32(-1)), ("a1", S(1, 6, 2), I([7, 8, 9], np.float32)),
    ("a1", -2, np.float32(4)), ("a2", (I([0, 3]), I([1, 5])), I([10, 20], np.int32)),
    ("a2", (S(None), I([0, 0, 4])), I([[1], [2], [3], [4]], np.int32)),
    ("a2", (I([[0], [2]]), S(1, None, 2)), np.int32(5)), ("a2", A2 % 5 == 1, np.int32(3)),
    ("a2", (E, I([-1, -1])), np.int32(2)), ("a3", (I([0, 2]), S(None), I([1, 4])),
                                            np.float32(3)),
    ("a3", (S(None), 1, I([1, 1])), I([1, 2], np.float32)),
    ("a3", (None, 1, S(None, None, -1)), I([1, 2, 3, 4, 5], np.float32)),
    ("a3", (S(None), True, I([0, 1])), np.float32(2)), ("a2", (1, S(None)), np.int32(7)),
]
OPS = ["set", "add", "subtract", "multiply", "min", "max", "divide", "power"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", UPDATE_CASES, ids=_id)
def test_at_updates_vs_numpy(case, op):
  name, idx, v = case
  x = ARRAYS[name]
  if op == "set" and len(np.unique(np.asarray(np.arange(x.size).reshape(x.shape)[idx]))) != \
      np.asarray(np.arange(x.size).reshape(x.shape)[idx]).size:
    pytest.skip("set with repeated indices: which write wins is unspecified")
  if op == "power":
    v = (np.floor(np.abs(np.asarray(v))) % 3).astype(x.dtype)   # small integral exponents
  want = _np_update(op, x, idx, v)
  fn = lambda arr, vals: getattr(arr.at[idx], op)(vals)
  got = fn(jnp.asarray(x), v)
  if op == "divide":
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
  else:
    _check(got, want.astype(x.dtype))
  got_jit = sc.jit(fn)(x, v)
  np.testing.assert_allclose(np.asarray(got_jit), np.asarray(got), rtol=1e-6)


def test_at_add_repeated_indices_is_np_add_at():
  x = np.zeros((5, 3), np.float32)
  idx = np.array([0, 4, 0, 0, 2, 4])
  v = np.arange(18, dtype=np.float32).reshape(6, 3)
  want = x.copy()
  np.add.at(want, idx, v)
  _check(jnp.asarray(x).at[idx].add(v), want)
  _check(sc.jit(lambda a, i, u: a.at[i].add(u))(x, idx, v), want)
  want = np.ones((5,), np.int32)
  np.multiply.at(want, [1, 1, 3], [2, 3, 4])
  _check(jnp.ones(5, np.int32).at[np.array([1, 1, 3])].multiply(np.array([2, 3, 4])), want)


def test_at_modes_and_out_of_bounds_updates():
  x = jnp.arange(5.0)
  _check(x.at[10].add(10.0), np.arange(5.0, dtype=np.float32))                 # dropped
  _check(x.at[20].add(10.0, mode="clip"), np.array([0, 1, 2, 3, 14], np.float32))
  _check(x.at[np.array([1, 9])].set(7.0), np.array([0, 7, 2, 3, 4], np.float32))
  _check(x.at[-1].set(99.0), np.array([0, 1, 2, 3, 99], np.float32))
  _check(x.at[-1].set(99.0, wrap_negative_indices=False, mode="drop"),
         np.arange(5.0, dtype=np.float32))
  for mode in ["clip", "drop", "promise_in_bounds"]:
    idx = np.array([0, 6, -8, 2])
    want = jjnp.arange(5.0).at[idx].max(3.0, mode=mode)
    _check(x.at[idx].max(3.0, mode=mode), np.asarray(want))
    _check(sc.jit(lambda a, i: a.at[i].add(1.0, mode=mode))(x, idx),
           np.asarray(jjnp.arange(5.0).at[idx].add(1.0, mode=mode)))


def test_at_dtypes_and_weak_types():
  xi = jnp.arange(4)                                  # int32
  # computed in float, cast back, with JAX's FutureWarning about the unsafe cast
  for m in (jnp, jjnp):
    with pytest.warns(FutureWarning, match="scatter inputs have incompatible types: cannot "
                      "safely cast value from dtype=float32 to dtype=int32"):
      r = m.arange(4).at[1].add(2.7)
    _check(r, np.array([0, 3, 2, 3], np.int32))
  _check(xi.at[np.array([0, 2])].divide(2), np.array([0, 1, 1, 3], np.float32))
  assert not xi.at[0].set(5).weak_type
  w = jnp.asarray(2.0) * jnp.ones(3)                  # strong f32
  assert w.at[0].set(1).dtype == np.float32
  # bool arrays: add/multiply raise JAX 0.10.2's TypeError (lax add/mul reject bool);
  # set/min/max work.
  idx = np.array([0, 0])
  for op, prim in [("add", "add"), ("multiply", "mul")]:
    msg = (f"{prim} does not accept dtype bool at position 0. Accepted dtypes at position 0 "
           "are subtypes of integer, floating, complexfloating.")
    for m in (jnp, jjnp):
      with pytest.raises(TypeError, match=re.escape(msg)):
        getattr(m.zeros(3, bool).at[idx], op)(True)
    with pytest.raises(TypeError, match=re.escape(msg)):
      sc.jit(lambda a: getattr(a.at[idx], op)(True))(np.zeros(3, bool))
  # NB: jax's message here is "sub does not accept dtype bool at position 0. ...".
  with pytest.raises(TypeError, match="does not accept dtype bool"):
    jnp.zeros(3, bool).at[idx].subtract(True)
  _check(jnp.zeros(3, bool).at[idx].set(True), np.array([True, False, False]))
  _check(jnp.zeros(3, bool).at[idx].max(True), np.array([True, False, False]))
  _check(jnp.ones(3, bool).at[idx].min(False), np.array([False, True, True]))
  h = jnp.ones(3, np.float16).at[1].multiply(3.0)
  _check(h, np.array([1, 3, 1], np.float16))


def test_at_repr_and_jit_of_traced_values():
  x = jnp.arange(3.0)
  assert "_IndexUpdateRef" in repr(x.at[1])
  f = sc.jit(lambda a, i, v: a.at[i].set(v))
  _check(f(np.zeros(4, np.float32), 2, np.float32(5)), np.array([0, 0, 5, 0], np.float32))
  _check(f(np.zeros(4, np.float32), np.array([1, 3]), np.float32(5)),
         np.array([0, 5, 0, 5], np.float32))


# ---------------------------------------------------------------------------
# take, take_along_axis, put


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("mode", ["clip", "wrap", None])
def test_take_vs_numpy(axis, mode):
  x = A3
  n = x.size if axis is None else x.shape[axis]
  idx = np.array([[0, n - 1], [1, -2]]) if mode is None else np.array([[0, n + 2], [-1, 7]])
  want = np.take(x, idx, axis=axis, mode=mode or "raise")
  _check(jnp.take(x, idx, axis=axis, mode=mode), want)
  _check(sc.jit(lambda v, i: jnp.take(v, i, axis=axis, mode=mode))(x, idx), want)


def test_take_fill_mode_vs_jax():
  x = np.array([[1., 2., 3.], [4., 5., 6.]], np.float32)
  idx = np.array([2, 0, -1, 5, -4])
  for axis in (None, 0, 1):
    _check(jnp.take(x, idx, axis=axis), np.asarray(jjnp.take(x, idx, axis=axis)))
    _check(jnp.take(x, idx, axis=axis, fill_value=-7),
           np.asarray(jjnp.take(x, idx, axis=axis, fill_value=-7)))
  _check(jnp.take(x, np.zeros((0, 2), np.int32), axis=1), np.zeros((2, 0, 2), np.float32))
  with pytest.raises(NotImplementedError, match="'raise' mode to jnp.take is not supported"):
    jnp.take(x, idx, mode="raise")
  with pytest.raises(ValueError, match="Invalid mode 'foo' for np.take"):
    jnp.take(x, idx, mode="foo")
  with pytest.raises(TypeError, match="take indices must be of integer type, got float32"):
    jnp.take(x, np.array([1.0], np.float32))


@pytest.mark.parametrize("axis,ishape", [(0, (2, 4)), (1, (3, 2)), (-1, (3, 6)), (1, (1, 5)),
                                         (0, (5, 1)), (None, (7,))])
def test_take_along_axis_vs_numpy(axis, ishape):
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  n = x.size if axis is None else x.shape[axis]
  idx = np.random.default_rng(0).integers(-n, n, ishape)
  want = np.take_along_axis(x, idx, axis=axis)
  _check(jnp.take_along_axis(x, idx, axis=axis), want)
  _check(sc.jit(lambda v, i: jnp.take_along_axis(v, i, axis=axis))(x, idx), want)


def test_take_along_axis_argsort_fill_and_errors():
  x = np.array([[5, 3, 4], [2, 7, 6]], np.int32)
  order = np.argsort(x, axis=1)
  _check(jnp.take_along_axis(x, order, axis=1), np.sort(x, axis=1))
  idx = np.array([[1, 0, 2]])
  _check(jnp.take_along_axis(x.astype(np.float32), idx, axis=0),
         np.asarray(jjnp.take_along_axis(x.astype(np.float32), idx, axis=0)))
  x3 = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
  idx3 = np.random.default_rng(1).integers(0, 3, (2, 5, 4))
  _check(jnp.take_along_axis(x3, idx3, axis=1), np.take_along_axis(x3, idx3, axis=1))
  with pytest.raises(ValueError, match="indices and arr must have the same number of "
                                       "dimensions; 1 vs. 2"):
    jnp.take_along_axis(x, np.array([0]), axis=1)
  with pytest.raises(ValueError, match="take_along_axis indices must be 1D if axis=None"):
    jnp.take_along_axis(x, order, axis=None)


@pytest.mark.parametrize("mode", [None, "clip", "wrap"])
def test_put_vs_numpy(mode):
  x = np.zeros((3, 5), np.int32)
  ind = np.array([0, 7, 14])
  v = np.array([10, 20])   # repeated cyclically, as NumPy
  want = x.copy()
  np.put(want, ind, v, mode=mode or "raise")
  _check(jnp.put(x, ind, v, mode=mode, inplace=False), want)
  _check(sc.jit(lambda a, i: jnp.put(a, i, v, mode=mode, inplace=False))(x, ind), want)
  oob = np.array([-1, 20, -30])
  want = np.asarray(jjnp.put(jjnp.zeros(5), oob, jjnp.array([1., 2., 3.]), mode=mode,
                             inplace=False))
  if mode == "wrap":
    _check(jnp.put(jnp.zeros(5), oob, np.array([1., 2., 3.], np.float32), mode=mode,
                   inplace=False), want)
  with pytest.raises(ValueError, match="Pass inplace=False to instead return an updated"):
    jnp.put(x, ind, v)


# ---------------------------------------------------------------------------
# nonzero, argwhere, flatnonzero, where(cond)

NZ = [np.array([0, 3, 0, 5, 1]), np.array([[0, 1], [2, 0], [0, 0]], np.float32),
      np.zeros((2, 3), bool), np.array([[[True, False], [True, True]]]), np.zeros((0, 2))]


@pytest.mark.parametrize("a", NZ, ids=lambda a: f"{a.dtype}{a.shape}")
def test_nonzero_argwhere_flatnonzero_vs_numpy(a):
  _check_all(jnp.nonzero(a), [w.astype(np.int32) for w in np.nonzero(a)])
  _check(jnp.argwhere(a), np.argwhere(a).astype(np.int32))
  _check(jnp.flatnonzero(a), np.flatnonzero(a).astype(np.int32))
  _check_all(jnp.where(a), [w.astype(np.int32) for w in np.where(a)])


@pytest.mark.parametrize("size", [0, 2, 6])
@pytest.mark.parametrize("a", NZ[:4], ids=lambda a: f"{a.dtype}{a.shape}")
def test_nonzero_with_size_under_jit(a, size):
  fills = tuple(range(10, 10 + a.ndim))

  def every_form(np_):
    # NB: one jitted program per library (each separate call would compile its own)
    return lambda v: (np_.nonzero(v, size=size, fill_value=-1), np_.nonzero(v, size=size),
                      np_.argwhere(v, size=size), np_.flatnonzero(v, size=size, fill_value=9),
                      np_.where(v, size=size, fill_value=fills))
  ours = sc.jit(every_form(jnp))(a)
  theirs = jax.jit(every_form(jjnp))(a)
  _check_all(jnp.nonzero(a, size=size, fill_value=-1), [np.asarray(w) for w in theirs[0]])
  for i in (0, 1, 4):
    _check_all(ours[i], [np.asarray(w) for w in theirs[i]])
  for i in (2, 3):
    _check(ours[i], np.asarray(theirs[i]))


def test_nonzero_indices_index_the_array():
  x = np.array([[0.0, 2.0, 0.0], [3.0, 0.0, 4.0]], np.float32)
  f = sc.jit(lambda v: v[jnp.nonzero(v, size=3)])
  _check(f(x), x[np.nonzero(x)])
  _check(jnp.argwhere(np.array(3)), np.argwhere(np.array(3)).astype(np.int32))
  _check(jnp.argwhere(np.array(0)), np.argwhere(np.array(0)).astype(np.int32))


def test_nonzero_errors():
  with pytest.raises(ConcretizationTypeError, match="The size argument of jnp.nonzero must "
                                                     "be statically specified"):
    sc.jit(jnp.nonzero)(np.array([1, 0]))
  with pytest.raises(ConcretizationTypeError, match="size argument of jnp.nonzero"):
    sc.jit(lambda v: jnp.where(v > 0))(np.array([1, 0]))
  with pytest.raises(ValueError, match="Calling nonzero on 0d arrays is not allowed"):
    jnp.nonzero(np.array(1))
  with pytest.raises(ValueError, match=re.escape("fill_value must be a scalar or a tuple of "
                                                 "length 2; got (1, 2, 3)")):
    jnp.nonzero(np.ones((2, 2)), size=3, fill_value=(1, 2, 3))
  with pytest.raises(ValueError, match="either both or neither of x and y"):
    jnp.where(np.array([True]), 1)
  _check(jnp.where(np.array([True, False]), 1, 2), np.array([1, 2], np.int32))


# ---------------------------------------------------------------------------
# Errors


def test_traced_boolean_mask_error():
  with pytest.raises(NonConcreteBooleanIndexError) as info:
    sc.jit(lambda v: v[v > 0])(A1)
  assert isinstance(info.value, IndexError)
  msg = str(info.value)
  assert msg.startswith("Array boolean indices must be concrete; got bool[7]\n")   # JAX's
  assert "the traced mask at position 0" in msg
  assert "jnp.where(mask, x, 0)" in msg and "jnp.nonzero(mask, size=N)" in msg
  with pytest.raises(NonConcreteBooleanIndexError, match="got bool\\[4,6\\]"):
    sc.jit(lambda v: v.at[v > 3].set(0))(A2)
  with pytest.raises(NonConcreteBooleanIndexError, match="got bool\\[\\]"):
    sc.jit(lambda v, b: v[b])(A1, True)
  # the fix the message proposes works under jit
  _check(sc.jit(lambda v: jnp.where(v > 0, v, 0).sum())(A1), np.float32(A1[A1 > 0].sum()))
  # a concrete mask is fine under jit, also when it is an Array made outside
  mask = jnp.asarray(A1 > 0)
  _check(sc.jit(lambda v: v[mask])(A1), A1[A1 > 0])


class _Opaque:
  def __repr__(self):
    return "<opaque>"


INDEX_ERRORS = [
    (A1, B(1, 0, 1, 0), IndexError, "boolean index did not match shape of indexed array in "
                                    "index 0: got (4,), expected (7,)"),
    (A2, (S(None), B(1, 0)), IndexError, "boolean index did not match shape of indexed array "
                                         "in index 1: got (2,), expected (6,)"),
    (A1, [1, 2], TypeError, "Using a non-tuple sequence for multidimensional indexing is not "
                            "allowed; use `arr[array(seq)]` instead of `arr[seq]`"),
    (A2, [S(None), 1], TypeError, "use `arr[tuple(seq)]` instead of `arr[seq]`"),
    (A1, 2.5, TypeError, "Indexer must have integer or boolean type, got indexer with type "
                         "float64 at position 0"),
    (A1, I([1.0]), TypeError, "Indexer must have integer or boolean type, got indexer with "
                              "type float64"),
    (A2, (0, "a"), TypeError, "stagecraft does not support string indexing; got idx='a'"),
    (A2, (I([0, 1]), I([0, 1, 2])), IndexError, "shape mismatch: indexing arrays could not be "
                                                "broadcast together with shapes (2,) (3,)"),
    (A2, (A2 > 3, 1), IndexError, "Too many indices: array is 2-dimensional, but 3 "
                                  "were indexed"),
    (A1, _Opaque(), IndexError, "only integers, slices (`:`), ellipsis (`...`), newaxis (`None`) "
                               "and integer or boolean arrays are valid indices"),
    (A1, (E, E), IndexError, "an index can only have a single ellipsis ('...')"),
    # NB: out-of-bounds static integers clamp, as in JAX (tests/test_indexing_basic.py)
]


@pytest.mark.parametrize("x,idx,exc,msg", INDEX_ERRORS, ids=lambda v: repr(v)[:25])
def test_index_errors(x, idx, exc, msg):
  with pytest.raises(exc, match=re.escape(msg)):
    jnp.asarray(x)[idx]
  with pytest.raises(exc, match=re.escape(msg)):
    sc.jit(lambda v: v[idx])(x)


def test_traced_slice_bounds_and_fill_value_errors():
  with pytest.raises(IndexError, match="Slice entries must be static integers. Got slice"
                                       "\\(JitTracer\\(~int32\\[\\]\\), None, None\\) at "
                                       "position 0"):
    sc.jit(lambda v, i: v[i:])(A1, 2)
  with pytest.raises(ConcretizationTypeError, match="fill_value argument to indexed get"):
    sc.jit(lambda v, f: v.at[I([1])].get(mode="fill", fill_value=f))(A1, np.float32(1))
  with pytest.raises(ValueError, match="fill_value argument to indexed get\\(\\) must be a "
                                       "scalar"):
    jnp.asarray(A1).at[I([1])].get(mode="fill", fill_value=np.zeros(2))
