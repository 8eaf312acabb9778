"""A conversion of a host NumPy array to the dtype its constant already has stages no
equation (JAX's forwarding rule for `convert_element_type`): `np.array([5., 7.])` is a
float32 constant with x64 off, so `lax.convert_element_type(n, np.float32)` is that
constant. Printed jaxprs compared with JAX's."""
import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp

N = np.array([5., 7.])
P3 = np.array([0.2, 0.3, 0.5])


def _programs(lib, np_):
  lax = lib.lax
  return {
      "alone": (lambda: lax.convert_element_type(N, np.float32), ()),
      "added": (lambda x: x + lax.convert_element_type(N, np.float32), (1.,)),
      "asarray": (lambda x: x + np_.asarray(N, np.float32), (1.,)),
      "in_scan": (lambda x: lax.scan(
          lambda c, _: (c + lax.convert_element_type(N, np.float32), None), x, length=2),
          (np.ones(2, np.float32),)),
      "in_vmap": (lambda x: lib.vmap(lambda r: r * lax.convert_element_type(N, np.float32))(x),
                  (np.ones((3, 2), np.float32),)),
      "int_constant": (lambda x: x + lax.convert_element_type(np.arange(2), np.int32),
                       (np.ones(2, np.int32),)),
      "still_converts": (lambda x: x + lax.convert_element_type(N, np.int32),
                         (np.ones(2, np.int32),)),
      "multinomial": (lambda k: lib.random.multinomial(k, N, P3, shape=(2, 3)),
                      (lib.random.key(0),)),
  }


@pytest.mark.parametrize("name", list(_programs(jax, jax.numpy)))
def test_jaxpr_as_jax(name):
  f_sc, args_sc = _programs(sc, jnp)[name]
  f_jax, args_jax = _programs(jax, jax.numpy)[name]
  assert str(sc.make_jaxpr(f_sc)(*args_sc)) == str(jax.make_jaxpr(f_jax)(*args_jax))


def test_values_unchanged():
  f_sc, args = _programs(sc, jnp)["multinomial"]
  f_jax, args_jax = _programs(jax, jax.numpy)["multinomial"]
  np.testing.assert_array_equal(np.asarray(sc.jit(f_sc)(*args)),
                                np.asarray(jax.jit(f_jax)(*args_jax)))
  out = sc.lax.convert_element_type(N, np.float32)   # eager: an Array, as JAX's
  assert isinstance(out, sc.Array) and out.dtype == np.float32


def test_jacfwd_basis_conversion_is_kept_as_jax():
  assert (str(sc.make_jaxpr(sc.jacfwd(jnp.sin))(np.ones(3, np.float32)))
          == str(jax.make_jaxpr(jax.jacfwd(jax.numpy.sin))(np.ones(3, np.float32))))
