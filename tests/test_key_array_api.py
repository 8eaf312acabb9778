"""Typed key arrays answer JAX's Array API that reads no key values (placement, buffers,
lifetime, shards) as JAX's key arrays do."""
from __future__ import annotations

import jax
import numpy as np
import pytest

import stagecraft as sc


def _keys(lib):
  return lib.random.split(lib.random.key(0), 4)


@pytest.mark.parametrize("read", [
    lambda k: repr(k.aval), lambda k: k.nbytes, lambda k: k.is_fully_replicated,
    lambda k: k.is_fully_addressable, lambda k: k.committed,
    lambda k: sorted(d.id for d in k.devices()), lambda k: k.device.id,
    lambda k: k.on_device_size_in_bytes(), lambda k: type(k.unsafe_buffer_pointer()),
    lambda k: [(s.device.id, s.index, s.replica_id, s.data.shape, str(s.data.dtype))
               for s in k.addressable_shards],
    lambda k: [(s.index, s.data.shape) for s in k.global_shards],
    lambda k: (k.addressable_data(0).shape, str(k.addressable_data(0).dtype)),
    lambda k: np.asarray(jax.random.key_data(k.addressable_data(0))).tolist()
    if type(k).__module__.startswith("jax") else
    np.asarray(sc.random.key_data(k.addressable_data(0))).tolist(),
    lambda k: k.copy_to_host_async(),
])
def test_key_arrays_answer_as_jaxs(read):
  assert read(_keys(sc)) == read(_keys(jax))


def test_committed_keys():
  dev = sc.devices()[0]
  k = sc.device_put(_keys(sc), dev)
  jk = jax.device_put(_keys(jax), jax.devices()[0])
  assert k.committed is jk.committed is True


def test_delete_and_item():
  for lib in (jax, sc):
    k = _keys(lib)
    assert not k.is_deleted()
    k.delete()
    assert k.is_deleted()
    with pytest.raises(NotImplementedError, match="Cannot call abstract method item"):
      _keys(lib).item()
