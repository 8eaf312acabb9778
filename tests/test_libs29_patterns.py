"""Patterns from mujoco-mjx, ott-jax, dynamax, netket and kfac-jax (their own test suites and
small programs) that differed under stagecraft, each run in plain JAX code on JAX and on
stagecraft in the same test and compared. The libraries themselves are not in the `test`
extra."""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.interpreters import batching as jbatching

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft.interpreters import batching as sbatching

APIS = {"jax": (jax, jjnp, jbatching), "stagecraft": (sc, snp, sbatching)}


@pytest.mark.parametrize("api", list(APIS))
def test_register_vmappable_at_import_time(api):
  # mujoco.mjx's warp types module calls batching.register_vmappable(DataWarp, int, int,
  # to_elt, from_elt, None) when `from mujoco import mjx` runs: stagecraft raised there.
  lib, np_, batching = APIS[api]

  class Blob:   # a fresh type: registering it touches nothing else
    def __init__(self, x):
      self.x = x

  def to_elt(cont, get_idx, b, spec):
    return Blob(cont(b.x, spec))

  def from_elt(cont, size, b, spec):
    return Blob(cont(size, b.x, spec))

  assert batching.register_vmappable(Blob, int, int, to_elt, from_elt, None) is None
  if api == "stagecraft":   # (JAX keeps these in jax._src.interpreters.batching)
    assert batching.is_vmappable(Blob(1)) and not batching.is_vmappable(np.ones(2))
    assert int in batching.spec_types
  # Ordinary vmaps are unaffected by the registration.
  x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
  out = lib.vmap(lambda r: np_.sin(r) * 2.0)(x)
  np.testing.assert_allclose(np.asarray(out), np.sin(x) * 2.0, rtol=1e-6)
  assert batching.unregister_vmappable(Blob) is None


def test_vmap_over_registered_vmappable_raises_on_stagecraft():
  # JAX runs the handlers; stagecraft does not (docs/differences.md): it says so at the call.
  class Blob2:
    def __init__(self, x):
      self.x = x

  sbatching.register_vmappable(Blob2, int, int, None, None, None)
  with pytest.raises(NotImplementedError, match="Blob2 was registered with register_vmappable"):
    sc.vmap(lambda b: b.x)(Blob2(np.ones(3, np.float32)))
  # A pytree that does not hold one still maps.
  out = sc.vmap(lambda t: t[0] + t[1])((np.ones(3, np.float32), np.arange(3.0, dtype=np.float32)))
  np.testing.assert_array_equal(np.asarray(out), np.arange(3.0) + 1)
