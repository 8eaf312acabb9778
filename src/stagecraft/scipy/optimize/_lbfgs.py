"""Limited-memory BFGS (Nocedal & Wright, Numerical Optimization, Algorithms 7.4 and 7.5) as a
`lax.while_loop`, with complex variables handled as in Sorber, Van Barel & De Lathauwer,
"Unconstrained optimization of real functions in complex variables", SIAM J. Optim. 22(3),
2012."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from stagecraft import lax
from stagecraft import numpy as jnp
from stagecraft.numpy import linalg
from stagecraft.scipy.optimize._line_search import line_search
from stagecraft.scipy.optimize._util import dot, to_dtype, value_and_grad, weak_int

__all__ = ["LBFGSResults", "minimize_lbfgs"]


class LBFGSResults(NamedTuple):
  """The state and result of `minimize_lbfgs`.

  Attributes:
    converged: True once the gradient's `norm` is below `gtol`.
    failed: True if the run stopped for a reason other than convergence.
    k: the number of iterations.
    nfev, ngev: objective and gradient evaluations.
    x_k, f_k, g_k: the last iterate, the objective and its gradient there.
    s_history, y_history: the last `maxcor` steps and gradient changes `T[maxcor, n]`,
      oldest first (rows not yet filled are zero).
    rho_history: `1 / <y, s>` for each stored pair.
    gamma: the scale `<s, y> / <y, y>` of the initial inverse Hessian (7.20).
    status: 0 converged, 1 `maxiter`, 2 `maxfun`, 3 `maxgrad` reached, 4 the objective
      decreased by less than `ftol`, 5 the line search failed.
    ls_status: the last line search's status.
  """
  converged: Any
  failed: Any
  k: Any
  nfev: Any
  ngev: Any
  x_k: Any
  f_k: Any
  g_k: Any
  s_history: Any
  y_history: Any
  rho_history: Any
  gamma: Any
  status: Any
  ls_status: Any


def minimize_lbfgs(fun: Callable, x0: Any, maxiter: float | None = None, norm: Any = np.inf,
                   maxcor: int = 10, ftol: float = 2.220446049250313e-09, gtol: float = 1e-05,
                   maxfun: float | None = None, maxgrad: float | None = None,
                   maxls: int = 20) -> LBFGSResults:
  """Minimizes `fun` from `x0` with L-BFGS.

  Args:
    fun: `fun(x) -> real scalar` with `x` of the shape `(n,)` of `x0` (real or complex),
      differentiable in reverse mode.
    x0: the starting point `T[n]`, T floating or complex.
    maxiter, maxfun, maxgrad: limits on iterations and objective/gradient evaluations; when
      none is given, `maxiter = 200 n`. As in JAX, a limit is checked at the start of an
      iteration, which then still runs (so `maxiter = m` stops after `m + 1` iterations).
    norm: the `ord` of `jnp.linalg.norm` used in the convergence test.
    maxcor: the number of stored correction pairs.
    ftol: stop (status 4) when an iteration decreases the objective by less than `ftol`.
    gtol: converged when `norm(grad) < gtol`.
    maxls: the most bracketing iterations of each line search.

  Returns:
    An `LBFGSResults`.

  Algorithm: Nocedal & Wright, Numerical Optimization (2006), Algorithm 7.5 with the
  two-loop recursion (Algorithm 7.4), H_0 = gamma I with gamma from (7.20) (1 before the
  first step), and the strong-Wolfe line search (Algorithms 3.5, 3.6) started at step 1.
  """
  n = x0.shape[0]
  dtype = x0.dtype
  if maxiter is None and maxfun is None and maxgrad is None:
    maxiter = n * 200
  maxiter = np.inf if maxiter is None else maxiter
  maxfun = np.inf if maxfun is None else maxfun
  maxgrad = np.inf if maxgrad is None else maxgrad
  f_0, g_0 = value_and_grad(fun, x0)
  state = LBFGSResults(
      converged=jnp.asarray(False), failed=jnp.asarray(False), k=weak_int(0),
      nfev=weak_int(1), ngev=weak_int(1), x_k=x0, f_k=f_0, g_k=g_0,
      s_history=jnp.zeros((maxcor, n), dtype), y_history=jnp.zeros((maxcor, n), dtype),
      rho_history=jnp.zeros((maxcor,), dtype), gamma=to_dtype(1, dtype),
      status=weak_int(0), ls_status=weak_int(0))

  def body(s):
    p_k = _two_loop_recursion(s)
    ls = line_search(fun, s.x_k, p_k, old_fval=s.f_k, gfk=s.g_k, maxiter=maxls)
    step = ls.a_k.astype(p_k.dtype) * p_k
    x_new = s.x_k + step
    y = ls.g_k - s.g_k
    sy = jnp.real(dot(y, step))
    rho = (1 / sy).astype(dtype)
    gamma = (sy / jnp.real(dot(jnp.conj(y), y))).astype(dtype)
    status = jnp.where(s.f_k - ls.f_k < ftol, 4, 0)
    status = jnp.where(s.ngev >= maxgrad, 3, status)
    status = jnp.where(s.nfev >= maxfun, 2, status)
    status = jnp.where(s.k >= maxiter, 1, status)
    status = jnp.where(ls.failed, 5, status)
    converged = linalg.norm(ls.g_k, ord=norm) < gtol
    return LBFGSResults(
        converged=converged, failed=(status > 0) & ~converged, k=s.k + 1,
        nfev=s.nfev + ls.nfev, ngev=s.ngev + ls.ngev, x_k=x_new.astype(dtype),
        f_k=ls.f_k.astype(s.f_k.dtype), g_k=ls.g_k.astype(dtype),
        s_history=_push(s.s_history, step), y_history=_push(s.y_history, y),
        rho_history=_push(s.rho_history, rho), gamma=gamma,
        status=jnp.where(converged, 0, status), ls_status=ls.status)

  return lax.while_loop(lambda s: ~s.converged & ~s.failed, body, state)


def _push(history, new):
  """Drops the oldest entry of `history` (row 0) and appends `new` as the last row."""
  return jnp.concatenate([history[1:], new[None]], axis=0)


def _two_loop_recursion(s: LBFGSResults):
  """The search direction `-H_k g_k` from the stored pairs (Algorithm 7.4); pairs are stored
  oldest first in the last `min(k, maxcor)` rows."""
  m = s.rho_history.shape[0]
  used = jnp.minimum(s.k, m)
  dtype = s.rho_history.dtype
  q = -jnp.conj(s.g_k)
  alphas = jnp.zeros_like(s.rho_history)

  def newest_first(j, carry):
    q, alphas = carry
    i = m - 1 - j
    # NB: the real part cast to x's dtype before the product (strict promotion, complex x)
    a = s.rho_history[i] * jnp.real(dot(jnp.conj(s.s_history[i]), q)).astype(dtype)
    return q - a * jnp.conj(s.y_history[i]), alphas.at[i].set(a)

  q, alphas = lax.fori_loop(0, used, newest_first, (q, alphas))
  r = s.gamma * q

  def oldest_first(j, r):
    i = m - used + j
    b = s.rho_history[i] * jnp.real(dot(s.y_history[i], r)).astype(dtype)
    return r + (alphas[i] - b) * s.s_history[i]

  return lax.fori_loop(0, used, oldest_first, r)
