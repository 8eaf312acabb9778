"""Typed keys through `pmap` (mapped and unmapped, in and out, with collectives), compared
with JAX: the programs' shardings cover the key data's trailing axis."""
from __future__ import annotations

import jax
import numpy as np
import pytest

import stagecraft as sc


def _data(lib, x):
  return np.asarray(lib.random.key_data(x)) if hasattr(x, "dtype") and "key" in str(
      x.dtype) else np.asarray(x)


PROGRAMS = {
    "normal": lambda lib: lib.pmap(lambda k: lib.random.normal(k, (3,)))(
        lib.random.split(lib.random.key(0), 4)),
    "split_out": lambda lib: lib.pmap(lambda k: lib.random.split(k, 3))(
        lib.random.split(lib.random.key(1), 4)),
    "identity": lambda lib: lib.pmap(lambda k: k)(lib.random.split(lib.random.key(2), 4)),
    "unmapped_key": lambda lib: lib.pmap(
        lambda x, k: x + lib.random.uniform(k), in_axes=(0, None))(
        np.arange(4.0, dtype=np.float32), lib.random.key(3)),
    "fold_in_axis_index": lambda lib: lib.pmap(
        lambda x, k: x + lib.random.bits(lib.random.fold_in(k, lib.lax.axis_index("i"))),
        axis_name="i", in_axes=(0, None))(np.arange(4, dtype=np.uint32), lib.random.key(4)),
    "keys_2d": lambda lib: lib.pmap(lambda k: lib.random.normal(k[1]))(
        lib.random.split(lib.random.key(5), (4, 2))),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_pmap_of_keys_as_jax(name):
  want, got = PROGRAMS[name](jax), PROGRAMS[name](sc)
  assert str(got.dtype) == str(want.dtype) and got.shape == want.shape
  np.testing.assert_array_equal(_data(sc, got), _data(jax, want))
