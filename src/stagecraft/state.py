"""Mutable array references (JAX's `jax.Ref`, `jax.ref.AbstractRef`) and their state
discharge at `jit` boundaries.

A `Ref` made outside any transformation is eager: it holds a concrete Array. A ref made
inside a traced function is local to that trace and is discharged as it is traced (reads
give its traced value, writes replace it). At a `jit` boundary the refs a function uses
(passed as arguments, or closed over: implicit arguments, as in JAX) are discharged too:
while the function is traced each such ref is made local to the jit's trace, holding a new
input of the traced program; its final value is an extra output, written back into the ref
after the call (`pjit.PjitFunction`). A closed-over ref is found when the trace first reads
or writes it (`RefMet`); the function is then traced again with that ref as an input.

Layer 6 (beside `pjit`, which imports this module): the `jit_frame` stack says which refs
are outside the jit being traced. `discharged`, `carried_values` and `write_back` are what
a loop (scan, while_loop) or cond needs to carry the refs its body writes the same way
(not wired into lax/control_flow yet: a loop body writing a ref from outside raises
`NotImplementedError`).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Sequence

import numpy as np
import optree

from stagecraft import core, dtypes, tree_util
from stagecraft.api_util import arg_names, check_out_leaves, flatten, fun_name, fun_signature
from stagecraft.core import DebugInfo, ShapedArray
from stagecraft.interpreters import ad, partial_eval as pe
from stagecraft.lax import elementwise as lax_elementwise
from stagecraft.runtime.array import Array

__all__ = ["AbstractRef", "Ref", "RefMet", "freeze"]


class AbstractRef:
  """The type of a `Ref` (JAX's `jax.ref.AbstractRef`): the aval of the array it holds,
  printed as JAX prints it, e.g. `Ref{float32[3]}`.

  Attributes:
    inner_aval: the `ShapedArray` of the referenced array; shape, dtype, ndim, size,
      weak_type: its.
  """
  __slots__ = ("inner_aval", "memory_space", "kind")

  def __init__(self, inner_aval: ShapedArray, memory_space: Any = None, kind: Any = None):
    self.inner_aval = inner_aval
    self.memory_space = memory_space
    self.kind = kind

  shape = property(lambda self: self.inner_aval.shape)
  dtype = property(lambda self: self.inner_aval.dtype)
  ndim = property(lambda self: len(self.inner_aval.shape))
  size = property(lambda self: int(np.prod(self.inner_aval.shape, dtype=np.int64)))
  weak_type = property(lambda self: self.inner_aval.weak_type)

  def str_short(self, short_dtypes: bool = False) -> str:
    return f"Ref{{{self.inner_aval.str_short(short_dtypes)}}}"

  def __repr__(self):
    return self.str_short()

  __str__ = __repr__

  def __eq__(self, other):
    return (type(other) is AbstractRef and self.inner_aval == other.inner_aval
            and self.memory_space == other.memory_space and self.kind == other.kind)

  def __hash__(self):
    return hash((AbstractRef, self.inner_aval, self.memory_space, self.kind))


# ---------------------------------------------------------------------------
# jit frames: which refs are outside the jit being traced


class RefMet(NotImplementedError):
  """Raised when the trace of a jitted function meets a ref from outside it (an eager ref,
  or a ref local to an enclosing trace): the jit that owns `frame` traces again with `ref`
  as an implicit input. Seen by a user only where no jit can do that (`jit(f).trace()`)."""

  def __init__(self, frame: "_Frame", ref: "Ref"):
    super().__init__(
        f"The function traced for jit reads or writes a Ref it closes over "
        f"({_aval(ref)!s}); stagecraft discharges such refs when the jitted function is "
        f"called, but not in jit(f).trace()/.lower(): pass the ref as an argument instead.")
    self.frame = frame
    self.ref = ref


class _Frame:
  __slots__ = ("outer_level",)

  def __init__(self, outer_level: int):
    self.outer_level = outer_level   # refs of traces up to this level are outside the jit


class _Frames(threading.local):
  def __init__(self):
    self.stack: list[_Frame] = []


_frames = _Frames()


@contextlib.contextmanager
def jit_frame():
  """Marks the trace of a jitted function made inside this context: a ref from outside it
  met while tracing raises `RefMet`, whose `frame` is None once it leaves this context
  (the ref is one this jit takes as an input: its caller traces again)."""
  frame = _Frame(core.current_trace()._level)
  _frames.stack.append(frame)
  try:
    yield frame
  except RefMet as e:
    if e.frame is frame:
      e.frame = None    # met by this jit's own trace: its caller traces again
    raise
  finally:
    _frames.stack.remove(frame)


def _outside(ref: "Ref") -> _Frame | None:
  """The innermost jit frame that `ref` is outside of (None: none, or no frame)."""
  stack = _frames.stack
  if not stack:
    return None
  frame = stack[-1]
  if ref._trace is None or ref._trace._level <= frame.outer_level:
    return frame
  return None


# ---------------------------------------------------------------------------
# Ref


def _aval(ref: "Ref") -> AbstractRef:
  return AbstractRef(core.get_aval(ref._value))


class Ref:
  """A mutable reference to an array, as JAX's `jax.Ref` (made by `new_ref`): `ref[...]`
  reads the current value, `ref[idx] = v` writes into it (`ref.at[idx].set(v)` semantics).

  A ref made outside any transformation is eager: it holds a concrete `Array`. A ref made
  inside a traced function (`jit`, `grad`, `vmap`, `scan` bodies, ...) is local to that
  trace and is discharged as it is traced: it holds the traced value, reads give it and
  writes replace it, so the staged program computes what the sequence of reads and writes
  means (JAX's state discharge, done at trace time). A ref is not an `Array`
  (`isinstance(ref, Array)` is False, as in JAX), and is a pytree leaf.

  Refs may be passed to a jitted function and closed over by one (JAX's implicit
  arguments): each becomes an input and an output of the compiled program, and its new
  value is written back into the ref after the call (see `stagecraft.state`). Returning a
  ref from a jitted function, or passing the same ref twice, raises `ValueError` (as JAX).

  Not supported (each raises `NotImplementedError` naming the fix): writing into a ref
  from a nested trace (a `cond`, `scan`, `fori_loop` or `while_loop` body) a value traced
  there; reading an eager ref in a staged function that is not jitted (`make_jaxpr`, or a
  loop body outside jit), where its value would be baked into the staged program.

  Attributes:
    shape, dtype, ndim, size: those of the referenced array.
  """
  __slots__ = ("_value", "_frozen", "_trace", "__weakref__")

  def __init__(self, value: Any, trace: Any = None):
    self._value = value
    self._frozen = False
    self._trace = trace    # the trace a local ref belongs to; None for an eager ref

  shape = property(lambda self: self._value.shape)
  dtype = property(lambda self: self._value.dtype)
  ndim = property(lambda self: self._value.ndim)
  size = property(lambda self: self._value.size)

  @property
  def aval(self) -> AbstractRef:
    return _aval(self)

  def _check(self):
    if self._frozen:
      raise ValueError("this Ref was frozen (stagecraft.freeze) and can no longer be used")
    frame = _outside(self)
    if frame is not None:   # the jit being traced takes this ref as an input: trace again
      raise RefMet(frame, self)

  def __getitem__(self, idx: Any) -> Any:
    self._check()
    if self._trace is None and _staging(core.current_trace()):
      raise NotImplementedError(
          "Reading a Ref made outside a staged function (make_jaxpr, or a scan, cond or "
          "while_loop body outside jit) inside it is not supported: stagecraft would bake "
          "its current value into the staged program. Call the function under `jit` (which "
          "makes the ref an input and an output of the compiled program), pass `ref[...]` "
          "to it as an argument, or make the ref inside the function with `new_ref`.")
    return self._value if idx is Ellipsis else self._value[idx]

  def __setitem__(self, idx: Any, value: Any) -> None:
    self._check()
    tracers = [v for v in tree_util.tree_leaves(value) if isinstance(v, core.Tracer)]
    if self._trace is None:
      if tracers or _staging(core.current_trace()):
        raise NotImplementedError(
            "stagecraft's Refs made outside a transformation are eager: writing into one "
            "inside grad, vmap, make_jaxpr, ... (outside jit) is not supported; pass the "
            "value out of the transformed function and write it afterwards (or make the "
            "ref inside the function with `new_ref`).")
    elif (core.current_trace() is not self._trace
          or any(t._trace._level > self._trace._level for t in tracers)):
      raise NotImplementedError(
          "Writing into a Ref from a nested transformation (a cond, scan, fori_loop or "
          "while_loop body, a vmap, ...) inside the function that made it (or the jitted "
          "function that takes it) is not supported by stagecraft: return the value from "
          "the nested function (carry it through the loop) and write it after.")
    weak = False
    if not isinstance(value, (core.Tracer, Array)):
      if not isinstance(value, (np.ndarray, np.generic, bool, int, float, complex)):
        raise TypeError(f"Argument '{value}' of type '{type(value)}' is not a valid JAX type")
      weak = type(value) in (bool, int, float, complex)
      value = np.asarray(value)
      value = value.astype(dtypes.canonicalize_dtype(value.dtype))
    # NB: as JAX, a write neither converts nor broadcasts: the value's (canonical) dtype
    # and its shape must be those of what it replaces.
    shape = self._value.shape if idx is Ellipsis else _indexed_shape(self._value.shape, idx)
    if shape is not None and tuple(value.shape) != tuple(shape):
      where = "" if idx is Ellipsis else repr(idx)
      raise ValueError(f"Invalid shape for `swap`. Ref shape: {self._value.shape}. Expected "
                       f"shape: {shape}. Value shape: {tuple(value.shape)}. Transforms: "
                       f"({where}). ")
    if value.dtype != self._value.dtype:
      raise ValueError(f"Invalid dtype for `swap`. Ref dtype: {self._value.dtype}. Value "
                       f"dtype: {value.dtype}. ")
    new = value
    if not isinstance(value, (core.Tracer, Array)):   # a Python scalar is weakly typed
      new = lax_elementwise.convert_element_type(value, value.dtype, weak_type=weak)
    # NB: as JAX's, a whole write keeps the value's weak type.
    self._value = new if idx is Ellipsis else self._value.at[idx].set(new)

  def __len__(self):
    return len(self._value)

  def __repr__(self):
    if isinstance(self._value, core.Tracer):
      return _aval(self).str_short()
    return "Ref(" + repr(self._value).partition("(")[2]


def _indexed_shape(shape: tuple, idx: Any) -> tuple | None:
  """The shape of `x[idx]` for an array of `shape` (None when `idx` holds arrays)."""
  parts = idx if isinstance(idx, tuple) else (idx,)
  if not all(p is None or p is Ellipsis or isinstance(p, (int, slice, np.integer))
             for p in parts):
    return None
  return np.empty(shape, np.bool_)[idx].shape


def _staging(trace: Any) -> bool:
  """Whether `trace` stages a program that may run again later (jit, scan/cond/while
  bodies, make_jaxpr) rather than evaluating now (eager, or grad's linearization)."""
  return isinstance(trace, pe.DynamicJaxprTrace) and not isinstance(trace, ad.PartialEvalTrace)


def freeze(ref: Ref) -> Any:
  """The value of `ref`, which can no longer be used afterwards (JAX's `jax.freeze`).

  Raises:
    TypeError: if `ref` is not a `Ref`.
  """
  if not isinstance(ref, Ref):
    raise TypeError(f"freeze: expected a Ref, got {type(ref).__name__}")
  ref._check()
  value = ref._value
  ref._frozen = True
  return value


# ---------------------------------------------------------------------------
# discharge at the jit boundary


def ref_leaves(leaves: Sequence[Any]) -> list[int]:
  """The positions of the refs among flat leaves."""
  return [i for i, x in enumerate(leaves) if isinstance(x, Ref)]


def _where(fun: Callable) -> str:
  code = getattr(fun, "__code__", None)
  return (f"{fun_name(fun)} at {code.co_filename}:{code.co_firstlineno}" if code
          else fun_name(fun))


def check_ref_args(fun: Callable, leaves: Sequence[Any], names: Sequence[str]) -> None:
  """Raises JAX's ValueError when one ref is passed twice among `leaves`."""
  seen: dict[int, int] = {}
  for i in ref_leaves(leaves):
    j = seen.setdefault(id(leaves[i]), i)
    if j != i:
      raise ValueError(
          f"only one reference to a mutable array may be passed as an argument to a "
          f"function, but when tracing {_where(fun)} for jit the mutable array reference "
          f"of type {_aval(leaves[i])} appeared at both {names[j]} and {names[i]}.")


def check_no_ref_out(fun: Callable, out_leaves: Sequence[Any], in_leaves: Sequence[Any] = (),
                     names: Sequence[str] = ()) -> None:
  """Raises JAX's ValueError when a jitted function returns a ref (naming the argument it
  was passed as, if it was)."""
  for x in out_leaves:
    if isinstance(x, Ref):
      which = next((f"\n\nThe returned mutable array was passed in as the argument "
                    f"{names[i]}." for i, a in enumerate(in_leaves) if a is x), "")
      raise ValueError(
          f"function {_where(fun)} traced for jit returned a mutable array reference of "
          f"type {_aval(x)}, but mutable array references cannot be returned.{which}")


def traced_with_refs(fun: Callable, args: tuple, kwargs: dict, static_argnums: Sequence[int],
                     static_argnames: Sequence[str], implicit: Sequence[Ref],
                     in_avals: Sequence[ShapedArray]):
  """Traces `fun(*args, **kwargs)` (static arguments fixed) with its refs discharged.

  The traced function takes the values of the implicit refs (those not passed as
  arguments), then the dynamic leaves (a ref's value in place of each ref), of `in_avals`;
  it returns the function's flat results, then the final values of the refs it writes
  (implicit refs first, then argument refs).

  Returns:
    (jaxpr with consts as leading invars, consts, the results' treedef, the positions of
    the refs written among the implicit refs then the argument refs, in the order of their
    final values).

  Raises:
    RefMet: for this trace's frame when it meets a ref from outside not in `implicit` (the
      caller adds it and traces again); ValueError: a ref passed twice, or returned.
  """
  name = fun_name(fun)
  dyn_argnums = [i for i in range(len(args)) if i not in static_argnums]
  dyn = (tuple(args[i] for i in dyn_argnums),
         {k: v for k, v in kwargs.items() if k not in static_argnames})
  leaves, in_tree = flatten(dyn)
  with_paths = tree_util.tree_flatten_with_path(dyn)[0]
  names, origins = arg_names(fun_signature(fun), dyn_argnums, list(dyn[1]), with_paths)
  check_ref_args(fun, leaves, names)
  arg_refs = [leaves[i] for i in ref_leaves(leaves)]
  refs = [*implicit, *arg_refs]
  out_tree_box, written = [], []

  def flat_fun(*flat):
    trace = core.current_trace()
    n = len(implicit)
    ref_vals = list(flat[:n])
    leaf_vals = list(flat[n:])
    for i, x in enumerate(leaves):
      if isinstance(x, Ref):
        ref_vals.append(leaf_vals[i])
        leaf_vals[i] = x
    saved = [(r._value, r._trace) for r in refs]
    for r, v in zip(refs, ref_vals):
      r._value, r._trace = v, trace
    try:
      d_args, d_kwargs = optree.tree_unflatten(in_tree, leaf_vals)
      full = list(d_args)
      for i in sorted(static_argnums):
        if i < len(args):
          full.insert(i, args[i])
      out = fun(*full, **{k: v for k, v in kwargs.items() if k in static_argnames},
                **d_kwargs)
      out_leaves, out_tree = flatten(out)
      check_no_ref_out(fun, out_leaves, leaves, names)
      check_out_leaves(out_leaves, out_tree, name, "jit")
      finals = [r._value for r in refs]
      # NB: only the refs written come out (a ref only read needs no write-back, which
      # could not happen from a nested trace, e.g. a jit called in a scan body).
      written[:] = [i for i, (v, f) in enumerate(zip(ref_vals, finals)) if f is not v]
    finally:
      for r, (v, t) in zip(refs, saved):
        r._value, r._trace = v, t
    out_tree_box.append(out_tree)
    return [*out_leaves, *[finals[i] for i in written]]

  debug = DebugInfo("jit", name, (*[f"<ref {i}>" for i in range(len(implicit))], *names),
                    (*[-1] * len(implicit), *origins))
  with jit_frame():
    jaxpr, consts = pe.trace_to_jaxpr(flat_fun, in_avals, debug)
  return pe.convert_constvars_jaxpr(jaxpr), list(consts), out_tree_box[0], list(written)


def write_back(refs: Sequence[Ref], values: Sequence[Any]) -> None:
  """Writes the final values of a jitted call's refs back into them."""
  for r, v in zip(refs, values):
    if r._trace is None and not isinstance(v, core.Tracer):
      r._value = v
    else:
      r[...] = v


# ---------------------------------------------------------------------------
# discharge around a nested traced function (a loop body or a cond branch)


def discharged(fun: Callable, refs: Sequence[Ref]) -> Callable:
  """`fun` with `refs` passed in and out: `discharged(fun, refs)(values, *args)` runs
  `fun(*args)` with each ref holding its value from `values` (tracers of the current,
  nested trace: a loop's carry, strongly typed: `carried_values`) and returns `(fun's
  result, final values)`, strongly typed as well, a final value being the one passed in
  where the ref was not written. The refs are restored after.

  This is how a loop carries the refs its body writes (and cond passes through those its
  branches write): trace the body inside `jit_frame()`; a `RefMet` whose frame is None
  names a ref from outside to add to `refs` (read its value where the loop is called), then
  trace again; after the loop write the final values back (`write_back`).
  """
  def wrapped(values, *args):
    trace = core.current_trace()
    values = list(values)
    saved = [(r._value, r._trace) for r in refs]
    for r, v in zip(refs, values):
      r._value, r._trace = v, trace
    try:
      out = fun(*args)
      finals = [f if core.get_aval(f).weak_type == core.get_aval(v).weak_type
                else lax_elementwise.convert_element_type(f, f.dtype)
                for f, v in zip((r._value for r in refs), values)]
    finally:
      for r, (v, t) in zip(refs, saved):
        r._value, r._trace = v, t
    return out, finals
  return wrapped


def carried_values(refs: Sequence[Ref]) -> list:
  """The refs' current values, strongly typed (a loop's carry keeps its avals; a write may
  make a weakly typed ref's value strong)."""
  out = []
  for r in refs:
    v = r[...]
    out.append(lax_elementwise.convert_element_type(v, v.dtype)
               if core.get_aval(v).weak_type else v)
  return out
