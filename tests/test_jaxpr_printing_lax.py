"""Printed jaxprs of small `stagecraft.lax` programs against JAX 0.10.2's, character for
character (x64 off and on): `full`/`full_like`/`broadcast` of shape `()` and the conversion
of host scalars (constants: literals, no equation), iterating a traced array (one
`slice[strides=(1, ...)]` and `squeeze` per row), the batching rules of gather, scatter,
dynamic_slice and dynamic_update_slice (CLIP gathers/scatters with JAX's NumPy-int
dimension numbers), `lu` (three results, the permutation computed inside its lowering),
the int64 triangle masks of `cholesky` under x64 and `triangular_solve` with a vector
right-hand side. Also their values, dtypes and weak types (eager and under `jit`), their
`vmap` and `grad` where it applies, and error paths.
"""
from __future__ import annotations

import contextlib
import types

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft.test_util import check_grads

JAX = types.SimpleNamespace(lib=jax, np=jjnp, lax=jax.lax)
SC = types.SimpleNamespace(lib=sc, np=snp, lax=sc.lax)

_rng = np.random.RandomState(0)
F = np.float32(1.5)
X3 = np.arange(3, dtype=np.float32) / 3
X234 = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
I2 = np.array([0, 2], np.int32)
U224 = np.ones((2, 2, 4), np.float32)
A33 = _rng.randn(3, 3).astype(np.float32)
A243 = _rng.randn(2, 4, 3).astype(np.float32)
SPD = (A33 @ A33.T + 3 * np.eye(3)).astype(np.float32)
TRI = (np.tril(A33) + 3 * np.eye(3)).astype(np.float32)
B3 = np.arange(1, 4, dtype=np.float32)

# name -> (m -> function, args). m: a namespace (m.lib is `jax` or `stagecraft`).
PROGRAMS = {
    # --- filled arrays and converted host scalars: constants (literals), no equation
    "full_scalar": (lambda m: lambda s: m.lax.full((), 1.0), (F,)),
    "full_scalar_int8_wraps": (lambda m: lambda s: m.lax.full((), 300, np.int8), (F,)),
    "full_vector_int8_wraps": (lambda m: lambda s: m.lax.full((2,), 300, np.int8), (F,)),
    "full_tracer_fill": (lambda m: lambda s: m.lax.full((), s, np.int32), (F,)),
    "full_tracer_fill_same_dtype": (lambda m: lambda s: m.lax.full((), s), (F,)),
    "full_like_weak_int": (lambda m: lambda s: m.lax.full_like(s, 1), (1,)),
    "full_like_weak_float": (lambda m: lambda s: m.lax.full_like(s, 2.0), (1.0,)),
    "full_like_float_into_int": (lambda m: lambda s: m.lax.full_like(s, 3.5), (1,)),
    "full_like_int8_wraps": (lambda m: lambda s: m.lax.full_like(s, 300), (np.int8(1),)),
    "full_like_shape_scalar": (lambda m: lambda x: m.lax.full_like(x, 2.0, shape=()), (X3,)),
    "full_like_tracer_fill": (lambda m: lambda x, y: m.lax.full_like(x, y), (1.0, np.int32(3))),
    "full_like_tracer_fill_shape": (lambda m: lambda x: m.lax.full_like(x, x, shape=(2,)),
                                    (1,)),
    "full_like_dtype": (lambda m: lambda x: m.lax.full_like(x, 2, np.float16), (X3,)),
    "broadcast_host_scalar": (lambda m: lambda s: m.lax.broadcast(1.0, ()), (F,)),
    "broadcast_in_dim_host_scalar": (lambda m: lambda s: m.lax.broadcast_in_dim(1.0, (), ()),
                                     (F,)),
    "broadcast_identity": (lambda m: lambda x: m.lax.broadcast_in_dim(x, (3,), (0,)), (X3,)),
    "convert_float_literal": (
        lambda m: lambda s: s * m.lax.convert_element_type(1e-5, np.float32), (F,)),
    "convert_int_to_float": (lambda m: lambda s: m.lax.convert_element_type(3, np.float32),
                             (F,)),
    "convert_big_int": (lambda m: lambda s: m.lax.convert_element_type(2 ** 40, np.float32),
                        (F,)),
    "convert_numpy_scalar": (
        lambda m: lambda s: m.lax.convert_element_type(np.float64(3), np.float32), (F,)),
    "convert_same_numpy_scalar": (
        lambda m: lambda s: m.lax.convert_element_type(np.float32(2.5), np.float32), (F,)),
    "convert_float_to_int": (lambda m: lambda s: m.lax.convert_element_type(2.5, np.int32),
                             (F,)),
    "convert_to_float16": (lambda m: lambda s: m.lax.convert_element_type(2.5, np.float16),
                           (F,)),
    "convert_bool": (lambda m: lambda s: m.lax.convert_element_type(True, np.float32), (F,)),
    "convert_0d_ndarray": (
        lambda m: lambda s: m.lax.convert_element_type(np.array(2.5), np.int32), (F,)),
    "convert_tracer": (lambda m: lambda s: m.lax.convert_element_type(s, np.int32), (F,)),
    "stage_scalar": (lambda m: lambda s: m.lax.stage(2.0), (F,)),
    "zeros_like_weak": (lambda m: lambda s: m.np.zeros_like(s), (1.0,)),
    "jnp_full_scalar": (lambda m: lambda s: m.np.full((), 3), (1.0,)),
    # --- iterating a traced array: index_in_dim per row
    "tuple_rows": (lambda m: lambda x: tuple(x), (X234,)),
    "list_vector": (lambda m: lambda x: list(x), (X3,)),
    "for_rows": (lambda m: lambda x: [r * 2 for r in x], (X234,)),
    "unpack_rows": (lambda m: lambda x: (lambda a, b: a + b)(*x), (X234,)),
    "iterate_under_vmap": (lambda m: m.lib.vmap(lambda x: tuple(x)), (X234,)),
    "iterate_under_grad": (lambda m: m.lib.grad(lambda x: sum(r.sum() for r in x)), (X234,)),
    # --- gather/scatter batching: NumPy-int dimension numbers, dynamic_slice as CLIP gathers
    "vmap_at_set": (lambda m: m.lib.vmap(lambda x, i: x.at[i].set(0)), (X234, I2)),
    "vmap_at_set_static": (lambda m: m.lib.vmap(lambda x: x.at[1].set(0)), (X234,)),
    "vmap_at_add_unbatched_idx": (
        lambda m: m.lib.vmap(lambda x, i: x.at[i].add(1.0), (0, None)), (X234, I2)),
    "vmap_getitem": (lambda m: m.lib.vmap(lambda x, i: x[i]), (X234, I2)),
    "vmap_getitem_unbatched_x": (lambda m: m.lib.vmap(lambda i: m.np.asarray(X234)[i]), (I2,)),
    "vmap_getitem_array_index": (lambda m: m.lib.vmap(lambda x: x[np.array([0, 2])]),
                                 (X234,)),
    "vmap_vmap_getitem": (lambda m: m.lib.vmap(m.lib.vmap(lambda x, i: x[i]), (0, None)),
                          (np.ones((2, 3, 4, 5), np.float32), np.array([0, 1, 2], np.int32))),
    "grad_vmap_getitem": (
        lambda m: m.lib.grad(lambda x, i: m.lib.vmap(lambda x, i: x[i])(x, i).sum()),
        (X234, I2)),
    "vmap_dynamic_slice": (
        lambda m: m.lib.vmap(lambda x, i: m.lax.dynamic_slice(x, (i, np.int32(0)), (2, 4))),
        (X234, I2)),
    "vmap_dynamic_slice_unbatched_index": (
        lambda m: m.lib.vmap(lambda x: m.lax.dynamic_slice(x, (np.int32(1), np.int32(0)),
                                                            (2, 4))), (X234,)),
    "vmap_dynamic_slice_unbatched_operand": (
        lambda m: m.lib.vmap(lambda i: m.lax.dynamic_slice(X234[0], (i, np.int32(0)),
                                                            (2, 4))), (I2,)),
    "vmap_dynamic_slice_axis1": (
        lambda m: m.lib.vmap(lambda x: m.lax.dynamic_slice(x, (1, 2), (2, 2)), in_axes=1,
                             out_axes=1), (np.ones((4, 3, 5), np.float32),)),
    "vmap_dynamic_update_slice": (
        lambda m: m.lib.vmap(lambda x, i, u: m.lax.dynamic_update_slice(
            x, u, (i, np.int32(0)))), (X234, I2, U224)),
    "vmap_dynamic_update_slice_unbatched_index": (
        lambda m: m.lib.vmap(lambda x, u: m.lax.dynamic_update_slice(
            x, u, (np.int32(1), np.int32(0)))), (X234, U224)),
    "vmap_dynamic_update_slice_unbatched_update": (
        lambda m: m.lib.vmap(lambda x, i: m.lax.dynamic_update_slice(
            x, U224[0], (i, np.int32(0)))), (X234, I2)),
    # --- lu: three results
    "lu": (lambda m: m.lax.linalg.lu, (A33,)),
    "lu_wide_batched": (lambda m: m.lax.linalg.lu, (A243.transpose(0, 2, 1).copy(),)),
    "lu_tall_batched": (lambda m: m.lax.linalg.lu, (A243,)),
    "lu_empty": (lambda m: m.lax.linalg.lu, (np.zeros((0, 3), np.float32),)),
    "vmap_lu": (lambda m: m.lib.vmap(m.lax.linalg.lu), (A243,)),
    "vmap_lu_axis1": (lambda m: m.lib.vmap(m.lax.linalg.lu, in_axes=1), (A243,)),
    "jit_lu": (lambda m: m.lib.jit(m.lax.linalg.lu), (A33,)),
    "det": (lambda m: m.np.linalg.det, (A33,)),
    # --- cholesky: the triangle mask's iotas (int64 under x64)
    "cholesky": (lambda m: m.lax.linalg.cholesky, (SPD,)),
    "cholesky_f64": (lambda m: m.lax.linalg.cholesky, (SPD.astype(np.float64),)),
    "cholesky_batched": (lambda m: m.lax.linalg.cholesky, (np.stack([SPD, SPD]),)),
    # --- triangular_solve with a vector right-hand side
    **{f"triangular_solve_vector_left{int(left)}_lower{int(lower)}": (
        (lambda left, lower: lambda m: lambda a, b: m.lax.linalg.triangular_solve(
            a, b, left_side=left, lower=lower))(left, lower),
        (TRI if lower else TRI.T.copy(), B3))
       for left in (True, False) for lower in (True, False)},
    "triangular_solve_vector_batched": (
        lambda m: lambda a, b: m.lax.linalg.triangular_solve(a, b, left_side=True, lower=True,
                                                              transpose_a=True),
        (np.stack([TRI, TRI]), np.stack([B3, B3 + 1]))),
    "triangular_solve_conjugate_real": (
        lambda m: lambda a, b: m.lax.linalg.triangular_solve(a, b, left_side=True, lower=True,
                                                              conjugate_a=True),
        (TRI, B3[:, None])),
    "triangular_solve_conjugate_complex": (
        lambda m: lambda a, b: m.lax.linalg.triangular_solve(a, b, left_side=True, lower=True,
                                                              conjugate_a=True),
        (TRI.astype(np.complex64) * (1 + 1j), B3[:, None].astype(np.complex64))),
    "vmap_triangular_solve_vector": (
        lambda m: m.lib.vmap(lambda a, b: m.lax.linalg.triangular_solve(
            a, b, left_side=True, lower=True)), (np.stack([TRI, TRI]), np.stack([B3, B3]))),
    "grad_triangular_solve_vector": (
        lambda m: m.lib.grad(lambda a, b: m.lax.linalg.triangular_solve(
            a, b, left_side=True, lower=True).sum(), (0, 1)), (TRI, B3)),
}

def _x64(lib, on):
  if not on:
    return contextlib.nullcontext()
  return sc.enable_x64() if lib is sc else jax.enable_x64(True)


def _text(m, name, x64):
  prog, args = PROGRAMS[name]
  with _x64(m.lib, x64):
    return str(m.lib.make_jaxpr(prog(m))(*args))


@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_printed_jaxpr_equals_jax(name, x64):
  assert _text(SC, name, x64) == _text(JAX, name, x64)


def _leaves(tree, lib):
  return lib.tree_util.tree_leaves(tree)


def _same_values(ours, theirs, name):
  lo, lt = _leaves(ours, sc), _leaves(theirs, jax)
  assert len(lo) == len(lt), name
  for o, t in zip(lo, lt):
    # NB: eager functions of NumPy inputs may give NumPy results (iterating a NumPy array)
    assert isinstance(o, sc.Array) == isinstance(t, jax.Array), (name, type(o), type(t))
    no, nt = np.asarray(o), np.asarray(t)
    assert no.dtype == nt.dtype and no.shape == nt.shape, (name, no.dtype, nt.dtype)
    assert bool(getattr(o, "weak_type", False)) == bool(getattr(t, "weak_type", False)), name
    if no.dtype == jax.dtypes.float0:
      continue
    if np.issubdtype(no.dtype, np.inexact):
      tol = 1e-5 if no.dtype in (np.float32, np.complex64) else 1e-12
      np.testing.assert_allclose(no, nt, rtol=tol, atol=tol, err_msg=name)
    else:
      np.testing.assert_array_equal(no, nt, err_msg=name)


@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_equal_jax(name, x64):
  prog, args = PROGRAMS[name]
  with _x64(jax, x64):
    theirs = prog(JAX)(*args)
  with _x64(sc, x64):
    f = prog(SC)
    _same_values(f(*args), theirs, name)
    jitted = sc.jit(f)(*args)
    assert all(isinstance(o, sc.Array) for o in _leaves(jitted, sc)), name
    _same_values(jitted, theirs if all(isinstance(t, jax.Array) for t in _leaves(theirs, jax))
                 else jax.jit(prog(JAX))(*args), name)


# ---------------------------------------------------------------------------
# Eager results of the constant paths: Arrays of JAX's dtype and weak type.


@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize("make", [
    lambda m: m.lax.full((), 1.0),
    lambda m: m.lax.full((), 2, np.int16),
    lambda m: m.lax.full_like(1, 7),
    lambda m: m.lax.full_like(np.float32(1), 7),
    lambda m: m.lax.convert_element_type(1e-5, np.float32),
    lambda m: m.lax.convert_element_type(300, np.uint8),
    lambda m: m.lax.convert_element_type(np.float64(2.5), np.int32),
    lambda m: m.lax.convert_element_type(np.array(2.5), np.float16),
    lambda m: m.lax.broadcast(3, ()),
    lambda m: m.lax.broadcast_in_dim(np.ones(3, np.float32), (3,), (0,)),
    lambda m: m.lax.stage(1.5),
    lambda m: m.lax.stage(np.int8(3)),
    lambda m: m.lax.stage(np.arange(3)),
])
def test_eager_constants_are_arrays_as_jax(make, x64):
  with _x64(jax, x64):
    theirs = make(JAX)
  with _x64(sc, x64):
    _same_values(make(SC), theirs, "eager")


def test_staged_constant_keeps_its_value_under_transformations():
  """The staged constants (literals) differentiate and batch as constants."""
  f = lambda x: x * sc.lax.convert_element_type(1e-5, np.float32) + sc.lax.full_like(x, 2)
  g = lambda x: x * jax.lax.convert_element_type(1e-5, np.float32) + jax.lax.full_like(x, 2)
  np.testing.assert_allclose(sc.grad(f)(F), jax.grad(g)(F), rtol=1e-6)
  np.testing.assert_allclose(sc.vmap(f)(X3), jax.vmap(g)(X3), rtol=1e-6)
  assert str(sc.make_jaxpr(sc.grad(f))(F)) == str(jax.make_jaxpr(jax.grad(g))(F))
  assert str(sc.make_jaxpr(sc.vmap(f))(X3)) == str(jax.make_jaxpr(jax.vmap(g))(X3))


def test_complex_scalar_to_bool_warns_and_folds_as_jax():
  """complex -> bool of a host scalar converts on the host with NumPy's rule (both parts
  tested: True for 1j), after JAX's ComplexWarning; staged, it is a literal."""
  for m in (SC, JAX):
    with pytest.warns(np.exceptions.ComplexWarning):
      text = str(m.lib.make_jaxpr(lambda s: m.lax.convert_element_type(1j, np.bool_))(F))
    assert text == "{ lambda ; a:f32[]. let  in (True:bool[],) }"
    with pytest.warns(np.exceptions.ComplexWarning):
      assert bool(m.lax.convert_element_type(1j, np.bool_)) is True


def test_full_errors_as_jax():
  with pytest.raises(TypeError, match="full must be called with scalar fill_value"):
    sc.lax.full((2,), np.ones(2))
  with pytest.raises(TypeError):
    sc.lax.stage(object())


def test_iterating_a_zero_d_tracer_raises():
  with pytest.raises(TypeError, match="iteration over a 0-d array"):
    sc.jit(lambda x: list(x))(F)


def test_iterated_rows_differentiate():
  f = lambda x: sum((r * r).sum() * (i + 1) for i, r in enumerate(x))
  with sc.enable_x64():
    check_grads(f, (X234.astype(np.float64),), order=1, modes=("fwd", "rev"))


# ---------------------------------------------------------------------------
# gather/scatter batching: derivatives of the batched rules.


def test_batched_dynamic_slices_differentiate():
  def f(x, i):
    y = sc.vmap(lambda x, i: sc.lax.dynamic_slice(x, (i, np.int32(0)), (2, 4)))(x, i)
    z = sc.vmap(lambda x, i, u: sc.lax.dynamic_update_slice(x, u, (i, np.int32(0))))(
        x, i, y * 2)
    return (z * z).sum() + (y ** 3).sum()
  with sc.enable_x64():
    check_grads(lambda x: f(x, I2), (X234.astype(np.float64),), order=1,
                modes=("fwd", "rev"))


def test_batched_gather_out_of_range_index_clamps_as_jax():
  i = np.array([5, -9], np.int32)
  ours = sc.vmap(lambda x, i: sc.lax.dynamic_slice(x, (i, np.int32(0)), (2, 4)))(X234, i)
  theirs = jax.vmap(lambda x, i: jax.lax.dynamic_slice(x, (i, np.int32(0)), (2, 4)))(X234, i)
  np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


# ---------------------------------------------------------------------------
# lu: three results; the JVP gives float0 tangents to the pivots and the permutation.


def test_lu_primitive_has_three_results():
  jaxpr = sc.make_jaxpr(sc.lax.linalg.lu)(A33)
  eqn, = jaxpr.jaxpr.eqns
  assert eqn.primitive is sc.lax.linalg.lu_p
  assert [str(v.aval.str_short()) for v in eqn.outvars] == ["f32[3,3]", "i32[3]", "i32[3]"]
  lu, piv, perm = (np.asarray(r) for r in sc.lax.linalg.lu(A243))
  for b in range(2):
    l = np.tril(lu[b], -1)[:, :3] + np.eye(4, 3)
    u = np.triu(lu[b])[:3]
    np.testing.assert_allclose(A243[b][perm[b]], l @ u, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(perm, np.asarray(sc.lax.linalg.lu_pivots_to_permutation(
      piv, 4)))


@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 4), (2, 3, 3)])
def test_lu_jvp_as_jax(shape):
  a = _rng.randn(*shape).astype(np.float32)
  t = _rng.randn(*shape).astype(np.float32)
  (lo, po, qo), (dlo, dpo, dqo) = sc.jvp(sc.lax.linalg.lu, (a,), (t,))
  (lt, pt, qt), (dlt, dpt, dqt) = jax.jvp(jax.lax.linalg.lu, (a,), (t,))
  np.testing.assert_allclose(np.asarray(dlo), np.asarray(dlt), rtol=2e-4, atol=2e-4)
  assert np.asarray(dpo).dtype == np.asarray(dqo).dtype == jax.dtypes.float0
  assert np.asarray(dqo).shape == np.asarray(dqt).shape
  with sc.enable_x64():
    check_grads(lambda x: sc.lax.linalg.lu(x)[0], (a.astype(np.float64),), order=1,
                modes=("fwd", "rev"))


def test_lu_x64_and_solve_values():
  with sc.enable_x64():
    a = A33.astype(np.float64)
    lu, _, perm = sc.lax.linalg.lu(a)
    assert np.asarray(lu).dtype == np.float64 and np.asarray(perm).dtype == np.int32
    np.testing.assert_allclose(np.asarray(snp.linalg.solve(a, B3.astype(np.float64))),
                               np.linalg.solve(a, B3), rtol=1e-12)
    check_grads(lambda a: snp.linalg.det(a), (a,), order=1, modes=("fwd", "rev"))


# ---------------------------------------------------------------------------
# triangular_solve with a vector right-hand side.


@pytest.mark.parametrize("left", [True, False])
def test_triangular_solve_vector_values_and_grads(left):
  a = TRI.astype(np.float64)
  b = B3.astype(np.float64)
  x = np.asarray(sc.lax.linalg.triangular_solve(a, b, left_side=left, lower=True))
  expect = np.linalg.solve(a if left else a.T, b)
  np.testing.assert_allclose(x, expect, rtol=1e-5)
  with sc.enable_x64():
    x = np.asarray(sc.lax.linalg.triangular_solve(a, b, left_side=left, lower=True))
    assert x.dtype == np.float64
    np.testing.assert_allclose(x, expect, rtol=1e-12)
    check_grads(lambda a, b: sc.lax.linalg.triangular_solve(a, b, left_side=left,
                                                            lower=True),
                (a, b), order=1, modes=("fwd", "rev"))


def test_triangular_solve_bad_rank_raises():
  with pytest.raises((TypeError, ValueError)):
    sc.lax.linalg.triangular_solve(TRI, np.float32(1), left_side=True)
  with pytest.raises((TypeError, ValueError)):
    sc.lax.linalg.triangular_solve(TRI, np.ones(4, np.float32), left_side=True)
