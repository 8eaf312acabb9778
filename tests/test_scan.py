"""scan, fori_loop and map: values against Python loops and JAX, every transformation
(jvp, linearize, grad, vmap, jit, DCE) and the error messages."""
import re

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.interpreters import partial_eval as pe
from stagecraft.test_util import check_grads

from _util import assert_trees_allclose

R = np.random.default_rng(0)


def _r(*shape, scale=1.0):
  return (R.standard_normal(shape) * scale).astype(np.float32)


def _close(a, b, tol=1e-5):
  assert_trees_allclose(a, b, rtol=tol, atol=tol)


def _loop(f, init, xs, reverse=False):
  n = jax.tree.leaves(xs)[0].shape[0]
  carry, ys = init, [None] * n
  for i in (reversed(range(n)) if reverse else range(n)):
    carry, ys[i] = f(carry, jax.tree.map(lambda a: a[i], xs))
  return carry, jax.tree.map(lambda *y: np.stack(y), *ys)


def _step(c, x):
  a, b = c
  h = jnp.tanh(a * x["u"] + b)
  return (h, b * 0.9 + x["v"].sum()), {"h": h, "s": jnp.sum(h * h)}


def _step_np(c, x):
  a, b = c
  h = np.tanh(a * x["u"] + b)
  return (h, b * np.float32(0.9) + x["v"].sum()), {"h": h, "s": np.sum(h * h)}


XS = {"u": _r(5, 3), "v": _r(5, 2)}
INIT = (_r(3), np.float32(0.5))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("unroll", [1, 2, 5, True])
def test_scan_pytrees_eager_and_jit_equal_loop(reverse, unroll):
  want = _loop(_step_np, INIT, XS, reverse)
  got = lax.scan(_step, INIT, XS, reverse=reverse, unroll=unroll)
  _close(got, want)
  got = sc.jit(lambda i, x: lax.scan(_step, i, x, reverse=reverse, unroll=unroll))(INIT, XS)
  _close(got, want)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(0, 6), unroll=st.integers(1, 4), reverse=st.booleans(),
       dtype=st.sampled_from([np.float32, np.int32]))
def test_scan_shapes_and_dtypes_hypothesis(n, unroll, reverse, dtype):
  xs = (np.arange(n * 2).reshape(n, 2) % 5).astype(dtype)
  f = lambda c, x: (c + x[0] * 2, x * c)
  fj = lambda c, x: (c + x[0] * 2, x * c)
  got = lax.scan(f, dtype(1), xs, reverse=reverse, unroll=unroll)
  want = jax.lax.scan(fj, dtype(1), xs, reverse=reverse, unroll=unroll)
  _close(got, want)
  assert np.asarray(got[1]).shape == (n, 2) and np.asarray(got[1]).dtype == dtype


def test_scan_without_xs_and_closures():
  w = _r(3)
  c, ys = lax.scan(lambda c, _: (c * 2.0, c + w), np.float32(1.0), None, length=4)
  np.testing.assert_allclose(c, 16.0)
  np.testing.assert_allclose(ys, np.array([1, 2, 4, 8], np.float32)[:, None] + w, rtol=1e-6)

  @sc.jit
  def f(a, xs):   # the body closes over a's tracer from the outer jit trace
    return lax.scan(lambda c, x: (c + a * x, c), 0.0, xs)
  c, ys = f(np.float32(3.0), np.arange(4, dtype=np.float32))
  assert float(c) == 18.0
  np.testing.assert_allclose(ys, [0, 0, 3, 9])


def test_scan_traces_a_function_once_per_signature():
  calls = []

  def body(c, x):
    calls.append(1)
    return c + x, c
  xs = np.arange(3, dtype=np.float32)
  for _ in range(3):
    lax.scan(body, np.float32(0), xs)
  assert len(calls) == 1
  lax.scan(body, np.float32(0), np.arange(4, dtype=np.float32))   # same body signature
  assert len(calls) == 1
  lax.scan(body, np.zeros(2, np.float32), np.ones((4, 2), np.float32))
  assert len(calls) == 2


def test_weak_typed_init_promoted_to_body_dtype():
  c, _ = lax.scan(lambda c, x: (c + x, None), 0.0, np.ones(3, np.float32))
  assert c.dtype == np.float32 and float(c) == 3.0


# ---------------------------------------------------------------------------
# Differentiation


def _rnn(np_, lax_):
  def loss(params, xs, h0):
    W, U, b = params

    def step(h, x):
      h = np_.tanh(h @ W + x @ U + b)
      return h, np_.sum(h ** 2)
    h, ys = lax_.scan(step, h0, xs)
    return np_.sum(h) + np_.sum(ys)
  return loss


def _rnn_args(H=8, D=3, T=6):
  params = (_r(H, H, scale=0.3), _r(D, H, scale=0.3), _r(H, scale=0.1))
  return params, _r(T, D), np.zeros(H, np.float32)


def test_tanh_rnn_grad_equals_jax():
  args = _rnn_args()
  want = jax.grad(_rnn(jjnp, jax.lax), argnums=(0, 1, 2))(*args)
  _close(sc.grad(_rnn(jnp, lax), argnums=(0, 1, 2))(*args), want)
  _close(sc.jit(sc.grad(_rnn(jnp, lax), argnums=(0, 1, 2)))(*args), want)
  t = sc.jvp(lambda p: _rnn(jnp, lax)(p, *args[1:]), (args[0],), (args[0],))
  tj = jax.jvp(lambda p: _rnn(jjnp, jax.lax)(p, *args[1:]), (args[0],), (args[0],))
  _close(t, tj)


def test_scan_check_grads_fwd_rev_order2():
  xs = _r(4, 2)
  f = lambda c0, xs: lax.scan(lambda c, x: (jnp.sin(c * x[0]) + x[1], c * x), c0, xs)
  with sc.enable_x64():
    check_grads(f, (np.float64(0.3), xs.astype(np.float64)), order=2, modes=("fwd", "rev"))
    check_grads(lambda c0, xs: lax.scan(lambda c, x: (c * x, c), c0, xs, reverse=True)[1],
                (np.float64(0.7), xs[:, 0].astype(np.float64)), order=2)


def test_grad_residuals_forward_consts_and_xs():
  # W and xs are read by the tangent body: they are passed to the backward scan as they are,
  # not stacked per iteration.
  args = _rnn_args()
  jaxpr = sc.make_jaxpr(sc.grad(_rnn(jnp, lax)))(*args).jaxpr
  scans = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
  assert len(scans) == 2
  fwd, bwd = scans
  stacked = [v for v in fwd.outvars if v.aval.shape[:1] == (6,)]
  assert all(v.aval.shape == (6, 8) for v in stacked[1:])   # h-sized residuals only
  assert args[0][0].shape in [v.aval.shape for v in bwd.invars]   # W as a const


def test_grad_of_integer_carry_and_linearize():
  def f(x):
    (i, y), _ = lax.scan(lambda c, _: ((c[0] + 1, c[1] * x), None), (0, 1.0), None, length=3)
    return y * i
  np.testing.assert_allclose(sc.grad(f)(np.float32(2.0)), 3 * 3 * 4.0, rtol=1e-6)
  y, f_lin = sc.linearize(f, np.float32(2.0))
  np.testing.assert_allclose(f_lin(np.float32(1.0)), 36.0, rtol=1e-6)


# ---------------------------------------------------------------------------
# vmap


@pytest.mark.parametrize("in_axes", [(0, 0), (None, 1), (0, None)])
def test_vmap_of_scan_equals_loop(in_axes):
  init = _r(4, 3) if in_axes[0] == 0 else _r(3)
  xs = _r(4, 5, 3) if in_axes[1] == 0 else (_r(5, 4, 3) if in_axes[1] == 1 else _r(5, 3))
  body = lambda c, x: (jnp.tanh(c + x), c * x)
  body_np = lambda c, x: (np.tanh(c + x), c * x)
  got = sc.vmap(lambda c, xs: lax.scan(body, c, xs), in_axes=in_axes)(init, xs)
  lanes = []
  for k in range(4):
    c = init[k] if in_axes[0] == 0 else init
    x = xs[k] if in_axes[1] == 0 else (xs[:, k] if in_axes[1] == 1 else xs)
    lanes.append(_loop(body_np, c, x))
  _close(got, jax.tree.map(lambda *a: np.stack(a), *lanes))


def test_per_example_grad_through_scan_and_grad_of_vmap():
  args = _rnn_args()
  batch = np.stack([args[1], args[1] * 2, -args[1]])
  got = sc.vmap(sc.grad(_rnn(jnp, lax)), in_axes=(None, 0, None))(args[0], batch, args[2])
  want = jax.vmap(jax.grad(_rnn(jjnp, jax.lax)), in_axes=(None, 0, None))(args[0], batch,
                                                                         args[2])
  _close(got, want, 1e-4)
  g = sc.grad(lambda p: jnp.sum(sc.vmap(_rnn(jnp, lax), in_axes=(None, 0, None))(
      p, batch, args[2])))(args[0])
  gj = jax.grad(lambda p: jjnp.sum(jax.vmap(_rnn(jjnp, jax.lax), in_axes=(None, 0, None))(
      p, batch, args[2])))(args[0])
  _close(g, gj, 1e-4)


def test_scan_with_collective_over_vmap_axis():
  xs = _r(3, 4)   # vmap over the 4 columns; scan over 3 rows
  f = lambda col: lax.scan(lambda c, x: (c + lax.psum(x, "i"), c), 0.0, col)
  got = sc.vmap(f, in_axes=1, axis_name="i")(xs)
  want_c = xs.sum(1).sum()
  np.testing.assert_allclose(got[0], np.full(4, want_c), rtol=1e-5)


# ---------------------------------------------------------------------------
# DCE


def test_dce_removes_unused_carry_and_its_computation():
  def f(xs):
    (a, b), ys = lax.scan(lambda c, x: ((c[0] + x, jnp.sin(c[1]) * x), None),
                          (0.0, 1.0), xs)
    return a
  jaxpr = sc.make_jaxpr(f)(np.ones(4, np.float32)).jaxpr
  scan_eqn = next(e for e in jaxpr.eqns if e.primitive.name == "scan")
  assert "sin" in str(scan_eqn.params["jaxpr"])
  new, _ = pe.dce_jaxpr(jaxpr, [True])
  scan_eqn = next(e for e in new.eqns if e.primitive.name == "scan")
  assert scan_eqn.params["num_carry"] == 1 and len(scan_eqn.outvars) == 1
  assert "sin" not in str(scan_eqn.params["jaxpr"])
  # A carry the live one reads stays (fixed point), and the program still runs.
  g = lambda xs: lax.scan(lambda c, x: ((c[0] + c[1], c[1] * x), None), (0.0, 1.0), xs)[0][0]
  new, _ = pe.dce_jaxpr(sc.make_jaxpr(g)(np.ones(3, np.float32)).jaxpr, [True])
  assert next(e for e in new.eqns if e.primitive.name == "scan").params["num_carry"] == 2
  np.testing.assert_allclose(sc.jit(f)(np.arange(4, dtype=np.float32)), 6.0)


def test_dce_of_unused_scan_output_removes_the_scan():
  f = lambda xs: (lax.scan(lambda c, x: (c + x, c), 0.0, xs), xs * 2)[1]
  new, _ = pe.dce_jaxpr(sc.make_jaxpr(f)(np.ones(3, np.float32)).jaxpr, [True])
  assert all(e.primitive.name != "scan" for e in new.eqns)


# ---------------------------------------------------------------------------
# fori_loop and map


@pytest.mark.parametrize("lo,hi", [(0, 5), (2, 7), (3, 3), (5, 2)])
def test_fori_loop_static_bounds_is_a_scan(lo, hi):
  f = lambda x: lax.fori_loop(lo, hi, lambda i, c: c * 1.5 + i, x)
  want = 1.0
  for i in range(lo, hi):
    want = want * 1.5 + i
  np.testing.assert_allclose(f(np.float32(1.0)), want, rtol=1e-6)
  np.testing.assert_allclose(sc.jit(f)(np.float32(1.0)), want, rtol=1e-6)
  text = str(sc.make_jaxpr(f)(np.float32(1.0)))
  assert "scan[" in text and "while[" not in text
  dwant = 1.5 ** max(hi - lo, 0)
  np.testing.assert_allclose(sc.grad(f)(np.float32(1.0)), dwant, rtol=1e-6)


def test_fori_loop_traced_bounds_is_a_while_loop():
  f = sc.jit(lambda n, x: lax.fori_loop(0, n, lambda i, c: c + i * x, 0.0))
  np.testing.assert_allclose(f(5, np.float32(2.0)), 20.0)
  assert "while[" in str(sc.make_jaxpr(lambda n: lax.fori_loop(0, n, lambda i, c: c + 1, 0))(3))
  with pytest.raises(ValueError, match="Can only use `unroll` in `fori_loop` if the loop"):
    sc.jit(lambda n: lax.fori_loop(0, n, lambda i, c: c, 0, unroll=2))(3)
  # as JAX's: bounds of different dtypes are refused (a Python int with a float bound too)
  with pytest.raises(TypeError, match="lower and upper arguments to fori_loop must have "
                                      "equal types, got int32 and float32"):
    lax.fori_loop(0, 2.5, lambda i, c: c, 0)


@pytest.mark.parametrize("batch_size", [None, 2, 3, 10])
def test_map_equals_loop(batch_size):
  xs = {"a": _r(7, 3), "b": _r(7)}
  f = lambda d: jnp.sum(d["a"]) * d["b"]
  got = lax.map(f, xs, batch_size=batch_size)
  np.testing.assert_allclose(got, xs["a"].sum(1) * xs["b"], rtol=1e-5)
  if batch_size is None:
    assert "scan[" in str(sc.make_jaxpr(lambda x: lax.map(f, x))(xs))


# ---------------------------------------------------------------------------
# Errors


def test_scan_errors():
  with pytest.raises(ValueError, match="scan got values with different leading axis sizes: "
                                       r"xs\[0\] of leading size 3, xs\[1\] of leading size 4"):
    lax.scan(lambda c, x: (c, x), 0.0, (np.ones(3), np.ones(4)))
  with pytest.raises(ValueError, match="scan got no values to scan over and `length` not"):
    lax.scan(lambda c, x: (c, x), 0.0, None)
  with pytest.raises(ValueError, match=re.escape("scan got `length` argument of 5 which "
                                                 "disagrees with leading axis sizes [3].")):
    lax.scan(lambda c, x: (c, x), 0.0, np.ones(3), length=5)
  with pytest.raises(ValueError, match=re.escape("no leading axis to scan over: xs['a'] has "
                                                 "shape ()")):
    lax.scan(lambda c, x: (c, x), 0.0, {"a": np.float32(1)})
  with pytest.raises(TypeError, match="scan body output must be a pair"):
    lax.scan(lambda c, x: c, 0.0, np.ones(3))
  for body, init, xs in [
      (lambda c, x: ((c[0], c[1] * 1.5), x), (np.float32(0), np.int32(1)),
       np.ones(3, np.float32)),
      (lambda c, x: ({"w": c["w"][None]}, x), {"w": np.ones(3, np.float32)}, np.ones(2)),
      (lambda c, x: ([c[0], c[1]], x), (1.0, 2.0), np.ones(3))]:
    msgs = []
    for m in (lax, jax.lax):   # carry errors in JAX 0.10's words
      with pytest.raises(TypeError) as e:
        m.scan(body, init, xs)
      msgs.append(str(e.value))
    assert msgs[0] == msgs[1]
  with pytest.raises(TypeError, match="carry input and carry output must have the same pytree"):
    lax.scan(lambda c, x: ((c, c), x), 0.0, np.ones(3))
  with pytest.raises(ValueError, match="`unroll` must be a `bool` or a non-negative `int`"):
    lax.scan(lambda c, x: (c, x), 0.0, np.ones(3), unroll=-1)
  with pytest.raises(TypeError, match="f argument should be a callable"):
    lax.scan(3, 0.0, np.ones(3))


def test_scan_inside_cond_inside_vmap_inside_grad():
  # grad over w of a vmapped (over x, and a per-lane predicate) cond whose true branch scans.
  def f(np_, lax_, w, x, p):
    def branch_scan(x):
      c, ys = lax_.scan(lambda c, xi: (np_.sin(c * w + xi), c), x[0], x)
      return c + np_.sum(ys)
    return lax_.cond(p > 0, branch_scan, lambda x: np_.sum(x * w), x)

  xs, ps = _r(4, 5), np.array([1.0, -1.0, 2.0, -3.0], np.float32)
  ours = lambda w: jnp.sum(sc.vmap(lambda x, p: f(jnp, lax, w, x, p))(xs, ps))
  ref = lambda w: jjnp.sum(jax.vmap(lambda x, p: f(jjnp, jax.lax, w, x, p))(xs, ps))
  w = np.float32(0.7)
  np.testing.assert_allclose(sc.grad(ours)(w), jax.grad(ref)(w), rtol=1e-5)
  np.testing.assert_allclose(sc.jit(sc.grad(ours))(w), jax.grad(ref)(w), rtol=1e-5)
  np.testing.assert_allclose(sc.jvp(ours, (w,), (np.float32(1),))[1],
                             jax.jvp(ref, (w,), (np.float32(1),))[1], rtol=1e-5)
  # the same with an unbatched predicate (cond stays a cond under vmap)
  ours2 = lambda w: jnp.sum(sc.vmap(lambda x: f(jnp, lax, w, x, 1.0))(xs))
  ref2 = lambda w: jjnp.sum(jax.vmap(lambda x: f(jjnp, jax.lax, w, x, 1.0))(xs))
  np.testing.assert_allclose(sc.grad(ours2)(w), jax.grad(ref2)(w), rtol=1e-5)


def test_grad_hoists_loop_invariant_residuals():
  # W.T is computed from a constant only: its residual is computed once outside the loop
  # (a const of the backward scan), not stacked per iteration.
  def loss(np_, lax_, W, xs):
    step = lambda h, x: (np_.tanh(h @ W.T + x), np_.tanh(h @ W.T + x))
    return np_.sum(lax_.scan(step, np_.zeros(4, np.float32), xs)[1])
  W, xs = _r(4, 4, scale=0.5), _r(7, 4)
  jaxpr = sc.make_jaxpr(sc.grad(lambda W: loss(jnp, lax, W, xs)))(W).jaxpr
  fwd = next(e for e in jaxpr.eqns if e.primitive.name == "scan")
  assert all(v.aval.shape != (7, 4, 4) for v in fwd.outvars)
  assert any(e.primitive.name == "transpose" for e in jaxpr.eqns)   # hoisted W.T
  np.testing.assert_allclose(sc.grad(lambda W: loss(jnp, lax, W, xs))(W),
                             jax.grad(lambda W: loss(jjnp, jax.lax, W, xs))(W), rtol=1e-5)


@pytest.mark.parametrize("init", [0, 0.0, np.int32(0)])
def test_weak_int_carry_promotes_as_jax(init):
  # A weakly typed Python int carry meeting a float32 body becomes float32 (JAX promotes
  # weak carries); a strong int32 carry stays an error in both.
  xs = np.arange(3.0, dtype=np.float32)
  body = lambda c, x: (c + x * 0.5, c)
  if isinstance(init, np.integer):
    with pytest.raises(TypeError, match="carry"):
      lax.scan(body, init, xs)
    with pytest.raises(TypeError):
      jax.lax.scan(body, init, xs)
    return
  got, want = lax.scan(body, init, xs), jax.lax.scan(body, init, xs)
  assert_trees_allclose(got, want, check_dtypes=True)
  got = sc.jit(lambda xs: lax.scan(body, init, xs))(xs)
  assert_trees_allclose(got, want, check_dtypes=True)
