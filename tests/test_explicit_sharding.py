"""Sharding in types for Explicit mesh axes (JAX 0.10.2's "explicit sharding"), on stagecraft
and on JAX in the same test (4 CPU devices from tests/conftest.py): `typeof` strings, result
shardings and values of working programs, and the errors (type name and message) of
programs JAX rejects. Programs written from the documented behaviour of JAX's
explicit-sharding tutorial."""
import numpy as np
import pytest

import jax
import jax.numpy as jjnp
import jax.sharding as jsh

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.lax.spmd import reshard
from stagecraft.sharding import AxisType, NamedSharding, P, make_mesh, set_mesh

pytestmark = pytest.mark.skipif(len(sc.devices()) < 4, reason="needs 4 devices")

JP = jsh.PartitionSpec
_DATA = {
    "a": ((8, 4), ("x", None)), "a2": ((8, 4), ("y", None)), "b": ((8, 4), (None, "y")),
    "c": ((4, 4), ("y", None)), "c2": ((4, 4), ("x", None)), "v": ((4,), ("y",)),
    "d": ((8, 4), (("x", "y"), None)), "bb": ((2, 8, 4), ("x", None, None)),
    "bb2": ((2, 4, 4), ("y", None, None)), "m": ((8, 4), (None, "x")),
    "sq": ((4, 4), ("y", None)), "sq2": ((4, 4), (None, "y")),
}


def _value(name):
  shape, _ = _DATA[name]
  r = np.random.default_rng(sum(map(ord, name)))
  return r.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def both():
  """(ours, theirs): dicts of the same arrays placed on a 2x2 Explicit mesh."""
  mesh = make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
  jmesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(jsh.AxisType.Explicit,) * 2)
  ours = {k: sc.device_put(_value(k), NamedSharding(mesh, P(*s))) for k, (_, s) in _DATA.items()}
  theirs = {k: jax.device_put(_value(k), jsh.NamedSharding(jmesh, JP(*s)))
            for k, (_, s) in _DATA.items()}
  return mesh, jmesh, ours, theirs


def _run_both(both, prog):
  """Runs prog(np_module, lax_module, reshard, P, arrays) on both; checks type strings,
  result specs and values."""
  mesh, jmesh, ours, theirs = both
  with set_mesh(mesh):
    r1 = prog(jnp, lax, reshard, P, ours)
  with jax.set_mesh(jmesh):
    r2 = prog(jjnp, jax.lax, jax.sharding.reshard, JP, theirs)
  assert str(sc.typeof(r1)) == str(jax.typeof(r2))
  assert repr(r1.sharding.spec) == repr(r2.sharding.spec)
  np.testing.assert_allclose(np.asarray(r1), np.asarray(r2), rtol=2e-5, atol=2e-5)
  return r1, r2


_WORKING = {
    "typeof": lambda np_, lax_, rs, P_, a: a["d"],
    "elementwise": lambda np_, lax_, rs, P_, a: np_.sin(a["a"]) * 2.0 + a["a"],
    "elementwise_merge": lambda np_, lax_, rs, P_, a: a["a"] + a["b"],
    "broadcast_vector": lambda np_, lax_, rs, P_, a: a["a"] + a["v"],
    "matmul_lhs_rows": lambda np_, lax_, rs, P_, a: a["a"] @ a["c"],
    "matmul_rhs_contract_only": lambda np_, lax_, rs, P_, a: a["m"].T @ a["a"],
    "matmul_out_sharding": lambda np_, lax_, rs, P_, a: lax_.dot_general(
        a["b"], a["c"], (((1,), (0,)), ((), ())), out_sharding=P_("x", "y")),
    "batched_dot": lambda np_, lax_, rs, P_, a: lax_.dot_general(
        a["bb"], a["bb"], (((2,), (2,)), ((0,), (0,)))),
    "sum_kept_dim": lambda np_, lax_, rs, P_, a: a["a"].sum(1),
    "sum_split_dim": lambda np_, lax_, rs, P_, a: a["a"].sum(0),
    "max_and_argmax": lambda np_, lax_, rs, P_, a: np_.argmax(a["a"], axis=1) + a["a"].max(1),
    "reshape_split": lambda np_, lax_, rs, P_, a: a["a"].reshape(2, 4, 4),
    "reshape_merge": lambda np_, lax_, rs, P_, a: a["a"].reshape(32),
    "reshape_two_axes": lambda np_, lax_, rs, P_, a: a["d"].reshape(2, 4, 4),
    "transpose": lambda np_, lax_, rs, P_, a: a["a"].T,
    "broadcast_to": lambda np_, lax_, rs, P_, a: np_.broadcast_to(a["a"], (3, 8, 4)),
    "convert": lambda np_, lax_, rs, P_, a: a["a"].astype(np_.int32),
    "where_scalar": lambda np_, lax_, rs, P_, a: np_.where(a["a"] > 0, a["a"], 0.0),
    "cumsum_unsplit_axis": lambda np_, lax_, rs, P_, a: np_.cumsum(a["a"], 1),
    "reshard": lambda np_, lax_, rs, P_, a: rs(a["a"], P_(None, "x")),
    "zeros_plus": lambda np_, lax_, rs, P_, a: np_.zeros((8, 4)) + a["a"],
}


@pytest.mark.parametrize("name", sorted(_WORKING))
def test_working_programs_match_jax(both, name):
  _run_both(both, _WORKING[name])


@pytest.mark.parametrize("name", ["elementwise", "matmul_lhs_rows", "sum_kept_dim",
                                  "reshape_merge", "reshard", "transpose"])
def test_working_programs_under_jit_match_jax(both, name):
  prog = _WORKING[name]
  _run_both(both, lambda np_, lax_, rs, P_, a: (sc.jit if np_ is jnp else jax.jit)(
      lambda arrs: prog(np_, lax_, rs, P_, arrs))(a))


_ERRORS = {
    "add_incompatible": lambda np_, lax_, rs, P_, a: a["a"] + a["a2"],
    "mul_incompatible_jit": lambda np_, lax_, rs, P_, a: (sc.jit if np_ is jnp else jax.jit)(
        lambda p, q: p * q)(a["a"], a["a2"]),
    "illegal_result": lambda np_, lax_, rs, P_, a: a["sq"] * a["sq2"],
    "contract_both_sides": lambda np_, lax_, rs, P_, a: a["b"] @ a["c"],
    "dot_general_contract_both": lambda np_, lax_, rs, P_, a: lax_.dot_general(
        a["b"], a["c"], (((1,), (0,)), ((), ()))),
    "contract_mismatch": lambda np_, lax_, rs, P_, a: a["b"] @ a["c2"],
    "batch_mismatch": lambda np_, lax_, rs, P_, a: lax_.dot_general(
        a["bb"], a["bb2"], (((2,), (1,)), ((0,), (0,)))),
    "reshape_minor_split": lambda np_, lax_, rs, P_, a: a["b"].reshape(32),
    "reshape_regroup": lambda np_, lax_, rs, P_, a: a["b"].reshape(4, 8),
    "reshape_merge_minor": lambda np_, lax_, rs, P_, a: a["m"].reshape(32),
    "select_cases": lambda np_, lax_, rs, P_, a: np_.where(a["a"] > 0, a["a"], a["b"]),
    "select_which": lambda np_, lax_, rs, P_, a: lax_.select(a["b"] > 0, a["a"], a["a"]),
    "cumsum_split_axis": lambda np_, lax_, rs, P_, a: np_.cumsum(a["a"], 0),
    "wsc_is_an_assert": lambda np_, lax_, rs, P_, a: (sc.jit if np_ is jnp else jax.jit)(
        lambda x: lax_.with_sharding_constraint(x, P_(None, "x")))(a["a"]),
}


@pytest.mark.parametrize("name", sorted(_ERRORS))
def test_errors_match_jax(both, name):
  mesh, jmesh, ours, theirs = both
  prog = _ERRORS[name]
  with set_mesh(mesh), pytest.raises(Exception) as e1:
    prog(jnp, lax, reshard, P, ours)
  with jax.set_mesh(jmesh), pytest.raises(Exception) as e2:
    prog(jjnp, jax.lax, jax.sharding.reshard, JP, theirs)
  assert type(e1.value).__name__ == type(e2.value).__name__
  first = lambda e: str(e).split("\n--------------------")[0]   # noqa: E731
  assert first(e1.value) == first(e2.value)


def test_jaxpr_prints_types(both):
  mesh, _, ours, _ = both
  with set_mesh(mesh):
    jx = sc.make_jaxpr(lambda x, y: jnp.sin(x) @ y)(ours["a"], ours["c"])
  text = str(jx)
  assert "a:f32[8@x,4] b:f32[4@y,4]" in text and "d:f32[8@x,4] = dot_general" in text
  assert sc.typeof(ours["d"]).str_short() == "f32[8@(x,y),4]"
  assert repr(sc.typeof(ours["a"])) == "ShapedArray(float32[8@x,4])"


def test_avals_with_and_without_sharding_differ():
  from stagecraft.core import ShapedArray
  mesh = make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
  s = NamedSharding(mesh.abstract_mesh, P("x", None))
  a, b = ShapedArray((8, 4), np.dtype("float32")), ShapedArray((8, 4), np.dtype("float32"),
                                                               False, s)
  assert a != b and b == b.update() and b.update(shape=(4, 8)).sharding.spec == P(None, None)
  assert a.sharding.spec == P(None, None) and b.sharding == s
  assert b.strip_weak_type() == b and b.update(dtype=np.dtype("int32")).sharding == s


def test_auto_axes_keep_no_type(both):
  mesh = make_mesh((2, 2), ("p", "q"), axis_types=(AxisType.Explicit, AxisType.Auto))
  x = sc.device_put(_value("a"), NamedSharding(mesh, P("p", "q")))
  jm = jax.make_mesh((2, 2), ("p", "q"), axis_types=(jsh.AxisType.Explicit, jsh.AxisType.Auto))
  jx = jax.device_put(_value("a"), jsh.NamedSharding(jm, JP("p", "q")))
  assert str(sc.typeof(x)) == str(jax.typeof(jx)) == "float32[8@p,4]"
  auto = make_mesh((2, 2), ("p", "q"), axis_types=(AxisType.Auto,) * 2)
  y = sc.device_put(_value("a"), NamedSharding(auto, P("p")))
  assert str(sc.typeof(y)) == "float32[8,4]"


def test_grad_and_vmap_keep_types(both):
  mesh, jmesh, ours, theirs = both
  f = lambda np_: lambda x, w: (np_.tanh(x @ w) ** 2).sum()   # noqa: E731
  with set_mesh(mesh):
    g1 = sc.grad(f(jnp), argnums=(0, 1))(ours["a"], ours["c"])
    gj1 = sc.jit(sc.grad(f(jnp), argnums=(0, 1)))(ours["a"], ours["c"])
    v1 = sc.vmap(lambda r: r * 2)(ours["a"])
  with jax.set_mesh(jmesh):
    g2 = jax.grad(f(jjnp), argnums=(0, 1))(theirs["a"], theirs["c"])
    v2 = jax.vmap(lambda r: r * 2)(theirs["a"])
  for ours_g in (g1, gj1):
    for o, t in zip(ours_g, g2):
      assert str(sc.typeof(o)) == str(jax.typeof(t))
      assert repr(o.sharding.spec) == repr(t.sharding.spec)
      np.testing.assert_allclose(np.asarray(o), np.asarray(t), rtol=1e-4, atol=1e-5)
  assert str(sc.typeof(v1)) == str(jax.typeof(v2))


def _mlp_loss(np_):
  def loss(params, x, y):
    h = np_.tanh(x @ params["w1"] + params["b1"])
    out = h @ params["w2"]
    return ((out - y) ** 2).mean()
  return loss


def test_data_model_mlp_step_matches_jax(both):
  """A 2-D data x model MLP step under jit and grad: w1 split over 'y' (model) on its
  output dimension, w2 replicated, the batch over 'x' (data)."""
  mesh, jmesh, _, _ = both
  r = np.random.default_rng(0)
  vals = {"w1": r.standard_normal((4, 8)).astype(np.float32) * 0.5,
          "b1": np.zeros((8,), np.float32),
          "w2": r.standard_normal((8, 2)).astype(np.float32) * 0.5}
  specs = {"w1": (None, "y"), "b1": ("y",), "w2": (None, None)}
  x, y = r.standard_normal((8, 4)).astype(np.float32), r.standard_normal((8, 2)).astype(
      np.float32)

  def step(np_, grad, params, x, y):
    loss, g = grad(_mlp_loss(np_))(params, x, y)
    return {k: params[k] - 0.1 * g[k] for k in params}, loss

  with set_mesh(mesh):
    p1 = {k: sc.device_put(v, P(*specs[k])) for k, v in vals.items()}
    x1, y1 = sc.device_put(x, P("x", None)), sc.device_put(y, P("x", None))
    f1 = sc.jit(lambda p, a, b: step(jnp, sc.value_and_grad, p, a, b))
    for _ in range(2):
      p1, l1 = f1(p1, x1, y1)
  with jax.set_mesh(jmesh):
    p2 = {k: jax.device_put(v, JP(*specs[k])) for k, v in vals.items()}
    x2, y2 = jax.device_put(x, JP("x", None)), jax.device_put(y, JP("x", None))
    f2 = jax.jit(lambda p, a, b: step(jjnp, jax.value_and_grad, p, a, b))
    for _ in range(2):
      p2, l2 = f2(p2, x2, y2)
  np.testing.assert_allclose(np.asarray(l1), np.asarray(l2), rtol=1e-5)
  for k in vals:
    assert str(sc.typeof(p1[k])) == str(jax.typeof(p2[k])), k
    assert repr(p1[k].sharding.spec) == repr(p2[k].sharding.spec), k
    np.testing.assert_allclose(np.asarray(p1[k]), np.asarray(p2[k]), rtol=1e-5, atol=1e-6)


def test_primitive_without_rule_raises_not_implemented(both):
  mesh, _, ours, _ = both
  with set_mesh(mesh), pytest.raises(NotImplementedError, match="has no sharding rule"):
    lax.reduce(ours["a"], 0., lambda u, v: u * 0.5 + v, (1,))   # the generic reduce
