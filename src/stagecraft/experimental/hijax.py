"""`stagecraft.experimental.hijax`: the names of JAX's `jax.experimental.hijax` (types and
primitives that lower to other types and primitives), as stand-ins.

stagecraft does not implement hijax types. The names exist so that a library which defines
hijax classes at import time but uses them only behind an option (flax.nnx's
`flax_hijax_variable`, off by default) imports: subclassing `HiPrimitive` or
`MutableHiType`, `register_hitype`, `aval_method` and `aval_property` work at class
definition; binding a `HiPrimitive` or building a hijax aval raises `NotImplementedError`.
The names that JAX re-exports from elsewhere (`ShapedArray`, `Zero`, `instantiate_zeros`,
`is_undefined_primal`, `control_flow_allowed_effects`) are stagecraft's own.
"""
from __future__ import annotations

from typing import Any, Callable

from stagecraft import core
from stagecraft.core import EffectTypeSet, ShapedArray
from stagecraft.interpreters.ad import Zero, instantiate_zeros, is_undefined_primal

__all__ = ["Zero", "AbstractValue", "AvalQDD", "ShapedArray", "aval_method", "aval_property",
           "AvalMutableQDD", "instantiate_zeros", "is_undefined_primal",
           "control_flow_allowed_effects", "HiPrimitive", "HiPspec", "HiType", "MutableHiType",
           "VJPHiPrimitive", "register_hitype", "AbstractRef", "TransformedRef"]

_MSG = ("stagecraft does not implement JAX's hijax types and primitives "
        "(jax.experimental.hijax); {} is a stand-in.")

#: The abstract values' base type (stagecraft's array avals are `ShapedArray`s).
AbstractValue = ShapedArray

#: Effects allowed inside control flow (a registry libraries add their effect types to).
control_flow_allowed_effects = EffectTypeSet()

#: The hijax types registered with `register_hitype` (recorded; not used by stagecraft).
hitypes: dict[type, Callable] = {}


class _StandIn:
  """A hijax class that can be subclassed but not used."""

  def __init__(self, *args, **kwargs):
    raise NotImplementedError(_MSG.format(type(self).__name__))


class AvalQDD(_StandIn):
  """An aval with its quasi-dynamic data (stand-in)."""


class AvalMutableQDD(_StandIn):
  """An aval with mutable quasi-dynamic data (stand-in)."""


class HiType(_StandIn):
  """A high-level type (stand-in)."""


class MutableHiType(HiType):
  """A mutable high-level type (stand-in)."""


class HiPspec(_StandIn):
  """A partition spec of a high-level type (stand-in)."""


class AbstractRef(_StandIn):
  """The aval of a mutable array reference (stand-in)."""


class TransformedRef(_StandIn):
  """A reference viewed through indexing transforms (stand-in)."""


class HiPrimitive(core.Primitive):
  """A primitive whose rules a subclass gives as methods (stand-in: `bind` raises
  `NotImplementedError`)."""

  def __init__(self, name: str):
    super().__init__(name)

  def bind(self, *args, **params):
    raise NotImplementedError(_MSG.format(f"the primitive {self.name!r}"))


class VJPHiPrimitive(HiPrimitive):
  """A high-level primitive with a custom VJP (stand-in)."""


def register_hitype(cls: type, to_aval: Callable) -> None:
  """Records `to_aval` as the aval function of the hijax type `cls` (stagecraft never traces
  values of `cls`)."""
  hitypes[cls] = to_aval


def aval_method(fun: Callable) -> Callable:
  """Marks `fun` as a method that a hijax type's aval forwards to its values; here the
  method itself."""
  return fun


def aval_property(fget: Callable | None = None, *args: Any, **kwargs: Any) -> property:
  """A property that a hijax type's aval forwards to its values; here a plain property."""
  return property(fget, *args, **kwargs)
