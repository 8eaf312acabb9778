"""Details found by running JAX 0.10.2's own `tests/lax_test.py` on stagecraft through a
scratch harness: `lax.bitcast_convert_type` to and from the sub-byte integers (int4/uint4)
counts their widths in bits (an int4[4] is one float16) and lowers them as StableHLO's
i4/ui4. JAX is the oracle."""
import jax
import ml_dtypes
import numpy as np
import pytest

import stagecraft as sc
from stagecraft import lax


BITCASTS = [((4,), "int4", "float16"), ((2, 4), "uint4", "int16"), ((3,), "float16", "uint4"),
            ((2,), "int8", "int4"), ((2, 3), "int4", "uint4"), ((8,), "uint4", "float32")]


@pytest.mark.parametrize("shape,src,dst", BITCASTS)
def test_bitcast_sub_byte_as_jax(shape, src, dst):
  x = (np.arange(np.prod(shape)) % 7).reshape(shape).astype(getattr(ml_dtypes, src, src))
  want = jax.lax.bitcast_convert_type(x, dst)
  for f in (lax.bitcast_convert_type, sc.jit(lax.bitcast_convert_type, static_argnums=1)):
    got = f(x, dst)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got).view(np.uint8 if got.dtype.itemsize == 1
                                                       else got.dtype),
                                  np.asarray(want).view(np.uint8 if want.dtype.itemsize == 1
                                                        else want.dtype))
  assert (str(sc.make_jaxpr(lambda x: lax.bitcast_convert_type(x, dst))(x))
          == str(jax.make_jaxpr(lambda x: jax.lax.bitcast_convert_type(x, dst))(x)))


def test_bitcast_sub_byte_vmapped_as_jax():
  x = (np.arange(12) % 5).reshape(3, 4).astype(ml_dtypes.int4)
  want = jax.vmap(lambda r: jax.lax.bitcast_convert_type(r, np.float16))(x)
  got = sc.vmap(lambda r: lax.bitcast_convert_type(r, np.float16))(x)
  assert got.dtype == want.dtype and got.shape == want.shape
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_bitcast_sub_byte_width_mismatch_message_as_jax():
  x = np.zeros((3,), ml_dtypes.int4)

  def message(lax_):
    with pytest.raises(ValueError) as e:
      lax_.bitcast_convert_type(x, np.float16)
    return str(e.value)
  assert message(lax) == message(jax.lax)


# The sub-byte integers are integers to lax's elementwise primitives (JAX's `test_int4_*`):
# arithmetic, shifts, bitwise and comparisons accept int4/uint4; abs rejects them with JAX's
# narrow-width message.
SUB_BYTE_BINARY = ["add", "sub", "mul", "div", "rem", "max", "min", "shift_left",
                   "shift_right_arithmetic", "shift_right_logical", "bitwise_and",
                   "bitwise_or", "bitwise_xor", "eq", "ne", "gt", "ge", "lt", "le"]


def _sub_byte_operands(dtype):
  lo = -8 if dtype == "int4" else 0
  r = np.random.default_rng(0)
  x = r.integers(lo, lo + 16, 40).astype(dtype)
  y = r.integers(lo, lo + 16, 40)
  return x, np.where(y == 0, 1, y).astype(dtype)


@pytest.mark.parametrize("dtype", ["int4", "uint4"])
@pytest.mark.parametrize("name", SUB_BYTE_BINARY)
def test_sub_byte_binary_ops_as_jax(name, dtype):
  x, y = _sub_byte_operands(dtype)
  want = getattr(jax.lax, name)(x, y)
  got = getattr(lax, name)(x, y)
  assert got.dtype == want.dtype
  np.testing.assert_array_equal(np.asarray(got).astype(int), np.asarray(want).astype(int))


@pytest.mark.parametrize("dtype", ["int4", "uint4"])
@pytest.mark.parametrize("name", ["neg", "sign", "bitwise_not"])
def test_sub_byte_unary_ops_as_jax(name, dtype):
  x, _ = _sub_byte_operands(dtype)
  want, got = getattr(jax.lax, name)(x), getattr(lax, name)(x)
  assert got.dtype == want.dtype
  np.testing.assert_array_equal(np.asarray(got).astype(int), np.asarray(want).astype(int))


@pytest.mark.parametrize("dtype", ["int4", "uint4"])
def test_sub_byte_iota_and_abs_message_as_jax(dtype):
  got, want = lax.iota(dtype, 5), jax.lax.iota(dtype, 5)
  assert got.dtype == want.dtype
  np.testing.assert_array_equal(np.asarray(got).astype(int), np.asarray(want).astype(int))

  def message(lax_):
    with pytest.raises(TypeError) as e:
      lax_.abs(lax_.iota(dtype, 3))
    return str(e.value)
  assert message(lax) == message(jax.lax)


@pytest.mark.parametrize("dtype", ["int2", "uint2", "int4", "uint4"])
@pytest.mark.parametrize("kind", [np.signedinteger, np.unsignedinteger, np.integer, np.number,
                                  np.floating, np.generic, np.int8, "int4", "uint4"])
def test_sub_byte_issubdtype_as_jax(dtype, kind):
  assert sc.dtypes.issubdtype(dtype, kind) == jax.dtypes.issubdtype(dtype, kind)
