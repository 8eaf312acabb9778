"""`stagecraft.nn`: activation functions and friends, as JAX's `nn`, composed from
`stagecraft.numpy` and `stagecraft.lax` (no primitives of their own).

Every function takes an array `T[*s]` (Python scalars and integer arrays are promoted as
JAX's `numpy` promotes them) and returns `T[*s]` unless its docstring says otherwise; the
formulas are JAX's, so values agree with JAX's `nn` to rounding. Weight initializers are in
`stagecraft.nn.initializers`.
"""
from __future__ import annotations

import functools
import operator
import warnings
from typing import Any

import numpy as np

from stagecraft import core, dtypes, lax
from stagecraft.config import config
from stagecraft import numpy as jnp
from stagecraft.custom_derivatives import custom_jvp
from stagecraft.nn import initializers  # noqa: F401
from stagecraft.nn.scaled import (get_scaled_dot_general_config, scaled_dot_general,  # noqa: F401
                                  scaled_matmul)
from stagecraft.numpy.reductions import masked
from stagecraft.numpy.util import promote_dtypes_inexact
from stagecraft.pjit import jit
from stagecraft.scipy.special import logsumexp

__all__ = ["relu", "relu6", "gelu", "silu", "swish", "sigmoid", "softplus", "elu",
           "leaky_relu", "celu", "selu", "glu", "log_sigmoid", "softmax", "log_softmax",
           "logsumexp", "logmeanexp", "one_hot", "standardize", "identity", "soft_sign",
           "squareplus", "sparse_plus", "sparse_sigmoid", "mish", "hard_tanh", "hard_sigmoid",
           "hard_silu", "hard_swish", "log1mexp", "tanh", "initializers", "scaled_matmul",
           "scaled_dot_general", "get_scaled_dot_general_config"]


def _inexact(x):
  return jnp.asarray(promote_dtypes_inexact(x)[0])


@jit
def identity(x: Any):
  """Returns `x` (JAX's `nn.identity`)."""
  return jnp.asarray(x)


@custom_jvp
@jit
def relu(x: Any):
  """Rectified linear unit `max(x, 0)` (JAX's `nn.relu`); NaN stays NaN.

  Its derivative is taken to be 0 at `x == 0` (JAX's custom rule; see Bertoin et al.,
  "Numerical influence of ReLU'(0) on backpropagation", NeurIPS 2021), not the 1/2 that
  `maximum` gives at a tie.

  Examples:
    >>> import numpy as np
    >>> relu(np.array([-1., 0., 2.], np.float32))
    Array([0., 0., 2.], dtype=float32)
  """
  return jnp.maximum(x, 0)


relu.defjvps(lambda g, ans, x: lax.select(x > 0, g, lax.full_like(g, 0)))


@custom_jvp
@jit
def relu6(x: Any):
  """`min(max(x, 0), 6)` (JAX's `nn.relu6`); its derivative is taken to be 0 at 0 and at 6
  (JAX's custom rule)."""
  return jnp.minimum(jnp.maximum(x, 0), 6.)


relu6.defjvps(lambda g, ans, x: lax.select((x > 0) & (x < 6), g, lax.full_like(g, 0)))


@functools.partial(jit, inline=True)   # inline, as JAX's: traced, one `logistic` equation
def sigmoid(x: Any):
  """Logistic sigmoid `1 / (1 + exp(-x))` (JAX's `nn.sigmoid`), via `lax.logistic`.

  Raises:
    TypeError: for integer `x` (as JAX: `lax.logistic` takes inexact dtypes only).
  """
  return lax.logistic(x)


@jit
def softplus(x: Any):
  """`log(1 + exp(x))`, overflow-safe as `logaddexp(x, 0)` (JAX's `nn.softplus`).

  Examples:
    >>> import numpy as np
    >>> softplus(np.array([-1000., 0., 1000.], np.float32))
    Array([0.000000e+00, 6.931472e-01, 1.000000e+03], dtype=float32)
  """
  return jnp.logaddexp(x, 0)


@jit
def log_sigmoid(x: Any):
  """`log(sigmoid(x)) = -softplus(-x)` (JAX's `nn.log_sigmoid`)."""
  return -softplus(-jnp.asarray(x))


@jit
def silu(x: Any):
  """SiLU / swish `x * sigmoid(x)` (JAX's `nn.silu`)."""
  x = jnp.asarray(x)
  return x * sigmoid(x)


swish = silu


@jit
def mish(x: Any):
  """`x * tanh(softplus(x))` (JAX's `nn.mish`)."""
  x = jnp.asarray(x)
  return x * jnp.tanh(softplus(x))


@jit
def elu(x: Any, alpha: Any = 1.0):
  """Exponential linear unit: `x` for `x > 0`, else `alpha * expm1(x)` (JAX's `nn.elu`)."""
  x = jnp.asarray(x)
  return jnp.where(x > 0, x, alpha * jnp.expm1(jnp.where(x > 0, 0., x)))


@jit
def leaky_relu(x: Any, negative_slope: Any = 1e-2):
  """`x` for `x >= 0`, else `negative_slope * x` (JAX's `nn.leaky_relu`)."""
  x = jnp.asarray(x)
  return jnp.where(x >= 0, x, negative_slope * x)


@jit
def celu(x: Any, alpha: Any = 1.0):
  """Continuously differentiable ELU: `max(x, 0) + alpha * expm1(min(x, 0) / alpha)`
  (JAX's `nn.celu`)."""
  return jnp.maximum(x, 0.0) + alpha * jnp.expm1(jnp.minimum(x, 0.0) / alpha)


@jit
def selu(x: Any):
  """Scaled ELU `scale * elu(x, alpha)` with the self-normalizing constants of
  Klambauer et al. 2017 (JAX's `nn.selu`)."""
  alpha = 1.6732632423543772848170429916717
  scale = 1.0507009873554804934193349852946
  return scale * elu(x, alpha)


def gelu(x: Any, approximate: bool = True):
  """Gaussian error linear unit `x * Phi(x)` (JAX's `nn.gelu`).

  Args:
    x: array `T[*s]` (integers promote to float).
    approximate: use the tanh approximation
      `0.5 (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))` of Phi (default, as JAX) instead of
      the exact `0.5 erfc(-x / sqrt 2)`.

  Returns:
    `T[*s]`.

  References:
    Hendrycks, Gimpel, "Gaussian Error Linear Units (GELUs)", arXiv:1606.08415.
  """
  # NB: not jitted, as in JAX (whose comment says jit changed numerics in a test).
  x = _inexact(x)
  if approximate:
    sqrt_2_over_pi = np.sqrt(2 / np.pi).astype(x.dtype)
    cdf = 0.5 * (1.0 + jnp.tanh(sqrt_2_over_pi * (x + 0.044715 * (x ** 3))))
    return x * cdf
  sqrt_half = np.sqrt(0.5).astype(x.dtype)
  return (0.5 * x * lax.erfc(-x * sqrt_half)).astype(x.dtype)


def _canonical_axis(axis: int, ndim: int, name: str) -> int:
  axis = operator.index(axis)
  if not -ndim <= axis < ndim:
    raise ValueError(f"{name}: axis {axis} is out of bounds for array of dimension {ndim}")
  return axis % ndim


def glu(x: Any, axis: int = -1):
  """Gated linear unit: `x1 * sigmoid(x2)` for the two halves of `x` along `axis`
  (JAX's `nn.glu`).

  Args:
    x: array `T[..., 2n, ...]`.
    axis: the axis to halve; its size must be even.

  Returns:
    `T[..., n, ...]`.

  Raises:
    ValueError: if the axis size is odd or the axis is out of bounds.
  """
  x = jnp.asarray(x)
  axis = _canonical_axis(axis, x.ndim, "glu")
  if x.shape[axis] % 2:
    raise ValueError(f"glu: the size of axis {axis} must be divisible by 2, got "
                     f"{x.shape[axis]}.")
  return _glu(x, axis)


def _glu_impl(x, axis):
  x1, x2 = jnp.split(x, 2, axis)
  return x1 * sigmoid(x2)


_glu = jit(_glu_impl, static_argnums=(1,))


def _axes(axis, ndim):
  if axis is None:
    return tuple(range(ndim))
  axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
  return tuple(_canonical_axis(a, ndim, "softmax") for a in axes)


@functools.partial(jit, static_argnames=("axis",))
def log_softmax(x: Any, axis: Any = -1, where: Any = None):
  """`x - logsumexp(x, axis, keepdims=True)`, computed stably (JAX's `nn.log_softmax`).

  Args:
    x: array `T[*s]`.
    axis: an int, a tuple of ints, or None (all axes); static.
    where: optional boolean mask broadcastable to `s`: masked-out entries are left out of
      the sum and give `-inf`.

  Returns:
    `T[*s]`.

  Raises:
    ValueError: for an axis out of bounds.

  Algorithm: the maximum along `axis` (its gradient stopped) is subtracted before
  exponentiating, so large inputs do not overflow; jitted, as JAX's.

  Examples:
    >>> import numpy as np
    >>> log_softmax(np.array([1000., 1000.], np.float32))
    Array([-0.6931472, -0.6931472], dtype=float32)
  """
  x = jnp.asarray(x)
  axis = _axes(axis, x.ndim)
  x_max = jnp.max(x, axis, where=where, initial=-np.inf, keepdims=True)
  x_safe = x if where is None else jnp.where(where, x, -np.inf)
  shifted = x_safe - lax.stop_gradient(x_max)
  shifted_logsumexp = jnp.log(jnp.sum(jnp.exp(shifted), axis, where=where, keepdims=True))
  result = shifted - shifted_logsumexp
  if where is not None:
    return jnp.where(where, result, -np.inf)
  return result


def softmax(x: Any, axis: Any = -1, where: Any = None):
  """`exp(x) / sum(exp(x), axis)`, computed stably (JAX's `nn.softmax`).

  Args:
    x: array `T[*s]`.
    axis: an int, a tuple of ints, or None (all axes).
    where: optional boolean mask broadcastable to `s`: masked-out entries are left out of
      the sum and give 0.

  Returns:
    `T[*s]`, summing to 1 along `axis`. An input `+inf` makes the result NaN.

  Raises:
    ValueError: for an axis out of bounds.

  Algorithm: `exp(x - max(x))` normalized by its sum, with the maximum's gradient stopped
  (it cancels out), as JAX 0.10's default. With the config option `softmax_custom_jvp`
  (JAX's `jax_softmax_custom_jvp`) the derivative is instead the custom rule
  `y * (t - sum(y * t, axis))` with `y = softmax(x)`.

  Examples:
    >>> import numpy as np
    >>> softmax(np.array([0., 1000.], np.float32))
    Array([0., 1.], dtype=float32)
  """
  # NB: not jitted, as in JAX (whose comment says jit changed numerics in a test).
  x = jnp.asarray(x)
  where = None if where is None else jnp.asarray(where)
  axis = _axes(axis, x.ndim)
  if config.softmax_custom_jvp:
    return _softmax(x, axis, where)
  return _softmax_stop_gradient(x, axis, where)


def _softmax_of(x, axis, where, shift):
  """softmax, with `shift(max)` subtracted before exponentiating."""
  x_max = jnp.max(x, axis, where=where, initial=-np.inf, keepdims=True)
  x_safe = x if where is None else jnp.where(where, x, -np.inf)
  unnormalized = jnp.exp(x_safe - shift(x_max))
  result = unnormalized / jnp.sum(unnormalized, axis, where=where, keepdims=True)
  if where is not None:
    result = jnp.where(where, result, 0)
  return result


def _softmax_stop_gradient(x, axis, where):
  # NB: the max's derivative cancels out; stopping it keeps -inf and ties out of the grad.
  return _softmax_of(x, axis, where, lax.stop_gradient)


@functools.partial(custom_jvp, nondiff_argnums=(1,))
def _softmax(x, axis, where):
  return _softmax_of(x, axis, where, lambda m: m)


@_softmax.defjvp
def _softmax_jvp(axis, primals, tangents):
  (x, where), (x_dot, _) = primals, tangents
  y = _softmax(x, axis, where)
  return y, y * (x_dot - jnp.sum(y * x_dot, axis, where=where, keepdims=True))


def logmeanexp(x: Any, axis: Any = None, where: Any = None, keepdims: bool = False):
  """`log(mean(exp(x)))` over `axis`, overflow-safe (JAX's `nn.logmeanexp`)."""
  x = jnp.asarray(x)
  lse = logsumexp(x, axis=axis, where=where, keepdims=keepdims)
  axes = _axes(axis, x.ndim)
  if where is None:
    count = float(np.prod([x.shape[a] for a in axes]))
    return lse - jnp.log(jnp.asarray(count, lse.dtype))
  mask = jnp.broadcast_to(jnp.asarray(where), x.shape)
  count = jnp.sum(mask.astype(lse.dtype), axis=axes, keepdims=keepdims)
  return lse - jnp.log(count)


def standardize(x: Any, axis: Any = -1, mean: Any = None, variance: Any = None,
                epsilon: Any = 1e-5, where: Any = None, *, algorithm: str = "fast"):
  """`(x - mean) / sqrt(variance + epsilon)` over `axis` (JAX's `nn.standardize`).

  Args:
    x: array `T[*s]`.
    axis: an int, a tuple of ints, or None.
    mean, variance: optional precomputed statistics (broadcastable, keepdims shape).
    epsilon: added to the variance.
    where: optional boolean mask of the entries the statistics use.
    algorithm: `"fast"` (`E[x**2] - E[x]**2`, clipped at 0; JAX's default) or `"stable"`
      (`E[(x - E[x])**2]`).

  Returns:
    `T[*s]`.

  Raises:
    ValueError: for an unknown algorithm.
  """
  if algorithm not in ("fast", "stable"):
    raise ValueError(f"Unknown algorithm '{algorithm}'. Expected 'fast' or 'stable'.")
  x = jnp.asarray(x)
  axes = _axes(axis, x.ndim)

  def masked_mean(v):
    if where is None:
      return jnp.mean(v, axes, keepdims=True)
    v = jnp.asarray(v)
    count = jnp.sum(jnp.broadcast_to(where, v.shape).astype(v.dtype), axes, keepdims=True)
    return jnp.sum(masked(v, where, 0), axes, keepdims=True) / count
  if mean is None:
    mean = masked_mean(x)
  if variance is None:
    if algorithm == "stable":
      variance = masked_mean(jnp.square(jnp.subtract(x, mean)))
    else:
      variance = masked_mean(jnp.square(x)) - jnp.square(mean)
      variance = jnp.clip(variance, 0)   # the fast formula can round below 0
  return jnp.subtract(x, mean) * lax.rsqrt(variance + epsilon)


def one_hot(x: Any, num_classes: int, *, dtype: Any = None, axis: int = -1):
  """One-hot encodings of the integers `x` (JAX's `nn.one_hot`).

  Args:
    x: integer array `I[*s]`; values outside `[0, num_classes)` give all-zero rows.
    num_classes: the number of classes n (static).
    dtype: the result dtype T (default float32).
    axis: where the class axis goes in the result (negative counts from the end).

  Returns:
    `T[*s]` with an axis of size n inserted at `axis`.

  Raises:
    ConcretizationTypeError: if `num_classes` is traced (JAX's words).
    TypeError: if `num_classes` is not an int.
    ValueError: if `axis` is out of bounds.

  Warns:
    DeprecationWarning: for an `x` that is not integer-typed (floats, bool), as JAX.

  Examples:
    >>> import numpy as np
    >>> one_hot(np.array([0, 2, 5]), 3)
    Array([[1., 0., 0.],
           [0., 0., 1.],
           [0., 0., 0.]], dtype=float32)
  """
  if isinstance(num_classes, core.Tracer) and num_classes.to_concrete_value() is None:
    # NB: a traced num_classes (jit(one_hot)(x, 5)): JAX's ConcretizationTypeError
    raise core.ConcretizationTypeError(
        f"Abstract tracer value encountered where concrete value is expected: traced array "
        f"with shape {num_classes.aval.str_short(False)}\nThe error arose in "
        f"jax.nn.one_hot argument `num_classes`."   # NB: JAX's words, which users match
        f"{num_classes._trace.origin_msg(num_classes)}")
  try:
    num_classes = operator.index(num_classes)
  except TypeError:
    raise TypeError(f"one_hot: num_classes must be a static Python int, got "
                    f"{num_classes!r}. The error arose in stagecraft.nn.one_hot argument "
                    f"`num_classes`.") from None
  x = jnp.asarray(x)
  if not (jnp.issubdtype(x.dtype, np.integer) and x.dtype != np.bool_):
    # NB: JAX deprecated non-integer input (it still computes); its warning points into its
    # own module, so Python's default filters hide it outside tests, as here.
    warnings.warn(f"jax.nn.one_hot input should be integer-typed; got dtype={x.dtype}",
                  DeprecationWarning, stacklevel=1)
  # NB: JAX's one_hot converts with astype, whose name its x64 warning gives.
  dt = dtypes.check_user_dtype(float if dtype is None else dtype, "astype")
  axis = _canonical_axis(axis, x.ndim + 1, "one_hot")
  lhs = lax.expand_dims(x, (axis,))
  rhs_shape = [1] * x.ndim
  rhs_shape.insert(axis, num_classes)
  rhs = lax.broadcasted_iota(x.dtype, rhs_shape, axis)
  return (lhs == rhs).astype(dt)


@jit
def soft_sign(x: Any):
  """`x / (|x| + 1)` (JAX's `nn.soft_sign`)."""
  x = jnp.asarray(x)
  return x / (jnp.abs(x) + 1)


@jit
def squareplus(x: Any, b: Any = 4):
  """`(x + sqrt(x**2 + b)) / 2` (JAX's `nn.squareplus`)."""
  x = jnp.asarray(x)
  return (x + jnp.sqrt(jnp.square(x) + b)) / 2


@jit
def sparse_plus(x: Any):
  """0 for `x <= -1`, `x` for `x >= 1`, `(x + 1)**2 / 4` between (JAX's `nn.sparse_plus`)."""
  x = jnp.asarray(x)
  return jnp.where(x <= -1.0, 0.0, jnp.where(x >= 1.0, x, (x + 1.0) ** 2 / 4))


@jit
def sparse_sigmoid(x: Any):
  """`clip((x + 1) / 2, 0, 1)` (JAX's `nn.sparse_sigmoid`)."""
  return 0.5 * jnp.clip(x + 1.0, 0.0, 2.0)


@jit
def hard_tanh(x: Any):
  """`clip(x, -1, 1)` (JAX's `nn.hard_tanh`)."""
  x = jnp.asarray(x)
  return jnp.where(x > 1, 1, jnp.where(x < -1, -1, x))


@jit
def hard_sigmoid(x: Any):
  """`relu6(x + 3) / 6` (JAX's `nn.hard_sigmoid`)."""
  return relu6(x + 3.) / 6.


@jit
def hard_silu(x: Any):
  """`x * hard_sigmoid(x)` (JAX's `nn.hard_silu`)."""
  x = jnp.asarray(x)
  return x * hard_sigmoid(x)


hard_swish = hard_silu


@custom_jvp
@jit
def log1mexp(x: Any):
  """`log(1 - exp(-x))` for `x > 0`, accurate at both ends (JAX's `nn.log1mexp`): `log(-expm1(-x))`
  below `log 2`, `log1p(-exp(-x))` above (Maechler 2012). Its derivative is JAX's custom
  rule `1 / expm1(x)`."""
  x = jnp.asarray(x)
  c = jnp.log(2.0)
  return jnp.where(x < c, jnp.log(-jnp.expm1(-x)), jnp.log1p(-jnp.exp(-x)))


log1mexp.defjvps(lambda g, ans, x: g / jnp.expm1(x))


tanh = jnp.tanh

from stagecraft.nn.attention import dot_product_attention  # noqa: E402,F401
__all__.append("dot_product_attention")
