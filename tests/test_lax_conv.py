"""lax/conv.py against JAX (`jax.lax.conv_general_dilated` on the same inputs and params):
eager and staged runs, the abstract eval against what executes, the lowering text, the
helpers (`conv_dimension_numbers`, `padtype_to_pads`) and the error messages."""
import os
import sys

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from stagecraft import core, lax
from stagecraft.interpreters import lowering, partial_eval as pe

sys.path.insert(0, os.path.dirname(__file__))
from _util import staged_call  # noqa: E402

from _cases import b1, bf16, c64, f16, f32, i8, i32, u8  # noqa: E402


def _data(rng, shape, dtype):
  if dtype == b1:
    return rng.random(shape) < 0.5
  if np.issubdtype(dtype, np.integer):
    return rng.integers(-3 if dtype.kind == "i" else 0, 4, shape).astype(dtype)
  if dtype == c64:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
  return rng.standard_normal(shape).astype(dtype)


def _jaxpr_aval(fun, *args):
  jaxpr, _ = pe.trace_to_jaxpr(lambda *a: [fun(*a)], [core.get_aval(a) for a in args])
  return jaxpr.out_avals[0]


def _close(actual, expected, x, w, out_dtype):
  """Exact for ints/bools; for floats, within a bound on the accumulated rounding: eps of
  the output dtype (or of the inputs, when lower) times the size of the largest sum."""
  actual, expected = np.asarray(actual), np.asarray(expected)
  assert actual.shape == expected.shape and actual.dtype == expected.dtype == out_dtype
  if out_dtype.kind in "iub":
    np.testing.assert_array_equal(actual, expected)
    return
  eps = max(float(ml_dtypes.finfo(d).eps) for d in {out_dtype, np.dtype(x.dtype)}
            if d.kind in "fcV" or d == bf16)
  scale = np.abs(np.asarray(x, np.complex128)).max(initial=0) * np.abs(
      np.asarray(w, np.complex128)).max(initial=0) * max(w.size // max(w.shape), 1) * 4
  np.testing.assert_allclose(actual.astype(np.complex128), expected.astype(np.complex128),
                             rtol=0, atol=4 * eps * max(scale, 1.0))


def _check_vs_jax(x, w, **params):
  """stagecraft (eager and staged) vs JAX with the same params; abstract eval vs result."""
  fun = lambda a, b: lax.conv_general_dilated(a, b, **params)  # noqa: E731
  expected = jax.lax.conv_general_dilated(x, w, **params)
  out = fun(x, w)
  _close(out, expected, x, w, np.dtype(expected.dtype))
  _close(staged_call(fun, x, w), expected, x, w, np.dtype(expected.dtype))
  aval = _jaxpr_aval(fun, x, w)
  assert (aval.shape, aval.dtype) == (expected.shape, expected.dtype) and aval == out.aval
  return out


# ---------------------------------------------------------------------------
# Fixed configurations: layouts, strides, padding kinds, dilations, groups, dtypes

_CASES = [
    # (lhs shape, rhs shape, params)
    ((2, 3, 9), (4, 3, 3), dict(window_strides=(1,), padding="VALID")),
    ((2, 3, 9), (4, 3, 3), dict(window_strides=(2,), padding="SAME")),
    ((2, 3, 8), (4, 3, 4), dict(window_strides=(3,), padding="SAME_LOWER")),
    ((2, 3, 9), (4, 3, 3), dict(window_strides=(1,), padding=[(2, 1)], lhs_dilation=(2,),
                                rhs_dilation=(3,))),
    ((2, 3, 6, 7), (4, 3, 3, 2), dict(window_strides=(1, 2), padding="SAME")),
    ((2, 6, 7, 3), (3, 2, 3, 4), dict(window_strides=(2, 1), padding="SAME",
                                      rhs_dilation=(2, 1),
                                      dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    ((2, 6, 7, 3), (3, 2, 3, 4), dict(window_strides=(1, 1), padding="VALID",
                                      dimension_numbers=("NHWC", "HWIO", "NCHW"))),
    ((3, 7, 2, 6), (4, 3, 3, 2), dict(window_strides=(1, 1), padding=[(1, 0), (0, 2)],
                                      dimension_numbers=("CWNH", "OIWH", "HNCW"))),
    ((2, 6, 7, 3), (3, 3, 3, 4), dict(window_strides=(1, 1), padding=[(2, 2), (1, 3)],
                                      lhs_dilation=(2, 3), rhs_dilation=(1, 2),
                                      dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    ((1, 4, 5, 6, 2), (2, 3, 2, 2, 3), dict(window_strides=(1, 2, 1), padding="SAME",
                                            dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))),
    ((2, 2, 4, 5, 3), (3, 2, 2, 3, 2), dict(window_strides=(2, 1, 2), padding="VALID",
                                            rhs_dilation=(1, 2, 1))),
    ((2, 3), (4, 3), dict(window_strides=(), padding=())),  # no spatial dims: a matmul
    # depthwise (feature_group_count = C, one kernel per channel and a multiplier of 2)
    ((2, 6, 6, 4), (3, 3, 1, 8), dict(window_strides=(1, 1), padding="SAME",
                                      feature_group_count=4,
                                      dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    ((2, 6, 9), (6, 2, 3), dict(window_strides=(2,), padding="VALID", feature_group_count=3)),
    ((4, 2, 5), (4, 2, 3), dict(window_strides=(1,), padding="VALID", batch_group_count=2)),
    ((6, 3, 5, 4), (6, 3, 2, 2), dict(window_strides=(1, 1), padding="SAME",
                                      batch_group_count=3)),
    # empty arrays: no batch, no output positions, no input features
    ((0, 3, 9), (4, 3, 3), dict(window_strides=(1,), padding="SAME")),
    ((2, 3, 2), (4, 3, 3), dict(window_strides=(1,), padding="VALID")),
    ((2, 0, 5), (4, 0, 3), dict(window_strides=(1,), padding="VALID")),
]


@pytest.mark.parametrize("lhs_shape,rhs_shape,params", _CASES)
def test_conv_matches_jax_f32(lhs_shape, rhs_shape, params):
  rng = np.random.default_rng(0)
  _check_vs_jax(_data(rng, lhs_shape, f32), _data(rng, rhs_shape, f32), **params)


_DTYPE_CASES = [
    (f16, None), (bf16, None), (bf16, f32), (f16, f32), (i32, None), (i8, i32), (i8, None),
    (u8, None), (i8, f32), (b1, None), (c64, None),
]


@pytest.mark.parametrize("dtype,preferred", _DTYPE_CASES)
def test_conv_dtypes_and_preferred_element_type_match_jax(dtype, preferred):
  rng = np.random.default_rng(1)
  x, w = _data(rng, (2, 3, 5, 4), dtype), _data(rng, (3, 2, 3, 4), dtype)
  out = _check_vs_jax(x, w, window_strides=(1, 1), padding="SAME",
                      dimension_numbers=("NCHW", "HWIO", "NHWC"),
                      preferred_element_type=preferred)
  assert out.dtype == (dtype if preferred is None else preferred)


def test_int8_accumulates_in_int32_with_preferred_element_type():
  x = np.full((1, 16, 4), 100, np.int8)
  w = np.full((1, 16, 4), 100, np.int8)
  out = lax.conv_general_dilated(x, w, (1,), "VALID", preferred_element_type=np.int32)
  assert out.dtype == i32 and int(np.asarray(out)[0, 0, 0]) == 100 * 100 * 16 * 4


def test_nan_and_inf_propagate():
  x = np.ones((1, 1, 5), np.float32)
  x[0, 0, 2] = np.nan
  x[0, 0, 4] = np.inf
  w = np.ones((1, 1, 1), np.float32)
  out = np.asarray(lax.conv_general_dilated(x, w, (1,), "VALID"))
  np.testing.assert_array_equal(out, x)


# ---------------------------------------------------------------------------
# Random configurations


@st.composite
def _conv_case(draw):
  n = draw(st.integers(1, 2))
  g_kind = draw(st.sampled_from(["none", "feature", "batch"]))
  groups = draw(st.integers(2, 3)) if g_kind != "none" else 1
  fgc, bgc = (groups, 1) if g_kind == "feature" else (1, groups) if g_kind == "batch" else (1, 1)
  batch = draw(st.integers(1, 2)) * bgc
  cin = draw(st.integers(1, 2)) * fgc
  cout = draw(st.integers(1, 2)) * groups
  spatial = [draw(st.integers(1, 6)) for _ in range(n)]
  kernel = [draw(st.integers(1, 3)) for _ in range(n)]
  strides = tuple(draw(st.integers(1, 3)) for _ in range(n))
  rhs_dil = tuple(draw(st.integers(1, 2)) for _ in range(n))
  if draw(st.booleans()):
    padding, lhs_dil = draw(st.sampled_from(["SAME", "VALID", "SAME_LOWER"])), (1,) * n
  else:
    padding = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(n))
    lhs_dil = tuple(draw(st.integers(1, 2)) for _ in range(n))
  sp = "HW"[:n]
  layouts = [(f"NC{sp}", f"OI{sp}", f"NC{sp}"), (f"N{sp}C", f"{sp}IO", f"N{sp}C"),
             (f"{sp}NC", f"I{sp}O", f"C{sp}N")]
  dn = draw(st.sampled_from(layouts))
  dtype = draw(st.sampled_from([f32, f32, f16, i32]))

  def shape(spec, sizes):
    return tuple(sizes[c] for c in spec)
  sizes = dict(zip(sp, spatial), N=batch, C=cin)
  lhs_shape = shape(dn[0], sizes)
  rhs_shape = shape(dn[1], dict(zip(sp, kernel), O=cout, I=cin // fgc))
  params = dict(window_strides=strides, padding=padding, lhs_dilation=lhs_dil,
                rhs_dilation=rhs_dil, dimension_numbers=dn, feature_group_count=fgc,
                batch_group_count=bgc)
  return lhs_shape, rhs_shape, dtype, params, draw(st.integers(0, 2**16))


@settings(max_examples=30)
@given(_conv_case())
def test_conv_random_configurations_match_jax(case):
  lhs_shape, rhs_shape, dtype, params, seed = case
  rng = np.random.default_rng(seed)
  _check_vs_jax(_data(rng, lhs_shape, dtype), _data(rng, rhs_shape, dtype), **params)


# ---------------------------------------------------------------------------
# Negative padding (crops). NB: XLA:CPU computes f32 convolutions with negative low and
# positive high padding wrongly (openxla/xla#48713), JAX included, so the reference here is
# an explicit `jax.lax.pad` (which crops and dilates) followed by a VALID convolution.


@pytest.mark.parametrize("pads,lhs_dil", [
    ((-2, 1), 1), ((1, -2), 1), ((-1, -1), 1), ((-3, 2), 1), ((-8, 1), 1), ((-9, 0), 1),
    ((-3, 2), 2), ((-4, -3), 3), ((2, -5), 2), ((-17, 0), 2),
])
@pytest.mark.parametrize("dtype", [f32, i32])
def test_negative_padding_crops(pads, lhs_dil, dtype):
  rng = np.random.default_rng(2)
  x, w = _data(rng, (2, 3, 9), dtype), _data(rng, (4, 3, 2), dtype)
  xp = jax.lax.pad(x, dtype.type(0), [(0, 0, 0), (0, 0, 0), (*pads, lhs_dil - 1)])
  expected = jax.lax.conv_general_dilated(xp, w, (1,), "VALID")

  def fun(a, b):
    return lax.conv_general_dilated(a, b, (1,), [pads], lhs_dilation=(lhs_dil,))
  _close(fun(x, w), expected, x, w, dtype)
  _close(staged_call(fun, x, w), expected, x, w, dtype)


def test_negative_padding_with_nhwc_layout_and_strides():
  rng = np.random.default_rng(3)
  x, w = _data(rng, (2, 7, 8, 3), f32), _data(rng, (2, 3, 3, 4), f32)
  pads = [(-2, 1), (1, -3)]
  xp = jax.lax.pad(x, np.float32(0), [(0, 0, 0), (-2, 1, 0), (1, -3, 0), (0, 0, 0)])
  dn = ("NHWC", "HWIO", "NHWC")
  expected = jax.lax.conv_general_dilated(xp, w, (2, 1), "VALID", dimension_numbers=dn)
  out = lax.conv_general_dilated(x, w, (2, 1), pads, dimension_numbers=dn)
  _close(out, expected, x, w, f32)


# ---------------------------------------------------------------------------
# Wrappers


def test_conv_and_conv_with_general_padding_match_jax():
  rng = np.random.default_rng(4)
  x, w = _data(rng, (2, 3, 7, 6), f32), _data(rng, (4, 3, 3, 2), f32)
  for pad in ("SAME", "VALID"):
    _close(lax.conv(x, w, (2, 1), pad), jax.lax.conv(x, w, (2, 1), pad), x, w, f32)
  _close(lax.conv_with_general_padding(x, w, (1, 2), [(1, 2), (0, 1)], (2, 1), (1, 2)),
         jax.lax.conv_with_general_padding(x, w, (1, 2), [(1, 2), (0, 1)], (2, 1), (1, 2)),
         x, w, f32)
  _close(lax.conv(x, w, (1, 1), "SAME", precision="highest", preferred_element_type=f32),
         jax.lax.conv(x, w, (1, 1), "SAME", precision="highest"), x, w, f32)


@pytest.mark.parametrize("padding,consistent", [
    ("SAME", False), ("VALID", False), ([(1, 2), (0, 1)], False), ([(1, 2), (0, 1)], True)])
@pytest.mark.parametrize("transpose_kernel", [False, True])
def test_conv_transpose_matches_jax(padding, consistent, transpose_kernel):
  rng = np.random.default_rng(5)
  x, w = _data(rng, (2, 4, 5, 3), f32), _data(rng, (3, 2, 3, 3), f32)
  kw = dict(transpose_kernel=transpose_kernel, use_consistent_padding=consistent)
  expected = jax.lax.conv_transpose(x, w, (2, 3), padding, **kw)
  _close(lax.conv_transpose(x, w, (2, 3), padding, **kw), expected, x, w, f32)


def test_conv_transpose_1d_and_rhs_dilation_match_jax():
  rng = np.random.default_rng(6)
  x, w = _data(rng, (2, 6, 3), f32), _data(rng, (3, 3, 5), f32)
  for pad in ("SAME", "VALID"):
    expected = jax.lax.conv_transpose(x, w, (2,), pad, rhs_dilation=(2,))
    _close(lax.conv_transpose(x, w, (2,), pad, rhs_dilation=(2,)), expected, x, w, f32)


# ---------------------------------------------------------------------------
# Helpers


@pytest.mark.parametrize("dn", [
    None, ("NCHW", "OIHW", "NCHW"), ("NHWC", "HWIO", "NHWC"), ("NHWC", "OIHW", "NCHW"),
    ("CWNH", "OIWH", "HNCW"), ["NWHC", "HWIO", "NHWC"],
])
def test_conv_dimension_numbers_match_jax(dn):
  ours = lax.conv_dimension_numbers((1, 2, 3, 4), (1, 2, 3, 4), dn)
  theirs = jax.lax.conv_dimension_numbers((1, 2, 3, 4), (1, 2, 3, 4), dn)
  assert isinstance(ours, lax.ConvDimensionNumbers)
  assert tuple(map(tuple, ours)) == tuple(map(tuple, theirs))
  assert lax.conv_dimension_numbers((1, 2, 3, 4), (1, 2, 3, 4), ours) == ours


@pytest.mark.parametrize("kind", ["SAME", "VALID", "SAME_LOWER", "same"])
@pytest.mark.parametrize("in_shape,window,strides", [
    ((28, 28), (3, 3), (2, 2)), ((7, 8, 1), (4, 1, 3), (3, 1, 2)), ((5,), (7,), (1,)),
    ((0,), (3,), (2,)),
])
def test_padtype_to_pads_matches_jax(kind, in_shape, window, strides):
  ours = lax.padtype_to_pads(in_shape, window, strides, kind)
  assert ours == [tuple(map(int, p)) for p in jax.lax.padtype_to_pads(in_shape, window, strides,
                                                                      kind)]
  assert all(type(v) is int for p in ours for v in p)


def test_shape_tuples_match_jax():
  dn = ("NHWC", "HWIO", "NHWC")
  for pad in ("SAME", "VALID"):
    assert lax.conv_general_shape_tuple((2, 9, 8, 3), (3, 2, 3, 5), (2, 1), pad, dn) == \
        jax.lax.conv_general_shape_tuple((2, 9, 8, 3), (3, 2, 3, 5), (2, 1), pad, dn)
    assert lax.conv_transpose_shape_tuple((2, 9, 8, 3), (3, 2, 3, 5), (2, 1), pad, dn) == \
        tuple(jax.lax.conv_transpose_shape_tuple((2, 9, 8, 3), (3, 2, 3, 5), (2, 1), pad, dn))
  assert lax.conv_shape_tuple((2, 3, 9), (4, 3, 3), (2,), [(1, 1)], 2) == \
      jax.lax.conv_shape_tuple((2, 3, 9), (4, 3, 3), (2,), [(1, 1)], 2)


# ---------------------------------------------------------------------------
# Jaxpr and lowering


def test_jaxpr_params_are_jax_names():
  x, w = np.ones((2, 8, 8, 3), np.float32), np.ones((3, 3, 3, 4), np.float32)
  jaxpr, _ = pe.trace_to_jaxpr(
      lambda a, b: [lax.conv_general_dilated(a, b, [2, 1], "SAME", rhs_dilation=[2, 1],
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"))],
      [core.get_aval(x), core.get_aval(w)])
  eqn, = jaxpr.eqns
  assert eqn.primitive is lax.conv_general_dilated_p
  assert eqn.params == dict(
      window_strides=(2, 1), padding=((1, 2), (1, 1)), lhs_dilation=(1, 1),
      rhs_dilation=(2, 1), dimension_numbers=lax.ConvDimensionNumbers((0, 3, 1, 2),
                                                                      (3, 2, 0, 1),
                                                                      (0, 3, 1, 2)),
      feature_group_count=1, batch_group_count=1, precision=None, preferred_element_type=None,
      out_sharding=None)
  assert "dimension_numbers=ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2)" in str(jaxpr)


def _lowered(fun, *args):
  jaxpr, _ = pe.trace_to_jaxpr(lambda *a: [fun(*a)], [core.get_aval(a) for a in args])
  return lowering.lower_jaxpr_to_module("f", jaxpr)


def test_lowering_text_matches_jax():
  x, w = np.ones((2, 8, 8, 3), np.float32), np.ones((3, 3, 3, 4), np.float32)
  fun = lambda a, b: lax.conv_general_dilated(  # noqa: E731
      a, b, (2, 1), "SAME", rhs_dilation=(2, 1), dimension_numbers=("NHWC", "HWIO", "NHWC"))
  ours = _lowered(fun, x, w)
  theirs = jax.jit(lambda a, b: jax.lax.conv_general_dilated(
      a, b, (2, 1), "SAME", rhs_dilation=(2, 1),
      dimension_numbers=("NHWC", "HWIO", "NHWC"))).lower(x, w).as_text()
  op = [ln.split(" = ", 1)[1] for ln in theirs.splitlines() if "stablehlo.convolution" in ln]
  assert "dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]" in op[0]
  assert "window = {stride = [2, 1], pad = [[1, 2], [1, 1]], lhs_dilate = [1, 1], " \
         "rhs_dilate = [2, 1]" in op[0]
  assert op[0] in ours


def test_lowering_groups_precision_and_no_spatial_dims():
  x, w = np.ones((2, 4, 9), np.float32), np.ones((4, 1, 3), np.float32)
  text = _lowered(lambda a, b: lax.conv_general_dilated(
      a, b, (1,), [(1, 2)], (2,), feature_group_count=4, precision="highest"), x, w)
  assert "dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0]" in text
  assert "feature_group_count = 4 : i64" in text and "precision HIGHEST" in text
  text = _lowered(lambda a, b: lax.conv_general_dilated(a, b, (), ()),
                  np.ones((2, 3), np.float32), np.ones((4, 3), np.float32))
  assert "dim_numbers = [b, f]x[o, i]->[b, f], window = {stride = [], pad = []" in text


def test_lowering_crops_negative_padding_with_a_slice():
  text = _lowered(lambda a, b: lax.conv_general_dilated(a, b, (1,), [(-2, 1)]),
                  np.ones((2, 3, 9), np.float32), np.ones((4, 3, 3), np.float32))
  assert "stablehlo.slice" in text and "pad = [[0, 1]]" in text


def test_weak_type_only_when_both_operands_are_weak():
  x, w = np.ones((1, 1, 3), np.float32), np.ones((1, 1, 1), np.float32)
  assert not lax.conv_general_dilated(x, w, (1,), "VALID").aval.weak_type
  weak = core.ShapedArray((1, 1, 3), f32, True)
  jaxpr, _ = pe.trace_to_jaxpr(lambda a, b: [lax.conv_general_dilated(a, b, (1,), "VALID")],
                               [weak, core.ShapedArray((1, 1, 1), f32, True)])
  assert jaxpr.out_avals[0].weak_type
  jaxpr, _ = pe.trace_to_jaxpr(lambda a, b: [lax.conv_general_dilated(a, b, (1,), "VALID")],
                               [weak, core.get_aval(w)])
  assert not jaxpr.out_avals[0].weak_type


# ---------------------------------------------------------------------------
# Errors (JAX's messages where JAX checks; the others say what to fix)

_x3, _w3 = np.ones((2, 4, 9), np.float32), np.ones((6, 2, 3), np.float32)


@pytest.mark.parametrize("lhs,rhs,kw,err,match", [
    (_x3, np.ones((6, 2, 3, 1), np.float32), dict(dimension_numbers=None), TypeError,
     r"convolution requires lhs and rhs ndim to be equal, got 3 and 4"),
    (_x3, _w3, dict(feature_group_count=3), ValueError,
     r"feature_group_count must divide lhs feature dimension size, but 3 does not divide 4"),
    (_x3, np.ones((6, 3, 3), np.float32), {}, ValueError,
     r"lhs feature dimension size divided by feature_group_count must equal the rhs input "
     r"feature dimension size, but 4 // 1 != 3"),
    (_x3, np.ones((3, 2, 3), np.float32), dict(feature_group_count=2), ValueError,
     r"rhs output feature dimension size must be a multiple of feature_group_count, but 3 is "
     r"not a multiple of 2"),
    (_x3, _w3, dict(feature_group_count=0), ValueError,
     r"feature_group_count must be a positive integer, got 0"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(batch_group_count=0), ValueError,
     r"batch_group_count must be a positive integer, got 0"),
    (np.ones((3, 4, 9), np.float32), np.ones((6, 4, 3), np.float32), dict(batch_group_count=2),
     ValueError, r"batch_group_count must divide lhs batch dimension size, but 2 does not "
                 r"divide 3"),
    (np.ones((4, 4, 9), np.float32), np.ones((5, 4, 3), np.float32), dict(batch_group_count=2),
     ValueError, r"rhs output feature dimension size must be a multiple of batch_group_count, "
                 r"but 5 is not a multiple of 2"),
    (np.ones((4, 4, 9), np.float32), np.ones((4, 2, 3), np.float32),
     dict(batch_group_count=2, feature_group_count=2), ValueError,
     r"At most one of batch_group_count and feature_group_count may be > 1"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(window_strides=(1, 1)), ValueError,
     r"window and window_strides must have the same number of dimensions, but got 1 and 2"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(padding=[(1, 1), (1, 1)]), TypeError,
     r"Wrong number of explicit pads for convolution: expected 1, got 2"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(padding=[(-6, -4)]), ValueError,
     r"Negative padding is larger than the size of the corresponding dimension"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(rhs_dilation=(0,)), TypeError,
     r"All dilations must be positive, got \(0,\)"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(padding="SAME", lhs_dilation=(2,)), ValueError,
     r"String padding is not implemented for transposed convolution"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(padding="FULL"), RuntimeError,
     r"Unrecognized padding type: expected 'VALID', 'SAME', or 'SAME_LOWER', got FULL"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(padding=[1, 2]), ValueError,
     r"padding argument to conv_general_dilated should be a string or a sequence of "
     r"\(low, high\) pairs"),
    (_x3, np.ones((6, 4, 3), np.float16), {}, TypeError,
     r"lax.conv_general_dilated requires arguments to have the same dtypes, got float32, "
     r"float16"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(preferred_element_type=np.float16), TypeError,
     r"`preferred_element_type` must not be narrower than the original type"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(preferred_element_type=np.int32), TypeError,
     r"Input type is incompatible with `preferred_element_type`"),
    (np.ones((2, 4, 9), np.int8), np.ones((6, 4, 3), np.int8),
     dict(preferred_element_type=np.uint32), TypeError,
     r"`preferred_element_type` must have the same signedness as the original type"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(dimension_numbers=("NCH", "OIH")), TypeError,
     r"convolution dimension_numbers list/tuple must be length 3, got 2"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(dimension_numbers=("NCHW", "OIH", "NCH")),
     TypeError, r"convolution dimension_numbers\[0\] must have len equal to the ndim of lhs "
                r"and rhs, got 4"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(dimension_numbers=("NXH", "OIH", "NCH")),
     TypeError, r"convolution dimension_numbers\[0\] must contain the characters 'N' and 'C' "
                r"exactly once, got NXH"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(dimension_numbers=("NCH", "OIW", "NCH")),
     TypeError, r"must each have the same set of spatial characters"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(dimension_numbers="NCH"), TypeError,
     r"convolution dimension_numbers must be tuple/list or None, got <class .str.>"),
])
def test_errors_match_jax(lhs, rhs, kw, err, match):
  kw = dict(dict(window_strides=(1,), padding="VALID"), **kw)
  with pytest.raises(err, match=match):
    jax.lax.conv_general_dilated(lhs, rhs, **kw)
  with pytest.raises(err, match=match):
    lax.conv_general_dilated(lhs, rhs, **kw)


@pytest.mark.parametrize("lhs,rhs,kw,err,match", [
    (np.ones((3,), np.float32), np.ones((3,), np.float32), dict(window_strides=()), ValueError,
     r"requires operands of rank at least 2 .* got lhs f32\[3\] and rhs f32\[3\]"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(window_strides=(0,)), ValueError,
     r"window_strides must be positive, got \(0,\)"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(lhs_dilation=(1, 1)), ValueError,
     r"lhs_dilation must have one entry per spatial dimension \(1\), got \(1, 1\)"),
    (_x3, np.ones((6, 4, 3), np.float32),
     dict(dimension_numbers=lax.ConvDimensionNumbers((0, 1, 1), (0, 1, 2), (0, 1, 2))),
     ValueError, r"dimension_numbers.lhs_spec must be a permutation of range\(3\)"),
    (_x3, np.ones((6, 4, 3), np.float32), dict(window_strides=(1.5,)), TypeError,
     r"window_strides must be a sequence of ints"),
])
def test_errors_jax_leaves_to_xla(lhs, rhs, kw, err, match):
  kw = dict(dict(window_strides=(1,), padding="VALID"), **kw)
  with pytest.raises(err, match=match):
    lax.conv_general_dilated(lhs, rhs, **kw)


def test_primitive_rejects_string_dimension_numbers():
  with pytest.raises(TypeError, match=r"must be a ConvDimensionNumbers.*Call the wrapper"):
    lax.conv_general_dilated_p.bind(
        _x3, np.ones((6, 4, 3), np.float32), window_strides=(1,), padding=((0, 0),),
        lhs_dilation=(1,), rhs_dilation=(1,), dimension_numbers=("NCH", "OIH", "NCH"),
        feature_group_count=1, batch_group_count=1, precision=None,
        preferred_element_type=None)
