"""Reverse-mode jaxprs printed as JAX 0.10.2 prints them (values compared too):

* scan partial evaluation hoists the loop-invariant part of the known scan out of the loop
  (JAX's `_scan_known_hoisting`): its results become constants of the known scan (in the
  order JAX's traced graph numbers them) or constant residuals of the unknown one; a
  conversion of a host scalar folds into a literal; an xs that is a NumPy array is stacked
  as a residual, not forwarded.
* `linear_transpose` partially evaluates the function (JAX's `trace_to_jaxpr_nounits`): a
  `jit` inside is split, its known half (returning the constants the other half reads) bound
  where `linear_transpose` is called, even when it returns nothing.
* a `jit` inside a checkpointed function stays one call on the rematerialized side; the
  checkpoint's transpose splits it again by partial evaluation (JAX's `remat_transpose`).
"""
from __future__ import annotations

import types

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

JAX = types.SimpleNamespace(lib=jax, np=jjnp, lax=jax.lax)
SC = types.SimpleNamespace(lib=sc, np=snp, lax=sc.lax)

X = np.array([0.5, -1.0, 2.0], np.float32)
XS = np.stack([X, X * 2, X - 1])
C = np.arange(3.0, dtype=np.float32) + 1
V = np.arange(4, dtype=np.float32) + 1
M = np.arange(6, dtype=np.float32).reshape(2, 3)
A = np.arange(12, dtype=np.float32).reshape(3, 4) / 7


def _scan_programs(m):
  """name -> (function, argument)."""
  L, N, lax = m.lib, m.np, m.lax

  def two_consts(x):
    a, b = N.sin(x), N.cos(x)
    return lax.scan(lambda c, v: (c * N.exp(a) + v * b, N.tanh(c * a)), x, XS)[1].sum()

  def two_consts_swapped(x):
    a, b = N.sin(x), N.cos(x)
    return lax.scan(lambda c, v: (c * N.exp(b) + v * a * N.sin(b), c * b), x, XS)[0].sum()

  closed_np = lambda x: lax.scan(lambda c, v: (N.sin(c * C) + v, c * 2.0), x, XS)[1].sum()
  invariant_y = lambda x: lax.scan(lambda c, v: (c + v, N.sin(x) * 3.0), x, XS)[1].sum()
  known_carry = lambda x: lax.scan(lambda c, v: (c + 1.0, v * N.cos(c) * x), 0.0, XS)[1].sum()
  weak_const = lambda x: lax.scan(lambda c, v: (c * 2 + v, c * 3.0), x, XS)[1].sum()
  np_xs = lambda x: lax.scan(lambda c, v: (c * v, c), x, XS)[1].sum()
  fori = lambda x: lax.fori_loop(0, 3, lambda i, c: c * N.sin(x) + i, x).sum()
  int_xs = lambda x: lax.scan(lambda c, i: (c * i.astype(np.float32) + N.exp(x), c), x,
                              np.arange(3))[1].sum()
  return {
      "two_consts": (L.grad(two_consts), X),
      "two_consts_swapped": (L.grad(two_consts_swapped), X),
      "closed_np": (L.grad(closed_np), X),
      "invariant_y": (L.grad(invariant_y), X),
      "known_carry": (L.grad(known_carry), X),
      "weak_const": (L.grad(weak_const), X),
      "np_xs": (L.grad(np_xs), X),
      "fori": (L.grad(fori), X),
      "int_xs": (L.grad(int_xs), X),
      "jit_grad": (L.jit(L.grad(two_consts)), X),
      "grad_jit": (L.grad(L.jit(two_consts)), X),
      "vmap_grad": (L.vmap(L.grad(two_consts)), XS),
      "linearize": (lambda x: L.linearize(two_consts, x)[1](x), X),
  }


def _linear_programs(m):
  """name -> (linear function, primal argument)."""
  L, N, lax = m.lib, m.np, m.lax
  return {
      "vmap_mul": (lambda y: L.vmap(lambda r: r * 2.0)(y), M),
      "vmap_dot": (lambda y: L.vmap(lambda r: N.dot(A, r))(y), np.ones((2, 4), np.float32)),
      "vmap_in_axes1": (lambda y: L.vmap(lambda r: r * 3.0, in_axes=1)(y), M),
      "vmap_jit": (lambda y: L.vmap(L.jit(lambda r: r * 2.0 + r))(y), M),
      "jit_mul": (lambda y: L.jit(lambda r: r * 2.0)(y), V),
      "jit_const": (lambda y: L.jit(lambda r: r * V)(y), V),
      "jit_dot": (lambda y: L.jit(lambda r: N.dot(A, r))(y), V),
      "jit_nested": (lambda y: L.jit(lambda r: L.jit(lambda s: -s)(r) * 2.0)(y), V),
      "jit_two_consts": (lambda y: L.jit(lambda r: r * V + A[0] * r)(y), V),
      "jit_weak_literals": (lambda y: L.jit(lambda r: r * 2 + r / 3.0)(y), V),
      "cumsum": (lambda y: N.cumsum(y), V),
      "np_scalar": (lambda y: y * np.float32(3.0), V),
      "weak_array": (lambda y: y * N.asarray(2.0), V),
      "sum_of_constant": (lambda y: y * N.sum(V), V),
      "scan_const": (lambda y: lax.scan(lambda c, r: (c * N.sin(V), r * c), y,
                                        N.ones((3, 4)))[1], V),
      "cond_const": (lambda y: lax.cond(True, lambda r: r * V, lambda r: -r, y), V),
  }


def _checkpoint_programs(m):
  """name -> (function, argument)."""
  L, N = m.lib, m.np
  g = L.jit(lambda x: N.sin(x) * C)
  h = L.jit(lambda x: N.exp(g(x)) + x)
  ck = lambda f, **kw: (lambda x: L.checkpoint(f, **kw)(x).sum())
  f = ck(lambda y: N.tanh(g(N.cos(y))))
  return {
      "linearize": (lambda x: L.linearize(f, x)[1](x), X),
      "grad": (L.grad(f), X),
      "grad_nested_jit": (L.grad(ck(lambda y: N.tanh(h(N.cos(y))))), X),
      "grad_dots_saveable": (L.grad(ck(lambda y: N.tanh(g(N.cos(y))) @ N.ones((3, 3)),
                                       policy=L.checkpoint_policies.dots_saveable)), X),
      "jit_grad": (L.jit(L.grad(f)), X),
      "hessian": (L.hessian(f), X),
      "vmap_grad": (L.vmap(L.grad(f)), XS),
  }


def _lt(m, name):
  f, x = _linear_programs(m)[name]
  ct = np.ones(jax.eval_shape(_linear_programs(JAX)[name][0], x).shape, np.float32)
  return (lambda x, ct: m.lib.linear_transpose(f, x)(ct)), (x, ct)


def _check(ours, theirs, args):
  assert str(sc.make_jaxpr(ours)(*args)) == str(jax.make_jaxpr(theirs)(*args)), (
      f"\n--- stagecraft\n{sc.make_jaxpr(ours)(*args)}\n--- JAX\n"
      f"{jax.make_jaxpr(theirs)(*args)}")
  a = sc.tree.leaves((ours(*args), sc.jit(ours)(*args)))
  b = jax.tree.leaves((theirs(*args), jax.jit(theirs)(*args)))
  assert len(a) == len(b)
  for x, y in zip(a, b):
    assert np.asarray(x).dtype == np.asarray(y).dtype
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name", sorted(_scan_programs(JAX)))
def test_scan_partial_eval_prints_as_jax(name):
  (ours, x), (theirs, _) = _scan_programs(SC)[name], _scan_programs(JAX)[name]
  _check(ours, theirs, (x,))


@pytest.mark.parametrize("name", sorted(_linear_programs(JAX)))
def test_linear_transpose_prints_as_jax(name):
  (ours, args), (theirs, _) = _lt(SC, name), _lt(JAX, name)
  _check(ours, theirs, args)


@pytest.mark.parametrize("name", sorted(_checkpoint_programs(JAX)))
def test_checkpoint_of_jit_prints_as_jax(name):
  (ours, x), (theirs, _) = _checkpoint_programs(SC)[name], _checkpoint_programs(JAX)[name]
  _check(ours, theirs, (x,))


def test_hoisted_conversion_folds_to_a_literal():
  # The known scan reads the converted weakly typed constant as a literal, computed once.
  f = lambda x: sc.lax.scan(lambda c, v: (c, v * c), 2.0, x)[1].sum()
  text = str(sc.make_jaxpr(sc.grad(f))(X))
  assert "convert_element_type" not in text
  assert text.count("] 2.0:f32[] ") == 2   # both scans read the literal
  np.testing.assert_allclose(np.asarray(sc.grad(f)(X)), np.full(3, 2.0, np.float32))


def test_hoisted_invariant_computed_once_and_gradients():
  # sin(x) is read by every iteration: hoisted, it is one equation before the known scan.
  f = lambda x: sc.lax.scan(lambda c, v: (c * snp.sin(x) + v, c), x, XS)[1].sum()
  jaxpr = sc.make_jaxpr(sc.grad(f))(X).jaxpr
  scans = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
  assert len(scans) == 2
  assert not any(e.primitive.name == "sin" for e in scans[0].params["jaxpr"].jaxpr.eqns)
  assert sum(e.primitive.name == "sin" for e in jaxpr.eqns) == 1
  sc.test_util.check_grads(f, (X,), order=2, modes=("rev",))


def test_numpy_xs_is_stacked_traced_xs_forwarded():
  # JAX forwards a traced xs residual but stacks a copy of a NumPy one.
  f = lambda x, xs: sc.lax.scan(lambda c, v: (c * v, c), x, xs)[1].sum()
  known = [e for e in sc.make_jaxpr(sc.grad(lambda x: f(x, XS)))(X).jaxpr.eqns
           if e.primitive.name == "scan"][0]
  assert len(known.outvars) == 3     # the carry, the ys and the stacked xs
  known = [e for e in sc.make_jaxpr(sc.grad(f))(X, XS).jaxpr.eqns
           if e.primitive.name == "scan"][0]
  assert len(known.outvars) == 2


def test_linear_transpose_of_jit_values_and_errors():
  t = sc.linear_transpose(sc.jit(lambda r: snp.dot(A, r) * 2.0), V)
  np.testing.assert_allclose(np.asarray(t(np.ones(3, np.float32))[0]),
                             2 * A.sum(0), rtol=1e-6)
  with pytest.raises(TypeError, match="cotangent type does not match function output"):
    t(np.ones(4, np.float32))


def _closure_programs(m):
  """name -> function of X: closed-over scalar Arrays are constvars (JAX's constants), host
  scalars and scalars made while tracing are literals."""
  L, N = m.lib, m.np
  c, w, s, i = N.float32(2.), N.asarray(3.0), N.sum(N.ones(3)), N.int32(4)
  return {
      "jnp_float32": lambda x: x * c,
      "weak_array": lambda x: x * w,          # converted by an equation, as JAX's
      "int32": lambda x: x * i,
      "used_twice": lambda x: x * c + c,
      "eager_result": lambda x: x + s,
      "numpy_scalar": lambda x: x * np.float32(2.) + np.array(3., np.float32),
      "python_float": lambda x: x * 2.,
      "made_while_tracing": lambda x: (x * N.float32(2.) + N.array(3.)
                                       - N.asarray(1, dtype=np.float32) + N.zeros(())),
      "inside_jit": lambda x: L.jit(lambda y: y * c)(x),
      "numpy_inside_jit": lambda x: L.jit(lambda y: y * np.float32(2.))(x),
      "grad": L.grad(lambda x: (x * c).sum()),
      "grad_jit": L.grad(lambda x: L.jit(lambda y: (y * c * i).sum())(x)),
      "vmap": L.vmap(lambda x: x * c),
      "scan": lambda x: L.lax.scan(lambda k, v: (k * c + v * s, k), x, N.ones((2, 3)))[0],
      "where": lambda x: N.where(x > 0, x, c),
      "power": lambda x: x ** w,
      "full_like": lambda x: x + N.full_like(x, c),
      "maximum": lambda x: N.maximum(x, s),
  }


@pytest.mark.parametrize("name", sorted(_closure_programs(JAX)))
def test_closed_over_scalar_array_prints_as_jax(name):
  _check(_closure_programs(SC)[name], _closure_programs(JAX)[name], (X,))


def test_closed_over_scalar_array_is_a_constant_of_the_jaxpr():
  c = snp.float32(2.)
  closed = sc.make_jaxpr(lambda x: x * c)(X)
  assert len(closed.consts) == 1 and float(np.asarray(closed.consts[0])) == 2.0
  assert not sc.make_jaxpr(lambda x: x * snp.float32(2.))(X).consts


def test_eager_linearize_residual_is_a_constant():
  # JAX's linearize outside jit closes over its concrete residuals (cos(1.0) here).
  f_jvp = sc.linearize(snp.sin, np.float32(1.0))[1]
  ours = sc.make_jaxpr(f_jvp)(np.float32(1.0))
  theirs = jax.make_jaxpr(jax.linearize(jjnp.sin, np.float32(1.0))[1])(np.float32(1.0))
  assert str(ours) == str(theirs)
  np.testing.assert_allclose(np.asarray(f_jvp(np.float32(2.0))), 2 * np.cos(1.0), rtol=1e-6)
