"""JAX 0.10.2's signatures for stagecraft's top level and lax (part `sigs`)."""
import inspect

import jax
import numpy as np

import stagecraft


def test_convert_element_type_operand_keyword():
  """Parameter names match JAX's and `operand=` by keyword gives JAX's value and dtype."""
  jp = list(inspect.signature(jax.lax.convert_element_type).parameters)
  sp = list(inspect.signature(stagecraft.lax.convert_element_type).parameters)
  assert sp[:len(jp)] == jp == ["operand", "new_dtype"]
  x = np.array([1.5, -2.25, 3.0], np.float32)
  a = jax.lax.convert_element_type(operand=x, new_dtype=np.int32)
  b = stagecraft.lax.convert_element_type(operand=x, new_dtype=np.int32)
  assert a.dtype == b.dtype
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  ja = jax.make_jaxpr(lambda v: jax.lax.convert_element_type(operand=v, new_dtype=np.int32))(x)
  sa = stagecraft.make_jaxpr(
      lambda v: stagecraft.lax.convert_element_type(operand=v, new_dtype=np.int32))(x)
  assert str(ja) == str(sa)


def test_key_dtype_impl_spec_keyword():
  """`random.key_dtype(impl_spec=...)` as JAX's: same parameter names and the same dtype."""
  assert (list(inspect.signature(jax.random.key_dtype).parameters)
          == list(inspect.signature(stagecraft.random.key_dtype).parameters))
  assert str(jax.random.key_dtype(impl_spec="threefry2x32")) == str(
      stagecraft.random.key_dtype(impl_spec="threefry2x32"))
