"""`ufunc` and `frompyfunc`: NumPy's universal-function objects for functions of scalars.

A `ufunc` wraps a scalar function of `nin` arguments and `nout` results; calling it
vectorizes the function (`vectorize`: batched, no Python loop), and a binary one gains
NumPy's methods `reduce`, `accumulate`, `reduceat`, `outer` and the functional `at`, built on
`lax.scan` and `lax.fori_loop` (sequential, as NumPy defines them; NumPy's "Universal
functions (ufunc)" reference gives the semantics). As in JAX, the public `jnp.add`,
`multiply`, `subtract`, `minimum`, `maximum`, `bitwise_and/or/xor`, `logical_and/or/xor`,
`logaddexp`, `logaddexp2` and `negative` are ufunc objects (defined at the end of this
module: calls go to the elementwise functions of `ufuncs`, `add.reduce` to `sum`, ...);
stagecraft's own modules import the plain functions."""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from stagecraft import dtypes, lax
from stagecraft.numpy import reductions, ufuncs
from stagecraft.numpy.array_constructors import asarray
from stagecraft.numpy.indexing import at as index_update
from stagecraft.numpy.manipulation import (broadcast_arrays, broadcast_to, expand_dims,
                                           moveaxis, ravel, reshape)
from stagecraft.numpy.ufuncs import where as _where
from stagecraft.numpy.util import (canonicalize_axis, check_arraylike, promote_dtypes_inexact,
                                   reduction_axes, shape_of)
from stagecraft.numpy.vectorize import vectorize

__all__ = ["ufunc", "frompyfunc", "add", "multiply", "subtract", "minimum", "maximum",
           "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or",
           "logical_xor", "logaddexp", "logaddexp2", "negative"]


class ufunc:  # noqa: N801  (NumPy's and JAX's name)
  """A universal function: a scalar function of `nin` arguments and `nout` results applied
  elementwise with broadcasting, plus NumPy's ufunc methods for binary functions.

  Args:
    func: the scalar function (it is traced once per call on batched values).
    nin, nout: the numbers of arguments and results.
    name: the name shown in the repr (default: `func.__name__`).
    nargs: `nin` unless given (as JAX).
    identity: the identity of a binary function, used by `reduce` as its start value and
      for empty reductions (None: reductions start from the first element).
    call, reduce, accumulate, at, reduceat: optional faster implementations replacing the
      generic ones (same signatures as the methods, without `self`).
  """

  def __init__(self, func: Callable[..., Any], /, nin: int, nout: int, *,
               name: str | None = None, nargs: int | None = None, identity: Any = None,
               call: Callable | None = None, reduce: Callable | None = None,
               accumulate: Callable | None = None, at: Callable | None = None,
               reduceat: Callable | None = None):
    nin, nout = operator.index(nin), operator.index(nout)
    # NB: read-only after construction (the properties below have no setters), as JAX's:
    # a ufunc's hash and equality are made of these.
    self._props = (func, nin, nout, nin if nargs is None else operator.index(nargs), identity)
    self.__name__ = name or getattr(func, "__name__", "ufunc")
    # NB: `jnp.add.__doc__` is add's own documentation (shapes, dtypes), as JAX's ufuncs'
    self.__doc__ = getattr(func, "__doc__", None) or type(self).__doc__
    self._call = call or vectorize(func)
    self._reduce, self._accumulate, self._at, self._reduceat = reduce, accumulate, at, reduceat

  _func = property(lambda self: self._props[0], doc="The scalar function.")
  nin = property(lambda self: self._props[1], doc="The number of arguments.")
  nout = property(lambda self: self._props[2], doc="The number of results.")
  nargs = property(lambda self: self._props[3], doc="`nin` unless given.")
  identity = property(lambda self: self._props[4], doc="The identity, or None.")

  def __repr__(self):
    return f"<jnp.ufunc '{self.__name__}'>"

  def __hash__(self):
    return hash((self._func, self.__name__, self.identity, self.nin, self.nout))

  def __eq__(self, other):
    return isinstance(other, ufunc) and (self._func, self.__name__, self.identity, self.nin,
                                         self.nout) == (other._func, other.__name__,
                                                        other.identity, other.nin, other.nout)

  def __call__(self, *args, out: None = None, where: None = None):
    """The function applied elementwise to the broadcast `args`.

    Raises:
      NotImplementedError: for `out` or `where`.
      TypeError: for a number of arguments other than `nin`.
    """
    if out is not None:
      raise NotImplementedError(f"out argument of {self}")
    if where is not None:
      raise NotImplementedError(f"where argument of {self}")
    if len(args) != self.nin:
      raise TypeError(f"{self.__name__}() takes {self.nin} positional argument"
                      f"{'s' if self.nin != 1 else ''} but {len(args)} were given")
    if any(isinstance(a, (list, tuple)) for a in args):
      check_arraylike(self.__name__, *args)   # as JAX's: no lists or tuples as operands
    return self._call(*args)

  def _require_binary(self, method: str):
    if self.nin != 2 or self.nout != 1:
      raise ValueError(f"{method} only supported for binary ufuncs")

  def reduce(self, a, axis: int | None = 0, dtype: Any = None, out: None = None,
             keepdims: bool = False, initial: Any = None, where: Any = None):
    """Folds the binary function over `axis`: `f(...f(f(start, a[0]), a[1])..., a[n-1])`,
    `start` being `initial`, else the identity, else the first element (then skipped).

    Args:
      a: array `T[*s]`. axis: an int or None (all axes, flattened). dtype: convert `a`
      first. keepdims: keep the axis with size 1. initial: the start value. where: bool
      mask broadcastable to `s`: entries outside it are skipped.

    Returns:
      Array of shape `s` without `axis`.

    Raises:
      ValueError: not a binary ufunc; `where` or an empty axis without a start value.
      NotImplementedError: a tuple of axes, or `out`.
    """
    self._require_binary("reduce")
    if out is not None:
      raise NotImplementedError(f"out argument of {self.__name__}.reduce()")
    if self._reduce is not None:
      return self._reduce(a, axis=axis, dtype=dtype, keepdims=keepdims, initial=initial,
                          where=where)
    a = asarray(a) if dtype is None else asarray(a, dtype=dtype)
    if isinstance(axis, tuple):
      raise NotImplementedError("tuple of axes")
    start = initial if initial is not None else self.identity
    if where is not None and start is None:
      raise ValueError(f"reduction operation {self.__name__!r} does not have an identity, so "
                       f"to use a where mask one has to specify 'initial'.")
    shape = shape_of(a)
    if axis is None:
      x = ravel(a)
      mask = None if where is None else ravel(broadcast_to(asarray(where), shape))
      ax = 0
    else:
      ax = canonicalize_axis(axis, len(shape), "reduce")
      x = moveaxis(a, ax, 0)
      mask = None if where is None else moveaxis(broadcast_to(asarray(where), shape), ax, 0)
    n, rest = shape_of(x)[0], shape_of(x)[1:]
    if start is None and n == 0:
      raise ValueError(f"zero-size array to reduction operation {self.__name__} which has no "
                       f"identity")
    if start is None:
      carry, xs = x[0], x[1:]
    else:
      carry = broadcast_to(lax.convert_element_type(asarray(start), a.dtype), rest)
      xs = x
    if shape_of(xs)[0]:
      def step(c, args):
        v, m = args if mask is not None else (args, None)
        new = asarray(self._call(c, v)).astype(c.dtype)
        return (new if m is None else _where(m, new, c)), None
      carry, _ = lax.scan(step, carry, xs if mask is None else (xs, mask))
    if keepdims:
      carry = reshape(carry, (1,) * len(shape)) if axis is None else expand_dims(carry, ax)
    return carry

  def accumulate(self, a, axis: int = 0, dtype: Any = None, out: None = None):
    """The running fold along `axis`: `out[0] = a[0]`, `out[i] = f(out[i-1], a[i])`.

    Raises:
      ValueError: not a binary ufunc. NotImplementedError: for `out`.
    """
    self._require_binary("accumulate")
    if out is not None:
      raise NotImplementedError(f"out argument of {self.__name__}.accumulate()")
    if self._accumulate is not None:
      return self._accumulate(a, axis=axis, dtype=dtype)
    a = asarray(a) if dtype is None else asarray(a, dtype=dtype)
    ax = canonicalize_axis(axis, len(shape_of(a)), "accumulate")
    x = moveaxis(a, ax, 0)
    if shape_of(x)[0] == 0:
      return a

    def step(c, v):
      new = asarray(self._call(c, v)).astype(c.dtype)
      return new, new
    _, rest = lax.scan(step, x[0], x[1:])
    out_ = lax.concatenate([expand_dims(x[0], 0), rest], 0)
    return moveaxis(out_, 0, ax)

  def outer(self, A, B, /):
    """`f(A[i..., None...], B[None..., j...])`: shape `A.shape + B.shape`.

    Raises:
      ValueError: not a binary ufunc.
    """
    if self.nin != 2:
      raise ValueError("outer only supported for binary ufuncs")
    if self.nout != 1:
      raise ValueError("outer only supported for functions returning a single value")
    A, B = asarray(A), asarray(B)
    # NB: as 2-D operands of equal rank, so `jax_numpy_rank_promotion='raise'` allows it
    out_ = self(reshape(A, (-1, 1)), reshape(B, (1, -1)))
    return reshape(out_, shape_of(A) + shape_of(B))

  def at(self, a, indices, b=None, /, *, inplace: bool = True):
    """`a` with `a[i] = f(a[i], b_i)` (or `f(a[i])` for a unary ufunc) applied once per
    index entry, in order, so repeated indices accumulate (the functional form of
    `numpy.ufunc.at`).

    Args:
      a: array. indices: an int, an integer array, or a tuple of them (broadcast
      together). b: values broadcast to the index shape (binary ufuncs). inplace: must be
      False.

    Raises:
      NotImplementedError: `inplace` is True.
      ValueError: `b` missing for a binary ufunc or given for a unary one.
    """
    if inplace:
      raise NotImplementedError(
          "Because JAX arrays are immutable, jnp.ufunc.at() cannot operate inplace like\n"
          "np.ufunc.at(). Instead, you can pass inplace=False and capture the result; e.g.\n"
          ">>> arr = jnp.add.at(arr, ind, val, inplace=False)\n")
    if self._at is not None:
      return self._at(a, indices, b)
    if (b is None) != (self.nin == 1):
      what = "b is required" if b is None else "b is not accepted"
      raise ValueError(f"{self.__name__}.at: {what} for a ufunc with nin={self.nin}")
    a = asarray(a)
    idx = indices if isinstance(indices, tuple) else (indices,)
    idx = broadcast_arrays(*[asarray(i) for i in idx])
    idx_shape = shape_of(idx[0])
    idx = [ravel(i) for i in idx]
    count = shape_of(idx[0])[0]
    sub = shape_of(a)[len(idx):]
    vals = None if b is None else reshape(broadcast_to(asarray(b), (*idx_shape, *sub)),
                                          (count, *sub))

    def body(k, acc):
      where_ = tuple(lax.dynamic_index_in_dim(i, k, 0, keepdims=False) for i in idx)
      cur = index_update(acc)[where_].get()
      new = self._call(cur) if vals is None else self._call(
          cur, lax.dynamic_index_in_dim(vals, k, 0, keepdims=False))
      return index_update(acc)[where_].set(asarray(new).astype(acc.dtype))
    return lax.fori_loop(0, count, body, a)

  def reduceat(self, a, indices, axis: int = 0, dtype: Any = None, out: None = None):
    """For each `i`: `reduce(a[indices[i]:indices[i+1]])` along `axis` when
    `indices[i] < indices[i+1]`, else `a[indices[i]]` (the last runs to the end), as
    `numpy.ufunc.reduceat`. `indices` may be traced.

    Args:
      a: array `T[*s]` with at least one dimension. indices: integers `int[k]`.
      axis: an int. dtype: convert `a` first.

    Returns:
      Array of `s` with `s[axis]` replaced by `k` (`k` may be 0).

    Raises:
      ValueError: not a binary ufunc; a 0-d `a`; `indices` not one-dimensional; `axis`
        None or a tuple. NotImplementedError: for `out`.
    """
    self._require_binary("reduceat")
    if out is not None:
      raise NotImplementedError(f"out argument of {self.__name__}.reduceat()")
    if self._reduceat is not None:
      return self._reduceat(a, indices, axis=axis, dtype=dtype)
    a = asarray(a) if dtype is None else asarray(a, dtype=dtype)
    ind = asarray(indices)
    if not shape_of(a):
      raise ValueError(f"reduceat: a must have 1 or more dimension, got a.shape={shape_of(a)}")
    if len(shape_of(ind)) != 1:
      raise ValueError(f"reduceat: indices must be one-dimensional, got "
                       f"indices.shape={shape_of(ind)}")
    if axis is None or isinstance(axis, (tuple, list)):
      raise ValueError("reduceat requires a single integer axis.")
    ax = canonicalize_axis(axis, len(shape_of(a)), "reduceat")
    x = moveaxis(a, ax, 0)
    n = shape_of(x)[0]
    # Segment k starts from x[ind[k]] and folds in x[j] for ind[k] < j < end[k] (end[k] is
    # ind[k+1], or n for the last): one pass over j, updating every segment it falls in.
    ind = ind.astype(dtypes.canonicalize_dtype(np.int64))
    start = index_update(x)[ind].get(mode="fill")
    if not shape_of(ind)[0]:
      return moveaxis(start, 0, ax)
    end = lax.concatenate([ind[1:], lax.full((1,), n, ind.dtype)], 0)
    bshape = (shape_of(ind)[0],) + (1,) * (len(shape_of(x)) - 1)
    lo, hi = reshape(ind, bshape), reshape(end, bshape)

    def body(j, acc):
      new = asarray(self._call(acc, expand_dims(lax.dynamic_index_in_dim(x, j, 0, False), 0)))
      return _where((j > lo) & (j < hi), new.astype(acc.dtype), acc)
    return moveaxis(lax.fori_loop(0, n, body, start), 0, ax)


def frompyfunc(func: Callable[..., Any], /, nin: int, nout: int, *,
               identity: Any = None) -> ufunc:
  """A `ufunc` from a scalar function of `nin` arguments and `nout` results (JAX's and
  NumPy's `frompyfunc`; the result works on Arrays of any dtype).

  Example:
    >>> import stagecraft.numpy as jnp
    >>> f = jnp.frompyfunc(lambda x, y: x * y + 1, 2, 1, identity=1)
    >>> f.reduce(jnp.arange(1, 4))
    Array(16, dtype=int32)
  """
  return ufunc(func, nin, nout, identity=identity)



# ---------------------------------------------------------------------------
# The library's ufunc objects (JAX's `jnp.add` and kin)


def _extreme(fn):
  """`jnp.min`/`jnp.max` as a ufunc's `reduce` (which passes a dtype)."""
  def reduce(a, *, axis, dtype, keepdims, initial, where):
    a = asarray(a) if dtype is None else asarray(a, dtype=dtype)
    return fn(a, axis=axis, keepdims=keepdims, initial=initial, where=where)
  return reduce


def _index_at(method: str):
  """`a.at[indices].<method>(b)`: a ufunc's `at` as one scatter (repeated indices combine)."""
  def at(a, indices, b):
    if b is None:
      raise ValueError(f"{method}.at: b is required for a ufunc with nin=2")
    return getattr(index_update(asarray(a))[indices], method)(b)
  return at


def _logaddexp_reduce(a, *, axis, dtype, keepdims, initial, where):
  """`log(sum(exp(a)))` over `axis`, shifted by the maximum (the logsumexp of JAX's
  `logaddexp.reduce`; `dtype` is accepted and unused, as JAX's)."""
  if dtype is not None:
    dtypes.check_user_dtype(dtype, "jnp.logaddexp.reduce")
  a, = promote_dtypes_inexact(asarray(a))
  axes = reduction_axes(axis, len(shape_of(a)), "logaddexp.reduce")
  amax = reductions.max(ufuncs.real(a), axis=axes, keepdims=keepdims, where=where,
                        initial=-np.inf)
  amax = lax.stop_gradient(lax.select(lax.is_finite(amax), amax, lax.full_like(amax, 0)))
  amax_b = amax if keepdims else expand_dims(amax, axes)
  exp_a = lax.exp(lax.sub(a, amax_b.astype(a.dtype)))
  sumexp = reductions.sum(exp_a, axis=axes, keepdims=keepdims, where=where)
  result = lax.add(lax.log(sumexp), amax.astype(sumexp.dtype))
  return result if initial is None else ufuncs.logaddexp(initial, result)


def _logaddexp2_reduce(a, *, axis, dtype, keepdims, initial, where):
  """`log2(sum(2 ** a))`, as `_logaddexp_reduce` of `a * ln 2` divided by `ln 2`."""
  if dtype is not None:
    dtype = dtypes.check_user_dtype(dtype, "jnp.logaddexp2.reduce")
  ln2 = float(np.log(2))
  if initial is not None:
    initial = initial * ln2
  return _logaddexp_reduce(asarray(a) * ln2, axis=axis, dtype=dtype, keepdims=keepdims,
                           initial=initial, where=where) / ln2


def _binary(fn, identity, **methods) -> ufunc:
  return ufunc(fn, 2, 1, name=fn.__name__, identity=identity, call=fn, **methods)


add = _binary(ufuncs.add, 0, reduce=reductions.sum, accumulate=reductions.cumsum,
              at=_index_at("add"))
multiply = _binary(ufuncs.multiply, 1, reduce=reductions.prod, accumulate=reductions.cumprod,
                   at=_index_at("multiply"))
subtract = _binary(ufuncs.subtract, None, at=_index_at("subtract"))
minimum = _binary(ufuncs.minimum, None, reduce=_extreme(reductions.min))
maximum = _binary(ufuncs.maximum, None, reduce=_extreme(reductions.max))
bitwise_and = _binary(ufuncs.bitwise_and, -1)
bitwise_or = _binary(ufuncs.bitwise_or, 0)
bitwise_xor = _binary(ufuncs.bitwise_xor, 0)
logical_and = _binary(ufuncs.logical_and, True)
logical_or = _binary(ufuncs.logical_or, False)
logical_xor = _binary(ufuncs.logical_xor, False)
logaddexp = _binary(ufuncs.logaddexp, -np.inf, reduce=_logaddexp_reduce)
logaddexp2 = _binary(ufuncs.logaddexp2, -np.inf, reduce=_logaddexp2_reduce)
negative = ufunc(ufuncs.negative, 1, 1, name="negative", call=ufuncs.negative)
