"""Dtype objects usable as NumPy scalar types: `jnp.float32(3.)` gives a 0-d Array, and
`np.dtype(jnp.float32)` is float32 (each has a `.dtype` attribute, as in JAX).

The abstract classes of NumPy's scalar hierarchy (`generic`, `number`, `integer`, `inexact`,
`floating`, ...) are NumPy's own, re-exported as JAX's numpy does, so that
`jnp.issubdtype(x.dtype, jnp.integer)` and `isinstance(np.float32(1), jnp.floating)` behave as
in NumPy."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from stagecraft import dtypes
from stagecraft.numpy.array_constructors import asarray


#: The module the scalar types' reprs name: `stagecraft.numpy`, or `jax.numpy` while
#: `stagecraft.compat` serves `import jax` (a program printing `jnp.float32`, or a flax
#: treedef holding it, prints what it prints under JAX).
repr_module = ["stagecraft.numpy"]


class _ScalarMeta(type):
  def __eq__(cls, other):
    return cls is other or (isinstance(other, (np.dtype, type, str)) and _eq_dtype(cls, other))

  def __ne__(cls, other):
    return not _ScalarMeta.__eq__(cls, other)   # cls.__eq__ would be object's, unbound

  def __hash__(cls):
    return hash(cls.dtype.type)

  def __instancecheck__(cls, instance):
    return isinstance(instance, cls.dtype.type)

  def __repr__(cls):
    return f"<class '{repr_module[0]}.{cls.dtype.name}'>"

  def __call__(cls, x=0):
    # NB: as JAX's, the scalar types convert with asarray (no copy is staged; a value of the
    # type already is returned as it is), whose name its x64 warning gives.
    return asarray(x, dtype=dtypes.check_user_dtype(cls.dtype, "asarray"))


def _eq_dtype(cls, other):
  try:
    return np.dtype(other) == cls.dtype
  except TypeError:
    return False


def _make(name: str, dtype: np.dtype):
  doc = (f"The {np.dtype(dtype).name} scalar type: `{name}(x)` is a 0-d Array of that dtype "
         f"(canonicalized: 64-bit types narrow unless x64 is on); usable as a dtype.")
  return _ScalarMeta(name, (object,), {"dtype": np.dtype(dtype), "__doc__": doc})


bool_ = _make("bool", dtypes.bool_)   # JAX names the class `bool` (pytest ids, `__name__`)
int8 = _make("int8", dtypes.int8)
int16 = _make("int16", dtypes.int16)
int32 = _make("int32", dtypes.int32)
int64 = _make("int64", dtypes.int64)
uint8 = _make("uint8", dtypes.uint8)
uint16 = _make("uint16", dtypes.uint16)
uint32 = _make("uint32", dtypes.uint32)
uint64 = _make("uint64", dtypes.uint64)
float16 = _make("float16", dtypes.float16)
bfloat16 = _make("bfloat16", dtypes.bfloat16)
float32 = _make("float32", dtypes.float32)
float64 = _make("float64", dtypes.float64)
complex64 = _make("complex64", dtypes.complex64)
complex128 = _make("complex128", dtypes.complex128)
float8_e4m3fn = _make("float8_e4m3fn", dtypes.float8_e4m3fn)
float8_e5m2 = _make("float8_e5m2", dtypes.float8_e5m2)
# The narrow ml_dtypes types JAX's numpy also names. NB: stagecraft.dtypes and the lowering
# know none of them yet, so they serve as dtypes (issubdtype, finfo/iinfo, np.dtype), but
# building an Array of one raises.
float8_e3m4 = _make("float8_e3m4", ml_dtypes.float8_e3m4)
float8_e4m3 = _make("float8_e4m3", ml_dtypes.float8_e4m3)
float8_e4m3b11fnuz = _make("float8_e4m3b11fnuz", ml_dtypes.float8_e4m3b11fnuz)
float8_e4m3fnuz = _make("float8_e4m3fnuz", ml_dtypes.float8_e4m3fnuz)
float8_e5m2fnuz = _make("float8_e5m2fnuz", ml_dtypes.float8_e5m2fnuz)
float8_e8m0fnu = _make("float8_e8m0fnu", ml_dtypes.float8_e8m0fnu)
float6_e2m3fn = _make("float6_e2m3fn", ml_dtypes.float6_e2m3fn)
float6_e3m2fn = _make("float6_e3m2fn", ml_dtypes.float6_e3m2fn)
float4_e2m1fn = _make("float4_e2m1fn", ml_dtypes.float4_e2m1fn)
int1 = _make("int1", ml_dtypes.int1)
int2 = _make("int2", ml_dtypes.int2)
int4 = _make("int4", ml_dtypes.int4)
uint1 = _make("uint1", ml_dtypes.uint1)
uint2 = _make("uint2", ml_dtypes.uint2)
uint4 = _make("uint4", ml_dtypes.uint4)
# The default-width aliases, as in JAX's numpy.
int_ = int64
uint = uint64
float_ = float64
complex_ = complex128
csingle = complex64
cdouble = complex128
bool = bool_   # noqa: A001  (JAX's numpy names it so; Python's bool is builtins.bool here)

# NumPy's abstract scalar classes, as JAX's numpy re-exports them.
generic = np.generic
number = np.number
integer = np.integer
signedinteger = np.signedinteger
unsignedinteger = np.unsignedinteger
inexact = np.inexact
floating = np.floating
complexfloating = np.complexfloating
character = np.character
flexible = np.flexible
object_ = np.object_

# The extended types above, by the NumPy abstract class they belong under (ml_dtypes' types
# derive from np.generic only, so np.issubdtype does not know).
extended_kinds = {
    **{np.dtype(t): np.signedinteger for t in (ml_dtypes.int1, ml_dtypes.int2, ml_dtypes.int4)},
    **{np.dtype(t): np.unsignedinteger for t in (ml_dtypes.uint1, ml_dtypes.uint2,
                                                 ml_dtypes.uint4)},
    **{np.dtype(t): np.floating for t in (
        ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e3m4,
        ml_dtypes.float8_e4m3, ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu, ml_dtypes.float6_e2m3fn,
        ml_dtypes.float6_e3m2fn, ml_dtypes.float4_e2m1fn)},
}
single = float32
double = float64
half = float16

__all__ = ["bool_", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
           "uint64",
           "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
           "float8_e4m3fn", "float8_e5m2", "int_", "uint", "float_", "complex_", "single",
           "double", "half", "csingle", "cdouble", "float8_e3m4", "float8_e4m3",
           "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
           "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "int1", "int2", "int4", "uint1",
           "uint2", "uint4", "generic", "number", "integer", "signedinteger",
           "unsignedinteger", "inexact", "floating", "complexfloating", "character", "flexible",
           "object_"]
