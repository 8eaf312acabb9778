"""Reductions: sum, prod, max, min, all, any, mean, var, std, argmax, argmin (JAX's numpy
semantics: integer and bool sums accumulate in the default integer type)."""
from __future__ import annotations

import builtins
import math
import operator
from typing import Any

import numpy as np

from stagecraft import core, dtypes, lax, shape_poly
from stagecraft.lax import misc as lax_misc
from stagecraft.lax.utils import KEY_TYPES
from stagecraft.numpy import ufuncs
from stagecraft.numpy.array_constructors import asarray
from stagecraft.numpy.array_creation import full_like
from stagecraft.numpy.manipulation import broadcast_shapes, broadcast_to, ravel, reshape
from stagecraft.numpy.ufuncs import isnan, multiply
from stagecraft.numpy.util import (ArrayLike, canonicalize_axis, check_arraylike, const,
                                   dtype_of, ensure_arraylike, ndim_of, promote_dtypes_inexact,
                                   real_dtype, reduction_axes,
                                   shape_of, to_inexact_dtype)
from stagecraft.pjit import jit
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
  """`x`, reduced over `axes` of `in_shape`, with those axes back as size 1 (a
  `broadcast_in_dim`, as JAX's `lax.expand_dims`)."""
  return lax.expand_dims(x, axes)


def _no_out_immutable(name, out):
  if out is not None:
    raise NotImplementedError(f"{name}: the 'out' argument is not supported (arrays are "
                              f"immutable).")


def check_where(name: str, where: Any):
  """The `where=` mask of a reduction as a bool Array (None stays None). A helper of the
  library, not in `stagecraft.numpy`.

  Raises:
    TypeError: if `where` is not an array or scalar (lists are refused, as in JAX's numpy).
    ValueError: if its dtype is not bool.
  """
  if where is None:
    return None
  check_arraylike(name, where)
  where = asarray(where)
  if dtype_of(where) != dtypes.bool_:
    raise ValueError(f"jnp.{name}: where must be None or a boolean array; got "
                     f"where.dtype={dtype_of(where)!r}.")
  return where


def _where_mask(where, in_shape):
  """The `where=` mask of a reduction over an array of `in_shape`, for the selection: as it
  is when it broadcasts to `in_shape` (the select broadcasts it, as JAX's `_where`), else
  broadcast here (`broadcast_to` raises JAX's ValueError)."""
  try:
    if broadcast_shapes(shape_of(where), in_shape) == tuple(in_shape):
      return where
  except ValueError:
    pass
  return broadcast_to(where, in_shape)


def _identity(kind: str, dt: np.dtype):
  """The identity of the reduction `kind` in dtype `dt`, as a host scalar: 0, 1, the lowest
  value (max) or the highest (min); for types without infinities, their finite extremes."""
  if dt == dtypes.bool_:
    return np.bool_(kind in ("prod", "min", "all"))
  if kind in ("sum", "prod"):
    return np.asarray(0 if kind == "sum" else 1, dt)[()]
  sign = -1 if kind == "max" else 1
  if dtypes.is_integer(dt):
    info = np.iinfo(dt)
    return np.asarray(info.min if sign < 0 else info.max, dt)[()]
  with np.errstate(invalid="ignore", over="ignore"):
    v = np.asarray(sign * np.inf, dt)
  if not np.isinf(v):
    fi = dtypes.finfo(dt)
    v = np.asarray(fi.min if sign < 0 else fi.max, dt)
  return v[()]


def _host_initial(initial, dt):
  """`initial` in dtype `dt`: a host scalar where it converts exactly (so XLA can fold e.g.
  max(x, -inf)), else a converted Array (XLA's conversion rules, e.g. -inf to an int).

  Raises:
    ValueError: if `initial` is not a scalar.
  """
  if np.ndim(initial) != 0:
    raise ValueError(f"initial value must be a scalar. Got array of shape "
                     f"{tuple(np.shape(initial))}")
  if isinstance(initial, (Array, core.Tracer)):
    return lax.convert_element_type(initial, dt)
  try:
    with np.errstate(invalid="raise", over="raise"):
      return np.asarray(initial, dt)[()]
  except (OverflowError, ValueError, FloatingPointError, TypeError):
    return lax.convert_element_type(asarray(initial), dt)


_OPS = {   # kind -> (reduction, bool reduction, binary op, bool binary op)
    "sum": (lax.reduce_sum, lax.reduce_or, lax.add, lax.bitwise_or),
    "prod": (lax.reduce_prod, lax.reduce_and, lax.mul, lax.bitwise_and),
    "max": (lax.reduce_max, lax.reduce_or, lax.max, lax.bitwise_or),
    "min": (lax.reduce_min, lax.reduce_and, lax.min, lax.bitwise_and),
}


def _reduce(name: str, kind: str, a, axis, dtype, keepdims, initial, where, *,
            numeric: bool, promote_integers: bool):
  """The shared body of sum, prod, max and min (see `sum` for the arguments); `numeric`:
  bool counts as int and 16-bit floats accumulate in float32 (sum and prod)."""
  ufuncs.check_arraylike(name, a)   # NB: a list raises, as JAX's (`jnp.sum([1, 2])`)
  if type(a) in KEY_TYPES:   # typed PRNG keys have no arithmetic (JAX's message)
    raise TypeError(f"Cannot interpret '{a.dtype}' as a data type")
  a = asarray(a)
  where = check_where(name, where)
  has_identity = kind in ("sum", "prod")
  if initial is None and not has_identity and where is not None:
    raise ValueError(f"reduction operation {name} does not have an identity, so to use a "
                     f"where mask one has to specify 'initial'")
  in_shape = shape_of(a)
  axes = reduction_axes(axis, len(in_shape), name)
  if not has_identity and initial is None and builtins.any(in_shape[i] == 0 for i in axes):
    raise ValueError(f"zero-size array to reduction operation {name} which has no identity.")
  dt = dtype_of(a)
  if numeric and dt == dtypes.bool_:
    dt = dtypes.int32   # NB: as JAX's to_numeric_dtype, also with x64
  if dtype is not None:
    res = dtypes.check_user_dtype(dtype, name)
  else:
    res = _promote_integer(dt) if numeric and promote_integers else dt
  ct = _upcast_f16(res) if numeric and dtype is None else res
  if numeric and dtype_of(a) == dtypes.bool_ and ct != dtypes.bool_:
    # NB: as JAX's numpy, bool becomes int32 first, then the accumulation dtype (two
    # converts in a traced program for sum(b, dtype=float32)).
    a = lax.convert_element_type(a, dtypes.int32, weak_type=False)
  if dtype_of(a) != ct or a.weak_type:   # reductions give strongly typed results
    a = lax.convert_element_type(a, ct, weak_type=False)
  reduce_fn, bool_reduce, op, bool_op = _OPS[kind]
  if ct == dtypes.bool_:
    reduce_fn, op = bool_reduce, bool_op
  if where is not None:
    a = ufuncs.where(_where_mask(where, in_shape), a, _identity(kind, ct))
  r = reduce_fn(a, axes)   # NB: also for axes=(), as JAX (a `reduce_sum[axes=()]`)
  if initial is not None:
    r = op(_host_initial(initial, ct), r)
  if ct != res:
    r = lax.convert_element_type(r, res)
  if dtype is not None:
    # NB: JAX's numpy converts the result to the dtype as the user gave it, so a 64-bit
    # request without x64 is reported a second time, by convert_element_type.
    dtypes.check_user_dtype(dtype, "convert_element_type")
  return _keepdims(r, axes, in_shape) if keepdims else r


def sum(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
        keepdims: bool = False, initial: ArrayLike | None = None,
        where: ArrayLike | None = None, promote_integers: bool = True):
  """Sum over `axis` (all axes when None), as JAX's numpy.

  Args:
    a: array `T[*s]`.
    axis: int, tuple of ints or None (negative allowed).
    dtype: accumulation and result dtype. Default: T, except that bool counts as int32 and,
      with `promote_integers`, integers narrower than the default (u)int widen to it;
      float16/bfloat16 accumulate in float32.
    out: unsupported (must be None).
    keepdims: keep the reduced axes with size 1.
    initial: a scalar added to the result.
    where: bool mask broadcastable to `s`: only the True entries are summed.
    promote_integers: widen narrow integers as above.

  Returns:
    Array of the reduced shape, strongly typed.

  Raises:
    ValueError: out-of-range or duplicate axes; a non-scalar `initial`; a non-bool `where`.
    TypeError: a `where` that is not an array (a list).
    NotImplementedError: `out` given.
  """
  _no_out_immutable("sum", out)
  return _reduce("sum", "sum", a, axis, dtype, keepdims, initial, where, numeric=True,
                 promote_integers=promote_integers)


def prod(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
         keepdims: bool = False, initial: ArrayLike | None = None,
         where: ArrayLike | None = None, promote_integers: bool = True):
  """Product over `axis`; `initial` multiplies the result, entries outside `where` count
  as 1. See `sum` for the arguments, dtypes and errors."""
  _no_out_immutable("prod", out)
  return _reduce("prod", "prod", a, axis, dtype, keepdims, initial, where, numeric=True,
                 promote_integers=promote_integers)


def max(a: ArrayLike, axis: Any = None, out: None = None, keepdims: bool = False,
        initial: ArrayLike | None = None, where: ArrayLike | None = None):
  """Maximum over `axis` (NaN-propagating), in the dtype of `a`.

  `initial` takes part in the maximum; entries outside `where` are ignored. See `sum` for
  the other arguments.

  Raises:
    ValueError: reducing a zero-size axis, or using `where`, without `initial`; and as
      `sum`.
  """
  _no_out_immutable("max", out)
  return _reduce("max", "max", a, axis, None, keepdims, initial, where, numeric=False,
                 promote_integers=False)


def min(a: ArrayLike, axis: Any = None, out: None = None, keepdims: bool = False,
        initial: ArrayLike | None = None, where: ArrayLike | None = None):
  """Minimum over `axis` (NaN-propagating); see `max`."""
  _no_out_immutable("min", out)
  return _reduce("min", "min", a, axis, None, keepdims, initial, where, numeric=False,
                 promote_integers=False)


amax, amin = max, min


def _bool_reduction(name, kind):
  def fn(a: ArrayLike, axis: Any = None, out: None = None, keepdims: bool = False,
         *, where: ArrayLike | None = None):
    _no_out(name, out)
    ufuncs.check_arraylike(name, a)
    a = asarray(a)
    where = check_where(name, where)
    dt = dtype_of(a)
    if dtypes.is_complex(dt):   # NB: the real part decides, as JAX's numpy (not NumPy)
      a, dt = lax.real(a), real_dtype(dt)
    if dt != dtypes.bool_ or a.weak_type:   # nonzero is True, as JAX's astype(bool)
      a = lax.convert_element_type(a, dtypes.bool_, weak_type=False)
    in_shape = shape_of(a)
    axes = reduction_axes(axis, len(in_shape), name)
    if where is not None:
      a = ufuncs.where(_where_mask(where, in_shape), a, _identity(kind, dtypes.bool_))
    r = _OPS[kind][1](a, axes)   # NB: also for axes=(), as JAX (`reduce_or[axes=()]`)
    return _keepdims(r, axes, in_shape) if keepdims else r
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = (f"Logical {'AND' if name == 'all' else 'OR'} over `axis` (bool result); "
                f"entries outside the bool mask `where` count as "
                f"{name == 'all'}. Nonzero counts as True (for complex input: a nonzero real "
                f"part, as JAX's numpy).\n\nRaises:\n  ValueError, TypeError: as `sum`.")
  return fn


all = _bool_reduction("all", "min")
any = _bool_reduction("any", "max")


def _count(shape, axes) -> int:
  return math.prod(shape[i] for i in axes)


def _count_where(shape, axes, keepdims, where, dt):
  """The number of entries each result of a reduction over `axes` sees, in dtype `dt`: a host
  scalar without `where`, else the sum of the broadcast mask."""
  if where is None:
    n = _count(shape, axes)
    if shape_poly.is_symbolic_dim(n):   # symbolic dimensions (export): computed at run time
      return lax.convert_element_type(lax_misc.dimension_as_value(n), dt)
    return np.asarray(n, dt)[()]
  return sum(broadcast_to(where, shape), axis=axes, dtype=dt, keepdims=keepdims)


def _upcast_f16(dt: np.dtype) -> np.dtype:
  """The dtype mean and var accumulate in: float32 for 16-bit floats (as JAX's
  `_upcast_f16`: summing 10,000 bfloat16 threes in bfloat16 gives 3.015625), else `dt`."""
  return np.dtype(np.float32) if dt in (dtypes.float16, dtypes.bfloat16) else dt


def mean(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
         keepdims: bool = False, *, where: ArrayLike | None = None):
  """Arithmetic mean over `axis`: sum / count.

  Args:
    a: array `T[*s]`. axis, keepdims: as `sum`.
    dtype: result dtype (default: T if inexact, else the default float; then 16-bit
      floats accumulate in float32, as JAX's; a given dtype is computed in as is).
    where: bool mask broadcastable to `s`: the mean of the True entries only (NaN where
      none is True).

  Returns:
    Array of the reduced shape; NaN for an empty reduction.

  Raises:
    As `sum`.
  """
  _no_out("mean", out)
  ufuncs.check_arraylike("mean", a)
  if type(a) in KEY_TYPES:   # typed PRNG keys have no arithmetic (JAX's message)
    raise TypeError(f"Cannot interpret '{a.dtype}' as a data type")
  return _mean_jit(asarray(a), axis=_static_axis(axis), dtype=dtype, keepdims=keepdims,
                   where=where)


# NB: as JAX's `_mean`: one compiled program when called eagerly (XLA then divides by the
# count as it does under jit: `jnp.mean` of [[1, 3, 4, 2], ...] is 3.8333335, as JAX's),
# inlined equation by equation into a traced program.
@jit(static_argnames=("axis", "dtype", "keepdims"), inline=True)
def _mean_jit(a, *, axis=None, dtype=None, keepdims=False, where=None):
  where = check_where("mean", where)
  in_shape = shape_of(a)
  axes = reduction_axes(axis, len(in_shape), "mean")
  dt = dtypes.check_user_dtype(dtype, "mean") if dtype is not None else (
      to_inexact_dtype(dtype_of(a), dtypes.is_weakly_typed(a)))
  ct = _upcast_f16(dt) if dtype is None else dt   # NB: as JAX: a given dtype computes as is
  count = _count_where(in_shape, axes, keepdims, where, ct)   # NB: before the sum, as JAX's
  out = lax.div(sum(a, axis=axes, dtype=ct, keepdims=keepdims, where=where), count)   # 0/0: NaN
  return out if ct == dt else lax.convert_element_type(out, dt)


_mean = mean


def _var_dtypes(a_dtype, dtype):
  """(computation dtype, result dtype) of var: as JAX's numpy, integers give the default
  float, complex gives its real dtype, 16-bit floats compute in float32. `dtype`: the
  user's, already checked (`dtypes.check_user_dtype`)."""
  if dtype is not None:
    if dtypes.is_complex(a_dtype) and not dtypes.is_complex(dtype):
      raise ValueError("jax.numpy.var does not yet support real dtype parameters when "
                       "computing the variance of an array of complex values.")
    return _upcast_f16(dtype), dtype
  if not dtypes.is_inexact(a_dtype):   # as JAX: ints up to 32 bits -> float32
    dt = to_inexact_dtype(a_dtype)
    return dt, dt
  return _upcast_f16(a_dtype), real_dtype(a_dtype)


def _correction(ddof, correction):
  if correction is None:
    return ddof
  if not isinstance(ddof, int) or ddof != 0:
    raise ValueError("ddof and correction can't be provided simultaneously.")
  return correction


def _static_axis(axis):
  """`axis` as a hashable static argument: None, an int, or a tuple of ints (as JAX's
  `_ensure_optional_axes`).

  Raises:
    TypeError: for a traced or non-integer axis."""
  if axis is None:
    return None
  if isinstance(axis, core.Tracer):
    raise core.ConcretizationTypeError(
        f"The axis argument must be known statically; got the traced value {axis!r}.")
  try:
    return operator.index(axis)
  except TypeError:
    return tuple(operator.index(i) for i in axis)


def var(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None, ddof: int = 0,
        keepdims: bool = False, *, where: ArrayLike | None = None,
        mean: ArrayLike | None = None, correction: int | float | None = None):
  """Variance over `axis`: sum(|x - mean(x)|**2) / (n - ddof).

  As JAX's numpy, the computation is a jitted function, `_var` (static `axis`, `dtype` and
  `keepdims`; the correction enters as a value, a Python number weakly typed).

  Args:
    a: array `T[*s]`. axis, keepdims: as `sum`.
    dtype: result dtype (default: T for real floats, the default float for integers, the
      real dtype for complex T); 16-bit floats compute in float32.
    ddof, correction: the delta degrees of freedom (give one of them).
    where: bool mask broadcastable to `s`: the variance of the True entries.
    mean: a precomputed mean, broadcastable to `s` with the reduced axes kept (as from
      `mean(a, axis, keepdims=True)`).

  Returns:
    Array of the reduced shape; NaN where `n - ddof <= 0` (as JAX's numpy; NumPy gives inf
    there unless the sum is 0).

  Raises:
    ValueError: both `ddof` and `correction` given; a real `dtype` for complex `a`; and as
      `sum`.
    NotImplementedError: for `out`.
  """
  correction = _correction(ddof, correction)
  ufuncs.check_arraylike("var", a)
  return _var(asarray(a), axis=_static_axis(axis), dtype=dtype, out=out, correction=correction,
              keepdims=keepdims, where=where, a_mean=mean)


@jit(static_argnames=("axis", "dtype", "keepdims"))
def _var(a, *, axis=None, dtype=None, out=None, correction=0, keepdims=False, where=None,
         a_mean=None):
  """The body of `var` (jitted under this name, as JAX's): the mean with the reduced axes
  kept, the squared deviations (|z|**2 for complex), their sum divided by the count minus
  `correction`, NaN where that normalizer is not positive (a select, so the derivative is
  0 there)."""
  _no_out("var", out)
  where = check_where("var", where)
  in_shape = shape_of(a)
  axes = reduction_axes(axis, len(in_shape), "var")
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "var")
  ct, dt = _var_dtypes(dtype_of(a), dtype)
  a = lax.convert_element_type(a, ct)
  if a_mean is None:
    a_mean = _mean(a, axes, dtype=ct, keepdims=True, where=where)
  else:
    a_mean = lax.convert_element_type(asarray(a_mean), ct)
  centered = lax.sub(a, a_mean)   # NB: lax broadcasts the kept size-1 axes
  if dtypes.is_complex(ct):
    centered = lax.real(lax.mul(centered, lax.conj(centered)))
    ct = dtype_of(centered)   # the sums and the normalizer are real
  else:
    centered = lax.square(centered)
  normalizer = _count_where(in_shape, axes, keepdims, where, ct)
  normalizer = lax.sub(normalizer, lax.convert_element_type(correction, ct))
  result = sum(centered, axis=axes, dtype=ct, keepdims=keepdims, where=where)
  result = lax.convert_element_type(lax.div(result, normalizer), dt)
  return ufuncs.where(ufuncs.greater(normalizer, 0), result, np.nan)


def std(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None, ddof: int = 0,
        keepdims: bool = False, *, where: ArrayLike | None = None,
        mean: ArrayLike | None = None, correction: int | float | None = None):
  """Standard deviation: sqrt(var(...)); see `var` for the arguments. Jitted as JAX's:
  `_std` around `_var`.

  Raises:
    ValueError: as `var`, and for a `dtype` that is not inexact.
  """
  correction = _correction(ddof, correction)
  ufuncs.check_arraylike("std", a)
  return _std(asarray(a), axis=_static_axis(axis), dtype=dtype, out=out,
              correction=correction, keepdims=keepdims, where=where, mean=mean)


@jit(static_argnames=("axis", "dtype", "keepdims"))
def _std(a, *, axis=None, dtype=None, out=None, correction=0, keepdims=False, where=None,
         mean=None):
  """The body of `std` (jitted under this name, as JAX's): `sqrt(var(...))`."""
  where = check_where("std", where)
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "std")
    if not dtypes.is_inexact(dtype):
      raise ValueError(f"dtype argument to jnp.std must be inexact; got {dtype}")
  _no_out("std", out)
  return lax.sqrt(var(a, axis=axis, dtype=dtype, correction=correction, keepdims=keepdims,
                      where=where, mean=mean))


def _arg_reduction(name, lax_fn):
  def fn(a: ArrayLike, axis: int | None = None, out: None = None,
         keepdims: bool | None = None):
    _no_out(name, out)
    ufuncs.check_arraylike(name, a)
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


@jit(static_argnames=("axis", "keepdims"))
def count_nonzero(a: ArrayLike, axis: Any = None, keepdims: bool = False):
  """The number of nonzero elements over `axis`, as the default integer dtype. Jitted, as
  JAX's (`jit[name=count_nonzero]`; static `axis`, `keepdims`).

  Raises:
    TypeError: `a` not an array or scalar (a list).
    ValueError: an out-of-range axis.
  """
  ufuncs.check_arraylike("count_nonzero", a)
  a = asarray(a)
  zero = np.zeros((), dtype_of(a))[()]
  return sum(lax.ne(a, zero), axis=axis, dtype=dtypes.default_int_dtype(), keepdims=keepdims)


# ---------------------------------------------------------------------------
# Cumulative reductions (lax.cumsum & co., one `reduce_window`-free scan primitive each)


def _cumulative(name: str, lax_fn, a, axis, dtype, fill_nan=False, fill_value=0,
                promote_integers=False):
  """The body of the cumulative reductions (as JAX's numpy's): the array flattened for
  `axis=None` (or a 0-d array), NaNs replaced by `fill_value` (`fill_nan`), converted to
  the accumulation dtype, accumulated along `axis` by `lax_fn`, converted to the result
  dtype. Results are strongly typed."""
  ufuncs.check_arraylike(name, a)
  a = asarray(a)
  if axis is None or shape_of(a) == ():
    a = ravel(a)
    axis = 0
  axis = canonicalize_axis(axis, len(shape_of(a)), name)
  dt = dtype_of(a)
  if fill_nan:
    a = ufuncs.where(lax.ne(a, a), np.asarray(fill_value, dt)[()], a)
  if dtype is None:
    res = _promote_integer(dt) if promote_integers or dt == dtypes.bool_ else dt
    calc = res
  elif dtypes.check_user_dtype(dtype, name) == dtypes.bool_:
    # lax accumulates numbers only: count the nonzero entries, then test the count.
    res = dtypes.bool_
    if dt != res:
      a = lax.ne(a, const(a, 0))
    calc = _promote_integer(res)
  else:
    res = calc = dtypes.canonicalize_dtype(dtype)   # NB: checked just above
  a = lax.convert_element_type(a, calc)
  return lax.convert_element_type(lax_fn(a, axis=axis), res)


def _promote_integer(dt):
  """The dtype sums of `dt` accumulate in: bool and narrow ints widen to the default
  (unsigned) integer, as JAX's numpy."""
  if dt == dtypes.bool_:
    return dtypes.default_int_dtype()
  if dtypes.is_integer(dt) and dt.itemsize < dtypes.default_int_dtype().itemsize:
    return dtypes.default_uint_dtype() if dtypes.is_unsigned(dt) else (
        dtypes.default_int_dtype())
  return dt


@jit(static_argnames=("axis", "dtype"))
def cumsum(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: None = None):
  """Cumulative sum along `axis` (of the flattened array when None).

  Jitted with `axis` and `dtype` static, as JAX's (`jit[name=cumsum]` in a traced program).

  Args:
    a: array `T[*s]`.
    axis: the axis; None flattens first.
    dtype: accumulation and result dtype (default: T; bool accumulates in the default
      integer). Narrow integers wrap around on overflow, as in JAX's numpy.

  Returns:
    Array of shape `s` (`[prod(s)]` for `axis=None`).

  Raises:
    ValueError: for an out-of-range axis.
    NotImplementedError: for `out`.
  """
  _no_out("cumsum", out)
  return _cumulative("cumsum", lax.cumsum, a, axis, dtype)


@jit(static_argnames=("axis", "dtype"))
def cumprod(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: None = None):
  """Cumulative product along `axis`; see `cumsum` for the arguments (jitted the same
  way)."""
  _no_out("cumprod", out)
  return _cumulative("cumprod", lax.cumprod, a, axis, dtype)


@jit(static_argnames=("axis", "dtype"))
def nancumsum(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: None = None):
  """`cumsum` with NaN counted as 0 (jitted as `cumsum`)."""
  _no_out("nancumsum", out)
  return _cumulative("nancumsum", lax.cumsum, a, axis, dtype, fill_nan=True, fill_value=0)


@jit(static_argnames=("axis", "dtype"))
def nancumprod(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: None = None):
  """`cumprod` with NaN counted as 1 (jitted as `cumprod`)."""
  _no_out("nancumprod", out)
  return _cumulative("nancumprod", lax.cumprod, a, axis, dtype, fill_nan=True, fill_value=1)


cumproduct = cumprod


@jit(static_argnames=("axis", "dtype"))
def _cumsum_with_promotion(a, axis=None, dtype=None, out=None):
  """`cumsum` with narrow integers and bools accumulated in the default (unsigned)
  integer: the body of `cumulative_sum` (jitted under this name, as JAX's)."""
  return _cumulative("cumulative_sum", lax.cumsum, a, axis, dtype, promote_integers=True)


def _cumulative_api(name, identity):
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
    if dtype is not None:
      dtype = dtypes.check_user_dtype(dtype)   # NB: as JAX's, with no function name
    if identity == 0:
      r = _cumsum_with_promotion(x, axis=axis, dtype=dtype)
    else:   # NB: as JAX 0.10.2's: not jitted, and narrow integers are not promoted
      r = _cumulative(name, lax.cumprod, x, axis, dtype)
    if include_initial:
      shape = tuple(1 if i == axis else d for i, d in enumerate(shape_of(r)))
      r = lax.concatenate([lax.full(shape, identity, dtype_of(r)), r], axis)
    return r
  fn.__name__ = fn.__qualname__ = name
  kind = "sum" if identity == 0 else "prod"
  fn.__doc__ = (f"The Array API's {name}: like `cum{kind}`, with `axis` required for N-D "
                f"input and `include_initial` prepending the identity ({identity})"
                + (", narrow integers promoted as `sum` does (`_cumsum_with_promotion`, "
                   "jitted)" if identity == 0 else ", narrow integers kept (as JAX's)")
                + ".\n\nArgs:\n  x: array `T[*s]` (at least 1-D).\n  axis: the axis "
                  "(optional for 1-D x).\n  dtype: result dtype.\n  include_initial: "
                  "prepend the identity along `axis`.\n\nReturns:\n  Array of shape `s` "
                  "(one longer along `axis` with `include_initial`).\n\nRaises:\n"
                  "  ValueError: for 0-d input, or N-D input without `axis`.")
  return fn


cumulative_sum = _cumulative_api("cumulative_sum", 0)
cumulative_prod = _cumulative_api("cumulative_prod", 1)


def _no_out(name, out):
  if out is not None:
    raise NotImplementedError(f"The 'out' argument to jnp.{name} is not supported.")


# ---------------------------------------------------------------------------
# NaN-ignoring reductions


def _nan_reduction(name, reduction, kind, nan_if_all_nan, a, axis, keepdims, where, **kw):
  """The body of nansum, nanprod, nanmax and nanmin (as JAX's numpy's): integer and bool
  input reduced as it is; else the NaNs replaced by the identity of `kind` (a strongly
  typed scalar of a's dtype), reduced, and (`nan_if_all_nan`) NaN where a slice is all
  NaN."""
  ufuncs.check_arraylike(name, a)
  a = asarray(a)
  where = check_where(name, where)
  if not dtypes.is_inexact(dtype_of(a)):
    return reduction(a, axis=axis, keepdims=keepdims, where=where, **kw)
  out = reduction(ufuncs.where(isnan(a), _identity(kind, dtype_of(a)), a), axis=axis,
                  keepdims=keepdims, where=where, **kw)
  if not nan_if_all_nan:
    return out
  return ufuncs.where(all(isnan(a), axis=axis, keepdims=keepdims),
                      np.asarray(np.nan, dtype_of(a))[()], out)


def _user_dtype(dtype, fun_name):
  return None if dtype is None else dtypes.check_user_dtype(dtype, fun_name)


@jit(static_argnames=("axis", "dtype", "keepdims"))
def nansum(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
           keepdims: bool = False, initial: ArrayLike | None = None,
           where: ArrayLike | None = None):
  """`sum` with NaN counted as 0. Jitted as JAX's (`jit[name=nansum]`; static `axis`,
  `dtype`, `keepdims`). See `sum` for the arguments and dtypes.

  Raises:
    TypeError: `a` or `where` not an array or scalar (a list).
    ValueError, NotImplementedError: as `sum`.
  """
  # NB: JAX's nansum names nanprod in the message.
  return _nan_reduction("nansum", sum, "sum", False, a, axis, keepdims, where,
                        dtype=_user_dtype(dtype, "nanprod"), out=out, initial=initial)


@jit(static_argnames=("axis", "dtype", "keepdims"))
def nanprod(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
            keepdims: bool = False, initial: ArrayLike | None = None,
            where: ArrayLike | None = None):
  """`prod` with NaN counted as 1; jitted as `nansum`, which see."""
  return _nan_reduction("nanprod", prod, "prod", False, a, axis, keepdims, where,
                        dtype=_user_dtype(dtype, "nanprod"), out=out, initial=initial)


@jit(static_argnames=("axis", "keepdims"))
def nanmax(a: ArrayLike, axis: Any = None, out: None = None, keepdims: bool = False,
           initial: ArrayLike | None = None, where: ArrayLike | None = None):
  """`max` ignoring NaNs: NaN where a slice is all NaN (unless `initial` is given). Jitted
  as JAX's (`jit[name=nanmax]`; static `axis`, `keepdims`). See `max` for the arguments.

  Raises:
    TypeError: `a` or `where` not an array or scalar (a list).
    ValueError: as `max` (an empty slice, or `where` without `initial`).
  """
  return _nan_reduction("nanmax", max, "max", initial is None, a, axis, keepdims, where,
                        out=out, initial=initial)


@jit(static_argnames=("axis", "keepdims"))
def nanmin(a: ArrayLike, axis: Any = None, out: None = None, keepdims: bool = False,
           initial: ArrayLike | None = None, where: ArrayLike | None = None):
  """`min` ignoring NaNs; jitted as `nanmax`, which see."""
  return _nan_reduction("nanmin", min, "min", initial is None, a, axis, keepdims, where,
                        out=out, initial=initial)


@jit(static_argnames=("axis", "dtype", "keepdims"))
def nanmean(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
            keepdims: bool = False, where: ArrayLike | None = None):
  """Mean ignoring NaNs: `nansum / count of non-NaN entries` (NaN for all-NaN slices, or
  where `where` selects nothing); integers and bool give `mean`. Jitted as JAX's
  (`jit[name=nanmean]`, the sum a nested `nansum`). See `mean` for the arguments.

  Raises:
    TypeError: `a` or `where` not an array or scalar (a list).
    NotImplementedError: for `out`.
  """
  ufuncs.check_arraylike("nanmean", a)
  a = asarray(a)
  where = check_where("nanmean", where)
  _no_out("nanmean", out)
  if not dtypes.is_inexact(dtype_of(a)):
    return mean(a, axis, dtype, keepdims=keepdims, where=where)
  dt = to_inexact_dtype(dtype_of(a)) if dtype is None else dtypes.check_user_dtype(
      dtype, "mean")   # NB: JAX's nanmean names mean in the message
  count = sum(lax.bitwise_not(isnan(a)), axis=axis, dtype=dt, keepdims=keepdims, where=where)
  return lax.div(nansum(a, axis, dtype=dt, keepdims=keepdims, where=where), count)


@jit(static_argnames=("axis", "dtype", "keepdims"))
def nanvar(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
           ddof: int = 0, keepdims: bool = False, where: ArrayLike | None = None,
           mean: ArrayLike | None = None):
  """Variance ignoring NaNs: sum(|x - nanmean|**2) / (n - ddof) over the non-NaN entries,
  NaN where `n - ddof <= 0`. Jitted as JAX's (`jit[name=nanvar]`, the mean a nested
  `nanmean`; `ddof` a value). See `var` for the arguments and dtypes.

  The deviations of NaN entries are replaced by 0 after the subtraction (a select), so the
  gradient stays finite.

  Raises:
    TypeError: `a` or `where` not an array or scalar (a list).
    ValueError: a real `dtype` for complex `a`.
    NotImplementedError: for `out`.
  """
  ufuncs.check_arraylike("nanvar", a)
  a = asarray(a)
  where = check_where("nanvar", where)
  dtype = _user_dtype(dtype, "nanvar")
  _no_out("nanvar", out)
  ct, dt = _var_dtypes(dtype_of(a), dtype)
  if dtype_of(a) != ct or a.weak_type:
    a = lax.convert_element_type(a, ct, weak_type=False)
  if mean is None:
    a_mean = nanmean(a, axis, dtype=ct, keepdims=True, where=where)
  else:
    ufuncs.check_arraylike("nanvar", mean)
    a_mean = asarray(mean)
    if dtype_of(a_mean) != ct or a_mean.weak_type:
      a_mean = lax.convert_element_type(a_mean, ct, weak_type=False)
  nan = isnan(a)
  centered = ufuncs.where(nan, 0, lax.sub(a, a_mean))   # NB: lax broadcasts size-1 axes
  if dtypes.is_complex(dtype_of(centered)):
    centered = lax.real(lax.mul(centered, lax.conj(centered)))
  else:
    centered = lax.square(centered)
  n = sum(lax.bitwise_not(isnan(a)), axis=axis, keepdims=keepdims, where=where) - ddof
  empty = lax.le(n, np.zeros((), dtype_of(n))[()])
  result = sum(centered, axis, keepdims=keepdims, where=where)
  result = ufuncs.where(empty, np.nan, result)
  divisor = ufuncs.where(empty, 1, n)
  result = lax.div(result, lax.convert_element_type(divisor, dtype_of(result)))
  return result if dtype_of(result) == dt else lax.convert_element_type(result, dt)


@jit(static_argnames=("axis", "dtype", "keepdims"))
def nanstd(a: ArrayLike, axis: Any = None, dtype: Any = None, out: None = None,
           ddof: int = 0, keepdims: bool = False, where: ArrayLike | None = None,
           mean: ArrayLike | None = None):
  """Standard deviation ignoring NaNs: `sqrt(nanvar(...))`, jitted as JAX's
  (`jit[name=nanstd]` around a nested `nanvar`). See `nanvar` for the arguments and
  errors."""
  ufuncs.check_arraylike("nanstd", a)
  a = asarray(a)
  where = check_where("nanstd", where)
  dtype = _user_dtype(dtype, "nanstd")
  _no_out("nanstd", out)
  return lax.sqrt(nanvar(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims,
                         where=where, mean=mean))


def _nan_arg_reduction(name, arg_fn, fill):
  def body(a, axis=None, keepdims=False):
    if not dtypes.is_inexact(dtype_of(a)):
      return arg_fn(a, axis=axis, keepdims=keepdims)
    nan = isnan(a)
    r = arg_fn(ufuncs.where(nan, fill, a), axis=axis, keepdims=keepdims)
    return ufuncs.where(all(nan, axis=axis, keepdims=keepdims), -1, r)
  body.__name__ = body.__qualname__ = f"_{name}"
  body.__doc__ = (f"The body of `{name}` (jitted under this name, as JAX's; static `axis` "
                  f"and `keepdims`).")
  jitted = jit(body, static_argnames=("axis", "keepdims"))

  def fn(a: ArrayLike, axis: int | None = None, out: None = None,
         keepdims: bool | None = None):
    _no_out(name, out)
    ufuncs.check_arraylike(name, a)
    return jitted(asarray(a), None if axis is None else operator.index(axis),
                  keepdims=bool(keepdims))
  fn.__name__ = fn.__qualname__ = name
  fn.__doc__ = (f"`{arg_fn.__name__}` ignoring NaNs; -1 where a slice is all NaN (NumPy "
                f"raises there instead). The computation is jitted, as JAX's "
                f"(`jit[name=_{name}]`).\n\nRaises:\n  ValueError: on an empty axis.\n"
                f"  TypeError: `a` not an array or scalar (a list), or a non-integer "
                f"`axis`.\n  NotImplementedError: for `out`.")
  return fn


nanargmax = _nan_arg_reduction("nanargmax", argmax, -np.inf)
nanargmin = _nan_arg_reduction("nanargmin", argmin, np.inf)


def ptp(a: ArrayLike, axis: Any = None, out: None = None, keepdims: bool = False):
  """Peak to peak: `max - min` over `axis`, in a's dtype. The computation is jitted, as
  JAX's (`jit[name=_ptp]`, static `axis` and `keepdims`).

  Raises:
    TypeError: `a` not an array or scalar (a list).
    ValueError: as `max`.
    NotImplementedError: for `out`.
  """
  ufuncs.check_arraylike("ptp", a)
  return _ptp(asarray(a), _static_axis(axis), out, keepdims)


@jit(static_argnames=("axis", "keepdims"))
def _ptp(a, axis=None, out=None, keepdims=False):
  """The body of `ptp` (jitted under this name, as JAX's)."""
  _no_out("ptp", out)
  return lax.sub(max(a, axis=axis, keepdims=keepdims), min(a, axis=axis, keepdims=keepdims))


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
    TypeError: for `a` or `weights` not an array or scalar (a list).
    ValueError: if the weights' shape fits neither form, or differs from `a`'s with no
      `axis`.

  Algorithm: JAX's `average`: weights of another shape than `a` (the shape of `a` along
  `axis`) are reshaped to `a`'s rank with 1s elsewhere, then multiplied and summed.
  """
  if weights is None:
    a = ensure_arraylike("average", a)
    a, = promote_dtypes_inexact(a)
    avg = mean(a, axis, keepdims=keepdims)
    axes = reduction_axes(axis, ndim_of(a), "average")
    wsum = lax.full((), math.prod(shape_of(a)[d] for d in axes), dtype_of(avg))
  else:
    a, w = ensure_arraylike("average", a, weights)
    a, w = promote_dtypes_inexact(a, w)
    sa, sw = shape_of(a), shape_of(w)
    if sa != sw:
      if axis is None:
        raise ValueError("Axis must be specified when shapes of a and weights differ.")
      ax = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
      ax = tuple(canonicalize_axis(d, len(sa), "average") for d in ax)
      if sw != tuple(sa[d] for d in ax):
        raise ValueError("Shape of weights must be consistent with shape of a along "
                         "specified axis.")
      # NB: as JAX's: the weights reshaped (not broadcast) to rank of `a`, 1 off `axis`.
      w = lax.reshape(w, tuple(d if i in ax else 1 for i, d in enumerate(sa)),
                      dimensions=tuple(int(i) for i in np.argsort(ax)))
    wsum = sum(w, axis, keepdims=keepdims)
    avg = lax.div(sum(multiply(a, w), axis, keepdims=keepdims), wsum)
  if returned:
    if shape_of(avg) != shape_of(wsum):
      wsum = broadcast_to(wsum, shape_of(avg))
    return avg, wsum
  return avg
