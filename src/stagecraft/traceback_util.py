"""Traceback filtering (JAX's `traceback_util`): an exception raised through stagecraft's
transformations shows the user's frames, with stagecraft's own removed.

The outermost API boundary that an exception crosses (a jitted function's call, grad's,
vmap's, ... wrapper: `api_boundary`) rewrites its traceback, as config
`traceback_filtering` (env `JAX_TRACEBACK_FILTERING`) says:

- "auto" (default): "tracebackhide" under IPython, else "quiet_remove_frames";
- "off": nothing is removed;
- "tracebackhide": stagecraft's frames get `__tracebackhide__ = True` (IPython and pytest
  hide them);
- "remove_frames": stagecraft's frames are removed; the unfiltered traceback is the
  exception's `__cause__`, an `UnfilteredStackTrace`;
- "quiet_remove_frames": removed, with a note saying so.

In every mode that removes frames the unfiltered traceback stays reachable as the
exception's `__stagecraft_unfiltered_traceback__` attribute.
"""
from __future__ import annotations

import functools
import os
import traceback
import types
from typing import Callable, TypeVar

from stagecraft.config import config

__all__ = ["api_boundary", "classify_file", "filter_exception", "filter_traceback",
           "include_frame", "register_exclusion", "UnfilteredStackTrace",
           "SimplifiedTraceback", "is_boundary_frame"]

C = TypeVar("C")

_exclude_paths: list[str] = [os.path.dirname(os.path.abspath(__file__)) + os.sep]

#: The name the tracebacks' notes give the library: the JAX runner
#: (`stagecraft.compat.install`) sets "JAX", so programs print JAX's notes.
library_name = ["stagecraft"]


def _simplified() -> str:
  return (f"For simplicity, {library_name[0]} has removed its internal frames from the "
          f"traceback of the following exception. Set JAX_TRACEBACK_FILTERING=off to "
          f"include these.")


def _appended() -> str:
  return (f"The stack trace below excludes {library_name[0]}-internal frames.\nThe "
          f"preceding is the original exception that occurred, unmodified.\n\n"
          f"--------------------")


class UnfilteredStackTrace(Exception):
  """Carries the unfiltered traceback (mode "remove_frames")."""


class SimplifiedTraceback(Exception):
  def __str__(self):
    return _simplified()


#: File names already classified as stagecraft's own (or excluded) and as the user's: the
#: source-location capture of every staged equation (`core.current_source_info`) tests a
#: frame's file with one set lookup. Cleared by `register_exclusion`.
internal_files: set[str] = set()
user_files: set[str] = set()


def register_exclusion(path: str) -> None:
  """Hides the frames of files under `path` too (a library built on stagecraft): from
  filtered tracebacks and from the source locations of staged equations."""
  _exclude_paths.append(os.path.abspath(path))
  internal_files.clear()
  user_files.clear()


def classify_file(name: str) -> bool:
  """Whether frames of the file `name` are internal (under an excluded path); records the
  answer in `internal_files` or `user_files`."""
  internal = any(name.startswith(p) for p in _exclude_paths)
  (internal_files if internal else user_files).add(name)
  return internal


def include_frame(f: types.FrameType) -> bool:
  """Whether a frame is the user's (not under an excluded path)."""
  name = f.f_code.co_filename
  return not any(name.startswith(p) for p in _exclude_paths)


def filter_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
  """`tb` without the frames of excluded files."""
  out = None
  for f, lineno in reversed(list(traceback.walk_tb(tb))):
    if include_frame(f):
      out = types.TracebackType(out, f, f.f_lasti, lineno)
  return out


_boundary_codes: set = set()


def is_boundary_frame(f: types.FrameType) -> bool:
  return f.f_code in _boundary_codes


def _under_boundary(frame: types.FrameType | None) -> bool:
  f = frame.f_back if frame is not None else None
  while f is not None:
    if f.f_code in _boundary_codes:
      return True
    f = f.f_back
  return False


def _running_under_ipython() -> bool:
  try:
    get_ipython()  # type: ignore[name-defined]  # noqa: F821
    return True
  except NameError:
    return False


def _mode() -> str:
  mode = config.traceback_filtering
  if mode in (None, "auto"):
    return "tracebackhide" if _running_under_ipython() else "quiet_remove_frames"
  return mode


def filter_exception(e: BaseException, note: bool = True) -> None:
  """Rewrites the traceback of `e`, caught in an API boundary's frame, per the filtering
  mode; does nothing below another boundary (the outermost one filters). `note=False`
  removes the frames without adding the note (an eager primitive's error: JAX's eager
  `lax` calls add none, and users match their messages exactly)."""
  tb = e.__traceback__
  if tb is None or _under_boundary(tb.tb_frame):
    return
  mode = _mode()
  if mode == "off" or getattr(e, "__stagecraft_unfiltered_traceback__", None) is not None:
    return
  if mode == "tracebackhide":
    for f, _ in traceback.walk_tb(tb):
      if not include_frame(f):
        f.f_locals["__tracebackhide__"] = True
    return
  try:
    e.__stagecraft_unfiltered_traceback__ = tb
  except AttributeError:   # an exception type with __slots__: leave it alone
    return
  e.with_traceback(filter_traceback(tb))
  if mode == "quiet_remove_frames":
    if note:
      e.add_note("--------------------\n" + _simplified())
  elif mode == "remove_frames":
    msg = "".join(traceback.format_exception_only(type(e), e)).strip()
    unfiltered = UnfilteredStackTrace(f"{msg}\n\n{_appended()}").with_traceback(tb)
    unfiltered.__cause__ = e.__cause__
    unfiltered.__context__ = e.__context__
    unfiltered.__suppress_context__ = e.__suppress_context__
    e.__cause__ = unfiltered
    e.__context__ = None


def api_boundary(fun: C) -> C:
  """Wraps `fun` (a transformation's entry point or the function it returns) so that an
  exception raised below it has stagecraft's frames filtered (see the module docstring)."""

  @functools.wraps(fun)
  def reraise_with_filtered_traceback(*args, **kwargs):
    __tracebackhide__ = True  # noqa: F841
    try:
      return fun(*args, **kwargs)
    except Exception as e:
      filter_exception(e)
      raise
  return reraise_with_filtered_traceback


_boundary_codes.add(api_boundary(lambda: None).__code__)


def register_boundary(fn: Callable) -> Callable:
  """Marks a function that catches and filters itself (`filter_exception` in its own
  `except`, as jit's call does to avoid a wrapper on its fast path) as a boundary."""
  _boundary_codes.add(fn.__code__)
  return fn
