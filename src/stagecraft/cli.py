"""The `stagecraft` command: `run` a JAX program on stagecraft, `inspect` a compilation stage.

    python -m stagecraft run script.py [args...]
    python -m stagecraft run -m package.module [args...]

runs `script.py` as `python script.py [args...]` would (a module as `python -m` would) (`sys.argv == [script.py, args...]`,
`__name__ == "__main__"`, the script's directory first on `sys.path`, its exceptions and exit
status passed through), with `import jax` served by stagecraft (`stagecraft.compat.install()`:
`jax.X.Y` is `stagecraft.X.Y`).

    stagecraft inspect MODULE:FUNCTION --args 'f32[8,784]' 'i32[]' [--static 1=3]
        --stage jaxpr|stablehlo|hlo|optimized-hlo|dot|cost

MODULE is imported (it must be importable from the current directory or `sys.path`);
FUNCTION may be a dotted attribute path (`models.MLP.apply`). Each `--args` spec is a dtype
and a shape (`f32[8,784]`, `float32[3]`, `i32[]` for a scalar) and becomes a
`ShapeDtypeStruct` filling, in order, the positional arguments that are not static.
`--static N=VALUE` makes positional argument N static with the Python literal VALUE
(`ast.literal_eval`), folded into the program as a constant.

Stages: `jaxpr` (the traced jaxpr), `stablehlo` and `hlo` (the lowered module),
`optimized-hlo` (the HLO after XLA's optimizations), `dot` (a Graphviz graph of the HLO),
`cost` (XLA's cost analysis of the compiled program, `key: value` lines sorted by key).
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import re
import runpy
import sys
from typing import Any, Sequence

import numpy as np

import stagecraft as sc
from stagecraft import compat, dtypes
from stagecraft.core import ShapeDtypeStruct
from stagecraft.xla_computation import xla_computation

__all__ = ["main", "run_script", "parse_shape_spec", "parse_static", "resolve_function",
           "inspect_stage", "STAGES", "DTYPE_NAMES"]

STAGES = ("jaxpr", "stablehlo", "hlo", "optimized-hlo", "dot", "cost")

_DTYPES = (dtypes.bool_, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8,
           dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.bfloat16, dtypes.float16,
           dtypes.float32, dtypes.float64, dtypes.complex64, dtypes.complex128,
           dtypes.float8_e4m3fn, dtypes.float8_e5m2)

# Short names as printed in avals (f32, i32, ...) and NumPy's long names (float32, ...).
DTYPE_NAMES: dict[str, np.dtype] = {}
for _d in _DTYPES:
  DTYPE_NAMES[dtypes.short_name(_d)] = _d
for _d in _DTYPES:
  DTYPE_NAMES.setdefault(_d.name, _d)
del _d

_SPEC_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\[\s*([0-9,\s]*)\]\s*$")
_SPEC_HINT = "expected a dtype and shape like f32[8,784] or i32[]"


class CliError(Exception):
  """A user error on the command line (reported as `stagecraft inspect: error: ...`)."""


def parse_shape_spec(spec: str):
  """Parses `'f32[8,784]'` (or `'float32[8,784]'`, `'i32[]'`) into a `ShapeDtypeStruct`.

  Args:
    spec: a dtype name (one of `DTYPE_NAMES`) followed by a bracketed, comma-separated list
      of non-negative dimension sizes; `[]` is a scalar.

  Returns:
    `stagecraft.ShapeDtypeStruct(shape, dtype)`.

  Raises:
    CliError: when the spec does not have that form, or names an unknown dtype (the message
      lists the known names).
  """
  m = _SPEC_RE.match(spec)
  if m is None:
    raise CliError(f"{_SPEC_HINT}, got {spec!r}")
  name, dims = m.group(1), m.group(2).strip()
  if name not in DTYPE_NAMES:
    raise CliError(f"unknown dtype {name!r} in shape spec {spec!r}; known dtypes: "
                   f"{', '.join(DTYPE_NAMES)}")
  parts = [p.strip() for p in dims.split(",")] if dims else []
  if dims.endswith(","):
    parts = parts[:-1]  # allow a trailing comma: f32[3,]
  if any(not p for p in parts):
    raise CliError(f"{_SPEC_HINT}, got {spec!r} (empty dimension)")
  return ShapeDtypeStruct(tuple(int(p) for p in parts), DTYPE_NAMES[name])


def parse_static(spec: str) -> tuple[int, Any]:
  """Parses a `--static N=VALUE` spec into `(N, value)`.

  Args:
    spec: `N=VALUE` with N a non-negative integer position and VALUE a Python literal
      (`3`, `2.5`, `'relu'`, `(1, 2)`, `True`, `None`), read with `ast.literal_eval`.

  Raises:
    CliError: when there is no `=`, N is not a non-negative integer, or VALUE is not a
      Python literal.
  """
  pos, eq, value = spec.partition("=")
  if not eq:
    raise CliError(f"--static: expected N=VALUE (e.g. 1=3 or 2='relu'), got {spec!r}")
  pos = pos.strip()
  if not pos.isdigit():
    raise CliError(f"--static: expected a non-negative integer argument position before '=', "
                   f"got {pos!r} in {spec!r}")
  try:
    val = ast.literal_eval(value.strip())
  except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
    raise CliError(f"--static: expected a Python literal after '=' (a number, string, tuple, "
                   f"True/False/None; quote strings: 2=\"'relu'\"), got {value!r} in "
                   f"{spec!r}") from None
  return int(pos), val


def resolve_function(target: str):
  """Imports `MODULE:FUNCTION` (FUNCTION may be a dotted attribute path) and returns it.

  Raises:
    CliError: for a target without `:`, a module that cannot be imported (with the import
      error), a missing attribute (naming what the object has), or a non-callable result.
  """
  mod_name, colon, attr = target.partition(":")
  if not colon or not mod_name or not attr:
    raise CliError(f"expected MODULE:FUNCTION (e.g. mypkg.models:predict), got {target!r}")
  try:
    obj = importlib.import_module(mod_name)
  except ImportError as e:
    raise CliError(f"cannot import module {mod_name!r}: {e} (is it on sys.path / "
                   f"PYTHONPATH, or in the current directory?)") from None
  path = mod_name
  for part in attr.split("."):
    if not hasattr(obj, part):
      public = sorted(n for n in dir(obj) if not n.startswith("_"))
      shown = ", ".join(public[:20]) + (", ..." if len(public) > 20 else "")
      raise CliError(f"{path!r} has no attribute {part!r} (looking up {target!r}); it has: "
                     f"{shown or '(nothing public)'}")
    obj = getattr(obj, part)
    path = f"{path}.{part}"
  if not callable(obj):
    raise CliError(f"{target!r} is a {type(obj).__name__}, not a callable")
  return obj


def _build_args(specs: Sequence[str], statics: Sequence[str]):
  shapes = [parse_shape_spec(s) for s in specs]
  static = {}
  for s in statics:
    pos, val = parse_static(s)
    if pos in static:
      raise CliError(f"--static: argument {pos} given twice")
    static[pos] = val
  n = len(shapes) + len(static)
  out_of_range = sorted(p for p in static if p >= n)
  if out_of_range:
    raise CliError(f"--static: position(s) {out_of_range} out of range: there are {n} "
                   f"positional arguments ({len(shapes)} from --args and {len(static)} static); "
                   f"positions count from 0 across both")
  it = iter(shapes)
  args = [static[i] if i in static else next(it) for i in range(n)]
  return args, tuple(sorted(static))


def inspect_stage(fun, args: Sequence[Any], static_argnums: Sequence[int], stage: str) -> str:
  """Returns the text of `stage` (one of `STAGES`) of `fun` for the positional `args`.

  `args` holds `ShapeDtypeStruct`s (or arrays) and, at `static_argnums`, static values.

  Raises:
    ValueError: for a stage not in `STAGES`; whatever tracing/lowering raises.
  """
  static_argnums = tuple(static_argnums)
  if stage == "dot":
    return xla_computation(fun, static_argnums=static_argnums)(*args).as_hlo_dot_graph()
  jitted = sc.jit(fun, static_argnums=static_argnums)
  if stage == "jaxpr":
    return str(jitted.trace(*args).jaxpr)
  if stage not in STAGES:
    raise ValueError(f"unknown stage {stage!r}; expected one of {list(STAGES)}")
  lowered = jitted.lower(*args)
  if stage in ("stablehlo", "hlo"):
    return lowered.as_text(stage)
  compiled = lowered.compile()
  if stage == "optimized-hlo":
    return compiled.as_text()
  cost = compiled.cost_analysis() or {}
  return "\n".join(f"{k}: {cost[k]}" for k in sorted(cost))


def run_script(path: str, args: Sequence[str] = ()) -> None:
  """Runs the Python file `path` as `python path args...` would, with `jax` served by
  stagecraft (`stagecraft.compat.install()`, which stays installed afterwards).

  The script runs as `__main__` (`runpy.run_path`) with `sys.argv == [path, *args]` and the
  script's directory first on `sys.path`; both are restored when it returns or raises.
  `path` may also be a directory or zip file with a `__main__.py`, as for `python`.

  Raises:
    FileNotFoundError: if `path` does not exist.
    Whatever the script raises, `SystemExit` (its `sys.exit(status)`) included.
  """
  if not os.path.exists(path):
    raise FileNotFoundError(2, f"can't open file {os.path.abspath(path)!r}: no such file or "
                               f"directory", path)
  compat.expect_program_import()
  compat.install()
  old_argv, old_path0 = sys.argv, sys.path[0] if sys.path else None
  sys.argv = [path, *args]
  script_dir = os.path.dirname(os.path.realpath(path)) if os.path.isfile(path) else path
  if sys.path:
    sys.path[0] = script_dir   # as `python script.py` does (`python -m` put the cwd there)
  else:
    sys.path.insert(0, script_dir)
  try:
    # NB: an absolute path, so the script's `__file__` and tracebacks read as under python.
    runpy.run_path(os.path.abspath(path), run_name="__main__")
  finally:
    sys.argv = old_argv
    if old_path0 is not None and sys.path and sys.path[0] == script_dir:
      sys.path[0] = old_path0


class NoModuleError(ImportError):
  """`run -m NAME` of a module that cannot be found."""


def run_module(name: str, args: Sequence[str] = ()) -> None:
  """Runs the module `name` as `python -m name args...` would (`examples.mnist_classifier`,
  `pytest`), with `jax` served by stagecraft (`stagecraft.compat.install()`, which stays
  installed afterwards).

  The module runs as `__main__` (`runpy.run_module`; a package runs its `__main__`
  submodule) with `sys.argv == [its file, *args]` and the current directory first on
  `sys.path`; both are restored when it returns or raises.

  Raises:
    NoModuleError: if the module cannot be found (Python's "No module named ..."). Whatever
      the module raises, `SystemExit` (its `sys.exit(status)`) included.
  """
  compat.expect_program_import()
  compat.install()
  old_argv, old_path = sys.argv, list(sys.path)
  sys.argv = [name, *args]   # (runpy puts the module's file there)
  cwd = os.getcwd()
  if sys.path:
    sys.path[0] = cwd   # as `python -m` does
  else:
    sys.path.insert(0, cwd)
  try:
    try:
      found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
      found = False
    if not found:
      raise NoModuleError(f"No module named {name}")
    runpy.run_module(name, run_name="__main__", alter_sys=True)
  finally:
    sys.argv = old_argv
    sys.path[:] = old_path


# The runner's own source files: this module and runpy (its code may say "<frozen runpy>").
_RUNNER_FILES = {os.path.normcase(os.path.abspath(f)) for f in (__file__, runpy.__file__)}
_RUNNER_FILES.add(runpy.run_path.__code__.co_filename)


def _is_runner_frame(tb) -> bool:
  name = tb.tb_frame.f_code.co_filename
  return name in _RUNNER_FILES or os.path.normcase(os.path.abspath(name)) in _RUNNER_FILES


def _script_traceback(tb):
  """`tb` without its leading frames of the runner (this module and runpy), so that it
  starts at the script, as `python script.py` prints it."""
  while tb is not None and _is_runner_frame(tb):
    tb = tb.tb_next
  return tb


def _run_main(parser: argparse.ArgumentParser, script: str | None, args: Sequence[str],
              module: str | None = None) -> int:
  if module is None and not os.path.exists(script):   # status 2, as `python missing.py`
    parser.error(f"can't open file {os.path.abspath(script)!r}: no such file or directory")
  try:
    if module is not None:
      run_module(module, args)
    else:
      run_script(script, args)
  except NoModuleError as e:   # status 1, as `python -m missing`
    sys.stderr.write(f"{sys.executable}: {e}\n")
    return 1
  except (SystemExit, KeyboardInterrupt):
    raise
  except BaseException as e:   # an uncaught exception of the script: print it, status 1
    tb = _script_traceback(e.__traceback__)
    sys.excepthook(type(e), e.with_traceback(tb), tb)   # NB: the hook prints e.__traceback__
    return 1
  return 0


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser,
                       argparse.ArgumentParser]:
  p = argparse.ArgumentParser(prog="stagecraft",
                              description="stagecraft command-line tools.")
  sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
  run = sub.add_parser(
      "run", help="run a JAX program with `import jax` served by stagecraft",
      description="Run SCRIPT as `python SCRIPT ARGS...` would, with `import jax` (and "
                  "`jax.numpy`, `jax.lax`, ...) served by stagecraft.",
      epilog="example: python -m stagecraft run train.py --steps 100")
  run.add_argument("-m", dest="module", metavar="MODULE",
                   help="run library module MODULE as a script, as `python -m MODULE`")
  run.add_argument("script", metavar="SCRIPT", nargs="?",
                   help="the Python file to run")
  run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="arguments passed to the script (its sys.argv[1:])")
  ins = sub.add_parser(
      "inspect", help="print one compilation stage of a function",
      description="Trace, lower or compile MODULE:FUNCTION for argument shapes and print "
                  "one stage.",
      epilog="example: stagecraft inspect mymodel:predict --args 'f32[8,784]' 'i32[]' "
             "--static 2=3 --stage stablehlo")
  ins.add_argument("target", metavar="MODULE:FUNCTION",
                   help="module to import and function in it (dotted path allowed)")
  ins.add_argument("--args", nargs="*", default=[], metavar="SPEC",
                   help="shape specs of the non-static positional arguments, in order: "
                        "f32[8,784], i32[] (scalar), float32[3]")
  ins.add_argument("--static", action="append", default=[], metavar="N=VALUE",
                   help="positional argument N is static with the Python literal VALUE "
                        "(repeatable)")
  ins.add_argument("--stage", choices=STAGES, default="jaxpr",
                   help="what to print (default: jaxpr)")
  ins.add_argument("--x64", action="store_true",
                   help="enable 64-bit types (else f64/i64 specs are narrowed to 32 bits)")
  return p, ins, run


def main(argv: Sequence[str] | None = None) -> int:
  """Entry point of the `stagecraft` command; returns the exit status.

  `run SCRIPT ARGS...`: the status is the script's (`sys.exit(n)` raises `SystemExit(n)`
  through this function, as it would in `python SCRIPT`); an uncaught exception of the
  script is printed by `sys.excepthook` with its traceback starting at the script, and the
  status is 1. A missing SCRIPT is a usage error (status 2).

  `inspect`: usage errors (bad shape spec, unknown dtype, module not importable, missing
  function, bad `--static`, unknown stage) print `stagecraft inspect: error: ...` to stderr
  and exit with status 2 (`SystemExit`), as argparse does. When the function itself fails to
  trace, lower or compile, the exception is printed to stderr and the status is 1.
  """
  parser, inspect_parser, run_parser = _parser()
  argv = list(sys.argv[1:] if argv is None else argv)
  if argv[:2] == ["run", "-m"] and len(argv) > 2:   # `run -m MODULE ARGS...`: ARGS verbatim
    return _run_main(run_parser, None, argv[3:], module=argv[2])
  ns = parser.parse_args(argv)
  if ns.command == "run":
    if ns.script is None:
      run_parser.error("the following arguments are required: SCRIPT (or -m MODULE)")
    # The script's arguments verbatim (argparse would drop a `--` among them).
    args = argv[2:] if argv[:2] == ["run", ns.script] else ns.args
    return _run_main(run_parser, ns.script, args)
  if os.getcwd() not in sys.path and "" not in sys.path:
    sys.path.insert(0, os.getcwd())  # as `python -m` does: import modules from here
  try:
    fun = resolve_function(ns.target)
    args, static_argnums = _build_args(ns.args, ns.static)
  except CliError as e:
    inspect_parser.error(str(e))
  try:
    with sc.enable_x64(ns.x64):
      text = inspect_stage(fun, args, static_argnums, ns.stage)
  except Exception as e:  # the user's function failed to trace/lower/compile
    sys.stderr.write(f"stagecraft inspect: error: stage {ns.stage!r} of {ns.target} failed for "
                     f"arguments {args!r}: {type(e).__name__}: {e}\n")
    return 1
  sys.stdout.write(text if text.endswith("\n") else text + "\n")
  return 0

