"""lax/windowed.py: reduce_window (sum/max/min, padding strings and pairs, strides, base and
window dilation, non-identity init values) against NumPy and jax.lax.reduce_window, eager and
staged; select_and_scatter_add against JAX; the abstract eval and the error messages."""
import os
import re
import sys

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax._src.lax.windowed_reductions import _select_and_scatter_add

from stagecraft import core, lax
from stagecraft.interpreters import lowering, partial_eval as pe

sys.path.insert(0, os.path.dirname(__file__))
from _util import staged_call  # noqa: E402

from _cases import f32  # noqa: E402
UFUNC = {"add": np.add, "max": np.maximum, "min": np.minimum}
LAX = {"add": lax.add, "max": lax.max, "min": lax.min}
JLAX = {"add": jax.lax.add, "max": jax.lax.max, "min": jax.lax.min}


def _identity(op, dtype):
  if op == "add":
    return np.zeros((), dtype)[()]
  if dtype == np.bool_:
    return np.bool_(op == "min")
  if np.issubdtype(dtype, np.integer):
    info = np.iinfo(dtype)
    return dtype.type(info.min if op == "max" else info.max)
  return dtype.type(-np.inf if op == "max" else np.inf)


def _dilate(shape, d):
  return tuple(0 if n == 0 else 1 + r * (n - 1) for n, r in zip(shape, d))


def reduce_window_ref(x, op, init, window, strides, padding, base_dil, win_dil):
  """NumPy reference: holes and padding hold the identity; each window reduces from init."""
  ident = _identity(op, x.dtype)
  base = np.full(_dilate(x.shape, base_dil), ident, x.dtype)
  base[tuple(slice(None, None, r) for r in base_dil)] = x
  padded = np.full([n + lo + hi for n, (lo, hi) in zip(base.shape, padding)], ident, x.dtype)
  padded[tuple(slice(lo, lo + n) for n, (lo, _) in zip(base.shape, padding))] = base
  span = _dilate(window, win_dil)
  out_shape = [max((p - w) // s + 1, 0) for p, w, s in zip(padded.shape, span, strides)]
  out = np.empty(out_shape, x.dtype)
  for pos in np.ndindex(*out_shape):
    sl = tuple(slice(p * s, p * s + w, r)
               for p, s, w, r in zip(pos, strides, span, win_dil))
    out[pos] = UFUNC[op](init, UFUNC[op].reduce(padded[sl], axis=None, initial=ident))
  return out


CASES = [  # shape, window, strides, padding, base_dilation, window_dilation
    ((6,), (2,), (1,), "VALID", None, None),
    ((6,), (3,), (2,), "SAME", None, None),
    ((7,), (3,), (2,), "SAME_LOWER", None, None),
    ((7,), (2,), (3,), ((1, 2),), None, None),
    ((5, 7), (2, 3), (1, 2), "VALID", None, None),
    ((5, 7), (2, 3), (1, 2), "SAME", None, None),
    ((5, 7), (2, 3), (2, 1), ((1, 0), (2, 2)), (2, 1), (1, 2)),
    ((4, 5), (3, 2), (1, 1), "VALID", None, (2, 2)),
    ((3, 4), (2, 2), (2, 2), ((0, 1), (1, 0)), (3, 2), None),
    ((2, 3, 4), (1, 2, 2), (1, 1, 2), "SAME", None, None),
    ((2, 3, 4), (2, 3, 4), (1, 1, 1), "VALID", None, None),   # one window: a full reduce
    ((3,), (5,), (1,), "VALID", None, None),                  # window larger: empty result
    ((0, 4), (1, 2), (1, 1), "VALID", None, None),            # empty operand
]


def _pads(case):
  shape, window, strides, padding, bd, wd = case
  if isinstance(padding, str):
    return lax.padtype_to_pads(_dilate(shape, bd or (1,) * len(shape)),
                               _dilate(window, wd or (1,) * len(shape)), strides, padding)
  return padding


@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=["f32", "i32"])
@pytest.mark.parametrize("op", ["add", "max", "min"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_reduce_window_vs_numpy_and_jax(case, op, dtype):
  shape, window, strides, padding, bd, wd = case
  dtype = np.dtype(dtype)
  x = np.random.default_rng(0).integers(-9, 9, shape).astype(dtype)
  init = _identity(op, dtype)
  fun = lambda v: lax.reduce_window(v, init, LAX[op], window, strides, padding, bd, wd)
  got = fun(x)
  nd = len(shape)
  want = reduce_window_ref(x, op, init, window, strides, _pads(case), bd or (1,) * nd,
                           wd or (1,) * nd)
  np.testing.assert_array_equal(np.asarray(got), want)
  assert got.dtype == dtype
  jwant = jax.lax.reduce_window(x, init, JLAX[op], window, strides, padding, bd, wd)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(jwant))
  np.testing.assert_array_equal(np.asarray(staged_call(fun, x)), want)
  jaxpr, _ = pe.trace_to_jaxpr(lambda v: [fun(v)], [core.get_aval(x)])
  assert jaxpr.out_avals[0] == got.aval
  assert [e.primitive.name for e in jaxpr.eqns] == [f"reduce_window_{op.replace('add', 'sum')}"]


@pytest.mark.parametrize("op,init", [("add", 100.0), ("max", 3.0), ("min", -2.0),
                                     ("add", -1.5)])
@pytest.mark.parametrize("case", [CASES[3], CASES[6], CASES[5]], ids=lambda c: str(c[:4]))
def test_reduce_window_non_identity_init_vs_jax(case, op, init):
  shape, window, strides, padding, bd, wd = case
  x = np.random.default_rng(1).integers(-9, 9, shape).astype(np.float32)
  got = lax.reduce_window(x, init, LAX[op], window, strides, padding, bd, wd)
  want = jax.lax.reduce_window(x, np.float32(init), JLAX[op], window, strides, padding, bd, wd)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  nd = len(shape)
  ref = reduce_window_ref(x, op, np.float32(init), window, strides, _pads(case),
                          bd or (1,) * nd, wd or (1,) * nd)
  np.testing.assert_array_equal(np.asarray(got), ref)


def test_reduce_window_nan_inf_and_bool():
  x = np.array([1.0, np.nan, -np.inf, 2.0, np.inf], np.float32)
  for op in ("max", "min", "add"):
    got = lax.reduce_window(x, _identity(op, f32), LAX[op], (2,), (1,), "VALID")
    want = jax.lax.reduce_window(x, _identity(op, f32), JLAX[op], (2,), (1,), "VALID")
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  b = np.array([[True, False, False], [False, False, True]])
  np.testing.assert_array_equal(np.asarray(lax.reduce_window_max(b, (2, 2))), [[True, True]])
  np.testing.assert_array_equal(np.asarray(lax.reduce_window_min(b, (1, 2), padding="SAME")),
                                [[False, False, False], [False, False, True]])
  with pytest.raises(TypeError, match="reduce_window_sum does not accept dtype bool"):
    lax.reduce_window_sum(b, (2, 2))


def test_reduce_window_traced_init_and_weak_type():
  x = np.arange(6, dtype=np.float32)
  got = staged_call(lambda v, c: lax.reduce_window(v, c, lax.add, (3,), (1,), "VALID"), x,
                    np.float32(10))
  np.testing.assert_array_equal(np.asarray(got), [13, 16, 19, 22])
  jaxpr, _ = pe.trace_to_jaxpr(lambda v: [lax.reduce_window_sum(v, (2,))],
                               [core.ShapedArray((4,), f32, weak_type=True)])
  assert jaxpr.out_avals[0] == core.ShapedArray((3,), f32, weak_type=True)


def test_reduce_window_lowering_text():
  jaxpr, _ = pe.trace_to_jaxpr(
      lambda v: [lax.reduce_window(v, 0., lax.add, (2, 2), (1, 1), "SAME")],
      [core.ShapedArray((3, 4), f32)])
  text = lowering.lower_jaxpr_to_module("rw", jaxpr)
  assert '"stablehlo.reduce_window"' in text
  assert "padding = dense<[[0, 1], [0, 1]]> : tensor<2x2xi64>" in text
  assert "window_dimensions = array<i64: 2, 2>" in text and "stablehlo.add" in text


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_reduce_window_hypothesis_vs_numpy(data):
  nd = data.draw(st.integers(1, 2))
  shape = tuple(data.draw(st.integers(1, 5)) for _ in range(nd))
  window = tuple(data.draw(st.integers(1, 3)) for _ in range(nd))
  strides = tuple(data.draw(st.integers(1, 2)) for _ in range(nd))
  pads = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in range(nd))
  bd = tuple(data.draw(st.integers(1, 2)) for _ in range(nd))
  wd = tuple(data.draw(st.integers(1, 2)) for _ in range(nd))
  op = data.draw(st.sampled_from(["add", "max", "min"]))
  x = np.random.default_rng(0).integers(-5, 5, shape).astype(np.float32)
  got = lax.reduce_window(x, _identity(op, f32), LAX[op], window, strides, pads, bd, wd)
  want = reduce_window_ref(x, op, _identity(op, f32), window, strides, pads, bd, wd)
  np.testing.assert_array_equal(np.asarray(got), want)


def test_reduce_window_errors():
  x = np.zeros((4, 5), np.float32)
  # another computation: the general reduce_window, as JAX's
  np.testing.assert_array_equal(lax.reduce_window(x + 2, 1., lax.mul, (2, 2)),
                                jax.lax.reduce_window(x + 2, 1., jax.lax.mul, (2, 2)))
  # JAX's words (its common reduce_window shape rule), compared with JAX
  for args in [(0., "add", (2,)), (0., "max", (2, 2), (1,)), (1., "mul", (2, 2), (1, 1, 1)),
               (0., "add", (2, 2), (1, 1), "VALID", (1,), None)]:
    msgs = []
    for lx in (lax, jax.lax):
      with pytest.raises(TypeError) as e:
        lx.reduce_window(x, args[0], getattr(lx, args[1]), *args[2:])
      msgs.append(str(e.value))
    assert msgs[0] == msgs[1]
  with pytest.raises(RuntimeError, match="Unrecognized padding type: expected 'VALID', "
                                         "'SAME', or 'SAME_LOWER', got FULL"):
    lax.reduce_window(x, 0., lax.add, (2, 2), (1, 1), "FULL")
  # an init of another dtype: accepted when it is the identity (as JAX), else JAX's error
  np.testing.assert_array_equal(lax.reduce_window(x, np.int32(0), lax.add, (2, 2)),
                                jax.lax.reduce_window(x, np.int32(0), jax.lax.add, (2, 2)))
  msgs = []
  for lx in (lax, jax.lax):
    with pytest.raises(TypeError) as e:
      lx.reduce_window(x, np.int32(1), lx.add, (2, 2))
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]
  with pytest.raises(TypeError, match="window_strides must have every element be strictly "
                                      "positive"):   # JAX's message
    lax.reduce_window_max(x, (2, 2), (0, 1))
  with pytest.raises(TypeError, match="reduce_window_max does not accept dtype complex64"):
    lax.reduce_window_max(np.zeros(3, np.complex64), (2,))
  with pytest.raises(TypeError, match="padding .* makes a negative dimension"):
    lax.reduce_window_sum(np.zeros(3, np.float32), (1,), padding=((-2, -2),))


# ---------------------------------------------------------------------------
# select_and_scatter_add

SAS_CASES = [  # operand shape, window, strides, padding
    ((4, 6), (2, 2), (2, 2), ((0, 0), (0, 0))),
    ((4, 6), (2, 2), (2, 2), ((0, 0), (1, 1))),
    ((5, 5), (3, 3), (1, 1), ((1, 1), (1, 1))),
    ((6,), (3,), (2,), ((1, 0),)),
    ((2, 3, 4), (1, 2, 2), (1, 1, 2), ((0, 0), (0, 1), (0, 0))),
]


@pytest.mark.parametrize("select", ["ge", "le"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=["f32", "i32"])
@pytest.mark.parametrize("case", SAS_CASES, ids=lambda c: str(c[0]) + str(c[2]))
def test_select_and_scatter_add_vs_jax(case, dtype, select):
  shape, window, strides, padding = case
  rng = np.random.default_rng(4)
  operand = rng.permutation(np.arange(int(np.prod(shape)))).reshape(shape).astype(dtype)
  out_shape = lax.reduce_window_max(operand, window, strides, padding).shape
  source = rng.integers(1, 9, out_shape).astype(dtype)
  prim = {"ge": lax.ge_p, "le": lax.le_p}[select]
  jprim = {"ge": jax.lax.ge_p, "le": jax.lax.le_p}[select]
  fun = lambda s, o: lax.select_and_scatter_add(s, o, prim, window, strides, padding)
  got = fun(source, operand)
  want = _select_and_scatter_add(source, operand, jprim, window, strides, padding)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  assert got.dtype == np.dtype(dtype) and got.shape == shape
  np.testing.assert_array_equal(np.asarray(staged_call(fun, source, operand)), np.asarray(want))


def test_select_and_scatter_add_is_the_max_pool_gradient():
  x = np.random.default_rng(5).standard_normal((6, 8)).astype(np.float32)
  ct = np.random.default_rng(6).standard_normal((3, 4)).astype(np.float32)
  pool = lambda v: jax.lax.reduce_window(v, -np.inf, jax.lax.max, (2, 2), (2, 2), "VALID")
  _, vjp = jax.vjp(pool, x)
  got = lax.select_and_scatter_add(ct, x, lax.ge_p, (2, 2), (2, 2), "VALID")
  np.testing.assert_allclose(np.asarray(got), np.asarray(vjp(ct)[0]), rtol=1e-6)


def test_select_and_scatter_add_lowering_and_errors():
  jaxpr, _ = pe.trace_to_jaxpr(
      lambda s, o: [lax.select_and_scatter_add(s, o, lax.ge_p, (2, 2), (2, 2),
                                               ((0, 0), (1, 1)))],
      [core.ShapedArray((2, 4), f32), core.ShapedArray((4, 6), f32)])
  text = lowering.lower_jaxpr_to_module("sas", jaxpr)
  assert '"stablehlo.select_and_scatter"' in text and "stablehlo.pad" in text
  assert "stablehlo.compare GE" in text and '"stablehlo.slice"' in text
  with pytest.raises(TypeError, match=re.escape(
      "select_and_scatter_add source must have the shape of the windowed operand (2, 3), "
      "got f32[2,4] for operand f32[4,6]")):
    lax.select_and_scatter_add(np.zeros((2, 4), np.float32), np.zeros((4, 6), np.float32),
                               lax.ge_p, (2, 2), (2, 2), "VALID")
  with pytest.raises(TypeError, match="select_prim must be lax.ge_p or lax.le_p, got lt"):
    lax.select_and_scatter_add(np.zeros((2, 3), np.float32), np.zeros((4, 6), np.float32),
                               lax.lt_p, (2, 2), (2, 2), "VALID")
  with pytest.raises(TypeError, match="same dtype"):
    lax.select_and_scatter_add(np.zeros((2, 3), np.int32), np.zeros((4, 6), np.float32),
                               lax.ge_p, (2, 2), (2, 2), "VALID")
