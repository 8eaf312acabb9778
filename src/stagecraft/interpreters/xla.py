"""`stagecraft.interpreters.xla`: JAX 0.10.2's `jax.interpreters.xla` names, which libraries
defining their own primitives import:

- `apply_primitive(prim, *args, **params)`: the generic eager implementation (a primitive's
  one-equation program, compiled once per types and params and cached), as in
  `my_p.def_impl(functools.partial(xla.apply_primitive, my_p))`;
- `canonicalize_dtype_handlers`: `{type: handler}`, the values of other types a program
  takes as arguments are converted with before they are put on the device (JAX's
  `dtypes.canonicalize_value_handlers`; register a type here together with
  `core.pytype_aval_mappings`);
- `Backend`: the runtime's client class (jaxlib's `Client`).

Layer 8 (a facade over the runtime's dispatch).
"""
from __future__ import annotations

from typing import Any

from jaxlib import _jax

from stagecraft import core, dtypes
from stagecraft.runtime import dispatch

__all__ = ["apply_primitive", "canonicalize_dtype_handlers", "Backend"]

canonicalize_dtype_handlers = dtypes.canonicalize_value_handlers
Backend = _jax.Client


def apply_primitive(prim: core.Primitive, *args: Any, **params: Any) -> Any:
  """Runs `prim` on concrete `args` now: its abstract evaluation and lowering rule make a
  one-equation program, compiled once per argument types and params (JAX's
  `xla.apply_primitive`). Returns its result (a list for a multiple-results primitive).

  Raises:
    NotImplementedError: when `prim` has no lowering rule (`mlir.register_lowering`)."""
  return dispatch.apply_primitive(prim, args, params)
