"""lax's n-ary elementwise ops broadcast size-1 dimensions, as JAX 0.10.2's do.

`lax.sub(f32[2,4], f32[1,4])` is `f32[2,4]`: operands of one rank whose sizes agree or are
1 per dimension ("degenerate" broadcasting; rank-0 operands broadcast too). Checked against
JAX 0.10.2 (the oracle) and NumPy's broadcasting:
  1. values, eager and under jit, for every primitive that JAX lets broadcast, and the
     printed jaxprs and the lowered StableHLO ops;
  2. JAX's error messages (ranks differ, sizes differ; shapes are checked before dtypes),
     eager, under jit and while staging; `select_n` and `clamp` still reject size-1 dims;
  3. derivatives: grad against JAX's (values and printed jaxprs: `reduce_sum` then
     `reshape` for the cotangent of a size-1 operand) and against finite differences;
  4. vmap with batched and unbatched operands that have size-1 dimensions;
  5. x64, and Hypothesis-drawn shapes against NumPy;
  6. nn.softmax, nn.log_softmax and scipy.special.logsumexp, which rely on it: printed
     jaxprs equal to JAX's, values and gradients.
"""
from __future__ import annotations

import contextlib
import warnings

import jax
import jax.numpy as jjnp
import jax.scipy.special as jss
import numpy as np
import pytest
from hypothesis import given, strategies as st

import stagecraft as sc
import stagecraft.scipy.special as sss
from stagecraft import lax
from stagecraft.config import enable_x64
from stagecraft.lax import elementwise
from stagecraft.test_util import check_grads

f32, i32, c64 = np.float32, np.int32, np.complex64
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seed():
  """Each test draws the same operands, whichever tests run before it."""
  global RNG
  RNG = np.random.default_rng(0)


def _values(shape, dtype, kind="any"):
  """Deterministic operands: `pos` in [0.5, 2], `small` in [0, 4) (shift amounts), else
  in [-2, 2] (integers: [-5, 5] without 0, so that they divide)."""
  if dtype == np.bool_:
    return RNG.random(shape) < 0.5
  if np.issubdtype(dtype, np.integer):
    if kind == "small":
      return RNG.integers(0, 4, shape).astype(dtype)
    v = RNG.integers(1, 6, shape) * RNG.choice([-1, 1], shape)
    return v.astype(dtype)
  if kind == "pos":
    return (0.5 + 1.5 * RNG.random(shape)).astype(dtype)
  return (4 * RNG.random(shape) - 2).astype(dtype)


# name -> (dtype, value kind of x, value kind of y). All primitives that JAX 0.10.2's lax
# broadcasts over size-1 dimensions (checked with jax 0.10.2; see test_jax_agrees_*).
BROADCASTING = {
    "add": (f32, "any", "any"), "sub": (f32, "any", "any"), "mul": (f32, "any", "any"),
    "div": (f32, "any", "pos"), "rem": (f32, "any", "pos"), "pow": (f32, "pos", "any"),
    "max": (f32, "any", "any"), "min": (f32, "any", "any"), "atan2": (f32, "any", "any"),
    "nextafter": (f32, "any", "any"), "eq": (f32, "any", "any"), "ne": (i32, "any", "any"),
    "lt": (f32, "any", "any"), "le": (i32, "any", "any"), "gt": (f32, "any", "any"),
    "ge": (i32, "any", "any"), "bitwise_and": (i32, "any", "any"),
    "bitwise_or": (np.bool_, "any", "any"), "bitwise_xor": (i32, "any", "any"),
    "shift_left": (i32, "any", "small"), "shift_right_logical": (i32, "any", "small"),
    "shift_right_arithmetic": (i32, "any", "small"), "complex": (f32, "any", "any"),
    "igamma": (f32, "pos", "pos"), "igammac": (f32, "pos", "pos"),
    "zeta": (f32, "pos", "pos"),
}
# Integer division and remainder, complex max, and pow with an integer exponent have
# lowerings of their own.
EXTRA = [("div", i32, i32), ("rem", i32, i32), ("max", c64, c64), ("add", c64, c64),
         ("pow", f32, i32)]

PAIRS = [((2, 4), (1, 4)), ((2, 1), (1, 3)), ((1, 1), (2, 3)), ((), (2, 1)),
         ((3, 1, 2), (1, 4, 1))]


def _args(name, sx, sy, dtypes=None):
  dt, kx, ky = BROADCASTING.get(name, (f32, "any", "any"))
  dx, dy = dtypes or (dt, dt)
  if name == "zeta":   # zeta(x, q) needs x > 1
    return (1.5 + _values(sx, dx, "pos"), _values(sy, dy, "pos"))
  return _values(sx, dx, kx), _values(sy, dy, ky)


def _np_ref(name, x, y):
  """NumPy's broadcasting: the reference shape (values come from JAX)."""
  return np.broadcast_shapes(np.shape(x), np.shape(y))


def _cases():
  for name in BROADCASTING:
    # (the special functions compile slowly: one pair each)
    for sx, sy in PAIRS[1:2] if name in ("igamma", "igammac", "zeta") else PAIRS[:3]:
      yield name, sx, sy, None
  for name, dx, dy in EXTRA:
    yield name, (2, 1), (1, 3), (dx, dy)
  for name in ("add", "atan2", "lt", "complex"):
    for sx, sy in PAIRS[3:]:
      yield name, sx, sy, None
  yield "sub", (2, 4), (2, 4), None   # equal shapes: unchanged


def _close(got, want, dtype=None):
  got, want = np.asarray(got), np.asarray(want)
  assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape,
                                                               got.dtype, want.dtype)
  if np.issubdtype(got.dtype, np.inexact):
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
  else:
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------
# 1. values, jaxprs and lowering


@pytest.mark.parametrize("name,sx,sy,dtypes", list(_cases()))
def test_values_match_jax(name, sx, sy, dtypes):
  x, y = _args(name, sx, sy, dtypes)
  f, jf = getattr(lax, name), getattr(jax.lax, name)
  want = jf(x, y)
  assert want.shape == _np_ref(name, x, y)
  _close(f(x, y), want)
  _close(sc.jit(f)(x, y), want)
  _close(f(y, x) if name in ("add", "mul", "max", "eq") else f(x, y), want)
  assert str(sc.make_jaxpr(f)(x, y)) == str(jax.make_jaxpr(jf)(x, y))


def test_three_operand_betainc_and_eager_arrays():
  a, b, x = _values((1, 3), f32, "pos"), _values((2, 1), f32, "pos"), np.float32(0.3)
  _close(lax.betainc(a, b, x), jax.lax.betainc(a, b, x))
  # operands that are stagecraft Arrays (the eager dispatch path)
  xa, ya = sc.numpy.asarray(_values((2, 3), f32)), sc.numpy.asarray(_values((1, 3), f32))
  _close(lax.mul(xa, ya), jax.lax.mul(np.asarray(xa), np.asarray(ya)))


def _broadcasts(text):
  """The `stablehlo.broadcast_in_dim` lines of a module, and how many ops it has (the ops'
  own spelling may differ: generic `"stablehlo.complex"(...)` against JAX's pretty form)."""
  ops = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("%")]
  return [op for op in ops if "broadcast_in_dim" in op], len(ops)


@pytest.mark.parametrize("name,sx,sy", [("sub", (2, 4), (1, 4)), ("lt", (2, 1), (1, 3)),
                                        ("complex", (1, 1), (2, 3))])
def test_lowering_broadcasts_like_jax(name, sx, sy):
  x, y = _args(name, sx, sy)
  ours = _broadcasts(sc.jit(getattr(lax, name)).lower(x, y).as_text())
  theirs = _broadcasts(jax.jit(getattr(jax.lax, name)).lower(x, y).as_text())
  assert ours == theirs
  assert any("dims = [0, 1]" in op for op in ours[0])
  _close(sc.jit(getattr(lax, name))(x, y), getattr(jax.lax, name)(x, y))


# ---------------------------------------------------------------------------
# 2. errors


def _jax_error(f, *args):
  with pytest.raises(TypeError) as e:
    f(*args)
  return str(e.value)


ERROR_CASES = [
    ("sub", np.ones(4, f32), np.ones((2, 4), f32)),        # ranks differ
    ("sub", np.ones(4, f32), np.ones(2, f32)),             # sizes differ
    ("add", np.ones((3, 4), f32), np.ones((2, 4), f32)),
    ("add", np.ones((2, 3), f32), np.ones(3, f32)),
    ("mul", np.ones((2, 1), f32), np.ones((3, 1, 1), f32)),
    ("pow", np.ones((3, 4), f32), np.ones(4, np.float16)),  # shapes before dtypes
    ("sub", np.ones(4, f32), np.ones(2, i32)),
    ("lt", np.ones((2, 3), f32), np.ones((3, 2), f32)),
    ("complex", np.ones((3, 4), f32), np.ones(4, f32)),
    ("igamma", np.ones((3, 4), f32), np.ones(4, f32)),
    ("shift_left", np.ones((2, 2), i32), np.ones((3, 1), i32)),
]


@pytest.mark.parametrize("name,x,y", ERROR_CASES)
def test_errors_match_jax(name, x, y):
  want = _jax_error(getattr(jax.lax, name), x, y)
  f = getattr(lax, name)
  for call in (f, sc.jit(f), sc.make_jaxpr(f)):
    with pytest.raises(TypeError) as e:
      call(x, y)
    assert str(e.value) == want


def test_errors_three_operands_and_scalars_not_listed():
  args = (np.ones((3, 4), f32), np.ones((2, 1), f32), np.float32(1))
  want = _jax_error(jax.lax.betainc, *args)
  assert "(3, 4), (2, 1)." in want
  with pytest.raises(TypeError) as e:
    lax.betainc(*args)
  assert str(e.value) == want
  args = (np.ones((3, 4), f32), np.ones(2, f32), np.float32(1))
  with pytest.raises(TypeError) as e:
    lax.betainc(*args)
  assert str(e.value) == _jax_error(jax.lax.betainc, *args)
  assert str(e.value) == ("regularized_incomplete_beta: arrays must have the same number of "
                          "dimensions, got {1, 2}")


@pytest.mark.parametrize("call", [
    lambda L: L.select_n(np.ones((1, 4), bool), np.ones((2, 4), f32), np.ones((2, 4), f32)),
    lambda L: L.select_n(np.ones((2, 4), bool), np.ones((2, 4), f32), np.ones((1, 4), f32)),
    lambda L: L.clamp(np.ones((1, 4), f32), np.ones((2, 4), f32), np.float32(2)),
    lambda L: L.clamp(np.float32(0), np.ones((1, 4), f32), np.ones((2, 4), f32)),
])
def test_select_n_and_clamp_do_not_broadcast(call):
  want = _jax_error(call, jax.lax)
  with pytest.raises(TypeError) as e:
    call(lax)
  assert str(e.value) == want


# ---------------------------------------------------------------------------
# 3. derivatives

GRAD_OPS = ["add", "sub", "mul", "div", "max", "min", "atan2", "pow", "rem"]


def _weighted_sum(L, name):
  def f(x, y):
    out = getattr(L, name)(x, y)
    return (out * np.arange(1, out.size + 1, dtype=f32).reshape(out.shape) / out.size).sum()
  return f


@pytest.mark.parametrize("name", GRAD_OPS)
@pytest.mark.parametrize("sx,sy", [((2, 4), (1, 4)), ((1, 3), (2, 1))])
def test_grad_matches_jax(name, sx, sy):
  x, y = _args(name, sx, sy)
  if name in ("max", "min"):
    y = y.copy()
    y.flat[0] = x.flat[0]   # a tie: each operand gets half the tangent
  g = sc.grad(_weighted_sum(lax, name), (0, 1))
  jg = jax.grad(_weighted_sum(jax.lax, name), (0, 1))
  for got, want in zip(g(x, y), jg(x, y)):
    _close(got, want)
  # the printed jaxprs of the gradient (cotangents: reduce_sum, then reshape)
  h = sc.grad(lambda x, y: getattr(lax, name)(x, y).sum(), (0, 1))
  jh = jax.grad(lambda x, y: getattr(jax.lax, name)(x, y).sum(), (0, 1))
  assert str(sc.make_jaxpr(h)(x, y)) == str(jax.make_jaxpr(jh)(x, y))
  # the JVP's jaxpr (tangents of size-1 operands are broadcast: reshape, broadcast_in_dim)
  k = lambda x, y: sc.jvp(lambda a: getattr(lax, name)(a, y), (x,), (x,))  # noqa: E731
  jk = lambda x, y: jax.jvp(lambda a: getattr(jax.lax, name)(a, y), (x,), (x,))  # noqa: E731
  assert str(sc.make_jaxpr(k)(x, y)) == str(jax.make_jaxpr(jk)(x, y))


def test_grad_printed_cotangent_of_size1_operand():
  jaxpr = sc.make_jaxpr(sc.grad(lambda x, y: lax.sub(x, y).sum(), (0, 1)))(
      np.ones((2, 4), f32), np.ones((1, 4), f32))
  text = str(jaxpr)
  assert "f:f32[4] = reduce_sum[axes=(0,) out_sharding=None] e" in text
  assert "g:f32[1,4] = reshape[dimensions=None new_sizes=(1, 4) sharding=None] f" in text


@pytest.mark.parametrize("name", GRAD_OPS)
def test_grads_against_finite_differences(name):
  x, y = _args(name, (2, 3), (1, 3))
  if name in ("max", "min"):
    y = y + 0.25 * np.sign(y - x[:1])   # no ties
  check_grads(getattr(lax, name), (x, y), order=1, modes=("fwd", "rev"))
  check_grads(getattr(lax, name), (y[0:1, 0:1], x), order=1, modes=("fwd", "rev"))


def test_second_order_and_integer_exponent():
  x, y = _args("mul", (2, 3), (1, 3))
  with enable_x64():   # second-order finite differences need float64
    check_grads(lambda a, b: lax.div(lax.mul(a, b), b + 3), (x.astype(np.float64),
                y.astype(np.float64)), order=2, modes=("fwd", "rev"))
  # pow with an integer exponent: d/dx broadcasts x and y to one shape for its select
  xs, n = _values((2, 1), f32, "pos"), np.array([[0, 1, 3]], i32)
  got = sc.grad(lambda a: lax.pow(a, n).sum())(xs)
  want = jax.grad(lambda a: jax.lax.pow(a, n).sum())(xs)
  _close(got, want)
  f = sc.grad(lambda a: lax.pow(a, n).sum())
  assert str(sc.make_jaxpr(f)(xs)) == str(jax.make_jaxpr(
      jax.grad(lambda a: jax.lax.pow(a, n).sum()))(xs))
  check_grads(lambda a: lax.pow(a, n), (xs,), order=1, modes=("fwd", "rev"))


def test_complex_and_special_grads():
  x, y = _args("complex", (2, 1), (1, 3))
  f = lambda L: (lambda a, b: L.real(L.mul(L.complex(a, b), L.complex(b, a))).sum())  # noqa
  for got, want in zip(sc.grad(f(lax), (0, 1))(x, y), jax.grad(f(jax.lax), (0, 1))(x, y)):
    _close(got, want)
  check_grads(lax.complex, (x, y), order=1, modes=("fwd", "rev"))
  a, z = _values((1, 3), f32, "pos"), _values((2, 1), f32, "pos")
  for L, argnums in ((lax, 1),):
    got = sc.grad(lambda a, z: L.igamma(a, z).sum(), argnums)(a, z)
    want = jax.grad(lambda a, z: jax.lax.igamma(a, z).sum(), argnums)(a, z)
    _close(got, want)


def test_jacrev_and_vjp_keep_operand_shapes():
  x, y = _args("mul", (2, 3), (2, 1))
  jac = sc.jacrev(lax.mul, (0, 1))(x, y)
  jjac = jax.jacrev(jax.lax.mul, (0, 1))(x, y)
  for got, want in zip(jac, jjac):
    _close(got, want)
  out, vjp = sc.vjp(lax.atan2, x, y)
  ct = np.ones(out.shape, f32)
  gx, gy = vjp(ct)
  assert gx.shape == x.shape and gy.shape == y.shape
  for got, want in zip((gx, gy), jax.vjp(jax.lax.atan2, x, y)[1](ct)):
    _close(got, want)


# ---------------------------------------------------------------------------
# 4. vmap

VMAP_CASES = [   # (x shape, y shape, in_axes)
    ((3, 2, 4), (3, 1, 4), (0, 0)),
    ((3, 2, 4), (1, 4), (0, None)),
    ((2, 4), (3, 1, 4), (None, 0)),
    ((2, 3, 4), (3, 1, 4), (1, 0)),
    ((2, 3, 4), (1, 3, 4), (1, 1)),
    ((2, 3, 1), (3, 1, 4), (1, 0)),
    ((3,), (3, 2, 1), (0, 0)),          # a batched scalar
    ((1, 1), (3, 1, 4), (None, 0)),
]


def _loop(f, args, in_axes):
  size = next(np.shape(a)[d] for a, d in zip(args, in_axes) if d is not None)
  outs = [f(*[a if d is None else np.take(a, i, d) for a, d in zip(args, in_axes)])
          for i in range(size)]
  return np.stack([np.asarray(o) for o in outs])


@pytest.mark.parametrize("name,sx,sy,in_axes",
                         [("sub", *c) for c in VMAP_CASES]
                         + [(n, *c) for n in ("lt", "pow", "complex", "div")
                            for c in VMAP_CASES[::3]])
def test_vmap_matches_loop(name, sx, sy, in_axes):
  x, y = _args(name, sx, sy, (i32, i32) if name == "div" else None)
  f = getattr(lax, name)
  got = sc.vmap(f, in_axes=in_axes)(x, y)
  want = jax.vmap(getattr(jax.lax, name), in_axes=in_axes)(x, y)
  _close(got, want)
  _close(got, _loop(getattr(jax.lax, name), (x, y), in_axes))
  _close(sc.jit(sc.vmap(f, in_axes=in_axes, out_axes=1))(x, y), np.moveaxis(want, 0, 1))


@pytest.mark.parametrize("in_axes,sx,sy", [
    ((1, 1), (2, 3, 4), (1, 3, 4)),       # equal batch dims, shapes differing in size 1
    ((0, None), (3, 2, 4), (1, 4)),       # an unbatched operand gets a leading size-1 dim
    ((1, None), (2, 3), (2,)),            # a batched operand moves to the front
    ((0, 0), (3, 2, 4), (3, 4)),          # both batched at 0, y with a size-1 dim
])
def test_vmap_batching_prints_as_jax(in_axes, sx, sy):
  # JAX's broadcast_batcher: equal batched shapes and batch dims bind as they are; otherwise
  # batch dims to the front, size-1 leading dims for unbatched operands (NumPy-int params).
  x, y = np.ones(sx, f32), np.ones(sy, f32)
  if len(sy) < len(sx) and in_axes[1] is not None:
    y = np.ones(sy[:1] + (1,) * (len(sx) - len(sy)) + sy[1:], f32)
  ours = str(sc.make_jaxpr(sc.vmap(lax.sub, in_axes=in_axes))(x, y))
  theirs = str(jax.make_jaxpr(jax.vmap(jax.lax.sub, in_axes=in_axes))(x, y))
  assert ours == theirs


def test_broadcast_batcher_batched_scalars():
  # A batched rank-0 operand among operands with size-1 dimensions gets trailing size-1
  # dims after its batch dim moves to the front; unbatched rank-0 operands stay rank 0.
  a = np.arange(6, dtype=f32).reshape(2, 3, 1)    # batched at 1, unbatched (2, 1)
  b = np.arange(4, dtype=f32).reshape(1, 4)       # unbatched (1, 4)
  s = np.arange(3, dtype=f32)                     # batched rank 0
  f = lambda L: lambda a, b, s: L.add(L.add(a, b), s)  # noqa: E731
  got = sc.vmap(f(lax), in_axes=(1, None, 0))(a, b, s)
  want = np.stack([a[:, i] + b + s[i] for i in range(3)], 0)
  np.testing.assert_array_equal(np.asarray(got), want)
  ours = str(sc.make_jaxpr(sc.vmap(f(lax), in_axes=(1, None, 0)))(a, b, s))
  theirs = str(jax.make_jaxpr(jax.vmap(f(jax.lax), in_axes=(1, None, 0)))(a, b, s))
  assert ours == theirs


def test_vmap_of_grad():
  x, y = _values((3, 2, 4), f32), _values((3, 1, 4), f32)
  g = lambda L, G: G(lambda a, b: L.mul(a, L.sin(b)).sum(), (0, 1))  # noqa: E731
  got = sc.vmap(g(lax, sc.grad))(x, y)
  want = jax.vmap(g(jax.lax, jax.grad))(x, y)
  for a, b in zip(got, want):
    _close(a, b)


# ---------------------------------------------------------------------------
# 5. x64 and Hypothesis


def test_x64():
  with enable_x64():
    x = np.linspace(-1, 1, 8).reshape(2, 4)
    y = np.linspace(0.5, 2, 4).reshape(1, 4)
    out = lax.div(x, y)
    assert out.dtype == np.float64 and out.shape == (2, 4)
    np.testing.assert_allclose(np.asarray(out), x / y, rtol=1e-15)
    gx, gy = sc.grad(lambda a, b: lax.div(a, b).sum(), (0, 1))(x, y)
    np.testing.assert_allclose(np.asarray(gy), -(x / y**2).sum(0, keepdims=True), rtol=1e-14)
    check_grads(lax.atan2, (x, y), order=1, modes=("fwd", "rev"))
    with pytest.raises(TypeError, match=r"^max: arrays must have the same number of "
                                        r"dimensions, got \{1, 2\}$"):
      lax.max(x, y[0])


_NP = {"add": np.add, "mul": np.multiply, "max": np.maximum, "lt": np.less,
       "atan2": np.arctan2}


@given(st.data())
def test_hypothesis_shapes_against_numpy(data):
  rank = data.draw(st.integers(1, 3))
  full = data.draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
  sx = tuple(d if data.draw(st.booleans()) else 1 for d in full)
  sy = tuple(d if data.draw(st.booleans()) else 1 for d in full)
  name = data.draw(st.sampled_from(sorted(_NP)))
  x, y = _values(sx, f32), _values(sy, f32)
  got = getattr(lax, name)(x, y)
  want = _NP[name](x, y)
  assert got.shape == want.shape
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------
# 6. softmax, log_softmax and logsumexp


def _f32(*shape):
  return (np.arange(int(np.prod(shape)), dtype=f32).reshape(shape) + 1) / 7


_MASK = np.array([[True, False, True], [True, True, False]])

JAXPR_PROGRAMS = {
    "softmax": (lambda m: m.nn.softmax, (_f32(4),)),
    "softmax_axis0": (lambda m: lambda x: m.nn.softmax(x, axis=0), (_f32(2, 3),)),
    "softmax_all_axes": (lambda m: lambda x: m.nn.softmax(x, axis=None), (_f32(2, 3),)),
    "softmax_where": (lambda m: lambda x, w: m.nn.softmax(x, where=w), (_f32(2, 3), _MASK)),
    "log_softmax": (lambda m: m.nn.log_softmax, (_f32(4),)),
    "logsumexp": (lambda m: m.scipy.special.logsumexp, (_f32(4),)),
    "logsumexp_axis": (lambda m: lambda x: m.scipy.special.logsumexp(x, axis=1),
                       (_f32(2, 3),)),
    "logsumexp_keepdims": (lambda m: lambda x: m.scipy.special.logsumexp(
        x, axis=1, keepdims=True), (_f32(2, 3),)),
    "logsumexp_b": (lambda m: lambda x, b: m.scipy.special.logsumexp(x, b=b),
                    (_f32(4), _f32(4))),
    "logsumexp_return_sign": (lambda m: lambda x: m.scipy.special.logsumexp(
        x, return_sign=True), (_f32(4),)),
    "logsumexp_where": (lambda m: lambda x, w: m.scipy.special.logsumexp(x, axis=1, where=w),
                        (_f32(2, 3), _MASK)),
}


@pytest.mark.parametrize("name", sorted(JAXPR_PROGRAMS))
def test_softmax_logsumexp_jaxprs_match_jax(name):
  mk, args = JAXPR_PROGRAMS[name]
  assert str(sc.make_jaxpr(mk(sc))(*args)) == str(jax.make_jaxpr(mk(jax))(*args))


def test_softmax_is_no_custom_jvp_by_default():
  text = str(sc.make_jaxpr(sc.nn.softmax)(_f32(4)))
  assert "custom_jvp_call" not in text and "stop_gradient" in text
  assert "f:f32[4] = sub a e" in text   # lax broadcasts the f32[1] maximum


@contextlib.contextmanager
def _custom_jvp_softmax():
  # NB: config.py may still warn that the option is accepted but not implemented.
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    with sc.softmax_custom_jvp(True):
      yield


BIG = np.array([[1000., 0., -1000., 3.], [-np.inf, 2., 2., -np.inf]], f32)
MASK4 = np.array([[True, True, False, True], [False, True, True, True]])


@pytest.mark.parametrize("custom", [False, True])
def test_softmax_values_and_grads_match_jax(custom):
  ctx = _custom_jvp_softmax() if custom else contextlib.nullcontext()
  x = _values((3, 4), f32)
  with ctx:
    if custom:
      assert "custom_jvp_call" in str(sc.make_jaxpr(sc.nn.softmax)(x))
    for axis in (-1, 0, None, (0, 1)):
      _close(sc.nn.softmax(x, axis=axis), jax.nn.softmax(x, axis=axis))
    _close(sc.nn.softmax(BIG), jax.nn.softmax(BIG))
    _close(sc.nn.softmax(BIG, where=MASK4), jax.nn.softmax(BIG, where=MASK4))
    w = np.linspace(-1, 1, 12, dtype=f32).reshape(3, 4)
    g = sc.grad(lambda v: (sc.nn.softmax(v) * w).sum())(x)
    _close(g, jax.grad(lambda v: (jax.nn.softmax(v) * w).sum())(x))
    m = MASK4[:1].repeat(3, 0)
    g = sc.grad(lambda v: (sc.nn.softmax(v, axis=1, where=m) * w).sum())(x)
    _close(g, jax.grad(lambda v: (jax.nn.softmax(v, axis=1, where=m) * w).sum())(x))
    check_grads(lambda v: sc.nn.softmax(v, axis=0), (x,), order=1, modes=("fwd", "rev"))


def test_log_softmax_values_and_grads_match_jax():
  x = _values((3, 4), f32)
  for axis in (-1, 0, None):
    _close(sc.nn.log_softmax(x, axis=axis), jax.nn.log_softmax(x, axis=axis))
  _close(sc.nn.log_softmax(BIG), jax.nn.log_softmax(BIG))
  _close(sc.nn.log_softmax(BIG, where=MASK4), jax.nn.log_softmax(BIG, where=MASK4))
  w = np.linspace(-1, 1, 12, dtype=f32).reshape(3, 4)
  g = sc.grad(lambda v: (sc.nn.log_softmax(v) * w).sum())(x)
  _close(g, jax.grad(lambda v: (jax.nn.log_softmax(v) * w).sum())(x))
  check_grads(sc.nn.log_softmax, (x,), order=1, modes=("fwd", "rev"))
  with pytest.raises(ValueError, match="axis 2 is out of bounds"):
    sc.nn.log_softmax(x, axis=2)


def test_logsumexp_values_and_grads_match_jax():
  x = _values((3, 4), f32)
  b = np.array([[1.0], [0.0], [-0.5]], f32)   # broadcasts along axis 1
  for kw in ({}, {"axis": 1}, {"axis": 0, "keepdims": True}, {"axis": (0, 1)},
             {"b": b, "axis": 1}, {"b": b[:, 0:1].T[:, :1]}, {"b": np.float32(2)},
             {"where": MASK4[:1].repeat(3, 0), "axis": 1}):
    _close(sss.logsumexp(x, **kw), jss.logsumexp(x, **kw))
  out, sign = sss.logsumexp(x, axis=1, b=b, return_sign=True)
  jout, jsign = jss.logsumexp(x, axis=1, b=b, return_sign=True)
  _close(out, jout)
  _close(sign, jsign)
  _close(sss.logsumexp(BIG, axis=1), jss.logsumexp(BIG, axis=1))
  _close(sss.logsumexp(np.full((2,), -np.inf, f32)), jss.logsumexp(np.full((2,), -np.inf, f32)))
  # b of lower rank than a (rank promotion, then lax's broadcasting of size-1 dims)
  b4 = np.array([1.0, 0.0, -0.5, 2.0], f32)
  _close(sss.logsumexp(x, b=b4), jss.logsumexp(x, b=b4))
  _close(sss.logsumexp(x[0], b=x), jss.logsumexp(x[0], b=x))
  g = sc.grad(lambda v: sss.logsumexp(v, axis=1).sum())(x)
  _close(g, jax.grad(lambda v: jss.logsumexp(v, axis=1).sum())(x))
  check_grads(lambda v: sss.logsumexp(v, axis=0), (x,), order=1, modes=("fwd", "rev"))
  check_grads(lambda v, c: sss.logsumexp(v, b=c, axis=1), (x, np.abs(b) + 0.5), order=1,
              modes=("fwd", "rev"))
  cx = (x + 1j * x[::-1]).astype(c64)
  _close(sss.logsumexp(cx, axis=1), jss.logsumexp(cx, axis=1))


def test_logsumexp_x64():
  with enable_x64():
    x = np.linspace(-3, 700, 12).reshape(3, 4)
    out = sss.logsumexp(x, axis=1)
    assert out.dtype == np.float64
    m = x.max(1)
    np.testing.assert_allclose(np.asarray(out), m + np.log(np.exp(x - m[:, None]).sum(1)),
                               rtol=1e-14)
    check_grads(lambda v: sss.logsumexp(v, axis=1), (x,), order=1, modes=("fwd", "rev"))


# ---------------------------------------------------------------------------
# 7. sharding in types: a size-1 dimension defers to the other operand's split


def test_explicit_sharding_types_match_jax():
  import jax.sharding as jsh
  from stagecraft.sharding import AxisType, NamedSharding, P, make_mesh, set_mesh
  mesh = make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
  jmesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(jsh.AxisType.Explicit,) * 2)
  a = np.arange(32, dtype=f32).reshape(8, 4)
  for spec_a, spec_b, b in [(("x", None), (None, None), a[:1]), (("x", "y"), (None, "y"), a[:1]),
                            ((None, "y"), ("x", None), a[:, :1])]:
    with set_mesh(mesh):
      xa = sc.device_put(a, NamedSharding(mesh, P(*spec_a)))
      xb = sc.device_put(b, NamedSharding(mesh, P(*spec_b)))
      ours = [lax.sub(xa, xb), sc.jit(lax.sub)(xa, xb),
              *sc.grad(lambda u, v: lax.mul(u, v).sum(), (0, 1))(xa, xb)]
    with jax.set_mesh(jmesh):
      ja = jax.device_put(a, jsh.NamedSharding(jmesh, jsh.PartitionSpec(*spec_a)))
      jb = jax.device_put(b, jsh.NamedSharding(jmesh, jsh.PartitionSpec(*spec_b)))
      theirs = [jax.lax.sub(ja, jb), jax.jit(jax.lax.sub)(ja, jb),
                *jax.grad(lambda u, v: jax.lax.mul(u, v).sum(), (0, 1))(ja, jb)]
    for o, t in zip(ours, theirs):
      assert str(sc.typeof(o)) == str(jax.typeof(t))
      np.testing.assert_allclose(np.asarray(o), np.asarray(t))


@pytest.mark.parametrize("name,in_axes", [("igamma", (None, 0)), ("igammac", (0, None)),
                                          ("igamma_grad_a", (None, 0))])
def test_vmap_of_special_binary_primitives_with_size_one_dims(name, in_axes):
  # The special-function primitives broadcast size-1 dims too; their batching rule is the
  # elementwise one (a batched operand of shape (3, 1, 4) against an unbatched (2, 4)).
  a = np.full((2, 4), 2.0, np.float32)
  b = np.linspace(0.5, 3.0, 12).astype(np.float32).reshape(3, 1, 4)
  args = (a, b) if in_axes == (None, 0) else (b, a)
  ours = sc.vmap(getattr(lax, name), in_axes)(*args)
  theirs = jax.vmap(getattr(jax.lax, name), in_axes)(*args)
  assert ours.shape == theirs.shape == (3, 2, 4)
  np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=1e-6)
