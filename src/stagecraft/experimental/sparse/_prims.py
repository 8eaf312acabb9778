"""`define_primitive`: a sparse-format primitive whose rules all derive from one impl (a
composition of stagecraft operations), for the formats built on BCOO's algorithms (BCSR,
COO, CSR). Its abstract eval traces the impl; its lowering is `mlir.lower_fun(impl)`; it is
multilinear in the floating operands named `linear` (JVP: the sum of the primitive applied
to each tangent in turn; transpose: the linear transpose of the impl in the one undefined
operand); its batching rule maps the impl (`vmap`), so a batched equation shows the impl's
operations."""
from __future__ import annotations

from functools import partial
from typing import Callable, Sequence

from stagecraft import api, core
from stagecraft.core import Primitive
from stagecraft.interpreters import ad, batching, mlir

__all__ = ["define_primitive", "transpose_via_impl"]


def define_primitive(name: str, impl: Callable, *, multiple_results: bool,
                     linear: Sequence[int], linear_outputs: int = 1) -> Primitive:
  """The primitive `name` computing `impl(*operands, **params)`; see the module docstring.

  Args:
    name: JAX's primitive name.
    impl: the computation.
    multiple_results: whether `impl` returns a sequence.
    linear: the operand positions in which the primitive is (multi)linear.
    linear_outputs: how many leading results depend linearly on those operands (the others,
      index arrays, have zero tangents).
  """
  prim = Primitive(name)
  prim.multiple_results = multiple_results

  def abstract_eval(*avals, **params):
    structs = [core.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    out = api.eval_shape(partial(impl, **params), *structs)
    outs = list(out) if multiple_results else [out]
    res = [core.ShapedArray(tuple(o.shape), o.dtype) for o in outs]
    return res if multiple_results else res[0]

  def jvp(primals, tangents, **params):
    out = prim.bind(*primals, **params)
    outs = list(out) if multiple_results else [out]
    t_out = [ad.Zero.from_primal_value(o) for o in outs]
    for i in linear:
      if type(tangents[i]) is ad.Zero:
        continue
      args = list(primals)
      args[i] = tangents[i]
      part = prim.bind(*args, **params)
      part = list(part) if multiple_results else [part]
      for k in range(linear_outputs):
        t_out[k] = ad.add_tangents(t_out[k], part[k])
    return (outs, t_out) if multiple_results else (out, t_out[0])

  def batch_rule(args, dims, **params):
    in_axes = [None if d is batching.not_mapped else int(d) for d in dims]
    out = api.vmap(partial(impl, **params), in_axes=in_axes)(*args)
    return (out, [0] * len(out)) if multiple_results else (out, 0)

  prim.def_abstract_eval(abstract_eval)
  mlir.register_lowering(prim, mlir.lower_fun(partial(_call, impl), multiple_results))
  ad.primitive_jvps[prim] = jvp
  ad.primitive_transposes[prim] = transpose_via_impl(prim, impl, linear_outputs)
  batching.primitive_batchers[prim] = batch_rule
  return prim


def _call(impl, *args, **params):
  out = impl(*args, **params)
  return list(out) if isinstance(out, (tuple, list)) else out


def transpose_via_impl(prim: Primitive, impl, n_linear_out: int = 1):
  """A transpose rule for a primitive linear in each of its floating operands separately:
  the linear transpose of `impl` in the one undefined operand (other operands known), for
  the primitive's first `n_linear_out` results (zero cotangents give no contribution).

  Raises (when the rule runs):
    ValueError: more or fewer than one undefined (linear) operand."""
  def rule(ct, *args, **params):
    undefined = [i for i, a in enumerate(args) if ad.is_undefined_primal(a)]
    if len(undefined) != 1:
      raise ValueError(f"transpose of {prim.name}: expected exactly one linear operand, got "
                       f"{len(undefined)}")
    cts = list(ct) if prim.multiple_results else [ct]
    cts = cts[:n_linear_out]
    if all(type(c) is ad.Zero for c in cts):
      return [None] * len(args)
    i = undefined[0]
    aval = args[i].aval

    def f(x):
      xs = list(args)
      xs[i] = x
      out = impl(*xs, **params)
      return list(out)[:n_linear_out] if prim.multiple_results else [out]
    cts = [ad.instantiate_zeros(c) for c in cts]
    res, = api.linear_transpose(f, core.ShapeDtypeStruct(aval.shape, aval.dtype))(cts)
    outs = [None] * len(args)
    outs[i] = res
    return outs
  return rule
