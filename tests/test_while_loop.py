"""`lax.while_loop` (the `while` primitive) against JAX's `lax.while_loop` and Python loops:
eager, jit, pytree carries, closures, jvp/linearize, the reverse-mode error, vmap (batched
init, consts and predicate), DCE of dead carries, and the error messages."""
import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft import core
from stagecraft.interpreters import ad, lowering, partial_eval as pe
from stagecraft.test_util import check_grads

from _util import assert_trees_allclose


def _close(a, b, tol=1e-5):
  assert_trees_allclose(a, b, rtol=tol, atol=tol)


def _prims(jaxpr):
  return [e.primitive.name for e in jaxpr.eqns]


def _while_eqns(closed):
  return [e for e in closed.jaxpr.eqns if e.primitive.name == "while"]


def _loop(wl, np_):
  """A loop with a float carry, an int counter and a closed-over constant."""
  def f(x, y):
    return wl(lambda c: c[0] < 5, lambda c: (c[0] + 1, np_.sin(c[1]) * y), (0, x))
  return f


def _sc_f():
  return _loop(lax.while_loop, jnp)


def _jax_f():
  return _loop(jax.lax.while_loop, jax.numpy)


# ---------------------------------------------------------------------------
# Evaluation


def test_eager_and_jit_match_jax():
  x, y = np.float32(0.7), np.float32(1.3)
  expected = _jax_f()(x, y)
  _close(_sc_f()(x, y), expected)
  _close(sc.jit(_sc_f())(x, y), expected)
  assert len(_while_eqns(sc.make_jaxpr(_sc_f())(x, y))) == 1


def test_pytree_carry_and_dtypes():
  def body(c):
    i, d = c
    return i + 1, {"w": d["w"] * 2.0, "b": d["b"] + i}
  init = (np.int32(0), {"w": np.ones(3, np.float32), "b": np.zeros((), np.int32)})
  cond = lambda c: c[0] < 4   # noqa: E731
  out = lax.while_loop(cond, body, init)
  _close(out, jax.lax.while_loop(cond, body, init))
  assert out[1]["w"].dtype == np.float32 and out[1]["b"].dtype == np.int32


def test_zero_iterations_returns_init():
  out = sc.jit(lambda x: lax.while_loop(lambda c: c > 10.0, lambda c: c * 2.0, x))(3.0)
  assert float(out) == 3.0


def test_closure_over_outer_jit_argument():
  # The bound `n` and the scale `s` are tracers of the enclosing jit: they are operands.
  def f(x, n, s):
    return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * s), (0, x))
  def g(x, n, s):
    return jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * s), (0, x))
  args = (np.float32(1.5), np.int32(6), np.float32(1.1))
  _close(sc.jit(f)(*args), jax.jit(g)(*args))
  _close(f(*args), g(*args))


def test_closure_over_array_constant_and_lowering():
  a = np.arange(4, dtype=np.float32)
  f = lambda x: lax.while_loop(lambda c: c.sum() < 100.0, lambda c: c + a, x)   # noqa: E731
  g = lambda x: jax.lax.while_loop(lambda c: c.sum() < 100.0, lambda c: c + a, x)   # noqa
  x = np.ones(4, np.float32)
  _close(sc.jit(f)(x), g(x))
  closed = sc.make_jaxpr(f)(x)
  text = lowering.lower_jaxpr_to_module("f", closed.jaxpr)
  assert text.count('"stablehlo.while"') == 1
  assert "(tensor<i1>) -> ()" in text   # the cond region returns tensor<i1>
  printed = str(closed)
  assert "while[" in printed and "body_nconsts=1" in printed and "cond_nconsts=0" in printed


def test_weak_init_promoted_to_body_dtype():
  # A Python float init with an f32 body: the carry becomes strong f32 (as in JAX).
  w = np.float32(2.0)
  out = lax.while_loop(lambda c: c < 10.0, lambda c: c * w, 1.0)
  ref = jax.lax.while_loop(lambda c: c < 10.0, lambda c: c * w, 1.0)
  _close(out, ref)
  assert out.dtype == np.float32 and out.weak_type == ref.weak_type


def test_nested_while():
  def f(x):
    def outer_body(c):
      i, v = c
      v = lax.while_loop(lambda d: d[0] < i, lambda d: (d[0] + 1, d[1] + 0.5), (0, v))[1]
      return i + 1, v
    return lax.while_loop(lambda c: c[0] < 4, outer_body, (0, x))[1]
  assert float(sc.jit(f)(1.0)) == pytest.approx(1.0 + 0.5 * (0 + 1 + 2 + 3))
  t = sc.jvp(f, (1.0,), (1.0,))[1]
  assert float(t) == pytest.approx(1.0)


# ---------------------------------------------------------------------------
# Differentiation


def test_jvp_matches_jax_and_is_one_while():
  primals, tangents = (np.float32(0.7), np.float32(1.3)), (np.float32(1.0), np.float32(-0.5))
  out, t = sc.jvp(_sc_f(), primals, tangents)
  ref_out, ref_t = jax.jvp(_jax_f(), primals, tangents)
  _close(out[1], ref_out[1])
  _close(t[1], ref_t[1])
  jaxpr = sc.make_jaxpr(lambda x, y, tx, ty: sc.jvp(_sc_f(), (x, y), (tx, ty)))(*primals,
                                                                                *tangents)
  assert len(_while_eqns(jaxpr)) == 1


def test_jvp_tangent_enters_through_body_only():
  # The init carries no tangent, but the body mixes in a const with a tangent: the fixpoint
  # makes the carry's tangent nonzero.
  f = lambda y: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * y), (0, 1.0))[1]
  g = lambda y: jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * y),
                                   (0, 1.0))[1]
  _close(sc.jvp(f, (2.0,), (1.0,)), jax.jvp(g, (2.0,), (1.0,)))


def test_jvp_finite_differences():
  with sc.enable_x64():
    check_grads(lambda x, y: _sc_f()(x, y)[1], (np.float64(0.7), np.float64(1.3)), order=2,
                modes=("fwd",))


def test_linearize():
  x, y = np.float32(0.7), np.float32(1.3)
  out, f_lin = sc.linearize(lambda x: _sc_f()(x, y)[1], x)
  ref_out, ref_lin = jax.linearize(lambda x: _jax_f()(x, y)[1], x)
  _close(out, ref_out)
  _close(f_lin(np.float32(2.0)), ref_lin(np.float32(2.0)))


def test_partial_eval_splits_known_carries():
  # An unknown carry the predicate does not read: a known while computes the known carries,
  # and the unknown side is the whole while again.
  def f(x, y):
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2.0, c[2] * c[1]),
                          (0, x, y))
  closed = sc.make_jaxpr(f)(1.0, 2.0)
  known, unknown, nres, out_uk = ad.partial_eval_jaxpr(closed.jaxpr, [False, True],
                                                       [False] * 3)
  assert out_uk == [False, False, True]
  (k_eqn,) = _while_eqns(core.ClosedJaxpr(known, []))
  assert len(k_eqn.outvars) == 2 and nres >= 1
  (u_eqn,) = _while_eqns(core.ClosedJaxpr(unknown, []))
  assert len(u_eqn.params["body_jaxpr"].out_avals) == 3
  res = core.eval_jaxpr(known, [], 1.0)
  np.testing.assert_allclose(res[:2], [3, 8.0])
  np.testing.assert_allclose(core.eval_jaxpr(unknown, [], *res[2:], 2.0), [2.0 * 1 * 2 * 4])


def test_partial_eval_unknown_predicate_makes_everything_unknown():
  closed = sc.make_jaxpr(lambda x, y: lax.while_loop(lambda c: c[1] < 3.0,
                                                     lambda c: (c[0] + 1.0, c[1] + 1.0),
                                                     (x, y)))(1.0, 2.0)
  known, unknown, nres, out_uk = ad.partial_eval_jaxpr(closed.jaxpr, [False, True],
                                                       [False] * 2)
  assert out_uk == [True, True] and not known.eqns and len(_while_eqns(
      core.ClosedJaxpr(unknown, []))) == 1


def test_grad_through_cond_const_only_is_zero_not_an_error():
  # No tangent reaches the carry, so nothing is transposed through the loop (as in JAX).
  f = lambda b: lax.while_loop(lambda c: c < b, lambda c: c + 1.0, 0.0) * 0.0 + b * 2.0  # noqa
  assert float(sc.grad(f)(3.5)) == 2.0


def test_grad_raises_jax_error():
  with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for "
                     "lax.while_loop or lax.fori_loop with dynamic start/stop values. Try "
                     "using lax.scan"):
    sc.grad(lambda x: _sc_f()(x, 1.3)[1])(0.7)


# ---------------------------------------------------------------------------
# Batching


def test_vmap_batched_init():
  xs = np.linspace(0.1, 1.0, 4, dtype=np.float32)
  _close(sc.vmap(_sc_f(), (0, None))(xs, 1.3), jax.vmap(_jax_f(), (0, None))(xs, 1.3))


def test_vmap_batched_consts():
  ys = np.linspace(0.5, 1.5, 3, dtype=np.float32)
  _close(sc.vmap(_sc_f(), (None, 0))(0.7, ys), jax.vmap(_jax_f(), (None, 0))(0.7, ys))


def test_vmap_batched_predicate_trip_counts():
  def f(x, n):
    return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5 + 1.0), (0, x))
  xs = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
  ns = np.array([0, 3, 1, 5], np.int32)
  i_out, v_out = sc.vmap(f)(xs, ns)
  for x, n, i, v in zip(xs, ns, np.asarray(i_out), np.asarray(v_out)):
    c, val = 0, np.float32(x)
    while c < n:
      c, val = c + 1, np.float32(val * np.float32(1.5) + np.float32(1.0))
    assert i == c
    np.testing.assert_allclose(v, val, rtol=1e-6)
  g = lambda x, n: jax.lax.while_loop(lambda c: c[0] < n,   # noqa: E731
                                      lambda c: (c[0] + 1, c[1] * 1.5 + 1.0), (0, x))
  _close(sc.jit(sc.vmap(f))(xs, ns), jax.vmap(g)(xs, ns))
  _close(sc.vmap(sc.jit(f))(xs, ns), jax.vmap(g)(xs, ns))


def test_vmap_batched_predicate_from_carry():
  # Each lane halves its value until it falls below 1: the predicate reads a batched carry.
  f = lambda x: lax.while_loop(lambda c: c > 1.0, lambda c: c * 0.5, x)   # noqa: E731
  g = lambda x: jax.lax.while_loop(lambda c: c > 1.0, lambda c: c * 0.5, x)   # noqa: E731
  xs = np.array([0.5, 3.0, 17.0, 100.0], np.float32)
  _close(sc.vmap(f)(xs), jax.vmap(g)(xs))


def test_vmap_in_axes_1_mixed_carries():
  def f(x, n):
    return lax.while_loop(lambda c: c[0] < n,
                          lambda c: (c[0] + 1, c[1] * 2.0, c[2] + c[0]), (0, x, 0))
  def g(x, n):
    return jax.lax.while_loop(lambda c: c[0] < n,
                              lambda c: (c[0] + 1, c[1] * 2.0, c[2] + c[0]), (0, x, 0))
  xs, ns = np.ones((2, 3), np.float32), np.array([1, 2, 4], np.int32)
  _close(sc.vmap(f, in_axes=(1, 0))(xs, ns), jax.vmap(g, in_axes=(1, 0))(xs, ns))


def test_vmap_collective_in_body():
  # Nothing is batched at the while but the body reads the named axis (an axis rule).
  f = lambda x: lax.while_loop(lambda c: c[0] < 2,   # noqa: E731
                               lambda c: (c[0] + 1, c[1] + lax.psum(c[1], "i")), (0, x))[1]
  g = lambda x: jax.lax.while_loop(lambda c: c[0] < 2,   # noqa: E731
                                   lambda c: (c[0] + 1, c[1] + jax.lax.psum(c[1], "i")),
                                   (0, x))[1]
  xs = np.arange(3.0, dtype=np.float32)
  _close(sc.vmap(f, axis_name="i")(xs), jax.vmap(g, axis_name="i")(xs))


def test_nested_vmap_and_vmap_of_jit():
  def f(x, n):
    return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] + x), (0, 0.0 * x))[1]
  def g(x, n):
    return jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] + x),
                              (0, 0.0 * x))[1]
  xs = np.arange(6, dtype=np.float32).reshape(2, 3)
  ns = np.array([[1, 2, 3], [0, 4, 2]], np.int32)
  _close(sc.vmap(sc.vmap(f))(xs, ns), jax.vmap(jax.vmap(g))(xs, ns))
  _close(sc.vmap(sc.vmap(sc.jit(f)), (0, None))(xs, ns[0]),
         jax.vmap(jax.vmap(g), (0, None))(xs, ns[0]))


def test_jvp_of_vmap():
  xs = np.linspace(0.1, 1.0, 3, dtype=np.float32)
  f = lambda x: sc.vmap(_sc_f(), (0, None))(x, 1.3)[1]   # noqa: E731
  g = lambda x: jax.vmap(_jax_f(), (0, None))(x, 1.3)[1]   # noqa: E731
  _close(sc.jvp(f, (xs,), (np.ones(3, np.float32),)),
         jax.jvp(g, (xs,), (np.ones(3, np.float32),)))


def test_jvp_and_linearize_of_vmap_with_batched_trip_counts():
  h = lambda x, n: lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * x),  # noqa
                                  (0, 1.0))[1]
  hj = lambda x, n: jax.lax.while_loop(lambda c: c[0] < n,   # noqa: E731
                                       lambda c: (c[0] + 1, c[1] * x), (0, 1.0))[1]
  xs, ns = np.array([1.5, 2.0, 0.5], np.float32), np.array([1, 2, 3], np.int32)
  t = np.ones(3, np.float32)
  ref = jax.jvp(lambda x: jax.vmap(hj)(x, ns), (xs,), (t,))
  _close(sc.jvp(lambda x: sc.vmap(h)(x, ns), (xs,), (t,)), ref)
  _close(sc.linearize(lambda x: sc.vmap(h)(x, ns), xs)[1](t), ref[1])
  _close(sc.jit(lambda x, t: sc.jvp(lambda x: sc.vmap(h)(x, ns), (x,), (t,)))(xs, t), ref)


def test_vmap_of_jvp():
  xs = np.linspace(0.1, 1.0, 3, dtype=np.float32)
  h = lambda x, n: lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * x),  # noqa
                                  (0, 1.0))[1]
  hj = lambda x, n: jax.lax.while_loop(lambda c: c[0] < n,   # noqa: E731
                                       lambda c: (c[0] + 1, c[1] * x), (0, 1.0))[1]
  ns = np.array([1, 2, 3], np.int32)
  jv = lambda fn: lambda x, n: jax.jvp(lambda x: fn(x, n), (x,), (1.0,))   # noqa: E731
  jvs = lambda fn: lambda x, n: sc.jvp(lambda x: fn(x, n), (x,), (1.0,))   # noqa: E731
  _close(sc.vmap(jvs(h))(xs, ns), jax.vmap(jv(hj))(xs, ns))


# ---------------------------------------------------------------------------
# DCE


def test_dce_removes_dead_carry():
  def f(x, y):
    def body(c):
      i, a, dead = c
      return i + 1, a * 2.0, jnp.sin(dead) + a
    return lax.while_loop(lambda c: c[0] < 3, body, (0, x, y))[1]
  closed = sc.make_jaxpr(f)(1.0, 2.0)
  (eqn,) = _while_eqns(closed)
  assert len(eqn.outvars) == 3 and "sin" in _prims(eqn.params["body_jaxpr"].jaxpr)
  jaxpr, used = pe.dce_jaxpr(closed.jaxpr, [True])
  (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "while"]
  assert len(eqn.outvars) == 2 and len(eqn.invars) == 2
  assert "sin" not in _prims(eqn.params["body_jaxpr"].jaxpr)
  assert used == [True, False]
  core.check_jaxpr(jaxpr)
  assert float(core.eval_jaxpr(jaxpr, closed.consts, 1.0)[0]) == 8.0


def test_dce_keeps_carry_read_by_cond_and_drops_whole_unused_loop():
  def f(x):
    lax.while_loop(lambda c: c < 3.0, lambda c: c + 1.0, x)   # result unused
    return x * 2.0
  closed = sc.make_jaxpr(f)(1.0)
  jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, [True])
  assert "while" not in _prims(jaxpr)


# ---------------------------------------------------------------------------
# Errors


def test_error_cond_not_boolean_scalar():
  with pytest.raises(TypeError, match=r"cond_fun must return a boolean scalar, but got output "
                     r"type\(s\) \[ShapedArray\(float32\[\], weak_type=True\)\]\."):
    lax.while_loop(lambda c: c * 1.0, lambda c: c, 1.0)
  with pytest.raises(TypeError, match=r"got output type\(s\) \[ShapedArray\(bool\[3\]\)\]"):
    lax.while_loop(lambda c: c < 1.0, lambda c: c, np.zeros(3, np.float32))


_CARRY_ERRORS = {
    "extra_leaf": (lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1], c[1]), (0, 1.0)),
    "list_for_tuple": (lambda c: False, lambda c: [c[0], c[1]], (1.0, 2.0)),
    "dict_keys": (lambda c: False, lambda c: (c[0], {"a": c[1]["a"], "b": 1.0}),
                  (1.0, {"a": 2.0})),
    "varargs": (lambda *c: False, lambda *a: a, (np.int32(1), np.float32(2.0))),
    "dtype_key_path": (lambda c: c[0] < 3,
                       lambda c: (c[0] + 1, {"w": c[1]["w"] * 0.5}),
                       (0, {"w": np.zeros(2, np.int32)})),
    "two_types": (lambda c: False, lambda c: (c[0].astype("float32"), c[1] * np.ones(3)),
                  (np.int32(1), np.float32(2.0))),
    "shape": (lambda c: c[0] < 3.0, lambda c: (c[0] + np.ones(2, np.float32),),
              (np.float32(0.0),)),
}


@pytest.mark.parametrize("name", sorted(_CARRY_ERRORS))
def test_error_body_carry_as_jax(name):
  """Carry structure and type errors in JAX 0.10's words (key paths named after the body's
  parameter)."""
  cond, body, init = _CARRY_ERRORS[name]
  msgs = []
  for lib in (sc, jax):
    with pytest.raises(TypeError) as e:
      lib.lax.while_loop(cond, body, init)
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]
  assert msgs[0].startswith("while_loop body function carry input and carry output must")


def test_weak_int_carry_promotes_as_jax():
  got = lax.while_loop(lambda c: c < 3, lambda c: c + 0.5, 0)
  want = jax.lax.while_loop(lambda c: c < 3, lambda c: c + 0.5, 0)
  assert float(got) == float(want) == 3.0
  assert np.asarray(got).dtype == np.asarray(want).dtype == np.float32
  got = sc.jit(lambda n: lax.while_loop(lambda c: c < n, lambda c: c + 0.5, 0))(3.0)
  assert float(got) == 3.0 and np.asarray(got).dtype == np.float32
  with pytest.raises(TypeError, match="must have equal types"):
    lax.while_loop(lambda c: c < 3, lambda c: c + 0.5, np.int32(0))
