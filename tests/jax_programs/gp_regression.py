"""A JAX program: Gaussian-process regression with an RBF kernel, the posterior through
`jax.scipy.linalg.cho_factor` / `cho_solve`, and the kernel's hyperparameters fitted by
gradient ascent on the log marginal likelihood (Rasmussen & Williams, Algorithm 2.1).

Run with JAX (`python gp_regression.py`) or on stagecraft
(`python -m stagecraft run gp_regression.py`): the printed numbers agree."""
import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_factor, cho_solve
from jax.scipy.stats import norm


def rbf(x1, x2, log_scale, log_amp):
  d2 = (x1[:, None] - x2[None, :]) ** 2
  return jnp.exp(2 * log_amp) * jnp.exp(-0.5 * d2 / jnp.exp(2 * log_scale))


def log_marginal_likelihood(theta, x, y):
  log_scale, log_amp, log_noise = theta
  k = rbf(x, x, log_scale, log_amp) + jnp.exp(2 * log_noise) * jnp.eye(x.shape[0])
  c, lower = cho_factor(k, lower=True)
  alpha = cho_solve((c, lower), y)
  return (-0.5 * y @ alpha - jnp.sum(jnp.log(jnp.diag(c)))
          - 0.5 * x.shape[0] * jnp.log(2 * jnp.pi))


def posterior(theta, x, y, x_star):
  log_scale, log_amp, log_noise = theta
  k = rbf(x, x, log_scale, log_amp) + jnp.exp(2 * log_noise) * jnp.eye(x.shape[0])
  factor = cho_factor(k)
  k_star = rbf(x, x_star, log_scale, log_amp)
  mean = k_star.T @ cho_solve(factor, y)
  var = jnp.exp(2 * log_amp) - jnp.sum(k_star * cho_solve(factor, k_star), axis=0)
  return mean, var


x = jnp.linspace(-3.0, 3.0, 12)
y = jnp.sin(x) + 0.1 * jnp.cos(5.0 * x)
theta = jnp.array([0.0, 0.0, -1.0])
print(f"initial log likelihood {float(log_marginal_likelihood(theta, x, y)):.4f}")

grad_fn = jax.jit(jax.value_and_grad(log_marginal_likelihood))
for i in range(25):
  value, g = grad_fn(theta, x, y)
  theta = theta + 0.05 * g
  if i % 8 == 0:
    print(f"step {i:2d} log likelihood {float(value):.4f}")

print("theta", [round(float(t), 4) for t in theta])
x_star = jnp.array([-2.5, 0.3, 1.7])
mean, var = jax.jit(posterior)(theta, x, y, x_star)
print("mean", [round(float(m), 4) for m in mean])
print("std", [round(float(s), 4) for s in jnp.sqrt(var)])
lo, hi = norm.ppf(0.05, mean, jnp.sqrt(var)), norm.ppf(0.95, mean, jnp.sqrt(var))
print("90% interval", [(round(float(a), 3), round(float(b), 3)) for a, b in zip(lo, hi)])
