"""stagecraft.random and lax/random_bits.py against jax.random (the oracle for random bits):
the same keys give bit-identical integers and allclose floats, for several seeds; key
handling (raw and typed keys, jit), eager vs staged runs, abstract evals, statistics, and
error messages."""
import os
import sys

import jax
import ml_dtypes
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.extend.random import threefry2x32_p as jax_threefry2x32_p

import stagecraft as sc
from stagecraft import core, lax, random
from stagecraft.interpreters import partial_eval as pe

sys.path.insert(0, os.path.dirname(__file__))
from _util import staged_call  # noqa: E402

from _cases import bf16, f16, f32, u8, u16, u32  # noqa: E402
SEEDS = [0, 1, 42, 2**31 - 1, 123456789]
FLOAT_DTYPES = [f32, bf16, f16]


def _ours_theirs(seed):
  return random.PRNGKey(seed), jax.random.PRNGKey(seed)


def _same(actual, expected, exact):
  """Integers and bools bit for bit; floats within a few ulps of their dtype (the
  transcendental functions XLA calls may round differently when fused differently)."""
  actual, expected = np.asarray(actual), np.asarray(expected)
  assert actual.shape == expected.shape and actual.dtype == expected.dtype, (
      actual.shape, actual.dtype, expected.shape, expected.dtype)
  if exact or not np.issubdtype(actual.dtype, np.inexact) and actual.dtype != bf16:
    np.testing.assert_array_equal(actual, expected)
  else:
    eps = float(ml_dtypes.finfo(actual.dtype).eps) if actual.dtype in (f16, bf16) else 1e-6
    if np.iscomplexobj(actual):
      actual, expected = actual.view(np.float32), expected.view(np.float32)
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                               rtol=4 * eps, atol=4 * eps)


# ---------------------------------------------------------------------------
# Keys


@pytest.mark.parametrize("seed", [0, 1, 42, -1, -2**31, 2**31, 2**32 + 7, 2**40, 2**63 - 1,
                                  np.int32(-5), np.uint32(2**32 - 1), np.int8(-3),
                                  np.uint8(200)])
def test_prng_key_matches_jax(seed):
  ours = random.PRNGKey(seed)
  np.testing.assert_array_equal(np.asarray(ours), np.asarray(jax.random.PRNGKey(seed)))
  assert ours.dtype == u32 and ours.shape == (2,)
  np.testing.assert_array_equal(np.asarray(random.key_data(random.key(seed))),
                                np.asarray(jax.random.key_data(jax.random.key(seed))))


def test_prng_key_under_jit_matches_jax():
  for seed in [np.int32(-3), np.int32(7), np.uint32(2**32 - 2)]:
    ours = sc.jit(random.PRNGKey)(seed)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(jax.jit(jax.random.PRNGKey)(seed)))


@pytest.mark.parametrize("seed", SEEDS)
def test_split_and_fold_in_match_jax(seed):
  k, jk = _ours_theirs(seed)
  for num in [2, 3, 1, 0, (2, 3), (4, 1, 2)]:
    _same(random.split(k, num), jax.random.split(jk, num), True)
  for data in [0, 1, 7, 2**32 - 1, np.int32(-1), np.uint8(255)]:
    _same(random.fold_in(k, data), jax.random.fold_in(jk, data), True)
  # chains of splits and folds
  a, b = random.split(random.fold_in(random.split(k)[1], 3))
  ja, jb = jax.random.split(jax.random.fold_in(jax.random.split(jk)[1], 3))
  _same(a, ja, True)
  _same(b, jb, True)


def test_typed_keys_print_and_behave_like_jax():
  k, jk = random.key(0), jax.random.key(0)
  assert repr(k) == repr(jk) == "Array((), dtype=key<fry>) overlaying:\n[0 0]"
  assert str(k.dtype) == str(jk.dtype) == "key<fry>"
  ks, jks = random.split(k, 3), jax.random.split(jk, 3)
  assert repr(ks) == repr(jks)
  assert ks.shape == (3,) and ks.ndim == 1 and len(ks) == 3 and k.shape == ()
  assert isinstance(ks[1], random.PRNGKeyArray) and ks[1].shape == ()
  _same(random.key_data(ks[1:]), jax.random.key_data(jks[1:]), True)
  _same(random.key_data(list(ks)[2]), jax.random.key_data(list(jks)[2]), True)
  _same(random.key_data(random.fold_in(k, 5)), jax.random.key_data(jax.random.fold_in(jk, 5)),
        True)
  data = random.key_data(ks)
  assert bool(random.wrap_key_data(data[0]) == ks[0])
  assert not bool(random.wrap_key_data(data[0]) != ks[0])
  assert random.key_impl(k) == random.key_impl(random.PRNGKey(0)) == "threefry2x32"
  # samplers accept typed and raw keys alike
  _same(random.normal(k, (3,)), random.normal(random.PRNGKey(0), (3,)), True)
  with pytest.raises(TypeError, match="cannot be converted to a NumPy array"):
    np.asarray(k)
  with pytest.raises(TypeError, match="key array cannot be converted to boolean"):
    bool(k)
  with pytest.raises(TypeError, match="len\\(\\) of unsized object"):
    len(k)


def test_typed_keys_pass_through_jit():
  f = sc.jit(lambda k: (random.split(k), random.uniform(k, (2,))))
  ks, u = f(random.key(3))
  assert isinstance(ks, random.PRNGKeyArray) and ks.shape == (2,)
  _same(random.key_data(ks), jax.random.key_data(jax.random.split(jax.random.key(3))), True)
  _same(u, jax.random.uniform(jax.random.key(3), (2,)), True)
  # raw keys stay raw under jit
  out = sc.jit(random.split)(random.PRNGKey(3))
  assert not isinstance(out, random.PRNGKeyArray) and out.shape == (2, 2)


# ---------------------------------------------------------------------------
# Samplers vs jax.random: (name, call with (module, key) -> array, exact?)

_LOGITS = np.log(np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]], np.float32))
_X = np.arange(12, dtype=np.float32).reshape(3, 4)
_P = np.array([0.1, 0.0, 0.3, 0.6], np.float32)

SAMPLERS = [
    ("bits_u32", lambda r, k: r.bits(k, (3, 5)), True),
    ("bits_u8", lambda r, k: r.bits(k, (7,), np.uint8), True),
    ("bits_u16", lambda r, k: r.bits(k, (2, 2), np.uint16), True),
    ("uniform", lambda r, k: r.uniform(k, (4, 5)), True),
    ("uniform_bounds", lambda r, k: r.uniform(k, (3, 4), minval=-2., maxval=np.arange(4.)),
     False),
    ("normal", lambda r, k: r.normal(k, (4, 5)), False),
    ("normal_c64", lambda r, k: r.normal(k, (5,), np.complex64), False),
    ("randint", lambda r, k: r.randint(k, (20,), 0, 10), True),
    ("randint_neg", lambda r, k: r.randint(k, (3, 4), -5, np.array([0, 3, 100, 2**31 - 1])),
     True),
    ("randint_full", lambda r, k: r.randint(k, (10,), -2**31, 2**31 - 1), True),
    ("randint_u8", lambda r, k: r.randint(k, (10,), 0, 256, np.uint8), True),
    ("randint_i8", lambda r, k: r.randint(k, (10,), -100, 100, np.int8), True),
    ("randint_empty_range", lambda r, k: r.randint(k, (5,), 3, 3), True),
    ("bernoulli", lambda r, k: r.bernoulli(k, 0.3, (30,)), True),
    ("bernoulli_p", lambda r, k: r.bernoulli(k, np.array([0.1, 0.9], np.float32)), True),
    ("bernoulli_high", lambda r, k: r.bernoulli(k, np.float32(0.3), (10,), mode="high"), True),
    ("categorical", lambda r, k: r.categorical(k, _LOGITS), True),
    ("categorical_shape", lambda r, k: r.categorical(k, _LOGITS, shape=(5, 2)), True),
    ("categorical_axis0", lambda r, k: r.categorical(k, _LOGITS, axis=0, shape=(4, 3)), True),
    ("categorical_norepl", lambda r, k: r.categorical(k, _LOGITS, shape=(3, 2), replace=False),
     True),
    ("choice", lambda r, k: r.choice(k, 10, (6,)), True),
    ("choice_norepl", lambda r, k: r.choice(k, 10, (2, 3), replace=False), True),
    ("choice_array", lambda r, k: r.choice(k, _X, (2, 5), axis=1), True),
    ("choice_array_norepl", lambda r, k: r.choice(k, _X, (2,), replace=False), True),
    ("choice_p", lambda r, k: r.choice(k, 4, (25,), p=_P), True),
    ("choice_p_norepl", lambda r, k: r.choice(k, _X, (3,), replace=False, p=_P, axis=1), True),
    ("permutation", lambda r, k: r.permutation(k, 10), True),
    ("permutation_2_rounds", lambda r, k: r.permutation(k, 2000), True),
    ("permutation_array", lambda r, k: r.permutation(k, _X, axis=1), True),
    ("permutation_independent", lambda r, k: r.permutation(k, _X, 1, independent=True), True),
    ("truncated_normal", lambda r, k: r.truncated_normal(k, -1., 2., (10,)), False),
    ("truncated_normal_bcast", lambda r, k: r.truncated_normal(k, np.array([-1., 0.]), 3.),
     False),
    ("gumbel", lambda r, k: r.gumbel(k, (10,)), False),
    ("gumbel_high", lambda r, k: r.gumbel(k, (10,), mode="high"), False),
    ("laplace", lambda r, k: r.laplace(k, (10,)), False),
    ("logistic", lambda r, k: r.logistic(k, (10,)), False),
    ("exponential", lambda r, k: r.exponential(k, (10,)), False),
    ("cauchy", lambda r, k: r.cauchy(k, (10,)), False),
    ("rademacher", lambda r, k: r.rademacher(k, (10,)), True),
    ("maxwell", lambda r, k: r.maxwell(k, (6,)), False),
    ("double_sided_maxwell", lambda r, k: r.double_sided_maxwell(k, 1., 2., (6,)), False),
    ("pareto", lambda r, k: r.pareto(k, 3., (6,)), False),
    ("lognormal", lambda r, k: r.lognormal(k, 0.5, (6,)), False),
    ("rayleigh", lambda r, k: r.rayleigh(k, 2., (6,)), False),
    ("weibull_min", lambda r, k: r.weibull_min(k, 2., 1.5, (6,)), False),
    ("triangular", lambda r, k: r.triangular(k, np.zeros(3), 1., 3.), False),
    ("wald", lambda r, k: r.wald(k, 2., (6,)), False),
    ("geometric", lambda r, k: r.geometric(k, np.array([0.1, 0.5, 0.9], np.float32)), True),
]


@pytest.mark.parametrize("name,call,exact", SAMPLERS, ids=[s[0] for s in SAMPLERS])
def test_sampler_matches_jax_for_several_seeds(name, call, exact):
  for seed in SEEDS:
    k, jk = _ours_theirs(seed)
    _same(call(random, k), call(jax.random, jk), exact)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", ["uniform", "normal", "truncated_normal", "gumbel",
                                  "exponential", "laplace", "logistic"])
def test_float_samplers_in_16_and_32_bits_match_jax(name, dtype):
  args = ((-1.5, 2.) if name == "truncated_normal" else ())
  for seed in SEEDS[:3]:
    k, jk = _ours_theirs(seed)
    ours = getattr(random, name)(k, *args, shape=(3, 4), dtype=dtype)
    theirs = getattr(jax.random, name)(jk, *args, shape=(3, 4), dtype=dtype)
    _same(ours, theirs, name == "uniform")


@settings(max_examples=8)
@given(shape=st.sampled_from([(), (1,), (5,), (2, 3), (3, 1, 2), (0,), (2, 0)]),
       dtype=st.sampled_from([u8, u16, u32, f32, bf16, f16]),
       seed=st.integers(-2**31, 2**31 - 1))
def test_bits_and_uniform_match_jax_on_drawn_shapes(shape, dtype, seed):
  k, jk = _ours_theirs(seed)
  if np.issubdtype(dtype, np.unsignedinteger):
    _same(random.bits(k, shape, dtype), jax.random.bits(jk, shape, dtype), True)
  else:
    _same(random.uniform(k, shape, dtype), jax.random.uniform(jk, shape, dtype), True)


def test_samplers_under_jit_and_staged_match_eager():
  k = random.PRNGKey(11)
  for fun in [lambda k: random.normal(k, (3, 2)),
              lambda k: random.randint(k, (4,), 0, 7),
              lambda k: random.permutation(k, 6)]:
    eager = fun(k)
    np.testing.assert_array_equal(np.asarray(sc.jit(fun)(k)), np.asarray(eager))
    np.testing.assert_array_equal(np.asarray(staged_call(fun, k)), np.asarray(eager))


def test_abstract_eval_matches_executed():
  k = random.PRNGKey(0)
  for fun in [lambda k: random.uniform(k, (2, 3), bf16), lambda k: random.bits(k, (4,), u8),
              lambda k: random.randint(k, (5,), 0, 3, np.int16),
              lambda k: random.bernoulli(k, 0.5, (2,)), lambda k: random.split(k, (2, 2))]:
    jaxpr, _ = pe.trace_to_jaxpr(lambda k: [fun(k)], [core.get_aval(k)])
    out = fun(k)
    assert jaxpr.out_avals[0] == out.aval, (jaxpr.out_avals[0], out.aval)


# ---------------------------------------------------------------------------
# The primitives


@settings(max_examples=8)
@given(shape=st.sampled_from([(), (3,), (2, 4), (0,)]), seed=st.integers(0, 2**16))
def test_threefry2x32_matches_jax_primitive(shape, seed):
  rng = np.random.default_rng(seed)
  args = [rng.integers(0, 2**32, shape, dtype=np.uint32) for _ in range(4)]
  expected = [np.asarray(y) for y in jax_threefry2x32_p.bind(*args)]
  for actual in (lax.threefry2x32(*args), staged_call(lambda *a: lax.threefry2x32(*a), *args)):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
      _same(a, e, True)
  # rank-0 keys broadcast against the counts, as in JAX
  if shape:
    out = lax.threefry2x32(args[0].reshape(-1)[:1].reshape(()) if args[0].size else
                           np.uint32(0), np.uint32(5), args[2], args[3])
    assert out[0].shape == shape


def test_threefry2x32_known_answer():
  # The Random123 known-answer vector for Threefry-2x32 with 20 rounds (key 0, counter 0).
  y = [int(v) for v in lax.threefry2x32(*[np.uint32(0)] * 4)]
  assert y == [0x6B200159, 0x99BA4EFE]


def test_iota_2x32_shape():
  hi, lo = lax.iota_2x32_shape((3, 4))
  np.testing.assert_array_equal(np.asarray(lo), np.arange(12, dtype=np.uint32).reshape(3, 4))
  np.testing.assert_array_equal(np.asarray(hi), np.zeros((3, 4), np.uint32))
  jaxpr, _ = pe.trace_to_jaxpr(lambda: lax.iota_2x32_shape((2,)), [])
  assert [a.str_short() for a in jaxpr.out_avals] == ["u32[2]", "u32[2]"]


@pytest.mark.parametrize("algorithm", list(lax.RandomAlgorithm), ids=str)
@pytest.mark.parametrize("dtype", [u8, u16, u32], ids=str)
def test_rng_bit_generator_matches_jax(algorithm, dtype):
  key = np.array([1, 2, 3, 4], np.uint32)
  ours = lax.rng_bit_generator(key, (3, 5), dtype, algorithm)
  theirs = jax.lax.rng_bit_generator(key, (3, 5), dtype,
                                     jax.lax.RandomAlgorithm(int(algorithm)))
  assert len(ours) == len(theirs)
  for a, e in zip(ours, theirs):
    _same(a, e, True)
  staged = staged_call(lambda k: list(lax.rng_bit_generator(k, (3, 5), dtype, algorithm)), key)
  _same(staged[1], theirs[1], True)


def test_primitive_errors():
  with pytest.raises(TypeError, match=r"Arguments to threefry2x32 must have uint32 type, got "
                                      r"i32\[3\]"):
    lax.threefry2x32(np.zeros(3, np.int32), *[np.zeros(3, np.uint32)] * 3)
  with pytest.raises(TypeError, match="threefry2x32 got incompatible shapes"):
    lax.threefry2x32(*[np.zeros(3, np.uint32)] * 3, np.zeros(2, np.uint32))
  with pytest.raises(TypeError, match=r"the key must be u32\[4\]"):
    lax.rng_bit_generator(np.zeros(2, np.uint32), (3,))
  with pytest.raises(TypeError, match="rng_bit_generator: unsupported dtype int32"):
    lax.rng_bit_generator(np.zeros(4, np.uint32), (3,), np.int32)


# ---------------------------------------------------------------------------
# Statistics


def test_statistical_sanity():
  k = random.PRNGKey(2024)
  n = 100_000
  u = np.asarray(random.uniform(k, (n,)), np.float64)
  assert u.min() >= 0 and u.max() < 1
  assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
  z = np.asarray(random.normal(k, (n,)), np.float64)
  assert abs(z.mean()) < 0.016 and abs(z.std() - 1) < 0.01   # ~5 standard errors
  assert abs(np.mean(z ** 3)) < 0.06 and abs(np.mean(z ** 4) - 3) < 0.16
  counts = np.bincount(np.asarray(random.randint(k, (n,), 0, 10)), minlength=10)
  chi2 = ((counts - n / 10) ** 2 / (n / 10)).sum()
  assert chi2 < 40, chi2   # 9 degrees of freedom: P(chi2 > 40) < 1e-5
  b = np.asarray(random.bernoulli(k, 0.3, (n,)))
  assert abs(b.mean() - 0.3) < 0.008
  e = np.asarray(random.exponential(k, (n,)), np.float64)
  assert e.min() >= 0 and abs(e.mean() - 1) < 0.016
  t = np.asarray(random.truncated_normal(k, -0.5, 1.0, (n,)))
  assert t.min() > -0.5 and t.max() < 1.0
  p = np.asarray(random.permutation(k, 1000))
  np.testing.assert_array_equal(np.sort(p), np.arange(1000))
  c = np.asarray(random.choice(k, 50, (50,), replace=False))
  assert len(set(c.tolist())) == 50
  # different keys give different streams, and bits are roughly balanced
  b1, b2 = (np.asarray(random.bits(kk, (4096,))) for kk in random.split(k))
  assert not np.array_equal(b1, b2)
  ones = np.unpackbits(b1.view(np.uint8)).mean()
  assert abs(ones - 0.5) < 0.01


# ---------------------------------------------------------------------------
# Errors (messages as JAX's)


@pytest.mark.parametrize("call,err,match", [
    (lambda: random.normal(random.split(random.PRNGKey(0)), (2,)), ValueError,
     r"normal accepts a single key, but was given a key array of shape \(2, 2\) != \(\)"),
    (lambda: random.split(random.split(random.key(0))), ValueError,
     r"split accepts a single key, but was given a key array of shape \(2,\) != \(\)"),
    (lambda: random.normal(np.zeros(3, np.uint32), (2,)), TypeError,
     r"expected key_data.shape to end with \(2,\); got shape=\(3,\)"),
    (lambda: random.normal(np.zeros(2, np.int32), (2,)), TypeError,
     r"expected key_data.dtype = uint32; got dtype=int32"),
    (lambda: random.PRNGKey(1.5), TypeError, "PRNG key seed must be an integer"),
    (lambda: random.PRNGKey(np.array([1, 2])), TypeError,
     r"PRNGKey accepts a scalar seed, but was given an array of shape \(2,\) != \(\)"),
    (lambda: random.key(random.key(0)), TypeError, "key accepts a scalar seed, but was given "
                                                  "a PRNG key"),
    (lambda: random.PRNGKey(2**64), OverflowError, "int"),
    (lambda: random.fold_in(random.PRNGKey(0), -1), OverflowError,
     "Python integer -1 out of bounds for uint32"),
    (lambda: random.fold_in(random.PRNGKey(0), np.arange(2)), TypeError,
     "fold_in accepts a scalar"),
    (lambda: random.uniform(random.PRNGKey(0), (2,), np.int32), ValueError,
     "dtype argument to `uniform` must be a float dtype, got int32"),
    (lambda: random.normal(random.PRNGKey(0), (2,), np.int32), ValueError,
     "dtype argument to `normal` must be a float or complex dtype, got int32"),
    (lambda: random.bits(random.PRNGKey(0), (2,), np.int32), ValueError,
     "dtype argument to `bits` must be an unsigned int dtype, got int32"),
    (lambda: random.randint(random.PRNGKey(0), (2,), 0, 3, np.float32), TypeError,
     "randint only accepts integer dtypes, got float32"),
    (lambda: random.bernoulli(random.PRNGKey(0), np.int32(1)), TypeError,
     "bernoulli probability `p` must have a floating dtype"),
    (lambda: random.bernoulli(random.PRNGKey(0), 0.5, (2,), mode="mid"), ValueError,
     "expected 'high' or 'low'"),
    (lambda: random.gumbel(random.PRNGKey(0), (2,), mode="x"), ValueError,
     "Must provide valid mode for gumbel got: x"),
    # NB: as JAX, samplers take an int shape (`uniform(key, 3)`: shape (3,)); choice not
    (lambda: random.choice(random.PRNGKey(0), 3, 5), TypeError,
     "shape argument of stagecraft.random.choice must be a sequence"),
    (lambda: random.choice(random.PRNGKey(0), 3, (5,), replace=False), ValueError,
     r"Cannot take a larger sample \(size 5\) than population \(size 3\) when "
     r"'replace=False'"),
    (lambda: random.choice(random.PRNGKey(0), 3, 5), TypeError,
     "shape argument of stagecraft.random.choice must be a sequence"),
    (lambda: random.choice(random.PRNGKey(0), 3, (2,), p=np.ones(4)), ValueError,
     "p must be None or a 1D vector with the same size as a.shape"),
    (lambda: random.choice(random.PRNGKey(0), 0, (2,)), ValueError,
     "a must be greater than 0 unless no samples are taken"),
    (lambda: random.categorical(random.PRNGKey(0), np.zeros((2, 3)), shape=(4, 3)), ValueError,
     "Incompatible shapes for broadcasting"),
    (lambda: random.categorical(random.PRNGKey(0), np.zeros((2, 3)), shape=(2, 1)), ValueError,
     "categorical parameter shapes must be broadcast-compatible"),
    (lambda: random.categorical(random.PRNGKey(0), np.zeros(3), shape=(4,), replace=False),
     ValueError, r"Number of samples without replacement \(4\) cannot exceed number of "
                 r"categories \(3\)"),
    (lambda: random.permutation(random.PRNGKey(0), 2.5), TypeError,
     "x must be an integer or at least 1-dimensional"),
    (lambda: random.truncated_normal(random.PRNGKey(0), np.zeros(3), 1., (2,)), ValueError,
     "Incompatible shapes for broadcasting"),
    (lambda: random.truncated_normal(random.PRNGKey(0), np.zeros(3), 1., (1,)), ValueError,
     "truncated_normal parameter shapes must be broadcast-compatible"),
])
def test_errors(call, err, match):
  with pytest.raises(err, match=match):
    call()


def test_error_messages_match_jax_where_shared():
  cases = [
      (lambda r: r.normal(r.split(r.PRNGKey(0)), (2,)), ValueError),
      (lambda r: r.uniform(r.PRNGKey(0), (2,), np.int32), ValueError),
      (lambda r: r.choice(r.PRNGKey(0), 3, (5,), replace=False), ValueError),
      (lambda r: r.fold_in(r.PRNGKey(0), -1), OverflowError),
  ]
  for call, err in cases:
    with pytest.raises(err) as ours:
      call(random)
    with pytest.raises(err) as theirs:
      call(jax.random)
    # Same wording as JAX's, with our API named where JAX names its own (jax.vmap, ...).
    assert str(ours.value) == re.sub(r"\bjax\.", "stagecraft.", str(theirs.value))


def test_empty_draws():
  k, jk = _ours_theirs(0)
  _same(random.choice(k, 5, (0,)), jax.random.choice(jk, 5, (0,)), True)
  _same(random.normal(k, (0, 3)), jax.random.normal(jk, (0, 3)), True)
  _same(random.permutation(k, 0), jax.random.permutation(jk, 0), True)
  _same(random.permutation(k, 1), jax.random.permutation(jk, 1), True)
