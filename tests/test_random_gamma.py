"""stagecraft.random's rejection samplers (gamma, loggamma, beta, dirichlet, t, chisquare, f,
generalized_normal, ball, poisson, binomial) against jax.random (same keys: the same samples)
and scipy.stats (moments and Kolmogorov-Smirnov tests); shapes and dtypes against JAX's;
typed and raw keys, jit and vmap; the implicit-reparameterization gradient of gamma; errors.

Compiles dominate the run time, so each test reuses few signatures."""
import re

import jax
import numpy as np
import pytest
import scipy.special
import scipy.stats

import stagecraft as sc
from stagecraft import random

from _cases import bf16, f16, f32

ALPHAS = np.array([0.2, 1.0, 3.5, 50.0], np.float32)
N = 5000
# Knuth below 10, PTRS above; 0 gives 0 and NaN gives -1, as JAX.
POISSON_LAM = np.array([0.0, np.nan, 0.5, 4.0, 25.0, 1000.0], np.float32)


def _keys(seed):
  return random.PRNGKey(seed), jax.random.PRNGKey(seed)


def _close_to_jax(ours, theirs, max_mismatch=0.01):
  """Same shape and dtype; samples equal up to float rounding, except for a small fraction
  where rounding may flip an acceptance test in a rejection loop."""
  ours, theirs = np.asarray(ours), np.asarray(theirs)
  assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (
      ours.shape, ours.dtype, theirs.shape, theirs.dtype)
  a, b = ours.astype(np.float64), theirs.astype(np.float64)
  close = np.isclose(a, b, rtol=1e-5, atol=1e-6) | (np.isnan(a) & np.isnan(b))
  assert np.mean(~close) <= max_mismatch, (np.mean(~close), a[~close][:5], b[~close][:5])


def _check_moments(x, mean, var, k=5.0):
  """Sample mean within k standard errors; sample variance within k (approximate) standard
  errors (using the fourth central moment of the sample)."""
  x = np.asarray(x, np.float64)
  n = x.size
  assert abs(x.mean() - mean) <= k * np.sqrt(var / n), (x.mean(), mean)
  m4 = np.mean((x - x.mean()) ** 4)
  assert abs(x.var() - var) <= k * np.sqrt(max(m4 - var ** 2, 1e-12) / n), (x.var(), var)


def _check_ks(x, cdf, *args):
  p = scipy.stats.kstest(np.asarray(x, np.float64), cdf, args=args).pvalue
  assert p > 1e-3, p


def _check_discrete_gof(x, dist):
  """Pearson's chi-square goodness of fit for integer samples (KS assumes a continuous
  distribution): cells of expected count >= 20, the tails pooled into the end cells."""
  x = np.asarray(x, np.float64)
  n = x.size
  lo, hi = dist.ppf(1e-4), dist.ppf(1 - 1e-4)
  support = np.arange(lo, hi + 1)
  edges, acc = [lo], 0.0
  for k in support[:-1]:
    acc += dist.pmf(k) * n
    if acc >= 20:
      edges.append(k + 1)
      acc = 0.0
  edges = np.array(edges)
  cdf_lo = np.append(0.0, dist.cdf(edges[1:] - 1))   # P(X < edge)
  probs = np.diff(np.append(cdf_lo, 1.0))
  observed = np.array([np.sum(x < e) for e in edges[1:]] + [n], np.float64)
  observed = np.diff(np.append(0.0, observed))
  p = scipy.stats.chisquare(observed, probs * n).pvalue
  assert p > 1e-3, (p, observed, probs * n)


# ---------------------------------------------------------------------------
# Statistics and agreement with JAX


def test_gamma_statistics_and_jax():
  k, jk = _keys(0)
  x = random.gamma(k, ALPHAS, (N, 4))
  _close_to_jax(x, jax.random.gamma(jk, ALPHAS, (N, 4)))
  x = np.asarray(x)
  assert x.dtype == f32 and np.all(x >= 0)
  for i, a in enumerate(ALPHAS):
    _check_moments(x[:, i], a, a)
    _check_ks(x[:, i], scipy.stats.gamma(a).cdf)


def test_loggamma_statistics_and_jax():
  k, jk = _keys(1)
  a = np.array([0.01, 0.2, 3.5], np.float32)
  lx = random.loggamma(k, a, (N, 3))
  _close_to_jax(lx, jax.random.loggamma(jk, a, (N, 3)))
  lx = np.asarray(lx)
  assert np.all(np.isfinite(lx))   # no underflow to log(0) even for a = 0.01
  for i, ai in enumerate(a):
    # P(log X <= y) = P(X <= exp(y)); scipy's loggamma is the distribution of log(Gamma(a)).
    _check_ks(lx[:, i], scipy.stats.loggamma(ai).cdf)


def test_beta_statistics_and_jax():
  k, jk = _keys(2)
  a = np.array([0.5, 2.0], np.float32)
  b = np.array([[0.5], [3.0]], np.float32)
  x = random.beta(k, a, b, (N, 2, 2))
  _close_to_jax(x, jax.random.beta(jk, a, b, (N, 2, 2)))
  x = np.asarray(x)
  assert np.all((x >= 0) & (x <= 1))
  for i in range(2):
    for j in range(2):
      dist = scipy.stats.beta(a[j], b[i, 0])
      _check_moments(x[:, i, j], dist.mean(), dist.var())
      _check_ks(x[:, i, j], dist.cdf)


def test_dirichlet_statistics_and_jax():
  k, jk = _keys(3)
  alpha = np.array([0.3, 1.0, 4.0], np.float32)
  x = random.dirichlet(k, alpha, (N,))
  _close_to_jax(x, jax.random.dirichlet(jk, alpha, (N,)))
  x = np.asarray(x, np.float64)
  assert x.shape == (N, 3)
  np.testing.assert_allclose(x.sum(-1), 1.0, rtol=1e-5)
  a0 = alpha.sum()
  for i, ai in enumerate(alpha):   # the marginals are Beta(alpha_i, a0 - alpha_i)
    dist = scipy.stats.beta(ai, a0 - ai)
    _check_moments(x[:, i], dist.mean(), dist.var())
    _check_ks(x[:, i], dist.cdf)


def test_chisquare_t_f_statistics_and_jax():
  k, jk = _keys(4)
  df = np.array([1.0, 5.0], np.float32)
  c = random.chisquare(k, df, (N, 2))
  _close_to_jax(c, jax.random.chisquare(jk, df, (N, 2)))
  # t and f build on gamma/chisquare as JAX's do (same key splits); statistics only here.
  tt = random.t(k, df, (N, 2))
  ff = random.f(k, 3.0, 7.0, (N,))
  _check_ks(ff, scipy.stats.f(3.0, 7.0).cdf)
  c, tt, ff = np.asarray(c), np.asarray(tt), np.asarray(ff)
  for i, d in enumerate(df):
    _check_moments(c[:, i], d, 2 * d)
    _check_ks(c[:, i], scipy.stats.chi2(d).cdf)
    _check_ks(tt[:, i], scipy.stats.t(d).cdf)


def test_generalized_normal_and_ball():
  k, jk = _keys(5)
  g = random.generalized_normal(k, 1.5, (N,))
  _close_to_jax(g, jax.random.generalized_normal(jk, 1.5, (N,)))
  _check_ks(g, scipy.stats.gennorm(1.5).cdf)
  b = np.asarray(random.ball(k, 3, 1.0, (200,)))
  assert b.shape == (200, 3) and np.all(np.abs(b).sum(-1) <= 1 + 1e-6)


def test_poisson_statistics_and_jax():
  k, jk = _keys(6)
  lam = POISSON_LAM
  x = random.poisson(k, lam, (N, 6))
  _close_to_jax(x, jax.random.poisson(jk, lam, (N, 6)))
  x = np.asarray(x)
  assert x.dtype == np.int32
  assert np.all(x[:, 0] == 0) and np.all(x[:, 1] == -1)
  for i, l in enumerate(lam[2:], 2):
    _check_moments(x[:, i], l, l)
    _check_discrete_gof(x[:, i], scipy.stats.poisson(l))


def test_binomial_statistics_and_jax():
  k, jk = _keys(7)
  # Inversion where n q <= 10, BTRS above; then invalid parameters (NaN, inf results).
  n = np.array([10.0, 50.0, 400.0, np.nan, -1.0, np.inf, 5.0, 5.0], np.float32)
  p = np.array([0.3, 0.5, 0.8, 0.5, 0.5, 0.5, np.nan, 1.0], np.float32)
  x = random.binomial(k, n, p, (N, 8))
  _close_to_jax(x, jax.random.binomial(jk, n, p, (N, 8)))
  x = np.asarray(x)
  assert x.dtype == f32 and np.all(x[:, :3] == np.floor(x[:, :3]))
  np.testing.assert_array_equal(x[0, 3:], [np.nan, np.nan, np.inf, np.nan, 5.0])
  for i in range(3):
    dist = scipy.stats.binom(n[i], p[i])
    _check_moments(x[:, i], dist.mean(), dist.var())
    _check_discrete_gof(x[:, i], dist)


# ---------------------------------------------------------------------------
# Shapes, dtypes, keys, transformations


SHAPE_CASES = [
    ("gamma", (np.float32(2.0),), {}),
    ("gamma", (np.ones((3, 1), np.float32),), {"shape": (2, 3, 4)}),
    ("gamma", (2.0,), {"shape": (5,), "dtype": f16}),
    ("gamma", (2.0,), {"shape": (5,), "dtype": bf16}),
    ("loggamma", (np.ones(3, np.float32),), {}),
    ("beta", (np.ones(3, np.float32), 2.0), {}),
    ("beta", (1.0, np.ones((2, 1), np.float16)), {"shape": (2, 3), "dtype": f16}),
    ("dirichlet", (np.ones((2, 4), np.float32),), {}),
    ("dirichlet", (np.ones(4, np.float32),), {"shape": (3, 2)}),
    ("t", (np.ones(2, np.float32),), {}),
    ("chisquare", (3.0,), {"shape": (2,), "dtype": bf16}),
    ("f", (np.ones(2, np.float32), 3.0), {}),
    ("generalized_normal", (2.0,), {"shape": (3,)}),
    ("ball", (4,), {"shape": (2,)}),
    ("poisson", (np.ones((2, 3), np.float32),), {}),
    ("poisson", (3.0,), {"shape": (4,), "dtype": np.int16}),
    ("binomial", (np.ones(3, np.float32) * 5, 0.3), {}),
    ("binomial", (5.0, 0.3), {"shape": (2,), "dtype": f16}),
]


@pytest.mark.parametrize("name,args,kwargs", SHAPE_CASES)
def test_shapes_and_dtypes_match_jax(name, args, kwargs):
  ours = sc.eval_shape(lambda k: getattr(random, name)(k, *args, **kwargs), random.PRNGKey(0))
  theirs = jax.eval_shape(lambda k: getattr(jax.random, name)(k, *args, **kwargs),
                          jax.random.PRNGKey(0))
  assert (ours.shape, np.dtype(ours.dtype)) == (theirs.shape, np.dtype(theirs.dtype))


def test_gamma_low_precision():
  k, jk = _keys(9)
  a = np.array([0.5, 4.0], np.float32)
  x16 = random.gamma(k, a, (1000, 2), dtype=f16)
  _close_to_jax(x16, jax.random.gamma(jk, a, (1000, 2), dtype=f16), max_mismatch=0.05)
  xb16 = random.gamma(k, a, (1000, 2), dtype=bf16)
  assert xb16.dtype == bf16
  for x in (x16, xb16):
    x = np.asarray(x, np.float64)
    assert np.all(np.isfinite(x)) and np.all(x >= 0)
    _check_moments(x[:, 1], 4.0, 4.0)


def test_typed_keys_jit_and_vmap():
  typed, raw = random.key(11), random.PRNGKey(11)
  a = np.array([0.7, 2.0], np.float32)
  x_raw = np.asarray(random.gamma(raw, a, (3, 2)))
  np.testing.assert_array_equal(np.asarray(random.gamma(typed, a, (3, 2))), x_raw)
  np.testing.assert_array_equal(
      np.asarray(sc.jit(lambda k, a: random.gamma(k, a, (3, 2)))(typed, a)), x_raw)
  # vmap over keys (batched loop predicates) gives each key's own samples.
  keys = random.split(typed, 3)
  batched = np.asarray(sc.vmap(lambda k: random.gamma(k, a, (3, 2)))(keys))
  # NB: equal up to rounding (batched and unbatched programs fuse differently).
  for i in range(3):
    np.testing.assert_allclose(batched[i], np.asarray(random.gamma(keys[i], a, (3, 2))),
                               rtol=1e-5)
  # vmap over the parameter with one key (per example the signature above: no compile).
  v = np.array([0.3, 5.0], np.float32)
  batched = np.asarray(sc.vmap(lambda vi: random.gamma(raw, vi * np.ones(2, np.float32),
                                                       (3, 2)))(v))
  for i in range(2):
    np.testing.assert_allclose(batched[i], np.asarray(random.gamma(raw, np.full(2, v[i]),
                                                                   (3, 2))), rtol=1e-5)
  # poisson's loop runs over the whole array: under vmap its predicate is batched.
  raw_keys = random.split(raw, 2)
  batched = np.asarray(sc.vmap(lambda k: random.poisson(k, POISSON_LAM, (N, 6)))(raw_keys))
  for i in range(2):
    np.testing.assert_array_equal(batched[i], np.asarray(random.poisson(
        raw_keys[i], POISSON_LAM, (N, 6))))


def test_empty_gamma():
  x = random.gamma(random.PRNGKey(0), 1.0, (0, 3))
  assert x.shape == (0, 3) and x.dtype == f32


# ---------------------------------------------------------------------------
# Gradients


def test_gamma_grad_mean_is_one_and_matches_jax():
  k, jk = _keys(12)
  # Per-sample derivatives dx/da (a broadcast to the sample shape): positive, mean
  # d E[X] / da = 1 for each alpha, and JAX's for the same samples.
  a_full = np.broadcast_to(ALPHAS, (2000, 4))
  x, gamma_vjp = sc.vjp(lambda a: random.gamma(k, a), a_full)
  per_sample = np.asarray(gamma_vjp(np.ones(a_full.shape, np.float32))[0], np.float64)
  theirs = np.asarray(jax.grad(lambda a: jax.random.gamma(jk, a).sum())(a_full))
  # NB: JAX sums the series for dx/da directly; we divide dP/da by dP/dx: ~1e-5 apart.
  np.testing.assert_allclose(per_sample, theirs, rtol=1e-3, atol=1e-6)
  assert np.all(per_sample > 0)
  for i in range(4):
    d = per_sample[:, i]
    assert abs(d.mean() - 1.0) <= 5 * d.std() / np.sqrt(d.size), (ALPHAS[i], d.mean())
  # loggamma's derivative is dx/da / x for the same samples.
  x = np.asarray(x, np.float64)
  log_grad = np.asarray(sc.jit(sc.grad(lambda a: random.loggamma(k, a).sum()))(a_full),
                        np.float64)
  ok = x > 1e-30   # where exp(log x) is well inside float32 (loggamma's boost differs)
  np.testing.assert_allclose(log_grad[ok], (per_sample / x)[ok], rtol=1e-3)


def test_random_gamma_grad_formula_against_gammaincinv():
  """dx/da at fixed CDF value u = P(a, x): finite differences of x(a) = gammaincinv(a, u)."""
  a = np.array([0.2, 0.2, 1.0, 3.5, 3.5, 50.0, 50.0], np.float64)
  x = np.array([1e-4, 0.3, 1.0, 0.5, 6.0, 45.0, 60.0], np.float64)
  u = scipy.special.gammainc(a, x)
  h = 1e-5 * a
  fd = (scipy.special.gammaincinv(a + h, u) - scipy.special.gammaincinv(a - h, u)) / (2 * h)
  ours = sc.jit(sc.lax.random_gamma_grad)(a.astype(np.float32), x.astype(np.float32))
  np.testing.assert_allclose(np.asarray(ours), fd, rtol=2e-3)


# ---------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("call,err,match", [
    (lambda: random.gamma(random.PRNGKey(0), 1.0, dtype=np.int32), ValueError,
     "dtype argument to `gamma` must be a float dtype, got int32"),
    (lambda: random.loggamma(random.PRNGKey(0), 1.0, dtype=np.int32), ValueError,
     "dtype argument to `gamma` must be a float dtype"),
    (lambda: random.gamma(random.PRNGKey(0), np.ones(3), (2,)), ValueError,
     "Incompatible shapes for broadcasting"),
    (lambda: random.gamma(random.PRNGKey(0), np.ones(3), (1,)), ValueError,
     "gamma parameter shapes must be broadcast-compatible"),
    (lambda: random.gamma(random.split(random.PRNGKey(0)), 1.0), ValueError,
     "gamma accepts a single key"),
    (lambda: random.gamma(np.zeros(3, np.uint32), 1.0), TypeError,
     "expected key_data.shape to end with"),
    (lambda: random.beta(random.PRNGKey(0), np.ones(2), np.ones(3)), ValueError,
     "Incompatible shapes for broadcasting"),
    (lambda: random.beta(random.PRNGKey(0), 1.0, 1.0, dtype=np.int32), ValueError,
     "dtype argument to `beta` must be a float dtype"),
    (lambda: random.dirichlet(random.PRNGKey(0), 1.0), ValueError,
     re.escape("dirichlet requires alpha.ndim >= 1, got alpha.ndim == 0")),
    (lambda: random.dirichlet(random.PRNGKey(0), np.ones((2, 3)), (1,)), ValueError,
     "dirichlet parameter shapes must be broadcast-compatible"),
    (lambda: random.poisson(random.PRNGKey(0), 1.0, dtype=np.float32), ValueError,
     "dtype argument to `poisson` must be an int dtype"),
    (lambda: random.poisson(random.PRNGKey(0), np.ones(3), (1,)), ValueError,
     "poisson parameter shapes must be broadcast-compatible"),
    (lambda: random.binomial(random.PRNGKey(0), 5.0, 0.5, dtype=np.int32), ValueError,
     "dtype argument to `binomial` must be a float dtype"),
    (lambda: random.t(random.PRNGKey(0), np.ones(3), (2,)), ValueError,
     "Incompatible shapes for broadcasting"),
    (lambda: random.chisquare(random.PRNGKey(0), 1.0, dtype=np.int32), ValueError,
     "dtype argument to `chisquare` must be a float dtype"),
    (lambda: random.f(random.PRNGKey(0), np.ones(2), np.ones(3)), ValueError,
     "Incompatible shapes for broadcasting"),
    (lambda: random.ball(random.PRNGKey(0), 2.5), TypeError,
     "'float' object cannot be interpreted as an integer"),
    (lambda: random.beta(random.PRNGKey(0), np.ones(2, np.float32), 1.0, dtype=f16),
     ValueError, "In arguments to beta, cannot safely cast argument of type float32 to "
                 "float16"),
])
def test_errors(call, err, match):
  with pytest.raises(err, match=match):
    call()


def test_error_messages_match_jax():
  cases = [
      (lambda r: r.gamma(r.PRNGKey(0), 1.0, dtype=np.int32), ValueError),
      (lambda r: r.gamma(r.PRNGKey(0), np.ones(3), (1,)), ValueError),
      (lambda r: r.dirichlet(r.PRNGKey(0), 1.0), ValueError),
      (lambda r: r.beta(r.PRNGKey(0), 1.0, 1.0, dtype=np.int32), ValueError),
      (lambda r: r.t(r.PRNGKey(0), np.ones(2, np.float32), dtype=f16), ValueError),
  ]
  for call, err in cases:
    with pytest.raises(err) as ours:
      call(random)
    with pytest.raises(err) as theirs:
      call(jax.random)
    assert str(ours.value) == str(theirs.value)
