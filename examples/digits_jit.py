"""A one-hidden-layer MLP classifier on scikit-learn's digits (1,797 real 8x8 images, shipped
inside scikit-learn), with every numerical step in stagecraft: standardization, a jitted
training step whose gradient comes from `stagecraft.value_and_grad`, and evaluation.

Run: python examples/digits_jit.py [--steps N] [--lr LR]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import stagecraft
import stagecraft.numpy as jnp


def load(seed: int = 0):
  from sklearn.datasets import load_digits
  data = load_digits()
  x, y = data.data.astype(np.float32), data.target.astype(np.int32)
  perm = np.random.default_rng(seed).permutation(len(x))
  x, y = x[perm], y[perm]
  n_train = int(0.8 * len(x))
  return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


@stagecraft.jit
def standardize(x_train, x_test):
  mean = x_train.mean(axis=0)
  std = x_train.std(axis=0) + 1e-3
  return (x_train - mean) / std, (x_test - mean) / std


def init_params(seed: int = 0, hidden: int = 64):
  rng = np.random.default_rng(seed)
  return {"w1": jnp.asarray(rng.standard_normal((64, hidden)) / 8.0, jnp.float32),
          "b1": jnp.zeros(hidden),
          "w2": jnp.asarray(rng.standard_normal((hidden, 10)) / np.sqrt(hidden), jnp.float32),
          "b2": jnp.zeros(10)}


def predict(params, x):
  h = jnp.tanh(x @ params["w1"] + params["b1"])
  return h @ params["w2"] + params["b2"]


def loss_fn(params, x, y):
  """Mean cross-entropy of the softmax of the logits against the labels."""
  logp = stagecraft.nn.log_softmax(predict(params, x))
  return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


@stagecraft.jit
def train_step(params, x, y, lr):
  """One step of gradient descent; the gradient is stagecraft's reverse mode."""
  loss, grads = stagecraft.value_and_grad(loss_fn)(params, x, y)
  params = stagecraft.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
  return params, loss


@stagecraft.jit
def accuracy(params, x, y):
  return jnp.mean((jnp.argmax(predict(params, x), axis=1) == y).astype(jnp.float32))


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=300)
  ap.add_argument("--lr", type=float, default=0.5)
  args = ap.parse_args(argv)
  if args.steps < 1:
    ap.error("--steps must be positive")
  (x_tr, y_tr), (x_te, y_te) = load()
  x_tr, x_te = standardize(x_tr, x_te)
  y_tr, y_te = stagecraft.device_put(y_tr), stagecraft.device_put(y_te)
  params = init_params()
  t0 = time.perf_counter()
  for step in range(args.steps):
    params, loss = train_step(params, x_tr, y_tr, args.lr)
    if step % 100 == 0 or step == args.steps - 1:
      print(f"step {step:4d}  loss {float(loss):.4f}")
  elapsed = time.perf_counter() - t0
  print(f"{args.steps} steps in {elapsed:.2f} s ({args.steps / elapsed:.0f} steps/s) on "
        f"{stagecraft.devices()[0]}")
  print(f"train accuracy {float(accuracy(params, x_tr, y_tr)):.4f}")
  print(f"test accuracy  {float(accuracy(params, x_te, y_te)):.4f}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
