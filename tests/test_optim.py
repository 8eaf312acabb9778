"""stagecraft.optim against the update equations written in NumPy, schedules against closed forms,
jit/grad/vmap compatibility and error messages (and optax, when installed)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import optim, tree_util

from _util import assert_trees_allclose

RNG = np.random.default_rng(0)
SHAPES = {"w": (3, 4), "b": (4,)}
STEPS = 4


def _np_params(dtype):
  return {k: RNG.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}


def _np_grads(dtype, n=STEPS):
  return [{k: RNG.standard_normal(s).astype(dtype) for k, s in SHAPES.items()} for _ in range(n)]


def _to_sc(tree):
  return tree_util.tree_map(jnp.asarray, tree)


def _run(opt, params, grads_seq, jit=False):
  """Runs len(grads_seq) steps; returns the list of parameter pytrees (as NumPy) after each."""
  params = _to_sc(params)
  state = opt.init(params)
  update = sc.jit(opt.update) if jit else opt.update
  out = []
  for g in grads_seq:
    updates, state = update(_to_sc(g), state, params)
    params = optim.apply_updates(params, updates)
    out.append(tree_util.tree_map(np.asarray, params))
  return out, state


def _np_run(step_fn, params, grads_seq):
  """step_fn(p, g, t, slots) -> new p, for each leaf independently; t = 1, 2, ..."""
  out, slots = [], {k: {} for k in params}
  p = dict(params)
  for t, g in enumerate(grads_seq, start=1):
    p = {k: step_fn(p[k], g[k], t, slots[k]) for k in p}
    out.append(p)
  return out


def _assert_close(actual_seq, expected_seq, dtype):
  tol = 1e-5 if dtype == np.float32 else 1e-12
  assert all(a.dtype == dtype for a in tree_util.tree_leaves(actual_seq))
  assert_trees_allclose(actual_seq, expected_seq, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------------
# NumPy references of the update equations


def _np_sgd(lr, momentum=None, nesterov=False):
  def step(p, g, t, s):
    if momentum is None:
      return p - lr * g
    s["m"] = g + momentum * s.get("m", 0 * g)
    d = g + momentum * s["m"] if nesterov else s["m"]
    return p - lr * d
  return step


def _np_adam(lr, b1=0.9, b2=0.999, eps=1e-8, wd=None):
  def step(p, g, t, s):
    s["m"] = b1 * s.get("m", 0 * g) + (1 - b1) * g
    s["v"] = b2 * s.get("v", 0 * g) + (1 - b2) * g * g
    u = (s["m"] / (1 - b1 ** t)) / (np.sqrt(s["v"] / (1 - b2 ** t)) + eps)
    if wd is not None:
      u = u + wd * p
    rate = lr(t - 1) if callable(lr) else lr
    return p - rate * u
  return step


def _np_rmsprop(lr, decay=0.9, eps=1e-8, centered=False, momentum=None):
  def step(p, g, t, s):
    s["v"] = decay * s.get("v", 0 * g) + (1 - decay) * g * g
    s["m"] = decay * s.get("m", 0 * g) + (1 - decay) * g
    denom = s["v"] - s["m"] ** 2 if centered else s["v"]
    u = lr * g / np.sqrt(denom + eps)
    if momentum is not None:
      s["tr"] = u + momentum * s.get("tr", 0 * g)
      u = s["tr"]
    return p - u
  return step


def _np_adafactor(lr, min_dim, decay_rate=0.8, eps=1e-30, clip=1.0):
  def step(p, g, t, s):
    beta = 1 - t ** (-decay_rate)
    g2 = g * g + eps
    if p.ndim == 2 and min(p.shape) >= min_dim:
      d0 = int(np.argmax(p.shape))  # the largest dim; the other is d1 (here 2-D)
      d1 = 1 - d0
      s["r"] = beta * s.get("r", 0) + (1 - beta) * g2.mean(axis=d0)
      s["c"] = beta * s.get("c", 0) + (1 - beta) * g2.mean(axis=d1)
      v = np.expand_dims(s["r"], d0) * np.expand_dims(s["c"], d1) / s["r"].mean()
    else:
      s["v"] = beta * s.get("v", 0) + (1 - beta) * g2
      v = s["v"]
    u = g / np.sqrt(v)
    u = u / max(1.0, np.sqrt(np.mean(u * u)) / clip)
    u = lr * u * max(np.sqrt(np.mean(p * p)), 1e-3)
    return p - u
  return step


CASES = {
  "sgd": (lambda: optim.sgd(0.1), _np_sgd(0.1)),
  "momentum": (lambda: optim.sgd(0.1, momentum=0.9), _np_sgd(0.1, 0.9)),
  "nesterov": (lambda: optim.sgd(0.1, momentum=0.9, nesterov=True), _np_sgd(0.1, 0.9, True)),
  "adam": (lambda: optim.adam(0.01), _np_adam(0.01)),
  "adam_b": (lambda: optim.adam(0.05, b1=0.5, b2=0.9, eps=1e-3),
             _np_adam(0.05, 0.5, 0.9, 1e-3)),
  "adamw": (lambda: optim.adamw(0.01, weight_decay=0.1), _np_adam(0.01, wd=0.1)),
  "rmsprop": (lambda: optim.rmsprop(0.01), _np_rmsprop(0.01)),
  "rmsprop_centered": (lambda: optim.rmsprop(0.01, centered=True, momentum=0.5),
                       _np_rmsprop(0.01, centered=True, momentum=0.5)),
  "adafactor": (lambda: optim.adafactor(0.1, min_dim_size_to_factor=3),
                _np_adafactor(0.1, min_dim=3)),
  "adafactor_unfactored": (lambda: optim.adafactor(0.1), _np_adafactor(0.1, min_dim=128)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_numpy_equations_f32(name):
  make, np_step = CASES[name]
  params, grads = _np_params(np.float32), _np_grads(np.float32)
  got, _ = _run(make(), params, grads)
  expected = _np_run(np_step, {k: v.astype(np.float64) for k, v in params.items()},
                     [{k: v.astype(np.float64) for k, v in g.items()} for g in grads])
  assert all(a.dtype == np.float32 for a in tree_util.tree_leaves(got))
  assert_trees_allclose(got, expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name", ["momentum", "adamw", "rmsprop_centered", "adafactor"])
def test_against_numpy_equations_f64(name):
  make, np_step = CASES[name]
  with sc.enable_x64():
    params, grads = _np_params(np.float64), _np_grads(np.float64)
    got, state = _run(make(), params, grads)
    _assert_close(got, _np_run(np_step, params, grads), np.float64)


def test_jit_update_equals_eager_and_state_survives_jit():
  params, grads = _np_params(np.float32), _np_grads(np.float32, 3)
  sched = optim.warmup_cosine_decay_schedule(0.0, 0.1, 2, 10, end_value=0.01)
  opt = optim.chain(optim.clip_by_global_norm(1.0), optim.adamw(sched, weight_decay=0.01))
  eager, s_eager = _run(opt, params, grads)
  jitted, s_jit = _run(opt, params, grads, jit=True)
  assert tree_util.tree_structure(s_eager) == tree_util.tree_structure(s_jit)
  assert_trees_allclose(s_jit, s_eager, rtol=1e-6, atol=1e-7, check_dtypes=True)
  assert_trees_allclose(jitted, eager, rtol=1e-6, atol=1e-7)
  adam_state = s_jit[1][0]
  assert adam_state.count.dtype == np.int32 and int(adam_state.count) == 3
  # a whole train step under jit: state in, state out
  def loss(p, x):
    return jnp.sum((x @ p["w"] + p["b"]) ** 2)
  @sc.jit
  def train_step(p, s, x):
    g = sc.grad(loss)(p, x)
    u, s = opt.update(g, s, p)
    return optim.apply_updates(p, u), s
  p, s = _to_sc(params), opt.init(_to_sc(params))
  x = jnp.asarray(RNG.standard_normal((5, 3)).astype(np.float32))
  l0 = float(loss(p, x))
  for _ in range(5):
    p, s = train_step(p, s, x)
  assert float(loss(p, x)) < l0


def test_schedule_learning_rate_used_per_step():
  sched = lambda t: 0.1 / (1.0 + t)
  params, grads = _np_params(np.float32), _np_grads(np.float32)
  got, _ = _run(optim.adam(sched), params, grads, jit=True)
  np_sched = lambda t: 0.1 / (1.0 + t)
  expected = _np_run(_np_adam(np_sched), params, grads)
  assert_trees_allclose(got, expected, rtol=2e-5, atol=2e-6)


def test_adamw_mask_and_float_dtypes_preserved():
  params = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
  zeros = {"w": jnp.zeros((2, 2)), "b": jnp.zeros(2)}
  for mask in ({"w": True, "b": False}, lambda p: {"w": True, "b": False}):
    opt = optim.adamw(0.1, weight_decay=0.5, mask=mask)
    u, _ = opt.update(zeros, opt.init(params), params)
    np.testing.assert_allclose(np.asarray(u["w"]), -0.05 * np.ones((2, 2)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(u["b"]), np.zeros(2))
  with sc.enable_x64():  # f32 params stay f32 even when the schedule computes in f64
    p32 = {"w": jnp.ones(3, dtype=jnp.float32)}
    opt = optim.adam(optim.cosine_decay_schedule(0.1, 10))
    u, s = sc.jit(opt.update)(p32, opt.init(p32), p32)
    assert u["w"].dtype == np.float32 and s[0].mu["w"].dtype == np.float32
    assert optim.apply_updates(p32, u)["w"].dtype == np.float32


def test_grad_through_update_and_vmap():
  # meta-gradient: d/dlr of the loss after one SGD step equals -g . g
  x = jnp.asarray([1.0, 2.0, 3.0])
  loss = lambda p: jnp.sum(p ** 2)
  def after_step(lr):
    opt = optim.sgd(lr)
    u, _ = opt.update(sc.grad(loss)(x), opt.init(x))
    return loss(optim.apply_updates(x, u))
  g = 2 * np.asarray(x)
  lr = 0.1
  np.testing.assert_allclose(float(sc.grad(after_step)(lr)),
                             np.sum(2 * (np.asarray(x) - lr * g) * -g), rtol=1e-5)
  # vmap over a batch of independent parameter sets (Adam state batched alongside)
  opt = optim.adam(0.1)
  ps = jnp.asarray(RNG.standard_normal((4, 3)).astype(np.float32))
  gs = jnp.asarray(RNG.standard_normal((4, 3)).astype(np.float32))
  def one(p, g):
    s = opt.init(p)
    u, s = opt.update(g, s, p)
    u, s = opt.update(g, s, p)
    return optim.apply_updates(p, u)
  batched = sc.vmap(one)(ps, gs)
  for i in range(4):
    np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(one(ps[i], gs[i])),
                               rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Schedules


STEPS_GRID = np.arange(0, 25)


def _check_schedule(sched, closed_form):
  expected = np.array([closed_form(int(t)) for t in STEPS_GRID])
  eager = np.array([float(sched(jnp.asarray(t, dtype=jnp.int32))) for t in STEPS_GRID])
  traced = np.asarray(sc.jit(sc.vmap(sched))(jnp.asarray(STEPS_GRID, dtype=jnp.int32)))
  np.testing.assert_allclose(eager, expected, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(traced, expected, rtol=1e-5, atol=1e-7)


def test_schedules_closed_forms():
  _check_schedule(optim.constant_schedule(0.3), lambda t: 0.3)
  _check_schedule(optim.linear_schedule(0.0, 1.0, 10, transition_begin=2),
                  lambda t: min(max(t - 2, 0), 10) / 10)
  _check_schedule(optim.polynomial_schedule(1.0, 0.1, 2, 8),
                  lambda t: 0.9 * (1 - min(t, 8) / 8) ** 2 + 0.1)
  _check_schedule(optim.cosine_decay_schedule(0.5, 20, alpha=0.1),
                  lambda t: 0.5 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 20) / 20)) + 0.1))

  def warm_cos(t, init=0.01, peak=1.0, warm=5, total=20, end=0.1):
    if t < warm:
      return init + (peak - init) * t / warm
    s = min(t - warm, total - warm)
    return end + (peak - end) * 0.5 * (1 + math.cos(math.pi * s / (total - warm)))
  _check_schedule(optim.warmup_cosine_decay_schedule(0.01, 1.0, 5, 20, end_value=0.1), warm_cos)
  # python ints work too
  assert abs(float(optim.cosine_decay_schedule(1.0, 4)(2)) - 0.5) < 1e-6


# ---------------------------------------------------------------------------------------------
# Clipping


def test_global_norm_and_clipping():
  tree = {"a": jnp.asarray([3.0, 0.0]), "b": [jnp.asarray([[4.0]])]}
  assert abs(float(optim.global_norm(tree)) - 5.0) < 1e-6
  clip = optim.clip_by_global_norm(1.0)
  u, _ = clip.update(tree, clip.init(tree))
  np.testing.assert_allclose(np.asarray(u["a"]), [0.6, 0.0], rtol=1e-6)
  np.testing.assert_allclose(np.asarray(u["b"][0]), [[0.8]], rtol=1e-6)
  assert abs(float(optim.global_norm(u)) - 1.0) < 1e-6
  big = optim.clip_by_global_norm(10.0)
  u, _ = sc.jit(big.update)(tree, big.init(tree))
  np.testing.assert_allclose(np.asarray(u["a"]), [3.0, 0.0])
  # differentiable on both sides of the threshold
  f = lambda x: jnp.sum(clip.update({"a": x}, ())[0]["a"])
  for x in ([0.3, 0.4], [3.0, 4.0]):
    g = np.asarray(sc.grad(f)(jnp.asarray(x)))
    assert np.all(np.isfinite(g))
  np.testing.assert_allclose(np.asarray(sc.grad(f)(jnp.asarray([0.3, 0.4]))), [1.0, 1.0])


# ---------------------------------------------------------------------------------------------
# Errors


def test_errors_name_expected_and_given():
  with pytest.raises(ValueError, match=r"non-negative `learning_rate`.*-0.1"):
    optim.adam(-0.1)
  with pytest.raises(ValueError, match=r"non-negative `learning_rate`.*-1"):
    optim.sgd(-1)
  with pytest.raises(TypeError, match=r"`learning_rate`.*'fast'"):
    optim.sgd("fast")
  with pytest.raises(ValueError, match=r"`b1` in \[0, 1\).*b1=1.0"):
    optim.adam(0.1, b1=1.0)
  with pytest.raises(ValueError, match=r"`b2` in \[0, 1\).*b2=-0.5"):
    optim.adamw(0.1, b2=-0.5)
  with pytest.raises(ValueError, match=r"`decay` in \[0, 1\)"):
    optim.rmsprop(0.1, decay=1.5)
  with pytest.raises(ValueError, match="positive number for `max_norm`"):
    optim.clip_by_global_norm(0.0)
  with pytest.raises(TypeError, match="argument 1 is function"):
    optim.chain(optim.identity(), lambda g: g)
  with pytest.raises(ValueError, match="warmup_steps < decay_steps"):
    optim.warmup_cosine_decay_schedule(0.0, 1.0, 10, 5)

  params = {"w": jnp.ones(2), "b": jnp.ones(3)}
  opt = optim.adam(0.1)
  state = opt.init(params)
  with pytest.raises(ValueError, match=r"structure.*expected PyTreeDef\(\{'b': \*, 'w': \*\}\)"
                                       r" but got PyTreeDef\(\{'w': \*\}\)"):
    opt.update({"w": jnp.ones(2)}, state)
  with pytest.raises(ValueError, match=r"at \['b'\]: expected shape \(3,\) but got \(4,\)"):
    opt.update({"w": jnp.ones(2), "b": jnp.ones(4)}, state)
  with pytest.raises(ValueError, match="state tuple of 2 entries"):
    opt.update(params, state[0])
  wd = optim.adamw(0.1)
  with pytest.raises(ValueError, match=r"needs the current parameters.*params=None"):
    wd.update(params, wd.init(params))
  bad_mask = optim.adamw(0.1, mask={"w": True})
  with pytest.raises(ValueError, match="`mask` to be a pytree of bools with the structure"):
    bad_mask.update(params, bad_mask.init(params), params)
  with pytest.raises(ValueError, match="structure"):
    optim.apply_updates(params, {"w": jnp.ones(2)})


# ---------------------------------------------------------------------------------------------
# optax, when installed


def test_against_optax():
  optax = pytest.importorskip("optax")
  import jax.numpy as jjnp
  params, grads = _np_params(np.float32), _np_grads(np.float32)
  pairs = [
    (optim.sgd(0.1, momentum=0.9, nesterov=True), optax.sgd(0.1, momentum=0.9, nesterov=True)),
    (optim.adamw(optim.warmup_cosine_decay_schedule(0.0, 0.1, 2, 10), weight_decay=0.1),
     optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 0.1, 2, 10), weight_decay=0.1)),
    (optim.rmsprop(0.01, centered=True), optax.rmsprop(0.01, centered=True)),
    (optim.adafactor(0.1, min_dim_size_to_factor=3),
     optax.adafactor(0.1, min_dim_size_to_factor=3)),
  ]
  for ours, theirs in pairs:
    got, _ = _run(ours, params, grads)
    p = {k: jjnp.asarray(v) for k, v in params.items()}
    s, want = theirs.init(p), []
    for g in grads:
      u, s = theirs.update({k: jjnp.asarray(v) for k, v in g.items()}, s, p)
      p = optax.apply_updates(p, u)
      want.append(p)
    assert_trees_allclose(got, want, rtol=1e-5, atol=1e-6)
