"""Global configuration flags, read with attribute access and set with `update`.

  >>> import stagecraft
  >>> stagecraft.config.update("enable_x64", True)
  >>> stagecraft.config.enable_x64
  True
  >>> stagecraft.config.update("enable_x64", False)

Flags:
  enable_x64 (bool, default False, env STAGECRAFT_ENABLE_X64): when off, 64-bit dtypes are
    narrowed to 32 bits (float64 -> float32, int64 -> int32, uint64 -> uint32,
    complex128 -> complex64), as in JAX.
  disable_jit (bool, default False): `jit` runs its function eagerly, op by op.
  compilation_cache_dir (str or None): directory of the persistent executable cache.
  compilation_cache_max_size (int, default -1): bound in bytes on that directory's entries
    (least recently used removed first); -1: unbounded.
  traceback_filtering (str, default "auto", env JAX_TRACEBACK_FILTERING): "auto", "off",
    "tracebackhide", "remove_frames" or "quiet_remove_frames" (stagecraft.traceback_util).
  debug_nans / debug_infs (bool, default False, env JAX_DEBUG_NANS / JAX_DEBUG_INFS): raise
    FloatingPointError at the first primitive that produces a NaN / an inf.
"""
from __future__ import annotations

import contextlib
import os

__all__ = ["Config", "config", "enable_x64", "disable_jit", "debug_nans", "debug_infs"]


def _env_bool(name: str, default: bool) -> bool:
  v = os.environ.get(name)
  if v is None:
    return default
  return v.strip().lower() in ("1", "true", "yes", "on")


class Config:
  """Holds the flags. `state_key` changes whenever a flag that changes programs changes, so
  caches can key on it cheaply."""

  _defaults = {
      "enable_x64": _env_bool("STAGECRAFT_ENABLE_X64", False),
      "disable_jit": False,
      "compilation_cache_dir": os.environ.get("STAGECRAFT_COMPILATION_CACHE_DIR"),
      "compilation_cache_max_size": int(os.environ.get(
          "STAGECRAFT_COMPILATION_CACHE_MAX_SIZE", "-1")),
      "traceback_filtering": os.environ.get("JAX_TRACEBACK_FILTERING", "auto"),
      "debug_nans": _env_bool("JAX_DEBUG_NANS", False),
      "debug_infs": _env_bool("JAX_DEBUG_INFS", False),
  }
  _choices = {"traceback_filtering": ("auto", "off", "tracebackhide", "remove_frames",
                                      "quiet_remove_frames")}

  def __init__(self):
    self.__dict__.update(self._defaults)
    self.state_key = (self.enable_x64, self.debug_nans or self.debug_infs)

  def update(self, name: str, value) -> None:
    """Sets flag `name` to `value`.

    JAX's spellings with the `jax_` prefix (`"jax_enable_x64"`) name the same flags.

    Raises:
      AttributeError: if `name` is not a known flag (the message lists them).
      TypeError: if a boolean flag is given a non-bool value, compilation_cache_max_size a
        non-int, or compilation_cache_dir something that is not a path or None.
      ValueError: for an empty compilation_cache_dir.
    """
    if name.startswith("jax_") and name[4:] in self._defaults:
      name = name[4:]
    if name not in self._defaults:
      raise AttributeError(
          f"Unknown config flag {name!r}. Known flags: {sorted(self._defaults)}.")
    if isinstance(self._defaults[name], bool) and not isinstance(value, (bool, int)):
      raise TypeError(f"Config flag {name!r} expects a bool, got {value!r}.")
    if isinstance(self._defaults[name], bool):
      value = bool(value)
    if name in self._choices and value not in self._choices[name]:
      raise ValueError(f"Config flag {name!r} expects one of {self._choices[name]}, got "
                       f"{value!r}.")
    if name == "compilation_cache_max_size" and (not isinstance(value, int) or
                                                 isinstance(value, bool)):
      raise TypeError(f"Config flag {name!r} expects an int number of bytes (-1: unbounded), "
                      f"got {value!r}.")
    if name == "compilation_cache_dir":
      if value is not None and not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"Config flag {name!r} expects a directory path (str or os.PathLike) "
                        f"or None, got {value!r} of type {type(value).__name__}.")
      if value is not None:
        value = os.fspath(value)
        if not value:
          raise ValueError(f"Config flag {name!r} expects a directory path or None, got an "
                           f"empty path; pass None to turn the persistent cache off.")
    self.__dict__[name] = value
    self.state_key = (self.enable_x64, self.debug_nans or self.debug_infs)

  def __setattr__(self, name, value):
    if name in self._defaults:
      raise AttributeError(f"Use config.update({name!r}, value) to set a flag.")
    object.__setattr__(self, name, value)

  @contextlib.contextmanager
  def _override(self, name, value):
    old = getattr(self, name)
    self.update(name, value)
    try:
      yield
    finally:
      self.update(name, old)


config = Config()


def enable_x64(new_val: bool = True):
  """Context manager that sets `enable_x64` for its body."""
  return config._override("enable_x64", new_val)


def disable_jit(disable: bool = True):
  """Context manager under which `jit` runs its function eagerly (as JAX's `disable_jit`)."""
  return config._override("disable_jit", disable)


def debug_nans(new_val: bool = True):
  """Context manager that sets `debug_nans` for its body (JAX's `debug_nans`)."""
  return config._override("debug_nans", new_val)


def debug_infs(new_val: bool = True):
  """Context manager that sets `debug_infs` for its body (JAX's `debug_infs`)."""
  return config._override("debug_infs", new_val)
