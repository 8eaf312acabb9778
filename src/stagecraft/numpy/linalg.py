"""`stagecraft.numpy.linalg`: numpy.linalg's API (as JAX's numpy.linalg) on the decomposition
primitives of `stagecraft.lax.linalg` (LAPACK on CPU).

Inputs promote to an inexact dtype (integers to float32); every function works on the
trailing two axes with leading batch axes. As in JAX, failures do not raise: a matrix that is
singular (`inv`, `solve`) or not positive definite (`cholesky`) gives inf/NaN values."""
from __future__ import annotations

import operator
from functools import reduce
from typing import Any, NamedTuple, Sequence

import numpy as np

from stagecraft import dtypes, lax
from stagecraft.lax import linalg as lax_linalg
from stagecraft.numpy import reductions, ufuncs
from stagecraft.numpy.array_constructors import array, asarray
from stagecraft.numpy.array_creation import eye, ones, zeros
from stagecraft.numpy.contractions import cross, matmul, outer, tensordot, vecdot
from stagecraft.numpy.indexing import take_along_axis
from stagecraft.numpy.lax_numpy import astype, trace
from stagecraft.numpy.manipulation import (broadcast_shapes, broadcast_to, diagonal, expand_dims,
                                           matrix_transpose, moveaxis, ravel, reshape, squeeze)
from stagecraft.numpy.ufuncs import (absolute, add, conjugate, divide, equal, exp, greater,
                                     greater_equal, isnan, less, log, logical_and, logical_not,
                                     multiply, not_equal, power, real, remainder, sqrt, subtract,
                                     where)
from stagecraft.numpy.util import (ArrayLike, as_array, canonicalize_axis, const, dtype_of, ndim_of,
                                   promote_dtypes_inexact, real_dtype, shape_of)

__all__ = ["cholesky", "det", "slogdet", "inv", "solve", "qr", "eigh", "eigvalsh", "svd",
           "svdvals", "norm", "vector_norm", "matrix_norm", "matrix_rank", "pinv", "lstsq",
           "matrix_power", "multi_dot", "cond", "cross", "matmul", "outer", "tensordot",
           "vecdot", "matrix_transpose", "trace", "diagonal", "EighResult", "QRResult",
           "SlogdetResult", "SVDResult", "eig", "eigvals", "EigResult"]


class EigResult(NamedTuple):
  eigenvalues: Any
  eigenvectors: Any


class EighResult(NamedTuple):
  eigenvalues: Any
  eigenvectors: Any


class QRResult(NamedTuple):
  Q: Any
  R: Any


class SlogdetResult(NamedTuple):
  sign: Any
  logabsdet: Any


class SVDResult(NamedTuple):
  U: Any
  S: Any
  Vh: Any


def _inexact(name, a):
  a, = promote_dtypes_inexact(as_array(a))
  return as_array(a)


def _square(name, a):
  s = shape_of(a)
  if len(s) < 2 or s[-1] != s[-2]:
    raise ValueError(f"Argument to {name}() must have shape [..., n, n], got {s}")


def _H(x):
  return conjugate(matrix_transpose(x))


def cholesky(a: ArrayLike, *, upper: bool = False, symmetrize_input: bool = True):
  """The Cholesky factor of Hermitian positive-definite `a`: lower `L` with `a = L @ L^H`
  (upper `U = L^H` with `upper`).

  Args:
    a: `[..., n, n]`.
    symmetrize_input: use `(a + a^H) / 2`.

  Returns:
    `[..., n, n]`; NaN for matrices that are not positive definite.

  Raises:
    ValueError: for non-square or rank < 2 input.

  Examples:
    >>> from stagecraft import numpy as jnp
    >>> jnp.linalg.cholesky(jnp.array([[4., 2.], [2., 5.]]))
    Array([[2., 0.],
           [1., 2.]], dtype=float32)
  """
  a = _inexact("cholesky", a)
  _square("cholesky", a)
  L = lax_linalg.cholesky(a, symmetrize_input=symmetrize_input)
  return _H(L) if upper else L


def _lu_solve(lu, perm, b):
  """Solves `a x = b` from `a[perm] = L U`: b `[..., m, k]`."""
  nd = ndim_of(b)
  idx = lax.broadcast_in_dim(perm, (*shape_of(perm), 1), tuple(range(ndim_of(perm))))
  pb = take_along_axis(b, idx, axis=nd - 2, mode="clip")
  y = lax_linalg.triangular_solve(lu, pb, left_side=True, lower=True, unit_diagonal=True)
  return lax_linalg.triangular_solve(lu, y, left_side=True, lower=False)


def solve(a: ArrayLike, b: ArrayLike):
  """Solves `a @ x = b`.

  Args:
    a: `[..., m, m]`.
    b: `[m]` (a vector), or `[..., m, n]`; batch axes broadcast against a's.

  Returns:
    `x` shaped like the broadcast `b`; inf/NaN for singular `a`.

  Raises:
    ValueError: for a of rank < 2 or shapes that do not fit.

  Algorithm: LU with partial pivoting (LAPACK getrf), then two triangular solves.
  """
  a, b = (as_array(v) for v in promote_dtypes_inexact(as_array(a), as_array(b)))
  if ndim_of(a) < 2:
    raise ValueError(f"left hand array must be at least two dimensional; got a.shape="
                     f"{shape_of(a)}")
  _square("solve", a)
  vec = ndim_of(b) == 1
  if (not vec and ndim_of(b) > 1 and ndim_of(a) == ndim_of(b) + 1
      and shape_of(a)[-1] == shape_of(b)[-1] and shape_of(a)[-1] != shape_of(b)[-2]):
    raise ValueError(f"Invalid shapes for solve: {shape_of(a)}, {shape_of(b)}. Use "
                     f"solve(a, b[..., None]).squeeze(-1) for a batched 1-D solve.")
  if vec:
    b = expand_dims(b, -1)
  m = shape_of(a)[-1]
  if shape_of(b)[-2] != m:
    raise ValueError(f"solve: a {shape_of(a)} and b {shape_of(b)} do not fit (b needs {m} rows).")
  batch = broadcast_shapes(shape_of(a)[:-2], shape_of(b)[:-2])
  a = broadcast_to(a, (*batch, m, m))
  b = broadcast_to(b, (*batch, *shape_of(b)[-2:]))
  lu, _, perm = lax_linalg.lu(a)
  x = _lu_solve(lu, perm, b)
  return squeeze(x, -1) if vec else x


def inv(a: ArrayLike):
  """The inverse of square `a` (`[..., n, n]`); inf/NaN for singular matrices.

  Raises:
    ValueError: for non-square input.
  """
  a = as_array(a)
  if ndim_of(a) < 2 or shape_of(a)[-1] != shape_of(a)[-2]:
    raise ValueError(f"Argument to inv must have shape [..., n, n], got {shape_of(a)}.")
  a = _inexact("inv", a)
  n = shape_of(a)[-1]
  return solve(a, broadcast_to(eye(n, dtype=dtype_of(a)), shape_of(a)))


def _slogdet_lu(a):
  dt = dtype_of(a)
  n = shape_of(a)[-1]
  lu, piv, _ = lax_linalg.lu(a)
  diag = diagonal(lu, axis1=-2, axis2=-1)
  is_zero = reductions.any(equal(diag, const(diag, 0)), axis=-1)
  parity = reductions.count_nonzero(not_equal(piv, lax.iota(dtypes.int32, n)), axis=-1)
  if dtypes.is_complex(dt):
    sign = reductions.prod(divide(diag, astype(absolute(diag), dt)), axis=-1)
  else:
    sign = array(1, dtype=dt)
    parity = add(parity, reductions.count_nonzero(less(diag, 0), axis=-1))
  flip = astype(subtract(1, multiply(2, remainder(parity, 2))), dt)
  sign = where(is_zero, zeros((), dt), multiply(sign, flip))
  logdet = where(is_zero, array(-np.inf, real_dtype(dt)),
                     reductions.sum(log(absolute(diag)), axis=-1))
  return sign, logdet


def _slogdet_small(a):
  dt = dtype_of(a)
  d = a[..., 0, 0] if shape_of(a)[-1] == 1 else subtract(
      multiply(a[..., 0, 0], a[..., 1, 1]), multiply(a[..., 0, 1], a[..., 1, 0]))
  absd = absolute(d)
  sign = divide(d, astype(absd, dt)) if dtypes.is_complex(dt) else ufuncs.sign(d)
  sign = where(equal(absd, 0), zeros((), dt), sign)
  return sign, log(absd)


def slogdet(a: ArrayLike, *, method: str | None = None):
  """Sign and log of the absolute value of the determinant: `det = sign * exp(logabsdet)`.

  Returns:
    `SlogdetResult(sign T[...], logabsdet R[...])` (R real); `(0, -inf)` for singular a.

  Raises:
    ValueError: for non-square input or an unknown method (only 'lu').
  """
  a = _inexact("slogdet", a)
  _square("slogdet", a)
  if method not in (None, "lu"):
    raise ValueError(f"Unknown slogdet method '{method}'. Supported methods are 'lu' "
                     f"(`None`).")
  n = shape_of(a)[-1]
  if n == 0:
    b = shape_of(a)[:-2]
    return SlogdetResult(ones(b, dtype_of(a)), zeros(b, real_dtype(dtype_of(a))))
  return SlogdetResult(*(_slogdet_small(a) if n <= 2 else _slogdet_lu(a)))


def det(a: ArrayLike):
  """The determinant of `[..., n, n]` (closed forms for n <= 3, else from the LU factors).

  Raises:
    ValueError: for non-square input.
  """
  a = _inexact("det", a)
  s = shape_of(a)
  if len(s) < 2 or s[-1] != s[-2]:
    raise ValueError(f"Argument to _det() must have shape [..., n, n], got {s}")
  n = s[-1]
  m = multiply
  if n == 2:
    return subtract(m(a[..., 0, 0], a[..., 1, 1]), m(a[..., 0, 1], a[..., 1, 0]))
  if n == 3:
    terms = [m(m(a[..., 0, 0], a[..., 1, 1]), a[..., 2, 2]),
             m(m(a[..., 0, 1], a[..., 1, 2]), a[..., 2, 0]),
             m(m(a[..., 0, 2], a[..., 1, 0]), a[..., 2, 1])]
    neg = [m(m(a[..., 0, 2], a[..., 1, 1]), a[..., 2, 0]),
           m(m(a[..., 0, 0], a[..., 1, 2]), a[..., 2, 1]),
           m(m(a[..., 0, 1], a[..., 1, 0]), a[..., 2, 2])]
    out = add(add(terms[0], terms[1]), terms[2])
    return subtract(subtract(subtract(out, neg[0]), neg[1]), neg[2])
  sign, logdet = slogdet(a)
  return multiply(sign, astype(exp(logdet), dtype_of(sign)))


def qr(a: ArrayLike, mode: str = "reduced"):
  """QR decomposition `a = Q @ R` of `[..., m, n]`.

  Args:
    mode: 'reduced' (Q `[..., m, k]`, R `[..., k, n]`, k = min(m, n)), 'complete'
      (Q `[..., m, m]`, R `[..., m, n]`), 'r' (R only) or 'raw' (LAPACK's `(h^T, tau)`).

  Returns:
    `QRResult(Q, R)`, R alone for 'r'.

  Raises:
    ValueError: for an unknown mode.
  """
  a = _inexact("qr", a)
  if mode == "raw":
    h, taus = lax_linalg.geqrf(a)
    return QRResult(matrix_transpose(h), taus)
  if mode in ("reduced", "r", "full"):
    full = False
  elif mode == "complete":
    full = True
  else:
    raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
  q, r = lax_linalg.qr(a, full_matrices=full)
  return r if mode == "r" else QRResult(q, r)


def eigh(a: ArrayLike, UPLO: str | None = None, symmetrize_input: bool = True):
  """Eigenvalues (ascending) and eigenvectors (columns) of Hermitian `[..., n, n]`.

  Returns:
    `EighResult(eigenvalues R[..., n], eigenvectors T[..., n, n])`.

  Raises:
    ValueError: for a bad `UPLO` or non-square input.
  """
  if UPLO is None or UPLO == "L":
    lower = True
  elif UPLO == "U":
    lower = False
  else:
    raise ValueError(f"UPLO must be one of None, 'L', or 'U', got {UPLO}")
  a = _inexact("eigh", a)
  _square("eigh", a)
  v, w = lax_linalg.eigh(a, lower=lower, symmetrize_input=symmetrize_input)
  return EighResult(w, v)


def eig(a: ArrayLike):
  """Eigenvalues and right eigenvectors of a general square matrix: `a @ v = v * w`.

  Args:
    a: `[..., n, n]` (integers promote to float32, as all inexact promotion).

  Returns:
    `EigResult(eigenvalues C[..., n], eigenvectors C[..., n, n])`, C the complex dtype of
    `a`'s (complex64 for float32); each eigenvector (column) has unit 2-norm with its
    largest-magnitude component real. The order is LAPACK's (not sorted). NaN where LAPACK
    fails to converge.

  Raises:
    ValueError: for non-square or rank < 2 input.
    NotImplementedError: on platforms other than CPU, and when differentiating the
      eigenvectors (differentiate `eigvals` instead, as in JAX).

  Algorithm: LAPACK geev (Hessenberg reduction and the shifted QR algorithm) through
  `lax.linalg.eig`.

  Examples:
    >>> from stagecraft import numpy as jnp
    >>> w, v = jnp.linalg.eig(jnp.array([[2., 0.], [0., -1.]]))
    >>> w
    Array([ 2.+0.j, -1.+0.j], dtype=complex64)
  """
  a = _inexact("eig", a)
  _square("eig", a)
  w, v = lax_linalg.eig(a, compute_left_eigenvectors=False)
  return EigResult(w, v)


def eigvals(a: ArrayLike):
  """The eigenvalues `C[..., n]` of general square `a[..., n, n]` (see `eig`); differentiable
  (`dw = diag(V^-1 da V)`).

  Raises:
    ValueError: for non-square or rank < 2 input.
  """
  a = _inexact("eigvals", a)
  _square("eigvals", a)
  return lax_linalg.eig(a, compute_left_eigenvectors=False,
                        compute_right_eigenvectors=False)[0]


def eigvalsh(a: ArrayLike, UPLO: str | None = "L", *, symmetrize_input: bool = True):
  """The eigenvalues (ascending) of Hermitian `a`."""
  return eigh(a, UPLO, symmetrize_input).eigenvalues


def svd(a: ArrayLike, full_matrices: bool = True, compute_uv: bool = True,
        hermitian: bool = False, subset_by_index: tuple[int, int] | None = None):
  """Singular value decomposition `a = U @ diag(S) @ Vh` of `[..., m, n]`.

  Args:
    full_matrices: U `[..., m, m]`, Vh `[..., n, n]` (else `[..., m, k]`, `[..., k, n]`).
    compute_uv: return `SVDResult(U, S, Vh)`; else only S.
    hermitian: `a` is Hermitian: use its eigendecomposition.

  Returns:
    `SVDResult(U, S, Vh)` or `S` (`R[..., k]`, descending).
  """
  a = _inexact("svd", a)
  if hermitian:
    v, w = lax_linalg.eigh(a)
    s = absolute(w)
    if not compute_uv:
      return lax.rev(lax.sort(s, dimension=-1), (ndim_of(s) - 1,))
    sgn = ufuncs.sign(w)
    idxs = lax.broadcasted_iota(dtypes.int32, shape_of(s), ndim_of(s) - 1)
    s, idxs, sgn = lax.sort((s, idxs, sgn), dimension=-1, num_keys=1)
    s, idxs, sgn = (lax.rev(t, (ndim_of(s) - 1,)) for t in (s, idxs, sgn))
    u = take_along_axis(v, expand_dims(idxs, -2), axis=ndim_of(v) - 1, mode="clip")
    vh = _H(multiply(u, astype(expand_dims(sgn, -2), dtype_of(u))))
    return SVDResult(u, s, vh)
  if compute_uv:
    u, s, vt = lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=True,
                              subset_by_index=subset_by_index)
    return SVDResult(u, s, vt)
  return lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=False,
                        subset_by_index=subset_by_index)


def svdvals(x: ArrayLike, /):
  """The singular values of `[..., m, n]`, descending."""
  return svd(x, compute_uv=False)


def _sq_sum(x, axis, keepdims):
  return sqrt(reductions.sum(real(multiply(x, conjugate(x))), axis=axis,
                                 keepdims=keepdims))


def vector_norm(x: ArrayLike, /, *, axis: int | tuple[int, ...] | None = None,
                keepdims: bool = False, ord: int | float | str = 2):
  """The vector p-norm over `axis` (all axes when None): `ord` 2 (default), 1, inf, -inf, 0
  (count of nonzeros) or any real p (`sum(|x|**p)**(1/p)`).

  Raises:
    ValueError: for a string `ord`.
  """
  x = _inexact("vector_norm", x)
  if ord is None or ord == 2:
    return _sq_sum(x, axis, keepdims)
  if isinstance(ord, str):
    msg = f"Invalid order '{ord}' for vector norm."
    if ord in ("inf", "-inf"):
      msg += f" Use '{'-' if ord[0] == '-' else ''}stagecraft.numpy.inf' instead."
    raise ValueError(msg)
  if ord == np.inf:
    return reductions.max(absolute(x), axis=axis, keepdims=keepdims, initial=0)
  if ord == -np.inf:
    return reductions.min(absolute(x), axis=axis, keepdims=keepdims)
  if ord == 0:
    return reductions.sum(not_equal(x, 0), dtype=real_dtype(dtype_of(x)), axis=axis,
                          keepdims=keepdims)
  if ord == 1:
    return reductions.sum(absolute(x), axis=axis, keepdims=keepdims)
  ax = absolute(x)
  p = np.asarray(ord, dtype_of(ax))[()]
  out = reductions.sum(power(ax, p), axis=axis, keepdims=keepdims)
  return power(out, np.asarray(1.0 / float(ord), dtype_of(ax))[()])


def norm(x: ArrayLike, ord: int | float | str | None = None,
         axis: None | tuple[int, ...] | int = None, keepdims: bool = False):
  """Vector or matrix norm, as numpy.linalg.norm.

  Args:
    x: array (integers promote to float32).
    ord: vectors (one axis): see `vector_norm`; matrices (two axes): None/'fro' (Frobenius),
      'nuc' (sum of singular values), 1/-1 (max/min column sum), inf/-inf (max/min row
      sum), 2/-2 (largest/smallest singular value).
    axis: None (all of x: the 2-norm of the flattened array if `ord` is None, else a vector
      norm for 1-D and a matrix norm for 2-D x), an int, or a pair of ints.
    keepdims: keep the reduced axes with size 1.

  Returns:
    The norm(s), real dtype.

  Raises:
    ValueError: for an invalid `ord` or number of axes.
  """
  x = _inexact("norm", x)
  nd = ndim_of(x)
  if axis is None:
    if ord is None:
      return _sq_sum(x, None, keepdims)
    axis = tuple(range(nd))
  elif isinstance(axis, tuple):
    axis = tuple(canonicalize_axis(a, nd, "norm") for a in axis)
  else:
    axis = (canonicalize_axis(axis, nd, "norm"),)
  if len(axis) == 1:
    return vector_norm(x, ord=2 if ord is None else ord, axis=axis, keepdims=keepdims)
  if len(axis) != 2:
    raise ValueError(f"Improper number of axes for norm: axis={axis}. Pass one axis to "
                     f"compute a vector-norm, or two axes to compute a matrix-norm.")
  row, col = axis
  if ord is None or ord in ("f", "fro"):
    return _sq_sum(x, axis, keepdims)
  if ord in (1, -1, np.inf, -np.inf):
    red = reductions.max if ord in (1, np.inf) else reductions.min
    over, then = (row, col) if ord in (1, -1) else (col, row)
    if not keepdims and then > over:
      then -= 1
    kw = {"initial": 0} if red is reductions.max else {}
    return red(reductions.sum(absolute(x), axis=over, keepdims=keepdims), axis=then,
               keepdims=keepdims, **kw)
  if ord in ("nuc", 2, -2):
    s = svd(moveaxis(x, axis, (-2, -1)), compute_uv=False)
    if ord == 2:
      y = reductions.max(s, axis=-1, initial=0)
    elif ord == -2:
      y = reductions.min(s, axis=-1)
    else:
      y = reductions.sum(s, axis=-1)
    return expand_dims(y, axis) if keepdims else y
  raise ValueError(f"Invalid order '{ord}' for matrix norm.")


def matrix_norm(x: ArrayLike, /, *, keepdims: bool = False, ord: str | int = "fro"):
  """The matrix norm over the last two axes (see `norm`)."""
  return norm(x, ord=ord, keepdims=keepdims, axis=(-2, -1))


def matrix_rank(M: ArrayLike, rtol: ArrayLike | None = None, *, hermitian: bool = False,
                tol: ArrayLike | None = None):
  """The number of singular values above `rtol * max(s)` (default rtol:
  `max(m, n) * eps`); int32."""
  if tol is not None:
    if rtol is not None:
      raise ValueError("matrix_rank: only one of tol or rtol may be specified.")
    rtol = tol
  M = _inexact("matrix_rank", M)
  if ndim_of(M) < 2:
    return astype(reductions.any(not_equal(M, 0)), dtypes.int32)
  S = svd(M, full_matrices=False, compute_uv=False, hermitian=hermitian)
  if rtol is None:
    thr = multiply(reductions.max(S, axis=-1),
                       float(max(shape_of(M)[-2:]) * dtypes.finfo(dtype_of(S)).eps))
  else:
    thr = as_array(rtol)
  thr = expand_dims(thr, ndim_of(thr))
  return reductions.sum(greater(S, thr), axis=-1)


def pinv(a: ArrayLike, rtol: ArrayLike | None = None, hermitian: bool = False, *,
         rcond: ArrayLike | None = None):
  """The Moore-Penrose pseudo-inverse `[..., n, m]` of `[..., m, n]` (via the SVD; singular
  values below `rtol * max(s)` are dropped; default rtol `10 * max(m, n) * eps`)."""
  if rcond is not None:
    if rtol is not None:
      raise ValueError("pinv: only one of rtol and rcond may be specified.")
    rtol = rcond
  arr = _inexact("pinv", a)
  m, n = shape_of(arr)[-2:]
  if m == 0 or n == 0:
    return zeros((*shape_of(arr)[:-2], n, m), dtype_of(arr))
  arr = conjugate(arr)
  if rtol is None:
    rtol = 10.0 * max(m, n) * float(dtypes.finfo(dtype_of(arr)).eps)
  rtol = as_array(rtol)
  u, s, vh = svd(arr, full_matrices=False, hermitian=hermitian)
  rtol = reshape(rtol, (*shape_of(rtol), *(1,) * (ndim_of(s) - ndim_of(rtol))))
  cutoff = multiply(rtol, s[..., 0:1])
  s = astype(where(greater(s, cutoff), s, np.inf), dtype_of(u))
  res = matmul(matrix_transpose(vh), divide(matrix_transpose(u),
                                                    expand_dims(s, -1)))
  return astype(res, dtype_of(arr))


def lstsq(a: ArrayLike, b: ArrayLike, rcond: float | None = None, *,
          numpy_resid: bool = False):
  """The least-squares solution of `a @ x = b` (via the SVD).

  Args:
    a: `[m, n]`; b: `[m]` or `[m, k]`.
    rcond: relative cutoff for small singular values (default `eps * max(m, n)`).
    numpy_resid: return NumPy's empty residuals when the rank is deficient or m <= n (needs
      concrete values); by default residuals are always computed.

  Returns:
    `(x, residuals, rank, s)`.

  Raises:
    ValueError: for mismatched leading dimensions. TypeError: for a or b of the wrong rank.
  """
  a, b = (as_array(v) for v in promote_dtypes_inexact(as_array(a), as_array(b)))
  if shape_of(a)[0] != shape_of(b)[0]:
    raise ValueError("Leading dimensions of input arrays must match")
  b_vec = ndim_of(b) == 1
  if b_vec:
    b = expand_dims(b, 1)
  if ndim_of(a) != 2:
    raise TypeError(f"{ndim_of(a)}-dimensional array given. Array must be two-dimensional")
  if ndim_of(b) != 2:
    raise TypeError(f"{ndim_of(b)}-dimensional array given. Array must be one or "
                    f"two-dimensional")
  m, n = shape_of(a)
  dt = dtype_of(a)
  if m * n == 0:
    s = zeros((0,), real_dtype(dt))
    rank = array(0, dtype=dtypes.int32)
    x = zeros((n, *shape_of(b)[1:]), dt)
  else:
    eps = float(dtypes.finfo(dt).eps)
    rc = eps * max(n, m) if rcond is None else where(less(rcond, 0), eps, rcond)
    u, s, vt = svd(a, full_matrices=False)
    mask = greater_equal(s, multiply(asarray(rc, dtype_of(s)), s[0]))
    rank = reductions.sum(mask)
    safe = astype(where(mask, s, 1), dt)
    s_inv = expand_dims(where(mask, divide(1, safe), zeros((), dt)), 1)
    utb = matmul(_H(u), b)
    x = matmul(_H(vt), multiply(s_inv, utb))
  if numpy_resid and (int(rank) < n or m <= n):
    resid = zeros((0,), real_dtype(dt))
  else:
    resid = power(norm(subtract(b, matmul(a, x)), axis=0), 2)
  if b_vec:
    x = ravel(x)
  return x, resid, rank, s


def matrix_power(a: ArrayLike, n: int):
  """`a` multiplied by itself `n` times (`[..., m, m]`): the identity for n = 0, powers of
  `inv(a)` for n < 0; binary exponentiation.

  Raises:
    TypeError: for a non-integer `n`. ValueError: for non-square input.
  """
  a = as_array(a)
  try:
    n = operator.index(n)
  except TypeError as e:
    raise TypeError(f"exponent must be an integer, got {n}") from e
  if ndim_of(a) < 2 or shape_of(a)[-1] != shape_of(a)[-2]:
    raise ValueError(f"matrix_power requires a batch of square matrices with shape "
                     f"[..., m, m], got an array of shape {shape_of(a)}")
  if n == 0:
    return broadcast_to(eye(shape_of(a)[-1], dtype=dtype_of(a)), shape_of(a))
  if n < 0:
    a, n = inv(a), -n
  z = result = None
  while n > 0:
    z = a if z is None else matmul(z, z)
    n, bit = divmod(n, 2)
    if bit:
      result = z if result is None else matmul(result, z)
  return result


def multi_dot(arrays: Sequence[ArrayLike], *, precision=None):
  """The chained matrix product of `arrays` (the first may be 1-D, a row; the last 1-D, a
  column), multiplied left to right.

  Raises:
    ValueError: for fewer than two arrays.
  """
  arrs = [as_array(a) for a in arrays]
  if len(arrs) < 2:
    raise ValueError(f"multi_dot requires at least two arrays, got {len(arrs)}")
  return reduce(lambda x, y: matmul(x, y, precision=precision), arrs)


def cond(x: ArrayLike, p=None):
  """The condition number of `[..., n, n]` (or `[..., m, n]` for p in (None, 2, -2)):
  `s_max / s_min` for p in (None, 2), else `norm(x, p) * norm(inv(x), p)`; inf for singular
  matrices."""
  x = _inexact("cond", x)
  if ndim_of(x) < 2:
    raise ValueError(f"jnp.linalg.cond: input array must be at least 2D, got "
                     f"{shape_of(x)}")
  if p is None or p == 2:
    s = svd(x, compute_uv=False)
    r = divide(s[..., 0], s[..., -1])
  elif p == -2:
    s = svd(x, compute_uv=False)
    r = divide(s[..., -1], s[..., 0])
  else:
    _square("cond", x)
    r = multiply(norm(x, ord=p, axis=(-2, -1)), norm(inv(x), ord=p, axis=(-2, -1)))
  nan_in = reductions.any(isnan(x), axis=(-2, -1))
  return where(logical_and(isnan(r), logical_not(nan_in)),
                   asarray(np.inf, dtype_of(r)), r)
