"""Dtypes: canonicalization (x64 off by default) and JAX's type-promotion lattice.

The lattice and the weak-type rules follow JAX's "type promotion semantics" design note
(jax.readthedocs.io/en/latest/jep/9407-type-promotion.html): Python scalars are *weakly typed*
(`i*`, `f*`, `c*`) and take the dtype of the typed operand they meet; the result of promoting
two dtypes is the least upper bound of the two in the lattice below.
"""
from __future__ import annotations

import functools
import sys
import warnings
from typing import Any

import ml_dtypes
import numpy as np

from stagecraft import traceback_util
from stagecraft.config import ExplicitX64Mode, config

__all__ = ["bool_", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float0", "python_scalar_types",
           "short_name", "canonicalize_dtype", "check_user_dtype", "default_int_dtype", "default_uint_dtype",
           "default_float_dtype", "default_complex_dtype", "python_scalar_dtype",
           "is_python_scalar", "TypePromotionError", "promote_types", "lattice_promote_types",
           "result_type", "dtype", "is_weakly_typed", "issubdtype", "is_float", "is_inexact",
           "is_complex", "is_integer", "is_unsigned", "finfo", "iinfo", "extended", "prng_key",
           "itemsize_bits", "scalar_type_of"]

bool_ = np.dtype(np.bool_)
int8, int16, int32, int64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
uint8, uint16, uint32, uint64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
float16, float32, float64 = (np.dtype(t) for t in (np.float16, np.float32, np.float64))
complex64, complex128 = np.dtype(np.complex64), np.dtype(np.complex128)
_bfloat16 = np.dtype(ml_dtypes.bfloat16)


class _ScalarDTypeMeta(type):
  """The metaclass of `bfloat16` below: the class stands for both the NumPy dtype and the
  scalar type. It hashes and compares as the dtype (so it keys the same dict entries as
  `np.dtype('bfloat16')`) and answers the dtype's attributes (`name`, `itemsize`, `type`,
  `kind`); calling it makes a scalar and `isinstance` tests for scalars, as JAX's
  `dtypes.bfloat16` (ml_dtypes' scalar type) does."""

  def __call__(cls, *args, **kwargs):
    return cls.scalar_type(*args, **kwargs)

  def __instancecheck__(cls, x):
    return isinstance(x, cls.scalar_type)

  def __subclasscheck__(cls, sub):
    return isinstance(sub, type) and issubclass(sub, cls.scalar_type)

  def __eq__(cls, other):
    if other is cls:
      return True
    try:
      return cls.dtype == np.dtype(other)
    except TypeError:
      return False

  def __ne__(cls, other):
    return not _ScalarDTypeMeta.__eq__(cls, other)

  def __hash__(cls):
    return hash(cls.dtype)

  def __getattr__(cls, name):
    return getattr(cls.dtype, name)

  def __repr__(cls):
    return repr(cls.scalar_type)


class bfloat16(metaclass=_ScalarDTypeMeta):
  """bfloat16, as JAX's `jax.dtypes.bfloat16`: `bfloat16(1.5)` is an ml_dtypes scalar,
  `isinstance(x, bfloat16)` tests for one, `np.dtype(bfloat16)` is the dtype, and it
  compares and hashes equal to `np.dtype('bfloat16')`."""
  dtype = _bfloat16
  scalar_type = ml_dtypes.bfloat16


float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
# NB: float0 is the dtype of tangents of integer inputs (JAX's definition: a zero-sized void).
float0 = np.dtype([("float0", np.void, 0)])

# The other 8-bit (and 4-bit) floats ml_dtypes defines (flax's fp8 ops use the fnuz ones).
# Each is a floating dtype of its own, with no implicit promotion to or from another typed
# dtype (JAX's lattice: only weak floats meet them).
_more_float8s = tuple(np.dtype(getattr(ml_dtypes, n)) for n in (
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz", "float8_e4m3", "float8_e3m4",
    "float8_e8m0fnu", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn")
    if hasattr(ml_dtypes, n))
_float8s = (float8_e4m3fn, float8_e5m2, *_more_float8s)
_custom_floats = (_bfloat16, *_float8s)

# x64 narrowing, applied when config.enable_x64 is off.
_narrow = {int64: int32, uint64: uint32, float64: float32, complex128: complex64}

_short_names = {
    bool_: "bool", int8: "i8", int16: "i16", int32: "i32", int64: "i64", uint8: "u8",
    uint16: "u16", uint32: "u32", uint64: "u64", _bfloat16: "bf16", float16: "f16",
    float32: "f32", float64: "f64", complex64: "c64", complex128: "c128",
    float8_e4m3fn: "f8_e4m3fn", float8_e5m2: "f8_e5m2", float0: "float0",
    **{d: "f" + d.name.removeprefix("float") for d in _more_float8s},
    # Sub-byte integers: int4 -> i4, uint4 -> u4 (JAX's short names).
    **{np.dtype(getattr(ml_dtypes, n)): n[0] + n.lstrip("uint")
       for n in ("int1", "uint1", "int2", "uint2", "int4", "uint4") if hasattr(ml_dtypes, n)},
}

python_scalar_types = (bool, int, float, complex)
python_scalar_kind = {bool: bool_, int: "i*", float: "f*", complex: "c*"}


def short_name(dtype: np.dtype) -> str:
  """`float32` -> `'f32'`, as printed in avals (`f32[3,4]`)."""
  try:
    return _short_names[dtype]
  except KeyError:
    return str(dtype)


def _to_np_dtype(dtype: Any) -> np.dtype:
  if isinstance(dtype, np.dtype):
    return dtype
  if isinstance(dtype, type) and dtype in python_scalar_kind and dtype is not bool:
    # np.dtype(float) is float64 (then narrowed); same convention as jnp.zeros(3, float).
    return np.dtype(dtype)
  # Not a dtype: NumPy's TypeError ("Cannot interpret '4' as a data type", "data type 'foo'
  # not understood") goes to the user unchanged, as JAX lets it.
  return np.dtype(dtype)


@functools.lru_cache(maxsize=512)
def _canonicalize_cached(dtype: np.dtype, x64: bool) -> np.dtype:
  if x64:
    return dtype
  return _narrow.get(dtype, dtype)


#: `{type: handler}`: values of these types passed to a program are replaced by
#: `handler(value)` (an array-like) before they go to the device (JAX's
#: `dtypes.canonicalize_value_handlers`, `jax.interpreters.xla.canonicalize_dtype_handlers`).
class _CanonicalizeValueHandlers(dict):
  """`{type: handler}`; a type not registered reads as the generic conversion (a NumPy array
  of the value, its dtype canonicalized), as JAX's: `handlers[MyType] =
  handlers[np.ndarray]` registers a type like NumPy arrays."""

  def __missing__(self, key):
    return lambda x: np.asarray(x, canonicalize_dtype(np.asarray(x).dtype))


canonicalize_value_handlers: dict[type, Any] = _CanonicalizeValueHandlers()


def canonicalize_dtype(dtype: Any, allow_extended_dtype: bool = False) -> np.dtype:
  """Returns the dtype stagecraft computes with for `dtype`.

  With `enable_x64` off (the default) 64-bit types narrow to 32 bits. An extended dtype (a
  typed key's `key<fry>`) is returned as it is with `allow_extended_dtype=True`.

  Raises:
    TypeError: if `dtype` names no dtype.
    ValueError: for an extended dtype without `allow_extended_dtype` (JAX's words).
  """
  try:
    return _canonicalize_cached(_to_np_dtype(dtype), config.enable_x64)
  except TypeError:
    if not isinstance(getattr(dtype, "type", None), type) or not issubclass(dtype.type,
                                                                             extended):
      raise
  if allow_extended_dtype:
    return dtype
  raise ValueError(f"Internal: canonicalize_dtype called on extended dtype {dtype} with "
                   f"allow_extended_dtype=False")


def _user_stacklevel() -> int:
  """The `stacklevel` for `warnings.warn`, called from the function that calls this one,
  that makes a warning name the first frame outside stagecraft (and outside the paths of
  `traceback_util.register_exclusion`): the user's call site, however deep the call."""
  level, f = 2, sys._getframe(2)
  while f is not None and not traceback_util.include_frame(f):
    level, f = level + 1, f.f_back
  return level


def check_user_dtype(dtype: Any, fun_name: str | None = None) -> np.dtype:
  """`canonicalize_dtype` for a dtype the user asked for (the `dtype=`, `new_dtype`,
  `preferred_element_type` argument of a public function), as JAX's
  `dtypes.check_and_canonicalize_user_dtype`: with `enable_x64` off, asking for a 64-bit
  type (int64, uint64, float64, complex128: a NumPy or stagecraft type, a dtype or a name
  such as `"float64"`) is reported per the `jax_explicit_x64_dtypes` option. A Python type
  (`float`, `int`, ...) is not an explicit request: it gives the default dtype silently.

  Args:
    dtype: the requested dtype.
    fun_name: the public function's name, quoted in the message as JAX quotes it
      (`"... float64 requested in zeros ..."`); JAX's random functions pass none.

  Returns:
    The canonical dtype (32 bits for a 64-bit request with x64 off).

  Warns:
    UserWarning: "warn" mode (the default), naming the user's line (the first frame outside
      stagecraft), also while tracing under `jit`.

  Raises:
    ValueError: "error" mode, in JAX's words; an Array or tracer passed as the dtype.
    TypeError: if `dtype` names no dtype (NumPy's message), or a dtype JAX has no arrays of
      (object, fixed-width str/bytes, datetime), in JAX's words.

  "allow" mode lets JAX create 64-bit arrays without x64; stagecraft accepts the option
  but keeps narrowing, silently.
  """
  if hasattr(dtype, "aval") and hasattr(dtype, "shape"):   # an Array or a tracer
    raise ValueError("Passing an array as a dtype argument is no longer supported; instead "
                     "of dtype=arr use dtype=arr.dtype.")   # NB: JAX's words
  requested = _to_np_dtype(dtype)
  if requested.kind in "OUSMm" or (requested.type is np.void and requested != float0):
    # JAX's words: objects, fixed-width strings/bytes and datetimes are no JAX types.
    # Of kind "V" only raw bytes and records (np.void): ml_dtypes' bfloat16/float8 types
    # and float0 are of that kind too.
    where = f" in {fun_name}" if fun_name else ""
    raise TypeError(f"JAX only supports number, bool, and string dtypes, got dtype "
                    f"{dtype}{where}")
  x64 = config.enable_x64
  out = _canonicalize_cached(requested, x64)
  if (x64 or requested is out or requested == out
      or any(dtype is t for t in python_scalar_types)):
    return out
  mode = config.explicit_x64_dtypes
  if mode == ExplicitX64Mode.ALLOW:
    return out
  where = f" requested in {fun_name}" if fun_name else ""
  gotchas = "See https://github.com/jax-ml/jax#current-gotchas for more."
  if mode == ExplicitX64Mode.ERROR:
    # NB: JAX's message has no space before "See"; users match it as it is.
    raise ValueError(f"Explicitly requested dtype {requested}{where} is not available. To "
                     f"enable more dtypes, set the jax_enable_x64 or "
                     f"allow_explicit_x64_dtypes configuration options.{gotchas}")
  warnings.warn(f"Explicitly requested dtype {requested}{where} is not available, and will "
                f"be truncated to dtype {out.name}. To enable more dtypes, set the "
                f"jax_enable_x64 configuration option or the JAX_ENABLE_X64 shell "
                f"environment variable. {gotchas}", UserWarning,
                stacklevel=_user_stacklevel())
  return out


def default_int_dtype() -> np.dtype:
  """int32, or int64 with x64 enabled."""
  return int64 if config.enable_x64 else int32


def default_uint_dtype() -> np.dtype:
  """uint32, or uint64 with x64 enabled."""
  return uint64 if config.enable_x64 else uint32


def default_float_dtype() -> np.dtype:
  """float32, or float64 with x64 enabled."""
  return float64 if config.enable_x64 else float32


def default_complex_dtype() -> np.dtype:
  """complex64, or complex128 with x64 enabled."""
  return complex128 if config.enable_x64 else complex64


def python_scalar_dtype(typ: type) -> np.dtype:
  """Canonical dtype of a Python scalar type (bool -> bool, int -> int32/int64, ...)."""
  if typ is bool:
    return bool_
  if typ is int:
    return default_int_dtype()
  if typ is float:
    return default_float_dtype()
  if typ is complex:
    return default_complex_dtype()
  raise TypeError(f"{typ} is not a Python scalar type")


def is_python_scalar(x: Any) -> bool:
  """Whether `x` is a Python bool, int, float or complex."""
  return type(x) in python_scalar_kind


def python_scalar_base(x: Any):
  """The Python scalar type (int, float or complex) that the class of `x` derives from, for
  an instance of a subclass that has no dtype (an `enum.IntEnum` member, a float subclass);
  None otherwise (exact Python scalars, NumPy scalars, arrays). As in JAX, such values are
  Python scalars of their base type: weakly typed."""
  t = type(x)
  if t in python_scalar_kind or isinstance(x, (np.generic, type)) or hasattr(x, "dtype"):
    return None
  for b in t.__mro__[1:]:
    if b in python_scalar_kind:
      return b
  return None


# ---------------------------------------------------------------------------
# The promotion lattice.
# Nodes are np.dtypes or the weak kinds 'i*', 'f*', 'c*'.

#: int1/uint1/int2/uint2/int4/uint4: below the weak int kind, with no edge out (JAX's lattice).
_sub_byte_ints = [np.dtype(getattr(ml_dtypes, n)) for n in ("int2", "uint2", "int4", "uint4",
                                                              "int1", "uint1")
                  if hasattr(ml_dtypes, n)]


_float4s = [d for d in _float8s if d.name.startswith("float4")]
_float6s = [d for d in _float8s if d.name.startswith("float6")]
#: JAX's families of dtypes without implicit promotion, in the order its message picks them:
#: (what the message calls them, the dtypes, the cast it suggests).
_NO_PROMOTION_FAMILIES = (
    ("8-bit floats", frozenset(d for d in _float8s if d not in _float4s + _float6s),
     "float32"),
    ("6-bit floats", frozenset(_float6s), "float32"),
    ("4-bit floats", frozenset(_float4s), "float32"),
    ("1-bit, 2-bit and 4-bit integers", frozenset(_sub_byte_ints), "int32"))


def _lattice_edges():
  return {
      bool_: ["i*"],
      "i*": [uint8, int8, *_sub_byte_ints],
      "f*": ["c*", _bfloat16, float16, *_float8s],
      "c*": [complex64],
      uint8: [uint16, int16], uint16: [uint32, int32], uint32: [uint64, int64],
      uint64: ["f*"],
      int8: [int16], int16: [int32], int32: [int64], int64: ["f*"],
      _bfloat16: [float32], float16: [float32], float32: [float64, complex64],
      float64: [complex128], complex64: [complex128], complex128: [],
      **{d: [] for d in _float8s},
      **{d: [] for d in _sub_byte_ints},   # as JAX's: no implicit promotion out of them
  }


def _compute_upper_bounds():
  edges = _lattice_edges()
  ub = {}
  for node in edges:
    seen, stack = set(), [node]
    while stack:
      n = stack.pop()
      key = n if isinstance(n, str) else n
      if key in seen:
        continue
      seen.add(key)
      stack.extend(edges[n])
    ub[node] = seen
  return ub


_upper_bounds = _compute_upper_bounds()


class TypePromotionError(ValueError):
  """Raised when two dtypes have no common type in the promotion lattice.

  Example: `float8_e4m3fn` and `float32` have no implicit promotion; cast one explicitly
  with `x.astype(...)`.
  """


def _kind_of(dtype: np.dtype, weak: bool):
  if not weak or dtype == bool_:
    return dtype
  if dtype in _complexes:
    return "c*"
  if dtype in _floats:
    return "f*"
  if dtype in _ints:
    return "i*"
  return dtype


@functools.lru_cache(maxsize=4096)
def _join(a, b):
  if a == b:
    return a
  common = _upper_bounds[a] & _upper_bounds[b]
  for c in common:
    if all(c == d or d in _upper_bounds[c] for d in common):
      return c
  raise _no_promotion_path((a, b))


_JAX_NODE = {"i*": int, "f*": float, "c*": complex}


def _node_names(kinds, ordered: bool) -> tuple:
  """Lattice nodes as JAX's promotion errors name them (weak kinds as their Python types),
  in the order of JAX's set of them (`result_type`) or as given (`ordered`: `promote_types`)."""
  nodes = [_JAX_NODE.get(k, k) if isinstance(k, str) else k for k in kinds]
  return tuple(str(n) if not isinstance(n, np.dtype) else n.name
               for n in (nodes if ordered else set(nodes)))


def _strict_error(kinds, ordered: bool = False) -> TypePromotionError:
  return TypePromotionError(
      f"Input dtypes {_node_names(kinds, ordered)} have no available implicit dtype promotion "
      f"path when jax_numpy_dtype_promotion=strict. Try explicitly casting inputs to the "
      f"desired output type, or set jax_numpy_dtype_promotion=standard.")


def _no_promotion_path(kinds, ordered: bool = False) -> TypePromotionError:
  """JAX's error for lattice nodes with no common upper bound: the nodes named as JAX names
  them (`_node_names`), and the advice names the dtype family that does not promote
  implicitly."""
  nodes = _node_names(kinds, ordered)
  fam = next((f for f, ds, cast in _NO_PROMOTION_FAMILIES
              if any(k in ds for k in kinds if isinstance(k, np.dtype))), None)
  if fam is None:
    return TypePromotionError(f"Input dtypes {nodes} have no available implicit dtype "
                              f"promotion path. Try explicitly casting inputs to the desired "
                              f"output type.")
  cast = next(c for f, _, c in _NO_PROMOTION_FAMILIES if f == fam)
  return TypePromotionError(
      f"Input dtypes {nodes} have no available implicit dtype promotion path. To avoid "
      f"unintended promotion, {fam} do not support implicit promotion. If you'd like your "
      f"inputs to be promoted to another type, you can do so explicitly using e.g. "
      f"x.astype('{cast}')")


def _kind_name(k) -> str:
  return k if isinstance(k, str) else k.name


def _kind_to_dtype(k):
  if k == "i*":
    return default_int_dtype(), True
  if k == "f*":
    return default_float_dtype(), True
  if k == "c*":
    return default_complex_dtype(), True
  return canonicalize_dtype(k), False


def _dtype_and_weak(x: Any):
  t = type(x)
  if t in python_scalar_kind:
    return None, python_scalar_kind[t]
  if isinstance(x, np.dtype):
    d = canonicalize_dtype(x)
    return d, d
  dt = getattr(x, "dtype", None)
  if dt is not None and not isinstance(x, type):
    weak = getattr(x, "weak_type", None)
    if weak is None:
      aval = getattr(x, "aval", None)
      weak = getattr(aval, "weak_type", False)
    # As JAX, canonicalize inputs before the join (x64 off: int8 with uint64 is int8 with uint32).
    dt = canonicalize_dtype(dt)
    return dt, _kind_of(dt, bool(weak))
  if hasattr(type(x), "__jax_array__") and not isinstance(x, type):   # JAX's array-like protocol
    return _dtype_and_weak(x.__jax_array__())
  if x in python_scalar_kind:   # the types int, float, complex are weak, as in JAX; bool
    if x is bool:               # is strong
      return bool_, bool_
    return None, python_scalar_kind[x]
  base = python_scalar_base(x)
  if base is not None:   # an IntEnum member: a weak int, as JAX canonicalizes it
    return None, python_scalar_kind[base]
  d = canonicalize_dtype(x)
  return d, d


def promote_types(a: Any, b: Any) -> np.dtype:
  """Returns the dtype that `a` and `b` promote to (both treated as strongly typed).

  Raises:
    TypePromotionError (a ValueError, as in JAX): if the lattice has no common upper bound.
  """
  da, db = _to_np_dtype(a), _to_np_dtype(b)
  # Two strong types can meet at a weak kind (int64 with uint64 is 'f*'): its default dtype.
  return _kind_to_dtype(_join(da, db))[0]


_WEAK_LATTICE_DTYPES = {"i*": np.dtype(np.int64), "f*": np.dtype(np.float64),
                        "c*": np.dtype(np.complex128)}


def lattice_promote_types(a: Any, b: Any) -> np.dtype:
  """JAX's `jnp.promote_types(a, b)`: the least upper bound of two dtypes in the promotion
  lattice, where the Python types `int`, `float` and `complex` are weak (they keep a strong
  counterpart's width: `('uint8', int)` gives uint8, `('float16', float)` float16). The
  result is not canonicalized (`('int64', 'int8')` gives int64 without x64; a join of weak
  types alone gives NumPy's 64-bit default, `(int, float)` float64).

  Raises:
    TypePromotionError (a ValueError): no common type, or two distinct dtypes under
      `jax_numpy_dtype_promotion=strict`.
  """
  def kind(x):
    if any(x is t for t in (int, float, complex)):
      return python_scalar_kind[x]
    return _to_np_dtype(x)
  ka, kb = kind(a), kind(b)
  for k in (ka, kb):
    if k not in _upper_bounds:   # object, strings, ...: JAX's words
      raise ValueError(f"dtype={k!r} is not a valid dtype for JAX type promotion.")
  if (config.numpy_dtype_promotion == "strict" and isinstance(ka, np.dtype)
      and isinstance(kb, np.dtype) and ka != kb):
    raise _strict_error((ka, kb), ordered=True)
  if not config.enable_x64 and {ka, kb} == {np.dtype(np.uint32), np.dtype(np.int32)}:
    # NB: JAX's lattice without x64 forms no 64-bit type from 32-bit inputs: u32 with i32 is
    # i32 (the one such join of the lattice)
    return np.dtype(np.int32)
  try:
    k = _join(ka, kb)
  except TypePromotionError:
    raise _no_promotion_path((ka, kb), ordered=True) from None
  return _WEAK_LATTICE_DTYPES.get(k, k) if isinstance(k, str) else np.dtype(k)


def result_type(*args: Any, return_weak_type_flag: bool = False):
  """Dtype of the result of an operation on `args` (arrays, scalars, dtypes), as in JAX.

  Returns:
    The canonical result dtype, and with `return_weak_type_flag=True` also whether the
    result is weakly typed (every argument was a weakly typed scalar).

  Raises:
    ValueError: if no arguments are given.
    TypePromotionError: if two dtypes have no common type.
  """
  if not args:
    raise ValueError("at least one array or dtype is required")
  ext = _extended_result(args)
  if ext is not None:
    return (ext, False) if return_weak_type_flag else ext
  kinds = tuple(_dtype_and_weak(x)[1] for x in args)
  try:
    dt, weak = _result_from_kinds(kinds, config.enable_x64,
                                  config.numpy_dtype_promotion == "strict")
  except _InvalidKind as e:
    x = args[e.args[0]]
    d = _dtype_and_weak(x)[0]
    if isinstance(d, np.dtype) and d.kind == "T":   # NB: string arrays: JAX's ValueError
      raise ValueError(f"dtype={d!r} is not a valid dtype for JAX type promotion.") from None
    raise TypeError(f"Value '{x}' with dtype {kinds[e.args[0]]} is not a valid JAX array "
                    f"type. Only arrays of numeric types are supported by JAX.") from None
  if weak and len(args) == 1:
    # NB: as JAX's, one weakly typed array gives its kind's default: unsigned stays unsigned
    d = _dtype_and_weak(args[0])[0]
    if d is not None and d.kind == "u":
      dt = canonicalize_dtype(uint64)
  return (dt, weak) if return_weak_type_flag else dt


class _InvalidKind(Exception):
  """Raised by `_result_from_kinds` with the position of a dtype outside the promotion
  lattice (object, strings, ...); `result_type` turns it into JAX's TypeError."""


def _extended_result(args: tuple) -> Any:
  """The result dtype of `args` when one of them is an array of an extended dtype (typed PRNG
  keys): that dtype when every argument is an array of it (as JAX's trivial promotion);
  None when no argument is such an array.

  Raises:
    ValueError: extended and other dtypes mixed (JAX's words: not a valid dtype for type
      promotion).
  """
  ext = [getattr(x, "dtype", None) for x in args if not isinstance(x, (np.dtype, type))]
  ext = [d for d in ext if d is not None and _extended_type(d) is not None]
  if not ext:
    return None
  dts = [getattr(x, "dtype", None) if not isinstance(x, (np.dtype, type)) else x
         for x in args]
  if len(args) == 1 or all(d == ext[0] for d in dts):
    return ext[0]
  raise ValueError(f"dtype={ext[0]} is not a valid dtype for JAX type promotion.")


@functools.lru_cache(maxsize=4096)
def _result_from_kinds(kinds: tuple, x64: bool, strict: bool = False):
  for i, k in enumerate(kinds):
    if k not in _upper_bounds:
      if k is not float0 and k != float0:
        raise _InvalidKind(i)
      if any(o != float0 for o in kinds):   # float0 stands only with itself, as in JAX
        raise ValueError(f"dtype={float0!r} is not a valid dtype for JAX type promotion.")
      return float0, False
  if strict:   # jax_numpy_dtype_promotion=strict: distinct strong dtypes do not promote
    if len({k for k in kinds if isinstance(k, np.dtype)}) > 1:
      raise _strict_error(kinds)
  kind = kinds[0]
  try:
    for k in kinds[1:]:
      kind = _join(kind, k)
  except TypePromotionError:
    raise _no_promotion_path(kinds) from None   # JAX's message names every input
  return _kind_to_dtype(kind)


def dtype(x: Any, *, canonicalize: bool = False) -> np.dtype:
  """The dtype of an array, scalar, or dtype-like `x` (Python scalars give their default)."""
  t = type(x)
  if t not in python_scalar_kind:
    t = python_scalar_base(x) or t   # an IntEnum member is an int
  if t in python_scalar_kind:
    dt = _to_np_dtype(t) if t is not bool else bool_
    return canonicalize_dtype(dt) if canonicalize else dt
  dt = getattr(x, "dtype", None)
  if dt is not None and not isinstance(x, type):
    dt = _to_np_dtype(dt)
  else:
    dt = _to_np_dtype(x)
  return canonicalize_dtype(dt) if canonicalize else dt


def is_weakly_typed(x: Any) -> bool:
  """Whether `x` is weakly typed (a Python number other than bool, or a weak aval)."""
  if type(x) in python_scalar_kind:
    return type(x) is not bool
  if python_scalar_base(x) is not None:
    return True
  w = getattr(x, "weak_type", None)
  if w is None:
    w = getattr(getattr(x, "aval", None), "weak_type", False)
  return bool(w)


def issubdtype(a: Any, b: Any) -> bool:
  """`np.issubdtype` that also knows bfloat16 and float8 are floating types, int2/int4
  (uint2/uint4) signed (unsigned) integers, and extended
  dtypes (typed PRNG keys: `issubdtype(key.dtype, dtypes.prng_key)`)."""
  ext = _extended_type(a)
  if ext is not None:
    return a == b or (isinstance(b, type) and issubclass(ext, b))
  try:
    da = _to_np_dtype(a)
  except TypeError:
    return False
  if da in _custom_floats:
    if b in (np.floating, np.inexact, np.number, np.generic):
      return True
    try:
      return _to_np_dtype(b) == da
    except TypeError:
      return False
  if da in _sub_byte_ints:
    kind = np.unsignedinteger if da.name.startswith("u") else np.signedinteger
    if b in (kind, np.integer, np.number, np.generic):
      return True
    try:
      return _to_np_dtype(b) == da
    except TypeError:
      return False
  return bool(np.issubdtype(da, b))


# The sub-byte integers are integers too (JAX's issubdtype(int4, np.signedinteger)).
_signed_ints = frozenset({int8, int16, int32, int64,
                          *(d for d in _sub_byte_ints if not d.name.startswith("u"))})
_unsigned_ints = frozenset({uint8, uint16, uint32, uint64,
                            *(d for d in _sub_byte_ints if d.name.startswith("u"))})
_ints = _signed_ints | _unsigned_ints
_floats = frozenset({float16, float32, float64, *_custom_floats})
_complexes = frozenset({complex64, complex128})
_inexacts = _floats | _complexes

# NB: set membership, not np.issubdtype: these run on every primitive bind and
# np.issubdtype costs microseconds.


def is_float(dtype: np.dtype) -> bool:
  """Whether `dtype` is a real floating type (bfloat16 and float8 included)."""
  return dtype in _floats


def is_inexact(dtype: np.dtype) -> bool:
  """Whether `dtype` is floating or complex."""
  return dtype in _inexacts


def is_complex(dtype: np.dtype) -> bool:
  """Whether `dtype` is complex."""
  return dtype in _complexes


def is_integer(dtype: np.dtype) -> bool:
  """Whether `dtype` is a signed or unsigned integer type."""
  return dtype in _ints


def is_unsigned(dtype: np.dtype) -> bool:
  """Whether `dtype` is an unsigned integer type."""
  return dtype in _unsigned_ints


def finfo(dtype: Any):
  """Machine limits of a floating dtype (ml_dtypes.finfo, which knows bfloat16/float8)."""
  return ml_dtypes.finfo(_to_np_dtype(dtype))


def iinfo(dtype: Any):
  """Machine limits of an integer dtype."""
  return ml_dtypes.iinfo(_to_np_dtype(dtype))


# ---------------------------------------------------------------------------
# Extended dtypes (JAX's `dtypes.extended`): dtypes that are not NumPy's, such as the dtype
# of typed PRNG keys. Their scalar types sit under these classes, so `issubdtype` can ask.


class extended(np.generic):
  """Scalar type of all extended dtypes: `issubdtype(key.dtype, dtypes.extended)` is True
  for typed PRNG keys and False for every NumPy dtype."""


class prng_key(extended):
  """Scalar type of the dtypes of typed PRNG keys (`key<fry>`)."""


def _extended_type(a: Any) -> type | None:
  """The scalar type (a subclass of `extended`) of an extended dtype `a`; None otherwise."""
  if isinstance(a, (np.dtype, type, str)) or a is None:
    return None
  t = getattr(a, "type", None)
  if isinstance(t, type) and issubclass(t, extended):
    return t
  name = getattr(a, "name", None)
  # NB: a key dtype that does not name its scalar type (`type`) is known by its printed
  # form, `key<impl>`, which is how JAX prints every key dtype.
  if isinstance(name, str) and name.startswith("key<"):
    return prng_key
  return None


_sub_byte_bits = {np.dtype(getattr(ml_dtypes, n)): b for n, b in (
    ("int1", 1), ("uint1", 1), ("int2", 2), ("uint2", 2), ("int4", 4), ("uint4", 4),
    ("float4_e2m1fn", 4),
    ("float6_e2m3fn", 6), ("float6_e3m2fn", 6))
    if hasattr(ml_dtypes, n)}


def itemsize_bits(dtype: Any) -> int:
  """The number of bits one element of `dtype` takes (4 for int4/float4, 8 for bool).

  Args:
    dtype: a dtype-like (NumPy dtype, scalar type or name).

  Returns:
    The bit width, as an int.

  Raises:
    ValueError: for an extended dtype (typed PRNG keys) or None.
    TypeError: for a value that is not a dtype.
  """
  if dtype is None:
    raise ValueError("dtype cannot be None.")   # NB: JAX's words
  if _extended_type(dtype) is not None:
    raise ValueError(f"unexpected input: {dtype=}")
  dt = _to_np_dtype(dtype)
  bits = _sub_byte_bits.get(dt)
  return bits if bits is not None else dt.itemsize * 8


def scalar_type_of(x: Any) -> type:
  """The Python scalar type (`bool`, `int`, `float` or `complex`) matching the dtype of `x`.

  Args:
    x: an array, a NumPy or Python scalar, or anything with a `dtype`.

  Returns:
    `bool` for booleans, `int` for (unsigned) integers, `float` for floating dtypes (bfloat16
    and float8 included), `complex` for complex ones.

  Raises:
    TypeError: if the dtype of `x` is not numeric.
  """
  dt = dtype(x)
  if dt in _custom_floats or np.issubdtype(dt, np.floating):
    return float
  if dt == bool_:
    return bool
  if np.issubdtype(dt, np.integer):
    return int
  if np.issubdtype(dt, np.complexfloating):
    return complex
  raise TypeError(f"Invalid scalar value {x!r}: expected a value of a boolean, integer, "
                  f"floating or complex dtype, got dtype {dt}.")
