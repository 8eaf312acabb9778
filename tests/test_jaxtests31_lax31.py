"""Details found by running JAX 0.10.2's own `tests/lax_test.py` on stagecraft through a
scratch harness: `lax.bitcast_convert_type` to and from the sub-byte integers (int4/uint4)
counts their widths in bits (an int4[4] is one float16) and lowers them as StableHLO's
i4/ui4. JAX is the oracle."""
import functools

import jax
import jax.test_util
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


# lax.composite is JAX's `composite` primitive: one equation, lowered as a
# `stablehlo.composite` whose decomposition is the private function `@<name>`, attributes
# from the keyword arguments, not differentiable (JAX's ValueError).
def _composite_texts(lib):
  @functools.partial(lib.lax.composite, name="my.square", version=1)
  def square(x):
    return x ** 2

  def tangent(x):
    def dec(x, **_):
      return lib.lax.sin(x) / lib.lax.cos(x)
    return lib.lax.composite(dec, "my.tangent")(
        x, dtype=np.dtype(np.float32), int=1, omit=None, str="bar",
        tensor=np.zeros((1, 2), np.float32), tensor_r1=np.zeros((2,), np.float32))

  @functools.partial(lib.lax.composite, name="my.ident")
  def ident(*a):
    return a

  x = np.float32(2.0)
  v = np.linspace(0, 1, 4).astype(np.float32)
  return (np.asarray(square(x)), np.asarray(lib.jit(tangent)(v)),
          [np.asarray(o) for o in ident(x, v)],
          str(lib.make_jaxpr(square)(x)), str(lib.make_jaxpr(ident)(x, v)),
          lib.jit(square).lower(x).as_text(), lib.jit(tangent).lower(v).as_text(),
          lib.jit(ident).lower(x, v).as_text())


def test_composite_as_jax():
  got, want = _composite_texts(sc), _composite_texts(jax)
  np.testing.assert_array_equal(got[0], want[0])
  np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
  for g, w in zip(got[2], want[2]):
    np.testing.assert_array_equal(g, w)
  assert got[3:] == want[3:]


def test_composite_errors_as_jax():
  def messages(lib):
    sq = lib.lax.composite(lambda x: x * x, name="my.square")
    out = []
    for call in (lambda: lib.grad(sq)(1.0), lambda: lib.jvp(sq, (1.0,), (2.0,))):
      with pytest.raises(ValueError) as e:
        call()
      out.append(str(e.value))

    def closes(x, scale):
      return lib.lax.composite(lambda y: y / scale, name="my.consts")(x)

    def attr(x):
      return lib.lax.composite(lambda y, **_: y, name="my.attr")(x, t=x + 1)
    for f in (closes, attr):
      with pytest.raises(lib.errors.UnexpectedTracerError) as e:
        lib.jit(f)(np.ones(3, np.float32), *([np.ones(3, np.float32)] if f is closes else []))
      out.append(str(e.value))
    return out
  assert messages(sc) == messages(jax)


def test_composite_vmap_message_as_jax():
  def message(lib):
    sq = lib.lax.composite(lambda x: x * x, name="my.square")
    with pytest.raises(NotImplementedError) as e:
      lib.vmap(sq)(np.ones(3, np.float32))
    return str(e.value)
  assert message(sc) == message(jax)


# jax.test_util.check_grads works under jax_numpy_dtype_promotion='strict' (JAX's
# lax_autodiff_test runs so): its tolerance dtype joins complex and real dtypes regardless.
@pytest.mark.parametrize("op,dtype", [("abs", np.complex64), ("real", np.complex64),
                                      ("imag", np.complex64)])
def test_check_grads_under_strict_promotion_as_jax(op, dtype):
  x = np.array([1.0 + 2j, 0.5 - 1j] if dtype == np.complex64 else [1.0, 0.5], dtype)
  args = (x,) if op != "mul" else (x, x)

  def run(lib, check):
    with lib.numpy_dtype_promotion("strict"):
      check(getattr(lib.lax, op), args, 2, ["fwd", "rev"], 1e-1, 1e-1)
  run(jax, jax.test_util.check_grads)
  run(sc, sc.test_util.check_grads)


# check_grads' finite differences count equal infinite values as no change (JAX's
# safe subtraction): a max-window over padding only is -inf on both sides.
def test_check_grads_infinite_outputs_as_jax():
  x = np.arange(24, dtype=np.float32).reshape(4, 6) / 7

  def run(lib, check):
    f = lambda v: lib.lax.reduce_window(v, -np.inf, lib.lax.max, (2, 1), (1, 2),
                                        [(0, 3), (1, 2)])
    check(f, (x,), 2, ["fwd", "rev"], 6e-2, 6e-2, 1e-2)
    return np.asarray(sc.test_util.numerical_jvp(f, (x,), (np.ones_like(x),), 1e-2))
  run(jax, jax.test_util.check_grads)
  out = run(sc, sc.test_util.check_grads)
  assert not np.isnan(out).any()


# lax.squeeze's errors in JAX's words and types (JAX's testSqueezeShapeCheck).
@pytest.mark.parametrize("shape,dims", [((1, 2, 3), (0, 0)), ((1, 2, 3), (3,)),
                                        ((1, 2, 3), (-4,)), ((1, 2, 3), (1,)),
                                        ((1, 2, 3), (None,)), ((1, 2, 3), (0, -3))])
def test_squeeze_errors_as_jax(shape, dims):
  x = np.ones(shape, np.float32)

  def error(lax_):
    with pytest.raises((TypeError, ValueError)) as e:
      lax_.squeeze(x, dims)
    return type(e.value), str(e.value)
  assert error(lax) == error(jax.lax)


# dynamic_slice / dynamic_update_slice keep each start index's dtype (a Python int the
# default int's) and reject mixed ones in JAX's words (JAX's testDynamicSliceTypeErrors);
# the *_in_dim forms give the other dimensions zeros of the index's dtype.
@pytest.mark.parametrize("idx", [(1, np.int16(2)), (np.int16(1), np.int32(2)),
                                 (np.uint8(1), np.int32(1)), (0.5, 0)])
@pytest.mark.parametrize("name", ["dynamic_slice", "dynamic_update_slice"])
def test_dynamic_slice_index_dtypes_as_jax(name, idx):
  x = np.ones((3, 4), np.float32)

  def error(lax_):
    args = (x, idx, (2, 2)) if name == "dynamic_slice" else (x, x[:2, :2], idx)
    with pytest.raises(TypeError) as e:
      getattr(lax_, name)(*args)
    return str(e.value)
  assert error(lax) == error(jax.lax)


@pytest.mark.parametrize("index", [np.int16(1), np.uint8(1), 1])
def test_dynamic_in_dim_index_dtypes_as_jax(index):
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  for name, args in [("dynamic_index_in_dim", (x, index, 1)),
                     ("dynamic_slice_in_dim", (x, index, 2, 1)),
                     ("dynamic_update_index_in_dim", (x, x[:, 0], index, 1))]:
    want, got = getattr(jax.lax, name)(*args), getattr(lax, name)(*args)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# reduce_window's non-positive window dimensions and strides: JAX's TypeError message.
@pytest.mark.parametrize("op", ["add", "max", "min"])
@pytest.mark.parametrize("dims,strides", [((0,), (1,)), ((1,), (0,))])
def test_reduce_window_nonpositive_message_as_jax(op, dims, strides):
  def error(lax_):
    with pytest.raises(TypeError) as e:
      lax_.reduce_window(np.ones((1,), np.float32), np.float32(0), getattr(lax_, op), dims,
                         strides, "VALID")
    return str(e.value)
  assert error(lax) == error(jax.lax)
