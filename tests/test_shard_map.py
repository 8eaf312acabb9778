"""shard_map: per-device functions mapped over the blocks of a device mesh, with collectives
over mesh axes; autodiff, vmap, partial auto, check_rep, errors, jit and DCE. JAX's
`jax.shard_map` (over a jax.sharding.Mesh of the same devices) and NumPy are the oracles.
Runs on 4 CPU devices (tests/conftest.py)."""
import re

import numpy as np
import pytest

import jax
import jax.numpy as jnp_ref
import jax.sharding as jsh
from jax import shard_map as jax_shard_map

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.interpreters import partial_eval as pe
from stagecraft.sharding import NamedSharding, PartitionSpec as P, make_mesh

from _util import assert_trees_allclose, f32 as _f32, jmesh, mesh  # noqa: E402,F401  (fixtures)

pytestmark = pytest.mark.skipif(len(sc.devices()) < 4, reason="needs 4 devices")


def _rng(seed=0):
  return np.random.default_rng(seed)


def _is_spec(s):
  return s is None or isinstance(s, P)


def _jspec(tree):
  """stagecraft PartitionSpecs (a pytree of them) as JAX PartitionSpecs."""
  if _is_spec(tree):
    return None if tree is None else jsh.PartitionSpec(*tree)
  if isinstance(tree, dict):
    return {k: _jspec(v) for k, v in tree.items()}
  return type(tree)(_jspec(t) for t in tree)


def _both(make_body, mesh, jmesh, in_specs, out_specs, *args, jit=False, **kw):
  """Runs `make_body(lax)` under stagecraft's and JAX's shard_map; returns both results."""
  ours = sc.shard_map(make_body(lax), mesh, in_specs=in_specs, out_specs=out_specs, **kw)
  # NB: JAX types all_gather's result as still varying (all_gather_invariant is not), so its
  # own check would reject replicated out_specs that stagecraft (like the former
  # jax.experimental.shard_map) accepts; forward values do not depend on the check.
  theirs = jax_shard_map(make_body(jax.lax), mesh=jmesh, in_specs=_jspec(in_specs),
                         out_specs=_jspec(out_specs), check_vma=False)
  if jit:
    ours = sc.jit(ours)
  return ours(*args), theirs(*args)


def _assert_tree_close(a, b, rtol=1e-5, atol=1e-5):
  assert_trees_allclose(a, b, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------
# 1. The must-show


@pytest.mark.parametrize("jit", [False, True])
def test_psum_and_all_gather_match_numpy_and_jax(mesh, jmesh, jit):
  x, y = _f32(4, 4), _f32(4, 4, seed=1)
  make = lambda L: lambda x, y: (L.psum(x, "data"), L.all_gather(y, "model", tiled=True))
  specs_in = (P("data", "model"), P("data", "model"))
  specs_out = (P(None, "model"), P("data", None))
  (a, b), ref = _both(make, mesh, jmesh, specs_in, specs_out, x, y, jit=jit)
  np.testing.assert_allclose(np.asarray(a), x[:2] + x[2:], rtol=1e-6)
  # Device (i, j) gathers its row block's column blocks along axis 0; blocks stack by "data".
  want_b = np.concatenate([y[:2, :2], y[:2, 2:], y[2:, :2], y[2:, 2:]], axis=0)
  np.testing.assert_array_equal(np.asarray(b), want_b)
  _assert_tree_close((a, b), ref)
  if jit:  # NB: over make_mesh's Explicit axes, as JAX's: the result's type's spec, padded
    # to its rank (JAX: jax.jit(jax.shard_map(...)) over jax.make_mesh((2, 2), ...) gives
    # P('data', None) for b, eagerly too)
    assert a.sharding.is_equivalent_to(NamedSharding(mesh, P(None, "model")), 2)
    assert b.sharding.is_equivalent_to(NamedSharding(mesh, P("data", None)), 2)
    assert not b.sharding.is_equivalent_to(NamedSharding(mesh, P(None, "data")), 2)
    assert b.sharding.spec == P("data", None)
  else:
    assert a.sharding.spec == P(None, "model")
    assert b.sharding.spec == P("data", None)
  assert a.sharding.mesh == mesh


# ---------------------------------------------------------------------------
# 2. Collectives over mesh axes

_X = _f32(4, 8, seed=2)
_COLLECTIVES = {
    "psum_data": (lambda L: lambda x: L.psum(x, "data"), P("data", "model"), P(None, "model")),
    "psum_model": (lambda L: lambda x: L.psum(x, "model"), P("data", "model"), P("data")),
    "psum_both": (lambda L: lambda x: L.psum(x, ("data", "model")), P("data", "model"), P()),
    "pmean_model": (lambda L: lambda x: L.pmean(x, "model"), P("data", "model"), P("data")),
    "pmean_both": (lambda L: lambda x: L.pmean(x, ("model", "data")), P("data", "model"),
                   P()),
    "pmax_data": (lambda L: lambda x: L.pmax(x, "data"), P("data", "model"), P(None, "model")),
    "pmax_both": (lambda L: lambda x: L.pmax(x, ("data", "model")), P("data", "model"), P()),
    "pmin_model": (lambda L: lambda x: L.pmin(x, "model"), P("data", "model"), P("data")),
    "all_gather_tiled_axis1": (lambda L: lambda x: L.all_gather(x, "model", axis=1, tiled=True),
                               P("data", "model"), P("data")),
    "all_gather_untiled": (lambda L: lambda x: L.all_gather(x, "data"), P("data", "model"),
                           P(None, None, "model")),
    "all_gather_untiled_axis1": (lambda L: lambda x: L.all_gather(x, "model", axis=1),
                                 P("data", "model"), P("data")),
    "all_gather_both": (lambda L: lambda x: L.all_gather(x, ("data", "model"), tiled=True),
                        P("data", "model"), P()),
    "axis_index": (lambda L: lambda x: x + 10 * L.axis_index("data") + L.axis_index("model"),
                   P("data", "model"), P("data", "model")),
    "axis_index_both": (lambda L: lambda x: x + L.axis_index(("data", "model")),
                        P("data", "model"), P("data", "model")),
    "ppermute_model": (lambda L: lambda x: L.ppermute(x, "model", [(0, 1), (1, 0)]),
                       P("data", "model"), P("data", "model")),
    "ppermute_data_partial": (lambda L: lambda x: L.ppermute(x, "data", [(0, 1)]),
                              P("data", "model"), P("data", "model")),
    "psum_scatter_tiled": (lambda L: lambda x: L.psum_scatter(x, "model", scatter_dimension=1,
                                                              tiled=True),
                           P("data", None), P("data", "model")),
    "psum_scatter_untiled": (lambda L: lambda x: L.psum_scatter(x[:, :2], "data"),
                             P("data", "model"), P(("data", "model"))),
    "all_to_all_tiled": (lambda L: lambda x: L.all_to_all(x, "model", 1, 0, tiled=True),
                         P("data", "model"), P(("data", "model"))),
    "all_to_all_untiled": (lambda L: lambda x: L.all_to_all(x.reshape(2, 2, 2), "model", 0, 2),
                           P("data", "model"), P("data", None, "model")),
}


@pytest.mark.parametrize("name", sorted(_COLLECTIVES))
def test_collectives_match_jax(mesh, jmesh, name):
  make, s_in, s_out = _COLLECTIVES[name]
  ours, ref = _both(make, mesh, jmesh, (s_in,), s_out, _X)
  _assert_tree_close(ours, ref)
  assert ours.sharding.spec == s_out


@pytest.mark.parametrize("name", ["psum_both", "all_gather_untiled", "ppermute_model",
                                  "all_to_all_tiled", "psum_scatter_tiled"])
def test_collectives_under_jit_match_jax(mesh, jmesh, name):
  make, s_in, s_out = _COLLECTIVES[name]
  ours, ref = _both(make, mesh, jmesh, (s_in,), s_out, _X, jit=True)
  _assert_tree_close(ours, ref)


def test_psum_values_numpy(mesh):
  x = _f32(4, 8, seed=3)
  f = sc.shard_map(lambda x: lax.psum(x, ("data", "model")), mesh, in_specs=P("data", "model"),
                   out_specs=P())
  want = x[:2, :4] + x[:2, 4:] + x[2:, :4] + x[2:, 4:]
  np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-5)


# ---------------------------------------------------------------------------
# 3. Specs


def test_replicated_input_and_short_spec(mesh, jmesh):
  x, w = _f32(4, 6), _f32(6, 4, seed=1)
  make = lambda L: lambda x, w: L.psum(x @ w, "model") / 2
  ours, ref = _both(make, mesh, jmesh, (P("data"), P()), P("data"), x, w)
  _assert_tree_close(ours, ref)
  np.testing.assert_allclose(np.asarray(ours), x @ w, rtol=1e-5, atol=1e-5)


def test_none_spec_is_replicated(mesh):
  x, w = _f32(4, 2), _f32(2, 3, seed=1)
  f = sc.shard_map(lambda x, w: x @ w, mesh, in_specs=(P("data"), None), out_specs=P("data"),
                   check_rep=False)
  np.testing.assert_allclose(np.asarray(f(x, w)), x @ w, rtol=1e-5, atol=1e-6)
  g = sc.shard_map(lambda w: w * 2, mesh, in_specs=None, out_specs=None)
  out = g(w)
  np.testing.assert_allclose(np.asarray(out), w * 2)
  assert out.sharding.spec == P()


def test_tuple_spec_entry(mesh, jmesh):
  x = np.arange(16, dtype=np.float32).reshape(8, 2)
  make = lambda L: lambda x: x * (1 + L.axis_index(("data", "model")))
  ours, ref = _both(make, mesh, jmesh, (P(("data", "model")),), P(("data", "model")), x)
  _assert_tree_close(ours, ref)
  np.testing.assert_array_equal(np.asarray(ours), x * np.repeat(np.arange(1, 5), 2)[:, None])
  # A tuple entry ordered the other way splits "model" outermost.
  make = lambda L: lambda x: L.all_gather(x, ("model", "data"), tiled=True)
  ours, ref = _both(make, mesh, jmesh, (P(("model", "data")),), P(), x)
  _assert_tree_close(ours, ref)
  np.testing.assert_array_equal(np.asarray(ours), x)


def test_one_dimensional_mesh():
  mesh1 = make_mesh((4,), ("i",))
  jmesh1 = jsh.Mesh(np.array(jax.devices()[:4]), ("i",))
  x = _f32(8, 3)
  make = lambda L: lambda x: (L.psum(x, "i"), x * L.axis_index("i"),
                              L.ppermute(x, "i", [(k, (k + 1) % 4) for k in range(4)]))
  ours, ref = _both(make, mesh1, jmesh1, (P("i"),), (P(), P("i"), P("i")), x)
  _assert_tree_close(ours, ref)
  np.testing.assert_allclose(np.asarray(ours[0]), x.reshape(4, 2, 3).sum(0), rtol=1e-5)
  np.testing.assert_array_equal(np.asarray(ours[2]), np.roll(x, 2, axis=0))


def test_pytree_args_and_outputs_with_prefix_specs(mesh, jmesh):
  x, b, w = _f32(4, 4), _f32(4, seed=1), _f32(4, 2, seed=2)

  def make(L):
    def body(params, x):
      h = x @ params["w"] + params["b"][:2, None]
      return {"h": h, "stats": (L.psum(h.sum(), ("data", "model")), L.pmax(h.max(), "data"))}
    return body
  params = {"w": w, "b": b}
  in_specs = ({"w": P("model"), "b": P()}, P("data", "model"))
  out_specs = {"h": P("data", "model"), "stats": (P(), P("model"))}
  # NB: stats[1] is replicated over "data", still varying over "model": a (2,) result.
  make2 = lambda L: (lambda p, x: (lambda o: {"h": o["h"], "stats": (
      o["stats"][0], o["stats"][1][None])})(make(L)(p, x)))
  ours, ref = _both(make2, mesh, jmesh, in_specs, out_specs, params, x)
  assert set(ours) == {"h", "stats"} and isinstance(ours["stats"], tuple)
  _assert_tree_close(ours, ref)
  # A single spec as a prefix of a whole output tuple.
  f = sc.shard_map(lambda x: (x, {"y": x * 2}), mesh, in_specs=P("data"), out_specs=P("data"))
  out = f(x)
  np.testing.assert_array_equal(np.asarray(out[1]["y"]), x * 2)
  assert out[1]["y"].sharding.spec == P("data")


# ---------------------------------------------------------------------------
# 4. Autodiff


def _loss_pair(mesh, jmesh, in_specs, out_specs, make, reduce=lambda L, o: (o ** 2).sum()):
  f = sc.shard_map(make(lax), mesh, in_specs=in_specs, out_specs=out_specs)
  g = jax_shard_map(make(jax.lax), mesh=jmesh, in_specs=_jspec(in_specs),
                    out_specs=_jspec(out_specs))
  return (lambda *a: reduce(jnp, f(*a)), lambda *a: reduce(jnp_ref, g(*a)))


_GRAD_CASES = {
    # sharded inputs, replicated output after psum
    "psum_out": ((P("data", "model"), P("model")), P(None, "model"),
                 lambda L: lambda x, w: L.psum(jnp_any(L).sin(x) * w, "data")),
    # sharded inputs and outputs
    "sharded_out": ((P("data", "model"), P("model")), P("data", "model"),
                    lambda L: lambda x, w: jnp_any(L).tanh(x) * w),
    # replicated input (its cotangent is psum'med over both axes)
    "replicated_in": ((P("data", "model"), P()), P("data", "model"),
                      lambda L: lambda x, w: x * w[:2] + w[2:] ** 2),
    # replicated output over everything
    "both_psum": ((P("data", "model"), P()), P(),
                  lambda L: lambda x, w: L.psum(x * w[:2], ("data", "model"))),
    # collectives that permute
    "gather_ppermute": ((P("data", "model"), P()), P("data", "model"),
                        lambda L: lambda x, w: L.ppermute(
                            x * L.all_gather(x, "model", axis=1, tiled=True)[:, :2],
                            "model", [(0, 1), (1, 0)]) + w[:2]),
}


def jnp_any(L):
  return jnp_ref if L is jax.lax else jnp


def _grad_args():
  return _f32(4, 4, seed=4), _f32(4, 2, seed=5)


@pytest.mark.parametrize("name", sorted(_GRAD_CASES))
def test_grad_matches_jax(mesh, jmesh, name):
  in_specs, out_specs, make = _GRAD_CASES[name]
  ours, ref = _loss_pair(mesh, jmesh, in_specs, out_specs, make)
  x, w = _grad_args()
  np.testing.assert_allclose(float(ours(x, w)), float(ref(x, w)), rtol=1e-5)
  g, gref = sc.grad(ours, argnums=(0, 1))(x, w), jax.grad(ref, argnums=(0, 1))(x, w)
  _assert_tree_close(g, gref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["psum_out", "replicated_in", "both_psum"])
def test_grad_matches_finite_differences(mesh, jmesh, name):
  in_specs, out_specs, make = _GRAD_CASES[name]
  ours, _ = _loss_pair(mesh, jmesh, in_specs, out_specs, make)
  x, w = _grad_args()
  gx, gw = sc.grad(ours, argnums=(0, 1))(x, w)
  eps = 1e-2
  r = _rng(7)
  for arr, g, k in ((x, gx, 0), (w, gw, 1)):
    for _ in range(3):
      d = r.standard_normal(arr.shape).astype(np.float32)
      plus = [x, w]
      minus = [x, w]
      plus[k], minus[k] = arr + eps * d, arr - eps * d
      fd = (float(ours(*plus)) - float(ours(*minus))) / (2 * eps)
      np.testing.assert_allclose(float(np.sum(np.asarray(g) * d)), fd, rtol=2e-2, atol=2e-2)


def test_grad_under_jit_matches_jax(mesh, jmesh):
  in_specs, out_specs, make = _GRAD_CASES["psum_out"]
  ours, ref = _loss_pair(mesh, jmesh, in_specs, out_specs, make)
  x, w = _grad_args()
  g = sc.jit(sc.grad(ours, argnums=(0, 1)))(x, w)
  gref = jax.grad(ref, argnums=(0, 1))(x, w)
  _assert_tree_close(g, gref, rtol=1e-4, atol=1e-5)
  v, g2 = sc.jit(sc.value_and_grad(ours))(x, w)
  np.testing.assert_allclose(float(v), float(ref(x, w)), rtol=1e-5)
  _assert_tree_close(g2, gref[0], rtol=1e-4, atol=1e-5)


def test_jvp_and_vjp_match_jax(mesh, jmesh):
  make = lambda L: lambda x, w: (L.psum(jnp_any(L).sin(x) * w, "data"), x * w)
  in_specs, out_specs = (P("data", "model"), P("model")), (P(None, "model"), P("data", "model"))
  f = sc.shard_map(make(lax), mesh, in_specs=in_specs, out_specs=out_specs)
  g = jax_shard_map(make(jax.lax), mesh=jmesh, in_specs=_jspec(in_specs),
                    out_specs=_jspec(out_specs))
  x, w = _grad_args()
  tx, tw = _f32(4, 4, seed=8), _f32(4, 2, seed=9)
  p, t = sc.jvp(f, (x, w), (tx, tw))
  pr, tr = jax.jvp(g, (x, w), (tx, tw))
  _assert_tree_close(p, pr)
  _assert_tree_close(t, tr, rtol=1e-4)
  out, pullback = sc.vjp(f, x, w)
  outr, pullr = jax.vjp(g, x, w)
  _assert_tree_close(out, outr)
  cts = (_f32(2, 4, seed=10), _f32(4, 4, seed=11))
  _assert_tree_close(pullback(cts), pullr(cts), rtol=1e-4)
  # A tangent only for one input (the other's is symbolically zero).
  _, t1 = sc.jvp(lambda x: f(x, w), (x,), (tx,))
  _, tr1 = jax.jvp(lambda x: g(x, w), (x,), (tx,))
  _assert_tree_close(t1, tr1, rtol=1e-4)


@pytest.mark.parametrize("name", ["all_to_all_tiled", "psum_scatter_tiled", "pmean_model",
                                  "axis_index", "all_gather_untiled", "ppermute_data_partial",
                                  "psum_both"])
def test_grad_through_collectives_matches_jax(mesh, jmesh, name):
  make, s_in, s_out = _COLLECTIVES[name]
  f = sc.shard_map(make(lax), mesh, in_specs=s_in, out_specs=s_out)
  # NB: JAX's check would reject all_gather's replicated result (see _both); without the
  # check JAX still transposes all_gather to psum_scatter.
  g = jax_shard_map(make(jax.lax), mesh=jmesh, in_specs=_jspec(s_in), out_specs=_jspec(s_out),
                    check_vma=name != "all_gather_untiled")
  x = _f32(4, 8, seed=12)
  gx = sc.grad(lambda x: jnp.sin(f(x) * x.mean()).sum())(x)
  gref = jax.grad(lambda x: jnp_ref.sin(g(x) * x.mean()).sum())(x)
  _assert_tree_close(gx, gref, rtol=1e-4, atol=1e-5)


def test_grad_of_closed_over_value_and_checkpoint(mesh, jmesh):
  x, c = _f32(4, 4), _f32(2, 2, seed=1)
  f = lambda c: (sc.shard_map(lambda x: jnp.sin(x * c), mesh, in_specs=P("data", "model"),
                              out_specs=P("data", "model"))(x) ** 2).sum()
  g = lambda c: (jax_shard_map(lambda x: jnp_ref.sin(x * c), mesh=jmesh,
                               in_specs=jsh.PartitionSpec("data", "model"),
                               out_specs=jsh.PartitionSpec("data", "model"))(x) ** 2).sum()
  # The cotangent of a value every device shares is summed over the devices.
  _assert_tree_close(sc.grad(f)(c), jax.grad(g)(c), rtol=1e-4)
  _assert_tree_close(sc.jit(sc.grad(f))(c), jax.grad(g)(c), rtol=1e-4)
  h = sc.shard_map(sc.checkpoint(lambda x: lax.psum(jnp.sin(x) ** 2, "data")), mesh,
                   in_specs=P("data", "model"), out_specs=P(None, "model"))
  np.testing.assert_allclose(np.asarray(sc.grad(lambda x: h(x).sum())(x)),
                             2 * np.sin(x) * np.cos(x), rtol=1e-4, atol=1e-6)


def test_higher_order_and_per_example_grads(mesh, jmesh):
  in_specs, out_specs, make = _GRAD_CASES["psum_out"]
  ours, ref = _loss_pair(mesh, jmesh, in_specs, out_specs, make)
  x, w = _grad_args()
  v = _f32(4, 4, seed=13)
  hvp = sc.jvp(lambda x: sc.grad(ours)(x, w), (x,), (v,))[1]
  hvp_ref = jax.jvp(lambda x: jax.grad(ref)(x, w), (x,), (v,))[1]
  _assert_tree_close(hvp, hvp_ref, rtol=1e-4, atol=1e-5)
  xs = _f32(3, 4, 4, seed=14)
  per_ex = sc.jit(sc.vmap(sc.grad(ours), in_axes=(0, None)))(xs, w)
  _assert_tree_close(per_ex, jax.vmap(jax.grad(ref), in_axes=(0, None))(xs, w), rtol=1e-4,
                     atol=1e-5)


def test_megatron_mlp_grad(mesh, jmesh):
  """Batch split over "data"; W1 split on columns and W2 on rows over "model"; each device
  computes its block and the partial products are psum'med over "model"."""
  x, w1, w2, y = _f32(8, 6), _f32(6, 4, seed=1) * 0.5, _f32(4, 3, seed=2) * 0.5, _f32(8, 3, seed=3)

  def make(L):
    np_ = jnp_any(L)

    def body(x, w1, w2, y):
      h = np_.tanh(x @ w1)
      out = L.psum(h @ w2, "model")
      return L.psum(((out - y) ** 2).sum(), "data")
    return body
  in_specs = (P("data"), P(None, "model"), P("model"), P("data"))
  f = sc.shard_map(make(lax), mesh, in_specs=in_specs, out_specs=P())
  g = jax_shard_map(make(jax.lax), mesh=jmesh, in_specs=_jspec(in_specs),
                    out_specs=jsh.PartitionSpec())

  def dense(x, w1, w2, y):
    return ((np.tanh(x @ w1) @ w2 - y) ** 2).sum()
  np.testing.assert_allclose(float(f(x, w1, w2, y)), dense(x, w1, w2, y), rtol=1e-5)
  grads = sc.jit(sc.grad(f, argnums=(0, 1, 2)))(x, w1, w2, y)
  gref = jax.grad(g, argnums=(0, 1, 2))(x, w1, w2, y)
  gdense = jax.grad(lambda x, w1, w2: ((jnp_ref.tanh(x @ w1) @ w2 - y) ** 2).sum(),
                    argnums=(0, 1, 2))(x, w1, w2)
  _assert_tree_close(grads, gref, rtol=1e-4, atol=1e-5)
  _assert_tree_close(grads, gdense, rtol=1e-4, atol=1e-5)
  # The weights' gradients come back laid out as the weights.
  assert grads[1].shape == w1.shape and grads[2].shape == w2.shape


# ---------------------------------------------------------------------------
# 5. vmap


def test_vmap_of_shard_map(mesh, jmesh):
  make = lambda L: lambda x, w: L.psum(x * w, "model")
  in_specs, out_specs = (P("data", "model"), P("model")), P("data")
  f = sc.shard_map(make(lax), mesh, in_specs=in_specs, out_specs=out_specs)
  g = jax_shard_map(make(jax.lax), mesh=jmesh, in_specs=_jspec(in_specs),
                    out_specs=_jspec(out_specs))
  xs, w = _f32(3, 4, 4), _f32(4, seed=1)
  ws = _f32(3, 4, seed=2)
  _assert_tree_close(sc.vmap(f, in_axes=(0, None))(xs, w), jax.vmap(g, in_axes=(0, None))(xs, w))
  _assert_tree_close(sc.vmap(f)(xs, ws), jax.vmap(g)(xs, ws))
  # batch axis not leading, and an unbatched first operand
  xt = np.moveaxis(xs, 0, 2)
  out = sc.vmap(f, in_axes=(2, 0))(xt, ws)
  _assert_tree_close(out, jax.vmap(g, in_axes=(2, 0))(xt, ws))
  out = sc.vmap(f, in_axes=(None, 0))(xs[0], ws)
  _assert_tree_close(out, jax.vmap(g, in_axes=(None, 0))(xs[0], ws))
  # under jit
  _assert_tree_close(sc.jit(sc.vmap(f))(xs, ws), jax.vmap(g)(xs, ws))


def test_shard_map_of_vmap(mesh, jmesh):
  def make(L):
    vm = sc.vmap if L is lax else jax.vmap
    return lambda x, w: vm(lambda r: L.psum(r * w, "model"))(x)
  in_specs, out_specs = (P("data", "model"), P("model")), P("data")
  x, w = _f32(4, 4), _f32(4, seed=1)
  ours, ref = _both(make, mesh, jmesh, in_specs, out_specs, x, w)
  _assert_tree_close(ours, ref)
  np.testing.assert_allclose(np.asarray(ours), (x * w).reshape(4, 2, 2).sum(1), rtol=1e-5)


def test_vmap_axis_name_inside_shard_map(mesh, jmesh):
  def make(L):
    vm = sc.vmap if L is lax else jax.vmap
    return lambda x: vm(lambda r: L.psum(r, "b") + L.psum(r, "model"), axis_name="b")(x)
  x = _f32(4, 4)
  # NB: JAX 0.10's own check fails an internal assertion on this body (check_vma=True).
  ours, ref = _both(make, mesh, jmesh, (P("data", "model"),), P("data", "model"), x)
  _assert_tree_close(ours, ref)


# ---------------------------------------------------------------------------
# 6. Partial auto


@pytest.mark.parametrize("kw", [{"axis_names": {"data"}}, {"auto": frozenset({"model"})}])
def test_partial_auto(mesh, kw):
  x, w = _f32(4, 4), _f32(4, 2, seed=1)
  f = sc.shard_map(lambda x, w: lax.psum(x @ w, "data"), mesh, in_specs=(P("data"), P()),
                   out_specs=P(), **kw)
  np.testing.assert_allclose(np.asarray(f(x, w)), x[:2] @ w + x[2:] @ w, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(sc.jit(f)(x, w)), x[:2] @ w + x[2:] @ w, rtol=1e-5,
                             atol=1e-5)
  text = sc.jit(f).lower(x, w).as_text()
  assert 'manual_axes={"data"}' in text
  assert "sdy.manual_computation" in text
  # "model" is not manual: collectives over it are unbound in the body.
  h = sc.shard_map(lambda x: lax.psum(x, "model"), mesh, in_specs=P("data"), out_specs=P(),
                   **kw)
  with pytest.raises(NameError, match="model"):
    h(x)


def test_partial_auto_with_model_sharded_inputs_and_grad(mesh):
  x, w = _f32(4, 4), _f32(4, 4, seed=1)
  f = sc.shard_map(lambda x, w: lax.psum(jnp.tanh(x @ w), "data"), mesh,
                   in_specs=(P("data"), P()), out_specs=P(), axis_names={"data"})
  want = np.tanh(x[:2] @ w) + np.tanh(x[2:] @ w)
  # "model" is automatic: the inputs may arrive split over it, and the partitioner keeps it.
  g = sc.jit(f, in_shardings=(NamedSharding(mesh, P("data", "model")),
                              NamedSharding(mesh, P(None, "model"))))
  np.testing.assert_allclose(np.asarray(g(x, w)), want, rtol=1e-4, atol=1e-5)
  xs = sc.device_put(x, NamedSharding(mesh, P("data", "model")))
  np.testing.assert_allclose(np.asarray(f(xs, w)), want, rtol=1e-4, atol=1e-5)
  # The check still applies along the manual axis.
  with pytest.raises(ValueError, match="'data'"):
    sc.shard_map(lambda x: x * 2, mesh, in_specs=P("data"), out_specs=P(),
                 axis_names={"data"})(x)
  loss = lambda x, w: (f(x, w) ** 2).sum()
  dense = lambda x, w: ((jnp_ref.tanh(x[:2] @ w) + jnp_ref.tanh(x[2:] @ w)) ** 2).sum()
  for grad in (sc.grad(loss, argnums=(0, 1)), sc.jit(sc.grad(loss, argnums=(0, 1)))):
    _assert_tree_close(grad(x, w), jax.grad(dense, argnums=(0, 1))(x, w), rtol=1e-4,
                       atol=1e-5)


# ---------------------------------------------------------------------------
# 7. check_rep


def test_check_rep_rejects_unreduced_output(mesh):
  f = sc.shard_map(lambda x: x * 2, mesh, in_specs=P("data", "model"), out_specs=P("data"))
  with pytest.raises(ValueError) as e:
    f(np.ones((4, 4), np.float32))
  msg = str(e.value)
  assert "out_specs" in msg and "'model'" in msg and "check_rep=False" in msg
  # psum over "model" makes it replicated: accepted.
  g = sc.shard_map(lambda x: lax.psum(x, "model"), mesh, in_specs=P("data", "model"),
                   out_specs=P("data"))
  g(np.ones((4, 4), np.float32))
  # axis_index makes a value vary even from a replicated input.
  h = sc.shard_map(lambda x: x + lax.axis_index("data"), mesh, in_specs=P(), out_specs=P())
  with pytest.raises(ValueError, match="'data'"):
    h(np.ones((2,), np.float32))
  # check_vma is the newer name of the flag.
  sc.shard_map(lambda x: x + lax.axis_index("data"), mesh, in_specs=P(), out_specs=P(),
               check_vma=False)(np.ones((2,), np.float32))


def test_check_rep_false_returns_first_devices_value(mesh):
  x = np.arange(16, dtype=np.float32).reshape(4, 4)
  f = sc.shard_map(lambda x: x * 2, mesh, in_specs=P("data", "model"), out_specs=P(),
                   check_rep=False)
  out = f(x)
  np.testing.assert_array_equal(np.asarray(out), x[:2, :2] * 2)
  np.testing.assert_array_equal(np.asarray(sc.jit(f)(x)), x[:2, :2] * 2)


def test_check_rep_follows_control_flow(mesh):
  x = _f32(4, 4)
  blocks = x.reshape(2, 2, 2, 2).transpose(0, 2, 1, 3)  # [data, model, 2, 2]

  def scan_body(x):
    step = lambda c, _: (lax.psum(c, "model") * 0.5, None)
    return lax.scan(step, x, None, length=3)[0]
  out = sc.shard_map(scan_body, mesh, in_specs=P("data", "model"), out_specs=P("data"))(x)
  want = blocks.sum(1) * 0.5  # after one step the carry is the same along "model"
  want = want * 2 * 0.5 * 2 * 0.5
  np.testing.assert_allclose(np.asarray(out), want.reshape(4, 2), rtol=1e-5)
  # A scan that never reduces keeps varying.
  with pytest.raises(ValueError, match="'model'"):
    sc.shard_map(lambda x: lax.scan(lambda c, _: (c * 2, None), x, None, length=2)[0], mesh,
                 in_specs=P("data", "model"), out_specs=P("data"))(x)

  # A call (jit) in the body is followed into.
  red = sc.jit(lambda v: lax.psum(v, "model"))
  out = sc.shard_map(lambda x: red(x) + 1, mesh, in_specs=P("data", "model"),
                     out_specs=P("data"))(x)
  np.testing.assert_allclose(np.asarray(out), blocks.sum(1).reshape(4, 2) + 1, rtol=1e-5)

  # cond: a varying predicate makes the result vary; a branch with axis_index does too.
  varying_pred = lambda x: lax.cond(x.sum() > 0, lambda v: v, lambda v: -v,
                                    lax.psum(x, "data"))
  with pytest.raises(ValueError, match="'data'"):
    sc.shard_map(varying_pred, mesh, in_specs=P("data", "model"),
                 out_specs=P(None, "model"))(x)
  same_pred = lambda x: (lambda s: lax.cond(s.sum() > 0, lambda v: v, lambda v: -v, s))(
      lax.psum(x, "data"))
  out = sc.shard_map(same_pred, mesh, in_specs=P("data", "model"),
                     out_specs=P(None, "model"))(x)
  s = x[:2] + x[2:]
  want = np.concatenate([s[:, :2] if s[:, :2].sum() > 0 else -s[:, :2],
                         s[:, 2:] if s[:, 2:].sum() > 0 else -s[:, 2:]], axis=1)
  np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5)
  idx_branch = lambda x: lax.cond(x.sum() > 0, lambda v: v + lax.axis_index("data"),
                                  lambda v: v, x)
  with pytest.raises(ValueError, match="'data'"):
    sc.shard_map(idx_branch, mesh, in_specs=P(), out_specs=P())(x)

  # while_loop: a predicate varying along "model" lets devices run different iteration counts.
  def while_body(x):
    v = lax.psum(x, "model")
    n = lax.axis_index("model")
    return lax.while_loop(lambda c: c[0] < n + 2, lambda c: (c[0] + 1, c[1] * 2), (0, v))[1]
  with pytest.raises(ValueError, match="'model'"):
    sc.shard_map(while_body, mesh, in_specs=P("data", "model"), out_specs=P("data"))(x)
  def while_ok(x):
    v = lax.psum(x, "model")
    return lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1] * 2), (0, v))[1]
  out = sc.shard_map(while_ok, mesh, in_specs=P("data", "model"), out_specs=P("data"))(x)
  np.testing.assert_allclose(np.asarray(out), blocks.sum(1).reshape(4, 2) * 4, rtol=1e-5)


# ---------------------------------------------------------------------------
# 8. Errors


def test_spec_errors(mesh):
  x = np.ones((4, 4), np.float32)
  ident = lambda x: x
  cases = [
      (P("nope"), P(), "'nope'"),
      (P("data", "data"), P("data", "model"), "twice"),
      (P("data", None, "model"), P(), "3 entries"),
  ]
  for s_in, s_out, frag in cases:
    with pytest.raises(ValueError, match=re.escape(frag)):
      sc.shard_map(ident, mesh, in_specs=s_in, out_specs=s_out, check_rep=False)(x)
  with pytest.raises(ValueError, match="'nope'"):
    sc.shard_map(ident, mesh, in_specs=P(), out_specs=P("nope"))(x)
  with pytest.raises(ValueError, match="automatic axis 'model'"):
    sc.shard_map(ident, mesh, in_specs=P("model"), out_specs=P(), axis_names={"data"})(x)
  with pytest.raises(ValueError, match="not an axis of the mesh"):
    sc.shard_map(ident, mesh, in_specs=P(), out_specs=P(), axis_names={"x"})
  with pytest.raises(TypeError, match="PartitionSpec"):
    sc.shard_map(ident, mesh, in_specs=("data",), out_specs=P())(x)
  with pytest.raises(TypeError, match="callable"):
    sc.shard_map(3, mesh, in_specs=P(), out_specs=P())
  with pytest.raises(ValueError, match=r"1 entries, for a value of rank 0 \(f32\[\]\)"):
    sc.shard_map(lambda x: x.sum(), mesh, in_specs=P("data"), out_specs=P("data"))(x)
  with pytest.raises(TypeError, match=r"args\[0\] of <lambda> is not an array \(got str\)"):
    sc.shard_map(ident, mesh, in_specs=P(), out_specs=P())("abc")


def test_indivisible_dimension_error(mesh):
  f = sc.shard_map(lambda a, b: b, mesh, in_specs=(P(), {"k": P(None, "model")}),
                   out_specs=P(None, "model"))
  with pytest.raises(ValueError) as e:
    f(np.ones(2, np.float32), {"k": np.ones((4, 3), np.float32)})
  msg = str(e.value)
  assert "args[1]['k']" in msg and "(size 3)" in msg and "divisible by 2" in msg
  assert "dimension 1" in msg


def test_tree_prefix_and_kwargs_errors(mesh):
  x = np.ones((4, 4), np.float32)
  f = sc.shard_map(lambda x, y: x, mesh, in_specs=(P(), P(), P()), out_specs=P())
  # NB: JAX's prefix error, at the key path where the structures part
  with pytest.raises(ValueError, match=r"different lengths of tuple at key path\n    shard_map "
                                       r"in_specs\n.*of length 3, but .* of length 2"):
    f(x, x)
  g = sc.shard_map(lambda x: (x, x), mesh, in_specs=P(), out_specs=(P(), P(), P()))
  with pytest.raises(ValueError, match=r"different lengths of tuple at key path\n    shard_map "
                                       r"out_specs\n"):
    g(x)
  h = sc.shard_map(lambda x, y=None: x, mesh, in_specs=P(), out_specs=P())
  with pytest.raises(TypeError, match="keyword arguments"):
    h(x, y=x)


def test_collective_over_unknown_axis_is_name_error(mesh):
  f = sc.shard_map(lambda x: lax.psum(x, "batch"), mesh, in_specs=P(), out_specs=P())
  with pytest.raises(NameError, match="batch"):
    f(np.ones(4, np.float32))


def test_mesh_from_context(mesh):
  x = _f32(4, 4)
  # As JAX 0.10.2: the mesh is looked up at the first call, so defining is fine outside.
  g = sc.shard_map(lambda x: x, in_specs=P(), out_specs=P())
  with pytest.raises(ValueError, match="context mesh cannot be empty"):
    g(x)
  # NB: the mesh's axes are Explicit: as JAX 0.10.2, an argument's sharding type must be
  # its in_spec (a NumPy array's is P(None, None)).
  xd = sc.device_put(x, NamedSharding(mesh, P("data")))
  with pytest.warns(DeprecationWarning, match="`with mesh:` context manager"), mesh:
    f = sc.shard_map(lambda x: lax.psum(x, "data"), in_specs=P("data"), out_specs=P())
    np.testing.assert_allclose(np.asarray(f(xd)), x[:2] + x[2:], rtol=1e-6)
    with pytest.raises(ValueError, match=r"in_specs passed to shard_map: P\('data', None\) "
                                         r"does not match the specs of the input: "
                                         r"P\(None, None\) for arg: float32\[4,4\]\."):
      f(x)
  # The mesh was captured when shard_map was called.
  np.testing.assert_allclose(np.asarray(f(xd)), x[:2] + x[2:], rtol=1e-6)


# ---------------------------------------------------------------------------
# 9. jit with in_shardings; DCE


def test_inside_jit_with_in_shardings(mesh, jmesh):
  x, w = _f32(4, 4), _f32(4, 2, seed=1)
  body = sc.shard_map(lambda x, w: lax.psum(x @ w, "model"), mesh,
                      in_specs=(P("data", "model"), P("model")), out_specs=P("data"))

  def fun(x, w):
    return jnp.tanh(body(x, w)) + 1
  f = sc.jit(fun)
  g = sc.jit(fun, in_shardings=(NamedSharding(mesh, P("data", "model")),
                                NamedSharding(mesh, P())))
  want = np.tanh(x @ w) + 1
  np.testing.assert_allclose(np.asarray(f(x, w)), want, rtol=1e-5, atol=1e-5)
  out = g(x, w)
  np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)
  xs = sc.device_put(x, NamedSharding(mesh, P("data", "model")))
  np.testing.assert_allclose(np.asarray(g(xs, w)), want, rtol=1e-5, atol=1e-5)


def _shard_map_eqns(jaxpr):
  out = []
  for e in jaxpr.eqns:
    if e.primitive.name == "shard_map":
      out.append(e)
    for v in e.params.values():
      sub = getattr(v, "jaxpr", None)
      if sub is not None and hasattr(sub, "eqns"):
        out.extend(_shard_map_eqns(sub))
  return out


def test_dce_prunes_unused_outputs(mesh):
  f = sc.shard_map(lambda x, y: (lax.psum(x, "data"), jnp.sin(y) * 2, y + 1), mesh,
                   in_specs=(P("data"), P()), out_specs=(P(), P(), P()))
  x, y = _f32(4, 4), _f32(2, 4, seed=1)
  closed = sc.make_jaxpr(f)(x, y)
  (eqn,) = _shard_map_eqns(closed.jaxpr)
  assert len(eqn.outvars) == 3
  j, used = pe.dce_jaxpr(closed.jaxpr, [False, True, False])
  (eqn,) = _shard_map_eqns(j)
  assert len(eqn.outvars) == 1 and len(eqn.invars) == 1
  assert used == [False, True]
  assert eqn.params["out_specs"] == (P(),) and eqn.params["in_specs"] == (P(),)
  body = eqn.params["jaxpr"].jaxpr
  assert [e.primitive.name for e in body.eqns].count("psum") == 0
  assert not pe.dce_jaxpr(closed.jaxpr, [False, False, False])[0].eqns
  # Under jit with an output unused, the lowered program computes fewer results.
  text_all = sc.jit(f).lower(x, y).as_text()
  text_one = sc.jit(lambda x, y: f(x, y)[1]).lower(x, y).as_text()
  assert "all_reduce" in text_all and "all_reduce" not in text_one
  np.testing.assert_allclose(np.asarray(sc.jit(lambda x, y: f(x, y)[1])(x, y)),
                             np.sin(y) * 2, rtol=1e-6)
