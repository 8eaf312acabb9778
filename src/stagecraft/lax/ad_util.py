"""`stop_gradient`: the identity whose derivative is zero."""
from __future__ import annotations

from typing import Any

from stagecraft import core, dtypes, tree_util
from stagecraft.interpreters import ad, batching, lowering

__all__ = ["stop_gradient", "stop_gradient_p"]

stop_gradient_p = core.Primitive("stop_gradient")
stop_gradient_p.def_abstract_eval(lambda x: x)
lowering.register_lowering(stop_gradient_p, lambda ctx, x: [x])
ad.primitive_jvps[stop_gradient_p] = lambda primals, tangents: (
    stop_gradient_p.bind(*primals), ad.Zero.from_value(primals[0]))
batching.defvectorized(stop_gradient_p)


def stop_gradient(x: Any) -> Any:
  """The identity on values; differentiation treats the result as a constant.

  Args:
    x: an array or a pytree of arrays (typed PRNG keys pass through unchanged).

  Returns:
    `x`, with the same structure, shapes and dtypes.

  Example:
    >>> import stagecraft, stagecraft.numpy as jnp
    >>> print(stagecraft.make_jaxpr(stop_gradient)(jnp.ones(2)))
    { lambda ; a:f32[2]. let b:f32[2] = stop_gradient a in (b,) }
  """
  def stop(leaf):
    # As JAX 0.10's: integer and bool leaves are marked too (the equation shows in printed
    # jaxprs); a JVP tracer's primal is marked (it is a constant to this differentiation).
    if isinstance(leaf, ad.JVPTracer):
      return stop(leaf.primal)
    if dtypes.issubdtype(core.get_aval(leaf).dtype, dtypes.extended):
      return leaf
    return stop_gradient_p.bind(leaf)
  return tree_util.tree_map_traced(stop, x)   # typed keys: their (integer) data
