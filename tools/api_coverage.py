"""Which public names of jax.numpy, jax.lax, jax.nn, jax.random, jax.tree and jax.tree_util
stagecraft provides.

Run: python -m tools.api_coverage [--missing]

A "public function" is a public, callable, non-class attribute of the JAX module (ufuncs
count; submodules, dtypes and classes do not).
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import types


PAIRS = [("jax.numpy", "stagecraft.numpy"), ("jax.lax", "stagecraft.lax"),
         ("jax.nn", "stagecraft.nn"), ("jax.random", "stagecraft.random"),
         ("jax.tree", "stagecraft.tree"), ("jax.tree_util", "stagecraft.tree_util")]


def public_functions(mod) -> set[str]:
  out = set()
  for name in dir(mod):
    if name.startswith("_"):
      continue
    obj = getattr(mod, name)
    if isinstance(obj, types.ModuleType) or inspect.isclass(obj) or not callable(obj):
      continue
    out.add(name)
  return out


def coverage() -> dict[str, tuple[int, int, list[str]]]:
  """{jax module: (names stagecraft has, names JAX has, missing names)}."""
  result = {}
  for jax_name, ours_name in PAIRS:
    theirs = public_functions(importlib.import_module(jax_name))
    try:
      ours_mod = importlib.import_module(ours_name)
    except ImportError:
      ours_mod = None
    have = {n for n in theirs if ours_mod is not None and hasattr(ours_mod, n)}
    result[jax_name] = (len(have), len(theirs), sorted(theirs - have))
  return result


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--missing", action="store_true", help="list the missing names")
  args = ap.parse_args(argv)
  for mod, (have, total, missing) in coverage().items():
    print(f"{mod:12s} {have:4d} / {total:4d}  {100 * have / total:5.1f}%")
    if args.missing:
      print("  missing:", " ".join(missing))


if __name__ == "__main__":
  main()
