"""equinox workload: an MLP trained with filter_jit / filter_value_and_grad / filter_grad,
plus filter_vmap and partition/combine.

Run as `python wl_equinox.py` (real JAX) or `python -m stagecraft run wl_equinox.py`; prints
JSON.
"""
import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

key = jax.random.PRNGKey(0)
mkey, dkey = jax.random.split(key)
model = eqx.nn.MLP(in_size=2, out_size=1, width_size=16, depth=2, activation=jax.nn.tanh,
                   key=mkey)
X = jax.random.normal(dkey, (32, 2))
Y = jnp.sin(X[:, :1]) * jnp.cos(X[:, 1:])


def loss(model, X, Y):
  pred = jax.vmap(model)(X)
  return jnp.mean((pred - Y) ** 2)


@eqx.filter_jit
def step(model, X, Y):
  l, g = eqx.filter_value_and_grad(loss)(model, X, Y)
  model = eqx.apply_updates(model, jax.tree_util.tree_map(lambda gp: -0.1 * gp, g))
  return model, l


losses = []
for _ in range(20):
  # NB: the MLP's activation is a non-array leaf; filter_value_and_grad differentiates only
  # the inexact arrays and filter_jit treats the rest as static.
  model, l = step(model, X, Y)
  losses.append(float(l))
g2 = eqx.filter_grad(loss)(model, X, Y)
gnorm = float(sum(jnp.sum(a ** 2) for a in jax.tree_util.tree_leaves(eqx.filter(g2, eqx.is_array))))
params, static = eqx.partition(model, eqx.is_array)
again = eqx.combine(params, static)
batched = eqx.filter_vmap(lambda m, x: m(x), in_axes=(None, 0))(again, X[:4])
lin = eqx.nn.Linear(3, 2, key=jax.random.PRNGKey(1))
out = {"losses": losses[::5] + [losses[-1]], "gnorm": gnorm,
       "batched": np.asarray(batched).ravel().tolist(),
       "n_params": int(sum(a.size for a in jax.tree_util.tree_leaves(params))),
       "linear_w": np.asarray(lin.weight).ravel().tolist()}
print(json.dumps(out))
