"""lax/sort.py, lax/cumulative.py and the general `reduce`/`reduce_xor` of lax/reduction.py
against NumPy (values, stable order) and JAX (NaN and -0.0 placement, top_k ties, messages):
eager and staged runs, and the abstract eval against what executes."""
import os
import re
import sys

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from stagecraft import core, lax
from stagecraft.interpreters import lowering, partial_eval as pe
from stagecraft.runtime import dispatch

sys.path.insert(0, os.path.dirname(__file__))
from _util import staged_call  # noqa: E402

from _cases import b1, bf16, c64, f16, f32, i8, i32, u8  # noqa: E402
FLOATS = (f16, bf16, f32)


def _f64(x):
  x = np.asarray(x)
  return x.astype(np.float64) if x.dtype in FLOATS else x


def _bits(x):
  """The array's bit pattern (so -0.0 differs from 0.0 and NaN equals itself)."""
  x = np.asarray(x)
  if x.dtype in FLOATS:
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))
  return x


def _data(rng, shape, dtype, lo=-3, hi=3, specials=False):
  """Small values (many ties); with `specials`, some NaN, -NaN, +-inf, -0.0 for floats."""
  if dtype == b1:
    return rng.random(shape) < 0.5
  if np.issubdtype(dtype, np.integer):
    return rng.integers(max(lo, np.iinfo(dtype).min), hi + 1, shape).astype(dtype)
  x = np.round(rng.uniform(lo, hi, shape) * 2) / 2
  if specials and x.size:
    pool = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0])
    mask = rng.random(shape) < 0.3
    x = np.where(mask, rng.choice(pool, shape), x)
  return x.astype(dtype)


def _check_abstract_eval(fun, xs, results):
  """The traced jaxpr's out avals equal the executed results' avals."""
  jaxpr, _ = pe.trace_to_jaxpr(lambda *a: list(fun(*a)), [core.get_aval(x) for x in xs])
  core.check_jaxpr(jaxpr)
  assert [a for a in jaxpr.out_avals] == [r.aval for r in results]


def _both(fun, *args):
  """Eager and staged results of `fun(*args)` (a tuple of arrays), checked equal bitwise and
  against the abstract eval."""
  eager = tuple(fun(*args))
  staged = staged_call(lambda *a: list(fun(*a)), *args)
  staged = staged if isinstance(staged, list) else [staged]
  assert len(staged) == len(eager)
  for e, s in zip(eager, staged):
    np.testing.assert_array_equal(_bits(e), _bits(s))
  _check_abstract_eval(fun, args, eager)
  return eager


# ---------------------------------------------------------------------------
# sort

_SHAPES = [(1,), (5,), (0,), (3, 4), (4, 0), (2, 3, 4), (1, 6, 2)]


@st.composite
def _sort_case(draw):
  dtype = draw(st.sampled_from([f32, i32, b1, f16, bf16, u8]))
  shape = draw(st.sampled_from(_SHAPES))
  dimension = draw(st.integers(-len(shape), len(shape) - 1))
  return dtype, shape, dimension, draw(st.integers(0, 2**16))


@settings(max_examples=25)
@given(_sort_case())
def test_sort_and_argsort_match_numpy_stable(case):
  dtype, shape, dimension, seed = case
  rng = np.random.default_rng(seed)
  x = _data(rng, shape, dtype, specials=True)
  perm = np.argsort(_f64(x), axis=dimension, kind="stable")   # NaNs last, -0.0 == 0.0
  expected = np.take_along_axis(x, perm, dimension)
  iota = lax.broadcasted_iota(np.int32, shape, dimension % len(shape))
  out, idx = _both(lambda x, i: lax.sort((x, i), dimension, num_keys=1), x, iota)
  np.testing.assert_array_equal(_bits(out), _bits(expected))
  np.testing.assert_array_equal(np.asarray(idx), perm)
  single, = _both(lambda x: [lax.sort(x, dimension)], x)
  np.testing.assert_array_equal(_bits(single), _bits(expected))


def test_sort_nan_and_negative_zero_match_jax():
  x = np.array([np.nan, -np.nan, 1., -0., 0., -np.inf, np.inf, -0., -1., 0.], np.float32)
  for dtype in (f32, f16, bf16):
    xd = x.astype(dtype)
    keys, vals = lax.sort_key_val(xd, np.arange(10, dtype=np.int32))
    jkeys, jvals = jax.lax.sort_key_val(xd, np.arange(10, dtype=np.int32))
    np.testing.assert_array_equal(_bits(keys), _bits(jkeys))
    np.testing.assert_array_equal(np.asarray(vals), np.asarray(jvals))
    # -0.0 and 0.0 are equal keys: a stable sort keeps them in input order; NaNs go last.
    np.testing.assert_array_equal(np.asarray(vals), [5, 8, 3, 4, 7, 9, 2, 6, 0, 1])
  # Unstable sorts still order NaNs last and keep -0.0/0.0 among the zeros.
  out = np.asarray(lax.sort(x, is_stable=False))
  assert np.isnan(out[-2:]).all() and (out[2:6] == 0).all()


def test_sort_complex_lexicographic_matches_numpy_and_jax():
  rng = np.random.default_rng(0)
  x = (rng.integers(-2, 3, (3, 8)) + 1j * rng.integers(-2, 3, (3, 8))).astype(c64)
  x[0, 0] = complex(np.nan, 0)
  x[1, 1] = complex(1, np.nan)
  out = np.asarray(lax.sort(x, 1))
  np.testing.assert_array_equal(out, np.asarray(jax.lax.sort(x, dimension=1)))
  np.testing.assert_array_equal(out[2], np.sort(x[2], kind="stable"))


@settings(max_examples=15)
@given(st.sampled_from([(i32, f32), (f32, i32), (b1, f16), (u8, bf16)]),
       st.sampled_from([(7,), (3, 5), (5, 2, 3)]), st.integers(0, 2**16))
def test_sort_two_keys_matches_lexsort(dtypes_, shape, seed):
  rng = np.random.default_rng(seed)
  d0, d1 = dtypes_
  k0, k1 = _data(rng, shape, d0, -1, 1), _data(rng, shape, d1, -1, 1, specials=True)
  payload = rng.standard_normal(shape).astype(f32)
  dimension = rng.integers(len(shape))
  outs = _both(lambda a, b, c: lax.sort((a, b, c), dimension, num_keys=2), k0, k1, payload)
  # np.lexsort is stable and sorts by the last key first: primary k0, then k1, NaNs last.
  m0, m1 = np.moveaxis(_f64(k0), dimension, -1), np.moveaxis(_f64(k1), dimension, -1)
  perm = np.empty(m0.shape, np.int64)
  for i in np.ndindex(m0.shape[:-1]):
    perm[i] = np.lexsort((m1[i], m0[i]))
  perm = np.moveaxis(perm, -1, dimension)
  for out, x in zip(outs, (k0, k1, payload)):
    np.testing.assert_array_equal(_bits(out), _bits(np.take_along_axis(x, perm, dimension)))
  # num_keys=1 ignores k1: a stable sort keeps ties of k0 in input order.
  _, second = lax.sort((k0, k1), dimension, num_keys=1)
  perm1 = np.argsort(_f64(k0), axis=dimension, kind="stable")
  np.testing.assert_array_equal(_bits(second), _bits(np.take_along_axis(k1, perm1, dimension)))


def test_sort_params_weak_type_and_lowering():
  x = core.ShapedArray((3, 4), f32, weak_type=True)
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.sort(x, -2)], [x])
  assert jaxpr.eqns[0].params == {"dimension": 0, "is_stable": True, "num_keys": 1}
  assert jaxpr.out_avals[0] == x     # weak type kept, as JAX
  text = lowering.lower_jaxpr_to_module("sort", jaxpr)
  assert "{dimension = 0 : i64, is_stable = true}" in text
  assert "TOTALORDER" in text and "dense<0x7FC00000>" in text
  j, _ = pe.trace_to_jaxpr(lambda x: [lax.sort(x)], [core.ShapedArray((3,), i32)])
  assert "compare LT, %0, %1, SIGNED" in lowering.lower_jaxpr_to_module("s", j)


@pytest.mark.parametrize("args,kwargs", [
    ([], {}),
    ([np.zeros(3), np.zeros(4)], {}),
    ([np.zeros(3), np.zeros(3)], {"num_keys": 3}),
    ([np.zeros(3), np.zeros(3)], {"num_keys": 0}),
    (np.zeros(3), {"num_keys": 2}),
    (np.zeros(3), {"dimension": 1}),
    (np.float32(3), {}),
])
def test_sort_errors_match_jax(args, kwargs):
  with pytest.raises((TypeError, ValueError)) as jax_err:
    jax.lax.sort(args, **kwargs)
  with pytest.raises(jax_err.type, match=re.escape(str(jax_err.value))):
    lax.sort(args, **kwargs)


def test_sort_primitive_errors():
  with pytest.raises(ValueError, match=r"sort dimension 2 is out of bounds for operands of "
                     r"shape \(3, 4\)"):
    lax.sort_p.bind(np.zeros((3, 4)), dimension=2, is_stable=True, num_keys=1)
  with pytest.raises(ValueError, match=r"num_keys=2 must be between 1 and len\(operand\)=1"):
    lax.sort_p.bind(np.zeros(3), dimension=0, is_stable=True, num_keys=2)


# ---------------------------------------------------------------------------
# top_k


@pytest.mark.parametrize("dtype", [f32, bf16, i32, b1, u8])
def test_top_k_ties_nan_and_axes_match_jax(dtype):
  rng = np.random.default_rng(1)
  x = _data(rng, (4, 6, 5), dtype, -2, 2, specials=True)
  for axis, k in [(-1, 0), (-1, 5), (0, 2), (1, 3)]:
    run = _both if k == 3 else (lambda f, x: f(x))   # staged once: compiling is costly
    vals, idx = run(lambda x: lax.top_k(x, k, axis=axis), x)
    jvals, jidx = jax.lax.top_k(x, k, axis=axis)
    np.testing.assert_array_equal(_bits(vals), _bits(jvals))
    np.testing.assert_array_equal(np.asarray(idx), np.asarray(jidx))
    assert idx.dtype == i32 and vals.dtype == dtype
  # Without NaNs and -0.0 (which top_k ranks below 0.0): the order of a stable descending
  # sort, ties giving the lowest index first.
  x = _data(rng, (3, 7), dtype, -2, 2)
  if dtype in FLOATS:
    x = (x + dtype.type(0)).astype(dtype)
  vals, idx = lax.top_k(x, 7)
  order = np.argsort(-_f64(x).astype(np.float64), axis=-1, kind="stable")
  np.testing.assert_array_equal(np.asarray(idx), order)


def test_top_k_lowering_and_params():
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: list(lax.top_k(x, 2, axis=0)),
                               [core.ShapedArray((3, 4), f32, weak_type=True)])
  assert jaxpr.eqns[0].params == {"k": 2, "axis": 0}
  assert jaxpr.out_avals == [core.ShapedArray((2, 4), f32, True), core.ShapedArray((2, 4), i32)]
  text = lowering.lower_jaxpr_to_module("top_k", jaxpr)
  assert '"chlo.top_k"(%0) {k = 2 : i64} : (tensor<4x3xf32>) -> (tensor<4x2xf32>, ' in text


@pytest.mark.parametrize("shape,dtype,k,axis", [
    ((3,), c64, 1, -1), ((), f32, 1, -1), ((3,), f32, 4, -1), ((3,), f32, -1, -1),
    ((3,), f32, 1, 1), ((2, 3), f32, 3, 0),
])
def test_top_k_errors_match_jax(shape, dtype, k, axis):
  x = np.zeros(shape, dtype)
  with pytest.raises((TypeError, ValueError)) as jax_err:
    jax.lax.top_k(x, k, axis=axis)
  with pytest.raises(jax_err.type, match=re.escape(str(jax_err.value))):
    lax.top_k(x, k, axis=axis)


# ---------------------------------------------------------------------------
# Cumulative reductions

CUM = {  # name -> (accepted test dtypes, NumPy reference on float64/int data)
    "cumsum": ([f32, i32, f16, bf16, i8, u8, c64], np.add),
    "cumprod": ([f32, i32, f16, bf16, i8, c64], np.multiply),
    "cummax": ([f32, i32, f16, bf16, u8], np.maximum),
    "cummin": ([f32, i32, f16, bf16, u8], np.minimum),
    "cumlogsumexp": ([f32, f16, bf16], np.logaddexp),
}
_CUM_SHAPES = [(1,), (6,), (0,), (3, 5), (4, 0), (0, 3), (2, 3, 4)]


def _cum_ref(name, x, axis, reverse):
  ufunc = CUM[name][1]
  x = np.flip(x, axis) if reverse else x
  if np.issubdtype(x.dtype, np.integer):   # wraps on overflow, as XLA's integers do
    with np.errstate(over="ignore"):
      out = ufunc.accumulate(x, axis=axis, dtype=x.dtype)
  else:
    wide = x.astype(np.complex128 if x.dtype == c64 else np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
      out = ufunc.accumulate(wide, axis=axis) if x.size else wide
  return np.flip(out, axis) if reverse else out


@st.composite
def _cum_case(draw):
  name = draw(st.sampled_from(sorted(CUM)))
  dtype = draw(st.sampled_from(CUM[name][0]))
  shape = draw(st.sampled_from(_CUM_SHAPES))
  axis = draw(st.integers(0, len(shape) - 1))
  specials = name in ("cummax", "cummin", "cumlogsumexp") and draw(st.booleans())
  return name, dtype, shape, axis, draw(st.booleans()), specials, draw(st.integers(0, 2**16))


@settings(max_examples=40)
@given(_cum_case())
def test_cumulative_matches_numpy(case):
  name, dtype, shape, axis, reverse, specials, seed = case
  rng = np.random.default_rng(seed)
  if name == "cumprod" and dtype not in (i32, i8):   # magnitudes near 1: no overflow
    x = (rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)).astype(dtype)
    if dtype == c64:
      x = (x * np.exp(1j * rng.uniform(0, 6, shape))).astype(c64)
  elif dtype == c64:
    x = (rng.uniform(-3, 3, shape) + 1j * rng.uniform(-3, 3, shape)).astype(c64)
  elif dtype in (i8, u8) or name == "cumprod":
    x = rng.integers(-128 if dtype == i8 else 0, 128, shape).astype(dtype)  # overflows
  else:
    x = _data(rng, shape, dtype, specials=specials)
  f = getattr(lax, name)
  out, = _both(lambda x: [f(x, axis, reverse)], x)
  assert out.dtype == dtype and out.shape == x.shape
  expected = _cum_ref(name, x, axis, reverse)
  if dtype in (f32, f16, bf16, c64):
    eps = float(ml_dtypes.finfo(dtype if dtype != c64 else f32).eps)
    n = max(shape[axis], 1)
    np.testing.assert_allclose(np.asarray(out).astype(expected.dtype), expected,
                               rtol=4 * eps * n, atol=4 * eps * n * 3)
  else:
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_cumlogsumexp_and_cummax_special_values_match_numpy_and_jax():
  x = np.array([[-np.inf, -np.inf, 0., -np.inf],
                [np.inf, np.inf, 1., -np.inf],
                [1., np.nan, 2., 3.],
                [-np.inf, np.inf, -np.inf, 5.],
                [1e30, 1e30, -1e30, 0.]], np.float32)
  for name in ("cumlogsumexp", "cummax", "cummin", "cumsum"):
    for reverse in (False, True):
      out = np.asarray(getattr(lax, name)(x, 1, reverse))
      ref = np.asarray(getattr(jax.lax, name)(x, 1, reverse))
      np.testing.assert_allclose(out, ref, rtol=1e-6)
      np.testing.assert_allclose(out, _cum_ref(name, x, 1, reverse).astype(f32), rtol=1e-6)


def test_cumsum_integer_overflow_wraps():
  x = np.array([100, 100, 100, -128], np.int8)
  np.testing.assert_array_equal(np.asarray(lax.cumsum(x)), [100, -56, 44, -84])
  np.testing.assert_array_equal(np.asarray(lax.cumsum(np.full(3, 2**30, np.int32))),
                                [2**30, -2**31, -2**30])


def test_cumulative_params_weak_type_and_lowering():
  for name in CUM:
    f = getattr(lax, name)
    jaxpr, _ = pe.trace_to_jaxpr(lambda x: [f(x, 1, True)],
                                 [core.ShapedArray((3, 4), f32, weak_type=True)])
    assert jaxpr.eqns[0].params == {"axis": 1, "reverse": True}
    assert jaxpr.out_avals[0].weak_type
    assert f"b:f32[3,4] = {name}[axis=1 reverse=True] a" in str(jaxpr)
    text = lowering.lower_jaxpr_to_module(name, jaxpr)
    assert ('"stablehlo.reduce_window"' in text and "padding = dense<[[0, 0], [0, 3]]> : "
            "tensor<2x2xi64>" in text and "window_dimensions = array<i64: 1, 4>" in text)
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.cumsum(x)], [core.ShapedArray((5,), i32)])
  text = lowering.lower_jaxpr_to_module("cumsum", jaxpr)
  assert "padding = dense<[[4, 0]]> : tensor<1x2xi64>" in text
  assert float(lax.cumsum(2.0 * np.ones(3, f32), 0)[-1]) == 6.0


@pytest.mark.parametrize("name,x,axis", [
    ("cumsum", np.array([True, False]), 0),
    ("cumprod", np.array([True, False]), 0),
    ("cummax", np.array([True, False]), 0),
    ("cumsum", np.array([1, 2]), -1),
    ("cumsum", np.array([1, 2]), 1),
    ("cummin", np.float32(3), 0),
    ("cumlogsumexp", np.zeros((2, 3), np.float32), 2),
])
def test_cumulative_errors_match_jax(name, x, axis):
  with pytest.raises((TypeError, ValueError)) as jax_err:
    getattr(jax.lax, name)(x, axis)
  with pytest.raises(jax_err.type, match=re.escape(str(jax_err.value))):
    getattr(lax, name)(x, axis)


def test_cumulative_dtype_restrictions():
  # NB: jax.lax 0.10.2 raises OverflowError here (from its -inf identity cast to int).
  with pytest.raises(TypeError, match=r"cumlogsumexp does not accept dtype int32. Accepted "
                     r"dtypes are subtypes of floating."):
    lax.cumlogsumexp(np.arange(3, dtype=np.int32))


def test_cummax_cummin_complex_lexicographic_as_jax():
  # JAX 0.10.2 accepts complex cummax/cummin, ordering by real part, then imaginary part.
  x = np.array([1 + 2j, 1 + 3j, -1 + 9j, 2 - 1j, 2 - 5j, 0j, 3 + 0j], c64)
  expected = {
      ("cummax", False): [1 + 2j, 1 + 3j, 1 + 3j, 2 - 1j, 2 - 1j, 2 - 1j, 3 + 0j],
      ("cummax", True): [3 + 0j] * 7,
      ("cummin", False): [1 + 2j, 1 + 2j] + [-1 + 9j] * 5,
      ("cummin", True): [-1 + 9j] * 3 + [0j] * 3 + [3 + 0j],
  }
  for (name, reverse), want in expected.items():
    out = getattr(lax, name)(x, 0, reverse=reverse)
    assert out.dtype == c64, (name, out.dtype)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want, c64), err_msg=name)
    np.testing.assert_array_equal(
        np.asarray(out), np.asarray(getattr(jax.lax, name)(x, 0, reverse=reverse)),
        err_msg=name)
    staged = staged_call(lambda a: getattr(lax, name)(a, 0, reverse=reverse), x)
    np.testing.assert_array_equal(np.asarray(staged), np.asarray(out), err_msg=name)
  # Along axis 1 of a matrix: ties in the real part are broken by the imaginary part.
  m = np.array([[1 + 2j, 1 + 3j, 1 + 2.5j], [-1 + 9j, -1 + 1j, 0j]], c64)
  np.testing.assert_array_equal(np.asarray(lax.cummax(m, 1)),
                                np.array([[1 + 2j, 1 + 3j, 1 + 3j], [-1 + 9j, -1 + 9j, 0j]],
                                         c64))
  np.testing.assert_array_equal(np.asarray(lax.cummin(m, 1)), np.asarray(jax.lax.cummin(m, 1)))


# ---------------------------------------------------------------------------
# reduce_xor


@settings(max_examples=15)
@given(st.sampled_from([b1, i32, u8, i8]), st.sampled_from([(5,), (0,), (3, 4), (2, 0, 3)]),
       st.integers(0, 2**16))
def test_reduce_xor_matches_numpy(dtype, shape, seed):
  rng = np.random.default_rng(seed)
  x = rng.random(shape) < 0.5 if dtype == b1 else rng.integers(
      np.iinfo(dtype).min, np.iinfo(dtype).max, shape, endpoint=True).astype(dtype)
  axes = tuple(a for a in range(len(shape)) if rng.random() < 0.6)
  out, = _both(lambda x: [lax.reduce_xor(x, axes)], x)
  expected = np.bitwise_xor.reduce(x, axis=axes, initial=np.zeros((), dtype)) if axes else x
  np.testing.assert_array_equal(np.asarray(out), expected)
  assert out.dtype == dtype


def test_reduce_xor_weak_type_and_errors_match_jax():
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.reduce_xor(x, (0,))],
                               [core.ShapedArray((3,), i32, weak_type=True)])
  assert not jaxpr.out_avals[0].weak_type
  assert "stablehlo.xor" in lowering.lower_jaxpr_to_module("x", jaxpr)
  with pytest.raises(TypeError, match=r"logical reduction requires operand dtype bool or int, "
                     r"got float32"):
    lax.reduce_xor(np.zeros(3, f32), (0,))


# ---------------------------------------------------------------------------
# General reduce


def _max_abs(a, b):
  return lax.max(lax.abs(a), lax.abs(b))


@settings(max_examples=15)
@given(st.sampled_from([f32, i32, f16]), st.sampled_from([(5,), (0,), (3, 4), (2, 3, 4)]),
       st.integers(0, 2**16))
def test_reduce_max_abs_matches_numpy(dtype, shape, seed):
  rng = np.random.default_rng(seed)
  x = _data(rng, shape, dtype, -5, 5)
  axes = tuple(a for a in range(len(shape)) if rng.random() < 0.6)
  out, = _both(lambda x: [lax.reduce(x, np.zeros((), dtype), _max_abs, axes)], x)
  expected = np.abs(x).max(axis=axes, initial=0) if axes else x   # nothing to combine
  np.testing.assert_array_equal(np.asarray(out), expected.astype(dtype))


def test_variadic_reduce_argmax_pairs_matches_numpy():
  rng = np.random.default_rng(2)
  x = rng.integers(-3, 4, (4, 7)).astype(f32)
  idx = lax.broadcasted_iota(np.int32, x.shape, 1)

  def argmax_pair(a, b):   # (value, index): the larger value, the lower index among ties
    (va, ia), (vb, ib) = a, b
    pick_a = lax.bitwise_or(lax.gt(va, vb), lax.bitwise_and(lax.eq(va, vb), lax.lt(ia, ib)))
    return lax.select(pick_a, va, vb), lax.select(pick_a, ia, ib)

  init = (np.float32(-np.inf), np.int32(np.iinfo(np.int32).max))
  v, i = _both(lambda x, idx: lax.reduce((x, idx), init, argmax_pair, (1,)), x, idx)
  np.testing.assert_array_equal(np.asarray(v), x.max(1))
  np.testing.assert_array_equal(np.asarray(i), x.argmax(1))
  # A dict tree, and a (sum, product) pair of two dtypes, over both axes.
  y = rng.integers(1, 3, (4, 7)).astype(i32)
  out = lax.reduce({"s": x, "p": y}, {"s": np.float32(0), "p": np.int32(1)},
                   lambda a, b: {"s": a["s"] + b["s"], "p": a["p"] * b["p"]}, (0, 1))
  assert float(out["s"]) == x.sum() and int(out["p"]) == np.prod(y)
  assert out["s"].dtype == f32 and out["p"].dtype == i32


def test_reduce_jaxpr_param_caching_and_closed_over_constants():
  x = np.arange(12, dtype=f32).reshape(3, 4)
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.reduce(x, np.float32(0), _max_abs, (1,))],
                               [core.get_aval(x)])
  eqn, = jaxpr.eqns
  assert eqn.primitive is lax.reduce_p and set(eqn.params) == {"computation", "jaxpr",
                                                              "dimensions"}
  assert eqn.params["computation"] is _max_abs and eqn.params["dimensions"] == (1,)
  assert isinstance(eqn.params["jaxpr"], core.ClosedJaxpr)
  assert "computation=_max_abs" in str(jaxpr) and "max" in str(jaxpr)
  jaxpr2, _ = pe.trace_to_jaxpr(lambda x: [lax.reduce(x, np.float32(0), _max_abs, (1,))],
                                [core.get_aval(x)])
  assert jaxpr2.eqns[0].params["jaxpr"] is eqn.params["jaxpr"]   # traced once
  lax.reduce(x, np.float32(0), _max_abs, (0,))
  before = dispatch.compile_count[0]
  out = lax.reduce(x, np.float32(0), _max_abs, (0,))   # the eager executable is reused
  assert dispatch.compile_count[0] == before
  np.testing.assert_array_equal(np.asarray(out), x[-1])
  # An array constant closed over by the computation is emitted inside the region.
  w = np.array([1., 2.], np.float32)
  out = lax.reduce(x, np.float32(0), lambda a, b: a + b * lax.reduce_sum(w, (0,)), (1,))
  np.testing.assert_allclose(np.asarray(out), 3 * x.sum(1))


def test_reduce_monoid_reducers_bind_reduce_primitives():
  x = core.ShapedArray((3, 4), f32)
  cases = [(lax.add, np.float32(0), lax.reduce_sum_p), (lax.mul, 1., lax.reduce_prod_p),
           (lax.max, -np.inf, lax.reduce_max_p), (lax.min, np.float32(np.inf), lax.reduce_min_p),
           (lax.add, np.float32(1), lax.reduce_p)]   # not the identity: the general reduce
  for op, init, prim in cases:
    jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.reduce(x, init, op, (1,))], [x])
    assert jaxpr.eqns[0].primitive is prim
  xi = core.ShapedArray((3, 4), i32)
  for op, init, prim in [(lax.bitwise_xor, 0, lax.reduce_xor_p),
                         (lax.bitwise_and, -1, lax.reduce_and_p),
                         (lax.bitwise_or, 0, lax.reduce_or_p)]:
    jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.reduce(x, np.int32(init), op, (0,))], [xi])
    assert jaxpr.eqns[0].primitive is prim
  np.testing.assert_array_equal(
      np.asarray(lax.reduce(np.arange(6, dtype=f32), np.float32(1), lax.add, (0,))), 16.)


def test_reduce_weak_type_matches_jax():
  weak = jax.ShapeDtypeStruct((3,), np.float32, weak_type=True)
  for init in (0., np.float32(0)):
    for comp in (lambda a, b: a * b, jax.lax.add):
      ref = jax.eval_shape(lambda x: jax.lax.reduce(x, init, comp, (0,)), weak)
      ours = lax.add if comp is jax.lax.add else comp
      jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.reduce(x, init, ours, (0,))],
                                   [core.ShapedArray((3,), f32, True)])
      assert jaxpr.out_avals[0].weak_type == ref.weak_type, (init, comp)


@pytest.mark.parametrize("operands,inits,comp,dims", [
    (np.ones(3, f16), 0., lambda a, b: a * b, (0,)),
    (np.ones(3, i32), 0., lambda a, b: a * b, (0,)),
    (np.ones((3, 4), f32), np.zeros(2, f32), lambda a, b: a * b, (0,)),
    ((np.ones((3, 4), f32),), np.float32(0), lambda a, b: a * b, (0,)),
])
def test_reduce_errors_match_jax(operands, inits, comp, dims):
  with pytest.raises((TypeError, ValueError)) as jax_err:
    jax.lax.reduce(operands, inits, comp, dims)
  msg = str(jax_err.value).split(" got ")[0].split(": ")[0]   # JAX prints avals otherwise
  with pytest.raises(jax_err.type, match=re.escape(msg)):
    lax.reduce(operands, inits, comp, dims)


def test_reduce_errors():
  x = np.ones((3, 4), f32)
  with pytest.raises(TypeError, match=r"reduce computation must return a value with the "
                     r"structure and types of the init values"):
    lax.reduce(x, np.float32(0), lambda a, b: (a * b, a), (0,))
  with pytest.raises(TypeError, match=r"returned \w+\(\*\) of \(i32\[\]\)"):
    lax.reduce(x, np.float32(0), lambda a, b: lax.convert_element_type(a * b, i32), (0,))
  with pytest.raises(ValueError, match=r"reduction axes \(2,\) contains out-of-bounds"):
    lax.reduce(x, np.float32(0), lambda a, b: a * b, (2,))
  with pytest.raises(TypeError, match=r"reduce operands must have equal shapes, got: "
                     r"f32\[3,4\] f32\[3,5\]"):
    lax.reduce((x, np.ones((3, 5), f32)), (np.float32(0),) * 2,
               lambda a, b: (a[0] * b[0], a[1] * b[1]), (0,))

  def f(y):
    return lax.reduce(x, np.float32(0), lambda a, b: a * b + y, (0,))
  with pytest.raises(NotImplementedError, match="can't close over Tracers"):
    staged_call(f, np.float32(1))
