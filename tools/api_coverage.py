"""How much of JAX 0.10.2's public API stagecraft provides, counted by calls that run.

Run: python -m tools.api_coverage [--missing] [--only NAMESPACE ...] [--against jax]

For each JAX namespace of `NAMESPACES` (and each distribution submodule of
`jax.scipy.stats`: `jax.scipy.stats.norm`, `.beta`, ...) the tool lists JAX's public callables
and counts a name as provided only when its smoke call runs on the matching stagecraft module
(`jax.scipy.special` -> `stagecraft.scipy.special`): a small, real call with valid arguments,
run eagerly, whose array results are waited for. The smoke calls are the table `SMOKE` of
`tools/api_smoke.py`; a name without an entry gets the generic call `api_smoke.generic`
(one, two or three float32 arrays, then int32 arrays, as an elementwise function takes them).
A name whose call raises (AttributeError where stagecraft lacks it) counts as missing, and
`--missing` prints the exception type and the start of its message.

A "public callable" is a public, callable attribute of the JAX module that is not a module.
Classes count only in the `jax.scipy.*` namespaces, where they are the API
(`gaussian_kde`, `RegularGridInterpolator`, `Rotation`, `Slerp`, `OptimizeResults`);
elsewhere they are dtypes, enums and records of dimension numbers, which are not counted,
and neither are type aliases (`lax.PrecisionLike`, `tree_util.KeyPath`).

`--against jax` runs the same calls on JAX itself: every one must pass there (a check of
the table, not of stagecraft).

Speed: most of the time goes to XLA compiling each name's small programs (about 40 s of CPU
for all names). Compiled executables are kept in stagecraft's persistent compilation cache
in `DEFAULT_CACHE_DIR` (its key is the program text, options and versions, so an entry never
stands for another program), which brings a repeated run down to a few seconds; `--no-cache`
measures a cold run. The command line also turns XLA's backend optimizations off
(`FAST_COMPILE_FLAGS`, added to XLA_FLAGS before the runtime starts): the smoke calls need
programs that run, not fast ones, and that saves about a sixth of the compile time.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import os
import signal
import sys
import tempfile
import threading
import time
import types
import warnings

from tools import api_smoke

NAMESPACES = [
    "jax.numpy", "jax.numpy.linalg", "jax.numpy.fft", "jax.lax", "jax.lax.linalg", "jax.nn",
    "jax.nn.initializers", "jax.random", "jax.image", "jax.ops", "jax.scipy.special",
    "jax.scipy.linalg", "jax.scipy.stats", "jax.scipy.signal", "jax.scipy.fft",
    "jax.scipy.optimize", "jax.scipy.integrate", "jax.scipy.interpolate",
    "jax.scipy.ndimage", "jax.scipy.spatial.transform", "jax.scipy.cluster.vq", "jax.tree",
    "jax.tree_util", "jax.flatten_util"]

# A smoke call that runs longer than this (seconds) counts as missing (TimeoutError).
TIMEOUT_S = 20

# XLA flags for the command line (see the module docstring).
FAST_COMPILE_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"

# stagecraft's persistent compilation cache while the smoke calls run, and its size bound.
DEFAULT_CACHE_DIR = os.path.join(tempfile.gettempdir(), "stagecraft-api-coverage-cache")
CACHE_MAX_BYTES = 128 << 20


def namespaces() -> list[str]:
  """`NAMESPACES` with the distribution submodules of jax.scipy.stats after it."""
  stats = importlib.import_module("jax.scipy.stats")
  dists = sorted(f"jax.scipy.stats.{n}" for n in dir(stats)
                 if not n.startswith("_") and isinstance(getattr(stats, n), types.ModuleType))
  out = []
  for ns in NAMESPACES:
    out.append(ns)
    if ns == "jax.scipy.stats":
      out.extend(dists)
  return out


def _is_type_alias(obj) -> bool:
  return (isinstance(obj, (types.GenericAlias, types.UnionType))
          or type(obj).__module__ == "typing")


def public_callables(jax_name: str) -> list[str]:
  """The sorted public callables of the JAX module `jax_name` (see the module docstring)."""
  mod = importlib.import_module(jax_name)
  with_classes = jax_name.startswith("jax.scipy.")
  out = []
  for name in dir(mod):
    if name.startswith("_"):
      continue
    obj = getattr(mod, name)
    if isinstance(obj, types.ModuleType) or not callable(obj) or _is_type_alias(obj):
      continue
    if inspect.isclass(obj) and not with_classes:
      continue
    out.append(name)
  return sorted(out)


def _library_module(jax_name: str, lib: str):
  return importlib.import_module(lib + jax_name[len("jax"):])


@contextlib.contextmanager
def _time_limit(seconds: float):
  if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
    yield
    return

  def on_alarm(signum, frame):
    raise TimeoutError(f"the smoke call ran longer than {seconds} s")
  old = signal.signal(signal.SIGALRM, on_alarm)
  signal.setitimer(signal.ITIMER_REAL, seconds)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def _compilation_cache(lib: str, cache_dir: str | None):
  """Points stagecraft's persistent compilation cache at `cache_dir` for the block."""
  if lib != "stagecraft" or cache_dir is None:
    yield
    return
  from stagecraft.config import config
  old = {k: config.read(k) for k in ("compilation_cache_dir", "compilation_cache_max_size",
                                     "persistent_cache_min_compile_time_secs")}
  try:
    os.makedirs(cache_dir, exist_ok=True)
  except OSError:   # not writable here: compile everything afresh
    yield
    return
  config.update("compilation_cache_dir", cache_dir)
  config.update("compilation_cache_max_size", CACHE_MAX_BYTES)
  config.update("persistent_cache_min_compile_time_secs", 0)   # small programs all
  try:
    yield
  finally:
    for k, v in old.items():
      config.update(k, v)


def smoke(full_name: str, mod) -> None:
  """Runs the smoke call of `full_name` (a JAX name, "jax.scipy.special.gammaln") on `mod`,
  the library's module for its namespace; raises what the call raises."""
  call = api_smoke.SMOKE.get(full_name)
  with warnings.catch_warnings(), _time_limit(TIMEOUT_S):
    warnings.simplefilter("ignore")
    if call is None:
      out = api_smoke.generic(mod, full_name.rsplit(".", 1)[1])
    else:
      out = call(mod)
    api_smoke.wait(out)


def _describe(e: BaseException) -> str:
  msg = " ".join(str(e).split())
  return f"{type(e).__name__}: {msg[:100]}" if msg else type(e).__name__


def coverage(only=None, lib: str = "stagecraft", timings: dict | None = None,
             cache_dir: str | None = DEFAULT_CACHE_DIR
             ) -> dict[str, tuple[int, int, dict[str, str]]]:
  """{JAX namespace: (names whose smoke call runs, JAX's public callables, {missing name:
  "ExceptionType: message"})} for the namespaces in `only` (default: all of `namespaces()`),
  on `lib` ("stagecraft", or "jax" to check the table). `timings`, when given, receives the
  seconds each namespace took. `cache_dir`: stagecraft's persistent compilation cache during
  the calls (None: leave the configuration as it is)."""
  with _compilation_cache(lib, cache_dir):
    return _coverage(only, lib, timings)


def _coverage(only, lib, timings):
  result = {}
  for ns in namespaces():
    if only is not None and ns not in only:
      continue
    t0 = time.perf_counter()
    names = public_callables(ns)
    try:
      mod = _library_module(ns, lib)
    except Exception as e:  # noqa: BLE001 - a module that fails to import lacks all names
      result[ns] = (0, len(names), {n: _describe(e) for n in names})
      continue
    missing = {}
    for name in names:
      try:
        smoke(f"{ns}.{name}", mod)
      except Exception as e:  # noqa: BLE001 - any failure means the name is not provided
        missing[name] = _describe(e)
    result[ns] = (len(names) - len(missing), len(names), missing)
    if timings is not None:
      timings[ns] = time.perf_counter() - t0
  return result


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--missing", action="store_true",
                  help="list the missing names with the exception each smoke call raised")
  ap.add_argument("--only", nargs="+", metavar="NAMESPACE",
                  help="only these JAX namespaces (e.g. jax.scipy.special)")
  ap.add_argument("--against", default="stagecraft", choices=["stagecraft", "jax"],
                  help="the library to call (jax: check the smoke table itself)")
  ap.add_argument("--timings", action="store_true", help="print the seconds per namespace")
  ap.add_argument("--no-cache", action="store_true",
                  help=f"compile everything afresh (no persistent cache in {DEFAULT_CACHE_DIR})")
  args = ap.parse_args(argv)
  if "jaxlib.xla_client" not in sys.modules and "xla_backend_optimization_level" not in \
      os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + FAST_COMPILE_FLAGS).strip()
  if args.only:
    unknown = sorted(set(args.only) - set(namespaces()))
    if unknown:
      ap.error(f"unknown namespaces {unknown}; choose from {namespaces()}")
  t0 = time.perf_counter()
  timings = {}
  cov = coverage(args.only, args.against, timings,
                 cache_dir=None if args.no_cache else DEFAULT_CACHE_DIR)
  have_all = total_all = 0
  for ns, (have, total, missing) in cov.items():
    have_all, total_all = have_all + have, total_all + total
    pct = 100 * have / total if total else 100.0
    extra = f"  {timings[ns]:5.1f} s" if args.timings and ns in timings else ""
    print(f"{ns:35s} {have:4d} / {total:4d}  {pct:5.1f}%{extra}")
    if args.missing:
      for name, why in sorted(missing.items()):
        print(f"    {name}: {why}")
  pct = 100 * have_all / total_all if total_all else 100.0
  print(f"{'total':35s} {have_all:4d} / {total_all:4d}  {pct:5.1f}%  "
        f"({time.perf_counter() - t0:.1f} s, calls on {args.against})")
  return cov


if __name__ == "__main__":
  main(sys.argv[1:])
