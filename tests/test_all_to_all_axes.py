"""`lax.all_to_all` over several axis names (a 2-D mesh's `('x', 'y')`, nested vmaps), as
JAX 0.10.2: the group's members are numbered row-major over the names in the order given.
JAX is the oracle; where JAX's own rule fails (vmap among shard_map names), NumPy is."""
from functools import partial

import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.sharding import PartitionSpec as P

pytestmark = pytest.mark.skipif(sc.device_count() < 4, reason="needs 4 CPU devices")


def _mesh(lib):
  return lib.make_mesh((2, 2), ("x", "y"),
                       axis_types=(lib.sharding.AxisType.Auto,) * 2)


def _sharded(lib, names, tiled):
  spec = lib.sharding.PartitionSpec

  @lib.jit
  @partial(lib.shard_map, mesh=_mesh(lib), in_specs=spec(("x", "y")),
           out_specs=spec(("x", "y")))
  def f(b):
    b = b.reshape(8, 1) if tiled else b.reshape(4, 2)
    r = lib.lax.all_to_all(b, names, split_axis=0, concat_axis=1, tiled=tiled)
    return r.reshape(1, -1)
  return f


@pytest.mark.parametrize("names", [("x", "y"), ("y", "x")])
@pytest.mark.parametrize("tiled", [True, False])
def test_shard_map_over_two_mesh_axes_as_jax(names, tiled):
  x = np.arange(32, dtype=np.float32).reshape(4, 8)
  want = _sharded(jax, names, tiled)(x)
  got = _sharded(sc, names, tiled)(x)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_shard_map_jaxpr_prints_as_jax():
  x = np.arange(32, dtype=np.float32).reshape(4, 8)
  assert (str(sc.make_jaxpr(_sharded(sc, ("x", "y"), True))(x))
          == str(jax.make_jaxpr(_sharded(jax, ("x", "y"), True))(x)))


def _nested(lib, names, sa, ca):
  inner = lambda v: lib.lax.all_to_all(v.reshape(6, 2), names, sa, ca, tiled=True)
  return lib.vmap(lib.vmap(inner, axis_name="b"), axis_name="a")


@pytest.mark.parametrize("names", [("a", "b"), ("b", "a")])
@pytest.mark.parametrize("sa,ca", [(0, 0), (0, 1)])
def test_nested_vmap_over_both_names_as_jax(names, sa, ca):
  y = np.arange(72, dtype=np.float32).reshape(2, 3, 12)
  np.testing.assert_array_equal(np.asarray(_nested(sc, names, sa, ca)(y)),
                                np.asarray(_nested(jax, names, sa, ca)(y)))


def test_grad_through_the_two_name_all_to_all_as_jax():
  y = np.linspace(-1, 1, 72, dtype=np.float32).reshape(2, 3, 12)
  w = np.arange(12, dtype=np.float32)

  def loss(lib, np_):
    def f(y):
      inner = lambda v: lib.lax.all_to_all(v, ("a", "b"), 0, 0, tiled=True)
      out = lib.vmap(lib.vmap(inner, axis_name="b"), axis_name="a")(y)
      return np_.sum(np_.sin(out) * w)
    return lib.grad(f)(y)
  np.testing.assert_allclose(np.asarray(loss(sc, jnp)), np.asarray(loss(jax, jax.numpy)),
                             rtol=1e-6)


def test_vmap_axis_between_two_mesh_axes_matches_numpy():
  # members (x, v, y) row-major: JAX 0.10.2's rule fails here (an AssertionError), so
  # NumPy is the oracle.
  z = np.arange(4 * 3 * 24, dtype=np.float32).reshape(4, 3, 24)

  @sc.jit
  @partial(sc.shard_map, mesh=_mesh(sc), in_specs=P(("x", "y")), out_specs=P(("x", "y")))
  def h(b):
    inner = lambda v: sc.lax.all_to_all(v, ("x", "v", "y"), 0, 0, tiled=True)
    return sc.vmap(inner, axis_name="v")(b[0])[None]

  members = [(i, v, j) for i in range(2) for v in range(3) for j in range(2)]
  operand = {(i, v, j): z[2 * i + j, v] for i, v, j in members}
  want = np.zeros_like(z)
  for m, (i, v, j) in enumerate(members):
    want[2 * i + j, v] = np.concatenate([operand[s][2 * m:2 * m + 2] for s in members])
  np.testing.assert_array_equal(np.asarray(h(z)), want)


def test_split_axis_not_divisible_by_the_group_as_jax():
  def run(lib):
    spec = lib.sharding.PartitionSpec
    f = lib.shard_map(lambda b: lib.lax.all_to_all(b, ("x", "y"), 0, 0, tiled=True),
                      mesh=_mesh(lib), in_specs=spec(("x", "y")), out_specs=spec(("x", "y")))
    with pytest.raises(ValueError) as e:
      lib.jit(f)(np.zeros((4, 8), np.float32))
    return str(e.value)
  assert run(sc) == run(jax)
