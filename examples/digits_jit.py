"""Softmax regression on scikit-learn's digits (1,797 real 8x8 images, shipped inside
scikit-learn), with every numerical step in stagecraft: standardization, a jitted training
step with a hand-derived gradient, and evaluation.

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


def softmax(logits):
  z = logits - logits.max(axis=1, keepdims=True)
  e = jnp.exp(z)
  return e / e.sum(axis=1, keepdims=True)


def one_hot(y, k):
  return (y[:, None] == jnp.arange(k)[None, :]).astype(jnp.float32)


@stagecraft.jit
def train_step(w, b, x, y, lr):
  """One gradient step of mean cross-entropy; d loss / d logits = softmax - one_hot."""
  p = softmax(x @ w + b)
  g = (p - one_hot(y, 10)) / x.shape[0]
  loss = -jnp.mean(jnp.sum(one_hot(y, 10) * jnp.log(p + 1e-9), axis=1))
  return w - lr * (x.T @ g), b - lr * g.sum(axis=0), loss


@stagecraft.jit
def accuracy(w, b, x, y):
  return jnp.mean((jnp.argmax(x @ w + b, axis=1) == y).astype(jnp.float32))


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
  w, b = jnp.zeros((64, 10)), jnp.zeros(10)
  t0 = time.perf_counter()
  for step in range(args.steps):
    w, b, loss = train_step(w, b, x_tr, y_tr, args.lr)
    if step % 100 == 0 or step == args.steps - 1:
      print(f"step {step:4d}  loss {float(loss):.4f}")
  elapsed = time.perf_counter() - t0
  print(f"{args.steps} steps in {elapsed:.2f} s ({args.steps / elapsed:.0f} steps/s) on "
        f"{stagecraft.devices()[0]}")
  print(f"train accuracy {float(accuracy(w, b, x_tr, y_tr)):.4f}")
  print(f"test accuracy  {float(accuracy(w, b, x_te, y_te)):.4f}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
