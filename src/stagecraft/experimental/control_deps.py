"""`stagecraft.experimental.control_deps`: JAX 0.10.2's `jax.experimental.control_deps`.

An ordering hint between two values for XLA: one side-effecting, result-less FFI custom call
named ``control_dep`` whose operands are the two values (an `ffi_call` equation, printed in
jaxprs as JAX's). XLA's CPU compiler accepts the call (it has no result and no handler is run).
"""
from __future__ import annotations

from typing import Any, Sequence

from stagecraft import ffi as _ffi

__all__ = ["control_dep", "schedule"]


def control_dep(src: Any, dst: Any) -> Any:
  """Ask XLA to schedule the computation of `src` before that of `dst`.

  Args:
    src, dst: arrays (any shapes and dtypes) or traced values.

  Returns:
    An empty tuple (the custom call has no results), as JAX's.

  Binds one `ffi_call` equation (``target_name=control_dep``, ``has_side_effect=True``,
  ``result_avals=()``) on the two values; errors are `ffi_call`'s for non-array operands.
  """
  return _ffi.ffi_call("control_dep", (), has_side_effect=True)(src, dst)


def schedule(ops: Sequence[Any]) -> None:
  """Order the values of `ops` (a sequence of arrays): `control_dep(ops[i], ops[i + 1])` for
  each consecutive pair, so ``schedule([a, b, c])`` adds a -> b and b -> c. Returns None."""
  for src, dst in zip(ops[:-1], ops[1:]):
    control_dep(src, dst)
