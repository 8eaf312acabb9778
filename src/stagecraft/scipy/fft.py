"""`stagecraft.scipy.fft`: JAX's `jax.scipy.fft` (the type-2 discrete cosine transform and its
inverse, in one and several dimensions), composed from `stagecraft.numpy.fft`."""
from __future__ import annotations

import operator
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from stagecraft import dtypes, lax
from stagecraft import numpy as jnp
from stagecraft.numpy import fft as jnp_fft
from stagecraft.numpy.util import canonicalize_axis, check_arraylike, promote_dtypes_inexact
from stagecraft.pjit import jit

__all__ = ["dct", "dctn", "idct", "idctn"]


def _check(name: str, x: Any, kind: int, norm: str | None):
  check_arraylike(name, x)
  if kind != 2:
    raise NotImplementedError("Only DCT type 2 is implemented.")
  if norm is not None and norm not in ("backward", "ortho"):
    raise ValueError(f"jax.scipy.fft.{name}: norm={norm!r} is not implemented")
  return jnp.asarray(x)


def _resize(x: Any, n: int | None, axis: int):
  """`x` zero-padded or truncated to length n along `axis`."""
  if n is None or n == x.shape[axis]:
    return x
  cfg = [(0, 0, 0)] * x.ndim
  cfg[axis] = (0, n - x.shape[axis], 0)
  return lax.pad(x, np.zeros((), x.dtype)[()], cfg)


def _reshape_along(v: Any, axis: int, ndim: int):
  """A 1-D array shaped to broadcast along `axis` of an `ndim`-dimensional array."""
  shape = [1] * ndim
  shape[axis] = v.shape[0]
  return v.reshape(shape)


def _ortho_scale(n: int, axis: int, ndim: int, dtype: Any):
  """The factors turning the unnormalized DCT-II into the orthonormal one along `axis`:
  `1 / sqrt(4 n)` for k = 0 and `1 / sqrt(2 n)` otherwise."""
  f = np.full((n,), 1 / np.sqrt(2 * n))
  f[0] = 1 / np.sqrt(4 * n)
  return _reshape_along(jnp.asarray(f.astype(dtype)), axis, ndim)


def _twiddle(n: int, axis: int, ndim: int, dtype: Any, sign: float = -1.):
  """`exp(sign * i pi k / (2 n))` for k in [0, n), along `axis`."""
  k = np.arange(n)
  return _reshape_along(jnp.asarray(np.exp(sign * 0.5j * np.pi * k / n).astype(dtype)),
                        axis, ndim)


def _interleave(x: Any, axis: int):
  """Makhoul's reordering v = [x0, x2, x4, ..., x5, x3, x1] along `axis`."""
  n = x.shape[axis]
  even = lax.slice_in_dim(x, 0, n, 2, axis)
  odd = lax.rev(lax.slice_in_dim(x, 1, n, 2, axis), (axis,))
  return lax.concatenate([even, odd], axis)


def _deinterleave(v: Any, axis: int):
  """The inverse of `_interleave`."""
  n = v.shape[axis]
  h = (n + 1) // 2
  idx = np.empty(n, np.int64)
  idx[0::2] = np.arange(h)
  idx[1::2] = np.arange(n - 1, h - 1, -1)
  return jnp.take(v, idx, axis=axis)


def dct(x: Any, type: int = 2, n: int | None = None, axis: int = -1, norm: str | None = None):
  """Discrete cosine transform of type 2 along `axis` (`scipy.fft.dct`):
  `y[k] = 2 sum_j x[j] cos(pi k (2 j + 1) / (2 N))`.

  Args:
    x: array `T[*s]`; integers are promoted to the default float dtype; complex inputs are
      transformed in their real and imaginary parts.
    type: only 2 is supported.
    n: the transform length: `x` is zero-padded or truncated to it along `axis`.
    axis: the axis to transform.
    norm: None or `"backward"` (unnormalized) or `"ortho"` (orthonormal).

  Returns:
    The DCT, of the promoted dtype, with `s[axis]` replaced by `n`.

  Raises:
    NotImplementedError: for a type other than 2.
    ValueError: for an unknown norm.

  Algorithm: Makhoul, "A fast cosine transform in one and two dimensions", IEEE Trans. ASSP
  28(1), 1980: reorder (even samples, then odd ones reversed), take an N-point FFT and
  rotate by `2 exp(-i pi k / 2N)`.
  """
  x = _check("dct", x, type, norm)
  axis = canonicalize_axis(axis, x.ndim, "dct")
  if n is not None and operator.index(n) < 1:
    raise ValueError(f"invalid number of data points ({n}) specified")
  return _dct(x, n=n, axis=axis, norm=norm)


# NB: one staged program per static configuration (rather than one compilation per eager
# operation).
@partial(jit, static_argnames=("n", "axis", "norm"))
def _dct(x, *, n, axis, norm):
  if dtypes.is_complex(x.dtype):
    return lax.complex(_dct(jnp.real(x), n=n, axis=axis, norm=norm),
                       _dct(jnp.imag(x), n=n, axis=axis, norm=norm))
  x, = promote_dtypes_inexact(x)
  x = _resize(x, n, axis)
  N = x.shape[axis]
  V = jnp_fft.fft(_interleave(x, axis), axis=axis)
  out = 2 * jnp.real(V * _twiddle(N, axis, x.ndim, V.dtype))
  if norm == "ortho":
    out = out * _ortho_scale(N, axis, x.ndim, out.dtype)
  return out.astype(x.dtype)


def idct(x: Any, type: int = 2, n: int | None = None, axis: int = -1, norm: str | None = None):
  """Inverse of the type-2 DCT along `axis` (`scipy.fft.idct`; a scaled DCT-III).

  Args, Returns and Raises: as `dct`; `idct(dct(x, norm=m), norm=m) == x` for each norm.

  Algorithm: Makhoul (1980) run backwards: rotate by `exp(i pi k / 2N)`, inverse FFT, and
  undo the even/odd reordering.
  """
  x = _check("idct", x, type, norm)
  axis = canonicalize_axis(axis, x.ndim, "idct")
  if n is not None and operator.index(n) < 1:
    raise ValueError(f"invalid number of data points ({n}) specified")
  return _idct(x, n=n, axis=axis, norm=norm)


@partial(jit, static_argnames=("n", "axis", "norm"))
def _idct(x, *, n, axis, norm):
  if dtypes.is_complex(x.dtype):
    return lax.complex(_idct(jnp.real(x), n=n, axis=axis, norm=norm),
                       _idct(jnp.imag(x), n=n, axis=axis, norm=norm))
  x, = promote_dtypes_inexact(x)
  x = _resize(x, n, axis)
  N = x.shape[axis]
  # Bring the input to orthonormal scaling, then to the coefficients Makhoul's inverse takes.
  if norm != "ortho":
    x = x * _ortho_scale(N, axis, x.ndim, x.dtype)
  c = x * _ortho_scale(N, axis, x.ndim, x.dtype) * (2 * N)
  cdt = np.result_type(x.dtype, np.complex64)
  v = jnp_fft.ifft(c.astype(cdt) * _twiddle(N, axis, x.ndim, cdt, sign=1.), axis=axis)
  return _deinterleave(jnp.real(v), axis).astype(x.dtype)


def _axes_and_sizes(name: str, x: Any, s: Any, axes: Any):
  if s is not None:
    try:
      s = [operator.index(d) for d in s]
    except TypeError:
      s = [operator.index(s)]
    if len(s) > x.ndim:
      raise ValueError(f"s must have at most x.ndim ({x.ndim}) elements, got {len(s)}")
    if any(d < 1 for d in s):
      raise ValueError(f"invalid number of data points ({min(s)}) specified")
  if axes is None:
    axes = tuple(range(x.ndim - len(s), x.ndim)) if s is not None else tuple(range(x.ndim))
  else:
    axes = (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
    axes = tuple(canonicalize_axis(a, x.ndim, name) for a in axes)
    if len(set(axes)) != len(axes):
      raise ValueError(f"{name}: repeated axis in axes={axes}")
  if s is not None and len(s) != len(axes):
    raise ValueError(f"{name}: s and axes must have the same length, got s={s} and "
                     f"axes={axes}")
  return axes, s


def dctn(x: Any, type: int = 2, s: Sequence[int] | None = None,
         axes: Sequence[int] | None = None, norm: str | None = None):
  """Multidimensional type-2 DCT (`scipy.fft.dctn`): `dct` along each of `axes`.

  Args:
    x: array `T[*shape]`.
    type: only 2 is supported.
    s: the transform length along each of `axes` (zero-pad or truncate).
    axes: the axes (default: the last `len(s)` axes, or all axes).
    norm: None, `"backward"` or `"ortho"`.

  Returns:
    The transform, of the promoted inexact dtype.

  Raises:
    NotImplementedError: for a type other than 2.
    ValueError: for an unknown norm, or `s` longer than `x.ndim` or than `axes`.

  Algorithm: the DCT is separable: a 1-D transform (Makhoul, 1980) along each axis.
  """
  x = _check("dctn", x, type, norm)
  axes, s = _axes_and_sizes("dctn", x, s, axes)
  return _dctn(x, s=None if s is None else tuple(s), axes=axes, norm=norm, inverse=False)


@partial(jit, static_argnames=("s", "axes", "norm", "inverse"))
def _dctn(x, *, s, axes, norm, inverse):
  one = _idct if inverse else _dct
  for i, a in enumerate(axes):
    x = one(x, n=None if s is None else s[i], axis=a, norm=norm)
  return x


def idctn(x: Any, type: int = 2, s: Sequence[int] | None = None,
          axes: Sequence[int] | None = None, norm: str | None = None):
  """Multidimensional inverse type-2 DCT (`scipy.fft.idctn`): `idct` along each of `axes`.
  Arguments, results and errors as `dctn`."""
  x = _check("idctn", x, type, norm)
  axes, s = _axes_and_sizes("idctn", x, s, axes)
  return _dctn(x, s=None if s is None else tuple(s), axes=axes, norm=norm, inverse=True)
