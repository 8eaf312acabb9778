"""`experimental.xla_metadata.set_xla_metadata` against JAX 0.10.2: the tagging identity's
printed jaxprs (plain, grad, vmap), values and derivatives, the context manager and the
decorator. (The metadata is not written into the lowered text: docs/differences.md.)"""
from __future__ import annotations

import types

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.experimental import xla_metadata as jxm

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft.experimental import xla_metadata as sxm

JAX = types.SimpleNamespace(lib=jax, np=jjnp, xm=jxm)
SC = types.SimpleNamespace(lib=sc, np=snp, xm=sxm)


def _tagged(m):
  def g(x):
    y = m.np.sin(x)
    return m.xm.set_xla_metadata(y * 2, breakpoint=True, tag="t")
  return g


@pytest.mark.parametrize("transform", ["plain", "vmap", "jit", "grad"])
def test_printed_jaxprs_equal_jax(transform):
  def jaxpr(m):
    f = {"plain": lambda g: g, "vmap": m.lib.vmap, "jit": m.lib.jit,
         "grad": m.lib.grad}[transform](_tagged(m))
    x = np.ones(3, np.float32) if transform == "vmap" else np.float32(1.0)
    return str(m.lib.make_jaxpr(f)(x))
  want = jaxpr(JAX)
  assert "xla_metadata_value[" in want and "xla_metadata_kvs=(('breakpoint', True)" in want
  assert jaxpr(SC) == want


def test_values_and_derivatives_equal_jax():
  x = np.linspace(-2, 2, 5, dtype=np.float32)
  for fn in (lambda m: m.lib.vmap(_tagged(m)), lambda m: m.lib.vmap(m.lib.grad(_tagged(m))),
             lambda m: m.lib.jit(m.lib.vmap(m.lib.grad(_tagged(m))))):
    np.testing.assert_allclose(np.asarray(fn(SC)(x)), np.asarray(fn(JAX)(x)), rtol=1e-6)


def test_pytrees_scalars_context_manager_and_decorator():
  def run(m):
    tree = m.xm.set_xla_metadata({"a": np.ones(2, np.float32), "b": 1.0}, k=1)
    with m.xm.set_xla_metadata(a="b"):
      inside = str(m.lib.make_jaxpr(lambda x: m.np.sin(x) * 2)(1.0))

    @m.xm.set_xla_metadata(a="c")
    def h(x):
      return x + 1
    return repr(tree), inside, float(h(1.0)), h.__name__
  assert run(SC) == run(JAX)
  assert type(sxm.set_xla_metadata()).__name__ == "XlaMetadataContextManager"
  with sxm.set_xla_metadata(a=1):
    with sxm.set_xla_metadata(b=2, a=None):
      assert sxm.current_xla_metadata() == {"b": 2}
    assert sxm.current_xla_metadata() == {"a": 1}
  assert sxm.current_xla_metadata() is None
