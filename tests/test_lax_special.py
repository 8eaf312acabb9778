"""stagecraft.lax.special against SciPy (values) and JAX (bits: the lowerings are JAX's, so
XLA computes the same numbers; avals and messages): eager and staged runs, the abstract eval
against what executes, poles, domain edges, special values, float16/bfloat16 (computed in
float32 where JAX does) and float64 (with x64 on)."""
import os
import sys
import warnings
from typing import Callable, NamedTuple

import jax
import numpy as np
import pytest
import scipy.special as sp
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from stagecraft import core, lax
from stagecraft.config import enable_x64
from stagecraft.interpreters import lowering, partial_eval as pe

sys.path.insert(0, os.path.dirname(__file__))
from _util import staged_call  # noqa: E402

from _cases import FLOATS, bf16, c64, f16, f32, f64, i32  # noqa: E402

# Tolerances against SciPy (|out - ref| <= atol + rtol |ref|), measured with margin: the
# CHLO/Cephes approximations are a few ulps off in float32; float16/bfloat16 round the result.
TOL = {f32: dict(rtol=5e-5, atol=5e-5), f16: dict(rtol=2e-3, atol=2e-3),
       bf16: dict(rtol=1e-2, atol=1e-2), f64: dict(rtol=1e-12, atol=1e-13)}


def _polygamma_ref(m, x):
  with np.errstate(invalid="ignore"):
    ok = (m >= 0) & (m == np.floor(m))
    return np.where(ok, sp.polygamma(np.where(ok, m, 0).astype(np.int64), x), np.nan)


def _digamma_ref(x):
  """scipy.special.digamma, but NaN at every pole (XLA's choice; SciPy gives -inf at 0)."""
  return np.where((x <= 0) & (x == np.floor(x)), np.nan, sp.digamma(x))


class Record(NamedTuple):
  """`domains`: one (lo, hi) per operand; `integral`: operands drawn as integers (polygamma's
  order m)."""
  name: str
  ref: Callable
  domains: tuple
  integral: tuple = ()


RECORDS = [
    Record("lgamma", sp.gammaln, ((-10, 30),)),
    Record("digamma", _digamma_ref, ((-10, 30),)),
    Record("polygamma", _polygamma_ref, ((0, 4), (0.1, 10)), integral=(0,)),
    Record("bessel_i0e", sp.i0e, ((-50, 50),)),
    Record("bessel_i1e", sp.i1e, ((-50, 50),)),
    Record("igamma", sp.gammainc, ((0.01, 30), (0, 40))),
    Record("igammac", sp.gammaincc, ((0.01, 30), (0, 40))),
]
SHAPES = [(), (0,), (4,), (2, 3)]


def _jax(name, *args):
  return np.asarray(getattr(jax.lax, name)(*args))


def _bits(x):
  x = np.asarray(x)
  return x.view(f"u{x.dtype.itemsize}")


def _assert_same_bits(actual, expected, msg=""):
  actual, expected = np.asarray(actual), np.asarray(expected)
  assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape), msg
  np.testing.assert_array_equal(_bits(actual), _bits(expected), err_msg=msg)


def _assert_close(out, ref, dtype, msg=""):
  out = np.asarray(out).astype(np.float64)
  if dtype in (f16, bf16):  # round the reference first: values past the range become inf
    with np.errstate(over="ignore"):
      ref = np.asarray(ref).astype(dtype)
  ref = np.asarray(ref, np.float64)
  np.testing.assert_array_equal(np.isnan(out), np.isnan(ref), err_msg=msg)
  np.testing.assert_allclose(out, ref, equal_nan=True, err_msg=msg, **TOL[dtype])


def _check(rec: Record, args, against_jax=True):
  op = getattr(lax, rec.name)
  dtype = args[0].dtype
  msg = f"{rec.name} on {[(a.dtype.name, a.shape) for a in args]}: {args}"
  out = op(*args)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    expected = jax.eval_shape(getattr(jax.lax, rec.name), *args)
  assert (out.shape, out.dtype, out.aval.weak_type) == (
      expected.shape, expected.dtype, expected.weak_type), msg
  with np.errstate(all="ignore"):
    ref = rec.ref(*np.broadcast_arrays(*[a.astype(np.float64) for a in args]))
  _assert_close(out, ref, dtype, msg)
  if against_jax:
    _assert_same_bits(out, _jax(rec.name, *args), msg + " (vs JAX)")
  _assert_same_bits(staged_call(op, *args), out, msg + " (staged)")
  jaxpr, _ = pe.trace_to_jaxpr(lambda *a: [op(*a)], [core.get_aval(a) for a in args])
  assert jaxpr.out_avals[0] == out.aval, (jaxpr.out_avals[0], out.aval)
  return out


@st.composite
def _operands(draw, rec: Record, dtype):
  n = len(rec.domains)
  shapes = draw(st.sampled_from([(s,) * n for s in SHAPES] +
                                ([((), (4,)), ((2, 3), ())] if n == 2 else [])))
  args = []
  for i, ((lo, hi), shape) in enumerate(zip(rec.domains, shapes)):
    if i in rec.integral:
      el = st.integers(lo, hi)
    else:
      # NB: no subnormals: XLA's CPU backend reads them as zero (lgamma(1e-40) = inf), as JAX.
      el = st.floats(float(np.float32(lo)), float(np.float32(hi)), width=32,
                     allow_subnormal=False)
    x = draw(hnp.arrays(np.float64 if i in rec.integral else f32, shape, elements=el))
    args.append(x.astype(dtype))
  return args


_CHEAP = [r for r in RECORDS if not r.name.startswith("igamma")]
_LOOPS = [r for r in RECORDS if r.name.startswith("igamma")]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("rec", _CHEAP, ids=lambda r: r.name)
@settings(max_examples=5)
@given(data=st.data())
def test_special_matches_scipy_and_jax(rec, dtype, data):
  _check(rec, data.draw(_operands(rec, dtype), label="operands"))


# NB: igamma/igammac compile two while loops (~0.4 s a program, JAX's ~0.6 s), so they get
# fewer examples, and their bits are compared with JAX's in the fixed tests below.
@pytest.mark.parametrize("dtype", (f32, bf16), ids=str)
@pytest.mark.parametrize("rec", _LOOPS, ids=lambda r: r.name)
@settings(max_examples=3)
@given(data=st.data())
def test_incomplete_gamma_matches_scipy(rec, dtype, data):
  _check(rec, data.draw(_operands(rec, dtype), label="operands"), against_jax=False)


@pytest.mark.parametrize("rec", RECORDS, ids=lambda r: r.name)
def test_special_float64(rec):
  rng = np.random.default_rng(0)
  with enable_x64():
    args = []
    for i, (lo, hi) in enumerate(rec.domains):
      args.append(rng.integers(lo, hi, 64).astype(f64) if i in rec.integral
                  else rng.uniform(lo, hi, 64))
    out = getattr(lax, rec.name)(*args)
    assert out.dtype == f64
    with np.errstate(all="ignore"):
      _assert_close(out, rec.ref(*args), f64)
    if rec in _CHEAP:
      _assert_same_bits(staged_call(getattr(lax, rec.name), *args), out)


# ---------------------------------------------------------------------------
# Edge cases: poles, zeros, infinities, NaN, domain errors (JAX's bits, SciPy's values where
# they agree).

_INF, _NAN = np.inf, np.nan


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_lgamma_poles_and_negative_arguments(dtype):
  x = np.array([0.0, -0.0, -1.0, -2.0, -7.0, -0.5, -1.5, -2.5, -9.75, 1.0, 2.0, 0.5,
                _INF, -_INF, _NAN, 1e-3], f32).astype(dtype)
  out = lax.lgamma(x)
  _assert_same_bits(out, _jax("lgamma", x))
  o = np.asarray(out).astype(np.float64)
  assert np.all(o[:5] == _INF), o[:5]       # poles: +inf, as scipy.special.gammaln
  assert o[12] == _INF and o[13] == _INF and np.isnan(o[14])
  with np.errstate(all="ignore"):
    ref = sp.gammaln(x.astype(np.float64))
  _assert_close(o[5:12], ref[5:12], dtype)  # log|Γ(x)| for negative non-integers
  assert np.all(np.abs(o[9:11]) < 5e-4 if dtype != bf16 else 2e-2)  # log Γ(1) = log Γ(2) = 0


@pytest.mark.parametrize("dtype", (f32, bf16), ids=str)
def test_digamma_poles_and_values(dtype):
  x = np.array([0.0, -1.0, -3.0, 1.0, 0.5, -0.5, 1.4616321, _INF, _NAN], f32).astype(dtype)
  out = lax.digamma(x)
  _assert_same_bits(out, _jax("digamma", x))
  o = np.asarray(out).astype(np.float64)
  # NB: NaN at every pole (XLA); scipy.special.digamma gives -inf at 0.
  assert np.all(np.isnan(o[:3])) and o[7] == _INF and np.isnan(o[8])
  _assert_close(o[3:7], sp.digamma(x[3:7].astype(np.float64)), dtype)
  assert abs(o[6]) < 1e-6 if dtype == f32 else True  # the positive root of ψ


def test_polygamma_orders_and_invalid_orders():
  x = np.array([0.5, 1.0, 2.5, 7.0], f32)
  for m in range(4):
    out = lax.polygamma(np.float32(m), x)
    _assert_close(out, sp.polygamma(m, x.astype(np.float64)), f32)
  _assert_same_bits(lax.polygamma(np.float32(0), x), lax.digamma(x))
  bad = np.array([0.5, -1.0, _NAN, 1.0], f32)
  out = np.asarray(lax.polygamma(bad, np.array([1.0, 1.0, 1.0, _NAN], f32)))
  assert np.all(np.isnan(out)), out
  _assert_same_bits(out, _jax("polygamma", bad, np.array([1.0, 1.0, 1.0, _NAN], f32)))
  # As JAX: a Python float order is float32; a Python int order is int32 (rejected).
  assert lax.polygamma(1.0, x).dtype == f32
  with pytest.raises(TypeError, match="polygamma does not accept dtype int32 at position 0"):
    lax.polygamma(1, x)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_bessel_special_values_and_symmetry(dtype):
  x = np.array([0.0, -0.0, 1e-3, 7.99, 8.0, 8.01, 100.0, 1e4, _INF, -_INF, _NAN], f32
               ).astype(dtype)
  i0, i1 = np.asarray(lax.bessel_i0e(x)), np.asarray(lax.bessel_i1e(x))
  _assert_same_bits(i0, _jax("bessel_i0e", x))
  _assert_same_bits(i1, _jax("bessel_i1e", x))
  _assert_same_bits(lax.bessel_i0e(-x), i0)                 # even
  _assert_same_bits(lax.bessel_i1e(-x)[2:], -i1[2:])        # odd (-0.0 checked below)
  o0, o1 = i0.astype(np.float64), i1.astype(np.float64)
  assert abs(o0[0] - 1.0) < 1e-6 if dtype == f32 else abs(o0[0] - 1.0) < 1e-2
  assert o1[0] == 0.0
  assert o0[8] == 0.0 and o0[9] == 0.0 and o1[8] == 0.0 and np.isnan(o0[10])
  _assert_close(o0[:8], sp.i0e(x[:8].astype(np.float64)), dtype)
  _assert_close(o1[:8], sp.i1e(x[:8].astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", (f32, f16), ids=str)
def test_igamma_domain_edges(dtype):
  cases = [  # (a, x, P(a, x)); Q = 1 - P except where noted
      (1.0, 0.0, 0.0), (2.5, 0.0, 0.0), (1.0, _INF, 1.0), (30.0, _INF, 1.0),
      (0.0, 0.0, _NAN), (-1.0, 1.0, _NAN), (1.0, -1.0, _NAN), (_NAN, 1.0, _NAN),
      (1.0, _NAN, _NAN), (1.0, 1.0, 1 - np.exp(-1.0)), (0.5, 1e-6, sp.gammainc(0.5, 1e-6)),
      (100.0, 100.0, sp.gammainc(100.0, 100.0)), (1e-3, 50.0, 1.0),
  ]
  a = np.array([c[0] for c in cases], f32).astype(dtype)
  x = np.array([c[1] for c in cases], f32).astype(dtype)
  p, q = np.asarray(lax.igamma(a, x)), np.asarray(lax.igammac(a, x))
  _assert_same_bits(p, _jax("igamma", a, x))
  _assert_same_bits(q, _jax("igammac", a, x))
  want = np.array([c[2] for c in cases])
  _assert_close(p, want, dtype)
  _assert_close(q, np.where(np.isnan(want), _NAN, 1 - want), dtype)
  # a == 0 and x > 0: Q is 0, as JAX (scipy.special.gammaincc(0, x) = 0 too).
  assert float(lax.igammac(np.float32(0), np.float32(2))) == 0.0
  # The upper tail keeps its relative accuracy where 1 - P would round to 0.
  tail = float(lax.igammac(np.float32(1), np.float32(30)))
  assert tail > 0 and abs(tail / np.exp(-30.0) - 1) < 1e-5


def test_igamma_loops_converge_per_element():
  """One array mixes elements that need the series, the continued fraction, many and few
  iterations; each still matches SciPy (the while loop masks converged elements), and
  P + Q = 1."""
  rng = np.random.default_rng(1)
  a = np.concatenate([rng.uniform(1e-3, 1, 20), rng.uniform(50, 500, 20),
                      rng.uniform(1, 20, 20)]).astype(f32)
  x = np.concatenate([rng.uniform(0, 2, 20), a[20:40] * rng.uniform(0.8, 1.2, 20),
                      rng.uniform(20, 80, 20)]).astype(f32)
  outs = []
  for name, ref in (("igamma", sp.gammainc), ("igammac", sp.gammaincc)):
    outs.append(np.asarray(getattr(lax, name)(a, x), np.float64))
    np.testing.assert_allclose(outs[-1], ref(a.astype(np.float64), x.astype(np.float64)),
                               rtol=2e-4, atol=2e-5)
  np.testing.assert_allclose(outs[0] + outs[1], 1.0, atol=5e-6)


# ---------------------------------------------------------------------------
# Avals, weak types, lowering, errors


def test_weak_types_and_scalars():
  assert lax.lgamma(2.0).aval == core.ShapedArray((), f32, True)
  assert lax.igamma(1.0, 2.0).aval == core.ShapedArray((), f32, True)
  x = np.array([1.0, 2.0], f16)
  with pytest.raises(TypeError, match="lax.igamma requires arguments to have the same "
                                      "dtypes, got float16, float32."):
    lax.igamma(x, 2.0)   # as JAX: the Python float is float32, not promoted
  out = lax.igamma(x, f16.type(2.0))
  assert out.aval == core.ShapedArray((2,), f16, False)
  _assert_close(out, sp.gammainc([1.0, 2.0], 2.0), f16)
  out = lax.igammac(np.float32(2.0), np.array([1.0, 3.0], f32))  # rank-0 `a` broadcasts
  assert out.shape == (2,)


def test_lowerings_are_jaxs():
  def text(f, *avals):
    jaxpr, _ = pe.trace_to_jaxpr(lambda *a: [f(*a)], list(avals))
    return lowering.lower_jaxpr_to_module("f", jaxpr)
  a32, a16 = core.ShapedArray((3,), f32), core.ShapedArray((3,), f16)
  assert '"chlo.lgamma"' in text(lax.lgamma, a32)
  assert '"chlo.digamma"' in text(lax.digamma, a32)
  assert '"chlo.polygamma"' in text(lax.polygamma, a32, a32)
  assert '"chlo.bessel_i1e"' in text(lax.bessel_i1e, a16)
  i0e = text(lax.bessel_i0e, a16)   # computed in float32
  assert "chlo" not in i0e and "-> tensor<3xf32>" in i0e and "stablehlo.convert" in i0e
  ig = text(lax.igamma, a16, a16)
  assert ig.count('"stablehlo.while"') == 2 and '"chlo.lgamma"' in ig
  assert ig.count('"stablehlo.while"') == text(lax.igammac, a32, a32).count('"stablehlo.while"')
  jaxpr, _ = pe.trace_to_jaxpr(lambda a, x: [lax.igamma(a, x)], [a32, a32])
  assert str(jaxpr) == "{ lambda ; a:f32[3] b:f32[3]. let c:f32[3] = igamma a b in (c,) }"


_UNARY = ["lgamma", "digamma", "bessel_i0e", "bessel_i1e"]
_BINARY = ["polygamma", "igamma", "igammac"]


@pytest.mark.parametrize("name", _UNARY + _BINARY)
def test_dtype_errors_match_jax(name):
  n = 1 if name in _UNARY else 2
  for dt in (i32, c64):
    args = (np.ones(3, dt),) * n
    with pytest.raises(TypeError) as ours:
      getattr(lax, name)(*args)
    with pytest.raises(TypeError) as theirs:
      getattr(jax.lax, name)(*args)
    assert str(ours.value) == str(theirs.value).split("\n")[0]
  at = " at position 0" if n == 2 else ""
  with pytest.raises(TypeError, match=rf"^{name} does not accept dtype int32{at}\. Accepted "
                     rf"dtypes{at} are subtypes of floating\.$"):
    getattr(lax, name)(*(np.ones(3, i32),) * n)


@pytest.mark.parametrize("name", _BINARY)
def test_binary_mismatch_errors(name):
  with pytest.raises(TypeError, match=rf"^lax\.{name} requires arguments to have the same "
                     rf"dtypes, got float32, float16\.$"):
    getattr(lax, name)(np.ones(3, f32), np.ones(3, f16))
  with pytest.raises(TypeError, match=rf"{name} got incompatible shapes for broadcasting"):
    getattr(lax, name)(np.ones(3, f32), np.ones(2, f32))


def test_public_names_and_docstrings():
  for name in _UNARY + _BINARY:
    f = getattr(lax, name)
    assert "Returns:" in f.__doc__ and "Raises:" in f.__doc__, name
    p = getattr(lax, f"{name}_p")
    assert isinstance(p, core.Primitive) and p.name == name
