"""lax/reduction.py and lax/dot.py against NumPy (values) and JAX (NaN handling, mixed dtypes,
messages): eager and staged runs, and the abstract eval against what executes."""
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

sys.path.insert(0, os.path.dirname(__file__))
from _util import staged_call  # noqa: E402

from _cases import b1, bf16, f16, f32, i8, i32, u8  # noqa: E402


def _data(rng, shape, dtype, lo=-3, hi=3):
  if dtype == b1:
    return rng.random(shape) < 0.5
  if np.issubdtype(dtype, np.integer):
    return rng.integers(max(lo, np.iinfo(dtype).min), hi + 1, shape).astype(dtype)
  return rng.uniform(lo, hi, shape).astype(dtype)


def _f64(x):
  x = np.asarray(x)
  return x.astype(np.float64) if x.dtype in (f16, bf16, f32) else x


def _close(actual, expected, dtype, n=1, scale=1.0):
  """Equal for ints/bools; for floats, a bound that grows with the `n` rounded ops."""
  actual = np.asarray(actual)
  assert actual.dtype == dtype, (actual.dtype, dtype)
  if dtype in (f16, bf16, f32):
    eps = float(ml_dtypes.finfo(dtype).eps)
    np.testing.assert_allclose(_f64(actual), _f64(expected), rtol=2 * eps * max(n, 1),
                               atol=2 * eps * max(n, 1) * scale)
  else:
    np.testing.assert_array_equal(actual, np.asarray(expected).astype(dtype))


def _check_abstract_eval(fun, x_or_xs, result):
  xs = x_or_xs if isinstance(x_or_xs, tuple) else (x_or_xs,)
  jaxpr, _ = pe.trace_to_jaxpr(lambda *a: [fun(*a)], [core.get_aval(x) for x in xs])
  out_aval, = jaxpr.out_avals
  r = np.asarray(result)
  assert (out_aval.shape, out_aval.dtype) == (r.shape, r.dtype)
  assert out_aval == result.aval


# ---------------------------------------------------------------------------
# Reductions


def _identity(name, dtype):
  if name in ("max", "min"):
    sign = -1 if name == "max" else 1
    if dtype == b1:
      return name == "min"
    if np.issubdtype(dtype, np.integer):
      return np.iinfo(dtype).min if name == "max" else np.iinfo(dtype).max
    return sign * np.inf
  return {"sum": 0, "prod": 1, "and": True if dtype == b1 else -1, "or": 0}[name]


_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
           "and": np.bitwise_and, "or": np.bitwise_or}


def _reduce_ref(name, x, axes):
  """The ufunc reduction, started from the identity (so empty axes are fine), in float64
  for floats."""
  dt = x.dtype
  x = _f64(x)
  init = _identity(name, dt)
  if name == "and" and dt != b1:
    init = np.array(-1).astype(dt)
  out = _UFUNCS[name].reduce(x, axis=axes, initial=init,
                             **({"dtype": x.dtype} if name in ("sum", "prod") else {}))
  return np.asarray(out)


REDUCTIONS = {  # name -> accepted test dtypes
    "sum": [f32, i32, f16, bf16], "prod": [f32, i32, f16, bf16],
    "max": [f32, i32, b1, f16, bf16, u8], "min": [f32, i32, b1, f16, bf16, u8],
    "and": [b1, i32, u8], "or": [b1, i32, u8],
}
_SHAPES = [(), (3,), (0,), (2, 3), (3, 0), (2, 3, 2), (1, 4, 3)]


@st.composite
def _reduction_case(draw):
  name = draw(st.sampled_from(sorted(REDUCTIONS)))
  dtype = draw(st.sampled_from(REDUCTIONS[name]))
  shape = draw(st.sampled_from(_SHAPES))
  axes = tuple(sorted(draw(st.sets(st.integers(0, len(shape) - 1))))) if shape else ()
  nan = dtype in (f32, f16, bf16) and draw(st.booleans()) and np.prod(shape) > 0
  return name, dtype, shape, axes, nan, draw(st.integers(0, 2**16))


@settings(max_examples=40)
@given(_reduction_case())
def test_reduction_matches_numpy(case):
  name, dtype, shape, axes, nan, seed = case
  rng = np.random.default_rng(seed)
  # NB: prod of magnitudes in [0.5, 1.5] stays within float16's range for these sizes.
  x = _data(rng, shape, dtype) if name != "prod" or dtype in (i32,) else (
      rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)).astype(dtype)
  if nan:
    x.reshape(-1)[rng.integers(x.size)] = np.nan
  f = getattr(lax, f"reduce_{name}")
  expected = _reduce_ref(name, x, axes)
  n = int(np.prod([shape[a] for a in axes]))
  scale = 2.0 ** n if name == "prod" else 3.0
  eager = f(x, axes)
  _close(eager, expected, dtype, n, scale)
  staged = staged_call(lambda x: f(x, axes), x)
  _close(staged, expected, dtype, n, scale)
  _check_abstract_eval(lambda x: f(x, axes), x, eager)


@pytest.mark.parametrize("name,dtype", [(n, d) for n in REDUCTIONS for d in REDUCTIONS[n]
                                        if d in (f32, i32, b1)])
def test_reduction_of_empty_axis_is_identity(name, dtype):
  x = np.zeros((3, 0), dtype)
  out = getattr(lax, f"reduce_{name}")(x, (1,))
  expected = np.full((3,), _identity(name, dtype)).astype(dtype)
  np.testing.assert_array_equal(np.asarray(out), expected)
  assert out.dtype == dtype


def test_reduction_axes_keep_their_order_as_jax():
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.reduce_sum(x, [1, 0])], [core.get_aval(x)])
  assert jaxpr.eqns[0].params["axes"] == (1, 0)   # JAX 0.10.2 prints axes=(1, 0) too
  assert float(lax.reduce_sum(x, (1, 0))) == 15.0


def test_reduction_weak_type():
  weak = core.ShapedArray((3,), f32, weak_type=True)
  weak_i = core.ShapedArray((3,), i32, weak_type=True)
  for f, aval, out_weak in [(lax.reduce_sum, weak, True), (lax.reduce_max, weak, True),
                            (lax.reduce_prod, weak, True), (lax.reduce_and, weak_i, False),
                            (lax.reduce_or, weak_i, False)]:
    jaxpr, _ = pe.trace_to_jaxpr(lambda x: [f(x, (0,))], [aval])
    assert jaxpr.out_avals[0].weak_type is out_weak, f
  # Python scalars are weakly typed, and stay so through reduce_sum (as in JAX).
  out = lax.reduce_sum(2.0, ())
  assert out.aval == core.ShapedArray((), f32, True) and float(out) == 2.0
  assert jax.eval_shape(lambda: jax.lax.reduce_sum(2.0, ())).weak_type


def test_reduce_max_nan_matches_jax():
  x = np.array([[1., np.nan, 3.], [np.nan, np.nan, -1.], [0., 2., 1.]], np.float32)
  for f, jf in [(lax.reduce_max, jax.lax.reduce_max), (lax.reduce_min, jax.lax.reduce_min)]:
    for axes in [(0,), (1,), (0, 1)]:
      np.testing.assert_array_equal(np.asarray(f(x, axes)), np.asarray(jf(x, axes)))


@pytest.mark.parametrize("name,args,err,match", [
    ("reduce_sum", ((2, 3), f32, (2,)), ValueError,
     r"reduction axes \(2,\) contains out-of-bounds indices for float32\[2,3\]"),
    ("reduce_sum", ((2, 3), f32, (-1,)), ValueError, r"reduction axes \(-1,\) contains out-of"),
    ("reduce_max", ((2, 3), f32, (1, 1)), ValueError,
     r"duplicate value in 'axes' of reduction: \(1, 1\)"),
    ("reduce_sum", ((2, 3), b1, (0,)), TypeError,
     r"reduce_sum does not accept dtype bool. Accepted dtypes are subtypes of number."),
    ("reduce_prod", ((2, 3), b1, (0,)), TypeError, r"reduce_prod does not accept dtype bool"),
    ("reduce_and", ((2, 3), f32, (0,)), TypeError,
     r"logical reduction requires operand dtype bool or int, got float32"),
    ("reduce_or", ((2, 3), f16, (0,)), TypeError,
     r"logical reduction requires operand dtype bool or int, got float16"),
])
def test_reduction_errors(name, args, err, match):
  shape, dtype, axes = args
  with pytest.raises(err, match=match):
    getattr(lax, name)(np.zeros(shape, dtype), axes)


def test_reduce_max_min_complex_lexicographic_as_jax():
  # JAX 0.10.2 accepts complex operands to reduce_max/min and orders them lexicographically
  # (real part first, then imaginary part); an empty reduction gives -+inf + 0j.
  c64 = np.dtype(np.complex64)
  x = np.array([[1 + 2j, 1 + 3j, -1 + 9j], [2 - 1j, 2 - 5j, 0j], [1 + 3j, -4 + 0j, 1 + 3j]],
               c64)
  expected = {
      ("reduce_max", (0,)): [2 - 1j, 2 - 5j, 1 + 3j],
      ("reduce_max", (1,)): [1 + 3j, 2 - 1j, 1 + 3j],
      ("reduce_max", (0, 1)): 2 - 1j,
      ("reduce_min", (0,)): [1 + 2j, -4 + 0j, -1 + 9j],
      ("reduce_min", (1,)): [-1 + 9j, 0j, -4 + 0j],
      ("reduce_min", (0, 1)): -4 + 0j,
  }
  for (name, axes), want in expected.items():
    out = getattr(lax, name)(x, axes)
    assert out.dtype == c64, (name, axes, out.dtype)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want, c64), err_msg=name)
    np.testing.assert_array_equal(np.asarray(out),
                                  np.asarray(getattr(jax.lax, name)(x, axes)), err_msg=name)
    staged = staged_call(lambda a: getattr(lax, name)(a, axes), x)
    np.testing.assert_array_equal(np.asarray(staged), np.asarray(out), err_msg=name)
  empty = np.zeros((0, 2), c64)
  for name, ident in [("reduce_max", -np.inf), ("reduce_min", np.inf)]:
    out = np.asarray(getattr(lax, name)(empty, (0,)))
    np.testing.assert_array_equal(out, np.full(2, complex(ident, 0), c64))
    np.testing.assert_array_equal(out, np.asarray(getattr(jax.lax, name)(empty, (0,))))


# ---------------------------------------------------------------------------
# argmax / argmin


@st.composite
def _argminmax_case(draw):
  dtype = draw(st.sampled_from([f32, i32, b1, f16, bf16]))
  shape = draw(st.sampled_from([(1,), (5,), (4, 3), (2, 3, 4)]))
  axis = draw(st.integers(0, len(shape) - 1))
  nans = draw(st.integers(0, 3)) if dtype in (f32, f16, bf16) else 0
  index_dtype = draw(st.sampled_from([i32, np.dtype(np.int16), u8]))
  return dtype, shape, axis, nans, index_dtype, draw(st.integers(0, 2**16))


@settings(max_examples=30)
@given(_argminmax_case())
def test_argminmax_matches_numpy(case):
  dtype, shape, axis, nans, index_dtype, seed = case
  rng = np.random.default_rng(seed)
  x = _data(rng, shape, dtype, -2, 2)   # a small range: many ties, first index wins
  if dtype in (f32, f16, bf16):
    x = np.round(x)
  for _ in range(nans):
    x.reshape(-1)[rng.integers(x.size)] = np.nan
  for f, ref in [(lax.argmax, np.argmax), (lax.argmin, np.argmin)]:
    expected = ref(_f64(x), axis=axis).astype(index_dtype)
    eager = f(x, axis, index_dtype)
    np.testing.assert_array_equal(np.asarray(eager), expected)
    assert eager.dtype == index_dtype
    staged = staged_call(lambda x: f(x, axis, index_dtype), x)
    np.testing.assert_array_equal(np.asarray(staged), expected)
    _check_abstract_eval(lambda x: f(x, axis, index_dtype), x, eager)


def test_argminmax_nan_and_ties_match_jax():
  x = np.array([[1., np.nan, 3., np.nan], [2., 2., -1., -1.], [np.nan, 0., np.inf, np.inf],
                [-np.inf, -np.inf, 5., np.nan]], np.float32)
  for axis in (0, 1):
    for f, jf in [(lax.argmax, jax.lax.argmax), (lax.argmin, jax.lax.argmin)]:
      np.testing.assert_array_equal(np.asarray(f(x, axis, np.int32)),
                                    np.asarray(jf(x, axis, np.int32)))


def test_argminmax_lowering_uses_variadic_reduce():
  x = np.zeros((5, 2), np.float32)
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.argmax(x, 0, np.int32)], [core.get_aval(x)])
  assert jaxpr.eqns[0].params == {"axes": (0,), "index_dtype": i32}
  text = lowering.lower_jaxpr_to_module("argmax", jaxpr)
  assert '"stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<5x2xi32>' in text
  assert ("(tensor<5x2xf32>, tensor<5x2xi32>, tensor<f32>, tensor<i32>) -> "
          "(tensor<2xf32>, tensor<2xi32>)") in text
  assert "compare  NE" not in text and "compare NE" in text   # the NaN test


@pytest.mark.parametrize("shape,axis,index_dtype,err,match", [
    ((0, 3), 0, i32, ValueError,
     r"argmin and argmax require non-empty reduced dimension. operand.shape=\(0, 3\) axis=0"),
    ((2, 3), 2, i32, ValueError, r"Invalid axis 2 for operand shape \(2, 3\)"),
    ((2, 3), -1, i32, ValueError, r"Invalid axis -1 for operand shape \(2, 3\)"),
    ((2, 3), 0, f32, TypeError, r"index_dtype must be an integer type, but got float32"),
])
def test_argminmax_errors_match_jax(shape, axis, index_dtype, err, match):
  x = np.zeros(shape, np.float32)
  for f in (lax.argmax, lax.argmin, jax.lax.argmax, jax.lax.argmin):
    with pytest.raises(err, match=match):
      f(x, axis, index_dtype)


# ---------------------------------------------------------------------------
# dot_general


def _einsum_spec(lhs_ndim, rhs_ndim, dimension_numbers):
  (lc, rc), (lb, rb) = dimension_numbers
  letters = iter("abcdefghijklmnopqrstuvwxyz")
  lhs = [None] * lhs_ndim
  rhs = [None] * rhs_ndim
  for l, r in [*zip(lb, rb), *zip(lc, rc)]:
    lhs[l] = rhs[r] = next(letters)
  lhs = [c or next(letters) for c in lhs]
  rhs = [c or next(letters) for c in rhs]
  out = ([lhs[d] for d in lb] + [c for d, c in enumerate(lhs) if d not in lb + lc]
         + [c for d, c in enumerate(rhs) if d not in rb + rc])
  return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


@st.composite
def _dot_case(draw):
  nb, nc = draw(st.integers(0, 2)), draw(st.integers(0, 2))
  nl, nr = draw(st.integers(0, 1)), draw(st.integers(0, 1))
  size = st.sampled_from([1, 2, 3])
  bs = [draw(size) for _ in range(nb)]
  cs = [draw(size) for _ in range(nc)]
  lperm = draw(st.permutations(range(nb + nc + nl)))
  rperm = draw(st.permutations(range(nb + nc + nr)))
  # lperm[i] is where logical dim i (batch..., contracting..., free...) sits in lhs
  lshape = [0] * len(lperm)
  rshape = [0] * len(rperm)
  for i, d in enumerate(bs + cs + [draw(size) for _ in range(nl)]):
    lshape[lperm[i]] = d
  for i, d in enumerate(bs + cs + [draw(size) for _ in range(nr)]):
    rshape[rperm[i]] = d
  dims = ((tuple(lperm[nb:nb + nc]), tuple(rperm[nb:nb + nc])),
          (tuple(lperm[:nb]), tuple(rperm[:nb])))
  dtype = draw(st.sampled_from([f32, i32, f16, bf16]))
  return tuple(lshape), tuple(rshape), dims, dtype, draw(st.integers(0, 2**16))


@settings(max_examples=30)
@given(_dot_case())
def test_dot_general_matches_einsum(case):
  lshape, rshape, dims, dtype, seed = case
  rng = np.random.default_rng(seed)
  x, y = _data(rng, lshape, dtype, -2, 2), _data(rng, rshape, dtype, -2, 2)
  expected = np.einsum(_einsum_spec(len(lshape), len(rshape), dims), _f64(x), _f64(y))
  n = int(np.prod([lshape[d] for d in dims[0][0]]))
  eager = lax.dot_general(x, y, dims)
  _close(eager, expected, dtype, n, 4.0)
  staged = staged_call(lambda x, y: lax.dot_general(x, y, dims), x, y)
  _close(staged, expected, dtype, n, 4.0)
  _check_abstract_eval(lambda x, y: lax.dot_general(x, y, dims), (x, y), eager)


def test_dot_general_output_layout_batch_then_lhs_then_rhs():
  x = np.zeros((5, 2, 7, 3), np.float32)   # free 5, batch 2, contract 7, free 3
  y = np.zeros((7, 4, 2), np.float32)      # contract 7, free 4, batch 2
  out = lax.dot_general(x, y, (((2,), (0,)), ((1,), (2,))))
  assert out.shape == (2, 5, 3, 4)
  assert jax.eval_shape(lambda: jax.lax.dot_general(x, y, (((2,), (0,)), ((1,), (2,))))
                        ).shape == (2, 5, 3, 4)


@pytest.mark.parametrize("ldt,rdt,pref", [
    (i8, i8, i32), (i8, i8, None), (i8, i32, None), (i8, u8, i32), (f16, f32, None),
    (bf16, bf16, f32), (i8, i8, f32), (f32, f32, f16),
])
def test_dot_general_dtypes_match_jax(ldt, rdt, pref):
  rng = np.random.default_rng(0)
  x = (rng.integers(-128, 128, (3, 8)) if ldt != f16 else rng.uniform(-2, 2, (3, 8))).astype(ldt)
  y = (rng.integers(0, 128, (8, 4)) if rdt in (i8, u8) else rng.uniform(-2, 2, (8, 4))
       ).astype(rdt)
  if ldt == bf16:
    x, y = rng.uniform(-2, 2, (3, 8)).astype(ldt), rng.uniform(-2, 2, (8, 4)).astype(rdt)
  if ldt == i8 and rdt == i8:
    x[0, :] = 127
    y[:, 0] = 127    # overflows int8: the accumulation must be in the preferred dtype
  out = lax.dot(x, y, preferred_element_type=pref)
  ref = jax.lax.dot(x, y, preferred_element_type=pref)
  assert out.dtype == ref.dtype
  if out.dtype in (f16, bf16, f32):
    np.testing.assert_allclose(_f64(out), _f64(ref), rtol=1e-2, atol=1e-2)
  else:
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref))
  staged = staged_call(lambda x, y: lax.dot(x, y, preferred_element_type=pref), x, y)
  np.testing.assert_array_equal(np.asarray(staged), np.asarray(out))


def test_dot_general_int8_preferred_int32_exact():
  x = np.full((2, 64), 127, np.int8)
  y = np.full((64, 3), -128, np.int8)
  out = lax.dot_general(x, y, (((1,), (0,)), ((), ())), preferred_element_type=np.int32)
  np.testing.assert_array_equal(np.asarray(out), np.full((2, 3), 127 * -128 * 64, np.int32))


def test_dot_and_batch_matmul():
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((3, 4)).astype(f32), rng.standard_normal((4, 5)).astype(f32)
  v, w = rng.standard_normal(4).astype(f32), rng.standard_normal(3).astype(f32)
  for l, r in [(a, b), (a, v), (v, b), (v, v), (w, a)]:
    np.testing.assert_allclose(np.asarray(lax.dot(l, r)), l @ r, rtol=1e-5, atol=1e-5)
  p, q = rng.standard_normal((2, 3, 4)).astype(f32), rng.standard_normal((2, 4, 5)).astype(f32)
  np.testing.assert_allclose(np.asarray(lax.batch_matmul(p, q)), p @ q, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(lax.dot_general(2.0, 3.0, (((), ()), ((), ())))), 6.0)
  # Weakly typed when both operands are (JAX 0.10's rule), strongly typed otherwise.
  for l, r in [(2.0, 3.0), (np.float32(2.0), 3.0), (np.ones(2, f32), 3.0)]:
    ours = lax.dot_general(l, r, (((), ()), ((), ())))
    theirs = jax.lax.dot_general(l, r, (((), ()), ((), ())))
    assert ours.weak_type == theirs.weak_type and ours.dtype == theirs.dtype
  assert lax.dot_general(2.0, 3.0, (((), ()), ((), ()))).weak_type
  with pytest.raises(ValueError, match=r"dimension_numbers must be specified when not "
                     r"performing simple un-batched .* got lhs_shape=\(2, 3, 4\) "
                     r"rhs_shape=\(4, 5\)"):
    lax.dot(p, b)
  with pytest.raises(ValueError, match=r"lhs_shape=\(3, 4\) rhs_shape=\(5,\)"):
    lax.dot(a, np.zeros(5, f32))
  with pytest.raises(ValueError, match="batch_matmul requires operands of equal rank"):
    lax.batch_matmul(p, b)


def test_precision_params_and_lowering():
  x = np.ones((2, 3, 4), np.float32)
  y = np.ones((2, 4, 5), np.float32)
  dims = (((2,), (1,)), ((0,), (0,)))
  cases = [(None, None), ("highest", (lax.Precision.HIGHEST,) * 2),
           (lax.Precision.HIGH, (lax.Precision.HIGH,) * 2),
           (jax.lax.Precision.HIGHEST, (lax.Precision.HIGHEST,) * 2),
           (("high", "default"), (lax.Precision.HIGH, lax.Precision.DEFAULT)),
           ("tensorfloat32", (lax.Precision.HIGH,) * 2)]
  for precision, param in cases:
    jaxpr, _ = pe.trace_to_jaxpr(lambda x, y: [lax.dot_general(x, y, dims, precision)],
                                 [core.get_aval(x), core.get_aval(y)])
    assert jaxpr.eqns[0].params["precision"] == param
    hash(tuple(jaxpr.eqns[0].params.items()))
  assert "precision=(Precision.HIGH, Precision.DEFAULT)" in str(
      pe.trace_to_jaxpr(lambda x, y: [lax.dot_general(x, y, dims, ("high", "default"))],
                        [core.get_aval(x), core.get_aval(y)])[0])
  text = lowering.lower_jaxpr_to_module("dot", jaxpr)
  assert ("#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], "
          "lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>") in text
  assert "[#stablehlo<precision HIGH>, #stablehlo<precision HIGH>]" in text
  np.testing.assert_array_equal(np.asarray(staged_call(
      lambda x, y: lax.dot_general(x, y, dims, "highest"), x, y)), np.full((2, 3, 5), 4.0))
  for bad in ["bogus", (None, "highest"), 3]:
    with pytest.raises(ValueError, match="Precision argument must be one of"):
      lax.dot_general(x, y, dims, precision=bad)
    with pytest.raises(ValueError, match="Precision argument must be one of"):
      jax.lax.dot_general(x, y, dims, precision=bad)


_F = np.float32


@pytest.mark.parametrize("lshape,rshape,dims,pref", [
    ((3, 4), (5, 5), (((1,), (0,)), ((), ())), None),
    ((3, 4), (4, 5), (((2,), (0,)), ((), ())), None),
    ((3, 4), (4, 5), (((-1,), (0,)), ((), ())), None),
    ((3, 4), (4, 5), (((1,), (2,)), ((), ())), None),
    ((3, 4), (4, 4), (((1, 1), (0, 1)), ((), ())), None),
    ((3, 4), (4, 5), (((1,), (0,)), ((0,), ())), None),
    ((3, 4), (2, 4), (((1,), (1,)), ((0,), (0,))), None),
    ((3, 4), (3, 4), (((0,), (1,)), ((0,), (0,))), None),
    ((3, 4), (4, 3), (((0,), (1,)), ((0, 0), (1, 1))), None),
])
def test_dot_general_errors_match_jax(lshape, rshape, dims, pref):
  x, y = np.zeros(lshape, _F), np.zeros(rshape, _F)
  with pytest.raises(TypeError) as jax_err:
    jax.lax.dot_general(x, y, dims, preferred_element_type=pref)
  with pytest.raises(TypeError, match=re.escape(str(jax_err.value))):
    lax.dot_general(x, y, dims, preferred_element_type=pref)


def test_dot_general_dtype_errors():
  x = np.zeros((3, 4), np.int32)
  msg = (r"`preferred_element_type` must not be narrower than the original type, got "
         r"preferred_element_type of int8 for result type of int32")
  for f in (lax.dot, jax.lax.dot):
    with pytest.raises(TypeError, match=msg):
      f(x, x.T, preferred_element_type=np.int8)
  with pytest.raises(TypeError, match="dimension_numbers must be"):
    lax.dot_general(x, x, ((1,), (0,)))
