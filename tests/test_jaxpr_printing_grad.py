"""Autodiff seeds and zeros, Python scalars passed to jit, and the argument errors of grad,
jacfwd, jacrev and jit, against JAX 0.10.2.

Printed jaxprs must equal JAX's character for character: grad's seed and scalar zero
(co)tangents are literals (`in (1.0:f32[],)`, JAX's constant folding), a Python float passed
to a jitted function prints as the Python float it is (`0.1:f32[]`), a jit of a
`functools.partial` is named after the wrapped function. Errors must have JAX's types and
messages. Values (and weak types) are compared with JAX's on the same inputs.
"""
from __future__ import annotations

import functools
import re
import types
import warnings

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

JAX = types.SimpleNamespace(lib=jax, np=jjnp, lax=jax.lax)
SC = types.SimpleNamespace(lib=sc, np=snp, lax=sc.lax)

X = np.float32(0.7)
V = np.linspace(0.1, 1.0, 3, dtype=np.float32)
VB = np.stack([V, V * 2])


def _mul(a, b):
  return a * b


# Each program: m -> (function, args), built alike for JAX and stagecraft.
PROGRAMS = {
    # grad's seed comes back untouched: a literal output, no equation.
    "grad_identity": lambda m: (m.lib.grad(lambda x: x), (X,)),
    "grad_identity_python_float": lambda m: (m.lib.grad(lambda x: x), (0.5,)),
    "grad_identity_f16": lambda m: (m.lib.grad(lambda x: x), (np.float16(1.5),)),
    "grad_identity_complex_holomorphic": lambda m: (
        m.lib.grad(lambda x: x, holomorphic=True), (np.complex64(1 + 2j),)),
    "grad_identity_of_a_pytree_leaf": lambda m: (
        m.lib.grad(lambda d: d["a"]), ({"a": X, "b": V},)),
    "value_and_grad_identity": lambda m: (m.lib.value_and_grad(lambda x: x), (X,)),
    "grad_has_aux": lambda m: (m.lib.grad(lambda x: (x, x * 2), has_aux=True), (X,)),
    # Scalar zero cotangents are literals; non-scalar ones one broadcast_in_dim.
    "grad_constant": lambda m: (m.lib.grad(lambda x: 1.0), (X,)),
    "grad_unused_scalar_argument": lambda m: (
        m.lib.grad(lambda x, y: x * 2, argnums=(0, 1)), (X, X)),
    "grad_unused_vector_argument": lambda m: (
        m.lib.grad(lambda x, y: x * 2, argnums=(0, 1)), (X, V)),
    "grad_unused_weak_arguments": lambda m: (
        m.lib.grad(lambda x, y: x * 2, argnums=(0, 1)), (0.5, 2.0)),
    "grad_unused_f16": lambda m: (
        m.lib.grad(lambda x, y: x, argnums=(0, 1)), (np.float16(1.5), np.float16(2))),
    "vjp_unused_argument": lambda m: (lambda x: m.lib.vjp(lambda a, b: a * 2, x, x)[1](x),
                                      (X,)),
    "vjp_sin": lambda m: (lambda x: m.lib.vjp(m.np.sin, x)[1](x), (X,)),
    "jvp_of_grad_identity": lambda m: (
        lambda x: m.lib.jvp(m.lib.grad(lambda y: y), (x,), (x,)), (X,)),
    "linearize": lambda m: (lambda x: m.lib.linearize(lambda a: a * 2, x)[1](x), (X,)),
    "jacrev_scalar": lambda m: (m.lib.jacrev(lambda x: x * x), (X,)),
    "jacfwd_scalar": lambda m: (m.lib.jacfwd(lambda x: x * x), (X,)),
    "jacrev_vector": lambda m: (m.lib.jacrev(m.np.sin), (V,)),
    "jacfwd_vector": lambda m: (m.lib.jacfwd(m.np.sin), (V,)),
    "jacfwd_of_grad_identity": lambda m: (m.lib.jacfwd(m.lib.grad(lambda y: y)), (X,)),
    "hessian_identity": lambda m: (m.lib.hessian(lambda x: x), (X,)),
    "hessian_scalar": lambda m: (m.lib.hessian(lambda x: x ** 3), (X,)),
    "hessian_vector": lambda m: (m.lib.hessian(lambda x: m.np.sum(x ** 3)), (V,)),
    "grad_of_grad": lambda m: (m.lib.grad(m.lib.grad(lambda y: y * y)), (X,)),
    "grad_of_clip": lambda m: (m.lib.grad(lambda x: m.np.sum(m.np.clip(x, 0.2, 0.8))), (V,)),
    "vmap_of_grad_identity": lambda m: (m.lib.vmap(m.lib.grad(lambda y: y)), (V,)),
    "vmap_of_grad_with_zero": lambda m: (m.lib.vmap(
        lambda y: m.lib.grad(lambda a, b: a * 2, argnums=1)(y, y)), (V,)),
    "vmap_of_grad_sum": lambda m: (m.lib.vmap(m.lib.grad(lambda x: m.np.sum(x ** 2))), (VB,)),
    # The literal seed / zero inside other staged programs.
    "jit_of_grad_identity": lambda m: (m.lib.jit(m.lib.grad(lambda y: y)), (X,)),
    "jit_of_grad_with_zero": lambda m: (
        m.lib.jit(lambda y: m.lib.grad(lambda a, b: a * 2, argnums=1)(y, y)), (X,)),
    "grad_identity_captured_by_jit": lambda m: (
        lambda x: m.lib.jit(lambda y: y * m.lib.grad(lambda z: z)(x))(x), (X,)),
    "grad_identity_in_cond": lambda m: (
        lambda x: m.lax.cond(x > 0, m.lib.grad(lambda y: y), lambda y: y, x), (X,)),
    "grad_identity_in_while": lambda m: (lambda x: m.lax.while_loop(
        lambda c: c < 3, lambda c: c + m.lib.grad(lambda y: y)(c), x), (X,)),
    "grad_zero_in_fori": lambda m: (lambda x: m.lax.fori_loop(
        0, 3, lambda i, c: c + m.lib.grad(lambda a, b: a, argnums=1)(c, c) + 1, x), (X,)),
    "checkpoint_of_grad_identity": lambda m: (
        m.lib.checkpoint(lambda x: m.lib.grad(lambda y: y)(x) * x), (X,)),
    # Python scalars passed to a jitted function keep their Python value in the literal.
    "jit_python_float_0.1": lambda m: (lambda x: m.lib.jit(_mul)(x, 0.1), (X,)),
    "jit_python_float_third": lambda m: (lambda x: m.lib.jit(_mul)(x, 1 / 3), (X,)),
    "jit_python_float_overflowing_f32": lambda m: (lambda x: m.lib.jit(_mul)(x, 1e40), (X,)),
    "jit_python_int": lambda m: (lambda x: m.lib.jit(_mul)(x, 3), (X,)),
    "jit_python_complex": lambda m: (lambda x: m.lib.jit(_mul)(x, 0.1 + 0.2j), (X,)),
    "jit_numpy_float32_scalar": lambda m: (lambda x: m.lib.jit(_mul)(x, np.float32(0.1)),
                                           (X,)),
    "lax_mul_python_float": lambda m: (lambda x: m.lax.mul(x, 0.1), (X,)),
    "jnp_multiply_python_float": lambda m: (lambda x: m.np.multiply(x, 1 / 3), (X,)),
    "where_python_float": lambda m: (lambda x: m.np.where(x > 0, x, 0.1), (X,)),
    "grad_through_jit_with_python_float": lambda m: (
        m.lib.grad(lambda x: m.lib.jit(_mul)(x, 0.1)), (X,)),
    # jit of a functools.partial is named after the wrapped function.
    "jit_of_partial": lambda m: (lambda x: m.lib.jit(functools.partial(_mul, 2.0))(x), (X,)),
    "jit_of_nested_partial": lambda m: (
        lambda x: m.lib.jit(functools.partial(functools.partial(_mul), 2.0))(x), (X,)),
}


def _both(name):
  return PROGRAMS[name](SC), PROGRAMS[name](JAX)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_printed_jaxpr_equals_jax(name):
  (f, args), (fj, argsj) = _both(name)
  ours = str(sc.make_jaxpr(f)(*args))
  theirs = str(jax.make_jaxpr(fj)(*argsj))
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"


@pytest.mark.parametrize("name", [
    "grad_identity", "grad_unused_scalar_argument", "grad_unused_weak_arguments",
    "jit_python_float_0.1", "jit_python_float_third", "jit_python_complex", "jacrev_vector",
    "hessian_identity", "grad_through_jit_with_python_float"])
def test_printed_jaxpr_equals_jax_with_x64(name):
  (f, args), (fj, argsj) = _both(name)
  with sc.enable_x64(), jax.enable_x64(True):
    ours = str(sc.make_jaxpr(f)(*args))
    theirs = str(jax.make_jaxpr(fj)(*argsj))
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"


def _leaves(tree, lib):
  return [(np.asarray(x), str(np.asarray(x).dtype)) for x in lib.tree.leaves(tree)]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_equal_jax(name):
  (f, args), (fj, argsj) = _both(name)
  with warnings.catch_warnings():
    # 1e40 overflows float32 when passed: both libraries warn (NumPy's cast).
    warnings.simplefilter("ignore", RuntimeWarning)
    ours = _leaves(f(*args), sc) + _leaves(sc.jit(f)(*args), sc)
    theirs = _leaves(fj(*argsj), jax) * 2
  assert len(ours) == len(theirs)
  for (a, da), (b, db) in zip(ours, theirs):
    assert da == db
    np.testing.assert_allclose(a, b, rtol=1e-6)


WEAK_TYPE_CASES = {
    "unused_weak_arguments": lambda m: m.lib.grad(lambda x, y: x, argnums=(0, 1))(1.0, 2.0),
    "unused_weak_argument_of_a_product": lambda m: m.lib.grad(
        lambda x, y: x * 2, argnums=(0, 1))(1.0, 2.0),
    "strong_arguments": lambda m: m.lib.grad(lambda x, y: x * 2, argnums=(0, 1))(X, V),
    "vjp_unused_weak_argument": lambda m: m.lib.vjp(lambda x, y: x * 2, 1.0, 2.0)[1](X),
    "jvp_constant_output": lambda m: m.lib.jvp(lambda x, y: (x * 2, 3.0), (1.0, 2.0),
                                               (1.0, 1.0))[1],
    "jit_of_grad": lambda m: m.lib.jit(m.lib.grad(lambda x, y: x, argnums=(0, 1)))(1.0, 2.0),
    "identity_of_a_pytree_leaf": lambda m: m.lib.grad(lambda d: d["a"])({"a": X, "b": V}),
}


@pytest.mark.parametrize("name", sorted(WEAK_TYPE_CASES))
def test_zero_and_seed_weak_types_equal_jax(name):
  # As JAX's zeros_like: a zero (co)tangent is weakly typed where its primal is.
  ours = sc.tree.leaves(WEAK_TYPE_CASES[name](SC))
  theirs = jax.tree.leaves(WEAK_TYPE_CASES[name](JAX))
  assert [type(x).__name__ for x in ours] == ["Array"] * len(theirs)
  assert [(x.dtype, x.weak_type) for x in ours] == [(x.dtype, x.weak_type) for x in theirs]


def test_grad_identity_inside_jit_is_a_literal_output():
  text = str(sc.make_jaxpr(sc.jit(sc.grad(lambda y: y)))(X))
  assert "in (1.0:f32[],) }" in text and "convert_element_type" not in text
  np.testing.assert_array_equal(sc.jit(sc.grad(lambda y: y))(X), np.float32(1))


def test_scalar_zero_made_while_linearizing_is_a_literal():
  # The JVP of a scan instantiates the zero tangent of its weakly typed carry; as JAX's
  # (constant folding), it is a literal, not an equation of the primal side.
  f = lambda x: snp.sum(sc.lax.scan(lambda c, a: (c + a, c * a), 0.0, x)[1])
  text = str(sc.make_jaxpr(sc.grad(f))(V))
  assert "broadcast_in_dim 0.0" not in text
  assert "] 0.0:f32[] j a c" in text   # JAX's operand order: xs residual, then stacked
  np.testing.assert_allclose(sc.grad(f)(V), jax.grad(
      lambda x: jjnp.sum(jax.lax.scan(lambda c, a: (c + a, c * a), 0.0, x)[1]))(V), rtol=1e-6)


def test_python_float_literal_keeps_the_float32_value_in_the_program():
  # Printed as the Python float, computed as float32 (JAX's values and types).
  f = lambda x: sc.jit(_mul)(x, 0.1)
  out = sc.jit(f)(np.float32(3))
  assert out.dtype == np.float32 and not out.weak_type
  assert np.asarray(out) == np.float32(3) * np.float32(0.1)
  (lit,) = [v for v in sc.make_jaxpr(f)(X).jaxpr.eqns[0].invars if hasattr(v, "val")]
  assert lit.val == 0.1 and lit.aval.weak_type and lit.aval.dtype == np.float32


def test_literal_printing_of_numpy_scalars_keeps_their_precision():
  text = str(sc.make_jaxpr(lambda x: x * np.float32(1 / 3))(X))
  assert "0.3333333432674408:f32[]" in text
  text = str(sc.make_jaxpr(lambda x: sc.jit(_mul)(x, 1 / 3))(X))
  assert "0.3333333333333333:f32[]" in text


# ---------------------------------------------------------------------------
# Errors: JAX's types and messages


def _error(thunk):
  try:
    thunk()
  except Exception as e:   # noqa: BLE001
    return type(e), str(e).split("\n--------------------")[0]
  return None


ERRORS = {
    "grad_integer_output": lambda m: m.lib.grad(lambda x: (x * 2).astype(np.int32))(X),
    "grad_bool_output": lambda m: m.lib.grad(lambda x: x > 0)(X),
    "value_and_grad_integer_output": lambda m: m.lib.value_and_grad(
        lambda x: (x * 2).astype(np.int32))(X),
    "grad_complex_output": lambda m: m.lib.grad(lambda x: x * (1 + 1j))(X),
    "grad_holomorphic_real_output": lambda m: m.lib.grad(
        lambda x: m.np.real(x), holomorphic=True)(np.complex64(1 + 1j)),
    "grad_holomorphic_real_input": lambda m: m.lib.grad(lambda x: x, holomorphic=True)(X),
    "grad_integer_input": lambda m: m.lib.grad(lambda x: x * 1.0)(np.int32(3)),
    "grad_key_input": lambda m: m.lib.grad(lambda k: 1.0)(m.lib.random.key(0)),
    "grad_key_output": lambda m: m.lib.grad(lambda x: m.lib.random.key(0))(X),
    "grad_vector_output": lambda m: m.lib.grad(lambda x: x)(V),
    "grad_none_output": lambda m: m.lib.grad(lambda x: None)(X),
    "grad_argnums_too_large": lambda m: m.lib.grad(lambda x: x, argnums=2)(X),
    "grad_argnums_tuple_too_large": lambda m: m.lib.grad(lambda x: x, argnums=(0, 3))(X),
    "grad_argnums_too_negative": lambda m: m.lib.grad(lambda x: x, argnums=-2)(X),
    "jacrev_integer_output": lambda m: m.lib.jacrev(lambda x: (x * 2).astype(np.int32))(V),
    "jacrev_complex_output": lambda m: m.lib.jacrev(lambda x: x * (1 + 1j))(V),
    "jacrev_integer_input": lambda m: m.lib.jacrev(lambda x: x * 1.0)(np.ones(3, np.int32)),
    "jacrev_key_input": lambda m: m.lib.jacrev(lambda k: 1.0)(m.lib.random.key(0)),
    "jacrev_holomorphic_integer_input": lambda m: m.lib.jacrev(
        lambda z: z * 1.0, holomorphic=True, allow_int=True)(np.ones(2, np.int32)),
    "jacrev_holomorphic_real_output": lambda m: m.lib.jacrev(
        lambda x: m.np.real(x), holomorphic=True)(np.ones(3, np.complex64)),
    "jacfwd_integer_input": lambda m: m.lib.jacfwd(lambda x: x * 1.0)(np.ones(3, np.int32)),
    "jacfwd_complex_input": lambda m: m.lib.jacfwd(lambda x: x)(np.ones(3, np.complex64)),
    "jacfwd_key_input": lambda m: m.lib.jacfwd(lambda k: 1.0)(m.lib.random.key(0)),
    "jacfwd_holomorphic_real_output": lambda m: m.lib.jacfwd(
        lambda x: m.np.real(x), holomorphic=True)(np.ones(3, np.complex64)),
    "hessian_integer_input": lambda m: m.lib.hessian(
        lambda x: x.sum() * 1.0)(np.ones(3, np.int32)),
    "jacrev_argnums_out_of_range": lambda m: m.lib.jacrev(lambda x: x, argnums=2)(X),
    "jacfwd_argnums_out_of_range": lambda m: m.lib.jacfwd(lambda x: x, argnums=-2)(X),
    "jit_non_hashable_static_argnum": lambda m: m.lib.jit(
        lambda x: x, static_argnums=0)([1, 2]),
    "jit_non_hashable_static_argname": lambda m: m.lib.jit(
        lambda x: x, static_argnames="x")(x=[1, 2]),
    "jit_non_hashable_static_dict": lambda m: m.lib.jit(
        lambda y, x: y, static_argnums=1)(1.0, {"a": 1}),
    "jit_non_hashable_static_nested": lambda m: m.lib.jit(
        lambda y, x: y, static_argnums=1)(1.0, (1, [2])),
    "jit_non_hashable_static_negative_argnum": lambda m: m.lib.jit(
        lambda y, x: y, static_argnums=-1)(1.0, [2]),
    "jit_of_partial_non_hashable_static": lambda m: m.lib.jit(
        functools.partial(_mul, 1.0), static_argnums=0)([1]),
    "pmap_non_hashable_static": lambda m: m.lib.pmap(
        lambda x, *k: x, static_broadcasted_argnums=2)(np.ones(1), 1, [2]),
    "pmap_static_argnum_not_passed": lambda m: m.lib.pmap(
        lambda x, *k: x, static_broadcasted_argnums=(1, 2))(np.ones(1), 1),
    "norm_axis_list": lambda m: m.np.linalg.norm(np.ones((2, 2)), axis=[0, 1]),
    "nansum_axis_list": lambda m: m.np.nansum(np.ones((2, 2)), axis=[0]),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_error_type_and_message_equal_jax(name):
  ours = _error(lambda: ERRORS[name](SC))
  theirs = _error(lambda: ERRORS[name](JAX))
  assert theirs is not None and ours == theirs, f"\n  stagecraft: {ours}\n  JAX: {theirs}"


def test_jacrev_of_complex_inputs_as_jax():
  # jacrev (unlike jacfwd) accepts complex inputs without holomorphic, as JAX's.
  z = np.array([1 + 2j, 3j], np.complex64)
  ours = sc.jacrev(lambda z: snp.real(z) ** 2)(z)
  theirs = jax.jacrev(lambda z: jjnp.real(z) ** 2)(z)
  assert ours.dtype == theirs.dtype
  np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_unhashable_static_argument_is_a_value_error_naming_the_value():
  with pytest.raises(ValueError, match=re.escape(
      "An error occurred while trying to hash an object of type <class 'list'>, [1, 2].")):
    sc.jit(lambda x, k: x, static_argnames="k")(1.0, k=[1, 2])


def test_fun_name_looks_through_partial():
  from stagecraft.api_util import fun_name
  assert fun_name(functools.partial(_mul, 1.0)) == "_mul"
  assert fun_name(functools.partial(functools.partial(_mul, 1.0), 2.0)) == "_mul"
  p = functools.partial(_mul, 1.0)
  p.__name__ = "named"
  assert fun_name(p) == "named"
  assert sc.make_jaxpr(functools.partial(_mul, 1.0))(X).jaxpr.debug_info.func_name == "_mul"
