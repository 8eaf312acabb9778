"""Printed jaxprs, values and errors of lax/AD corners against JAX 0.10.2 (the oracle):
scan's transpose (weak-typed carries, residual order, constant cotangents), vmap of grad of a
cond, names of unnamed callables, the jitted `dynamic_index_in_dim` /
`dynamic_update_index_in_dim`, complex Python scalars converted to real dtypes, and the `copy`
primitive staged by `jnp.array(x, copy=True)`."""
from __future__ import annotations

import functools
import types
import warnings

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax._src import util as jax_util

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import api_util
from stagecraft.lax import slicing

JAX = types.SimpleNamespace(lib=jax, np=jjnp, lax=jax.lax)
SC = types.SimpleNamespace(lib=sc, np=snp, lax=sc.lax)

X3 = np.arange(1.0, 4.0, dtype=np.float32)
X34 = (np.arange(12, dtype=np.float32).reshape(3, 4) + 1) / 7
W = np.float32(0.5)


def _texts(make, args):
  return [str(m.lib.make_jaxpr(make(m))(*args)) for m in (JAX, SC)]


def _values(make, args):
  outs = [jax.tree_util.tree_leaves(make(m)(*args)) if m is JAX else
          sc.tree_util.tree_leaves(make(m)(*args)) for m in (JAX, SC)]
  assert len(outs[0]) == len(outs[1])
  for a, b in zip(*outs):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_allclose(b, a, rtol=2e-6, atol=1e-6)


def assert_same(make, args, values=True):
  """The printed jaxprs of `make(JAX)` and `make(SC)` on `args` are equal (and the values)."""
  jtext, stext = _texts(make, args)
  assert stext == jtext, f"\n--- jax\n{jtext}\n--- stagecraft\n{stext}"
  if values:
    _values(make, args)


# ---------------------------------------------------------------------------
# a. scan's transpose: no weak-type conversions of the carried cotangents, JAX's residual
# order, constant cotangents accumulated where they are made.

SCAN_GRADS = {
    "weak_carry_and_ys": (lambda m: m.lib.grad(lambda x: (lambda c, ys: c + ys.sum())(
        *m.lax.scan(lambda c, v: (c * m.np.sin(v) + 1.0, c * 2.0), 1.0, x))), (X3,)),
    "weak_carry_product": (lambda m: m.lib.grad(
        lambda x: m.lax.scan(lambda c, v: (c * v, c), 1.0, x)[0]), (X3,)),
    "closed_over_const": (lambda m: m.lib.grad(lambda x, w: m.lax.scan(
        lambda c, v: (c * w + m.np.sin(v), c), 0.0, x)[0], argnums=(0, 1)), (X3, W)),
    "two_carries": (lambda m: m.lib.grad(lambda x: sum(m.lax.scan(
        lambda c, v: ((c[0] * v, c[1] + c[0]), c[1]), (1.0, 2.0), x)[0])), (X3,)),
    "strong_init": (lambda m: m.lib.grad(
        lambda x: m.lax.scan(lambda c, v: (c * v, c), np.float32(1), x)[0]), (X3,)),
    "reverse": (lambda m: m.lib.grad(lambda x: m.lax.scan(
        lambda c, v: (c * m.np.cos(v), c), 1.0, x, reverse=True)[0]), (X3,)),
    "cumsum_like": (lambda m: m.lib.grad(
        lambda x: m.lax.scan(lambda c, v: (c + v, c + v), 0.0, x)[1].sum()), (X3,)),
    "fori_loop_index": (lambda m: m.lib.grad(
        lambda x: m.lax.fori_loop(0, 3, lambda i, c: c * x[i], 1.0)), (X3,)),
    "linearize": (lambda m: lambda x, t: m.lib.linearize(
        lambda x: m.lax.scan(lambda c, v: (c * m.np.sin(v), c), 1.0, x)[0], x)[1](t),
        (X3, X3)),
    "vjp": (lambda m: lambda x, t: m.lib.vjp(lambda x: m.lax.scan(
        lambda c, v: (c * m.np.sin(v), c * 2.0), 1.0, x), x)[1](t), (X3, (np.float32(1), X3))),
}


@pytest.mark.parametrize("name", sorted(SCAN_GRADS))
def test_scan_transpose_prints_as_jax(name):
  make, args = SCAN_GRADS[name]
  assert_same(make, args)


def test_scan_transpose_has_no_weak_type_conversion():
  make, args = SCAN_GRADS["weak_carry_product"]
  text = str(sc.make_jaxpr(make(SC))(*args))
  assert "weak_type=True" not in text.split("reverse=False")[-1]


def test_scan_transpose_of_closed_over_const_with_x64():
  make, _ = SCAN_GRADS["closed_over_const"]
  with jax.enable_x64(True), sc.enable_x64():
    args = (X3.astype(np.float64), np.float64(0.5))
    assert_same(make, args)


def test_scan_grad_matches_finite_differences():
  f = lambda x, w: sc.lax.scan(lambda c, v: (c * w + snp.sin(v), c), 0.0, x)[0]
  sc.test_util.check_grads(f, (X3, W), order=1, modes=("fwd", "rev"))


# ---------------------------------------------------------------------------
# b. vmap of grad of a cond: the batched index is used as it is (no clamp).


@pytest.mark.parametrize("branches", ["sin_cos", "square_neg"])
def test_vmap_grad_cond_has_no_clamp(branches):
  def make(m):
    t, f = ((m.np.sin, m.np.cos) if branches == "sin_cos" else
            (lambda x: x * x, lambda x: -x))
    return m.lib.vmap(m.lib.grad(lambda x: m.lax.cond(x > 1, t, f, x)))
  jtext, stext = _texts(make, (X3,))
  assert "clamp" not in stext
  assert stext == jtext   # (residuals a branch lacks are `empty2` fillers, as JAX's)
  _values(make, (X3,))


def test_vmap_switch_out_of_range_index_clamps_as_jax():
  def make(m):
    return m.lib.vmap(lambda i, x: m.lax.switch(i, [m.np.sin, m.np.cos, lambda y: y * 3], x))
  idx = np.array([-4, 0, 1, 2, 7], np.int32)
  xs = np.linspace(0.1, 1.0, 5).astype(np.float32)
  _values(make, (idx, xs))
  assert str(sc.make_jaxpr(make(SC))(idx, xs)).count("clamp") == 1   # switch's own


# ---------------------------------------------------------------------------
# c. Names of callables without `__name__`: `<unnamed function>`, as JAX.


class _Doubler:
  def __call__(self, x):
    return x * 2


class _Named:
  __name__ = "custom_name"

  def __call__(self, x):
    return x + 1


def _add(x, y):
  return x + y


@pytest.mark.parametrize("fun", [
    _Doubler(), _Named(), functools.partial(_add, y=1.0), functools.partial(_Doubler()),
    lambda x: x - 1, jjnp.sin, np.sin], ids=["object", "named_object", "partial",
                                            "partial_of_object", "lambda", "jnp_sin",
                                            "np_ufunc"])
def test_fun_name_matches_jax(fun):
  assert api_util.fun_name(fun) == jax_util.fun_name(fun)


@pytest.mark.parametrize("fun", [_Doubler(), functools.partial(_Doubler()), _Named()],
                         ids=["object", "partial_of_object", "named_object"])
def test_jit_of_unnamed_callable_prints_as_jax(fun):
  assert_same(lambda m: m.lib.jit(fun), (X3,))


def test_unnamed_callable_in_jit_messages():
  # as JAX 0.10: the callable object's repr names it in the argument error
  with pytest.raises(TypeError, match=r"argument to <.*_Doubler object at 0x"):
    sc.jit(_Doubler())("a")


# ---------------------------------------------------------------------------
# d. dynamic_index_in_dim and dynamic_update_index_in_dim are jit calls, as JAX's.

INDEX_CASES = {
    "traced_index": (lambda m: lambda x, i: m.lax.dynamic_index_in_dim(x, i), (X3, np.int32(1))),
    "python_index": (lambda m: lambda x: m.lax.dynamic_index_in_dim(x, 2), (X3,)),
    "negative_python_index": (lambda m: lambda x: m.lax.dynamic_index_in_dim(x, -1, 1),
                              (X34,)),
    "no_keepdims_axis1": (lambda m: lambda x, i: m.lax.dynamic_index_in_dim(
        x, i, axis=1, keepdims=False), (X34, np.int32(-2))),
    "no_negative": (lambda m: lambda x, i: m.lax.dynamic_index_in_dim(
        x, i, allow_negative_indices=False), (X34, np.int32(2))),
    "update_scalar": (lambda m: lambda x, i: m.lax.dynamic_update_index_in_dim(x, 1.0, i, 0),
                      (X3, np.int32(1))),
    "update_row": (lambda m: lambda x, u, i: m.lax.dynamic_update_index_in_dim(x, u, i, 0),
                   (X34, X34[0] * 3, np.int32(-1))),
    "update_column_python_index": (lambda m: lambda x, u: m.lax.dynamic_update_index_in_dim(
        x, u, 3, 1), (X34, X34[:, :1])),
    "vmap": (lambda m: m.lib.vmap(lambda x, i: m.lax.dynamic_index_in_dim(x, i, 0, False),
                                  (None, 0)), (X34, np.array([0, 2, -1], np.int32))),
    "grad": (lambda m: m.lib.grad(lambda x, i: m.lax.dynamic_index_in_dim(x, i, 1).sum()),
             (X34, np.int32(2))),
    "weak_index_in_fori": (lambda m: lambda x: m.lax.fori_loop(
        0, 3, lambda i, c: c + m.lax.dynamic_index_in_dim(x, i, 0, False), 0.0), (X3,)),
}


@pytest.mark.parametrize("name", sorted(INDEX_CASES))
def test_index_in_dim_prints_as_jax(name):
  make, args = INDEX_CASES[name]
  assert_same(make, args)


def test_index_in_dim_eager_values_and_x64():
  for make, args in INDEX_CASES.values():
    _values(make, args)
  with jax.enable_x64(True), sc.enable_x64():
    make, args = INDEX_CASES["no_keepdims_axis1"]
    assert_same(make, (X34.astype(np.float64), np.int64(-2)))
    assert_same(lambda m: lambda x: m.lax.dynamic_index_in_dim(x, 1), (X3,))


def test_index_in_dim_eager_calls_reuse_one_traced_body():
  x = snp.asarray(X34)
  sc.lax.dynamic_index_in_dim(x, 1, 1)
  before = len(slicing._jitted_bodies)
  for i in range(4):
    np.testing.assert_array_equal(sc.lax.dynamic_index_in_dim(x, i, 1), X34[:, i:i + 1])
  assert len(slicing._jitted_bodies) == before


def test_index_in_dim_under_disable_jit_is_inline():
  with sc.disable_jit():
    out = sc.lax.dynamic_index_in_dim(snp.asarray(X34), 1)
  np.testing.assert_array_equal(out, X34[1:2])


def test_index_in_dim_errors():
  with pytest.raises(TypeError, match="index arguments to dynamic_slice must be integers"):
    sc.lax.dynamic_index_in_dim(X3, 1.5)
  with pytest.raises(TypeError, match="rank"):
    sc.lax.dynamic_update_index_in_dim(X34, np.ones((1, 1, 4), np.float32), 0, 0)


# ---------------------------------------------------------------------------
# e. A Python complex converted to a real dtype raises JAX's (NumPy's) TypeError.


def _outcome(f):
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
      out = ("ok", np.asarray(f()).item())
    except Exception as e:   # noqa: BLE001  (the oracle decides what is raised)
      out = (type(e).__name__, str(e))
  return out, sorted({str(w.message) for w in caught})


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "uint8", "int8",
                                   "bool", "complex64"])
def test_convert_python_complex(dtype):
  got = [_outcome(lambda: m.lax.convert_element_type(1 + 2j, getattr(jjnp, dtype)))
         for m in (JAX, SC)]
  assert got[1] == got[0]
  if dtype not in ("bool", "complex64"):
    assert got[1][0][0] == "TypeError"


@pytest.mark.parametrize("case", ["np_complex_scalar", "np_complex_array", "jnp_float32",
                                  "jnp_int32", "asarray", "astype", "in_jit", "full",
                                  "float_to_int"])
def test_complex_conversions_match_jax(case):
  def run(m):
    if case == "np_complex_scalar":
      return m.lax.convert_element_type(np.complex64(1 + 2j), jjnp.float32)
    if case == "np_complex_array":
      return m.lax.convert_element_type(np.array([1 + 2j]), jjnp.float32)[0]
    if case == "jnp_float32":
      return m.np.float32(1 + 2j)
    if case == "jnp_int32":
      return m.np.int32(1 + 2j)
    if case == "asarray":
      return m.np.asarray(1 + 2j, jjnp.float32)
    if case == "astype":
      return m.np.asarray(1 + 2j).astype(jjnp.float32)
    if case == "in_jit":
      return m.lib.jit(lambda: m.lax.convert_element_type(1 + 2j, jjnp.float32))()
    if case == "full":
      return m.lax.full((2,), 1 + 2j, jjnp.float32)[0]
    return m.lax.convert_element_type(1.5, jjnp.int32)
  assert _outcome(lambda: run(SC)) == _outcome(lambda: run(JAX))


def test_traced_complex_to_real_keeps_the_real_part():
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
    assert_same(lambda m: lambda z: m.lax.convert_element_type(z, jjnp.float32),
                (np.complex64(1 + 2j),), values=False)
    assert float(sc.jit(lambda z: sc.lax.convert_element_type(z, np.float32))(
        np.complex64(1 + 2j))) == 1.0


# ---------------------------------------------------------------------------
# f. The `copy` primitive.

COPY_CASES = {
    "array": (lambda m: lambda x: m.np.array(x), (X3,)),
    "array_copy_true": (lambda m: lambda x: m.np.array(x, copy=True), (X3,)),
    "array_copy_false": (lambda m: lambda x: m.np.array(x, copy=False), (X3,)),
    "array_dtype": (lambda m: lambda x: m.np.array(x, jjnp.int32), (X3,)),
    "array_same_dtype": (lambda m: lambda i: m.np.array(i, jjnp.int32), (np.int32(3),)),
    "array_weak_scalar": (lambda m: lambda x: m.np.array(x * 2.0) + 1, (np.float32(1.5),)),
    "asarray": (lambda m: lambda x: m.np.asarray(x), (X3,)),
    "asarray_copy_true": (lambda m: lambda x: m.np.asarray(x, copy=True), (X3,)),
    "copy": (lambda m: lambda x: m.np.copy(x), (X3,)),
    "method_copy": (lambda m: lambda x: x.copy(), (X3,)),
    "primitive": (lambda m: lambda x: m.lax.copy_p.bind(x), (X34,)),
    "grad": (lambda m: m.lib.grad(lambda x: (m.np.array(x) * x).sum()), (X3,)),
    "vmap": (lambda m: m.lib.vmap(lambda x: m.np.array(x, copy=True) * 2, 1), (X34,)),
    "jvp": (lambda m: lambda x, t: m.lib.jvp(lambda y: m.np.copy(y), (x,), (t,)), (X3, X3)),
    "jit": (lambda m: m.lib.jit(lambda x: m.np.array(x) + 1), (X3,)),
}


@pytest.mark.parametrize("name", sorted(COPY_CASES))
def test_copy_prints_as_jax(name):
  make, args = COPY_CASES[name]
  assert_same(make, args)


def test_copy_primitive_rules():
  assert sc.lax.copy_p.name == "copy" and jax.lax.copy_p.name == "copy"
  x = snp.asarray(X34)
  y = sc.lax.copy_p.bind(x)
  np.testing.assert_array_equal(y, X34)
  assert sc.typeof(sc.lax.copy_p.bind(snp.asarray(2.0))).weak_type
  f = lambda x: sc.lax.copy_p.bind(x) * snp.sin(x)
  sc.test_util.check_grads(f, (X3,), order=2, modes=("fwd", "rev"))
  np.testing.assert_array_equal(sc.vmap(sc.lax.copy_p.bind, 1, 1)(x), X34)


def test_eager_copy_survives_deleting_the_original():
  x = snp.asarray(X3)
  for y in (snp.array(x), snp.array(x, copy=True), snp.copy(x), x.copy()):
    assert y is not x
  y = snp.array(x)
  x.delete()
  np.testing.assert_array_equal(y, X3)
