"""Helpers shared by the minimizers of `stagecraft.scipy.optimize` (not exported)."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft import numpy as jnp
from stagecraft.interpreters import ad

__all__ = ["value_and_grad", "dot", "select_tree", "real_dtype_of", "to_dtype"]

# NB: the minimizers' inner products decide step lengths; keep them at full precision.
dot = partial(jnp.dot, precision=lax.Precision.HIGHEST)


def value_and_grad(fun: Callable, x: Any):
  """`(fun(x), grad fun(x))` for a real scalar-valued `fun` of one array `x`.

  The reverse-mode derivative comes from linearizing `fun` at `x` and transposing the linear
  jaxpr (the two steps of `stagecraft.vjp`, which lives in a higher layer).

  Raises:
    TypeError: if `fun(x)` is not a real scalar.
  """
  (val,), lin, residuals, zero_outs = ad.linearize_flat(lambda x: [fun(x)], [x])
  aval = core.get_aval(val)
  if aval.shape != () or not dtypes.is_inexact(aval.dtype) or dtypes.is_complex(aval.dtype):
    raise TypeError("the objective function must return a real floating-point scalar, "
                    f"got {aval.str_short()}.")
  x_aval = ad.tangent_aval(core.get_aval(x))
  if zero_outs[0]:
    return val, jnp.zeros(x_aval.shape, x_aval.dtype)
  seed = jnp.ones((), aval.dtype)
  args = [*residuals, ad.UndefinedPrimal(x_aval)]
  ct = ad.backward_pass(lin, args, [seed])[-1]
  return val, ad.instantiate_zeros(ct)


def select_tree(pred: Any, on_true: Any, on_false: Any) -> Any:
  """`jnp.where(pred, a, b)` leaf by leaf over two pytrees (NamedTuples) of one structure."""
  return type(on_true)(*[jnp.where(pred, a, b) for a, b in zip(on_true, on_false)])


def real_dtype_of(x: Any) -> np.dtype:
  """The real dtype matching the (possibly complex) dtype of `x`."""
  dt = np.dtype(core.get_aval(x).dtype)
  return np.dtype(np.finfo(dt).dtype) if dtypes.is_complex(dt) else dt


def weak_int(v: int) -> Any:
  """`v` as a weakly typed array of the default integer dtype (int64 with x64, else int32):
  what a Python int in a while-loop carry becomes, as JAX's minimizers' counters and status
  codes are typed (`~int64[]` under x64)."""
  return lax.convert_element_type(jnp.asarray(v), dtypes.default_int_dtype(), weak_type=True)


def to_dtype(v: Any, dtype: Any) -> Any:
  """`v` as a strongly typed array of `dtype` (a stable while-loop carry type)."""
  return lax.convert_element_type(jnp.asarray(v), dtype, weak_type=False)
