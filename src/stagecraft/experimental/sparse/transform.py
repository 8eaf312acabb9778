"""`sparsify`: run a function written for dense arrays on sparse ones (JAX's
`jax.experimental.sparse.transform`).

How: `sparsify(f)(*args)` traces `f` to a jaxpr on the dense avals of its arguments (a
sparse argument stands for its dense shape and dtype), then evaluates that jaxpr equation by
equation on the actual values, which are dense arrays or sparse arrays. An equation with no
sparse operand is bound as it is; one with a sparse operand runs the primitive's sparse rule
(`sparse_rules`), which computes with the sparse primitives (`bcoo_dot_general`, ...) and
gives sparse or dense results. Calls (`jit`) are evaluated recursively. A primitive without a
rule raises JAX's NotImplementedError (`sparse rule for cumsum is not implemented.`), and a
unary primitive that does not map 0 to 0 (`exp`) JAX's message saying that the output
would be dense.

  >>> import stagecraft.numpy as jnp
  >>> from stagecraft.experimental import sparse
  >>> M = sparse.BCOO.fromdense(jnp.array([[0., 1.], [2., 0.]]))
  >>> sparse.sparsify(lambda x: jnp.sin(x) * 2)(M)
  BCOO(float32[2, 2], nse=2)
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

import stagecraft.numpy as jnp
from stagecraft import core, tree_util
from stagecraft.core import Literal, ShapedArray
from stagecraft.experimental.sparse import bcoo as bcoo_mod
from stagecraft.experimental.sparse._base import JAXSparse
from stagecraft.experimental.sparse.bcoo import BCOO
from stagecraft.interpreters import ad, partial_eval as pe
from stagecraft.lax import elementwise as ew, reduction, shape as lax_shape, slicing
from stagecraft.lax.dot import dot_general_p

__all__ = ["sparsify", "sparse_rules", "SparseTracer", "eval_sparse"]


class SparseTracer(core.Tracer):
  """A traced value standing for a sparse array (JAX's `SparseTracer`). stagecraft's
  `sparsify` interprets jaxprs instead of tracing (`use_tracer=True` gives the same
  result), so this class only carries a sparse value and its dense aval."""

  def __init__(self, trace: Any, *, spvalue: Any):
    self._trace = trace
    self.spvalue = spvalue
    self.aval = ShapedArray(tuple(spvalue.shape), spvalue.dtype)


#: prim -> `rule(*values, **params)`: values are dense arrays or sparse arrays (at least one
#: sparse); returns one value (or a list for primitives with several results).
sparse_rules: dict[core.Primitive, Callable] = {}


def _dense_aval(x: Any) -> ShapedArray:
  if isinstance(x, JAXSparse):
    return ShapedArray(tuple(x.shape), np.dtype(x.dtype))
  return core.get_aval(x)


def sparsify(f: Callable, use_tracer: bool = False) -> Callable:
  """`f` made to accept sparse arrays (JAX's `sparsify`).

  Args:
    f: a function of arrays (pytrees) written with stagecraft.numpy / lax operations.
    use_tracer: accepted for JAX's signature (the interpreter is used either way).

  Returns:
    A function taking the same arguments, where any array may be a sparse array (BCOO);
    results are sparse where the sparse rules keep them so.

  Raises:
    NotImplementedError: a primitive without a sparse rule reached with a sparse operand
      (JAX's messages).
  """
  del use_tracer

  @functools.wraps(f)
  def wrapped(*args, **kwargs):
    leaves, tree = tree_util.tree_flatten((args, kwargs),
                                          is_leaf=lambda x: isinstance(x, JAXSparse))
    avals = [_dense_aval(x) for x in leaves]
    out_tree: list = []

    def flat_fun(*xs):
      a, k = tree_util.tree_unflatten(tree, xs)
      out = f(*a, **k)
      out_leaves, t = tree_util.tree_flatten(out)
      out_tree.append(t)
      return out_leaves
    jaxpr, consts = pe.trace_to_jaxpr(flat_fun, avals)
    outs = eval_sparse(jaxpr, consts, leaves)
    return tree_util.tree_unflatten(out_tree[0], outs)
  return wrapped


def eval_sparse(jaxpr: core.Jaxpr, consts: list, args: list) -> list:
  """Evaluates `jaxpr` on `args` (dense or sparse values) with the sparse rules."""
  env: dict = {}

  def read(v):
    return v.val if type(v) is Literal else env[v]

  for v, c in zip(jaxpr.constvars, consts):
    env[v] = c
  for v, a in zip(jaxpr.invars, args):
    env[v] = a
  for eqn in jaxpr.eqns:
    vals = [read(v) for v in eqn.invars]
    prim = eqn.primitive
    if not any(isinstance(x, JAXSparse) for x in vals):
      out = prim.bind(*vals, **eqn.params)
      outs = list(out) if prim.multiple_results else [out]
    elif prim in core.closed_calls:
      closed = eqn.params[core.closed_calls[prim]]
      outs = eval_sparse(closed.jaxpr, closed.consts, vals)
    else:
      rule = sparse_rules.get(prim)
      if rule is None:
        raise NotImplementedError(f"sparse rule for {prim.name} is not implemented.")
      out = rule(*vals, **eqn.params)
      outs = list(out) if prim.multiple_results else [out]
    for v, o in zip(eqn.outvars, outs):
      env[v] = o
  return [read(v) for v in jaxpr.outvars]


# ---------------------------------------------------------------------------
# Rules


def _densify_error(prim: core.Primitive):
  def rule(*args, **params):
    raise NotImplementedError(
        f"sparse rule for {prim.name} is not implemented because it would result in dense "
        f"output. If this is your intent, use sparse.todense() to convert your arguments "
        f"to dense matrices.")
  return rule


def _as_bcoo(x: Any) -> BCOO:
  if isinstance(x, BCOO):
    return x
  if isinstance(x, JAXSparse) and hasattr(x, "to_bcoo"):
    return x.to_bcoo()
  raise NotImplementedError(f"sparsify: no sparse rule for operands of type {type(x)}")


def _zero_preserving_unary(prim: core.Primitive):
  def rule(x, **params):
    x = _as_bcoo(x)
    return BCOO((prim.bind(x.data, **params), x.indices), **x._info._asdict())
  return rule


for _p in (ew.neg_p, ew.sin_p, ew.tan_p, ew.asin_p, ew.atan_p, ew.sinh_p, ew.tanh_p,
           ew.asinh_p, ew.atanh_p, ew.abs_p, ew.sign_p, ew.sqrt_p, ew.cbrt_p, ew.expm1_p,
           ew.log1p_p, ew.real_p, ew.imag_p, ew.conj_p, ew.floor_p, ew.ceil_p, ew.round_p,
           ew.convert_element_type_p, ew.erf_p, ew.erf_inv_p, ew.square_p):
  sparse_rules[_p] = _zero_preserving_unary(_p)

for _p in (ew.exp_p, ew.log_p, ew.cos_p, ew.acos_p, ew.cosh_p, ew.acosh_p, ew.logistic_p,
           ew.rsqrt_p, ew.exp2_p, ew.not_p, ew.is_finite_p):
  sparse_rules[_p] = _densify_error(_p)


def _integer_pow_rule(x, *, y):
  if y <= 0:
    _densify_error(ew.integer_pow_p)(x)
  return _zero_preserving_unary(ew.integer_pow_p)(x, y=y)


sparse_rules[ew.integer_pow_p] = _integer_pow_rule


def _add_rule(prim, negate):
  def rule(x, y, **params):
    if isinstance(x, JAXSparse) and isinstance(y, JAXSparse):
      x, y = _as_bcoo(x), _as_bcoo(y)
      if x.indices is y.indices:
        return BCOO((prim.bind(x.data, y.data, **params), x.indices), **x._info._asdict())
      return bcoo_mod.bcoo_add(x, -y if negate else y)
    x = x.todense() if isinstance(x, JAXSparse) else x
    y = y.todense() if isinstance(y, JAXSparse) else y
    return prim.bind(x, y, **params)
  return rule


sparse_rules[ew.add_p] = _add_rule(ew.add_p, False)
sparse_rules[ad.add_any_p] = _add_rule(ad.add_any_p, False)
sparse_rules[ew.sub_p] = _add_rule(ew.sub_p, True)


def _mul_rule(x, y, **params):
  if isinstance(x, JAXSparse) and isinstance(y, JAXSparse):
    x, y = _as_bcoo(x), _as_bcoo(y)
    if x.indices is y.indices:
      return BCOO((x.data * y.data, x.indices), **x._info._asdict())
    return bcoo_mod.bcoo_multiply_sparse(x, y)
  sp, dense = (x, y) if isinstance(x, JAXSparse) else (y, x)
  sp = _as_bcoo(sp)
  dense = jnp.asarray(dense)
  if dense.ndim < sp.ndim and dense.size != 1:
    dense = jnp.broadcast_to(dense, np.broadcast_shapes(dense.shape, sp.shape))
  elif dense.size == 1:
    dense = jnp.reshape(dense, ())
  data = bcoo_mod.bcoo_multiply_dense(sp, dense)
  return BCOO((data, sp.indices), **sp._info._asdict())


sparse_rules[ew.mul_p] = _mul_rule


def _div_rule(x, y, **params):
  if isinstance(y, JAXSparse):
    raise NotImplementedError("sparse rule for div is not implemented because it would "
                              "result in dense output. If this is your intent, use "
                              "sparse.todense() to convert your arguments to dense matrices.")
  x = _as_bcoo(x)
  y = jnp.asarray(y)
  if y.size == 1:
    return BCOO((ew.div(x.data, jnp.reshape(y, ()).astype(x.dtype)), x.indices),
                **x._info._asdict())
  return BCOO((bcoo_mod.bcoo_multiply_dense(x, 1 / y), x.indices), **x._info._asdict())


sparse_rules[ew.div_p] = _div_rule


def _dot_general_rule(lhs, rhs, *, dimension_numbers, precision=None,
                      preferred_element_type=None, **params):
  lhs = _as_bcoo(lhs) if isinstance(lhs, JAXSparse) else lhs
  rhs = _as_bcoo(rhs) if isinstance(rhs, JAXSparse) else rhs
  return bcoo_mod.bcoo_dot_general(lhs, rhs, dimension_numbers=dimension_numbers,
                                   preferred_element_type=preferred_element_type)


sparse_rules[dot_general_p] = _dot_general_rule


def _reduce_sum_rule(x, *, axes, **params):
  out = bcoo_mod.bcoo_reduce_sum(_as_bcoo(x), axes=axes)
  return out.todense() if out.ndim == 0 else out


sparse_rules[reduction.reduce_sum_p] = _reduce_sum_rule
sparse_rules[lax_shape.transpose_p] = lambda x, *, permutation, **p: bcoo_mod.bcoo_transpose(
    _as_bcoo(x), permutation=permutation)
sparse_rules[lax_shape.reshape_p] = lambda x, *, new_sizes, dimensions=None, **p: (
    bcoo_mod.bcoo_reshape(_as_bcoo(x), new_sizes=new_sizes, dimensions=dimensions))
sparse_rules[lax_shape.squeeze_p] = lambda x, *, dimensions, **p: bcoo_mod.bcoo_squeeze(
    _as_bcoo(x), dimensions=dimensions)
sparse_rules[lax_shape.broadcast_in_dim_p] = (
    lambda x, *, shape, broadcast_dimensions, **p: bcoo_mod.bcoo_broadcast_in_dim(
        _as_bcoo(x), shape=shape, broadcast_dimensions=broadcast_dimensions))
sparse_rules[lax_shape.rev_p] = lambda x, *, dimensions, **p: bcoo_mod.bcoo_rev(
    _as_bcoo(x), dimensions)


def _concatenate_rule(*operands, dimension, **params):
  if all(isinstance(x, JAXSparse) for x in operands):
    return bcoo_mod.bcoo_concatenate([_as_bcoo(x) for x in operands], dimension=dimension)
  dense = [x.todense() if isinstance(x, JAXSparse) else x for x in operands]
  return lax_shape.concatenate_p.bind(*dense, dimension=dimension, **params)


sparse_rules[lax_shape.concatenate_p] = _concatenate_rule


def _slice_rule(x, *, start_indices, limit_indices, strides=None, **params):
  return bcoo_mod.bcoo_slice(_as_bcoo(x), start_indices=start_indices,
                             limit_indices=limit_indices, strides=strides)


sparse_rules[lax_shape.slice_p] = _slice_rule


def _dynamic_slice_rule(x, *starts, slice_sizes, **params):
  if any(isinstance(s, JAXSparse) for s in starts):
    raise NotImplementedError("sparse rule for dynamic_slice is not implemented for sparse "
                              "start indices.")
  return bcoo_mod.bcoo_dynamic_slice(_as_bcoo(x), list(starts), slice_sizes)


sparse_rules[slicing.dynamic_slice_p] = _dynamic_slice_rule


def _gather_rule(operand, indices, *, dimension_numbers, slice_sizes, unique_indices=False,
                 indices_are_sorted=False, mode=None, fill_value=None, **params):
  if isinstance(indices, JAXSparse):
    raise NotImplementedError("sparse rule for gather is not implemented for sparse "
                              "indices.")
  return bcoo_mod.bcoo_gather(_as_bcoo(operand), indices, dimension_numbers, slice_sizes,
                              unique_indices=unique_indices,
                              indices_are_sorted=indices_are_sorted, mode=mode,
                              fill_value=fill_value)


sparse_rules[slicing.gather_p] = _gather_rule


def bcoo_getitem(self: BCOO, idx: Any) -> Any:
  """`BCOO.__getitem__`: NumPy indexing of a BCOO array, through `sparsify` (as JAX's)."""
  return sparsify(lambda x: x[idx])(self)


BCOO.__getitem__ = bcoo_getitem
