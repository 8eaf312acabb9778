"""`stagecraft.scipy.optimize`: JAX's `jax.scipy.optimize` (`minimize` with BFGS and the
experimental L-BFGS, and `OptimizeResults`), written with `lax.while_loop` so that it
stages under `jit` and `vmap`."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from stagecraft import core, tree_util
from stagecraft import numpy as jnp
from stagecraft.numpy.util import promote_dtypes_inexact
from stagecraft.pjit import jit
from stagecraft.scipy.optimize._bfgs import minimize_bfgs
from stagecraft.scipy.optimize._lbfgs import minimize_lbfgs

__all__ = ["OptimizeResults", "minimize"]

_LBFGS = "l-bfgs-experimental-do-not-rely-on-this"


class OptimizeResults(NamedTuple):
  """The result of `minimize` (a pytree).

  Attributes:
    x: the solution `T[n]`.
    success: True if the method converged (and no line search failed).
    status: the method's end state: 0 converged; for BFGS 1 `maxiter` reached, 3 a line
      search's zoom failed, 5 a line search reached its iteration limit, -1 otherwise; for
      L-BFGS 1 `maxiter`, 2 `maxfun`, 3 `maxgrad` reached, 4 too little progress (`ftol`),
      5 a line search failed.
    fun: the objective at `x`.
    jac: the gradient at `x`.
    hess_inv: the inverse-Hessian estimate `T[n, n]` (BFGS) or None (L-BFGS).
    nfev, njev: objective and gradient evaluations.
    nit: iterations.
  """
  x: Any
  success: Any
  status: Any
  fun: Any
  jac: Any
  hess_inv: Any
  nfev: Any
  njev: Any
  nit: Any


def minimize(fun: Callable, x0: Any, args: tuple = (), *, method: str, tol: float | None = None,
             options: Mapping[str, Any] | None = None) -> OptimizeResults:
  """Minimizes a scalar function of one or more variables (JAX's
  `jax.scipy.optimize.minimize`).

  Args:
    fun: `fun(x, *args) -> real scalar`, `x` of shape `(n,)`; its gradient is taken by
      reverse-mode differentiation, so it must be differentiable.
    x0: the initial guess, a 1-D array `T[n]`; integers are promoted to the default float
      dtype. The results have its dtype.
    args: a tuple of extra arguments passed to `fun`.
    method: `"BFGS"` or `"l-bfgs-experimental-do-not-rely-on-this"` (case-insensitive).
    tol: accepted for SciPy compatibility and ignored, as in JAX: pass `gtol` in `options`.
    options: keyword options of the method. BFGS: `maxiter` (default `200 n`), `norm`
      (default inf), `gtol` (1e-5), `line_search_maxiter` (10). L-BFGS: `maxiter`, `norm`,
      `maxcor` (10), `ftol` (2.22e-9), `gtol` (1e-5), `maxfun`, `maxgrad`, `maxls` (20).

  Returns:
    An `OptimizeResults`. Works under `jit` (the iteration is a `lax.while_loop`), but is
    not differentiable with respect to `x0` or `args` in reverse mode.

  Raises:
    TypeError: if `args` is not a tuple, or `fun` does not return a real scalar.
    ValueError: for an unknown `method` or an `x0` that is not 1-D.

  Algorithm: BFGS from Nocedal & Wright, Numerical Optimization (2006), Algorithm 6.1;
  L-BFGS from Algorithms 7.4-7.5; both with the strong-Wolfe line search of Algorithms
  3.5-3.6. Results may differ slightly from SciPy's, whose line search differs in details.

  Examples:
    >>> import numpy as np
    >>> f = lambda x: ((x - np.array([1., 2.], np.float32)) ** 2).sum()
    >>> res = minimize(f, np.zeros(2, np.float32), method="BFGS")
    >>> np.round(np.asarray(res.x), 4), bool(res.success)
    (array([1., 2.], dtype=float32), True)
  """
  if options is None:
    options = {}
  if not isinstance(args, tuple):
    raise TypeError("args argument to jax.scipy.optimize.minimize must be a tuple, "
                    f"got {args}")
  if not isinstance(method, str) or method.lower() not in ("bfgs", _LBFGS):
    raise ValueError(f"Method {method} not recognized")
  x0, = promote_dtypes_inexact(jnp.asarray(x0))
  if x0.ndim != 1:
    raise ValueError(f"minimize: x0 must be a 1-D array of shape (n,), got shape {x0.shape}; "
                     "ravel it and reshape inside `fun`.")
  del tol  # as in JAX: only the method's options set tolerances
  bfgs = method.lower() == "bfgs"
  # NB: the whole run is one staged program (one compilation rather than one per eager
  # operation); array leaves of `args` are its arguments, other leaves (Python scalars
  # included, which `fun` may use as static values) stay Python values.
  leaves, tree = tree_util.tree_flatten(args)
  dynamic = [not isinstance(v, (bool, int, float, complex)) and core.valid_array_type(v)
             for v in leaves]

  def run(x0, dyn_leaves):
    it = iter(dyn_leaves)
    full = tree_util.tree_unflatten(tree, [next(it) if d else v for v, d in zip(leaves, dynamic)])
    fun_with_args = lambda x: fun(x, *full)
    if bfgs:
      r = minimize_bfgs(fun_with_args, x0, **options)
      return OptimizeResults(x=r.x_k, success=r.converged & ~r.failed, status=r.status,
                             fun=r.f_k, jac=r.g_k, hess_inv=r.H_k, nfev=r.nfev, njev=r.ngev,
                             nit=r.k)
    r = minimize_lbfgs(fun_with_args, x0, **options)
    return OptimizeResults(x=r.x_k, success=r.converged & ~r.failed, status=r.status,
                           fun=r.f_k, jac=r.g_k, hess_inv=None, nfev=r.nfev, njev=r.ngev,
                           nit=r.k)

  return jit(run)(x0, [v for v, d in zip(leaves, dynamic) if d])
