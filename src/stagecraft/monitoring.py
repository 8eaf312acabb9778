"""Listeners for the events stagecraft records while it traces, lowers and compiles (JAX
0.10.2's `jax.monitoring`).

A listener is a callable registered once; every later `record_*` call of its kind calls it with
the event's name (a path such as `/jax/core/compile/backend_compile_duration`), its value and
the event's keyword metadata. stagecraft records, under JAX's names:

- for each jit signature traced, lowered and compiled (`fun_name` as JAX's: `f` for the trace,
  `jit(f)` for lowering and compiling), a scalar (the start time, seconds since the epoch), a
  duration (seconds) and a time span (start, end):
  `/jax/core/compile/jaxpr_trace_duration`, `/jax/core/compile/jaxpr_to_mlir_module_duration`,
  `/jax/core/compile/backend_compile_duration`;
- with the persistent compilation cache on (`jax_compilation_cache_dir`), the events
  `/jax/compilation_cache/compile_requests_use_cache`, `/jax/compilation_cache/cache_hits`
  and `/jax/compilation_cache/cache_misses` (an entry written), and the duration
  `/jax/compilation_cache/cache_retrieval_time_sec` of a hit.

The same stages are logged (`compile_log`) under JAX's texts, at WARNING with
`jax_log_compiles` on (DEBUG otherwise): "Finished tracing f for jit in 0.000883579 sec",
"Compiling jit(f) with global shapes and types (...). Argument mapping: (...).",
"Finished jaxpr to MLIR module conversion jit(f) in ... sec", "Finished XLA compilation of
jit(f) in ... sec", to the loggers `stagecraft.dispatch` / `stagecraft.interpreters.pxla`
(`jax._src.dispatch` / `jax._src.interpreters.pxla` under the runner, JAX's names).

A typical use counts compilations (`register_event_duration_secs_listener` and the backend
compile event). An exception a listener raises propagates to the traced call. Listeners run in
registration order, on the thread that records the event.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Protocol, Sequence

__all__ = ["record_event", "record_event_duration_secs", "record_event_time_span",
           "record_scalar", "register_event_listener", "register_event_duration_secs_listener",
           "register_event_time_span_listener", "register_scalar_listener",
           "unregister_event_listener", "unregister_event_duration_listener",
           "unregister_event_time_span_listener", "unregister_scalar_listener",
           "clear_event_listeners"]

# Event names stagecraft records (JAX's).
JAXPR_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
JAXPR_TO_MLIR_MODULE_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_REQUEST_EVENT = "/jax/compilation_cache/compile_requests_use_cache"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
CACHE_MISS_EVENT = "/jax/compilation_cache/cache_misses"
CACHE_RETRIEVAL_EVENT = "/jax/compilation_cache/cache_retrieval_time_sec"


class EventListenerWithMetadata(Protocol):
  def __call__(self, event: str, **kwargs: str | int) -> None: ...


class EventDurationListenerWithMetadata(Protocol):
  def __call__(self, event: str, duration_secs: float, **kwargs: str | int) -> None: ...


class EventTimeSpanListenerWithMetadata(Protocol):
  def __call__(self, event: str, start_time: float, end_time: float,
               **kwargs: str | int) -> None: ...


class ScalarListenerWithMetadata(Protocol):
  def __call__(self, event: str, value: float | int, **kwargs: str | int) -> None: ...


_event_listeners: list[EventListenerWithMetadata] = []
_duration_listeners: list[EventDurationListenerWithMetadata] = []
_time_span_listeners: list[EventTimeSpanListenerWithMetadata] = []
_scalar_listeners: list[ScalarListenerWithMetadata] = []


def record_event(event: str, **kwargs: str | int) -> None:
  """Calls each event listener with `event` (a name such as `/jax/compilation_cache/cache_hits`)
  and the metadata `kwargs` (pass the same names in the same order for the same event)."""
  for callback in tuple(_event_listeners):
    callback(event, **kwargs)


def record_event_duration_secs(event: str, duration: float, **kwargs: str | int) -> None:
  """Calls each duration listener with `event`, `duration` (seconds, a float) and `kwargs`."""
  for callback in tuple(_duration_listeners):
    callback(event, duration, **kwargs)


def record_event_time_span(event: str, start_time: float, end_time: float,
                           **kwargs: str | int) -> None:
  """Calls each time-span listener with `event`, its start and end times (seconds since the
  epoch, floats) and `kwargs`."""
  for callback in tuple(_time_span_listeners):
    callback(event, start_time, end_time, **kwargs)


def record_scalar(event: str, value: float | int, **kwargs: str | int) -> None:
  """Calls each scalar listener with `event`, `value` (a number) and `kwargs`."""
  for callback in tuple(_scalar_listeners):
    callback(event, value, **kwargs)


def _checked(callback: Any, what: str) -> Any:
  if not callable(callback):
    raise TypeError(f"register_{what}: the listener must be callable, got "
                    f"{type(callback).__name__} {callback!r}.")
  return callback


def register_event_listener(callback: EventListenerWithMetadata) -> None:
  """Registers `callback(event, **kwargs)`, called by every later `record_event`.

  Raises:
    TypeError: `callback` is not callable."""
  _event_listeners.append(_checked(callback, "event_listener"))


def register_event_time_span_listener(callback: EventTimeSpanListenerWithMetadata) -> None:
  """Registers `callback(event, start_time, end_time, **kwargs)` for `record_event_time_span`.

  Raises:
    TypeError: `callback` is not callable."""
  _time_span_listeners.append(_checked(callback, "event_time_span_listener"))


def register_event_duration_secs_listener(callback: EventDurationListenerWithMetadata) -> None:
  """Registers `callback(event, duration_secs, **kwargs)` for `record_event_duration_secs`.

  Raises:
    TypeError: `callback` is not callable."""
  _duration_listeners.append(_checked(callback, "event_duration_secs_listener"))


def register_scalar_listener(callback: ScalarListenerWithMetadata) -> None:
  """Registers `callback(event, value, **kwargs)` for `record_scalar`.

  Raises:
    TypeError: `callback` is not callable."""
  _scalar_listeners.append(_checked(callback, "scalar_listener"))


def _unregister(listeners: list, callback: Any, what: str) -> None:
  try:
    listeners.remove(callback)
  except ValueError:
    # NB: JAX asserts; an AssertionError with the reason keeps `except AssertionError` working.
    raise AssertionError(f"unregister_{what}: {callback!r} is not a registered listener; "
                         f"register it with register_{what} first.") from None


def unregister_event_listener(callback: EventListenerWithMetadata) -> None:
  """Removes a listener `register_event_listener` added.

  Raises:
    AssertionError: `callback` is not registered (as JAX)."""
  _unregister(_event_listeners, callback, "event_listener")


def unregister_event_duration_listener(callback: EventDurationListenerWithMetadata) -> None:
  """Removes a listener `register_event_duration_secs_listener` added.

  Raises:
    AssertionError: `callback` is not registered (as JAX)."""
  _unregister(_duration_listeners, callback, "event_duration_listener")


def unregister_event_time_span_listener(callback: EventTimeSpanListenerWithMetadata) -> None:
  """Removes a listener `register_event_time_span_listener` added.

  Raises:
    AssertionError: `callback` is not registered (as JAX)."""
  _unregister(_time_span_listeners, callback, "event_time_span_listener")


def unregister_scalar_listener(callback: ScalarListenerWithMetadata) -> None:
  """Removes a listener `register_scalar_listener` added.

  Raises:
    AssertionError: `callback` is not registered (as JAX)."""
  _unregister(_scalar_listeners, callback, "scalar_listener")


def clear_event_listeners() -> None:
  """Removes every listener of every kind."""
  for listeners in (_event_listeners, _duration_listeners, _time_span_listeners,
                    _scalar_listeners):
    listeners.clear()


def listening() -> bool:
  """Whether any listener is registered (recording sites skip their timing otherwise)."""
  return bool(_event_listeners or _duration_listeners or _time_span_listeners
              or _scalar_listeners)


#: The loggers' root: "stagecraft", or "jax._src" while the runner serves `import jax`
#: (`compat.install`), so that a JAX program's logging configuration reaches them.
logger_root = ["stagecraft"]


def logger(module: str) -> logging.Logger:
  """The logger of JAX's module `module` ("dispatch", "interpreters.pxla", "compiler",
  "interpreters.partial_eval"): `stagecraft.<module>`, `jax._src.<module>` under the
  runner."""
  return logging.getLogger(f"{logger_root[0]}.{module}")


def compile_log(module: str, log_compiles: bool) -> logging.Logger | None:
  """The logger of `module` and whether it logs the compile stages (`timed`'s `log`): the
  logger when it is enabled at the level JAX logs them, WARNING with `jax_log_compiles` on
  (`log_compiles`), else DEBUG; None otherwise (nothing to format)."""
  log = logger(module)
  return log if log.isEnabledFor(logging.WARNING if log_compiles else logging.DEBUG) else None


class timed:
  """`with timed(event, fun_name):` records, as JAX does for its compile stages, the start
  time as a scalar on entry, then the duration and the time span on a normal exit (nothing
  when the block raises). Only when some listener is registered.

  With `log=(logger, level, fmt)` the duration is also logged at `level`:
  `fmt.format(fun_name=..., elapsed_time=seconds)` (JAX's `log_elapsed_time`), for example
  "Finished XLA compilation of {fun_name} in {elapsed_time:.9f} sec"."""
  __slots__ = ("event", "fun_name", "start", "log")

  def __init__(self, event: str, fun_name: str, log: tuple | None = None):
    self.event, self.fun_name, self.start, self.log = event, fun_name, None, log

  def __enter__(self):
    if listening():
      self.start = time.time()
      record_scalar(self.event, self.start, fun_name=self.fun_name)
    elif self.log is not None:
      self.start = time.time()
    return self

  def __exit__(self, exc_type, exc, tb):
    if self.start is not None and exc_type is None:
      end = time.time()
      if self.log is not None:
        log, level, fmt = self.log
        log.log(level, fmt.format(fun_name=self.fun_name, elapsed_time=end - self.start))
      if listening():
        record_event_duration_secs(self.event, end - self.start, fun_name=self.fun_name)
        record_event_time_span(self.event, self.start, end, fun_name=self.fun_name)
    return False


def compiling_line(jit_name: str, avals: Sequence[Any], shardings: Sequence[str]) -> str:
  """JAX's line before it lowers a program: "Compiling jit(f) with global shapes and types
  (ShapedArray(float32[2]),). Argument mapping: (UnspecifiedValue,)." (Python's tuple
  reprs of the avals and of the arguments' shardings)."""
  def tup(items):
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
  return (f"Compiling {jit_name} with global shapes and types {tup([repr(a) for a in avals])}"
          f". Argument mapping: {tup(list(shardings))}.")


def log_timed(module: str, log_compiles: bool, fmt: str) -> tuple | None:
  """`timed`'s `log` for JAX's `fmt` on `module`'s logger, or None when that logger would
  not log it (see `compile_log`)."""
  log = compile_log(module, log_compiles)
  if log is None:
    return None
  return log, logging.WARNING if log_compiles else logging.DEBUG, fmt


def module_fun_name(text: str, always: bool = False) -> str:
  """The `fun_name` JAX records for a compiled module: `jit(f)` for `module @jit_f` (for the
  sanitized names of modules whose caller gave no name); "" when nothing listens (unless
  `always`)."""
  if not (always or listening()):
    return ""
  head = str(text)[:300]
  i = head.find("module @")
  if i < 0:
    return "<unknown>"
  name = head[i + 8:].split(None, 1)[0].strip('"')
  return f"jit({name[4:]})" if name.startswith("jit_") else name
