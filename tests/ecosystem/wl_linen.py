"""flax.linen workload: a small CNN with BatchNorm and Dropout: init, apply (train and eval),
grad, a few SGD steps with optax.

Run as `python wl_linen.py` (real JAX) or `python -m stagecraft run wl_linen.py`; prints JSON.
"""
import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax


class CNN(nn.Module):
  @nn.compact
  def __call__(self, x, train: bool):
    x = nn.Conv(4, (3, 3), padding="SAME")(x)
    x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
    x = nn.relu(x)
    x = nn.avg_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.Dense(8)(x)
    x = nn.LayerNorm()(x)
    x = nn.gelu(x)
    x = nn.Dropout(0.25, deterministic=not train)(x)
    return nn.Dense(3)(x)


model = CNN()
key = jax.random.PRNGKey(0)
pkey, dkey, xkey = jax.random.split(key, 3)
x = jax.random.normal(xkey, (6, 8, 8, 1))
labels = jnp.array([0, 1, 2, 0, 1, 2])
variables = model.init({"params": pkey, "dropout": dkey}, x, train=False)
params, batch_stats = variables["params"], variables["batch_stats"]
shapes = jax.tree_util.tree_map(lambda a: list(a.shape), params)
tx = optax.adam(1e-2)
opt_state = tx.init(params)


@jax.jit
def train_step(params, batch_stats, opt_state, rng):
  def loss_fn(p):
    logits, updates = model.apply({"params": p, "batch_stats": batch_stats}, x, train=True,
                                  rngs={"dropout": rng}, mutable=["batch_stats"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    return loss, updates["batch_stats"]
  (loss, bs), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
  upd, opt_state = tx.update(g, opt_state, params)
  return optax.apply_updates(params, upd), bs, opt_state, loss


losses = []
for i in range(5):
  params, batch_stats, opt_state, loss = train_step(params, batch_stats, opt_state,
                                                    jax.random.fold_in(dkey, i))
  losses.append(float(loss))
logits = model.apply({"params": params, "batch_stats": batch_stats}, x, train=False)
mean_stats = float(sum(jnp.sum(a) for a in jax.tree_util.tree_leaves(batch_stats)))


class MLP(nn.Module):
  @nn.compact
  def __call__(self, x):
    return nn.Dense(1)(nn.tanh(nn.Dense(5)(x)))


mlp = MLP()
mp = mlp.init(jax.random.PRNGKey(3), jnp.ones((1, 2)))
gmlp = jax.grad(lambda p: jnp.sum(mlp.apply(p, jnp.ones((4, 2))) ** 2))(mp)
out = {"shapes": shapes, "losses": losses, "logits": np.asarray(logits).ravel().tolist(),
       "batch_stats_sum": mean_stats,
       "mlp_grad": [np.asarray(a).ravel().tolist() for a in jax.tree_util.tree_leaves(gmlp)]}
print(json.dumps(out))
