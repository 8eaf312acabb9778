"""`x.at[idx].apply(func)` (JAX's: `func` applied at the indices, again for a repeated
index), compared with JAX's values eagerly and under jit."""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

CASES = [
    (lambda np_, x: x.at[np_.array([1, 1, 3])].apply(lambda v: v * 2), np.arange(5.0)),
    (lambda np_, x: x.at[2].apply(np_.sin), np.arange(5.0)),
    (lambda np_, x: x.at[1:3].apply(np_.negative), np.arange(5.0)),
    (lambda np_, x: x.at[np_.array([0, 0, 0])].apply(lambda v: v + 1), np.arange(4)),
    (lambda np_, x: x.at[:, ::2].apply(np_.exp), np.ones((2, 3), np.float32)),
    (lambda np_, x: x.at[np_.array([7, 1])].apply(np_.sin, mode="drop"), np.arange(5.0)),
]


@pytest.mark.parametrize("i", range(len(CASES)))
@pytest.mark.parametrize("jit", [False, True])
def test_at_apply_as_jax(i, jit):
  f, x = CASES[i]
  want = (jax.jit(f, static_argnums=0) if jit else f)(jjnp, jjnp.asarray(x))
  got = (sc.jit(f, static_argnums=0) if jit else f)(snp, snp.asarray(x))
  assert got.dtype == want.dtype
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
