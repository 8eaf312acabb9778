"""`stagecraft.experimental.xla_metadata`: JAX 0.10.2's `set_xla_metadata`, which attaches
key/value metadata (XLA "frontend attributes") to operations.

- `set_xla_metadata(x, **kvs)` tags the operations that produced the leaves of `x`: each leaf
  passes through an `xla_metadata_value` equation (an identity), as in JAX's jaxprs, whose
  lowering gives the op that produced its operand the attributes.
- `with set_xla_metadata(**kvs):` (or `@set_xla_metadata(**kvs)` on a function) tags every
  operation traced inside (`source_info_util.xla_metadata_scope`: the equations carry the
  metadata, and lowering gives the ops producing their results the attributes).

Either way the lowered module has `mhlo.frontend_attributes = {key = "value"}` on those ops
(bools written `true`/`false`), as JAX's, and XLA's HLO `frontend_attributes={...}`.

  >>> import stagecraft as sc, stagecraft.numpy as jnp
  >>> f = sc.jit(lambda x: set_xla_metadata(jnp.sin(x) * 2, tag="block"))
  >>> f(0.0)
  Array(0., dtype=float32, weak_type=True)
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from stagecraft import core, source_info_util, tree_util
from stagecraft.interpreters import ad, batching, lowering

__all__ = ["set_xla_metadata"]

def current_xla_metadata() -> dict[str, Any] | None:
  """The metadata of the active `set_xla_metadata` blocks on this thread (inner keys win;
  a None value removes a key), or None outside any."""
  return dict(source_info_util.current_xla_metadata()) or None


class _XlaMetadataWrapper:
  """What `@set_xla_metadata(**kvs)` makes of a function: calls it inside the metadata
  block; its other attributes are the function's, and those that are callables (a jitted
  function's `lower`, `trace`) run inside the block too (as JAX's)."""

  def __init__(self, f: Callable, ctx: "XlaMetadataContextManager"):
    self._f = f
    self._ctx = ctx
    functools.wraps(f)(self)

  def __call__(self, *args, **kwargs):
    with self._ctx:
      return self._f(*args, **kwargs)

  def __getattr__(self, name):
    attr = getattr(self._f, name)
    if not callable(attr):
      return attr

    @functools.wraps(attr)
    def wrapper(*args, **kwargs):
      with self._ctx:
        return attr(*args, **kwargs)
    return wrapper


class XlaMetadataContextManager(source_info_util.xla_metadata_scope):
  """What `set_xla_metadata(**kvs)` returns: a context manager adding `kvs` to the active
  metadata, or (called on a function) a decorator running it inside."""
  __slots__ = ()

  def __call__(self, f: Callable) -> Callable:
    return _XlaMetadataWrapper(f, self)


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


def _xla_metadata_value_lowering(ctx, x, *, xla_metadata_kvs):
  # NB: an identity whose metadata goes onto the op that produced `x` (none for a function
  # or block argument), as JAX's rule attaches it to the operand's owner.
  lowering.add_frontend_attributes(ctx.fb, x, xla_metadata_kvs)
  return [x]


lowering.register_lowering(xla_metadata_value_p, _xla_metadata_value_lowering)
