"""`stagecraft.example_libraries` (stax, optimizers) against JAX's `jax.example_libraries`
run in the same test: the same keys give the same parameters, the same steps the same
numbers."""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.example_libraries import optimizers as jopt
from jax.example_libraries import stax as jstax

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.example_libraries import optimizers as opt
from stagecraft.example_libraries import stax


def _leaves_close(ours, theirs, rtol=0.0, atol=0.0):
  a = sc.tree_util.tree_leaves(ours)
  b = jax.tree_util.tree_leaves(theirs)
  assert len(a) == len(b), (len(a), len(b))
  for x, y in zip(a, b):
    x, y = np.asarray(x), np.asarray(y)
    assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, x.dtype, y.shape, y.dtype)
    np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def _conv_net(S):
  return S.serial(
      S.Conv(4, (3, 3), padding="SAME"), S.BatchNorm(), S.Relu,
      S.MaxPool((2, 2), strides=(2, 2)),
      S.FanOut(2), S.parallel(S.Identity, S.serial(S.Conv(4, (1, 1)), S.Tanh)),
      S.FanInConcat(), S.AvgPool((2, 2), padding="SAME"), S.SumPool((2, 2)), S.Flatten,
      S.Dense(10), S.Gelu, S.Dropout(0.7), S.LogSoftmax)


def _transpose_net(S):
  return S.serial(
      S.ConvTranspose(3, (3, 3), strides=(2, 2)), S.Elu, S.LeakyRelu, S.Softplus, S.Sigmoid,
      S.Exp, S.Selu, S.BatchNorm(axis=(0, 1), center=False),
      S.GeneralConv(("NCHW", "OIHW", "NCHW"), 2, (2, 2), W_init=S.randn(0.1)),
      S.Softmax)


def _residual_mlp(S):
  block = S.serial(S.FanOut(2), S.parallel(S.serial(S.Dense(6), S.Tanh), S.Identity),
                   S.FanInSum)
  return S.serial(S.Dense(6, W_init=S.glorot()), block, S.BatchNorm(axis=0, scale=False),
                  S.shape_dependent(lambda shape: S.Dense(shape[-1] + 1)), S.Sigmoid)


def _init_and_apply(net, S, random, jit, in_shape, x):
  """(output shape, params, outputs) of `net` built from `S`: initialized eagerly, applied
  under `jit` (one compilation instead of one per eager op)."""
  init, apply = net(S)
  shape, params = init(random.PRNGKey(1), in_shape)
  out = jit(lambda p, x, k: apply(p, x, rng=k))(params, x, random.PRNGKey(3))
  return tuple(shape), params, out


@pytest.mark.parametrize("net,in_shape,tol", [(_conv_net, (2, 8, 8, 3), 1e-6),
                                              (_transpose_net, (2, 5, 5, 3), 1e-4),
                                              (_residual_mlp, (4, 5), 1e-6)])
def test_stax_init_and_apply_match_jax(net, in_shape, tol):
  x = np.random.RandomState(0).randn(*in_shape).astype(np.float32)
  shape_s, params_s, out_s = _init_and_apply(net, stax, sc.random, sc.jit, in_shape, x)
  shape_j, params_j, out_j = _init_and_apply(net, jstax, jax.random, jax.jit, in_shape, x)
  assert shape_s == shape_j
  _leaves_close(params_s, params_j)   # the same draws, bit for bit
  assert out_s.shape == shape_s
  # NB: BatchNorm's variance, then exp/selu, amplify rounding differences in the second net
  _leaves_close(out_s, out_j, rtol=tol, atol=tol)


def test_stax_pooling_layouts_and_conv1d_transpose_match_jax():
  x = np.random.RandomState(1).randn(2, 3, 6, 6).astype(np.float32)
  for make in (lambda S: S.AvgPool((2, 3), strides=(1, 2), padding="SAME", spec="NCHW"),
               lambda S: S.SumPool((3, 3), spec="NCHW")):
    (init_s, apply_s), (init_j, apply_j) = make(stax), make(jstax)
    assert init_s(None, x.shape) == init_j(None, x.shape)
    _leaves_close(apply_s((), x), apply_j((), x), rtol=1e-6, atol=1e-6)
  x1 = x[:, 0]   # [N, H, C]
  init_s, apply_s = stax.Conv1DTranspose(4, (3,), strides=(2,), padding="SAME")
  init_j, apply_j = jstax.Conv1DTranspose(4, (3,), strides=(2,), padding="SAME")
  shape_s, params_s = init_s(sc.random.PRNGKey(0), x1.shape)
  shape_j, params_j = init_j(jax.random.PRNGKey(0), x1.shape)
  assert tuple(shape_s) == tuple(shape_j) == (2, 12, 4)
  _leaves_close(params_s, params_j)
  _leaves_close(apply_s(params_s, x1), apply_j(params_j, x1), rtol=1e-5, atol=1e-6)


def test_stax_parallel_returns_shapes_and_params_per_layer():
  init, apply = stax.parallel(stax.Dense(3), stax.Identity)
  shapes, params = init(sc.random.PRNGKey(0), [(2, 4), (2, 5)])
  assert shapes == ((2, 3), (2, 5)) and len(params) == 2 and params[1] == ()
  out = apply(params, [jnp.ones((2, 4)), jnp.zeros((2, 5))])
  assert [o.shape for o in out] == [(2, 3), (2, 5)]


def test_stax_dropout_modes_and_missing_key():
  init, apply = stax.Dropout(0.5)
  x = jnp.ones((4, 6))
  with pytest.raises(ValueError, match="requires apply_fun to be called with a PRNG key"):
    apply((), x)
  out = np.asarray(apply((), x, rng=sc.random.PRNGKey(0)))
  assert set(np.unique(out)) <= {0.0, 2.0} and 0 < (out == 2.0).sum() < out.size
  ref = jstax.Dropout(0.5)[1]((), jjnp.ones((4, 6)), rng=jax.random.PRNGKey(0))
  np.testing.assert_array_equal(out, np.asarray(ref))
  _, apply_test = stax.Dropout(0.5, mode="test")
  np.testing.assert_array_equal(np.asarray(apply_test((), x, rng=sc.random.PRNGKey(0))), 1.0)


def test_stax_typed_keys_and_log_layer():
  init, apply = stax.serial(stax.Dense(3), stax.Exp, stax.Log)
  _, params = init(sc.random.key(0), (2, 4))
  _, params_j = jstax.Dense(3)[0](jax.random.key(0), (2, 4))
  x = np.arange(8.0, dtype=np.float32).reshape(2, 4) / 8
  # serial splits the key once before Dense draws; compare with that split
  _, k = jax.random.split(jax.random.key(0))
  _, params_j = jstax.Dense(3)[0](k, (2, 4))
  _leaves_close(params[0], params_j)
  np.testing.assert_allclose(np.asarray(apply(params, x)),
                             np.asarray(x @ params_j[0] + params_j[1]), rtol=1e-5, atol=1e-6)


def _params():
  rs = np.random.RandomState(0)
  tree = {"w": rs.randn(3, 2).astype(np.float32),
          "b": [rs.randn(2).astype(np.float32), np.float32(0.5)]}
  grads = [{"w": rs.randn(3, 2).astype(np.float32),
            "b": [rs.randn(2).astype(np.float32), np.float32(rs.randn())]} for _ in range(4)]
  return tree, grads


OPTIMIZERS = [("sgd", (0.1,), {}), ("sgd", (jopt.exponential_decay(0.1, 2, 0.5),), {}),
              ("momentum", (0.1, 0.9), {}), ("nesterov", (0.1, 0.9), {}),
              ("adagrad", (0.1,), {"momentum": 0.5}), ("rmsprop", (0.1,), {"gamma": 0.8}),
              ("rmsprop_momentum", (0.1,), {}), ("adam", (0.1,), {"b1": 0.8}),
              ("adamax", (0.1,), {}), ("sm3", (0.1,), {})]


@pytest.mark.parametrize("name,args,kwargs", OPTIMIZERS,
                         ids=[f"{n}{k}" for k, (n, _, _) in enumerate(OPTIMIZERS)])
def test_optimizer_steps_match_jax(name, args, kwargs):
  params, grads = _params()
  ours, theirs = getattr(opt, name)(*args, **kwargs), getattr(jopt, name)(*args, **kwargs)
  state, state_j = ours.init_fn(params), theirs.init_fn(params)
  _leaves_close(ours.params_fn(state), params)
  for i, g in enumerate(grads[:3]):
    state, state_j = ours.update_fn(i, g, state), theirs.update_fn(i, g, state_j)
  _leaves_close(state, state_j, rtol=1e-6, atol=1e-7)
  # A jitted step with a traced step index (sm3's state holds the static shape as ints).
  if name != "sm3":
    state = sc.jit(ours.update_fn)(3, grads[3], state)
    state_j = jax.jit(theirs.update_fn)(3, grads[3], state_j)
  else:
    state, state_j = ours.update_fn(3, grads[3], state), theirs.update_fn(3, grads[3], state_j)
  _leaves_close(ours.params_fn(state), theirs.params_fn(state_j), rtol=1e-6, atol=1e-7)


def test_mlp_training_matches_jax():
  def run(S, O, random, jit, grad, np_):
    init, apply = S.serial(S.Dense(8), S.Relu, S.Dense(3), S.LogSoftmax)
    _, params = init(random.PRNGKey(0), (-1, 4))
    opt_init, opt_update, get_params = O.adam(O.inverse_time_decay(0.05, 2, 0.5))
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4)
    y = np.eye(3, dtype=np.float32)[np.arange(6) % 3]

    def loss(p):
      return -np_.mean(np_.sum(apply(p, x) * y, axis=1))

    @jit
    def step(i, state):
      return opt_update(i, grad(loss)(get_params(state)), state)
    state = opt_init(params)
    for i in range(4):
      state = step(i, state)
    return get_params(state), loss(get_params(state))
  ours = run(stax, opt, sc.random, sc.jit, sc.grad, jnp)
  theirs = run(jstax, jopt, jax.random, jax.jit, jax.grad, jjnp)
  _leaves_close(ours, theirs, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda O: O.exponential_decay(0.1, 3, 0.5),
    lambda O: O.inverse_time_decay(0.1, 3, 0.5),
    lambda O: O.inverse_time_decay(0.1, 3, 0.5, staircase=True),
    lambda O: O.polynomial_decay(0.1, 5, 0.01, power=2.0),
    lambda O: O.piecewise_constant([2, 5], [1.0, 0.5, 0.1]),
    lambda O: O.make_schedule(0.3)])
def test_schedules_match_jax(make):
  ours, theirs = make(opt), make(jopt)
  for i in (0, 2, 3, 5, 9):
    assert float(ours(i)) == pytest.approx(float(theirs(i)), rel=1e-6)
    assert float(sc.jit(ours)(i)) == pytest.approx(float(jax.jit(theirs)(i)), rel=1e-6)


def test_schedule_errors():
  with pytest.raises(ValueError, match="boundaries and values must be sequences"):
    opt.piecewise_constant(3, [1.0, 2.0])
  with pytest.raises(ValueError, match="one shorter than values"):
    opt.piecewise_constant([1, 2], [1.0, 2.0])
  with pytest.raises(TypeError):
    opt.make_schedule(np.ones(2))
  assert opt.make_schedule(np.float32(0.5))(7) == 0.5


def test_update_with_mismatched_grad_tree_raises():
  init, update, _ = opt.sgd(0.1)
  state = init({"a": jnp.ones(2)})
  with pytest.raises(TypeError, match="did not match the parameter tree structure"):
    update(0, {"b": jnp.ones(2)}, state)


def test_update_changing_state_structure_raises():
  @opt.optimizer
  def bad(step_size):
    return (lambda x: (x, x)), (lambda i, g, s: (s[0],)), (lambda s: s[0])
  init, update, _ = bad(0.1)
  with pytest.raises(TypeError, match="produced an output structure that did not match"):
    update(0, [jnp.ones(2)], init([jnp.ones(2)]))


def test_pack_unpack_roundtrip_and_errors():
  params, grads = _params()
  init, update, get_params = opt.momentum(0.1, 0.9)
  state = update(0, grads[0], init(params))
  marked = opt.unpack_optimizer_state(state)
  assert isinstance(marked["w"], opt.JoinPoint)
  back = opt.pack_optimizer_state(marked)
  assert back.tree_def == state.tree_def and back.subtree_defs == state.subtree_defs
  _leaves_close(get_params(back), jax.tree_util.tree_map(np.asarray, get_params(state)))
  with pytest.raises(TypeError, match="leaves are JoinPoints"):
    opt.pack_optimizer_state({"w": np.ones(2)})


def test_l2_norm_and_clip_grads_match_jax():
  _, grads = _params()
  g = grads[0]
  assert float(opt.l2_norm(g)) == pytest.approx(float(jopt.l2_norm(g)), rel=1e-6)
  for max_norm in (0.5, 100.0):
    _leaves_close(opt.clip_grads(g, max_norm), jopt.clip_grads(g, max_norm), rtol=1e-6)


def test_optimizer_keeps_float64_under_x64():
  with sc.enable_x64():
    init, update, get_params = opt.adam(0.1)
    x = np.array([1.0, -2.0])
    g = np.array([0.5, 0.25])
    p = get_params(update(0, g, init(jnp.asarray(x))))
    assert p.dtype == np.float64
    m, v = 0.1 * g, 0.001 * g * g
    ref = x - 0.1 * (m / 0.1) / (np.sqrt(v / 0.001) + 1e-8)
    np.testing.assert_allclose(np.asarray(p), ref, rtol=1e-12)


def test_pooling_init_with_unknown_batch_dimension_as_jax():
  # JAX's differentially_private_sgd example initialises a conv net with input shape
  # (-1, 28, 28, 1): the pooling layers' shapes come from reduce_window_shape_tuple, which
  # gives max(0, ...) per dimension without a check, as JAX's.
  def net(S):
    return S.serial(S.Conv(16, (8, 8), padding="SAME", strides=(2, 2)), S.Relu,
                    S.MaxPool((2, 2), (1, 1)), S.AvgPool((2, 2), (1, 1)), S.Flatten,
                    S.Dense(10))
  init, _ = net(stax)
  jinit, _ = net(jstax)
  shape, params = init(sc.random.PRNGKey(0), (-1, 28, 28, 1))
  jshape, jparams = jinit(jax.random.PRNGKey(0), (-1, 28, 28, 1))
  assert shape == jshape
  _leaves_close(params, jparams)
  for args in [((-1, 14, 14, 16), (1, 2, 2, 1), (1, 1, 1, 1), ((0, 0),) * 4),
               ((3, 5), (4, 2), (1, 2), ((0, 0), (1, 0)))]:
    assert sc.lax.reduce_window_shape_tuple(*args) == jax.lax.reduce_window_shape_tuple(*args)
