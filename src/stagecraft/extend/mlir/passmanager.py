"""`stagecraft.extend.mlir.passmanager`: MLIR's pass manager does not exist in stagecraft (it
lowers to StableHLO text and XLA runs the passes). Any name used from this module raises a
NotImplementedError that says to use `stagecraft.interpreters.mlir.lower_fun`."""
from __future__ import annotations

from stagecraft.interpreters.mlir import mlir_objects_error

__all__: list[str] = []


def __getattr__(name: str):
  if name.startswith("__") and name.endswith("__"):
    raise AttributeError(name)
  raise mlir_objects_error(f"mlir.passmanager.{name}")
