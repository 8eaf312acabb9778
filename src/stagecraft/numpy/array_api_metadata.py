"""The Python array API's metadata for `stagecraft.numpy` (JAX's `jnp.__array_api_version__`
and `jnp.__array_namespace_info__()`): what array-API consumers (SciPy's `array_namespace`,
which jaxopt's examples reach through `scipy.integrate`) read to treat stagecraft's Arrays
as arrays of this namespace. See https://data-apis.org/array-api/ (the "inspection" API)."""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import dtypes
from stagecraft.config import config
from stagecraft.runtime import client

__all__ = ["__array_api_version__", "__array_namespace_info__", "ArrayNamespaceInfo"]

__array_api_version__ = "2024.12"

# The array API's dtype kinds, over the dtypes it names.
_KINDS = {
    "bool": ("bool",),
    "signed integer": ("int8", "int16", "int32", "int64"),
    "unsigned integer": ("uint8", "uint16", "uint32", "uint64"),
    "real floating": ("float32", "float64"),
    "complex floating": ("complex64", "complex128"),
}
_KINDS["integral"] = _KINDS["signed integer"] + _KINDS["unsigned integer"]
_KINDS["numeric"] = _KINDS["integral"] + _KINDS["real floating"] + _KINDS["complex floating"]
_WIDE = {"int64", "uint64", "float64", "complex128"}


def __array_namespace_info__() -> "ArrayNamespaceInfo":
  """The namespace's inspection object (array API `__array_namespace_info__`)."""
  return ArrayNamespaceInfo()


class ArrayNamespaceInfo:
  """What the namespace supports (array API inspection): `capabilities()`,
  `default_device()`, `devices()`, `default_dtypes()`, `dtypes(kind=...)`; the 64-bit dtypes
  only with x64 on, as JAX."""

  def capabilities(self) -> dict:
    """{'boolean indexing': False, 'data-dependent shapes': False, 'max dimensions': 64}:
    transformed code has static shapes; XLA's rank limit."""
    return {"boolean indexing": False, "data-dependent shapes": False, "max dimensions": 64}

  def default_device(self) -> None:
    """None: arrays are made uncommitted by default."""
    return None

  def devices(self) -> list[Any]:
    """None (uncommitted) followed by every device."""
    return [None, *client.devices()]

  def default_dtypes(self, *, device: Any = None) -> dict[str, np.dtype]:
    """The default dtypes per kind (32-bit, 64-bit with x64 on); `device` is ignored."""
    del device
    i = dtypes.default_int_dtype()
    return {"real floating": dtypes.default_float_dtype(),
            "complex floating": dtypes.default_complex_dtype(), "integral": i,
            "indexing": i}

  def dtypes(self, *, device: Any = None,
             kind: str | tuple[str, ...] | None = None) -> dict[str, np.dtype]:
    """{name: dtype} of the array API dtypes of `kind` (a kind name or a tuple of them;
    None: numeric and bool); `device` is ignored.

    Raises:
      KeyError: for an unknown kind name.
    """
    del device
    kinds = ("numeric", "bool") if kind is None else kind if isinstance(kind, tuple) else (kind,)
    names = [n for k in kinds for n in _KINDS[k]]
    return {n: np.dtype(n) for n in dict.fromkeys(names)
            if config.enable_x64 or n not in _WIDE}
