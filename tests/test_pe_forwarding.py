"""Partial evaluation of `jit` calls forwards residuals as JAX 0.10.2's does (its
`_pjit_partial_eval` / `_pjit_linearize`): a residual that is a constant of the body is
passed to the tangent (and transposed) call from outside, as an operand, while the primal
call keeps closing over its own constant; a residual that is an operand of the known call,
or one of its known results, is not returned by it again; a known result that is an
operand is not returned either. Printed jaxprs of grad/vjp/linearize/hessian of programs
with jit calls (user jits, nested jits, the jnp functions JAX jits) are compared with JAX's,
and values with JAX's."""
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

C = np.arange(3.0, dtype=np.float32) + 1
X = np.array([0.5, -1.0, 2.0], np.float32)
XB = np.stack([X, X * 2])


def _programs(m):
  """name -> (function, args): the same program for JAX and stagecraft."""
  L, N = m.lib, m.np
  g = L.jit(lambda x: N.sin(x) * C)                     # closes over a constant
  h = L.jit(lambda x: N.where(x > 0, x, 0.0).sum())     # jnp.where: a jit inside a jit
  nested = L.jit(lambda x: g(x) + C)                    # both close over C
  inner = L.jit(lambda y: N.sin(y) * C)
  nested2 = L.jit(lambda x: inner(N.cos(x)) * x)        # only the inner one does
  fwd_in = L.jit(lambda x, y: (x, N.sin(y) * x))        # a result that is an operand
  two_c = L.jit(lambda x: N.sin(x) * C + N.cos(x) * (C * 2))
  both = L.jit(lambda x: (N.sin(x), N.sin(x) * N.cos(x)))
  lin = L.jit(lambda y: y * C)                          # all residuals forwarded
  pair = L.jit(lambda a, b: (a, b * 2.0))               # the known call has no results
  return {
      "grad_const": (L.grad(lambda x: g(x).sum()), (X,)),
      "grad_where": (L.grad(h), (X,)),
      "grad_where_unjitted": (L.grad(lambda x: N.where(x > 0, x, 0.0).sum()), (X,)),
      "grad_nested_same_const": (L.grad(lambda x: nested(x).sum()), (X,)),
      "grad_nested_inner_const": (L.grad(lambda x: nested2(x).sum()), (X,)),
      "grad_forwarded_result": (
          L.grad(lambda x, y: sum(fwd_in(x, y)).sum(), argnums=(0, 1)), (X, X)),
      "grad_two_consts": (L.grad(lambda x: two_c(x).sum()), (X,)),
      "grad_residual_is_a_result": (
          L.grad(lambda x: (both(x)[0] * both(x)[1]).sum()), (X,)),
      "grad_linear": (L.grad(lambda x: lin(x).sum()), (X,)),
      "grad_no_known_results": (
          L.grad(lambda x, y: (pair(x, y)[0] * pair(x, y)[1]).sum(), argnums=1), (X, X)),
      "grad_literal_operand": (
          L.grad(lambda y: L.jit(lambda b, a: (a, b * 2.0))(y, 3.0)[1].sum()), (X,)),
      "vjp_const": (lambda x: L.vjp(g, x)[1](x), (X,)),
      "linearize_const": (lambda x: L.linearize(g, x)[1](x), (X,)),
      "linearize_where": (lambda x: L.linearize(h, x)[1](x), (X,)),
      "jvp_const": (lambda x, t: L.jvp(L.jit(lambda b: (N.sin(b) * C, b)), (x,), (t,)),
                    (X, X)),
      "jit_of_grad_const": (L.jit(L.grad(lambda x: g(x).sum())), (X,)),
      "jit_of_grad_where": (L.jit(L.grad(h)), (X,)),
      "hessian_const": (L.hessian(lambda x: (g(x) ** 2).sum()), (X,)),
      "hessian_where": (L.hessian(lambda x: (N.where(x > 0, x, 0.0) ** 3).sum()), (X,)),
      "grad_norm": (L.grad(lambda x: N.linalg.norm(x)), (X,)),
      "grad_clip": (L.grad(lambda x: N.clip(x, -0.7, 1.0).sum()), (X,)),
      "grad_mean_where": (L.grad(lambda x: N.mean(x, where=x > 0)), (X,)),
      "grad_of_vmap": (L.grad(lambda x: L.vmap(g)(x).sum()), (XB,)),
      "vmap_of_grad": (L.vmap(L.grad(lambda x: (g(x) ** 2).sum())), (XB,)),
  }


NAMES = sorted(_programs(JAX))


def _printed(m, name):
  f, args = _programs(m)[name]
  return str(m.lib.make_jaxpr(f)(*args))


@pytest.mark.parametrize("name", NAMES)
def test_printed_jaxpr_equals_jax(name):
  ours, theirs = _printed(SC, name), _printed(JAX, name)
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"


@pytest.mark.parametrize("name", NAMES)
def test_values_equal_jax(name):
  f, args = _programs(SC)[name]
  ours = sc.tree.leaves((f(*args), sc.jit(f)(*args)))
  f, args = _programs(JAX)[name]
  theirs = jax.tree.leaves(f(*args)) * 2
  assert len(ours) == len(theirs)
  for a, b in zip(ours, theirs):
    assert np.asarray(a).dtype == np.asarray(b).dtype
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", ["grad_const", "grad_where", "grad_nested_inner_const",
                                  "hessian_const"])
def test_printed_jaxpr_equals_jax_x64(name):
  with jax.enable_x64(True):
    theirs = _printed(JAX, name)
  with sc.enable_x64():
    ours = _printed(SC, name)
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"


def test_constant_residual_is_an_operand_of_the_tangent_call():
  text = _printed(SC, "grad_const")
  # The outer jaxpr holds the constant; the primal call closes over its own copy.
  assert text.startswith("{ lambda a:f32[3]; b:f32[3]. let")
  assert "jaxpr={ lambda e:f32[3]; b:f32[3]. let" in text
  # The transposed call reads it as an operand and closes over nothing.
  assert "jaxpr={ lambda ; d:f32[3] a:f32[3] g:f32[3]. let" in text
  assert "] d a g" in text
  consts = sc.make_jaxpr(_programs(SC)["grad_const"][0])(X).consts
  assert len(consts) == 1 and np.asarray(consts[0]) is C


def test_forwarded_operand_is_not_returned_again():
  text = _printed(SC, "grad_where_unjitted")
  # `_where`'s known call returns its result and the zeros residual, not its mask operand.
  assert "c:f32[3] d:f32[3] = jit[" in text and "in (c, d) }" in text
  assert "] b d h" in text


def test_nested_constant_not_of_the_outer_call_is_its_residual():
  # As JAX: the outer known call closes over the inner call's constant and returns it.
  text = _printed(SC, "grad_nested_inner_const")
  assert "jaxpr={ lambda e:f32[3]; a:f32[3]. let" in text
  assert "in (b, c, d, e, f) }" in text


def test_grad_against_finite_differences():
  g = sc.jit(lambda y: snp.sin(y) * C)
  h = sc.jit(lambda y: snp.where(y > 0, y * y, snp.cos(y)) * C)
  f = sc.jit(lambda y: h(g(y)) + g(y) * y)
  for fun in (g, h, f):
    sc.test_util.check_grads(fun, (X,), order=2, modes=("fwd", "rev"))


def test_repeated_grad_reuses_the_split():
  # The split of a call is derived once per (body, unknowns): tracing again gives the same
  # ClosedJaxprs (so their compiled executables are reused) and prints the same.
  f = _programs(SC)["grad_nested_inner_const"][0]
  j1, j2 = sc.make_jaxpr(f)(X), sc.make_jaxpr(f)(X)
  assert str(j1) == str(j2)
  calls = [(e1.params["jaxpr"], e2.params["jaxpr"]) for e1, e2 in zip(j1.eqns, j2.eqns)
           if e1.primitive.name == "jit"]
  assert len(calls) == 2
  for c1, c2 in calls:
    assert c1 is c2
