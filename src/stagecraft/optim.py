"""Pure functional optimizers over pytrees, in the style of optax.

An optimizer is a `GradientTransformation`: a pair of pure functions

  init(params) -> state
  update(grads, state, params=None) -> (updates, new_state)

and `apply_updates(params, updates)` adds the updates to the parameters. Every state is a pytree of
arrays (NamedTuples of arrays and pytrees shaped like `params`), so `init`, `update` and the state
pass through `stagecraft.jit`, `grad`, `vmap` and `pmap` unchanged. Step counts are kept in the
state as `i32[]` arrays. Building blocks (`scale_by_adam`, `trace`, `clip_by_global_norm`, ...)
compose with `chain`; the usual optimizers (`sgd`, `adam`, `adamw`, `rmsprop`, `adafactor`) are
chains of them, as in optax, so that the same hyperparameters give the same updates.

A `learning_rate` may be a non-negative float or a schedule `step -> lr` (for example
`warmup_cosine_decay_schedule(...)`), called with the `i32[]` count of updates made so far.

Examples:
  >>> import stagecraft.numpy as jnp
  >>> from stagecraft import optim
  >>> params = {"w": jnp.ones(3)}
  >>> opt = optim.sgd(0.1)
  >>> state = opt.init(params)
  >>> updates, state = opt.update({"w": jnp.full(3, 2.0)}, state)
  >>> optim.apply_updates(params, updates)["w"]
  Array([0.8, 0.8, 0.8], dtype=float32)
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

import stagecraft.numpy as jnp
from stagecraft import tree_util

__all__ = [
  "GradientTransformation", "EmptyState", "apply_updates", "chain", "identity", "scale",
  "scale_by_learning_rate", "scale_by_schedule", "trace", "scale_by_adam", "scale_by_rms",
  "scale_by_stddev", "scale_by_factored_rms", "scale_by_param_block_rms", "add_decayed_weights",
  "clip_by_global_norm", "clip_by_block_rms", "global_norm", "sgd", "adam", "adamw", "rmsprop",
  "adafactor", "constant_schedule", "linear_schedule", "polynomial_schedule",
  "cosine_decay_schedule", "warmup_cosine_decay_schedule", "join_schedules",
  "TraceState", "ScaleByAdamState", "ScaleByRmsState", "ScaleByRStdDevState",
  "ScaleByScheduleState", "FactoredState",
]

Params = Any
Updates = Any
OptState = Any
Schedule = Callable[[Any], Any]


class GradientTransformation(NamedTuple):
  """A pair of pure functions `(init, update)`.

  `init(params) -> state`: builds the state for a pytree of parameters.
  `update(grads, state, params=None) -> (updates, new_state)`: `grads` and the returned `updates`
  are pytrees with the structure, shapes and dtypes of `params`. Some transformations need
  `params` (weight decay, Adafactor's parameter scaling) and raise `ValueError` without them.
  """
  init: Callable[[Params], OptState]
  update: Callable[..., tuple[Updates, OptState]]


class EmptyState(NamedTuple):
  """The state of a stateless transformation."""


class TraceState(NamedTuple):
  """State of `trace`: the momentum buffer, shaped like params."""
  trace: Params


class ScaleByAdamState(NamedTuple):
  """State of `scale_by_adam`: `count` i32[], first moment `mu` and second moment `nu`."""
  count: Any
  mu: Params
  nu: Params


class ScaleByRmsState(NamedTuple):
  """State of `scale_by_rms`: the running mean of squared gradients `nu`."""
  nu: Params


class ScaleByRStdDevState(NamedTuple):
  """State of `scale_by_stddev`: running means of gradients `mu` and squared gradients `nu`."""
  mu: Params
  nu: Params


class ScaleByScheduleState(NamedTuple):
  """State of `scale_by_schedule`: `count` i32[], the number of updates made so far."""
  count: Any


class FactoredState(NamedTuple):
  """State of `scale_by_factored_rms`.

  For a factored parameter of shape `s` whose largest dim is d0 and second largest d1 (see
  `scale_by_factored_rms`), `v_row` has shape `s` without dim d0, `v_col` has shape `s` without
  dim d1 and `v` is a `T[1]` placeholder; for an unfactored one `v` has shape `s` and `v_row`,
  `v_col` are `T[1]` placeholders (T the parameter's dtype).
  """
  count: Any
  v_row: Params
  v_col: Params
  v: Params


# ---------------------------------------------------------------------------------------------
# Argument checks


def _is_number(x) -> bool:
  return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _check_nonneg(fn: str, name: str, value) -> None:
  """Checks a float hyperparameter (a schedule, or a traced value, passes unchecked)."""
  if callable(value):
    return
  if isinstance(value, bool) or not (_is_number(value) or hasattr(value, "shape")):
    raise TypeError(f"{fn}: expected `{name}` to be a non-negative float or a schedule "
                    f"`step -> value`, but got {value!r} of type {type(value).__name__}.")
  if _is_number(value) and not value >= 0:
    raise ValueError(f"{fn}: expected a non-negative `{name}`, but got {name}={value!r}. "
                     f"Pass a value >= 0 (the sign of the step is applied by the optimizer).")


def _check_decay(fn: str, name: str, value, *, closed: bool = False) -> None:
  """Checks that a decay rate lies in [0, 1) (or [0, 1] with `closed`)."""
  if not _is_number(value):
    if hasattr(value, "shape"):  # an array (maybe traced, e.g. under inject-style use)
      return
    raise TypeError(f"{fn}: expected `{name}` to be a float in [0, 1{']' if closed else ')'}, "
                    f"but got {value!r} of type {type(value).__name__}.")
  ok = 0 <= value <= 1 if closed else 0 <= value < 1
  if not ok:
    interval = "[0, 1]" if closed else "[0, 1)"
    raise ValueError(f"{fn}: expected `{name}` in {interval}, but got {name}={value!r}. "
                     f"Typical values: 0.9 for a first moment, 0.999 for a second moment.")


def _check_positive(fn: str, name: str, value) -> None:
  if not _is_number(value) or not value > 0:
    raise ValueError(f"{fn}: expected a positive number for `{name}`, but got {value!r}.")


def _check_trees(fn: str, grads, ref, ref_name: str, shapes: bool = True) -> None:
  """Raises ValueError if `grads` differs from `ref` in pytree structure (or leaf shapes)."""
  gdef = tree_util.tree_structure(grads)
  rdef = tree_util.tree_structure(ref)
  if gdef != rdef:
    raise ValueError(
      f"{fn}: the pytree structure of `grads` does not match the structure of {ref_name}: "
      f"expected {tree_util.treedef_str(rdef)} but got {tree_util.treedef_str(gdef)}. Call "
      f"`init` with parameters of the same structure as the gradients passed to `update` "
      f"(for example the output of `grad` of the loss with respect to those parameters).")
  if not shapes:
    return
  g_leaves = tree_util.tree_leaves_with_path(grads)
  r_leaves = tree_util.tree_leaves(ref)
  bad = []
  for (path, g), r in zip(g_leaves, r_leaves):
    if np.shape(g) != np.shape(r):
      bad.append(f"  at {tree_util.keystr(path) or 'the root'}: expected shape "
                 f"{tuple(np.shape(r))} but got {tuple(np.shape(g))}")
  if bad:
    more = f"\n  and {len(bad) - 5} more" if len(bad) > 5 else ""
    raise ValueError(f"{fn}: the leaf shapes of `grads` do not match {ref_name}:\n"
                     + "\n".join(bad[:5]) + more +
                     "\nCall `init` with parameters shaped like the gradients.")


def _need_params(fn: str, params) -> None:
  if params is None:
    raise ValueError(f"{fn}: this transformation needs the current parameters: call "
                     f"`update(grads, state, params)` with `params` (got params=None).")


def _tree_map(f, tree, *rest):
  return tree_util.tree_map(f, tree, *rest)


def _cast(x, like):
  """`x` as an array of `like`'s dtype (so python/weak scalars never promote the update)."""
  return jnp.asarray(x, dtype=jnp.asarray(like).dtype)


def _zeros_like(p):
  return jnp.zeros_like(jnp.asarray(p))


def _count0():
  return jnp.zeros([], jnp.int32)


# ---------------------------------------------------------------------------------------------
# Composition and basic transformations


def apply_updates(params: Params, updates: Updates) -> Params:
  """Returns `params + updates` leaf by leaf, keeping each parameter's dtype.

  Args:
    params: pytree of arrays.
    updates: pytree of arrays with the structure and shapes of `params`.

  Raises:
    ValueError: if the structures or leaf shapes differ.
  """
  _check_trees("apply_updates", updates, params, "`params`")
  return _tree_map(lambda p, u: jnp.asarray(p + u, dtype=jnp.asarray(p).dtype), params, updates)


def chain(*transforms: GradientTransformation) -> GradientTransformation:
  """Applies `transforms` in order; the state is the tuple of their states.

  Raises:
    TypeError: if an argument is not a `GradientTransformation`.
  """
  for i, t in enumerate(transforms):
    if not isinstance(t, GradientTransformation):
      raise TypeError(f"chain: expected GradientTransformations, but argument {i} is "
                      f"{type(t).__name__}. Build transformations with the functions of "
                      f"`stagecraft.optim` (for example `optim.scale_by_adam()`).")

  def init(params):
    return tuple(t.init(params) for t in transforms)

  def update(grads, state, params=None):
    if not isinstance(state, tuple) or len(state) != len(transforms):
      raise ValueError(f"chain: expected a state tuple of {len(transforms)} entries (one per "
                       f"transformation), but got {type(state).__name__}"
                       f"{'' if not isinstance(state, tuple) else f' of length {len(state)}'}. "
                       f"Pass the state returned by this optimizer's `init` or `update`.")
    new_state = []
    for t, s in zip(transforms, state):
      grads, s = t.update(grads, s, params)
      new_state.append(s)
    return grads, tuple(new_state)

  return GradientTransformation(init, update)


def identity() -> GradientTransformation:
  """Passes gradients through unchanged."""
  return GradientTransformation(lambda params: EmptyState(),
                                lambda grads, state, params=None: (grads, state))


def scale(step_size: float) -> GradientTransformation:
  """Multiplies updates by the constant `step_size` (any sign): `u = step_size * g`."""
  def update(grads, state, params=None):
    return _tree_map(lambda g: _cast(step_size, g) * g, grads), state
  return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_schedule(step_size_fn: Schedule) -> GradientTransformation:
  """Multiplies updates by `step_size_fn(count)`, `count` being the i32[] number of updates made.

  Raises:
    TypeError: if `step_size_fn` is not callable.
  """
  if not callable(step_size_fn):
    raise TypeError(f"scale_by_schedule: expected a callable `step -> step_size`, but got "
                    f"{step_size_fn!r}.")

  def init(params):
    return ScaleByScheduleState(count=_count0())

  def update(grads, state, params=None):
    step = step_size_fn(state.count)
    updates = _tree_map(lambda g: _cast(step, g) * g, grads)
    return updates, ScaleByScheduleState(count=state.count + 1)

  return GradientTransformation(init, update)


def scale_by_learning_rate(learning_rate, *, flip_sign: bool = True) -> GradientTransformation:
  """Multiplies updates by `-learning_rate` (by `learning_rate` if not `flip_sign`).

  Args:
    learning_rate: non-negative float or schedule `step -> lr`.

  Raises:
    ValueError: if `learning_rate` is a negative number.
  """
  _check_nonneg("scale_by_learning_rate", "learning_rate", learning_rate)
  m = -1 if flip_sign else 1
  if callable(learning_rate):
    return scale_by_schedule(lambda count: m * learning_rate(count))
  return scale(m * learning_rate)


def trace(decay: float, nesterov: bool = False) -> GradientTransformation:
  """Momentum (heavy ball, or Nesterov's accelerated gradient).

  t_k = g_k + decay * t_{k-1};  u_k = t_k  (or  u_k = g_k + decay * t_k  with `nesterov`).

  References: Polyak 1964; Sutskever et al. 2013, "On the importance of initialization and
  momentum in deep learning".

  Raises:
    ValueError: if `decay` is outside [0, 1].
  """
  _check_decay("trace", "decay", decay, closed=True)

  def init(params):
    return TraceState(trace=_tree_map(_zeros_like, params))

  def update(grads, state, params=None):
    _check_trees("trace.update", grads, state.trace, "the momentum state (built by `init`)")
    new = _tree_map(lambda g, t: g + _cast(decay, g) * t, grads, state.trace)
    updates = _tree_map(lambda g, t: g + _cast(decay, g) * t, grads, new) if nesterov else new
    return updates, TraceState(trace=new)

  return GradientTransformation(init, update)


def _bias_correction(moment, decay, count):
  def f(t):
    return t / (1 - jnp.power(_cast(decay, t), count.astype(t.dtype)))
  return _tree_map(f, moment)


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                  eps_root: float = 0.0) -> GradientTransformation:
  """Rescales updates by Adam's bias-corrected moment estimates (Kingma & Ba 2015, Algorithm 1).

  With t the step number (1 for the first update):
    m_t = b1 m_{t-1} + (1 - b1) g_t;      v_t = b2 v_{t-1} + (1 - b2) g_t^2
    m^_t = m_t / (1 - b1^t);              v^_t = v_t / (1 - b2^t)
    u_t = m^_t / (sqrt(v^_t + eps_root) + eps)

  References: D. P. Kingma and J. Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015.

  Raises:
    ValueError: if `b1` or `b2` is outside [0, 1), or `eps`/`eps_root` is negative.
  """
  _check_decay("scale_by_adam", "b1", b1)
  _check_decay("scale_by_adam", "b2", b2)
  _check_nonneg("scale_by_adam", "eps", eps)
  _check_nonneg("scale_by_adam", "eps_root", eps_root)

  def init(params):
    return ScaleByAdamState(count=_count0(), mu=_tree_map(_zeros_like, params),
                            nu=_tree_map(_zeros_like, params))

  def update(grads, state, params=None):
    _check_trees("scale_by_adam.update", grads, state.mu, "the Adam state (built by `init`)")
    mu = _tree_map(lambda g, m: _cast(b1, g) * m + _cast(1 - b1, g) * g, grads, state.mu)
    nu = _tree_map(lambda g, v: _cast(b2, g) * v + _cast(1 - b2, g) * (g * g), grads, state.nu)
    count = state.count + 1
    mu_hat = _bias_correction(mu, b1, count)
    nu_hat = _bias_correction(nu, b2, count)
    updates = _tree_map(lambda m, v: m / (jnp.sqrt(v + _cast(eps_root, v)) + _cast(eps, v)),
                        mu_hat, nu_hat)
    return updates, ScaleByAdamState(count=count, mu=mu, nu=nu)

  return GradientTransformation(init, update)


def scale_by_rms(decay: float = 0.9, eps: float = 1e-8,
                 initial_scale: float = 0.0) -> GradientTransformation:
  """RMSProp's rescaling (Tieleman & Hinton 2012, Coursera lecture 6.5).

    v_t = decay v_{t-1} + (1 - decay) g_t^2;   u_t = g_t / sqrt(v_t + eps),   v_0 = initial_scale.

  Raises:
    ValueError: if `decay` is outside [0, 1) or `eps` is negative.
  """
  _check_decay("scale_by_rms", "decay", decay)
  _check_nonneg("scale_by_rms", "eps", eps)

  def init(params):
    return ScaleByRmsState(nu=_tree_map(lambda p: jnp.full_like(jnp.asarray(p), initial_scale),
                                        params))

  def update(grads, state, params=None):
    _check_trees("scale_by_rms.update", grads, state.nu, "the RMSProp state (built by `init`)")
    nu = _tree_map(lambda g, v: _cast(decay, g) * v + _cast(1 - decay, g) * (g * g),
                   grads, state.nu)
    updates = _tree_map(lambda g, v: g / jnp.sqrt(v + _cast(eps, v)), grads, nu)
    return updates, ScaleByRmsState(nu=nu)

  return GradientTransformation(init, update)


def scale_by_stddev(decay: float = 0.9, eps: float = 1e-8,
                    initial_scale: float = 0.0) -> GradientTransformation:
  """Centered RMSProp's rescaling (Graves 2013, "Generating sequences with RNNs", eq. 38-41).

    m_t = decay m_{t-1} + (1 - decay) g_t;   v_t = decay v_{t-1} + (1 - decay) g_t^2
    u_t = g_t / sqrt(v_t - m_t^2 + eps)

  Raises:
    ValueError: if `decay` is outside [0, 1) or `eps` is negative.
  """
  _check_decay("scale_by_stddev", "decay", decay)
  _check_nonneg("scale_by_stddev", "eps", eps)

  def init(params):
    return ScaleByRStdDevState(
      mu=_tree_map(_zeros_like, params),
      nu=_tree_map(lambda p: jnp.full_like(jnp.asarray(p), initial_scale), params))

  def update(grads, state, params=None):
    _check_trees("scale_by_stddev.update", grads, state.mu,
                 "the centered RMSProp state (built by `init`)")
    mu = _tree_map(lambda g, m: _cast(decay, g) * m + _cast(1 - decay, g) * g, grads, state.mu)
    nu = _tree_map(lambda g, v: _cast(decay, g) * v + _cast(1 - decay, g) * (g * g),
                   grads, state.nu)
    updates = _tree_map(lambda g, m, v: g / jnp.sqrt(v - m * m + _cast(eps, v)), grads, mu, nu)
    return updates, ScaleByRStdDevState(mu=mu, nu=nu)

  return GradientTransformation(init, update)


def _resolve_mask(fn: str, mask, params):
  if mask is None:
    return None
  m = mask(params) if callable(mask) else mask
  try:
    flat = tree_util.tree_structure(params).flatten_up_to(m)
  except (ValueError, TypeError) as e:
    raise ValueError(f"{fn}: expected `mask` to be a pytree of bools with the structure of the "
                     f"parameters ({tree_util.tree_structure(params)}), or a callable returning "
                     f"one, but got {tree_util.tree_structure(m)}.") from e
  return flat


def add_decayed_weights(weight_decay: float = 0.0, mask=None) -> GradientTransformation:
  """Adds `weight_decay * params` to the updates (decoupled weight decay).

    u = g + weight_decay * p     (only for leaves where `mask` is True, when given)

  Args:
    weight_decay: non-negative float or schedule.
    mask: optional pytree of Python bools with the structure of `params` (or a callable
      `params -> mask`); leaves with False are not decayed (typically biases and norms).

  Raises:
    ValueError: if `weight_decay` is negative, `params` is not given to `update`, or `mask` does
      not match the structure of `params`.
  """
  _check_nonneg("add_decayed_weights", "weight_decay", weight_decay)

  def init(params):
    return ScaleByScheduleState(count=_count0()) if callable(weight_decay) else EmptyState()

  def update(grads, state, params=None):
    _need_params("add_decayed_weights", params)
    _check_trees("add_decayed_weights.update", grads, params, "`params`")
    if callable(weight_decay):
      wd, new_state = weight_decay(state.count), ScaleByScheduleState(count=state.count + 1)
    else:
      wd, new_state = weight_decay, state
    treedef = tree_util.tree_structure(params)
    g_leaves, p_leaves = tree_util.tree_leaves(grads), tree_util.tree_leaves(params)
    m_leaves = _resolve_mask("add_decayed_weights", mask, params) or [True] * len(p_leaves)
    out = [g + _cast(wd, g) * p if m else g for g, p, m in zip(g_leaves, p_leaves, m_leaves)]
    return tree_util.tree_unflatten(treedef, out), new_state

  return GradientTransformation(init, update)


def global_norm(tree) -> Any:
  """Returns sqrt(sum of squares of all entries of all leaves) as a scalar array.

  Args:
    tree: pytree of arrays of floating (or complex: |x|^2 is used) dtype.

  Returns:
    A scalar of the promoted dtype of the leaves (0.0 for an empty tree).
  """
  leaves = tree_util.tree_leaves(tree)
  if not leaves:
    return jnp.asarray(0.0)
  sq = [jnp.sum(jnp.real(x * jnp.conj(x))) if jnp.iscomplexobj(x) else jnp.sum(jnp.square(x))
        for x in map(jnp.asarray, leaves)]
  total = sq[0]
  for s in sq[1:]:
    total = total + s
  return jnp.sqrt(total)


def clip_by_global_norm(max_norm: float) -> GradientTransformation:
  """Rescales the updates so that their global norm is at most `max_norm`.

    u = g                           if ||g|| < max_norm
    u = g * max_norm / ||g||        otherwise,   ||g|| = global_norm(g)

  References: Pascanu, Mikolov & Bengio 2013, "On the difficulty of training RNNs".

  Raises:
    ValueError: if `max_norm` is not positive.
  """
  _check_positive("clip_by_global_norm", "max_norm", max_norm)

  def update(grads, state, params=None):
    g_norm = global_norm(grads)
    trigger = g_norm < max_norm
    def clip(t):
      n = g_norm.astype(t.dtype)
      # NB: divide by a safe norm so that both where branches (and their gradients) are finite.
      safe = jnp.where(trigger, jnp.ones_like(n), n)
      return jnp.where(trigger, t, (t / safe) * _cast(max_norm, t))
    return _tree_map(clip, grads), state

  return GradientTransformation(lambda params: EmptyState(), update)


def _rms(x):
  return jnp.sqrt(jnp.mean(jnp.square(x)))


def clip_by_block_rms(threshold: float) -> GradientTransformation:
  """Clips each leaf to root-mean-square at most `threshold`: u = g / max(1, rms(g) / threshold).

  Raises:
    ValueError: if `threshold` is not positive.
  """
  _check_positive("clip_by_block_rms", "threshold", threshold)

  def update(grads, state, params=None):
    return _tree_map(lambda u: u / jnp.maximum(_cast(1.0, u), _rms(u) / _cast(threshold, u)),
                     grads), state

  return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_param_block_rms(min_scale: float = 1e-3) -> GradientTransformation:
  """Scales each leaf by max(rms(p), min_scale), Adafactor's relative step size.

  Raises:
    ValueError: if `params` is not given to `update`.
  """
  def update(grads, state, params=None):
    _need_params("scale_by_param_block_rms", params)
    _check_trees("scale_by_param_block_rms.update", grads, params, "`params`")
    return _tree_map(lambda u, p: u * jnp.maximum(_rms(p), _cast(min_scale, u)).astype(u.dtype),
                     grads, params), state

  return GradientTransformation(lambda params: EmptyState(), update)


def _factored_dims(shape, factored, min_dim_size_to_factor):
  """The (second largest, largest) dims of `shape`, or None when it is not factored."""
  if not factored or len(shape) < 2:
    return None
  order = np.argsort(shape, kind="stable")
  if shape[order[-2]] < min_dim_size_to_factor:
    return None
  return int(order[-2]), int(order[-1])


def scale_by_factored_rms(factored: bool = True, decay_rate: float = 0.8, step_offset: int = 0,
                          min_dim_size_to_factor: int = 128,
                          epsilon: float = 1e-30) -> GradientTransformation:
  """Adafactor's rescaling with factored second moments (Shazeer & Stern 2018, Algorithms 4-5).

  With t = count - step_offset + 1 and b2_t = 1 - t^(-decay_rate) (the paper's increasing decay),
  G = g^2 + epsilon. For a parameter whose two largest dims (d1, d0), d0 the largest, both have
  size >= `min_dim_size_to_factor`:
    R_t = b2_t R_{t-1} + (1 - b2_t) mean_{d0}(G)       (row statistics)
    C_t = b2_t C_{t-1} + (1 - b2_t) mean_{d1}(G)       (column statistics)
    u_t = g / sqrt(R_t C_t / mean_{d1}(R_t))            (the rank-1 estimate of v_t)
  and otherwise the full second moment: v_t = b2_t v_{t-1} + (1 - b2_t) G, u_t = g / sqrt(v_t).
  Memory for an `[n, m]` matrix is O(n + m) instead of O(n m).

  References: N. Shazeer and M. Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory
  Cost", ICML 2018.

  Raises:
    ValueError: if `decay_rate` is negative or `min_dim_size_to_factor` is not positive.
  """
  _check_nonneg("scale_by_factored_rms", "decay_rate", decay_rate)
  _check_positive("scale_by_factored_rms", "min_dim_size_to_factor", min_dim_size_to_factor)

  def init(params):
    def leaf_init(p):
      p = jnp.asarray(p)
      dims = _factored_dims(p.shape, factored, min_dim_size_to_factor)
      one = jnp.zeros((1,), p.dtype)
      if dims is None:
        return one, one, jnp.zeros(p.shape, p.dtype)
      d1, d0 = dims
      vr = tuple(s for i, s in enumerate(p.shape) if i != d0)
      vc = tuple(s for i, s in enumerate(p.shape) if i != d1)
      return jnp.zeros(vr, p.dtype), jnp.zeros(vc, p.dtype), one
    treedef = tree_util.tree_structure(params)
    leaves = [leaf_init(p) for p in tree_util.tree_leaves(params)]
    unf = lambda i: tree_util.tree_unflatten(treedef, [x[i] for x in leaves])
    return FactoredState(count=_count0(), v_row=unf(0), v_col=unf(1), v=unf(2))

  def update(grads, state, params=None):
    _check_trees("scale_by_factored_rms.update", grads, state.v,
                 "the Adafactor state (built by `init`)", shapes=False)
    treedef = tree_util.tree_structure(grads)
    t = state.count - step_offset + 1
    out = []
    for g, vr, vc, v in zip(*(tree_util.tree_leaves(x) for x in
                              (grads, state.v_row, state.v_col, state.v))):
      decay = 1 - jnp.power(t.astype(g.dtype), _cast(-decay_rate, g))
      g2 = g * g + _cast(epsilon, g)
      dims = _factored_dims(g.shape, factored, min_dim_size_to_factor)
      if dims is None:
        new_v = decay * v + (1 - decay) * g2
        out.append((g / jnp.sqrt(new_v), vr, vc, new_v))
        continue
      d1, d0 = dims
      new_vr = decay * vr + (1 - decay) * jnp.mean(g2, axis=d0)
      new_vc = decay * vc + (1 - decay) * jnp.mean(g2, axis=d1)
      reduced_d1 = d1 - 1 if d1 > d0 else d1
      row_col_mean = jnp.mean(new_vr, axis=reduced_d1, keepdims=True)
      row_factor = 1 / jnp.sqrt(new_vr / row_col_mean)
      col_factor = 1 / jnp.sqrt(new_vc)
      u = g * jnp.expand_dims(row_factor, d0) * jnp.expand_dims(col_factor, d1)
      out.append((u, new_vr, new_vc, v))
    unf = lambda i: tree_util.tree_unflatten(treedef, [x[i] for x in out])
    return unf(0), FactoredState(count=state.count + 1, v_row=unf(1), v_col=unf(2), v=unf(3))

  return GradientTransformation(init, update)


# ---------------------------------------------------------------------------------------------
# Optimizers


def sgd(learning_rate, momentum: float | None = None,
        nesterov: bool = False) -> GradientTransformation:
  """Stochastic gradient descent, optionally with (Nesterov) momentum.

    t_k = g_k + momentum * t_{k-1};   p_k = p_{k-1} - lr * t_k
    (Nesterov: p_k = p_{k-1} - lr * (g_k + momentum * t_k))

  Args:
    learning_rate: non-negative float or schedule `step -> lr`.
    momentum: decay of the momentum buffer in [0, 1], or None for plain SGD.
    nesterov: use Nesterov's accelerated gradient (Sutskever et al. 2013).

  Raises:
    ValueError: if `learning_rate` is negative or `momentum` outside [0, 1].
  """
  _check_nonneg("sgd", "learning_rate", learning_rate)
  if momentum is not None:
    _check_decay("sgd", "momentum", momentum, closed=True)
  return chain(trace(momentum, nesterov) if momentum is not None else identity(),
               scale_by_learning_rate(learning_rate))


def adam(learning_rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         eps_root: float = 0.0) -> GradientTransformation:
  """Adam (Kingma & Ba 2015): p_t = p_{t-1} - lr_t * m^_t / (sqrt(v^_t + eps_root) + eps).

  See `scale_by_adam` for the moment equations. `learning_rate` may be a schedule.

  References: D. P. Kingma and J. Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015.

  Raises:
    ValueError: if `learning_rate` is negative, or `b1`/`b2` outside [0, 1).
  """
  _check_nonneg("adam", "learning_rate", learning_rate)
  return chain(scale_by_adam(b1, b2, eps, eps_root), scale_by_learning_rate(learning_rate))


def adamw(learning_rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          eps_root: float = 0.0, weight_decay: float = 1e-4, mask=None) -> GradientTransformation:
  """AdamW: Adam with decoupled weight decay (Loshchilov & Hutter 2019).

    p_t = p_{t-1} - lr_t * (m^_t / (sqrt(v^_t + eps_root) + eps) + weight_decay * p_{t-1})

  The decay is not passed through Adam's moments (unlike L2 regularization added to the loss).

  Args:
    mask: optional pytree of bools shaped like params (or callable `params -> mask`) selecting
      the leaves to decay.

  References: I. Loshchilov and F. Hutter, "Decoupled Weight Decay Regularization", ICLR 2019.

  Raises:
    ValueError: if `learning_rate` or `weight_decay` is negative, or `b1`/`b2` outside [0, 1).
  """
  _check_nonneg("adamw", "learning_rate", learning_rate)
  return chain(scale_by_adam(b1, b2, eps, eps_root), add_decayed_weights(weight_decay, mask),
               scale_by_learning_rate(learning_rate))


def rmsprop(learning_rate, decay: float = 0.9, eps: float = 1e-8, initial_scale: float = 0.0,
            centered: bool = False, momentum: float | None = None,
            nesterov: bool = False) -> GradientTransformation:
  """RMSProp (Tieleman & Hinton 2012, Coursera "Neural Networks for ML", lecture 6.5).

    v_t = decay v_{t-1} + (1 - decay) g_t^2;   p_t = p_{t-1} - lr * g_t / sqrt(v_t + eps)
  With `centered` (Graves 2013) the denominator is sqrt(v_t - m_t^2 + eps), m_t the running mean
  of g. With `momentum` the scaled gradients go through `trace(momentum, nesterov)` first.

  Raises:
    ValueError: if `learning_rate` is negative or `decay` outside [0, 1).
  """
  _check_nonneg("rmsprop", "learning_rate", learning_rate)
  rescale = (scale_by_stddev if centered else scale_by_rms)(decay, eps, initial_scale)
  return chain(rescale, scale_by_learning_rate(learning_rate),
               trace(momentum, nesterov) if momentum is not None else identity())


def adafactor(learning_rate=None, min_dim_size_to_factor: int = 128, decay_rate: float = 0.8,
              decay_offset: int = 0, multiply_by_parameter_scale: bool = True,
              clipping_threshold: float | None = 1.0, momentum: float | None = None,
              weight_decay_rate: float | None = None, eps: float = 1e-30,
              factored: bool = True, weight_decay_mask=None) -> GradientTransformation:
  """Adafactor (Shazeer & Stern 2018) with optax's default composition.

  The chain is: `scale_by_factored_rms` (factored second moments for parameters with two dims of
  size >= `min_dim_size_to_factor`), update clipping `clip_by_block_rms(clipping_threshold)`,
  the learning rate (if given), the relative step `scale_by_param_block_rms()` (if
  `multiply_by_parameter_scale`), momentum `m_t = momentum m_{t-1} + (1 - momentum) u_t` (if
  given), decoupled weight decay (if given), and the sign flip.

  References: N. Shazeer and M. Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory
  Cost", ICML 2018.

  Raises:
    ValueError: if `learning_rate` is negative or `momentum` outside [0, 1).
  """
  if learning_rate is not None:
    _check_nonneg("adafactor", "learning_rate", learning_rate)
  tx = [scale_by_factored_rms(factored, decay_rate, decay_offset, min_dim_size_to_factor, eps)]
  if clipping_threshold is not None:
    tx.append(clip_by_block_rms(clipping_threshold))
  if learning_rate is not None:
    tx.append(scale_by_learning_rate(learning_rate, flip_sign=False))
  if multiply_by_parameter_scale:
    tx.append(scale_by_param_block_rms())
  if momentum is not None:
    tx.append(_ema(momentum))
  if weight_decay_rate is not None:
    tx.append(add_decayed_weights(weight_decay_rate, weight_decay_mask))
  tx.append(scale(-1.0))
  return chain(*tx)


def _ema(decay: float) -> GradientTransformation:
  """Exponential moving average without debiasing: m_t = decay m_{t-1} + (1 - decay) u_t."""
  _check_decay("adafactor", "momentum", decay)

  def init(params):
    return TraceState(trace=_tree_map(_zeros_like, params))

  def update(grads, state, params=None):
    _check_trees("ema.update", grads, state.trace, "the momentum state (built by `init`)")
    new = _tree_map(lambda g, t: _cast(decay, g) * t + _cast(1 - decay, g) * g, grads,
                    state.trace)
    return new, TraceState(trace=new)

  return GradientTransformation(init, update)


# ---------------------------------------------------------------------------------------------
# Schedules: functions `step -> value`, `step` an int (or i32[] array, possibly traced)


def constant_schedule(value: float) -> Schedule:
  """Returns the schedule `step -> value`."""
  return lambda count: value


def polynomial_schedule(init_value: float, end_value: float, power: float,
                        transition_steps: int, transition_begin: int = 0) -> Schedule:
  """Polynomial decay from `init_value` to `end_value` over `transition_steps` steps.

    s = clip(step - transition_begin, 0, transition_steps)
    value = (init_value - end_value) * (1 - s / transition_steps)^power + end_value

  A non-positive `transition_steps` gives the constant schedule `init_value`.

  Raises:
    ValueError: if `transition_begin` is negative.
  """
  if transition_begin < 0:
    raise ValueError(f"polynomial_schedule: expected a non-negative `transition_begin`, but got "
                     f"{transition_begin}.")
  if transition_steps <= 0:
    return constant_schedule(init_value)

  def schedule(count):
    s = jnp.clip(jnp.asarray(count) - transition_begin, 0, transition_steps)
    frac = 1 - s / transition_steps
    return (init_value - end_value) * (frac ** power) + end_value
  return schedule


def linear_schedule(init_value: float, end_value: float, transition_steps: int,
                    transition_begin: int = 0) -> Schedule:
  """Linear interpolation from `init_value` to `end_value` (a warmup when end > init).

    value = init_value + (end_value - init_value) * clip(step - begin, 0, steps) / steps
  """
  return polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)


def cosine_decay_schedule(init_value: float, decay_steps: int, alpha: float = 0.0,
                          exponent: float = 1.0) -> Schedule:
  """Cosine decay (Loshchilov & Hutter 2017, "SGDR", without restarts).

    s = min(step, decay_steps)
    value = init_value * ((1 - alpha) * (0.5 (1 + cos(pi s / decay_steps)))^exponent + alpha)

  Raises:
    ValueError: if `decay_steps` is not positive.
  """
  if not decay_steps > 0:
    raise ValueError(f"cosine_decay_schedule: expected a positive `decay_steps`, but got "
                     f"{decay_steps!r}.")

  def schedule(count):
    s = jnp.minimum(jnp.asarray(count), decay_steps)
    cosine = 0.5 * (1 + jnp.cos(math.pi * s / decay_steps))
    return init_value * ((1 - alpha) * cosine ** exponent + alpha)
  return schedule


def join_schedules(schedules: Sequence[Schedule], boundaries: Sequence[int]) -> Schedule:
  """Runs `schedules[i]` from `boundaries[i-1]`, with its step counted from that boundary.

  Raises:
    ValueError: unless len(schedules) == len(boundaries) + 1.
  """
  if len(schedules) != len(boundaries) + 1:
    raise ValueError(f"join_schedules: expected len(boundaries) == len(schedules) - 1, but got "
                     f"{len(schedules)} schedules and {len(boundaries)} boundaries.")

  def schedule(count):
    count = jnp.asarray(count)
    out = schedules[0](count)
    for b, s in zip(boundaries, schedules[1:]):
      out = jnp.where(count < b, out, s(count - b))
    return out
  return schedule


def warmup_cosine_decay_schedule(init_value: float, peak_value: float, warmup_steps: int,
                                 decay_steps: int, end_value: float = 0.0,
                                 exponent: float = 1.0) -> Schedule:
  """Linear warmup from `init_value` to `peak_value`, then cosine decay to `end_value`.

  For step < warmup_steps: linear_schedule(init_value, peak_value, warmup_steps)(step);
  afterwards cosine_decay_schedule(peak_value, decay_steps - warmup_steps,
  alpha=end_value / peak_value)(step - warmup_steps). `decay_steps` counts the warmup (as optax).

  Raises:
    ValueError: if `decay_steps <= warmup_steps` or `warmup_steps` is negative.
  """
  if warmup_steps < 0 or decay_steps <= warmup_steps:
    raise ValueError(f"warmup_cosine_decay_schedule: expected 0 <= warmup_steps < decay_steps, "
                     f"but got warmup_steps={warmup_steps}, decay_steps={decay_steps}. "
                     f"`decay_steps` is the total length including the warmup.")
  alpha = 0.0 if peak_value == 0 else end_value / peak_value
  return join_schedules(
    [linear_schedule(init_value, peak_value, warmup_steps),
     cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent)],
    [warmup_steps])
