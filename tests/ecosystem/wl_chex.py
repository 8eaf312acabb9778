"""chex workload: assertions inside jit, chex.dataclass pytrees, assert_trees_all_close.

Run as `python wl_chex.py` (real JAX) or `python -m stagecraft run wl_chex.py`; prints JSON.
"""
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np


@chex.dataclass
class State:
  w: chex.Array
  b: chex.Array
  step: int = 0


@jax.jit
def update(state: State, x: chex.Array) -> State:
  chex.assert_shape(x, (8, 3))
  chex.assert_rank(state.w, 2)
  chex.assert_type(x, float)
  chex.assert_equal_shape([state.w, jnp.ones((3, 2))])
  h = jnp.tanh(x @ state.w + state.b)
  chex.assert_shape(h, (8, 2))
  g = jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w + state.b) ** 2))(state.w)
  return state.replace(w=state.w - 0.1 * g, b=state.b + h.mean(0), step=state.step + 1)


x = jnp.asarray(np.linspace(-1, 1, 24).reshape(8, 3), jnp.float32)
s = State(w=jnp.full((3, 2), 0.3, jnp.float32), b=jnp.zeros(2, jnp.float32))
for _ in range(3):
  s = update(s, x)
leaves, treedef = jax.tree_util.tree_flatten(s)
chex.assert_trees_all_close(s, jax.tree_util.tree_map(lambda a: a + 1e-7, s), atol=1e-5)
chex.assert_tree_all_finite(s)
errors = []
try:
  update(s, jnp.ones((4, 3)))
except AssertionError as e:
  errors.append(type(e).__name__)
try:
  chex.assert_trees_all_close(s, jax.tree_util.tree_map(lambda a: a + 1.0, s))
except AssertionError as e:
  errors.append(type(e).__name__)
mapped = jax.vmap(lambda st: st.w.sum() + st.b.sum())(
    State(w=jnp.ones((4, 3, 2)), b=jnp.ones((4, 2)), step=jnp.arange(4)))
out = {"w": np.asarray(s.w).tolist(), "b": np.asarray(s.b).tolist(), "step": int(s.step),
       "n_leaves": len(leaves), "keys": sorted(s.keys()), "errors": errors,
       "vmap": np.asarray(mapped).tolist(),
       "is_array": isinstance(s.w, jax.Array)}
print(json.dumps(out))
