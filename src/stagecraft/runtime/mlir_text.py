"""StableHLO text as JAX prints it (`Lowered.as_text()`): stagecraft's lowering writes modules
as plain text (generic op forms, numbered values); this module parses that text with
jaxlib's MLIR bindings and prints it back in MLIR's custom assembly, as JAX's `as_text` does
(`%c = stablehlo.constant dense<2>`, `stablehlo.dot_general %a, %b, contracting_dims = ...`),
with JAX's `jax.result_info` attribute on each result of `main`. Printing only: the module
compiled is the text the lowering wrote.
"""
from __future__ import annotations

import re
import threading
from typing import Sequence

__all__ = ["pretty", "strip_locations"]

_local = threading.local()


def context():
  """An MLIR context with the dialects of stagecraft's modules (one per thread)."""
  ctx = getattr(_local, "ctx", None)
  if ctx is None:
    # NB: jaxlib's MLIR bindings and dialects, imported on first use (start-up time).
    from jaxlib.mlir import ir   # noqa: PLC0415
    from jaxlib.mlir._mlir_libs import _jax_mlir_ext   # noqa: PLC0415
    from jaxlib.mlir.dialects import chlo, sdy, stablehlo   # noqa: PLC0415
    ctx = ir.Context()
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    sdy.register_dialect(ctx)
    ctx.allow_unregistered_dialects = True
    _local.ctx = ctx
  return ctx


def pretty(text: str, result_infos: Sequence[str] | None = None,
           debug_info: bool = False) -> str:
  """`text` (a StableHLO module) printed in MLIR's custom assembly, as JAX prints modules.

  Args:
    text: the module text.
    result_infos: one string per result of `main` (`"result"`, `"result['a']"`), set as its
      `jax.result_info` attribute; None leaves the results' attributes as they are.
    debug_info: print the ops' locations too (`loc(...)`, aliased at the end, as JAX's
      `as_text(debug_info=True)`).

  Returns:
    The text; `text` itself where jaxlib's parser does not take it (a module made for a
    newer StableHLO than this jaxlib reads), so printing never fails.
  """
  from jaxlib.mlir import ir   # noqa: PLC0415
  try:
    with context():
      module = ir.Module.parse(text)
      if result_infos is not None:
        _set_result_infos(module, result_infos)
      return module.operation.get_asm(enable_debug_info=debug_info)
  except Exception:  # noqa: BLE001 (an unparsable module prints as written)
    return text


def _set_result_infos(module, result_infos: Sequence[str]) -> None:
  from jaxlib.mlir import ir   # noqa: PLC0415
  for op in module.body.operations:
    if op.operation.name != "func.func" or ir.StringAttr(
        op.attributes["sym_name"]).value != "main":
      continue
    n = len(ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value).results)
    if n != len(result_infos):
      return
    old = op.attributes["res_attrs"] if "res_attrs" in op.attributes else None
    dicts = []
    for i, info in enumerate(result_infos):
      entries = {}
      if old is not None:
        prev = ir.DictAttr(ir.ArrayAttr(old)[i])
        entries = {prev[j].name: prev[j].attr for j in range(len(prev))}
      entries["jax.result_info"] = ir.StringAttr.get(info)
      dicts.append(ir.DictAttr.get(entries))
    op.attributes["res_attrs"] = ir.ArrayAttr.get(dicts)
    return


def strip_locations(text: str) -> str:
  """`text` (a module as stagecraft's lowering writes it) without its ` loc(...)`
  locations: what JAX's `as_text()` shows, and what the persistent cache's key reads.

  Two passes of regular expressions (linear): the short locations (`loc(unknown)`, a name
  alone: arguments, block arguments), then the nested ones, which the lowering writes only
  at the end of a line (an op's, a function's)."""
  return _NESTED_LOC.sub("", _SHORT_LOC.sub("", text))


_SHORT_LOC = re.compile(r' loc\((?:unknown|"(?:[^"\\\n]|\\.)*")\)')
_NESTED_LOC = re.compile(r' loc\("(?:[^"\\\n]|\\.)*"\(.*\)$', re.M)
