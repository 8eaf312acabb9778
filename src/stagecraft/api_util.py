"""Argument handling shared by the transformations and staging APIs: flattening arguments,
abstractifying leaves, naming arguments and functions for messages, normalizing
static/donated argument numbers and names, and per-leaf mapped axes (vmap, pmap)."""
from __future__ import annotations

import collections
import inspect
import operator
from typing import Any, Callable, Sequence

import numpy as np
import optree

from stagecraft import core, dtypes, shape_poly, tree_util
from stagecraft.core import ShapedArray, ShapeDtypeStruct
from stagecraft.interpreters import batching
from stagecraft.source_info_util import fun_name, fun_source_info
from stagecraft.tree_util import treedef_str
from stagecraft.runtime.array import Array

__all__ = ["flatten", "abstractify", "shaped_abstractify", "fun_name", "fun_signature", "arg_names",
           "check_out_leaves", "normalize_argnums", "ensure_inbounds", "normalize_argnames", "flatten_axes",
           "flat_mapped_args", "describe_arg", "check_vmap_axes", "check_pmap_axes",
           "mapped_axes", "wraps", "debug_info", "flatten_fun", "flatten_fun_nokwargs",
           "check_callable", "ensure_index_tuple", "ensure_str_tuple", "resolve_argnums"]

_NS = tree_util.NAMESPACE


def flatten(tree):
  return optree.tree_flatten(tree, none_is_leaf=False, namespace=_NS)


def abstractify(x: Any, path: str, fun: Callable | str) -> ShapedArray:
  """The aval of an argument `x` of `fun` (at key path `path`), for tracing.

  Raises:
    TypeError: JAX's "Error interpreting argument to <function f at 0x...> ..." when `x`
      is not an array-like (`fun` written with its repr; a str as it is).
    ValueError: for an object with `__jax_array__` that is no pytree (JAX's message).
  """
  t = type(x)
  if t is Array:
    if getattr(x.aval.dtype, "kind", None) == "T":   # NB: string Arrays: data only (JAX)
      raise TypeError(f"Argument '{x}' of type {t} is not a valid JAX type.")
    return x.aval
  if (getattr(x, "__jax_array__", None) is not None and t not in core.pytype_aval_mappings
      and not isinstance(x, core.Tracer) and not shape_poly.is_symbolic_dim(x)):
    # NB: JAX 0.10's refusal (and words): such an object is converted by jnp.asarray only
    raise ValueError("Triggering __jax_array__() during abstractification is no longer "
                     "supported. To avoid this error, either explicitly convert your object "
                     "using jax.numpy.array(), or register your object as a pytree.")
  try:
    return core.get_aval(x)
  except TypeError:
    pass
  if isinstance(x, ShapeDtypeStruct) or (hasattr(x, "shape") and hasattr(x, "dtype")
                                         and not isinstance(x, (type, np.ndarray))):
    try:
      return ShapedArray(tuple(d if shape_poly.is_symbolic_dim(d) else int(d) for d in x.shape),
                         dtypes.canonicalize_dtype(x.dtype, allow_extended_dtype=True),
                         bool(getattr(x, "weak_type", False)))
    except TypeError:
      pass
  raise TypeError(
      f"Error interpreting argument to {fun if isinstance(fun, str) else repr(fun)} as an "
      f"abstract array. The problematic value is of type {type(x)} and was passed to the "
      f"function at path {path}.\nThis typically means that a jit-wrapped function was "
      f"called with a non-array argument, and this argument was not marked as static using "
      f"the static_argnums or static_argnames parameters of jax.jit.")


def shaped_abstractify(x: Any) -> ShapedArray:
  """The type of an array-like `x` (JAX's `api_util.shaped_abstractify`): its aval (a Python
  scalar's weakly typed), or for a duck-typed array (anything with `shape` and `dtype`) a
  ShapedArray of those.

  Raises:
    TypeError: for a value that is neither (JAX's messages)."""
  if isinstance(x, core.AbstractValue):
    return x
  try:
    return core.get_aval(x)
  except TypeError:
    pass
  if isinstance(x, str):
    raise TypeError(f"Argument '{x}' of type {type(x)} is not a valid JAX type")
  if hasattr(x, "dtype"):
    return ShapedArray(np.shape(x), dtypes.canonicalize_dtype(x.dtype, allow_extended_dtype=True),
                       bool(getattr(x, "weak_type", False)))
  raise TypeError(f"Cannot interpret value of type {type(x)} as an abstract array; it does not "
                  f"have a dtype attribute")


def wraps(wrapped: Callable, namestr: str | None = None, docstr: str | None = None,
          **kwargs) -> Callable[[Callable], Callable]:
  """The decorator JAX's transformations put on the function they return (JAX's
  `util.wraps`): it takes `wrapped`'s `__dict__`, `__annotations__`, `__module__`,
  `__qualname__` (else its name) and `__wrapped__`; its name (`fun_name`: a partial's is
  its function's), formatted into `namestr` ("{fun}") when given; its docstring (`""` for
  none), or `docstr` formatted with `fun` (the name), `doc` (the docstring) and `kwargs`
  (`"Gradient of {fun} ..."`). As JAX's, the first step that fails (a docstring with
  braces that `docstr` includes) leaves the rest unset; nothing is raised."""
  def decorate(fun: Callable) -> Callable:
    try:
      name = fun_name(wrapped)
      doc = getattr(wrapped, "__doc__", "") or ""
      fun.__dict__.update(getattr(wrapped, "__dict__", {}))
      fun.__annotations__ = getattr(wrapped, "__annotations__", {})
      fun.__name__ = name if namestr is None else namestr.format(fun=name)
      fun.__module__ = getattr(wrapped, "__module__", "<unknown module>")
      fun.__doc__ = doc if docstr is None else docstr.format(fun=name, doc=doc, **kwargs)
      fun.__qualname__ = getattr(wrapped, "__qualname__", fun.__name__)
      fun.__wrapped__ = wrapped
    except Exception:   # noqa: BLE001 -- as JAX's: the wrapper keeps what is left
      pass
    return fun
  return decorate


def fun_signature(fun: Callable):
  try:
    return inspect.signature(fun)
  except (TypeError, ValueError):
    return None


def check_callable(fun: Any) -> None:
  """Checks that `fun` can be transformed (jit's check, in JAX's words).

  Raises:
    TypeError: "staticmethod arguments are not supported, got ..." for a `staticmethod`
      object, "Expected a callable value, got ..." for something not callable (a
      `classmethod` object too), "Expected a function, got a generator function: ..." for
      a generator function.
  """
  if isinstance(fun, staticmethod):
    raise TypeError(f"staticmethod arguments are not supported, got {fun}")
  if not callable(fun):
    raise TypeError(f"Expected a callable value, got {fun}")
  if inspect.isgeneratorfunction(fun):
    raise TypeError(f"Expected a function, got a generator function: {fun}")


def ensure_index_tuple(x: Any) -> tuple[int, ...]:
  """`x`, an index or an iterable of indices, as a tuple of ints (JAX's reading of
  static_argnums / donate_argnums).

  Raises:
    TypeError: for something that is neither (Python's message, as JAX's:
      "'str' object cannot be interpreted as an integer", "'float' object is not iterable").
  """
  try:
    return (operator.index(x),)
  except TypeError:
    return tuple(map(operator.index, x))


def ensure_str_tuple(x: Any) -> tuple[str, ...]:
  """`x`, a str or an iterable of str, as a tuple (JAX's reading of static_argnames /
  donate_argnames).

  Raises:
    TypeError: "argument is not a string: ..." for an element that is not a str (Python's
      "'int' object is not iterable" for a non-iterable `x`).
  """
  if isinstance(x, str):
    return (x,)
  out = tuple(x)
  for s in out:
    if not isinstance(s, str):
      raise TypeError(f"argument is not a string: {s}")
  return out


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _infer_argnums_and_argnames(sig: inspect.Signature, argnums, argnames):
  """(argnums, argnames) with the one not given inferred from the other through the
  positional-or-keyword parameters of `sig`; both given: taken as they are (as JAX)."""
  if argnums is None and argnames is None:
    return (), ()
  if argnums is not None and argnames is not None:
    return ensure_index_tuple(argnums), ensure_str_tuple(argnames)
  params = list(sig.parameters.items())
  pk = inspect.Parameter.POSITIONAL_OR_KEYWORD
  if argnums is None:
    argnames = ensure_str_tuple(argnames)
    argnums = tuple(i for i, (k, p) in enumerate(params) if p.kind == pk and k in argnames)
  else:
    argnums = ensure_index_tuple(argnums)
    # NB: as JAX's, a negative number names no parameter
    argnames = tuple(k for i, (k, p) in enumerate(params) if p.kind == pk and i in argnums)
  return argnums, argnames


def _validate_argnums(sig: inspect.Signature, argnums: tuple[int, ...], what: str) -> None:
  n_pos = 0
  for p in sig.parameters.values():
    if p.kind in _POSITIONAL:
      n_pos += 1
    elif p.kind is inspect.Parameter.VAR_POSITIONAL:
      return   # any number of positional arguments
  if argnums and (-min(argnums) > n_pos or max(argnums) >= n_pos):
    raise ValueError(f"Jitted function has {what}={argnums}, but only accepts {n_pos} "
                     f"positional arguments.")


def _validate_argnames(sig: inspect.Signature, argnames: tuple[str, ...], what: str) -> None:
  valid, positional_only, var_kwargs = set(), set(), False
  for name, p in sig.parameters.items():
    if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
      valid.add(name)
    elif p.kind is p.VAR_KEYWORD:
      var_kwargs = True
    else:   # positional-only, *args
      positional_only.add(name)
  if bad := positional_only & set(argnames):
    raise ValueError(f"Jitted function has invalid argnames {bad} in {what}. These are "
                     f"positional-only")
  if not var_kwargs and (bad := set(argnames) - valid):
    raise ValueError(f"Jitted function has invalid argnames {bad} in {what}. Function does "
                     f"not take these args.")


def resolve_argnums(fun: Callable, sig: inspect.Signature | None, donate_argnums,
                    donate_argnames, static_argnums, static_argnames
                    ) -> tuple[tuple[int, ...], tuple[str, ...], tuple[int, ...], tuple[str, ...]]:
  """jit's static and donated arguments, as JAX reads them: each of the numbers and the
  names not given is inferred from the other through `sig` (`fun`'s signature, None when
  it has none: then nothing is inferred or checked), and both are checked against `sig`.

  Returns:
    `(donate_argnums, donate_argnames, static_argnums, static_argnames)`.

  Raises:
    TypeError: numbers that are not ints, names that are not strs.
    ValueError: (JAX's messages) numbers out of range for `sig`'s positional parameters
      (when it has no `*args`); names of positional-only parameters, or of no parameter
      when it has no `**kwargs`; donate_argnames for a function without a signature;
      a name both static and donated.
  """
  if sig is None:
    static_argnums = () if static_argnums is None else ensure_index_tuple(static_argnums)
    static_argnames = () if static_argnames is None else ensure_str_tuple(static_argnames)
    donate_argnums = () if donate_argnums is None else ensure_index_tuple(donate_argnums)
    if donate_argnames is not None:
      raise ValueError(f"Getting the signature of function {fun} failed. Pass "
                       f"donate_argnums instead of donate_argnames.")
    donate_argnames = ()
  else:
    static_argnums, static_argnames = _infer_argnums_and_argnames(sig, static_argnums,
                                                                  static_argnames)
    donate_argnums, donate_argnames = _infer_argnums_and_argnames(sig, donate_argnums,
                                                                  donate_argnames)
    _validate_argnums(sig, static_argnums, "static_argnums")
    _validate_argnames(sig, static_argnames, "static_argnames")
    _validate_argnums(sig, donate_argnums, "donate_argnums")
    _validate_argnames(sig, donate_argnames, "donate_argnames")
  if both := set(static_argnames) & set(donate_argnames):
    raise ValueError(f"static_argnames and donate_argnames cannot intersect. Argument names "
                     f"{both} appear in both static_argnames and donate_argnames")
  return donate_argnums, donate_argnames, static_argnums, static_argnames


def arg_names(sig, dyn_argnums: Sequence[int], dyn_kwarg_names: Sequence[str],
               args_tree_with_paths) -> tuple[tuple[str, ...], tuple[int | str, ...]]:
  """One readable name per flat leaf (`x`, `params['w']`) and the top-level origin."""
  params = list(sig.parameters.values()) if sig is not None else []
  positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                     p.POSITIONAL_OR_KEYWORD)]
  var_pos = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
  names, origins = [], []
  for path, _ in args_tree_with_paths:
    top, rest = path[0], path[1:]   # (args, kwargs) tuple
    if top.idx == 0:
      i = rest[0].idx
      argnum = dyn_argnums[i]
      if argnum < len(positional):
        base = positional[argnum]
      elif var_pos is not None:
        base = f"{var_pos}[{argnum - len(positional)}]"
      else:
        base = f"args[{argnum}]"
      names.append(base + tree_util.keystr(rest[1:]))
      origins.append(argnum)
    else:
      key = rest[0].key
      names.append(str(key) + tree_util.keystr(rest[1:]))
      origins.append(str(key))
  return tuple(names), tuple(origins)


def check_out_leaves(leaves, out_tree, fun_name: str, what: str,
                     source_info: str | None = None):
  """Raises JAX's TypeError for an output leaf of a traced function that is not an array
  (`what` names the transformation; `source_info`, `f at file.py:12`, the function where
  JAX's message says where it is defined)."""
  for i, leaf in enumerate(leaves):
    if isinstance(leaf, core.Tracer) or type(leaf) is Array:
      continue
    if type(leaf) is int:
      core.get_aval(leaf)   # NB: as JAX's, an int out of range is an OverflowError
    if not core.valid_array_type(leaf):
      if what == "vmap":
        raise TypeError(f"Output from batched function {leaf!r} with type {type(leaf)} is "
                        f"not a valid JAX type")
      if what in ("differentiation", "pmap", "shard_map"):
        raise TypeError(f"Argument {leaf!r} of type {type(leaf)} is not a valid JAX type")
      paths = tree_util.tree_flatten_with_path(tree_util.tree_unflatten(out_tree, leaves))[0]
      path = tree_util.keystr(paths[i][0]) if i < len(paths) else ""
      traced_for = {"eval_shape": "jit", "make_jaxpr": "jit",
                    "checkpoint": "checkpoint / remat"}.get(what, what)
      raise TypeError(
          f"function {source_info or fun_name} traced for {traced_for} returned a value of "
          f"type {type(leaf)}{f' at output component {path}' if path else ''}, which is "
          f"not a valid JAX type")


def normalize_argnums(argnums, name: str) -> tuple[int, ...]:
  if argnums is None:
    return ()
  if isinstance(argnums, int):
    argnums = (argnums,)
  try:
    return tuple(int(i) for i in argnums)
  except TypeError:
    raise TypeError(f"jit: {name} must be an int or a sequence of ints, got {argnums!r}.")


def ensure_inbounds(num_args: int, argnums: Sequence[int]) -> tuple[int, ...]:
  """`argnums` with negative indices resolved against `num_args` positional arguments.

  Raises:
    ValueError: for an index outside `[-num_args, num_args)` (JAX's message).
  """
  out = []
  for i in argnums:
    if not -num_args <= i < num_args:
      raise ValueError(f"Positional argument indices, e.g. for `static_argnums`, must have "
                       f"value greater than or equal to -len(args) and less than len(args), "
                       f"but got value {i} for len(args) == {num_args}.")
    out.append(i % num_args)
  return tuple(out)


def normalize_argnames(argnames, name: str) -> tuple[str, ...]:
  if argnames is None:
    return ()
  if isinstance(argnames, str):
    return (argnames,)
  return tuple(argnames)


def flatten_axes(what: str, prefix, full_tree, leaves_tree_def) -> list:
  """One axis spec per leaf of `full_tree` from a pytree prefix of it (ints or None)."""
  try:
    axes = tree_util.broadcast_prefix(prefix, full_tree)
  except ValueError:
    # NB: as JAX's, against the value's structure with `PytreeLeaf` leaves, None a node
    errors = tree_util.prefix_errors(prefix, tree_util.leaves_as_pytree_leaf(full_tree))
    if errors:   # NB: JAX's message
      raise ValueError(f"vmap {what} specification must be a tree prefix of the corresponding "
                       f"value; \n  " + tree_util.prefix_mismatch(errors, f"vmap {what}",
                                                                 indent="  ")) from None
    raise ValueError(f"vmap {what} specification must be a tree prefix of the corresponding "
                     f"value, got specification {prefix!r} for value tree "
                     f"{treedef_str(leaves_tree_def)}.") from None
  for ax in axes:
    if ax is not None and not isinstance(ax, (int, np.integer)):
      raise TypeError(f"vmap {what} must be an int, None, or (nested) container with those "
                      f"types as leaves, but got {ax!r}.")
  return [None if ax is None else int(ax) for ax in axes]


def flat_mapped_args(what: str, in_axes, args: tuple, kwargs: dict):
  """The leaves of `(args, kwargs)` with their tree, the mapped axis spec of each leaf
  (`in_axes` a prefix of `args`; keyword arguments map over axis 0) and each leaf's key
  path for messages: what vmap and pmap read their arguments with."""
  leaves, in_tree = flatten((args, kwargs))
  axes = flatten_axes(what, in_axes, args, flatten(args)[1])
  axes += [0] * (len(leaves) - len(axes))
  paths = [tree_util.keystr(k) for k, _ in tree_util.tree_flatten_with_path(args)[0]]
  paths += [tree_util.keystr(k) for k, _ in tree_util.tree_flatten_with_path(kwargs)[0]]
  return leaves, in_tree, axes, paths


def describe_arg(path: str) -> str:
  return f"argument {path}" if path else "the argument"


def check_vmap_axes(in_axes: Any, out_axes: Any) -> Any:
  """JAX's checks of vmap's `in_axes` and `out_axes`, made when `vmap` is called; returns
  `in_axes` with a list made a tuple (JAX accepts a list for the tuple of arguments).

  Raises:
    TypeError: `in_axes` neither an int, None nor a tuple (a bool, a dict, a NumPy int:
      JAX checks the exact type), or a leaf of `in_axes` or `out_axes` that is not an int
      (JAX's messages).
  """
  if isinstance(in_axes, list):
    in_axes = tuple(in_axes)
  spec_types = {int, *batching.spec_types}
  if not (in_axes is None or type(in_axes) in spec_types or type(in_axes) is tuple):
    raise TypeError(f"vmap in_axes must be an int, None, or a tuple of entries corresponding "
                    f"to the positional arguments passed to the function, but got {in_axes}.")
  for what, axes in (("in_axes", in_axes), ("out_axes", out_axes)):
    if not all(type(leaf) in spec_types for leaf in tree_util.tree_leaves(axes)):
      raise TypeError(f"vmap {what} must be an int, None, or (nested) container with those "
                      f"types as leaves, but got {axes}.")
  return in_axes


def check_pmap_axes(in_axes: Any, out_axes: Any) -> None:
  """JAX's checks of pmap's `in_axes` and `out_axes`, made when `pmap` is called.

  Raises:
    TypeError: a leaf of either that is not exactly an int (a bool, a NumPy int, a float,
      an array; JAX's messages).
  """
  for what, axes in (("in_axes", in_axes), ("out_axes", out_axes)):
    if not all(type(leaf) is int for leaf in tree_util.tree_leaves(axes)):
      raise TypeError(f"pmap {what} must be an int, None, or (nested) container with those "
                      f"types as leaves, but got {axes}.")


def mapped_axes(what: str, fun: Callable | None, leaves: Sequence[Any], in_tree, axes,
                axis_size: int | None = None, aval_of: Callable = core.get_aval,
                no_mapped: str | None = None) -> tuple[list, int]:
  """Normalizes the mapped axis of each leaf (None: not mapped) and finds the mapped size,
  shared by vmap and pmap (JAX's `_mapped_axis_size`).

  Args:
    what: the transformation's name in messages (`"vmap"`).
    fun: the mapped function: its signature names the arguments in the message for
      inconsistent sizes (None, or a signature the arguments do not bind to: by position,
      `args[1]`).
    leaves: the leaves of `(args, kwargs)`; `in_tree` their PyTreeDef.
    axes: the mapped axis of each leaf as given (None: not mapped; negative counts from
      the end).
    axis_size: the size given to the transformation, or None.
    aval_of: the aval of a leaf.
    no_mapped: when given, the message raised whenever no leaf is mapped, `axis_size` or
      not (pmap's); else JAX's vmap messages, and `axis_size` stands in for mapped leaves.

  Returns:
    `(dims, size)`: each leaf's axis in `[0, rank)` (None: unmapped) and the mapped size.

  Raises:
    ValueError: an axis out of range for its leaf's rank; no leaves at all, or no mapped
      leaf, without `axis_size`; leaves (and `axis_size`) disagreeing on the size (JAX's
      message: the sizes grouped, most common first, each with an example argument named
      by `fun`'s signature and its type).
  """
  if not leaves and no_mapped is None:
    if axis_size is not None:
      return [], axis_size
    args, kwargs = tree_util.tree_unflatten(in_tree, [])
    raise ValueError(f"{what} wrapped function must be passed at least one argument "
                     f"containing an array or axis_size must be specified, got empty "
                     f"*args={args} and **kwargs={kwargs}")
  dims, sizes = [], []
  for x, ax in zip(leaves, axes):
    if ax is None:
      dims.append(None)
      sizes.append(None)
      continue
    shape = aval_of(x).shape
    nd = len(shape)
    if not -nd <= ax < nd:
      raise ValueError(f"{what} was requested to map its argument along axis {ax}, which "
                       f"implies that its rank should be at least {max(ax + 1, -ax)}, but "
                       f"is only {nd} (its shape is {tuple(shape)})")
    dims.append(ax % nd)
    sizes.append(shape[ax])
  mapped = [s for s in sizes if s is not None]
  if not mapped and no_mapped is not None:
    raise ValueError(no_mapped)
  distinct = set(mapped) | ({axis_size} if axis_size is not None else set())
  if len(distinct) == 1:
    return dims, distinct.pop()
  if not distinct:
    raise ValueError(f"{what} must have at least one non-None value in in_axes or axis_size "
                     f"must be specified")
  raise ValueError(_inconsistent_sizes(what, fun, leaves, in_tree, axes, sizes, axis_size))


def _inconsistent_sizes(what: str, fun: Callable | None, leaves, in_tree, axes, sizes,
                        axis_size) -> str:
  """JAX's message for mapped sizes that disagree (`sizes`: each leaf's, None unmapped)."""
  args, kwargs = tree_util.tree_unflatten(in_tree, list(leaves))
  try:
    params = list(inspect.signature(fun).bind(*args, **kwargs).signature.parameters)
  except (TypeError, ValueError):   # NB: also no function (None)
    params = None

  def arg_name(path) -> str:
    i = path[0].idx
    if params is None or i >= len(params):   # no signature, or one of *args
      return f"args{tree_util.keystr(path)}"
    return f"argument {params[i]}{tree_util.keystr(path[1:])}"

  def type_str(x) -> str:
    try:
      return shaped_abstractify(x).str_short(short_dtypes=False)
    except TypeError:
      return "unknown"

  descs = [f"{arg_name(p)} of type {type_str(x)}"
           for p, x in tree_util.tree_flatten_with_path(args)[0]]
  descs += [f"kwargs{tree_util.keystr(p)} of type {type_str(x)}"
            for p, x in tree_util.tree_flatten_with_path(kwargs)[0]]
  lines = [f"  * the `axis_size` argument was {axis_size}"] if axis_size is not None else []
  # NB: most_common keeps sizes of equal counts in the order they first occur, as JAX's
  counts = collections.Counter(s for s in sizes if s is not None).most_common()
  for k, (size, count) in enumerate(counts):
    i = next(j for j, s in enumerate(sizes) if s is not None and s == size)
    example = f"axis {axes[i]} of {descs[i]}"
    if count == 1:
      lines.append(f"  * one axis had size {size}: {example}")
    else:
      lines.append(f"  * {'most' if k == 0 else 'some'} axes ({count} of them) had size "
                   f"{size}, e.g. {example}")
  return f"{what} got inconsistent sizes for array axes to be mapped:\n" + ";\n".join(lines)


# ---------------------------------------------------------------------------
# JAX's library-author helpers (`jax.api_util`): debug info and flattening of wrapped
# functions, as flax's `lazy_init` and `nn.scan` use them with `jax.extend.linear_util`.


def debug_info(traced_for: str, fun: Callable, args: Sequence[Any], kwargs: dict, *,
               static_argnums: Sequence[int] = (), static_argnames: Sequence[str] = (),
               result_paths_thunk: Callable | None = None, sourceinfo: str | None = None,
               signature: Any = None) -> core.DebugInfo:
  """What a jaxpr traced from `fun(*args, **kwargs)` records about its origin (JAX's
  `api_util.debug_info`): the transformation `traced_for`, the function's name and one name
  per flat dynamic argument (`x`, `params['w']`).

  Args:
    traced_for: e.g. `"jit"`, `"lazy_init"`.
    fun: the traced function.
    args, kwargs: its arguments (anything: only their tree structure and the function's
      signature are read; a PyTreeDef stands for no named arguments).
    static_argnums, static_argnames: the arguments left out of the names.
    result_paths_thunk, sourceinfo: accepted for JAX compatibility (not recorded).
    signature: `fun`'s `inspect.Signature`, when already known.

  Returns:
    A `core.DebugInfo`.
  """
  del result_paths_thunk
  name = sourceinfo or fun_name(fun)
  try:
    static = set(normalize_argnums(static_argnums, "static_argnums"))
    dyn_argnums = [i for i in range(len(args)) if i not in static]
    dyn_args = tuple(args[i] for i in dyn_argnums)
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in set(static_argnames)}
    with_paths = tree_util.tree_flatten_with_path((dyn_args, dyn_kwargs))[0]
    sig = signature if signature is not None else fun_signature(fun)
    names, origins = arg_names(sig, dyn_argnums, list(dyn_kwargs), with_paths)
  except (TypeError, ValueError, IndexError, AttributeError):
    names, origins = None, None
  return core.DebugInfo(traced_for, name, names, origins,
                        fun_source_info(fun))


class _OutTreeStore:
  """Holds the output tree of one call of a flattened function (a linear_util store)."""
  __slots__ = ("_val",)

  def __init__(self):
    self._val = _EMPTY

  def store(self, val: Any) -> None:
    self._val = val

  @property
  def val(self) -> Any:
    if self._val is _EMPTY:
      raise ValueError("the output tree of a flattened function is read before the function "
                       "was called (call it, or trace it, first)")
    return self._val

  def reset(self) -> None:
    self._val = _EMPTY


_EMPTY = object()


def _flat_call(f, store, in_tree, with_kwargs, *args_flat):
  tree = tree_util.tree_unflatten(in_tree, list(args_flat))
  out = f(*tree[0], **tree[1]) if with_kwargs else f(*tree)
  leaves, out_tree = flatten(out)
  store.store(out_tree)
  return leaves


def _flatten_wrapped(fun: Any, in_tree, with_kwargs: bool):
  store = _OutTreeStore()
  if hasattr(fun, "wrap") and hasattr(fun, "call_wrapped"):   # a linear_util.WrappedFun
    return fun.wrap(_flat_call, (in_tree, with_kwargs), store), lambda: store.val

  def flat_fun(*args_flat):
    return _flat_call(fun, store, in_tree, with_kwargs, *args_flat)
  return flat_fun, lambda: store.val


def flatten_fun(fun: Any, in_tree) -> tuple[Any, Callable[[], Any]]:
  """`fun(*args, **kwargs)` as a function of the flat leaves of `(args, kwargs)` (structure
  `in_tree`) returning a flat list of output leaves (JAX's `api_util.flatten_fun`).

  Args:
    fun: a `stagecraft.extend.linear_util.WrappedFun` (or a plain callable).
    in_tree: the PyTreeDef of `(args, kwargs)`.

  Returns:
    `(flat_fun, out_tree)`: `flat_fun` of the same kind as `fun`; `out_tree()` gives the
    output's PyTreeDef once `flat_fun` has been called (ValueError before).
  """
  return _flatten_wrapped(fun, in_tree, True)


def flatten_fun_nokwargs(fun: Any, in_tree) -> tuple[Any, Callable[[], Any]]:
  """As `flatten_fun`, for `fun(*args)`: `in_tree` is the PyTreeDef of the tuple `args`."""
  return _flatten_wrapped(fun, in_tree, False)
