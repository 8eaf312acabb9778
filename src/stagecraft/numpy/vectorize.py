"""`vectorize` (NumPy's generalized-ufunc wrapper) and `apply_along_axis`, as auto-batching
transformations.

The wrapped function is written for the core dimensions of one element (scalars by default,
or the core shapes of a gufunc signature such as `(m,n),(n)->(m)`); each loop dimension of
the broadcast inputs is added by one batching pass (the `BatchTrace` of
`stagecraft.interpreters.batching`, which is what `stagecraft.vmap` runs), so no Python loop
runs over the elements. The signature grammar is NumPy's ("Generalized universal function
API", numpy.org/doc/stable/reference/c-api/generalized-ufuncs.html)."""
from __future__ import annotations

import functools
import re
import warnings
from typing import Any, Callable

from stagecraft import dtypes, tree_util
from stagecraft.config import config
from stagecraft.interpreters import batching
from stagecraft.numpy.array_constructors import asarray
from stagecraft.numpy.manipulation import broadcast_shapes, expand_dims, squeeze
from stagecraft.numpy import util
from stagecraft.numpy.util import canonicalize_axis


def shape_of(x) -> tuple[int, ...]:
  """The shape of an argument or result: an array-like's, or a typed PRNG key array's (an
  extended dtype, which `jnp.vectorize` maps over as JAX's does: flowjax vectorizes its
  `sample` over `jr.split(key, n)`)."""
  dt = getattr(x, "dtype", None)
  if dt is not None and dtypes.issubdtype(dt, dtypes.extended):
    return tuple(x.shape)
  return util.shape_of(x)

__all__ = ["vectorize", "apply_along_axis"]

_DIM = r"\w+"
_DIMS = rf"(?:{_DIM}(?:,{_DIM})*)?"
_ARG = rf"\({_DIMS}\)"
_ARGS = rf"{_ARG}(?:,{_ARG})*"
_SIGNATURE_RE = re.compile(rf"^{_ARGS}->{_ARGS}$")


def parse_gufunc_signature(signature: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
  """`'(m,n),(n)->(m)'` -> `([('m', 'n'), ('n',)], [('m',)])`: the core dimension names of
  each input and output.

  Raises:
    ValueError: if `signature` does not follow the gufunc grammar.
  """
  sig = signature.replace(" ", "")
  if not _SIGNATURE_RE.match(sig):
    raise ValueError(f"not a valid gufunc signature: {signature}")
  ins, outs = sig.split("->")
  parse = lambda part: [tuple(re.findall(_DIM, arg)) for arg in re.findall(_ARG, part)]
  return parse(ins), parse(outs)


def _record_core_sizes(sizes: dict, shape: tuple, core: tuple, context: str, *,
                       is_input: bool) -> None:
  if is_input and len(shape) < len(core):
    raise ValueError(f"input with shape {shape!r} does not have enough dimensions for all "
                     f"core dimensions {core!r} {context}")
  if not is_input and len(shape) != len(core):
    raise ValueError(f"output shape {shape!r} does not match core dimensions {core!r} "
                     f"{context}")
  for name, size in zip(core, shape[len(shape) - len(core):]):
    if sizes.setdefault(name, size) != size:
      raise ValueError(f"inconsistent size for core dimension {name!r}: {size!r} vs "
                       f"{sizes[name]!r} {context}")


def batch_over_leading(fun: Callable, in_dims: tuple) -> Callable:
  """`fun` mapped over axis 0 of the arguments whose entry of `in_dims` is 0 (the others are
  passed whole), returning its output pytree with the mapped axis first (broadcast where an
  output does not depend on a mapped argument) — `vmap(fun, in_dims)` for this module."""
  def batched(*args):
    size = next(shape_of(a)[0] for a, d in zip(args, in_dims) if d is not None)
    store = []
    # NB: typed PRNG keys are traced through their data (a trailing axis after the mapped one).
    flat_args, in_tree = tree_util.tree_flatten_traced(list(args))
    flat_dims = []
    for a, d in zip(args, in_dims):
      flat_dims += [d] * len(tree_util.tree_flatten_traced(a)[0])

    def flat(*xs):
      out = fun(*tree_util.tree_unflatten(in_tree, xs))
      leaves, treedef = tree_util.tree_flatten_traced(out)
      store.append(treedef)
      return leaves

    outs, dims = batching.batch_flat(flat, flat_args, flat_dims,
                                     batching.AxisData(None, size))
    outs = [batching.matchaxis(o, d, 0, size) for o, d in zip(outs, dims)]
    return tree_util.tree_unflatten(store[0], outs)
  return batched


def _without(fun: Callable, fixed: dict[int, Any], fixed_kwargs: dict[str, Any]) -> Callable:
  """`fun` with the positional arguments `fixed` (position -> value) and `fixed_kwargs`
  bound."""
  if not fixed and not fixed_kwargs:
    return fun

  def bound(*args):
    args = list(args)
    for i in sorted(fixed):
      args.insert(i, fixed[i])
    return fun(*args, **fixed_kwargs)
  return bound


def vectorize(pyfunc: Callable, *, excluded=frozenset(), signature: str | None = None
              ) -> Callable:
  """Vectorizes `pyfunc` over the leading (loop) dimensions of its arguments, with NumPy
  broadcasting, by batching (as `vmap`) rather than by a Python loop.

  Args:
    pyfunc: a function of arrays, written for one element: scalars when `signature` is None
      (its outputs may then have any shape), else arrays with the core shapes of the
      signature.
    excluded: positions (ints) and keyword names (strs) of arguments passed to `pyfunc`
      unchanged, not vectorized. Positional arguments that are None are also passed
      unchanged. NB: as in JAX's numpy, keyword arguments not listed here are dropped.
    signature: a generalized-ufunc signature such as `'(m,n),(n)->(m)'`: the core
      dimensions of each input and output; the dimensions left of them are loop
      dimensions, broadcast together.

  Returns:
    The vectorized function: for inputs with loop shapes that broadcast to `L`, each output
    has shape `L + core shape` (a tuple of them for several outputs).

  Raises:
    TypeError: `excluded` holds something other than ints and strs; a call gets a number
      of positional arguments other than the signature's inputs; a function with several
      outputs in its signature returns a non-tuple or the wrong number of outputs.
    ValueError: `excluded` holds a negative position; the signature is malformed; an input
      has fewer dimensions than its core dimensions, a core dimension has two sizes, an
      output's shape does not match its core dimensions, loop shapes do not broadcast, or
      None is passed where the signature expects core dimensions.

  Examples:
    >>> import stagecraft.numpy as jnp
    >>> mv = jnp.vectorize(lambda m, v: m @ v, signature="(n,k),(k)->(n)")
    >>> mv(jnp.ones((4, 2, 3)), jnp.ones(3)).shape
    (4, 2)
  """
  if any(not isinstance(e, (str, int)) for e in excluded):
    raise TypeError(f"jax.numpy.vectorize can only exclude integer or string arguments, "
                    f"but excluded={excluded!r}")
  if any(isinstance(e, int) and e < 0 for e in excluded):
    raise ValueError(f"excluded={excluded!r} contains negative numbers")
  sig = parse_gufunc_signature(signature) if signature is not None else None

  @functools.wraps(pyfunc)
  def wrapped(*args, **kwargs):
    context = f"on vectorized function with excluded={excluded!r} and signature={signature!r}"
    fixed = {i: a for i, a in enumerate(args) if i in excluded}
    fixed_kwargs = {k: v for k, v in kwargs.items() if k in excluded}
    args = [a for i, a in enumerate(args) if i not in excluded]
    in_cores, out_cores = sig if sig is not None else ([()] * len(args), None)
    if len(args) != len(in_cores):
      raise TypeError(f"wrong number of positional arguments: expected {len(in_cores)!r}, "
                      f"got {len(args)!r} {context}")
    # None arguments are passed through, as excluded ones (positions in the original call).
    none_at = [i for i, a in enumerate(args) if a is None]
    if none_at and any(in_cores[i] for i in none_at):
      raise ValueError(f"Cannot pass None at locations {set(none_at)} with "
                       f"signature={signature!r}")
    positions = [i for i in range(len(args) + len(fixed)) if i not in fixed]
    for i in none_at:
      fixed[positions[i]] = None
    in_cores = [c for i, c in enumerate(in_cores) if i not in none_at]
    args = [asarray(a) for i, a in enumerate(args) if i not in none_at]
    fun = _without(pyfunc, fixed, fixed_kwargs)

    sizes: dict[str, int] = {}
    loop_shapes = []
    for a, core in zip(args, in_cores):
      _record_core_sizes(sizes, shape_of(a), core, context, is_input=True)
      loop_shapes.append(shape_of(a)[:len(shape_of(a)) - len(core)])
    loop_shape = broadcast_shapes(*loop_shapes)
    _check_rank_promotion(args, in_cores, signature)

    if out_cores is not None:
      inner = fun

      def fun(*xs):
        out = inner(*xs)
        if len(out_cores) > 1 and not isinstance(out, tuple):
          raise TypeError(f"output must be a tuple when multiple outputs are expected, "
                          f"got: {out!r}\n{context}")
        outs = out if isinstance(out, tuple) else (out,)
        if len(outs) != len(out_cores):
          raise TypeError(f"wrong number of output arguments: expected {len(out_cores)!r}, "
                          f"got {len(outs)!r} {context}")
        out_sizes = dict(sizes)
        for o, core in zip(outs, out_cores):
          _record_core_sizes(out_sizes, shape_of(o), core, context, is_input=False)
        return out

    # Each argument's loop dims, right-aligned against the broadcast loop shape; size-1 dims
    # are squeezed away and that argument is not mapped along that loop dim.
    nloop = len(loop_shape)
    padded = [(1,) * (nloop - len(s)) + s for s in loop_shapes]
    args = [squeeze(a, tuple(i for i, d in enumerate(s) if d == 1)) if 1 in s else a
            for a, s in zip(args, loop_shapes)]
    unmapped_dims = []
    for k in range(nloop - 1, -1, -1):     # innermost loop dim first: it is batched first
      in_dims = tuple(0 if p[k] != 1 else None for p in padded)
      if all(d is None for d in in_dims):
        unmapped_dims.append(k)
      else:
        fun = batch_over_leading(fun, in_dims)
    out = fun(*args)
    if not unmapped_dims:
      return out
    dims = tuple(sorted(unmapped_dims))
    return tuple(expand_dims(o, dims) for o in out) if isinstance(out, tuple) else (
        expand_dims(out, dims))

  return wrapped


def _check_rank_promotion(args, in_cores, signature) -> None:
  """config numpy_rank_promotion 'raise'/'warn': the arguments of rank > 0 have loop
  dimensions of different ranks (JAX's text)."""
  mode = config.numpy_rank_promotion
  ranks = {len(shape_of(a)) - len(c) for a, c in zip(args, in_cores) if shape_of(a)}
  if mode == "allow" or len(ranks) < 2:
    return
  msg = (f"operands with shapes {[shape_of(a) for a in args]} require rank promotion for "
         f"jnp.vectorize function with signature {signature}. Set the "
         f"jax_numpy_rank_promotion config option to 'allow' to disable this message; for "
         f"more information, see https://docs.jax.dev/en/latest/rank_promotion_warning.html.")
  if mode == "raise":
    raise ValueError(msg)
  warnings.warn(msg, stacklevel=3)


def apply_along_axis(func1d: Callable, axis: int, arr: Any, *args, **kwargs):
  """`func1d` applied to each 1-D slice of `arr` along `axis`, batched (one trace of
  `func1d`, no Python loop), as `numpy.apply_along_axis`.

  Args:
    func1d: a function of a 1-D array `T[n]` (and `args`, `kwargs`, passed unchanged)
      returning an array of any fixed shape `r`.
    axis: the axis of `arr` to slice along (negative counts from the end).
    arr: array `T[*s]` with `s[axis] == n`.

  Returns:
    Array of shape `s[:axis] + r + s[axis + 1:]`.

  Raises:
    ValueError: for an out-of-range axis.
  """
  arr = asarray(arr)
  ndim = len(shape_of(arr))
  axis = canonicalize_axis(axis, ndim, "apply_along_axis")
  # As JAX's: one vmap per other axis, those after `axis` innermost (their results go last),
  # then those before it.
  fun = lambda row: asarray(func1d(row, *args, **kwargs))  # noqa: E731
  for i in range(1, ndim - axis):
    fun = _vmap_one(fun, i, -1)
  for i in range(axis):
    fun = _vmap_one(fun, 0, 0)
  return fun(arr)


def _vmap_one(fun: Callable, in_axis: int, out_axis: int) -> Callable:
  """`vmap(fun, in_axes=in_axis, out_axes=out_axis)` for a function of one array returning
  one array."""
  def batched(x):
    size = shape_of(x)[in_axis]
    (out,), (d,) = batching.batch_flat(lambda x: [fun(x)], [x], [in_axis],
                                       batching.AxisData(None, size))
    ndim = len(shape_of(out)) - (d is not None)
    return batching.matchaxis(out, d, out_axis % (ndim + 1), size)
  return batched
