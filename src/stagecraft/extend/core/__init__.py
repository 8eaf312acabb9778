"""`stagecraft.extend.core`: JAX's `jax.extend.core` over stagecraft's core.

The classes are stagecraft's own (`Primitive` is `stagecraft.core.Primitive`, `Jaxpr` is
`stagecraft.core.Jaxpr`, ...), so a primitive defined here is a stagecraft primitive like the
built-in ones: register its rules in `stagecraft.interpreters.ad`, `batching`,
`partial_eval` and `mlir`. `primitives` holds every built-in primitive under its JAX name.

Differences from JAX: `new_jaxpr_eqn` ignores its `effects` argument (an equation's effects
come from its primitive's `def_effects` rule and the jaxprs in its params); `DebugInfo` has
stagecraft's fields (`traced_for, func_name, arg_names, arg_origins`); `CallPrimitive`
equations hold a `ClosedJaxpr` (consts passed as leading operands) in `call_jaxpr`.
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from stagecraft import core as _core_module
from stagecraft import dtypes
from stagecraft.core import (AbstractToken, ClosedJaxpr, DebugInfo, DropVar, Effect, Effects,
                             EffectTypeSet, Jaxpr, JaxprEqn, Literal, Primitive, ShapedArray,
                             Token, Trace, Var, abstract_token, check_jaxpr, jaxpr_as_fun,
                             no_effects, ordered_effects)
from stagecraft.errors import (ConcretizationTypeError, InconclusiveDimensionOperation,
                               JaxprTypeError)
from stagecraft.extend.core import primitives
from stagecraft.interpreters import batching, calls, lowering
from stagecraft.interpreters.calls import CallPrimitive, call_impl
from stagecraft.interpreters import partial_eval as pe

__all__ = ["AbstractToken", "CallPrimitive", "ClosedJaxpr", "DebugInfo", "DropVar", "Effect",
           "Effects", "InconclusiveDimensionOperation", "Jaxpr", "JaxprEqn", "JaxprTypeError",
           "Literal", "Primitive", "Token", "TraceTag", "Var", "array_types", "call_impl",
           "check_jaxpr", "concrete_or_error", "find_top_trace", "gensym",
           "get_opaque_trace_state", "jaxpr_as_fun", "jaxprs_in_params", "mapped_aval",
           "new_jaxpr_eqn", "no_effects", "nonempty_axis_env_DO_NOT_USE",
           "primal_dtype_to_tangent_dtype", "primitives", "set_current_trace", "subjaxprs",
           "take_current_trace", "unmapped_aval", "unsafe_am_i_under_a_jit_DO_NOT_USE",
           "unsafe_am_i_under_a_vmap_DO_NOT_USE", "unsafe_get_axis_names_DO_NOT_USE",
           "valid_jaxtype",
           # beyond jax.extend.core: JAX's effect registries and token aval (jax._src.effects,
           # jax._src.core), which libraries with ordered effects need
           "EffectTypeSet", "ordered_effects", "abstract_token"]

#: The types of concrete array values (NumPy arrays and scalars), as JAX's `array_types`.
array_types: set[type] = {t for t in _core_module.pytype_aval_mappings
                          if t is np.ndarray or (isinstance(t, type) and issubclass(t, np.generic)
                                                 and t is not np.void)}


class TraceTag:
  """A fresh identity that tells nested transformations of one kind apart (JAX's
  `core.TraceTag`; stagecraft's traces are their own tags, so this is only a marker object,
  equal to itself alone)."""
  __slots__ = ("__weakref__",)


def concrete_or_error(force: Callable | None, val: Any, context: str = "") -> Any:
  """`force(val)` for a concrete `val`, or for a tracer that knows its value; otherwise a
  ConcretizationTypeError that adds `context` (JAX's `core.concrete_or_error`).

  Args:
    force: a conversion such as `int` or `operator.index` (None: the value itself).
    val: a value or a tracer.
    context: a sentence saying why a concrete value is needed.

  Raises:
    ConcretizationTypeError: if `val` is an abstract tracer.
  """
  force = (lambda x: x) if force is None else force
  if isinstance(val, _core_module.Tracer):
    concrete = val.to_concrete_value()
    if concrete is None:
      origin = val._trace.origin_msg(val)
      raise ConcretizationTypeError(
          f"Abstract tracer value encountered where concrete value is expected: traced "
          f"array with shape {val.aval.str_short(False)}\n{context}{origin}\nUse "
          f"`stagecraft.lax.cond` or `stagecraft.numpy.where` instead of Python control "
          f"flow, or make the value static.")
    return force(concrete)
  return force(val)


def find_top_trace(_: Any = None) -> Trace:
  """The current trace (JAX's `find_top_trace`, which ignores its argument too)."""
  return _core_module.current_trace()


def gensym() -> Callable[[ShapedArray], Var]:
  """A function making fresh variables: `gensym()(aval)` is a new `Var` of `aval`."""
  return Var


def jaxprs_in_params(params: dict) -> Iterator[Jaxpr]:
  """The jaxprs held by equation params (a `ClosedJaxpr`'s jaxpr, a `Jaxpr`, or tuples and
  lists of them), in order."""
  for v in params.values():
    for x in (v if isinstance(v, (tuple, list)) else (v,)):
      if isinstance(x, ClosedJaxpr):
        yield x.jaxpr
      elif isinstance(x, Jaxpr):
        yield x


def subjaxprs(jaxpr: Jaxpr) -> Iterator[Jaxpr]:
  """The jaxprs in the params of `jaxpr`'s equations (one level deep), as JAX's
  `core.subjaxprs`. (`stagecraft.core.subjaxprs` takes one equation instead.)"""
  for eqn in jaxpr.eqns:
    yield from jaxprs_in_params(eqn.params)


def new_jaxpr_eqn(invars, outvars, primitive: Primitive, params: dict, effects: Any = None,
                  source_info: Any = None, ctx: Any = None) -> JaxprEqn:
  """A new equation `outvars = primitive[params] invars`. `effects` and `ctx` are accepted
  for JAX compatibility: an equation's effects come from its primitive and params."""
  return JaxprEqn(list(invars), list(outvars), primitive, dict(params), source_info)


def mapped_aval(size: int, axis: int | None, aval: ShapedArray) -> ShapedArray:
  """`aval` without its mapped axis `axis` of `size` (unchanged for axis None).

  Raises:
    ValueError: if `aval.shape[axis] != size`.
  """
  if axis is None:
    return aval
  shape = list(aval.shape)
  if not -len(shape) <= axis < len(shape) or shape[axis] != size:
    raise ValueError(f"mapped_aval: expected an axis {axis} of size {size}, got "
                     f"{aval.str_short()}.")
  del shape[axis]
  return aval.update(shape=tuple(shape))


def unmapped_aval(size: int, axis: int | None, aval: ShapedArray,
                  explicit_mesh_axis: Any = None) -> ShapedArray:
  """`aval` with a new axis of `size` inserted at `axis` (unchanged for axis None)."""
  if axis is None:
    return aval
  shape = list(aval.shape)
  shape.insert(axis if axis >= 0 else axis + len(shape) + 1, size)
  return aval.update(shape=tuple(shape))


def primal_dtype_to_tangent_dtype(primal_dtype: Any) -> np.dtype:
  """The tangent dtype of a primal dtype: float0 for integers and bool, itself otherwise."""
  dt = np.dtype(primal_dtype)
  return dt if dtypes.is_inexact(dt) else dtypes.float0


def valid_jaxtype(x: Any) -> bool:
  """Whether `x` is an array value stagecraft can trace (an Array, a tracer, a NumPy array
  or scalar, a Python number)."""
  return _core_module.valid_array_type(x)


@contextmanager
def set_current_trace(trace: Trace, check_leaks: bool = False):
  """Context manager that makes `trace` current (`check_leaks` accepted, no effect)."""
  with _core_module.set_current_trace(trace):
    yield trace


class _NoTrace(Trace):
  """Current inside `take_current_trace`: binding a primitive there is a mistake."""
  __slots__ = ()

  def process_primitive(self, prim, args, params):
    raise RuntimeError(f"'{prim.name}' was bound inside take_current_trace() without a "
                       f"trace: bind under `set_current_trace(trace)` with the trace that "
                       f"take_current_trace() gave.")


@contextmanager
def take_current_trace():
  """Context manager yielding the current trace; inside it no trace is current (bind with
  `set_current_trace(trace)`), as JAX's `core.take_current_trace`."""
  prev = _core_module.current_trace()
  with _core_module.set_current_trace(_NoTrace()):
    yield prev


class _OpaqueTraceState:
  __slots__ = ("_ref",)

  def __init__(self, trace: Trace):
    self._ref = weakref.ref(trace)

  def __eq__(self, other):
    return isinstance(other, _OpaqueTraceState) and self._ref() is other._ref()

  def __hash__(self):
    return id(self._ref())


def get_opaque_trace_state(convention: Any = None) -> Any:
  """An object equal to another exactly when both were taken under the same current trace
  (JAX uses it to tell whether a callback runs in the trace that staged it)."""
  return _OpaqueTraceState(_core_module.current_trace())


def _trace_chain() -> Iterator[Trace]:
  t = _core_module.current_trace()
  while t is not None:
    yield t
    t = getattr(t, "parent", None)


def unsafe_am_i_under_a_jit_DO_NOT_USE() -> bool:
  """Whether the code runs while a function is staged (jit, make_jaxpr, a lowering)."""
  return any(type(t) is pe.DynamicJaxprTrace for t in _trace_chain())


def unsafe_am_i_under_a_vmap_DO_NOT_USE() -> bool:
  """Whether the code runs under vmap."""
  return any(isinstance(t, batching.BatchTrace) for t in _trace_chain())


def unsafe_get_axis_names_DO_NOT_USE() -> list[Any]:
  """The names of the bound named axes (vmap's axis_name, pmap's), outermost first."""
  return batching.bound_axis_names()


def nonempty_axis_env_DO_NOT_USE() -> bool:
  """Whether a named axis is bound."""
  return bool(batching.bound_axis_names())
