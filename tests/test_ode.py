"""`stagecraft.experimental.ode.odeint` (JAX's `jax.experimental.ode.odeint`): solutions against
SciPy's `odeint`/`solve_ivp` and JAX, pytree and complex states, `jit`/`vmap`, options,
reverse-mode gradients (the adjoint ODE) against finite differences and JAX, and errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.integrate as sint

import jax
import jax.numpy as jjnp
from jax.experimental import ode as jode

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.experimental.ode import odeint
from stagecraft.test_util import check_grads


def pendulum(np_):
  return lambda y, t, a, b: np_.stack([y[1], -a * np_.sin(y[0]) - b * y[1]])


def pendulum_ref(y, t, a, b):
  return [y[1], -a * np.sin(y[0]) - b * y[1]]


@pytest.mark.parametrize("x64", [False, True])
def test_matches_scipy_odeint(x64):
  dt = np.float64 if x64 else np.float32
  ts = np.linspace(0., 4., 9)
  y0 = np.array([1.2, -0.3])
  want = sint.odeint(pendulum_ref, y0, ts, args=(3., 0.2), rtol=1e-12, atol=1e-12)
  with sc.enable_x64(x64):
    ys = odeint(pendulum(jnp), y0.astype(dt), ts.astype(dt), 3., 0.2)
  assert ys.dtype == dt and ys.shape == (9, 2)
  np.testing.assert_allclose(np.asarray(ys), want, atol=1e-6 if x64 else 2e-5)


def test_matches_solve_ivp_and_tolerances():
  def lv(t, y):
    return [1.5 * y[0] - y[0] * y[1], -3 * y[1] + y[0] * y[1]]
  ts = np.linspace(0., 6., 13)
  want = sint.solve_ivp(lv, (0., 6.), [2., 1.], t_eval=ts, rtol=1e-12, atol=1e-12).y.T
  with sc.enable_x64():
    f = lambda y, t: jnp.stack([1.5 * y[0] - y[0] * y[1], -3 * y[1] + y[0] * y[1]])
    loose = odeint(f, np.array([2., 1.]), ts, rtol=1e-4, atol=1e-4)
    tight = odeint(f, np.array([2., 1.]), ts, rtol=1e-10, atol=1e-10)
  err_loose = np.abs(np.asarray(loose) - want).max()
  err_tight = np.abs(np.asarray(tight) - want).max()
  assert err_tight < 1e-7 and err_tight < err_loose < 1e-2


def test_matches_jax_odeint():
  ts = np.linspace(0., 3., 7).astype(np.float32)
  y0 = np.array([0.5, 1.0], np.float32)
  ours = odeint(pendulum(jnp), y0, ts, 2., 0.1)
  theirs = jode.odeint(pendulum(jjnp), jjnp.asarray(y0), jjnp.asarray(ts), 2., 0.1)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), atol=1e-5)


def test_pytree_and_complex_states():
  ts = np.linspace(0., 2., 5).astype(np.float32)
  f = lambda s, t: {"x": s["v"], "v": -s["x"]}
  out = odeint(f, {"x": np.ones(2, np.float32), "v": np.zeros(2, np.float32)}, ts)
  assert out["x"].shape == (5, 2) and out["v"].dtype == np.float32
  np.testing.assert_allclose(np.asarray(out["x"]), np.cos(ts)[:, None] * np.ones(2), atol=2e-6)
  np.testing.assert_allclose(np.asarray(out["v"]), -np.sin(ts)[:, None] * np.ones(2), atol=2e-6)
  out = odeint(lambda y, t: 1j * y, np.array([1 + 0j], np.complex64), ts)
  assert out.dtype == np.complex64
  np.testing.assert_allclose(np.asarray(out[:, 0]), np.exp(1j * ts), atol=1e-6)


def test_jit_vmap_and_options():
  ts = np.linspace(0., 2., 5).astype(np.float32)
  decay = lambda y, t, k: -k * y
  g = sc.jit(lambda y0, k: odeint(decay, y0, ts, k))
  np.testing.assert_allclose(np.asarray(g(np.ones(3, np.float32), 0.5)),
                             np.exp(-0.5 * ts)[:, None] * np.ones(3), atol=1e-6)
  ks = np.array([0.5, 1., 2.], np.float32)
  v = sc.vmap(lambda k: odeint(decay, np.ones(1, np.float32), ts, k))(ks)
  np.testing.assert_allclose(np.asarray(v)[:, :, 0], np.exp(-np.outer(ks, ts)), atol=1e-6)
  out = odeint(decay, np.ones(1, np.float32), ts, 1., hmax=0.05, rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(np.asarray(out[:, 0]), np.exp(-ts), atol=1e-6)
  # too few steps allowed: the solution stops short of the output times
  out = odeint(decay, np.ones(1, np.float32), ts, 1., mxstep=1)
  assert np.abs(np.asarray(out[:, 0]) - np.exp(-ts)).max() > 1e-2
  # a single output time is the initial state
  np.testing.assert_array_equal(np.asarray(odeint(decay, np.ones(2, np.float32), ts[:1], 1.)),
                                np.ones((1, 2), np.float32))


def test_gradients_finite_differences():
  ts = np.array([0., 0.7, 1.5])
  with sc.enable_x64():
    f = lambda y0, ts, a, b: odeint(pendulum(jnp), y0, ts, a, b)
    check_grads(f, (np.array([0.8, -0.2]), ts, 2., 0.3), order=1, modes=("rev",), atol=1e-5,
                rtol=1e-5)


def test_gradients_match_jax_and_closure():
  ts = np.linspace(0., 2., 4)
  y0 = np.array([0.8, -0.2])
  with sc.enable_x64(), jax.enable_x64(True):
    def loss(np_, ode):
      return lambda y0, ts, a: np_.sum(ode(pendulum(np_), y0, ts, a, 0.1) ** 2)
    ours = sc.grad(loss(jnp, odeint), argnums=(0, 1, 2))(y0, ts, 2.)
    theirs = jax.grad(loss(jjnp, jode.odeint), argnums=(0, 1, 2))(jjnp.asarray(y0),
                                                                 jjnp.asarray(ts), 2.)
    for a, b in zip(ours, theirs):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    # a traced value closed over by `func` is differentiated too (closure conversion)
    g = sc.grad(lambda k: jnp.sum(odeint(lambda y, t: -k * y, np.ones(1), ts)))(0.7)
    np.testing.assert_allclose(float(g), -np.sum(ts * np.exp(-0.7 * ts)), rtol=1e-7)


def test_errors():
  ts = np.linspace(0., 1., 3).astype(np.float32)
  f = lambda y, t, s: -y
  with pytest.raises(TypeError, match="The contents of odeint \\*args must be arrays or "
                     "scalars, but got"):
    odeint(f, np.ones(1, np.float32), ts, "fast")
  with pytest.raises(TypeError, match="t must be an array of floats"):
    odeint(lambda y, t: -y, np.ones(1, np.float32), np.arange(3))
  with pytest.raises(TypeError):
    # forward mode is not defined for the custom_vjp adjoint, as in JAX
    sc.jvp(lambda y0: odeint(lambda y, t: -y, y0, ts), (np.ones(1, np.float32),),
           (np.ones(1, np.float32),))
