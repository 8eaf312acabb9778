"""Control flow meets residual forwarding and JAX's front-end forwarding, printed as JAX
0.10.2 prints them:

* `scan`: a carry the body returns unchanged becomes a constant of the loop (and the final
  carry is the initial value itself); a `y` that is an `x` is not stacked again (the `x` is
  returned). JAX's `lax.scan` front end (`_jaxpr_forwarding`).
* `cond` partial evaluation: a constant that a `jit` inside a branch forwards to its tangent
  side becomes a constant of the known branch, returned as a residual; every branch fills the
  residual slots of the others with `empty2` arrays (JAX's `_join_cond_outputs`).
* `checkpoint` around a `jit`: the known half of the jit inside the rematerialized backward
  body returns its own residuals and constant (JAX's forwarding split).

Printed jaxprs are compared with JAX's, values with JAX's (eagerly and under jit).
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

C = np.arange(3.0, dtype=np.float32) + 1
X = np.array([0.5, -1.0, 2.0], np.float32)
XS = np.stack([X, X * 2, X - 1])


def _programs(m):
  """name -> (function, args): the same program for JAX and stagecraft."""
  L, N, lax = m.lib, m.np, m.lax
  g = L.jit(lambda x: N.sin(x) * C)
  cond_jit = lambda x: lax.cond(x.sum() > 0, g, lambda y: y * 2.0, x).sum()
  cond_jit_neg = lambda x: lax.cond(x.sum() < 0, g, lambda y: y * 2.0, x).sum()
  switch_jit = lambda x: lax.switch((x.sum() > 0).astype(np.int32) + 1,
                                   [lambda y: N.cos(y), g, lambda y: g(y) * y], x).sum()
  cond_plain = lambda x: lax.cond(x.sum() > 0, N.sin, lambda y: N.cos(y) * 2, x).sum()
  cond_scalar = lambda x: lax.cond(x > 0, N.sin, lambda y: y * 2.0, x)
  scan_fwd = lambda x: lax.scan(lambda c, v: (c, v * c), 2.0, x)[1].sum()
  scan_fwd_arr = lambda x: lax.scan(lambda c, v: (c, v * c), x, XS)[1].sum()
  scan_fwd_traced = lambda x: lax.scan(lambda c, v: (c, N.sin(v) * c), x, XS * x)[1].sum()
  scan_ys_is_x = lambda x: lax.scan(lambda c, v: (c + v, v), 0.0, x)
  scan_pass = lambda x: lax.scan(lambda c, v: (c, v), 1.0, x)
  scan_swap = lambda x: lax.scan(lambda c, v: ((c[1], c[0]), v * c[0]), (1.0, 2.0), x)
  scan_mixed = lambda x: lax.scan(lambda c, v: ((c[0], c[1] + v * c[0]), (v, c[1])),
                                  (x[0], 0.0), x)
  ckpt_jit = lambda x: L.checkpoint(lambda y: N.tanh(g(N.cos(y))))(x).sum()
  return {
      "grad_cond_jit": (L.grad(cond_jit), (X,)),
      "grad_cond_jit_other_branch": (L.grad(cond_jit_neg), (X,)),
      "grad_switch_jit": (L.grad(switch_jit), (X,)),
      "grad_cond_plain": (L.grad(cond_plain), (X,)),
      "grad_cond_scalar": (L.grad(cond_scalar), (np.float32(1.5),)),
      "jit_grad_cond_jit": (L.jit(L.grad(cond_jit)), (X,)),
      "vmap_grad_cond_jit": (L.vmap(L.grad(cond_jit)), (XS,)),
      "hessian_cond_jit": (L.hessian(cond_jit), (X,)),
      "cond_jit": (cond_jit, (X,)),
      "scan_forwarding": (scan_fwd, (X,)),
      "grad_scan_forwarding": (L.grad(scan_fwd), (X,)),
      "scan_forwarding_array": (scan_fwd_arr, (X,)),
      "grad_scan_forwarding_array": (L.grad(scan_fwd_arr), (X,)),
      "grad_scan_forwarding_traced_xs": (L.grad(scan_fwd_traced), (X,)),
      "scan_ys_is_x": (scan_ys_is_x, (X,)),
      "scan_pass_through": (scan_pass, (X,)),
      "scan_swapped_carries": (scan_swap, (X,)),
      "scan_mixed": (scan_mixed, (X,)),
      "grad_scan_mixed": (L.grad(lambda x: sum(a.sum() for a in
                                               jax.tree.leaves(scan_mixed(x)))), (X,)),
      "vmap_scan_forwarding": (L.vmap(scan_fwd_arr), (XS,)),
      "checkpoint_jit": (ckpt_jit, (X,)),
      "grad_checkpoint_jit": (L.grad(ckpt_jit), (X,)),
  }


NAMES = sorted(_programs(JAX))
# Printed forms that still differ from JAX's (values agree): none.
PRINT_DIFFERS: set[str] = set()


def _printed(m, name):
  f, args = _programs(m)[name]
  return str(m.lib.make_jaxpr(f)(*args))


@pytest.mark.parametrize("name", [n for n in NAMES if n not in PRINT_DIFFERS])
def test_printed_jaxpr_equals_jax(name):
  ours, theirs = _printed(SC, name), _printed(JAX, name)
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"


@pytest.mark.parametrize("name", NAMES)
def test_values_equal_jax(name):
  f, args = _programs(SC)[name]
  ours = sc.tree.leaves((f(*args), sc.jit(f)(*args)))
  f, args = _programs(JAX)[name]
  theirs = jax.tree.leaves((f(*args), jax.jit(f)(*args)))
  assert len(ours) == len(theirs)
  for a, b in zip(ours, theirs):
    assert np.asarray(a).dtype == np.asarray(b).dtype
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", ["grad_cond_jit", "scan_forwarding", "vmap_grad_cond_jit"])
def test_printed_jaxpr_equals_jax_x64(name):
  with jax.enable_x64(True):
    theirs = _printed(JAX, name)
  with sc.enable_x64():
    ours = _printed(SC, name)
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"


def test_forwarded_carry_is_the_initial_value():
  # As JAX: the final value of a carry the body passes through is the init object itself.
  init = np.float32(2.0)
  c, ys = sc.lax.scan(lambda c, v: (c, v * c), init, X)
  assert c is init
  np.testing.assert_allclose(np.asarray(ys), X * 2)
  c, _ = sc.lax.scan(lambda c, v: (c, v * c), 2.0, X)
  assert type(c) is float and c == 2.0


def test_forwarded_xs_is_an_array():
  # A y that is an x is that x, put on the device when it is a NumPy array (JAX's
  # `_maybe_put`); a traced x is returned as it is.
  _, ys = sc.lax.scan(lambda c, v: (c, v), 1.0, X)
  assert isinstance(ys, sc.Array) and not isinstance(ys, np.ndarray)
  np.testing.assert_array_equal(np.asarray(ys), X)
  jaxpr = sc.make_jaxpr(lambda x: sc.lax.scan(lambda c, v: (c + v, v), 0.0, x))(X)
  assert jaxpr.jaxpr.outvars[1] is jaxpr.jaxpr.invars[0]


def test_forwarded_carry_gradient_and_finite_differences():
  # The carry moved to a constant still carries its derivative (through the ys).
  f = lambda c, x: sc.lax.scan(lambda k, v: (k, snp.sin(v * k)), c, x)[1].sum()
  fj = lambda c, x: jax.lax.scan(lambda k, v: (k, jjnp.sin(v * k)), c, x)[1].sum()
  c0 = np.float32(0.7)
  for argnums in (0, 1):
    np.testing.assert_allclose(np.asarray(sc.grad(f, argnums)(c0, X)),
                               np.asarray(jax.grad(fj, argnums)(c0, X)), rtol=1e-6)
  sc.test_util.check_grads(f, (c0, X), order=2, modes=("fwd", "rev"))


def test_cond_with_jit_gradient_against_finite_differences():
  g = sc.jit(lambda y: snp.sin(y) * C)
  for pred in (lambda x: x.sum() > 0, lambda x: x.sum() < 0):
    f = lambda x: sc.lax.cond(pred(x), g, lambda y: snp.cos(y) * C, x)
    sc.test_util.check_grads(f, (X,), order=2, modes=("fwd", "rev"))


def test_empty2_is_jax_named_and_lowers():
  from stagecraft.lax.control_flow import conditionals
  assert conditionals.empty2_p.name == "empty2"
  x = conditionals.empty2(np.float32)
  assert np.asarray(x).shape == () and np.asarray(x).dtype == np.float32
  text = str(sc.make_jaxpr(lambda: conditionals.empty2(np.int32))())
  assert "empty2[dtype=int32 memory_space=MemorySpace.Device]" in text
