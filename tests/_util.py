"""Test helpers."""
from __future__ import annotations

import numpy as np

from stagecraft import core, tree_util
from stagecraft.interpreters import lowering, partial_eval as pe
from stagecraft.runtime import dispatch


def staged_call(fun, *args):
  """Runs `fun(*args)` the way jit does (trace -> lower -> compile -> execute), without the
  jit wrapper: a check that staged and eager numerics agree. Args are flat arrays; returns
  the flat outputs (a single output unwrapped)."""
  avals = [core.get_aval(a) for a in args]
  single = []

  def flat_fun(*xs):
    out = fun(*xs)
    leaves, tree = tree_util.tree_flatten(out)
    single.append(not isinstance(out, (list, tuple)))
    return leaves

  jaxpr, consts = pe.trace_to_jaxpr(flat_fun, avals)
  core.check_jaxpr(jaxpr)
  text = lowering.lower_jaxpr_to_module("staged", jaxpr)
  exe = dispatch.Executable(dispatch.compile_module(text),
                            [v.aval for v in (*jaxpr.constvars, *jaxpr.invars)],
                            jaxpr.out_avals, text)
  outs = exe.call([*consts, *args])
  return outs[0] if single[0] and len(outs) == 1 else outs


def tol(dtype) -> dict:
  """Per-dtype tolerances for comparing with NumPy."""
  dtype = np.dtype(dtype)
  return {np.dtype("float16"): dict(rtol=2e-3, atol=2e-3),
          np.dtype("float32"): dict(rtol=2e-5, atol=2e-6),
          np.dtype("float64"): dict(rtol=1e-12, atol=1e-12),
          np.dtype("complex64"): dict(rtol=2e-5, atol=2e-6)}.get(dtype, dict(rtol=1e-2, atol=1e-2)
                                                                if "bfloat16" in dtype.name
                                                                else dict(rtol=0, atol=0))


# -- the 2x2 ("data", "model") mesh of the sharding tests (4 CPU devices, conftest.py)

import pytest  # noqa: E402


@pytest.fixture(scope="module")
def mesh():
  from stagecraft.sharding import make_mesh
  return make_mesh((2, 2), ("data", "model"))


@pytest.fixture(scope="module")
def jmesh():
  """The same 2x2 mesh as JAX objects (the oracle)."""
  import jax
  import jax.sharding as jsh
  return jsh.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "model"))


def f32(*shape, seed=0):
  """A float32 array of standard normal values (seeded)."""
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
