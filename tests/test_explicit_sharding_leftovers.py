"""Sharding in types, leftovers of issue 24, on stagecraft and on JAX 0.10.2 in the same test
(4 CPU devices from tests/conftest.py): dot_general results naming one mesh axis twice,
jit programs that take their mesh from `set_mesh` (no argument on a mesh), and the
transposes of dynamic_slice / dynamic_update_slice / gather, whose zeros have their primal's
type (so the strict sharding rules need no leniency). Types, specs, values and error texts
are compared with JAX."""
import numpy as np
import pytest

import jax
import jax.numpy as jjnp
import jax.sharding as jsh

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.lax.spmd import reshard
from stagecraft.sharding import (AxisType, NamedSharding, P, ShardingTypeError, make_mesh,
                                 set_mesh)

from _explicit_sharding_util import Lib, both, check_same, meshes, value  # noqa: F401

pytestmark = pytest.mark.skipif(len(sc.devices()) < 4, reason="needs 4 devices")

JP = jsh.PartitionSpec


_value, _Lib, _both = value, Lib, both


def _check_same(r1, r2, rtol=0.0, atol=0.0):
  check_same(r1, r2, rtol, atol)
  assert isinstance(r1.sharding, NamedSharding)
  assert len(r1.sharding.device_set) == len(r2.sharding.device_set)


def _errors(meshes, prog, spec=("x", None), shape=(8, 4)):
  """The exception type names and texts prog raises on both libraries."""
  def run(L, m, x):
    try:
      prog(L, m, x)
    except Exception as e:   # noqa: BLE001 - compared below
      return type(e).__name__, str(e)
    return None
  return _both(meshes, run, spec, shape)


# ---------------------------------------------------------------------------
# 1. dot_general: a result naming one mesh axis on two dimensions


_DOUBLE_AXIS = {
    "matmul_transpose": lambda L, a: a @ a.T,
    "dot_general": lambda L, a: L.lax.dot_general(a, a, (((1,), (1,)), ((), ()))),
    "einsum_outer": lambda L, a: L.np.einsum("ij,kl->ikjl", a, a),
    "preferred_bf16": lambda L, a: L.lax.dot_general(
        a, a, (((1,), (1,)), ((), ())), preferred_element_type=L.np.bfloat16),
}


@pytest.mark.parametrize("jitted", [False, True])
@pytest.mark.parametrize("name", sorted(_DOUBLE_AXIS))
def test_dot_general_repeated_mesh_axis_is_a_type_error(meshes, name, jitted):
  def prog(L, m, a):
    f = lambda u: _DOUBLE_AXIS[name](L, u)   # noqa: E731
    return (L.sc.jit(f) if jitted else f)(a)
  e1, e2 = _errors(meshes, prog)
  assert e2 is not None and e2[0] == "ShardingTypeError"
  assert e1 == e2
  assert "produces an illegally sharded result" in e1[1]


def test_dot_general_repeated_axis_text(meshes):
  e1, _ = _errors(meshes, lambda L, m, a: a @ a.T)
  assert e1 == ("ShardingTypeError", "dot_general operation with inputs: f32[8@x,4], "
                "f32[4,8@x] produces an illegally sharded result: f32[8@x,8@x]")
  with set_mesh(meshes[0]):
    a = sc.device_put(_value(), NamedSharding(meshes[0], P("x", None)))
    with pytest.raises(ShardingTypeError):
      sc.make_jaxpr(lambda u: u @ u.T)(a)


def test_dot_general_repeated_axis_tuple_entry(meshes):
  """Two mesh axes on one dimension: printed `8@(x,y)`."""
  e1, e2 = _errors(meshes, lambda L, m, a: a @ a.T, spec=(("x", "y"), None))
  assert e1 == e2 and "f32[8@(x,y),8@(x,y)]" in e1[1]


@pytest.mark.parametrize("name,spec", [
    ("distinct_axes", ("x", "y")),     # a @ reshard(a.T) with rows on "x", columns on "y"
    ("out_sharding", ("x", None)),     # the ambiguity settled by out_sharding=
])
def test_dot_general_without_repeated_axis_still_types(meshes, name, spec):
  def prog(L, m, a):
    if name == "distinct_axes":
      return a @ L.rs(a.T, L.P(None, "y"))
    return L.np.matmul(a, a.T, out_sharding=L.P("x", None))
  r1, r2 = _both(meshes, prog, spec=("x", None))
  _check_same(r1, r2, rtol=1e-5, atol=1e-5)
  assert tuple(r1.sharding.spec) == spec


# ---------------------------------------------------------------------------
# 2. jit over the mesh of `set_mesh` when no argument is on a mesh


_CONTEXT = {
    "no_arguments": lambda L: L.sc.jit(lambda: L.rs(L.np.zeros((8, 4)), L.P("x")))(),
    "numpy_argument": lambda L: L.sc.jit(lambda a: L.rs(a * 2.0, L.P(None, "y")))(
        _value()),
    "out_sharding_constructor": lambda L: L.sc.jit(
        lambda: L.np.ones((8, 4), out_sharding=L.P("x", "y")) * 3.0)(),
    "two_outputs": lambda L: L.sc.jit(
        lambda a: (L.rs(a + 1.0, L.P("x")), L.np.sum(a)))(_value()),
    "arange": lambda L: L.sc.jit(
        lambda: L.rs(L.np.arange(16.0).reshape(8, 2), L.P(("x", "y"))))(),
}


@pytest.mark.parametrize("name", sorted(_CONTEXT))
def test_jit_takes_mesh_from_context(meshes, name):
  r1, r2 = _both(meshes, lambda L, m, x: _CONTEXT[name](L))
  if isinstance(r1, tuple):
    for a, b in zip(r1, r2):
      _check_same(a, b, rtol=1e-6, atol=1e-5)
  else:
    _check_same(r1, r2, rtol=1e-6)
  first = r1[0] if isinstance(r1, tuple) else r1
  assert first.sharding.mesh == meshes[0]
  assert len(first.addressable_shards) == 4


def test_jit_context_mesh_on_some_devices():
  """A mesh over devices 2 and 3: the result lives there, as JAX's."""
  mesh = make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,), devices=sc.devices()[2:])
  jmesh = jax.make_mesh((2,), ("x",), axis_types=(jsh.AxisType.Explicit,),
                        devices=jax.devices()[2:])
  with set_mesh(mesh):
    r1 = sc.jit(lambda: reshard(jnp.arange(8.0).reshape(4, 2), P("x")))()
  with jax.set_mesh(jmesh):
    r2 = jax.jit(lambda: jax.sharding.reshard(jjnp.arange(8.0).reshape(4, 2), JP("x")))()
  _check_same(r1, r2)
  assert {d.id for d in r1.sharding.device_set} == {d.id for d in r2.sharding.device_set}
  assert {d.id for d in r1.sharding.device_set} == {2, 3}


def test_jit_context_result_feeds_eager_ops(meshes):
  """The result is a real mesh Array: its pieces, eager arithmetic and a second jit."""
  with set_mesh(meshes[0]):
    r = sc.jit(lambda: reshard(jnp.arange(32.0).reshape(8, 4), P("x")))()
    shard = r.addressable_shards[2]   # mesh position (1, 0): rows 4..8
    assert shard.index == (slice(4, 8), slice(None))
    np.testing.assert_array_equal(np.asarray(shard.data),
                                  np.arange(32.0).reshape(8, 4)[4:8])
    s = r * 2.0 + sc.jit(lambda u: u)(r)
    assert str(sc.typeof(s)) == "float32[8@x,4]" and s.sharding.spec == P("x", None)
    np.testing.assert_array_equal(np.asarray(s), 3.0 * np.arange(32.0).reshape(8, 4))


def test_jit_without_context_stays_on_one_device():
  r = sc.jit(lambda: jnp.zeros((8, 4)) + 1.0)()
  assert str(sc.typeof(r)) == "float32[8,4]"
  assert len(r.sharding.device_set) == 1


# ---------------------------------------------------------------------------
# 3. transposes whose zeros have their primal's type


_TRANSPOSES = {
    "dynamic_slice": lambda L, a: L.np.sum(L.np.sin(
        L.lax.dynamic_slice(a, (0, 1), (8, 2))) ** 2),
    "dynamic_slice_traced_start": lambda L, a: L.np.sum(L.np.cos(L.lax.dynamic_slice_in_dim(
        a, L.np.argmax(a[:, 0]).astype(L.np.int32) % 3, 2, axis=1))),
    "dynamic_update_slice": lambda L, a: L.np.sum(L.np.sin(
        L.lax.dynamic_update_slice(a, a[:, :2] * 3.0, (0, 2))) ** 2),
    "gather_columns": lambda L, a: L.np.sum(L.np.tanh(a[:, L.np.array([0, 2, 2, 3])])),
    "gather_take": lambda L, a: L.np.sum(L.np.take(a, L.np.array([3, 1]), axis=1) ** 3),
    "scatter_set": lambda L, a: L.np.sum(L.np.sin(a.at[:, 1].set(a[:, 3] * 2.0))),
    "concatenate_split_dim": lambda L, a: L.np.sum(L.np.sin(
        L.np.concatenate([a, a * 2.0], axis=0))),
    "concatenate_free_dim": lambda L, a: L.np.sum(L.np.sin(
        L.np.concatenate([a, a[:, :1] * 2.0], axis=1))),
    "max_pool": lambda L, a: L.np.sum(L.lax.reduce_window(
        a * a, -L.np.inf, L.lax.max, (1, 2), (1, 1), "VALID")),
}


@pytest.mark.parametrize("mode", ["grad", "jit_grad", "jvp", "grad_of_grad_sum"])
@pytest.mark.parametrize("name", sorted(_TRANSPOSES))
def test_transposes_keep_types_and_match_jax(meshes, name, mode):
  def prog(L, m, a):
    f = lambda u: _TRANSPOSES[name](L, u)   # noqa: E731
    if mode == "jvp":
      return L.sc.jit(lambda u: L.sc.jvp(f, (u,), (L.np.cos(u),))[1])(a)
    if mode == "grad_of_grad_sum":
      return L.sc.jit(L.sc.grad(lambda u: L.np.sum(L.sc.grad(f)(u) * L.np.cos(u))))(a)
    g = L.sc.grad(f)
    return (L.sc.jit(g) if mode == "jit_grad" else g)(a)
  r1, r2 = _both(meshes, prog)
  _check_same(r1, r2, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("prim,build", [
    ("dynamic_update_slice", lambda a: lax.dynamic_slice(a, (0, 1), (8, 2))),
    ("scatter-add", lambda a: a[:, jnp.array([0, 2])]),
])
def test_transpose_zeros_are_typed_in_the_jaxpr(meshes, prim, build):
  """The zeros the transpose writes the cotangent into have the operand's type."""
  mesh, _ = meshes
  with set_mesh(mesh):
    a = sc.device_put(_value(), NamedSharding(mesh, P("x", None)))
    jaxpr = sc.make_jaxpr(sc.grad(lambda u: jnp.sum(build(u) ** 2)))(a).jaxpr
  eqns = [e for e in jaxpr.eqns if e.primitive.name == prim]
  assert eqns, str(jaxpr)
  assert all(str(e.invars[0].aval.str_short()) == "f32[8@x,4]" for e in eqns), str(jaxpr)


def test_strict_rules_reject_mixed_types(meshes):
  """Without the old leniency, an unsplit operand meeting a split one is JAX's error."""
  e1, e2 = _errors(meshes, lambda L, m, a: L.lax.dynamic_update_slice(
      a, L.rs(a[:, :2], L.P()), (0, 1)))
  assert e2 is not None and e1 == e2
  e1, e2 = _errors(meshes, lambda L, m, a: L.np.concatenate([a, L.rs(a, L.P())], axis=1))
  assert e2 is not None and e1[0] == e2[0] == "ShardingTypeError"


def test_dynamic_slice_gradient_matches_finite_differences(meshes):
  """Independent of JAX: the gradient of a dynamic_slice and a gather of a split value."""
  mesh, _ = meshes
  v = _value()
  def f(u):
    return jnp.sum(jnp.sin(lax.dynamic_slice(u, (0, 1), (8, 2))) ** 2) + jnp.sum(
        jnp.tanh(u[:, jnp.array([0, 3])]))
  def f_np(u):
    return np.sum(np.sin(u[:, 1:3]) ** 2) + np.sum(np.tanh(u[:, [0, 3]]))
  with set_mesh(mesh):
    g = sc.jit(sc.grad(f))(sc.device_put(v, NamedSharding(mesh, P("x", None))))
  assert str(sc.typeof(g)) == "float32[8@x,4]"
  x0 = v.astype(np.float64)
  num = np.zeros_like(x0)
  eps = 1e-4
  for idx in np.ndindex(*x0.shape):
    d = np.zeros_like(x0)
    d[idx] = eps
    num[idx] = (f_np(x0 + d) - f_np(x0 - d)) / (2 * eps)
  np.testing.assert_allclose(np.asarray(g), num, rtol=1e-3, atol=1e-3)


def test_conv_kernel_cotangent_keeps_kernel_type(meshes):
  """The one leniency left (sharding_rules `_deriving`): the kernel's cotangent of a
  convolution over a split batch contracts the batch away; it gets the kernel's type."""
  k = _value((3, 4, 2, 2), seed=1)
  def prog(L, m, a):
    x = L.rs(a.reshape(8, 1, 2, 2) * 1.0, L.P("x"))
    def f(w):
      y = L.lax.conv_general_dilated(L.np.broadcast_to(x, (8, 4, 2, 2)), w, (1, 1), "SAME")
      return L.np.sum(L.np.sin(y))
    return L.sc.jit(L.sc.grad(f))(L.np.asarray(k))
  r1, r2 = _both(meshes, prog, shape=(8, 4))
  _check_same(r1, r2, rtol=2e-4, atol=2e-4)


def test_jit_traces_again_under_another_mesh(meshes):
  """One jitted function called under two meshes: each call is typed and laid out over its
  own context mesh (the trace cache keys on the mesh context), as JAX's."""
  mesh, _ = meshes
  small = make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,), devices=sc.devices()[2:])
  g = sc.jit(lambda: reshard(jnp.arange(32.0).reshape(8, 4), P("x")))
  for m, ids in ((mesh, {0, 1, 2, 3}), (small, {2, 3}), (mesh, {0, 1, 2, 3})):
    with set_mesh(m):
      r = g()
    assert r.sharding.mesh == m and {d.id for d in r.sharding.device_set} == ids
    np.testing.assert_array_equal(np.asarray(r), np.arange(32.0).reshape(8, 4))


def test_jit_context_mesh_rejects_argument_on_other_devices(meshes):
  """An argument committed to one device does not fit the context mesh (both raise a
  ValueError about incompatible devices; the texts differ in how they name the sides)."""
  def prog(L, m, x):
    arg = L.sc.device_put(_value(), L.sc.devices()[1])
    return L.sc.jit(lambda a: L.rs(a, L.P("x")))(arg)
  e1, e2 = _errors(meshes, prog)
  assert e2 is not None and e1 is not None
  assert "incompatible devices" in e1[1] and "incompatible devices" in e2[1]
  assert "device ids [1]" in e1[1] and "device ids [1]" in e2[1]
  with set_mesh(meshes[0]):
    with pytest.raises(ValueError):
      prog(_Lib(True), meshes[0], None)
