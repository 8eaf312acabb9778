"""A JAX program: an MLP built with `jax.example_libraries.stax`, trained with
`jax.example_libraries.optimizers.adam` on synthetic data (two Gaussian blobs per class).

Run with JAX (`python mlp_stax.py [steps]`) or on stagecraft
(`python -m stagecraft run mlp_stax.py [steps]`): the printed numbers agree."""
import sys

import jax
import jax.numpy as jnp
from jax import random
from jax.example_libraries import optimizers, stax

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
num_classes, dim, n = 3, 4, 96

key = random.PRNGKey(0)
k_data, k_labels, k_init = random.split(key, 3)
labels = random.randint(k_labels, (n,), 0, num_classes)
centers = jnp.arange(num_classes * dim, dtype=jnp.float32).reshape(num_classes, dim) / 4.0
x = centers[labels] + 0.5 * random.normal(k_data, (n, dim))
y = jax.nn.one_hot(labels, num_classes)

init_fun, predict = stax.serial(stax.Dense(16), stax.Relu, stax.Dense(16), stax.Tanh,
                                stax.Dense(num_classes), stax.LogSoftmax)
out_shape, params = init_fun(k_init, (-1, dim))
print("output shape", out_shape)
print("first weights", [round(float(v), 5) for v in params[0][0][0, :4]])


def loss(params, x, y):
  return -jnp.mean(jnp.sum(predict(params, x) * y, axis=1))


def accuracy(params, x, labels):
  return jnp.mean(jnp.argmax(predict(params, x), axis=1) == labels)


opt_init, opt_update, get_params = optimizers.adam(
    optimizers.exponential_decay(0.05, 10, 0.8))


@jax.jit
def update(i, opt_state, x, y):
  value, grads = jax.value_and_grad(loss)(get_params(opt_state), x, y)
  grads = optimizers.clip_grads(grads, 5.0)
  return opt_update(i, grads, opt_state), value


opt_state = opt_init(params)
for i in range(steps):
  opt_state, value = update(i, opt_state, x, y)
  if i % 10 == 0 or i == steps - 1:
    print(f"step {i:3d} loss {float(value):.5f}")

params = get_params(opt_state)
print(f"accuracy {float(accuracy(params, x, labels)):.4f}")
print(f"param norm {float(optimizers.l2_norm(params)):.4f}")
