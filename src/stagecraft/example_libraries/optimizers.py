"""`stagecraft.example_libraries.optimizers`: JAX's example optimizers (`jax.example_libraries.
optimizers`), for programs written against them.

An optimizer is a triple of functions `(init_fun, update_fun, get_params)`:

- `init_fun(params) -> opt_state`: `params` is a pytree of arrays; the state holds them and
  whatever the method keeps per array (momenta, running averages).
- `update_fun(step, grads, opt_state) -> opt_state`: `step` is the iteration index (an int
  or an integer scalar array, e.g. under `jit`), `grads` a pytree shaped like the params.
- `get_params(opt_state) -> params`, with `get_params(init_fun(params)) == params`.

Each method below is written for one array and lifted to pytrees by the `optimizer`
decorator; the state is an `OptimizerState`, itself a pytree, so it passes through `jit`.
For the same inputs the updates are computed with the same operations, in the same order,
as JAX's, so the numbers agree with JAX's.

  >>> import stagecraft.numpy as jnp
  >>> opt_init, opt_update, get_params = sgd(0.1)
  >>> state = opt_update(0, {"w": jnp.ones(2)}, opt_init({"w": jnp.zeros(2)}))
  >>> get_params(state)["w"]
  Array([-0.1, -0.1], dtype=float32)

These are small examples; `stagecraft.optim` is the fuller optimizer library.
"""
from __future__ import annotations

import functools
import warnings
from collections import namedtuple
from typing import Any, Callable, NamedTuple

import stagecraft.numpy as jnp
from stagecraft import tree_util
from stagecraft.tree_util import treedef_str

__all__ = ["Optimizer", "OptimizerState", "Schedule", "optimizer", "sgd", "momentum",
           "nesterov", "adagrad", "rmsprop", "rmsprop_momentum", "adam", "adamax", "sm3",
           "constant", "exponential_decay", "inverse_time_decay", "polynomial_decay",
           "piecewise_constant", "make_schedule", "l2_norm", "clip_grads", "JoinPoint",
           "unpack_optimizer_state", "pack_optimizer_state"]

Params = Any
State = Any
Step = Any
#: A step-size schedule: `schedule(step) -> step size`.
Schedule = Callable[[Step], Any]

#: The state of an optimizer over a pytree of parameters: `packed_state[k]` holds the leaves
#: of the per-array state of parameter leaf k, `subtree_defs[k]` its tree structure and
#: `tree_def` the structure of the parameters. A pytree whose leaves are the arrays of
#: `packed_state` (the two structures are its static data).
OptimizerState = namedtuple("OptimizerState", ["packed_state", "tree_def", "subtree_defs"])

with warnings.catch_warnings():
  # NB: optree warns when a namedtuple class gets its own flatten rule; that is the point
  # here (the two tree structures are static data, not leaves), and JAX does the same.
  warnings.simplefilter("ignore", UserWarning)
  tree_util.register_pytree_node(
      OptimizerState,
      lambda s: ((s.packed_state,), (s.tree_def, s.subtree_defs)),
      lambda aux, children: OptimizerState(children[0], aux[0], aux[1]))


class Optimizer(NamedTuple):
  """The `(init_fn, update_fn, params_fn)` triple an optimizer constructor returns."""
  init_fn: Callable[[Params], OptimizerState]
  update_fn: Callable[[Step, Params, OptimizerState], OptimizerState]
  params_fn: Callable[[OptimizerState], Params]


def _flatten_states(states):
  """The leaves and the tree structures of a list of per-array states."""
  flat = [tree_util.tree_flatten(s) for s in states]
  return [leaves for leaves, _ in flat], [treedef for _, treedef in flat]


def _unflatten_states(subtree_defs, packed):
  return [tree_util.tree_unflatten(d, leaves) for d, leaves in zip(subtree_defs, packed)]


def optimizer(opt_maker: Callable[..., tuple[Callable, Callable, Callable]]
              ) -> Callable[..., Optimizer]:
  """Lifts an optimizer written for single arrays to pytrees of arrays (a decorator).

  Args:
    opt_maker: a function returning `(init, update, get_params)` where
      `init(x) -> state` takes one array, `update(step, g, state) -> state` one gradient
      array, and `get_params(state) -> x`; a per-array state may be any pytree.

  Returns:
    A function with `opt_maker`'s signature returning an `Optimizer` whose functions take
    and return pytrees: `init_fn(params) -> OptimizerState`,
    `update_fn(step, grads, opt_state) -> OptimizerState` (applies `update` leaf by leaf),
    `params_fn(opt_state) -> params`.

    `update_fn` raises TypeError if `grads` is not shaped like the parameters the state was
    initialized with, or if `update` returned a state shaped unlike its input.
  """
  @functools.wraps(opt_maker)
  def make(*args, **kwargs):
    init, update, get_params = opt_maker(*args, **kwargs)

    @functools.wraps(init)
    def init_fn(params):
      leaves, treedef = tree_util.tree_flatten(params)
      packed, subtree_defs = _flatten_states([init(x) for x in leaves])
      return OptimizerState(packed, treedef, subtree_defs)

    @functools.wraps(update)
    def update_fn(step, grads, opt_state):
      packed, treedef, subtree_defs = opt_state
      grad_leaves, grad_treedef = tree_util.tree_flatten(grads)
      if grad_treedef != treedef:
        raise TypeError(
            "optimizer update function was passed a gradient tree that did not match the "
            f"parameter tree structure with which it was initialized: parameter tree "
            f"{treedef_str(treedef)} and grad tree {treedef_str(grad_treedef)}.")
      states = _unflatten_states(subtree_defs, packed)
      new_packed, new_defs = _flatten_states(
          [update(step, g, s) for g, s in zip(grad_leaves, states)])
      for before, after in zip(subtree_defs, new_defs):
        if after != before:
          raise TypeError(
              "optimizer update function produced an output structure that did not match "
              f"its input structure: input {before} and output {after}.")
      return OptimizerState(new_packed, treedef, subtree_defs)

    @functools.wraps(get_params)
    def params_fn(opt_state):
      packed, treedef, subtree_defs = opt_state
      states = _unflatten_states(subtree_defs, packed)
      return tree_util.tree_unflatten(treedef, [get_params(s) for s in states])

    return Optimizer(init_fn, update_fn, params_fn)
  return make


def _first(state):
  return state[0]


@optimizer
def sgd(step_size):
  """Stochastic gradient descent: `x <- x - step_size(i) * g`.

  Args:
    step_size: a positive scalar or a schedule `step -> step size`.

  Returns:
    An `Optimizer` `(init_fun, update_fun, get_params)`; the state of an array is the
    array itself.
  """
  step_size = make_schedule(step_size)

  def update(i, g, x):
    return x - step_size(i) * g
  return (lambda x0: x0), update, (lambda x: x)


@optimizer
def momentum(step_size, mass: float):
  """SGD with (heavy-ball) momentum: `v <- mass * v + g; x <- x - step_size(i) * v`.

  Args:
    step_size: a positive scalar or a schedule.
    mass: the momentum coefficient.

  Returns:
    An `Optimizer`; the state of an array is `(x, v)` with `v` starting at zeros.
  """
  step_size = make_schedule(step_size)

  def update(i, g, state):
    x, v = state
    v = mass * v + g
    return x - step_size(i) * v, v
  return (lambda x0: (x0, jnp.zeros_like(x0))), update, _first


@optimizer
def nesterov(step_size, mass: float):
  """SGD with Nesterov momentum: `v <- mass * v + g; x <- x - step_size(i) * (mass * v + g)`
  (Sutskever et al., "On the importance of initialization and momentum", ICML 2013).

  Args:
    step_size: a positive scalar or a schedule.
    mass: the momentum coefficient.

  Returns:
    An `Optimizer`; the state of an array is `(x, v)` with `v` starting at zeros.
  """
  step_size = make_schedule(step_size)

  def update(i, g, state):
    x, v = state
    v = mass * v + g
    return x - step_size(i) * (mass * v + g), v
  return (lambda x0: (x0, jnp.zeros_like(x0))), update, _first


@optimizer
def adagrad(step_size, momentum=0.9):
  """Adagrad with momentum (Duchi, Hazan and Singer, "Adaptive Subgradient Methods for Online
  Learning and Stochastic Optimization", JMLR 2011).

  `G <- G + g**2; m <- (1 - momentum) * g / sqrt(G) + momentum * m; x <- x - step_size(i) * m`,
  where `1 / sqrt(G)` is taken as 0 where `G == 0`.

  Args:
    step_size: a positive scalar or a schedule.
    momentum: the momentum coefficient.

  Returns:
    An `Optimizer`; the state of an array is `(x, G, m)`, `G` and `m` starting at zeros.
  """
  step_size = make_schedule(step_size)

  def init(x0):
    return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

  def update(i, g, state):
    x, g_sq, m = state
    g_sq = g_sq + jnp.square(g)
    inv_root = jnp.where(g_sq > 0, 1. / jnp.sqrt(g_sq), 0.0)
    m = (1. - momentum) * (g * inv_root) + momentum * m
    return x - step_size(i) * m, g_sq, m
  return init, update, _first


@optimizer
def rmsprop(step_size, gamma=0.9, eps=1e-8):
  """RMSProp (Tieleman and Hinton, Coursera lecture 6.5, 2012).

  `a <- gamma * a + (1 - gamma) * g**2; x <- x - step_size(i) * g / sqrt(a + eps)`.

  Args:
    step_size: a positive scalar or a schedule.
    gamma: the decay of the running average of squared gradients.
    eps: added to the average under the square root.

  Returns:
    An `Optimizer`; the state of an array is `(x, a)`, `a` starting at zeros.
  """
  step_size = make_schedule(step_size)

  def update(i, g, state):
    x, avg_sq = state
    avg_sq = avg_sq * gamma + jnp.square(g) * (1. - gamma)
    return x - step_size(i) * g / jnp.sqrt(avg_sq + eps), avg_sq
  return (lambda x0: (x0, jnp.zeros_like(x0))), update, _first


@optimizer
def rmsprop_momentum(step_size, gamma=0.9, eps=1e-8, momentum=0.9):
  """RMSProp with momentum: `a` as in `rmsprop`, then
  `m <- momentum * m + step_size(i) * g / sqrt(a + eps); x <- x - m`.

  Args:
    step_size: a positive scalar or a schedule.
    gamma: the decay of the running average of squared gradients.
    eps: added to the average under the square root.
    momentum: the momentum coefficient.

  Returns:
    An `Optimizer`; the state of an array is `(x, a, m)`, `a` and `m` starting at zeros.
  """
  step_size = make_schedule(step_size)

  def init(x0):
    return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

  def update(i, g, state):
    x, avg_sq, mom = state
    avg_sq = avg_sq * gamma + jnp.square(g) * (1. - gamma)
    mom = momentum * mom + step_size(i) * g / jnp.sqrt(avg_sq + eps)
    return x - mom, avg_sq, mom
  return init, update, _first


def _bias_correction(beta, i, dtype):
  """`1 - beta ** (i + 1)` with `beta` an array of `dtype`, so a traced `i` keeps it."""
  return 1 - jnp.asarray(beta, dtype) ** (i + 1)


@optimizer
def adam(step_size, b1=0.9, b2=0.999, eps=1e-8):
  """Adam (Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015).

  `m <- (1 - b1) g + b1 m; v <- (1 - b2) g**2 + b2 v;` with the bias corrections
  `m^ = m / (1 - b1**(i+1))`, `v^ = v / (1 - b2**(i+1))`:
  `x <- x - step_size(i) * m^ / (sqrt(v^) + eps)`.

  Args:
    step_size: a positive scalar or a schedule.
    b1: the decay rate of the first-moment estimate.
    b2: the decay rate of the second-moment estimate.
    eps: added to `sqrt(v^)` for numerical stability.

  Returns:
    An `Optimizer`; the state of an array is `(x, m, v)`, `m` and `v` starting at zeros.
  """
  step_size = make_schedule(step_size)

  def init(x0):
    return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

  def update(i, g, state):
    x, m, v = state
    m = (1 - b1) * g + b1 * m
    v = (1 - b2) * jnp.square(g) + b2 * v
    m_hat = m / _bias_correction(b1, i, m.dtype)
    v_hat = v / _bias_correction(b2, i, m.dtype)
    return x - step_size(i) * m_hat / (jnp.sqrt(v_hat) + eps), m, v
  return init, update, _first


@optimizer
def adamax(step_size, b1=0.9, b2=0.999, eps=1e-8):
  """AdaMax, Adam with the infinity norm (Kingma and Ba 2015, section 7.1).

  `m <- (1 - b1) g + b1 m; u <- max(b2 u, |g|);`
  `x <- x - (step_size(i) / (1 - b1**(i+1))) * m / (u + eps)`.

  Args:
    step_size: a positive scalar or a schedule.
    b1: the decay rate of the first-moment estimate.
    b2: the decay rate of the infinity-norm estimate.
    eps: added to `u` for numerical stability.

  Returns:
    An `Optimizer`; the state of an array is `(x, m, u)`, `m` and `u` starting at zeros.
  """
  step_size = make_schedule(step_size)

  def init(x0):
    return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

  def update(i, g, state):
    x, m, u = state
    m = (1 - b1) * g + b1 * m
    u = jnp.maximum(b2 * u, jnp.abs(g))
    rate = step_size(i) / _bias_correction(b1, i, m.dtype)
    return x - rate * m / (u + eps), m, u
  return init, update, _first


@optimizer
def sm3(step_size, momentum=0.9):
  """SM3 (Anil, Gupta, Koren and Singer, "Memory-Efficient Adaptive Optimization", NeurIPS
  2019, arXiv:1901.11150), with momentum.

  For an array of rank r it keeps one accumulator vector per axis; the accumulated squared
  gradient is `nu = min_k(acc_k broadcast along axis k) + g**2`, then
  `m <- (1 - momentum) g / sqrt(nu) + momentum m` (`1 / sqrt(nu)` is 0 where `nu == 0`),
  `x <- x - step_size(i) * m`, and `acc_k <- max of nu over all axes but k`.

  Args:
    step_size: a positive scalar or a schedule.
    momentum: the momentum coefficient.

  Returns:
    An `Optimizer`; the state of an array of shape s is `(x, m, accumulators, s)` with `x`
    at least 1-d (a scalar is kept as shape (1,)); `get_params` restores the shape s.
  """
  step_size = make_schedule(step_size)

  def along(ndim, v, axis):
    # v (a vector) as an array of rank `ndim` that varies along `axis` only
    return v[tuple(slice(None) if k == axis else None for k in range(max(ndim, 1)))]

  def init(x0):
    shape = x0.shape
    x = jnp.atleast_1d(x0)
    accs = [jnp.zeros(n, dtype=x.dtype) for n in x.shape]
    return x, jnp.zeros_like(x), accs, shape

  def update(i, g, state):
    x, m, accs, shape = state
    ndim = jnp.ndim(g)
    nu = functools.reduce(jnp.minimum, [along(ndim, a, k) for k, a in enumerate(accs)])
    nu = nu + jnp.square(g)
    inv_root = jnp.where(nu > 0, 1. / jnp.sqrt(nu), 0)
    m = (1. - momentum) * (g * inv_root) + momentum * m
    x = x - step_size(i) * m
    accs = [nu.max(tuple(a for a in range(x.ndim) if a != k)) for k in range(x.ndim)]
    return x, m, accs, shape

  def get_params(state):
    x, _, _, shape = state
    return x.reshape(shape)
  return init, update, get_params


# Step-size schedules: functions of the step index (an int or an integer scalar array).

def constant(step_size) -> Schedule:
  """The schedule that is `step_size` at every step."""
  def schedule(i):
    return step_size
  return schedule


def exponential_decay(step_size, decay_steps, decay_rate) -> Schedule:
  """`step_size * decay_rate ** (i / decay_steps)`."""
  def schedule(i):
    return step_size * decay_rate ** (i / decay_steps)
  return schedule


def inverse_time_decay(step_size, decay_steps, decay_rate, staircase=False) -> Schedule:
  """`step_size / (1 + decay_rate * i / decay_steps)`; with `staircase`, the ratio
  `i / decay_steps` is floored, so the step size changes every `decay_steps` steps."""
  if staircase:
    def schedule(i):
      return step_size / (1 + decay_rate * jnp.floor(i / decay_steps))
  else:
    def schedule(i):
      return step_size / (1 + decay_rate * i / decay_steps)
  return schedule


def polynomial_decay(step_size, decay_steps, final_step_size, power=1.0) -> Schedule:
  """From `step_size` to `final_step_size` over `decay_steps` steps along
  `(1 - i / decay_steps) ** power`, then `final_step_size`."""
  def schedule(i):
    i = jnp.minimum(i, decay_steps)
    frac = (1 - i / decay_steps) ** power
    return frac * (step_size - final_step_size) + final_step_size
  return schedule


def piecewise_constant(boundaries: Any, values: Any) -> Schedule:
  """`values[k]` for steps `i` with exactly k boundaries below `i`
  (`values[0]` up to and including `boundaries[0]`, ...).

  Args:
    boundaries: an increasing sequence of n step indices.
    values: a sequence of n + 1 step sizes.

  Raises:
    ValueError: if either is not one-dimensional, or `len(values) != len(boundaries) + 1`.
  """
  boundaries = jnp.array(boundaries)
  values = jnp.array(values)
  if not boundaries.ndim == values.ndim == 1:
    raise ValueError("boundaries and values must be sequences")
  if not boundaries.shape[0] == values.shape[0] - 1:
    raise ValueError("boundaries length must be one shorter than values length")

  def schedule(i):
    return values[jnp.sum(i > boundaries)]
  return schedule


def make_schedule(scalar_or_schedule) -> Schedule:
  """A callable is returned as is; a scalar becomes `constant(scalar)`.

  Raises:
    TypeError: for anything else (e.g. an array of rank >= 1); the message is its type.
  """
  if callable(scalar_or_schedule):
    return scalar_or_schedule
  if jnp.ndim(scalar_or_schedule) == 0:
    return constant(scalar_or_schedule)
  raise TypeError(type(scalar_or_schedule))


# Utilities

def l2_norm(tree) -> Any:
  """The l2 norm of all the leaves of a pytree of arrays together (a scalar)."""
  leaves = tree_util.tree_leaves(tree)
  return jnp.sqrt(sum(jnp.vdot(x, x) for x in leaves))


def clip_grads(grad_tree, max_norm):
  """Scales `grad_tree` by `max_norm / l2_norm(grad_tree)` when that norm is at least
  `max_norm`; returns it unchanged otherwise."""
  norm = l2_norm(grad_tree)
  return tree_util.tree_map(
      lambda g: jnp.where(norm < max_norm, g, g * (max_norm / norm)), grad_tree)


class JoinPoint:
  """A leaf of the marked pytree of `unpack_optimizer_state`: holds the state of one
  parameter array (`subtree`)."""

  def __init__(self, subtree):
    self.subtree = subtree

  def __iter__(self):
    yield self.subtree

  def __repr__(self):
    return f"JoinPoint({self.subtree!r})"


def unpack_optimizer_state(opt_state: OptimizerState):
  """The optimizer state as a pytree shaped like the parameters whose leaves are
  `JoinPoint`s holding each array's state (e.g. for serialization).

  Args:
    opt_state: an `OptimizerState`.
  """
  packed, treedef, subtree_defs = opt_state
  states = _unflatten_states(subtree_defs, packed)
  return tree_util.tree_unflatten(treedef, [JoinPoint(s) for s in states])


def pack_optimizer_state(marked_pytree) -> OptimizerState:
  """The inverse of `unpack_optimizer_state`.

  Raises:
    TypeError: if a leaf of `marked_pytree` is not a `JoinPoint`.
  """
  joins, treedef = tree_util.tree_flatten(marked_pytree)
  bad = [j for j in joins if not isinstance(j, JoinPoint)]
  if bad:
    raise TypeError(f"pack_optimizer_state: expected a pytree whose leaves are JoinPoints (as "
                    f"unpack_optimizer_state returns), got a leaf {bad[0]!r}.")
  packed, subtree_defs = _flatten_states([j.subtree for j in joins])
  return OptimizerState(packed, treedef, subtree_defs)
