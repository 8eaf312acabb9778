"""`stagecraft.example_libraries.stax`: JAX's small neural-network library
(`jax.example_libraries.stax`), for programs written against it.

A layer is a pair `(init_fun, apply_fun)`:

- `init_fun(rng, input_shape) -> (output_shape, params)`: `rng` a PRNG key, shapes tuples of
  ints (a list of them for layers with several inputs or outputs).
- `apply_fun(params, inputs, **kwargs) -> outputs`; `rng=key` is passed down for `Dropout`.

Layer constructors are CamelCase (`Dense(512)`, `Conv(32, (3, 3))`); layers without
arguments are the pairs themselves (`Relu`, `Flatten`, `Identity`, `FanInSum`). `serial` and
`parallel` combine layers into a layer. Keys are split and initializers drawn in the same
order as JAX's, so for the same key the parameters equal JAX's.

  >>> from stagecraft import random
  >>> init_fun, apply_fun = serial(Dense(4), Relu, Dense(2), LogSoftmax)
  >>> out_shape, params = init_fun(random.PRNGKey(0), (-1, 3))
  >>> out_shape
  (-1, 2)
"""
from __future__ import annotations

import functools
import math

import stagecraft.numpy as jnp
from stagecraft import lax, random
from stagecraft.nn import (elu, gelu, leaky_relu, log_softmax, relu, selu, sigmoid, softmax,
                           softplus, standardize)
from stagecraft.nn.initializers import glorot_normal, normal, ones, zeros

__all__ = ["Dense", "GeneralConv", "Conv", "GeneralConvTranspose", "Conv1DTranspose",
           "ConvTranspose", "BatchNorm", "elementwise", "Tanh", "Relu", "Exp", "Log",
           "LogSoftmax", "Softmax", "Softplus", "Sigmoid", "Elu", "LeakyRelu", "Selu", "Gelu",
           "MaxPool", "SumPool", "AvgPool", "Flatten", "Identity", "FanOut", "FanInSum",
           "FanInConcat", "Dropout", "serial", "parallel", "shape_dependent",
           "glorot", "randn", "logsoftmax", "glorot_normal", "normal", "ones", "zeros",
           "relu", "log_softmax", "softmax", "softplus", "sigmoid", "elu", "leaky_relu",
           "selu", "gelu", "standardize"]

# JAX's older names, kept by its stax.
glorot = glorot_normal
randn = normal
logsoftmax = log_softmax


def Dense(out_dim, W_init=glorot_normal(), b_init=normal()):
  """A fully-connected layer: `inputs @ W + b`.

  Args:
    out_dim: the number of output features.
    W_init: initializer of `W: f32[in_dim, out_dim]` (default Glorot normal).
    b_init: initializer of `b: f32[out_dim]` (default normal, stddev 0.01).

  Returns:
    A layer mapping `[..., in_dim]` to `[..., out_dim]`; its params are `(W, b)`.
  """
  def init_fun(rng, input_shape):
    k_w, k_b = random.split(rng)
    params = W_init(k_w, (input_shape[-1], out_dim)), b_init(k_b, (out_dim,))
    return tuple(input_shape[:-1]) + (out_dim,), params

  def apply_fun(params, inputs, **kwargs):
    W, b = params
    return jnp.dot(inputs, W) + b
  return init_fun, apply_fun


def _kernel_shape(rhs_spec, input_shape, lhs_spec, out_chan, filter_shape):
  """The kernel's shape in `rhs_spec` order: 'O' out_chan, 'I' the input's channels, the
  spatial letters `filter_shape` in turn."""
  spatial = iter(filter_shape)
  return [out_chan if c == "O" else input_shape[lhs_spec.index("C")] if c == "I"
          else next(spatial) for c in rhs_spec]


def _conv_layer(transpose, dimension_numbers, out_chan, filter_shape, strides, padding, W_init,
                b_init):
  lhs_spec, rhs_spec, out_spec = dimension_numbers
  one = (1,) * len(filter_shape)
  strides = strides or one
  W_init = W_init or glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))
  shape_fn = lax.conv_transpose_shape_tuple if transpose else lax.conv_general_shape_tuple

  def init_fun(rng, input_shape):
    kernel_shape = _kernel_shape(rhs_spec, input_shape, lhs_spec, out_chan, filter_shape)
    output_shape = shape_fn(input_shape, kernel_shape, strides, padding, dimension_numbers)
    bias_shape = [out_chan if c == "C" else 1 for c in out_spec]
    k_w, k_b = random.split(rng)
    return output_shape, (W_init(k_w, kernel_shape), b_init(k_b, bias_shape))

  def apply_fun(params, inputs, **kwargs):
    W, b = params
    if transpose:
      out = lax.conv_transpose(inputs, W, strides, padding,
                               dimension_numbers=dimension_numbers)
    else:
      out = lax.conv_general_dilated(inputs, W, strides, padding, one, one,
                                     dimension_numbers=dimension_numbers)
    return out + b
  return init_fun, apply_fun


def GeneralConv(dimension_numbers, out_chan, filter_shape, strides=None, padding="VALID",
                W_init=None, b_init=normal(1e-6)):
  """A convolution layer with the layouts `dimension_numbers = (lhs, rhs, out)` (e.g.
  `('NHWC', 'HWIO', 'NHWC')`).

  Args:
    dimension_numbers: the input, kernel and output layouts as strings.
    out_chan: the number of output channels.
    filter_shape: the kernel's spatial sizes, in the order of the kernel layout.
    strides: the spatial strides (default all 1).
    padding: `'VALID'`, `'SAME'`, `'SAME_LOWER'` or explicit `(low, high)` pairs.
    W_init: the kernel's initializer (default Glorot normal over the kernel's I/O axes).
    b_init: the bias's initializer (default normal, stddev 1e-6); the bias has the output's
      rank with size 1 except on 'C'.

  Returns:
    A layer; its params are `(W, b)`.
  """
  return _conv_layer(False, dimension_numbers, out_chan, filter_shape, strides, padding,
                     W_init, b_init)


Conv = functools.partial(GeneralConv, ("NHWC", "HWIO", "NHWC"))
Conv.__doc__ = "`GeneralConv` with layouts ('NHWC', 'HWIO', 'NHWC')."


def GeneralConvTranspose(dimension_numbers, out_chan, filter_shape, strides=None,
                         padding="VALID", W_init=None, b_init=normal(1e-6)):
  """A transposed-convolution layer (`lax.conv_transpose`); arguments as `GeneralConv`.

  Returns:
    A layer; its params are `(W, b)`.
  """
  return _conv_layer(True, dimension_numbers, out_chan, filter_shape, strides, padding,
                     W_init, b_init)


Conv1DTranspose = functools.partial(GeneralConvTranspose, ("NHC", "HIO", "NHC"))
Conv1DTranspose.__doc__ = "`GeneralConvTranspose` with layouts ('NHC', 'HIO', 'NHC')."
ConvTranspose = functools.partial(GeneralConvTranspose, ("NHWC", "HWIO", "NHWC"))
ConvTranspose.__doc__ = "`GeneralConvTranspose` with layouts ('NHWC', 'HWIO', 'NHWC')."


def BatchNorm(axis=(0, 1, 2), epsilon=1e-5, center=True, scale=True, beta_init=zeros,
              gamma_init=ones):
  """Batch normalization over `axis` (Ioffe and Szegedy, "Batch Normalization", ICML 2015):
  `gamma * (x - mean) / sqrt(var + epsilon) + beta`, with the statistics of this batch
  (no running averages).

  Args:
    axis: the axis or axes the statistics are taken over.
    epsilon: added to the variance.
    center: whether to add the learned offset `beta`.
    scale: whether to multiply by the learned scale `gamma`.
    beta_init: initializer of `beta` (default zeros).
    gamma_init: initializer of `gamma` (default ones).

  Returns:
    A layer keeping the input's shape; its params are `(beta, gamma)`, each shaped like the
    input without `axis` (`()` when not centered / scaled).
  """
  axis = (axis,) if jnp.isscalar(axis) else axis

  def init_fun(rng, input_shape):
    shape = tuple(d for k, d in enumerate(input_shape) if k not in axis)
    k_beta, k_gamma = random.split(rng)
    beta = beta_init(k_beta, shape) if center else ()
    gamma = gamma_init(k_gamma, shape) if scale else ()
    return input_shape, (beta, gamma)

  def apply_fun(params, x, **kwargs):
    beta, gamma = params
    expand = tuple(None if k in axis else slice(None) for k in range(jnp.ndim(x)))
    z = standardize(x, axis, epsilon=epsilon)
    if scale:
      z = gamma[expand] * z
    if center:
      z = z + beta[expand]
    return z
  return init_fun, apply_fun


def elementwise(fun, **fun_kwargs):
  """A layer without parameters applying `fun(inputs, **fun_kwargs)`."""
  def init_fun(rng, input_shape):
    return input_shape, ()

  def apply_fun(params, inputs, **kwargs):
    return fun(inputs, **fun_kwargs)
  return init_fun, apply_fun


Tanh = elementwise(jnp.tanh)
Relu = elementwise(relu)
Exp = elementwise(jnp.exp)
Log = elementwise(jnp.log)   # not in JAX's stax; the companion of Exp
LogSoftmax = elementwise(log_softmax, axis=-1)
Softmax = elementwise(softmax, axis=-1)
Softplus = elementwise(softplus)
Sigmoid = elementwise(sigmoid)
Elu = elementwise(elu)
LeakyRelu = elementwise(leaky_relu)
Selu = elementwise(selu)
Gelu = elementwise(gelu)


def _window_sizes(inputs, spec, dims, strides, padding):
  """How many input elements each pooling window covers (padding excluded), shaped to
  broadcast against the pooled output."""
  non_spatial = (0, inputs.ndim - 1) if spec is None else (spec.index("N"), spec.index("C"))
  spatial_shape = tuple(d for k, d in enumerate(inputs.shape) if k not in non_spatial)
  sizes = lax.reduce_window(jnp.ones(spatial_shape, dtype=inputs.dtype), 0., lax.add, dims,
                            strides, padding)
  for k in sorted(non_spatial):
    sizes = jnp.expand_dims(sizes, k)
  return sizes


def _pooling(reducer, init_val, average=False, name="Pool"):
  def PoolingLayer(window_shape, strides=None, padding="VALID", spec=None):
    """A pooling layer over the spatial axes.

    Args:
      window_shape: the window's spatial sizes.
      strides: the spatial strides (default all 1).
      padding: `'VALID'`, `'SAME'` or explicit `(low, high)` pairs for the spatial axes.
      spec: the input layout as a string with 'N' and 'C' (default: batch first, channels
        last, e.g. NHWC).

    Returns:
      A layer without parameters.
    """
    spatial_window = tuple(window_shape)
    spatial_strides = tuple(strides or (1,) * len(window_shape))
    non_spatial = (0, len(window_shape) + 1) if spec is None else (spec.index("N"),
                                                                  spec.index("C"))
    window, step = list(spatial_window), list(spatial_strides)
    for k in sorted(non_spatial):
      window.insert(k, 1)
      step.insert(k, 1)
    window, step = tuple(window), tuple(step)

    def init_fun(rng, input_shape):
      pads = lax.padtype_to_pads(input_shape, window, step, padding)
      ones_ = (1,) * len(window)
      return lax.reduce_window_shape_tuple(input_shape, window, step, pads, ones_, ones_), ()

    def apply_fun(params, inputs, **kwargs):
      out = lax.reduce_window(inputs, init_val, reducer, window, step, padding)
      if average:
        out = out / _window_sizes(inputs, spec, spatial_window, spatial_strides, padding)
      return out
    return init_fun, apply_fun
  PoolingLayer.__name__ = PoolingLayer.__qualname__ = name
  return PoolingLayer


MaxPool = _pooling(lax.max, -jnp.inf, name="MaxPool")
SumPool = _pooling(lax.add, 0., name="SumPool")
AvgPool = _pooling(lax.add, 0., average=True, name="AvgPool")


def _flatten():
  def init_fun(rng, input_shape):
    return (input_shape[0], math.prod(input_shape[1:])), ()

  def apply_fun(params, inputs, **kwargs):
    return jnp.reshape(inputs, (inputs.shape[0], -1))
  return init_fun, apply_fun


#: A layer flattening all axes but the leading one: `[n, *s] -> [n, prod(s)]`.
Flatten = _flatten()

#: A layer returning its input.
Identity = (lambda rng, input_shape: (input_shape, ()),
            lambda params, inputs, **kwargs: inputs)


def FanOut(num):
  """A layer giving `num` copies of its input (a list), for `parallel` layers."""
  def init_fun(rng, input_shape):
    return [input_shape] * num, ()

  def apply_fun(params, inputs, **kwargs):
    return [inputs] * num
  return init_fun, apply_fun


#: A layer summing its list of inputs.
FanInSum = (lambda rng, input_shape: (input_shape[0], ()),
            lambda params, inputs, **kwargs: sum(inputs))


def FanInConcat(axis=-1):
  """A layer concatenating its list of inputs along `axis`."""
  def init_fun(rng, input_shape):
    ax = axis % len(input_shape[0])
    size = sum(s[ax] for s in input_shape)
    first = tuple(input_shape[0])
    return first[:ax] + (size,) + first[ax + 1:], ()

  def apply_fun(params, inputs, **kwargs):
    return jnp.concatenate(inputs, axis)
  return init_fun, apply_fun


def Dropout(rate, mode="train"):
  """Dropout (Srivastava et al., JMLR 2014). In `mode='train'` each element is kept with
  probability `rate` and divided by `rate`, else set to 0; in any other mode it is the
  identity. NB: as in JAX's stax, `rate` is the probability of *keeping* an element.

  `apply_fun` needs the key: `apply_fun(params, inputs, rng=key)`.

  Raises:
    ValueError: (from `apply_fun`) when called without `rng`.
  """
  def init_fun(rng, input_shape):
    return input_shape, ()

  def apply_fun(params, inputs, **kwargs):
    rng = kwargs.get("rng", None)
    if rng is None:
      raise ValueError(
          "Dropout layer requires apply_fun to be called with a PRNG key argument. That is, "
          "instead of `apply_fun(params, inputs)`, call it like `apply_fun(params, inputs, "
          "rng)` where `rng` is a PRNG key (e.g. from `jax.random.key`).")
    if mode != "train":
      return inputs
    keep = random.bernoulli(rng, rate, inputs.shape)
    return jnp.where(keep, inputs / rate, 0)
  return init_fun, apply_fun


def _split_or_none(rng, n):
  return random.split(rng, n) if rng is not None else (None,) * n


def serial(*layers):
  """The composition of `layers`, applied first to last.

  Args:
    *layers: `(init_fun, apply_fun)` pairs.

  Returns:
    A layer whose params are the list of the layers' params. `init_fun` splits the key
    once per layer; `apply_fun` splits `rng` (when given) into one key per layer.
  """
  init_funs, apply_funs = zip(*layers)

  def init_fun(rng, input_shape):
    params = []
    for init in init_funs:
      rng, layer_rng = random.split(rng)
      input_shape, p = init(layer_rng, input_shape)
      params.append(p)
    return input_shape, params

  def apply_fun(params, inputs, **kwargs):
    rngs = _split_or_none(kwargs.pop("rng", None), len(apply_funs))
    for apply, p, r in zip(apply_funs, params, rngs):
      inputs = apply(p, inputs, rng=r, **kwargs)
    return inputs
  return init_fun, apply_fun


def parallel(*layers):
  """Layers side by side: the k-th layer takes the k-th of a sequence of inputs (often
  after `FanOut`, before `FanInSum` or `FanInConcat`).

  Args:
    *layers: `(init_fun, apply_fun)` pairs.

  Returns:
    A layer taking and returning sequences; its params are the tuple of the layers'
    params and its output shapes the tuple of theirs.
  """
  init_funs, apply_funs = zip(*layers)

  def init_fun(rng, input_shape):
    rngs = random.split(rng, len(init_funs))
    pairs = [init(r, s) for init, r, s in zip(init_funs, rngs, input_shape)]
    return tuple(zip(*pairs))

  def apply_fun(params, inputs, **kwargs):
    rngs = _split_or_none(kwargs.pop("rng", None), len(apply_funs))
    return [f(p, x, rng=r, **kwargs) for f, p, x, r in zip(apply_funs, params, inputs, rngs)]
  return init_fun, apply_fun


def shape_dependent(make_layer):
  """A layer built by `make_layer(input_shape) -> (init_fun, apply_fun)` once the input's
  shape is known (at `init_fun` and at every `apply_fun`)."""
  def init_fun(rng, input_shape):
    return make_layer(input_shape)[0](rng, input_shape)

  def apply_fun(params, inputs, **kwargs):
    return make_layer(inputs.shape)[1](params, inputs, **kwargs)
  return init_fun, apply_fun
