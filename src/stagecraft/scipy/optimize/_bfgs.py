"""BFGS (Nocedal & Wright, Numerical Optimization, Algorithm 6.1) as a `lax.while_loop`."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from stagecraft import lax
from stagecraft import numpy as jnp
from stagecraft.numpy import linalg
from stagecraft.scipy.optimize._line_search import line_search
from stagecraft.scipy.optimize._util import dot, to_dtype, value_and_grad, weak_int

__all__ = ["BFGSResults", "minimize_bfgs"]


class BFGSResults(NamedTuple):
  """The state and result of `minimize_bfgs`.

  Attributes:
    converged: True once the gradient's `norm` is below `gtol`.
    failed: True if a line search failed.
    k: the number of iterations.
    nfev, ngev, nhev: objective, gradient and Hessian evaluations (nhev stays 0).
    x_k, f_k, g_k: the last iterate, the objective and its gradient there.
    H_k: the inverse-Hessian estimate `T[n, n]`.
    old_old_fval: the objective at the iterate before `x_k`.
    status: 0 converged, 1 `maxiter` reached, 3 the line search's zoom failed, 5 the line
      search reached its iteration limit, -1 otherwise.
    line_search_status: the last line search's status.
  """
  converged: Any
  failed: Any
  k: Any
  nfev: Any
  ngev: Any
  nhev: Any
  x_k: Any
  f_k: Any
  g_k: Any
  H_k: Any
  old_old_fval: Any
  status: Any
  line_search_status: Any


def minimize_bfgs(fun: Callable, x0: Any, maxiter: int | None = None, norm: Any = np.inf,
                  gtol: float = 1e-5, line_search_maxiter: int = 10) -> BFGSResults:
  """Minimizes `fun` from `x0` with BFGS.

  Args:
    fun: `fun(x) -> real scalar` with `x` of the shape `(n,)` of `x0`, differentiable in
      reverse mode.
    x0: the starting point `T[n]`, T floating.
    maxiter: the most iterations (default `200 n`).
    norm: the `ord` of `jnp.linalg.norm` used in the convergence test (default inf).
    gtol: converged when `norm(grad) < gtol`.
    line_search_maxiter: the most bracketing iterations of each line search.

  Returns:
    A `BFGSResults`.

  Algorithm: Nocedal & Wright, Numerical Optimization (2006), Algorithm 6.1 with H_0 = I
  (as SciPy) and the update (6.17) skipped when 1 / <y, s> is not finite; the step length
  comes from the strong-Wolfe line search (Algorithms 3.5, 3.6) started, as SciPy does,
  from the previous decrease of the objective.
  """
  if maxiter is None:
    maxiter = np.size(x0) * 200
  n = x0.shape[0]
  eye = jnp.eye(n, dtype=x0.dtype)
  f_0, g_0 = value_and_grad(fun, x0)
  state = BFGSResults(
      converged=linalg.norm(g_0, ord=norm) < gtol, failed=jnp.asarray(False),
      k=weak_int(0), nfev=weak_int(1), ngev=weak_int(1), nhev=weak_int(0),
      x_k=x0, f_k=f_0, g_k=g_0, H_k=eye, old_old_fval=f_0 + linalg.norm(g_0) / 2,
      status=weak_int(0), line_search_status=weak_int(0))

  def cond(s):
    return ~s.converged & ~s.failed & (s.k < maxiter)

  def body(s):
    p_k = -dot(s.H_k, s.g_k)
    ls = line_search(fun, s.x_k, p_k, old_fval=s.f_k, old_old_fval=s.old_old_fval,
                     gfk=s.g_k, maxiter=line_search_maxiter)
    step = ls.a_k.astype(p_k.dtype) * p_k
    x_new = s.x_k + step
    y = ls.g_k - s.g_k
    rho = 1 / dot(y, step)
    # (6.17): H+ = (I - rho s y^T) H (I - rho y s^T) + rho s s^T
    w = eye - rho * jnp.outer(step, y)
    h_new = dot(dot(w, s.H_k), w.T) + rho * jnp.outer(step, step)
    h_new = jnp.where(jnp.isfinite(rho), h_new, s.H_k)
    return s._replace(
        converged=linalg.norm(ls.g_k, ord=norm) < gtol, failed=ls.failed, k=s.k + 1,
        nfev=s.nfev + ls.nfev, ngev=s.ngev + ls.ngev, x_k=x_new, f_k=ls.f_k.astype(s.f_k.dtype),
        g_k=ls.g_k, H_k=h_new, old_old_fval=s.f_k,
        line_search_status=ls.status)

  state = lax.while_loop(cond, body, state)
  status = jnp.where(state.converged, 0, jnp.where(
      state.k == maxiter, 1, jnp.where(state.failed, 2 + state.line_search_status, -1)))
  return state._replace(status=status)
