"""Dumping programs to files, as JAX 0.10.2's `jax_dump_ir_to` / `jax_dump_ir_modes` flags
(environment variables `JAX_DUMP_IR_TO`, `JAX_DUMP_IR_MODES`).

With `jax_dump_ir_to` a directory (created if missing; `sponge`: the directory in
`TEST_UNDECLARED_OUTPUTS_DIR`), each mode in the comma-separated `jax_dump_ir_modes` writes:

- `stablehlo` (the default): each module compiled, `jax_ir0000_jit_f_compile.mlir`
  (`dump_module`, called where programs are compiled), printed as JAX prints modules, with
  the ops' locations unless `jax_include_debug_info_in_dumps` is off (stagecraft's text
  has no `jax.result_info` attributes on the results);
- `jaxpr`: each jaxpr lowered for a jit, `jax_000000_f.jaxpr.txt` (its printed form);
- `eqn_count_pprof`: for the same jaxprs, `jax_000000_f.eqn_count_pprof`, a gzip-compressed
  pprof profile counting equations per Python stack (`pprof -top file` lists the lines of
  code that stage the most equations: what makes a trace and its compile slow).

JAX's `jaxpr_html` mode is not implemented (the other modes are still written).

Layer 2 (core): pjit dumps jaxprs, the runtime's compile dumps modules.
"""
from __future__ import annotations

import collections
import gzip
import itertools
import json
import logging
import os
import pathlib
import re
import threading
from typing import Any

from stagecraft import core
from stagecraft.config import config
from stagecraft.runtime import mlir_text

__all__ = ["dump_module", "dump_jaxpr", "pprof_equation_profile"]

_module_ids = itertools.count()
_jaxpr_ids = itertools.count()
_lock = threading.Lock()


def _dump_dir() -> pathlib.Path | None:
  """The directory to dump into (made if missing), or None when dumping is off.

  Raises:
    ValueError: for `sponge` without `TEST_UNDECLARED_OUTPUTS_DIR` (JAX's message)."""
  out = config.dump_ir_to
  if not out:
    return None
  if out == "sponge":
    out = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", "")
    if not out:
      raise ValueError("Got output directory (e.g., via JAX_DUMP_IR_TO) 'sponge' but "
                       "TEST_UNDECLARED_OUTPUTS_DIR is not defined.")
  path = pathlib.Path(out)
  path.mkdir(parents=True, exist_ok=True)
  return path


def _modes() -> list[str]:
  return str(config.dump_ir_modes).split(",")


def dump_module(text: str, module_name: str, stage: str = "compile") -> str | None:
  """Writes the StableHLO module `text` (named `module_name`, e.g. `jit_f`) to
  `jax_ir<id>_<module_name>_<stage>.mlir` when `jax_dump_ir_to` is set and its modes
  include `stablehlo`; returns the file's name, or None when nothing was written."""
  out = _dump_dir()
  if out is None or "stablehlo" not in _modes():
    return None
  with _lock:
    n = next(_module_ids)
  safe = re.sub(r"[^\w.)( -]", "", module_name)
  name = f"jax_ir{n:04d}_{safe}_{stage}.mlir"
  debug = str(config.include_debug_info_in_dumps).lower() not in ("false", "0")
  (out / name).write_text(mlir_text.pretty(text, None, debug_info=debug))
  return name


def dump_jaxpr(fun_name: str, jaxpr: Any) -> str | None:
  """Writes `jaxpr` (the program lowered for function `fun_name`) in the `jaxpr` and
  `eqn_count_pprof` modes of `jax_dump_ir_modes` when `jax_dump_ir_to` is set; returns
  `fun_name` when something was written, else None."""
  out = _dump_dir()
  if out is None:
    return None
  modes = _modes()
  if "jaxpr" not in modes and "eqn_count_pprof" not in modes:
    return None
  with _lock:
    n = next(_jaxpr_ids)
  # NB: as JAX's, on the root logger through `logging.log`, which configures Python's
  # logging (`basicConfig`) when nothing has: later log lines then read
  # `WARNING:<logger>:<message>`, as under JAX
  log = logging
  if "jaxpr" in modes:
    log.info("Dumping jaxpr for %s to %s.", fun_name, out)
    (out / f"jax_{n:06d}_{fun_name}.jaxpr.txt").write_text(str(jaxpr))
  if "eqn_count_pprof" in modes:
    log.info("Dumping eqn count pprof for %s to %s.", fun_name, out)
    (out / f"jax_{n:06d}_{fun_name}.eqn_count_pprof").write_bytes(
        pprof_equation_profile(jaxpr))
  return fun_name


def _eqns(jaxpr: Any):
  """Every equation of `jaxpr` and of the jaxprs in its equations' params."""
  for eqn in jaxpr.eqns:
    yield eqn
    for v in eqn.params.values():
      for sub in (v if isinstance(v, (tuple, list)) else (v,)):
        inner = getattr(sub, "jaxpr", sub)
        if isinstance(inner, core.Jaxpr):
          yield from _eqns(inner)


def _frames(source_info: Any) -> list:
  """The user frames (innermost first) of an equation's source info."""
  frame = core.source_frame(source_info)
  return [] if frame is None else [frame, *frame.parents]


def pprof_equation_profile(jaxpr: Any) -> bytes:
  """A gzip-compressed pprof `Profile` protocol buffer (github.com/google/pprof,
  proto/profile.proto) counting `jaxpr`'s equations, those of the jaxprs inside included,
  per Python stack that staged them and per primitive (label `primitive`); sample type
  `equations`, unit `count`, as JAX's `pprof_equation_profile`.

  Args:
    jaxpr: a Jaxpr (or ClosedJaxpr).
  Returns:
    The profile's bytes (`pprof -top` reads them).
  """
  from jaxlib import _jax   # NB: the runtime's JSON-to-pprof encoder (jaxlib)
  jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
  strings: dict[str, int] = collections.defaultdict(itertools.count(1).__next__)
  strings[""] = 0
  funcs: dict = collections.defaultdict(itertools.count(1).__next__)
  locs: dict = collections.defaultdict(itertools.count(1).__next__)
  primitive = strings["primitive"]
  counts = collections.Counter(
      (tuple((f.code, f.lasti) for f in _frames(e.source_info)), e.primitive.name)
      for e in _eqns(jaxpr))
  samples, lines = [], {}
  for (frames, prim), count in counts.items():
    ids = []
    for code, lasti in frames:
      ids.append(locs[(code, lasti)])
      lines[(code, lasti)] = core.UserFrame((code, lasti)).position()[1]
    samples.append({"location_id": ids, "value": [count],
                    "label": [{"key": primitive, "str": strings[prim]}]})
  locations = [{"id": i, "line": [{"function_id": funcs[code], "line": lines[(code, lasti)]}]}
               for (code, lasti), i in locs.items()]
  functions = []
  for code, i in funcs.items():
    filename = code.co_filename
    pattern = config.hlo_source_file_canonicalization_regex
    if pattern:
      filename = re.sub(pattern, "", filename)
    name = f"{filename.removesuffix('.py').replace('/', '.')}.{code.co_qualname}"
    functions.append({"id": i, "name": strings[name], "filename": strings[filename],
                      "start_line": code.co_firstlineno})
  debug = getattr(jaxpr, "debug_info", None)
  comment = (getattr(debug, "func_src_info", None) or getattr(debug, "func_name", "")
             or "")   # "f at file.py:12", as JAX's
  sample_type, unit, comment_id = strings["equations"], strings["count"], strings[comment]
  text = json.dumps({"string_table": list(strings), "location": locations,
                     "function": functions,
                     "sample_type": [{"type": sample_type, "unit": unit}],
                     "sample": samples, "comment": comment_id})
  return gzip.compress(_jax.json_to_pprof_profile(text))
