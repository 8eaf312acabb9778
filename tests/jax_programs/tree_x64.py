"""A JAX program: pytrees (`jax.tree.map`, `jax.tree_util`), 64-bit mode
(`jax.config.update("jax_enable_x64", True)`) and `jax.random`.

Run with JAX (`python tree_x64.py`) or on stagecraft (`python -m stagecraft run
tree_x64.py`): the printed numbers agree."""
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import tree_util

jax.config.update("jax_enable_x64", True)


@tree_util.register_pytree_node_class
class Scaled:
  """A pytree node: an array with a static scale."""

  def __init__(self, value, scale):
    self.value, self.scale = value, scale

  def tree_flatten(self):
    return (self.value,), self.scale

  @classmethod
  def tree_unflatten(cls, scale, children):
    return cls(children[0], scale)


class Pair(NamedTuple):
  a: jnp.ndarray
  b: jnp.ndarray


key = jax.random.key(42)
k1, k2, k3 = jax.random.split(key, 3)
tree = {
    "w": jax.random.normal(k1, (2, 3)),
    "pair": Pair(jax.random.uniform(k2, (3,)), jnp.arange(4)),
    "scaled": Scaled(jax.random.normal(k3, (2,), dtype=jnp.float32), 2.5),
}
print("dtypes", [str(leaf.dtype) for leaf in jax.tree.leaves(tree)])
print("x64", jnp.ones(1).dtype, jnp.arange(2).dtype)

doubled = jax.tree.map(lambda v: v * 2, tree)
print("num leaves", len(tree_util.tree_leaves(doubled)))
leaves, treedef = tree_util.tree_flatten(doubled)
print("sums", [f"{float(jnp.sum(leaf)):.12f}" for leaf in leaves])
rebuilt = tree_util.tree_unflatten(treedef, [leaf + 1 for leaf in leaves])
print("scale kept", rebuilt["scaled"].scale, "int sum", int(jnp.sum(rebuilt["pair"].b)))

summed = jax.tree.map(lambda a, b: a + b, tree, doubled)
total = tree_util.tree_reduce(lambda acc, v: acc + jnp.sum(v), summed, 0.0)
print(f"total {float(total):.12f}")

paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(tree)[0]]
print("paths", paths)


def loss(t):
  return jnp.sum(t["w"] ** 2) + jnp.sum(jnp.sin(t["pair"].a)) + jnp.sum(t["scaled"].value)


grads = jax.grad(loss)({"w": tree["w"], "pair": Pair(tree["pair"].a, jnp.zeros(4)),
                        "scaled": tree["scaled"]})
print("grad w", [f"{float(v):.12f}" for v in grads["w"].ravel()])
print("grad dtype", grads["w"].dtype, grads["scaled"].value.dtype)
bits = jax.random.bits(k1, (3,), dtype=jnp.uint64)
print("bits", [int(b) for b in bits])
print("randint", [int(v) for v in jax.random.randint(k2, (4,), 0, 2**40, dtype=jnp.int64)])
