"""stagecraft.nn, stagecraft.nn.initializers and stagecraft.scipy.special against jax.nn and
jax.scipy.special (the oracles): hypothesis-drawn inputs with large magnitudes, infinities
and NaN (softplus, logsumexp, softmax must not overflow), 16- and 32-bit floats, masks,
eager vs staged runs, and the initializers' values for the same keys."""
import os
import sys

import jax
import jax.scipy.special as jss
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import stagecraft as sc
from stagecraft import core, nn, random
from stagecraft.interpreters import partial_eval as pe
from stagecraft.nn import initializers
from stagecraft.scipy.special import logsumexp

sys.path.insert(0, os.path.dirname(__file__))
from _util import staged_call  # noqa: E402

from _cases import bf16, f16, f32, i32  # noqa: E402
SHAPES = [(7,), (2, 5)]


def _close(actual, expected, dtype=None, rtol=None):
  """Same shape and dtype; equal NaN positions; values within a few ulps of the dtype."""
  actual, expected = np.asarray(actual), np.asarray(expected)
  assert actual.shape == expected.shape, (actual.shape, expected.shape)
  assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
  if not np.issubdtype(actual.dtype, np.inexact) and actual.dtype != bf16:
    np.testing.assert_array_equal(actual, expected)
    return
  eps = float(ml_dtypes.finfo(actual.dtype).eps)
  tol = rtol if rtol is not None else max(8 * eps, 1e-6)
  np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                             rtol=tol, atol=tol, equal_nan=True)


@st.composite
def _inputs(draw, specials=True, big=1e4, shapes=SHAPES):
  """`(x, dtype)`: a float32-drawn array cast to f32/bf16/f16, with values up to `big` in
  magnitude (clipped to the dtype's range) and, optionally, inf/-inf/NaN."""
  dtype = draw(st.sampled_from([f32, bf16, f16]))
  shape = draw(st.sampled_from(shapes))
  elems = st.floats(-big, big, allow_nan=False, allow_infinity=False, width=32)
  x = draw(hnp.arrays(np.float32, shape, elements=elems))
  if specials and draw(st.booleans()):
    flat = x.reshape(-1)
    for i, v in zip(draw(st.permutations(range(flat.size)))[:3], [np.inf, -np.inf, np.nan]):
      flat[i] = v
  hi = float(ml_dtypes.finfo(dtype).max)
  return np.clip(x, -hi, hi).astype(dtype), dtype


ACTIVATIONS = ["relu", "relu6", "sigmoid", "softplus", "log_sigmoid", "silu", "swish", "mish",
               "elu", "leaky_relu", "celu", "selu", "gelu", "soft_sign", "squareplus",
               "sparse_plus", "sparse_sigmoid", "hard_tanh", "hard_sigmoid", "hard_silu",
               "hard_swish", "identity", "log1mexp", "tanh"]


@settings(max_examples=8)
@given(_inputs(shapes=[(2, 5)]))   # elementwise: one shape keeps the compiles down
def test_activations_match_jax(case):
  x, dtype = case
  for name in ACTIVATIONS:
    # mish and gelu(approximate) of huge inputs: tanh/x**3 round differently in 16 bits
    rtol = 0.02 if dtype != f32 and name in ("mish", "gelu", "selu", "elu", "celu",
                                             "log1mexp") else None
    _close(getattr(nn, name)(x), getattr(jax.nn, name)(x), dtype, rtol)
  _close(nn.gelu(x, approximate=False), jax.nn.gelu(x, approximate=False), dtype,
         0.02 if dtype != f32 else None)
  _close(nn.elu(x, 0.5), jax.nn.elu(x, 0.5), dtype, 0.02 if dtype != f32 else None)
  _close(nn.leaky_relu(x, 0.2), jax.nn.leaky_relu(x, 0.2), dtype)
  _close(nn.celu(x, 2.0), jax.nn.celu(x, 2.0), dtype, 0.02 if dtype != f32 else None)


def test_overflow_safety_at_extremes():
  x = np.array([-1e38, -1000., -88., -20., 0., 20., 88., 1000., 1e38, np.inf, -np.inf],
               np.float32)
  for name in ["softplus", "log_sigmoid", "sigmoid", "silu", "gelu", "elu", "selu", "celu"]:
    out = np.asarray(getattr(nn, name)(x))
    _close(out, jax.nn.__dict__[name](x), f32)
  sp = np.asarray(nn.softplus(x))
  assert np.all(np.isfinite(sp[:-2])) and sp[-2] == np.inf and sp[-1] == 0 and sp[0] == 0
  assert np.asarray(nn.softplus(np.float32(1000.))) == 1000.
  big = np.array([[1e30, 1e30], [-1e30, 5.], [np.inf, 1.], [-np.inf, -np.inf]], np.float32)
  _close(logsumexp(big, axis=1), jss.logsumexp(big, axis=1))
  _close(nn.softmax(big[:2], axis=1), jax.nn.softmax(big[:2], axis=1))
  _close(nn.log_softmax(big[:2], axis=1), jax.nn.log_softmax(big[:2], axis=1))
  np.testing.assert_allclose(np.asarray(logsumexp(np.array([1000., 1000.], np.float32))),
                             1000 + np.log(2), rtol=1e-6)


def test_integer_inputs_promote_as_jax():
  x = np.arange(-3, 4, dtype=np.int32)
  for name in ["relu", "relu6", "softplus", "gelu", "elu", "leaky_relu", "hard_tanh", "mish",
               "identity", "hard_silu"]:
    _close(getattr(nn, name)(x), getattr(jax.nn, name)(x))
  for name in ["sigmoid", "silu"]:   # lax.logistic rejects integers, in JAX too
    msg = "logistic does not accept dtype int32. Accepted dtypes are subtypes of floating"
    with pytest.raises(TypeError, match=msg):
      getattr(jax.nn, name)(x)
    with pytest.raises(TypeError, match=msg):
      getattr(nn, name)(x)
  _close(nn.softmax(x), jax.nn.softmax(x))
  _close(logsumexp(x), jss.logsumexp(x))
  _close(nn.relu(3.0), jax.nn.relu(3.0))


@st.composite
def _reduction_case(draw):
  x, dtype = draw(_inputs(specials=False, big=1e3))
  axes = [None, -1, 0] + ([(0, 1), 1] if x.ndim == 2 else [])
  return x, dtype, draw(st.sampled_from(axes))


@settings(max_examples=8)
@given(_reduction_case())
def test_softmax_family_matches_jax(case):
  x, dtype, axis = case
  tol = None if dtype == f32 else 0.02
  _close(nn.softmax(x, axis=axis), jax.nn.softmax(x, axis=axis), dtype, tol)
  _close(nn.log_softmax(x, axis=axis), jax.nn.log_softmax(x, axis=axis), dtype, tol)
  for keepdims in (False, True):
    _close(logsumexp(x, axis=axis, keepdims=keepdims),
           jss.logsumexp(x, axis=axis, keepdims=keepdims), dtype, tol)
  _close(nn.logmeanexp(x, axis=axis), jax.nn.logmeanexp(x, axis=axis), dtype, tol)
  if dtype == f32:
    # NB: "stable" only: the "fast" E[x**2] - E[x]**2 cancels catastrophically on drawn data
    # The mean's rounding error (a few ulps of max|x|) is divided by sqrt(var + 1e-5): on a
    # near-constant input the two libraries may differ by that much (JAX's -0.0012 vs our 0
    # for x = [43] * 7).
    x64 = np.asarray(x, np.float64)
    spread = np.sqrt(np.var(x64, axis=axis) + 1e-5).min()
    tol = 1e-3 + 8 * float(np.finfo(np.float32).eps) * float(np.abs(x64).max()) / spread
    _close(nn.standardize(x, axis=axis, algorithm="stable"),
           jax.nn.standardize(x, axis=axis, algorithm="stable"), dtype, tol)


def test_masked_softmax_and_standardize_2d():
  rng = np.random.default_rng(0)
  x = rng.standard_normal((3, 6)).astype(np.float32) * 10
  m = rng.random((3, 6)) < 0.6
  m[:, :2] = True
  for axis in (-1, 0, None):
    _close(nn.softmax(x, axis=axis, where=m), jax.nn.softmax(x, axis=axis, where=m))
    _close(nn.log_softmax(x, axis=axis, where=m), jax.nn.log_softmax(x, axis=axis, where=m))
    _close(logsumexp(x, axis=axis, where=m), jss.logsumexp(x, axis=axis, where=m))
    for algorithm in ("fast", "stable"):
      _close(nn.standardize(x, axis=axis, where=m, algorithm=algorithm),
             jax.nn.standardize(x, axis=axis, where=m, algorithm=algorithm), f32, 2e-3)
  _close(nn.standardize(x, mean=1.0, variance=4.0), jax.nn.standardize(x, mean=1.0,
                                                                      variance=4.0))


def test_logsumexp_b_and_return_sign_match_jax():
  rng = np.random.default_rng(1)
  a = (rng.standard_normal((3, 4)) * 50).astype(np.float32)
  b = rng.standard_normal((3, 4)).astype(np.float32)
  b[0, 1] = 0
  a[0, 1] = np.inf   # left out where b == 0
  for axis in (None, 0, 1, (0, 1)):
    for keepdims in (False, True):
      _close(logsumexp(a, axis=axis, b=b, keepdims=keepdims),
             jss.logsumexp(a, axis=axis, b=b, keepdims=keepdims))
      out, sign = logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=True)
      jout, jsign = jss.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=True)
      _close(out, jout)
      _close(sign, jsign)
  _close(logsumexp(a[1], b=2.0), jss.logsumexp(a[1], b=2.0))
  _close(logsumexp(np.zeros((0,), np.float32)), jss.logsumexp(np.zeros((0,), np.float32)))
  assert sc.scipy.special.logsumexp is logsumexp and nn.logsumexp is logsumexp


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_glu_matches_jax(axis):
  x = np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)
  _close(nn.glu(x, axis), jax.nn.glu(x, axis))


@pytest.mark.parametrize("dtype", [None, np.int32, np.bool_, bf16])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_matches_jax(dtype, axis):
  x = np.array([[0, 3, 7], [1, -1, 2]], np.int32)
  _close(nn.one_hot(x, 5, dtype=dtype, axis=axis), jax.nn.one_hot(x, 5, dtype=dtype, axis=axis))
  _close(nn.one_hot(np.uint8(2), 3), jax.nn.one_hot(np.uint8(2), 3))


def test_staged_matches_eager_and_abstract_eval():
  x = np.linspace(-5, 5, 10, dtype=np.float32).reshape(2, 5)
  for fun in [nn.relu, nn.softplus, nn.gelu, lambda x: nn.softmax(x, axis=0),
              lambda x: logsumexp(x, axis=1), lambda x: nn.one_hot(x.astype(np.int32), 4),
              lambda x: nn.standardize(x)]:
    eager = fun(x)
    np.testing.assert_allclose(np.asarray(staged_call(fun, x)), np.asarray(eager), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(sc.jit(fun)(x)), np.asarray(eager), rtol=1e-6)
    jaxpr, _ = pe.trace_to_jaxpr(lambda x: [fun(x)], [core.get_aval(x)])
    assert jaxpr.out_avals[0] == eager.aval, (jaxpr.out_avals[0], eager.aval)


@pytest.mark.parametrize("call,err,match", [
    (lambda: nn.glu(np.zeros((3, 4)), 0), ValueError, "must be divisible by 2, got 3"),
    (lambda: nn.glu(np.zeros((2, 4)), 2), ValueError, "axis 2 is out of bounds"),
    (lambda: nn.softmax(np.zeros((2, 4)), axis=3), ValueError, "axis 3 is out of bounds"),
    (lambda: nn.one_hot(np.zeros(3, np.int32), 2.5), TypeError, "num_classes must be a static"),
    (lambda: nn.one_hot(np.zeros(3, np.int32), 2, axis=3), ValueError, "out of bounds"),
    (lambda: nn.standardize(np.zeros(3), algorithm="slow"), ValueError,
     "Unknown algorithm 'slow'. Expected 'fast' or 'stable'."),
    (lambda: logsumexp(np.zeros(3), axis=1), ValueError, "axis 1 is out of bounds"),
    (lambda: initializers.glorot_uniform()(random.key(0), (5,)), ValueError,
     "Can't compute input and output sizes of a 1-dimensional weights tensor"),
    (lambda: initializers.variance_scaling(1., "fan_x", "normal")(random.key(0), (2, 2)),
     ValueError, "invalid mode for variance scaling initializer: fan_x"),
    (lambda: initializers.variance_scaling(1., "fan_in", "cauchy")(random.key(0), (2, 2)),
     ValueError, "invalid distribution for variance scaling initializer: cauchy"),
])
def test_errors(call, err, match):
  with pytest.raises(err, match=match):
    call()


# ---------------------------------------------------------------------------
# Initializers


INITIALIZERS = ["glorot_uniform", "glorot_normal", "xavier_uniform", "xavier_normal",
                "lecun_uniform", "lecun_normal", "he_uniform", "he_normal", "kaiming_uniform",
                "kaiming_normal"]


@pytest.mark.parametrize("name", INITIALIZERS)
def test_variance_scaling_family_matches_jax(name):
  for seed in (0, 1, 7):
    for shape in [(4, 6), (3, 3, 2, 5)]:
      ours = getattr(initializers, name)()(random.key(seed), shape)
      theirs = getattr(jax.nn.initializers, name)()(jax.random.key(seed), shape)
      _close(ours, theirs)


@pytest.mark.parametrize("mode", ["fan_in", "fan_out", "fan_avg", "fan_geo_avg"])
@pytest.mark.parametrize("distribution", ["truncated_normal", "normal", "uniform"])
def test_variance_scaling_matches_jax(mode, distribution):
  kw = dict(in_axis=(0, 1), out_axis=-1, batch_axis=2)
  shape = (3, 2, 4, 5)
  ours = initializers.variance_scaling(1.5, mode, distribution, **kw)(random.PRNGKey(3), shape)
  theirs = jax.nn.initializers.variance_scaling(1.5, mode, distribution, **kw)(
      jax.random.PRNGKey(3), shape)
  _close(ours, theirs)
  for dtype in (bf16, np.complex64):
    ours = initializers.variance_scaling(2.0, mode, distribution)(random.key(1), (4, 3), dtype)
    theirs = jax.nn.initializers.variance_scaling(2.0, mode, distribution)(
        jax.random.key(1), (4, 3), dtype)
    if dtype == np.complex64:
      ours, theirs = np.asarray(ours).view(np.float32), np.asarray(theirs).view(np.float32)
    _close(ours, theirs, rtol=1e-5 if dtype != bf16 else 0.02)


def test_simple_initializers_match_jax():
  k, jk = random.key(42), jax.random.key(42)
  for ours, theirs in [
      (initializers.zeros(k, (2, 3)), jax.nn.initializers.zeros(jk, (2, 3))),
      (initializers.ones(k, (3,), i32), jax.nn.initializers.ones(jk, (3,), i32)),
      (initializers.constant(-7)(k, (2, 3)), jax.nn.initializers.constant(-7)(jk, (2, 3))),
      (initializers.constant(2, bf16)(k, (2,)), jax.nn.initializers.constant(2, bf16)(jk, (2,))),
      (initializers.uniform(10.)(k, (2, 3)), jax.nn.initializers.uniform(10.)(jk, (2, 3))),
      (initializers.normal(5.)(k, (2, 3)), jax.nn.initializers.normal(5.)(jk, (2, 3))),
      (initializers.normal()(k, (4,), f16), jax.nn.initializers.normal()(jk, (4,), f16)),
      (initializers.truncated_normal(5.)(k, (2, 3)),
       jax.nn.initializers.truncated_normal(5.)(jk, (2, 3))),
      (initializers.truncated_normal(1., lower=-1., upper=0.5)(k, (20,)),
       jax.nn.initializers.truncated_normal(1., lower=-1., upper=0.5)(jk, (20,))),
  ]:
    _close(ours, theirs)


def test_initializer_statistics():
  w = np.asarray(initializers.he_normal()(random.key(0), (400, 300)), np.float64)
  assert abs(w.std() - np.sqrt(2 / 400)) < 0.002 and abs(w.mean()) < 0.002
  assert np.abs(w).max() <= 2 * np.sqrt(2 / 400) / 0.8796256610342398 + 1e-6
  u = np.asarray(initializers.glorot_uniform()(random.key(1), (300, 500)), np.float64)
  limit = np.sqrt(6 / (300 + 500))
  assert u.min() >= -limit and u.max() < limit and abs(u.std() - limit / np.sqrt(3)) < 0.001
