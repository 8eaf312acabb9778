"""Shared by the explicit-sharding test files: the same program run on stagecraft and on
JAX 0.10.2 over a 2x2 mesh of Explicit axes, and the comparisons of their results."""
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

JP = jsh.PartitionSpec


@pytest.fixture(scope="module")
def meshes():
  """(stagecraft mesh, JAX mesh): 2x2, axes ("x", "y"), both Explicit."""
  mesh = make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
  jmesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(jsh.AxisType.Explicit,) * 2)
  return mesh, jmesh


def value(shape=(8, 4), seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


class Lib:
  """The library a program runs on (`ours`: stagecraft, else JAX)."""

  def __init__(self, ours: bool):
    self.ours = ours
    self.sc = sc if ours else jax
    self.np, self.lax, self.P = (jnp, lax, P) if ours else (jjnp, jax.lax, JP)
    self.random = sc.random if ours else jax.random
    self.rs = reshard if ours else jax.sharding.reshard
    self.NS = NamedSharding if ours else jsh.NamedSharding
    self.typeof = sc.typeof if ours else jax.typeof


def both(meshes, prog, spec=("x", None), shape=(8, 4)):
  """prog(lib, mesh, x) on both libraries under their mesh, x laid out by `spec`."""
  mesh, jmesh = meshes
  v = value(shape)
  out = []
  for lib, m, setm in ((Lib(True), mesh, set_mesh), (Lib(False), jmesh, jax.set_mesh)):
    x = lib.sc.device_put(v, lib.NS(m, lib.P(*spec)))
    with setm(m):
      out.append(prog(lib, m, x))
  return out


def check_same(r1, r2, rtol=0.0, atol=0.0):
  """Same printed type, spec and values (within the tolerances)."""
  assert str(sc.typeof(r1)) == str(jax.typeof(r2))
  assert repr(r1.sharding.spec) == repr(r2.sharding.spec)
  np.testing.assert_allclose(np.asarray(r1), np.asarray(r2), rtol=rtol, atol=atol)
