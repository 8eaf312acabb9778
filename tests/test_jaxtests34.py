"""Details found by running JAX 0.10.2's own `api_test.py` on stagecraft through a scratch
harness (the vmap/pmap and jit parts are in test_jaxtests34_vmap.py / _jit.py). JAX is the
oracle in each test."""
import collections.abc
import re
from functools import partial

import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from _util import assert_same_error, error_of


def _same_error_modulo_addresses(ours, theirs):
  t1, m1 = error_of(ours)
  t2, m2 = error_of(theirs)
  assert t1.__name__ == t2.__name__, (t1, t2)
  unaddress = lambda m: re.sub(r"0x[0-9a-f]+", "0x", m)   # noqa: E731
  assert unaddress(m1) == unaddress(m2)


# -- a jit traced under a named axis is keyed on the axis' size (jax-ml/jax#9187) ------------

def test_jit_cache_depends_on_the_bound_axis_size():
  def sizes(lib):
    g = lib.jit(lambda: lib.lax.axis_size("i"))
    return [int(lib.vmap(g, axis_name="i", axis_size=n, out_axes=None)()) for n in (2, 3, 2)]

  assert sizes(sc) == sizes(jax) == [2, 3, 2]


# -- Python ints out of the default int range: JAX's OverflowErrors ----------------------------

@pytest.mark.parametrize("case", [
    lambda lib: lib.jit(lambda x: x + 0)(2**31),
    lambda lib: lib.jit(lambda x: x)({"a": 2**31}),
    lambda lib: lib.jit(lambda: 2**31)(),
    lambda lib: lib.device_put(2**31),
    lambda lib: lib.lax.add(2**31, 1),
    lambda lib: lib.numpy.asarray(2**31),
    lambda lib: lib.numpy.ones(2, "int32") + 2**31,
    lambda lib: 2**31 + lib.numpy.ones(2, "int32"),
    lambda lib: lib.numpy.sin(2**31),
    lambda lib: lib.vmap(lambda x: 2**31)(lib.numpy.ones(2)),
    lambda lib: lib.grad(lambda x: 2**31)(1.0),
])
def test_integer_overflow_messages_as_jax(case):
  assert_same_error(lambda: case(sc), lambda: case(jax))


# -- values that are no JAX type -----------------------------------------------------------------

@pytest.mark.parametrize("case", [
    lambda lib: lib.grad(lambda x: x)("foo"),
    lambda lib: lib.grad(lambda x: x)(np.zeros(3, dtype=object)),
    lambda lib: lib.grad(lambda x: x)(np.zeros(3, dtype="U2")),
    lambda lib: lib.device_put("foo"),
    lambda lib: lib.device_put({"a": "foo"}),
    lambda lib: lib.lax.add(1, np.array(["a"])),
    lambda lib: lib.lax.sin("a"),
    lambda lib: lib.lax.sin([1.0]),
    lambda lib: lib.lax.add(1.0, None),
])
def test_no_jax_type_messages_as_jax(case):
  assert_same_error(lambda: case(sc), lambda: case(jax))


@pytest.mark.parametrize("case", [
    lambda lib: lib.jit(lambda x: x)(np.array(["a"])),
    lambda lib: lib.numpy.sin(np.array(["a"])),
])
def test_string_arrays_are_refused_by_jit_as_jax(case):
  _same_error_modulo_addresses(lambda: case(sc), lambda: case(jax))


def test_float0_operations_raise_jax_type_error():
  def check(lib):
    zero = lib.grad(lambda x: x + 0.0, allow_int=True)(1)
    assert zero.dtype == lib.dtypes.float0
    return [error_of(lambda: zero + lib.numpy.zeros(())),
            error_of(lambda: lib.lax.add(zero, lib.numpy.zeros(())))]

  ours, theirs = check(sc), check(jax)
  assert [(t.__name__, m) for t, m in ours] == [(t.__name__, m) for t, m in theirs]
  assert ours[0][0] is TypeError and "float0s do not support any operations" in ours[0][1]


# -- Arrays, ShapeDtypeStructs, tracers --------------------------------------------------------

def test_arrays_are_not_hashable():
  x = jnp.ones(2)
  assert isinstance(x, collections.abc.Hashable) is isinstance(
      jax.numpy.ones(2), collections.abc.Hashable) is False
  with pytest.raises(TypeError, match="unhashable type"):
    hash(x)
  with pytest.raises(TypeError, match="unhashable type"):
    {x: 1}   # noqa: B018


def test_deleted_array_repr_raises_as_jax():
  def deleted(lib):
    x = lib.device_put(1.0)
    x.delete()
    return repr(x)

  assert_same_error(lambda: deleted(sc), lambda: deleted(jax))


@pytest.mark.parametrize("shape", [(2, 3), (0,), ()])
def test_shape_dtype_struct_len_as_jax(shape):
  ours, theirs = sc.ShapeDtypeStruct(shape, np.float32), jax.ShapeDtypeStruct(shape, np.float32)
  if shape:
    assert len(ours) == len(theirs) == shape[0]
  else:
    assert_same_error(lambda: len(ours), lambda: len(theirs))


@pytest.mark.parametrize("name", ["sharding", "device", "committed", "addressable_shards",
                                  "is_fully_replicated", "is_fully_addressable",
                                  "global_shards", "traceback", "no_such_attribute"])
def test_tracer_attribute_errors_as_jax(name):
  f = lambda x: getattr(x, name)   # noqa: E731 -- one function: the messages name its line
  assert_same_error(lambda: sc.jit(f)(1.0), lambda: jax.jit(f)(1.0))


@pytest.mark.parametrize("name", ["tobytes", "tolist", "delete", "devices", "is_deleted",
                                  "on_device_size_in_bytes", "unsafe_buffer_pointer",
                                  "block_until_ready", "copy_to_host_async", "__dlpack__"])
def test_tracer_method_errors_as_jax(name):
  f = lambda x: getattr(x, name)()   # noqa: E731
  assert_same_error(lambda: sc.jit(f)(1.0), lambda: jax.jit(f)(1.0))


def test_hasattr_sharding_of_a_tracer_is_false_as_jax():
  assert not sc.jit(lambda x: hasattr(x, "sharding"))(1.0)
  assert not jax.jit(lambda x: hasattr(x, "sharding"))(1.0)


@pytest.mark.parametrize("conv", [int, float, complex])
def test_scalar_conversion_of_a_traced_vector_as_jax(conv):
  f = lambda x: conv(x)   # noqa: E731
  assert_same_error(lambda: sc.jit(f)(jnp.arange(10.0)),
                    lambda: jax.jit(f)(jax.numpy.arange(10.0)))


# -- differentiation messages and linear_transpose -----------------------------------------

@pytest.mark.parametrize("case", [
    lambda lib: lib.grad(lambda x: (x, x, x), has_aux=True)(1.0),
    lambda lib: lib.grad(lambda x: 3, has_aux=True)(1.0),
    lambda lib: lib.vjp(lambda x: [x], 1.0, has_aux=True),
    lambda lib: lib.jvp(lambda x: x, 1.0, (1.0,)),
    lambda lib: lib.linear_transpose(lambda x: (x, x), 1.0)(1.0),
    lambda lib: lib.linear_transpose(lambda x: x, lib.numpy.ones(2))(lib.numpy.ones(3)),
])
def test_differentiation_messages_as_jax(case):
  assert_same_error(lambda: case(sc), lambda: case(jax))


def test_vjp_called_with_several_arguments_says_so():
  _, ours = error_of(lambda: sc.vjp(lambda x: 2 * x, 1.0)[1](1.0, 2.0))
  _, theirs = error_of(lambda: jax.vjp(lambda x: 2 * x, 1.0)[1](1.0, 2.0))
  first = lambda m: m.split("\n\n")[0]   # noqa: E731 -- JAX's first paragraph
  assert first(ours) == first(theirs)
  assert "applied to <lambda> was called with 2 arguments" in ours


def test_linear_transpose_result_crosses_jit():
  def run(lib):
    transposed = lib.jit(lambda x: lib.linear_transpose(lambda y: 2.0 * y, x))(1.0)
    assert isinstance(transposed, lib.tree_util.Partial)
    return lib.jit(lambda t, x: t(x))(transposed, 3.0)

  assert [float(v) for v in run(sc)] == [float(v) for v in run(jax)] == [6.0]


def test_pmap_static_argument_count_message_as_jax():
  f = lambda x, y: x   # noqa: E731
  assert_same_error(
      lambda: sc.pmap(f, static_broadcasted_argnums=(1,))(jnp.ones(1)),
      lambda: jax.pmap(f, static_broadcasted_argnums=(1,))(jax.numpy.ones(1)))


# -- a checkpoint policy splitting a jit equation (JAX's test_remat_of_cond_funky_custom_jvp) --

def _funky_counts(lib):
  def cond_apply(f, x):
    return lib.lax.cond(x.sum() > -lib.numpy.inf, f, lambda x: x, x)

  @lib.custom_jvp
  def sin(x):
    return lib.numpy.sin(x)

  @sin.defjvp
  def sin_jvp(primals, tangents):
    (x,), (xdot,) = primals, tangents
    y, c = lib.jit(lambda: (lib.numpy.sin(x), lib.numpy.cos(x)))()
    return y, c * xdot

  out = []
  policies = [lambda prim, *_, **__: str(prim) == "cos",
              lambda prim, *_, **__: str(prim) == "sin",
              lib.checkpoint_policies.everything_saveable,
              lib.checkpoint_policies.nothing_saveable]
  for policy in policies:
    f = lib.checkpoint(partial(cond_apply, sin), policy=policy)
    text = str(lib.make_jaxpr(lib.linearize(f, 4.0)[1])(1.0))
    out.append((float(lib.grad(f)(3.0)), float(lib.grad(lib.grad(f))(3.0)),
                text.count(" sin "), text.count(" cos ")))
  return out


def test_checkpoint_policy_of_cond_of_custom_jvp_calling_jit():
  ours, theirs = _funky_counts(sc), _funky_counts(jax)
  np.testing.assert_allclose([o[:2] for o in ours], [t[:2] for t in theirs], rtol=1e-6)
  np.testing.assert_allclose([o[:2] for o in ours], [(np.cos(3.0), -np.sin(3.0))] * 4,
                             rtol=1e-6)
  assert [o[2:] for o in ours] == [t[2:] for t in theirs]


# -- __jax_array__ objects and jnp.isscalar ------------------------------------------------------

class _WithJaxArray:
  def __init__(self, value):
    self.value = value

  def __jax_array__(self):
    return self.value


@pytest.mark.parametrize("case", [
    lambda lib: lib.jit(lambda x: x)(_WithJaxArray(lib.numpy.arange(4))),
    lambda lib: lib.numpy.sin(_WithJaxArray(lib.numpy.arange(4.0))),
])
def test_jax_array_objects_that_are_no_pytree_are_refused_by_jit_as_jax(case):
  assert_same_error(lambda: case(sc), lambda: case(jax))


def test_jax_array_objects_convert_in_asarray_as_jax():
  ours = jnp.asarray(_WithJaxArray(jnp.arange(4)))
  theirs = jax.numpy.asarray(_WithJaxArray(jax.numpy.arange(4)))
  np.testing.assert_array_equal(ours, theirs)
  assert ours.dtype == theirs.dtype


@pytest.mark.parametrize("value", [
    "a", 1, 2.5, np.float32(1), np.array(1.0), np.array([1.0]), [1], None, (), slice(3)])
def test_isscalar_as_jax(value):
  assert jnp.isscalar(value) == jax.numpy.isscalar(value)


def test_isscalar_of_arrays_and_jax_array_objects_as_jax():
  for lib in (sc, jax):
    np_ = lib.numpy
    assert np_.isscalar(np_.ones(())) and not np_.isscalar(np_.ones(2))
    assert np_.isscalar(_WithJaxArray(np_.ones(())))
    assert not np_.isscalar(_WithJaxArray(np_.ones(2)))
    assert lib.jit(lambda x: np_.isscalar(x))(1.0)   # a 0-d tracer


# -- custom_vjp: a bwd rule giving a cotangent of another float dtype (JAX's exception) --------

def test_custom_vjp_bwd_may_return_another_float_dtype_as_jax():
  def grads(lib):
    @lib.custom_vjp
    def f(x):
      return x * 2

    f.defvjp(lambda x: (f(x), None), lambda _, g: (g.astype("float32"),))
    x = lib.numpy.ones(3, "bfloat16")
    g = lib.grad(lambda x: f(x).sum())(x)
    return g.dtype, np.asarray(g), error_of(lambda: lib.grad(lambda x: (f(x) * x).sum())(x))

  ours, theirs = grads(sc), grads(jax)
  assert ours[0] == theirs[0] == np.float32
  np.testing.assert_array_equal(ours[1], theirs[1])
  assert ours[2][0] is theirs[2][0] is TypeError   # bf16 and f32 tangents meet (both raise)


def test_custom_vjp_bwd_of_another_shape_still_raises():
  @sc.custom_vjp
  def f(x):
    return x * 2

  f.defvjp(lambda x: (f(x), None), lambda _, g: (g[:2],))
  with pytest.raises(ValueError, match="Custom VJP bwd rule must produce an output with the "
                     "same type"):
    sc.grad(lambda x: f(x).sum())(jnp.ones(3))


@pytest.mark.parametrize("primals, tangents", [
    ((np.float32(2),), ()), ((np.float32(2),), [np.float32(2)]), ([np.float32(2)], (1.0,))])
def test_jvp_compares_primal_and_tangent_containers_as_jax(primals, tangents):
  f = lambda x, y=1.0: x * y   # noqa: E731
  assert_same_error(lambda: sc.jvp(f, primals, tangents), lambda: jax.jvp(f, primals, tangents))
