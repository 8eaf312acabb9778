"""Mutable array references (JAX's `jax.Ref`, `jax.ref.AbstractRef`) and their discharge
around nested traced functions: loop bodies and cond branches.

A `Ref` made outside any transformation is eager: it holds a concrete Array. A ref made
inside a traced function is local to that trace and is discharged as it is traced (reads
give its traced value, writes replace it). A function traced inside a `jit_frame` (a jitted
function: `stagecraft.state`; a `scan`, `while_loop` or `cond`/`switch` body: `with_refs`)
that reads or writes a ref from outside it raises `RefMet`; the owner of the frame then
traces again with that ref's value passed in (a loop carries it, a cond passes it through
its branches) and its final value passed out, written back into the ref after the call.
This is JAX's state discharge (`jax._src.state.discharge`), done at trace time.

Layer 5 (control flow): `stagecraft.state` (layer 6) builds the jit boundary on it and
re-exports `Ref`, `AbstractRef`, `RefMet` and `freeze`.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import core, dtypes, tree_util
from stagecraft.core import ShapedArray
from stagecraft.interpreters import ad, batching, partial_eval as pe
from stagecraft.lax import elementwise as lax_elementwise
from stagecraft.runtime.array import Array

__all__ = ["AbstractRef", "Ref", "RefMet", "freeze", "jit_frame", "discharged",
           "carried_values", "write_back", "with_refs"]


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
  """Marks the trace of a jitted function (or a loop body, a cond branch) made inside this
  context: a ref from outside it met while tracing raises `RefMet`, whose `frame` is None
  once it leaves this context (the ref is one this jit or loop takes as an input: its
  caller traces again)."""
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

  The bodies of `scan`, `fori_loop`, `while_loop` and `map` and the branches of `cond`
  and `switch` may read and write refs from outside them (`with_refs`): the loop carries
  their values (a cond passes them through its branches) and writes the final values back
  after it, as JAX's state discharge does.

  Refs passed to `vmap`, `jvp`, `vjp`/`grad` and `custom_vjp` functions are discharged at
  that boundary too: the function sees a new ref holding the (batched, differentiated)
  value, whose final value is written back (`api.vmap`, `api.jvp`, `api._vjp_of_refs`,
  `custom_derivatives._call_with_ref_args`). Writes from inside a transformation into a
  ref it did not take raise JAX's errors (a vmapped write into an unbatched ref, a
  differentiated value written into a non-differentiated ref).

  A jitted call writing an eager ref donates its buffer when nothing else holds it
  (`_owned`: an eager `ref[...]` read lets the value escape), so the new value reuses it in
  place (`unsafe_buffer_pointer` stays the same, as JAX's).

  Not supported (each raises `NotImplementedError` naming the fix): writing into a ref
  from another nested transformation (a `vmap`, `custom_jvp` function ...) a value traced
  there; reading an eager ref in a staged function that is not jitted (`make_jaxpr`),
  where JAX stages the ref as a `Ref`-typed input: stagecraft's jaxprs have no ref types.

  Attributes:
    shape, dtype, ndim, size: those of the referenced array.
  """
  __slots__ = ("_value", "_frozen", "_trace", "_owned", "_nowrite", "_noread", "_weak",
               "_swapped", "__weakref__")

  def __init__(self, value: Any, trace: Any = None, owned: bool = False):
    self._value = value
    self._weak = core.get_aval(value).weak_type   # its type's (JAX's Ref aval is fixed)
    self._frozen = False
    self._trace = trace    # the trace a local ref belongs to; None for an eager ref
    # An eager ref's buffer is held by nothing else (True): a jitted call writing the ref
    # may donate it, so the new value reuses it in place (JAX writes refs in place).
    self._owned = owned
    # The error (type, message) that a write into (a read of) this ref raises: vmap's
    # unbatched refs, jvp's refs without a ref tangent.
    self._nowrite = self._noread = None
    # Set by a write that is not an `addupdate` (JAX's `swap`): a loop or cond whose bodies
    # only add into a weakly typed ref leaves it weak (`with_refs`).
    self._swapped = False

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
    if self._noread is not None:
      raise self._noread[0](self._noread[1])
    if self._trace is None and _staging(core.current_trace()):
      raise NotImplementedError(
          "Reading a Ref made outside a staged function (make_jaxpr) inside it is not "
          "supported: stagecraft would bake its current value into the staged program. "
          "Call the function under `jit` (which "
          "makes the ref an input and an output of the compiled program), pass `ref[...]` "
          "to it as an argument, or make the ref inside the function with `new_ref`.")
    if idx is Ellipsis:
      self._owned = False   # the value escapes: it may no longer be donated
      return self._value
    return self._value[idx]

  def __setitem__(self, idx: Any, value: Any) -> None:
    self._set(idx, value)

  def _set(self, idx: Any, value: Any, keep_weak: bool = False) -> None:
    """`self[idx] = value`; `keep_weak`: an eager ref keeps a weakly typed value weak (as
    JAX's `addupdate`; a write (JAX's `swap`) stores it strongly typed)."""
    self._check()
    tracers = [v for v in tree_util.tree_leaves(value) if isinstance(v, core.Tracer)]
    if self._nowrite is not None:
      if len(self._nowrite) > 2:   # JAX's jvp writes the primal into the ref, then fails
        primal = tree_util.tree_map(lambda t: t.primal if type(t) is ad.JVPTracer else t,
                                    value)
        if not any(isinstance(x, core.Tracer) for x in tree_util.tree_leaves(primal)):
          with core.set_current_trace(core.eval_trace):
            self._nowrite[2]._set(idx, primal)
      exc, msg = self._nowrite[:2]
      if keep_weak:   # NB: an addupdate (`ref[...] += v`): JAX names the operation
        msg = msg.replace("a set/swap operation", "an addupdate operation")
      raise exc(msg)
    if self._trace is None or core.current_trace() is not self._trace:
      _check_transformed_write(self, tracers, idx, value)
    if (self._trace is not None and core.current_trace() is not self._trace
        and all(t._trace._level <= self._trace._level for t in tracers)):
      # a value of the ref's trace written from a nested (differentiating) trace: written
      # in the ref's trace
      with core.set_current_trace(self._trace):
        return self._set(idx, value, keep_weak)
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
          "Writing into a Ref from a nested transformation (a vmap, grad, custom_jvp "
          "function, ...) inside the function that made it (or the jitted function that "
          "takes it) is not supported by stagecraft: return the value from the nested "
          "function and write it after.")
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
    # NB: as JAX's `swap`, a weakly typed value is stored strongly typed (unless
    # `keep_weak`: JAX's `addupdate`; or the value is differentiated, as by JAX's JVP of
    # `swap`).
    keep_weak = keep_weak or type(new) is ad.JVPTracer or isinstance(
        getattr(new, "_trace", None), ad.PartialEvalTrace)
    if not keep_weak and core.get_aval(new).weak_type:
      new = lax_elementwise.convert_element_type(new, new.dtype)
    if not keep_weak:
      self._swapped = True
    if self._trace is None:   # (a ref being traced keeps its eager state for after)
      self._owned = idx is not Ellipsis
    if idx is not Ellipsis:
      new = self._value.at[idx].set(new)
      if not keep_weak and core.get_aval(new).weak_type:
        new = lax_elementwise.convert_element_type(new, new.dtype)
    self._value = new

  def unsafe_buffer_pointer(self) -> int:
    """The device address of the buffer holding the ref's value (JAX's
    `Ref.unsafe_buffer_pointer`). A jitted function writing the ref reuses its buffer
    (the buffer is donated and the new value aliases it), so the address stays the same
    across such writes unless the value escaped (`ref[...]` read eagerly, or a whole array
    written into it).

    Raises:
      ValueError: for a frozen ref; RuntimeError: for a ref local to a trace (its value is
        not an Array).
    """
    self._check()
    if not isinstance(self._value, Array):
      raise RuntimeError("unsafe_buffer_pointer() needs an eager Ref (its value is traced)")
    return self._value.unsafe_buffer_pointer()

  def __len__(self):
    return len(self._value)

  def __repr__(self):
    if isinstance(self._value, core.Tracer):
      return _aval(self).str_short()
    v = self._value
    cached = getattr(v, "_npy", True) is not None
    text = "Ref(" + repr(v).partition("(")[2]
    if not cached:
      # NB: drop the host view printing made: a buffer viewed from the host cannot be
      # donated, and the ref's next jitted write donates it (`_owned`).
      v._npy = None
    return text


def _check_transformed_write(ref: Ref, tracers: Sequence[Any], idx: Any, value: Any) -> None:
  """Raises JAX's errors for a write into `ref` (of `value` at `idx`) from inside a
  transformation that did not take it as an argument: a `vmap` (any write, as JAX's), or a
  differentiation writing a value it differentiates (as JAX's, an eager ref then gets the
  value's primal before the error)."""
  level = -1 if ref._trace is None else ref._trace._level
  trace = core.current_trace()
  while trace is not None and trace._level > level:
    if isinstance(trace, batching.BatchTrace):
      raise Exception(   # noqa: TRY002 (JAX raises a bare Exception)
          f"performing a set/swap operation with vmapped value on an unbatched array "
          f"reference of type {ref.aval}. Move the array reference to be an argument to the "
          f"vmapped function?")
    if (isinstance(trace, (ad.JVPTrace, ad.PartialEvalTrace))
        and any(t._trace is trace for t in tracers)):
      if ref._trace is None and all(type(t) is ad.JVPTracer for t in tracers):
        primal = tree_util.tree_map(lambda t: t.primal if type(t) is ad.JVPTracer else t,
                                    value)
        if not any(isinstance(x, core.Tracer) for x in tree_util.tree_leaves(primal)):
          with core.set_current_trace(core.eval_trace):
            ref._set(idx, primal)
      raise Exception(   # noqa: TRY002
          f"performing a set/swap operation with a differentiated value on a "
          f"non-differentiated array reference of type {ref.aval}. Move the array reference "
          f"to be an argument of the differentiated function?")
    trace = getattr(trace, "parent", None)


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


def write_back(refs: Sequence[Ref], values: Sequence[Any], owned: bool = False) -> None:
  """Writes the final values of a jitted call's (or a loop's) refs back into them; `owned`:
  the values are new buffers held by nothing else (see `Ref._owned`)."""
  for r, v in zip(refs, values):
    if r._trace is None and not isinstance(v, core.Tracer):
      r._value, r._owned = v, owned
    else:
      r[...] = v


# ---------------------------------------------------------------------------
# discharge around a nested traced function (a loop body or a cond branch)


def discharged(fun: Callable, refs: Sequence[Ref], written: list[bool] | None = None
               ) -> Callable:
  """`fun` with `refs` passed in and out: `discharged(fun, refs)(values, *args)` runs
  `fun(*args)` with each ref holding its value from `values` (tracers of the current,
  nested trace: a loop's carry, strongly typed: `carried_values`) and returns `(fun's
  result, final values)`, strongly typed as well, a final value being the one passed in
  where the ref was not written. The refs are restored after. `written[i]` (if given) is
  set where `fun` wrote `refs[i]`.

  This is how a loop carries the refs its body writes (and cond passes through those its
  branches write): see `with_refs`.
  """
  def wrapped(values, *args):
    trace = core.current_trace()
    values = list(values)
    saved = [(r._value, r._trace) for r in refs]
    for r, v in zip(refs, values):
      r._value, r._trace = v, trace
    try:
      out = fun(*args)
      finals = [r._value for r in refs]
      if written is not None:
        for i, (f, v) in enumerate(zip(finals, values)):
          written[i] = written[i] or f is not v
      finals = [f if core.get_aval(f).weak_type == core.get_aval(v).weak_type
                else lax_elementwise.convert_element_type(f, f.dtype)
                for f, v in zip(finals, values)]
    finally:
      for r, (v, t) in zip(refs, saved):
        r._value, r._trace = v, t
    return out, finals
  return wrapped


def carried_values(refs: Sequence[Ref], escape: bool = True) -> list:
  """The refs' current values, strongly typed (a loop's carry keeps its avals; a write may
  make a weakly typed ref's value strong). `escape=False`: an eager ref's value is read
  without marking it escaped (the caller donates it or does not keep it)."""
  out = []
  for r in refs:
    if escape:
      v = r[...]
    else:
      r._check()
      v = r._value
    out.append(lax_elementwise.convert_element_type(v, v.dtype)
               if core.get_aval(v).weak_type else v)
  return out


def with_refs(run: Callable) -> Any:
  """Runs a loop or cond whose bodies may read and write refs from outside them.

  `run(None, None, None)` runs it as it is (no change at all while no body meets a ref
  from outside); `run(refs, values, written) -> (result, final values)` runs it with the
  bodies `discharged` over `refs`, their current `values` (`carried_values`) carried
  through the loop (passed through the branches), `written` marking the refs a body
  writes. The bodies are traced inside a `jit_frame`: a `RefMet` for it names a ref from
  outside, which is added to `refs` before tracing again. After the loop the final values
  of the refs written are written back into them (`write_back`).

  Returns:
    the loop's (cond's) result.

  Raises:
    RefMet: for an enclosing jit (which traces again with the ref as an input).
  """
  refs: list[Ref] = []
  while True:
    swapped = [r._swapped for r in refs]
    try:
      values = carried_values(refs)   # read where the loop is called
      written = [False] * len(refs)
      for r in refs:
        r._swapped = False
      with jit_frame():
        if not refs:
          return run(None, None, None)
        out, finals = run(refs, values, written)
    except RefMet as e:
      for r, w in zip(refs, swapped):
        r._swapped = w
      if e.frame is not None or any(e.ref is r for r in refs):
        raise
      refs.append(e.ref)
      continue
    break
  swapped, was = [r._swapped for r in refs], swapped
  for r, w in zip(refs, was):
    r._swapped = r._swapped or w
  write_back([r for r, w in zip(refs, written) if w],
             [f for f, w in zip(finals, written) if w])
  # NB: as JAX's discharged loops, which carry each ref they use with its type (the weak
  # type of its initial value; a write (`swap`) makes the carry strongly typed, an
  # `addupdate` of a weak value keeps it weak): after the loop a ref made weakly typed and
  # only read, or only added into, holds a weak value.
  for r, w, sw in zip(refs, written, swapped):
    if (not w or not sw) and r._weak and not core.get_aval(r._value).weak_type:
      v = r._value
      r._set(Ellipsis, lax_elementwise.convert_element_type(v, v.dtype, weak_type=True),
             keep_weak=True)
  return out
