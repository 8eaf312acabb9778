"""Helpers shared by the modules of `stagecraft.scipy.stats` (internal: not part of the API).

They check that arguments are array-likes, promote them as JAX's `scipy.stats` does (to one
common inexact dtype, integers and bools to the default float dtype, weak types kept), and
hold a few numerically careful building blocks used by several distributions."""
from __future__ import annotations

from typing import Any

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft import numpy as jnp
from stagecraft.numpy import ufuncs
# NB: `check_arraylike` (numpy.util's, JAX's rule) is also read here by the distributions.
from stagecraft.numpy.util import as_array, check_arraylike, convert_dtype, lax_const

__all__ = ["check_arraylike", "promote_args_inexact", "promote_dtypes_inexact",
           "promote_args_numeric", "log1mexp", "log_diff_exp"]


def _to_inexact_dtype(dtype: np.dtype) -> np.dtype:
  # NB: JAX's table (dtypes.to_inexact_dtype): only 64-bit integers become float64, so an
  # int32 array gives float32 also under x64.
  if dtypes.is_inexact(dtype):
    return dtype
  if dtype in (np.dtype(np.int64), np.dtype(np.uint64)):
    return np.dtype(np.float64)
  return np.dtype(np.float32)


def _convert_all(args, dtype, weak):
  out = []
  for a in args:
    if not weak and dtypes.is_python_scalar(a):
      # As JAX's: a Python scalar made strong converts on the host (a literal in a jaxpr,
      # no `convert_element_type` equation).
      out.append(np.asarray(convert_dtype(a, dtype, False), dtype))
      continue
    a = as_array(a)
    aval = core.get_aval(a)
    if aval.dtype != dtype or aval.weak_type != weak:
      a = lax.convert_element_type(a, dtype, weak_type=weak)
    out.append(a)
  return out


def promote_args_inexact(fun_name: str, *args: Any) -> list:
  """`args` checked and converted to Arrays of their common inexact dtype, as JAX's
  `promote_args_inexact`.

  Every argument gets the same dtype and weak type: weak only if all arguments are weakly
  typed (Python scalars); a Python scalar made strong stays a host scalar (a literal). Then,
  as JAX's, arguments of different non-scalar ranks get leading size-1 dimensions
  (`ufuncs.promote_shapes`; config numpy_rank_promotion applies). Bools and integers up to 32 bits become float32, 64-bit integers
  float64 (as JAX's `to_inexact_dtype`).
  """
  check_arraylike(fun_name, *args)
  return ufuncs.promote_shapes(fun_name, *promote_dtypes_inexact(*args))


def promote_dtypes_inexact(*args: Any) -> list:
  """`promote_args_inexact` without the array-like check (for arguments already checked)."""
  dtype, weak = dtypes.result_type(*args, return_weak_type_flag=True)
  return _convert_all(args, _to_inexact_dtype(np.dtype(dtype)), weak)


def promote_args_numeric(fun_name: str, *args: Any) -> list:
  """`args` checked and converted to Arrays of their common numeric dtype (bool -> int32)."""
  check_arraylike(fun_name, *args)
  dtype, weak = dtypes.result_type(*args, return_weak_type_flag=True)
  dtype = np.dtype(np.int32) if dtype == np.dtype(bool) else np.dtype(dtype)
  return _convert_all(args, dtype, weak)


def log1mexp(x: Any) -> Any:
  """`log(1 - exp(-x))` for `x >= 0`, accurate for small and large `x`.

  Algorithm: Maechler (2012), "Accurately computing log(1 - exp(-|a|))": `log(-expm1(-x))`
  below `log 2`, `log1p(-exp(-x))` above it.
  """
  small = x < np.log(2.0)
  safe_small = jnp.where(small, x, 1.0)
  safe_large = jnp.where(small, 1.0, x)
  return jnp.where(small, jnp.log(-jnp.expm1(-safe_small)), jnp.log1p(-jnp.exp(-safe_large)))


def log_diff_exp(x: Any, y: Any) -> Any:
  """`log(exp(x) - exp(y))` for `x >= y`; `-inf` where `x == y`, `x` where `y == -inf`, and
  NaN where `x < y` (the difference is negative)."""
  y_is_ninf = y == -np.inf
  d = jnp.where(y_is_ninf, 1.0, x - y)
  out = x + jnp.where(d >= 0, log1mexp(jnp.where(d >= 0, d, 1.0)), np.nan)
  return jnp.where(y_is_ninf, x, out)
