"""stagecraft.scipy.stats against scipy.stats (values, float32 with x64 off and float64 with
x64 on), against JAX's jax.scipy.stats (edge values of the support, result dtypes and weak
types, the names of every module, gaussian_kde.resample with the same key), gradients
against finite differences, jit/vmap, and error paths.

Compiles dominate the run time: every array argument has the same length N, so the
elementwise programs compiled for one distribution serve the others."""
import inspect
import types
import warnings

import jax
import jax.scipy.stats as jstats
import numpy as np
import pytest
import scipy.stats as sstats

import stagecraft as sc
import stagecraft.scipy.stats as stats
from stagecraft import random
from stagecraft.test_util import check_grads

N = 12
PI = np.pi
CONT = ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")


def lin(lo, hi):
  return np.linspace(lo, hi, N)


def unif(lo, hi, seed):
  return np.random.default_rng(seed).uniform(lo, hi, N)


KS = np.arange(-1.0, N - 1.0)      # integers, one below the support
QS = lin(0.02, 0.98)               # interior probabilities

# name: (functions of x, x-arguments, functions of q, q-arguments)
TABLE = {
    "norm": (CONT, (lin(-9, 7), unif(-1, 1, 1), unif(0.5, 2, 2)), ("ppf", "isf"),
             (QS, 0.3, 1.7)),
    "cauchy": (CONT, (lin(-8, 8), 0.3, 1.5), ("ppf", "isf"), (QS, 0.3, 1.5)),
    "expon": (CONT, (lin(-1, 6), 0.2, 1.3), ("ppf",), (QS, 0.2, 1.3)),
    "gumbel_l": (CONT, (lin(-6, 3), 0.2, 1.3), ("ppf",), (QS, 0.2, 1.3)),
    "gumbel_r": (CONT, (lin(-3, 9), 0.2, 1.3), ("ppf",), (QS, 0.2, 1.3)),
    "laplace": (("logpdf", "pdf", "cdf"), (lin(-5, 5), 0.3, 1.5), (), ()),
    "logistic": (("logpdf", "pdf", "cdf", "sf"), (lin(-8, 8), 0.3, 1.5), ("ppf", "isf"),
                 (QS, 0.3, 1.5)),
    "uniform": (("logpdf", "pdf", "cdf"), (lin(-1, 3), -0.5, 2.0), ("ppf",), (QS, -0.5, 2.0)),
    "pareto": (CONT, (lin(0.5, 6), unif(1, 4, 3), 0.1, 1.2), ("ppf",), (QS, 2.5, 0.1, 1.2)),
    "t": (("logpdf", "pdf"), (lin(-6, 6), unif(0.5, 10, 4), 0.2, 1.3), (), ()),
    "gamma": (CONT, (lin(-1, 12), unif(0.5, 6, 5), -0.5, 1.3), (), ()),
    "chi2": (CONT, (lin(-1, 15), unif(1, 8, 6), 0.1, 1.2), (), ()),
    "beta": (CONT, (lin(-0.1, 1.2), unif(0.5, 5, 7), unif(0.5, 5, 8), -0.05, 1.1), (), ()),
    "truncnorm": (CONT, (lin(-3, 4), -1.0, 2.5, 0.3, 1.2), (), ()),
    "gennorm": (("logpdf", "pdf", "cdf"), (lin(-3, 3), unif(0.5, 3, 9)), (), ()),
    "vonmises": (("logpdf", "pdf"), (lin(-3, 3), unif(0.5, 8, 10)), (), ()),
    "wrapcauchy": (("logpdf", "pdf"), (lin(0.1, 6.2), unif(0.1, 0.9, 11)), (), ()),
    "binom": (("logpmf", "pmf"), (KS, 8.0, unif(0.1, 0.9, 12)), (), ()),
    "betabinom": (("logpmf", "pmf"), (KS, 8.0, unif(0.5, 3, 13), unif(0.5, 3, 14)), (), ()),
    "nbinom": (("logpmf", "pmf"), (KS, 4.5, unif(0.1, 0.9, 15)), (), ()),
    "geom": (("logpmf", "pmf"), (KS, unif(0.1, 0.9, 16)), (), ()),
    "poisson": (("logpmf", "pmf", "cdf"), (KS, unif(0.5, 6, 17)), (), ()),
    "bernoulli": (("logpmf", "pmf"), (KS % 4 - 1, unif(0.1, 0.9, 18)), ("cdf", "ppf"),
                  (lin(-0.5, 1.5), unif(0.1, 0.9, 19))),
}

# Per-dtype tolerances (the incomplete beta/gamma functions are the least accurate).
TOL = {np.float32: dict(rtol=3e-4, atol=3e-5), np.float64: dict(rtol=1e-9, atol=1e-12)}
LOOSE = {"beta", "gamma", "chi2", "poisson", "truncnorm", "gennorm", "betabinom"}


def _cast(args, dtype):
  return [np.asarray(a, dtype) if isinstance(a, np.ndarray) else a for a in args]


def _compare(ours, ref, dtype, name, loose=False):
  ours = np.asarray(ours)
  assert ours.dtype == dtype, (name, ours.dtype, dtype)
  tol = dict(TOL[dtype])
  if loose:
    tol = {k: v * (30 if dtype == np.float32 else 1e3) for k, v in tol.items()}
  np.testing.assert_allclose(ours.astype(np.float64), ref, err_msg=name, equal_nan=True, **tol)


@pytest.mark.parametrize("x64", [False, True], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(TABLE))
def test_against_scipy(name, x64):
  dtype = np.float64 if x64 else np.float32
  xfuns, xargs, qfuns, qargs = TABLE[name]
  ours, theirs = getattr(stats, name), getattr(sstats, name)
  with sc.enable_x64(x64), warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    for funs, args in ((xfuns, xargs), (qfuns, qargs)):
      args = _cast(args, dtype)
      ref_args = [np.asarray(a, np.float64) for a in args]
      for fn in funs:
        ref = getattr(theirs, fn)(*ref_args)
        _compare(getattr(ours, fn)(*args), ref, dtype, f"{name}.{fn}", name in LOOSE)


# --------------------------------------------------------------------------------------
# Edge values against JAX (x64 off): outside/at the support, infinities, invalid parameters

EDGE_X = np.array([-np.inf, -2, -1, -0.5, 0, 0.25, 0.5, 1, 1.5, 2, 7, np.inf], np.float32)
EDGE_P = np.array([0.5, 2.5, 0, -1, 1, 0.3, 2, 1.5, 0.5, 2.5, 3, 0.7], np.float32)
DISCRETE_P = np.array([0.3, 0, 1, 1.5, 0.5, -0.2, 0.3, 0.9, 0.1, 0.6, 0.3, 0.7], np.float32)
EDGE_SCALE = np.array([1, 1, 0, 1, -1.5, 1, 2, 1, 0.5, 1, 1, 0], np.float32)
EDGE_Q = np.array([0, 1, -0.1, 1.1, 0.5, 0.25, 0.75, 0.01, 0.99, 0.5, 0.1, 0.9], np.float32)
# Where NaN arguments are not kept NaN by JAX 0.10.2 (a `select` with no NaN branch), we
# return NaN as SciPy does; NaN is left out of the grid.
ELEMENTWISE = sorted(n for n in TABLE)


def _jax_funs(name):
  mod = getattr(jstats, name)
  return [f for f in dir(mod) if not f.startswith("_") and callable(getattr(mod, f))
          and not isinstance(getattr(mod, f), types.ModuleType) and f != "entropy"]


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_edges_match_jax(name):
  ours, theirs = getattr(stats, name), getattr(jstats, name)
  discrete = name in ("binom", "nbinom", "betabinom", "geom", "bernoulli", "wrapcauchy")
  for fn in _jax_funs(name):
    if name == "truncnorm" and fn in ("pdf", "cdf", "sf"):
      continue   # exp of logpdf/logcdf/logsf, and JAX compiles each (slow)
    params = inspect.signature(getattr(theirs, fn)).parameters
    nreq = sum(p.default is inspect.Parameter.empty for p in params.values())
    first = EDGE_Q if fn in ("ppf", "isf") else EDGE_X
    shapes = [np.roll(DISCRETE_P if discrete else EDGE_P, i) for i in range(nreq - 1)]
    if name in ("binom", "nbinom", "betabinom") and shapes:
      shapes[0] = np.roll(EDGE_P, 3) * 2   # n: counts, including 0 and negatives
    kw = dict(scale=EDGE_SCALE) if "scale" in params else {}
    want = np.asarray(getattr(theirs, fn)(first, *shapes, **kw))
    got = np.asarray(getattr(ours, fn)(first, *shapes, **kw))
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5, equal_nan=True,
                               err_msg=f"{name}.{fn}")


def test_nan_arguments_give_nan():
  # JAX 0.10.2 returns 0 or 1 here (a select falling through); SciPy and we return NaN.
  nan = np.float32(np.nan)
  assert np.isnan(stats.uniform.cdf(nan)) and np.isnan(sstats.uniform.cdf(np.nan))
  assert np.isnan(stats.truncnorm.cdf(nan, -1.0, 1.0))
  assert np.isnan(stats.norm.logpdf(nan))


def test_chi2_logpdf_at_zero_with_two_degrees_of_freedom():
  # xlogy(0, 0) = 0: -log 2 as SciPy (JAX 0.10.2 gives NaN).
  np.testing.assert_allclose(stats.chi2.logpdf(0.0, 2.0), sstats.chi2.logpdf(0.0, 2.0),
                             rtol=1e-6)
  assert stats.chi2.logpdf(-1.0, 2.0) == -np.inf


def test_extreme_tails():
  with sc.enable_x64():
    x = np.array([-40.0, -10.0, 10.0, 40.0])
    np.testing.assert_allclose(stats.norm.logcdf(x), sstats.norm.logcdf(x), rtol=1e-10)
    np.testing.assert_allclose(stats.norm.logsf(x), sstats.norm.logsf(x), rtol=1e-10)
    np.testing.assert_allclose(stats.truncnorm.logpdf(x / 4, 5.0, 12.0),
                               sstats.truncnorm.logpdf(x / 4, 5.0, 12.0), rtol=1e-8)
    np.testing.assert_allclose(stats.truncnorm.logcdf(7.0, 5.0, 12.0),
                               sstats.truncnorm.logcdf(7.0, 5.0, 12.0), rtol=1e-8)
    np.testing.assert_allclose(stats.gumbel_r.logsf(x), sstats.gumbel_r.logsf(x), rtol=1e-10)


# --------------------------------------------------------------------------------------
# Names, signatures, dtypes and weak types against JAX


def test_public_names_match_jax():
  want = {n for n in dir(jstats) if not n.startswith("_")}
  have = {n for n in dir(stats) if not n.startswith("_")}
  assert want <= have, want - have
  assert set(stats.__all__) == want
  for name in want:
    if isinstance(getattr(jstats, name), types.ModuleType):
      assert set(_jax_funs(name)) | ({"entropy"} if name == "poisson" else set()) == set(
          getattr(stats, name).__all__), name


@pytest.mark.parametrize("name", sorted(n for n in dir(jstats) if isinstance(
    getattr(jstats, n), types.ModuleType)))
def test_signatures_match_jax(name):
  for fn in getattr(stats, name).__all__:
    want = inspect.signature(getattr(getattr(jstats, name), fn)).parameters
    have = inspect.signature(getattr(getattr(stats, name), fn)).parameters
    assert [(p.name, p.default, p.kind) for p in want.values()] == [
        (p.name, p.default, p.kind) for p in have.values()], f"{name}.{fn}"


DTYPE_INPUTS = {
    "python float": lambda n: [0.3] * n,
    "python int": lambda n: [1] * n,
    "f32 array": lambda n: [np.float32([0.3, 0.6])] + [0.4] * (n - 1),
    "i32 array": lambda n: [np.int32([0, 1])] + [2] * (n - 1),
    "f16 array": lambda n: [np.float16([0.3, 0.6])] + [np.float16(0.4)] * (n - 1),
}


@pytest.mark.parametrize("kind", sorted(DTYPE_INPUTS))
def test_result_dtypes_match_jax(kind):
  for name in ELEMENTWISE:
    for fn in _jax_funs(name) + (["entropy"] if name == "poisson" else []):
      jf = getattr(getattr(jstats, name), fn)
      nreq = sum(p.default is inspect.Parameter.empty
                 for p in inspect.signature(jf).parameters.values())
      args = DTYPE_INPUTS[kind](nreq)
      try:
        want = jax.eval_shape(jf, *args)
      except TypeError:
        with pytest.raises(TypeError):
          sc.eval_shape(getattr(getattr(stats, name), fn), *args)
        continue
      got = sc.eval_shape(getattr(getattr(stats, name), fn), *args)
      assert (got.shape, got.dtype, got.weak_type) == (want.shape, want.dtype,
                                                       want.weak_type), f"{name}.{fn}"


def test_result_dtypes_with_x64():
  with sc.enable_x64():
    f = stats.gamma.logpdf
    assert sc.eval_shape(f, 0.3, 2.0).dtype == np.float64
    assert sc.eval_shape(f, 0.3, 2.0).weak_type
    assert sc.eval_shape(f, np.float32([0.3]), 2.0).dtype == np.float32
    # as JAX's to_inexact_dtype: int32 -> float32, int64 -> float64
    assert sc.eval_shape(f, np.int32([1]), np.int32(2)).dtype == np.float32
    assert sc.eval_shape(f, np.int64([1]), 2.0).dtype == np.float64
    assert sc.eval_shape(stats.norm.ppf, np.float32(0.3)).dtype == np.float64


def test_list_arguments_are_rejected():
  with pytest.raises(TypeError, match=r"norm.logpdf requires ndarray or scalar arguments, "
                                      r"got <class 'list'> at position 0."):
    stats.norm.logpdf([1.0, 2.0])
  with pytest.raises(TypeError, match=r"at position 2"):
    stats.gamma.cdf(1.0, 2.0, None)


def test_norm_ppf_rejects_integers():
  with pytest.raises(TypeError):
    stats.norm.ppf(np.int32(1))


# --------------------------------------------------------------------------------------
# Gradients, jit and vmap


def test_gradients():
  rng = np.random.default_rng(0)
  x = rng.normal(size=N)
  pos = np.abs(x) + 0.5
  with sc.enable_x64():
    check_grads(stats.norm.logpdf, (x, 0.3, 1.7), order=1, modes=("fwd", "rev"))
    check_grads(lambda x, a: stats.gamma.logpdf(x, a, 0.0, 1.3), (pos, 2.5), order=1,
                modes=("fwd", "rev"))
    check_grads(lambda x, df, s: stats.t.logpdf(x, df, 0.2, s), (x, 3.5, 1.1), order=1,
                modes=("fwd", "rev"))
    check_grads(lambda x: stats.norm.logcdf(x, 0.3, 1.7), (x,), order=1, modes=("fwd", "rev"))
    check_grads(lambda x: stats.truncnorm.logpdf(x, -2.0, 2.5), (x / 3,), order=1,
                modes=("fwd", "rev"))
    check_grads(lambda m, c: stats.multivariate_normal.logpdf(
        x[:3], m, c @ c.T + np.eye(3)), (x[3:6], rng.normal(size=(3, 3))), order=1,
        modes=("rev",))
  # gradients stay finite outside the support
  g = sc.grad(lambda x: stats.gamma.logpdf(x, 2.0).sum())(np.float32([-1.0, 1.0]))
  assert np.all(np.isfinite(np.asarray(g)))


def test_jit_and_vmap():
  x = lin(-3, 3).astype(np.float32)
  a = unif(0.5, 4, 20).astype(np.float32)
  eager = stats.gamma.logpdf(x, a)
  np.testing.assert_allclose(sc.jit(stats.gamma.logpdf)(x, a), eager, rtol=1e-6)
  np.testing.assert_allclose(sc.vmap(stats.gamma.logpdf)(x, a), eager, rtol=1e-6)
  np.testing.assert_allclose(sc.vmap(stats.norm.cdf, (0, None))(x, np.float32(0.5)),
                             stats.norm.cdf(x, 0.5), rtol=1e-6)


def test_broadcasting():
  x = lin(-2, 2).astype(np.float32).reshape(3, 4)
  loc = np.float32([0.0, 0.5, 1.0, 1.5])
  scale = np.float32([[1.0], [2.0], [0.5]])
  got = stats.norm.logpdf(x, loc, scale)
  assert got.shape == (3, 4)
  np.testing.assert_allclose(got, sstats.norm.logpdf(x, loc, scale), rtol=1e-5)


# --------------------------------------------------------------------------------------
# Multivariate distributions


def _spd(rng, *batch, n=3):
  a = rng.normal(size=batch + (n, n))
  return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


@pytest.mark.parametrize("x64", [False, True], ids=["f32", "f64"])
def test_multivariate_normal(x64):
  dtype = np.float64 if x64 else np.float32
  rng = np.random.default_rng(1)
  tol = TOL[dtype] if x64 else dict(rtol=1e-4, atol=1e-4)
  cov = _spd(rng).astype(dtype)
  mean = rng.normal(size=3).astype(dtype)
  xs = rng.normal(size=(4, 3)).astype(dtype)
  with sc.enable_x64(x64):
    np.testing.assert_allclose(stats.multivariate_normal.logpdf(xs, mean, cov),
                               sstats.multivariate_normal.logpdf(xs, mean, cov), **tol)
    np.testing.assert_allclose(stats.multivariate_normal.pdf(xs, mean, cov),
                               sstats.multivariate_normal.pdf(xs, mean, cov), **tol)
    covs = _spd(rng, 2).astype(dtype)     # batched covariances broadcast with x
    got = stats.multivariate_normal.logpdf(xs[:, None, :], mean, covs)
    assert got.shape == (4, 2)
    for j in range(2):
      np.testing.assert_allclose(got[:, j], sstats.multivariate_normal.logpdf(xs, mean, covs[j]),
                                 **tol)
    np.testing.assert_allclose(stats.multivariate_normal.logpdf(xs, mean, dtype(2.0)),
                               sstats.multivariate_normal.logpdf(xs, mean, 2.0 * np.eye(3)),
                               **tol)
    np.testing.assert_allclose(stats.multivariate_normal.logpdf(xs[:, 0], dtype(0.5), 2.0),
                               sstats.norm.logpdf(xs[:, 0], 0.5, np.sqrt(2.0)), **tol)


def test_multivariate_normal_errors():
  with pytest.raises(NotImplementedError, match="allow_singular"):
    stats.multivariate_normal.logpdf(np.zeros(2), np.zeros(2), np.eye(2), allow_singular=True)
  with pytest.raises(ValueError, match="incompatible shapes"):
    stats.multivariate_normal.logpdf(np.zeros(2), np.zeros(2), np.eye(3))


def test_dirichlet():
  rng = np.random.default_rng(2)
  alpha = np.float32([1.5, 2.0, 3.0])
  xs = rng.dirichlet(alpha, N).T.astype(np.float32)
  xs64 = xs.astype(np.float64)
  want = sstats.dirichlet.logpdf(xs64 / xs64.sum(0), alpha)
  np.testing.assert_allclose(stats.dirichlet.logpdf(xs, alpha), want, rtol=1e-4)
  np.testing.assert_allclose(stats.dirichlet.logpdf(xs[:2], alpha), want, rtol=1e-3)
  np.testing.assert_allclose(stats.dirichlet.pdf(xs, alpha), np.exp(want), rtol=1e-3)
  off = xs.copy()
  off[0, 0] += 0.1                       # no longer sums to 1
  assert stats.dirichlet.logpdf(off, alpha)[0] == -np.inf
  with pytest.raises(ValueError, match="one-dimensional"):
    stats.dirichlet.logpdf(xs, alpha[None])
  with pytest.raises(ValueError, match="one entry fewer"):
    stats.dirichlet.logpdf(xs[:1], alpha)


def test_multinomial():
  p = np.float32([0.25, 0.25, 0.5])     # exact in float32: SciPy checks the sum
  x = np.array([[2, 3, 5], [0, 0, 10], [1, 1, 1]])
  got = stats.multinomial.logpmf(x, 10, p)
  want = sstats.multinomial.logpmf(x[:2], 10, p.astype(np.float64))
  np.testing.assert_allclose(got[:2], want[:2], rtol=1e-5)
  assert got[2] == -np.inf               # counts do not add up to n
  np.testing.assert_allclose(stats.multinomial.pmf(x[0], 10, p), np.exp(want[0]), rtol=1e-5)
  with pytest.raises(ValueError, match="integer type"):
    stats.multinomial.logpmf(x.astype(np.float32), 10, p)


def test_poisson_entropy():
  mu = np.array([0.0, 0.3, 2.0, 9.9, 10.0, 40.0, 99.0, 100.0, 250.0, 900.0, 0.1, 5.0])
  np.testing.assert_allclose(stats.poisson.entropy(mu.astype(np.float32)),
                             sstats.poisson.entropy(mu), rtol=2e-5, atol=1e-6)
  with sc.enable_x64():
    np.testing.assert_allclose(stats.poisson.entropy(mu), sstats.poisson.entropy(mu),
                               rtol=1e-9, atol=1e-12)
  assert stats.poisson.entropy(np.float32([1.0, 2.0]), np.zeros((3, 1))).shape == (3, 2)


# --------------------------------------------------------------------------------------
# gaussian_kde


@pytest.mark.parametrize("bw", [None, "silverman", 0.4, "callable"])
def test_gaussian_kde_matches_scipy(bw):
  rng = np.random.default_rng(3)
  data = rng.normal(size=(2, 30))
  weights = rng.uniform(0.5, 1.5, size=30)
  pts = rng.normal(size=(2, 5))
  bw_method = (lambda k: k.neff ** (-1.0 / 7)) if bw == "callable" else bw
  with sc.enable_x64():
    ours = stats.gaussian_kde(data, bw_method=bw_method, weights=weights)
    ref = sstats.gaussian_kde(data, bw_method=(lambda k: k.neff ** (-1.0 / 7))
                              if bw == "callable" else bw, weights=weights)
    for attr in ("covariance", "inv_cov", "weights", "neff", "dataset"):
      np.testing.assert_allclose(getattr(ours, attr), getattr(ref, attr), rtol=1e-10)
    assert (ours.d, ours.n) == (2, 30)
    np.testing.assert_allclose(ours.evaluate(pts), ref.evaluate(pts), rtol=1e-10)
    np.testing.assert_allclose(ours(pts), ref(pts), rtol=1e-10)
    np.testing.assert_allclose(ours.pdf(pts), ref.pdf(pts), rtol=1e-10)
    np.testing.assert_allclose(ours.logpdf(pts), ref.logpdf(pts), rtol=1e-10)
    np.testing.assert_allclose(ours.integrate_gaussian(np.zeros(2), np.eye(2)),
                               ref.integrate_gaussian(np.zeros(2), np.eye(2)), rtol=1e-10)
    other = stats.gaussian_kde(data[:, :10])
    np.testing.assert_allclose(ours.integrate_kde(other),
                               ref.integrate_kde(sstats.gaussian_kde(data[:, :10])),
                               rtol=1e-10)


def test_gaussian_kde_1d_float32():
  rng = np.random.default_rng(4)
  data = rng.normal(size=40).astype(np.float32)
  ours, ref = stats.gaussian_kde(data), sstats.gaussian_kde(data)
  x = lin(-3, 3).astype(np.float32)
  got = ours.evaluate(x)
  assert got.dtype == np.float32 and got.shape == (N,)
  np.testing.assert_allclose(got, ref.evaluate(x), rtol=1e-5)
  np.testing.assert_allclose(ours.logpdf(np.float32([40.0])), ref.logpdf([40.0]), rtol=1e-4)
  np.testing.assert_allclose(ours.integrate_box_1d(-0.5, 1.0), ref.integrate_box_1d(-0.5, 1.0),
                             rtol=1e-5)


def test_gaussian_kde_is_a_pytree_and_resamples_as_jax():
  rng = np.random.default_rng(5)
  data = rng.normal(size=(2, 20)).astype(np.float32)
  w = rng.uniform(size=20).astype(np.float32)
  ours, theirs = stats.gaussian_kde(data, weights=w), jstats.gaussian_kde(data, weights=w)
  pts = data[:, :4]
  np.testing.assert_allclose(sc.jit(lambda k, p: k.logpdf(p))(ours, pts), theirs.logpdf(pts),
                             rtol=1e-5)
  leaves = sc.tree_util.tree_leaves(ours)
  assert len(leaves) == 5
  got = ours.resample(random.PRNGKey(3), (6,))
  want = theirs.resample(jax.random.PRNGKey(3), (6,))
  assert got.shape == want.shape and got.dtype == want.dtype
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gaussian_kde_errors():
  kde = stats.gaussian_kde(np.float32([[0.0, 1.0, 3.0], [1.0, 0.5, 2.0]]))
  with pytest.raises(ValueError, match="multiple elements"):
    stats.gaussian_kde(np.float32([1.0]))
  with pytest.raises(ValueError, match="`bw_method` should be"):
    stats.gaussian_kde(np.float32([1.0, 2.0, 4.0]), bw_method="nope")
  with pytest.raises(ValueError, match="should be of length n"):
    stats.gaussian_kde(np.float32([1.0, 2.0, 4.0]), weights=np.float32([1.0, 2.0]))
  with pytest.raises(NotImplementedError, match="complex"):
    stats.gaussian_kde(np.complex64([1.0, 2.0, 4.0]))
  with pytest.raises(ValueError, match="points have dimension 3, dataset has dimension 2"):
    kde.evaluate(np.zeros((3, 2), np.float32))
  with pytest.raises(ValueError, match="only handles 1D"):
    kde.integrate_box_1d(0.0, 1.0)
  with pytest.raises(ValueError, match="mean does not have dimension 2"):
    kde.integrate_gaussian(np.zeros(3), np.eye(2))
  with pytest.raises(ValueError, match="not the same dimensionality"):
    kde.integrate_kde(stats.gaussian_kde(np.float32([1.0, 2.0, 4.0])))
  with pytest.raises(NotImplementedError, match="integrate_box_1d"):
    kde.integrate_box(np.zeros(2), np.ones(2))
  with pytest.raises(NotImplementedError, match="bandwidth"):
    kde.set_bandwidth("scott")


# --------------------------------------------------------------------------------------
# mode, rankdata, sem


def test_mode():
  rng = np.random.default_rng(6)
  a = rng.integers(0, 4, size=(5, 6)).astype(np.float32)
  for axis, keepdims in ((0, False), (-1, True), (None, False), (None, True)):
    got = stats.mode(a, axis=axis, keepdims=keepdims)
    want = sstats.mode(a, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(got.mode, want.mode)
    np.testing.assert_array_equal(got.count, want.count)
    jw = jax.eval_shape(lambda a: jstats.mode(a, axis=axis, keepdims=keepdims), a)
    assert [(r.dtype, r.shape) for r in got] == [(r.dtype, r.shape) for r in jw]
  # ties: the smallest value; NaNs count as one value (as JAX)
  got = stats.mode(np.float32([3, 1, 3, 1, np.nan, np.nan, np.nan, 2, np.nan, 9, 9, 9]))
  assert np.isnan(got.mode) and int(got.count) == 4
  got = stats.mode(np.int32([5, 2, 5, 2, 7, 2, 5, 0, 0, 0, 1, 1]))
  assert (int(got.mode), int(got.count)) == (0, 3)
  empty = stats.mode(np.zeros((0, 3), np.float32))
  assert np.all(np.isnan(empty.mode)) and empty.count.shape == (3,)
  assert stats.mode(np.float32(3.0)).mode == 3.0


def test_rankdata():
  rng = np.random.default_rng(7)
  a = rng.integers(0, 5, size=(4, 6)).astype(np.float32)
  for method, axis in (("average", None), ("min", 1), ("max", 1), ("dense", 1),
                       ("ordinal", 1), ("average", 1), ("dense", 0)):
    got = stats.rankdata(a, method, axis=axis)
    np.testing.assert_array_equal(got, sstats.rankdata(a, method, axis=axis))
    assert got.dtype == np.float32
  b = a.copy()
  b[1, 2] = np.nan
  got = stats.rankdata(b, axis=1)
  assert np.all(np.isnan(got[1])) and not np.any(np.isnan(got[0]))
  assert np.all(np.isnan(stats.rankdata(b)))
  np.testing.assert_array_equal(stats.rankdata(np.int32([3, 1, 3])), [2.5, 1.0, 2.5])


def test_sem():
  rng = np.random.default_rng(8)
  b = rng.normal(size=(4, 5)).astype(np.float32)
  for axis in (0, 1, None):
    np.testing.assert_allclose(stats.sem(b, axis=axis), sstats.sem(b, axis=axis), rtol=1e-5)
    np.testing.assert_allclose(stats.sem(b, axis=axis, ddof=0), sstats.sem(b, axis=axis, ddof=0),
                               rtol=1e-5)
  assert stats.sem(b, keepdims=True).shape == (1, 5)
  b[1, 2] = np.nan
  np.testing.assert_allclose(stats.sem(b, nan_policy="omit"),
                             sstats.sem(b, nan_policy="omit"), rtol=1e-5)
  assert np.isnan(stats.sem(b)[2])
  with sc.enable_x64():
    assert stats.sem(np.arange(5)).dtype == np.float64


def test_nan_policy_and_method_errors():
  a = np.float32([1.0, 2.0])
  with pytest.raises(ValueError, match="Illegal nan_policy value 'bad'"):
    stats.mode(a, nan_policy="bad")
  with pytest.raises(NotImplementedError, match="nan_policy"):
    stats.mode(a, nan_policy="omit")
  with pytest.raises(NotImplementedError, match="cannot know whether"):
    stats.rankdata(a, nan_policy="raise")
  with pytest.raises(ValueError, match="unknown method 'bogus'"):
    stats.rankdata(a, "bogus")
  with pytest.raises(ValueError, match="raise is not supported"):
    stats.sem(a, nan_policy="raise")
  with pytest.raises(ValueError, match="out of bounds"):
    stats.mode(a, axis=2)
