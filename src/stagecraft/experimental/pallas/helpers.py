"""The kernel-side helpers of `jax.experimental.pallas` for interpret mode: `when`, `loop`,
`run_scoped`, `run_state`, `debug_print`, `multiple_of`, `estimate_cost`, the small integer
utilities, and stand-ins for the TPU/GPU-only operations (they raise NotImplementedError).

Layer 8, beside `stagecraft.experimental.pallas.core`.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from stagecraft import core, debug, tree_util
from stagecraft.core import ShapedArray
from stagecraft.experimental.pallas.core import (CostEstimate, KernelRef, MemoryRef, cdiv,
                                                 uninitialized_value)
from stagecraft.interpreters import partial_eval as pe
from stagecraft.lax import elementwise as lax_elementwise, shape as lax_shape
from stagecraft.lax.control_flow import conditionals, loops
from stagecraft.numpy import array_constructors, lax_numpy

__all__ = ["align_to", "broadcast_to", "debug_print", "delay", "empty", "empty_like",
           "empty_ref_like", "estimate_cost", "loop", "multiple_of", "next_power_of_2",
           "not_implemented", "reciprocal", "run_scoped", "run_state", "strides_from_shape",
           "when", "with_scoped"]


def not_implemented(qualname: str, what: str) -> Callable[..., Any]:
  """A stand-in for a JAX function stagecraft cannot run: calling it raises
  NotImplementedError naming `qualname` and `what` it needs."""
  def stub(*args, **kwargs):
    raise NotImplementedError(
        f"{qualname} is not implemented by stagecraft: it needs {what}; stagecraft runs "
        f"Pallas kernels only in interpret mode (pallas_call(..., interpret=True)).")
  stub.__name__ = qualname.rpartition(".")[2]
  stub.__qualname__ = stub.__name__
  stub.__doc__ = f"Not implemented by stagecraft ({what}): raises NotImplementedError."
  return stub


def when(condition: Any, /) -> Callable[[Callable[[], None]], None]:
  """A decorator calling the function when `condition` holds: a Python bool calls it (or
  not) now, an array makes a `lax.cond` with the function as its true branch (its ref
  writes are carried through the cond). Returns None."""
  def wrapped(f):
    if isinstance(condition, bool):
      if condition:
        f()
    else:
      conditionals.cond(condition, f, lambda: None)
  return wrapped


def loop(lower: Any, upper: Any, *, init_carry: Any = None, step: Any = 1,
         unroll: int | bool | None = None) -> Callable:
  """A decorator running `body(i)` (or `carry = body(i, carry)` with `init_carry`) for
  `i = lower, lower + step, ...` below `upper`, as a `fori_loop`; returns the final carry
  (None without one)."""
  concrete = all(isinstance(v, (int, np.integer)) for v in (lower, upper, step))
  if not concrete:
    t = lax_numpy.result_type(lower, upper, step)
    lower, upper, step = (lax_elementwise.convert_element_type(v, t)
                          for v in (lower, upper, step))
    zero = lax_elementwise.convert_element_type(0, t)
  else:
    lower, upper, step, zero = int(lower), int(upper), int(step), 0

  def decorator(body):
    if init_carry is None:
      fn = lambda i, _: body(lower + i * step)   # noqa: E731
    else:
      fn = lambda i, c: body(lower + i * step, c)   # noqa: E731
    return loops.fori_loop(zero, cdiv(upper - lower, step), fn, init_carry, unroll=unroll)
  return decorator


def _scratch_ref(t: Any) -> KernelRef:
  if isinstance(t, (MemoryRef, ShapedArray)) or hasattr(t, "shape"):
    shape, dtype = tuple(t.shape), np.dtype(t.dtype)
  else:
    raise TypeError(f"run_scoped: expected a MemoryRef (e.g. pltpu.VMEM((8,), "
                    f"jnp.float32)), got {t!r}")
  trace = core.current_trace()
  local = None if type(trace) is core.EvalTrace else trace
  return KernelRef(uninitialized_value(shape, dtype), local)


def run_scoped(f: Callable[..., Any], *types: Any, collective_axes: Any = (),
               **kw_types: Any) -> Any:
  """Calls `f` with new refs of the given types (pytrees of `MemoryRef`s: positional and
  keyword), uninitialized (NaN / integer minimum), and returns its result.

  Raises:
    NotImplementedError: `collective_axes` (multi-core allocation).
  """
  if collective_axes:
    raise NotImplementedError("run_scoped with collective_axes is not supported by "
                              "stagecraft's interpret mode")
  leaf = lambda t: isinstance(t, MemoryRef)   # noqa: E731
  refs = tree_util.tree_map(_scratch_ref, types, is_leaf=leaf)
  kw_refs = tree_util.tree_map(_scratch_ref, kw_types, is_leaf=leaf)
  return f(*refs, **kw_refs)


def with_scoped(*types: Any, collective_axes: Any = (), **kw_types: Any) -> Callable:
  """A decorator form of `run_scoped`: `@with_scoped(types) def f(*refs)` runs `f` now."""
  def decorator(f):
    return run_scoped(f, *types, collective_axes=collective_axes, **kw_types)
  return decorator


def run_state(f: Callable[[Any], None]) -> Callable[[Any], Any]:
  """`run_state(f)(init)`: runs `f` on refs holding `init` (a pytree of arrays) and returns
  their final values (JAX's `run_state`)."""
  def run(init):
    leaves, tree = tree_util.tree_flatten(init)
    trace = core.current_trace()
    local = None if type(trace) is core.EvalTrace else trace
    refs = [KernelRef(array_constructors.asarray(x), local) for x in leaves]
    f(tree_util.tree_unflatten(tree, refs))
    return tree_util.tree_unflatten(tree, [r._value for r in refs])
  return run


def debug_print(fmt: str, *args: Any) -> None:
  """Prints `fmt.format(*args)` with the values at run time, each time the kernel runs
  (`jax.debug.print`)."""
  debug.print(fmt, *args)


def multiple_of(x: Any, values: Sequence[int] | int) -> Any:
  """A compiler hint that `x` is a multiple of `values`; returns `x` unchanged."""
  return x


def reciprocal(x: Any, *, approx: bool = False, full_range: bool = True) -> Any:
  """`1 / x` (`approx` selects a hardware approximation on TPU; here exact)."""
  return lax_elementwise.div(lax_elementwise.convert_element_type(1, x.dtype), x)


def delay(nanos: Any) -> None:
  """Delays the kernel (a TPU timing aid): nothing in interpret mode."""


def empty(shape: Sequence[int], dtype: Any, *, out_sharding: Any = None) -> Any:
  """An array of `shape` and `dtype` whose contents are unspecified (zeros)."""
  return lax_shape.full(tuple(shape), 0, dtype)


def empty_like(x: Any) -> Any:
  """A pytree like `x` (leaves with shape and dtype) of `empty` arrays."""
  return tree_util.tree_map(lambda leaf: empty(leaf.shape, leaf.dtype), x)


def empty_ref_like(x: Any) -> Any:
  """A new ref of `x`'s shape and dtype (a MemoryRef or ShapeDtypeStruct).

  Raises:
    ValueError: another kind of value (JAX's message).
  """
  if not isinstance(x, MemoryRef) and not isinstance(x, core.ShapeDtypeStruct):
    raise ValueError(f"empty_ref_like does not support {type(x)}")
  trace = core.current_trace()
  local = None if type(trace) is core.EvalTrace else trace
  return KernelRef(empty(x.shape, x.dtype), local)


def broadcast_to(a: Any, shape: Sequence[int]) -> Any:
  """`a` broadcast to `shape` (numpy rules)."""
  a_shape = tuple(getattr(a, "shape", ()))
  if a_shape == tuple(shape):
    return a
  dims = tuple(range(len(shape) - len(a_shape), len(shape)))
  return lax_shape.broadcast_in_dim(a, tuple(shape), dims)


def align_to(x: Any, alignment: Any) -> Any:
  """`x` rounded up to a multiple of `alignment`."""
  return cdiv(x, alignment) * alignment


def next_power_of_2(x: int) -> int:
  """The smallest power of 2 >= `x` (1 for 0).

  Raises:
    ValueError: a negative `x` (JAX's message).
  """
  if x < 0:
    raise ValueError("`next_power_of_2` requires a non-negative integer.")
  return 1 if x == 0 else 2 ** (x - 1).bit_length()


def strides_from_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
  """The row-major element strides of an array of `shape`."""
  size = int(np.prod(shape))
  strides = []
  for s in shape:
    size = size // s
    strides.append(size)
  return tuple(strides)


# ---------------------------------------------------------------------------
# estimate_cost: JAX's per-primitive counts


_BINARY = {"add", "mul", "sub", "div", "min", "max", "or", "and", "xor"}
_UNARY = {"neg", "floor", "ceil", "round", "not"}
_TRANSCENDENTAL = {"cos", "sin", "tan", "sinh", "cosh", "tanh", "acos", "asin", "atan",
                   "exp", "log", "logistic", "sqrt"}


def _jaxpr_cost(jaxpr: Any) -> tuple[int, int]:
  flops = trans = 0
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    if name in _BINARY:
      flops += math.prod(eqn.outvars[0].aval.shape)
    elif name in _UNARY:
      flops += math.prod(eqn.invars[0].aval.shape)
    elif name in _TRANSCENDENTAL:
      trans += math.prod(eqn.invars[0].aval.shape)
    elif name == "integer_pow":
      y = eqn.params["y"]
      per = 0 if y in (0, 1) else math.floor(math.log(y, 2)) + y.bit_count()
      flops += math.prod(eqn.invars[0].aval.shape) * per
    elif name == "dot_general":
      (lc, rc), (_, rb) = eqn.params["dimension_numbers"]
      xs, ys = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
      f = 2 * math.prod(xs[d] for d in lc)
      f *= math.prod(d for i, d in enumerate(xs) if i not in lc)
      f *= math.prod(d for i, d in enumerate(ys) if i not in rc and i not in rb)
      flops += f
    elif name in ("jit", "pjit", "custom_vjp_call"):
      inner = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
      f, t = _jaxpr_cost(inner.jaxpr)
      flops, trans = flops + f, trans + t
  return flops, trans


def estimate_cost(fun: Callable, *args: Any, **kwargs: Any) -> CostEstimate:
  """JAX's cost estimate of `fun(*args, **kwargs)` (arguments: arrays or
  ShapeDtypeStructs): flops of elementwise arithmetic and `dot_general` (2 per
  multiply-add), transcendentals of exp/log/trigonometric/sqrt/logistic, and
  bytes_accessed = the bytes of the arguments and results (JAX's rules).

  Returns:
    a `CostEstimate`.
  """
  flat, tree = tree_util.tree_flatten(args)
  avals = [ShapedArray(tuple(a.shape), np.dtype(a.dtype)) for a in flat]

  def f(*xs):
    return tree_util.tree_leaves(fun(*tree_util.tree_unflatten(tree, list(xs)), **kwargs))
  jaxpr, _ = pe.trace_to_jaxpr(f, avals)
  flops, trans = _jaxpr_cost(jaxpr)
  nbytes = sum(math.prod(a.shape) * a.dtype.itemsize for a in avals)
  nbytes += sum(math.prod(v.aval.shape) * np.dtype(v.aval.dtype).itemsize
                for v in jaxpr.outvars)
  return CostEstimate(flops=flops, transcendentals=trans, bytes_accessed=nbytes)

