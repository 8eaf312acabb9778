"""`stagecraft.extend.mlir.dialects`: MLIR dialect bindings (`stablehlo`, `func`, `arith`, ...)
do not exist in stagecraft (it lowers to StableHLO text). `from ... import stablehlo` gives a
stand-in whose every use raises a NotImplementedError that says to write the lowering rule
with `stagecraft.interpreters.mlir.lower_fun`."""
from __future__ import annotations

from stagecraft.interpreters.mlir import MlirObjectsUnavailable

__all__: list[str] = []


def __getattr__(name: str):
  if name.startswith("__") and name.endswith("__"):
    raise AttributeError(name)
  return MlirObjectsUnavailable(f"mlir.dialects.{name}")
