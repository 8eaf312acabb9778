"""`stagecraft.scipy.stats.gaussian_kde`: Gaussian kernel density estimation, as JAX's
`scipy.stats.gaussian_kde` (itself SciPy's class without the dynamic-bandwidth parts).

A `gaussian_kde` is a pytree (its arrays are the leaves), so it can be passed through `jit`
and `vmap` and differentiated.

Algorithm (SciPy's): the kernel covariance is the (weighted) data covariance times
`factor**2`, with Scott's factor `neff**(-1/(d+4))` or Silverman's
`(neff (d+2) / 4)**(-1/(d+4))`, `neff = 1 / sum(w**2)`. Densities are evaluated in the
coordinates whitened by the Cholesky factor of the inverse kernel covariance; Gaussian
integrals use the Cholesky factor of the summed covariances.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from stagecraft import dtypes, random, tree_util
from stagecraft import numpy as jnp
from stagecraft.lax import linalg as lax_linalg
from stagecraft.scipy import special
from stagecraft.scipy.stats._util import check_arraylike, promote_dtypes_inexact

__all__ = ["gaussian_kde"]

ArrayLike = Any
BwMethod = None | str | Any | Callable[[Any], Any]


def _cholesky_solve_sq(chol, diff):
  """`sum(diff * inv(L L^T) diff, axis=0)` for `diff: T[d, m]` (one triangular solve)."""
  y = lax_linalg.triangular_solve(chol, diff, left_side=True, lower=True)
  return jnp.sum(y * y, axis=0)


@tree_util.register_pytree_node_class
class gaussian_kde:
  """A Gaussian kernel density estimate of a (weighted) sample.

  Args:
    dataset: `T[d, n]` (or `T[n]` for one dimension) sample points; at least 2 elements.
    bw_method: "scott" (default), "silverman", a scalar factor, or a callable taking the
      `gaussian_kde` (with `dataset`, `weights`, `neff` set) and returning the factor.
    weights: optional `T[n]` non-negative weights (normalized to sum 1).

  Attributes:
    dataset: `T[d, n]`; weights: `T[n]`; neff: effective sample size `1 / sum(w**2)`;
    covariance, inv_cov: `T[d, d]` kernel covariance and its inverse; d, n: ints.

  Raises:
    NotImplementedError: for complex data.
    ValueError: for a dataset with fewer than 2 elements, weights that are not `T[n]`, or
      an unknown `bw_method`.

  Examples:
    >>> import numpy as np
    >>> kde = gaussian_kde(np.array([0., 1., 3.], np.float32))
    >>> kde.evaluate(np.float32([1.0]))
    Array([0.21489537], dtype=float32)
  """
  __slots__ = ("neff", "dataset", "weights", "covariance", "inv_cov")

  def __init__(self, dataset: ArrayLike, bw_method: BwMethod = None, weights: Any = None):
    check_arraylike("gaussian_kde", dataset)
    dataset = jnp.atleast_2d(dataset)
    if dtypes.is_complex(dataset.dtype):
      raise NotImplementedError("gaussian_kde does not support complex data")
    if not dataset.size > 1:
      raise ValueError("`dataset` input should have multiple elements.")
    d, n = dataset.shape
    if weights is not None:
      check_arraylike("gaussian_kde", weights)
      dataset, weights = promote_dtypes_inexact(dataset, weights)
      weights = jnp.atleast_1d(weights)
      if weights.ndim != 1:
        raise ValueError("`weights` input should be one-dimensional.")
      if weights.shape[0] != n:
        raise ValueError("`weights` input should be of length n")
      weights = weights / jnp.sum(weights)
    else:
      dataset, = promote_dtypes_inexact(dataset)
      weights = jnp.full(n, 1.0 / n, dtype=dataset.dtype)
    self._set("dataset", dataset)
    self._set("weights", weights)
    neff = self._set("neff", 1 / jnp.sum(weights ** 2))
    if bw_method is None or (isinstance(bw_method, str) and bw_method == "scott"):
      factor = jnp.power(neff, -1.0 / (d + 4))
    elif isinstance(bw_method, str) and bw_method == "silverman":
      factor = jnp.power(neff * (d + 2) / 4.0, -1.0 / (d + 4))
    elif jnp.isscalar(bw_method) and not isinstance(bw_method, str):
      factor = bw_method
    elif callable(bw_method):
      factor = bw_method(self)
    else:
      raise ValueError("`bw_method` should be 'scott', 'silverman', a scalar, or a callable.")
    data_cov = jnp.atleast_2d(jnp.cov(dataset, rowvar=True, bias=False, aweights=weights))
    self._set("covariance", data_cov * factor ** 2)
    self._set("inv_cov", jnp.linalg.inv(data_cov) / factor ** 2)

  def _set(self, name: str, value: Any) -> Any:
    object.__setattr__(self, name, value)
    return value

  def __setattr__(self, name, value):
    raise AttributeError(f"gaussian_kde is immutable: cannot assign to field {name!r}")

  def __repr__(self):
    return f"gaussian_kde(d={self.d}, n={self.n}, dtype={self.dataset.dtype})"

  def tree_flatten(self):
    return (self.neff, self.dataset, self.weights, self.covariance, self.inv_cov), None

  @classmethod
  def tree_unflatten(cls, aux_data, children):
    del aux_data
    kde = cls.__new__(cls)
    for name, value in zip(cls.__slots__, children):
      kde._set(name, value)
    return kde

  @property
  def d(self) -> int:
    """The number of dimensions."""
    return self.dataset.shape[0]

  @property
  def n(self) -> int:
    """The number of data points."""
    return self.dataset.shape[1]

  def _reshape_points(self, points):
    if dtypes.is_complex(jnp.asarray(points).dtype):
      raise NotImplementedError("gaussian_kde does not support complex coordinates")
    points = jnp.atleast_2d(points)
    d, m = points.shape
    if d != self.d:
      if d == 1 and m == self.d:
        points = jnp.reshape(points, (self.d, 1))
      else:
        raise ValueError(f"points have dimension {d}, dataset has dimension {self.d}")
    return points

  def _log_kernels(self, points):
    """(weights `T[n]`, `T[m, n]` log Gaussian kernel of each data point at each point)."""
    data, weights, points, prec = promote_dtypes_inexact(self.dataset, self.weights, points,
                                                         self.inv_cov)
    # NB: inv_cov = W W^T (Cholesky), so |W^T (x - y)|**2 is the squared Mahalanobis distance.
    whiten = jnp.linalg.cholesky(prec)
    data_w = jnp.matmul(data.T, whiten)
    points_w = jnp.matmul(points.T, whiten)
    log_norm = (jnp.sum(jnp.log(jnp.diagonal(whiten))) - 0.5 * self.d * float(np.log(2 * np.pi)))
    sq = jnp.sum(jnp.square(points_w[:, None, :] - data_w[None, :, :]), axis=-1)
    return weights, log_norm - 0.5 * sq

  def evaluate(self, points: ArrayLike) -> Any:
    """The estimated density at `points`.

    Args:
      points: `T[d, m]` (or `T[m]` for `d = 1`, or `T[d]` for one point).

    Returns:
      `T[m]` densities.

    Raises:
      ValueError: if the points' dimension is not `d`.
    """
    check_arraylike("evaluate", points)
    points = self._reshape_points(points)
    weights, log_k = self._log_kernels(points)
    return jnp.sum(weights[None, :] * jnp.exp(log_k), axis=-1)

  def __call__(self, points: ArrayLike) -> Any:
    return self.evaluate(points)

  def pdf(self, x: ArrayLike) -> Any:
    """The estimated density at `x`; the same as `evaluate`."""
    return self.evaluate(x)

  def logpdf(self, x: ArrayLike) -> Any:
    """The log of the estimated density at `x` (`T[d, m]` -> `T[m]`), by `logsumexp` over
    the data points (no underflow far from the data)."""
    check_arraylike("logpdf", x)
    x = self._reshape_points(x)
    weights, log_k = self._log_kernels(x)
    return special.logsumexp(jnp.log(weights)[None, :] + log_k, axis=-1)

  def integrate_gaussian(self, mean: ArrayLike, cov: ArrayLike) -> Any:
    """The integral of the estimate times the Gaussian density `N(mean, cov)`.

    Args:
      mean: `T[d]`; cov: `T[d, d]`.

    Returns:
      A scalar.

    Raises:
      ValueError: if `mean` or `cov` do not have dimension `d`.
    """
    mean = jnp.atleast_1d(jnp.squeeze(mean))
    cov = jnp.atleast_2d(cov)
    if mean.shape != (self.d,):
      raise ValueError(f"mean does not have dimension {self.d}")
    if cov.shape != (self.d, self.d):
      raise ValueError(f"covariance does not have dimension {self.d}")
    chol = jnp.linalg.cholesky(self.covariance + cov)
    norm = 1.0 / (float(np.sqrt(2 * np.pi)) ** self.d * jnp.prod(jnp.diagonal(chol)))
    energy = 0.5 * _cholesky_solve_sq(chol, self.dataset - mean[:, None])
    return norm * jnp.sum(jnp.exp(-energy) * self.weights)

  def integrate_box_1d(self, low: ArrayLike, high: ArrayLike) -> Any:
    """The probability mass of a one-dimensional estimate between `low` and `high`.

    Raises:
      ValueError: if `d != 1` or the limits are not scalars.
    """
    if self.d != 1:
      raise ValueError("integrate_box_1d() only handles 1D pdfs")
    if np.ndim(low) != 0 or np.ndim(high) != 0:
      raise ValueError("the limits of integration in integrate_box_1d must be scalars")
    sigma = jnp.squeeze(jnp.sqrt(self.covariance))
    lo = jnp.squeeze((low - self.dataset) / sigma)
    hi = jnp.squeeze((high - self.dataset) / sigma)
    return jnp.sum(self.weights * (special.ndtr(hi) - special.ndtr(lo)))

  def integrate_kde(self, other: "gaussian_kde") -> Any:
    """The integral of the product of this estimate and `other`.

    Raises:
      ValueError: if the two estimates have different dimensions.
    """
    if other.d != self.d:
      raise ValueError("KDEs are not the same dimensionality")
    chol = jnp.linalg.cholesky(self.covariance + other.covariance)
    norm = 1.0 / (float(np.sqrt(2 * np.pi)) ** self.d * jnp.prod(jnp.diagonal(chol)))
    small, large = (self, other) if self.n < other.n else (other, self)
    diff = large.dataset[:, None, :] - small.dataset[:, :, None]   # [d, n_small, n_large]
    energy = 0.5 * _cholesky_solve_sq(chol, jnp.reshape(diff, (self.d, -1)))
    energy = jnp.reshape(energy, (small.n, large.n))
    per_point = norm * jnp.sum(jnp.exp(-energy) * large.weights[None, :], axis=-1)
    return jnp.sum(per_point * small.weights)

  def resample(self, key: Any, shape: tuple[int, ...] = ()) -> Any:
    """Draws from the estimate: a data point chosen by weight plus kernel noise.

    Args:
      key: a PRNG key.
      shape: the batch shape of the draws.

    Returns:
      `T[d, *shape]` samples (for multi-dimensional `shape`, JAX transposes the noise, so
      its axes come reversed; this follows it).
    """
    ind_key, eps_key = random.split(key)
    ind = random.choice(ind_key, self.n, shape=shape, p=self.weights)
    chol = jnp.linalg.cholesky(self.covariance)
    z = random.normal(eps_key, tuple(shape) + (self.d,), dtype=self.dataset.dtype)
    eps = jnp.einsum("ij,...j->...i", chol.astype(z.dtype), z).T
    return self.dataset[:, ind] + eps

  def integrate_box(self, low_bounds, high_bounds, maxpts=None):
    """Not supported (as in JAX): use `integrate_box_1d`.

    Raises:
      NotImplementedError: always.
    """
    del low_bounds, high_bounds, maxpts
    raise NotImplementedError("only 1D box integrations are supported; use `integrate_box_1d`")

  def set_bandwidth(self, bw_method=None):
    """Not supported (as in JAX): build a new `gaussian_kde` instead.

    Raises:
      NotImplementedError: always.
    """
    del bw_method
    raise NotImplementedError("dynamically changing the bandwidth method is not supported")
