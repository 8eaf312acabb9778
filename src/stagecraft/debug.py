"""`stagecraft.debug` (JAX's `jax.debug`): print and call back from inside transformed code.

`print` and `callback` work eagerly and under jit, vmap (one call per example, in order),
grad/jvp (primal values only), cond/while/scan bodies and maps over devices; they are never
removed by dead-code elimination. `ordered=True` keeps them in program order.
"""
from __future__ import annotations

import builtins
import logging
import string
import sys
import threading
from typing import Any, Callable, Sequence

import numpy as np
import optree

from stagecraft import callback as host_callback, core, debugger, dtypes, lax, monitoring, tree_util
from stagecraft.lax import callback as cb
from stagecraft.lax.callback import DebugEffect, OrderedDebugEffect
from stagecraft.runtime.array import Array

__all__ = ["print", "callback", "breakpoint", "log", "visualize_array_sharding",
           "visualize_sharding", "inspect_array_sharding", "DebugEffect",
           "OrderedDebugEffect"]


def _is_array_leaf(x) -> bool:
  return (isinstance(x, (core.Tracer, Array, np.ndarray, np.generic))
          or type(x) in dtypes.python_scalar_kind)


def _split_static(args, kwargs):
  # NB: None is a node with no leaves, as in JAX's flattening (and its printed in_tree)
  leaves, in_tree = optree.tree_flatten((args, kwargs), none_is_leaf=False,
                                       namespace=tree_util.NAMESPACE)
  dyn, static = [], []
  for i, x in enumerate(leaves):
    if _is_array_leaf(x):
      dyn.append(x)
    else:
      static.append((i, x))
  return dyn, tuple(static), in_tree


class _FormatChecker(string.Formatter):
  """`str.format`'s field lookup without formatting anything: a field naming a missing
  argument raises as `str.format` does (KeyError / IndexError), and an argument no field
  uses raises ValueError (in JAX's words: most often an f-string passed by mistake)."""

  def format_field(self, value, format_spec):
    return ""

  def check_unused_args(self, used_args, args, kwargs):
    unused_args = [a for i, a in enumerate(args) if i not in used_args]
    if unused_args:
      raise ValueError(f"Unused positional arguments to `jax.debug.print`: {unused_args}")
    unused_kwargs = [k for k in kwargs if k not in used_args]
    if unused_kwargs:
      raise ValueError(
          f"Unused keyword arguments to `jax.debug.print`: {unused_kwargs}. You may be "
          f"passing an f-string (i.e, `f\"{{x}}\"`) into `jax.debug.print` and instead should "
          f"pass in a regular string.")


def _check_format(fmt: str, args, kwargs) -> None:
  # Fields that name missing arguments, and arguments no field uses, fail at trace time, as
  # in JAX.
  _FormatChecker().format(fmt, *args, **kwargs)


def _unexpected(name: str, args, kwargs) -> TypeError:
  return TypeError(f"{name} received unexpected arguments in the two-call form: "
                   f"args={args!r} kwargs={kwargs!r}")


def print(fmt: str | None = None, *args, ordered: bool = False, partitioned: bool = False,
          skip_format_check: bool = False, **kwargs) -> None:
  """Prints `fmt.format(*args, **kwargs)` when the program runs, with array arguments'
  runtime values (printed as NumPy prints them, under the print options active now).

  Args:
    fmt: a `str.format` string. Array arguments (any shape and dtype, tracers included)
      are passed at run time; other arguments (strings, objects) are fixed now.
    ordered: keep this print in program order with other ordered effects.
    partitioned: in a jit over a mesh, each device prints its own shards (once per
      device, in no fixed order) instead of one print of the gathered values.
    skip_format_check: do not check now that the fields of `fmt` and the arguments match.

  Called with options alone (`print(ordered=True)`), returns the function that takes the
  format string and its arguments (JAX's two-call form; every keyword of that second call
  is a format argument).

  Raises:
    KeyError / IndexError: at trace time, for a field naming a missing argument (as
      `str.format`).
    ValueError: at trace time, for an argument no field uses (an f-string passed by
      mistake, most often); under vmap with `ordered=True` (as JAX).
    TypeError: format arguments given to the first call of the two-call form.

  Example: `debug.print("x={x} sum={}", jnp.sum(x), x=x)` prints `x=[0. 1. 2.] sum=3.0`.
  """
  if fmt is None:
    if args or kwargs:
      raise _unexpected("debug_print", args, kwargs)

    def second_call(fmt, *args, **kwargs):   # NB: every keyword here is a format argument
      _print(fmt, args, kwargs, ordered, partitioned, skip_format_check, None)
    return second_call
  _print(fmt, args, kwargs, ordered, partitioned, skip_format_check, None)


def _print(fmt, args, kwargs, ordered, partitioned, skip_format_check, logging_record):
  if not isinstance(fmt, str):
    raise TypeError(f"debug.print expects a format string first, got {type(fmt).__name__}: "
                    f"{fmt!r}. Write debug.print('{{}}', x).")
  if not skip_format_check:
    _check_format(fmt, args, kwargs)
  dyn, static, in_tree = _split_static(args, kwargs)
  opts = tuple(np.get_printoptions().items())
  has_placeholders = any(field is not None for _, field, _, _ in string.Formatter().parse(fmt))
  cb.debug_print_p.bind(*dyn, fmt=fmt, has_placeholders=has_placeholders,
                        in_tree=tree_util.PyTreeDef(in_tree),   # (printed as JAX's)
                        logging_record=logging_record, np_printoptions=opts,
                        ordered=bool(ordered), partitioned=bool(partitioned),
                        static_args=static)


def log(fmt: str | None = None, *args, ordered: bool = False, partitioned: bool = False,
        skip_format_check: bool = False, **kwargs) -> None:
  """`debug.print`'s text logged instead of printed (JAX's `jax.debug.log`): at INFO, to the
  logger `stagecraft.debugging` (`jax._src.debugging` under the runner), in a record that
  names the user's file and line of this call (what `%(filename)s:%(lineno)d` formats).
  Arguments, the two-call form (`log(ordered=True)(fmt, ...)`) and errors as `print`'s."""
  if fmt is None:
    if args or kwargs:
      raise _unexpected("debug_print", args, kwargs)

    def second_call(fmt, *args, **kwargs):
      _log(fmt, args, kwargs, ordered, partitioned, skip_format_check)
    return second_call
  _log(fmt, args, kwargs, ordered, partitioned, skip_format_check)


def _log(fmt, args, kwargs, ordered, partitioned, skip_format_check):
  frame = core.user_frame(sys._getframe(2))
  file, line = ("(unknown file)", 0) if frame is None else frame.position()[:2]
  logger = monitoring.logger("debugging")
  record = logger.makeRecord(logger.name, logging.INFO, file, line, "", (), None)
  _print(fmt, args, kwargs, ordered, partitioned, skip_format_check, record)




def callback(callback: Callable[..., None] | None = None, *args, ordered: bool = False,
             partitioned: bool = False, **kwargs) -> None:
  """Calls `callback(*args, **kwargs)` on the host when the program runs, with Arrays in
  place of the array arguments; its return value is ignored.

  Args:
    callback: a Python function (it must not return a value anyone needs).
    args, kwargs: pytrees of arrays (and Python scalars).
    ordered: keep this call in program order with other ordered effects.

  Leaves that are not arrays (strings, objects) are passed to `callback` as given, not
  staged. Called with options alone (`callback(ordered=True)`), returns the function that
  takes `callback` and its arguments (JAX's two-call form).

  Raises:
    TypeError: if `callback` is not callable; for arguments given to the first call of the
      two-call form.
  """
  if callback is None:
    if args or kwargs:
      raise _unexpected("debug_callback", args, kwargs)

    def second_call(callback, *args, **kwargs):   # NB: every keyword goes to `callback`
      _callback(callback, args, kwargs, ordered, partitioned)
    return second_call
  _callback(callback, args, kwargs, ordered, partitioned)


def _callback(callback, args, kwargs, ordered, partitioned):
  if not callable(callback):
    raise TypeError(f"first argument to jax.debug.callback must be callable, but got an "
                    f"object of type {type(callback)}")
  dyn, static, in_tree = _split_static(args, kwargs)   # NB: non-array leaves stay on the host
  flat = cb.FlatCallback(callback, in_tree, static)
  cb.debug_callback_p.bind(*dyn, callback=flat, ordered=bool(ordered),
                           partitioned=bool(partitioned))


def breakpoint(*, backend: str | None = None, filter_frames: bool = True,
               num_frames: int | None = None, ordered: bool = False, token=None,
               **kwargs) -> Any:
  """Opens jdb, JAX's command-line debugger, when the program reaches this point, with the
  Python frames of the call site and the runtime values of their traced arrays (`p x`,
  `u`/`d`, `l`, `w`, `c` to continue, `q` to stop; see `stagecraft.debugger`).

  Args:
    backend: accepted for JAX compatibility (stagecraft has jdb's command line only).
    filter_frames: leave stagecraft's own frames out of the stack.
    num_frames: how many frames (innermost first) to keep.
    ordered: keep this breakpoint in program order with other ordered effects.
    token: instead of `ordered`, a pytree of arrays: the breakpoint runs once it is
      computed, and it is returned (pass it on so that the breakpoint is not pruned).
    **kwargs: passed to the debugger (`stdin=`, `stdout=`: file objects for its commands
      and output).

  Returns:
    `token` (None when not given).

  Raises:
    ValueError: both `ordered` and `token` given.
  """
  del backend
  if token is not None and ordered:
    raise ValueError("`ordered` and `token` are mutually exclusive arguments.")
  frames, traced, rebuild = debugger.capture_frames(1, filter_frames, num_frames)

  def stop(*values):
    thread = threading.current_thread()
    thread_id = None if thread is threading.main_thread() else threading.get_ident()
    debugger.run_debugger(rebuild(values), thread_id, **kwargs)

  if token is None:
    callback(stop, *traced, ordered=ordered)
    return None
  def stop_then_pass(tok, *values):
    stop(*values)
    return tok
  token, traced = lax.stop_gradient((token, traced))
  return host_callback.pure_callback(stop_then_pass, token, token, *traced)


def inspect_array_sharding(value: Any, *, callback: Callable) -> None:
  """Calls `callback(sharding)` with the sharding of each leaf of the pytree `value` (at
  once, for concrete Arrays), as JAX's: a pytree node such as a flax `nnx.Param` holding an
  Array gives that Array's sharding.

  Raises:
    AttributeError: a leaf that is not an Array (a NumPy array, a Python scalar), as JAX's.
    NotImplementedError: a traced leaf inside pmap (as JAX's).
  """
  for leaf in tree_util.tree_leaves(value):
    # NB: tracers are Arrays too (isinstance): checked first
    if isinstance(leaf, core.Tracer):
      cb.inspect_sharding_p.bind(leaf, callback=callback)
    elif isinstance(leaf, Array):
      callback(leaf.sharding)
    else:
      # NB: JAX's eager rule reads `.sharding` of the leaf as JAX converted it (its message
      # names JAX's internal wrapper type, `TypedNdArray`/`TypedFloat`; ours the leaf's).
      raise AttributeError(f"{type(leaf).__name__!r} object has no attribute 'sharding'")


def visualize_array_sharding(arr, **kwargs) -> None:
  """Draws how `arr` (2-D at most; an Array or a pytree node holding one, such as a flax
  `nnx.Param`) is laid out over devices (a table, with `rich`); `kwargs` as in
  `visualize_sharding`. Errors as `inspect_array_sharding`'s."""
  inspect_array_sharding(
      arr, callback=lambda sharding: visualize_sharding(arr.shape, sharding, **kwargs))


def visualize_sharding(shape: Sequence[int], sharding, *, use_color: bool = True,
                       scale: float = 1.0, min_width: int = 9, max_width: int = 80,
                       color_map=None) -> None:
  """Draws the device layout of an array of `shape` under `sharding` as a table of the
  blocks each device holds (JAX's drawing, with `rich`).

  Raises:
    ValueError: for more than 2 dimensions.
  """
  # NB: rich is imported on first use only.
  from stagecraft.debug_sharding import draw
  draw(tuple(shape), sharding, use_color=use_color, scale=scale, min_width=min_width,
       max_width=max_width, color_map=color_map)
