"""`pure_callback` and `io_callback` (JAX's `jax.pure_callback`,
`jax.experimental.io_callback`): call Python on the host from inside a program."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import optree

from stagecraft import core, dtypes, tree_util
from stagecraft.core import ShapedArray
from stagecraft.lax import callback as cb

__all__ = ["pure_callback", "io_callback"]


def _result_avals(result_shape_dtypes, what: str):
  leaves, tree = optree.tree_flatten(result_shape_dtypes, none_is_leaf=False,
                                     namespace=tree_util.NAMESPACE)
  avals = []
  for path, x in zip(optree.tree_paths(result_shape_dtypes, none_is_leaf=False,
                                       namespace=tree_util.NAMESPACE), leaves):
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None:
      where = "".join(f"[{p!r}]" for p in path) or "result_shape_dtypes"
      raise TypeError(f"{what}: result_shape_dtypes must be a pytree of objects with "
                      f"`shape` and `dtype` (e.g. ShapeDtypeStruct), got {x!r} at {where}.")
    dt = np.dtype(dtype)
    if dtypes.canonicalize_dtype(dt) != dt:
      raise ValueError("result_shape_dtypes cannot specify 64-bit types when "
                       "`jax_enable_x64` is disabled")
    avals.append(ShapedArray(tuple(shape), dt))
  return tuple(avals), tree


def _flat(callback: Callable, args, kwargs, what: str):
  if not callable(callback):
    raise TypeError(f"{what} expects a callable first, got {callback!r}.")
  leaves, in_tree = optree.tree_flatten((args, kwargs), none_is_leaf=False,
                                       namespace=tree_util.NAMESPACE)
  return cb.FlatCallback(callback, in_tree), leaves


def pure_callback(callback: Callable[..., Any], result_shape_dtypes: Any, *args: Any,
                  sharding=None, vmap_method: str | None = None, **kwargs: Any) -> Any:
  """Calls a pure Python function on the host from inside a program.

  Args:
    callback: `callback(*args, **kwargs)`, receiving Arrays, returning array-likes with the
      structure, shapes and dtypes of `result_shape_dtypes`. It must be pure: an unused
      call may be removed, and a call may be repeated.
    result_shape_dtypes: a pytree of `ShapeDtypeStruct` (anything with shape and dtype).
    args, kwargs: pytrees of arrays passed to `callback`.
    vmap_method: how vmap calls it: "sequential" (once per example, a loop),
      "sequential_unrolled", "expand_dims" (unbatched arguments get a leading size-1 axis),
      "broadcast_all" (every argument batched) or "legacy_vectorized" (unbatched arguments
      as they are); None: vmap raises NotImplementedError.
    sharding: accepted for JAX compatibility.

  Returns:
    a pytree of Arrays shaped like `result_shape_dtypes`.

  Raises:
    ValueError: under differentiation (wrap it in `custom_jvp`/`custom_vjp`).
    RuntimeError (JaxRuntimeError from a compiled program): when `callback` returns other
      shapes or dtypes than declared, or raises (the original exception chained).
  """
  if vmap_method is not None and vmap_method not in cb.VMAP_METHODS:
    raise ValueError(f"vmap_method must be one of {cb.VMAP_METHODS} or None, got "
                     f"{vmap_method!r}.")
  avals, out_tree = _result_avals(result_shape_dtypes, "pure_callback")
  flat, leaves = _flat(callback, args, kwargs, "pure_callback")
  outs = cb.pure_callback_p.bind(*leaves, callback=flat, result_avals=avals,
                                 vmap_method=vmap_method, sharding=sharding)
  return optree.tree_unflatten(out_tree, outs)


def io_callback(callback: Callable[..., Any], result_shape_dtypes: Any, *args: Any,
                sharding=None, ordered: bool = False, **kwargs: Any) -> Any:
  """Calls a Python function with side effects on the host from inside a program.

  As `pure_callback`, but never removed or repeated; with `ordered=True`, calls run in
  program order, across calls of compiled programs too (not allowed under vmap).
  Under vmap an unordered io_callback runs once per example.

  Raises:
    ValueError: under differentiation ("IO callbacks do not support JVP."), or under vmap
      with `ordered=True`.
  """
  avals, out_tree = _result_avals(result_shape_dtypes, "io_callback")
  flat, leaves = _flat(callback, args, kwargs, "io_callback")
  outs = cb.io_callback_p.bind(*leaves, callback=flat, result_avals=avals,
                               ordered=bool(ordered), sharding=sharding)
  return optree.tree_unflatten(out_tree, outs)
