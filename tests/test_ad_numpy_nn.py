"""Derivatives of the composed libraries: `stagecraft.nn`, `stagecraft.numpy` and
`stagecraft.scipy.special`.

- `check_grads` (central finite differences, float64, orders 1 and 2, forward and reverse
  mode) over broad tables of the differentiable public functions, on inputs inside their
  domains and away from their kinks;
- JAX's derivative conventions at the special points (kinks, ties, 0, +-inf, large
  magnitudes), compared with `jax.jvp` / `jax.vjp` on the same inputs: `nn.relu'(0) == 0`,
  finite `logsumexp`/`softmax` derivatives at large inputs, the Maclaurin derivatives of
  `sinc` at 0, finite `logaddexp` derivatives at infinities, and so on.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

import jax
import jax.numpy as jjnp
import jax.scipy.special

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import nn
from stagecraft.scipy import special
from stagecraft.test_util import check_grads

from _util import assert_trees_allclose

SC = types.SimpleNamespace(np=jnp, nn=nn, sp=special, grad=sc.grad, jvp=sc.jvp, vjp=sc.vjp)
JX = types.SimpleNamespace(np=jjnp, nn=jax.nn, sp=jax.scipy.special, grad=jax.grad,
                           jvp=jax.jvp, vjp=jax.vjp)

_rng = np.random.default_rng(1234)


def _normal(*shape):
  return _rng.standard_normal(shape)


def _uniform(lo, hi, *shape):
  return _rng.uniform(lo, hi, shape)


def _away(*shape, gap=0.3, scale=2.0):
  """Random values of random sign with |x| in [gap, gap + scale] (away from 0)."""
  return _rng.choice([-1.0, 1.0], shape) * _rng.uniform(gap, gap + scale, shape)


def _spd(n):
  a = _normal(n, n)
  return a @ a.T + n * np.eye(n)


def _well_conditioned(n):
  return _normal(n, n) + 3 * np.eye(n)


def _check(f, args, order=2, **tol):
  """check_grads in float64, orders 1..`order`, forward and reverse mode.

  NB: runs with jit disabled, so that the functions' primitives run one by one from the
  executable cache instead of compiling a new jitted JVP per check (jit's own derivative
  rules are tested in test_ad_api.py; `test_jitted_functions_check_grads` keeps a few here).
  """
  with sc.enable_x64(), sc.disable_jit():
    check_grads(f, tuple(args), order, modes=("fwd", "rev"), **tol)


def _split(z):
  """(real part, imaginary part): complex results as a pair of real arrays, so that
  `check_grads` (whose finite differences take real inputs and outputs) sees a real function
  (the complex rules still run: real, imag and complex conversions are linear)."""
  return jnp.real(z), jnp.imag(z)


def _missing(reason):
  """A table entry whose derivative rule is genuinely missing: a strict xfail."""
  return pytest.mark.xfail(strict=True, reason=reason)


# ---------------------------------------------------------------------------
# stagecraft.nn: every differentiable public function

# away from 0, +-1, +-3, 6 (the kinks of the piecewise activations)
_ACT_X = np.array([[-4.1, -2.3, -1.4, -0.6], [0.35, 0.8, 1.7, 2.6]])
_MASK = np.array([[True, False, True, True], [False, True, True, True]])

NN_CASES = [
    ("relu", lambda x: nn.relu(x), [_ACT_X]),
    ("relu6", lambda x: nn.relu6(x), [np.array([-1.2, 0.5, 3.3, 5.1, 7.4])]),
    ("gelu_tanh", lambda x: nn.gelu(x), [_ACT_X]),
    ("gelu_erf", lambda x: nn.gelu(x, approximate=False), [_ACT_X]),
    ("silu", lambda x: nn.silu(x), [_ACT_X]),
    ("swish", lambda x: nn.swish(x), [_ACT_X]),
    ("sigmoid", lambda x: nn.sigmoid(x), [_ACT_X]),
    ("softplus", lambda x: nn.softplus(x), [_ACT_X]),
    ("log_sigmoid", lambda x: nn.log_sigmoid(x), [_ACT_X]),
    ("elu", lambda x: nn.elu(x), [_ACT_X]),
    ("elu_alpha", lambda x, a: nn.elu(x, a), [_ACT_X, np.array(0.7)]),
    ("leaky_relu", lambda x: nn.leaky_relu(x, 0.1), [_ACT_X]),
    ("celu", lambda x: nn.celu(x, 1.5), [_ACT_X]),
    ("selu", lambda x: nn.selu(x), [_ACT_X]),
    ("glu", lambda x: nn.glu(x), [_ACT_X]),
    ("glu_axis0", lambda x: nn.glu(x, axis=0), [_normal(4, 3)]),
    ("softmax", lambda x: nn.softmax(x), [_ACT_X]),
    ("softmax_axis0", lambda x: nn.softmax(x, axis=0), [_ACT_X]),
    ("softmax_all", lambda x: nn.softmax(x, axis=None), [_ACT_X]),
    ("softmax_where", lambda x: nn.softmax(x, where=_MASK), [_ACT_X]),
    ("log_softmax", lambda x: nn.log_softmax(x), [_ACT_X]),
    ("log_softmax_axes", lambda x: nn.log_softmax(x, axis=(0, 1)), [_ACT_X]),
    ("log_softmax_where",
     lambda x: jnp.where(_MASK, nn.log_softmax(x, where=_MASK), 0.), [_ACT_X]),
    ("logsumexp", lambda x: nn.logsumexp(x), [_ACT_X]),
    ("logsumexp_axis", lambda x: nn.logsumexp(x, axis=1, keepdims=True), [_ACT_X]),
    ("logmeanexp", lambda x: nn.logmeanexp(x, axis=0), [_ACT_X]),
    ("standardize", lambda x: nn.standardize(x), [_normal(3, 5)]),
    ("standardize_stable", lambda x: nn.standardize(x, axis=0, algorithm="stable"),
     [_normal(4, 3)]),
    ("standardize_given", lambda x, m, v: nn.standardize(x, mean=m, variance=v),
     [_normal(3, 4), _normal(3, 1), _uniform(0.5, 2, 3, 1)]),
    ("standardize_where", lambda x: nn.standardize(x, where=_MASK), [_normal(2, 4)]),
    ("identity", lambda x: nn.identity(x), [_ACT_X]),
    ("soft_sign", lambda x: nn.soft_sign(x), [_ACT_X]),
    ("squareplus", lambda x: nn.squareplus(x), [_ACT_X]),
    ("squareplus_b", lambda x, b: nn.squareplus(x, b), [_ACT_X, np.array(2.5)]),
    ("sparse_plus", lambda x: nn.sparse_plus(x), [_ACT_X]),
    ("sparse_sigmoid", lambda x: nn.sparse_sigmoid(x), [_ACT_X]),
    ("mish", lambda x: nn.mish(x), [_ACT_X]),
    ("hard_tanh", lambda x: nn.hard_tanh(x), [_ACT_X]),
    ("hard_sigmoid", lambda x: nn.hard_sigmoid(x), [_ACT_X]),
    ("hard_silu", lambda x: nn.hard_silu(x), [_ACT_X]),
    ("hard_swish", lambda x: nn.hard_swish(x), [_ACT_X]),
    ("log1mexp", lambda x: nn.log1mexp(x), [np.abs(_ACT_X) + 0.05]),
    ("tanh", lambda x: nn.tanh(x), [_ACT_X]),
    ("sp_logsumexp_b", lambda a, b: special.logsumexp(a, axis=1, b=b),
     [_normal(3, 4), _uniform(0.5, 2, 3, 4)]),
    ("sp_logsumexp_sign",
     lambda a, b: special.logsumexp(a, axis=0, b=b, return_sign=True),
     [_normal(3, 4), _away(3, 4)]),
    ("sp_logsumexp_where", lambda a: special.logsumexp(a, axis=1, where=_MASK), [_ACT_X]),
]


@pytest.mark.parametrize("name,f,args", NN_CASES, ids=[c[0] for c in NN_CASES])
def test_nn_check_grads(name, f, args):
  _check(f, args)


# ---------------------------------------------------------------------------
# stagecraft.numpy: elementwise functions

_X = _normal(2, 3)
_POS = _uniform(0.3, 2.0, 2, 3)
_UNIT = _uniform(-0.8, 0.8, 2, 3)

UNARY_CASES = [
    ("sin", jnp.sin, _X), ("cos", jnp.cos, _X), ("tan", jnp.tan, _UNIT),
    ("tanh", jnp.tanh, _X), ("sinh", jnp.sinh, _X), ("cosh", jnp.cosh, _X),
    ("arcsin", jnp.arcsin, _UNIT), ("arccos", jnp.arccos, _UNIT),
    ("arctan", jnp.arctan, _X), ("arcsinh", jnp.arcsinh, _X),
    ("arccosh", jnp.arccosh, _POS + 1.2), ("arctanh", jnp.arctanh, _UNIT),
    ("exp", jnp.exp, _X), ("exp2", jnp.exp2, _X), ("expm1", jnp.expm1, _X),
    ("log", jnp.log, _POS), ("log2", jnp.log2, _POS), ("log10", jnp.log10, _POS),
    ("log1p", jnp.log1p, _POS - 0.2), ("sqrt", jnp.sqrt, _POS), ("cbrt", jnp.cbrt, _away(2, 3)),
    ("square", jnp.square, _X), ("reciprocal", jnp.reciprocal, _away(2, 3)),
    ("negative", jnp.negative, _X), ("positive", jnp.positive, _X),
    ("abs", jnp.abs, _away(2, 3)), ("fabs", jnp.fabs, _away(2, 3)),
    ("sinc", jnp.sinc, _X), ("sinc_at_0", jnp.sinc, np.array([0.0, 0.0, 1.5])),
    ("deg2rad", jnp.deg2rad, _X), ("rad2deg", jnp.rad2deg, _X),
    ("i0", jnp.i0, _away(2, 3)), ("power_int", lambda x: jnp.power(x, 3), _X),
    ("power_neg_int", lambda x: x ** -2, _away(2, 3)),
    ("power_float", lambda x: jnp.power(x, 2.5), _POS),
    ("float_power", lambda x: jnp.float_power(x, 1.5), _POS),
    ("frexp_mantissa", lambda x: jnp.frexp(x)[0], _away(2, 3) * 7.3),
    ("ldexp", lambda x: jnp.ldexp(x, np.array([1, -2, 3])), _X),
    ("nan_to_num", jnp.nan_to_num, _X), ("real", jnp.real, _X),
    ("conjugate", jnp.conjugate, _X),
    ("modf_frac", lambda x: jnp.modf(x)[0], _away(2, 3) + 0.5),
]


@pytest.mark.parametrize("name,f,x", UNARY_CASES, ids=[c[0] for c in UNARY_CASES])
def test_numpy_unary_check_grads(name, f, x):
  _check(f, [x])


# Complex functions, as functions of the real and imaginary parts of their inputs.
COMPLEX_CASES = [
    ("exp", jnp.exp), ("log", jnp.log), ("sin", jnp.sin), ("tanh", jnp.tanh),
    ("sqrt", jnp.sqrt), ("square", jnp.square), ("reciprocal", jnp.reciprocal),
    ("conjugate", jnp.conjugate), ("abs", jnp.abs), ("angle", jnp.angle),
    ("real_imag", lambda z: jnp.real(z) * jnp.imag(z)), ("mul_conj", lambda z: z * jnp.conj(z) + z * z),
    ("logaddexp", lambda z: jnp.logaddexp(z, 0.5 + 0.25j)), ("matmul", lambda z: z @ z.T),
    ("sum_prod", lambda z: jnp.sum(z, 1) * jnp.prod(z, 0)[:2]),
]


@pytest.mark.parametrize("name,f", COMPLEX_CASES, ids=[c[0] for c in COMPLEX_CASES])
def test_numpy_complex_check_grads(name, f):
  _check(lambda re, im: _split(f(re + 1j * im)), [_away(2, 3), _away(2, 3)])
  # And directly on complex inputs (check_grads perturbs them in complex directions).
  _check(f, [_away(2, 3) + 1j * _away(2, 3)])


ZERO_DERIVATIVE = ["floor", "ceil", "trunc", "round", "rint", "sign"]


@pytest.mark.parametrize("name", ZERO_DERIVATIVE)
def test_numpy_piecewise_constant_has_zero_derivative(name):
  # Values 0.3 away from the integers, where these functions jump.
  x = np.array([-2.7, -1.2, 0.4, 1.3, 3.6])
  f = getattr(jnp, name)
  _check(f, [x])
  with sc.enable_x64():
    np.testing.assert_array_equal(sc.grad(lambda x: jnp.sum(f(x) * x))(x), f(x))


_A, _B = _normal(3, 1), _normal(4)
_SCALAR = np.array(0.7)

BINARY_CASES = [
    ("add", jnp.add, [_A, _B]), ("subtract", jnp.subtract, [_A, _B]),
    ("multiply", jnp.multiply, [_A, _B]), ("divide", jnp.divide, [_A, _away(4)]),
    ("true_divide", jnp.true_divide, [_B, _away(3, 1)]),
    ("add_rank0", jnp.add, [_SCALAR, _B]), ("multiply_rank0", jnp.multiply, [_B, _SCALAR]),
    ("divide_rank0", jnp.divide, [_SCALAR, _away(2, 3)]),
    ("subtract_rank0", jnp.subtract, [_SCALAR, _X]),
    ("power_rank0", jnp.power, [_POS, _SCALAR]),
    ("operators", lambda x, y: (x * y - y / 2.0 + 1.0) ** 2 / (1.0 + y * y), [_A, _B]),
    ("python_scalars", lambda x: 2.0 * x + 1.0 - x / 3.0 + x ** 2, [_X]),
    ("power", jnp.power, [_POS, _normal(3)]), ("float_power", jnp.float_power, [_POS, _X]),
    ("maximum", jnp.maximum, [_A, _B + 0.05]), ("minimum", jnp.minimum, [_A, _B + 0.05]),
    ("fmax", jnp.fmax, [_A, _B + 0.05]), ("fmin", jnp.fmin, [_A, _B + 0.05]),
    ("arctan2", jnp.arctan2, [_A, _away(4)]), ("hypot", jnp.hypot, [_A, _B]),
    ("logaddexp", jnp.logaddexp, [_A, _B]), ("logaddexp2", jnp.logaddexp2, [_A, _B]),
    ("copysign", jnp.copysign, [_away(3, 1), _away(4)]),
    ("remainder", jnp.remainder, [_uniform(0.1, 0.9, 3) + 2.0, np.array([0.7, 1.3, 2.9])]),
    ("fmod", jnp.fmod, [_uniform(0.1, 0.9, 3) + 2.0, np.array([0.7, 1.3, 2.9])]),
    ("heaviside", jnp.heaviside, [_away(3, 1), _B]),
    ("where", lambda x, y: jnp.where(_A > 0, x, y), [_A * 2, _B]),
    ("where_scalar", lambda x: jnp.where(_X > 0, x, 0.5), [_X]),
    ("clip", lambda x: jnp.clip(x, -0.5, 0.6), [_away(3, 4, gap=0.05) * 0.9]),
    ("clip_arrays", jnp.clip,
     [np.array([-2.0, 0.3, 3.0]), np.array([-1.0, -1.0, -1.0]), np.array([1.5, 2.0, 2.5])]),
    ("sinc_broadcast", lambda x, y: jnp.sinc(x * y), [_A, _B]),
]


@pytest.mark.parametrize("name,f,args", BINARY_CASES, ids=[c[0] for c in BINARY_CASES])
def test_numpy_binary_check_grads(name, f, args):
  _check(f, args)


# ---------------------------------------------------------------------------
# stagecraft.numpy: reductions, cumulative ops, statistics

_M = _normal(3, 4)

REDUCTION_CASES = [
    ("sum", lambda x: jnp.sum(x), [_M]), ("sum_axis", lambda x: jnp.sum(x, axis=0), [_M]),
    ("sum_keepdims", lambda x: jnp.sum(x, axis=1, keepdims=True), [_M]),
    ("sum_initial", lambda x: jnp.sum(x, axis=1, initial=2.0), [_M]),
    ("mean", lambda x: jnp.mean(x, axis=(0, 1)), [_M]),
    ("mean_axis", lambda x: jnp.mean(x, axis=-1), [_M]),
    ("prod", lambda x: jnp.prod(x, axis=1), [_away(3, 4)]),
    ("prod_with_zero", lambda x: jnp.prod(x, axis=0), [np.array([[0.0, 1.5], [2.0, 0.5]])]),
    ("max", lambda x: jnp.max(x, axis=0), [_M]), ("min", lambda x: jnp.min(x, axis=1), [_M]),
    ("max_all", lambda x: jnp.max(x), [_M]), ("amin_keepdims", lambda x: jnp.amin(x, 0, keepdims=True), [_M]),
    ("max_initial", lambda x: jnp.max(x, axis=1, initial=-0.1), [_M]),
    ("var", lambda x: jnp.var(x, axis=0), [_M]), ("var_ddof", lambda x: jnp.var(x, ddof=1), [_M]),
    ("std", lambda x: jnp.std(x, axis=1), [_M]), ("ptp", lambda x: jnp.ptp(x, axis=1), [_M]),
    ("average", lambda x, w: jnp.average(x, axis=1, weights=w), [_M, _uniform(0.5, 2, 4)]),
    ("nansum", lambda x: jnp.nansum(x, axis=0), [_M]),
    ("nanmean", lambda x: jnp.nanmean(x, axis=1), [_M]),
    ("nanvar", lambda x: jnp.nanvar(x), [_M]), ("nanmax", lambda x: jnp.nanmax(x, 0), [_M]),
    ("cumsum", lambda x: jnp.cumsum(x, axis=1), [_M]),
    ("cumsum_flat", lambda x: jnp.cumsum(x), [_M]),
    ("cumprod", lambda x: jnp.cumprod(x, axis=0), [_away(3, 4)]),
    ("cumulative_sum", lambda x: jnp.cumulative_sum(x, axis=1, include_initial=True), [_M]),
    ("cumulative_prod", lambda x: jnp.cumulative_prod(x, axis=0), [_away(3, 4)]),
    ("nancumsum", lambda x: jnp.nancumsum(x, axis=0), [_M]),
    ("median", lambda x: jnp.median(x, axis=1), [_M]),
    ("quantile", lambda x: jnp.quantile(x, np.array([0.3, 0.8]), axis=0), [_M]),
    ("percentile", lambda x: jnp.percentile(x, 40.0), [_M]),
    ("cov", lambda x: jnp.cov(x), [_M]), ("corrcoef", lambda x: jnp.corrcoef(x), [_M]),
    ("trapezoid", lambda y, x: jnp.trapezoid(y, x), [_normal(5), np.cumsum(_uniform(0.5, 1, 5))]),
    ("diff", lambda x: jnp.diff(x, n=2, axis=1), [_M]),
    ("ediff1d", lambda x: jnp.ediff1d(x, to_begin=np.array([1.0])), [_normal(5)]),
    ("gradient", lambda x: jnp.gradient(x), [_normal(6)]),
]


@pytest.mark.parametrize("name,f,args", REDUCTION_CASES, ids=[c[0] for c in REDUCTION_CASES])
def test_numpy_reduction_check_grads(name, f, args):
  _check(f, args)


# ---------------------------------------------------------------------------
# stagecraft.numpy: contractions and polynomials

CONTRACTION_CASES = [
    ("matmul", jnp.matmul, [_normal(3, 4), _normal(4, 2)]),
    ("matmul_batched", jnp.matmul, [_normal(2, 3, 4), _normal(4, 2)]),
    ("matmul_vec", jnp.matmul, [_normal(3, 4), _normal(4)]),
    ("matmul_operator", lambda a, b: a @ b, [_normal(4), _normal(4, 3)]),
    ("dot", jnp.dot, [_normal(3, 4), _normal(4, 2)]), ("dot_1d", jnp.dot, [_normal(4), _normal(4)]),
    ("dot_scalar", jnp.dot, [_SCALAR, _normal(4)]),
    ("vdot", jnp.vdot, [_normal(2, 3), _normal(6)]), ("inner", jnp.inner, [_normal(2, 3), _normal(4, 3)]),
    ("outer", jnp.outer, [_normal(3), _normal(4)]), ("kron", jnp.kron, [_normal(2, 2), _normal(2, 3)]),
    ("cross", jnp.cross, [_normal(4, 3), _normal(4, 3)]),
    ("einsum_matmul", lambda a, b: jnp.einsum("ij,jk->ik", a, b), [_normal(3, 4), _normal(4, 2)]),
    ("einsum_batch", lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
     [_normal(2, 3, 4), _normal(2, 4, 2)]),
    ("einsum_reduce", lambda a, b: jnp.einsum("ij,ij->i", a, b), [_normal(3, 4), _normal(3, 4)]),
    ("einsum_three", lambda a, b, c: jnp.einsum("ijk,k,jl->il", a, b, c),
     [_normal(2, 3, 4), _normal(4), _normal(3, 2)]),
    ("tensordot", lambda a, b: jnp.tensordot(a, b, axes=1), [_normal(2, 3), _normal(3, 4)]),
    ("tensordot_axes", lambda a, b: jnp.tensordot(a, b, axes=([0, 2], [1, 0])),
     [_normal(2, 3, 4), _normal(4, 2, 5)]),
    ("convolve", jnp.convolve, [_normal(6), _normal(3)]),
    ("convolve_same", lambda a, b: jnp.convolve(a, b, mode="same"), [_normal(6), _normal(3)]),
    ("correlate", lambda a, b: jnp.correlate(a, b, mode="full"), [_normal(5), _normal(3)]),
    ("polyval", jnp.polyval, [_normal(4), _normal(5)]),
    ("polymul", jnp.polymul, [_normal(3), _normal(2)]),
    ("polyder", lambda p: jnp.polyder(p, 2), [_normal(5)]),
    ("polyint", lambda p: jnp.polyint(p), [_normal(4)]),
    ("interp", lambda x, fp: jnp.interp(x, np.array([0.0, 1.0, 2.5, 4.0]), fp),
     [np.array([0.3, 1.7, 3.1, 3.9]), _normal(4)]),
]


@pytest.mark.parametrize("name,f,args", CONTRACTION_CASES, ids=[c[0] for c in CONTRACTION_CASES])
def test_numpy_contraction_check_grads(name, f, args):
  _check(f, args)


# ---------------------------------------------------------------------------
# stagecraft.numpy: shape manipulation, indexing, sorting

_T = _normal(2, 3, 4)
_SQ = _normal(4, 4)

SHAPE_CASES = [
    ("reshape", lambda x: jnp.reshape(x, (4, 6)), [_T]), ("ravel", jnp.ravel, [_T]),
    ("transpose", lambda x: jnp.transpose(x, (2, 0, 1)), [_T]), ("T", lambda x: x.T, [_M]),
    ("moveaxis", lambda x: jnp.moveaxis(x, 0, -1), [_T]),
    ("swapaxes", lambda x: jnp.swapaxes(x, 0, 2), [_T]),
    ("squeeze_expand", lambda x: jnp.expand_dims(jnp.squeeze(x, 1), 0), [_normal(3, 1, 2)]),
    ("broadcast_to", lambda x: jnp.broadcast_to(x, (2, 3, 4)), [_normal(3, 1)]),
    ("concatenate", lambda x, y: jnp.concatenate([x, y, x], axis=1), [_M, _normal(3, 2)]),
    ("stack", lambda x, y: jnp.stack([x, y], axis=1), [_M, _M + 1]),
    ("hstack_vstack", lambda x, y: jnp.vstack([jnp.hstack([x, y]), jnp.hstack([y, x])]),
     [_normal(2, 2), _normal(2, 2)]),
    ("split", lambda x: jnp.split(x, [1, 3], axis=1), [_M]),
    ("array_split", lambda x: jnp.array_split(x, 3, axis=0), [_normal(5, 2)]),
    ("append", lambda x, y: jnp.append(x, y, axis=0), [_M, _normal(1, 4)]),
    ("take", lambda x: jnp.take(x, np.array([2, 0, 2, 3]), axis=1), [_M]),
    ("take_along_axis", lambda x: jnp.take_along_axis(x, np.array([[1, 0], [3, 3], [2, 1]]), 1),
     [_M]),
    ("getitem_basic", lambda x: x[1:, ::-2, None, 2], [_T]),
    ("getitem_advanced", lambda x: x[np.array([0, 1, 1]), :, np.array([3, 0, 3])], [_T]),
    ("getitem_mask", lambda x: x[np.array([True, False, True])], [_M]),
    ("at_set", lambda x, y: jnp.asarray(x).at[np.array([0, 2]), 1].set(y), [_M, _normal(2)]),
    ("at_add_repeated", lambda x, y: jnp.asarray(x).at[np.array([1, 1, 0])].add(y),
     [_normal(3), _normal(3)]),
    ("at_mul", lambda x, y: jnp.asarray(x).at[1:3].multiply(y), [_normal(4), _normal(2)]),
    ("at_max", lambda x, y: jnp.asarray(x).at[np.array([0, 2])].max(y),
     [np.array([0.5, -1.0, 2.0]), np.array([1.0, 1.5])]),
    ("at_get", lambda x: jnp.asarray(x).at[np.array([2, 0])].get(), [_normal(3)]),
    ("pad_constant", lambda x: jnp.pad(x, ((1, 0), (2, 1))), [_M]),
    ("pad_value", lambda x: jnp.pad(x, 1, constant_values=2.0), [_M]),
    ("pad_reflect", lambda x: jnp.pad(x, (2, 1), mode="reflect"), [_normal(5)]),
    ("pad_edge", lambda x: jnp.pad(x, ((0, 2), (1, 1)), mode="edge"), [_M]),
    ("pad_wrap", lambda x: jnp.pad(x, 3, mode="wrap"), [_normal(4)]),
    ("roll", lambda x: jnp.roll(x, 2, axis=1), [_M]), ("roll_flat", lambda x: jnp.roll(x, -5), [_M]),
    ("flip", lambda x: jnp.flip(x, (0, 2)), [_T]), ("rot90", lambda x: jnp.rot90(x), [_M]),
    ("tile", lambda x: jnp.tile(x, (2, 1, 2)), [_M]),
    ("repeat", lambda x: jnp.repeat(x, 2, axis=0), [_M]),
    ("repeat_array", lambda x: jnp.repeat(x, np.array([1, 0, 3]), axis=0), [_M]),
    ("tril", lambda x: jnp.tril(x, -1), [_SQ]), ("triu", lambda x: jnp.triu(x, 1), [_M]),
    ("diag_extract", lambda x: jnp.diag(x, 1), [_SQ]), ("diag_build", jnp.diag, [_normal(3)]),
    ("diagonal", lambda x: jnp.diagonal(x, -1), [_SQ]),
    ("trace", lambda x: jnp.trace(x, 1), [_SQ]), ("fill_diagonal", lambda x: jnp.fill_diagonal(x, 0.0, inplace=False), [_SQ]),
    ("delete", lambda x: jnp.delete(x, 1, axis=1), [_M]),
    ("insert", lambda x, v: jnp.insert(x, 1, v, axis=0), [_M, _normal(4)]),
    ("select", lambda x, y: jnp.select([_M > 0.5, _M < -0.5], [x, y], 1.0), [_M, _M ** 2]),
    ("choose", lambda a, b: jnp.choose(np.array([0, 1, 1, 0]), [a, b]), [_normal(4), _normal(4)]),
    ("block", lambda a, b: jnp.block([[a, b], [b, a]]), [_normal(2, 2), _normal(2, 2)]),
    ("meshgrid", lambda x, y: jnp.meshgrid(x, y), [_normal(3), _normal(2)]),
    ("atleast_2d", jnp.atleast_2d, [_normal(3)]),
    ("sort", lambda x: jnp.sort(x, axis=1), [_M]), ("sort_flat", lambda x: jnp.sort(x, axis=None), [_M]),
    ("sort_desc", lambda x: jnp.sort(x, descending=True), [_normal(5)]),
]


@pytest.mark.parametrize("name,f,args", SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_numpy_shape_check_grads(name, f, args):
  _check(f, args)


# ---------------------------------------------------------------------------
# stagecraft.numpy.fft and stagecraft.numpy.linalg

def _cplx(f):
  """`f` of a complex input, as a function of its real and imaginary parts."""
  return lambda re, im: f(re + 1j * im)


FFT_CASES = [
    ("fft", lambda x: _split(jnp.fft.fft(x)), [_normal(2, 5)]),
    ("fft_complex", _cplx(lambda z: _split(jnp.fft.fft(z))), [_normal(2, 4), _normal(2, 4)]),
    ("fft_n", lambda x: _split(jnp.fft.fft(x, n=6, axis=0)), [_normal(4, 3)]),
    ("ifft", _cplx(lambda z: _split(jnp.fft.ifft(z))), [_normal(5), _normal(5)]),
    ("fft_ortho", _cplx(lambda z: _split(jnp.fft.fft(z, norm="ortho"))),
     [_normal(4), _normal(4)]),
    ("rfft", lambda x: _split(jnp.fft.rfft(x)), [_normal(3, 6)]),
    ("rfft_odd", lambda x: _split(jnp.fft.rfft(x)), [_normal(5)]),
    ("irfft", _cplx(lambda z: jnp.fft.irfft(z, n=6)), [_normal(4), _normal(4)]),
    ("irfft_odd", _cplx(lambda z: jnp.fft.irfft(z, n=5)), [_normal(3), _normal(3)]),
    ("fft2", lambda x: _split(jnp.fft.fft2(x)), [_normal(3, 4)]),
    ("ifftn", _cplx(lambda z: _split(jnp.fft.ifftn(z))), [_normal(2, 3), _normal(2, 3)]),
    ("rfftn", lambda x: _split(jnp.fft.rfftn(x)), [_normal(4, 4)]),
    ("irfftn", _cplx(lambda z: jnp.fft.irfftn(z, s=(3, 4))), [_normal(3, 3), _normal(3, 3)]),
    ("hfft", _cplx(lambda z: jnp.fft.hfft(z, n=6)), [_normal(4), _normal(4)]),
    ("ihfft", lambda x: _split(jnp.fft.ihfft(x)), [_normal(6)]),
    ("fftshift", jnp.fft.fftshift, [_normal(5)]),
    ("fft_direct", jnp.fft.fft, [_normal(2, 4) + 1j * _normal(2, 4)]),
    ("ifft2_direct", jnp.fft.ifft2, [_normal(3, 4) + 1j * _normal(3, 4)]),
    ("irfft_direct", lambda z: jnp.fft.irfft(z, n=6), [_normal(4) + 1j * _normal(4)]),
    ("rfft_direct", jnp.fft.rfft, [_normal(6)]),
    ("fft_power", lambda x: jnp.abs(jnp.fft.fft(x)) ** 2, [_normal(6)]),
]


@pytest.mark.parametrize("name,f,args", FFT_CASES, ids=[c[0] for c in FFT_CASES])
def test_numpy_fft_check_grads(name, f, args):
  _check(f, args)


def _sym(a):
  return (a + jnp.swapaxes(a, -1, -2)) / 2


_LA = _well_conditioned(3)

LINALG_CASES = [
    ("solve", jnp.linalg.solve, [_LA, _normal(3, 2)]),
    ("solve_vec", jnp.linalg.solve, [_LA, _normal(3)]),
    ("inv", jnp.linalg.inv, [_LA]), ("inv_batched", jnp.linalg.inv, [np.stack([_LA, _LA.T])]),
    ("det", jnp.linalg.det, [_LA]), ("slogdet", lambda a: jnp.linalg.slogdet(a)[1], [_LA]),
    ("matrix_power", lambda a: jnp.linalg.matrix_power(a, 3), [_normal(3, 3)]),
    ("matrix_power_neg", lambda a: jnp.linalg.matrix_power(a, -2), [_LA]),
    ("norm_vec2", jnp.linalg.norm, [_normal(5)]),
    ("norm_vec1", lambda x: jnp.linalg.norm(x, 1), [_away(5)]),
    ("norm_vec_inf", lambda x: jnp.linalg.norm(x, np.inf), [_normal(5)]),
    ("norm_vec3", lambda x: jnp.linalg.norm(x, 3), [_away(5)]),
    ("norm_fro", jnp.linalg.norm, [_M]), ("norm_axis", lambda x: jnp.linalg.norm(x, axis=1), [_M]),
    ("norm_mat1", lambda x: jnp.linalg.norm(x, 1), [_M]),
    ("norm_mat_inf", lambda x: jnp.linalg.norm(x, np.inf), [_M]),
    ("norm_nuc", lambda x: jnp.linalg.norm(x, "nuc"), [_M]),
    ("norm_mat2", lambda x: jnp.linalg.norm(x, 2), [_M]),
    ("vector_norm", lambda x: jnp.linalg.vector_norm(x, axis=0), [_M]),
    ("matrix_norm", jnp.linalg.matrix_norm, [_M]),
    ("cholesky", lambda a: jnp.linalg.cholesky(a @ a.T + 3 * jnp.eye(3)), [_normal(3, 3)]),
    ("eigvalsh", lambda a: jnp.linalg.eigvalsh(_sym(a)), [_SQ]),
    ("eigh", lambda a: (lambda w, v: (w, v ** 2))(*jnp.linalg.eigh(_sym(a))), [_SQ]),
    ("qr", jnp.linalg.qr, [_LA]), ("qr_tall_r", lambda a: jnp.linalg.qr(a)[1], [_normal(4, 3)]),
    ("svdvals", jnp.linalg.svdvals, [_M]),
    ("svd", lambda a: (lambda u, s, vh: (u ** 2, s, vh ** 2))(*jnp.linalg.svd(a)), [_LA]),
    ("pinv", jnp.linalg.pinv, [_M]), ("lstsq", lambda a, b: jnp.linalg.lstsq(a, b)[0],
                                     [_normal(5, 3), _normal(5)]),
    ("cond", jnp.linalg.cond, [_LA]),
    ("multi_dot", lambda a, b, c: jnp.linalg.multi_dot([a, b, c]),
     [_normal(2, 3), _normal(3, 4), _normal(4, 2)]),
    ("vecdot", jnp.linalg.vecdot, [_M, _M + 1]),
    ("linalg_trace", jnp.linalg.trace, [_SQ]),
]


@pytest.mark.parametrize("name,f,args", LINALG_CASES, ids=[c[0] for c in LINALG_CASES])
def test_numpy_linalg_check_grads(name, f, args):
  _check(f, args, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------
# JAX's conventions at the special points, compared with JAX on the same inputs


def _jvp_and_vjp(mod, name_fn, args, argnums):
  """(JVP along all-ones tangents of `argnums`, VJP of an all-ones cotangent) of
  `name_fn(mod)` at `args` (float32), as NumPy arrays."""
  f = name_fn(mod)

  def g(*diff):
    full = list(args)
    for i, d in zip(argnums, diff):
      full[i] = d
    return f(*full)

  diff = tuple(args[i] for i in argnums)
  _, t_out = mod.jvp(g, diff, tuple(np.ones_like(d) for d in diff))
  out, vjp_fn = mod.vjp(g, *diff)
  cts = vjp_fn(np.ones(np.shape(out), np.asarray(out).dtype))
  return [np.asarray(t_out)] + [np.asarray(c) for c in cts]


_F32 = np.float32
_INF = np.inf
_KINKS = np.array([-6., -3., -1., -0.5, 0., 0.5, 1., 3., 6., 1e4, -1e4], _F32)

SPECIAL_CASES = [
    # (id, function of a namespace, args, argnums)
    *[(f"nn.{n}", (lambda n: lambda m: getattr(m.nn, n))(n), [_KINKS], (0,)) for n in
      ["relu", "relu6", "gelu", "silu", "sigmoid", "softplus", "log_sigmoid", "elu",
       "leaky_relu", "celu", "selu", "soft_sign", "squareplus", "sparse_plus",
       "sparse_sigmoid", "mish", "hard_tanh", "hard_sigmoid", "hard_silu", "tanh"]],
    ("nn.gelu_erf", lambda m: lambda x: m.nn.gelu(x, approximate=False), [_KINKS], (0,)),
    ("nn.log1mexp", lambda m: m.nn.log1mexp,
     [np.array([1e-4, 0.3, np.log(2), 1., 20., 100.], _F32)], (0,)),
    ("nn.softmax_large", lambda m: lambda x: m.nn.softmax(x)[..., 0],
     [np.array([[1e4, 1e4 - 1, -1e4], [-1e30, 0., 1e30], [3., -_INF, 1.]], _F32)], (0,)),
    ("nn.log_softmax_large", lambda m: lambda x: m.nn.log_softmax(x)[..., 1],
     [np.array([[1e4, 1e4 - 1, -1e4], [-1e30, 0., 1e30], [3., 2., -_INF]], _F32)], (0,)),
    ("nn.logsumexp_large", lambda m: lambda x: m.nn.logsumexp(x, axis=1),
     [np.array([[1e4, 1e4 - 1, -1e4], [-1e30, 0., 1e30], [3., -_INF, 1.], [5., 5., 5.],
                [-_INF, -_INF, -_INF]], _F32)], (0,)),
    ("sp.logsumexp_b", lambda m: lambda a, b: m.sp.logsumexp(a, axis=1, b=b),
     [np.array([[1e4, 1e4, -1.], [0., _INF, 2.]], _F32),
      np.array([[1., 2., 0.5], [1., 0., 3.]], _F32)], (0, 1)),
    ("np.logaddexp", lambda m: m.np.logaddexp,
     [np.array([-_INF, _INF, _INF, -_INF, 0., 1e4, 3.], _F32),
      np.array([1., 1., _INF, -_INF, 0., -1e4, 3.], _F32)], (0, 1)),
    ("np.logaddexp2", lambda m: m.np.logaddexp2,
     [np.array([-_INF, _INF, _INF, 0., 1e4, 3.], _F32),
      np.array([1., 1., -_INF, 0., -1e4, 3.], _F32)], (0, 1)),
    ("np.sinc", lambda m: m.np.sinc, [np.array([0., 0.5, 1., -2., 0.1], _F32)], (0,)),
    ("np.hypot", lambda m: m.np.hypot,
     [np.array([0., 0., 3., _INF, -2., 1e30], _F32), np.array([0., 2., 0., 1., -2., 1e30], _F32)],
     (0, 1)),
    ("np.arctan2", lambda m: m.np.arctan2,
     [np.array([0., 1., -1., 0., 2.], _F32), np.array([1., 0., 0., -1., 2.], _F32)], (0, 1)),
    ("np.abs", lambda m: m.np.abs, [np.array([0., -0., 1., -2.], _F32)], (0,)),
    ("np.sqrt", lambda m: m.np.sqrt, [np.array([0., 1e-30, 4.], _F32)], (0,)),
    ("np.cbrt", lambda m: m.np.cbrt, [np.array([0., -8., 8.], _F32)], (0,)),
    ("np.power", lambda m: m.np.power,
     [np.array([0., 0., 0., 2., -2.], _F32), np.array([2., 0., 0.5, 0., 3.], _F32)], (0, 1)),
    ("np.square", lambda m: m.np.square, [np.array([0., -3.], _F32)], (0,)),
    ("np.i0", lambda m: m.np.i0, [np.array([0., -1., 2.], _F32)], (0,)),
    ("np.frexp", lambda m: lambda x: m.np.frexp(x)[0],
     [np.array([0., 1., 3., -5., 1e-3], _F32)], (0,)),
    ("np.maximum_tie", lambda m: m.np.maximum,
     [np.array([1., 2., -1.], _F32), np.array([1., 0., 3.], _F32)], (0, 1)),
    ("np.minimum_tie", lambda m: m.np.minimum,
     [np.array([1., 2., -1.], _F32), np.array([1., 0., 3.], _F32)], (0, 1)),
    ("np.clip_bounds", lambda m: lambda x: m.np.clip(x, -1., 1.),
     [np.array([-1., 1., 0., 2.], _F32)], (0,)),
    ("np.max_ties", lambda m: lambda x: m.np.max(x, axis=1),
     [np.array([[1., 3., 3.], [2., 2., 2.]], _F32)], (0,)),
    ("np.min_ties", lambda m: lambda x: m.np.min(x), [np.array([1., 3., 1.], _F32)], (0,)),
    ("np.sort_ties", lambda m: lambda x: m.np.sort(x) * np.arange(4, dtype=_F32),
     [np.array([2., 1., 2., 1.], _F32)], (0,)),
    ("np.prod_zeros", lambda m: lambda x: m.np.prod(x, axis=1),
     [np.array([[0., 2., 3.], [0., 0., 5.], [1., 2., 3.]], _F32)], (0,)),
    ("np.cumprod_zeros", lambda m: lambda x: m.np.cumprod(x),
     [np.array([2., 0., 3., 0.5], _F32)], (0,)),
    ("np.std_constant", lambda m: lambda x: m.np.std(x), [np.array([2., 2., 2.], _F32)], (0,)),
    ("np.norm_zero", lambda m: m.np.linalg.norm, [np.array([0., 0., 0.], _F32)], (0,)),
    ("np.sign", lambda m: m.np.sign, [np.array([0., -1., 2.], _F32)], (0,)),
    ("np.round", lambda m: m.np.round, [np.array([0.5, 1.5, 2.], _F32)], (0,)),
    ("np.where_nan_branch", lambda m: lambda x: m.np.where(x > 0, m.np.log(x), 0.),
     [np.array([1., 2., 3.], _F32)], (0,)),
    ("np.fmax_tie", lambda m: m.np.fmax,
     [np.array([1., 2.], _F32), np.array([1., 0.], _F32)], (0, 1)),
]


@pytest.mark.parametrize("name,fn,args,argnums", SPECIAL_CASES,
                         ids=[c[0] for c in SPECIAL_CASES])
def test_special_points_match_jax(name, fn, args, argnums):
  ours = _jvp_and_vjp(SC, fn, args, argnums)
  theirs = _jvp_and_vjp(JX, fn, args, argnums)   # softmax: both without the custom rule
  # Equal up to float32 rounding (XLA's transcendental functions, summation order).
  assert_trees_allclose(ours, theirs, rtol=1e-5, atol=1e-7)
  for a, b in zip(ours, theirs):
    np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))


def test_relu_derivative_at_zero_is_zero():
  assert float(sc.grad(nn.relu)(0.0)) == 0.0
  assert float(sc.grad(nn.relu)(2.0)) == 1.0
  np.testing.assert_array_equal(sc.grad(lambda x: jnp.sum(nn.relu6(x)))(
      np.array([0., 6., 3.], _F32)), [0., 0., 1.])
  # The max of two equal values (what relu would give without its custom rule) splits.
  assert float(sc.grad(lambda x: jnp.maximum(x, 0.))(0.0)) == 0.5


def test_logsumexp_softmax_large_inputs_finite():
  x = np.array([1e4, 1e4 - 2.0, -1e4, 3e4], _F32)
  for f_sc, f_jax in [(nn.logsumexp, jax.nn.logsumexp),
                      (lambda x: nn.softmax(x)[1], lambda x: jax.nn.softmax(x)[1]),
                      (lambda x: nn.log_softmax(x)[1], lambda x: jax.nn.log_softmax(x)[1]),
                      (lambda x: special.logsumexp(x[:2]), lambda x: jax.scipy.special.logsumexp(x[:2]))]:
    g = np.asarray(sc.grad(f_sc)(x))
    assert np.all(np.isfinite(g)), g
    np.testing.assert_allclose(g, jax.grad(f_jax)(x), rtol=1e-6, atol=1e-30)
  g = np.asarray(sc.grad(lambda x: special.logsumexp(x[:2]))(x))
  np.testing.assert_allclose(g, [1 / (1 + np.exp(-2.0)), 1 / (1 + np.exp(2.0)), 0, 0], rtol=1e-6)
  # Second derivative of logsumexp at large inputs: the softmax Jacobian, diag(p) - p p^T.
  h = np.asarray(sc.hessian(lambda x: nn.logsumexp(x[:2]))(x))[:2, :2]
  p = np.array([1 / (1 + np.exp(-2.0)), 1 / (1 + np.exp(2.0))])
  np.testing.assert_allclose(h, np.diag(p) - np.outer(p, p), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("x", [0.0, 0.25])
def test_sinc_derivatives_match_jax(x):
  f_sc, f_jax = jnp.sinc, jjnp.sinc
  # d^k/dx^k sinc at 0 = pi^k (-1)^(k/2) / (k + 1) for even k, 0 for odd k.
  exact_at_0 = [0.0, -np.pi ** 2 / 3, 0.0]
  for k in range(3):
    f_sc, f_jax = sc.grad(f_sc), jax.grad(f_jax)
    ours, theirs = float(f_sc(np.float32(x))), float(f_jax(np.float32(x)))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    if x == 0.0:
      np.testing.assert_allclose(ours, exact_at_0[k], rtol=1e-5, atol=1e-6)
  # Forward mode too: nested jvp at 0.
  d1 = lambda x: sc.jvp(jnp.sinc, (x,), (np.float32(1),))[1]
  d2 = lambda x: sc.jvp(d1, (x,), (np.float32(1),))[1]
  if x == 0.0:
    np.testing.assert_allclose(d2(np.float32(0)), -np.pi ** 2 / 3, rtol=1e-6)


def test_logaddexp_derivatives_finite_at_infinities():
  with sc.enable_x64():
    g = sc.grad(jnp.logaddexp, (0, 1))
    for a, b, want in [(-np.inf, 1.0, (0.0, 1.0)), (2.0, -np.inf, (1.0, 0.0)),
                       (1e300, 1.0, (1.0, 0.0)), (0.0, 0.0, (0.5, 0.5))]:
      got = [float(v) for v in g(np.float64(a), np.float64(b))]
      np.testing.assert_allclose(got, want, atol=1e-300)
  # softplus = logaddexp(x, 0): as JAX's rule (no symbolic zeros), the constant's zero
  # tangent is materialized and its product added; the program prints as JAX's.
  ours = str(sc.make_jaxpr(lambda x: sc.jvp(nn.softplus, (x,), (x,))[1])(np.float32(1.0)))
  theirs = str(jax.make_jaxpr(lambda x: jax.jvp(jax.nn.softplus, (x,), (x,))[1])(
      np.float32(1.0)))
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"
  assert ours.count("= mul ") == 2


JIT_CASES = [
    ("relu", nn.relu), ("softmax", nn.softmax), ("sinc", jnp.sinc),
    ("logaddexp", lambda x: jnp.logaddexp(x, jnp.flip(x))),
]


@pytest.mark.parametrize("name,f", JIT_CASES, ids=[c[0] for c in JIT_CASES])
def test_jitted_functions_check_grads(name, f):
  # With jit on: the custom rules and the jitted functions' derivatives stay staged.
  with sc.enable_x64():
    check_grads(sc.jit(f), (_ACT_X,), 2, modes=("fwd", "rev"))
