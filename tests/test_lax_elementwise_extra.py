"""The bit ops, clamp, nextafter, reduce_precision and complex-number primitives of
stagecraft.lax.elementwise, against NumPy (and JAX where NumPy has no match): eager and
staged runs, the abstract eval against what executes, edge cases and error messages.

Each case checks: eager `lax.<name>(*args)` against the reference; the result's shape,
dtype and weak type against `jax.eval_shape(jax.lax.<name>, ...)`; staged (trace -> lower ->
compile -> execute) against eager, bit for bit; the abstract eval against the executed aval.
"""
import functools
import os
import sys
import warnings

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from stagecraft import core, lax
from stagecraft.config import enable_x64
from stagecraft.interpreters import lowering, partial_eval as pe

sys.path.insert(0, os.path.dirname(__file__))
from _util import staged_call  # noqa: E402

from _cases import (SHAPES, b1, bf16, c64, f16, f32, i8, i16, i32, u8, u16,  # noqa: E402
                    u32)
INTS = (i8, u8, i32, u32)


# ---------------------------------------------------------------------------
# Checks shared by every case


def _bits(x) -> np.ndarray:
  x = np.asarray(x)
  if x.dtype.kind == "c":  # the bits of both parts
    return np.stack([_bits(x.real), _bits(x.imag)])
  if x.dtype.kind == "f" or x.dtype == bf16:
    return x.view(f"u{x.dtype.itemsize}")
  return x


def _assert_same_bits(actual, expected, msg=""):
  actual, expected = np.asarray(actual), np.asarray(expected)
  assert actual.dtype == expected.dtype and actual.shape == expected.shape, (
      actual.dtype, actual.shape, expected.dtype, expected.shape, msg)
  np.testing.assert_array_equal(_bits(actual), _bits(expected), err_msg=msg)


def _jax_out(name, params, *args):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return jax.eval_shape(functools.partial(getattr(jax.lax, name), **params), *args)


def _check(name, args, ref, params=None, exact=True, tol=None):
  """Eager vs `ref` (bits when exact, else allclose), the aval vs JAX's, staged vs eager,
  abstract eval vs the executed aval. Returns the eager result."""
  params = params or {}
  op = functools.partial(getattr(lax, name), **params)
  msg = f"{name}{params} on {[(a.dtype.name, a.shape) for a in args]}: {args}"
  out = op(*args)
  expected = _jax_out(name, params, *args)
  assert (out.shape, out.dtype, out.aval.weak_type) == (
      expected.shape, expected.dtype, expected.weak_type), msg
  if exact:
    _assert_same_bits(out, np.asarray(ref).astype(out.dtype), msg)
  else:
    np.testing.assert_allclose(np.asarray(out), ref, err_msg=msg, **tol)
  _assert_same_bits(staged_call(lambda *a: op(*a), *args), out, msg)
  jaxpr, _ = pe.trace_to_jaxpr(lambda *a: [op(*a)], [core.get_aval(a) for a in args])
  assert jaxpr.out_avals[0] == out.aval, (jaxpr.out_avals[0], out.aval)
  return out


def _jax(name, *args, **params):
  return np.asarray(getattr(jax.lax, name)(*args, **params))


# ---------------------------------------------------------------------------
# Shifts and bit counts. References follow XLA: the amount is read as unsigned; amounts
# >= the bit width shift every bit out.


def _unsigned(dt):
  return np.dtype(f"u{dt.itemsize}")


def _signed(dt):
  return np.dtype(f"i{dt.itemsize}")


def _shift_ref(kind, x, y):
  nbits = 8 * x.dtype.itemsize
  amount = y.view(_unsigned(y.dtype)).astype(np.uint64)
  out_of_range = amount >= nbits
  s = np.where(out_of_range, 0, amount).astype(_unsigned(x.dtype))
  if kind == "shift_left":
    r = np.left_shift(x.view(_unsigned(x.dtype)), s)
    fill = np.zeros_like(r)
  elif kind == "shift_right_logical":
    r = np.right_shift(x.view(_unsigned(x.dtype)), s)
    fill = np.zeros_like(r)
  else:
    xs = x.view(_signed(x.dtype))
    r = np.right_shift(xs, s.astype(xs.dtype))
    fill = np.right_shift(xs, nbits - 1)
  return np.where(out_of_range, fill, r).view(x.dtype)


def _clz_ref(x):
  nbits = 8 * x.dtype.itemsize
  u = x.view(_unsigned(x.dtype)).astype(np.uint64)
  return sum((u < (np.uint64(1) << np.uint64(nbits - k))).astype(np.int64)
             for k in range(1, nbits + 1)).astype(x.dtype)


def _popcount_ref(x):
  return np.bitwise_count(x.view(_unsigned(x.dtype))).astype(x.dtype)


def _int_arrays(dtype, shape, amounts=False):
  if amounts:  # shift amounts: in range, at or past the width, and negative
    nbits = 8 * dtype.itemsize
    info = np.iinfo(dtype)
    elems = st.one_of(st.integers(0, nbits + 2),
                      st.integers(int(info.min), int(info.max)))
  else:
    elems = None
  return hnp.arrays(dtype, shape, elements=elems)


@pytest.mark.parametrize("name", ["shift_left", "shift_right_logical",
                                  "shift_right_arithmetic"])
@pytest.mark.parametrize("dtype", INTS, ids=str)
@settings(max_examples=6)
@given(data=st.data())
def test_shift_matches_xla_semantics(name, dtype, data):
  xs, ys = data.draw(st.sampled_from([(s, s) for s in SHAPES] + [((2, 3), ()), ((), (3,))]))
  x = data.draw(_int_arrays(dtype, xs))
  y = data.draw(_int_arrays(dtype, ys, amounts=True))
  _check(name, (x, y), _shift_ref(name, *np.broadcast_arrays(x, y)))


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_shift_by_width_and_negative_amounts(dtype):
  info = np.iinfo(dtype)
  nbits = 8 * dtype.itemsize
  x = np.array([info.min, info.max, 1, 0, info.max // 2 + 1], dtype)
  amounts = [0, 1, nbits - 1, nbits, nbits + 1, min(100, int(info.max))]
  if info.min < 0:
    amounts += [-1, -nbits]
  for s in amounts:
    y = np.full(x.shape, s, dtype)
    for name in ("shift_left", "shift_right_logical", "shift_right_arithmetic"):
      out = getattr(lax, name)(x, y)
      _assert_same_bits(out, _shift_ref(name, x, y), f"{name} by {s}")
      _assert_same_bits(out, _jax(name, x, y), f"{name} by {s} vs JAX")
  # Shifting out every bit: 0, or the sign bits for arithmetic shifts.
  y = np.full(x.shape, nbits, dtype)
  np.testing.assert_array_equal(lax.shift_left(x, y), np.zeros_like(x))
  np.testing.assert_array_equal(lax.shift_right_logical(x, y), np.zeros_like(x))
  sign = (x.view(_signed(dtype)) < 0)
  np.testing.assert_array_equal(lax.shift_right_arithmetic(x, y),
                                np.where(sign, np.array(-1).astype(dtype), 0).astype(dtype))


@pytest.mark.parametrize("name,ref", [("population_count", _popcount_ref), ("clz", _clz_ref)])
@pytest.mark.parametrize("dtype", (*INTS, i16), ids=str)
@settings(max_examples=5)
@given(data=st.data())
def test_bit_counts(name, ref, dtype, data):
  x = data.draw(hnp.arrays(dtype, data.draw(st.sampled_from(SHAPES))))
  _check(name, (x,), ref(x))


def test_bit_counts_extremes():
  for dt in (i8, u8, i32, u32):
    info = np.iinfo(dt)
    x = np.array([0, 1, info.max, info.min, -1 if info.min else info.max // 2], dt)
    _assert_same_bits(lax.population_count(x), _popcount_ref(x))
    _assert_same_bits(lax.clz(x), _clz_ref(x))
  np.testing.assert_array_equal(lax.clz(np.array([0, -1, 1], i32)), [32, 0, 31])
  np.testing.assert_array_equal(lax.population_count(np.array([-1, 0], i32)), [32, 0])


def test_shift_python_scalar_and_weak_types():
  x = np.array([1, 2, 3], u8)
  out = lax.shift_left(x, u8.type(2))
  assert out.dtype == u8 and not out.aval.weak_type
  np.testing.assert_array_equal(out, [4, 8, 12])
  with pytest.raises(TypeError, match="got uint8, int32"):   # as JAX: 2 is int32
    lax.shift_left(x, 2)
  w = lax.shift_left(1, 3)
  assert w.aval == core.ShapedArray((), i32, True) and int(w) == 8
  assert lax.population_count(7).aval == core.ShapedArray((), i32, True)


@pytest.mark.parametrize("call,err,match", [
    (lambda: lax.shift_left(np.float32(1), np.float32(1)), TypeError,
     r"shift_left does not accept dtype float32 at position 0\. Accepted dtypes at position 0 "
     r"are subtypes of integer\."),
    (lambda: lax.shift_right_logical(np.ones(3, i32), np.ones(3, u8)), TypeError,
     r"lax\.shift_right_logical requires arguments to have the same dtypes, got int32, uint8\. "
     r"\(Tip: jnp\.right_shift is a similar function"),
    (lambda: lax.shift_left(np.ones(3, i32), np.ones(3, u8)), TypeError,
     r"\(Tip: jnp\.left_shift is a similar function that does automatic type promotion"),
    (lambda: lax.shift_right_arithmetic(np.ones(3, b1), np.ones(3, b1)), TypeError,
     r"shift_right_arithmetic does not accept dtype bool at position 0"),
    (lambda: lax.shift_left(np.ones(3, i32), np.ones(2, i32)), TypeError,
     r"shift_left got incompatible shapes for broadcasting"),
    (lambda: lax.population_count(np.ones(3, f32)), TypeError,
     r"population_count does not accept dtype float32\. Accepted dtypes are subtypes of "
     r"integer\."),
    (lambda: lax.clz(np.ones(3, b1)), TypeError,
     r"clz does not accept dtype bool\. Accepted dtypes are subtypes of integer\."),
])
def test_bit_op_errors(call, err, match):
  with pytest.raises(err, match=match):
    call()


# ---------------------------------------------------------------------------
# bitcast_convert_type: round trips, NumPy's `view` as the reference.

_BITCASTS = [(f32, i32), (f32, u32), (i32, u32), (f16, u16), (f16, i16), (bf16, u16),
             (bf16, i16), (bf16, f16), (i8, u8), (f32, u8), (f32, u16), (bf16, u8),
             (i32, i8), (f16, u8), (u32, bf16)]


def _bitcast_ref(x, new):
  if new.itemsize < x.dtype.itemsize:
    return np.ascontiguousarray(x).view(new).reshape(*x.shape, x.dtype.itemsize // new.itemsize)
  if new.itemsize > x.dtype.itemsize:
    return np.ascontiguousarray(x).view(new).reshape(x.shape[:-1])
  return x.view(new)


def _float_bits_arrays(dtype, shape):
  """Any bit pattern of `dtype` (NaNs with payloads and signs, infinities, subnormals)."""
  u = _unsigned(dtype)
  return hnp.arrays(u, shape).map(lambda a: a.view(dtype))


@pytest.mark.parametrize("src,dst", _BITCASTS, ids=[f"{a}-{b}" for a, b in _BITCASTS])
@settings(max_examples=4)
@given(data=st.data())
def test_bitcast_round_trip(src, dst, data):
  shape = data.draw(st.sampled_from([(), (3,), (2, 3), (0,)]))
  if dst.itemsize > src.itemsize:
    shape = (*shape, dst.itemsize // src.itemsize)
  x = data.draw(_float_bits_arrays(src, shape))
  y = _check("bitcast_convert_type", (x,), _bitcast_ref(x, dst), dict(new_dtype=dst))
  back = lax.bitcast_convert_type(y, src)
  _assert_same_bits(back, x)


def test_bitcast_shapes_values_and_weak_type():
  one = lax.bitcast_convert_type(np.float32(1.0), np.int32)
  assert int(one) == 0x3F800000
  # The bytes of one element: little-endian, as numpy's view (and JAX on CPU).
  x = np.array([0x01020304], u32)
  np.testing.assert_array_equal(lax.bitcast_convert_type(x, u8), [[4, 3, 2, 1]])
  np.testing.assert_array_equal(lax.bitcast_convert_type(x, u8), _jax(
      "bitcast_convert_type", x, new_dtype=u8))
  np.testing.assert_array_equal(lax.bitcast_convert_type(np.array([4, 3, 2, 1], u8), u32),
                                0x01020304)
  bf = lax.bitcast_convert_type(np.array([0x3FC0], u16), bf16)
  assert bf.dtype == bf16 and float(bf[0]) == 1.5
  # Weak inputs give strong outputs (as JAX); same dtype is allowed for bool and complex.
  w = lax.bitcast_convert_type(1.0, np.int32)
  assert w.aval == core.ShapedArray((), i32, False)
  assert lax.bitcast_convert_type(np.array([True]), np.bool_).dtype == b1
  assert lax.bitcast_convert_type(np.array([1j], c64), np.complex64).dtype == c64
  # -0.0 and NaN payloads survive a round trip.
  z = np.array([-0.0, np.nan, -np.inf], f32)
  z[1:2].view(u32)[:] = 0x7FC12345
  _assert_same_bits(lax.bitcast_convert_type(lax.bitcast_convert_type(z, i32), f32), z)


def test_bitcast_float64_with_x64():
  with enable_x64():
    x = np.array([1.0, -0.0, np.inf])
    y = lax.bitcast_convert_type(x, np.uint32)
    assert y.shape == (3, 2) and y.dtype == u32
    np.testing.assert_array_equal(y, x.view(np.uint32).reshape(3, 2))
    back = lax.bitcast_convert_type(y, np.float64)
    _assert_same_bits(back, x)
    _assert_same_bits(lax.bitcast_convert_type(x, np.int64), x.view(np.int64))


@pytest.mark.parametrize("call,err,match", [
    (lambda: lax.bitcast_convert_type(np.ones(3, b1), u8), TypeError,
     r"lax\.bitcast_convert_type does not support bool or complex values unless the operand "
     r"and destination types match\. Got operand dtype=bool, new_dtype=dtype\('uint8'\)\. "
     r"Consider using the arr\.view\(\) method instead\."),
    (lambda: lax.bitcast_convert_type(np.ones(3, c64), f32), TypeError,
     r"Got operand dtype=complex64, new_dtype=dtype\('float32'\)"),
    (lambda: lax.bitcast_convert_type(np.ones(3, f32), np.complex64), TypeError,
     r"does not support bool or complex values"),
    (lambda: lax.bitcast_convert_type(np.ones((3, 2), u8), f32), ValueError,
     r"Attempting to convert array of shape \(3, 2\) from uint8 of size 8 bits to float32 of "
     r"size 32, bits but 2 \* 8 != 32"),
    (lambda: lax.bitcast_convert_type(np.uint8(1), u16), ValueError,
     r"Attempting to convert array of shape \(\) from uint8 of size 8 bits to uint16 of size "
     r"16, bits but 1 \* 8 != 16"),
])
def test_bitcast_errors(call, err, match):
  with pytest.raises(err, match=match):
    call()


def test_bitcast_errors_match_jax():
  for x, new in [(np.ones((3, 2), u8), f32), (np.ones(3, b1), u8)]:
    with pytest.raises(Exception) as ours:
      lax.bitcast_convert_type(x, new)
    with pytest.raises(Exception) as theirs:
      jax.lax.bitcast_convert_type(x, new)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)


# ---------------------------------------------------------------------------
# clamp


def _clamp_ref(lo, x, hi):
  return np.minimum(np.maximum(x, lo), hi)


_CLAMP_DTYPES = (f32, bf16, f16, i32, u8, i8, b1)


def _values(dtype, shape, special=True):
  if dtype == b1:
    return hnp.arrays(dtype, shape)
  if dtype.kind in "iu":
    return hnp.arrays(dtype, shape, elements=st.integers(-50 if dtype.kind == "i" else 0, 50))
  # NB: no subnormals: XLA's CPU backend flushes them to zero in arithmetic (as in JAX);
  # the nextafter and bitcast tests cover them with bit-exact ops.
  el = st.floats(-10, 10, width=32, allow_subnormal=False)
  if special:
    el = st.one_of(el, st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0]))
  return hnp.arrays(f32, shape, elements=el).map(lambda a: a.astype(dtype))


# XLA:CPU's older emitters (the tests' fast flags) have no clamp of booleans or complex numbers.
@pytest.mark.parametrize("dtype", [pytest.param(d, marks=pytest.mark.xla_defaults) if d == b1
                                   else d for d in _CLAMP_DTYPES], ids=str)
@settings(max_examples=6)
@given(data=st.data())
def test_clamp(dtype, data):
  shape = data.draw(st.sampled_from(SHAPES))
  lo_shape, hi_shape = data.draw(st.sampled_from([(shape, shape), ((), ()), ((), shape),
                                                  (shape, ())]))
  lo = data.draw(_values(dtype, lo_shape, special=False))
  x = data.draw(_values(dtype, shape))
  hi = data.draw(_values(dtype, hi_shape, special=False))
  with np.errstate(invalid="ignore"):
    ref = _clamp_ref(*np.broadcast_arrays(lo, x, hi))
  floating = dtype.kind == "f" or dtype == bf16
  # NB: the sign of a zero result may differ from NumPy's maximum/minimum (which return their
  # first operand on ties); it is XLA's, checked against JAX bit for bit.
  out = _check("clamp", (lo, x, hi), ref, exact=not floating,
               tol=dict(rtol=0, atol=0) if floating else None)
  _assert_same_bits(out, _jax("clamp", lo, x, hi))


@pytest.mark.xla_defaults
def test_clamp_special_values_and_complex():
  x = np.array([np.nan, -np.inf, np.inf, -0.0, 0.5], f32)
  out = lax.clamp(np.float32(0), x, np.float32(1))
  _assert_same_bits(out, _jax("clamp", np.float32(0), x, np.float32(1)))
  assert np.isnan(out[0]) and list(np.asarray(out[1:3])) == [0.0, 1.0]
  # min > max gives max, as XLA (and np.minimum(np.maximum(...))).
  np.testing.assert_array_equal(lax.clamp(np.int32(5), np.arange(3, dtype=i32), np.int32(1)),
                                [1, 1, 1])
  # Complex numbers clamp lexicographically (real part, then imaginary part) as JAX.
  c = np.array([1 + 2j, -1 - 1j, 3 + 0j, 2 + 5j], c64)
  lo, hi = np.complex64(0), np.complex64(2 + 1j)
  _assert_same_bits(lax.clamp(lo, c, hi), _jax("clamp", lo, c, hi))


def test_clamp_python_scalars_and_weak_type():
  x = np.array([-1.0, 0.5, 2.0], f32)
  np.testing.assert_array_equal(lax.clamp(0.0, x, 1.0), [0.0, 0.5, 1.0])
  assert lax.clamp(0.0, x, 1.0).aval == core.ShapedArray((3,), f32)
  h = lax.clamp(u16.type(0), np.array([3, 300], u16), u16.type(7))
  assert h.dtype == u16 and list(np.asarray(h)) == [3, 7]
  with pytest.raises(TypeError, match=(   # as JAX: Python ints are int32
      r"lax\.clamp requires arguments to have the same dtypes, got int32, uint16, int32\.")):
    lax.clamp(0, np.array([3, 300], u16), 7)
  w = lax.clamp(0.0, 0.5, 1.0)
  assert w.aval == core.ShapedArray((), f32, True)
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.clamp(0.0, x, 1.0)],
                               [core.ShapedArray((3,), f32)])
  assert str(jaxpr) == ("{ lambda ; a:f32[3]. let b:f32[3] = clamp 0.0:f32[] a 1.0:f32[] in "
                        "(b,) }")


@pytest.mark.parametrize("args,match", [
    ((np.zeros(2, f32), np.zeros(3, f32), np.float32(1)),
     r"clamp requires min\.shape == operand\.shape or min\.shape == \(\), got "
     r"min\.shape=\(2,\), operand\.shape=\(3,\)\."),
    ((np.float32(0), np.zeros(3, f32), np.zeros(2, f32)),
     r"clamp requires max\.shape == operand\.shape or max\.shape == \(\), got "
     r"max\.shape=\(2,\), operand\.shape=\(3,\)\."),
    ((np.zeros(3, f32), np.float32(0), np.zeros(3, f32)),
     r"got min\.shape=\(3,\), operand\.shape=\(\)\."),
    ((np.int32(0), np.zeros(3, f32), np.float32(1)),
     r"^lax\.clamp requires arguments to have the same dtypes, got int32, float32, float32\."),
])
def test_clamp_errors_match_jax(args, match):
  with pytest.raises(TypeError, match=match):
    lax.clamp(*args)
  with pytest.raises(TypeError, match=match):
    jax.lax.clamp(*args)


# ---------------------------------------------------------------------------
# nextafter


def _nextafter_ref(x, y):
  """C's nextafter (NumPy's float16 version returns x, not y, where x == y), except that
  for float32 a step from -smallest_subnormal to zero gives +0.0 (XLA's CPU expansion; C
  gives -0.0, and so does XLA for float16)."""
  if x.dtype == bf16:
    return _jax("nextafter", x, y)
  with np.errstate(over="ignore"):
    r = np.where(x == y, y, np.nextafter(x, y))
  if x.dtype == f32:
    r = np.where((x != y) & (r == 0), np.zeros_like(r), r)
  return r


@pytest.mark.parametrize("dtype", (f32, f16, bf16), ids=str)
@settings(max_examples=8)
@given(data=st.data())
def test_nextafter(dtype, data):
  shapes = data.draw(st.sampled_from([(s, s) for s in SHAPES] + [((2, 3), ())]))
  x, y = (data.draw(_values(dtype, s)) for s in shapes)
  _check("nextafter", (x, y), _nextafter_ref(*np.broadcast_arrays(x, y)))


@pytest.mark.parametrize("dtype", (f32, f16, bf16), ids=str)
def test_nextafter_special_values(dtype):
  info = ml_dtypes.finfo(dtype)
  tiny = np.array(info.smallest_subnormal, dtype)
  pairs = [(0.0, 1.0), (0.0, -1.0), (-0.0, 1.0), (-0.0, 0.0), (0.0, -0.0), (1.0, 1.0),
           (np.nan, 1.0), (1.0, np.nan), (np.inf, 0.0), (-np.inf, 0.0), (float(info.max),
                                                                        np.inf),
           (np.inf, np.inf), (float(tiny), 0.0), (-float(tiny), 0.0), (1.0, 2.0), (1.0, 0.0)]
  x = np.array([p[0] for p in pairs], f32).astype(dtype)
  y = np.array([p[1] for p in pairs], f32).astype(dtype)
  out = np.asarray(lax.nextafter(x, y))
  _assert_same_bits(out, _jax("nextafter", x, y))
  if dtype != bf16:
    _assert_same_bits(out, _nextafter_ref(x, y))
  o = out.astype(np.float64)
  assert o[0] == float(tiny) and o[1] == -float(tiny) and o[2] == float(tiny)
  assert _bits(out[3:5]).tolist() == _bits(np.array([0.0, -0.0], dtype)).tolist()  # y
  assert np.isnan(o[6]) and np.isnan(o[7])
  assert o[8] == float(info.max) and o[10] == np.inf and o[11] == np.inf
  assert o[12] == 0.0 and o[13] == 0.0
  if dtype == f32:  # +0.0 from -tiny (C's nextafter gives -0.0)
    assert _bits(out[13:14]).tolist() == [0]


@pytest.mark.parametrize("call,match", [
    (lambda: lax.nextafter(np.ones(3, i32), np.ones(3, i32)),
     r"nextafter does not accept dtype int32 at position 0\. Accepted dtypes at position 0 "
     r"are subtypes of floating\."),
    (lambda: lax.nextafter(np.ones(3, f32), np.ones(3, f16)),
     r"lax\.nextafter requires arguments to have the same dtypes, got float32, float16\. "
     r"\(Tip: jnp\.nextafter is a similar function that does automatic type promotion on "
     r"inputs\)\."),
    (lambda: lax.nextafter(np.ones(3, c64), np.ones(3, c64)),
     r"nextafter does not accept dtype complex64 at position 0"),
])
def test_nextafter_errors(call, match):
  with pytest.raises(TypeError, match=match):
    call()


# ---------------------------------------------------------------------------
# reduce_precision: JAX as the oracle; casts through ml_dtypes where the formats are the same
# (normal values round to nearest even; XLA flushes values below the smallest normal).


@pytest.mark.parametrize("dtype", (f32, f16, bf16), ids=str)
@pytest.mark.parametrize("bits", [(5, 10), (8, 7), (4, 3), (5, 2), (1, 0), (11, 52)],
                         ids=str)
@settings(max_examples=4)
@given(data=st.data())
def test_reduce_precision_matches_jax(dtype, bits, data):
  x = data.draw(_float_bits_arrays(dtype, data.draw(st.sampled_from(SHAPES))))
  e, m = bits
  params = dict(exponent_bits=e, mantissa_bits=m)
  _check("reduce_precision", (x,), _jax("reduce_precision", x, **params), params)


def test_reduce_precision_as_casts():
  rng = np.random.default_rng(0)
  x = (rng.standard_normal(1000) * np.exp2(rng.integers(-13, 15, 1000))).astype(f32)
  as_f16 = np.asarray(lax.reduce_precision(x, 5, 10))
  ref = x.astype(f16).astype(f32)
  normal = np.abs(ref) >= ml_dtypes.finfo(f16).tiny
  np.testing.assert_array_equal(as_f16[normal], ref[normal])
  assert np.all(as_f16[~normal] == 0)
  as_bf16 = np.asarray(lax.reduce_precision(x, 8, 7))
  np.testing.assert_array_equal(as_bf16, x.astype(bf16).astype(f32))
  special = np.array([np.nan, np.inf, -np.inf, -0.0, 70000.0, -70000.0, 1e-6], f32)
  out = np.asarray(lax.reduce_precision(special, 5, 10))
  assert np.isnan(out[0]) and list(out[1:3]) == [np.inf, -np.inf]
  assert _bits(out[3:4]).tolist() == _bits(np.array([-0.0], f32)).tolist()
  assert list(out[4:6]) == [np.inf, -np.inf] and out[6] == 0.0
  assert lax.reduce_precision(1.0, 5, 10).aval == core.ShapedArray((), f32, True)
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.reduce_precision(x, 5, 10)],
                               [core.ShapedArray((3,), f32)])
  assert jaxpr.eqns[0].params == dict(exponent_bits=5, mantissa_bits=10)
  text = lowering.lower_jaxpr_to_module("f", jaxpr)
  assert "exponent_bits = 5 : i32, mantissa_bits = 10 : i32" in text


@pytest.mark.parametrize("call,err,match", [
    (lambda: lax.reduce_precision(np.ones(3, i32), 5, 10), TypeError,
     r"reduce_precision does not accept dtype int32\. Accepted dtypes are subtypes of "
     r"floating\."),
    (lambda: lax.reduce_precision(np.ones(3, f32), 0, 10), ValueError,
     r"reduce_precision: exponent_bits must be positive; got 0"),
    (lambda: lax.reduce_precision(np.ones(3, f32), 5, -1), ValueError,
     r"reduce_precision: mantissa_bits must be non-negative; got -1"),
    (lambda: lax.reduce_precision(np.ones(3, f32), 5.5, 1), TypeError, r"integer"),
])
def test_reduce_precision_errors(call, err, match):
  with pytest.raises(err, match=match):
    call()


# ---------------------------------------------------------------------------
# real, imag, conj, complex


def _complex_arrays(shape):
  part = st.one_of(st.floats(-10, 10, width=32),
                   st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan]))
  return st.tuples(hnp.arrays(f32, shape, elements=part),
                   hnp.arrays(f32, shape, elements=part)).map(lambda p: _make_complex(*p))


def _make_complex(re, im):
  out = np.empty(re.shape, c64)
  out.real, out.imag = re, im  # NB: keeps -0.0, inf and NaN parts exactly
  return out


@pytest.mark.parametrize("name,ref", [("real", np.real), ("imag", np.imag), ("conj", np.conj)])
@settings(max_examples=6)
@given(data=st.data())
def test_complex_parts(name, ref, data):
  x = data.draw(_complex_arrays(data.draw(st.sampled_from(SHAPES))))
  _check(name, (x,), ref(x))


@settings(max_examples=6)
@given(data=st.data())
def test_conj_of_real_and_complex_of_parts(data):
  shapes = data.draw(st.sampled_from([(s, s) for s in SHAPES] + [((2, 3), ()), ((), (3,))]))
  re, im = (data.draw(_values(f32, s)) for s in shapes)
  _check("complex", (re, im), _make_complex(*np.broadcast_arrays(re, im)))
  # conj of a real array is complex(x, 0): the imaginary part is +0.0.
  _check("conj", (re,), _make_complex(re, np.zeros_like(re)))


def test_complex_parts_of_real_inputs_and_params():
  x = np.array([1.0, -0.0, np.nan], f32)
  c = lax.conj(x)
  assert c.dtype == c64
  _assert_same_bits(np.asarray(c).real, x)
  _assert_same_bits(np.asarray(c).imag, np.zeros(3, f32))
  # real(complex(x, y)) == x, imag(...) == y bit for bit; conj flips the sign of -0.0.
  y = np.array([-0.0, 2.0, np.inf], f32)
  z = lax.complex(x, y)
  _assert_same_bits(lax.real(z), x)
  _assert_same_bits(lax.imag(z), y)
  _assert_same_bits(lax.imag(lax.conj(z)), -y)
  jaxpr, _ = pe.trace_to_jaxpr(lambda x: [lax.conj(x)], [core.ShapedArray((3,), f32)])
  assert jaxpr.eqns[0].params == dict(input_dtype=f32)
  assert str(jaxpr) == "{ lambda ; a:f32[3]. let b:c64[3] = conj[input_dtype=float32] a in (b,) }"
  # Weak types: kept by real/imag/conj, and by complex when both are weak (as JAX).
  assert lax.real(1j).aval == core.ShapedArray((), f32, True)
  assert lax.conj(1.0).aval == core.ShapedArray((), c64, True)
  assert lax.complex(1.0, 2.0).aval == core.ShapedArray((), c64, True)
  assert lax.complex(np.ones(3, f32), 2.0).aval == core.ShapedArray((3,), c64, False)


def test_complex128_with_x64():
  with enable_x64():
    x = np.array([1.0, -2.5])
    z = lax.complex(x, x)
    assert z.dtype == np.complex128
    np.testing.assert_array_equal(z, x + 1j * x)
    assert lax.conj(x).dtype == np.complex128
    assert lax.real(z).dtype == np.float64
    np.testing.assert_array_equal(lax.conj(z), np.conj(x + 1j * x))


@pytest.mark.parametrize("call,match", [
    (lambda: lax.real(np.ones(3, f32)),
     r"^real does not accept dtype float32\. Accepted dtypes are subtypes of complexfloating\.$"),
    (lambda: lax.imag(np.ones(3, i32)),
     r"^imag does not accept dtype int32\. Accepted dtypes are subtypes of complexfloating\.$"),
    (lambda: lax.conj(np.ones(3, f16)),
     r"^conj does not accept dtype float16\. Accepted dtypes are subtypes of float32, "
     r"complexfloating, float64\.$"),
    (lambda: lax.conj(np.ones(3, i32)), r"^conj does not accept dtype int32\."),
    (lambda: lax.complex(np.ones(3, f16), np.ones(3, f16)),
     r"^complex does not accept dtype float16 at position 0\. Accepted dtypes at position 0 "
     r"are subtypes of float32, float64\.$"),
    (lambda: lax.complex(np.ones(3, c64), np.ones(3, c64)),
     r"^complex does not accept dtype complex64 at position 0\."),
    (lambda: lax.complex(np.ones(3, f32), np.ones(3, i32)),
     r"^complex does not accept dtype int32 at position 1\."),
    (lambda: lax.complex(np.ones(3, f32), np.ones(2, f32)),
     r"complex got incompatible shapes for broadcasting"),
])
def test_complex_errors(call, match):
  with pytest.raises(TypeError, match=match):
    call()


def test_complex_errors_match_jax():
  for name, args in [("real", (np.ones(3, f32),)), ("conj", (np.ones(3, f16),)),
                     ("complex", (np.ones(3, f16), np.ones(3, f16)))]:
    with pytest.raises(TypeError) as ours:
      getattr(lax, name)(*args)
    with pytest.raises(TypeError) as theirs:
      getattr(jax.lax, name)(*args)
    assert str(ours.value) == str(theirs.value)


def test_lowering_ops_match_jax():
  """The StableHLO ops emitted are JAX's (`jax.jit(f).lower(...).as_text()`)."""
  cases = [
      (lax.shift_left, (np.ones(3, i32),) * 2, "stablehlo.shift_left"),
      (lax.shift_right_logical, (np.ones(3, u8),) * 2, "stablehlo.shift_right_logical"),
      (lax.shift_right_arithmetic, (np.ones(3, i8),) * 2, "stablehlo.shift_right_arithmetic"),
      (lax.population_count, (np.ones(3, i32),), "stablehlo.popcnt"),
      (lax.clz, (np.ones(3, i32),), "stablehlo.count_leading_zeros"),
      (lambda x: lax.bitcast_convert_type(x, u8), (np.ones(3, f32),),
       "stablehlo.bitcast_convert"),
      (lax.clamp, (np.float32(0), np.ones(3, f32), np.float32(1)), "stablehlo.clamp"),
      (lax.nextafter, (np.ones(3, f32),) * 2, "chlo.next_after"),
      (lambda x: lax.reduce_precision(x, 5, 10), (np.ones(3, f32),),
       "stablehlo.reduce_precision"),
      (lax.real, (np.ones(3, c64),), "stablehlo.real"),
      (lax.imag, (np.ones(3, c64),), "stablehlo.imag"),
      (lax.complex, (np.ones(3, f32),) * 2, "stablehlo.complex"),
  ]
  for f, args, op in cases:
    jaxpr, _ = pe.trace_to_jaxpr(lambda *a: [f(*a)], [core.get_aval(a) for a in args])
    assert op in lowering.lower_jaxpr_to_module("f", jaxpr), op


def test_public_names():
  for name in ["shift_left", "shift_right_logical", "shift_right_arithmetic",
               "population_count", "clz", "bitcast_convert_type", "clamp", "nextafter",
               "reduce_precision", "real", "imag", "conj", "complex"]:
    f = getattr(lax, name)
    assert f.__doc__ and "Returns:" in f.__doc__ and "Raises:" in f.__doc__, name
    p = getattr(lax, f"{name}_p")
    assert isinstance(p, core.Primitive) and p.name == name
