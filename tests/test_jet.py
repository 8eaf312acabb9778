"""`stagecraft.experimental.jet` (Taylor-mode AD) against `jax.experimental.jet` on the same
functions and inputs, orders 1 to 4, x64 off and on; calls inlined, jet under
jit/vmap/grad, JAX's input errors, and the NotImplementedError for a primitive without a
rule."""
from __future__ import annotations

import math

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.experimental.jet import jet as jax_jet

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.experimental.jet import JetRuleError, jet, jet2, jet_rules

X = np.array([0.3, 0.7, 1.2], np.float32)
TERMS = [np.array([1.0, -0.5, 0.25]), np.array([0.2, 0.1, -0.3]), np.array([0.5, 0.5, -0.5]),
         np.array([0.1, 0.2, 0.3])]


# JAX 0.10.2's jet lacks a rule or fails for these; its oracle is the same function written
# with primitives its jet handles.
_JAX_FORM = {"tan": lambda np_, lax_, nn: lambda a: np_.sin(a) / np_.cos(a),
             "max": lambda np_, lax_, nn: lambda a: (np_.maximum(a, np_.full_like(a, 0.5))
                                                     + np_.max(a * a)
                                                     + np_.minimum(a, np_.full_like(a, 0.7))),
             "softplus": lambda np_, lax_, nn: lambda a: np_.log1p(np_.exp(a))}


def _both(name):
  """(stagecraft function, JAX function) of the table entry `name`: the same program
  written against each library's numpy/lax/nn/jit."""
  def make(np_, lax_, nn, jit, jax_side=False):
    if jax_side and name in _JAX_FORM:
      return _JAX_FORM[name](np_, lax_, nn)
    return {
        "sin": np_.sin, "cos": np_.cos, "exp": np_.exp, "log": np_.log, "tanh": np_.tanh,
        "sqrt": np_.sqrt, "expm1": np_.expm1, "log1p": np_.log1p, "sinh": np_.sinh,
        "cosh": np_.cosh, "tan": np_.tan, "abs_neg": lambda a: np_.abs(a - 1.0),
        "rsqrt": lax_.rsqrt, "logistic": nn.sigmoid,
        "poly": lambda a: a ** 3 - 2 * a * a + 1 / a,
        "integer_pow": lambda a: lax_.integer_pow(a, 5) - lax_.integer_pow(a, -2),
        "pow_float": lambda a: a ** 2.5,
        "pow_traced": lambda a: np_.power(a + 1.0, a),
        "div": lambda a: np_.sin(a) / (1 + a ** 2),
        "composite": lambda a: np_.exp(np_.sin(a)) * np_.log(1 + a * a),
        "dot": lambda a: np_.dot(np_.outer(a, a), np_.tanh(a)),
        "max": lambda a: np_.maximum(a, 0.5) + np_.max(a * a) + np_.minimum(a, 0.7),
        "where": lambda a: np_.where(a > 0.5, np_.sin(a), a * a),
        "shape": lambda a: np_.sum(np_.reshape(np_.broadcast_to(a, (2, 3)), (3, 2)).T * 2,
                                   axis=0),
        "slices": lambda a: np_.concatenate([a[1:], a[::-1], np_.cumsum(a)]),
        "jit": jit(lambda a: np_.log1p(a) * np_.expm1(a)),
        "logsumexp": nn.logsumexp,
        "softplus": nn.softplus,
        "convert": lambda a: (a.astype(np_.float16) * 3).astype(np_.float32),
        "erf_inv": lambda a: lax_.erf_inv(a - 0.5),
        "atan2": lambda a: lax_.atan2(a, 2.0 - a * a),
        "cumprod": lambda a: np_.cumprod(a) + lax_.cumprod(a, reverse=True),
        "cummax_cummin": lambda a: lax_.cummax(np_.sin(3 * a)) - lax_.cummin(np_.cos(3 * a)),
        "erf_erfc": lambda a: lax_.erf(a) * lax_.erfc(a * a),
        "inverse_hyperbolic": lambda a: (lax_.asinh(a) + lax_.acosh(a + 1.5)
                                         + lax_.atanh(a / 2)),
        "rem": lambda a: lax_.rem(5 * a + 0.1, np_.full_like(a, 0.37)),
        "fft": lambda a: np_.fft.fft(a * a).real,
        "copy": lambda a: np_.array(a * 2, copy=True),
    }[name]
  return (make(jnp, lax, sc.nn, sc.jit), make(jjnp, jax.lax, jax.nn, jax.jit, True))


NAMES = ["sin", "cos", "exp", "log", "tanh", "sqrt", "expm1", "log1p", "sinh", "cosh", "tan",
         "abs_neg", "rsqrt", "logistic", "poly", "integer_pow", "pow_float", "pow_traced",
         "div", "composite", "dot", "max", "where", "shape", "slices", "jit", "logsumexp",
         "softplus", "convert", "erf_inv", "atan2", "cumprod", "cummax_cummin", "erf_erfc",
         "inverse_hyperbolic", "rem", "fft", "copy"]


def _check(s, j, rtol, atol):
  sp, ss = s
  jp, js = j
  np.testing.assert_allclose(np.asarray(sp), np.asarray(jp), rtol=rtol, atol=atol)
  assert len(ss) == len(js)
  for a, b in zip(ss, js):
    assert np.shape(a) == np.shape(b)
    assert np.asarray(a).dtype == np.asarray(b).dtype
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", NAMES)
def test_matches_jax_orders_1_to_4(name):
  # NB: the k-th output term depends on the input terms up to k only, so order 4 checks
  # orders 1 to 3 too; order 1 checks the shortest series.
  # Both sides run under their jit (faster than op by op), a few eagerly too.
  sf, jf = _both(name)
  for order in ((1, 4) if name in ("sin", "composite", "dot", "jit") else (4,)):
    terms = [t.astype(np.float32) for t in TERMS[:order]]
    s = sc.jit(lambda x, *ts: jet(sf, (x,), (list(ts),)))(X, *terms)
    j = jax.jit(lambda x, *ts: jax_jet(jf, (x,), (list(ts),)))(X, *terms)
    _check(s, j, rtol=3e-4, atol=3e-5)
    if name in ("sin", "div", "where", "jit"):
      _check(jet(sf, (X,), (terms,)), j, rtol=3e-4, atol=3e-5)


@pytest.mark.parametrize("name", ["composite", "div", "poly", "logistic", "tanh", "dot",
                                  "integer_pow", "pow_traced"])
def test_matches_jax_x64(name):
  sf, jf = _both(name)
  x = X.astype(np.float64)
  terms = [t.astype(np.float64) for t in TERMS[:3]]
  with sc.enable_x64():
    s = jet(sf, (x,), (terms,))
  jax.config.update("jax_enable_x64", True)
  try:
    j = jax_jet(jf, (x,), (terms,))
    _check(s, j, rtol=1e-11, atol=1e-12)
    assert np.asarray(s[1][0]).dtype == np.float64
  finally:
    jax.config.update("jax_enable_x64", False)


def test_derivatives_of_a_line_are_the_function_derivatives():
  # x(t) = x0 + t: the k-th term is f^(k)(x0) (sin's derivatives cycle)
  x0 = 0.9
  _, terms = jet(jnp.sin, (x0,), ([1.0, 0.0, 0.0, 0.0],))
  want = [math.cos(x0), -math.sin(x0), -math.cos(x0), math.sin(x0)]
  np.testing.assert_allclose(np.asarray(terms), want, rtol=1e-5)
  # unscaled: Taylor coefficients f^(k) / k!
  _, coeffs = jet(jnp.sin, (x0,), ([1.0, 0.0, 0.0, 0.0],), factorial_scaled=False)
  _, jcoeffs = jax_jet(jjnp.sin, (x0,), ([1.0, 0.0, 0.0, 0.0],), factorial_scaled=False)
  np.testing.assert_allclose(np.asarray(coeffs), np.asarray(jcoeffs), rtol=1e-5)
  np.testing.assert_array_equal(np.asarray(jet2(jnp.sin, (x0,), ([1.0, 0.0, 0.0, 0.0],))[1]),
                                np.asarray(coeffs))
  np.testing.assert_allclose(np.asarray(coeffs),
                             [w / math.factorial(k + 1) for k, w in enumerate(want)], rtol=1e-5)


def test_integer_powers_are_exact_at_zero_and_negative_points():
  # x^3 at 0 and -2 (JAX's pow rule, through log, gives NaN for x ** 3.0 there)
  for x0 in (0.0, -2.0):
    for f in (lambda a: a ** 3, lambda a: a ** 3.0):
      p, t = jet(f, (x0,), ([1.0, 0.0, 0.0],))
      np.testing.assert_allclose(np.asarray(t), [3 * x0 ** 2, 6 * x0, 6.0], atol=1e-6)
  p, t = jet(lambda a: a ** -2, (-2.0,), ([1.0, 0.0],))
  np.testing.assert_allclose(np.asarray(t), [2 / 8, 6 / 16], rtol=1e-6)


def test_several_arguments_pytree_outputs_constants():
  f_s = lambda x, y: {"a": x * y + jnp.sin(y), "b": (x, 3.0)}
  f_j = lambda x, y: {"a": x * y + jjnp.sin(y), "b": (x, 3.0)}
  args = ((1.0, np.float32(2.0)), ([1.0, 0.0, 2.0], [0.5, 1.0, -1.0]))
  s, j = jet(f_s, *args), jax_jet(f_j, *args)
  assert jax.tree.structure(s[0]) == jax.tree.structure(j[0])
  for a, b in zip(jax.tree.leaves(s), jax.tree.leaves(j)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)
  # an output that does not depend on the inputs: zero terms (JAX's zeros)
  p, t = jet(lambda x: 3, (1.0,), ([1.0],))
  assert p == 3 and np.asarray(t[0]) == 0.0


def test_calls_and_custom_rules_are_inlined():
  @sc.custom_jvp
  def f(x):
    return jnp.sin(x)

  f.defjvp(lambda p, t: (f(p[0]), 100.0 * t[0]))   # ignored by jet, as JAX's
  g = sc.jit(lambda x: sc.checkpoint(lambda y: f(y) * y)(x))
  p, t = jet(g, (0.4,), ([1.0, 0.0],))
  np.testing.assert_allclose(np.asarray(t), [math.cos(.4) * .4 + math.sin(.4),
                                             -math.sin(.4) * .4 + 2 * math.cos(.4)], rtol=1e-5)


def test_jet_composes_with_jit_vmap_grad():
  third = lambda x: jet(jnp.sin, (x,), ([1.0, 0.0, 0.0],))[1][2]
  np.testing.assert_allclose(float(sc.jit(third)(0.3)), -math.cos(0.3), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(sc.vmap(third)(jnp.arange(3.0))),
                             -np.cos(np.arange(3.0)), rtol=1e-5)
  np.testing.assert_allclose(float(sc.grad(third)(0.3)), math.sin(0.3), rtol=1e-5)
  # terms closed over from an outer trace
  out = sc.jit(lambda x: jet(jnp.exp, (x,), ([jnp.ones_like(x), x],))[1][1])(1.5)
  np.testing.assert_allclose(float(out), math.exp(1.5) * (1 + 1.5), rtol=1e-5)


def test_input_errors_match_jax():
  cases = [((1.0, 2.0), ([1.0], [1.0, 2.0])), (([1.0, 2.0],), ([1.0],)),
           ((1.0,), ([(1.0, 2.0)],))]
  for primals, series in cases:
    with pytest.raises(ValueError) as je:
      jax_jet(lambda *a: a[0], primals, series)
    with pytest.raises(ValueError) as se:
      jet(lambda *a: a[0], primals, series)
    assert str(se.value) == str(je.value)


def test_missing_rule_names_the_primitive():
  f = lambda x: lax.cond(x > 0, jnp.sin, jnp.cos, x)
  with pytest.raises(NotImplementedError, match=r"primitive 'cond' has no Taylor rule") as e:
    jet(f, (1.0,), ([1.0],))
  assert isinstance(e.value, JetRuleError)
  with pytest.raises(NotImplementedError, match="'lgamma'"):   # as JAX: no rule
    jet(lax.lgamma, (1.0,), ([1.0],))
  # without a series reaching it, a primitive needs no rule
  y = jnp.float32(0.5)
  p, t = jet(lambda x: x * lax.lgamma(y), (1.0,), ([1.0],))
  np.testing.assert_allclose(float(t[0]), math.lgamma(0.5), rtol=1e-6)
  assert all(hasattr(p_, "bind") for p_ in jet_rules)


def test_rules_cover_jax_rules():
  """Every primitive JAX 0.10.2's jet has a rule for has one here (those stagecraft has
  no primitive for aside: JAX's device_put; its jit calls are inlined here)."""
  from jax.experimental import jet as jax_jet_module
  theirs = {p.name for p in jax_jet_module.jet_rules} - {"device_put", "jit"}
  assert theirs <= {p.name for p in jet_rules}
