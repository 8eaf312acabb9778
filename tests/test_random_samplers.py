"""Every sampler of stagecraft.random against jax.random (the oracle) for the same keys:
bit-identical for the samplers JAX specifies bit by bit, within a few ulps for those whose
last step is a transcendental function; x64 off and on, typed and raw keys, eager, under
jit and under vmap. Also the public names (every name of `jax.random`), the 64-bit seeds
and bits of x64, the samplers added for JAX parity (multivariate_normal, orthogonal,
multinomial) with their statistics and errors, and gumbel's 'highest' mode."""
import contextlib

import jax
import jax.random as jr
import numpy as np
import pytest

import stagecraft as sc
from stagecraft import random as r
from stagecraft.test_util import check_grads

# JAX warns where an explicit 64-bit dtype is truncated without x64 (stagecraft does not).
pytestmark = pytest.mark.filterwarnings("ignore:Explicitly requested dtype")

SEEDS = [0, 1234567]
_P = np.array([0.1, 0.2, 0.3, 0.4])
_COV = np.array([[2., .5, .1], [.5, 1., .2], [.1, .2, .5]])
_MEAN = np.array([1., -1., 0.])
_ALPHA = np.array([0.3, 1., 2.5])
_N = np.tile([3., 20., 500., 10000.], 16)   # trials for multinomial: inversion and BTRS

# (name, sampler(module, key), exact): `exact` samplers are compared bit for bit; the
# others to a few ulps (XLA may round exp/log/pow differently when it fuses differently).
CASES = [
    ("bits", lambda m, k: m.bits(k, (5,)), True),
    ("bits_u8", lambda m, k: m.bits(k, (2, 3), "uint8"), True),
    ("bits_u64", lambda m, k: m.bits(k, (4,), "uint64"), True),
    ("uniform", lambda m, k: m.uniform(k, (7,)), True),
    ("uniform_bf16", lambda m, k: m.uniform(k, (7,), "bfloat16", -2., 3.), True),
    ("uniform_f16", lambda m, k: m.uniform(k, (3,), "float16"), True),
    ("uniform_f64", lambda m, k: m.uniform(k, (2, 3), "float64", 1., 2.), True),
    ("normal", lambda m, k: m.normal(k, (6,)), True),
    ("normal_f32", lambda m, k: m.normal(k, (6,), "float32"), True),
    ("normal_c", lambda m, k: m.normal(k, (3,), "complex128"), True),
    ("randint", lambda m, k: m.randint(k, (6,), -3, 100), True),
    ("randint_u8", lambda m, k: m.randint(k, (6,), 0, 256, "uint8"), True),
    ("randint_i64", lambda m, k: m.randint(k, (6,), -2**40, 2**41, "int64"), True),
    ("randint_full_span", lambda m, k: m.randint(k, (6,), -2**31, 2**31, "int32"), True),
    ("randint_arr", lambda m, k: m.randint(k, (2, 3), np.array([0, 5, 10]), 20), True),
    ("permutation", lambda m, k: m.permutation(k, 9), True),
    ("permutation_2d", lambda m, k: m.permutation(k, np.arange(12.).reshape(3, 4), 1), True),
    ("permutation_ind", lambda m, k: m.permutation(k, np.arange(12).reshape(3, 4), 0, True),
     True),
    ("choice", lambda m, k: m.choice(k, 10, (4,)), True),
    ("choice_norep", lambda m, k: m.choice(k, np.arange(8.), (3,), False), True),
    ("choice_p", lambda m, k: m.choice(k, 4, (5,), True, _P), True),
    ("choice_p_norep", lambda m, k: m.choice(k, 4, (3,), False, _P, mode="high"), True),
    ("bernoulli", lambda m, k: m.bernoulli(k, 0.3, (8,)), True),
    ("bernoulli_high", lambda m, k: m.bernoulli(k, np.float32(1e-3), (8,), "high"), True),
    ("rademacher", lambda m, k: m.rademacher(k, (8,)), True),
    ("categorical", lambda m, k: m.categorical(k, np.log(_P), shape=(5,)), False),
    ("categorical_norep", lambda m, k: m.categorical(k, np.log(_P), shape=(3,),
                                                     replace=False), False),
    ("gumbel", lambda m, k: m.gumbel(k, (5,)), False),
    ("gumbel_high", lambda m, k: m.gumbel(k, (5,), mode="high"), False),
    ("gumbel_highest", lambda m, k: m.gumbel(k, (64,), "float32", mode="highest"), False),
    ("truncated_normal", lambda m, k: m.truncated_normal(k, -1., 2., (5,)), False),
    ("laplace", lambda m, k: m.laplace(k, (5,)), False),
    ("logistic", lambda m, k: m.logistic(k, (5,)), False),
    ("exponential", lambda m, k: m.exponential(k, (5,)), False),
    ("cauchy", lambda m, k: m.cauchy(k, (5,)), False),
    ("maxwell", lambda m, k: m.maxwell(k, (5,)), False),
    ("double_sided_maxwell", lambda m, k: m.double_sided_maxwell(k, 1., 2., (5,)), False),
    ("pareto", lambda m, k: m.pareto(k, 3., (5,)), False),
    ("weibull_min", lambda m, k: m.weibull_min(k, 2., 1.5, (5,)), False),
    ("lognormal", lambda m, k: m.lognormal(k, 0.5, (5,)), False),
    ("rayleigh", lambda m, k: m.rayleigh(k, 2., (5,)), False),
    ("triangular", lambda m, k: m.triangular(k, 0., 0.3, 2., (5,)), False),
    ("wald", lambda m, k: m.wald(k, 1.5, (5,)), False),
    ("geometric", lambda m, k: m.geometric(k, 0.3, (5,)), False),
    ("poisson", lambda m, k: m.poisson(k, np.array([0.5, 3., 30., 200.])), False),
    ("binomial", lambda m, k: m.binomial(k, np.array([5., 40., 300.]), 0.3), False),
    ("multinomial", lambda m, k: m.multinomial(k, _N, _P, shape=(64, 4)), False),
    ("gamma", lambda m, k: m.gamma(k, _ALPHA), False),
    ("loggamma", lambda m, k: m.loggamma(k, _ALPHA), False),
    ("beta", lambda m, k: m.beta(k, 2., 0.5, (3,)), False),
    ("dirichlet", lambda m, k: m.dirichlet(k, _ALPHA, (2,)), False),
    ("t", lambda m, k: m.t(k, 3., (4,)), False),
    ("chisquare", lambda m, k: m.chisquare(k, 3., (4,)), False),
    ("f", lambda m, k: m.f(k, 3., 5., (4,)), False),
    ("generalized_normal", lambda m, k: m.generalized_normal(k, 1.5, (4,)), False),
    ("ball", lambda m, k: m.ball(k, 3, 2., (2,)), False),
    ("multivariate_normal", lambda m, k: m.multivariate_normal(k, _MEAN, _COV, (4,)), False),
    ("multivariate_normal_svd", lambda m, k: m.multivariate_normal(
        k, _MEAN, _COV, (2,), method="svd"), False),
    ("orthogonal", lambda m, k: m.orthogonal(k, 3, (2,)), False),
    ("orthogonal_wide", lambda m, k: m.orthogonal(k, 2, (), m=4), False),
]
# Loop-based samplers that compose `gamma` (compared with JAX in x32 by
# tests/test_random_gamma.py; here x64 is checked by abstract evaluation, which compiles
# nothing).
_GAMMA_COMPOSITES = {"loggamma", "beta", "dirichlet", "t", "chisquare", "f",
                     "generalized_normal", "ball"}
# The samplers added for JAX parity, also compared without x64.
_NEW = ["gumbel_highest", "choice_p_norep", "multinomial", "multivariate_normal",
        "multivariate_normal_svd", "orthogonal", "orthogonal_wide"]
_COMPARED = [c for c in CASES if c[0] not in _GAMMA_COMPOSITES]


@contextlib.contextmanager
def _x64(on: bool):
  with sc.enable_x64(on), jax.enable_x64(on):
    yield


def _same(actual, expected, exact):
  actual, expected = np.asarray(actual), np.asarray(expected)
  assert (actual.shape, actual.dtype) == (expected.shape, expected.dtype)
  if exact or not np.issubdtype(actual.dtype, np.inexact):
    np.testing.assert_array_equal(actual, expected)
    return
  if np.iscomplexobj(actual):
    actual, expected = actual.view(actual.real.dtype), expected.view(expected.real.dtype)
  eps = float(np.finfo(actual.dtype).eps) if actual.dtype.itemsize >= 4 else 2.**-7
  np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                             rtol=16 * eps, atol=16 * eps)


@pytest.mark.parametrize("name,fn,exact", _COMPARED, ids=[c[0] for c in _COMPARED])
def test_sampler_matches_jax_under_x64(name, fn, exact):
  # A typed and a raw key (the same compiled program: only the key data differ).
  with _x64(True):
    _same(fn(r, r.key(SEEDS[0])), fn(jr, jr.key(SEEDS[0])), exact)
    _same(fn(r, r.PRNGKey(SEEDS[1])), fn(jr, jr.PRNGKey(SEEDS[1])), exact)


@pytest.mark.parametrize("name,fn,exact", [c for c in CASES if c[0] in _NEW],
                         ids=[c[0] for c in CASES if c[0] in _NEW])
def test_new_sampler_matches_jax_without_x64(name, fn, exact):
  with _x64(False):
    _same(fn(r, r.key(SEEDS[0])), fn(jr, jr.key(SEEDS[0])), exact)
    _same(fn(r, r.PRNGKey(SEEDS[1])), fn(jr, jr.PRNGKey(SEEDS[1])), exact)


@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
def test_gamma_composites_trace_with_jax_avals(x64):
  with _x64(x64):
    for name, fn, _ in CASES:
      if name in _GAMMA_COMPOSITES:
        ours = sc.eval_shape(lambda k: fn(r, k), r.PRNGKey(0))
        theirs = jax.eval_shape(lambda k: fn(jr, k), jr.PRNGKey(0))
        assert (ours.shape, ours.dtype) == (theirs.shape, theirs.dtype), name


_STAGED = ["bits_u64", "uniform_f64", "randint", "randint_i64", "choice_p", "rademacher",
           "gumbel_highest", "multivariate_normal"]


@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
def test_samplers_under_jit_and_vmap_match_jax(x64):
  staged = [c for c in CASES if c[0] in _STAGED and (x64 or not c[0].endswith("i64"))]
  fns, exact = [fn for _, fn, _ in staged], [ex for _, _, ex in staged]

  def draw(m, k):
    return [fn(m, m.fold_in(k, i)) for i, fn in enumerate(fns)]
  with _x64(x64):
    # jit over a typed or raw key; vmap over the other kind (each key its own samples).
    k, jk = (r.key(5), jr.key(5)) if x64 else (r.PRNGKey(5), jr.PRNGKey(5))
    for ours, theirs, ex in zip(sc.jit(lambda k: draw(r, k))(k), draw(jr, jk), exact):
      _same(ours, theirs, ex)
    keys, jkeys = ((r.split(r.PRNGKey(3), 2), jr.split(jr.PRNGKey(3), 2)) if x64 else
                   (r.split(r.key(3), 2), jr.split(jr.key(3), 2)))
    for ours, theirs, ex in zip(sc.vmap(lambda k: draw(r, k))(keys),
                                jax.vmap(lambda k: draw(jr, k))(jkeys), exact):
      _same(ours, theirs, ex)


def test_loop_samplers_under_jit_and_vmap_with_x64():
  def draw(m, k):
    return [m.gamma(k, _ALPHA), m.poisson(m.fold_in(k, 1), np.array([2., 40.]))]
  with _x64(True):
    for ours, theirs in zip(sc.jit(sc.vmap(lambda k: draw(r, k)))(r.split(r.key(8), 2)),
                            jax.vmap(lambda k: draw(jr, k))(jr.split(jr.key(8), 2))):
      _same(ours, theirs, False)


def test_every_jax_random_name_exists():
  missing = [n for n in dir(jr) if not n.startswith("_") and not hasattr(r, n)]
  # NB: `random_gamma_p`, JAX's gamma primitive, is stagecraft's too (lax/random_gamma.py)
  assert missing == []
  assert r.random_gamma_p.name == "random_gamma"
  assert {"multinomial", "multivariate_normal", "orthogonal"} <= set(r.__all__)


@pytest.mark.parametrize("seed", [2**40 + 3, -1, -2**63, np.int64(-7), np.uint64(2**64 - 1),
                                  np.int32(-5), np.uint32(7), 2**31])
def test_seeds_under_x64_use_both_words(seed):
  with _x64(True):
    expected = np.asarray(jr.PRNGKey(seed))
    np.testing.assert_array_equal(np.asarray(r.PRNGKey(seed)), expected)
    np.testing.assert_array_equal(np.asarray(r.key_data(r.key(seed))), expected)
    np.testing.assert_array_equal(np.asarray(sc.jit(r.PRNGKey)(np.asarray(seed))),
                                  np.asarray(jax.jit(jr.PRNGKey)(np.asarray(seed))))
  with _x64(False):   # without x64 only the low 32 bits count
    if not isinstance(seed, np.integer) or seed.dtype.itemsize < 8:
      np.testing.assert_array_equal(np.asarray(r.PRNGKey(seed)), np.asarray(jr.PRNGKey(seed)))


def test_default_dtypes_follow_x64():
  def dtype_of(f):
    return sc.eval_shape(f, r.PRNGKey(0)).dtype
  with _x64(True):
    assert dtype_of(r.bits) == np.uint64
    for f in [r.uniform, r.normal, r.gumbel, lambda k: r.orthogonal(k, 2),
              lambda k: r.multinomial(k, 3., _P), lambda k: r.binomial(k, 3., 0.5)]:
      assert dtype_of(f) == np.float64
    for f in [lambda k: r.randint(k, (), 0, 3), lambda k: r.poisson(k, 2.), r.rademacher,
              lambda k: r.choice(k, 5, (2,)), lambda k: r.geometric(k, 0.5)]:
      assert dtype_of(f) == np.int64
  with _x64(False):
    assert dtype_of(r.bits) == np.uint32 and dtype_of(r.normal) == np.float32
    assert dtype_of(lambda k: r.bits(k, (), "uint64")) == np.uint32   # as JAX
    assert dtype_of(lambda k: r.multinomial(k, 5., _P.astype(np.float16))) == np.float32
    assert dtype_of(lambda k: r.multinomial(k, 5., _P, dtype=np.int32)) == np.int32


def test_fold_in_under_x64():
  with _x64(True):
    k, jk = r.PRNGKey(0), jr.PRNGKey(0)
    for d in [np.int64(-1), np.int64(2**40 + 3), np.uint64(2**63), 5]:
      np.testing.assert_array_equal(np.asarray(r.fold_in(k, d)), np.asarray(jr.fold_in(jk, d)))
    with pytest.raises(OverflowError):
      r.fold_in(k, 2**33)


def test_multivariate_normal_statistics_and_batching():
  k = r.key(11)
  x = np.asarray(r.multivariate_normal(k, _MEAN, _COV, (20000,), method="eigh"), np.float64)
  np.testing.assert_allclose(x.mean(0), _MEAN, atol=0.05)
  np.testing.assert_allclose(np.cov(x.T), _COV, atol=0.06)
  # Batch shapes broadcast: mean (2, 1, 3) with cov (2, 3, 3) gives (2, 2, 3).
  mean, cov = np.zeros((2, 1, 3)), np.stack([_COV, 2 * _COV])
  out = r.multivariate_normal(k, mean, cov)
  assert out.shape == (2, 2, 3) and out.dtype == np.float32
  _same(out, jr.multivariate_normal(jr.key(11), mean, cov), False)
  # The result has the promoted dtype of mean, cov and the draws' dtype.
  assert r.multivariate_normal(k, _MEAN.astype(np.float32), _COV, dtype=np.float16).dtype \
      == np.float32


def test_multivariate_normal_gradients():
  # Reparameterized: d/d(mean, cov) of mean + cholesky(cov) z, as JAX.
  def f(m, k):
    return lambda mean, cov: m.multivariate_normal(k, mean, cov, (2,)).sum()
  with _x64(True):
    check_grads(lambda mean, cov: r.multivariate_normal(r.key(1), mean, cov, (2,)),
                (_MEAN, _COV), order=1, modes=("fwd", "rev"))
    ours = sc.grad(f(r, r.key(1)), argnums=(0, 1))(_MEAN, _COV)
    theirs = jax.grad(f(jr, jr.key(1)), argnums=(0, 1))(_MEAN, _COV)
    for a, b in zip(ours, theirs):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)


def test_multivariate_normal_errors():
  k = r.key(0)
  with pytest.raises(ValueError, match="method must be one of"):
    r.multivariate_normal(k, _MEAN, _COV, method="qr")
  with pytest.raises(ValueError, match="mean.ndim >= 1"):
    r.multivariate_normal(k, 0., _COV)
  with pytest.raises(ValueError, match="cov.ndim >= 2"):
    r.multivariate_normal(k, _MEAN, np.ones(3))
  with pytest.raises(ValueError, match=r"cov.shape == \(..., n, n\) for n=3"):
    r.multivariate_normal(k, _MEAN, np.eye(2))
  with pytest.raises(ValueError, match="must be a float dtype"):
    r.multivariate_normal(k, _MEAN, _COV, dtype=np.int32)
  with pytest.raises(ValueError, match="broadcast"):
    r.multivariate_normal(k, np.zeros((3, 3)), _COV, shape=(2,))


@pytest.mark.parametrize("n,m,dtype", [(4, None, np.float32), (5, 3, np.float32),
                                       (2, 5, np.float32), (3, None, np.complex64)])
def test_orthogonal_is_orthogonal(n, m, dtype):
  q = np.asarray(r.orthogonal(r.key(2), n, (3,), dtype, m), np.complex128)
  assert q.shape == (3, n, n if m is None else m) and r.orthogonal(r.key(2), n, (), dtype,
                                                                    m).dtype == dtype
  mm = n if m is None else m
  gram = q.conj().swapaxes(-1, -2) @ q if n >= mm else q @ q.conj().swapaxes(-1, -2)
  np.testing.assert_allclose(gram, np.broadcast_to(np.eye(min(n, mm)), gram.shape), atol=1e-5)


def test_orthogonal_haar_statistics():
  # For Haar-distributed O(n), E[Q_ij] = 0 and E[Q_ij^2] = 1/n (sign correction matters:
  # without it the diagonal of Q has a positive mean).
  q = np.asarray(r.orthogonal(r.key(4), 3, (4000,)), np.float64)
  np.testing.assert_allclose(q.mean(0), 0, atol=0.04)
  np.testing.assert_allclose((q ** 2).mean(0), 1 / 3, atol=0.03)


def test_multinomial_counts_and_errors():
  k = r.key(SEEDS[0])   # NB: the program compiled by test_new_sampler_matches_jax_without_x64
  counts = np.asarray(r.multinomial(k, _N, _P, shape=(64, 4)))
  np.testing.assert_array_equal(counts.sum(-1), _N)
  assert (counts >= 0).all()
  big = counts[_N == 10000.]
  np.testing.assert_allclose(big.mean(0) / 10000, _P, atol=6e-3)
  with pytest.raises(ValueError, match="broadcast"):
    r.multinomial(k, np.ones(3), _P, shape=(2, 4))
  with pytest.raises(ValueError, match="at least one axis"):
    r.multinomial(k, 3., 0.5)


def test_gumbel_highest_tails():
  # 'highest' resolves u below 2**-32 and 1 - u below 2**-24, so its samples reach both
  # tails further than 'low' ever can (max of 'low' float32 is about 16.6).
  g = np.asarray(r.gumbel(r.key(0), (1 << 16,), mode="highest"))
  assert np.isfinite(g).all()
  np.testing.assert_allclose(g.mean(), np.euler_gamma, atol=0.02)
  with pytest.raises(ValueError, match="valid mode"):
    r.gumbel(r.key(0), (2,), mode="higher")
  with pytest.raises(ValueError, match="valid mode"):
    r.choice(r.key(0), 4, (2,), replace=False, p=_P, mode="higher")
  r.choice(r.key(0), 4, (2,), mode="higher")   # as JAX: the mode is unused here


def test_uniform_f64_and_bits_u64_use_both_words():
  with _x64(True):
    b = np.asarray(r.bits(r.PRNGKey(1), (2000,), "uint64"))
    # The high and low words both vary (a 32-bit draw widened would leave the top 0).
    assert (b >> np.uint64(32)).max() > 2**31 and (b & np.uint64(0xFFFFFFFF)).max() > 2**31
    u = np.asarray(r.uniform(r.PRNGKey(1), (2000,), "float64"))
    frac = u * 2.**52
    assert (frac != np.round(frac / 2**29) * 2**29).any()   # more than 23 mantissa bits
    with pytest.raises(ValueError, match="unsigned int dtype"):
      r.bits(r.PRNGKey(1), (2,), "int64")
