"""`cond`, `switch` and `while_loop` inside `checkpoint` (and a scan whose operands are all
known): the policy decides inside the branches and bodies, as JAX's
`_cond_partial_eval_custom` and `_while_partial_eval_custom` (a `dots_saveable` policy saves
a branch's dots; a while loop saves nothing and is run again), so the printed jaxprs of
`grad` (and `linearize` for while loops) equal JAX 0.10.2's, the values and gradients equal
JAX's eagerly and under jit, and which residuals are saved equals JAX's `saved_residuals`."""
import numpy as np
import pytest

import jax
import jax.numpy as jjnp

import stagecraft as sc
import stagecraft.numpy as jnp
from tests._util import saved_residual_types

X = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(3, 2)
W = np.linspace(0.5, 1.5, 4, dtype=np.float32).reshape(2, 2)


def _lib(np_):
  return jax if np_ is jjnp else sc


def _programs(np_):
  L = _lib(np_)
  cp = L.checkpoint_policies
  w = np_.asarray(W)

  def cond_dot(x):
    return L.lax.cond(x.sum() > 0, lambda x: np_.sin(x @ w) * 2.,
                      lambda x: np_.cos(x) @ w, x).sum()

  def cond_residuals_differ(x):   # residual slots shared between branches by type
    return L.lax.cond(x[0, 0] > 0, lambda x: np_.sin(x) * x,
                      lambda x: np_.exp(x[0]) + x, x).sum()

  def cond_consts(x):
    v = w * 2
    return L.lax.cond(x.sum() > 0, lambda x: np_.sin(x @ v), lambda x: x * v[0], x).sum()

  def cond_int_out(x):
    y, k = L.lax.cond(x.sum() > 0, lambda x: (np_.sin(x), np_.int32(1)),
                      lambda x: (x * 2., np_.int32(2)), x)
    return (y * k).sum()

  def nested_cond(x):
    inner = lambda x: L.lax.cond(x[0, 0] > 0, np_.sin, np_.cos, x)   # noqa: E731
    return L.lax.cond(x.sum() > 0, lambda x: inner(x) * x, np_.exp, x).sum()

  def cond_in_scan(x):
    def body(c, xs):
      c = L.lax.cond(xs.sum() > 0, lambda c: np_.sin(c) * xs, lambda c: np_.cos(c) + xs, c)
      return c, c.sum()
    c, ys = L.lax.scan(body, x[0], x)
    return c.sum() + ys.sum()

  def switch3(x):   # a constant index: clamped by a staged clamp, as JAX's
    return L.lax.switch(1, [np_.sin, lambda x: np_.cos(x) * x, lambda x: x @ w], x).sum()

  def scan_all_known(x):   # every operand of the scan known: still split inside its body
    c, _ = L.lax.scan(lambda c, _: (np_.sin(c @ w), None), w, None, length=3)
    return (c.sum() * x).sum()

  return {
      "cond_dot": (cond_dot, None),
      "cond_dot_dots_saveable": (cond_dot, cp.dots_saveable),
      "cond_residuals_differ": (cond_residuals_differ, None),
      "cond_residuals_differ_everything": (cond_residuals_differ, cp.everything_saveable),
      "cond_consts_dots_saveable": (cond_consts, cp.dots_saveable),
      "cond_int_out": (cond_int_out, None),
      "nested_cond": (nested_cond, None),
      "nested_cond_everything": (nested_cond, cp.everything_saveable),
      "cond_in_scan": (cond_in_scan, None),
      "cond_in_scan_everything": (cond_in_scan, cp.everything_saveable),
      "switch3_dots_saveable": (switch3, cp.dots_saveable),
      "scan_all_known_dots_saveable": (scan_all_known, cp.dots_saveable),
  }


NAMES = sorted(_programs(jjnp))


def _grad(np_, name):
  L = _lib(np_)
  f, policy = _programs(np_)[name]
  return L.grad(L.checkpoint(f, policy=policy))


@pytest.mark.parametrize("name", NAMES)
def test_printed_grad_jaxpr_equals_jax(name):
  ours = str(sc.make_jaxpr(_grad(jnp, name))(X))
  theirs = str(jax.make_jaxpr(_grad(jjnp, name))(X))
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"


@pytest.mark.parametrize("name", NAMES)
def test_gradients_equal_jax(name):
  want = np.asarray(_grad(jjnp, name)(X))
  for got in (_grad(jnp, name)(X), sc.jit(_grad(jnp, name))(X)):
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", ["cond_dot_dots_saveable", "cond_consts_dots_saveable",
                                  "cond_residuals_differ_everything",
                                  "scan_all_known_dots_saveable", "switch3_dots_saveable"])
def test_saved_residuals_as_jax(name):
  f, policy = _programs(jnp)[name]
  jf, jpolicy = _programs(jjnp)[name]
  ours, theirs = saved_residual_types(sc.checkpoint(f, policy=policy),
                                      jax.checkpoint(jf, policy=jpolicy), X)
  assert ours == theirs


def _while_program(np_):
  L = _lib(np_)
  return lambda x: L.lax.while_loop(lambda c: c[1] < 3,
                                    lambda c: (np_.sin(c[0]) * 2, c[1] + 1), (x, 0))[0].sum()


@pytest.mark.parametrize("policy", ["nothing_saveable", "everything_saveable"])
def test_while_linearize_as_jax(policy):
  # A while loop saves nothing: the known loop computes the primal carries, the linearized
  # function runs the whole loop again (the JVP of its body).
  def lin(np_):
    L = _lib(np_)
    f = L.checkpoint(_while_program(np_), policy=getattr(L.checkpoint_policies, policy))
    return lambda x: L.linearize(f, x)[1](x)
  ours = str(sc.make_jaxpr(lin(jnp))(X))
  theirs = str(jax.make_jaxpr(lin(jjnp))(X))
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"
  np.testing.assert_allclose(np.asarray(lin(jnp)(X)), np.asarray(lin(jjnp)(X)), rtol=1e-5)


def test_while_grad_raises_as_jax():
  f = sc.checkpoint(_while_program(jnp))
  with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for "
                     "lax.while_loop"):
    sc.grad(f)(X)
