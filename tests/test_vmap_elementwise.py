"""Batching rules (vmap) of the elementwise, special-function, random-bit and misc primitives:
`vmap(f, in_axes)` equals a Python loop of `f` over the batch (stacked along out_axes), for
several in_axes choices (0, 1, -1, None), rank-0 operands, batched scalar predicates and
bounds; vmap of jit; stagecraft.random under vmap over keys and over data; and jaxprs that move
the batch dim no more than JAX's do."""
import jax
import numpy as np
import pytest
from hypothesis import given, strategies as st

import stagecraft as sc
from stagecraft import lax, random
from stagecraft.lax import random_bits
from stagecraft.lax import misc

from _util import assert_trees_allclose

RNG = np.random.default_rng(0)


def _take(a, i, axis):
  return np.take(np.asarray(a), i, axis=axis)


def loop(f, args, in_axes, out_axes=0):
  """The batched result by a Python loop of `f` (stacked along out_axes)."""
  size = next(np.shape(a)[d] for a, d in zip(args, in_axes) if d is not None)
  outs = []
  for i in range(size):
    ex = [a if d is None else _take(a, i, d) for a, d in zip(args, in_axes)]
    outs.append(f(*ex))
  if isinstance(outs[0], (tuple, list)):
    return [np.stack([np.asarray(o[k]) for o in outs], axis=out_axes)
            for k in range(len(outs[0]))]
  return np.stack([np.asarray(o) for o in outs], axis=out_axes)


def check(f, args, in_axes, out_axes=0, rtol=1e-6, atol=1e-6, jit=False):
  g = sc.jit(f) if jit else f
  got = sc.vmap(g, in_axes=tuple(in_axes), out_axes=out_axes)(*args)
  want = loop(f, args, in_axes, out_axes)
  assert_trees_allclose(got, want, rtol=rtol, atol=atol, check_dtypes=True)


def batched(x, axis, size=3):
  """`size` different copies of the example `x`, stacked along `axis` (None: `x` itself)."""
  x = np.asarray(x)
  if axis is None:
    return x
  if x.dtype == np.bool_:
    return np.stack([x if i % 2 == 0 else ~x for i in range(size)], axis=axis)
  xs = [x * (1 + 0.25 * i) if x.dtype.kind in "fc" else x + i for i in range(size)]
  if x.dtype.kind in "fc":
    xs = [np.asarray(v, x.dtype) for v in xs]
  return np.stack(xs, axis=axis)


def f32(*shape, lo=-1.0, hi=1.0):
  return RNG.uniform(lo, hi, shape).astype(np.float32)


# ---------------------------------------------------------------------------
# Table: every primitive through its wrapper, with per-example operands (shape (2, 3)).

POS = f32(2, 3, lo=0.3, hi=0.9)
R = f32(2, 3, lo=-2.0, hi=2.0)
GT1 = f32(2, 3, lo=1.2, hi=3.0)
I32 = RNG.integers(-50, 50, (2, 3)).astype(np.int32)
U32 = RNG.integers(0, 2**32, (2, 3), dtype=np.uint64).astype(np.uint32)
SH = RNG.integers(0, 31, (2, 3)).astype(np.int32)
C64 = (f32(2, 3) + 1j * f32(2, 3)).astype(np.complex64)
B = RNG.random((2, 3)) < 0.5

UNARY = [
    ("neg", lax.neg, R), ("exp", lax.exp, R), ("exp2", lax.exp2, R), ("log", lax.log, POS),
    ("log1p", lax.log1p, POS), ("expm1", lax.expm1, R), ("sqrt", lax.sqrt, POS),
    ("rsqrt", lax.rsqrt, POS), ("cbrt", lax.cbrt, R), ("sin", lax.sin, R), ("cos", lax.cos, R),
    ("tan", lax.tan, POS), ("tanh", lax.tanh, R), ("asin", lax.asin, POS),
    ("acos", lax.acos, POS), ("atan", lax.atan, R), ("sinh", lax.sinh, R), ("cosh", lax.cosh, R),
    ("asinh", lax.asinh, R), ("acosh", lax.acosh, GT1), ("atanh", lax.atanh, POS),
    ("erf", lax.erf, R), ("erfc", lax.erfc, R), ("erf_inv", lax.erf_inv, POS),
    ("floor", lax.floor, R), ("ceil", lax.ceil, R), ("is_finite", lax.is_finite, R),
    ("not", lax.bitwise_not, I32), ("not_bool", lax.bitwise_not, B), ("abs", lax.abs, R),
    ("abs_complex", lax.abs, C64), ("sign", lax.sign, R), ("logistic", lax.logistic, R),
    ("round", lax.round, R), ("round_even", lambda x: lax.round(x, 1), R),
    ("integer_pow", lambda x: lax.integer_pow(x, 3), R),
    ("integer_pow_neg", lambda x: lax.integer_pow(x, -2), GT1),
    ("convert_element_type", lambda x: lax.convert_element_type(x, np.int32), R),
    ("convert_bool", lambda x: lax.convert_element_type(x, np.bool_), R),
    ("bitcast_same_width", lambda x: lax.bitcast_convert_type(x, np.int32), R),
    ("bitcast_narrower", lambda x: lax.bitcast_convert_type(x, np.uint8), R),
    ("reduce_precision", lambda x: lax.reduce_precision(x, 5, 10), R),
    ("real", lax.real, C64), ("imag", lax.imag, C64), ("conj", lax.conj, C64),
    ("conj_real", lax.conj, R), ("population_count", lax.population_count, I32),
    ("clz", lax.clz, I32), ("lgamma", lax.lgamma, GT1), ("digamma", lax.digamma, GT1),
    ("bessel_i0e", lax.bessel_i0e, R), ("bessel_i1e", lax.bessel_i1e, R),
    ("stop_gradient", lax.stop_gradient, R),
    ("optimization_barrier", lambda x: lax.optimization_barrier((x, lax.neg(x))), R),
]

BINARY = [
    ("add", lax.add, R, R), ("sub", lax.sub, R, R), ("mul", lax.mul, R, R),
    ("div", lax.div, R, GT1), ("div_int", lax.div, I32, SH + 1), ("rem", lax.rem, R, GT1),
    ("max", lax.max, R, R[::-1]), ("min", lax.min, R, R[::-1]), ("atan2", lax.atan2, R, GT1),
    ("pow", lax.pow, POS, R), ("pow_int", lax.pow, POS, I32 % 5),
    ("and", lax.bitwise_and, I32, SH), ("or", lax.bitwise_or, I32, SH),
    ("xor", lax.bitwise_xor, B, B[::-1]), ("eq", lax.eq, I32, I32[::-1]),
    ("ne", lax.ne, R, R), ("lt", lax.lt, R, R[::-1]), ("le", lax.le, R, R[::-1]),
    ("gt", lax.gt, R, R[::-1]), ("ge", lax.ge, I32, I32[::-1]),
    ("shift_left", lax.shift_left, I32, SH), ("shift_right_logical", lax.shift_right_logical,
                                              I32, SH),
    ("shift_right_arithmetic", lax.shift_right_arithmetic, I32, SH),
    ("nextafter", lax.nextafter, R, GT1), ("complex", lax.complex, R, POS),
    ("polygamma", lax.polygamma, np.ones((2, 3), np.float32), GT1),
    ("zeta", lax.zeta, GT1 + 1, POS), ("igamma", lax.igamma, GT1, POS),
    ("igammac", lax.igammac, GT1, POS), ("igamma_grad_a", lax.igamma_grad_a, GT1, POS),
]


def _batch_int_safe(name, x, axis):
  if axis is None:
    return np.asarray(x)
  x = np.asarray(x)
  if name in ("polygamma",):   # the order m must stay integral
    return np.stack([x + i for i in range(3)], axis=axis).astype(x.dtype)
  if x.dtype == np.int32 and name.startswith(("shift", "and", "or")):
    return np.stack([(x + i) % 31 for i in range(3)], axis=axis).astype(x.dtype)
  if name == "div_int" and x.dtype == np.int32:
    return np.stack([x + i for i in range(3)], axis=axis).astype(x.dtype)
  return batched(x, axis)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("name,f,x", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, f, x, axis):
  rtol = 1e-5 if name not in ("bitcast_same_width", "bitcast_narrower") else 0
  check(f, [batched(x, axis)], [axis], rtol=rtol, atol=1e-6)


AXES2 = [(0, 0), (1, 0), (-1, None), (None, 1), (2, -1)]


@pytest.mark.parametrize("axes", AXES2, ids=str)
@pytest.mark.parametrize("name,f,x,y", BINARY, ids=[b[0] for b in BINARY])
def test_binary(name, f, x, y, axes):
  if name == "pow_int" and axes[1] is not None:   # integer exponents stay small
    args = [batched(x, axes[0]), np.stack([y] * 3, axis=axes[1])]
  else:
    args = [_batch_int_safe(name, x, axes[0]), _batch_int_safe(name, y, axes[1])]
  check(f, args, axes, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name,f,x,y", [b for b in BINARY if b[0] in (
    "add", "mul", "lt", "shift_left", "complex", "igamma", "pow", "nextafter")],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_binary_rank0_operands(name, f, x, y):
  """Rank-0 operands (batched or not) against full-shaped ones."""
  xs, ys = _batch_int_safe(name, x, 0), _batch_int_safe(name, y, 1)
  x0, y0 = np.asarray(x)[0, 0], np.asarray(y)[1, 2]
  check(f, [x0, ys], [None, 1], rtol=2e-5)             # unbatched scalar, batched array
  check(f, [xs[:, 0, 0], y], [0, None], rtol=2e-5)     # batched scalar, unbatched array
  check(f, [xs[:, 0, 0], ys], [0, 1], rtol=2e-5)       # batched scalar, batched array
  check(f, [xs[:, 0, 0], y0], [0, None], rtol=2e-5)    # batched scalar, unbatched scalar


def test_out_axes_and_jit():
  f = lambda x, y: lax.mul(lax.sin(x), lax.add(y, x))
  x, y = batched(R, 1), batched(GT1, 0)
  for out_axes in (0, 1, -1):
    check(f, [x, y], [1, 0], out_axes=out_axes)
    check(f, [x, y], [1, 0], out_axes=out_axes, jit=True)
  check(lambda x: lax.igamma(x, lax.exp(x)), [batched(POS, -1)], [-1], jit=True, rtol=1e-5)
  check(lambda p, a, b: lax.select(p, a, b), [batched(B, 0), R, batched(GT1, 2)],
        [0, None, 2], jit=True)


# ---------------------------------------------------------------------------
# Hypothesis: shapes, dtypes and batch positions of unary and binary ops.

_UN = [lax.sin, lax.exp, lax.neg, lambda x: lax.integer_pow(x, 2), lax.tanh,
       lambda x: lax.convert_element_type(x, np.int32), lax.abs]
_BIN = [lax.add, lax.sub, lax.mul, lax.max, lax.atan2, lax.lt, lax.eq]


@given(shape=st.lists(st.integers(1, 3), min_size=0, max_size=3),
       data=st.data(), fi=st.integers(0, len(_UN) - 1), size=st.integers(1, 4))
def test_unary_hypothesis(shape, data, fi, size):
  axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
  x = RNG.uniform(-2, 2, (size, *shape)).astype(np.float32)
  x = np.moveaxis(x, 0, axis)
  check(_UN[fi], [x], [axis], rtol=1e-5)


@given(shape=st.lists(st.integers(1, 3), min_size=0, max_size=3), data=st.data(),
       fi=st.integers(0, len(_BIN) - 1), size=st.integers(1, 3))
def test_binary_hypothesis(shape, data, fi, size):
  shape = tuple(shape)
  args, axes = [], []
  for _ in range(2):
    s = data.draw(st.sampled_from([shape, ()]))
    ax = data.draw(st.one_of(st.none(), st.integers(-len(s) - 1, len(s))))
    v = RNG.uniform(-2, 2, s if ax is None else (size, *s)).astype(np.float32)
    args.append(v if ax is None else np.moveaxis(v, 0, ax))
    axes.append(ax)
  if all(a is None for a in axes):
    axes[0] = 0
    args[0] = np.stack([args[0]] * size)
  check(_BIN[fi], args, axes, rtol=1e-5)


# ---------------------------------------------------------------------------
# select_n, clamp, bitcast_convert_type, convert_element_type (structural cases).

@pytest.mark.parametrize("pred_ax,a_ax,b_ax", [
    (0, 0, 0), (None, 0, 1), (0, None, None), (1, -1, None), (None, None, 2), (0, 2, 1)])
def test_select_n(pred_ax, a_ax, b_ax):
  check(lambda p, a, b: lax.select(p, a, b),
        [_bool_batched(B, pred_ax), batched(R, a_ax), batched(GT1, b_ax)],
        [pred_ax, a_ax, b_ax])


def _bool_batched(b, axis):
  if axis is None:
    return b
  return np.stack([b, ~b, b[::-1]], axis=axis)


def test_select_n_scalar_predicate():
  p = np.array([True, False, True])
  check(lambda p, a, b: lax.select(p, a, b), [p, batched(R, 1), GT1], [0, 1, None])
  check(lambda p, a, b: lax.select(p, a, b), [p, R, GT1], [0, None, None])
  check(lambda p, a, b: lax.select(p, a, b), [p, np.float32(1), np.float32(2)],
        [0, None, None])
  check(lambda p, a, b: lax.select(p, a, b), [np.bool_(True), batched(R, 1), GT1],
        [None, 1, None])
  # int32 `which` with three cases, batched scalar and batched array.
  w = np.array([0, 2, 1], np.int32)
  check(lambda w, a, b, c: lax.select_n(w, a, b, c), [w, R, batched(GT1, 2), POS],
        [0, None, 2, None])
  wa = np.stack([I32 % 3, (I32 + 1) % 3, (I32 + 2) % 3]).astype(np.int32)
  check(lambda w, a, b, c: lax.select_n(w, a, b, c), [wa, R, batched(GT1, 1), POS],
        [0, None, 1, None])


@pytest.mark.parametrize("axes", [(None, 0, None), (0, 0, 0), (0, 1, 0), (None, None, 0),
                                  (0, None, None), (1, 1, None), (0, -1, 0)], ids=str)
@pytest.mark.parametrize("scalar_bounds", [False, True])
def test_clamp(axes, scalar_bounds):
  if scalar_bounds:
    lo, hi = np.float32(-0.5), np.float32(0.7)
  else:
    lo, hi = f32(2, 3, hi=0.), f32(2, 3, lo=0.)
  if scalar_bounds:
    # Batched bounds are batched scalars (B,); the batch axis of a rank-0 is 0 or -1.
    axes = tuple(None if a is None else (0 if i != 1 else a) for i, a in enumerate(axes))
  args = [batched(lo, axes[0]), batched(R, axes[1]), batched(hi, axes[2])]
  if all(a is None for a in axes):
    return
  check(lax.clamp, args, axes)
  # A rank-0 x with batched scalar bounds.
  check(lax.clamp, [np.array([-1, 0, 0.5], np.float32), np.float32(0.2),
                    np.array([1, 0.1, 2], np.float32)], [0, None, 0])


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_bitcast_convert_type_width_changes(axis):
  u8 = RNG.integers(0, 256, (2, 3, 4)).astype(np.uint8)
  check(lambda x: lax.bitcast_convert_type(x, np.float32), [batched(u8, axis)], [axis])
  check(lambda x: lax.bitcast_convert_type(x, np.uint16), [batched(u8[..., :2], axis)], [axis])
  check(lambda x: lax.bitcast_convert_type(x, np.uint8),
        [batched(R.astype(np.float32), min(axis, 2))], [min(axis, 2)])


def test_convert_element_type_weak_and_complex():
  check(lambda x: lax.convert_element_type(x, np.float32, weak_type=True),
        [batched(I32, 1)], [1])
  # Complex -> real keeps the real part and warns (NumPy's ComplexWarning), as JAX 0.10.2
  # does, also under vmap.
  x = batched(C64, 0)
  f = lambda a: lax.convert_element_type(a, np.float32)  # noqa: E731
  msg = "Casting complex values to real discards the imaginary part"
  with pytest.warns(np.exceptions.ComplexWarning, match=msg):
    got = sc.vmap(f)(x)
  with pytest.warns(np.exceptions.ComplexWarning, match=msg):
    want = jax.vmap(lambda a: jax.lax.convert_element_type(a, np.float32))(x)
  assert got.dtype == np.float32 and got.shape == x.shape
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  np.testing.assert_array_equal(np.asarray(got), x.real)
  with pytest.warns(np.exceptions.ComplexWarning, match=msg):
    got_t = sc.vmap(f, in_axes=1, out_axes=1)(x.T)
  np.testing.assert_array_equal(np.asarray(got_t), x.real.T)


# ---------------------------------------------------------------------------
# Random bits and stagecraft.random.

def _u32(shape, lo=0):
  return RNG.integers(lo, 2**32, shape, dtype=np.uint64).astype(np.uint32)


@pytest.mark.parametrize("axes", [(0, 0, 0, 0), (None, None, 0, 0), (0, None, None, 1),
                                  (None, 0, 1, None)], ids=str)
def test_threefry2x32(axes):
  # Key words: batched scalars u32[3] or rank 0; counters: u32[5] per example.
  args = [(_u32(()) if a is None else _u32((3,))) if i < 2 else
          _u32((5,) if a is None else (3, 5) if a == 0 else (5, 3))
          for i, a in enumerate(axes)]
  check(random_bits.threefry2x32, args, axes, rtol=0, atol=0)
  check(random_bits.threefry2x32, args, axes, rtol=0, atol=0, jit=True)


def test_threefry2x32_all_scalar():
  args = [_u32((3,)), _u32(()), _u32((3,)), _u32(())]
  check(random_bits.threefry2x32, args, [0, None, 0, None], rtol=0, atol=0)


def test_random_over_keys():
  keys = np.stack([np.asarray(random.PRNGKey(i)) for i in range(4)])
  for f in (lambda k: random.normal(k, (3,)), lambda k: random.uniform(k, (2, 2)),
            lambda k: random.bits(k, (5,)), lambda k: random.split(k),
            lambda k: random.randint(k, (3,), 0, 10),
            lambda k: random.normal(random.fold_in(k, 3), ())):
    check(f, [keys], [0], rtol=1e-6)
    check(f, [keys.T], [1], rtol=1e-6)
  check(lambda k: random.normal(k, (3,)), [keys], [0], jit=True)
  # Typed keys (random.key), batched along axis 0.
  typed = random.split(random.key(3), 4)
  got = sc.vmap(lambda k: random.uniform(k, (2,)))(typed)
  data = np.asarray(random.key_data(typed))
  want = np.stack([np.asarray(random.uniform(random.wrap_key_data(d), (2,))) for d in data])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
  # Same values as JAX's vmap over the same keys.
  with jax.enable_x64(False):
    want = jax.vmap(lambda k: jax.random.normal(k, (3,)))(keys)
  got = sc.vmap(lambda k: random.normal(k, (3,)))(keys)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def test_random_over_data():
  key = random.PRNGKey(7)
  mins = np.array([0.0, 1.0, -2.0], np.float32)
  check(lambda lo: random.uniform(key, (4,), minval=lo, maxval=lo + 1), [mins], [0])
  check(lambda k, lo: lax.add(random.normal(k, (2,)), lo),
        [np.stack([np.asarray(random.PRNGKey(i)) for i in range(3)]), mins], [0, 0])
  check(lambda i: random.normal(random.fold_in(key, i), (2,)),
        [np.arange(3, dtype=np.uint32)], [0])


def test_rng_bit_generator_follows_jax():
  """As JAX's rule: the first key draws the whole batch; the other keys pass unchanged."""
  keys = _u32((3, 4))
  new_keys, bits = sc.vmap(lambda k: random_bits.rng_bit_generator(k, (5,)))(keys)
  k0, b0 = random_bits.rng_bit_generator(keys[0], (3, 5))
  np.testing.assert_array_equal(np.asarray(bits), np.asarray(b0))
  np.testing.assert_array_equal(np.asarray(new_keys)[0], np.asarray(k0))
  np.testing.assert_array_equal(np.asarray(new_keys)[1:], keys[1:])
  with jax.enable_x64(False):
    jk, jb = jax.vmap(lambda k: jax.lax.rng_bit_generator(k, (5,)))(keys)
  assert np.asarray(jb).shape == np.asarray(bits).shape
  np.testing.assert_array_equal(np.asarray(jk)[1:], np.asarray(new_keys)[1:])
  # Keys batched along axis 1; an unbatched key is not touched by the rule.
  new_keys, bits = sc.vmap(lambda k: random_bits.rng_bit_generator(k, (2,)), in_axes=1)(keys.T)
  assert np.asarray(bits).shape == (3, 2) and np.asarray(new_keys).shape == (3, 4)


def test_iota_2x32_shape_under_vmap():
  # No operands: never batched; the result is broadcast along the batch.
  hi, lo = sc.vmap(lambda x: random_bits.iota_2x32_shape((2, 2)), out_axes=0,
                   axis_size=3)(np.zeros(3))
  np.testing.assert_array_equal(np.asarray(lo), np.broadcast_to(np.arange(4).reshape(2, 2),
                                                                (3, 2, 2)))


def test_rng_uniform_batched_bounds():
  a = np.array([0.0, 10.0, -5.0], np.float32)
  out = np.asarray(sc.vmap(lambda a: misc.rng_uniform(a, a + 1, (4, 2)))(a))
  assert out.shape == (3, 4, 2) and out.dtype == np.float32
  assert np.all(out >= a[:, None, None]) and np.all(out <= a[:, None, None] + 1)
  assert len(np.unique(out)) > 1
  ai = np.array([0, 100, -7], np.int32)
  out = np.asarray(sc.vmap(lambda a, b: misc.rng_uniform(a, b, (50,)), in_axes=(0, None))(
      ai, np.int32(110)))
  assert out.dtype == np.int32
  assert np.all(out >= ai[:, None]) and np.all(out < 110)


# ---------------------------------------------------------------------------
# Jaxprs: the batch dim moves no more than in JAX's.

def _prims(jaxpr):
  return [e.primitive.name for e in jaxpr.jaxpr.eqns]


def test_transposes_in_elementwise_jaxprs_as_jax():
  # The batch dim moves exactly where JAX's rules move it (JAX's broadcast batcher keeps an
  # operand's batch dim only when every non-scalar operand is batched alike).
  x = batched(R, 1)
  for f, args, axes in [
      (lambda L: L.sin, [x], (1,)),
      (lambda L: L.add, [x, x], (1, 1)),
      (lambda L: lambda a, b: L.mul(a, L.exp(b)), [x, np.float32(2)], (1, None)),
      (lambda L: L.add, [x, np.ones(3, np.float32)], (1, 0)),   # batched scalar
      (lambda L: L.add, [x, R], (1, None)),                     # unbatched operand
      (lambda L: L.select, [np.array([True, False, True]), x, x], (0, 1, 1)),
      (lambda L: L.select, [np.bool_(True), x, batched(GT1, 1)], (None, 1, 1)),
      (lambda L: L.clamp, [np.ones(3, np.float32), x, np.float32(2)], (0, 1, None)),
      (lambda L: lambda a: L.bitcast_convert_type(a, np.uint8), [x], (1,)),
      (lambda L: L.igamma, [x, POS], (1, None)),
  ]:
    jaxpr = sc.make_jaxpr(sc.vmap(f(lax), in_axes=axes, out_axes=1))(*args)
    theirs = jax.make_jaxpr(jax.vmap(f(jax.lax), in_axes=axes, out_axes=1))(*args)
    assert (_prims(jaxpr).count("transpose") == _prims(theirs).count("transpose")), (
        jaxpr, theirs)
    got = sc.vmap(f(lax), in_axes=axes, out_axes=1)(*args)
    np.testing.assert_allclose(np.asarray(got), loop(f(lax), args, axes, 1), rtol=1e-5)


def test_threefry_keeps_batch_dim():
  k = _u32((3,))
  x = _u32((5, 3))
  jaxpr = sc.make_jaxpr(sc.vmap(random_bits.threefry2x32, in_axes=(None, None, 1, 1),
                                out_axes=1))(k[0], k[1], x, x)
  assert "transpose" not in _prims(jaxpr), jaxpr
