"""`stagecraft.extend.mlir.ir`: MLIR's Python IR classes do not exist in stagecraft (it lowers
to StableHLO text). Any name used from this module raises a NotImplementedError that says to
write the lowering rule with `stagecraft.interpreters.mlir.lower_fun`."""
from __future__ import annotations

from stagecraft.interpreters.mlir import mlir_objects_error

__all__: list[str] = []


def __getattr__(name: str):
  if name.startswith("__") and name.endswith("__"):
    raise AttributeError(name)
  raise mlir_objects_error(f"mlir.ir.{name}")
