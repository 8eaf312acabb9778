"""flax.nnx workload: an nnx MLP with BatchNorm/Dropout trained with nnx.Optimizer (optax
adamw) under nnx.jit, then evaluated.

Run as `python wl_nnx.py` (real JAX) or `python -m stagecraft run wl_nnx.py`; prints JSON.
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx


class Model(nnx.Module):
  def __init__(self, rngs: nnx.Rngs):
    self.l1 = nnx.Linear(3, 16, rngs=rngs)
    self.bn = nnx.BatchNorm(16, rngs=rngs)
    self.drop = nnx.Dropout(0.2, rngs=rngs)
    self.l2 = nnx.Linear(16, 1, rngs=rngs)

  def __call__(self, x):
    return self.l2(self.drop(nnx.relu(self.bn(self.l1(x)))))


model = Model(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)
X = jnp.asarray(np.linspace(-1, 1, 48).reshape(16, 3), jnp.float32)
Y = jnp.sum(X ** 2, axis=1, keepdims=True)


@nnx.jit
def train_step(model, optimizer, X, Y):
  def loss_fn(model):
    return jnp.mean((model(X) - Y) ** 2)
  loss, grads = nnx.value_and_grad(loss_fn)(model)
  optimizer.update(model, grads)
  return loss


losses = [float(train_step(model, optimizer, X, Y)) for _ in range(10)]
model.eval()
pred = model(X)
graphdef, state = nnx.split(model)
n_params = int(sum(a.size for a in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param))))
out = {"losses": losses, "pred": np.asarray(pred).ravel().tolist(), "n_params": n_params,
       "bn_mean": np.asarray(model.bn.mean.value).tolist(),
       "step": int(optimizer.step.value)}
print(json.dumps(out))
