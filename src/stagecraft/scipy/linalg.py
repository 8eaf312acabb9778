"""`stagecraft.scipy.linalg`: scipy.linalg's API with JAX's `jax.scipy.linalg` semantics,
composed from `stagecraft.lax.linalg` (LAPACK kernels on CPU) and `stagecraft.numpy`.

Arguments SciPy has for its own memory management (`overwrite_a`, `overwrite_b`,
`check_finite`, `lwork`, `turbo`, `debug`) are accepted and ignored, as in JAX. Inputs
promote to an inexact dtype (integers to the default float dtype); float32/complex64 give
float32/complex64 results. Functions work on the trailing two axes with leading batch axes
unless their docstring says otherwise. As in JAX, numerical failures do not raise: a
singular or indefinite matrix gives inf/NaN values.
"""
from __future__ import annotations

import math
import operator
import warnings
from functools import partial
from typing import Any, Callable

import numpy as np

from stagecraft import dtypes, lax
from stagecraft import numpy as jnp
from stagecraft.lax import linalg as lax_linalg
from stagecraft.pjit import jit
from stagecraft.numpy.util import (ArrayLike, as_array, check_arraylike, dtype_of, ndim_of,
                                   promote_dtypes, promote_dtypes_inexact, real_dtype,
                                   shape_of)

__all__ = ["block_diag", "cho_factor", "cho_solve", "cholesky", "circulant", "companion",
           "convolution_matrix", "det", "dft", "eigh", "eigh_tridiagonal", "expm",
           "expm_frechet", "fiedler", "fiedler_companion", "funm", "hadamard", "hankel",
           "helmert", "hessenberg", "hilbert", "inv", "invhilbert", "invpascal", "leslie", "lu",
           "lu_factor", "lu_solve", "pascal", "polar", "qr", "qr_multiply", "rsf2csf", "schur",
           "solve", "solve_sylvester", "solve_triangular", "sqrtm", "svd", "toeplitz"]

_HIGHEST = lax.Precision.HIGHEST


# ---------------------------------------------------------------------------
# Helpers


def _inexact(*args):
  out = promote_dtypes_inexact(*(as_array(a) for a in args))
  return [as_array(a) for a in out]


def _mm(a, b):
  return jnp.matmul(a, b, precision=_HIGHEST)


def _H(x):
  return jnp.conj(jnp.swapaxes(x, -1, -2))


def _complex_dtype(dt):
  return dtypes.complex128 if dt in (dtypes.float64, dtypes.complex128) else dtypes.complex64


def _check_square(name: str, a, what: str = "a") -> None:
  s = shape_of(a)
  if len(s) < 2 or s[-1] != s[-2]:
    raise ValueError(f"{name}: expected {what} to be a (batched) square matrix of shape "
                     f"(..., N, N), got shape {s}.")


def _solve_system_shapes(name: str, a, b, warn_name: str):
  """JAX's vectorized-solve conventions: `b[n]` is one vector; `b[..., n]` with
  `a.ndim == b.ndim + 1` is a batch of vectors (deprecated in JAX: a FutureWarning);
  otherwise `b[..., n, k]`. Returns `(a, b, vec)` with b as a matrix and the batch
  dimensions broadcast."""
  _check_square(name, a)
  vec = ndim_of(b) == 1
  if not vec and ndim_of(a) == ndim_of(b) + 1 and shape_of(a)[-1] == shape_of(b)[-1]:
    warnings.warn(
        f"jax.scipy.linalg.{warn_name}: batched 1D solves with b.ndim > 1 are deprecated, "
        f"and in the future will be treated as a batched 2D solve. Use "
        f"{warn_name}(..., b[..., None]).squeeze(-1) to avoid this warning.",
        category=FutureWarning, stacklevel=3)
    vec = True
  if vec:
    b = jnp.expand_dims(b, -1)
  n = shape_of(a)[-1]
  if shape_of(b)[-2] != n:
    raise ValueError(f"{name}: a of shape {shape_of(a)} and b of shape "
                     f"{shape_of(b) if not vec else shape_of(b)[:-1]} do not fit (b needs "
                     f"{n} rows).")
  batch = jnp.broadcast_shapes(shape_of(a)[:-2], shape_of(b)[:-2])
  a = jnp.broadcast_to(a, (*batch, n, n))
  b = jnp.broadcast_to(b, (*batch, *shape_of(b)[-2:]))
  return a, b, vec


def _perm_matrix(perm, m: int, dtype, *, transpose: bool):
  """The permutation matrix `P[..., i, j] = (perm[..., i] == j)` (its transpose with
  `transpose`) of `perm[..., m]` (int32), as `dtype`. Built from operands of equal rank,
  so that it does not depend on config `numpy_rank_promotion` (a library-internal
  comparison, as in JAX)."""
  shape = (*shape_of(perm), m)
  nd = len(shape)
  rows = jnp.broadcast_to(jnp.expand_dims(perm, -1), shape)
  cols = lax.broadcasted_iota(dtypes.int32, shape, nd - 1)
  p = (rows == cols).astype(dtype)
  return jnp.swapaxes(p, -1, -2) if transpose else p


def _tri_solve(a, b, *, lower, transpose_a=False, conjugate_a=False, unit_diagonal=False):
  return lax_linalg.triangular_solve(a, b, left_side=True, lower=lower,
                                     transpose_a=transpose_a, conjugate_a=conjugate_a,
                                     unit_diagonal=unit_diagonal)


def _batched_map(fun: Callable, args: list, core_ndims: list[int]):
  """Applies `fun` (on unbatched operands, returning a tuple of arrays) over the broadcast
  leading batch dims of `args` with `lax.map` (a scan), as JAX's `vectorize` does for
  functions built on control flow."""
  batch = jnp.broadcast_shapes(*(shape_of(a)[:ndim_of(a) - c] for a, c in
                                 zip(args, core_ndims)))
  if not batch:
    return fun(*args)
  flat = [jnp.reshape(jnp.broadcast_to(a, (*batch, *shape_of(a)[ndim_of(a) - c:])),
                      (-1, *shape_of(a)[ndim_of(a) - c:])) for a, c in zip(args, core_ndims)]
  outs = lax.map(lambda xs: tuple(fun(*xs)), tuple(flat))
  return tuple(jnp.reshape(o, (*batch, *shape_of(o)[1:])) for o in outs)


# ---------------------------------------------------------------------------
# Cholesky


def cholesky(a: ArrayLike, lower: bool = False, overwrite_a: bool = False,
             check_finite: bool = True):
  """The Cholesky factor of Hermitian positive-definite `a`.

  Args:
    a: `[..., N, N]`; only the `lower` (else upper) triangle is read.
    lower: return lower `L` with `a = L L^H`; else upper `U` with `a = U^H U`.

  Returns:
    `[..., N, N]`, triangular; NaN where `a` is not positive definite.

  Raises:
    ValueError: for non-square input.

  Algorithm: LAPACK potrf (`lax.linalg.cholesky`); differentiable (Murray 2016).
  """
  del overwrite_a, check_finite
  a, = _inexact(a)
  _check_square("cholesky", a)
  l = lax_linalg.cholesky(a if lower else _H(a), symmetrize_input=False)
  return l if lower else _H(l)


def cho_factor(a: ArrayLike, lower: bool = False, overwrite_a: bool = False,
               check_finite: bool = True):
  """`(c, lower)` for `cho_solve`: `c` is `cholesky(a, lower)` (the other triangle is
  zero, where SciPy leaves arbitrary values)."""
  del overwrite_a, check_finite
  return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower: tuple[ArrayLike, bool], b: ArrayLike, overwrite_b: bool = False,
              check_finite: bool = True):
  """Solves `A x = b` given `(c, lower) = cho_factor(A)`.

  Args:
    c_and_lower: the Cholesky factor `c[..., N, N]` and whether it is lower.
    b: `[N]`, `[..., N, K]` (batch dims broadcast with c's), or `[..., N]` with
      `c.ndim == b.ndim + 1` (a batch of vectors; FutureWarning, as in JAX).

  Returns:
    `x`, shaped like the broadcast `b`.

  Raises:
    ValueError: for shapes that do not fit.
  """
  del overwrite_b, check_finite
  c, lower = c_and_lower
  c, b = _inexact(c, b)
  c, bm, vec = _solve_system_shapes("cho_solve", c, b, "cho_solve")
  y = _tri_solve(c, bm, lower=lower, transpose_a=not lower, conjugate_a=not lower)
  x = _tri_solve(c, y, lower=lower, transpose_a=lower, conjugate_a=lower)
  return jnp.squeeze(x, -1) if vec else x


# ---------------------------------------------------------------------------
# Decompositions


def svd(a: ArrayLike, full_matrices: bool = True, compute_uv: bool = True,
        overwrite_a: bool = False, check_finite: bool = True, lapack_driver: str = "gesdd"):
  """Singular value decomposition `a = U @ diag(s) @ Vh` of `[..., M, N]`.

  Returns:
    `(U, s, Vh)` (U `[..., M, M]`, Vh `[..., N, N]`, or `[..., M, K]`/`[..., K, N]` without
    `full_matrices`; s real, descending) or `s` alone without `compute_uv`.

  Algorithm: LAPACK gesdd (`lapack_driver` is accepted and ignored, as in JAX);
  differentiable (Townsend 2016) for `full_matrices=False` or square input.
  """
  del overwrite_a, check_finite, lapack_driver
  a, = _inexact(a)
  return lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)


def det(a: ArrayLike, overwrite_a: bool = False, check_finite: bool = True):
  """The determinant `[...]` of `a[..., N, N]` (`jnp.linalg.det`; differentiable)."""
  del overwrite_a, check_finite
  return jnp.linalg.det(a)


def inv(a: ArrayLike, overwrite_a: bool = False, check_finite: bool = True):
  """The inverse of `a[..., N, N]` (`jnp.linalg.inv`: LU with partial pivoting); inf/NaN
  for singular matrices."""
  del overwrite_a, check_finite
  return jnp.linalg.inv(a)


def eigh(a: ArrayLike, b: ArrayLike | None = None, lower: bool = True,
         eigvals_only: bool = False, overwrite_a: bool = False, overwrite_b: bool = False,
         turbo: bool = True, eigvals: None = None, type: int = 1, check_finite: bool = True):
  """Eigenvalues (ascending) and eigenvectors of Hermitian `a`, or of the generalized
  problem with Hermitian positive-definite `b`.

  Args:
    a: `[..., N, N]`; only the `lower` (else upper) triangle is read.
    b: None, or `[..., N, N]` for the generalized problem (an extension: JAX raises
      NotImplementedError): type 1 `a v = w b v`, type 2 `a b v = w v`, type 3
      `b a v = w v`.
    eigvals_only: return only the eigenvalues.
    eigvals: must be None (subsets are not implemented, as in JAX).

  Returns:
    `w R[..., N]` or `(w, v)` with eigenvectors in the columns of `v[..., N, N]`
    (b-orthonormal for the generalized problem, as SciPy's).

  Raises:
    NotImplementedError: for `eigvals` not None. ValueError: for a `type` other than
      1, 2, 3.

  Algorithm: LAPACK syevd/heevd; the generalized problem is reduced with the Cholesky
  factor `b = L L^H` (`L^-1 a L^-H`, or `L^H a L` for types 2 and 3), as LAPACK's sygst.
  Differentiable (Giles 2008) for distinct eigenvalues.
  """
  del overwrite_a, overwrite_b, turbo, check_finite
  if eigvals is not None:
    raise NotImplementedError("Only the eigvals=None case of eigh is implemented.")
  if type not in (1, 2, 3):
    raise ValueError(f"eigh: type must be 1, 2 or 3, got {type}.")
  if b is None:
    if type != 1:
      raise NotImplementedError("Only the type=1 case of eigh is implemented.")
    a, = _inexact(a)
    _check_square("eigh", a)
    v, w = lax_linalg.eigh(a, lower=lower)
    return w if eigvals_only else (w, v)
  a, b = _inexact(a, b)
  _check_square("eigh", a)
  _check_square("eigh", b, "b")
  if shape_of(a)[-1] != shape_of(b)[-1]:
    raise ValueError(f"eigh: a {shape_of(a)} and b {shape_of(b)} must have the same size.")
  batch = jnp.broadcast_shapes(shape_of(a)[:-2], shape_of(b)[:-2])
  n = shape_of(a)[-1]
  a = jnp.broadcast_to(a, (*batch, n, n))
  b = jnp.broadcast_to(b, (*batch, n, n))
  a = jnp.tril(a) + _H(jnp.tril(a, -1)) if lower else jnp.triu(a) + _H(jnp.triu(a, 1))
  el = cholesky(b, lower=lower) if lower else _H(cholesky(b, lower=False))
  if type == 1:
    c = _tri_solve(el, a, lower=True)
    c = _H(_tri_solve(el, _H(c), lower=True))
  else:
    c = _mm(_mm(_H(el), a), el)
  v, w = lax_linalg.eigh(c, lower=True)
  if eigvals_only:
    return w
  v = _mm(el, v) if type == 3 else _tri_solve(el, v, lower=True, transpose_a=True,
                                              conjugate_a=True)
  return w, v


def schur(a: ArrayLike, output: str = "real"):
  """Schur decomposition `a = Z @ T @ Z^H` (LAPACK gees; CPU only; not differentiable).

  Args:
    a: `[..., N, N]`.
    output: 'real' (T quasi upper triangular with 2x2 blocks for complex-conjugate
      eigenvalue pairs, for real input) or 'complex' (T upper triangular).

  Returns:
    `(T, Z)`, Z unitary.

  Raises:
    ValueError: for another `output` or non-square input.
  """
  if output not in ("real", "complex"):
    raise ValueError(f"Expected 'output' to be either 'real' or 'complex', got "
                     f"output={output!r}.")
  a, = _inexact(a)
  _check_square("schur", a)
  if output == "complex":
    a = a.astype(_complex_dtype(dtype_of(a)))
  return tuple(lax_linalg.schur(a))


def rsf2csf(T: ArrayLike, Z: ArrayLike, check_finite: bool = True):
  """Converts a real Schur form `(T, Z)` to the complex one (upper triangular T).

  Args:
    T: `[..., N, N]`, quasi upper triangular (from `schur(a, 'real')`).
    Z: `[..., N, N]`; batch dims broadcast with T's.

  Returns:
    `(T, Z)` complex, with `Z T Z^H` unchanged.

  Raises:
    ValueError: for non-square or mismatched inputs.

  Algorithm: SciPy's: each 2x2 diagonal block with a nonzero subdiagonal entry (above
  `eps (|T[m-1, m-1]| + |T[m, m]|)`) is triangularized by a complex Givens rotation built
  from its first eigenvalue in LAPACK's order, applied to T's rows and columns and to Z's columns, from the
  bottom right up.
  """
  del check_finite
  T, Z = as_array(T), as_array(Z)
  if ndim_of(T) < 2 or shape_of(T)[-1] != shape_of(T)[-2]:
    raise ValueError("Input 'T' must be square.")
  if ndim_of(Z) < 2 or shape_of(Z)[-1] != shape_of(Z)[-2]:
    raise ValueError("Input 'Z' must be square.")
  if shape_of(T)[-1] != shape_of(Z)[-1]:
    raise ValueError(f"Input array shapes must match: Z: {shape_of(Z)} vs. T: {shape_of(T)}")
  return _rsf2csf(*_inexact(T, Z))


@jit
def _rsf2csf(T, Z):
  ct = _complex_dtype(jnp.result_type(T, Z))
  n = shape_of(T)[-1]
  batch = jnp.broadcast_shapes(shape_of(T)[:-2], shape_of(Z)[:-2])
  T = jnp.broadcast_to(T.astype(ct), (*batch, n, n))
  Z = jnp.broadcast_to(Z.astype(ct), (*batch, n, n))
  eps = float(dtypes.finfo(real_dtype(ct)).eps)
  rows = np.arange(n)
  for m in range(n - 1, 0, -1):
    a = T[..., m - 1, m - 1]
    c, d = T[..., m, m - 1], T[..., m, m]
    split = jnp.abs(c) > eps * (jnp.abs(a) + jnp.abs(d))
    # the first eigenvalue LAPACK's geev gives of [[a, b], [c, d]], minus d (SciPy's choice,
    # which decides the result when T is not quite in Schur form)
    mu = jnp.linalg.eigvals(T[..., m - 1:m + 1, m - 1:m + 1])[..., 0] - d
    r = jnp.sqrt(jnp.abs(mu) ** 2 + jnp.abs(c) ** 2).astype(ct)
    r = jnp.where(r == 0, jnp.ones_like(r), r)
    cs, sn = mu / r, c / r
    cs = jnp.where(split, cs, jnp.ones_like(cs))
    sn = jnp.where(split, sn, jnp.zeros_like(sn))
    # G = [[conj(cs), sn], [-sn, cs]] on rows m-1, m (columns >= m-1), G^H on columns
    # m-1, m of T (rows <= m) and of Z.
    g = jnp.stack([jnp.stack([jnp.conj(cs), sn], -1), jnp.stack([-sn, cs], -1)], -2)
    top = T[..., m - 1:m + 1, :]
    new_top = _mm(g, top)
    keep = jnp.asarray(rows < m - 1)
    T = jnp.concatenate([T[..., :m - 1, :], jnp.where(keep, top, new_top), T[..., m + 1:, :]],
                        axis=-2)
    cols = T[..., :, m - 1:m + 1]
    new_cols = _mm(cols, _H(g))
    keep = jnp.asarray(rows > m)[:, None]
    T = jnp.concatenate([T[..., :, :m - 1], jnp.where(keep, cols, new_cols),
                         T[..., :, m + 1:]], axis=-1)
    Z = jnp.concatenate([Z[..., :, :m - 1], _mm(Z[..., :, m - 1:m + 1], _H(g)),
                         Z[..., :, m + 1:]], axis=-1)
    mask = jnp.asarray((rows[:, None] == m) & (rows[None, :] == m - 1))
    T = jnp.where(mask, jnp.zeros((), ct), T)
  return T, Z


def hessenberg(a: ArrayLike, *, calc_q: bool = False, overwrite_a: bool = False,
               check_finite: bool = True):
  """Hessenberg form `a = Q @ H @ Q^H` (LAPACK gehrd; CPU only; not differentiable).

  Args:
    a: `[..., N, N]`.
    calc_q: also return the unitary `Q[..., N, N]`.

  Returns:
    `H` (zero below the first subdiagonal), or `(H, Q)`.

  Raises:
    ValueError: for non-square input.
  """
  del overwrite_a, check_finite
  a, = _inexact(a)
  _check_square("hessenberg", a)
  n = shape_of(a)[-1]
  if n == 0:
    return (jnp.zeros_like(a), jnp.zeros_like(a)) if calc_q else jnp.zeros_like(a)
  a_out, taus = lax_linalg.hessenberg(a)
  h = jnp.triu(a_out, -1)
  if not calc_q:
    return h
  q = lax_linalg.householder_product(a_out[..., 1:, :-1], taus)
  nd = ndim_of(q)
  q = lax.pad(q, np.zeros((), dtype_of(q))[()], [(0, 0, 0)] * (nd - 2) + [(1, 0, 0)] * 2)
  e0 = np.zeros((1,) * (nd - 2) + (n, n), dtype_of(q))   # NB: q's rank (rank promotion)
  e0[..., 0, 0] = 1
  return h, q + jnp.asarray(e0)


def lu_factor(a: ArrayLike, overwrite_a: bool = False, check_finite: bool = True):
  """`(lu, piv)` for `lu_solve`: LU with partial pivoting of `a[..., M, N]`.

  Returns:
    `lu[..., M, N]` (unit-lower L below the diagonal, U on and above it) and the 0-based
    row swaps `piv int32[..., min(M, N)]` (row i was swapped with row piv[i]).

  Algorithm: LAPACK getrf; differentiable (De Hoog, Anderssen, Lukas).
  """
  del overwrite_a, check_finite
  a, = _inexact(a)
  lu, piv, _ = lax_linalg.lu(a)
  return lu, piv


def lu_solve(lu_and_piv: tuple[ArrayLike, ArrayLike], b: ArrayLike, trans: int = 0,
             overwrite_b: bool = False, check_finite: bool = True):
  """Solves `A x = b` (trans 0), `A^T x = b` (1) or `A^H x = b` (2) given
  `(lu, piv) = lu_factor(A)`.

  Args:
    b: `[N]`, `[..., N, K]`, or a batch of vectors `[..., N]` (FutureWarning, as in JAX).

  Raises:
    ValueError: for an invalid `trans` or shapes that do not fit.
  """
  del overwrite_b, check_finite
  lu, piv = lu_and_piv
  if trans not in (0, 1, 2):
    raise ValueError(f"'trans' value must be 0, 1, or 2, got {trans}")
  lu, b = _inexact(lu, b)
  m = shape_of(lu)[-1]
  perm = lax_linalg.lu_pivots_to_permutation(jnp.asarray(piv, dtypes.int32), m)
  lu_b, bm, vec = _solve_system_shapes("lu_solve", lu, b, "lu_solve")
  perm = jnp.broadcast_to(perm, (*shape_of(lu_b)[:-2], m))
  # P[i, j] = (perm[i] == j): a[perm] = P a = L U
  p = _perm_matrix(perm, m, dtype_of(lu_b), transpose=False)
  if trans == 0:
    y = _tri_solve(lu_b, _mm(p, bm), lower=True, unit_diagonal=True)
    x = _tri_solve(lu_b, y, lower=False)
  else:
    conj = trans == 2
    y = _tri_solve(lu_b, bm, lower=False, transpose_a=True, conjugate_a=conj)
    y = _tri_solve(lu_b, y, lower=True, transpose_a=True, conjugate_a=conj,
                   unit_diagonal=True)
    x = _mm(jnp.swapaxes(p, -1, -2), y)
  return jnp.squeeze(x, -1) if vec else x


def lu(a: ArrayLike, permute_l: bool = False, overwrite_a: bool = False,
       check_finite: bool = True):
  """LU decomposition with partial pivoting: `a = P @ L @ U`.

  Args:
    a: `[..., M, N]`.
    permute_l: return `(P @ L, U)` instead of `(P, L, U)`.

  Returns:
    `P[..., M, M]` (a permutation matrix of a's dtype), `L[..., M, K]` unit lower
    triangular and `U[..., K, N]` upper triangular, `K = min(M, N)`.

  Algorithm: LAPACK getrf; differentiable.
  """
  del overwrite_a, check_finite
  a, = _inexact(a)
  if ndim_of(a) < 2:
    raise ValueError(f"lu: expected a matrix of shape (..., M, N), got {shape_of(a)}.")
  lu_, _, perm = lax_linalg.lu(a)
  dt = dtype_of(a)
  m, n = shape_of(a)[-2:]
  k = min(m, n)
  p = _perm_matrix(perm, m, dt, transpose=True)
  l = jnp.tril(lu_, -1)[..., :, :k] + jnp.broadcast_to(jnp.eye(m, k, dtype=dt),
                                                        (*shape_of(lu_)[:-2], m, k))
  u = jnp.triu(lu_)[..., :k, :]
  if permute_l:
    return _mm(p, l), u
  return p, l, u


def qr(a: ArrayLike, overwrite_a: bool = False, lwork: Any = None, mode: str = "full",
       pivoting: bool = False, check_finite: bool = True):
  """QR decomposition `a = Q @ R` (`a[:, P] = Q @ R` with pivoting).

  Args:
    a: `[..., M, N]`.
    mode: 'full' (Q `[..., M, M]`, R `[..., M, N]`), 'economic' (`[..., M, K]`,
      `[..., K, N]`), or 'r' (R only, full size).
    pivoting: column pivoting (LAPACK geqp3): also return `P int32[..., N]`.

  Returns:
    `(Q, R)`, `(Q, R, P)`, `(R,)` or `(R, P)`.

  Raises:
    ValueError: for another mode (e.g. 'raw', as in JAX).

  Algorithm: LAPACK geqrf/geqp3 and orgqr; differentiable.
  """
  del overwrite_a, lwork, check_finite
  if mode in ("full", "r"):
    full = True
  elif mode == "economic":
    full = False
  else:
    raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
  a, = _inexact(a)
  q, r, *p = lax_linalg.qr(a, pivoting=pivoting, full_matrices=full)
  if mode == "r":
    return (r, p[0]) if pivoting else (r,)
  return (q, r, p[0]) if pivoting else (q, r)


def qr_multiply(a: ArrayLike, c: ArrayLike, mode: str = "right", pivoting: bool = False,
                conjugate: bool = False, overwrite_a: bool = False, overwrite_c: bool = False):
  """`Q @ c` (mode 'left') or `c @ Q` (mode 'right') with Q from the QR decomposition of
  `a`, without forming Q, and R.

  Args:
    a: `[..., M, N]`; K = min(M, N).
    c: mode 'left': `[..., K, P]` (or `[K]`); mode 'right': `[..., P, M]` (or `[M]`).
    pivoting: column pivoting; also return the permutation.
    conjugate: use `conj(Q)`.

  Returns:
    `(result, R)` or `(result, R, P)`: result `[..., M, P]` (left) or `[..., P, K]` (right),
    1-D for 1-D `c`; `R[..., K, N]`.

  Raises:
    ValueError: for another mode or shapes that do not fit.

  Algorithm: LAPACK geqrf (geqp3) and ormqr/unmqr; not differentiable (as in JAX).
  """
  del overwrite_a, overwrite_c
  a, c = _inexact(a, c)
  if mode not in ("right", "left"):
    raise ValueError(f"mode must be 'right' or 'left', got {mode!r}")
  onedim = ndim_of(c) == 1
  if onedim:
    c = c[:, None] if mode == "left" else c[None, :]
  m, n = shape_of(a)[-2:]
  k = min(m, n)
  if mode == "left" and shape_of(c)[-2] != k:
    raise ValueError(f"Array shapes are not compatible for Q @ c operation: a has shape "
                     f"{shape_of(a)} so Q has {k} columns, but c has {shape_of(c)[-2]} rows "
                     f"(expected {k}).")
  if mode == "right" and shape_of(c)[-1] != m:
    raise ValueError(f"Array shapes are not compatible for c @ Q operation: a has shape "
                     f"{shape_of(a)} so Q has {m} rows, but c has {shape_of(c)[-1]} columns "
                     f"(expected {m}).")
  batch = jnp.broadcast_shapes(shape_of(a)[:-2], shape_of(c)[:-2])
  a = jnp.broadcast_to(a, (*batch, m, n))
  c = jnp.broadcast_to(c, (*batch, *shape_of(c)[-2:]))
  p = None
  if pivoting:
    r, p, taus = lax_linalg.geqp3(a, jnp.zeros((*batch, n), dtypes.int32))
    p = p - 1
  else:
    r, taus = lax_linalg.geqrf(a)
  if m > n and mode == "left":
    c = jnp.concatenate([c, jnp.zeros((*batch, m - k, shape_of(c)[-1]), dtype_of(c))],
                        axis=-2)
  if conjugate:
    c = jnp.swapaxes(c, -1, -2)
  left = (mode == "left") != conjugate
  cq = lax_linalg.ormqr(r, taus, c, left=left, transpose=conjugate)
  if conjugate:
    cq = jnp.swapaxes(cq, -1, -2)
  if mode == "right":
    cq = cq[..., :k]
  if onedim:
    cq = jnp.ravel(cq)
  r = jnp.triu(r[..., :k, :])
  return (cq, r, p) if pivoting else (cq, r)


def polar(a: ArrayLike, side: str = "right", *, method: str = "qdwh",
          eps: float | None = None, max_iterations: int | None = None):
  """Polar decomposition `a = U P` (side 'right') or `a = P U` ('left').

  Args:
    a: `[..., M, N]`.
    method: 'qdwh' (M >= N with side 'right', or M < N with side 'left', as in JAX) or
      'svd'.
    eps, max_iterations: passed to `lax.linalg.qdwh`.

  Returns:
    `(U, P)`: U `[..., M, N]` with orthonormal columns (rows), P Hermitian positive
    semidefinite, `[..., N, N]` (right) or `[..., M, M]` (left).

  Raises:
    ValueError: for rank < 2 input, another side or method. NotImplementedError: for the
      shapes qdwh does not take.

  Algorithm: QDWH (Nakatsukasa, Bai, Gygi 2010; `lax.linalg.qdwh`) or the SVD
  `a = W S Vh`: `U = W Vh`, `P = V S Vh` (right) or `W S W^H` (left).
  """
  a, = _inexact(a)
  if ndim_of(a) < 2:
    raise ValueError("The input `a` must be at least a 2-D array.")
  if side not in ("right", "left"):
    raise ValueError("The argument `side` must be either 'right' or 'left'.")
  m, n = shape_of(a)[-2:]
  if method == "svd":
    w, s, vh = lax_linalg.svd(a, full_matrices=False)
    s = s.astype(dtype_of(w))
    u = _mm(w, vh)
    if side == "right":
      return u, _mm(_H(vh) * s[..., None, :], vh)
    return u, _mm(w * s[..., None, :], _H(w))
  if method != "qdwh":
    raise ValueError(f"Unknown polar decomposition method {method}.")
  if not ((m >= n and side == "right") or (m < n and side == "left")):
    raise NotImplementedError(f"method='qdwh' only supports mxn matrices where m < n where "
                              f"side='right' and m >= n side='left', got {shape_of(a)} with "
                              f"side={side!r}")

  def one(x):
    if side == "left":
      x = _H(x)
    u, p, _, _ = lax_linalg.qdwh(x, eps=eps, max_iterations=max_iterations)
    return (_H(u), _H(p)) if side == "left" else (u, p)
  return _batched_map(one, [a], [2])


# ---------------------------------------------------------------------------
# Solves


def solve(a: ArrayLike, b: ArrayLike, lower: bool = False, overwrite_a: bool = False,
          overwrite_b: bool = False, debug: bool = False, check_finite: bool = True,
          assume_a: str = "gen"):
  """Solves `a @ x = b`.

  Args:
    a: `[..., N, N]`.
    b: `[N]` or `[..., N, K]` (see `jnp.linalg.solve`).
    lower: with `assume_a='pos'`, read the lower (else upper) triangle of `a`.
    assume_a: 'gen', 'sym', 'her' (LU with partial pivoting) or 'pos' (Cholesky).

  Returns:
    `x` shaped like the broadcast `b`; inf/NaN for singular `a` (NaN for 'pos' when `a` is
    not positive definite).

  Raises:
    ValueError: for another `assume_a` or shapes that do not fit.
  """
  del overwrite_a, overwrite_b, debug, check_finite
  valid = ["gen", "sym", "her", "pos"]
  if assume_a not in valid:
    raise ValueError(f"Expected assume_a to be one of {valid}; got {assume_a!r}")
  if assume_a != "pos":
    return jnp.linalg.solve(a, b)
  a, b = _inexact(a, b)
  _check_square("solve", a)
  vec = ndim_of(a) == ndim_of(b) + 1
  factors = cho_factor(a, lower=lower)
  if vec:
    return jnp.squeeze(cho_solve(factors, jnp.expand_dims(b, -1)), -1)
  return cho_solve(factors, b)


def solve_triangular(a: ArrayLike, b: ArrayLike, trans: int | str = 0, lower: bool = False,
                     unit_diagonal: bool = False, overwrite_b: bool = False, debug: Any = None,
                     check_finite: bool = True):
  """Solves `op(a) @ x = b` for triangular `a`.

  Args:
    a: `[..., N, N]`; only the `lower` (else upper) triangle is read.
    b: `[N]`, `[..., N, K]`, or a batch of vectors `[..., N]` (FutureWarning, as in JAX).
    trans: 0/'N' (`a`), 1/'T' (`a^T`) or 2/'C' (`a^H`).
    unit_diagonal: assume ones on the diagonal (it is not read).

  Returns:
    `x` shaped like the broadcast `b`.

  Raises:
    ValueError: for an invalid `trans` or shapes that do not fit.

  Algorithm: `lax.linalg.triangular_solve` (stablehlo.triangular_solve); differentiable in
  `a` and `b`.
  """
  del overwrite_b, debug, check_finite
  if trans in (0, "N"):
    transpose_a, conjugate_a = False, False
  elif trans in (1, "T"):
    transpose_a, conjugate_a = True, False
  elif trans in (2, "C"):
    transpose_a, conjugate_a = True, True
  else:
    raise ValueError(f"Invalid 'trans' value {trans}")
  a, b = _inexact(a, b)
  a, bm, vec = _solve_system_shapes("solve_triangular", a, b, "solve_triangular")
  x = _tri_solve(a, bm, lower=lower, transpose_a=transpose_a, conjugate_a=conjugate_a,
                 unit_diagonal=unit_diagonal)
  return jnp.squeeze(x, -1) if vec else x


def solve_sylvester(A: ArrayLike, B: ArrayLike, C: ArrayLike, *, method: str = "schur",
                    tol: float = 1e-8):
  """Solves the Sylvester equation `A X + X B = C`.

  Args:
    A: `[..., M, M]`; B: `[..., N, N]`; C: `[..., M, N]` (batch dims broadcast).
    method: 'schur' (Bartels-Stewart) or 'eigen' (eigendecompositions of A and B).
    tol: if some `|lambda_i(A) + mu_j(B)| < tol` (no unique solution), the result is NaN.

  Returns:
    `X[..., M, N]`, real for real C.

  Raises:
    ValueError: for shapes that do not fit or another method.

  Algorithm: Bartels and Stewart, "Solution of the matrix equation AX + XB = C" (1972):
  with complex Schur forms `A = U R U^H` and `B = V S V^H`, `R Y + Y S = U^H C V` is
  solved column by column (triangular solves), then `X = U Y V^H`.
  """
  A, B, C = _inexact(A, B, C)
  m, n = shape_of(C)[-2:]
  if shape_of(A)[-2:] != (m, m) or shape_of(B)[-2:] != (n, n):
    raise ValueError(f"Incompatible shapes for Sylvester equation:\nA: {shape_of(A)}\n"
                     f"B: {shape_of(B)}\nC: {shape_of(C)}")
  if method not in ("schur", "eigen"):
    raise ValueError(f'Unrecognized method {method}. The two valid methods are either '
                     f'"schur" or "eigen".')
  return _solve_sylvester(A, B, C, method, float(tol))


@partial(jit, static_argnums=(3, 4))
def _solve_sylvester(A, B, C, method, tol):
  m, n = shape_of(C)[-2:]
  batch = jnp.broadcast_shapes(shape_of(A)[:-2], shape_of(B)[:-2], shape_of(C)[:-2])
  A = jnp.broadcast_to(A, (*batch, m, m))
  B = jnp.broadcast_to(B, (*batch, n, n))
  C = jnp.broadcast_to(C, (*batch, m, n))
  ct = _complex_dtype(dtype_of(C))
  if method == "schur":
    R, U = schur(A, output="complex")
    S, V = schur(B, output="complex")
    F = _mm(_mm(_H(U), C.astype(ct)), V)
    cols = []
    eye = jnp.eye(m, dtype=ct)
    for j in range(n):   # column j of R Y + Y S = F, S upper triangular
      rhs = F[..., :, j:j + 1]
      for k, y in enumerate(cols):
        rhs = rhs - y * S[..., k:k + 1, j:j + 1]
      cols.append(_tri_solve(R + eye * S[..., j:j + 1, j:j + 1], rhs, lower=False))
    Y = jnp.concatenate(cols, axis=-1) if cols else jnp.zeros((*batch, m, n), ct)
    X = _mm(_mm(U, Y), _H(V))
  else:
    ra, ua = jnp.linalg.eig(A)
    rb, ub = jnp.linalg.eig(B)
    F = jnp.linalg.solve(ua, _mm(C.astype(ct), ub))
    Y = F / (ra[..., :, None] + rb[..., None, :])
    X = _mm(_mm(ua, Y), jnp.linalg.inv(ub))
  if not dtypes.is_complex(dtype_of(C)):
    X = jnp.real(X)
  ea = jnp.linalg.eigvals(A)
  eb = jnp.linalg.eigvals(B)
  bad = jnp.any(jnp.abs(ea[..., :, None] + eb[..., None, :]) < tol, axis=(-2, -1))
  return jnp.where(bad[..., None, None], jnp.full_like(X, np.nan), X)


# ---------------------------------------------------------------------------
# Matrix functions

# Pade coefficients b_0..b_m of the [m/m] approximant of exp (Higham, "The scaling and
# squaring method for the matrix exponential revisited", SIAM J. Matrix Anal. Appl. 26
# (2005), eq. 2.2: b_j = (2m - j)! m! / ((2m)! j! (m - j)!), scaled to integers).
_PADE = {
    3: (120., 60., 12., 1.),
    5: (30240., 15120., 3360., 420., 30., 1.),
    7: (17297280., 8648640., 1995840., 277200., 25200., 1512., 56., 1.),
    9: (17643225600., 8821612800., 2075673600., 302702400., 30270240., 2162160., 110880.,
        3960., 90., 1.),
    13: (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800.,
         129060195264000., 10559470521600., 670442572800., 33522128640., 1323241920.,
         40840800., 960960., 16380., 182., 1.),
}
# theta_m (ibid., Table 2.3 for double precision; the single-precision values for u = 2^-24):
# the 1-norm bounds up to which the degree-m approximant is accurate.
_THETA = {np.dtype(np.float64): ((3, 1.495585217958292e-2), (5, 2.539398330063230e-1),
                                 (7, 9.504178996162932e-1), (9, 2.097847961257068e0),
                                 (13, 5.371920351148152e0)),
          np.dtype(np.float32): ((3, 4.258730016922831e-1), (5, 1.880152677804762e0),
                                 (7, 3.925724783138660e0))}


def _pade(m: int):
  """`(U, V)` of the degree-m Pade approximant `r_m(A) = (V - U)^-1 (V + U)`: U the odd
  part, V the even part of the numerator."""
  b = _PADE[m]

  def f(A):
    n = shape_of(A)[-1]
    ident = jnp.eye(n, dtype=dtype_of(A))
    A2 = _mm(A, A)
    if m == 13:
      A4 = _mm(A2, A2)
      A6 = _mm(A4, A2)
      U = _mm(A, _mm(A6, b[13] * A6 + b[11] * A4 + b[9] * A2)
              + b[7] * A6 + b[5] * A4 + b[3] * A2 + b[1] * ident)
      V = (_mm(A6, b[12] * A6 + b[10] * A4 + b[8] * A2)
           + b[6] * A6 + b[4] * A4 + b[2] * A2 + b[0] * ident)
      return U, V
    powers = [ident, A2]
    for _ in range(2, m // 2 + 1):
      powers.append(_mm(powers[-1], A2))

    def poly(first: int):   # b[first] * A^(m-1) + ... + b[first - m + 1] * I, highest first
      top = m // 2
      acc = b[2 * top + first - 1] * powers[top]
      for i in range(top - 1, -1, -1):
        acc = acc + b[2 * i + first - 1] * powers[i]
      return acc
    # NB: summed highest power first, as JAX's `_pade3`..`_pade9` (the same rounding).
    U = _mm(A, poly(2))
    V = poly(1)
    return U, V
  return f


def _expm_2d(A, upper_triangular: bool, max_squarings: int):
  rdt = np.dtype(real_dtype(dtype_of(A)))
  table = _THETA[rdt]
  norm = jnp.max(jnp.sum(jnp.abs(A), axis=0))
  max_theta = table[-1][1]
  s = jnp.maximum(0, jnp.floor(jnp.log2(norm / max_theta)))
  As = A / (2 ** s).astype(dtype_of(A))
  bins = jnp.asarray([t for _, t in table[:-1]], rdt)
  idx = jnp.sum(bins <= norm).astype(dtypes.int32)
  U, V = lax.switch(idx, [_pade(m) for m, _ in table], As)
  P, Q = U + V, V - U
  R = solve_triangular(Q, P) if upper_triangular else jnp.linalg.solve(Q, P)
  s_int = s.astype(dtypes.int32)

  def square(carry, i):
    return lax.cond(i < s_int, lambda x: _mm(x, x), lambda x: x, carry), None
  R, _ = lax.scan(square, R, jnp.arange(max_squarings, dtype=dtypes.int32))
  return jnp.where(s_int > max_squarings, jnp.full_like(R, np.nan), R)


def expm(A: ArrayLike, *, upper_triangular: bool = False, max_squarings: int = 16):
  """The matrix exponential of `A[..., N, N]`.

  Args:
    upper_triangular: A is upper triangular (the final solve is a triangular one).
    max_squarings: the largest number of squarings; NaN where more are needed.

  Returns:
    `[..., N, N]`, A's inexact dtype.

  Raises:
    ValueError: for non-square input. TypeError: for dtypes other than float32, float64,
      complex64, complex128.

  Algorithm: scaling and squaring with Pade approximants (Higham 2005, see `_PADE`): with
  `s = max(0, floor(log2(|A|_1 / theta_max)))` (JAX's choice), the degree is the smallest
  whose `theta_m` exceeds `|A|_1` (3, 5, 7 in single precision; up to 13 in double), then
  `r_m(A / 2^s)` is squared s times. Differentiable (through the solve and the squarings);
  batches run with `lax.map`.
  """
  A, = _inexact(A)
  if ndim_of(A) < 2 or shape_of(A)[-1] != shape_of(A)[-2]:
    raise ValueError(f"Expected A to be a (batched) square matrix, got A.shape={shape_of(A)}.")
  if np.dtype(real_dtype(dtype_of(A))) not in _THETA:
    raise TypeError(f"A.dtype={dtype_of(A)} is not supported.")
  if shape_of(A)[-1] == 0:
    return A
  return _expm(A, upper_triangular, max_squarings)


@partial(jit, static_argnums=(1, 2))
def _expm(A, upper_triangular, max_squarings):
  out = _batched_map(lambda x: (_expm_2d(x, upper_triangular, max_squarings),), [A], [2])
  return out[0]


def expm_frechet(A: ArrayLike, E: ArrayLike, *, method: str | None = None,
                 compute_expm: bool = True):
  """The Frechet derivative `L(A, E)` of the matrix exponential at A in direction E.

  Args:
    A, E: `[..., N, N]` of one shape.
    method: accepted and ignored (as in JAX).
    compute_expm: also return `expm(A)`.

  Returns:
    `(expm(A), L(A, E))` or `L(A, E)`.

  Raises:
    ValueError: for non-square or mismatched shapes.

  Algorithm: the block identity `expm([[A, E], [0, A]]) = [[e^A, L(A, E)], [0, e^A]]`
  (Mathias 1996; Higham, "Functions of Matrices", eq. 3.16), through `expm`.
  """
  del method
  A, E = _inexact(A, E)
  if ndim_of(A) < 2 or shape_of(A)[-2] != shape_of(A)[-1]:
    raise ValueError(f"expected A to be a (batched) square matrix, got A.shape={shape_of(A)}")
  if ndim_of(E) < 2 or shape_of(E)[-2] != shape_of(E)[-1]:
    raise ValueError(f"expected E to be a (batched) square matrix, got E.shape={shape_of(E)}")
  if shape_of(A) != shape_of(E):
    raise ValueError(f"expected A and E to be the same shape, got A.shape={shape_of(A)} "
                     f"E.shape={shape_of(E)}")
  n = shape_of(A)[-1]
  big = jnp.concatenate([jnp.concatenate([A, E], axis=-1),
                         jnp.concatenate([jnp.zeros_like(A), A], axis=-1)], axis=-2)
  big = expm(big)
  ea, frechet = big[..., :n, :n], big[..., :n, n:]
  return (ea, frechet) if compute_expm else frechet


def _sqrtm_triu(T):
  """The upper triangular square root U (`U @ U = T`) of upper triangular T (Bjorck and
  Hammarling 1983): `U[i, j] = (T[i, j] - sum_{i<k<j} U[i, k] U[k, j]) / (U[i, i] + U[j, j])`,
  column by column, each from the diagonal up; an entry whose numerator is exactly zero is
  zero (JAX's rule, so singular matrices such as diag(0, 4, 0) have their root)."""
  n = shape_of(T)[-1]
  dt = dtype_of(T)
  diag = jnp.sqrt(jnp.diagonal(T, axis1=-2, axis2=-1))
  U = diag[..., :, None] * jnp.eye(n, dtype=dt)
  ks = jnp.arange(n)

  def i_loop(l, carry):
    j, U = carry
    i = j - 1 - l
    terms = jnp.where((ks > i) & (ks < j), U[..., i, :] * U[..., :, j], jnp.zeros((), dt))
    s = jnp.sum(terms, axis=-1)
    t = T[..., i, j]
    value = jnp.where(t == s, jnp.zeros((), dt), (t - s) / (diag[..., i] + diag[..., j]))
    return j, U.at[..., i, j].set(value)

  def j_loop(j, U):
    return lax.fori_loop(0, j, i_loop, (j, U))[1]

  return lax.fori_loop(0, n, j_loop, U)


def sqrtm(A: ArrayLike, blocksize: int = 1):
  """The principal matrix square root of `A[..., N, N]` (complex result).

  Args:
    blocksize: must be 1 (the blocked variant is not implemented, as in JAX).

  Returns:
    `X[..., N, N]` complex with `X @ X = A`.

  Raises:
    NotImplementedError: for `blocksize > 1`. ValueError: for non-square input.

  Algorithm: Bjorck and Hammarling, "A Schur method for the square root of a matrix"
  (1983): the complex Schur form `A = Z T Z^H`, the triangular root of T, `X = Z U Z^H`.
  CPU only (LAPACK gees); not differentiable (as in JAX).
  """
  if blocksize > 1:
    raise NotImplementedError("Blocked version is not implemented yet.")
  A, = _inexact(A)
  _check_square("sqrtm", A)
  return _sqrtm(A)


@jit
def _sqrtm(A):
  T, Z = schur(A, output="complex")
  return _mm(_mm(Z, _sqrtm_triu(T)), _H(Z))


def funm(A: ArrayLike, func: Callable, disp: bool = True):
  """A matrix function `f(A)` of `A[N, N]`, from the scalar function `func`.

  Args:
    func: maps an array of eigenvalues (complex) elementwise to `f` of them.
    disp: return only `f(A)`; else also an error estimate (SciPy's).

  Returns:
    `F[N, N]` complex, or `(F, err)`.

  Raises:
    ValueError: for input that is not a square matrix.

  Algorithm: Parlett's recurrence on the complex Schur form `A = Z T Z^H` (the real Schur
  form through `rsf2csf`, as SciPy's; Golub and Van Loan, "Matrix Computations", Alg. 9.1.1
  in the 4th ed.): `f(T)`'s superdiagonals follow
  one at a time from `T F - F T = 0`; `F = Z f(T) Z^H`. Requires distinct eigenvalues.
  """
  A = as_array(A)
  if ndim_of(A) != 2 or shape_of(A)[0] != shape_of(A)[1]:
    raise ValueError("expected square array_like input")
  A, = _inexact(A)
  # NB: as SciPy's and JAX's, the real Schur form made complex by `rsf2csf`: a real
  # eigenvalue then has an imaginary part of +0 (a complex Schur form may give -0, the other
  # side of `func`'s branch cut)
  T, Z = rsf2csf(*schur(A))
  ct = dtype_of(T)
  F = jnp.diag(jnp.asarray(func(jnp.diagonal(T))).astype(ct))
  F, minden = _parlett(T, F)
  F = _mm(_mm(Z, F), _H(Z))
  if disp:
    return F
  tol = float(dtypes.finfo(real_dtype(ct)).eps)
  minden = jnp.where(minden == 0, tol, minden)
  err = jnp.where(jnp.any(jnp.isinf(F)), np.inf,
                  jnp.minimum(1, jnp.maximum(tol, (tol / minden) *
                                             jnp.linalg.norm(jnp.triu(T, 1), 1))))
  return F, err


@jit
def _parlett(T, F):
  """f(T) from its diagonal `F` (see `funm`) and the smallest eigenvalue separation."""
  n = shape_of(T)[-1]
  d = jnp.diagonal(T)
  Tu = jnp.triu(T, 1)
  den = d[None, :] - d[:, None]   # T[j, j] - T[i, i] at [i, j]
  safe_den = jnp.where(den == 0, jnp.ones_like(den), den)
  ii = np.arange(n)
  minden = jnp.abs(T[0, 0]) if n else jnp.zeros((), real_dtype(dtype_of(T)))
  for p in range(1, n):
    band = jnp.asarray(ii[None, :] - ii[:, None] == p)
    num = _mm(Tu, F) - _mm(F, Tu)
    F = jnp.where(band, jnp.where(den == 0, num, num / safe_den), F)
    minden = jnp.minimum(minden, jnp.min(jnp.where(band, jnp.abs(den), np.inf)))
  return F, minden


def eigh_tridiagonal(d: ArrayLike, e: ArrayLike, *, eigvals_only: bool = False,
                     select: str = "a", select_range: tuple[float, float] | None = None,
                     tol: float | None = None, key: Any = None):
  """Eigenvalues (ascending) and eigenvectors of the Hermitian tridiagonal matrix with
  diagonal `real(d)[N]`, superdiagonal `e[N-1]` and subdiagonal `conj(e)` (JAX's).

  Args:
    select: 'a' (all) or 'i' (the eigenvalues with indices in `select_range`, inclusive);
      'v' (by value) is not implemented (as in JAX).
    tol: the absolute tolerance of the bisection (default `eps * |T|`).
    key: accepted and unused (JAX's inverse iteration starts from it).

  Returns:
    `w R[K]`, or `(w, v)` with eigenvectors in the columns of `v[N, K]`.

  Raises:
    TypeError: for differing or non-floating dtypes. ValueError: for a bad `select` or
      `select_range`. NotImplementedError: for select='v'.

  Algorithm: eigenvalues by bisection on Sturm counts (Kahan's LDL^T recurrence, as
  LAPACK's stebz), all in parallel, from the Gershgorin interval; eigenvectors from the
  dense tridiagonal matrix's `eigh` (LAPACK syevd/heevd).
  """
  del key
  return _eigh_tridiagonal(as_array(d), as_array(e), eigvals_only, select,
                           None if select_range is None else tuple(select_range),
                           None if tol is None else float(tol))


@partial(jit, static_argnums=(2, 3, 4, 5))
def _eigh_tridiagonal(alpha, beta, eigvals_only, select, select_range, tol):
  if dtype_of(alpha) != dtype_of(beta):
    raise TypeError(f"diagonal and off-diagonal values must have same dtype, got "
                    f"{dtype_of(alpha)} and {dtype_of(beta)}")
  if dtype_of(alpha) not in (dtypes.float32, dtypes.float64, dtypes.complex64,
                             dtypes.complex128):
    raise TypeError(f"Only float32 and float64 inputs are supported as inputs to "
                    f"jax.scipy.linalg.eigh_tridiagonal, got {dtype_of(alpha)} and "
                    f"{dtype_of(beta)}")
  n = shape_of(alpha)[0]
  if n <= 1:
    w = jnp.real(alpha)
    return w if eigvals_only else (w, jnp.eye(n, dtype=dtype_of(alpha)))
  if select == "a":
    targets = np.arange(n, dtype=np.int32)
  elif select == "i":
    if select_range is None:
      raise ValueError("for select='i', select_range must be specified.")
    if select_range[0] > select_range[1]:
      raise ValueError("Got empty index range in select_range.")
    targets = np.arange(select_range[0], select_range[1] + 1, dtype=np.int32)
  elif select == "v":
    raise NotImplementedError("eigh_tridiagonal(..., select='v') is not implemented")
  else:
    raise ValueError("'select must have a value in {'a', 'i', 'v'}.")
  target_idx = targets
  rdt = real_dtype(dtype_of(alpha))
  a = jnp.real(alpha)
  b2 = jnp.real(beta * jnp.conj(beta))
  babs = jnp.sqrt(b2)
  radius = jnp.concatenate([babs[:1], babs[:-1] + babs[1:], babs[-1:]])
  lo_est, hi_est = jnp.min(a - radius), jnp.max(a + radius)
  t_norm = jnp.maximum(jnp.abs(lo_est), jnp.abs(hi_est))
  fi = dtypes.finfo(rdt)
  safemin = max(1 / float(fi.max), (1 + float(fi.eps)) * float(fi.tiny))
  pivmin = safemin * jnp.maximum(1, jnp.max(b2))
  abs_tol = float(fi.eps) * t_norm
  if tol is not None:
    abs_tol = jnp.maximum(tol, abs_tol)
  slack = n * 2.1 * float(fi.eps) * t_norm
  k = targets.shape[0]
  lower = jnp.broadcast_to(lo_est - slack - 4.2 * pivmin, (k,))
  upper = jnp.broadcast_to(hi_est + slack + 2.1 * pivmin, (k,))
  targets = jnp.asarray(targets)

  def sturm_count(x):
    # the number of eigenvalues < x: negative pivots of T - x I = L D L^T
    q = a[0] - x
    q = jnp.where(jnp.abs(q) < pivmin, -pivmin, q)
    count = (q < 0).astype(dtypes.int32)

    def step(carry, ab):
      q, count = carry
      ai, bi2 = ab
      q = (ai - x) - bi2 / q
      q = jnp.where(jnp.abs(q) < pivmin, -pivmin, q)
      return (q, count + (q < 0).astype(dtypes.int32)), None
    (_, count), _ = lax.scan(step, (q, count), (a[1:], b2))
    return count

  def keep_going(c):
    i, lo, hi = c
    return jnp.logical_and(i < fi.nmant + 1, jnp.max(hi - lo) > abs_tol)

  def bisect(c):
    i, lo, hi = c
    mid = (lo + hi) / 2
    cnt = sturm_count(mid)
    return i + 1, jnp.where(cnt <= targets, mid, lo), jnp.where(cnt > targets, mid, hi)
  _, lower, upper = lax.while_loop(keep_going, bisect, (jnp.asarray(0, dtypes.int32), lower,
                                                        upper))
  w = ((lower + upper) / 2).astype(rdt)
  if eigvals_only:
    return w
  dt = dtype_of(alpha)
  # NB: JAX's matrix: `beta` above the diagonal, `conj(beta)` below (the eigenvectors of
  # the other convention are their conjugates); the diagonal is real
  t = (jnp.diag(jnp.real(alpha).astype(dt)) + jnp.diag(beta, 1) + jnp.diag(jnp.conj(beta), -1))
  v, _ = lax_linalg.eigh(t, lower=True)
  return w, v[:, target_idx]


# ---------------------------------------------------------------------------
# Special matrices


def block_diag(*arrs: ArrayLike):
  """The block-diagonal matrix of `arrs` (each at most 2-D: scalars and vectors are single
  rows), in the promoted dtype.

  Raises:
    ValueError: for an argument with more than 2 dimensions.
  """
  if len(arrs) == 0:
    arrs = (jnp.zeros((1, 0)),)
  arrs = [as_array(a) for a in promote_dtypes(*(as_array(a) for a in arrs))]
  for i, a in enumerate(arrs):
    if ndim_of(a) > 2:
      raise ValueError(f"Arguments to jax.scipy.linalg.block_diag must have at most 2 "
                       f"dimensions, got {a} at argument {i}.")
  arrs = [jnp.atleast_2d(a) for a in arrs]
  dt = dtype_of(arrs[0])
  total = sum(shape_of(a)[1] for a in arrs)
  rows, col = [], 0
  for a in arrs:
    c = shape_of(a)[1]
    rows.append(lax.pad(a, np.zeros((), dt)[()], [(0, 0, 0), (col, total - c - col, 0)]))
    col += c
  return jnp.concatenate(rows, axis=0)


def toeplitz(c: ArrayLike, r: ArrayLike | None = None):
  """The Toeplitz matrix with first column `c` and first row `r` (`r[0]` is ignored;
  default `conj(c)`): `T[i, j] = c[i - j]` for i >= j, `r[j - i]` otherwise.

  Args:
    c: `[..., M]`; r: `[..., N]` (batch dims broadcast).

  Returns:
    `[..., M, N]` in the promoted dtype.
  """
  c = jnp.atleast_1d(as_array(c))
  r = jnp.conj(c) if r is None else jnp.atleast_1d(as_array(r))
  c, r = (as_array(v) for v in promote_dtypes(c, r))
  m, n = shape_of(c)[-1], shape_of(r)[-1]
  batch = jnp.broadcast_shapes(shape_of(c)[:-1], shape_of(r)[:-1])
  c = jnp.broadcast_to(c, (*batch, m))
  r = jnp.broadcast_to(r, (*batch, n))
  # the diagonals' values, from the bottom-left corner: c reversed, then r[1:]
  vals = jnp.concatenate([jnp.flip(c, -1), r[..., 1:]], axis=-1)
  idx = (m - 1) - np.arange(m)[:, None] + np.arange(n)[None, :]
  return vals[..., idx]


def hankel(c: ArrayLike, r: ArrayLike | None = None):
  """The Hankel matrix with first column `c` and last row `r` (`r[0]` is ignored; default
  zeros): `H[i, j] = c[i + j]` for `i + j < M`, else `r[i + j - M + 1]`.

  Args:
    c: `[..., M]`; r: `[..., N]` (default `zeros(M)`).

  Returns:
    `[..., M, N]`.

  Raises:
    ValueError: for scalar c or r.
  """
  c = as_array(c)
  if ndim_of(c) < 1:
    raise ValueError("hankel: c must be at least 1-dimensional, got a scalar.")
  if r is None:
    r = jnp.zeros_like(c)
  r = as_array(r)
  if ndim_of(r) < 1:
    raise ValueError("hankel: r must be at least 1-dimensional, got a scalar.")
  c, r = (as_array(v) for v in promote_dtypes(c, r))
  m, n = shape_of(c)[-1], shape_of(r)[-1]
  batch = jnp.broadcast_shapes(shape_of(c)[:-1], shape_of(r)[:-1])
  vals = jnp.concatenate([jnp.broadcast_to(c, (*batch, m)),
                          jnp.broadcast_to(r, (*batch, n))[..., 1:]], axis=-1)
  idx = np.arange(m)[:, None] + np.arange(n)[None, :]
  return vals[..., idx]


def circulant(c: ArrayLike):
  """The circulant matrix with first column `c[..., N]`: `C[i, j] = c[(i - j) mod N]`."""
  c = jnp.atleast_1d(as_array(c))
  n = shape_of(c)[-1]
  idx = (np.arange(n)[:, None] - np.arange(n)[None, :]) % n
  return c[..., idx]


def leslie(f: ArrayLike, s: ArrayLike):
  """The Leslie matrix: first row the fecundities `f[..., N]` (N >= 2), subdiagonal the
  survival rates `s[..., N-1]`; `[..., N, N]` of f's and s's promoted dtype (integers stay
  integers, as JAX's). Batch dimensions broadcast (JAX's vectorized definition).

  Raises:
    ValueError: for N < 2 or len(s) != len(f) - 1 (JAX's messages).
  """
  check_arraylike("leslie", f, s)
  f, s = jnp.atleast_1d(as_array(f)), jnp.atleast_1d(as_array(s))
  n = shape_of(f)[-1]
  if n < 2:
    raise ValueError(f"The length of f along the last axis must be at least 2; got shape "
                     f"{shape_of(f)}.")
  if shape_of(s)[-1] != n - 1:
    raise ValueError(f"Incorrect lengths for f and s. The length of s along the last axis "
                     f"must be one less than the length of f; got f shape {shape_of(f)} and "
                     f"s shape {shape_of(s)}.")
  f, s = promote_dtypes(f, s)
  batch = jnp.broadcast_shapes(shape_of(f)[:-1], shape_of(s)[:-1])
  f = jnp.broadcast_to(f, (*batch, n))
  s = jnp.broadcast_to(s, (*batch, n - 1))
  sub = s[..., :, None] * jnp.broadcast_to(jnp.eye(n - 1, n, dtype=dtype_of(s)),
                                           (*batch, n - 1, n))
  return jnp.concatenate([f[..., None, :], sub], axis=-2)


def companion(a: ArrayLike):
  """The companion matrix of the polynomial with coefficients `a[..., N]` (highest degree
  first, `a[0] != 0`): first row `-a[1:] / a[0]`, ones on the subdiagonal; float dtype.

  Raises:
    ValueError: for fewer than two coefficients.
  """
  a, = _inexact(jnp.atleast_1d(as_array(a)))
  n = shape_of(a)[-1]
  if n < 2:
    raise ValueError("The length of `a` along the last axis must be at least 2.")
  first = -a[..., 1:] / a[..., :1]
  sub = jnp.broadcast_to(jnp.eye(n - 2, n - 1, dtype=dtype_of(a)),
                         (*shape_of(a)[:-1], n - 2, n - 1))
  return jnp.concatenate([first[..., None, :], sub], axis=-2)


def fiedler(a: ArrayLike):
  """The symmetric Fiedler matrix `F[i, j] = |a[i] - a[j]|` of `a[..., N]`."""
  a = jnp.atleast_1d(as_array(a))
  return jnp.abs(a[..., :, None] - a[..., None, :])


def fiedler_companion(a: ArrayLike):
  """The Fiedler companion matrix of the polynomial with coefficients `a[..., N]` (highest
  degree first): a pentadiagonal matrix with the same eigenvalues as `companion(a)`
  (Fiedler, "A note on companion matrices", 2003; the construction of SciPy's
  `fiedler_companion`); float dtype.

  Raises:
    ValueError: for no coefficients (one gives a `[..., 0, 0]` matrix, as JAX's).
  """
  a, = _inexact(jnp.atleast_1d(as_array(a)))
  n = shape_of(a)[-1]
  if n == 0:
    raise ValueError(f"fiedler_companion requires the last axis of 'a' to have nonzero "
                     f"length, but got an array of shape {shape_of(a)}.")
  m = n - 1
  dt = dtype_of(a)
  batch = shape_of(a)[:-1]
  if m == 0:
    return jnp.zeros((*batch, 0, 0), dt)
  a = a / a[..., :1]
  if m == 1:
    return -a[..., 1:][..., None]
  c = a[..., 1:]

  # Fiedler's factors, multiplied densely: F_k = diag(I_{k-1}, [[-c_k, 1], [1, 0]], I) for
  # k < m and F_m = diag(I_{m-1}, -c_m); the result is (F_1 F_3 ...)(F_2 F_4 ...).
  def factor(k):
    f = jnp.broadcast_to(jnp.eye(m, dtype=dt), (*batch, m, m))
    if k == m:
      mask = np.zeros((m, m), bool)
      mask[m - 1, m - 1] = True
      return jnp.where(jnp.asarray(mask), -c[..., m - 1][..., None, None], f)
    blk = np.zeros((m, m), bool)
    blk[k - 1, k - 1] = True
    f = jnp.where(jnp.asarray(blk), -c[..., k - 1][..., None, None], f)
    ones = np.zeros((m, m), bool)
    ones[k - 1, k] = ones[k, k - 1] = True
    zero = np.zeros((m, m), bool)
    zero[k, k] = True
    f = jnp.where(jnp.asarray(ones), jnp.ones((), dt), f)
    return jnp.where(jnp.asarray(zero), jnp.zeros((), dt), f)
  odd = jnp.broadcast_to(jnp.eye(m, dtype=dt), (*batch, m, m))
  even = odd
  for k in range(1, m + 1):
    if k % 2 == 1:
      odd = _mm(odd, factor(k))
    else:
      even = _mm(even, factor(k))
  return _mm(odd, even)


def convolution_matrix(a: ArrayLike, n: int, mode: str = "full"):
  """The matrix `A` with `A @ v == convolve(a, v, mode)` for `v[n]`.

  Args:
    a: `[..., M]` (M >= 1); n: the length of v (positive); mode: 'full' (`M + n - 1`
      rows), 'same' (`max(M, n)`) or 'valid' (`max(M, n) - min(M, n) + 1`).

  Returns:
    `[..., rows, n]` of a's dtype.

  Raises:
    ValueError: for a bad n, mode or a.
  """
  n = operator.index(n)
  if n <= 0:
    raise ValueError(f"n must be a positive integer; got {n}.")
  check_arraylike("convolution_matrix", a)
  a = as_array(a)
  if ndim_of(a) == 0:
    raise ValueError("convolution_matrix: a must be at least 1-dimensional, got a scalar.")
  if shape_of(a)[-1] < 1:
    raise ValueError(f"len(a) must be at least 1; got shape {shape_of(a)}.")
  if mode not in ("full", "same", "valid"):
    raise ValueError(f"mode must be one of 'full', 'valid', 'same'; got {mode!r}.")
  m = shape_of(a)[-1]
  full = toeplitz(jnp.concatenate([a, jnp.zeros((*shape_of(a)[:-1], n - 1), dtype_of(a))],
                                  axis=-1),
                  jnp.zeros((*shape_of(a)[:-1], n), dtype_of(a)))
  if mode == "full":
    return full
  if mode == "same":
    start = (min(n, m) - 1) // 2
    return full[..., start:start + max(m, n), :]
  start = min(m, n) - 1
  return full[..., start:start + max(m, n) - min(m, n) + 1, :]


def hilbert(n: int):
  """The Hilbert matrix `H[i, j] = 1 / (i + j + 1)`, `[n, n]`, default float dtype."""
  i = np.arange(n)
  return jnp.asarray(1.0 / (i[:, None] + i[None, :] + 1), dtypes.default_float_dtype())


def _binom(n, k):
  return math.comb(int(n), int(k))


def invhilbert(n: int):
  """The inverse of `hilbert(n)` (exact integers, rounded to the default float dtype):
  `(-1)^(i+j) (i+j+1) C(n+i, n-j-1) C(n+j, n-i-1) C(i+j, i)^2`."""
  out = np.zeros((n, n), np.float64)
  for i in range(n):
    for j in range(n):
      out[i, j] = ((-1) ** (i + j) * (i + j + 1) * _binom(n + i, n - j - 1)
                   * _binom(n + j, n - i - 1) * _binom(i + j, i) ** 2)
  return jnp.asarray(out, dtypes.default_float_dtype())


def pascal(n: int, kind: str | None = None):
  """The Pascal matrix `[n, n]`: 'symmetric' (default, `C(i + j, i)`), 'lower'
  (`C(i, j)`) or 'upper' (its transpose); default float dtype.

  Raises:
    ValueError: for another kind.
  """
  valid = ("symmetric", "lower", "upper")
  kind = "symmetric" if kind is None else kind
  if kind not in valid:
    raise ValueError(f"Expected kind to be on of: {valid}; got {kind}")
  lo = np.array([[_binom(i, j) for j in range(n)] for i in range(n)], np.float64).reshape(n, n)
  out = {"lower": lo, "upper": lo.T, "symmetric": lo @ lo.T}[kind]
  return jnp.asarray(out, dtypes.default_float_dtype())


def invpascal(n: int, kind: str | None = None):
  """The inverse of `pascal(n, kind)` (exact integers, in the default float dtype).

  Raises:
    ValueError: for another kind.
  """
  valid = ("symmetric", "lower", "upper")
  kind = "symmetric" if kind is None else kind
  if kind not in valid:
    raise ValueError(f"Expected kind to be one of: {valid}; got {kind}")
  lo_inv = np.array([[(-1) ** (i - j) * _binom(i, j) for j in range(n)] for i in range(n)],
                    np.float64).reshape(n, n)
  out = {"lower": lo_inv, "upper": lo_inv.T, "symmetric": lo_inv.T @ lo_inv}[kind]
  return jnp.asarray(out, dtypes.default_float_dtype())


def helmert(n: int, full: bool = False):
  """The Helmert matrix: `[n - 1, n]` (rows orthonormal and orthogonal to ones), or
  `[n, n]` with the first row `1 / sqrt(n)` when `full`; default float dtype.

  Raises:
    ValueError: for n < 1 (JAX's message).
  """
  if n < 1:
    raise ValueError(f"n must be a positive integer; got {n}.")
  out = np.zeros((n, n), np.float64)
  if n:
    out[0] = 1 / np.sqrt(n)
  for k in range(1, n):
    d = np.sqrt(k * (k + 1))
    out[k, :k] = 1 / d
    out[k, k] = -k / d
  return jnp.asarray(out if full else out[1:], dtypes.default_float_dtype())


def hadamard(n: int, dtype: Any = int):
  """The Hadamard matrix `[n, n]` (Sylvester's construction) for n a power of 2.

  Raises:
    ValueError: if n is not a power of 2 (or is < 1).
  """
  if n < 1 or not math.log2(n).is_integer():
    raise ValueError(f"n must be a positive power of 2; got {n}.")
  n = int(n)
  h = np.ones((1, 1), np.int64)
  while h.shape[0] < n:
    h = np.block([[h, h], [h, -h]])
  return jnp.asarray(h, dtype)


@jit(static_argnames=("n", "scale", "dtype"))   # NB: as JAX's: one program (its last bits)
def dft(n: int, scale: str | None = None, *, dtype: Any = None):
  """The discrete Fourier transform matrix `W[j, k] = exp(-2 pi i j k / n)`, `[n, n]`.

  Args:
    scale: None, 'sqrtn' (divide by sqrt(n)) or 'n' (divide by n).
    dtype: a complex dtype (default: complex64, complex128 with x64).

  Raises:
    ValueError: for another scale or a non-complex dtype.
  """
  if scale is not None and scale not in ("sqrtn", "n"):
    raise ValueError(f"scale must be None, 'sqrtn', or 'n'; got {scale!r}.")
  if dtype is None:
    dtype = _complex_dtype(dtypes.default_float_dtype())
  else:
    dtype = dtypes.check_user_dtype(dtype, "dft")
    if not dtypes.is_complex(dtype):
      raise ValueError(f"dtype must be a complex floating-point type; got {dtype}.")
  # NB: computed on the device in `dtype`, in JAX's order of operations (the last bits and
  # the signs of zero parts are JAX's)
  a = jnp.arange(n, dtype=dtype)
  w = jnp.exp(-2j * np.pi * a[:, None] * a[None, :] / n)
  if scale == "sqrtn":
    w = w / jnp.sqrt(n)
  elif scale == "n":
    w = w / n
  return w
