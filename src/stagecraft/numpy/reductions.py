"""Reductions: sum, prod, max, min, all, any, mean, var, std, argmax, argmin (JAX's numpy
semantics: integer and bool sums accumulate in the default integer type)."""
from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.numpy import ufuncs
from stagecraft.numpy.array_constructors import asarray
from stagecraft.numpy.array_creation import full, full_like
from stagecraft.numpy.manipulation import broadcast_to, ravel, reshape
from stagecraft.numpy.ufuncs import isnan, multiply, subtract
from stagecraft.numpy.util import (ArrayLike, canonicalize_axis, const, dtype_of,
                                   promote_dtypes_inexact, real_dtype, reduction_axes, shape_of)
from stagecraft.runtime.array import Array

__all__ = ["sum", "prod", "max", "min", "amax", "amin", "all", "any", "mean", "var", "std",
           "argmax", "argmin", "count_nonzero", "cumsum", "cumprod", "cumproduct", "nancumsum",
           "nancumprod", "cumulative_sum", "cumulative_prod", "nansum", "nanprod", "nanmax",
           "nanmin", "nanmean", "nanvar", "nanstd", "nanargmax", "nanargmin", "ptp", "average"]


def masked(x, where, fill):
  """`x` with the entries outside `where` replaced by `fill` (the `where=` of a reduction);
  `x` itself for `where=None`. A helper of the library, not in `stagecraft.numpy`."""
  return x if where is None else ufuncs.where(where, x, fill)


def _keepdims(x, axes, in_shape):
  shape = tuple(1 if i in axes else d for i, d in enumerate(in_shape))
  return reshape(x, shape)


def _reduction(name: str, lax_fn, *, upcast_int=False, bool_op=None, init_op=None,
               has_identity=True):
  def fn(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
         keepdims: bool = False, initial: ArrayLike | None = None,
         where: ArrayLike | None = None):
    if out is not None:
      raise NotImplementedError(f"{name}: the 'out' argument is not supported (arrays are "
                                f"immutable).")
    a = asarray(a)
    if where is not None:
      raise NotImplementedError(f"{name}: 'where=' is not supported yet.")
    dt = dtype_of(a)
    if dtype is not None:
      a = lax.convert_element_type(a, dtypes.canonicalize_dtype(dtype))
    elif upcast_int and (dt == dtypes.bool_ or dtypes.is_integer(dt)) and dt.itemsize < 4:
      a = lax.convert_element_type(a, dtypes.default_uint_dtype() if dtypes.is_unsigned(dt)
                                   else dtypes.default_int_dtype())
    elif upcast_int and dt == dtypes.bool_:
      a = lax.convert_element_type(a, dtypes.default_int_dtype())
    if bool_op is not None and dtype_of(a) == dtypes.bool_:
      fn_ = bool_op
    else:
      fn_ = lax_fn
    in_shape = shape_of(a)
    axes = reduction_axes(axis, len(in_shape), name)
    if not has_identity and initial is None and builtins.any(in_shape[i] == 0 for i in axes):
      raise ValueError(f"zero-size array to reduction operation {name} which has no identity.")
    r = fn_(a, axes) if axes else a
    if initial is not None:
      if isinstance(initial, (Array, core.Tracer)):
        init = lax.convert_element_type(initial, dtype_of(r))
      else:   # host values stay literals, so XLA can fold e.g. max(x, -inf)
        try:
          with np.errstate(invalid="raise", over="raise"):
            init = np.asarray(initial, dtype_of(r))
        except (OverflowError, ValueError, FloatingPointError):   # e.g. -inf for ints: XLA's
          init = lax.convert_element_type(asarray(initial), dtype_of(r))   # conversion rules
      r = init_op(r, init)
    if r.weak_type:    # reductions give strongly typed results, as in JAX's numpy
      r = lax.convert_element_type(r, dtype_of(r), weak_type=False)
    return _keepdims(r, axes, in_shape) if keepdims else r
  fn.__name__ = fn.__qualname__ = name
  return fn


sum = _reduction("sum", lax.reduce_sum, upcast_int=True, bool_op=lax.reduce_or,
                 init_op=lax.add)
prod = _reduction("prod", lax.reduce_prod, upcast_int=True, bool_op=lax.reduce_and,
                  init_op=lax.mul)
max = _reduction("max", lax.reduce_max, bool_op=lax.reduce_or, init_op=lax.max,
                 has_identity=False)
min = _reduction("min", lax.reduce_min, bool_op=lax.reduce_and, init_op=lax.min,
                 has_identity=False)
sum.__doc__ = """Sum over `axis` (all axes when None).

Args:
  a: array T[*s]. axis: int, tuple of ints or None (negative allowed). dtype: accumulation and
  result dtype (default: T, or the default int for bool/small ints). keepdims: keep reduced
  axes with size 1. initial: a value added to the result.

Returns:
  Array of the reduced shape.

Raises:
  ValueError: for out-of-range or duplicate axes.
"""
prod.__doc__ = "Product over `axis`; see `sum` for the arguments."
max.__doc__ = ("Maximum over `axis` (NaN-propagating); see `sum` for the arguments.\n\n"
               "Raises:\n  ValueError: reducing a zero-size axis without `initial`.")
min.__doc__ = ("Minimum over `axis` (NaN-propagating); see `sum` for the arguments.\n\n"
               "Raises:\n  ValueError: reducing a zero-size axis without `initial`.")
amax, amin = max, min


def _bool_reduction(name, lax_fn):
  def fn(a: ArrayLike, axis: Any = None, out: None = None, keepdims: bool = False,
         *, where: ArrayLike | None = None):
    a = asarray(a)
    if dtype_of(a) != dtypes.bool_:
      a = lax.ne(a, np.zeros((), dtype_of(a))[()])
    in_shape = shape_of(a)
    axes = reduction_axes(axis, len(in_shape), name)
    r = lax_fn(a, axes) if axes else a
    return _keepdims(r, axes, in_shape) if keepdims else r
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = f"Logical {'AND' if name == 'all' else 'OR'} over `axis` (bool result)."
  return fn


all = _bool_reduction("all", lax.reduce_and)
any = _bool_reduction("any", lax.reduce_or)


def _count(shape, axes) -> int:
  return math.prod(shape[i] for i in axes)


def _upcast_f16(dt: np.dtype) -> np.dtype:
  """The dtype mean and var accumulate in: float32 for 16-bit floats (as JAX's
  `_upcast_f16`: summing 10,000 bfloat16 threes in bfloat16 gives 3.015625), else `dt`."""
  return np.dtype(np.float32) if dt in (dtypes.float16, dtypes.bfloat16) else dt


def mean(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
         keepdims: bool = False, *, where: ArrayLike | None = None):
  """Arithmetic mean over `axis`; integer inputs give the default float dtype."""
  a = asarray(a)
  in_shape = shape_of(a)
  axes = reduction_axes(axis, len(in_shape), "mean")
  dt = dtypes.canonicalize_dtype(dtype) if dtype is not None else (
      dtype_of(a) if dtypes.is_inexact(dtype_of(a)) else dtypes.default_float_dtype())
  ct = _upcast_f16(dt)
  s = sum(lax.convert_element_type(a, ct) if dtype_of(a) != ct else a, axis=axes,
          keepdims=keepdims)
  n = _count(in_shape, axes)
  out = lax.div(s, np.asarray(n if n else np.nan, ct)[()])   # NB: empty -> NaN, as NumPy
  return out if ct == dt else lax.convert_element_type(out, dt)


def var(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None, ddof: int = 0,
        keepdims: bool = False, *, where: ArrayLike | None = None, correction=None):
  """Variance over `axis`: mean(|x - mean(x)|**2) * n / (n - ddof).

  Integer inputs give the default float; complex inputs give their real dtype
  (`|x - mean|**2` is real).
  """
  if correction is not None:
    ddof = correction
  a = asarray(a)
  in_shape = shape_of(a)
  axes = reduction_axes(axis, len(in_shape), "var")
  dt = dtypes.canonicalize_dtype(dtype) if dtype is not None else (
      dtype_of(a) if dtypes.is_inexact(dtype_of(a)) else dtypes.default_float_dtype())
  ct = _upcast_f16(dt)
  a = lax.convert_element_type(a, ct) if dtype_of(a) != ct else a
  centered = subtract(a, mean(a, axes, keepdims=True))
  if dtypes.is_complex(ct):
    sq = lax.real(lax.mul(centered, lax.conj(centered)))
  else:
    sq = lax.mul(centered, centered)
  n = _count(in_shape, axes) - ddof
  s = sum(sq, axis=axes, keepdims=keepdims)
  # n <= 0 divides by 0 (inf, or nan for 0/0), as NumPy does.
  out = lax.div(s, np.asarray(builtins.max(n, 0), dtype_of(s))[()])
  return out if ct == dt else lax.convert_element_type(out, dt)


def std(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None, ddof: int = 0,
        keepdims: bool = False, *, where: ArrayLike | None = None, correction=None):
  """Standard deviation: sqrt(var(...))."""
  return lax.sqrt(var(a, axis, dtype, out, ddof, keepdims, where=where,
                      correction=correction))


def _arg_reduction(name, lax_fn):
  def fn(a: ArrayLike, axis: int | None = None, out: None = None, keepdims: bool = False):
    a = asarray(a)
    if axis is None:
      shape = shape_of(a)
      if math.prod(shape) == 0:
        raise ValueError(f"attempt to get {name} of an empty sequence")
      a = ravel(a)
      r = lax_fn(a, 0, dtypes.default_int_dtype())
      return reshape(r, (1,) * len(shape)) if keepdims else r
    in_shape = shape_of(a)
    ax = canonicalize_axis(axis, len(in_shape), name)
    if in_shape[ax] == 0:
      raise ValueError(f"attempt to get {name} of an empty sequence")
    r = lax_fn(a, ax, dtypes.default_int_dtype())
    return _keepdims(r, (ax,), in_shape) if keepdims else r
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = (f"Index of the {'largest' if 'max' in name else 'smallest'} value along "
                f"`axis` (of the flattened array when None); the first one on ties, NaN "
                f"counts as extreme. Result dtype: int32 (int64 with x64).\n\nRaises:\n"
                f"  ValueError: on an empty axis.")
  return fn


argmax = _arg_reduction("argmax", lax.argmax)
argmin = _arg_reduction("argmin", lax.argmin)


def count_nonzero(a: ArrayLike, axis: Any = None, keepdims: bool = False):
  """The number of nonzero elements over `axis`, as the default integer dtype."""
  a = asarray(a)
  return sum(lax.ne(a, const(a, 0)) if dtype_of(a) != dtypes.bool_ else a, axis=axis,
             dtype=dtypes.default_int_dtype(), keepdims=keepdims)


# ---------------------------------------------------------------------------
# Cumulative reductions (lax.cumsum & co., one `reduce_window`-free scan primitive each)


def _cumulative(name: str, lax_fn, a, axis, dtype, fill_nan=False, fill_value=0,
                promote_integers=False):
  a = asarray(a)
  if axis is None or shape_of(a) == ():
    a = ravel(a)
    axis = 0
  axis = canonicalize_axis(axis, len(shape_of(a)), name)
  if fill_nan and dtypes.is_inexact(dtype_of(a)):
    a = ufuncs.where(isnan(a), const(a, fill_value), a)
  dt = dtype_of(a)
  if dtype is None:
    if promote_integers or dt == dtypes.bool_:
      res = _promote_integer(dt)
    else:
      res = dt
    calc = res
  elif dtypes.canonicalize_dtype(dtype) == dtypes.bool_:
    res = dtypes.bool_
    if dt != res:
      a = lax.ne(a, const(a, 0))
    calc = dtypes.default_int_dtype()
  else:
    res = calc = dtypes.canonicalize_dtype(dtype)
  a = lax.convert_element_type(a, calc) if dtype_of(a) != calc else a
  out = lax_fn(a, axis=axis) if shape_of(a)[axis] else a
  # NB: results are strongly typed, as in JAX's numpy.
  return lax.convert_element_type(out, res) if (dtype_of(out) != res or out.weak_type) else out


def _promote_integer(dt):
  """The dtype sums of `dt` accumulate in: bool and narrow ints widen to the default
  (unsigned) integer, as JAX's numpy."""
  if dt == dtypes.bool_:
    return dtypes.default_int_dtype()
  if dtypes.is_integer(dt) and dt.itemsize < dtypes.default_int_dtype().itemsize:
    return dtypes.default_uint_dtype() if dtypes.is_unsigned(dt) else (
        dtypes.default_int_dtype())
  return dt


def cumsum(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: None = None):
  """Cumulative sum along `axis` (of the flattened array when None).

  Args:
    a: array `T[*s]`.
    axis: the axis; None flattens first.
    dtype: accumulation and result dtype (default: T; bool accumulates in the default
      integer). Narrow integers wrap around on overflow, as in JAX's numpy.

  Returns:
    Array of shape `s` (`[prod(s)]` for `axis=None`).

  Raises:
    ValueError: for an out-of-range axis.
  """
  _no_out("cumsum", out)
  return _cumulative("cumsum", lax.cumsum, a, axis, dtype)


def cumprod(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: None = None):
  """Cumulative product along `axis`; see `cumsum` for the arguments."""
  _no_out("cumprod", out)
  return _cumulative("cumprod", lax.cumprod, a, axis, dtype)


def nancumsum(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: None = None):
  """`cumsum` with NaN counted as 0."""
  _no_out("nancumsum", out)
  return _cumulative("nancumsum", lax.cumsum, a, axis, dtype, fill_nan=True, fill_value=0)


def nancumprod(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: None = None):
  """`cumprod` with NaN counted as 1."""
  _no_out("nancumprod", out)
  return _cumulative("nancumprod", lax.cumprod, a, axis, dtype, fill_nan=True, fill_value=1)


cumproduct = cumprod


def _cumulative_api(name, lax_fn, identity):
  def fn(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None,
         include_initial: bool = False):
    x = asarray(x)
    if shape_of(x) == ():
      raise ValueError(f"The input must be non-scalar to take a {name.split('_')[1]}, "
                       f"however a scalar value or scalar array was given.")
    if axis is None:
      if len(shape_of(x)) > 1:
        raise ValueError(f"The input array has rank {len(shape_of(x))}, however axis was not "
                         f"set to an explicit value. The axis argument is only optional for "
                         f"one-dimensional arrays.")
      axis = 0
    axis = canonicalize_axis(axis, len(shape_of(x)), name)
    r = _cumulative(name, lax_fn, x, axis, dtype, promote_integers=True)
    if include_initial:
      shape = tuple(1 if i == axis else d for i, d in enumerate(shape_of(r)))
      r = lax.concatenate([full(shape, identity, dtype_of(r)), r], axis)
    return r
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = (f"The Array API's {name}: like `cum{name.split('_')[1][:-3]}`, with narrow "
                f"integers promoted as `sum` does, `axis` required for N-D input, and "
                f"`include_initial` prepending the identity ({identity}).\n\nRaises:\n"
                f"  ValueError: for 0-d input, or N-D input without `axis`.")
  return fn


cumulative_sum = _cumulative_api("cumulative_sum", lax.cumsum, 0)
cumulative_prod = _cumulative_api("cumulative_prod", lax.cumprod, 1)


def _no_out(name, out):
  if out is not None:
    raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported.")


# ---------------------------------------------------------------------------
# NaN-ignoring reductions


def _nan_reduction(name, reduction, init, nan_if_all_nan):
  def fn(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
         keepdims: bool = False, initial: ArrayLike | None = None,
         where: ArrayLike | None = None):
    _no_out(name, out)
    a = asarray(a)
    kw = dict(axis=axis, keepdims=keepdims, initial=initial, where=where)
    if dtype is not None:
      kw["dtype"] = dtype
    if not dtypes.is_inexact(dtype_of(a)):
      return reduction(a, **kw)
    nan = isnan(a)
    r = reduction(ufuncs.where(nan, const(a, init), a), **kw)
    if nan_if_all_nan:
      r = ufuncs.where(all(nan, axis=axis, keepdims=keepdims), const(r, np.nan), r)
    return r
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = (f"`{reduction.__name__}` ignoring NaNs (treated as {init})"
                + ("; NaN where a slice is all NaN" if nan_if_all_nan else "")
                + ". See `sum` for the arguments.")
  return fn


nansum = _nan_reduction("nansum", sum, 0, False)
nanprod = _nan_reduction("nanprod", prod, 1, False)
nanmax = _nan_reduction("nanmax", max, -np.inf, True)
nanmin = _nan_reduction("nanmin", min, np.inf, True)


def nanmean(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
            keepdims: bool = False, where: ArrayLike | None = None):
  """Mean ignoring NaNs (NaN for all-NaN slices); integers give the default float."""
  _no_out("nanmean", out)
  a = asarray(a)
  if not dtypes.is_inexact(dtype_of(a)):
    return mean(a, axis, dtype, keepdims=keepdims)
  dt = dtype_of(a) if dtype is None else dtypes.canonicalize_dtype(dtype)
  valid = lax.bitwise_not(isnan(a))
  n = sum(valid, axis=axis, dtype=dt if not dtypes.is_complex(dt) else None,
          keepdims=keepdims)
  n = lax.convert_element_type(n, dt)
  return lax.div(nansum(a, axis=axis, dtype=dt, keepdims=keepdims), n)


def nanvar(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
           ddof: int = 0, keepdims: bool = False, where: ArrayLike | None = None):
  """Variance ignoring NaNs (NaN where fewer than ddof + 1 values remain)."""
  _no_out("nanvar", out)
  a = asarray(a)
  dt = dtypes.canonicalize_dtype(dtype) if dtype is not None else (
      dtype_of(a) if dtypes.is_inexact(dtype_of(a)) else dtypes.default_float_dtype())
  ct = _upcast_f16(dt)   # NB: accumulated in float32 for 16-bit floats, as var
  a = lax.convert_element_type(a, ct) if dtype_of(a) != ct else a
  valid = lax.bitwise_not(isnan(a))
  centered = subtract(a, nanmean(a, axis, keepdims=True))
  centered = ufuncs.where(valid, centered, const(centered, 0))
  rdt = real_dtype(ct)
  sq = lax.real(lax.mul(centered, lax.conj(centered))) if dtypes.is_complex(ct) else (
      lax.mul(centered, centered))
  n = lax.convert_element_type(sum(valid, axis=axis, keepdims=keepdims), rdt)
  denom = lax.sub(n, np.asarray(ddof, rdt)[()])
  denom = ufuncs.where(lax.le(denom, np.zeros((), rdt)[()]), np.asarray(np.nan, rdt)[()], denom)
  out = lax.div(sum(sq, axis=axis, keepdims=keepdims), denom)
  return out if ct == dt else lax.convert_element_type(out, real_dtype(dt))


def nanstd(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
           ddof: int = 0, keepdims: bool = False, where: ArrayLike | None = None):
  """Standard deviation ignoring NaNs: sqrt(nanvar(...))."""
  return lax.sqrt(nanvar(a, axis, dtype, out, ddof, keepdims, where))


def _nan_arg_reduction(name, arg_fn, fill):
  def fn(a: ArrayLike, axis: int | None = None, out: None = None, keepdims: bool = False):
    _no_out(name, out)
    a = asarray(a)
    if not dtypes.is_inexact(dtype_of(a)):
      return arg_fn(a, axis, keepdims=keepdims)
    nan = isnan(a)
    r = arg_fn(ufuncs.where(nan, const(a, fill), a), axis, keepdims=keepdims)
    return ufuncs.where(all(nan, axis=axis, keepdims=keepdims), const(r, -1), r)
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = (f"`{arg_fn.__name__}` ignoring NaNs; -1 where a slice is all NaN (NumPy "
                f"raises there instead).\n\nRaises:\n  ValueError: on an empty axis.")
  return fn


nanargmax = _nan_arg_reduction("nanargmax", argmax, -np.inf)
nanargmin = _nan_arg_reduction("nanargmin", argmin, np.inf)


def ptp(a: ArrayLike, axis: Any = None, out: None = None, keepdims: bool = False):
  """Peak to peak: `max - min` over `axis`."""
  _no_out("ptp", out)
  return subtract(max(a, axis, keepdims=keepdims), min(a, axis, keepdims=keepdims))


def average(a: ArrayLike, axis: Any = None, weights: ArrayLike | None = None,
            returned: bool = False, keepdims: bool = False):
  """Weighted average `sum(a * w) / sum(w)` over `axis` (the mean without weights).

  Args:
    a: array `T[*s]`.
    axis: axes to average over (None: all).
    weights: None, an array of `a`'s shape, or (for a single `axis`) a 1-D array of the
      length of that axis.
    returned: also return the sum of the weights (broadcast to the result's shape).

  Returns:
    The average (inexact dtype), or `(average, sum_of_weights)`.

  Raises:
    ValueError: if the weights' shape fits neither form.
  """
  a = asarray(a)
  if weights is None:
    avg = mean(a, axis, keepdims=keepdims)
    wsum = full_like(avg, math.prod(shape_of(a)) / builtins.max(math.prod(shape_of(avg)), 1))
  else:
    a, w = promote_dtypes_inexact(a, asarray(weights))
    a, w = asarray(a), asarray(w)
    sa, sw = shape_of(a), shape_of(w)
    if sa != sw:
      if axis is None:
        raise ValueError("Axis must be specified when shapes of a and weights differ.")
      axes = reduction_axes(axis, len(sa), "average")
      if len(sw) != 1 or len(axes) != 1:
        raise ValueError("1D weights expected when shapes of a and weights differ.")
      if sw[0] != sa[axes[0]]:
        raise ValueError("Length of weights not compatible with specified axis.")
      w = lax.broadcast_in_dim(w, sa, axes)
    wsum = sum(w, axis, keepdims=keepdims)
    avg = lax.div(sum(multiply(a, w), axis, keepdims=keepdims), wsum)
  if returned:
    if shape_of(avg) != shape_of(wsum):
      wsum = broadcast_to(wsum, shape_of(avg))
    return avg, wsum
  return avg
