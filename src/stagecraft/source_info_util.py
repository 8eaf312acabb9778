"""Name stacks (JAX's `source_info_util` name stack): `named_scope` and `named_call`.

While a `named_scope("outer")` is active, every equation the staging trace records carries
the names of the scopes entered *inside the function being traced* (`NameStackInfo`, in the
equation's `source_info`). Lowering then puts `loc("jit(f)/outer/sin")` on the ops of those
equations, which XLA turns into the `op_name` metadata that HLO dumps and profiles show.

Names are relative to the trace that records them, as in JAX: a function jitted inside a
scope records its own scopes only, and lowering prefixes the names of the call sites
(`jit(f)/outer/jit(g)/inner/cos`), so a cached inner jaxpr is the same wherever it is called.

Cost: nothing while no scope is active. Entering the first scope installs
`core.source_info_hook` (which the staging trace calls for each equation); leaving the last
one restores the hook that was there before (e.g. `saved_residuals`'s, which this wraps).

Equations re-bound by an interpreter after tracing (evaluating a jaxpr under vmap or jvp,
transposition, partial evaluation) keep the source info of the equation they came from,
names included (`core.source_context`). Without a scope every equation still records the
user's frame (`core.UserFrame`, `core.current_source_info`); inside one its `NameStackInfo`
wraps that frame.

Not reproduced: JAX's transformation wrappers in names (`jvp(outer)`, `transpose(...)`,
`vmap(outer)`).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from typing import Any, Callable, NamedTuple, TypeVar

from stagecraft import core
from stagecraft.config import config as _config, make_user_context

__all__ = ["fun_name", "fun_code", "fun_source_info", "NameStackInfo", "named_scope", "named_call", "current_name_stack",
           "name_stack_of", "xla_metadata_of", "xla_metadata_scope", "current_xla_metadata"]

F = TypeVar("F", bound=Callable)


class NameStackInfo(NamedTuple):
  """An equation's `source_info` while name scopes are active: the scope names relative to
  the recording trace (outermost first) and the source info it wraps (the user's frame, a
  `core.UserFrame`; an `ad_checkpoint.SourceInfo` while `saved_residuals` traces; or None)."""
  name_stack: tuple[str, ...]
  source_info: Any = None
  # The `(key, value)` pairs of the `set_xla_metadata` blocks active where the equation was
  # recorded (JAX's `JaxprEqnContext.xla_metadata`): frontend attributes of its ops.
  xla_metadata: tuple = ()

  def summary(self) -> str:
    """The wrapped source info's summary (`file:line:col (function)`), or ''."""
    return "" if self.source_info is None else self.source_info.summary()


def name_stack_of(source_info: Any) -> tuple[str, ...]:
  """The scope names an equation's `source_info` carries (() for none)."""
  if type(source_info) is NameStackInfo:
    return source_info.name_stack
  return ()


def xla_metadata_of(source_info: Any) -> tuple:
  """The `(key, value)` XLA metadata pairs an equation's `source_info` carries (() for
  none)."""
  if type(source_info) is NameStackInfo:
    return source_info.xla_metadata
  return ()


class _State(threading.local):
  def __init__(self):
    # (name, level of the trace current when the scope was entered), outermost first.
    self.entries: list[tuple[str, int]] = []
    # The active `set_xla_metadata` blocks' metadata, merged: sorted `(key, value)` pairs.
    self.xla_metadata: tuple = ()


def current_xla_metadata() -> tuple:
  """The metadata of this thread's active `xla_metadata_scope`s (sorted `(key, value)`
  pairs, inner keys winning), () outside any."""
  return _state.xla_metadata


class xla_metadata_scope:
  """Context manager: equations recorded inside (in this thread) carry `updates`, merged
  over the enclosing blocks' (a None value removes a key), as JAX's `set_xla_metadata`
  context; lowering writes them as the `mhlo.frontend_attributes` of their ops. Empty
  updates do nothing.

  Args:
    updates: a dict of metadata (str keys; str, int, float or bool values)."""
  __slots__ = ("prev", "updates")

  def __init__(self, updates: dict[str, Any]):
    self.updates = updates

  def __enter__(self):
    if not self.updates:
      return
    self.prev = _state.xla_metadata
    merged = {**dict(self.prev), **self.updates}
    _state.xla_metadata = tuple(sorted((k, v) for k, v in merged.items() if v is not None))
    _key_caches(_state.xla_metadata)
    _install()

  def __exit__(self, exc_type, exc_value, traceback):
    if not self.updates:
      return
    _uninstall()
    _state.xla_metadata = self.prev
    _key_caches(self.prev)


_metadata_context: list = []


def _key_caches(metadata: tuple) -> None:
  # NB: the active metadata is part of `config.state_key` (through a user context, as JAX's
  # trace context holds it), so a jit traced inside a block is traced again outside it
  if not _metadata_context:
    _metadata_context.append(make_user_context(()))
  ctx = _metadata_context[0]
  if ctx._value != metadata:
    ctx._value = metadata
    _config._refresh()


_state = _State()
_lock = threading.Lock()
_active = [0]                           # scopes active in all threads
_installed: list[tuple[Callable, Any]] = []   # (our hook, the hook it replaced)


def current_name_stack() -> tuple[str, ...]:
  """The names of the active scopes of this thread that the current trace records."""
  entries = _state.entries
  if not entries:
    return ()
  level = core.current_trace()._level
  # NB: a scope entered before the current trace was created (its level is lower) belongs
  # to an enclosing trace: the call site, not the equations recorded here, carries it.
  return tuple(n for n, lv in entries if lv >= level)


def _make_hook(previous: Callable | None) -> Callable[[], Any]:
  def hook():
    # NB: skips this frame, process_primitive's and bind's.
    inner = previous() if previous is not None else core.current_source_info(3)
    names = current_name_stack()
    metadata = _state.xla_metadata
    if not names and not metadata:
      return inner
    if type(inner) is NameStackInfo:   # an equation re-bound with its own names
      if inner.xla_metadata:
        metadata = tuple(sorted({**dict(metadata), **dict(inner.xla_metadata)}.items()))
      return NameStackInfo(core.ScopeNames(names + inner.name_stack), inner.source_info,
                           metadata)
    return NameStackInfo(core.ScopeNames(names), inner, metadata)
  hook.is_name_stack_hook = True
  return hook


def _install() -> None:
  with _lock:
    _active[0] += 1
    current = core.source_info_hook
    if current is None or not getattr(current, "is_name_stack_hook", False):
      hook = _make_hook(current)
      _installed.append((hook, current))
      core.source_info_hook = hook


def _uninstall() -> None:
  with _lock:
    _active[0] -= 1
    if _active[0]:
      return
    while _installed:
      hook, previous = _installed.pop()
      if core.source_info_hook is hook:
        core.source_info_hook = previous


class named_scope(contextlib.ContextDecorator):
  """A context manager (or decorator) that adds `name` to the name stack of the operations
  staged inside it, as `jax.named_scope`.

  Under `jit`, the ops of equations recorded inside the scope get the location
  `"jit(f)/name/op"`, which XLA keeps as their `op_name` metadata (HLO dumps, profiles).
  Scopes nest (`outer/inner`). Outside tracing it does nothing visible.

  Args:
    name: the scope's name (a string).

  Raises:
    TypeError: if `name` is not a string.

  Examples:
    >>> import stagecraft, stagecraft.numpy as jnp
    >>> def f(x):
    ...   with named_scope("dot_product"):
    ...     return x @ x
    >>> "dot_product/dot_general" in stagecraft.jit(f).lower(jnp.ones(3)).compiler_ir()
    True
  """

  def __init__(self, name: str):
    if not isinstance(name, str):
      raise TypeError("named_scope name argument must be a string.")
    self.name = name

  def __enter__(self):
    _state.entries.append((self.name, core.current_trace()._level))
    _install()
    return None

  def __exit__(self, *exc):
    _uninstall()
    _state.entries.pop()
    return False

  def __repr__(self):
    return f"named_scope({self.name!r})"


def named_call(fun: F, *, name: str | None = None) -> F:
  """`fun` wrapped so that what it stages is named `name` (default: `fun.__name__`), as
  `jax.named_call`: its ops appear as `jit(f)/name/op` in the lowered program.

  As in JAX 0.10, the call is not a separate staged computation: `fun` runs inside
  `named_scope(name)`.

  Args:
    fun: any callable.
    name: the name; `None` uses `fun.__name__`.

  Returns:
    A callable with `fun`'s signature (and `functools.wraps` metadata).

  Raises:
    AttributeError: if `name` is None and `fun` has no `__name__`.
  """
  if name is None:
    name = fun.__name__
  return named_scope(name)(fun)


def fun_name(fun: Callable, default_name: str = "<unnamed function>") -> str:
  """The name of `fun` for jaxprs and messages, as JAX's: its `__name__` (whatever it is,
  an empty string too); for a `functools.partial` without one, the wrapped function's name;
  else `default_name` (`<unnamed function>`: a callable object has no name of its own)."""
  name = getattr(fun, "__name__", None)
  if name is not None:
    return name
  if isinstance(fun, functools.partial):
    return fun_name(fun.func, default_name)
  return default_name


def _unwrapped(fun: Callable) -> Callable:
  """`fun` without its `functools.partial`s and decorators (`__wrapped__`)."""
  while isinstance(fun, functools.partial):
    fun = fun.func
  try:
    return inspect.unwrap(fun)
  except ValueError:   # a cycle of __wrapped__
    return fun


def fun_code(fun: Callable) -> Any:
  """The code object of `fun` unwrapped from partials and decorators, or None (a callable
  without code)."""
  return getattr(_unwrapped(fun), "__code__", None)


def fun_source_info(fun: Callable) -> str:
  """`fun`'s name and where it is defined, as JAX's debug info writes it in messages:
  `f at /path/to/file.py:12` (the name alone for a callable without code)."""
  fun = _unwrapped(fun)
  code = getattr(fun, "__code__", None)
  return (f"{fun_name(fun)} at {code.co_filename}:{code.co_firstlineno}" if code
          else fun_name(fun))
