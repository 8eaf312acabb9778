"""`stagecraft.experimental.serialize_executable`: JAX's functions for saving a compiled
executable and loading it in another process, over `Compiled.serialize()` and
`stages.deserialize_compiled`.

  >>> import stagecraft as sc, stagecraft.numpy as jnp
  >>> compiled = sc.jit(lambda x: x * 2).lower(jnp.ones(3)).compile()
  >>> payload, in_tree, out_tree = serialize(compiled)
  >>> deserialize_and_load(payload, in_tree, out_tree)(jnp.ones(3))
  Array([2., 2., 2.], dtype=float32)

stagecraft's bytes carry the trees too (JAX's do not, hence the triple): they are in
stagecraft's own checksummed format (`runtime.cache`), not pickle, and load with the same
jaxlib only.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stagecraft import stages
from stagecraft.runtime import cache

__all__ = ["serialize", "deserialize_and_load"]


def _same_platform(a: str, b: str) -> bool:
  """Whether two platform names mean the same backend ("gpu" is "cuda" or "rocm")."""
  a, b = a.lower(), b.lower()
  return a == b or {a, b} in ({"gpu", "cuda"}, {"gpu", "rocm"})


def serialize(compiled: stages.Compiled) -> tuple[bytes, Any, Any]:
  """`(payload, in_tree, out_tree)` of a `Compiled`: the bytes of `compiled.serialize()` and
  its argument tree (of `(args, kwargs)`) and output tree, which `deserialize_and_load`
  takes back.

  Raises:
    TypeError: `compiled` is not a `Compiled` (from `jit(f).lower(...).compile()`).
    ValueError: as `Compiled.serialize` (a one-device program placed on a non-default
      device)."""
  if not isinstance(compiled, stages.Compiled):
    raise TypeError(f"serialize: expected a Compiled (jit(f).lower(...).compile()), got "
                    f"{type(compiled).__name__}.")
  return compiled.serialize(), compiled.in_tree, compiled.out_tree


def deserialize_and_load(serialized: bytes, in_tree: Any, out_tree: Any,
                         backend: str | Any | None = None,
                         execution_devices: Sequence[Any] | None = None) -> stages.Compiled:
  """The `Compiled` that `serialize` saved, loaded onto this process's devices.

  Args:
    serialized: the payload `serialize` returned.
    in_tree, out_tree: the trees `serialize` returned (None: the ones the bytes hold).
    backend: None, a platform name ("cpu") or a client: it must be the platform the program
      was compiled for.
    execution_devices: None, or the devices the program was compiled for (stagecraft loads an
      executable onto those devices only).

  Raises:
    ValueError: bytes that are not a serialized Compiled or are corrupt (as
      `deserialize_compiled`); another backend; other execution devices.
  """
  header = cache.header_of(serialized)
  platform = header.get("platform")
  if backend is not None:
    name = backend if isinstance(backend, str) else getattr(backend, "platform", None)
    if name is None or not _same_platform(str(name), str(platform)):
      raise ValueError(f"deserialize_and_load: the executable was compiled for {platform!r}, "
                       f"not for backend {backend!r}; pass backend=None.")
  compiled = stages.deserialize_compiled(serialized, in_tree, out_tree)
  if execution_devices is not None:
    meta = header.get("meta") or {}
    recorded = meta.get("devices") or header.get("devices") or []
    given = [getattr(d, "id", d) for d in execution_devices]
    if list(given) != list(recorded):
      raise ValueError(f"deserialize_and_load: the executable was compiled for devices "
                       f"{list(recorded)}; stagecraft loads it onto those only, got "
                       f"execution_devices with ids {given}. Compile for the devices you "
                       f"want to run on, or pass execution_devices=None.")
  return compiled
