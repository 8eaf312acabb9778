"""Details found by running JAX 0.10.2's own `random_test.py` / `random_lax_test.py` on
stagecraft through a scratch harness. JAX is the oracle: each test runs the same code on
real JAX and on stagecraft and compares values, dtypes, jaxprs and messages."""
import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp


def _key_cases(lib, np_):
  keys = lib.random.split(lib.random.key(789543))
  k42 = lib.random.key(42)
  return {
      "zeros": lambda: np_.zeros((3,), keys.dtype),
      "ones": lambda: np_.ones((2, 2), dtype=keys.dtype),
      "empty": lambda: np_.empty((2,), keys.dtype),
      "full_int": lambda: np_.full((3,), 100, keys.dtype),
      "full_float": lambda: np_.full((3,), 1.5, keys.dtype),
      "full_key_fill": lambda: np_.full((3,), k42, dtype=keys.dtype),
      "full_keys_fill": lambda: np_.full((3, 2), keys, dtype=keys.dtype),
      "full_key_no_dtype": lambda: np_.full((3,), keys[0]),
  }


@pytest.mark.parametrize("case", list(_key_cases(jax, jax.numpy)))
@pytest.mark.parametrize("jit", [False, True])
def test_filled_arrays_of_key_dtype_as_jax(case, jit):
  # jnp.zeros/ones/empty/full with a typed-key dtype give key arrays of filled key data
  want_f = _key_cases(jax, jax.numpy)[case]
  got_f = _key_cases(sc, snp)[case]
  want = (jax.jit(want_f) if jit else want_f)()
  got = (sc.jit(got_f) if jit else got_f)()
  assert isinstance(got, sc.random.PRNGKeyArray)
  assert str(got.dtype) == str(want.dtype) and got.shape == want.shape
  np.testing.assert_array_equal(np.asarray(sc.random.key_data(got)),
                                np.asarray(jax.random.key_data(want)))
  assert str(sc.make_jaxpr(got_f)()) == str(jax.make_jaxpr(want_f)())
