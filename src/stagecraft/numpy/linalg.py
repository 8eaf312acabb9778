"""`stagecraft.numpy.linalg`: numpy.linalg's API (as JAX's numpy.linalg) on the decomposition
primitives of `stagecraft.lax.linalg` (LAPACK on CPU).

Inputs promote to an inexact dtype (integers to float32); every function works on the
trailing two axes with leading batch axes. As in JAX, failures do not raise: a matrix that is
singular (`inv`, `solve`) or not positive definite (`cholesky`) gives inf/NaN values.

The functions JAX 0.10.2 jits are jitted here the same way (the same function names and
static arguments: `cholesky`, `svd`, `eigh`, `eigvalsh`, `eigvals`, `qr`, `norm`, `det`,
`slogdet`, `inv`, `solve`, `matrix_power`, `matrix_rank`, `cond`, pinv's `_pinv` and lstsq's
`_lstsq`), so a traced program shows one `jit[name=...]` equation for each call, as JAX's
does; argument checks run when the function is traced (on the first call for a signature).
`det` and `slogdet` carry custom JVP rules (`_det`, `_slogdet_lu`, `_slogdet_small`,
`_slogdet_qr`), and `_pinv` the pseudo-inverse derivative of Golub & Pereyra, as JAX's."""
from __future__ import annotations

import math
import operator
from functools import partial
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from stagecraft import dtypes, lax
from stagecraft.custom_derivatives import custom_jvp
from stagecraft.lax import linalg as lax_linalg
from stagecraft.interpreters import batching
from stagecraft.lax.control_flow import solves
from stagecraft.numpy import (contractions, index_tricks, lax_numpy, manipulation, reductions,
                              ufuncs)
from stagecraft.numpy.array_constructors import array, asarray
from stagecraft.numpy.array_creation import arange, eye, ones, zeros, zeros_like
from stagecraft.numpy.contractions import einsum
from stagecraft.numpy.indexing import take_along_axis
from stagecraft.numpy.lax_numpy import astype
from stagecraft.numpy.manipulation import (broadcast_shapes, broadcast_to, expand_dims,
                                           moveaxis, ravel, reshape)
from stagecraft.numpy.ufuncs import (absolute, add, check_arraylike, conjugate, divide, equal,
                                     exp, greater, greater_equal, isinf, isnan, less, log,
                                     logical_and, logical_not, logical_or, multiply,
                                     not_equal, power, real, remainder, sqrt, subtract, where)
from stagecraft.numpy.vectorize import vectorize as np_vectorize
from stagecraft.numpy.util import (ArrayLike, as_array, canonicalize_axis, dtype_of, ndim_of,
                                   promote_dtypes_inexact, real_dtype, shape_of)
from stagecraft.pjit import jit


__all__ = ["cholesky", "det", "slogdet", "inv", "solve", "qr", "eigh", "eigvalsh", "svd",
           "svdvals", "norm", "vector_norm", "matrix_norm", "matrix_rank", "pinv", "lstsq",
           "matrix_power", "multi_dot", "cond", "cross", "matmul", "outer", "tensordot",
           "vecdot", "matrix_transpose", "trace", "diagonal", "tensorinv", "tensorsolve",
           "EighResult", "QRResult", "SlogdetResult", "SVDResult", "eig", "eigvals",
           "EigResult"]


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


def _arraylike(name: str, *args):
  """JAX's `ensure_arraylike`: TypeError for lists, tuples and other non-arrays; Arrays."""
  check_arraylike(name, *args)
  return [as_array(a) for a in args]


def _inexact(name, a):
  a, = _arraylike(f"jnp.linalg.{name}", a)
  a, = promote_dtypes_inexact(a)
  return as_array(a)


def _square(name, a):
  s = shape_of(a)
  if len(s) < 2 or s[-1] != s[-2]:
    raise ValueError(f"Argument to {name}() must have shape [..., n, n], got {s}")


def _T(x):
  nd = ndim_of(x)
  return lax.transpose(x, (*range(nd - 2), nd - 1, nd - 2))


def _H(x):
  return conjugate(_T(x))


def _symmetrize(x):
  return divide(add(x, _H(x)), 2)


@jit(static_argnames=("upper", "symmetrize_input"))
def cholesky(a: ArrayLike, *, upper: bool = False, symmetrize_input: bool = True):
  """The Cholesky factor of Hermitian positive-definite `a`: lower `L` with `a = L @ L^H`
  (upper `U = L^H` with `upper`).

  Jitted as JAX's (`jit[name=cholesky]`, `upper` and `symmetrize_input` static).

  Args:
    a: `[..., n, n]`.
    symmetrize_input: use `(a + a^H) / 2`.

  Returns:
    `[..., n, n]`; NaN for matrices that are not positive definite.

  Raises:
    ValueError: for non-square or rank < 2 input. TypeError: for a list or other non-array.

  Algorithm: LAPACK potrf through `lax.linalg.cholesky`.

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


def _vmap(fun: Callable, in_axes: Sequence[int | None], out_axis: int = 0) -> Callable:
  """`vmap(fun, in_axes, out_axis)` for a function of positional arrays returning one array
  (this layer has no `vmap`; `None` axes are unbatched, non-array arguments included)."""
  def batched(*args):
    size = next(shape_of(x)[d] for x, d in zip(args, in_axes) if d is not None)
    dims = [None if d is None else d % ndim_of(x) for x, d in zip(args, in_axes)]
    (out,), (d,) = batching.batch_flat(lambda *xs: [fun(*xs)], list(args), dims,
                                       batching.AxisData(None, size))
    return batching.matchaxis(out, d, out_axis % (ndim_of(out) + (d is None)), size)
  return batched


def _broadcast_to_batch(x, shape):
  """`x` broadcast to `shape` over its leading axes (lax.linalg's `_broadcast_to`)."""
  return lax.broadcast_in_dim(x, shape, tuple(range(len(shape) - ndim_of(x), len(shape))))


def _lu_solve_core(lu, permutation, b, trans):
  """Solves `a x = b` (trans 0), `a^T x = b` (1) or `a^H x = b` (2) from `a[perm] = L U`,
  for one matrix: lu `[m, m]`, permutation `[m]`, b `[m, ...]`."""
  m = shape_of(lu)[0]
  x = lax.reshape(b, (m, math.prod(shape_of(b)[1:])))
  if trans == 0:
    x = x[permutation, :]
    x = lax_linalg.triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True)
    x = lax_linalg.triangular_solve(lu, x, left_side=True, lower=False)
  elif trans in (1, 2):
    conj = trans == 2
    x = lax_linalg.triangular_solve(lu, x, left_side=True, lower=False, transpose_a=True,
                                    conjugate_a=conj)
    x = lax_linalg.triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True,
                                    transpose_a=True, conjugate_a=conj)
    _, ind = lax.sort_key_val(permutation, lax.iota(np.int32, shape_of(permutation)[0]))
    x = x[ind, :]
  else:
    raise ValueError(f"'trans' value must be 0, 1, or 2, got {trans}")
  return lax.reshape(x, shape_of(b))


@partial(jit, static_argnums=(3,))
def _lu_solve(lu, permutation, b, trans):
  """JAX's `lax.linalg.lu_solve` (jitted as JAX's `_lu_solve`, `trans` static): b `[..., m]`
  (a vector per matrix when b has one axis less than lu) or `[..., m, k]`, batch axes
  broadcast."""
  if ndim_of(lu) < 2 or shape_of(lu)[-1] != shape_of(lu)[-2]:
    raise ValueError(f"last two dimensions of LU decomposition must be equal, got shape "
                     f"{shape_of(lu)}")
  if ndim_of(b) < 1:
    raise ValueError(f"b matrix must have rank >= 1, got shape {shape_of(b)}")
  rhs_vector = ndim_of(lu) == ndim_of(b) + 1
  if rhs_vector:
    if shape_of(b)[-1] != shape_of(lu)[-1]:
      raise ValueError(f"When LU decomposition matrix and b have the same number of "
                       f"dimensions, last axis of LU decomposition matrix (shape "
                       f"{shape_of(lu)}) and b array (shape {shape_of(b)}) must match")
    b = b[..., np.newaxis]
  elif shape_of(b)[-2] != shape_of(lu)[-1]:
    raise ValueError(f"When LU decomposition matrix and b different numbers of dimensions, "
                     f"last axis of LU decomposition matrix (shape {shape_of(lu)}) and second "
                     f"to last axis of b array (shape {shape_of(b)}) must match")
  batch_shape = broadcast_shapes(shape_of(lu)[:-2], shape_of(permutation)[:-1],
                                 shape_of(b)[:-2])
  lu = _broadcast_to_batch(lu, (*batch_shape, *shape_of(lu)[-2:]))
  permutation = _broadcast_to_batch(permutation, (*batch_shape, shape_of(permutation)[-1]))
  b = _broadcast_to_batch(b, (*batch_shape, *shape_of(b)[-2:]))
  fn = lambda lu, p, b: _lu_solve_core(lu, p, b, trans)  # noqa: E731
  for _ in batch_shape:
    fn = _vmap(fn, (0, 0, 0))
  x = fn(lu, permutation, b)
  return x[..., 0] if rhs_vector else x


def _broadcasted_matvec(a, b):
  """`a @ b` for a `[..., n, m]` and b `[..., m]`, batch axes broadcast, at HIGHEST
  precision."""
  batch_shape = broadcast_shapes(shape_of(a)[:-2], shape_of(b)[:-1])
  n_batch = len(batch_shape)
  a = _broadcast_to_batch(a, (*batch_shape, *shape_of(a)[-2:]))
  b = _broadcast_to_batch(b, (*batch_shape, shape_of(b)[-1]))
  dims = (([ndim_of(a) - 1], [ndim_of(b) - 1]), (list(range(n_batch)), list(range(n_batch))))
  return lax.dot_general(a, b, dims, precision=lax.Precision.HIGHEST)


def _solve_core(a, b):
  """One solve of `a` `[m, m]` (batch axes of `a` lead) with b `[m]` or `[m, k]`: a
  `custom_linear_solve` over one LU factorization (reused by the derivatives), vectorized
  over b's columns, as JAX's `lax.linalg._solve`."""
  if not (ndim_of(a) >= 2 and ndim_of(b) in (ndim_of(a), ndim_of(a) - 1)
          and shape_of(a)[-1] == shape_of(a)[-2] == shape_of(b)[ndim_of(a) - 2]):
    raise ValueError(f"The arguments to solve must have shapes a=[..., m, m] and "
                     f"b=[..., m, k] or b=[..., m]; got a={shape_of(a)} and b={shape_of(b)}")
  out_shape = tuple(d_a if d_b == 1 else d_b
                    for d_a, d_b in zip((*shape_of(a)[:-1], 1), shape_of(b)))
  b = lax.broadcast_in_dim(b, out_shape, tuple(range(ndim_of(b))))
  lu_, _, permutation = lax_linalg.lu(lax.stop_gradient(a))
  custom_solve = partial(
      solves.custom_linear_solve, lambda x: _broadcasted_matvec(a, x),
      solve=lambda _, x: _lu_solve(lu_, permutation, x, 0),
      transpose_solve=lambda _, x: _lu_solve(lu_, permutation, x, 1))
  if ndim_of(a) == ndim_of(b) + 1:
    return custom_solve(b)
  return _vmap(custom_solve, (ndim_of(b) - 1,), max(ndim_of(a), ndim_of(b)) - 1)(b)


@jit
def solve(a: ArrayLike, b: ArrayLike):
  """Solves `a @ x = b`.

  Jitted as JAX's (`jit[name=solve]`), with JAX's body: the LU factorization of
  `stop_gradient(a)` and a `lax.custom_linear_solve` whose solves reuse it (jitted
  `_lu_solve`), vectorized over the batch axes and over b's columns. The derivatives are
  those of the linear system (one more solve with the same factors), not of the
  factorization.

  Args:
    a: `[..., m, m]`.
    b: `[m]` (a vector), or `[..., m, n]`; batch axes broadcast against a's.

  Returns:
    `x` shaped like the broadcast `b`, in the promoted inexact dtype; inf/NaN for singular
    `a`.

  Raises:
    ValueError: for a of rank < 2 or shapes that do not fit.
    TypeError: for a list or other non-array.

  Algorithm: LU with partial pivoting (LAPACK getrf), then two triangular solves.
  """
  a, b = _arraylike("jnp.linalg.solve", a, b)
  a, b = (as_array(v) for v in promote_dtypes_inexact(a, b))
  if ndim_of(a) < 2:
    raise ValueError(f"left hand array must be at least two dimensional; got a.shape="
                     f"{shape_of(a)}")
  if (ndim_of(b) > 1 and ndim_of(a) == ndim_of(b) + 1
      and shape_of(a)[-1] == shape_of(b)[-1] and shape_of(a)[-1] != shape_of(b)[-2]):
    raise ValueError(f"Invalid shapes for solve: {shape_of(a)}, {shape_of(b)}. Prior to JAX "
                     f"v0.5.0, this would have been treated as a batched 1-dimensional "
                     f"solve. To recover this behavior, use solve(a, b[..., None])"
                     f".squeeze(-1).")
  signature = "(m,m),(m)->(m)" if ndim_of(b) == 1 else "(m,m),(m,n)->(m,n)"
  return np_vectorize(_solve_core, signature=signature)(a, b)


@jit
def inv(a: ArrayLike):
  """The inverse of square `a` (`[..., n, n]`); inf/NaN for singular matrices.

  Jitted as JAX's (`jit[name=inv]`): `solve(a, I)`.

  Raises:
    ValueError: for non-square input.
  """
  a, = _arraylike("jnp.linalg.inv", a)
  if ndim_of(a) < 2 or shape_of(a)[-1] != shape_of(a)[-2]:
    raise ValueError(f"Argument to inv must have shape [..., n, n], got {shape_of(a)}.")
  n = shape_of(a)[-1]
  return solve(a, lax.broadcast(eye(n, dtype=dtype_of(a)), shape_of(a)[:-2]))


# Determinants. log|det a| has the derivative trace(a^-1 da) (Jacobi's formula); the sign is
# piecewise constant for real a and moves as exp(i Im(trace(a^-1 da))) for complex a.

def _slogdet_jvp(primals, tangents):
  """Jacobi's formula: d log|det a| = Re tr(a^-1 da); d sign = i Im tr(a^-1 da) sign."""
  x, = primals
  g, = tangents
  sign, ans = slogdet(x)
  ans_dot = lax_numpy.trace(solve(x, g), axis1=-1, axis2=-2)
  return (sign, ans), _sign_and_log_tangents(x, sign, ans_dot)


def _sign_and_log_tangents(x, sign, ans_dot):
  if dtypes.is_complex(dtype_of(x)):
    sign_dot = multiply(subtract(ans_dot, astype(real(ans_dot), dtype_of(ans_dot))), sign)
    return sign_dot, real(ans_dot)
  return zeros_like(sign), ans_dot


def _det_small(a):
  """The determinant of `[..., n, n]` for n in (1, 2) by its formula."""
  if shape_of(a)[-1] == 1:
    return a[..., 0, 0]
  return subtract(multiply(a[..., 0, 0], a[..., 1, 1]), multiply(a[..., 0, 1], a[..., 1, 0]))


@custom_jvp
def _slogdet_small(a):
  """slogdet of 1x1 and 2x2 matrices from the determinant's formula (no factorization)."""
  if shape_of(a)[-1] == 1:
    d = a[..., 0, 0]
  else:
    a00, a01, a10, a11 = a[..., 0, 0], a[..., 0, 1], a[..., 1, 0], a[..., 1, 1]
    d = subtract(multiply(a00, a11), multiply(a01, a10))
  absd = absolute(d)
  return ufuncs.sign(d), real(log(absd))


def _slogdet_small_jvp(primals, tangents):
  """d log det = tr(adj(a) da) / det a, written out for n = 1, 2."""
  x, = primals
  g, = tangents
  sign, ans = _slogdet_small(x)
  if shape_of(x)[-1] == 1:
    ans_dot = divide(g[..., 0, 0], x[..., 0, 0])
  else:
    num = add(subtract(subtract(multiply(g[..., 0, 0], x[..., 1, 1]),
                                multiply(g[..., 0, 1], x[..., 1, 0])),
                       multiply(g[..., 1, 0], x[..., 0, 1])),
              multiply(g[..., 1, 1], x[..., 0, 0]))
    ans_dot = divide(num, _det_small(x))
  return (sign, ans), _sign_and_log_tangents(x, sign, ans_dot)


_slogdet_small.defjvp(_slogdet_small_jvp)


@custom_jvp
def _slogdet_lu(a):
  """sign and log|det| from the LU factors: the product of U's diagonal, its sign flipped
  once per row interchange (LAPACK getrf)."""
  dt = dtype_of(a)
  n = shape_of(a)[-1]
  lu, piv, _ = lax_linalg.lu(a)
  diag = lax_numpy.diagonal(lu, axis1=-2, axis2=-1)
  is_zero = reductions.any(equal(diag, array(0, dtype=dt)), axis=-1)
  parity = reductions.count_nonzero(
      not_equal(piv, lax.broadcasted_iota(dtype_of(piv), shape_of(piv), ndim_of(piv) - 1)),
      axis=-1)
  if dtypes.is_complex(dt):
    sign = reductions.prod(divide(diag, astype(absolute(diag), dt)), axis=-1)
  else:
    sign = array(1, dtype=dt)
    parity = add(parity, reductions.count_nonzero(less(diag, 0), axis=-1))
  flip = array(add(multiply(-2, remainder(parity, 2)), 1), dtype=dt)
  sign = where(is_zero, array(0, dtype=dt), multiply(sign, flip))
  logdet = where(is_zero, array(-np.inf, dtype=dt),
                 astype(reductions.sum(log(absolute(diag)), axis=-1), dt))
  return sign, real(logdet)


@custom_jvp
def _slogdet_qr(a):
  """sign and log|det| from a Householder QR (LAPACK geqrf): |det| = prod |R_ii|, and each
  reflector with tau != 0 has determinant -1. Real input only."""
  if dtypes.is_complex(dtype_of(a)):
    raise NotImplementedError("slogdet method='qr' not implemented for complex inputs")
  n = shape_of(a)[-1]
  r, taus = lax_linalg.geqrf(a)
  diag = lax_numpy.diagonal(r, axis1=-2, axis2=-1)
  logdet = reductions.sum(log(absolute(diag)), axis=-1)
  sign = reductions.prod(ufuncs.sign(diag), axis=-1)
  flips = reductions.prod(where(not_equal(taus[..., :n - 1], 0), -1, 1), axis=-1)
  return multiply(sign, astype(flips, dtype_of(sign))), logdet


_slogdet_lu.defjvp(_slogdet_jvp)
_slogdet_qr.defjvp(_slogdet_jvp)


@jit(static_argnames=("method",))
def slogdet(a: ArrayLike, *, method: str | None = None):
  """Sign and log of the absolute value of the determinant: `det = sign * exp(logabsdet)`.

  Jitted as JAX's (`jit[name=slogdet]`, `method` static); n = 1, 2 use the determinant's
  formula, larger n the LU factors (`method='lu'` or None) or a QR factorization
  (`method='qr'`, real input), each with a custom JVP (Jacobi's formula).

  Returns:
    `SlogdetResult(sign T[...], logabsdet R[...])` (R real); `(0, -inf)` for singular a.

  Raises:
    ValueError: for non-square input or an unknown method.
    NotImplementedError: for method 'qr' with complex input.
  """
  a = _inexact("slogdet", a)
  _square("slogdet", a)
  if method is None or method == "lu":
    n = shape_of(a)[-1]
    if n == 0:
      b = shape_of(a)[:-2]
      return SlogdetResult(ones(b, dtype_of(a)), zeros(b, real_dtype(dtype_of(a))))
    return SlogdetResult(*(_slogdet_small(a) if n <= 2 else _slogdet_lu(a)))
  if method == "qr":
    return SlogdetResult(*_slogdet_qr(a))
  raise ValueError(f"Unknown slogdet method '{method}'. Supported methods are 'lu' "
                   f"(`None`), and 'qr'.")


def _cofactor_solve(a, b):
  """`(det(a), adj(a) @ b)` for square `a` and `b` `[..., m, m]`, finite also where `a` is
  singular: the derivative of the determinant, `d det = tr(adj(a) da)`.

  With `a[perm] = L U` (LU with partial pivoting), `adj(a) b = det(a) U^-1 L^-1 P b`. Let
  `x = L^-1 P b`, `D = sign * prod(U_ii, i < m-1)` (so `det = D U_mm`). Replacing `U_mm` by
  `1/D` in U and scaling every row of `x` but the last by `det` gives the same product by
  back substitution, and stays finite when only `U_mm` vanishes (rank m - 1). For lower
  rank the adjugate is 0: where the modified U is still singular (its solve is not finite)
  the result is set to 0."""
  if shape_of(a)[-1] == 1:
    return a[..., 0, 0], b
  # NB: staged as JAX's, step for step, so that grad(det) prints as JAX's.
  m = shape_of(a)[-1]
  lu, piv, perm = lax_linalg.lu(a)
  dt = dtype_of(a)
  batch = broadcast_shapes(shape_of(lu)[:-2], shape_of(b)[:-2])
  x = broadcast_to(b, (*batch, *shape_of(b)[-2:]))
  lu = broadcast_to(lu, (*batch, m, m))
  diag = lax_numpy.diagonal(lu, axis1=-2, axis2=-1)
  iota = lax.expand_dims(arange(m, dtype=dtype_of(piv)), range(ndim_of(piv) - 1))
  parity = reductions.count_nonzero(not_equal(piv, iota), axis=-1)
  sign = asarray(add(multiply(-2, remainder(parity, 2)), 1), dtype=dt)
  partial_det = multiply(reductions.cumprod(diag, axis=-1), sign[..., None])
  lu = lu.at[..., -1, -1].set(divide(1.0, partial_det[..., -2]))
  perm = broadcast_to(perm, (*batch, m))
  iotas = index_tricks.ix_(*(lax.iota(np.int32, n) for n in (*batch, 1)))
  # Where U with its last pivot replaced is still singular (rank < m - 1), the result is 0.
  bad = ones(shape_of(x)[:-1], dtype_of(x))
  bad = lax_linalg.triangular_solve(lu, bad, left_side=True, lower=False)
  bad = reductions.any(logical_or(isnan(bad), isinf(bad)), axis=-1)
  bad = manipulation.tile(bad[..., None, None], ndim_of(bad) * (1,) + shape_of(x)[-2:])
  x = where(bad, zeros_like(x), x)
  x = x[iotas[:-1] + (perm, slice(None))]
  x = lax_linalg.triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True)
  x = manipulation.concatenate(
      (multiply(x[..., :-1, :], partial_det[..., -1, None, None]), x[..., -1:, :]), axis=-2)
  x = lax_linalg.triangular_solve(lu, x, left_side=True, lower=False)
  x = where(bad, zeros_like(x), x)
  return partial_det[..., -1], x


@custom_jvp
def _det(a):
  """det = sign * exp(logabsdet) for n >= 4 (and n = 1), with the adjugate as derivative."""
  sign, logdet = slogdet(a)
  return multiply(sign, astype(exp(logdet), dtype_of(sign)))


@_det.defjvp
def _det_jvp(primals, tangents):
  """d det = tr(adj(a) da), finite for singular a (see `_cofactor_solve`)."""
  x, = primals
  g, = tangents
  y, z = _cofactor_solve(x, g)
  return y, lax_numpy.trace(z, axis1=-1, axis2=-2)


def _det_3x3(a):
  m = multiply
  e = lambda i, j: a[..., i, j]  # noqa: E731
  pos = add(add(m(m(e(0, 0), e(1, 1)), e(2, 2)), m(m(e(0, 1), e(1, 2)), e(2, 0))),
            m(m(e(0, 2), e(1, 0)), e(2, 1)))
  pos = subtract(pos, m(m(e(0, 2), e(1, 1)), e(2, 0)))
  pos = subtract(pos, m(m(e(0, 0), e(1, 2)), e(2, 1)))
  return subtract(pos, m(m(e(0, 1), e(1, 0)), e(2, 2)))


@jit
def det(a: ArrayLike):
  """The determinant of `[..., n, n]`: shape `[...]`.

  Jitted as JAX's (`jit[name=det]`): the formula for n = 2 and 3 (differentiated through
  it), else `sign * exp(logabsdet)` of `slogdet`, whose derivative is `tr(adj(a) da)` with the
  adjugate from the LU factors (finite for singular matrices; see `_cofactor_solve`).

  Raises:
    ValueError: for non-square input.
  """
  a = _inexact("det", a)
  s = shape_of(a)
  if len(s) >= 2 and s[-1] == s[-2] == 2:
    return _det_small(a)
  if len(s) >= 2 and s[-1] == s[-2] == 3:
    return _det_3x3(a)
  if len(s) >= 2 and s[-1] == s[-2]:
    return _det(a)
  raise ValueError(f"Argument to _det() must have shape [..., n, n], got {s}")


@jit(static_argnames=("mode",))
def qr(a: ArrayLike, mode: str = "reduced"):
  """QR decomposition `a = Q @ R` of `[..., m, n]`.

  Jitted as JAX's (`jit[name=qr]`, `mode` static).

  Args:
    mode: 'reduced' (Q `[..., m, k]`, R `[..., k, n]`, k = min(m, n)), 'complete'
      (Q `[..., m, m]`, R `[..., m, n]`), 'r' (R only) or 'raw' (LAPACK's `(h^T, tau)`).

  Returns:
    `QRResult(Q, R)`, R alone for 'r'.

  Raises:
    ValueError: for an unknown mode.

  Algorithm: Householder QR (LAPACK geqrf, orgqr) through `lax.linalg.qr`.
  """
  a = _inexact("qr", a)
  if mode == "raw":
    h, taus = lax_linalg.geqrf(a)
    return QRResult(_T(h), taus)
  if mode in ("reduced", "r", "full"):
    full = False
  elif mode == "complete":
    full = True
  else:
    raise ValueError(f"Unsupported QR decomposition mode '{mode}'")
  q, r = lax_linalg.qr(a, pivoting=False, full_matrices=full)
  return r if mode == "r" else QRResult(q, r)


@jit(static_argnames=("UPLO", "symmetrize_input"))
def eigh(a: ArrayLike, UPLO: str | None = None, symmetrize_input: bool = True):
  """Eigenvalues (ascending) and eigenvectors (columns) of Hermitian `[..., n, n]`.

  Jitted as JAX's (`jit[name=eigh]`, `UPLO` and `symmetrize_input` static).

  Returns:
    `EighResult(eigenvalues R[..., n], eigenvectors T[..., n, n])`.

  Raises:
    ValueError: for a bad `UPLO` or non-square input.

  Algorithm: LAPACK syevd/heevd through `lax.linalg.eigh`.
  """
  a, = _arraylike("jnp.linalg.eigh", a)
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

  Not jitted (as JAX's).

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


@jit
def eigvals(a: ArrayLike):
  """The eigenvalues `C[..., n]` of general square `a[..., n, n]` (see `eig`); differentiable
  (`dw = diag(V^-1 da V)`). Jitted as JAX's (`jit[name=eigvals]`).

  Raises:
    ValueError: for non-square or rank < 2 input.
  """
  a = _inexact("eigvals", a)
  _square("eigvals", a)
  return lax_linalg.eig(a, compute_left_eigenvectors=False,
                        compute_right_eigenvectors=False)[0]


@jit(static_argnames=("UPLO", "symmetrize_input"))
def eigvalsh(a: ArrayLike, UPLO: str | None = "L", *, symmetrize_input: bool = True):
  """The eigenvalues `R[..., n]` (ascending) of Hermitian `a[..., n, n]`: `eigh`'s, jitted
  as JAX's (`jit[name=eigvalsh]` around `jit[name=eigh]`).

  Raises:
    ValueError: as `eigh`.
  """
  a = _inexact("eigvalsh", a)
  w, _ = eigh(a, UPLO, symmetrize_input=symmetrize_input)
  return w


@jit(static_argnames=("full_matrices", "compute_uv", "hermitian", "subset_by_index"))
def svd(a: ArrayLike, full_matrices: bool = True, compute_uv: bool = True,
        hermitian: bool = False, subset_by_index: tuple[int, int] | None = None):
  """Singular value decomposition `a = U @ diag(S) @ Vh` of `[..., m, n]`.

  Jitted as JAX's (`jit[name=svd]`; every argument but `a` static).

  Args:
    full_matrices: U `[..., m, m]`, Vh `[..., n, n]` (else `[..., m, k]`, `[..., k, n]`).
    compute_uv: return `SVDResult(U, S, Vh)`; else only S.
    hermitian: `a` is Hermitian: the singular values are the absolute eigenvalues (from
      `lax.linalg.eigh`), sorted descending; U the eigenvectors, Vh `(U * sign(w))^H`.
    subset_by_index: `(start, end)`: only those singular values (where the backend allows).

  Returns:
    `SVDResult(U, S, Vh)` or `S` (`R[..., k]`, descending).

  Algorithm: LAPACK gesdd through `lax.linalg.svd`.
  """
  a = _inexact("svd", a)
  if hermitian:
    v, w = lax_linalg.eigh(a, subset_by_index=subset_by_index)
    s = absolute(w)
    last = ndim_of(s) - 1
    if not compute_uv:
      return lax.rev(lax.sort(s, dimension=-1), (last,))
    sgn = ufuncs.sign(w)
    idx_dtype = dtypes.uint64 if shape_of(s)[-1] > np.iinfo(np.uint32).max else dtypes.uint32
    idxs = lax.broadcasted_iota(idx_dtype, shape_of(s), last)
    s, idxs, sgn = lax.sort((s, idxs, sgn), dimension=-1, num_keys=1)
    s, idxs, sgn = (lax.rev(t, (last,)) for t in (s, idxs, sgn))
    u = take_along_axis(v, expand_dims(idxs, -2), axis=-1)
    vh = _H(multiply(u, astype(expand_dims(sgn, -2), dtype_of(u))))
    return SVDResult(u, s, vh)
  if compute_uv:
    u, s, vt = lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=True,
                              subset_by_index=subset_by_index)
    return SVDResult(u, s, vt)
  return lax_linalg.svd(a, full_matrices=full_matrices, compute_uv=False,
                        subset_by_index=subset_by_index)


def svdvals(x: ArrayLike, /):
  """The singular values `R[..., k]` of `[..., m, n]`, descending (`svd`'s)."""
  x, = _arraylike("jnp.linalg.svdvals", x)
  return svd(x, compute_uv=False, hermitian=False)


def _sq_sum(x, axis, keepdims):
  return sqrt(reductions.sum(real(multiply(x, conjugate(x))), axis=axis, keepdims=keepdims))


def vector_norm(x: ArrayLike, /, *, axis: int | tuple[int, ...] | None = None,
                keepdims: bool = False, ord: int | float | str = 2):
  """The vector p-norm over `axis` (all axes when None): `ord` 2 (default), 1, inf, -inf, 0
  (count of nonzeros) or any real p (`sum(|x|**p)**(1/p)`).

  As JAX's, integer `x` is not promoted for ord 1, inf and -inf (an integer result); the
  2-norm is a float. For ord 0 and other p, integers promote to the default float (JAX
  raises or truncates there).

  Raises:
    ValueError: for a string `ord`.
  """
  x, = _arraylike("jnp.linalg.vector_norm", x)
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
  if ord == 1:
    return reductions.sum(absolute(x), axis=axis, keepdims=keepdims)
  x, = promote_dtypes_inexact(x)
  x = as_array(x)
  if ord == 0:
    return reductions.sum(not_equal(x, 0), dtype=real_dtype(dtype_of(x)), axis=axis,
                          keepdims=keepdims)
  ax = absolute(x)
  p = np.asarray(ord, dtype_of(ax))[()]
  out = reductions.sum(power(ax, p), axis=axis, keepdims=keepdims)
  return power(out, np.asarray(1.0 / p, dtype_of(ax))[()])


@jit(static_argnames=("ord", "axis", "keepdims"))
def norm(x: ArrayLike, ord: int | float | str | None = None,
         axis: None | tuple[int, ...] | int = None, keepdims: bool = False):
  """Vector or matrix norm, as numpy.linalg.norm.

  Jitted as JAX's (`jit[name=norm]`; `ord`, `axis` and `keepdims` static, so `axis` must
  be an int or a tuple).

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
  """The matrix norm over the last two axes (see `norm`): shape `[...]` (`[..., 1, 1]` with
  `keepdims`)."""
  x, = _arraylike("jnp.linalg.matrix_norm", x)
  return norm(x, ord=ord, keepdims=keepdims, axis=(-2, -1))


@jit(static_argnames=("hermitian",))
def matrix_rank(M: ArrayLike, rtol: ArrayLike | None = None, *, hermitian: bool = False,
                tol: ArrayLike | None = None):
  """The number of singular values of `[..., m, n]` above the threshold (int32 `[...]`).

  Jitted as JAX's (`jit[name=matrix_rank]`, `hermitian` static). The threshold is
  `max(s) * max(m, n) * eps` by default; a given `rtol` (or its alias `tol`) is used as the
  threshold itself, as JAX's does. Input of rank < 2: 1 if any entry is nonzero.

  Raises:
    ValueError: if both `rtol` and `tol` are given.
  """
  M, = _arraylike("jnp.linalg.matrix_rank", M)
  if tol is not None:
    if rtol is not None:
      raise ValueError("matrix_rank: only one of tol or rtol may be specified.")
    rtol = tol
  M = _inexact("matrix_rank", M)
  if ndim_of(M) < 2:
    return astype(reductions.any(not_equal(M, 0)), dtypes.int32)
  S = svd(M, full_matrices=False, compute_uv=False, hermitian=hermitian)
  if rtol is None:
    sdt = dtype_of(S)
    rtol = multiply(multiply(reductions.max(S, axis=-1),
                             np.asarray(max(shape_of(M)[-2:]), sdt)[()]),
                    dtypes.finfo(sdt).eps)
  rtol = as_array(rtol)
  rtol = expand_dims(rtol, ndim_of(rtol))
  return reductions.sum(greater(S, rtol), axis=-1)


def pinv(a: ArrayLike, rtol: ArrayLike | None = None, hermitian: bool = False, *,
         rcond: ArrayLike | None = None):
  """The Moore-Penrose pseudo-inverse `[..., n, m]` of `[..., m, n]`.

  As JAX's: a custom-JVP function `_pinv` around a jitted `_pinv` (`hermitian` static).
  Singular values at or below `rtol * max(s)` are dropped (default rtol
  `10 * max(m, n) * eps`); `rcond` is an alias of `rtol`.

  Raises:
    ValueError: if both `rtol` and `rcond` are given.

  Algorithm: via the SVD (as NumPy's); derivative from Golub & Pereyra, "The
  differentiation of pseudo-inverses and nonlinear least squares problems whose variables
  separate", SIAM J. Numer. Anal. 10(2), 1973.
  """
  if rcond is not None:
    if rtol is not None:
      raise ValueError("pinv: only one of rtol and rcond may be specified.")
    rtol = rcond
  return _pinv(a, rtol, hermitian)


@partial(custom_jvp, nondiff_argnums=(1, 2))
@jit(static_argnames=("hermitian",))
def _pinv(a, rtol=None, hermitian=False):
  """The body of `pinv`: `V diag(1/s) U^H` with the small singular values dropped."""
  arr = _inexact("pinv", a)
  m, n = shape_of(arr)[-2:]
  if m == 0 or n == 0:
    return zeros((*shape_of(arr)[:-2], n, m), dtype_of(arr))
  arr = conjugate(arr)
  if rtol is None:
    rtol = multiply(10.0 * max(m, n), array(dtypes.finfo(dtype_of(arr)).eps))
  rtol = as_array(rtol)
  u, s, vh = svd(arr, full_matrices=False, hermitian=hermitian)
  rtol = expand_dims(rtol, -1)
  rtol = expand_dims(rtol, tuple(range(ndim_of(s) - ndim_of(rtol))))
  cutoff = multiply(rtol, s[..., 0:1])
  s = astype(where(greater(s, cutoff), s, np.inf), dtype_of(u))
  res = contractions.matmul(_T(vh), divide(_T(u), expand_dims(s, -1)),
                            precision=lax.Precision.HIGHEST)
  return lax.convert_element_type(res, dtype_of(arr))


@_pinv.defjvp
def _pinv_jvp(rtol, hermitian, primals, tangents):
  """dP = -P dA P + P P^H dA^H (I - A P) + (I - P A) dA^H P^H P (Golub & Pereyra), ordered
  to multiply the smaller matrices first. (JAX runs it under
  `default_matmul_precision("float32")`, which has no effect on CPU and is not an option
  stagecraft implements.)"""
  a, = primals
  a_dot, = tangents
  p = pinv(a, rtol=rtol, hermitian=hermitian)
  if hermitian:
    a, a_dot = _symmetrize(a), _symmetrize(a_dot)
  mm = contractions.matmul
  m, n = shape_of(a)[-2:]
  if m >= n:
    s = mm(mm(p, _H(p)), _H(a_dot))
    t = mm(mm(_H(a_dot), _H(p)), p)
    p_dot = ufuncs.negative(mm(mm(p, a_dot), p))
    p_dot = subtract(add(p_dot, s), mm(mm(s, a), p))
    p_dot = subtract(add(p_dot, t), mm(mm(p, a), t))
  else:
    s = mm(p, mm(_H(p), _H(a_dot)))
    t = mm(_H(a_dot), mm(_H(p), p))
    p_dot = mm(ufuncs.negative(p), mm(a_dot, p))
    p_dot = subtract(add(p_dot, s), mm(s, mm(a, p)))
    p_dot = subtract(add(p_dot, t), mm(p, mm(a, t)))
  return p, p_dot


def _lstsq(a, b, rcond, *, numpy_resid: bool = False):
  """The body of `lstsq` (jitted under this name without `numpy_resid`, as JAX's)."""
  a, b = (as_array(v) for v in promote_dtypes_inexact(a, b))
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
  hi = lax.Precision.HIGHEST
  if m * n == 0:
    s = zeros((0,), dt)
    rank = array(0, dtype=dtypes.default_int_dtype())
    x = zeros((n, *shape_of(b)[1:]), dt)
  else:
    eps = dtypes.finfo(dt).eps
    if rcond is None:
      rcond = float(eps) * max(n, m)
    else:
      rcond = where(less(rcond, 0), eps, rcond)
    u, s, vt = svd(a, full_matrices=False)
    mask = logical_and(greater(s, 0), greater_equal(s, multiply(array(rcond, dtype_of(s)),
                                                                s[0])))
    rank = reductions.sum(mask)
    safe = astype(where(mask, s, 1), dt)
    s_inv = expand_dims(where(mask, divide(1, safe), 0), 1)
    utb = contractions.matmul(_T(conjugate(u)), b, precision=hi)
    x = contractions.matmul(_T(conjugate(vt)), multiply(s_inv, utb), precision=hi)
  if numpy_resid and (int(rank) < n or m <= n):
    resid = asarray([])
  else:
    resid = power(norm(subtract(b, contractions.matmul(a, x, precision=hi)), axis=0), 2)
  if b_vec:
    x = ravel(x)
  return x, resid, rank, s


_lstsq_no_resid = partial(_lstsq, numpy_resid=False)
# NB: api_util.fun_name does not look through functools.partial (JAX's does), so the name
# the jit equation prints (`jit[name=_lstsq]`) is set on the partial.
_lstsq_no_resid.__name__ = "_lstsq"
_jit_lstsq = jit(_lstsq_no_resid)


def lstsq(a: ArrayLike, b: ArrayLike, rcond: float | None = None, *,
          numpy_resid: bool = False):
  """The least-squares solution of `a @ x = b` (via the SVD).

  As JAX's, a jitted `_lstsq` (with `rcond` traced) unless `numpy_resid`.

  Args:
    a: `[m, n]`; b: `[m]` or `[m, k]`.
    rcond: relative cutoff for small singular values (default `eps * max(m, n)`; a negative
      value means eps).
    numpy_resid: return NumPy's empty residuals when the rank is deficient or m <= n (needs
      concrete values, not jitted); by default residuals are always computed.

  Returns:
    `(x, residuals, rank, s)`: x `[n]` or `[n, k]`, residuals `R[]`/`R[k]` (squared 2-norms
    of the columns of `b - a @ x`), rank (default int), s `R[min(m, n)]`.

  Raises:
    ValueError: for mismatched leading dimensions. TypeError: for a or b of the wrong rank,
      or for lists.
  """
  a, b = _arraylike("jnp.linalg.lstsq", a, b)
  if numpy_resid:
    return _lstsq(a, b, rcond, numpy_resid=True)
  return _jit_lstsq(a, b, rcond)


@jit(static_argnames=("n",))
def matrix_power(a: ArrayLike, n: int):
  """`a` multiplied by itself `n` times (`[..., m, m]`): the identity for n = 0, powers of
  `inv(a)` for n < 0; binary exponentiation (n <= 3 multiplied left to right). Integer
  matrices stay integer for n >= 0.

  Jitted as JAX's (`jit[name=matrix_power]`, `n` static).

  Raises:
    TypeError: for input of rank < 2, non-square matrices and a non-integer `n` (JAX's
      messages).
  """
  a, = _arraylike("jnp.linalg.matrix_power", a)
  if ndim_of(a) < 2:
    raise TypeError(f"{ndim_of(a)}-dimensional array given. Array must be at least "
                    f"two-dimensional")
  if shape_of(a)[-2] != shape_of(a)[-1]:
    raise TypeError("Last 2 dimensions of the array must be square")
  try:
    n = operator.index(n)
  except TypeError as e:
    raise TypeError(f"exponent must be an integer, got {n}") from e
  if n == 0:
    return broadcast_to(eye(shape_of(a)[-2], dtype=dtype_of(a)), shape_of(a))
  if n < 0:
    a, n = inv(a), -n
  mm = contractions.matmul
  if n <= 3:
    result = a
    for _ in range(n - 1):
      result = mm(result, a)
    return result
  z = result = None
  while n > 0:
    z = a if z is None else mm(z, z)
    n, bit = divmod(n, 2)
    if bit:
      result = z if result is None else mm(result, z)
  return result


def multi_dot(arrays: Sequence[ArrayLike], *, precision=None):
  """The chained matrix product of `arrays` in the cheapest order (opt_einsum's, through
  `einsum`); the first may be 1-D (a row), the last 1-D (a column), the others 2-D.

  Raises:
    ValueError: for fewer than two arrays, wrong ranks or sizes that do not chain.
    TypeError: for a list element that is not an array.
  """
  arrs = _arraylike("jnp.linalg.multi_dot", *arrays)
  if len(arrs) < 2:
    raise ValueError(f"multi_dot requires at least two arrays; got len(arrays)={len(arrs)}")
  shapes = [shape_of(a) for a in arrs]
  if not (len(shapes[0]) in (1, 2) and len(shapes[-1]) in (1, 2)
          and all(len(s) == 2 for s in shapes[1:-1])):
    raise ValueError("multi_dot: input arrays must all be two-dimensional, except for the "
                     "first and last array which may be 1 or 2 dimensional. Got array "
                     f"shapes {shapes}")
  if any(s[-1] != t[0] for s, t in zip(shapes[:-1], shapes[1:])):
    raise ValueError("multi_dot: last dimension of each array must match first dimension "
                     f"of following array. Got array shapes {shapes}")
  operands = []
  for i, a in enumerate(arrs):
    axes = [i, i + 1]
    if i == 0 and len(shapes[0]) == 1:
      axes = axes[1:]
    if i == len(arrs) - 1 and len(shapes[-1]) == 1:
      axes = axes[:1]
    operands += [a, axes]
  return einsum(*operands, optimize="auto", precision=precision)


@jit(static_argnames=("p",))
def cond(x: ArrayLike, p=None):
  """The condition number `[...]` of `[..., m, n]`: `s_max / s_min` for p in (None, 2),
  `s_min / s_max` for -2, else (square x) `norm(x, p) * norm(inv(x), p)`; for p other than
  None and 2 a NaN from a singular (NaN-free) matrix becomes inf.

  Jitted as JAX's (`jit[name=cond]`, `p` static).

  Raises:
    ValueError: for rank < 2 or empty input, or non-square input with p not in
      (None, 2, -2).
  """
  arr, = _arraylike("cond", x)
  if ndim_of(arr) < 2:
    raise ValueError(f"jnp.linalg.cond: input array must be at least 2D; got "
                     f"arr.shape={shape_of(arr)}")
  if shape_of(arr)[-1] == 0 or shape_of(arr)[-2] == 0:
    raise ValueError(f"jnp.linalg.cond: input array must not be empty; got "
                     f"arr.shape={shape_of(arr)}")
  if p is None or p == 2:
    s = svdvals(arr)
    return divide(s[..., 0], s[..., -1])
  if p == -2:
    s = svdvals(arr)
    r = divide(s[..., -1], s[..., 0])
  else:
    if shape_of(arr)[-2] != shape_of(arr)[-1]:
      raise ValueError(f"jnp.linalg.cond: for p={p!r}, array must be square; got "
                       f"arr.shape={shape_of(arr)}")
    r = multiply(norm(arr, ord=p, axis=(-2, -1)), norm(inv(arr), ord=p, axis=(-2, -1)))
  r_nan = isnan(r)
  x_ok = logical_not(reductions.any(isnan(arr), axis=(-2, -1)))
  return where(logical_and(r_nan, x_ok), np.inf, r)


def cross(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1):
  """The cross product of 3-vectors along `axis` (other axes broadcast): `numpy.cross`
  restricted to 3-vectors.

  Raises:
    ValueError: if either input's `axis` has size other than 3.
  """
  x1, x2 = _arraylike("jnp.linalg.outer", x1, x2)
  n1, n2 = shape_of(x1)[axis], shape_of(x2)[axis]
  if n1 != 3 or n2 != 3:
    raise ValueError("Both input arrays must be (arrays of) 3-dimensional vectors, but they "
                     f"have x1.shape[axis]={n1} and x2.shape[axis]={n2}")
  return contractions.cross(x1, x2, axis=axis)


def outer(x1: ArrayLike, x2: ArrayLike, /):
  """The outer product `[m, n]` of 1-D `x1[m]` and `x2[n]`.

  Raises:
    ValueError: if either input is not 1-D.
  """
  x1, x2 = _arraylike("jnp.linalg.outer", x1, x2)
  if ndim_of(x1) != 1 or ndim_of(x2) != 1:
    raise ValueError("Input arrays must be one-dimensional, but they are "
                     f"x1.ndim={ndim_of(x1)} x2.ndim={ndim_of(x2)}")
  return contractions.outer(x1, x2)


def matrix_transpose(x: ArrayLike, /):
  """`[..., m, n] -> [..., n, m]`.

  Raises:
    ValueError: for input of rank < 2.
  """
  x, = _arraylike("jnp.linalg.matrix_transpose", x)
  nd = ndim_of(x)
  if nd < 2:
    raise ValueError(f"matrix_transpose requires at least 2 dimensions; got ndim={nd}")
  return _T(x)


def vecdot(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1, precision=None,
           preferred_element_type=None):
  """The conjugated dot product `sum(conj(x1) * x2, axis)`, the other axes broadcast
  (`stagecraft.numpy.vecdot`)."""
  x1, x2 = _arraylike("jnp.linalg.vecdot", x1, x2)
  return contractions.vecdot(x1, x2, axis=axis, precision=precision,
                             preferred_element_type=preferred_element_type)


def matmul(x1: ArrayLike, x2: ArrayLike, /, *, precision=None, preferred_element_type=None):
  """The matrix product `[..., n, k] @ [..., k, m]` (`stagecraft.numpy.matmul`)."""
  x1, x2 = _arraylike("jnp.linalg.matmul", x1, x2)
  return contractions.matmul(x1, x2, precision=precision,
                             preferred_element_type=preferred_element_type)


def tensordot(x1: ArrayLike, x2: ArrayLike, /, *, axes: int | tuple = 2, precision=None,
              preferred_element_type=None, out_sharding=None):
  """The tensor dot product over `axes` (an int k: the last k axes of x1 with the first k of
  x2; or a pair of axis sequences) (`stagecraft.numpy.tensordot`)."""
  x1, x2 = _arraylike("jnp.linalg.tensordot", x1, x2)
  return contractions.tensordot(x1, x2, axes=axes, precision=precision,
                                preferred_element_type=preferred_element_type,
                                out_sharding=out_sharding)


def diagonal(x: ArrayLike, /, *, offset: int = 0):
  """The `offset` diagonal `[..., k]` of each matrix of `[..., m, n]`."""
  x, = _arraylike("jnp.linalg.diagonal", x)
  return lax_numpy.diagonal(x, offset=offset, axis1=-2, axis2=-1)


def trace(x: ArrayLike, /, *, offset: int = 0, dtype: Any = None):
  """The sum `[...]` of the `offset` diagonal of each matrix of `[..., m, n]`; dtype as
  `stagecraft.numpy.trace` (small integers accumulate in the default integer)."""
  x, = _arraylike("jnp.linalg.trace", x)
  return lax_numpy.trace(x, offset=offset, axis1=-2, axis2=-1, dtype=dtype)


def tensorinv(a: ArrayLike, ind: int = 2):
  """The inverse of `a` with respect to `tensordot(·, ·, ind)`: `a` reshaped to the square
  matrix `[prod(a.shape[:ind]), prod(a.shape[ind:])]`, inverted, reshaped to
  `(*a.shape[ind:], *a.shape[:ind])` (as numpy.linalg.tensorinv).

  Raises:
    ValueError: for `ind <= 0`, or when the two products differ.
    TypeError: for a non-integer `ind`.
  """
  arr, = _arraylike("tensorinv", a)
  ind = operator.index(ind)
  if ind <= 0:
    raise ValueError(f"ind must be a positive integer; got ind={ind}")
  shp = shape_of(arr)
  contracting, batch = shp[:ind], shp[ind:]
  flat = (math.prod(contracting), math.prod(batch))
  if flat[0] != flat[1]:
    raise ValueError("tensorinv is only possible when the product of the first `ind` "
                     "dimensions equals that of the remaining dimensions. got "
                     f"arr.shape={shp} with ind={ind}.")
  return reshape(inv(reshape(arr, flat)), (*batch, *contracting))


def tensorsolve(a: ArrayLike, b: ArrayLike, axes: tuple[int, ...] | None = None):
  """`x` with `tensordot(a, x, x.ndim) == b` (as numpy.linalg.tensorsolve): the axes of `a`
  listed in `axes` are first moved to the end, one after the other (NumPy's order), then
  `a` must have shape `(*b.shape, *x.shape)` with `prod(x.shape) == b.size`.

  Raises:
    ValueError: when a's leading axes are not b's shape, or the products differ (JAX's
      checks; NumPy only checks the products).
  """
  a, b = _arraylike("tensorsolve", a, b)
  if axes is not None:
    order = [i for i in range(ndim_of(a))]
    for k in axes:
      k = canonicalize_axis(k, ndim_of(a), "tensorsolve")
      order.remove(k)
      order.append(k)
    a = lax.transpose(a, tuple(order))
  sa, sb = shape_of(a), shape_of(b)
  out_shape = sa[len(sb):]
  if sa[:len(sb)] != sb:
    raise ValueError("After moving axes to end, leading shape of a must match shape of b. "
                     f"got a.shape={sa}, b.shape={sb}")
  size_b = math.prod(sb)
  if size_b != math.prod(out_shape):
    raise ValueError("Input arrays must have prod(a.shape[:b.ndim]) == "
                     f"prod(a.shape[b.ndim:]); got a.shape={sa}, b.ndim={len(sb)}.")
  x = solve(reshape(a, (size_b, math.prod(out_shape))), ravel(b))
  return reshape(x, out_shape)
