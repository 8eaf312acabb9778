"""Dtype objects usable as NumPy scalar types: `jnp.float32(3.)` gives a 0-d Array, and
`np.dtype(jnp.float32)` is float32 (each has a `.dtype` attribute, as in JAX)."""
from __future__ import annotations

import numpy as np

from stagecraft import dtypes
from stagecraft.numpy.array_constructors import array


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
    return f"<class 'stagecraft.numpy.{cls.dtype.name}'>"

  def __call__(cls, x=0):
    return array(x, dtype=cls.dtype)


def _eq_dtype(cls, other):
  try:
    return np.dtype(other) == cls.dtype
  except TypeError:
    return False


def _make(name: str, dtype: np.dtype):
  doc = (f"The {np.dtype(dtype).name} scalar type: `{name}(x)` is a 0-d Array of that dtype "
         f"(canonicalized: 64-bit types narrow unless x64 is on); usable as a dtype.")
  return _ScalarMeta(name, (object,), {"dtype": np.dtype(dtype), "__doc__": doc})


bool_ = _make("bool_", dtypes.bool_)
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
# The default-width aliases, as in JAX's numpy.
int_ = int64
uint = uint64
float_ = float64
complex_ = complex128
single = float32
double = float64
half = float16

__all__ = ["bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
           "float8_e4m3fn", "float8_e5m2", "int_", "uint", "float_", "complex_", "single",
           "double", "half"]
