"""Differentiation with respect to sparse arrays (JAX's `jax.experimental.sparse.ad`):
`grad`, `value_and_grad`, `jacfwd`, `jacrev`, `jacobian`.

A sparse argument is differentiated through its `data`: the function is called on sparse
arrays rebuilt from the data being differentiated (indices held fixed), and the derivative
is wrapped back into a sparse array with the argument's indices: a gradient has the
argument's shape; a Jacobian of an output `[*o]` has shape `[*o, *arg.shape]` and `len(o)`
more batch dimensions (data `[*o, *arg.data.shape]`, indices broadcast).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import stagecraft.numpy as jnp
from stagecraft import api, tree_util
from stagecraft.experimental.sparse._base import JAXSparse
from stagecraft.experimental.sparse.bcoo import BCOO

__all__ = ["grad", "value_and_grad", "jacfwd", "jacrev", "jacobian"]


def _is_sparse(x):
  return isinstance(x, JAXSparse)


def _split(args, argnums):
  """The differentiated arguments with each sparse leaf replaced by its data, and a
  function putting sparse arrays back."""
  argnums_t = (argnums,) if isinstance(argnums, int) else tuple(argnums)
  templates = {}
  raw = list(args)
  for i in argnums_t:
    leaves, tree = tree_util.tree_flatten(args[i], is_leaf=_is_sparse)
    templates[i] = (tree, leaves)
    raw[i] = tree_util.tree_unflatten(tree, [x.data if _is_sparse(x) else x for x in leaves])

  def rebuild(i, value):
    tree, leaves = templates[i]
    got = tree_util.tree_flatten(value)[0]
    return tree_util.tree_unflatten(tree, [
        _with_data(t, v) if _is_sparse(t) else v for t, v in zip(leaves, got)])

  def wrap_out(i, deriv, out_shape=()):
    tree, leaves = templates[i]
    got = tree_util.tree_flatten(deriv)[0]
    return tree_util.tree_unflatten(tree, [
        _wrap_derivative(t, v, out_shape) if _is_sparse(t) else v
        for t, v in zip(leaves, got)])
  return argnums_t, raw, rebuild, wrap_out


def _with_data(template: JAXSparse, data: Any) -> JAXSparse:
  children = list(template.tree_flatten()[0])
  children[0] = data
  return type(template).tree_unflatten(template.tree_flatten()[1], children)


def _wrap_derivative(template: JAXSparse, d: Any, out_shape: Sequence[int]) -> JAXSparse:
  if not out_shape:
    return _with_data(template, d)
  if not isinstance(template, BCOO):
    raise NotImplementedError(f"Jacobians with respect to {type(template).__name__} arrays")
  out_shape = tuple(out_shape)
  indices = jnp.broadcast_to(template.indices, out_shape + tuple(template.indices.shape))
  return BCOO((d, indices), shape=out_shape + tuple(template.shape))


def _transform(make: Callable, fun: Callable, argnums, has_aux: bool, kind: str, **kwargs):
  def wrapped(*args, **kw):
    argnums_t, raw, rebuild, wrap_out = _split(args, argnums)

    def f(*xs):
      full = list(xs)
      for i in argnums_t:
        full[i] = rebuild(i, xs[i])
      return fun(*full, **kw)
    result = make(f, argnums=argnums, has_aux=has_aux, **kwargs)(*raw)
    if kind == "value_and_grad":
      value, g = result
    elif has_aux:
      g, aux = result
    else:
      g = result
    out_shape = ()
    if kind == "jac":
      out = fun(*args, **kw)
      out = out[0] if has_aux else out
      out_shape = tuple(jnp.shape(out))
    if isinstance(argnums, int):
      g = wrap_out(argnums, g, out_shape)
    else:
      g = tuple(wrap_out(i, gi, out_shape) for i, gi in zip(argnums_t, g))
    if kind == "value_and_grad":
      return value, g
    return (g, aux) if has_aux else g
  return wrapped


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
                   **kwargs) -> Callable:
  """`stagecraft.value_and_grad` where the gradient with respect to a sparse argument is a
  sparse array with its indices (JAX's `sparse.value_and_grad`)."""
  return _transform(api.value_and_grad, fun, argnums, has_aux, "value_and_grad", **kwargs)


def grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
         **kwargs) -> Callable:
  """`stagecraft.grad` where the gradient with respect to a sparse argument is a sparse
  array with its indices (JAX's `sparse.grad`)."""
  return _transform(api.grad, fun, argnums, has_aux, "grad", **kwargs)


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           **kwargs) -> Callable:
  """`stagecraft.jacfwd` with sparse Jacobians for sparse arguments (JAX's
  `sparse.jacfwd`; see the module docstring for their layout)."""
  return _transform(api.jacfwd, fun, argnums, has_aux, "jac", **kwargs)


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           **kwargs) -> Callable:
  """`stagecraft.jacrev` with sparse Jacobians for sparse arguments (JAX's
  `sparse.jacrev`)."""
  return _transform(api.jacrev, fun, argnums, has_aux, "jac", **kwargs)


jacobian = jacrev
