"""`stagecraft.scipy.sparse.linalg`: JAX's `jax.scipy.sparse.linalg` iterative solvers
(`cg`, `gmres`, `bicgstab`) for `A x = b`, matrix-free.

`A` (and the preconditioner `M`) is a square matrix or a function computing `A @ x`; `b`
and `x0` are pytrees of arrays (the unknown is the tuple of all their leaves). Each solver
is a `lax.while_loop` wrapped in `lax.custom_linear_solve`, so the solution is
differentiable (its derivatives solve the same system again, by implicit differentiation)
in forward and reverse mode, and runs under `jit` and `vmap`.

Algorithms from Y. Saad, "Iterative Methods for Sparse Linear Systems", 2nd ed., SIAM 2003:
conjugate gradients (Algorithm 6.18; preconditioned, Algorithm 9.1), BiCGSTAB (Algorithm
7.7, after H. van der Vorst, 1992) and restarted GMRES (Algorithm 6.9, with the Givens
rotations of section 6.5.3 or a least-squares solve of the Hessenberg system). Stopping
rules are JAX's (which follow SciPy's): `||r|| <= max(tol * ||b||, atol)`.
"""
from __future__ import annotations

import operator
from functools import partial
from typing import Any, Callable

import numpy as np

from stagecraft import dtypes, lax, tree_util
from stagecraft.lax.control_flow import solves
from stagecraft.lax.control_flow.loops import fori_loop
from stagecraft.lax.control_flow.while_op import while_loop
import stagecraft.numpy as jnp
from stagecraft.scipy import linalg as jsp_linalg

__all__ = ["cg", "gmres", "bicgstab"]

_HIGHEST = lax.Precision.HIGHEST


# -- operations on pytrees of arrays (the vectors of the solvers)

def _vdot_real_part(x, y):
  """Re(<x, y>) without the imaginary cross terms (a real scalar)."""
  result = jnp.vdot(jnp.real(x), jnp.real(y), precision=_HIGHEST)
  if jnp.iscomplexobj(x) or jnp.iscomplexobj(y):
    result = result + jnp.vdot(jnp.imag(x), jnp.imag(y), precision=_HIGHEST)
  return result


def _sum(xs):
  out = xs[0]
  for x in xs[1:]:
    out = out + x
  return out


def _vdot_real_tree(x, y):
  return _sum(tree_util.tree_leaves(tree_util.tree_map(_vdot_real_part, x, y)))


def _vdot_tree(x, y):
  return _sum(tree_util.tree_leaves(tree_util.tree_map(
      partial(jnp.vdot, precision=_HIGHEST), x, y)))


def _norm(x):
  xs = tree_util.tree_leaves(x)
  return jnp.sqrt(_sum([_vdot_real_part(v, v) for v in xs]))


def _mul(scalar, tree):
  return tree_util.tree_map(lambda v: scalar * v, tree)


def _add(x, y):
  return tree_util.tree_map(operator.add, x, y)


def _sub(x, y):
  return tree_util.tree_map(operator.sub, x, y)


def _identity(x):
  return x


def _normalize_matvec(f: Any) -> Callable:
  """`A` as a function computing `A @ x`: a function as it is, a square matrix by `dot`."""
  if callable(f):
    return f
  if isinstance(f, np.ndarray) or hasattr(f, "__jax_array__") or _is_array(f):
    if np.ndim(f) != 2 or np.shape(f)[0] != np.shape(f)[1]:
      raise ValueError(f"linear operator must be a square matrix, but has shape: "
                       f"{np.shape(f)}")
    return partial(jnp.dot, f, precision=_HIGHEST)
  if hasattr(f, "__matmul__"):
    if hasattr(f, "shape") and (len(f.shape) != 2 or f.shape[0] != f.shape[1]):
      raise ValueError(f"linear operator must be a square matrix, but has shape: {f.shape}")
    return partial(operator.matmul, f)
  raise TypeError(f"linear operator must be either a function or ndarray: {f}")


def _is_array(x) -> bool:
  try:
    return hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "ndim")
  except Exception:  # noqa: BLE001
    return False


def _shapes(tree):
  return [tuple(np.shape(x)) for x in tree_util.tree_leaves(tree)]


def _as_arrays(tree):
  return tree_util.tree_map(jnp.asarray, tree)


# -- conjugate gradients (Saad, Algorithm 9.1: CG with a preconditioner M ~ A^-1)

def _cg_solve(A, b, x0, *, maxiter, tol=1e-5, atol=0.0, M=_identity):
  bs = _vdot_real_tree(b, b)
  atol2 = jnp.maximum(jnp.square(tol) * bs, jnp.square(atol))
  r0 = _sub(b, A(x0))
  p0 = z0 = M(r0)
  dtype = dtypes.result_type(*tree_util.tree_leaves(p0))
  gamma0 = _vdot_real_tree(r0, z0).astype(dtype)

  def cond_fun(state):
    _, r, gamma, _, k = state
    rs = jnp.real(gamma) if M is _identity else _vdot_real_tree(r, r)
    return (rs > atol2) & (k < maxiter)

  def body_fun(state):
    x, r, gamma, p, k = state
    Ap = A(p)
    alpha = gamma / _vdot_real_tree(p, Ap).astype(dtype)
    x = _add(x, _mul(alpha, p))
    r = _sub(r, _mul(alpha, Ap))
    z = M(r)
    gamma_new = _vdot_real_tree(r, z).astype(dtype)
    p = _add(z, _mul(gamma_new / gamma, p))
    return x, r, gamma_new, p, k + 1

  return while_loop(cond_fun, body_fun, (x0, r0, gamma0, p0, 0))[0]


# -- BiCGSTAB (Saad, Algorithm 7.7, with right preconditioning by M)

def _bicgstab_solve(A, b, x0, *, maxiter, tol=1e-5, atol=0.0, M=_identity):
  bs = _vdot_real_tree(b, b)
  atol2 = jnp.maximum(jnp.square(tol) * bs, jnp.square(atol))
  r0 = _sub(b, A(x0))
  one = jnp.ones((), dtypes.result_type(*tree_util.tree_leaves(b)))

  def cond_fun(state):
    r, k = state[1], state[-1]
    return (_vdot_real_tree(r, r) > atol2) & (k < maxiter) & (k >= 0)

  def body_fun(state):
    x, r, rhat, alpha, omega, rho, p, q, k = state
    rho_new = _vdot_tree(rhat, r)
    beta = rho_new / rho * alpha / omega
    p = _add(r, _mul(beta, _sub(p, _mul(omega, q))))
    phat = M(p)
    q = A(phat)
    alpha = rho_new / _vdot_tree(rhat, q)
    s = _sub(r, _mul(alpha, q))
    # NB: the half step may already have converged; then it is the new iterate.
    exit_early = _vdot_real_tree(s, s) < atol2
    shat = M(s)
    t = A(shat)
    omega = _vdot_tree(t, s) / _vdot_tree(t, t)
    x_half = _add(x, _mul(alpha, phat))
    x = tree_util.tree_map(partial(jnp.where, exit_early), x_half,
                           _add(x_half, _mul(omega, shat)))
    r = tree_util.tree_map(partial(jnp.where, exit_early), s, _sub(s, _mul(omega, t)))
    # Breakdown (rho, alpha or omega zero) stops the loop with a negative counter.
    k = jnp.where((omega == 0) | (alpha == 0), -11, k + 1)
    k = jnp.where(rho_new == 0, -10, k)
    return x, r, rhat, alpha, omega, rho_new, p, q, k

  init = (x0, r0, r0, one, one, one, r0, r0, 0)
  return while_loop(cond_fun, body_fun, init)[0]


def _isolve(solve_fun, A, b, x0=None, *, tol=1e-5, atol=0.0, maxiter=None, M=None,
            check_symmetric=False):
  if x0 is None:
    x0 = tree_util.tree_map(jnp.zeros_like, b)
  b, x0 = _as_arrays(b), _as_arrays(x0)
  if maxiter is None:
    maxiter = 10 * sum(int(np.size(v)) for v in tree_util.tree_leaves(b))
  M = _identity if M is None else _normalize_matvec(M)
  A = _normalize_matvec(A)
  if tree_util.tree_structure(x0) != tree_util.tree_structure(b):
    raise ValueError(f"x0 and b must have matching tree structure: "
                     f"{tree_util.tree_structure(x0)} vs {tree_util.tree_structure(b)}")
  if _shapes(x0) != _shapes(b):
    raise ValueError(f"arrays in x0 and b must have matching shapes: {_shapes(x0)} vs "
                     f"{_shapes(b)}")
  solve = partial(solve_fun, x0=x0, tol=tol, atol=atol, maxiter=maxiter, M=M)
  # A real positive-definite operator (what CG needs) is symmetric.
  symmetric = check_symmetric and not any(jnp.iscomplexobj(v)
                                          for v in tree_util.tree_leaves(b))
  x = solves.custom_linear_solve(A, b, solve=solve, transpose_solve=solve, symmetric=symmetric)
  return x, None


def cg(A, b, x0=None, *, tol=1e-5, atol=0.0, maxiter=None, M=None):
  """Solves `A x = b` for Hermitian positive-definite `A` by conjugate gradients (JAX's
  `jax.scipy.sparse.linalg.cg`).

  Args:
    A: a square matrix `T[n, n]`, or a function computing `A @ x` for `x` shaped like `b`;
      it must be Hermitian positive definite (not checked).
    b: the right-hand side, an array or a pytree of arrays.
    x0: the starting guess, structured and shaped like `b` (default zeros).
    tol, atol: stop when `||r|| <= max(tol * ||b||, atol)`.
    maxiter: the most iterations (default `10 * size(b)`).
    M: a preconditioner approximating `A^-1` (a matrix or a function), Hermitian positive
      definite.

  Returns:
    `(x, None)`: the solution, structured like `b`; `info` is None (convergence is not
    reported), as in JAX.

  Raises:
    ValueError: if `x0` and `b` differ in tree structure or shapes, or `A` is a non-square
      matrix.
    TypeError: if `A` is neither a function nor an array.

  Algorithm: preconditioned conjugate gradients (Saad, "Iterative Methods for Sparse Linear
  Systems", Algorithm 9.1) in a `while_loop`, differentiated implicitly through
  `lax.custom_linear_solve` (symmetric for real `b`).
  """
  return _isolve(_cg_solve, A, b, x0, tol=tol, atol=atol, maxiter=maxiter, M=M,
                 check_symmetric=True)


def bicgstab(A, b, x0=None, *, tol=1e-5, atol=0.0, maxiter=None, M=None):
  """Solves `A x = b` for a general square `A` by BiCGSTAB (JAX's
  `jax.scipy.sparse.linalg.bicgstab`).

  Args:
    A: a square matrix `T[n, n]` or a function computing `A @ x` for `x` shaped like `b`.
    b: the right-hand side, an array or a pytree of arrays.
    x0: the starting guess, structured and shaped like `b` (default zeros).
    tol, atol: stop when `||r|| <= max(tol * ||b||, atol)`.
    maxiter: the most iterations (default `10 * size(b)`).
    M: a preconditioner approximating `A^-1` (a matrix or a function).

  Returns:
    `(x, None)`, `x` structured like `b`. A breakdown (a zero inner product) stops the
    iteration early, as in JAX.

  Raises:
    ValueError: if `x0` and `b` differ in tree structure or shapes, or `A` is a non-square
      matrix.
    TypeError: if `A` is neither a function nor an array.

  Algorithm: BiCGSTAB (Saad, "Iterative Methods for Sparse Linear Systems", Algorithm 7.7;
  van der Vorst 1992) with right preconditioning, differentiated implicitly through
  `lax.custom_linear_solve`.
  """
  return _isolve(_bicgstab_solve, A, b, x0, tol=tol, atol=atol, maxiter=maxiter, M=M)


# -- GMRES (Saad, Algorithm 6.9, restarted; left preconditioning by M)

def _safe_normalize(x, thresh=None):
  """`(x / ||x||, ||x||)`, or `(0, 0)` where `||x||` is at most `thresh` (default eps)."""
  norm = _norm(x)
  dtype = dtypes.result_type(*tree_util.tree_leaves(x))
  if thresh is None:
    thresh = jnp.finfo(norm.dtype).eps
  thresh = jnp.real(jnp.asarray(thresh).astype(dtype))
  use_norm = norm > thresh
  norm_cast = lax.convert_element_type(norm, dtype)
  normalized = tree_util.tree_map(lambda y: jnp.where(use_norm, y / norm_cast, 0.0), x)
  return normalized, jnp.where(use_norm, norm, 0.0)


def _project_on_columns(Q, v):
  """`Q^H v` for the basis `Q` (leaves `[..., k]`) and a vector `v` (leaves `[...]`)."""
  parts = tree_util.tree_map(
      lambda X, y: jnp.einsum("...n,...->n", jnp.conj(X), y, precision=_HIGHEST), Q, v)
  return _sum(tree_util.tree_leaves(parts))


def _gram_schmidt(Q, x, xnorm, max_iterations=2):
  """Orthogonalizes `x` against the columns of `Q` by classical Gram-Schmidt, repeated
  (at most `max_iterations` passes) while the norm drops by more than 1/sqrt(2) (the
  "twice is enough" rule of Giraud, Langou & Rozloznik, 2005). Returns `(q, r)`, `r` the
  coefficients removed."""
  Q0 = tree_util.tree_leaves(Q)[0]
  r = jnp.zeros(Q0.shape[-1], dtype=Q0.dtype)
  xnorm_scaled = xnorm / jnp.sqrt(2.0)

  def body(carry):
    k, q, r, qnorm_scaled = carry
    h = _project_on_columns(Q, q)
    q = _sub(q, tree_util.tree_map(lambda X: jnp.dot(X, h, precision=_HIGHEST), Q))
    r = r + h

    def qnorm_cond(c):
      k, not_done, _, _ = c
      return jnp.logical_and(not_done, k < (max_iterations - 1))

    def qnorm(c):
      k, _, q, _ = c
      _, n = _safe_normalize(q)
      return k, False, q, n / jnp.sqrt(2.0)

    _, _, q, qnorm_scaled = while_loop(qnorm_cond, qnorm, (k, True, q, qnorm_scaled))
    return k + 1, q, r, qnorm_scaled

  def cond(carry):
    k, _, r, qnorm_scaled = carry
    _, rnorm = _safe_normalize(r)
    return jnp.logical_and(k < (max_iterations - 1), rnorm < qnorm_scaled)

  carry = body((0, x, r, xnorm_scaled))
  _, q, r, _ = while_loop(cond, body, carry)
  return q, r


def _arnoldi_step(k, A, M, V, H):
  """Step k of the Arnoldi process (Saad, Algorithm 6.2 with re-orthogonalization): extends
  the Krylov basis `V` by the normalized `M A v_k` and stores its coefficients in row k of
  `H`. Returns `(V, H, breakdown)`."""
  dtype = dtypes.result_type(*tree_util.tree_leaves(V))
  eps = jnp.finfo(dtype).eps
  v = tree_util.tree_map(lambda X: X[..., k], V)
  v = M(A(v))
  _, v_norm_0 = _safe_normalize(v)
  v, h = _gram_schmidt(V, v, v_norm_0, max_iterations=2)
  unit_v, v_norm_1 = _safe_normalize(v, thresh=eps * v_norm_0)
  V = tree_util.tree_map(lambda X, y: X.at[..., k + 1].set(y), V, unit_v)
  h = h.at[k + 1].set(v_norm_1.astype(dtype))
  H = H.at[k, :].set(h)
  return V, H, v_norm_1 == 0.


def _rotate(H, i, cs, sn):
  x1, y1 = H[i], H[i + 1]
  H = H.at[i].set(jnp.conj(cs) * x1 - jnp.conj(sn) * y1)
  return H.at[i + 1].set(sn * x1 + cs * y1)


def _givens(a, b):
  """The rotation `(cs, sn)` that zeroes `b` against `a` (Saad, section 6.5.3)."""
  b_zero = jnp.abs(b) == 0
  a_lt_b = jnp.abs(a) < jnp.abs(b)
  t = -jnp.where(a_lt_b, a, b) / jnp.where(a_lt_b, b, a)
  r = lax.rsqrt(1 + jnp.abs(t) ** 2).astype(t.dtype)
  cs = jnp.where(b_zero, 1, jnp.where(a_lt_b, r * t, r))
  sn = jnp.where(b_zero, 0, jnp.where(a_lt_b, r, r * t))
  return cs, sn


def _apply_givens(H_row, givens, k):
  R_row = fori_loop(0, k, lambda i, row: _rotate(row, i, *givens[i, :]), H_row)
  factors = _givens(R_row[k], R_row[k + 1])
  givens = givens.at[k, :].set(factors)
  return _rotate(R_row, k, *factors), givens


def _basis(unit_residual, restart):
  return tree_util.tree_map(
      lambda x: jnp.pad(x[..., None], ((0, 0),) * x.ndim + ((0, restart),)), unit_residual)


def _gmres_incremental(A, b, x0, unit_residual, residual_norm, ptol, restart, M):
  """One GMRES cycle whose least-squares problem is updated by Givens rotations after each
  Arnoldi step (Saad, Proposition 6.9), stopping early once the residual estimate is below
  `ptol`."""
  V = _basis(unit_residual, restart)
  dtype = dtypes.result_type(*tree_util.tree_leaves(b))
  R = jnp.eye(restart, restart + 1, dtype=dtype)
  givens = jnp.zeros((restart, 2), dtype=dtype)
  beta_vec = jnp.zeros((restart + 1,), dtype=dtype).at[0].set(residual_norm.astype(dtype))

  def cond(carry):
    k, err = carry[0], carry[1]
    return jnp.logical_and(k < restart, err > ptol)

  def step(carry):
    k, _, V, R, beta_vec, givens = carry
    V, H, _ = _arnoldi_step(k, A, M, V, R)
    R_row, givens = _apply_givens(H[k, :], givens, k)
    R = R.at[k, :].set(R_row)
    beta_vec = _rotate(beta_vec, k, *givens[k, :])
    return k + 1, jnp.abs(beta_vec[k + 1]), V, R, beta_vec, givens

  _, _, V, R, beta_vec, _ = while_loop(cond, step, (0, residual_norm, V, R, beta_vec, givens))
  y = jsp_linalg.solve_triangular(R[:, :-1].T, beta_vec[:-1])
  x = _add(x0, tree_util.tree_map(lambda X: jnp.dot(X[..., :-1], y, precision=_HIGHEST), V))
  unit_residual, residual_norm = _safe_normalize(M(_sub(b, A(x))))
  return x, unit_residual, residual_norm


def _gmres_batched(A, b, x0, unit_residual, residual_norm, ptol, restart, M):
  """One GMRES cycle of `restart` Arnoldi steps (fewer on breakdown), then the
  least-squares problem `min ||beta e_1 - H y||` solved by its normal equations."""
  del ptol
  V = _basis(unit_residual, restart)
  dtype = dtypes.result_type(*tree_util.tree_leaves(b))
  H = jnp.eye(restart, restart + 1, dtype=dtype)

  def cond(carry):
    _, _, breakdown, k = carry
    return jnp.logical_and(k < restart, jnp.logical_not(breakdown))

  def step(carry):
    V, H, _, k = carry
    V, H, breakdown = _arnoldi_step(k, A, M, V, H)
    return V, H, breakdown, k + 1

  V, H, _, _ = while_loop(cond, step, (V, H, False, 0))
  beta_vec = jnp.zeros((restart + 1,), dtype=dtype).at[0].set(residual_norm.astype(dtype))
  Ht = H.T
  a2 = jnp.dot(jnp.conj(Ht.T), Ht, precision=_HIGHEST)
  b2 = jnp.dot(jnp.conj(Ht.T), beta_vec, precision=_HIGHEST)
  y = jsp_linalg.solve(a2, b2, assume_a="pos")
  x = _add(x0, tree_util.tree_map(lambda X: jnp.dot(X[..., :-1], y, precision=_HIGHEST), V))
  unit_residual, residual_norm = _safe_normalize(M(_sub(b, A(x))))
  return x, unit_residual, residual_norm


def _gmres_solve(A, b, x0, atol, ptol, restart, maxiter, M, cycle):
  unit_residual, residual_norm = _safe_normalize(M(_sub(b, A(x0))))

  def cond(state):
    _, k, _, residual_norm = state
    return jnp.logical_and(k < maxiter, residual_norm > atol)

  def body(state):
    x, k, unit_residual, residual_norm = state
    x, unit_residual, residual_norm = cycle(A, b, x, unit_residual, residual_norm, ptol,
                                            restart, M)
    return x, k + 1, unit_residual, residual_norm

  return while_loop(cond, body, (x0, 0, unit_residual, residual_norm))[0]


def gmres(A, b, x0=None, *, tol=1e-5, atol=0.0, restart=20, maxiter=None, M=None,
          solve_method="batched"):
  """Solves `A x = b` for a general square `A` by restarted GMRES (JAX's
  `jax.scipy.sparse.linalg.gmres`).

  Args:
    A: a square matrix `T[n, n]` or a function computing `A @ x` for `x` shaped like `b`.
    b: the right-hand side, an array or a pytree of arrays.
    x0: the starting guess, structured and shaped like `b` (default zeros).
    tol, atol: stop when the preconditioned residual norm is at most
      `max(tol * ||b||, atol)`.
    restart: the Krylov subspace size per cycle (at most `size(b)`).
    maxiter: the most restart cycles (default `10 * size(b)`).
    M: a left preconditioner approximating `A^-1` (a matrix or a function).
    solve_method: `'batched'` (all `restart` Arnoldi steps, then a least-squares solve;
      faster on accelerators) or `'incremental'` (Givens rotations after each step,
      stopping within a cycle once converged).

  Returns:
    `(x, info)`: `x` structured like `b`, `info` an int32 scalar, -1 where `x` has NaNs,
    else 0 (as JAX: convergence itself is not reported).

  Raises:
    ValueError: for an unknown `solve_method`, `x0` not structured like `b`, or a
      non-square matrix `A`.
    TypeError: if `A` is neither a function nor an array.

  Algorithm: restarted GMRES (Saad, "Iterative Methods for Sparse Linear Systems",
  Algorithm 6.9 and section 6.5.3), Arnoldi with iterated classical Gram-Schmidt,
  differentiated implicitly through `lax.custom_linear_solve`.
  """
  if x0 is None:
    x0 = tree_util.tree_map(jnp.zeros_like, b)
  M = _identity if M is None else _normalize_matvec(M)
  A = _normalize_matvec(A)
  b, x0 = _as_arrays(b), _as_arrays(x0)
  size = sum(int(np.size(v)) for v in tree_util.tree_leaves(b))
  if maxiter is None:
    maxiter = 10 * size
  restart = min(restart, size)
  if tree_util.tree_structure(x0) != tree_util.tree_structure(b):
    raise ValueError(f"x0 and b must have matching tree structure: "
                     f"{tree_util.tree_structure(x0)} vs {tree_util.tree_structure(b)}")
  if solve_method == "incremental":
    cycle = _gmres_incremental
  elif solve_method == "batched":
    cycle = _gmres_batched
  else:
    raise ValueError(f"invalid solve_method {solve_method}, must be either 'incremental' or "
                     f"'batched'")
  b_norm = _norm(b)
  atol = jnp.maximum(tol * b_norm, atol)
  Mb_norm = _norm(M(b))
  ptol = Mb_norm * jnp.minimum(1.0, atol / b_norm)

  def solve(A, b):
    return _gmres_solve(A, b, x0, atol, ptol, restart, maxiter, M, cycle)
  x = solves.custom_linear_solve(A, b, solve=solve, transpose_solve=solve)
  failed = jnp.isnan(_norm(x))
  return x, jnp.where(failed, -1, 0)
