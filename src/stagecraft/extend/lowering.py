"""`stagecraft.extend.lowering` (JAX's `jax.extend.lowering`): the lowering rule context.
stagecraft lowers to StableHLO text, so JAX's MLIR context (`JaxIrContext`) and dialect
registry (`upstream_dialects`) stand for nothing here: any use raises a NotImplementedError
that says to use `stagecraft.interpreters.mlir.lower_fun`."""
from __future__ import annotations

from stagecraft.interpreters.lowering import LoweringRuleContext
from stagecraft.interpreters.mlir import MlirObjectsUnavailable

__all__ = ["JaxIrContext", "LoweringRuleContext", "upstream_dialects"]

#: JAX's MLIR context class: not available (text lowering).
JaxIrContext = MlirObjectsUnavailable("lowering.JaxIrContext")
#: JAX's MLIR dialect registry: not available (text lowering).
upstream_dialects = MlirObjectsUnavailable("lowering.upstream_dialects")
