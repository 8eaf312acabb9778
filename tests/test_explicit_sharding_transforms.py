"""Sharding in types, phase 3 (issue 24), on stagecraft and on JAX 0.10.2 in the same test
(4 CPU devices from tests/conftest.py): `out_sharding=` of the random samplers, the
sharding types `eval_shape` gives, vmap of a function containing a jit (the batched
jaxpr keeps its operands' types) and derivatives whose instantiated zeros have their
primal's type. Each program runs on both; types, specs, values and error texts agree."""
import numpy as np
import pytest

import jax
import jax.sharding as jsh

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.sharding import NamedSharding, P, set_mesh

from _explicit_sharding_util import Lib, both, check_same, meshes, value  # noqa: F401

pytestmark = pytest.mark.skipif(len(sc.devices()) < 4, reason="needs 4 devices")

JP = jsh.PartitionSpec


_value, _Lib, _both = value, Lib, both


_check_same = check_same


# ---------------------------------------------------------------------------
# random samplers: out_sharding= types the sample, the numbers stay those of JAX

_SAMPLERS = {
    "normal": lambda L, k, s: L.random.normal(k, (8, 4), out_sharding=s),
    "uniform": lambda L, k, s: L.random.uniform(k, (8, 4), minval=-1.0, maxval=2.0,
                                                out_sharding=s),
    "bits": lambda L, k, s: L.random.bits(k, (8, 4), out_sharding=s),
    "randint": lambda L, k, s: L.random.randint(k, (8, 4), 0, 10, out_sharding=s),
    "bernoulli": lambda L, k, s: L.random.bernoulli(k, 0.3, (8, 4), out_sharding=s),
    "exponential": lambda L, k, s: L.random.exponential(k, (8, 4), out_sharding=s),
    "truncated_normal": lambda L, k, s: L.random.truncated_normal(k, -1.0, 1.0, (8, 4),
                                                                  out_sharding=s),
}


@pytest.mark.parametrize("name,spec", [(n, ("x", None)) for n in sorted(_SAMPLERS)] + [
    ("normal", (None, "y")), ("bits", (("x", "y"),)), ("uniform", ("y", "x"))])
@pytest.mark.parametrize("jitted", [False, True, "key_on_mesh"])
def test_random_out_sharding_types_the_sample(meshes, name, spec, jitted):
  def prog(L, m, x):
    f = lambda k: _SAMPLERS[name](L, k, L.P(*spec))   # noqa: E731
    if not jitted:
      return f(L.random.key(3))
    if jitted == "key_on_mesh":
      return L.sc.jit(f)(L.sc.device_put(L.random.key(3), L.NS(m, L.P())))
    # NB: the key is on no mesh: the jit takes its mesh from the context, as JAX's
    return L.sc.jit(f)(L.random.key(3))
  r1, r2 = _both(meshes, prog)
  _check_same(r1, r2, rtol=1e-6, atol=1e-6)
  assert tuple(r1.sharding.spec)[0] == spec[0]


def test_random_out_sharding_named_sharding_without_mesh_context(meshes):
  """A NamedSharding over a concrete mesh needs no mesh context here (JAX 0.10.2 asks for
  one: 'Please enter your `jit` into a mesh context'): the same numbers, laid out."""
  mesh, _ = meshes
  r1 = sc.random.normal(sc.random.key(1), (8, 4), out_sharding=NamedSharding(mesh, P("x")))
  assert str(sc.typeof(r1)) == "float32[8@x,4]" and r1.sharding.spec == P("x", None)
  np.testing.assert_array_equal(np.asarray(r1), np.asarray(jax.random.normal(
      jax.random.key(1), (8, 4))))


def test_random_out_sharding_errors_match_jax(meshes):
  for bad in ("x", 3):
    msgs = []
    for lib in (sc, jax):
      with pytest.raises(TypeError) as e:
        lib.random.normal(lib.random.key(0), (8, 4), out_sharding=bad)
      msgs.append(str(e.value))
    assert msgs[0] == msgs[1]
  msgs = []
  for lib, PP in ((sc, P), (jax, JP)):
    with pytest.raises(ValueError) as e:
      lib.random.uniform(lib.random.key(0), (8, 4), out_sharding=PP("x"))
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1] and "not under a mesh context" in msgs[0]


def test_random_unsplit_named_sharding_is_the_plain_sample():
  key = sc.random.key(0)
  x = sc.random.normal(key, (2, 3))
  y = sc.random.normal(key, (2, 3), out_sharding=sc.typeof(x).sharding)
  np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# ---------------------------------------------------------------------------
# eval_shape: ShapeDtypeStructs with the results' sharding types


_EVAL_SHAPE = {
    "split": lambda L, a: a * 2,
    "reduce_split_dim": lambda L, a: a.sum(0),
    "scalar": lambda L, a: a.sum(),
    "python_constant": lambda L, a: 1.0,
    "tuple": lambda L, a: (a.T, a.reshape(2, 4, 4), L.np.zeros(3)),
    "dot": lambda L, a: a @ L.np.ones((4, 3), L.np.float32),
}


@pytest.mark.parametrize("in_context", [True, False])
@pytest.mark.parametrize("name", sorted(_EVAL_SHAPE))
def test_eval_shape_carries_sharding_types(meshes, name, in_context):
  mesh, jmesh = meshes
  v = _value()
  x1 = sc.device_put(v, NamedSharding(mesh, P("x", None)))
  x2 = jax.device_put(v, jsh.NamedSharding(jmesh, JP("x", None)))
  f1 = lambda a: _EVAL_SHAPE[name](_Lib(True), a)   # noqa: E731
  f2 = lambda a: _EVAL_SHAPE[name](_Lib(False), a)   # noqa: E731
  if in_context:
    with set_mesh(mesh):
      r1 = sc.eval_shape(f1, x1)
    with jax.set_mesh(jmesh):
      r2 = jax.eval_shape(f2, x2)
  else:
    r1, r2 = sc.eval_shape(f1, x1), jax.eval_shape(f2, x2)
  assert repr(r1) == repr(r2)
  l1, l2 = jax.tree.leaves(r1), jax.tree.leaves(r2)
  assert [repr(s.sharding) for s in l1] == [repr(s.sharding) for s in l2]


def test_eval_shape_of_shape_dtype_struct_with_sharding_and_no_mesh(meshes):
  mesh, jmesh = meshes
  s1 = sc.ShapeDtypeStruct((8, 4), np.float32, sharding=NamedSharding(mesh, P("x")))
  s2 = jax.ShapeDtypeStruct((8, 4), np.float32, sharding=jsh.NamedSharding(jmesh, JP("x")))
  assert repr(s1) == repr(s2)
  assert repr(sc.eval_shape(lambda a: a + 1, s1)) == repr(jax.eval_shape(lambda a: a + 1, s2))
  # a program over no mesh: no sharding, as JAX's
  r1 = sc.eval_shape(lambda a: (a * 2, a.sum()), np.ones(3, np.float32))
  r2 = jax.eval_shape(lambda a: (a * 2, a.sum()), np.ones(3, np.float32))
  assert repr(r1) == repr(r2) and r1[0].sharding is None


# ---------------------------------------------------------------------------
# vmap of a function containing a jit: the batched call keeps its operands' types


_VMAP_JIT = {
    "jit_body": lambda L, x: L.sc.vmap(L.sc.jit(lambda r: L.np.sin(r) * 2.0))(x),
    "jit_inside": lambda L, x: L.sc.vmap(lambda r: L.sc.jit(lambda u: u * 2.0)(r) + 1.0)(x),
    "in_axes_1": lambda L, x: L.sc.vmap(L.sc.jit(lambda r: r.sum()), in_axes=1)(x),
    "nested_jit": lambda L, x: L.sc.jit(L.sc.vmap(L.sc.jit(lambda r: r * r.sum())))(x),
    "random_per_key": lambda L, x: L.sc.vmap(lambda k: L.random.normal(k, (4,)))(
        L.rs(L.random.split(L.random.key(0), 8), L.P("x"))),
}


@pytest.mark.parametrize("name,spec", [(n, s) for n in sorted(_VMAP_JIT) for s in (
    [("x", None), ("x", "y"), (None, "y")] if n != "random_per_key" else [("x", None)])])
def test_vmap_of_jit_keeps_types(meshes, name, spec):
  r1, r2 = _both(meshes, lambda L, m, x: _VMAP_JIT[name](L, x), spec=spec)
  _check_same(r1, r2, rtol=1e-5, atol=1e-5)


def test_vmap_of_jit_body_sees_split_types(meshes):
  """The jit body batched over a split dimension sees its other dimensions' types: a
  contraction over a split dimension asks for out_sharding=, as in JAX."""
  from jax._src.core import ShardingTypeError as JaxShardingTypeError
  from stagecraft.sharding import ShardingTypeError
  prog = lambda L, m, x: L.sc.jit(L.sc.vmap(L.sc.jit(lambda r: r @ r)))(x)   # noqa: E731
  msgs = []
  for ours, err in ((True, ShardingTypeError), (False, JaxShardingTypeError)):
    with pytest.raises(err) as e:
      _both_one(meshes, ours, prog, spec=(None, "y"))
    msgs.append(str(e.value).split("\n")[0])
  assert msgs[0] == msgs[1] and "Contracting dimensions are sharded" in msgs[0]


def _both_one(meshes, ours, prog, spec=("x", None), shape=(8, 4)):
  mesh, jmesh = meshes
  L, m, setm = (_Lib(True), mesh, set_mesh) if ours else (_Lib(False), jmesh, jax.set_mesh)
  x = L.sc.device_put(_value(shape), L.NS(m, L.P(*spec)))
  with setm(m):
    return prog(L, m, x)


def test_vmap_of_jit_jaxpr_is_typed(meshes):
  """The batched jaxpr's binders have the operands' types, printed as JAX's (with the jit's
  `ctx_mesh` param: the Explicit mesh in context)."""
  j1, j2 = _both(meshes, lambda L, m, x: str(L.sc.make_jaxpr(L.sc.vmap(L.sc.jit(
      lambda r: L.np.sin(r) * 2.0)))(x)), spec=("x", "y"))
  assert j1 == j2 and "ctx_mesh=Mesh('x': 2, 'y': 2" in j1
  assert j1.count("f32[8@x,4@y]") == 5


# ---------------------------------------------------------------------------
# derivatives: instantiated zero tangents and cotangents have their primal's type


_ZERO_TYPED = {
    "concat_with_constant": lambda L, a, b: L.np.sum(L.np.concatenate([a * 2.0, b])),
    "dus_update_only": lambda L, a, b: L.np.sum(
        L.lax.dynamic_update_slice(b, (a * 3.0)[:, :2], (0, 1)) ** 2),
    "dus_operand_only": lambda L, a, b: L.np.sum(
        L.lax.dynamic_update_slice(a, b[:, :2], (0, 1)) ** 2),
    "scatter_operand_only": lambda L, a, b: L.np.sum(a.at[:, 1].add(b[:, 2]) ** 2),
    "scatter_updates_only": lambda L, a, b: L.np.sum(b.at[:, 1].add(a[:, 2]) ** 2),
    "max_pool": lambda L, a, b: L.np.sum(L.lax.reduce_window(
        a * b, -L.np.inf, L.lax.max, (1, 2), (1, 2), "VALID")),
}


@pytest.mark.parametrize("mode", ["grad", "jit_grad", "jvp"])
@pytest.mark.parametrize("name", sorted(_ZERO_TYPED))
def test_derivatives_with_instantiated_zeros_match_jax(meshes, name, mode):
  def prog(L, m, a):
    b = a * 0.5 + 1.0
    f = lambda u: _ZERO_TYPED[name](L, u, b)   # noqa: E731
    if mode == "jvp":
      return L.sc.jit(lambda u: L.sc.jvp(f, (u,), (u,))[1])(a)
    g = L.sc.grad(f)
    return (L.sc.jit(g) if mode == "jit_grad" else g)(a)
  r1, r2 = _both(meshes, prog)
  _check_same(r1, r2, rtol=1e-4, atol=1e-4)


def test_zero_cotangent_of_split_primal_is_typed(meshes):
  """A primal that does not reach the output gets a zero cotangent of its own type."""
  r1, r2 = _both(meshes, lambda L, m, a: L.sc.jit(L.sc.grad(
      lambda u, w: (w * 2.0).sum(), argnums=0))(a, a * 1.0))
  _check_same(r1, r2)
  assert str(sc.typeof(r1)) == "float32[8@x,4]"
  assert not np.asarray(r1).any()


def test_gradient_matches_finite_differences(meshes):
  """Independent of JAX: the gradient through a dynamic_update_slice whose operand does not
  depend on the input (its zero tangent is instantiated) equals central differences."""
  mesh, _ = meshes
  v = _value()
  b = (v * 0.5 + 1.0).astype(np.float32)
  def f(u, bb):
    return jnp.sum(lax.dynamic_update_slice(bb, jnp.sin(u[:, :2]), (0, 1)) ** 2)
  with set_mesh(mesh):
    x = sc.device_put(v, NamedSharding(mesh, P("x", None)))
    bs = sc.device_put(b, NamedSharding(mesh, P("x", None)))
    g = np.asarray(sc.jit(sc.grad(f))(x, bs))
  x0 = v.astype(np.float64)
  num = np.zeros_like(x0)
  eps = 1e-3
  for idx in np.ndindex(*x0.shape):
    d = np.zeros_like(x0)
    d[idx] = eps
    fp = np.sum(_dus_np(b, np.sin(x0 + d)[:, :2]) ** 2)
    fm = np.sum(_dus_np(b, np.sin(x0 - d)[:, :2]) ** 2)
    num[idx] = (fp - fm) / (2 * eps)
  np.testing.assert_allclose(g, num, rtol=2e-3, atol=2e-3)


def _dus_np(base, upd):
  out = base.astype(np.float64).copy()
  out[:, 1:3] = upd
  return out
