"""`stagecraft.experimental.ode`: JAX's `jax.experimental.ode.odeint`: adaptive Dormand-Prince
Runge-Kutta integration with dense output, differentiable in reverse mode through the adjoint
ODE.

References:
  J. R. Dormand and P. J. Prince, "A family of embedded Runge-Kutta formulae", J. Comput.
  Appl. Math. 6(1), 1980 (the 5(4) pair).
  L. F. Shampine, "Some practical Runge-Kutta formulas", Math. Comp. 46(173), 1986,
  https://doi.org/10.1090/S0025-5718-1986-0815836-3 (the midpoint for dense output).
  E. Hairer, S. P. Norsett and G. Wanner, Solving Ordinary Differential Equations I:
  Nonstiff Problems, sec. II.4 (initial step and step-size control).
  R. T. Q. Chen, Y. Rubanova, J. Bettencourt and D. Duvenaud, "Neural Ordinary Differential
  Equations", NeurIPS 2018, appendix C (the adjoint system), arXiv:1806.07366.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from stagecraft import api, core, dtypes, lax, tree_util
from stagecraft import numpy as jnp
from stagecraft.custom_derivatives import closure_convert, custom_vjp
from stagecraft.pjit import jit

__all__ = ["odeint"]

# Dormand-Prince 5(4): nodes, the stage matrix (row i gives stage i + 1 from stages 0..i),
# the 5th-order weights and the 4th-order (embedded) weights of the 1980 paper.
_C = np.array([0., 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1., 1.])
_A = np.zeros((6, 7))
_A[0, :1] = [1 / 5]
_A[1, :2] = [3 / 40, 9 / 40]
_A[2, :3] = [44 / 45, -56 / 15, 32 / 9]
_A[3, :4] = [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729]
_A[4, :5] = [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656]
_A[5, :6] = [35 / 384, 0., 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84]
_B5 = np.array([35 / 384, 0., 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.])
_B4 = np.array([5179 / 57600, 0., 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100,
                1 / 40])
# Shampine's (1986) 5th-order-consistent solution at the step's midpoint, as weights on the
# stages (times dt).
_MID = np.array([6025192743 / 30085553152, 0., 51252292925 / 65400821598,
                 -2691868925 / 45128329728, 187940372067 / 1594534317056,
                 -1776094331 / 19743644256, 11237099 / 235043384]) / 2


# ---------------------------------------------------------------------------
# Flattening the state


def _ravel(tree: Any):
  """The leaves of `tree` concatenated into one vector of their common dtype, and the
  function mapping such a vector back to the tree (casting each leaf back)."""
  leaves, treedef = tree_util.tree_flatten(tree)
  leaves = [jnp.asarray(x) for x in leaves]
  dtype = dtypes.result_type(*leaves) if leaves else np.dtype(dtypes.default_float_dtype())
  shapes = [x.shape for x in leaves]
  leaf_dtypes = [x.dtype for x in leaves]
  sizes = [math.prod(s) for s in shapes]
  flat = (jnp.concatenate([x.astype(dtype).reshape(-1) for x in leaves]) if leaves
          else jnp.zeros((0,), dtype))

  def unravel(v):
    out, off = [], 0
    for shape, dt, size in zip(shapes, leaf_dtypes, sizes):
      piece = v[off:off + size].reshape(shape)
      out.append(piece.astype(dt) if not dtypes.is_complex(v.dtype) or dtypes.is_complex(dt)
                 else jnp.real(piece).astype(dt))
      off += size
    return tree_util.tree_unflatten(treedef, out)

  return flat, unravel


# ---------------------------------------------------------------------------
# One Runge-Kutta step, dense output and step-size control


def _abs2(x: Any):
  return jnp.real(x) ** 2 + jnp.imag(x) ** 2 if dtypes.is_complex(x.dtype) else x * x


def _rk_step(f: Callable, y0: Any, f0: Any, t0: Any, dt: Any):
  """One Dormand-Prince step: `(y1, f(y1, t0 + dt), error estimate, stages K[7, n])`."""
  ydt = dt.astype(y0.dtype)
  A = jnp.asarray(_A.astype(np.result_type(y0.dtype, np.float32)))
  C = jnp.asarray(_C, dt.dtype)

  def stage(i, K):
    yi = y0 + ydt * jnp.dot(A[i - 1].astype(K.dtype), K)
    return K.at[i].set(f(yi, t0 + C[i] * dt).astype(K.dtype))

  K = jnp.zeros((7, y0.shape[0]), f0.dtype).at[0].set(f0)
  K = lax.fori_loop(1, 7, stage, K)
  w5 = jnp.asarray(_B5.astype(np.float64)).astype(K.dtype)
  werr = jnp.asarray((_B5 - _B4).astype(np.float64)).astype(K.dtype)
  y1 = y0 + ydt * jnp.dot(w5, K)
  return y1, K[6], ydt * jnp.dot(werr, K), K


def _dense_coefficients(y0: Any, y1: Any, K: Any, dt: Any):
  """The quartic `p(s) = a s^4 + b s^3 + c s^2 + d s + e` on `s in [0, 1]` with `p(0) = y0`,
  `p(1) = y1`, `p'(0) = dt f0`, `p'(1) = dt f1` and `p(1/2)` Shampine's midpoint value;
  returned as a `[5, n]` array, highest power first (for `polyval`)."""
  ydt = dt.astype(y0.dtype)
  y_mid = y0 + ydt * jnp.dot(jnp.asarray(_MID.astype(np.float64)).astype(K.dtype), K)
  d0, d1 = ydt * K[0], ydt * K[6]
  r1 = y1 - y0 - d0
  r2 = d1 - d0
  r3 = y_mid - y0 - d0 / 2
  c = 16 * r3 - 5 * r1 + r2
  b = -32 * r3 + 14 * r1 - 3 * r2
  a = 16 * r3 - 8 * r1 + 2 * r2
  return jnp.stack([a, b, c, d0, y0])


def _error_ratio(err: Any, rtol: float, atol: float, y0: Any, y1: Any):
  """The RMS of the error estimate relative to `atol + rtol max(|y0|, |y1|)`."""
  scale = atol + rtol * jnp.maximum(jnp.abs(y0), jnp.abs(y1))
  return jnp.sqrt(jnp.mean(_abs2(err / scale.astype(err.dtype))))


def _next_step(dt: Any, ratio: Any, safety: float = 0.9, grow: float = 10.0,
               shrink: float = 0.2, order: float = 5.0):
  """`dt * clip(safety ratio^(-1/order), shrink, grow)`; an accepted step never shrinks."""
  lo = jnp.where(ratio < 1, 1.0, shrink)
  factor = jnp.minimum(grow, jnp.maximum(safety * ratio ** (-1.0 / order), lo))
  return jnp.where(ratio == 0, dt * grow, dt * factor.astype(dt.dtype))


def _initial_step(f: Callable, t0: Any, y0: Any, f0: Any, order: int, rtol: float,
                  atol: float):
  """Hairer, Norsett & Wanner's starting step (sec. II.4), with Euclidean norms (as JAX)."""
  scale = (atol + jnp.abs(y0) * rtol).astype(y0.dtype)
  d0 = jnp.linalg.norm(y0 / scale)
  d1 = jnp.linalg.norm(f0 / scale)
  h0 = jnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / d1)
  f1 = f(y0 + h0.astype(y0.dtype) * f0, t0 + h0.astype(t0.dtype))
  d2 = jnp.linalg.norm((f1 - f0) / scale) / h0
  h1 = jnp.where((d1 <= 1e-15) & (d2 <= 1e-15), jnp.maximum(1e-6, h0 * 1e-3),
                 (0.01 / jnp.maximum(d1, d2)) ** (1. / (order + 1.)))
  return jnp.minimum(100. * h0, h1)


# ---------------------------------------------------------------------------
# The integrator and its adjoint


def odeint(func: Callable, y0: Any, t: Any, *args: Any, rtol: float = 1.4e-8,
           atol: float = 1.4e-8, mxstep: float = np.inf, hmax: float = np.inf):
  """Integrates `dy/dt = func(y, t, *args)` from `y(t[0]) = y0` and returns `y` at every `t`.

  Args:
    func: `func(y, t, *args)` returning the time derivative, a pytree like `y`.
    y0: the initial state: an array or a pytree of arrays (real or complex).
    t: strictly increasing float times `R[T]`; `t[0]` is the initial time.
    *args: extra arguments of `func`: arrays, scalars or pytrees of them; the result is
      differentiable (reverse mode) with respect to them, `y0` and `t`.
    rtol, atol: relative and absolute local error tolerances.
    mxstep: the most steps (accepted or rejected) between consecutive output times.
    hmax: the largest step size.

  Returns:
    `y` at each time: the structure of `y0` with a leading axis of length `T`.

  Raises:
    TypeError: if an element of `args` is not an array or scalar, or `t` is not floating.

  Algorithm: Dormand & Prince's 5(4) embedded Runge-Kutta pair with local extrapolation,
  steps accepted when the RMS error relative to `atol + rtol |y|` is at most 1 and sized
  by Hairer, Norsett & Wanner's controller; outputs come from a quartic through the step's
  ends and Shampine's midpoint (dense output), so the steps do not stop at output times.
  Reverse mode integrates the adjoint system (Chen et al. 2018, appendix C) backwards
  between consecutive output times with the same solver (`custom_vjp`); forward mode is
  not supported.
  """
  for arg in tree_util.tree_leaves(args):
    if not core.valid_array_type(arg):
      raise TypeError(f"The contents of odeint *args must be arrays or scalars, but got {arg}.")
  t = jnp.asarray(t)
  if not dtypes.is_inexact(t.dtype) or dtypes.is_complex(t.dtype):
    raise TypeError(f"t must be an array of floats, but got {t}.")
  if t.ndim != 1 or t.shape[0] < 1:
    raise ValueError(f"t must be a 1-D array with at least one time, got shape {t.shape}.")
  converted, consts = closure_convert(func, y0, t[0], *args)
  return _odeint_wrapper(converted, rtol, atol, mxstep, hmax, y0, t, *args, *consts)


@partial(jit, static_argnums=(0, 1, 2, 3, 4))
def _odeint_wrapper(func: Callable, rtol: float, atol: float, mxstep: float, hmax: float,
                    y0: Any, ts: Any, *args: Any):
  y0_flat, unravel = _ravel(y0)

  def flat_func(y, t, *args):
    return _ravel(func(unravel(y), t, *args))[0].astype(y.dtype)

  out = _odeint(flat_func, rtol, atol, mxstep, hmax, y0_flat, ts, *args)
  return api.vmap(unravel)(out)


def _integrate(func: Callable, rtol: float, atol: float, mxstep: float, hmax: float, y0: Any,
               ts: Any, *args: Any):
  """The solution at `ts` of the flat system `func(y, t, *args)` (see `odeint`)."""
  def f(y, t):
    return func(y, t, *args)

  tdt = ts.dtype
  f0 = f(y0, ts[0])
  dt = jnp.clip(_initial_step(f, ts[0], y0, f0, 4, rtol, atol), 0., hmax).astype(tdt)
  interp = jnp.stack([y0] * 5)

  def to_target(carry, target):
    def cond(s):
      i, _, _, t, dt, _, _ = s
      return (t < target) & (i < mxstep) & (dt > 0)

    def body(s):
      i, y, fy, t, dt, last_t, coeffs = s
      y1, f1, err, K = _rk_step(f, y, fy, t, dt)
      ratio = _error_ratio(err, rtol, atol, y, y1)
      new_coeffs = _dense_coefficients(y, y1, K, dt)
      next_dt = jnp.clip(_next_step(dt, ratio.astype(tdt)), 0., hmax).astype(tdt)
      ok = ratio <= 1.
      return (i + 1, jnp.where(ok, y1, y), jnp.where(ok, f1, fy), jnp.where(ok, t + dt, t),
              next_dt, jnp.where(ok, t, last_t), jnp.where(ok, new_coeffs, coeffs))

    y, fy, t, dt, last_t, coeffs = carry
    _, y, fy, t, dt, last_t, coeffs = lax.while_loop(
        cond, body, (jnp.asarray(0, np.int32), y, fy, t, dt, last_t, coeffs))
    s = ((target - last_t) / (t - last_t)).astype(coeffs.dtype)
    y_target = jnp.polyval(coeffs, s)
    return (y, fy, t, dt, last_t, coeffs), y_target

  _, ys = lax.scan(to_target, (y0, f0, ts[0], dt, ts[0], interp), ts[1:])
  return jnp.concatenate([y0[None], ys])


_odeint = custom_vjp(_integrate, nondiff_argnums=(0, 1, 2, 3, 4))


def _odeint_fwd(func, rtol, atol, mxstep, hmax, y0, ts, *args):
  ys = _odeint(func, rtol, atol, mxstep, hmax, y0, ts, *args)
  return ys, (ys, ts, args)


def _odeint_bwd(func, rtol, atol, mxstep, hmax, res, g):
  ys, ts, args = res

  def adjoint_dynamics(state, s, *args):
    # In reversed time s = -t: y' = -f(y, t); the adjoint a and the time and parameter
    # cotangents grow by a^T df/dy, a^T df/dt and a^T df/dargs.
    y, y_bar, *_ = state
    y_dot, pullback = api.vjp(func, y, -s, *args)
    return (-y_dot, *pullback(y_bar))

  def between_outputs(carry, i):
    y_bar, t0_bar, args_bar = carry
    # Moving output time ts[i] changes the loss by <f(y_i, t_i), g_i>.
    t_bar = jnp.real(jnp.dot(func(ys[i], ts[i], *args), g[i])).astype(ts.dtype)
    t0_bar = t0_bar - t_bar
    _, y_bar, t0_bar, args_bar = odeint(
        adjoint_dynamics, (ys[i], y_bar, t0_bar, args_bar), jnp.stack([-ts[i], -ts[i - 1]]),
        *args, rtol=rtol, atol=atol, mxstep=mxstep, hmax=hmax)
    y_bar, t0_bar, args_bar = tree_util.tree_map(lambda x: x[1], (y_bar, t0_bar, args_bar))
    return (y_bar + g[i - 1], t0_bar, args_bar), t_bar

  init = (g[-1], jnp.zeros((), ts.dtype), tree_util.tree_map(jnp.zeros_like, args))
  (y_bar, t0_bar, args_bar), rev_ts_bar = lax.scan(
      between_outputs, init, jnp.arange(ts.shape[0] - 1, 0, -1))
  ts_bar = jnp.concatenate([t0_bar[None], rev_ts_bar[::-1]])
  return (y_bar, ts_bar, *args_bar)


_odeint.defvjp(_odeint_fwd, _odeint_bwd)
