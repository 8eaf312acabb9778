"""Sparse linear algebra (JAX's `jax.experimental.sparse.linalg`): `spsolve` (a cuSolver
kernel in JAX, GPU only) and `lobpcg_standard` (LOBPCG, Knyazev 2001, in JAX's formulation)."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from stagecraft import lax
from stagecraft import numpy as jnp
from stagecraft.pjit import jit
from stagecraft.runtime.array import Array

__all__ = ["spsolve", "lobpcg_standard"]


def spsolve(data: Any, indices: Any, indptr: Any, b: Any, tol: float = 1e-6,
            reorder: int = 1) -> Any:
  """Solves `A x = b` for a CSR matrix `A` (JAX's `spsolve`, which calls cuSolver's sparse
  QR on GPUs only).

  Raises:
    NotImplementedError: always: stagecraft, like JAX on CPU, has no sparse direct solver.
  """
  raise NotImplementedError("spsolve is only implemented for GPU (cuSolver); stagecraft "
                            "has no sparse direct solver. Use scipy.sparse.linalg.cg or "
                            "solve the dense system.")


# --- LOBPCG (JAX's `lobpcg_standard`) -----------------------------------------------------

_HI = lax.Precision.HIGHEST


def _matmul(a: Any, b: Any) -> Any:
  """`a @ b` at full float32 precision on every backend (both operands HIGHEST)."""
  return lax.dot(a, b, precision=(_HI, _HI))


def _col_norms(x: Any) -> Any:
  """The 2-norm of each column of `x`, as a `[1, cols]` row."""
  return jnp.linalg.norm(x, ord=2, axis=0, keepdims=True)


def _eigh_descending(a: Any) -> tuple[Any, Any]:
  """`eigh(a)` with the eigenvalues (and their vectors' columns) largest first."""
  w, v = jnp.linalg.eigh(a)
  return w[::-1], v[:, ::-1]


def _svqb(x: Any) -> Any:
  """One pass of SVQB (Stathopoulos and Wu, "A block orthogonalization procedure with
  constant synchronization requirements", SIAM J. Sci. Comput. 23(6), 2002): orthonormalize
  the columns of `x [n, c]` through the eigendecomposition of the small Gram matrix.

  Columns are scaled to unit length first (the paper's diagonal scaling); directions whose
  Gram eigenvalue falls below `eps * largest` are rank-deficient and come back as zero
  columns, as do zero input columns; the others are orthonormal.
  """
  nrm = _col_norms(x)
  x = x / jnp.where(nrm == 0, 1.0, nrm)
  gram = _matmul(x.T, x)
  w, v = _eigh_descending(gram)
  floor = jnp.finfo(x.dtype).eps * w[0]
  # An all-zero `x` has floor 0: scale by 1 there instead of dividing by zero.
  inv_sqrt = jnp.where(floor > 0, jnp.maximum(w, floor), 1.0) ** (-0.5)
  q = _matmul(x, v * inv_sqrt[None, :])
  keep = ((w > floor) * (jnp.diag(gram) > 0.0))[None, :]
  q = q * keep.astype(q.dtype)
  qn = _col_norms(q)
  keep = keep * (qn > 0.0)
  return q / jnp.where(keep, qn, 1.0)


def _orthonormalize(x: Any) -> Any:
  """Two SVQB passes (one pass can leave O(eps * cond) loss of orthogonality; two fix it)."""
  return _svqb(_svqb(x))


def _project_out(basis: Any, u: Any) -> Any:
  """The part of `u [n, c]` orthogonal to the orthonormal (zero columns allowed) `basis`,
  orthonormalized, with any column that is not safely orthogonal to `basis` zeroed.

  Two rounds of (subtract the projection, orthonormalize) -- Kahan's "twice is enough"
  (Parlett, The Symmetric Eigenvalue Problem, sec. 6.9) -- then two plain subtractions:
  renormalizing a nearly-cancelled column can bring `basis` components back, so the last
  step is a subtraction, after which only columns that kept (almost) unit norm survive.
  """
  for _ in range(2):
    u = u - _matmul(basis, _matmul(basis.T, u))
    u = _orthonormalize(u)
  for _ in range(2):
    u = u - _matmul(basis, _matmul(basis.T, u))
  return u * (_col_norms(u) >= 0.99).astype(u.dtype)


def _rayleigh_ritz(A: Callable, s: Any) -> tuple[Any, Any]:
  """Ritz values (largest first) and vectors of `A` on the orthonormal columns of `s`
  (zero columns allowed): the eigendecomposition of `s^T A s`."""
  return _eigh_descending(_matmul(s.T, A(s)))


def _complement(x: Any, c: int) -> Any:
  """`c` orthonormal columns orthogonal to the orthonormal `x [n, k]` (`k + c <= n`), built
  deterministically with a block Householder reflector (Schreiber and Parlett, "Block
  reflectors: theory and computation", SIAM J. Numer. Anal. 25(1), 1988).

  With `x = [x1; x2]` (`x1` its top `[k, k]` block) and `x1 = u diag(s) vt`, let
  `y = [x1 + u vt; x2]` and `w = y vt^T diag(2 (1 + s))^(-1/2)`; then `H = I - 2 w w^T` is
  orthogonal, symmetric, and maps `[-u vt; 0]` to `x`, so `H [0; I_c; 0]` is orthogonal to `x`.
  """
  n, k = x.shape
  top, rest = x[:k], x[k:]
  u, s, vt = jnp.linalg.svd(top)
  y = jnp.concatenate([top + _matmul(u, vt), rest], axis=0)
  e = jnp.concatenate([jnp.eye(c, dtype=x.dtype),
                       jnp.zeros((n - k - c, c), dtype=x.dtype)], axis=0)
  w = _matmul(y, vt.T * ((2 * (1 + s)) ** -0.5)[None, :])
  h = -2 * jnp.linalg.multi_dot([w, w[k:, :].T, e], precision=_HI)
  return h.at[k:].add(e)


def _lobpcg_check(A: Callable, X: Any) -> None:
  """JAX's argument checks, in its order and words."""
  n, k = X.shape
  if k == 0:
    raise ValueError(f"must have search dim > 0, got {k}")
  if k * 5 >= n:
    raise ValueError(f"expected search dim * 5 < matrix dim (got {k * 5}, {n})")
  probe = A(jnp.zeros((n, 1), dtype=X.dtype))
  if probe.dtype != X.dtype:
    raise ValueError(f"A, X must have same dtypes (were {probe.dtype}, {X.dtype})")
  if probe.shape != (n, 1):
    raise ValueError(f"A must be ({n}, {n}) matrix A, got output {probe.shape}")


@jit(static_argnames=("m",))
def _lobpcg_matrix(A: Any, X: Any, m: int, tol: Any) -> Any:
  # NB: one program per matrix shape; the operator closes over the traced matrix.
  return _lobpcg_callable(partial(_matmul, A), X, m, tol)


@jit(static_argnames=("A", "m"))
def _lobpcg_callable(A: Callable, X: Any, m: int, tol: Any) -> Any:
  n, k = X.shape
  _lobpcg_check(A, X)
  if tol is None:
    tol = float(jnp.finfo(X.dtype).eps)

  # State: X (current Ritz vectors), P (the previous step's direction), R (residuals), all
  # [n, k]; X is orthonormal, P and R orthonormal up to zero (truncated) columns.
  X = _orthonormalize(X)
  P = _complement(X, k)
  AX = A(X)
  theta = jnp.sum(X * AX, axis=0, keepdims=True)
  R = AX - theta * X

  def cond(state):
    it, _, _, _, nconv, _ = state
    return jnp.logical_and(it < m, nconv < k)

  def body(state):
    it, X, P, R, _, _ = state
    # The trial subspace span(X, P, R), with R made orthogonal to span(X, P).
    R = _project_out(jnp.concatenate((X, P), axis=1), R)
    S = jnp.concatenate((X, P, R), axis=1)
    theta, Q = _rayleigh_ritz(A, S)   # Q [3k, 3k] orthonormal, theta largest first

    # New Ritz vectors: the top k Ritz directions mapped back through S.
    B = Q[:, :k]
    B = B / _col_norms(B)
    X = _matmul(S, B)
    X = X / _col_norms(X)

    # New conjugate directions (Knyazev's P = S[:, k:] Q[k:, :k], which with X spans the old
    # X): taken instead as the part of the other Ritz directions Q[:, k:] that the QR of
    # Q[:k, k:]^T selects, which is orthonormal in S's coordinates and so stays orthonormal
    # once mapped through the orthonormal S (Duersch, Shao, Yang and Gu, arXiv:1704.07458,
    # sec. 4.2).
    q, _ = jnp.linalg.qr(Q[:k, k:].T)
    P = _matmul(S, _matmul(Q[:, k:], q))
    pn = _col_norms(P)
    P = P / jnp.where(pn == 0, 1.0, pn)

    # Residuals and convergence: pair j has converged when
    # |A x_j - theta_j x_j| < tol * 10 * n * (|A x_j| + theta_j), a rough bound on the
    # rounding error of computing the residual of an exact eigenpair.
    AX = A(X)
    R = AX - theta[None, :k] * X
    resid = jnp.linalg.norm(R, ord=2, axis=0)
    scale = (jnp.linalg.norm(AX, ord=2, axis=0) + theta[:k]) * n * 10
    nconv = jnp.sum(resid < tol * scale)
    return it + 1, X, P, R, nconv, theta[None, :k]

  it, X, _, _, _, theta = lax.while_loop(cond, body, (0, X, P, R, 0, theta))
  return theta[0, :], X, it


def lobpcg_standard(A: Any, X: Any, m: int = 100, tol: Any = None):
  """The `k` largest eigenvalues and their eigenvectors of a symmetric positive operator, by
  LOBPCG (JAX's `jax.experimental.sparse.linalg.lobpcg_standard`).

  The algorithm is Knyazev's Locally Optimal Block Preconditioned Conjugate Gradient
  method (A. V. Knyazev, "Toward the Optimal Preconditioned Eigensolver: Locally Optimal
  Block Preconditioned Conjugate Gradient Method", SIAM J. Sci. Comput. 23(2), 517-541,
  2001), without a preconditioner, in JAX's formulation (which follows Duersch, Shao, Yang
  and Gu, "A robust and efficient implementation of LOBPCG", arXiv:1704.07458, and Hetmaniuk
  and Lehoucq, "Basis selection in LOBPCG", arXiv:0705.2626): each step runs Rayleigh-Ritz
  on `[X, P, R]` kept orthonormal (SVQB twice, projections repeated twice, rank-deficient
  directions truncated to zero columns rather than soft locking), the first `P` comes from a
  block Householder reflector, and a pair counts as converged when its residual
  `|A v - lambda v|` is below `tol * 10 * n * (lambda + |A v|)`. The steps, stabilisations
  and convergence test are JAX's, so the results (and, up to rounding, the iteration counts)
  agree with JAX's. Only the standard problem `A U = U diag(theta)` for the largest
  eigenvalues is supported; there is no derivative rule.

  Args:
    A: the operator: an `[n, n]` symmetric (real) matrix, or a callable mapping an `[n, c]`
      array to `A @ x` (`[n, c]`, `X`'s dtype), for any `c`. A callable is a static argument
      of the compiled program (it must be hashable; a new callable compiles again).
    X: `[n, k]` floating array: the starting block (need not be orthonormal, but its columns
      must be numerically independent); its dtype is the computation's.
    m: the maximum number of iterations (a Python int).
    tol: the convergence tolerance (float or scalar array); None means `finfo(X.dtype).eps`.

  Returns:
    `(theta, U, i)`: `theta [k]` (X's dtype) the eigenvalues, largest first; `U [n, k]`
    (X's dtype) the eigenvectors, orthonormal columns; `i` an integer scalar (int32; int64
    under x64, as JAX's), the number of iterations run (`m` if not every pair converged).

  Raises:
    ValueError: `k == 0` ("must have search dim > 0, got 0"); `5 * k >= n` ("expected
      search dim * 5 < matrix dim (got 5k, n)"); `A`'s output dtype differs from `X`'s
      ("A, X must have same dtypes (were ..., ...)"); `A` does not map `[n, 1]` to `[n, 1]`
      ("A must be (n, n) matrix A, got output ...").
  """
  # NB: as JAX's: a matrix compiles once per shape; a callable is part of the program's key.
  if isinstance(A, (Array, np.ndarray)):
    return _lobpcg_matrix(A, X, m, tol)
  return _lobpcg_callable(A, X, m, tol)
