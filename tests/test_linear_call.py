"""`custom_derivatives.linear_call` against JAX's `jax.custom_derivatives.linear_call`: values,
custom transposes (and the transpose of the transpose), grad/jvp/vjp, vmap (with grad, both
orders), jit, the callee's closed-over values, and JAX's error for a transpose of the wrong
structure. Residual tangents, which JAX asserts away, are checked against the calculus."""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.custom_derivatives import linear_call as jax_linear_call

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.custom_derivatives import linear_call, linear_call_p


def _programs(lc, np_):
  """JAX's docstring examples and a matrix case, written against `lc` (either linear_call)."""
  def div_add(x, denom):
    return x + lc(lambda r, x: x / r, lambda r, t: t / r, denom, x)

  def custom_id(x):
    return lc(lambda _, x: x, lambda _, t: 7.0 * t, (), x)

  def matvec(m, v):
    # m @ v, with m.T @ ct as the transpose; residual m, two outputs, a dict input
    return lc(lambda m, d: {"y": m @ d["v"], "s": np_.sum(d["v"]) * 2.0},
              lambda m, ct: {"v": m.T @ ct["y"] + 2.0 * ct["s"]}, m, {"v": v})
  return div_add, custom_id, matvec


S = _programs(linear_call, jnp)
J = _programs(jax_linear_call, jjnp)
M = np.arange(6.0, dtype=np.float32).reshape(2, 3) / 5
V = np.array([0.5, -1.0, 2.0], np.float32)


def _close(a, b, rtol=1e-6):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    assert np.shape(x) == np.shape(y)
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=1e-6)


def _transpose(api, f, x_example):
  def transposed(y):
    x, = api.linear_transpose(f, x_example)(y)
    return x
  return transposed


def test_values_and_transposes_match_jax():
  _close(S[0](9.0, 3.0), J[0](9.0, 3.0))
  _close(S[2](M, V), J[2](M, V))
  for api, (div_add, custom_id, _) in ((sc, S), (jax, J)):
    assert float(_transpose(api, partial(div_add, denom=3.0), 1.0)(18.0)) == 24.0
    t = partial(_transpose, api)
    assert [float(t(custom_id, 1.0)(1.0)), float(t(t(custom_id, 1.0), 1.0)(1.0)),
            float(t(t(t(custom_id, 1.0), 1.0), 1.0)(1.0))] == [7.0, 1.0, 7.0]
  ct = {"y": np.array([1.0, -2.0], np.float32), "s": np.float32(0.5)}
  _close(sc.linear_transpose(partial(S[2], M), V)(ct), jax.linear_transpose(
      partial(J[2], M), V)(ct))


@pytest.mark.parametrize("jit", [False, True])
def test_grad_jvp_vjp_match_jax(jit):
  wrap = sc.jit if jit else (lambda f: f)
  loss = lambda P: lambda v: (P[2](M, v)["y"] ** 2).sum() + P[2](M, v)["s"]
  _close(wrap(sc.grad(loss(S)))(V), jax.grad(loss(J))(V))
  _close(wrap(sc.grad(lambda x: S[1](x) * x))(2.0), jax.grad(lambda x: J[1](x) * x)(2.0))
  _close(wrap(lambda x, t: sc.jvp(partial(S[2], M), (x,), (t,)))(V, 2 * V),
         jax.jvp(partial(J[2], M), (V,), (2 * V,)))
  out, f_vjp = sc.vjp(partial(S[0], denom=4.0), 3.0)
  jout, jf_vjp = jax.vjp(partial(J[0], denom=4.0), 3.0)
  _close((out, f_vjp(1.0)), (jout, jf_vjp(1.0)))


def _loop(f, in_axes, *args):
  """vmap by a Python loop (JAX's linear_call has no batching rule): stacked results."""
  n = next(np.shape(a)[0] for a, ax in zip(args, in_axes) if ax == 0)
  outs = [f(*[a[i] if ax == 0 else a for a, ax in zip(args, in_axes)]) for i in range(n)]
  return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *outs)


def test_vmap_and_its_compositions_match_a_loop_of_jax():
  Vs = np.stack([V, 2 * V, -V])
  Ms = np.stack([M, M + 1, M * 2])
  _close(sc.vmap(S[2], (None, 0))(M, Vs), _loop(J[2], (None, 0), M, Vs))
  _close(sc.vmap(S[2])(Ms, Vs), _loop(J[2], (0, 0), Ms, Vs))
  _close(sc.vmap(S[0], (0, None))(Vs[:, 0], 3.0), _loop(J[0], (0, None), Vs[:, 0], 3.0))
  loss = lambda P: lambda m, v: (P[2](m, v)["y"] ** 2).sum() * P[2](m, v)["s"]
  # vmap of grad (the transpose batched) and grad of vmap (the batched call transposed)
  _close(sc.vmap(sc.grad(loss(S), argnums=1))(Ms, Vs),
         _loop(jax.grad(loss(J), argnums=1), (0, 0), Ms, Vs), rtol=1e-5)
  _close(sc.grad(lambda v: sc.vmap(loss(S), (0, None))(Ms, v).sum())(V),
         jax.grad(lambda v: sum(loss(J)(m, v) for m in Ms))(V), rtol=1e-5)
  _close(sc.jit(sc.vmap(lambda x: sc.grad(S[1])(x)))(np.arange(3.0)),
         _loop(jax.grad(J[1]), (0,), np.arange(3.0)))
  # a transposed call, batched: linear_transpose under vmap
  cts = {"y": np.ones((3, 2), np.float32), "s": np.arange(3.0, dtype=np.float32)}
  _close(sc.vmap(lambda m, c: sc.linear_transpose(partial(S[2], m), V)(c))(Ms, cts),
         _loop(lambda m, y, s_: jax.linear_transpose(partial(J[2], m), V)({"y": y, "s": s_}),
               (0, 0, 0), Ms, cts["y"], cts["s"]))


def test_residual_tangents_follow_the_calculus():
  # d/d denom of x / denom (JAX asserts these tangents are zero)
  x, d = 2.0, 3.0
  np.testing.assert_allclose(float(sc.grad(lambda d: S[0](x, d))(d)), -x / d ** 2, rtol=1e-6)
  g = sc.grad(lambda m, v: (S[2](m, v)["y"] ** 2).sum(), argnums=(0, 1))(M, V)
  y = M @ V
  np.testing.assert_allclose(np.asarray(g[0]), 2 * np.outer(y, V), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(g[1]), 2 * M.T @ y, rtol=1e-5)
  _, t = sc.jvp(lambda m: S[2](m, V)["y"], (M,), (np.ones_like(M),))
  np.testing.assert_allclose(np.asarray(t), np.ones_like(M) @ V, rtol=1e-6)


def test_closed_over_values_and_jaxpr():
  w = jnp.float32(3.0)
  f = lambda x: linear_call(lambda r, x: x * w * r, lambda r, t: t * w * r, 2.0, x)
  assert float(sc.jit(sc.grad(f))(1.5)) == 6.0
  assert float(sc.grad(lambda w_: sc.jit(lambda x: linear_call(
      lambda r, x: x * w_, lambda r, t: t * w_, (), x))(2.0))(3.0)) == 2.0
  jaxpr = sc.make_jaxpr(partial(S[0], denom=3.0))(1.0)
  (eqn,) = [e for e in jaxpr.eqns if e.primitive is linear_call_p]
  assert eqn.params["num_res"] == 1 and "linear_call" in str(jaxpr)


def test_transpose_of_wrong_structure_is_jax_error():
  bad_s = lambda x: linear_call(lambda r, x: x[0] + x[1], lambda r, t: t, (), (x, x))
  bad_j = lambda x: jax_linear_call(lambda r, x: x[0] + x[1], lambda r, t: t, (), (x, x))
  with pytest.raises(TypeError, match="transpose output pytree structure must match") as je:
    jax.grad(bad_j)(1.0)
  with pytest.raises(TypeError, match="transpose output pytree structure must match") as se:
    sc.grad(bad_s)(1.0)
  assert "got output structure" in str(se.value) and "got output structure" in str(je.value)
  bad_shape = lambda x: linear_call(lambda r, x: x.sum(), lambda r, t: t, (), x)
  with pytest.raises(TypeError, match=r"shapes and dtypes of the linear inputs"):
    sc.grad(bad_shape)(np.ones(3, np.float32))
  with pytest.raises(TypeError, match="not a valid array type"):
    linear_call(lambda r, x: x, lambda r, t: t, "res", 1.0)
