"""Helpers shared by the primitive families: dtype checks with JAX's messages, shape checks,
and typed constants. NB: as JAX, lax does not promote: a Python scalar operand is an array
of its default dtype (int32, float32, complex64; 64-bit under x64), so library code passes
its constants as `weak_const(x, value)` (or `const`) of the operand's dtype."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from stagecraft import core, dtypes, key_reuse, tree_util
from stagecraft.core import ShapedArray, WeakScalarValue

# NB: helpers for the lax modules, not lax functions: none is in `stagecraft.lax`.
__all__: list[str] = []

# Dtype kinds, `(name, predicate)`, as JAX names them in its messages.
bool_kind = ("bool", lambda d: d == dtypes.bool_)
int_kind = ("integer", dtypes.is_integer)
float_kind = ("floating", dtypes.is_float)
complex_kind = ("complexfloating", dtypes.is_complex)

# The kinds a primitive accepts, in the order its "Accepted dtypes" message lists them.
bool_or_int = (bool_kind, int_kind)
number = (int_kind, float_kind, complex_kind)
inexact = (float_kind, complex_kind)
floating = (float_kind,)
integer = (int_kind,)
any_dtype = (bool_kind, int_kind, float_kind, complex_kind)
signed_or_float = (int_kind, float_kind, complex_kind)


# JAX's words for an operation on float0 (its lax puts a comma after "design").
FLOAT0_MESSAGE = (
    "float0s do not support any operations by design{comma} because they are not compatible "
    "with non-trivial vector spaces. No implicit dtype conversion is done. You can use "
    "np.zeros_like(arr, dtype=np.float) to cast a float0 array to a regular zeros array. \n"
    "If you didn't expect to get a float0 you might have accidentally taken a gradient with "
    "respect to an integer argument.")


_accepts: dict[tuple, bool] = {}


def check_dtype(name: str, aval: ShapedArray, accepted, pos: int | None = None) -> None:
  """Raises TypeError (JAX's message) unless `aval.dtype` is of one of the kinds `accepted`
  (a tuple of (kind name, predicate) pairs; the answer is computed once per kinds and
  dtype)."""
  key = (accepted, aval.dtype)
  ok = _accepts.get(key)
  if ok is None:
    ok = _accepts[key] = any(pred(aval.dtype) for _, pred in accepted)
  if ok:
    return
  if aval.dtype == dtypes.float0:   # NB: JAX's words (with the comma its lax adds)
    raise TypeError(f"Called {name} with a float0 "
                    f"{'array' if pos is None else f'at position {pos}'}. "
                    + FLOAT0_MESSAGE.format(comma=","))
  kinds = ", ".join(k for k, _ in accepted)
  at = f" at position {pos}" if pos is not None else ""
  raise TypeError(f"{name} does not accept dtype {aval.dtype.name}{at}. Accepted dtypes{at} "
                  f"are subtypes of {kinds}.")


# The JAX's numpy function that does what each lax function does with type promotion (the
# correspondence JAX's messages use); lax functions without one get no tip.
_JNP_EQUIVALENT = {
    "abs": "fabs", "acos": "arccos", "acosh": "arccosh", "add": "add", "asin": "arcsin",
    "asinh": "arcsinh", "atan": "arctan", "atan2": "arctan2", "atanh": "arctanh",
    "bitwise_and": "bitwise_and", "bitwise_not": "bitwise_not", "bitwise_or": "bitwise_or",
    "bitwise_xor": "bitwise_xor", "cbrt": "cbrt", "ceil": "ceil",
    "concatenate": "concatenate", "cos": "cos", "cosh": "cosh", "div": "divide",
    "eq": "equal", "exp": "exp", "expm1": "expm1", "floor": "floor", "log": "log",
    "log1p": "log1p", "max": "maximum", "min": "minimum", "mul": "multiply",
    "ne": "not_equal", "neg": "negative", "nextafter": "nextafter", "pow": "float_power",
    "round": "round", "select": "where", "shift_left": "left_shift",
    "shift_right_logical": "right_shift", "shift_right_arithmetic": "right_shift",
    "sign": "sign", "sin": "sin", "sinh": "sinh", "sqrt": "sqrt", "sub": "subtract",
    "tan": "tan", "tanh": "tanh",
}


def check_same_dtypes(name: str, avals: Sequence[ShapedArray]) -> None:
  """Raises JAX's TypeError unless all `avals` share one dtype (with a tip naming the
  promoting JAX's numpy function when there is one)."""
  if len({a.dtype for a in avals}) > 1:
    got = ", ".join(a.dtype.name for a in avals)
    jnp_name = _JNP_EQUIVALENT.get(name)
    tip = (f" (Tip: jnp.{jnp_name} is a similar function that does automatic type promotion "
           f"on inputs)." if jnp_name else "")
    raise TypeError(f"lax.{name} requires arguments to have the same dtypes, got {got}.{tip}")


def broadcasting_shape(name: str, avals: Sequence[ShapedArray]) -> tuple[int, ...]:
  """The result shape of elementwise operands, as JAX 0.10's lax broadcasts them: rank-0
  operands broadcast against the others, which must all have one rank and, per dimension,
  one size or size 1 ("degenerate" broadcasting: `f32[2,4] - f32[1,4]` is `f32[2,4]`).
  No rank is ever added (stagecraft.numpy does that).

  Raises:
    TypeError: with JAX's messages, for operands of different ranks (`sub: arrays must have
      the same number of dimensions, got {1, 2}`) or different sizes other than 1 in one
      dimension (`sub got incompatible shapes for broadcasting: (4,), (2,).`; rank-0
      operands are not listed).
  """
  shapes = [a.shape for a in avals if a.shape]
  if not shapes:
    return ()
  first = shapes[0]
  if all(s == first for s in shapes):
    return first
  ranks = {len(s) for s in shapes}
  if len(ranks) != 1:
    raise TypeError(f"{name}: arrays must have the same number of dimensions, got {ranks}")
  out = []
  for ds in zip(*shapes):
    sizes = {d for d in ds if d != 1}
    if len(sizes) > 1:
      raise TypeError(f"{name} got incompatible shapes for broadcasting: "
                      f"{', '.join(map(str, shapes))}.")
    out.append(sizes.pop() if sizes else 1)
  return tuple(out)


def python_scalar_value(x: Any, dtype: Any, path: str = "y") -> np.generic:
  """The Python scalar `x` as a NumPy scalar of `dtype`, as JAX converts weak literals: an
  int must fit the default int type (int32, int64 under x64; else OverflowError with JAX's
  message) and then wraps around to `dtype` (`uint8` -3 is 253); a float or complex
  beyond `dtype`'s range becomes +-inf silently.

  Raises:
    OverflowError: for an int outside the default int type's range (JAX's message, naming
      the operand as `path`: `x` or `y` of a binary operation).
  """
  if type(x) is int:
    info = np.iinfo(dtypes.default_int_dtype())
    if not info.min <= x <= info.max:
      raise OverflowError(f"An overflow was encountered while parsing an argument to a jitted "
                          f"computation, whose argument path is {path}. Got {type(x)} with value "
                          f"{x}")
    return np.asarray(x, np.int64).astype(dtype)[()]
  with np.errstate(over="ignore"):
    return np.asarray(x, dtype)[()]


def const(x: Any, value: Any) -> np.generic:
  """`value` as a scalar of `x`'s dtype. NB: primal operands of rules may be Python
  scalars, so arithmetic on them alone needs typed constants (`sub(y, const(y, 1))`)."""
  return np.asarray(value, core.get_aval(x).dtype)[()]


def weak_const(x: Any, value: Any) -> Any:
  """`value` as a weakly typed scalar of `x`'s dtype (JAX's `lax._const`, but weak, so that a
  result's weak type is the other operands'). Library code passes its Python constants
  through this: lax functions do not promote (`add(x, weak_const(x, 1))`, not `add(x, 1)`).
  An int converts with wraparound, a float beyond the dtype's range becomes +-inf."""
  dtype = core.get_aval(x).dtype
  with np.errstate(over="ignore", invalid="ignore"):
    return weak_scalar(np.asarray(value).astype(dtype)[()])


_convertible = (int, float, complex)


def weak_scalar(value: np.generic) -> Any:
  """`value` as a weakly typed scalar: a plain Python scalar when that has the right dtype
  (the common case), else a WeakScalarValue."""
  item = value.item()
  if type(item) in _convertible and value.dtype == dtypes.python_scalar_dtype(type(item)):
    return item
  return WeakScalarValue(value)


def canonicalize_axes(name: str, axes: Sequence[int], ndim: int) -> tuple[int, ...]:
  """Axes made non-negative.

  Raises:
    ValueError: for out-of-range or duplicate axes."""
  out = []
  for a in axes:
    a = int(a)
    if not -ndim <= a < ndim:
      raise ValueError(f"{name}: axis {a} is out of bounds for array of dimension {ndim}")
    out.append(a % ndim if ndim else a)
  if len(set(out)) != len(out):
    raise ValueError(f"{name}: duplicate axes in {tuple(axes)}.")
  return tuple(out)


# Typed PRNG key arrays (`random.PRNGKeyArray`, registered by `random` as a staged leaf): a
# key array of shape `s` is a wrapper around keys `key<fry>[*s]` (an Array or a tracer of
# that dtype). The structural jnp/lax functions (where, stack, concatenate, take, select_n,
# dynamic_slice, ...) test their operands with `type(x) in KEY_TYPES` (no cost for plain
# arrays) and run on the keys themselves through `on_keys`, so their equations have key
# operands and results, as JAX's (lowered on the key data by `lowering.extended_rule`).
KEY_TYPES = tree_util.staged_types


def on_keys(fun, *args, same: Sequence[Any] = (), reuse: tuple | None = None,
            **kwargs) -> Any:
  """`fun(*args, **kwargs)` where some arguments (pytree leaves of them) are typed key
  arrays: `fun` runs on their keys (values of dtype `key<fry>` of the key arrays' shapes,
  so its equations take and give keys, as JAX's do), and each result of a key dtype is a
  key array again (`tree_util.register_staged_dtype`'s rebuild).

  Args:
    fun: a jnp/lax function of arrays that accepts values of a key dtype.
    args, kwargs: its arguments; pytrees (lists of operands) allowed.
    same: the operands that must all be keys (those combined into one result, as `where`'s
      `x` and `y`).
    reuse: with `debug_key_reuse` on, JAX's key reuse signature of the operation:
      `(op, eager_op, sinks, forward[, fresh])` for `key_reuse.operation`, positions
      counted over the pytree leaves of `(args, kwargs)`; None: the key results start
      fresh.

  Raises:
    ValueError: (JAX's message) if an operand in `same` is not a key array while another is.
  """
  for x in same:
    if type(x) not in KEY_TYPES:
      key = next(y for y in same if type(y) in KEY_TYPES)
      raise ValueError(f"dtype={key.dtype} is not a valid dtype for JAX type promotion.")
  ins, tree = tree_util.tree_flatten((args, kwargs))
  leaves = [tree_util.staged_leaf_value(x)[0] if type(x) in KEY_TYPES else x for x in ins]
  a, kw = tree_util.tree_unflatten(tree, leaves)
  out_leaves, out_tree = tree_util.tree_flatten(fun(*a, **kw))
  outs = []
  for o in out_leaves:
    staged = tree_util.staged_aval(o) if type(o) not in KEY_TYPES else None
    outs.append(o if staged is None else staged[1](o))
  if reuse is not None and key_reuse.enabled():
    key_reuse.operation(reuse[0], reuse[1], ins, outs, *reuse[2:])
  return tree_util.tree_unflatten(out_tree, outs)


#: `on_keys`'s `reuse` of the operations JAX's key reuse table gives a `Forward` (the keys
#: of the result are those of the operand), and of those that consume their key operands.
FORWARD = ("broadcast_in_dim", "broadcast_in_dim", (), 0)
#: (`jnp.where` is a jit function in JAX: its `select_n` consumes both key operands)
#: and its result counts as consumed, as a primitive's that JAX's table lacks)
WHERE = ("jit", "jit", "all", None, False)
STACK = ("stack", "jit", "all", None, False)
CONCATENATE = ("concatenate", "concatenate", "all", None)
REV = ("jit", "jit", "all", None, False)   # (jnp.flip is a jit function in JAX)
DYNAMIC_UPDATE = ("dynamic_update_slice", "dynamic_update_slice", (1,), 0)
#: (`.at[].set`: the updates are scatter's operand 2, a copy of the user's keys eagerly)
SCATTER = ("scatter", "scatter", ((1, 2, False),), 0)


#: `lay_out[0](x, sharding)`: `x` laid out by an operation's `out_sharding` (installed by
#: lax/spmd.py, which builds on the lax modules: reshard or a sharding constraint).
lay_out: list = [None]
