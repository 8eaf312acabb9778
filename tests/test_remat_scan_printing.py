"""A `scan` inside `checkpoint`, differentiated: the printed jaxprs equal JAX 0.10.2's (the
body is split by the policy and the known part of the scan runs as one `closed_call`, as
JAX's `_scan_partial_eval_custom` builds it: a `dots_saveable` policy saves the body's dots
per iteration; the recomputed scan's residuals, loop-invariant ones included, numbered as
JAX's JaxprTrace numbers them), for several policies and scans with constants, carries, xs
and ys; the values and gradients equal JAX's, eagerly and under jit; which residuals are
saved equals JAX's `saved_residuals`."""
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


def _body_sin(np_):
  def body(c, _):
    return np_.sin(c) * 2., None
  return body


def _programs(np_):
  L = _lib(np_)
  cp = L.checkpoint_policies

  def carry_only(x):
    return L.lax.scan(_body_sin(np_), x, None, length=3)[0].sum()

  def with_xs_ys(x):
    def body(c, xs):
      y = np_.tanh(c * xs)
      return c + y, np_.cos(y)
    c, ys = L.lax.scan(body, x[0], x)
    return c.sum() + ys.sum()

  def with_consts(x):
    w = np_.asarray(W)

    def body(c, xs):
      h = np_.tanh(c @ w + xs)
      return h, h.sum()
    c, ys = L.lax.scan(body, x[0], x)
    return (c ** 2).sum() + ys.sum()

  def loop_invariant(x):
    def body(c, _):
      s = np_.sin(x[0])   # depends only on a closed-over value: hoisted
      return c * s + 1., None
    return L.lax.scan(body, x[1], None, length=4)[0].sum()

  def two_invariants(x):
    def body(c, xs):
      s, t = np_.sin(x[0]), np_.cos(x[2])
      return c * s + np_.tanh(c * t) * xs, np_.exp(c) * s
    c, ys = L.lax.scan(body, x[1], x)
    return c.sum() + ys.sum()

  def invariant_chain(x):
    def body(c, _):
      a = np_.exp(x[0]) * np_.sin(x[1])
      return np_.sin(c * a) + c * np_.cos(a), None
    return L.lax.scan(body, x[2], None, length=3)[0].sum()

  def two_carries(x):
    def body(carry, xs):
      c, d = carry
      return (c * np_.sin(d) + xs, d * np_.cos(c) * np_.sin(x[0])), c * d
    (c, d), ys = L.lax.scan(body, (x[0], x[1]), x)
    return c.sum() + d.sum() + ys.sum()

  return {
      "two_invariants": (two_invariants, None),
      "two_invariants_dots_saveable": (two_invariants, cp.dots_saveable),
      "invariant_chain": (invariant_chain, None),
      "two_carries": (two_carries, None),
      "two_carries_everything_saveable": (two_carries, cp.everything_saveable),
      "carry_only": (carry_only, None),
      "carry_only_everything_saveable": (carry_only, cp.everything_saveable),
      "with_xs_ys": (with_xs_ys, None),
      "with_xs_ys_dots_saveable": (with_xs_ys, cp.dots_saveable),
      "with_consts": (with_consts, None),
      "with_consts_dots_saveable": (with_consts, cp.dots_with_no_batch_dims_saveable),
      "loop_invariant": (loop_invariant, None),
  }


NAMES = sorted(_programs(jjnp))


def _grad(np_, name):
  L = _lib(np_)
  f, policy = _programs(np_)[name]
  return L.grad(L.checkpoint(f, policy=policy))


def _texts(name):
  return (str(sc.make_jaxpr(_grad(jnp, name))(X)), str(jax.make_jaxpr(_grad(jjnp, name))(X)))


@pytest.mark.parametrize("name", NAMES)
def test_printed_grad_jaxpr_equals_jax(name):
  # NB: the transposed checkpoint splits the recomputed scan as JAX's JaxprTrace does: its
  # residuals (the loop-invariant ones too) in the topological order of the traced graph.
  ours, theirs = _texts(name)
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"
  assert "closed_call[" in ours


@pytest.mark.parametrize("name", ["two_invariants", "invariant_chain", "two_carries",
                                  "loop_invariant"])
def test_linear_transpose_of_linearized_scan_prints_as_jax(name):
  # linearize splits the scan as JAX's linearize (residuals in the order the tangent body
  # reads them); linear_transpose splits that linear scan again as JAX's JaxprTrace.
  def program(np_):
    L = _lib(np_)
    f, _ = _programs(np_)[name]
    return lambda x: L.linear_transpose(L.linearize(f, X)[1], X)(np.float32(1.0))
  ours = str(sc.make_jaxpr(program(jnp))(X))
  theirs = str(jax.make_jaxpr(program(jjnp))(X))
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"
  np.testing.assert_allclose(np.asarray(program(jnp)(X)[0]), np.asarray(program(jjnp)(X)[0]),
                             rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_equal_jax(name):
  want = np.asarray(_grad(jjnp, name)(X))
  for got in (_grad(jnp, name)(X), sc.jit(_grad(jnp, name))(X)):
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-6, atol=2e-6)


def test_closed_call_runs_eagerly_under_jit_and_vmap():
  from stagecraft.interpreters.calls import closed_call_p
  closed = sc.make_jaxpr(lambda x: [jnp.sin(x) * 2.0])(X)
  out, = closed_call_p.bind(X, call_jaxpr=closed)
  np.testing.assert_allclose(np.asarray(out), np.sin(X) * 2, rtol=1e-6)
  f = lambda x: closed_call_p.bind(x, call_jaxpr=closed)[0].sum()
  np.testing.assert_allclose(float(sc.jit(f)(X + 1)), float((np.sin(X + 1) * 2).sum()), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(sc.grad(f)(X)), 2 * np.cos(X), rtol=1e-5)
  closed_row = sc.make_jaxpr(lambda x: [jnp.sin(x) * 2.0])(X[0])
  rows = sc.vmap(lambda r: closed_call_p.bind(r, call_jaxpr=closed_row)[0])(X)
  np.testing.assert_allclose(np.asarray(rows), np.sin(X) * 2, rtol=1e-6)


@pytest.mark.parametrize("name", ["with_consts_dots_saveable", "with_xs_ys_dots_saveable",
                                  "carry_only"])
def test_saved_residuals_as_jax(name):
  f, policy = _programs(jnp)[name]
  jf, jpolicy = _programs(jjnp)[name]
  ours, theirs = saved_residual_types(sc.checkpoint(f, policy=policy),
                                      jax.checkpoint(jf, policy=jpolicy), X)
  assert ours == theirs
