"""JAX's gradient-checkpointing tutorial (docs/gradient-checkpointing.md) run unchanged: its
`print_fwd_bwd` helper prints the same forward and backward programs as under JAX for the
chain of `sin`s, the recursively checkpointed chain, the MLP with
`dots_with_no_batch_dims_saveable`, and the scan over checkpointed layers; `print_saved_residuals`
reports the same residuals; the gradient of the scan over layers prints as JAX's."""
from functools import partial

import numpy as np
import pytest

import jax
import jax.numpy as jjnp

import stagecraft as sc
import stagecraft.numpy as snp
from tests._util import saved_residual_types


def _print_fwd_bwd(L, f, *args):
  """The tutorial's helper, returning the two programs' texts instead of a rich table."""
  flat, in_tree = L.tree_util.tree_flatten((args, {}))

  def f_(*flat):
    a, k = L.tree_util.tree_unflatten(in_tree, flat)
    return f(*a, **k)

  fwd = L.make_jaxpr(lambda *flat: L.vjp(f_, *flat))(*flat).jaxpr
  y, f_vjp = L.vjp(f_, *flat)
  res, vjp_tree = L.tree_util.tree_flatten(f_vjp)

  def g_(*args):
    *res, y = args
    return L.tree_util.tree_unflatten(vjp_tree, res)(y)

  bwd = L.make_jaxpr(g_)(*res, y).jaxpr
  return str(fwd), str(bwd)


def _chain_compose(funs):
  def f(x):
    for fun in funs:
      x = fun(x)
    return x
  return f


def _recursive_checkpoint(L, funs):
  if len(funs) == 1:
    return funs[0]
  if len(funs) == 2:
    f1, f2 = funs
    return lambda x: f1(f2(x))
  f1 = _recursive_checkpoint(L, funs[:len(funs) // 2])
  f2 = _recursive_checkpoint(L, funs[len(funs) // 2:])
  return lambda x: f1(L.checkpoint(f2)(x))


def _layers(L, N):
  params = [(N.array([[0.5, 0.5], [1., 1.]]), N.array([0.5, 0.5])),
            (N.array([[0.5, 0.5], [1., 1.]]), N.array([0.5, 0.5]))]
  all_weights = N.stack([W for W, _ in params])
  all_biases = N.stack([b for _, b in params])

  @partial(L.checkpoint, policy=L.checkpoint_policies.dots_with_no_batch_dims_saveable)
  def layer(x, W_b_pair):
    W, b = W_b_pair
    return N.maximum(N.dot(x, W) + b, 0.), None

  def net(all_weights, all_biases, x):
    return L.lax.scan(layer, x, (all_weights, all_biases))[0]
  return net, (all_weights, all_biases, N.ones(2))


def _mlp(L, N):
  def g(W, x):
    return N.sin(N.dot(W, x))

  def f(W1, W2, W3, x):
    return g(W3, g(W2, g(W1, x)))
  args = (N.ones((5, 4)), N.ones((6, 5)), N.ones((7, 6)), N.ones(4))
  return f, args


def _programs(L, N):
  """name -> (function, args)."""
  net, net_args = _layers(L, N)
  mlp, mlp_args = _mlp(L, N)
  return {
      "chain8": (_chain_compose([N.sin] * 8), (3.,)),
      "recursive8": (_recursive_checkpoint(L, [N.sin] * 8), (3.,)),
      "recursive16": (_recursive_checkpoint(L, [N.sin] * 16), (3.,)),
      "mlp_dots_saveable": (L.checkpoint(
          mlp, policy=L.checkpoint_policies.dots_with_no_batch_dims_saveable), mlp_args),
      "scan_over_layers": (net, net_args),
  }


NAMES = sorted(_programs(jax, jjnp))


@pytest.mark.parametrize("name", NAMES)
def test_print_fwd_bwd_as_jax(name):
  # NB: the recursive checkpoint's transpose evaluates a checkpoint of known values inline,
  # and the scan's zero carry tangent is made in the backward program, as JAX's.
  f, args = _programs(sc, snp)[name]
  jf, jargs = _programs(jax, jjnp)[name]
  (fwd, bwd), (jfwd, jbwd) = _print_fwd_bwd(sc, f, *args), _print_fwd_bwd(jax, jf, *jargs)
  assert fwd == jfwd, f"\n--- stagecraft\n{fwd}\n--- JAX\n{jfwd}"
  assert bwd == jbwd, f"\n--- stagecraft\n{bwd}\n--- JAX\n{jbwd}"


@pytest.mark.parametrize("name", NAMES)
def test_gradients_and_saved_residuals_as_jax(name):
  f, args = _programs(sc, snp)[name]
  jf, jargs = _programs(jax, jjnp)[name]
  total = lambda g: (lambda *a: g(*a).sum())   # noqa: E731
  argnums = tuple(range(len(args)))
  ours = sc.grad(total(f), argnums)(*args)
  theirs = jax.grad(total(jf), argnums)(*jargs)
  for a, b in zip(ours, theirs):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-6, atol=2e-6)
  ours, theirs = saved_residual_types(f, jf, *args)
  assert ours == theirs


def test_grad_of_scan_over_layers_prints_as_jax():
  net, args = _layers(sc, snp)
  jnet, jargs = _layers(jax, jjnp)
  ours = str(sc.make_jaxpr(sc.grad(lambda w, b, x: net(w, b, x).sum()))(*args))
  theirs = str(jax.make_jaxpr(jax.grad(lambda w, b, x: jnet(w, b, x).sum()))(*jargs))
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"


def _saved_residuals_after_redefinition(L, N, saved_residuals):
  """The tutorial's sequence: `loss` is checkpointed, then the `predict` it calls is
  redefined with `checkpoint_name`s and `loss` checkpointed again under a names policy."""
  env = {}

  def loss(params, x, y):
    return N.sum((env["predict"](params, x) - y) ** 2)

  def predict(params, x):
    *Ws, Wlast = params
    for W in Ws:
      x = N.sin(N.dot(W, x))
    return N.dot(Wlast, x)

  def predict_named(params, x):
    *Ws, Wlast = params
    for i, W in enumerate(Ws):
      x = L.ad_checkpoint.checkpoint_name(N.sin(N.dot(W, x)), name=f"layer{i}_output")
    return N.dot(Wlast, x)

  params, x, y = [N.ones((4, 4))] * 3, N.ones(4), N.ones(4)
  env["predict"] = predict
  policies = L.checkpoint_policies
  first = saved_residuals(
      L.checkpoint(loss, policy=policies.dots_with_no_batch_dims_saveable), params, x, y)
  env["predict"] = predict_named
  second = saved_residuals(
      L.checkpoint(loss, policy=policies.save_any_names_but_these("layer1_output")),
      params, x, y)
  return [[(str(a), why.split(" from ")[0]) for a, why in r] for r in (first, second)]


def test_checkpoint_trace_is_cached_per_function_as_jax():
  from jax._src.ad_checkpoint import saved_residuals as jax_saved
  theirs = _saved_residuals_after_redefinition(jax, jjnp, jax_saved)
  ours = _saved_residuals_after_redefinition(sc, snp, sc.ad_checkpoint.saved_residuals)
  assert ours == theirs
  # the second checkpoint reuses the first trace (no names in it): only arguments are saved
  assert all(why.startswith("from the argument") for _, why in ours[1])


def test_checkpoint_retraces_for_new_types_and_static_values():
  calls = []

  def f(x, n):
    calls.append(n)
    return snp.sin(x) * n

  g = sc.checkpoint(f, static_argnums=1)
  sc.grad(g)(1.0, 2)
  sc.grad(g)(2.0, 2)                   # the same types and static value: no new trace
  sc.grad(g)(1.0, 3)                   # a new static value
  sc.grad(g)(snp.ones(()), 3)          # a new type (not weak)
  assert calls == [2, 3, 3]
  np.testing.assert_allclose(float(sc.grad(g)(1.0, 3)), 3 * np.cos(1.0), rtol=1e-6)
