"""`stagecraft.experimental.shard_alike`: JAX 0.10.2's `shard_alike(x, y)`, which asks the
partitioner to give two values the same sharding, whatever it chooses for them.

Each pair of leaves goes through one `shard_alike` equation (two operands, two results, each
result the identity of its operand: same shape, dtype, weak type and sharding type). Its
lowering puts both values in one new Shardy sharding group
(`sdy.sharding_group %x group_id=N`), so under a mesh the partitioner propagates a sharding
found for one (e.g. a sharded argument) to the other; on one device the group changes
nothing. Group ids count up over the process, as JAX's do.

  >>> import stagecraft.numpy as jnp
  >>> a, b = shard_alike(jnp.arange(3.0), jnp.ones(3))
  >>> b
  Array([1., 1., 1.], dtype=float32)

Rules, as JAX's: linear (JVP: the primitive of the tangents; transpose: `shard_alike` of the
two cotangents, or both as they are when one is a symbolic zero); batching moves or
broadcasts `y`'s batch dimension to `x`'s (or `x`'s to `y`'s when `x` is unbatched).
Eagerly it runs as a compiled one-equation program.

Source: JAX 0.10.2's `jax/_src/shard_alike.py` (behaviour and messages, reimplemented).
"""
from __future__ import annotations

import itertools
from typing import Any

from stagecraft import core, tree_util
from stagecraft.api_util import abstractify
from stagecraft.interpreters import ad, batching, lowering

__all__ = ["shard_alike"]

# NB: one id per lowered equation, over the whole process (as JAX's counter).
_group_ids = itertools.count()


def shard_alike(x: Any, y: Any) -> tuple[Any, Any]:
  """Gives `x` and `y` (pytrees of arrays of the same structure) the same shardings, leaf by
  leaf, as JAX's `jax.experimental.shard_alike.shard_alike`.

  Args:
    x, y: pytrees of the same structure whose corresponding leaves (arrays or scalars) have
      the same shapes (dtypes may differ).

  Returns:
    `(x, y)`: the values unchanged (Python scalars become Arrays), each leaf pair through
    one `shard_alike` equation.

  Raises:
    ValueError: the tree structures differ, or two corresponding leaves' shapes differ
      (JAX's messages).
    TypeError: a leaf is not an array.
  """
  x_flat, x_tree = tree_util.tree_flatten(x)
  y_flat, y_tree = tree_util.tree_flatten(y)
  if x_tree != y_tree:
    raise ValueError(f"Trees should be equal. Got x_tree: {x_tree}, y_tree: {y_tree}")
  for a, b in zip(x_flat, y_flat):
    sa, sb = _shape(a), _shape(b)
    if sa != sb:
      raise ValueError(
          f"The leaves shapes of `x` and `y` should match. Got `x` leaf shape: {sa} and `y` "
          f"leaf shape: {sb}. File an issue at https://github.com/jax-ml/jax/issues if you "
          f"want this feature.")
  # NB: typed key arrays go through as their key data (`tree_flatten_traced`)
  x_data, x_dtree = tree_util.tree_flatten_traced(x)
  y_data, y_dtree = tree_util.tree_flatten_traced(y)
  outs = [shard_alike_p.bind(a, b) for a, b in zip(x_data, y_data)]
  xs = [o[0] for o in outs]
  ys = [o[1] for o in outs]
  return tree_util.tree_unflatten(x_dtree, xs), tree_util.tree_unflatten(y_dtree, ys)


def _shape(v: Any) -> tuple:
  if isinstance(v, core.Tracer):
    return tuple(v.aval.shape)
  if type(v) in tree_util.staged_types:   # a typed key array
    return tuple(v.shape)
  if isinstance(v, str):   # NB: JAX's message for a non-array leaf
    raise TypeError(f"Argument '{v}' of type {type(v)} is not a valid JAX type")
  if not hasattr(v, "dtype") and not isinstance(v, (bool, int, float, complex)):
    raise TypeError(f"Cannot interpret value of type {type(v)} as an abstract array; it does "
                    f"not have a dtype attribute")
  return tuple(abstractify(v, "x", "shard_alike").shape)


shard_alike_p = core.Primitive("shard_alike")
shard_alike_p.multiple_results = True
# impl: the generic one (a compiled one-equation program)
shard_alike_p.def_abstract_eval(lambda x, y: [x, y])
# Under Explicit mesh axes each result keeps its operand's sharding type (None: the avals of
# the abstract eval as they are), as JAX's identity abstract eval.
core.sharding_rules[shard_alike_p] = lambda x, y: None


def _shard_alike_jvp(primals, tangents):
  outs = shard_alike_p.bind(*primals)
  if all(type(t) is ad.Zero for t in tangents):
    return outs, [ad.Zero(ad.tangent_aval(core.get_aval(o))) for o in outs]
  return outs, shard_alike_p.bind(*[ad.instantiate_zeros(t) for t in tangents])


def _shard_alike_transpose(cts, x, y):
  x_ct, y_ct = cts
  if type(x_ct) is ad.Zero or type(y_ct) is ad.Zero:
    return [x_ct, y_ct]
  return list(shard_alike(x_ct, y_ct))


ad.primitive_jvps[shard_alike_p] = _shard_alike_jvp
ad.primitive_transposes[shard_alike_p] = _shard_alike_transpose


def _shard_alike_batcher(args, dims):
  x, y = args
  xd, yd = dims
  if xd == yd:
    return shard_alike(x, y), (xd, yd)
  if xd is None:
    x = batching.broadcast(x, y.shape[yd], yd)
    return shard_alike(x, y), (yd, yd)
  if yd is None:
    y = batching.broadcast(y, x.shape[xd], xd)
    return shard_alike(x, y), (xd, xd)
  y = batching.moveaxis(y, yd, xd)
  return shard_alike(x, y), (xd, xd)


batching.primitive_batchers[shard_alike_p] = _shard_alike_batcher


def _shard_alike_lowering(ctx, x, y):
  gid = next(_group_ids)
  for v, aval in zip((x, y), ctx.avals_in):
    ctx.fb.emit(f"sdy.sharding_group {v} group_id={gid} : {lowering.ir_type(aval)}")
  return [x, y]


lowering.register_lowering(shard_alike_p, _shard_alike_lowering)
