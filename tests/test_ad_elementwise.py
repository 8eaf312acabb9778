"""JVP and transpose rules of the elementwise, special-function and random-bit primitives:
finite differences (check_grads, orders 1 and 2, forward and reverse, float64), JAX as the
oracle for complex numbers, ties, boundaries and x = 0 conventions, and zero / float0
tangents for the non-differentiable ones."""
import jax
import numpy as np
import pytest

import stagecraft as sc
from stagecraft import core, dtypes, lax, random
from stagecraft.core import ShapedArray
from stagecraft.errors import MissingRuleError
from stagecraft.interpreters import ad
from stagecraft.lax import elementwise as ew
from stagecraft.lax import random_bits
from stagecraft.test_util import check_grads

from _util import assert_trees_allclose

R = np.array([-1.3, -0.4, 0.35, 1.1])       # real line, away from 0
POS = np.array([0.4, 0.9, 1.7, 2.5])        # x > 0
UNIT = np.array([-0.7, -0.2, 0.3, 0.6])     # |x| < 1
GT1 = np.array([1.2, 1.7, 2.5, 3.1])        # x > 1

# (name, f, x): every differentiable unary primitive through its stagecraft.lax wrapper.
UNARY = [
    ("neg", lax.neg, R), ("exp", lax.exp, R), ("exp2", lax.exp2, R), ("log", lax.log, POS),
    ("log1p", lax.log1p, UNIT), ("expm1", lax.expm1, R), ("sqrt", lax.sqrt, POS),
    ("rsqrt", lax.rsqrt, POS), ("cbrt", lax.cbrt, R), ("sin", lax.sin, R),
    ("cos", lax.cos, R), ("tan", lax.tan, UNIT), ("tanh", lax.tanh, R),
    ("asin", lax.asin, UNIT), ("acos", lax.acos, UNIT), ("atan", lax.atan, R),
    ("sinh", lax.sinh, R), ("cosh", lax.cosh, R), ("asinh", lax.asinh, R),
    ("acosh", lax.acosh, GT1), ("atanh", lax.atanh, UNIT), ("erf", lax.erf, R),
    ("erfc", lax.erfc, R), ("erf_inv", lax.erf_inv, UNIT), ("abs", lax.abs, R),
    ("logistic", lax.logistic, R), ("integer_pow_0", lambda x: lax.integer_pow(x, 0), R),
    ("integer_pow_1", lambda x: lax.integer_pow(x, 1), R),
    ("integer_pow_2", lambda x: lax.integer_pow(x, 2), R),
    ("integer_pow_3", lambda x: lax.integer_pow(x, 3), R),
    ("integer_pow_-2", lambda x: lax.integer_pow(x, -2), R),
    ("reciprocal", lax.reciprocal, R), ("square", lax.square, R),
    ("reduce_precision", lambda x: lax.reduce_precision(x, 11, 52), R),
    ("lgamma", lax.lgamma, POS), ("digamma", lax.digamma, POS),
    ("polygamma_x", lambda x: lax.polygamma(1.0, x), POS),
    ("zeta_q", lambda q: lax.zeta(3.0, q), POS),
    ("igamma_x", lambda x: lax.igamma(2.0, x), POS),
    ("igammac_x", lambda x: lax.igammac(2.0, x), POS),
    ("igamma_grad_a_x", lambda x: lax.igamma_grad_a(2.0, x), POS),
    ("bessel_i0e", lax.bessel_i0e, R), ("bessel_i1e", lax.bessel_i1e, R),
]


@pytest.mark.parametrize("name,f,x", UNARY, ids=[u[0] for u in UNARY])
def test_unary_check_grads(name, f, x):
  with sc.enable_x64():
    check_grads(f, (x,), 2, modes=("fwd", "rev"))


def test_bessel_i1e_near_zero():
  """i1e(x) ~ x/2 - x|x|/2 has a kink in its derivative at 0: order 1 only; JAX's rule uses
  1/2 for |x| <= eps."""
  x = np.array([-1e-17, 0.0, 1e-17, 0.3])
  with sc.enable_x64():
    # NB: finite differences across the kink err by O(eps): a small step.
    check_grads(lax.bessel_i1e, (x,), 1, modes=("fwd", "rev"), eps=1e-7)
    np.testing.assert_allclose(sc.grad(lambda x: lax.bessel_i1e(x).sum())(x)[:3], 0.5)


X2 = np.array([2.3, 3.1, -2.7, 0.8])
Y2 = np.array([1.1, 1.3, 1.2, -1.7])   # x / y not near an integer (rem), no ties (max/min)

# (name, f, x, y): binary primitives, differentiated in both operands.
BINARY = [
    ("add", lax.add, X2, Y2), ("sub", lax.sub, X2, Y2), ("mul", lax.mul, X2, Y2),
    ("div", lax.div, X2, Y2), ("rem", lax.rem, X2, Y2), ("max", lax.max, X2, Y2),
    ("min", lax.min, X2, Y2), ("atan2", lax.atan2, X2, Y2), ("pow", lax.pow, POS, R),
    ("igamma_ax", lambda a, x: lax.igamma(a, x) * 1.0, POS, GT1),
]


@pytest.mark.parametrize("name,f,x,y", BINARY, ids=[b[0] for b in BINARY])
def test_binary_check_grads(name, f, x, y):
  with sc.enable_x64():
    # igamma has no second derivative in a (as JAX): order 1 in both operands.
    check_grads(f, (x, y), 1 if name.startswith("igamma") else 2, modes=("fwd", "rev"))


@pytest.mark.parametrize("name,f,x,y", BINARY[:-1], ids=[b[0] for b in BINARY[:-1]])
@pytest.mark.parametrize("scalar", ["lhs", "rhs"])
def test_binary_rank0_operand(name, f, x, y, scalar):
  """A rank-0 operand broadcasts: its tangent is broadcast up and its cotangent summed down
  to shape ()."""
  x, y = (x[1], y) if scalar == "lhs" else (x, y[2])
  with sc.enable_x64():
    check_grads(f, (x, y), 2, modes=("fwd", "rev"))
    gx, gy = sc.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1))(x, y)
    assert np.shape(gx) == np.shape(x) and np.shape(gy) == np.shape(y)
    with jax.enable_x64(True):
      jf = getattr(jax.lax, name)
      jgx, jgy = jax.grad(lambda a, b: jf(a, b).sum(), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, jgx, rtol=1e-12)
    np.testing.assert_allclose(gy, jgy, rtol=1e-12)


def test_igamma_grad_a_matches_jax():
  a, x = np.float32([0.5, 2.0, 3.0, 10.0]), np.float32([0.3, 1.5, 9.0, 9.5])
  for f, jf in ((lax.igamma, jax.lax.igamma), (lax.igammac, jax.lax.igammac)):
    ga, gx = sc.grad(lambda a, x: f(a, x).sum(), argnums=(0, 1))(a, x)
    jga, jgx = jax.grad(lambda a, x: jf(a, x).sum(), argnums=(0, 1))(a, x)
    np.testing.assert_allclose(ga, jga, rtol=2e-5)
    np.testing.assert_allclose(gx, jgx, rtol=2e-5)
  np.testing.assert_allclose(lax.igamma_grad_a(a, x), jax.lax.igamma_grad_a(a, x), rtol=2e-5)


def test_clamp_check_grads():
  lo, hi = np.array([-1.0, -1.0, 0.5, 0.0]), np.array([1.0, 2.0, 1.5, 0.2])
  x = np.array([-1.5, 0.3, 1.7, 0.1])   # below, inside, above, inside; no ties
  with sc.enable_x64():
    check_grads(lax.clamp, (lo, x, hi), 2, modes=("fwd", "rev"))
    check_grads(lax.clamp, (np.float64(-0.5), x, np.float64(1.0)), 2, modes=("fwd", "rev"))
    g_lo, g_hi = sc.grad(lambda a, b: lax.clamp(a, x, b).sum(), argnums=(0, 1))(
        np.float64(-0.5), np.float64(1.0))
  assert np.shape(g_lo) == () and float(g_lo) == 1.0   # x[0] = -1.5 < -0.5
  assert np.shape(g_hi) == () and float(g_hi) == 1.0   # x[2] = 1.7 > 1.0


def test_clamp_boundaries_match_jax():
  lo, hi = np.float32([0.0, 0.0, 0.0, 0.0, 1.0]), np.float32([1.0, 1.0, 1.0, 1.0, 0.0])
  x = np.float32([0.0, 1.0, -1.0, 2.0, 0.5])   # at min, at max, below, above, min > max

  def f(lo, x, hi, clamp):
    return (clamp(lo, x, hi) * np.float32([1, 2, 3, 4, 5])).sum()
  got = sc.grad(lambda *a: f(*a, lax.clamp), argnums=(0, 1, 2))(lo, x, hi)
  want = jax.grad(lambda *a: f(*a, jax.lax.clamp), argnums=(0, 1, 2))(lo, x, hi)
  assert_trees_allclose(got, want, rtol=0, atol=0)
  assert np.asarray(want[1]).tolist() == [0, 0, 0, 0, 0]   # strict inequalities at the bounds


def test_max_min_ties_split_the_tangent_as_jax():
  x = np.float32([1.0, 2.0, 3.0])
  y = np.float32([1.0, 5.0, 3.0])
  for f, jf in ((lax.max, jax.lax.max), (lax.min, jax.lax.min)):
    got = sc.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1))(x, y)
    want = jax.grad(lambda a, b: jf(a, b).sum(), argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
  np.testing.assert_array_equal(
      sc.grad(lambda a, b: lax.max(a, b).sum(), argnums=(0, 1))(x, y)[0], [0.5, 0.0, 0.5])
  # A rank-0 operand: all of the tangent where it wins, half where it ties.
  v = np.float32([1.0, 3.0, 3.0, 4.0])
  g = sc.grad(lambda s: lax.max(v, s).sum())(np.float32(3.0))
  assert float(g) == 2.0
  assert float(g) == float(jax.grad(lambda s: jax.lax.max(v, s).sum())(np.float32(3.0)))


def test_pow_at_zero_matches_jax():
  x = np.float32([0.0, 0.0, 0.0, 2.0])
  y_int = np.int32([0, 1, 2, 3])
  got = sc.grad(lambda a: lax.pow(a, y_int).sum())(x)
  want = jax.grad(lambda a: jax.lax.pow(a, y_int).sum())(x)
  np.testing.assert_array_equal(got, want)
  assert np.asarray(got).tolist() == [0.0, 1.0, 0.0, 12.0]
  y = np.float32([0.5, 1.0, 2.0, 3.0])
  for argnums in (0, 1):
    got = sc.grad(lambda a, b: lax.pow(a, b).sum(), argnums=argnums)(x, y)
    want = jax.grad(lambda a, b: jax.lax.pow(a, b).sum(), argnums=argnums)(x, y)
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
  # d/dy 0**y is 0 (log 0 replaced), not NaN.
  assert np.asarray(sc.grad(lambda b: lax.pow(np.float32(0.0), b))(np.float32(2.0))) == 0.0


def test_pow_integer_exponent_check_grads():
  with sc.enable_x64():
    check_grads(lambda x: lax.pow(x, np.array([0, 1, 2, -3])), (R,), 2, modes=("fwd", "rev"))


def test_compositions_match_jax():
  x = np.float32([-1.5, -0.2, 0.4, 2.0])

  def f(lx, x):
    s = lx.logistic(x) * lx.tanh(x) + lx.pow(lx.abs(x) + 1.0, x * 0.5)
    return (lx.atan2(s, x * x + 1.0) - lx.exp(lx.neg(lx.square(x))) / (2.0 + lx.sin(x))).sum()
  np.testing.assert_allclose(sc.grad(lambda x: f(lax, x))(x),
                             jax.grad(lambda x: f(jax.lax, x))(x), rtol=2e-6, atol=1e-7)
  t = np.float32([1.0, -2.0, 0.5, 0.25])
  np.testing.assert_allclose(sc.jvp(lambda x: f(lax, x), (x,), (t,))[1],
                             jax.jvp(lambda x: f(jax.lax, x), (x,), (t,))[1], rtol=2e-6)


def test_jit_of_grad_equals_grad():
  x = np.float32([-1.5, -0.2, 0.4, 2.0])

  def f(x):
    y = lax.clamp(-1.0, x, 1.0) * lax.logistic(x) + lax.max(x, 0.0)
    return (lax.select(lax.gt(x, 0.0), lax.log1p(lax.abs(x)), lax.expm1(y)) + lax.erf(y)).sum()
  np.testing.assert_allclose(sc.jit(sc.grad(f))(x), sc.grad(f)(x), rtol=1e-6)
  np.testing.assert_allclose(sc.jit(sc.grad(sc.grad(lambda s: f(x * s))))(np.float32(0.7)),
                             sc.grad(sc.grad(lambda s: f(x * s)))(np.float32(0.7)), rtol=1e-5)


# ---------------------------------------------------------------------------
# Complex numbers: JAX's convention (transpose, not adjoint), so JAX is the oracle.

Z = np.array([0.3 + 0.2j, -0.5 + 1.1j, 1.2 - 0.4j])
W = np.array([0.7 - 0.1j, 0.2 + 0.9j, -1.1 - 0.6j])

COMPLEX = [
    ("exp", lambda m, z: m.exp(z)), ("log", lambda m, z: m.log(z)),
    ("sin", lambda m, z: m.sin(z)), ("tanh", lambda m, z: m.tanh(z)),
    ("sqrt", lambda m, z: m.sqrt(z)), ("logistic", lambda m, z: m.logistic(z)),
    ("integer_pow", lambda m, z: m.integer_pow(z, 3)), ("abs", lambda m, z: m.abs(z)),
    ("real", lambda m, z: m.real(z)), ("imag", lambda m, z: m.imag(z)),
    ("conj", lambda m, z: m.conj(z)), ("mul", lambda m, z: m.mul(z, W)),
    ("div", lambda m, z: m.div(W, z)), ("pow", lambda m, z: m.pow(z, W)),
    ("real_to_complex", lambda m, z: m.complex(m.real(z), m.imag(z) * 2.0)),
    ("conj_of_real", lambda m, z: m.conj(m.abs(z))),
    pytest.param("convert_to_real", lambda m, z: m.convert_element_type(z, np.float64),
                 marks=pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")),
    ("select_n", lambda m, z: m.select_n(np.array([True, False, True]), z, m.neg(z))),
]


@pytest.mark.parametrize("name,f", COMPLEX)
def test_complex_jvp_vjp_match_jax(name, f):
  t = np.array([1.0 - 0.5j, 0.3 + 0.2j, -0.7 + 1.0j])
  with sc.enable_x64(), jax.enable_x64(True):
    out, tan = sc.jvp(lambda z: f(lax, z), (Z,), (t,))
    jout, jtan = jax.jvp(lambda z: f(jax.lax, z), (Z,), (t,))
    np.testing.assert_allclose(tan, jtan, rtol=1e-12)
    ct = (np.array([0.4 + 0.3j, -1.0 + 0.1j, 0.5 - 0.8j]) if np.iscomplexobj(jout)
          else np.array([0.4, -1.0, 0.5]))
    got, = sc.vjp(lambda z: f(lax, z), Z)[1](ct)
    want, = jax.vjp(lambda z: f(jax.lax, z), Z)[1](ct)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_complex_of_real_parts_transposes_with_rank0_operand():
  x = np.array([0.3, -1.2, 0.8])
  ct = np.array([1.0 + 2.0j, -0.5 + 0.5j, 0.25 - 1.0j])
  with sc.enable_x64():
    gx, gy = sc.vjp(lambda a, b: lax.complex(a, b), x, np.float64(0.5))[1](ct)
    _, t = sc.jvp(lambda b: lax.complex(x, b), (np.float64(0.5),), (np.float64(2.0),))
  np.testing.assert_allclose(gx, ct.real)
  assert np.shape(gy) == () and float(gy) == pytest.approx(-ct.imag.sum())
  np.testing.assert_allclose(t, np.full(3, 2.0j))


# ---------------------------------------------------------------------------
# convert_element_type


def test_grad_through_float32_float64_round_trip():
  x = np.float32([0.3, -1.1, 2.0])
  with sc.enable_x64():
    def f(x):
      y = lax.convert_element_type(x, np.float64)
      return lax.convert_element_type(lax.sin(y) * y, np.float32).sum()
    g = sc.grad(f)(x)
    assert np.asarray(g).dtype == np.float32
    np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-6)
    _, t = sc.jvp(lambda x: lax.convert_element_type(x, np.float64), (x,),
                  (np.ones(3, np.float32),))
    assert np.asarray(t).dtype == np.float64
    # Linear, so finite differences are exact up to float32 rounding: a wide step.
    check_grads(lambda x: lax.convert_element_type(
        lax.convert_element_type(x, np.float32) * 1.5, np.float64), (R,), 2, eps=0.05,
        atol=1e-5, rtol=1e-5)


def test_convert_element_type_transpose_restores_dtype_and_weak_type():
  rule = ad.primitive_transposes[ew.convert_element_type_p]
  weak = ShapedArray((2,), np.dtype(np.float32), True)
  ct = np.float64([1.0, 2.0])
  with sc.enable_x64():
    out, = rule(ct, ad.UndefinedPrimal(weak), new_dtype=np.dtype(np.float64), weak_type=False)
  assert core.get_aval(out) == weak and core.get_aval(out).weak_type
  int_in = ShapedArray((2,), np.dtype(np.int32))
  out, = rule(ct, ad.UndefinedPrimal(int_in), new_dtype=np.dtype(np.float64), weak_type=False)
  assert type(out) is ad.Zero and out.aval.dtype == dtypes.float0


def test_convert_to_and_from_integers_has_zero_derivative():
  x = np.float32([0.7, 1.6, -2.4])
  _, t = sc.jvp(lambda x: lax.convert_element_type(x, np.int32), (x,), (np.ones(3, np.float32),))
  assert t.dtype == dtypes.float0 and t.shape == (3,)
  # grad through an integer cast: only the float path contributes.
  g = sc.grad(lambda x: (lax.convert_element_type(lax.convert_element_type(x, np.int32),
                                                  np.float32) * x).sum())(x)
  np.testing.assert_array_equal(g, np.trunc(x))
  k = np.int32([1, 2, 3])
  gk = sc.grad(lambda k, x: (lax.convert_element_type(k, np.float32) * x).sum(), argnums=(0, 1),
               allow_int=True)(k, x)
  assert gk[0].dtype == dtypes.float0
  np.testing.assert_array_equal(gk[1], k.astype(np.float32))


# ---------------------------------------------------------------------------
# Zero derivatives and integer-only primitives

ZERO_FLOAT = [("floor", lax.floor), ("ceil", lax.ceil), ("round", lax.round),
              ("round_even", lambda x: lax.round(x, 1)), ("sign", lax.sign),
              ("bitcast_same_width", lambda x: lax.bitcast_convert_type(
                  lax.bitcast_convert_type(x, np.int32), np.float32))]


@pytest.mark.parametrize("name,f", ZERO_FLOAT, ids=[z[0] for z in ZERO_FLOAT])
def test_zero_derivative_float_results(name, f):
  x = np.float32([-1.6, -0.2, 0.4, 2.5])
  _, t = sc.jvp(f, (x,), (np.ones(4, np.float32),))
  assert np.asarray(t).dtype == np.float32
  np.testing.assert_array_equal(t, np.zeros(4))
  g = sc.grad(lambda x: (f(x) * x).sum())(x)   # only the direct factor x contributes
  np.testing.assert_array_equal(g, np.asarray(f(x)))
  np.testing.assert_array_equal(sc.grad(lambda x: f(x).sum())(x), np.zeros(4))


BOOL_OR_INT = [
    ("is_finite", lax.is_finite), ("eq", lambda x: lax.eq(x, 0.4)),
    ("ne", lambda x: lax.ne(x, 0.4)), ("lt", lambda x: lax.lt(x, 0.4)),
    ("le", lambda x: lax.le(x, 0.4)), ("gt", lambda x: lax.gt(x, 0.4)),
    ("ge", lambda x: lax.ge(x, 0.4)),
    ("bitcast_to_int", lambda x: lax.bitcast_convert_type(x, np.int32)),
    ("bitcast_narrow", lambda x: lax.bitcast_convert_type(x, np.uint8)),
]


@pytest.mark.parametrize("name,f", BOOL_OR_INT, ids=[b[0] for b in BOOL_OR_INT])
def test_bool_and_integer_results_have_float0_tangents(name, f):
  x = np.float32([-1.6, -0.2, 0.4, np.inf])
  out, t = sc.jvp(f, (x,), (np.ones(4, np.float32),))
  assert t.dtype == dtypes.float0 and t.shape == np.shape(out)
  g = sc.grad(lambda x: (lax.convert_element_type(f(x), np.float32) * 2.0).sum())(x)
  np.testing.assert_array_equal(g, np.zeros(4))


INT_ONLY = [
    ("and", lambda k: lax.bitwise_and(k, np.int32(6))),
    ("or", lambda k: lax.bitwise_or(k, np.int32(6))),
    ("xor", lambda k: lax.bitwise_xor(k, np.int32(6))), ("not", lax.bitwise_not),
    ("shift_left", lambda k: lax.shift_left(k, np.int32(2))),
    ("shift_right_logical", lambda k: lax.shift_right_logical(k, np.int32(1))),
    ("shift_right_arithmetic", lambda k: lax.shift_right_arithmetic(k, np.int32(1))),
    ("population_count", lax.population_count), ("clz", lax.clz),
    ("max_int", lambda k: lax.max(k, np.int32(2))), ("neg_int", lax.neg),
    ("mul_int", lambda k: lax.mul(k, k)),
    ("bitcast_int_to_float",   # k + 2**30: normal floats near 2 (XLA flushes subnormals)
     lambda k: lax.bitcast_convert_type(lax.add(k, np.int32(1 << 30)), np.float32)),
]


@pytest.mark.parametrize("name,f", INT_ONLY, ids=[i[0] for i in INT_ONLY])
def test_integer_inputs_differentiate_as_float0(name, f):
  k = np.int32([1, -3, 7, 12])
  x = np.float32([0.5, 1.5, -2.0, 3.0])
  _, t = sc.jvp(f, (k,), (np.zeros(4, dtypes.float0),))
  assert t.shape == (4,) and (t.dtype == dtypes.float0 or not np.any(t))

  def g(k, x):
    return (lax.convert_element_type(f(k), np.float32) * x).sum()
  gk, gx = sc.grad(g, argnums=(0, 1), allow_int=True)(k, x)
  assert gk.dtype == dtypes.float0 and gk.shape == (4,)
  np.testing.assert_array_equal(gx, np.asarray(f(k)).astype(np.float32))


def test_defjvp_zero_rules_of_bit_primitives_give_float0():
  """The rules of integer-only primitives are never reached through jvp (their inputs have
  float0 tangents); called directly they return symbolic float0 zeros."""
  k = np.int32([5, 9])
  for p, args in ((ew.population_count_p, (k,)), (ew.shift_left_p, (k, k)),
                  (ew.and_p, (k, k)), (ew.clz_p, (k,))):
    out, t = ad.primitive_jvps[p](args, [ad.Zero.from_value(a) for a in args])
    assert type(t) is ad.Zero and t.aval.dtype == dtypes.float0
    np.testing.assert_array_equal(out, p.bind(*args))


def test_nextafter_is_not_differentiable():
  x = np.float32([1.0, 2.0])
  with pytest.raises(MissingRuleError, match="'nextafter' is not differentiable"):
    sc.grad(lambda x: lax.nextafter(x, np.float32(3.0)).sum())(x)
  g = sc.grad(lambda x: (lax.nextafter(lax.stop_gradient(x), np.float32(3.0)) * x).sum())(x)
  np.testing.assert_array_equal(g, np.nextafter(x, np.float32(3.0)))


def test_non_differentiable_arguments_raise_clear_errors():
  x = np.float32([1.5, 2.5])
  with pytest.raises(ValueError, match="polygamma is not differentiable with respect to its "
                                       "order m"):
    sc.grad(lambda m: lax.polygamma(m, x).sum())(np.float32([1.0, 2.0]))
  with pytest.raises(ValueError, match=r"zeta\(x, q\) is differentiable with respect to q"):
    sc.grad(lambda s: lax.zeta(s, x).sum())(np.float32([3.0, 4.0]))
  with pytest.raises(ValueError, match="igamma_grad_a has no derivative with respect to a"):
    sc.grad(sc.grad(lambda a: lax.igamma(a, np.float32(1.5))))(np.float32(2.0))


def test_digamma_derivative_is_polygamma_1():
  x = np.float32([0.5, 1.0, 3.0])
  np.testing.assert_allclose(sc.grad(lambda x: lax.digamma(x).sum())(x),
                             lax.polygamma(np.float32(1.0), x), rtol=1e-6)
  np.testing.assert_allclose(sc.grad(lambda x: lax.digamma(x).sum())(x),
                             jax.grad(lambda x: jax.lax.digamma(x).sum())(x), rtol=1e-5)


def test_reduce_precision_is_linear_as_jax():
  x = np.float32([1.0009766, 0.1, 3.3])
  t = np.float32([0.1, 1e-3, 7.77])
  f = lambda lx: (lambda x: lx.reduce_precision(x * x, 5, 10))
  np.testing.assert_array_equal(sc.jvp(f(lax), (x,), (t,))[1], jax.jvp(f(jax.lax), (x,), (t,))[1])
  np.testing.assert_array_equal(sc.vjp(f(lax), x)[1](t)[0], jax.vjp(f(jax.lax), x)[1](t)[0])


# ---------------------------------------------------------------------------
# select_n


def test_select_n_check_grads():
  pred = np.array([True, False, False, True])
  which = np.int32([0, 2, 1, 2])
  with sc.enable_x64():
    check_grads(lambda a, b: lax.select(pred, a, b), (R, UNIT), 2, modes=("fwd", "rev"))
    check_grads(lambda a, b, c: lax.select_n(which, a, b, c), (R, UNIT, POS), 2,
                modes=("fwd", "rev"))
    check_grads(lambda a, b: lax.select_n(np.int32(1), a, b, a), (R, UNIT), 2,
                modes=("fwd", "rev"))
    ga, gb, gc = sc.grad(lambda a, b, c: (lax.select_n(which, a, b, c) * POS).sum(),
                         argnums=(0, 1, 2))(R, UNIT, POS)
  np.testing.assert_array_equal(ga, np.where(which == 0, POS, 0))
  np.testing.assert_array_equal(gb, np.where(which == 1, POS, 0))
  np.testing.assert_array_equal(gc, np.where(which == 2, POS, 0))


def test_select_n_with_a_constant_case():
  pred = np.array([True, False, True])
  x = np.float32([1.0, 2.0, 3.0])
  g = sc.grad(lambda x: lax.select(pred, lax.sin(x), np.float32([7, 8, 9])).sum())(x)
  np.testing.assert_allclose(g, np.where(pred, np.cos(x), 0), rtol=1e-6)
  _, t = sc.jvp(lambda x: lax.select(pred, np.float32([7, 8, 9]), x), (x,),
                (np.ones(3, np.float32),))
  np.testing.assert_array_equal(t, [0.0, 1.0, 0.0])


def test_select_n_jvp_materializes_zeros_only_for_zero_cases():
  pred = np.array([True, False])

  def jvp_jaxpr(f, n):
    args = [np.ones(2, np.float32)] * (2 * n)
    return str(sc.make_jaxpr(lambda *a: sc.jvp(f, a[:n], a[n:]))(*args))
  both = jvp_jaxpr(lambda a, b: lax.select(pred, a, b), 2)
  assert "broadcast_in_dim" not in both and both.count("select_n") == 2
  one = jvp_jaxpr(lambda a: lax.select(pred, a, np.float32([5, 6])), 1)
  assert one.count("broadcast_in_dim") == 1   # the zero tangent of the constant case


def test_select_n_transpose_needs_a_primal_predicate():
  rule = ad.primitive_transposes[ew.select_n_p]
  case = ad.UndefinedPrimal(ShapedArray((2,), np.dtype(np.float32)))
  with pytest.raises(ValueError, match="the predicate `which`"):
    rule(np.ones(2, np.float32), ad.UndefinedPrimal(ShapedArray((2,), np.dtype(bool))), case,
         case)


def test_div_transpose_rejects_a_linear_divisor():
  rule = ad.primitive_transposes[ew.div_p]
  with pytest.raises(ValueError, match="linear in x only"):
    rule(np.ones(2, np.float32), np.ones(2, np.float32),
         ad.UndefinedPrimal(ShapedArray((2,), np.dtype(np.float32))))


# ---------------------------------------------------------------------------
# Random bits: zero derivative; code using stagecraft.random differentiates.


def test_grad_through_random_normal():
  key = random.PRNGKey(0)
  x = np.float32([0.5, -1.0, 2.0])
  noise = np.asarray(random.normal(key, (3,)))
  f = lambda x, key: (x * random.normal(key, x.shape)).sum()
  np.testing.assert_allclose(sc.grad(f)(x, key), noise, rtol=1e-6)
  np.testing.assert_allclose(sc.jit(sc.grad(f))(x, key), noise, rtol=1e-6)
  _, t = sc.jvp(lambda x: x * random.normal(key, x.shape), (x,), (np.ones(3, np.float32),))
  np.testing.assert_allclose(t, noise, rtol=1e-6)


def test_grad_of_uniform_bounds_matches_jax():
  def f(rnd, key, lo, hi):
    return (rnd.uniform(key, (5,), minval=lo, maxval=hi) ** 2).sum()
  lo, hi = np.float32(-1.0), np.float32(2.0)
  got = sc.grad(lambda lo, hi: f(random, random.PRNGKey(3), lo, hi), argnums=(0, 1))(lo, hi)
  want = jax.grad(lambda lo, hi: f(jax.random, jax.random.PRNGKey(3), lo, hi),
                  argnums=(0, 1))(lo, hi)
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_random_bit_primitives_have_float0_tangents():
  u = np.uint32([1, 2])
  cases = [(random_bits.threefry2x32_p, (u, u, u, u), {}),
           (random_bits.iota_2x32_shape_p, (), {"shape": (2,)}),
           (random_bits.rng_bit_generator_p, (np.zeros(4, np.uint32),),
            {"shape": (3,), "dtype": np.dtype(np.uint32),
             "algorithm": random_bits.RandomAlgorithm.RNG_DEFAULT})]
  for p, args, params in cases:
    outs, ts = ad.primitive_jvps[p](args, [ad.Zero.from_value(a) for a in args], **params)
    want = p.bind(*args, **params)
    assert len(ts) == len(want) and all(type(t) is ad.Zero for t in ts)
    assert [t.aval.shape for t in ts] == [np.shape(w) for w in want]
    assert all(t.aval.dtype == dtypes.float0 for t in ts)
    assert_trees_allclose(outs, want, rtol=0, atol=0)
