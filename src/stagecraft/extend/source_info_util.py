"""`stagecraft.extend.source_info_util`: name stacks and source locations (JAX's
`jax.extend.source_info_util`), over `stagecraft.source_info_util` (named scopes) and
`stagecraft.traceback_util` (which frames are the user's).

  >>> import stagecraft, stagecraft.numpy as jnp
  >>> def f(x):
  ...   with extend_name_stack("block"):
  ...     assert str(current_name_stack()) == "block"
  ...     return jnp.sin(x)
  >>> "block/sin" in stagecraft.jit(f).lower(1.0).compiler_ir()
  True

Names only, as in stagecraft's lowering: `transform_name_stack` (JAX's `jvp(...)`,
`vmap(...)` wrappers) records nothing, and `reset_name_stack` / `set_name_stack` cannot
remove the scopes already entered (they are metadata for profiles and HLO dumps, never
semantics). `user_context` sets what `current()` reports.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any, Iterator, NamedTuple

from stagecraft import source_info_util, traceback_util
from stagecraft.source_info_util import named_scope

__all__ = ["NameStack", "SourceInfo", "Frame", "current", "current_name_stack",
           "extend_name_stack", "new_name_stack", "new_source_info", "register_exclusion",
           "reset_name_stack", "set_name_stack", "summarize", "transform_name_stack",
           "user_context"]


class NameStack(NamedTuple):
  """A stack of scope names, outermost first; `str()` joins them with `/`."""
  stack: tuple[str, ...] = ()

  def extend(self, name: str | tuple[str, ...]) -> "NameStack":
    return NameStack(self.stack + ((name,) if isinstance(name, str) else tuple(name)))

  def wrap_name(self, name: str) -> str:
    return "/".join((*self.stack, name))

  def transform(self, transform_name: str) -> "NameStack":
    """Transformation names are not recorded (see the module docstring)."""
    return self

  def __len__(self) -> int:
    return len(self.stack)

  def __str__(self) -> str:
    return "/".join(self.stack)


class Frame(NamedTuple):
  """One frame of user code: file, line, column (0 if unknown) and function name."""
  file_name: str
  function_name: str
  start_line: int
  start_column: int


class SourceInfo(NamedTuple):
  """Where something happened: the user's frames (innermost first; None if unknown) and the
  name stack."""
  traceback: tuple[Frame, ...] | None
  name_stack: NameStack

  def replace(self, *, traceback: Any = None, name_stack: NameStack | None = None
              ) -> "SourceInfo":
    return SourceInfo(self.traceback if traceback is None else traceback,
                      self.name_stack if name_stack is None else name_stack)


class _Context(threading.local):
  def __init__(self):
    self.traceback: tuple[Frame, ...] | None = None


_context = _Context()


def _frame(f) -> Frame:
  code = f.f_code
  line, col = f.f_lineno, 0
  try:
    pos = list(code.co_positions())[f.f_lasti // 2]
    line = pos[0] if pos[0] is not None else line
    col = pos[2] if pos[2] is not None else 0
  except (IndexError, ValueError):
    pass
  return Frame(code.co_filename, getattr(code, "co_qualname", code.co_name), line, col)


def _user_frames() -> tuple[Frame, ...]:
  out = []
  f = sys._getframe(1)
  while f is not None:
    if f.f_code.co_filename != __file__ and traceback_util.include_frame(f):
      out.append(_frame(f))
    f = f.f_back
  return tuple(out)


def current_name_stack() -> NameStack:
  """The names of the active scopes that the current trace records."""
  return NameStack(source_info_util.current_name_stack())


def new_name_stack(name: str = "") -> NameStack:
  """A name stack holding `name` (empty for '')."""
  return NameStack((name,) if name else ())


def new_source_info() -> SourceInfo:
  """A SourceInfo that knows nothing."""
  return SourceInfo(None, NameStack())


def current() -> SourceInfo:
  """Where the caller is: its user frames (those not under stagecraft or an excluded path;
  `user_context`'s when one is active) and the current name stack."""
  tb = _context.traceback
  return SourceInfo(tb if tb is not None else _user_frames(), current_name_stack())


def summarize(source_info: SourceInfo, num_frames: int = 1) -> str:
  """`file:line:column (function)` of the innermost `num_frames` frames (one per line;
  the column left out when unknown), or `'unknown'`."""
  frames = (source_info.traceback or ())[:num_frames]
  if not frames:
    return "unknown"
  return "\n".join(f"{f.file_name}:{f.start_line}" + (f":{f.start_column}" if f.start_column
                                                       else "") + f" ({f.function_name})"
                   for f in frames)


def register_exclusion(path: str) -> None:
  """Treats the files under `path` (a library built on stagecraft) as internal: their frames
  are left out of source locations and of stagecraft's filtered tracebacks."""
  traceback_util.register_exclusion(path)


class extend_name_stack(named_scope):
  """Context manager adding `name` to the name stack of what is staged inside it (as
  `stagecraft.named_scope`)."""


@contextlib.contextmanager
def transform_name_stack(name: str) -> Iterator[NameStack]:
  """Context manager for a transformation's name: recorded by JAX only, a no-op here."""
  yield current_name_stack()


@contextlib.contextmanager
def set_name_stack(name_stack: NameStack) -> Iterator[None]:
  """Context manager adding the names of `name_stack` that are not already active (the
  active ones cannot be removed here; see the module docstring)."""
  names = list(name_stack.stack)
  have = list(source_info_util.current_name_stack())
  extra = names[len(have):] if names[:len(have)] == have else names
  with contextlib.ExitStack() as stack:
    for n in extra:
      stack.enter_context(named_scope(n))
    yield


@contextlib.contextmanager
def reset_name_stack() -> Iterator[None]:
  """Context manager for code whose names should start afresh: a no-op here (names are
  relative to the trace recording them already; see the module docstring)."""
  yield


@contextlib.contextmanager
def user_context(c: Any, *, name_stack: NameStack | None = None) -> Iterator[None]:
  """Context manager making `current()` report the frames `c` (a sequence of `Frame`s or
  None to keep the caller's) and, when given, adding the names of `name_stack`."""
  prev = _context.traceback
  if c is not None:
    _context.traceback = tuple(c)
  try:
    if name_stack is not None:
      with set_name_stack(name_stack):
        yield
    else:
      yield
  finally:
    _context.traceback = prev
