"""optax workload: adam, and a clipped adamw chain, fitting a small linear regression.

Run as `python wl_optax.py` (real JAX) or `python -m stagecraft run wl_optax.py`; prints one
JSON object of the losses and final parameters.
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax

rng = np.random.default_rng(0)
X = jnp.asarray(rng.normal(size=(64, 5)), jnp.float32)
w_true = jnp.asarray(rng.normal(size=(5,)), jnp.float32)
y = X @ w_true + 0.1 * jnp.asarray(rng.normal(size=(64,)), jnp.float32)


def loss_fn(params, X, y):
  pred = X @ params["w"] + params["b"]
  return jnp.mean((pred - y) ** 2)


def train(opt, steps=40):
  params = {"w": jnp.zeros(5, jnp.float32), "b": jnp.zeros((), jnp.float32)}
  state = opt.init(params)

  @jax.jit
  def step(params, state):
    loss, g = jax.value_and_grad(loss_fn)(params, X, y)
    updates, state = opt.update(g, state, params)
    return optax.apply_updates(params, updates), state, loss

  losses = []
  for _ in range(steps):
    params, state, loss = step(params, state)
    losses.append(float(loss))
  return {"losses": losses[::8] + [losses[-1]], "w": np.asarray(params["w"]).tolist(),
          "b": float(params["b"])}


sched = optax.warmup_cosine_decay_schedule(0.0, 0.1, 5, 40)
out = {
    "adam": train(optax.adam(0.1)),
    "adamw_clip": train(optax.chain(optax.clip_by_global_norm(1.0),
                                    optax.adamw(sched, weight_decay=1e-2))),
    "sgd_momentum": train(optax.sgd(0.05, momentum=0.9, nesterov=True)),
    "huber": float(optax.losses.huber_loss(jnp.arange(4.0), jnp.ones(4)).sum()),
    "softmax_xent": float(optax.softmax_cross_entropy_with_integer_labels(
        jnp.array([[1.0, 2.0, 0.5], [0.1, 0.2, 3.0]]), jnp.array([1, 2])).mean()),
}
print(json.dumps(out))
