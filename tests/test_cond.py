"""`lax.cond` / `lax.switch` (the `cond` primitive): values, autodiff, vmap, jaxprs and errors,
with JAX's `lax.cond`/`lax.switch` as the oracle."""
from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import core, lax
from stagecraft.interpreters import lowering
from stagecraft.interpreters import partial_eval as pe
from stagecraft.lax.control_flow.conditionals import cond_p
from stagecraft.test_util import check_grads

from _util import assert_trees_allclose

jlax = jax.lax
jjnp = jax.numpy


def _close(a, b, **kw):
  assert_trees_allclose(a, b, **({"rtol": 2e-5, "atol": 2e-6} | kw))


def _conds(jaxpr):
  """cond equations anywhere in a jaxpr (inside jit calls too)."""
  out = []
  for e in jaxpr.eqns:
    if e.primitive is cond_p:
      out.append(e)
    for p in e.params.values():
      for sub in (p if isinstance(p, tuple) else (p,)):
        if hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
          out += _conds(sub.jaxpr)
  return out


X = np.linspace(-1.0, 2.0, 6, dtype=np.float32).reshape(2, 3)
Y = np.arange(3, dtype=np.float32) + 0.5


# Branches written once against a numpy module (ours or JAX's), so JAX can be the oracle.
def _cond_fn(m, l):
  def f(p, x, y):
    return l.cond(p, lambda x, y: (m.sin(x) * y, {"s": m.sum(x * y)}),
                  lambda x, y: (x * 2.0 + y, {"s": m.sum(m.cos(x))}), x, y)
  return f


def _switch_fn(m, l):
  def f(i, x, y):
    return l.switch(i, [lambda x, y: m.sin(x) * y, lambda x, y: x * x + 1.0 + 0 * y,
                        lambda x, y: m.exp(x) - y], x, y)
  return f


# ---------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("p", [True, False])
def test_cond_eager_and_jit_pytrees(p):
  f, jf = _cond_fn(jnp, lax), _cond_fn(jjnp, jlax)
  want = jf(p, X, Y)
  _close(f(p, X, Y), want)
  _close(sc.jit(f)(p, X, Y), want)
  _close(sc.jit(f)(np.bool_(p), X, Y), want)


@pytest.mark.parametrize("p", [0, 3, -2, 0.0, 0.5, np.float32(np.nan)])
def test_cond_number_pred(p):
  f = lambda p, x: lax.cond(p, lambda x: x + 1.0, lambda x: x - 1.0, x)
  g = lambda p, x: jlax.cond(p, lambda x: x + 1.0, lambda x: x - 1.0, x)
  _close(sc.jit(f)(p, Y), g(p, Y))
  _close(f(p, Y), g(p, Y))


@pytest.mark.parametrize("i", [-3, -1, 0, 1, 2, 3, 100])
def test_switch_clamps(i):
  f, jf = _switch_fn(jnp, lax), _switch_fn(jjnp, jlax)
  want = jf(i, X, Y)
  _close(f(i, X, Y), want)
  _close(sc.jit(f)(i, X, Y), want)
  _close(sc.jit(f)(np.int8(i), X, Y), want)


def test_switch_one_branch_and_int_dtypes():
  assert float(lax.switch(5, [lambda x: x + 1.0], 1.0)) == 2.0
  f = sc.jit(lambda i, x: lax.switch(i, [lambda x: x, lambda x: -x], x))
  for dt in (np.uint8, np.int16, np.int32):
    _close(f(dt(1), Y), -Y)


def test_closures_and_outer_jit_argument():
  c = jnp.asarray([1.0, 2.0, 3.0])

  @sc.jit
  def f(p, x, z):
    # true_fun closes over a constant array and the jit argument z; false_fun over z too.
    return lax.cond(p, lambda x: x * c + z, lambda x: x - z, x)

  @jax.jit
  def g(p, x, z):
    return jlax.cond(p, lambda x: x * np.array([1.0, 2.0, 3.0], np.float32) + z,
                     lambda x: x - z, x)

  for p in (True, False):
    _close(f(p, Y, 2 * Y), g(p, Y, 2 * Y))
  # z is passed once although both branches read it.
  eqn, = _conds(sc.make_jaxpr(f)(True, Y, Y).jaxpr)
  assert len(eqn.invars) == 1 + 2 + 1


def test_no_operands_and_scalar_outputs():
  f = sc.jit(lambda p: lax.cond(p, lambda: 1.0, lambda: 2.0))
  assert float(f(True)) == 1.0 and float(f(False)) == 2.0
  out = sc.jit(lambda p: lax.cond(p, lambda: jnp.float32(1.0), lambda: 2.0))(True)
  assert out.dtype == np.float32


def test_weak_types_are_branch_zeros():
  # As JAX's: the cond's outputs are typed as its first branch's (the false branch),
  # weak types included, whatever the other branches return.
  for mod in (lax, jax.lax):
    f = lambda p, x, mod=mod: mod.cond(p, lambda x: x, lambda x: 1.0, x)
    g = lambda p, x, mod=mod: mod.cond(p, lambda x: 1.0, lambda x: x, x)
    jit, typeof = (sc.jit, sc.typeof) if mod is lax else (jax.jit, jax.typeof)
    out = jit(f)(True, np.float32(3.0))
    assert out.dtype == np.float32 and float(out) == 3.0
    assert typeof(out).weak_type and not typeof(jit(g)(True, np.float32(3.0))).weak_type
  f = lambda p, x: lax.cond(p, lambda x: x, lambda x: 1.0, x)
  eqn, = _conds(sc.make_jaxpr(f)(True, np.float32(3.0)).jaxpr)
  assert eqn.outvars[0].aval.weak_type


@settings(max_examples=10, deadline=None)
@given(st.integers(-4, 6), st.lists(st.floats(-3, 3, width=32), min_size=3, max_size=3))
def test_switch_hypothesis(i, xs):
  x = np.asarray(xs, np.float32)
  f, jf = _switch_fn(jnp, lax), _switch_fn(jjnp, jlax)
  _close(sc.jit(f)(i, x, x), jf(i, x, x), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# Jaxprs: concrete predicates, printing, DCE


def test_concrete_predicate_stages_a_cond_as_jax():
  # JAX 0.10.2 traces both branches and stages the `cond` even for a concrete predicate
  # (type-checking both); only disable_jit calls the chosen branch directly.
  f = lambda x: lax.cond(True, lambda x: x + 1.0, lambda x: x * 2.0, x)
  jaxpr = sc.make_jaxpr(f)(Y)
  assert len(_conds(jaxpr.jaxpr)) == 1 and len(jaxpr.jaxpr.eqns) == 1
  jf = lambda x: jax.lax.cond(True, lambda x: x + 1.0, lambda x: x * 2.0, x)
  assert len(jax.make_jaxpr(jf)(Y).jaxpr.eqns) == 1
  g = lambda x: lax.switch(np.int32(7), [jnp.sin, jnp.cos], x)
  _close(sc.jit(g)(Y), np.cos(Y))
  out = lax.cond(True, lambda: 1.0, lambda: 2.0)
  assert type(out) is sc.Array and float(out) == 1.0
  with pytest.raises(TypeError, match="branches must have equal output types"):
    lax.cond(True, lambda: np.float32(1), lambda: np.int32(1))
  with sc.disable_jit():
    assert lax.cond(True, lambda: 1.0, lambda: "other branch not traced") == 1.0
  # Python-level static predicate under jit.
  k = sc.jit(lambda x, p: lax.cond(p, jnp.sin, jnp.cos, x), static_argnums=1)
  _close(k(Y, True), np.sin(Y))


def test_lowering_and_eager_bind():
  jaxpr = sc.make_jaxpr(lambda p, x: lax.cond(p, jnp.sin, jnp.cos, x))(True, Y).jaxpr
  text = lowering.lower_jaxpr_to_module("m", jaxpr)
  assert '"stablehlo.case"' in text and text.count('"stablehlo.return"') == 2
  eqn, = _conds(jaxpr)
  # The default impl compiles the one equation.
  _close(cond_p.bind(np.int32(1), Y, branches=eqn.params["branches"]), [np.sin(Y)])
  _close(cond_p.bind(np.int32(0), Y, branches=eqn.params["branches"]), [np.cos(Y)])


def test_jaxpr_prints_branches():
  text = str(sc.make_jaxpr(lambda p, x: lax.cond(p, jnp.sin, jnp.cos, x))(True, Y))
  assert "cond[" in text and "branches=(" in text
  assert text.index("cos") < text.index("sin")   # branches are (false_fun, true_fun)


def test_dce_drops_unused_output():
  @sc.jit
  def inner(p, x):
    return lax.cond(p, lambda x: (jnp.sin(x), jnp.exp(x)), lambda x: (x, jnp.cos(x)), x)

  def f(p, x):
    return lax.cond(p, lambda x: (jnp.sin(x), jnp.exp(x)), lambda x: (x, jnp.cos(x)), x)[1]

  jaxpr = sc.make_jaxpr(f)(True, Y).jaxpr
  new, used = pe.dce_jaxpr(jaxpr, [True])
  eqn, = _conds(new)
  assert len(eqn.outvars) == 1
  names = {e.primitive.name for br in eqn.params["branches"] for e in br.jaxpr.eqns}
  assert names == {"exp", "cos"}
  # Inside a jit call too, and the values are unchanged.
  jaxpr = sc.make_jaxpr(lambda p, x: inner(p, x)[0])(True, Y).jaxpr
  new, _ = pe.dce_jaxpr(jaxpr, [True])
  eqn, = _conds(new)
  assert len(eqn.outvars) == 1
  _close(sc.jit(lambda p, x: inner(p, x)[1])(False, Y), np.cos(Y))


def test_dce_prunes_operands_and_drops_dead_cond():
  def f(p, x, y):
    a, b = lax.cond(p, lambda x, y: (x + 1.0, y * 2.0), lambda x, y: (x, y), x, y)
    return a
  new, _ = pe.dce_jaxpr(sc.make_jaxpr(f)(True, Y, Y).jaxpr, [True])
  eqn, = _conds(new)
  assert len(eqn.invars) == 2    # index and x; y is read by no kept output
  assert all(len(br.in_avals) == 1 for br in eqn.params["branches"])
  new, used = pe.dce_jaxpr(sc.make_jaxpr(f)(True, Y, Y).jaxpr, [False])
  assert not new.eqns


# ---------------------------------------------------------------------------
# Autodiff against JAX


def _loss(f, m):
  def loss(p, x, y):
    out = f(p, x, y)
    return sum(m.sum(leaf ** 2) for leaf in jax.tree_util.tree_leaves(out))
  return loss


@pytest.mark.parametrize("p", [True, False])
def test_cond_grad_and_jvp(p):
  f, jf = _cond_fn(jnp, lax), _cond_fn(jjnp, jlax)
  lf, ljf = _loss(f, jnp), _loss(jf, jjnp)
  _close(sc.jit(sc.grad(lf, argnums=(1, 2)))(p, X, Y), jax.grad(ljf, argnums=(1, 2))(p, X, Y),
         rtol=1e-5)
  _close(sc.grad(sc.jit(lf), argnums=(1, 2))(p, X, Y), jax.grad(ljf, argnums=(1, 2))(p, X, Y),
         rtol=1e-5)
  tx, ty = np.ones_like(X), np.full_like(Y, 0.5)
  got = sc.jvp(lambda x, y: sc.jit(f)(p, x, y), (X, Y), (tx, ty))
  want = jax.jvp(lambda x, y: jf(p, x, y), (X, Y), (tx, ty))
  _close(got, want, rtol=1e-5)


@pytest.mark.parametrize("i", [-1, 1, 2])
def test_switch_grad_and_jvp(i):
  f, jf = _switch_fn(jnp, lax), _switch_fn(jjnp, jlax)
  lf, ljf = _loss(f, jnp), _loss(jf, jjnp)
  _close(sc.jit(sc.grad(lf, argnums=(1, 2)))(i, X, Y), jax.grad(ljf, argnums=(1, 2))(i, X, Y),
         rtol=1e-5)
  got = sc.jvp(lambda x: sc.jit(f)(i, x, Y), (X,), (np.ones_like(X),))
  want = jax.jvp(lambda x: jf(i, x, Y), (X,), (np.ones_like(X),))
  _close(got, want, rtol=1e-5)


def test_grad_data_dependent_predicate_eager():
  # The predicate is a traced value under grad (no jit): the cond is staged and linearized.
  def f(x):
    return lax.cond(jnp.sum(x) > 0, lambda x: jnp.sum(jnp.sin(x) * x), lambda x: jnp.sum(x ** 3), x)

  def g(x):
    return jlax.cond(jjnp.sum(x) > 0, lambda x: jjnp.sum(jjnp.sin(x) * x),
                     lambda x: jjnp.sum(x ** 3), x)
  for x in (Y, -Y):
    _close(sc.grad(f)(x), jax.grad(g)(x), rtol=1e-5)
    _close(sc.value_and_grad(f)(x), jax.value_and_grad(g)(x), rtol=1e-5)


def test_tangent_only_in_one_branch_and_int_operand():
  # true_fun's output ignores x (zero tangent), false_fun's depends on it; an int operand.
  def f(p, x, n):
    return lax.cond(p, lambda x, n: (jnp.ones_like(x), n + 1), lambda x, n: (x * x, n), x, n)

  def g(p, x, n):
    return jlax.cond(p, lambda x, n: (jjnp.ones_like(x), n + 1), lambda x, n: (x * x, n), x, n)
  for p in (True, False):
    out, t = sc.jvp(lambda x: sc.jit(f)(p, x, 3)[0], (Y,), (np.ones_like(Y),))
    wout, wt = jax.jvp(lambda x: g(p, x, 3)[0], (Y,), (np.ones_like(Y),))
    _close((out, t), (wout, wt))
    _close(sc.grad(lambda x: jnp.sum(sc.jit(f)(p, x, 3)[0]))(Y),
           jax.grad(lambda x: jjnp.sum(g(p, x, 3)[0]))(Y))


def test_linearize_keeps_one_known_and_one_unknown_cond():
  f = lambda p, x: lax.cond(p, lambda x: jnp.sin(x) * x, lambda x: jnp.exp(x), x)
  out, lin = sc.linearize(lambda x: sc.jit(f)(True, x), Y)
  _close(out, np.sin(Y) * Y)
  _close(lin(np.ones_like(Y)), np.cos(Y) * Y + np.sin(Y), rtol=1e-5)
  jaxpr = sc.make_jaxpr(lambda p, x: sc.vjp(lambda x: f(p, x), x)[1](Y))(True, Y).jaxpr
  core.check_jaxpr(jaxpr)
  known, transposed = _conds(jaxpr)
  # Residuals of the same type share slots: true_fun saves three f32[3] values, false_fun one
  # (exp x), so the known cond returns the primal output and three residuals, not four.
  assert [v.aval.shape for v in known.outvars] == [(3,)] * 4


def test_jvp_is_one_cond():
  f = lambda p, x: sc.jvp(lambda x: lax.cond(p, jnp.sin, lambda x: 2.0 * x, x), (x,), (x,))
  jaxpr = sc.make_jaxpr(f)(True, Y).jaxpr
  core.check_jaxpr(jaxpr)
  eqn, = _conds(jaxpr)
  assert len(eqn.outvars) == 2


def test_grad_wrt_closed_over_jit_argument():
  def f(z, p):
    return jnp.sum(lax.cond(p, lambda x: jnp.sin(x * z), lambda x: x + z * z, Y))

  def g(z, p):
    return jjnp.sum(jlax.cond(p, lambda x: jjnp.sin(x * z), lambda x: x + z * z, Y))
  for p in (True, False):
    _close(sc.grad(sc.jit(f))(2 * Y, p), jax.grad(g)(2 * Y, p), rtol=1e-5)
    _close(sc.jit(sc.grad(f))(2 * Y, p), jax.grad(g)(2 * Y, p), rtol=1e-5)


def test_nested_cond():
  f = lambda p, q, x: lax.cond(p, lambda x: lax.cond(q, jnp.sin, jnp.cos, x), lambda x: x * 3, x)
  g = lambda p, q, x: jlax.cond(p, lambda x: jlax.cond(q, jjnp.sin, jjnp.cos, x),
                                lambda x: x * 3, x)
  for p, q in [(True, True), (True, False), (False, True)]:
    _close(sc.jit(sc.grad(lambda x: jnp.sum(f(p, q, x) ** 2)))(Y),
           jax.grad(lambda x: jjnp.sum(g(p, q, x) ** 2))(Y), rtol=1e-5)
  ps, qs = np.array([True, True, False]), np.array([True, False, True])
  xs = np.stack([Y, -Y, 2 * Y])
  _close(sc.vmap(sc.grad(lambda p, q, x: jnp.sum(f(p, q, x) ** 2), argnums=2))(ps, qs, xs),
         jax.vmap(jax.grad(lambda p, q, x: jjnp.sum(g(p, q, x) ** 2), argnums=2))(ps, qs, xs),
         rtol=1e-5)


def test_x64():
  with sc.enable_x64():
    f = sc.jit(lambda p, x: lax.cond(p, jnp.sin, jnp.cos, x))
    x = np.arange(3.0)
    assert f(True, x).dtype == np.float64
    _close(sc.grad(lambda x: jnp.sum(f(False, x)))(x), -np.sin(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("p", [True, False])
def test_check_grads_cond_order2(p):
  # The predicate is a jit argument, so a cond is staged under every differentiation.
  f = sc.jit(lambda p, x, y: lax.cond(p, lambda x, y: jnp.sin(x) * y,
                                      lambda x, y: jnp.tanh(x) + y * y, x, y))
  check_grads(lambda x, y: f(p, x, y), (X[0], Y), order=2)


@pytest.mark.parametrize("i", [0, 1, 2])
def test_check_grads_switch_order2(i):
  f = sc.jit(lambda i, x: lax.switch(i, [jnp.sin, lambda x: x ** 3, lambda x: jnp.exp(x) * x],
                                     x))
  # second differences in float32: eps 1e-3 keeps them clear of rounding (JAX's 1e-4 sits
  # at the edge for x**3 and x*exp(x) at 2.5)
  check_grads(lambda x: f(i, x), (Y,), order=2, eps=1e-3)


# ---------------------------------------------------------------------------
# vmap


def test_vmap_batched_operands():
  f, jf = _cond_fn(jnp, lax), _cond_fn(jjnp, jlax)
  xs = np.stack([X, X * 2, -X])
  for p in (True, False):
    got = sc.vmap(f, in_axes=(None, 0, None))(p, xs, Y)
    _close(got, jax.vmap(jf, in_axes=(None, 0, None))(p, xs, Y))
    got = sc.jit(sc.vmap(f, in_axes=(None, 0, None)))(p, xs, Y)
    _close(got, jax.vmap(jf, in_axes=(None, 0, None))(p, xs, Y))


def test_vmap_unbatched_index_stays_cond():
  f = _switch_fn(jnp, lax)
  xs = np.stack([X, -X])
  jaxpr = sc.make_jaxpr(sc.vmap(f, in_axes=(None, 0, None)))(1, xs, Y).jaxpr
  eqn, = _conds(jaxpr)
  assert eqn.outvars[0].aval.shape == (2, 2, 3)


def test_vmap_batched_index_selects():
  f, jf = _switch_fn(jnp, lax), _switch_fn(jjnp, jlax)
  idx = np.array([-1, 0, 1, 2, 7], np.int32)
  xs = np.stack([X + k for k in range(5)])
  want = jax.vmap(jf, in_axes=(0, 0, None))(idx, xs, Y)
  _close(sc.vmap(f, in_axes=(0, 0, None))(idx, xs, Y), want)
  _close(sc.jit(sc.vmap(f, in_axes=(0, 0, None)))(idx, xs, Y), want)
  jaxpr = sc.make_jaxpr(sc.vmap(f, in_axes=(0, 0, None)))(idx, xs, Y).jaxpr
  assert not _conds(jaxpr) and "select_n" in {e.primitive.name for e in jaxpr.eqns}
  # Batched predicate of cond, operands unbatched.
  g, jg = _cond_fn(jnp, lax), _cond_fn(jjnp, jlax)
  ps = np.array([True, False, True])
  _close(sc.vmap(g, in_axes=(0, None, None))(ps, X, Y),
         jax.vmap(jg, in_axes=(0, None, None))(ps, X, Y))


def test_vmap_in_axes_1_and_out_axes():
  f, jf = _switch_fn(jnp, lax), _switch_fn(jjnp, jlax)
  xs = np.stack([X, X * 3, -X, X + 1], axis=1)     # batch axis 1: f32[2,4,3]
  ys = np.stack([Y, Y + 1, Y * 0, -Y], axis=1)     # f32[3,4]
  for i in (0, 2):
    _close(sc.vmap(f, in_axes=(None, 1, 1), out_axes=1)(i, xs, ys),
           jax.vmap(jf, in_axes=(None, 1, 1), out_axes=1)(i, xs, ys))
  idx = np.array([0, 1, 2, 1], np.int32)
  _close(sc.vmap(f, in_axes=(0, 1, 1))(idx, xs, ys), jax.vmap(jf, in_axes=(0, 1, 1))(idx, xs, ys))


def test_nested_vmap_grad():
  f, jf = _cond_fn(jnp, lax), _cond_fn(jjnp, jlax)
  lf, ljf = _loss(f, jnp), _loss(jf, jjnp)
  xs = np.stack([X, X * 0.5, -X])
  ps = np.array([True, False, True])
  # cond inside vmap inside grad
  got = sc.grad(lambda xs: jnp.sum(sc.vmap(lf, in_axes=(0, 0, None))(ps, xs, Y)))(xs)
  want = jax.grad(lambda xs: jjnp.sum(jax.vmap(ljf, in_axes=(0, 0, None))(ps, xs, Y)))(xs)
  _close(got, want, rtol=1e-5)
  got = sc.jit(sc.grad(lambda xs: jnp.sum(sc.vmap(lf, in_axes=(None, 0, None))(True, xs, Y))))(xs)
  want = jax.grad(lambda xs: jjnp.sum(jax.vmap(ljf, in_axes=(None, 0, None))(True, xs, Y)))(xs)
  _close(got, want, rtol=1e-5)
  # vmap of grad (per-example gradients), batched and unbatched predicate, jitted
  for in_axes in [(0, 0, None), (None, 0, None)]:
    pp = ps if in_axes[0] == 0 else True
    got = sc.jit(sc.vmap(sc.grad(lf, argnums=(1, 2)), in_axes=in_axes))(pp, xs, Y)
    want = jax.vmap(jax.grad(ljf, argnums=(1, 2)), in_axes=in_axes)(pp, xs, Y)
    _close(got, want, rtol=1e-5)


def test_vmap_collective_in_branch():
  f = lambda p, x: lax.cond(p, lambda x: x - lax.psum(x, "i"), lambda x: x, x)
  g = lambda p, x: jlax.cond(p, lambda x: x - jlax.psum(x, "i"), lambda x: x, x)
  xs = np.stack([Y, 2 * Y])
  for p in (True, False):
    _close(sc.vmap(f, in_axes=(None, 0), axis_name="i")(p, xs),
           jax.vmap(g, in_axes=(None, 0), axis_name="i")(p, xs))


def test_vmap_batched_closure_and_index():
  xs = np.stack([Y, 2 * Y])
  f = lambda p, z: lax.cond(p, lambda: z * 2.0, lambda: z + 1.0)
  _close(sc.vmap(f)(np.array([True, False]), xs), np.stack([2 * Y, 2 * Y + 1]))
  _close(sc.vmap(f, in_axes=(None, 0))(False, xs), xs + 1)


def test_vmap_jvp_of_cond():
  f = lambda i, x: lax.switch(i, [jnp.sin, jnp.cos, lambda x: x * x], x)
  jf = lambda i, x: jlax.switch(i, [jjnp.sin, jjnp.cos, lambda x: x * x], x)
  idx = np.array([0, 1, 2], np.int32)
  xs = np.stack([Y, Y + 1, Y - 1])
  got = sc.vmap(lambda i, x: sc.jvp(lambda x: f(i, x), (x,), (jnp.ones_like(x),)))(idx, xs)
  want = jax.vmap(lambda i, x: jax.jvp(lambda x: jf(i, x), (x,), (jjnp.ones_like(x),)))(idx, xs)
  _close(got, want, rtol=1e-5)


# ---------------------------------------------------------------------------
# Errors


def test_pred_errors():
  with pytest.raises(TypeError, match=r"Pred must be a scalar, got .* of shape \(3,\)"):
    lax.cond(np.ones(3, bool), lambda: 1.0, lambda: 2.0)
  with pytest.raises(TypeError, match=r"Pred must be a scalar, got .* of shape \(2,\)"):
    sc.jit(lambda p: lax.cond(p, lambda: 1.0, lambda: 2.0))(np.ones(2, bool))
  with pytest.raises(TypeError, match="Pred type must be either boolean or number, got complex64"):
    sc.jit(lambda p: lax.cond(p, lambda: 1.0, lambda: 2.0))(np.complex64(1))
  # as JAX's: a str is a Sequence, refused as not a scalar
  with pytest.raises(TypeError, match="Pred must be a scalar, got yes of type <class 'str'>"):
    lax.cond("yes", lambda: 1.0, lambda: 2.0)
  with pytest.raises(TypeError, match="should be callable"):
    lax.cond(True, 1.0, lambda: 2.0)


def test_switch_index_errors():
  with pytest.raises(TypeError, match=r"Branch index must be scalar, got .* of shape \(2,\)"):
    lax.switch(np.zeros(2, np.int32), [lambda: 1.0, lambda: 2.0])
  with pytest.raises(TypeError, match="Index type must be an integer, got .* as float32"):
    sc.jit(lambda i: lax.switch(i, [lambda: 1.0, lambda: 2.0]))(np.float32(1))
  with pytest.raises(TypeError, match="Index type must be an integer"):
    lax.switch(True, [lambda: 1.0, lambda: 2.0])
  with pytest.raises(ValueError, match="Empty branch sequence"):
    lax.switch(0, [])
  with pytest.raises(TypeError, match="sequence of callables"):
    lax.switch(0, [lambda: 1.0, 3])


def _tf(x):
  return (x, x)


def _ff(x):
  return [x, x]


def _t_types(x):
  return (x, {"a": x, "b": x})


def _f_types(x):
  return (x, {"a": x, "b": x.astype(np.int32)})


def _b0(x):
  return x


def _b2(x):
  return (x, x)


def _b2_short(x):
  return x[:2]


# The same branch functions for both libraries, so JAX's messages (which name each branch
# with its source location) can be compared word for word.
_BRANCH_ERRORS = {
    "cond_structure": lambda m: lambda p, x: m.cond(p, _tf, _ff, x),
    "switch_structure": lambda m: lambda i, x: m.switch(i, [_b0, _b0, _b2], x),
    "cond_types": lambda m: lambda p, x: m.cond(p, _t_types, _f_types, x),
    "switch_types": lambda m: lambda i, x: m.switch(i, [_b0, _b0, _b2_short], x),
    "cond_two_types": lambda m: lambda p, x: m.cond(
        p, lambda x: (x, x[:1]), lambda x: (x.astype(np.int32), x), x),
}


@pytest.mark.parametrize("name", sorted(_BRANCH_ERRORS))
def test_branch_output_errors_as_jax(name):
  msgs = []
  for lib, m in ((sc, lax), (jax, jlax)):
    with pytest.raises(TypeError) as e:
      lib.jit(_BRANCH_ERRORS[name](m))(1, Y)
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]
  assert "branch" in msgs[0]


def test_vmap_output_batched_in_one_branch_only():
  f = lambda p, x: lax.cond(p, lambda x: (x * 2.0, 1.0), lambda x: (jnp.zeros(3), 2.0), x)
  g = lambda p, x: jlax.cond(p, lambda x: (x * 2.0, 1.0), lambda x: (jjnp.zeros(3), 2.0), x)
  xs = np.stack([Y, -Y])
  for p in (True, False):
    _close(sc.vmap(f, in_axes=(None, 0))(p, xs), jax.vmap(g, in_axes=(None, 0))(p, xs))


def test_grad_of_one_output_of_two():
  def f(p, x):
    a, b = lax.cond(p, lambda x: (jnp.sin(x), jnp.exp(x)), lambda x: (x * x, jnp.cos(x)), x)
    return jnp.sum(a)

  def g(p, x):
    a, b = jlax.cond(p, lambda x: (jjnp.sin(x), jjnp.exp(x)), lambda x: (x * x, jjnp.cos(x)), x)
    return jjnp.sum(a)
  for p in (True, False):
    _close(sc.jit(sc.grad(f, argnums=1))(p, Y), jax.grad(g, argnums=1)(p, Y), rtol=1e-5)


def test_derived_jaxpr_caches_are_released():
  import gc
  from stagecraft.lax.control_flow import conditionals

  def run():
    f = lambda p, x: lax.cond(p, lambda x: jnp.sin(x) * x, jnp.exp, x)
    sc.grad(lambda x: jnp.sum(sc.jit(f)(True, x)))(Y)
    sc.vmap(f)(np.array([True, False]), np.stack([Y, Y]))
  run()
  gc.collect()
  tables = (conditionals._jvp_cache, conditionals._pe_cache, conditionals._transpose_cache,
            conditionals._batch_cache, conditionals._dce_cache)
  before = [len(t) for t in tables]
  run()
  gc.collect()
  assert [len(t) for t in tables] == before
