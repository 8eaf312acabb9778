"""Printed jaxprs of grad, scatter, reduction and indexing programs equal JAX 0.10.2's.

JAX is the oracle (tests only): each program is traced by both `jax.make_jaxpr` and
`stagecraft.make_jaxpr` and the printed texts are compared; the values (and dtypes) of the
programs are compared too.
"""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import jax.scipy.special as jss
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp
import stagecraft.scipy.special as sss

_X3 = np.arange(3, dtype=np.float32) - 1.0
_Y3 = np.asarray([0.5, -2.0, 3.0], np.float32)
_X5 = np.asarray([3.0, -1.0, 4.0, 1.5, -5.0], np.float32)
_IDX = np.asarray([0, -2], np.int32)
_V2 = np.asarray([2.0, -7.0], np.float32)


def _grad(J, N, f):
  return J.grad(f(N), argnums=(0, 1))


# name -> (builder(api, numpy_module, special_module) -> function, args)
CASES = {
    # 1. instantiated zero tangents follow the primal equation whose JVP made them
    "grad_stack": (lambda J, N, S: J.grad(lambda x, y: N.sum(N.stack([x, y]) ** 2)),
                   (_X3, _Y3)),
    "grad_stack_axis1": (lambda J, N, S: J.grad(
        lambda x, y: N.sum(N.sin(N.stack([x, y], axis=1))), argnums=1), (_X3, _Y3)),
    # 2. scatter combiners print as JAX's update_consts/update_jaxpr params
    "at_add": (lambda J, N, S: lambda x, i, v: x.at[i].add(v), (_X5, _IDX, _V2)),
    "at_subtract": (lambda J, N, S: lambda x, i, v: x.at[i].subtract(v), (_X5, _IDX, _V2)),
    "at_multiply": (lambda J, N, S: lambda x, i, v: x.at[i].multiply(v), (_X5, _IDX, _V2)),
    "at_min": (lambda J, N, S: lambda x, i, v: x.at[i].min(v), (_X5, _IDX, _V2)),
    "at_max": (lambda J, N, S: lambda x, i, v: x.at[i].max(v), (_X5, _IDX, _V2)),
    "at_set": (lambda J, N, S: lambda x, i, v: x.at[i].set(v), (_X5, _IDX, _V2)),
    "at_add_int": (lambda J, N, S: lambda x: x.at[1].add(3), (np.arange(4, dtype=np.int32),)),
    "at_max_bool": (lambda J, N, S: lambda x: x.at[0].max(True), (np.zeros(3, np.bool_),)),
    "grad_at_add": (lambda J, N, S: J.grad(
        lambda x, v: N.sum(x.at[np.array([0, 2])].add(v) ** 2), argnums=(0, 1)),
        (_X5, _V2)),
    # 4. reductions over axis=() still bind the reduction
    "sum_axis_empty": (lambda J, N, S: lambda x: N.sum(x, axis=()), (np.float32(1.5),)),
    "sum_scalar": (lambda J, N, S: N.sum, (np.float32(1.5),)),
    "max_axis_empty": (lambda J, N, S: lambda x: N.max(x, axis=()), (np.float32(1.5),)),
    "min_vec_axis_empty": (lambda J, N, S: lambda x: N.min(x, axis=()), (_X3,)),
    "prod_vec_axis_empty": (lambda J, N, S: lambda x: N.prod(x, axis=()), (_X3,)),
    "max_keepdims_empty": (lambda J, N, S: lambda x: N.max(x, axis=(), keepdims=True),
                           (_X3,)),
    "mean_axis_empty": (lambda J, N, S: lambda x: N.mean(x, axis=()), (_X3,)),
    "any_axis_empty": (lambda J, N, S: lambda x: N.any(x > 0, axis=()), (_X3,)),
    "all_float": (lambda J, N, S: N.all, (_X3,)),
    "any_int": (lambda J, N, S: N.any, (np.asarray([0, 2, 0], np.int32),)),
    "any_complex": (lambda J, N, S: N.any, (np.asarray([0j, 1j], np.complex64),)),
    "all_scalar": (lambda J, N, S: lambda x: N.all(x, axis=()), (np.float32(0.0),)),
    "logsumexp_scalar": (lambda J, N, S: S.logsumexp, (np.float32(1.0),)),
    # 5. indexing
    "index_traced_array": (lambda J, N, S: lambda x, i: x[i], (_X5, _IDX)),
    "index_numpy_array": (lambda J, N, S: lambda x: x[np.array([0, -1])], (_X5,)),
    "index_numpy_int8": (lambda J, N, S: lambda x: x[np.array([0, -1], np.int8)], (_X5,)),
    "index_numpy_2d": (lambda J, N, S: lambda x: x[np.array([[0, -1]]), np.array([1])],
                       (np.arange(25, dtype=np.float32).reshape(5, 5),)),
    "index_step2": (lambda J, N, S: lambda x: x[::2], (_X5,)),
    "index_step3": (lambda J, N, S: lambda x: x[1::3], (_X5,)),
    "index_reverse": (lambda J, N, S: lambda x: x[::-1], (_X5,)),
    "index_jnp_array": (lambda J, N, S: lambda x: x[N.array([0, -1])], (_X5,)),
    "grad_index_numpy": (lambda J, N, S: J.grad(lambda x: N.sum(x[np.array([0, -1])] ** 2)),
                         (_X5,)),
    "gather_fill_int": (lambda J, N, S: lambda x: x.at[np.array([1, 7])].get(
        mode="fill", fill_value=1), (_X5,)),
}


def _build(name, mod):
  build, args = CASES[name]
  if mod == "jax":
    return build(jax, jjnp, jss), args
  return build(sc, snp, sss), args


@pytest.mark.parametrize("name", sorted(CASES))
def test_printed_jaxpr_equals_jax(name):
  f_jax, args = _build(name, "jax")
  f_sc, _ = _build(name, "sc")
  expected = str(jax.make_jaxpr(f_jax)(*args))
  got = str(sc.make_jaxpr(f_sc)(*args))
  assert got == expected


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_equal_jax(name):
  f_jax, args = _build(name, "jax")
  f_sc, _ = _build(name, "sc")
  want = jax.tree_util.tree_leaves(f_jax(*[jjnp.asarray(a) for a in args]))
  got = jax.tree_util.tree_leaves(f_sc(*[snp.asarray(a) for a in args]),
                                  is_leaf=lambda x: not isinstance(x, (tuple, list, dict)))
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert np.asarray(g).dtype == np.asarray(w).dtype
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["sum_axis_empty", "max_keepdims_empty", "any_axis_empty",
                                  "index_numpy_array", "index_numpy_int8", "at_min"])
def test_values_equal_jax_x64(name):
  with jax.enable_x64(True):
    f_jax, args = _build(name, "jax")
    want = jax.tree_util.tree_leaves(f_jax(*[jjnp.asarray(a) for a in args]))
  with sc.enable_x64():
    f_sc, _ = _build(name, "sc")
    got = f_sc(*[snp.asarray(a) for a in args])
    assert np.asarray(got).dtype == np.asarray(want[0]).dtype
    np.testing.assert_allclose(np.asarray(got), np.asarray(want[0]), rtol=1e-6)


def test_numpy_index_normalization_large_axis_int8():
  # An axis too long for the index dtype: the wrap happens in int32 (no int8 overflow).
  x = np.arange(300, dtype=np.float32)
  i = np.array([-1, 5], np.int8)
  np.testing.assert_array_equal(sc.jit(lambda x: x[i])(x), x[[-1, 5]])
  np.testing.assert_array_equal(sc.jit(lambda x, i: x[i])(x, i), x[[-1, 5]])


def test_reductions_over_no_axes_keep_dtype_and_weak_type():
  # A weak scalar becomes strongly typed (a reduction's result), as in JAX.
  for fn in ("sum", "max", "prod", "any", "all"):
    got = getattr(snp, fn)(2.0, axis=())
    want = getattr(jjnp, fn)(2.0, axis=())
    assert got.dtype == want.dtype and got.weak_type == want.weak_type, fn
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_grad_of_stack_values_with_zero_tangent():
  f = lambda N: (lambda x, y: N.sum(N.sin(N.stack([x, 2 * y])) * x))
  got = sc.grad(f(snp), argnums=(0, 1))(_X3, _Y3)
  want = jax.grad(f(jjnp), argnums=(0, 1))(_X3, _Y3)
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)
  sc.test_util.check_grads(f(snp), (_X3, _Y3), order=1, modes=("fwd", "rev"))
