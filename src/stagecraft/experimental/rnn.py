"""`stagecraft.experimental.rnn`: JAX 0.10.2's `jax.experimental.rnn` (cuDNN LSTM).

The packed weight layout is cuDNN's double-bias LSTM: a bidirectional LSTM counts as twice the
layers (pseudo-layers forward-0, reverse-0, forward-1, ...). The flat weight vector holds, for
each pseudo-layer in turn, `W_ih` (4*hidden, in) then `W_hh` (4*hidden, hidden), followed by,
for each pseudo-layer, `b_ih` (4*hidden,) then `b_hh` (4*hidden,); each stacks the gates
input, forget, cell, output along its leading axis (PyTorch's `torch.nn.LSTM` notation). The
input size of pseudo-layers past the first layer is `num_directions * hidden`.

What runs on CPU (as in JAX): `get_num_params_in_lstm`, `init_lstm_weight`,
`unpack_lstm_weights`, `swap_lstm_gates` and `lstm_ref`, the reference LSTM (a `lax.scan`
per pseudo-layer, PyTorch's equations, ragged `seq_lengths` handled by masking).

`lstm` binds `rnn_fwd_p` (and its VJP `rnn_bwd_p`), the cuDNN RNN kernels; their abstract
evaluation asks the GPU plugin for the reserve-space size, so on a CPU-only install they
raise JAX's AttributeError (`jaxlib.gpu_rnn` has no
`compute_rnn_workspace_reserve_space_sizes`). Bad `seq_lengths` dtypes and bfloat16
precision are refused first, with JAX's NotImplementedError texts.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from stagecraft import api as _api
from stagecraft import core
from stagecraft import lax
from stagecraft.lax.dot import Precision as _Precision, canonicalize_precision as _canon_precision
from stagecraft import numpy as jnp
from stagecraft import random as _random
from stagecraft.custom_derivatives import custom_vjp
from stagecraft.nn import sigmoid, tanh
from stagecraft.pjit import jit

__all__ = ["get_num_params_in_lstm", "init_lstm_weight", "swap_lstm_gates",
           "unpack_lstm_weights", "lstm", "lstm_ref", "lstm_fwd", "lstm_bwd", "rnn_fwd_p",
           "rnn_bwd_p", "rnn_abstract_eval", "rnn_bwd_abstract_eval", "sigmoid", "tanh"]

Array = Any
PRNGKeyArray = Any
Shape = tuple[int, ...]


def _param_shapes(input_size: int, hidden_size: int, num_layers: int,
                  bidirectional: bool) -> list[Shape]:
  """The shapes of the packed LSTM weights in order (see the module docstring)."""
  dirs = 2 if bidirectional else 1
  n = num_layers * dirs
  gates = 4 * hidden_size
  mats: list[Shape] = []
  for p in range(n):
    fan_in = input_size if p < dirs else dirs * hidden_size
    mats += [(gates, fan_in), (gates, hidden_size)]
  return mats + [(gates,)] * (2 * n)


def get_num_params_in_lstm(input_size: int, hidden_size: int, num_layers: int,
                           bidirectional: bool) -> int:
  """The length of the packed weight vector of an LSTM (an int)."""
  return sum(math.prod(s) for s in _param_shapes(input_size, hidden_size, num_layers,
                                                 bidirectional))


def init_lstm_weight(rng: PRNGKeyArray, input_size: int, hidden_size: int, num_layers: int,
                     bidirectional: bool) -> Array:
  """A packed LSTM weight vector, float32 of shape (get_num_params_in_lstm(...),), drawn
  uniformly from [-k, k) with k = sqrt(1 / hidden_size) (PyTorch's initialisation) with
  `random.uniform(rng, ...)`."""
  size = get_num_params_in_lstm(input_size, hidden_size, num_layers, bidirectional)
  bound = np.sqrt(1.0 / hidden_size)
  return _random.uniform(rng, shape=(size,), dtype=jnp.float32, minval=-bound,
                         maxval=bound)


def swap_lstm_gates(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                    bidirectional: bool) -> Array:
  """`weights` (the packed vector) with the third and fourth gate blocks of every weight
  and bias exchanged, block by block in packing order (JAX's function; converts between
  gate orders i, f, g, o and i, f, o, g)."""
  w = jnp.asarray(weights)
  offset = 0
  for shape in _param_shapes(input_size, hidden_size, num_layers, bidirectional):
    size = math.prod(shape)
    block = w[offset:offset + size].reshape(shape)
    g0, g1, g2, g3 = jnp.split(block, 4, axis=0)
    w = w.at[offset:offset + size].set(jnp.concatenate([g0, g1, g3, g2], axis=0).flatten())
    offset += size
  return w


def unpack_lstm_weights(weights: Array, input_size: int, hidden_size: int, num_layers: int,
                        bidirectional: bool
                        ) -> tuple[dict[int, Array], dict[int, Array], dict[int, Array],
                                   dict[int, Array]]:
  """The packed vector split into `(W_ih, W_hh, b_ih, b_hh)`, dicts from pseudo-layer index
  to arrays of shapes (4*hidden, fan_in), (4*hidden, hidden), (4*hidden,), (4*hidden,)."""
  shapes = _param_shapes(input_size, hidden_size, num_layers, bidirectional)
  n = num_layers * (2 if bidirectional else 1)
  out: tuple[dict, dict, dict, dict] = ({}, {}, {}, {})
  offset = 0
  for k, shape in enumerate(shapes):
    size = math.prod(shape)
    block = weights[offset:offset + size].reshape(shape)
    offset += size
    if k < 2 * n:
      out[k % 2][k // 2] = block
    else:
      out[2 + (k - 2 * n) % 2][(k - 2 * n) // 2] = block
  return out


def _cell(w_ih, w_hh, b_ih, b_hh, carry, x):
  """One LSTM step on (h, c) of shape (batch, hidden) and x (batch, fan_in)."""
  h, c = carry
  wi = jnp.split(w_ih, 4, axis=0)
  wh = jnp.split(w_hh, 4, axis=0)
  bi = jnp.split(b_ih, 4, axis=0)
  bh = jnp.split(b_hh, 4, axis=0)
  pre = [x @ wi[k].T + bi[k][None] + h @ wh[k].T + bh[k][None] for k in range(4)]
  i, f, o = sigmoid(pre[0]), sigmoid(pre[1]), sigmoid(pre[3])
  g = tanh(pre[2])
  c = f * c + i * g
  h = o * tanh(c)
  return (h, c), h


def _run_layer(w_ih, w_hh, b_ih, b_hh, h0, c0, xs, seq_lengths):
  """Scans `_cell` over time-major `xs`; returns ((h_n, c_n) at each sequence's last step,
  the outputs zeroed past each sequence's length)."""
  def step(carry, x):
    carry, y = _cell(w_ih, w_hh, b_ih, b_hh, carry, x)
    return carry, (carry, y)
  _, ((hs, cs), ys) = lax.scan(step, (h0, c0), xs)
  batch = jnp.arange(hs.shape[1])
  h_n, c_n = hs[seq_lengths - 1, batch], cs[seq_lengths - 1, batch]
  valid = seq_lengths[None] > jnp.arange(ys.shape[0], dtype=jnp.int32)[:, None]
  return (h_n, c_n), jnp.where(valid[..., None], ys, 0)


def _reverse_valid(xs, seq_lengths):
  """Time-major `xs` with each sequence's valid steps reversed and its padding kept at the
  end (each column rolled by `T - length`, then the time axis flipped)."""
  shift = xs.shape[0] - seq_lengths
  rolled = _api.vmap(functools.partial(jnp.roll, axis=0), in_axes=(1, 0), out_axes=1)(xs, shift)
  return rolled[::-1]


@functools.partial(jit, static_argnums=(8, 9, 10, 11, 12))
def lstm_ref(x: Array, h_0: Array, c_0: Array, W_ih: dict[int, Array], W_hh: dict[int, Array],
             b_ih: dict[int, Array], b_hh: dict[int, Array], seq_lengths: Array,
             input_size: int, hidden_size: int, num_layers: int, dropout: float,
             bidirectional: bool) -> tuple[Array, Array, Array]:
  """The reference LSTM (PyTorch's `torch.nn.LSTM` equations, batch first), jitted.

  Args:
    x: (batch, max_seq_length, input_size).
    h_0, c_0: (num_directions * num_layers, batch, hidden_size).
    W_ih, W_hh, b_ih, b_hh: per pseudo-layer weights (`unpack_lstm_weights`).
    seq_lengths: int32 (batch,), each in [1, max_seq_length].
    input_size, hidden_size, num_layers, dropout, bidirectional: static.

  Returns:
    (y, h_n, c_n): y (batch, max_seq_length, num_directions * hidden_size), zero past each
    sequence's length; h_n, c_n like h_0, the states at each sequence's last valid step.

  Raises:
    NotImplementedError: `seq_lengths` not int32; `dropout` not 0.0 (cuDNN's dropout mask
      cannot be reproduced).
  """
  if seq_lengths.dtype != jnp.dtype("int32"):
    raise NotImplementedError("`seq_lengths` can only be int32.")
  if dropout != 0.0:
    raise NotImplementedError("Dropout not supported in LSTM reference because we cannot "
                              "determine CUDNN dropout mask.")
  xs = x.transpose(1, 0, 2)
  hs, cs = [], []
  dirs = 2 if bidirectional else 1
  for layer in range(num_layers):
    outs = []
    for d in range(dirs):
      p = layer * dirs + d
      inp = xs if d == 0 else _reverse_valid(xs, seq_lengths)
      (h_n, c_n), ys = _run_layer(W_ih[p], W_hh[p], b_ih[p], b_hh[p], h_0[p], c_0[p], inp,
                                  seq_lengths)
      outs.append(ys if d == 0 else _reverse_valid(ys, seq_lengths))
      hs.append(h_n)
      cs.append(c_n)
    xs = outs[0] if dirs == 1 else jnp.concatenate(outs, axis=-1)
  return xs.transpose(1, 0, 2), jnp.stack(hs), jnp.stack(cs)


def _allow_tf32(precision: Any) -> bool:
  """cuDNN's TF32 switch for `precision` (JAX's rule): True unless (HIGHEST, _).

  Raises NotImplementedError for (DEFAULT, _) (bfloat16) and ValueError otherwise."""
  precision = _canon_precision(precision)
  if precision is None or not (isinstance(precision, tuple) and len(precision) == 2):
    return True
  first = precision[0]
  if first == _Precision.HIGHEST:
    return False
  if first == _Precision.HIGH:
    return True
  if first == _Precision.DEFAULT:
    raise NotImplementedError("bfloat16 support not implemented for LSTM")
  raise ValueError(f"Unexpected precision specifier value {precision}")


def _no_gpu_rnn():
  # NB: JAX asks jaxlib's GPU RNN module for the reserve space; CPU jaxlib's has no such
  # function, and this is the error JAX raises there.
  raise AttributeError("module 'jaxlib.gpu_rnn' has no attribute "
                       "'compute_rnn_workspace_reserve_space_sizes'")


def rnn_abstract_eval(x_aval, h_0_aval, c_0_aval, w_aval, seq_lengths_aval, input_size: int,
                      hidden_size: int, num_layers: int, dropout: float, bidirectional: bool,
                      cudnn_allow_tf32: bool):
  """Avals of `rnn_fwd_p`: y (batch, T, dirs * hidden), h_n, c_n and cuDNN's reserve space,
  whose size only the GPU plugin knows: raises AttributeError (JAX's) without it."""
  _no_gpu_rnn()


def rnn_bwd_abstract_eval(dy_aval, dhn_aval, dcn_aval, x_aval, h0_aval, c0_aval, w_aval,
                          y_aval, reserve_space_aval, seq_lengths_aval, input_size: int,
                          hidden_size: int, num_layers: int, dropout: float,
                          bidirectional: bool, cudnn_allow_tf32: bool):
  """Avals of `rnn_bwd_p`: the cotangents of x, h_0, c_0 and the weights."""
  return x_aval, h0_aval, c0_aval, w_aval


rnn_fwd_p = core.Primitive("rnn_fwd")
rnn_fwd_p.multiple_results = True
rnn_fwd_p.def_abstract_eval(rnn_abstract_eval)
rnn_fwd_p.def_impl(lambda *args, **params: rnn_abstract_eval(
    *map(core.get_aval, args), **params))
rnn_bwd_p = core.Primitive("rnn_bwd")
rnn_bwd_p.multiple_results = True
rnn_bwd_p.def_abstract_eval(rnn_bwd_abstract_eval)


def _rnn_bwd_impl(*args, **params):
  # NB: its operands include a reserve space only rnn_fwd_p makes, which needs the GPU
  _no_gpu_rnn()


rnn_bwd_p.def_impl(_rnn_bwd_impl)


def lstm_fwd(x: Array, h_0: Array, c_0: Array, w: Array, seq_lengths: Array, input_size: int,
             hidden_size: int, num_layers: int, dropout: float, bidirectional: bool,
             precision: Any):
  """`lstm`'s forward pass: binds `rnn_fwd_p`; returns ((y, h_n, c_n), residuals).

  Raises NotImplementedError for non-int32 `seq_lengths` or bfloat16 precision, then the
  AttributeError of `rnn_abstract_eval` without a GPU."""
  if seq_lengths.dtype != jnp.dtype("int32"):
    raise NotImplementedError("`seq_lengths` can only be int32.")
  tf32 = _allow_tf32(precision)
  y, h_n, c_n, reserve = rnn_fwd_p.bind(
      x, h_0, c_0, w, seq_lengths, input_size=input_size, hidden_size=hidden_size,
      num_layers=num_layers, dropout=dropout, bidirectional=bidirectional,
      cudnn_allow_tf32=tf32)
  return (y, h_n, c_n), (x, h_0, c_0, w, seq_lengths, y, reserve)


def lstm_bwd(input_size: int, hidden_size: int, num_layers: int, dropout: float,
             bidirectional: bool, precision: Any, residuals, gradients):
  """`lstm`'s backward pass: binds `rnn_bwd_p`; returns the cotangents of (x, h_0, c_0,
  weights, seq_lengths) (zeros for the lengths)."""
  tf32 = _allow_tf32(precision)
  x, h_0, c_0, w, seq_lengths, y, reserve = residuals
  dy, dh_n, dc_n = gradients
  dx, dh_0, dc_0, dw = rnn_bwd_p.bind(
      dy, dh_n, dc_n, x, h_0, c_0, w, y, reserve, seq_lengths, input_size=input_size,
      hidden_size=hidden_size, num_layers=num_layers, dropout=dropout,
      bidirectional=bidirectional, cudnn_allow_tf32=tf32)
  return dx, dh_0, dc_0, dw, jnp.zeros_like(seq_lengths)


@functools.partial(custom_vjp, nondiff_argnums=(5, 6, 7, 8, 9, 10))
def lstm(x: Array, h_0: Array, c_0: Array, weights: Array, seq_lengths: Array,
         input_size: int, hidden_size: int, num_layers: int, dropout: float,
         bidirectional: bool, precision: Any = None) -> tuple[Array, Array, Array]:
  """The cuDNN LSTM (batch first): x (batch, T, input_size), h_0 and c_0
  (dirs * num_layers, batch, hidden), weights (get_num_params_in_lstm(...),), seq_lengths
  int32 (batch,); returns y (batch, T, dirs * hidden), h_n, c_n.

  Needs cuDNN: on CPU it raises JAX's AttributeError (see `rnn_abstract_eval`); use
  `lstm_ref` with `unpack_lstm_weights` there."""
  (y, h_n, c_n), _ = lstm_fwd(x, h_0, c_0, weights, seq_lengths, input_size=input_size,
                              hidden_size=hidden_size, num_layers=num_layers,
                              dropout=dropout, bidirectional=bidirectional,
                              precision=precision)
  return y, h_n, c_n


lstm.defvjp(lstm_fwd, lstm_bwd)
