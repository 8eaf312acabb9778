"""`stagecraft.interpreters.pxla`: the name of JAX's module of sharded-execution internals
(`jax.interpreters.pxla`), so that libraries that import it for code paths stagecraft does
not take import (orbax.checkpoint's Pathways handlers). stagecraft's own sharded execution
lives in `stagecraft.runtime.spmd`; none of JAX's internals are provided here, and reading
one raises AttributeError saying so.
"""
from __future__ import annotations


def __getattr__(name: str):
  if name.startswith("__"):
    raise AttributeError(name)
  raise AttributeError(
      f"module 'jax.interpreters.pxla' has no attribute {name!r} on stagecraft: stagecraft "
      f"does not provide JAX's sharded-execution internals (its own are in "
      f"stagecraft.runtime.spmd).")
