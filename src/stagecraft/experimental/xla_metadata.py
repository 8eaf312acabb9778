"""`stagecraft.experimental.xla_metadata`: JAX 0.10.2's `set_xla_metadata`, which attaches
key/value metadata (XLA "frontend attributes") to operations.

- `set_xla_metadata(x, **kvs)` tags the operations that produced the leaves of `x`: each leaf
  passes through an `xla_metadata_value` equation (an identity), as in JAX's jaxprs.
- `with set_xla_metadata(**kvs):` (or `@set_xla_metadata(**kvs)` on a function) tags every
  operation traced inside.

The metadata is kept where JAX keeps it (the equation's params; the active context) and the
values, jaxprs, derivatives and batching are JAX's, but stagecraft's text lowering does not
write `mhlo.frontend_attributes` onto the ops (docs/differences.md): XLA's compiled program
is the same, without the annotations that some XLA passes and profilers read.

  >>> import stagecraft as sc, stagecraft.numpy as jnp
  >>> f = sc.jit(lambda x: set_xla_metadata(jnp.sin(x) * 2, tag="block"))
  >>> f(0.0)
  Array(0., dtype=float32, weak_type=True)
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable

from stagecraft import core, tree_util
from stagecraft.interpreters import ad, batching, lowering

__all__ = ["set_xla_metadata"]

_state = threading.local()


def current_xla_metadata() -> dict[str, Any] | None:
  """The metadata of the active `set_xla_metadata` blocks on this thread (inner keys win;
  a None value removes a key), or None outside any."""
  return getattr(_state, "metadata", None)


class XlaMetadataContextManager:
  """What `set_xla_metadata(**kvs)` returns: a context manager adding `kvs` to the active
  metadata, or (called on a function) a decorator running it inside."""
  __slots__ = ("prev", "updates")

  def __init__(self, updates: dict[str, Any]):
    self.updates = updates

  def __enter__(self):
    if not self.updates:
      return
    self.prev = current_xla_metadata()
    merged = {**(self.prev or {}), **self.updates}
    _state.metadata = {k: v for k, v in merged.items() if v is not None}

  def __exit__(self, exc_type, exc_value, traceback):
    if not self.updates:
      return
    _state.metadata = self.prev

  def __call__(self, f: Callable) -> Callable:
    @functools.wraps(f)
    def wrapped(*args, **kwargs):
      with self:
        return f(*args, **kwargs)
    return wrapped


def set_xla_metadata(x: Any = None, **kwargs: Any) -> Any:
  """Attaches XLA metadata (`key=value`: str, int, float or bool values) to operations.

  Args:
    x: a pytree of arrays whose producing operations are tagged; None to get a context
      manager / decorator tagging every operation traced inside it.
    **kwargs: the metadata.

  Returns:
    `x` (each leaf through an identity `xla_metadata_value` equation: same shape, dtype and
    values), or an `XlaMetadataContextManager` when `x` is None.
  """
  if x is None:
    return XlaMetadataContextManager(kwargs)
  kvs = tuple(sorted(kwargs.items()))
  return tree_util.tree_map(lambda v: xla_metadata_value_p.bind(v, xla_metadata_kvs=kvs), x)


xla_metadata_value_p = core.Primitive("xla_metadata_value")
# NB: no impl of its own: the generic one (a compiled identity) returns a new Array, as
# JAX's (a Python scalar becomes a weakly typed Array).
xla_metadata_value_p.def_abstract_eval(lambda aval, *, xla_metadata_kvs: aval)
batching.defvectorized(xla_metadata_value_p)
ad.deflinear2(xla_metadata_value_p, lambda ct, _, **params: [ct])
# NB: an identity in the lowered text (the metadata is not written as frontend attributes).
lowering.register_lowering(xla_metadata_value_p, lambda ctx, x, **params: [x])
