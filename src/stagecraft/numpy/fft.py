"""`stagecraft.numpy.fft`: numpy.fft's API (as JAX's numpy.fft) on the `lax.fft` primitive.

XLA transforms the innermost 1 to 3 dimensions, so the requested axes are moved last (and
back), and more than 3 axes are transformed in several passes. `s`/`n` crop or zero-pad the
input first. `norm` is 'backward' (default: 1/n on the inverse), 'ortho' (1/sqrt(n) both
ways) or 'forward' (1/n on the forward transform). Complex results are complex64 unless the
input is 64-bit (with x64 enabled)."""
from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes, lax, shape_poly
from stagecraft.lax.fft import FftType
from stagecraft.numpy.indexing import rewriting_take
from stagecraft.numpy.array_constructors import asarray
from stagecraft.numpy.array_creation import placed
from stagecraft.numpy.lax_numpy import pad, roll
from stagecraft.numpy.manipulation import moveaxis
from stagecraft.numpy.ufuncs import add, conjugate, divide, multiply, remainder, subtract
from stagecraft.numpy.util import (ArrayLike, as_array, canonicalize_axis, dtype_of, ndim_of,
                                   shape_of, slice_axis, to_inexact_dtype)

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2",
           "fftn", "ifftn", "rfftn", "irfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]


def _norm_factor(s, func_name: str, norm: str | None):
  if norm is None or norm == "backward":
    return None
  n = math.prod(s)
  if shape_poly.is_symbolic_dim(n):   # export: the size's value, staged, as JAX's
    n = lax.convert_element_type(n, dtypes.default_float_dtype())
    sqrt = lax.sqrt
  else:
    n, sqrt = float(n), np.sqrt
  inverse = func_name.startswith("i")
  if norm == "ortho":
    return sqrt(n) if inverse else 1 / sqrt(n)
  if norm == "forward":
    return n if inverse else 1 / n
  raise ValueError(f'Invalid norm value {norm}; should be "backward","ortho" or "forward".')


def _fft_nd(arr, fft_type: FftType, s):
  """XLA's FFT over the trailing len(s) axes, in passes of at most 3 axes."""
  if len(s) <= 3:
    return lax.fft(arr, fft_type, tuple(s))
  n = 2 if len(s) == 4 else 3
  nd = ndim_of(arr)
  src = tuple(range(nd - len(s), nd - n))
  dst = tuple(range(nd - len(s) + n, nd))
  if fft_type in (FftType.RFFT, FftType.FFT):
    arr = lax.fft(arr, fft_type, tuple(s)[-n:])
    arr = moveaxis(arr, src, dst)
    arr = _fft_nd(arr, FftType.FFT, s[:-n])
    return moveaxis(arr, dst, src)
  arr = moveaxis(arr, src, dst)
  arr = _fft_nd(arr, FftType.IFFT, s[:-n])
  arr = moveaxis(arr, dst, src)
  return lax.fft(arr, fft_type, tuple(s)[-n:])


def _fft_core(func_name: str, fft_type: FftType, a, s, axes, norm):
  full = f"jax.numpy.fft.{func_name}"
  arr = as_array(a)
  if s is not None:
    s = tuple(operator.index(x) for x in s)
    if any(x <= 0 for x in s):
      raise ValueError("Shape should be positive.")
  if s is not None and axes is not None and len(s) != len(axes):
    raise ValueError("Shape and axes have different lengths.")
  orig_axes = axes
  if axes is None:
    axes = tuple(range(ndim_of(arr))) if s is None else tuple(
        range(ndim_of(arr) - len(s), ndim_of(arr)))
  else:
    axes = tuple(operator.index(ax) for ax in axes)
  canon = tuple(canonicalize_axis(ax, ndim_of(arr), full) for ax in axes)
  if len(set(canon)) != len(canon):
    raise ValueError(f"{full} does not support repeated axes. Got axes {orig_axes}.")
  if orig_axes is not None:
    axes = tuple(range(ndim_of(arr) - len(axes), ndim_of(arr)))
    arr = moveaxis(arr, canon, axes)
  else:
    axes = canon
  if s is not None:
    in_s = list(shape_of(arr))
    for ax, x in zip(axes, s):
      in_s[ax] = x
    if fft_type == FftType.IRFFT:
      in_s[-1] = in_s[-1] // 2 + 1
    # Crop, then zero-pad, to `in_s`.
    for ax, target in enumerate(in_s):
      d = shape_of(arr)[ax]
      if shape_poly.is_symbolic_dim(d) or shape_poly.is_symbolic_dim(target):
        if d != target:   # NB: as JAX's `arr[:target]`: `min(b, target)` (export)
          arr = rewriting_take(arr, (slice(None),) * ax + (slice(target),))
      elif d > target:
        arr = slice_axis(arr, 0, target, ax)
    widths = [(0, t - d) for t, d in zip(in_s, shape_of(arr))]
    for ax, (_, w) in enumerate(widths):
      if shape_poly.is_symbolic_dim(w):   # export: zeros appended (`8 - min(b, 8)` of them)
        fill = lax.full(shape_of(arr)[:ax] + (w,) + shape_of(arr)[ax + 1:], 0, dtype_of(arr))
        arr = lax.concatenate([arr, fill], ax)
        widths[ax] = (0, 0)
    if any(w for _, w in widths):
      arr = pad(arr, widths)
  else:
    if fft_type == FftType.IRFFT:
      s = [shape_of(arr)[ax] for ax in axes[:-1]]
      if axes:
        s += [max(0, 2 * (shape_of(arr)[axes[-1]] - 1))]
    else:
      s = [shape_of(arr)[ax] for ax in axes]
  if fft_type == FftType.RFFT and dtypes.is_complex(dtype_of(arr)):
    raise ValueError("only real valued inputs supported for rfft")
  if fft_type != FftType.RFFT and not dtypes.is_complex(dtype_of(arr)):
    arr = lax.convert_element_type(arr, dtypes.complex128 if dtype_of(arr) == dtypes.float64
                                   else dtypes.default_complex_dtype())
  elif fft_type == FftType.RFFT and dtype_of(arr) not in (dtypes.float32, dtypes.float64):
    arr = lax.convert_element_type(arr, dtypes.default_float_dtype())
  out = _fft_nd(arr, fft_type, list(s)) if len(s) else arr
  factor = _norm_factor(s, func_name, norm)
  if isinstance(factor, core.Tracer):   # from a symbolic size (export)
    out = lax.mul(out, lax.convert_element_type(factor, dtype_of(out)))
  elif factor is not None:
    out = lax.mul(out, np.asarray(factor, dtype_of(out))[()])
  if out.weak_type:   # transforms give strongly typed results, as in JAX's numpy
    out = lax.convert_element_type(out, dtype_of(out))
  if orig_axes is not None:
    out = moveaxis(out, axes, canon)
  return out


def _axis_1d(func_name, axis):
  if isinstance(axis, (list, tuple)):
    full = f"jax.numpy.fft.{func_name}"
    raise ValueError(f"{full} does not support multiple axes. Please use {full}n. "
                     f"Got axis = {axis!r}.")


def _fft_1d(func_name, fft_type, a, n, axis, norm):
  _axis_1d(func_name, axis)
  return _fft_core(func_name, fft_type, a, None if n is None else [n],
                   None if axis is None else [axis], norm)


def _fft_2d(func_name, fft_type, a, s, axes, norm):
  if len(axes) != 2:
    raise ValueError(f"jax.numpy.fft.{func_name} only supports 2 axes. Got axes = {axes!r}.")
  return _fft_core(func_name, fft_type, a, s, axes, norm)


def fft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None):
  """The 1-D discrete Fourier transform along `axis`.

  Args:
    a: array `T[..., m, ...]` (real inputs are converted to complex).
    n: transform length: the input is cropped or zero-padded to `n` (default `m`).
    axis: the axis to transform.
    norm: 'backward' (default), 'ortho' or 'forward'.

  Returns:
    complex `[..., n, ...]`.

  Raises:
    ValueError: for a non-positive `n`, several axes, or an unknown `norm`.

  Examples:
    >>> from stagecraft import numpy as jnp
    >>> jnp.fft.fft(jnp.array([1., 2., 3., 4.]))
    Array([10.+0.j, -2.+2.j, -2.+0.j, -2.-2.j], dtype=complex64)
  """
  return _fft_1d("fft", FftType.FFT, a, n, axis, norm)


def ifft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None):
  """The inverse of `fft` (with the 1/n factor under the default norm)."""
  return _fft_1d("ifft", FftType.IFFT, a, n, axis, norm)


def rfft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None):
  """The FFT of real input: the `n // 2 + 1` non-negative frequency terms along `axis`.

  Raises:
    ValueError: for complex input.
  """
  return _fft_1d("rfft", FftType.RFFT, a, n, axis, norm)


def irfft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None):
  """The inverse of `rfft`: a real signal of length `n` (default `2 * (m - 1)`) from its
  `m` non-negative frequency terms."""
  return _fft_1d("irfft", FftType.IRFFT, a, n, axis, norm)


def hfft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None):
  """The FFT of a signal with Hermitian symmetry given by its non-negative half: a real
  spectrum of length `n` (default `2 * (m - 1)`)."""
  _axis_1d("hfft", axis)
  conj_a = conjugate(as_array(a))
  nn = (shape_of(conj_a)[axis] - 1) * 2 if n is None else n
  out = _fft_1d("hfft", FftType.IRFFT, conj_a, n, axis, norm)
  return lax.mul(out, np.asarray(nn, dtype_of(out))[()])


def ihfft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None):
  """The inverse of `hfft`: `conj(rfft(a)) / n`."""
  _axis_1d("ihfft", axis)
  arr = as_array(a)
  nn = shape_of(arr)[axis] if n is None else n
  out = _fft_1d("ihfft", FftType.RFFT, arr, n, axis, norm)
  return lax.mul(conjugate(out), np.asarray(1 / nn, dtype_of(out))[()])


def fft2(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
         norm: str | None = None):
  """The 2-D FFT over `axes` (see `fftn`)."""
  return _fft_2d("fft2", FftType.FFT, a, s, axes, norm)


def ifft2(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str | None = None):
  """The inverse of `fft2`."""
  return _fft_2d("ifft2", FftType.IFFT, a, s, axes, norm)


def rfft2(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str | None = None):
  """The 2-D FFT of real input (see `rfftn`)."""
  return _fft_2d("rfft2", FftType.RFFT, a, s, axes, norm)


def irfft2(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
           norm: str | None = None):
  """The inverse of `rfft2` (see `irfftn`)."""
  return _fft_2d("irfft2", FftType.IRFFT, a, s, axes, norm)


def fftn(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: str | None = None):
  """The N-D FFT over `axes` (default: the last `len(s)` axes, or all).

  Args:
    a: array (converted to complex).
    s: transform lengths per axis (crop or zero-pad); default: the input's.
    axes: the axes, without repeats.
    norm: 'backward' (default), 'ortho' or 'forward'.

  Raises:
    ValueError: for repeated axes, `s` and `axes` of different lengths, or a non-positive
      length.
  """
  return _fft_core("fftn", FftType.FFT, a, s, axes, norm)


def ifftn(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None):
  """The inverse of `fftn`."""
  return _fft_core("ifftn", FftType.IFFT, a, s, axes, norm)


def rfftn(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None):
  """The N-D FFT of real input: the last axis keeps its `s[-1] // 2 + 1` non-negative
  frequencies."""
  return _fft_core("rfftn", FftType.RFFT, a, s, axes, norm)


def irfftn(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
           norm: str | None = None):
  """The inverse of `rfftn`: real output with lengths `s` (default: the input's, the last
  one `2 * (m - 1)`)."""
  return _fft_core("irfftn", FftType.IRFFT, a, s, axes, norm)


def _freq_args(name, n, d):
  if isinstance(n, (list, tuple)):
    raise ValueError(f"The n argument of jax.numpy.fft.{name} only takes an int. Got n = "
                     f"{list(n)}.")
  if isinstance(d, (list, tuple)):
    raise ValueError(f"The d argument of jax.numpy.fft.{name} only takes a single value. "
                     f"Got d = {list(d)}.")
  return n if shape_poly.is_symbolic_dim(n) else operator.index(n)   # symbolic: export


def _dim_as(n, dt):
  """`n` as a scalar of dtype `dt` (a symbolic dimension's value is staged)."""
  return lax.convert_element_type(n, dt) if shape_poly.is_symbolic_dim(n) else asarray(n, dt)


def fftfreq(n: int, d: ArrayLike = 1.0, *, dtype: Any = None, device: Any = None):
  """The sample frequencies of an `n`-point FFT with sample spacing `d`:
  `[0, 1, ..., n//2 - 1 (or (n-1)//2), -n//2, ..., -1] / (d * n)`, committed to `device`
  (a device or sharding) when given.

  Raises:
    ValueError: for a sequence `n` or `d`.
  """
  n = _freq_args("fftfreq", n, d)
  out_dt = dtypes.default_float_dtype() if dtype is None else dtypes.canonicalize_dtype(dtype)
  dt = to_inexact_dtype(out_dt)
  i = lax.iota(dtypes.int32, n)
  if shape_poly.is_symbolic_dim(n):   # export: the values of `n // 2` and `n`, staged
    half, mod = _dim_as(n // 2, dtypes.int32), _dim_as(n, dtypes.int32)
  else:
    half, mod = n // 2, max(n, 1)
  k = lax.convert_element_type(subtract(remainder(add(i, half), mod), half), dt)
  out = divide(k, multiply(asarray(d, dt), _dim_as(n, dt)))
  return placed(lax.convert_element_type(out, out_dt), device, None, "fftfreq")


def rfftfreq(n: int, d: ArrayLike = 1.0, *, dtype: Any = None, device: Any = None):
  """The sample frequencies of `rfft`: `[0, 1, ..., n//2] / (d * n)`, committed to
  `device` (a device or sharding) when given.

  Raises:
    ValueError: for a sequence `n` or `d`.
  """
  n = _freq_args("rfftfreq", n, d)
  dt = dtypes.default_float_dtype() if dtype is None else dtypes.canonicalize_dtype(dtype)
  # NB: as JAX's: for a symbolic `n` (export) `n % 2 == 0` is False, so the size is
  # `floordiv(n - 1, 2) + 1` (one short of NumPy's for an even n, as in JAX)
  k = lax.iota(dt, n // 2 + 1 if n % 2 == 0 else (n - 1) // 2 + 1)
  return placed(divide(k, multiply(asarray(d, dt), _dim_as(n, dt))), device, None,
                "rfftfreq")


def _shift(x, axes, sign):
  x = as_array(x)
  if axes is None:
    axes = tuple(range(ndim_of(x)))
    shift = [sign * (d // 2) for d in shape_of(x)]
  elif isinstance(axes, int):
    shift = sign * (shape_of(x)[axes] // 2)
  else:
    shift = [sign * (shape_of(x)[ax] // 2) for ax in axes]
  return roll(x, shift, axes) if ndim_of(x) else x


def fftshift(x: ArrayLike, axes: None | int | Sequence[int] = None):
  """Moves the zero frequency to the center: `roll` by `n // 2` along `axes` (all)."""
  return _shift(x, axes, 1)


def ifftshift(x: ArrayLike, axes: None | int | Sequence[int] = None):
  """The inverse of `fftshift`: `roll` by `-(n // 2)`."""
  return _shift(x, axes, -1)
