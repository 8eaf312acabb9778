"""jdb, the debugger `debug.breakpoint` opens (JAX's command-line debugger, `jax._src.debugger`).

At trace time `breakpoint` records the user's Python frames (file, line, source, locals); the
traced values among the locals travel through a debug callback, so when the program reaches
the breakpoint the debugger shows each frame with the *runtime* values of its arrays:

    Entering jdb:
    (jdb) p y
    Array(2.7182817, dtype=float32)

Commands (as JAX's): `p expr` / `pp expr` print (pretty-print) an expression evaluated in the
current frame; a line that is not a command is evaluated and printed; `u(p)` / `d(own)` move
between frames (the innermost first) and `l(ist)` shows the source around the current line;
`w(here)` / `bt` print the stack; `c(ont(inue))` resumes the program; `q(uit)` / `exit` /
end of input stop it (the program raises, the process keeps running).
"""
from __future__ import annotations

import cmd
import dataclasses
import inspect
import pprint
import sys
import threading
import traceback
from typing import IO, Any

from stagecraft import core, traceback_util, tree_util

__all__ = ["DebuggerFrame", "CliDebugger", "capture_frames", "run_debugger"]

_lock = threading.Lock()


class _CantFlatten:
  def __repr__(self):
    return "<cant_flatten>"


cant_flatten = _CantFlatten()


@dataclasses.dataclass(frozen=True)
class DebuggerFrame:
  """One Python frame of the breakpoint's call stack.

  Attributes:
    filename, lineno: where the frame is (1-based line).
    locals, globals: its variables (globals are not captured: `{}`, as JAX's).
    source: the lines of the frame's function (empty where there is no source).
    offset: the index of `lineno` in `source` (None without source).
  """
  filename: str
  locals: dict[str, Any]
  globals: dict[str, Any]
  source: list[str]
  lineno: int
  offset: int | None

  @classmethod
  def from_frameinfo(cls, info: inspect.FrameInfo) -> "DebuggerFrame":
    try:
      lines, start = inspect.getsourcelines(info.frame)
      source = "".join(lines).split("\n")
      offset = info.lineno - max(start, 1)
      if not 0 <= offset < len(source):   # source that eval/exec made: none to show
        source, offset = [], None
    except (OSError, TypeError):
      source, offset = [], None
    return cls(info.filename, dict(info.frame.f_locals), {}, source, info.lineno, offset)


def _is_live_tracer(x: Any) -> bool:
  return isinstance(x, core.Tracer) and getattr(x._trace, "_valid", True)


def capture_frames(skip: int, filter_frames: bool = True, num_frames: int | None = None
                   ) -> tuple[list[DebuggerFrame], list[Any], Any]:
  """The caller's frames, innermost first (stagecraft's own frames left out when
  `filter_frames`), at most `num_frames`; and their traced locals, flattened: `(frames,
  traced_leaves, rebuild)` where `rebuild(values)` gives the frames with those values."""
  infos = inspect.stack()[skip + 1:]
  if filter_frames:
    # NB: the frames of `runpy` are those of `python -m stagecraft run` (or `-m` itself).
    infos = [i for i in infos if traceback_util.include_frame(i.frame)
             and i.frame.f_globals.get("__name__") != "runpy"]
  if num_frames is not None:
    infos = infos[:num_frames]
  frames = [DebuggerFrame.from_frameinfo(i) for i in infos]
  traced: list[Any] = []
  slots: list[tuple[int, str, Any, list[int]]] = []
  for k, fr in enumerate(frames):
    for name, value in fr.locals.items():
      try:
        leaves, treedef = tree_util.tree_flatten(value)
      except Exception:  # noqa: BLE001 (any object can sit in a frame)
        fr.locals[name] = cant_flatten
        continue
      where = [i for i, leaf in enumerate(leaves) if _is_live_tracer(leaf)]
      if where:
        slots.append((k, name, (leaves, treedef), where))
        traced.extend(leaves[i] for i in where)

  def rebuild(values) -> list[DebuggerFrame]:
    out = [dataclasses.replace(fr, locals=dict(fr.locals)) for fr in frames]
    it = iter(values)
    for k, name, (leaves, treedef), where in slots:
      leaves = list(leaves)
      for i in where:
        leaves[i] = next(it)
      out[k].locals[name] = tree_util.tree_unflatten(treedef, leaves)
    return out

  return frames, traced, rebuild


class CliDebugger(cmd.Cmd):
  """jdb's command loop over `frames` (innermost first)."""
  prompt = "(jdb) "

  def __init__(self, frames: list[DebuggerFrame], thread_id: int | None = None,
               stdin: IO[str] | None = None, stdout: IO[str] | None = None,
               completekey: str = "tab"):
    super().__init__(completekey=completekey, stdin=stdin, stdout=stdout)
    self.use_rawinput = stdin is None
    self.frames = frames
    self.frame_index = 0
    self.thread_id = thread_id
    self.intro = "Entering jdb:"

  def current_frame(self) -> DebuggerFrame:
    return self.frames[self.frame_index]

  def evaluate(self, expr: str) -> Any:
    frame = self.current_frame()
    return eval(expr, {}, {**frame.globals, **frame.locals})  # noqa: S307 (a debugger)

  def _error(self) -> None:
    exc_type, exc = sys.exc_info()[:2]
    text = traceback.format_exception_only(exc_type, exc)[-1].strip()
    print("***", text, file=self.stdout)

  def _print_value(self, expr: str, fmt) -> None:
    try:
      print(fmt(self.evaluate(expr)), file=self.stdout)
    except Exception:  # noqa: BLE001 (report any error of the user's expression)
      self._error()

  def default(self, line: str) -> None:
    """Evaluates an expression and prints its repr."""
    self._print_value(line, repr)

  def emptyline(self) -> None:   # unlike cmd's default, an empty line repeats nothing
    return None

  def do_p(self, arg: str) -> None:
    """p expression
    Evaluates and prints the value of an expression
    """
    self._print_value(arg, repr)

  def do_pp(self, arg: str) -> None:
    """pp expression
    Evaluates and pretty-prints the value of an expression
    """
    self._print_value(arg, pprint.pformat)

  def print_context(self, num_lines: int = 2) -> None:
    frame = self.current_frame()
    out = [f"> {frame.filename}({frame.lineno})"]
    if frame.offset is not None:
      for i, line in enumerate(frame.source):
        if frame.offset - 1 - num_lines <= i <= frame.offset + num_lines:
          out.append(("->  " if i == frame.offset else "    ") + line)
    print("\n".join(out), file=self.stdout)

  def do_up(self, arg: str) -> None:
    """u(p)
    Move up a stack frame.
    """
    if self.frame_index == len(self.frames) - 1:
      print("At topmost frame.", file=self.stdout)
    else:
      self.frame_index += 1
    self.print_context()
  do_u = do_up

  def do_down(self, arg: str) -> None:
    """d(own)
    Move down a stack frame.
    """
    if self.frame_index == 0:
      print("At bottommost frame.", file=self.stdout)
    else:
      self.frame_index -= 1
    self.print_context()
  do_d = do_down

  def do_list(self, arg: str) -> None:
    """l(ist)
    List source code for the current file.
    """
    self.print_context(num_lines=5)
  do_l = do_list

  def do_where(self, arg: str) -> None:
    """w(here)
    Prints a stack trace with the most recent frame on the bottom.
    'bt' is an alias for this command.
    """
    out = ["Traceback:"]
    for frame in reversed(self.frames):
      out.append(f'  File "{frame.filename}", line {frame.lineno}')
      out.append("    <no source>" if frame.offset is None
                 else f"    {frame.source[frame.offset].strip()}")
    print("\n".join(out), file=self.stdout)
  do_w = do_bt = do_where

  def do_continue(self, arg: str) -> bool:
    """c(ont(inue))
    Continue the program's execution.
    """
    return True
  do_c = do_cont = do_continue

  def do_quit(self, arg: str) -> None:
    """q(uit)
    (exit)
    Quit the debugger. The program is given an exit command.
    """
    sys.exit(0)
  do_q = do_EOF = do_exit = do_quit

  def run(self) -> None:
    while True:
      try:
        self.cmdloop()
        return
      except KeyboardInterrupt:
        print("--KeyboardInterrupt--", file=self.stdout)


def run_debugger(frames: list[DebuggerFrame], thread_id: int | None = None, **kwargs) -> None:
  """Opens jdb on `frames` (one session at a time across threads)."""
  with _lock:
    CliDebugger(frames, thread_id, **kwargs).run()
