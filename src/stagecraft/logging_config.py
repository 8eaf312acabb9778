"""JAX 0.10.2's logging options: `jax_logging_level` and `jax_debug_log_modules`
(environment variables `JAX_LOGGING_LEVEL`, `JAX_DEBUG_LOG_MODULES`).

- `jax_logging_level="DEBUG"` (any of NOTSET, DEBUG, INFO, WARNING, ERROR, CRITICAL) sets
  the level of the loggers `stagecraft`, `jax` and `jaxlib` (stagecraft's, those of the JAX
  runtime modules it uses, and JAX's names of stagecraft's under the runner) and gives them
  a handler writing to stderr in JAX's format (`DEBUG:2026-01-01 00:00:00,000:name:12:
  message`); XLA's C++ logging follows (its minimum level: 0 for DEBUG/INFO, 1 WARNING, 2
  ERROR, 3 CRITICAL). None or NOTSET takes the handlers off again.
- `jax_debug_log_modules="jax._src.dispatch,stagecraft.compiler"`: each named logger logs
  everything (DEBUG) to stderr, in the same format, unless the root logger of its name
  already does.

Layer 1 (platform): the config layer applies the options through `apply`.
"""
from __future__ import annotations

import logging
import sys

__all__ = ["apply"]

_FORMAT = logging.Formatter("{levelname}:{asctime}:{name}:{lineno}: {message}", style="{")
_ROOTS = ("stagecraft", "jax", "jaxlib")
_LEVELS = {"CRITICAL": logging.CRITICAL, "FATAL": logging.FATAL, "ERROR": logging.ERROR,
           "WARN": logging.WARNING, "WARNING": logging.WARNING, "INFO": logging.INFO,
           "DEBUG": logging.DEBUG, "NOTSET": logging.NOTSET}
_CPP = {"CRITICAL": 3, "FATAL": 3, "ERROR": 2, "WARN": 1, "WARNING": 1, "INFO": 0,
        "DEBUG": 0}

class _StderrHandler(logging.StreamHandler):
  """A handler writing to the `sys.stderr` of the moment (a test's or a notebook's capture
  replaces it after import)."""

  @property
  def stream(self):
    return sys.stderr

  @stream.setter
  def stream(self, value):
    pass


_level_handler = _StderrHandler()
_level_handler.setFormatter(_FORMAT)
_levels_set: dict[str, int] = {}   # logger name -> its level before jax_logging_level


class _NotLoggedByRoot(logging.Filter):
  """Passes a record unless the root logger of its name logs DEBUG itself (its own handler
  prints the record then)."""

  def filter(self, record):
    root = logging.getLogger(record.name.split(".", 1)[0])
    return root.level > logging.DEBUG or root.level == logging.NOTSET


_debug_handler = _StderrHandler()
_debug_handler.setFormatter(_FORMAT)
_debug_handler.addFilter(_NotLoggedByRoot())
_debug_set: list[tuple[logging.Logger, int]] = []


def _set_logging_level(level: str | None) -> None:
  for name, old in _levels_set.items():
    log = logging.getLogger(name)
    log.removeHandler(_level_handler)
    log.setLevel(old)
  _levels_set.clear()
  if level is None:
    return
  if level != "NOTSET":
    # XLA's C++ logging (jaxlib's switch, the runtime's; imported when first needed, as the
    # runtime's client sets its own default when it starts)
    from jaxlib import utils
    utils.absl_set_min_log_level(_CPP[level])
  num = _LEVELS[level]
  for name in _ROOTS:
    log = logging.getLogger(name)
    _levels_set[name] = log.level
    log.setLevel(num)
    if num != logging.NOTSET:
      log.addHandler(_level_handler)


def _set_debug_log_modules(names: str) -> None:
  for log, old in _debug_set:
    log.removeHandler(_debug_handler)
    log.setLevel(old)
  _debug_set.clear()
  for name in filter(None, (n.strip() for n in (names or "").split(","))):
    log = logging.getLogger(name)
    _debug_set.append((log, log.level))
    log.addHandler(_debug_handler)
    log.setLevel(logging.DEBUG)


def apply(option: str, value) -> None:
  """Applies `logging_level` or `debug_log_modules` (already checked by the config layer)."""
  if option == "logging_level":
    _set_logging_level(value)
  elif option == "debug_log_modules":
    _set_debug_log_modules(value)
