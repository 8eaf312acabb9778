"""Reductions: sum, prod, max, min, all, any, mean, var, std, argmax, argmin (jax.numpy
semantics: integer and bool sums accumulate in the default integer type)."""
from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as np

from stagecraft import dtypes, lax
from stagecraft.numpy import lax_numpy as jnp
from stagecraft.numpy.lax_numpy import ArrayLike, _dtype, _shape, asarray


def _axes(axis, ndim: int, name: str) -> tuple[int, ...]:
  if axis is None:
    return tuple(range(ndim))
  if isinstance(axis, (int, np.integer)):
    axis = (axis,)
  out = tuple(sorted(jnp._canon_axis(a, ndim, name) for a in axis))
  if len(set(out)) != len(out):
    raise ValueError(f"{name}: duplicate value in 'axis': {axis}.")
  return out


def _keepdims(x, axes, in_shape):
  shape = tuple(1 if i in axes else d for i, d in enumerate(in_shape))
  return jnp.reshape(x, shape)


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
    dt = _dtype(a)
    if dtype is not None:
      a = lax.convert_element_type(a, dtypes.canonicalize_dtype(dtype))
    elif upcast_int and (dt == dtypes.bool_ or dtypes.is_integer(dt)) and dt.itemsize < 4:
      a = lax.convert_element_type(a, dtypes.default_uint_dtype() if dtypes.is_unsigned(dt)
                                   else dtypes.default_int_dtype())
    elif upcast_int and dt == dtypes.bool_:
      a = lax.convert_element_type(a, dtypes.default_int_dtype())
    if bool_op is not None and _dtype(a) == dtypes.bool_:
      fn_ = bool_op
    else:
      fn_ = lax_fn
    in_shape = _shape(a)
    axes = _axes(axis, len(in_shape), name)
    if not has_identity and initial is None and builtins.any(in_shape[i] == 0 for i in axes):
      raise ValueError(f"zero-size array to reduction operation {name} which has no identity.")
    r = fn_(a, axes) if axes else a
    if initial is not None:
      r = init_op(r, lax.convert_element_type(asarray(initial), _dtype(r)))
    if r.weak_type:    # reductions give strongly typed results, as in jax.numpy
      r = lax.convert_element_type(r, _dtype(r), weak_type=False)
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
    if _dtype(a) != dtypes.bool_:
      a = lax.ne(a, np.zeros((), _dtype(a))[()])
    in_shape = _shape(a)
    axes = _axes(axis, len(in_shape), name)
    r = lax_fn(a, axes) if axes else a
    return _keepdims(r, axes, in_shape) if keepdims else r
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = f"Logical {'AND' if name == 'all' else 'OR'} over `axis` (bool result)."
  return fn


all = _bool_reduction("all", lax.reduce_and)
any = _bool_reduction("any", lax.reduce_or)


def _count(shape, axes) -> int:
  return math.prod(shape[i] for i in axes)


def mean(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
         keepdims: bool = False, *, where: ArrayLike | None = None):
  """Arithmetic mean over `axis`; integer inputs give the default float dtype."""
  a = asarray(a)
  in_shape = _shape(a)
  axes = _axes(axis, len(in_shape), "mean")
  dt = dtypes.canonicalize_dtype(dtype) if dtype is not None else (
      _dtype(a) if dtypes.is_inexact(_dtype(a)) else dtypes.default_float_dtype())
  s = sum(lax.convert_element_type(a, dt) if _dtype(a) != dt else a, axis=axes,
          keepdims=keepdims)
  n = _count(in_shape, axes)
  return lax.div(s, np.asarray(n if n else np.nan, dt)[()])   # NB: empty -> NaN, as NumPy


def var(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None, ddof: int = 0,
        keepdims: bool = False, *, where: ArrayLike | None = None, correction=None):
  """Variance over `axis`: mean(|x - mean(x)|**2) * n / (n - ddof)."""
  if correction is not None:
    ddof = correction
  a = asarray(a)
  in_shape = _shape(a)
  axes = _axes(axis, len(in_shape), "var")
  dt = dtypes.canonicalize_dtype(dtype) if dtype is not None else (
      _dtype(a) if dtypes.is_inexact(_dtype(a)) else dtypes.default_float_dtype())
  a = lax.convert_element_type(a, dt) if _dtype(a) != dt else a
  if dtypes.is_complex(dt):
    raise NotImplementedError("var/std of complex arrays needs conj/real (not available yet).")
  centered = jnp.subtract(a, mean(a, axes, keepdims=True))
  sq = lax.mul(centered, centered)
  n = _count(in_shape, axes) - ddof
  s = sum(sq, axis=axes, keepdims=keepdims)
  # n <= 0 divides by 0 (inf, or nan for 0/0), as NumPy does.
  return lax.div(s, np.asarray(builtins.max(n, 0), _dtype(s))[()])


def std(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None, ddof: int = 0,
        keepdims: bool = False, *, where: ArrayLike | None = None, correction=None):
  """Standard deviation: sqrt(var(...))."""
  return lax.sqrt(var(a, axis, dtype, out, ddof, keepdims, where=where,
                      correction=correction))


def _arg_reduction(name, lax_fn):
  def fn(a: ArrayLike, axis: int | None = None, out: None = None, keepdims: bool = False):
    a = asarray(a)
    if axis is None:
      shape = _shape(a)
      if math.prod(shape) == 0:
        raise ValueError(f"attempt to get {name} of an empty sequence")
      a = jnp.ravel(a)
      r = lax_fn(a, 0, dtypes.default_int_dtype())
      return jnp.reshape(r, (1,) * len(shape)) if keepdims else r
    in_shape = _shape(a)
    ax = jnp._canon_axis(axis, len(in_shape), name)
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
