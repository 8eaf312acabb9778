"""JAX's `jax.experimental.key_reuse._core` names over `stagecraft.key_reuse`: the
signatures (`KeyReuseSignature`, `Sink`, `Source`, `Forward`), the static check
`check_key_reuse(fun, *args)`, and `consume` / `assert_consumed` / `assert_unconsumed`.

Behaviour and messages: JAX 0.10.2's module of the same name (reimplemented, see
`stagecraft.key_reuse` for how consumption is tracked).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from stagecraft import key_reuse, tree_util
from stagecraft.api import make_jaxpr
from stagecraft.config import debug_key_reuse
from stagecraft.errors import KeyReuseError
from stagecraft.key_reuse import Forward, KeyReuseSignature, Sink, Source
from stagecraft.random import PRNGKeyArray

__all__ = ["KeyReuseError", "KeyReuseSignature", "Sink", "Source", "Forward",
           "check_key_reuse", "check_key_reuse_jaxpr", "function_type_signature",
           "consume", "assert_consumed", "assert_unconsumed"]


def function_type_signature(fun: Callable[..., Any], *args: Any) -> KeyReuseSignature:
  """The `KeyReuseSignature` of `fun(*args)`: traces it (as `make_jaxpr`, key reuse
  checked whatever config `debug_key_reuse` says) and reports which key arguments it
  consumes (`Sink(i)`, by flat argument index), which key results are fresh (`Source(j)`)
  and which are arguments passed on (`Forward(i, j)`).

  Raises:
    KeyReuseError: if `fun` consumes a key twice ("In {op}, argument {i} is already
      consumed.").
  """
  found: list[KeyReuseSignature] = []

  @functools.wraps(fun)
  def traced(*a):
    with key_reuse.scope():   # fresh keys of this trace's level for the arguments
      a = tree_util.tree_map(
          lambda x: PRNGKeyArray(x._base_array) if isinstance(x, PRNGKeyArray) else x, a)
      out = fun(*a)
      found.append(key_reuse.body_signature(tree_util.tree_leaves(a),
                                            tree_util.tree_leaves(out)))
    return out

  with debug_key_reuse(True):
    make_jaxpr(traced)(*args)
  return found[0]


def check_key_reuse(fun: Callable[..., Any], /, *args: Any) -> None:
  """Checks statically (by tracing, nothing runs) that `fun(*args)` consumes no typed key
  twice.

  Raises:
    KeyReuseError: at the second use, "In {op}, argument {i} is already consumed."
  """
  function_type_signature(fun, *args)


def check_key_reuse_jaxpr(jaxpr: Any) -> None:
  """JAX's check of a jaxpr's key-typed variables. stagecraft's jaxprs carry key data
  (`u32[..., 2]`), not key types, so a jaxpr alone shows no key to check: this checks
  nothing and returns None. Use `check_key_reuse(fun, *args)`, which follows the keys as
  `fun` is traced."""
  del jaxpr
  return None


def consume(key: Any) -> Any:
  """Consumes `key` and returns it, marked consumed (JAX's `consume`): any later use of
  either raises while reuse is checked.

  Raises:
    KeyReuseError: if `key` was consumed already.
  """
  if not isinstance(key, PRNGKeyArray):
    return key
  if key_reuse.enabled():
    key_reuse.sink(key, "consume")
  out = PRNGKeyArray(key._base_array)
  if key_reuse.staging():
    out.kr_var = key.kr_var
  else:
    out.kr_var = key_reuse.KeyVar(np.copy(key.kr_var.consumed)
                                  if isinstance(key.kr_var.consumed, np.ndarray)
                                  else key.kr_var.consumed)
  return out


def _assert_consumed_value(key: Any, value: Any) -> None:
  if not (key_reuse.enabled() and key_reuse.staging() and isinstance(key, PRNGKeyArray)):
    return   # NB: as JAX's, only the traced check looks at the assertion
  consumed = key.kr_var.consumed
  if not np.all(np.equal(consumed, value)):
    if np.all(value):
      raise AssertionError(f"Expected key to be consumed in assert_consumed_value["
                           f"value={value}] {key.shape}")
    if not np.any(value):
      raise AssertionError(f"Expected key to not be consumed in assert_consumed_value["
                           f"value={value}] {key.shape}")
    raise AssertionError(f"Expected {value}, got {consumed} in assert_consumed_value")


def assert_unconsumed(key: Any) -> None:
  """While reuse is checked and `key` is traced: raises AssertionError ("Expected key to
  not be consumed in ...") if any of its keys was consumed."""
  _assert_consumed_value(key, False)


def assert_consumed(key: Any, value: Any = True) -> None:
  """While reuse is checked and `key` is traced: raises AssertionError ("Expected key to be
  consumed in ...") unless its consumed state equals `value` (a bool, or a bool array of
  the key array's shape)."""
  _assert_consumed_value(key, np.asarray(value, dtype=bool))
