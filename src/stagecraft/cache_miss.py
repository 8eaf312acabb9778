"""Why `jit` traces again: the log lines of config `jax_explain_cache_misses`, in JAX 0.10.2's
words (`TRACING CACHE MISS at file:line (function):` then the reason).

A traced signature's key is `(treedef, static, state, placement, *leaf types)` (`pjit`'s
`PjitFunction._key`): the structure of the dynamic `(args, kwargs)`, the static arguments'
values (with their types), the config values that change traced programs
(`config.state_key`, plus the mesh context), where the arguments are and one type per
leaf. A miss is explained against every key seen before for the same `jit` object, as JAX
does: each previous key gives a `(severity, count, text)` (config first, then the argument
structure and static arguments, then the types), and the smallest is printed.
"""
from __future__ import annotations

import sys
from typing import Any, Sequence

from stagecraft import core, monitoring, source_info_util, traceback_util, tree_util
from stagecraft.config import STATE_KEY_NAMES


_WEAK_TYPE_HINT = "https://docs.jax.dev/en/latest/type_promotion.html#weak-types"

# Call sites that missed with a function never seen: a second one there is a function
# re-defined on each call (JAX's hint).
_callsites_missed: set[str] = set()


class Static:
  """A static argument's place in the argument structure, as JAX prints it in a cache-miss
  explanation (`Static(val=3)`)."""
  __slots__ = ("val",)

  def __init__(self, val: Any):
    self.val = val

  def __repr__(self):
    return f"Static(val={self.val!r})"


def _definition(fun: Any) -> tuple[str | None, int | None]:
  """`(file, first line)` where `fun` (unwrapped from partials and decorators) is defined."""
  code = source_info_util.fun_code(fun)
  return (code.co_filename, code.co_firstlineno) if code is not None else (None, None)


def explain(fun: Any, name: str, key: tuple, seen: Sequence[tuple], names: Sequence[str],
            static_argnums: Sequence[int], static_argnames: Sequence[str]) -> None:
  """Logs (at WARNING, as JAX) why a call of `jit(fun)` traces again.

  Args:
    fun: the jitted function; name: its name.
    key: the new traced signature's key; seen: the keys traced before for this `jit`.
    names: one name per dynamic leaf (`x`, `params['w']`), as in JAX's debug info.
    static_argnums, static_argnames: where the static values of the key sit among the
      arguments (the key holds positional ones first, then `(name, value)` pairs).
  """
  file, line = _definition(fun)
  if file is not None and traceback_util.classify_file(file):
    return   # stagecraft's own jitted functions: JAX logs only users' functions
  frame = core.user_frame(sys._getframe(1))
  callsite = frame.summary() if frame is not None else "unknown"
  where = (f" defined at {file}" + (f":{line}" if line else "")) if file else ""
  lines = [f"TRACING CACHE MISS at {callsite}:"]
  if not seen:
    lines.append(f"  never seen function:\n    {name} id={id(fun)}{where}")
    if callsite in _callsites_missed:
      lines.append("  but seen another function defined on the same line; maybe the "
                   "function is\n  being re-defined repeatedly, preventing caching?")
    else:
      _callsites_missed.add(callsite)
  else:
    lines.append(f"  for {name}{where}")
    lines.append("  all previously seen cache keys differ. For the closest previous key:")
    lines.append("  " + min(_diff(key, old, names, static_argnums, static_argnames)
                            for old in seen)[-1])
  monitoring.logger("interpreters.partial_eval").warning("\n".join(lines))


def _diff(new, old, names, static_argnums, static_argnames) -> tuple[int, int, str]:
  return (_diff_state(new[2], old[2]) or _diff_tree(new, old, static_argnums, static_argnames)
          or _diff_types(names, new[4:], old[4:])
          or (4, 0, "cache miss explanation unavailable"))


def _diff_state(new, old) -> tuple[int, int, str] | None:
  if new == old:
    return None
  msg = "Tracing context doesn't match, e.g. due to config or context manager."
  # NB: with a mesh in context the state is (config state, mesh, abstract mesh).
  new_cfg, new_mesh = (new[0], new[1:]) if _with_mesh(new) else (new, (None, None))
  old_cfg, old_mesh = (old[0], old[1:]) if _with_mesh(old) else (old, (None, None))
  diffs = [f"  * {n} differs: now {a} and before {b}"
           for n, a, b in zip(STATE_KEY_NAMES, new_cfg, old_cfg) if a != b]
  if len(new_cfg) != len(old_cfg):
    diffs.append("  * jax user contexts differ")
  diffs += [f"  * {n} differs: now {a} and before {b}"
            for n, a, b in zip(("mesh", "abstract_mesh"), new_mesh, old_mesh) if a != b]
  return 0, max(len(diffs), 1), "\n".join([msg, *diffs])


def _with_mesh(state) -> bool:
  return len(state) == 3 and isinstance(state[0], tuple)


def _diff_tree(new, old, static_argnums, static_argnames) -> tuple[int, int, str] | None:
  diffs = []
  for path, thing1, thing2, why in tree_util.equality_errors_pytreedef(new[0], old[0]):
    diffs.append(f"  * at input path {_arg_path(path, static_argnums)}, now {thing1} and "
                 f"before {thing2}, so {why}")
  for i, (a, b) in enumerate(zip(new[1], old[1])):
    if a == b:
      continue
    # NB: `(type, value)` per positional static argument, `(name, type, value)` per keyword
    if len(a) == 2:
      path, a, b = f"[0][{sorted(static_argnums)[i]}]", a[1], b[-1]
    else:
      path, a, b = f"[1][{a[0]!r}]", a[2], b[-1]
    cls = f"<class '{Static.__module__}.Static'>"
    diffs.append(f"  * at input path {path}, now {cls} with pytree metadata {Static(a)} and "
                 f"before {cls} with pytree metadata {Static(b)}, so the pytree node "
                 f"metadata does not match")
  if len(new[1]) != len(old[1]):
    diffs.append("  * the static arguments given differ")
  if diffs:
    return 1, len(diffs), "different input pytree:\n" + "\n".join(diffs)
  return None


def _arg_path(path, static_argnums) -> str:
  """A path into the dynamic `(args, kwargs)` as a path into all the arguments (a
  positional argument's index counts the static ones before it)."""
  text = tree_util.node_path_str(path)
  if not static_argnums or len(path) < 2 or path[0][1] != 0:
    return text
  i = path[1][1]
  dyn = [j for j in range(i + len(static_argnums) + 1) if j not in static_argnums]
  return f"[0][{dyn[i]}]" + tree_util.node_path_str(path[2:])


def _diff_types(names, new, old) -> tuple[int, int, str] | None:
  if len(new) != len(old) or all(a == b for a, b in zip(new, old)):
    return None
  diffs, weak_hint = [], False
  for i, (a, b) in enumerate(zip(new, old)):
    if a == b:
      continue
    name = names[i] if i < len(names) else f"leaf {i}"
    a_str, b_str = _short(a, False), _short(b, False)
    if isinstance(a, core.ShapedArray) and isinstance(b, core.ShapedArray):
      if a.ndim != b.ndim or getattr(a, "sharding", None) != getattr(b, "sharding", None):
        a_str, b_str = _short(a, True), _short(b, True)
      if a.weak_type != b.weak_type:
        weak_hint = True
        a_str += f"{{weak_type={a.weak_type}}}"
        b_str += f"{{weak_type={b.weak_type}}}"
    diffs.append(f"  * at {name}, now {a_str} and before {b_str}")
  msg = "different input types:\n" + "\n".join(diffs)
  if weak_hint:   # NB: JAX appends the link without a newline
    msg += _WEAK_TYPE_HINT
  return 3, len(diffs), msg


def _short(aval: Any, mesh_types: bool) -> str:
  """`f32[3]` (JAX's `str_short(short_dtypes=True)`); with `mesh_types`, followed by the
  mesh axis types of the aval's sharding, `({})` without a mesh."""
  text = aval.str_short() if hasattr(aval, "str_short") else str(aval)
  if not mesh_types:
    return text
  sharding = getattr(aval, "sharding", None)
  mesh = getattr(sharding, "mesh", None)
  if mesh is None or not getattr(mesh, "axis_names", ()):
    return text + "({})"
  types = ", ".join(f"{n}: {t.name}" for n, t in zip(mesh.axis_names, mesh.axis_types))
  return f"{text}({{{types}}})"
