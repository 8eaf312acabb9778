"""The jax.numpy functions that JAX 0.10.2 jits (`jit[name=...]` equations), against JAX.

`where` (as `_where`), `clip`, `cumsum`/`cumprod`/`nancumsum`/`nancumprod`,
`cumulative_sum` (`_cumsum_with_promotion`), `sort`, `argsort`, `var` (`_var`) and `std`
(`_std` around `_var`) are jitted functions, as in JAX: a traced program shows the same
`jit` equation with the same body, Python scalars enter as weakly typed literals, and eager
calls, jit, grad and vmap give JAX's values, dtypes and weak types. Also here: the binary
ufuncs leave size-1 dimensions of equal-rank operands to lax (JAX 0.10's numpy), which
the printed programs of `clip` with array bounds and of `x - x.mean(0)` show.
"""
from __future__ import annotations

import re

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.runtime.array import Array
from stagecraft.test_util import check_grads

_RNG = np.random.default_rng(0)
F = _RNG.standard_normal((3, 4)).astype(np.float32)
I8 = _RNG.integers(-5, 5, (3, 4)).astype(np.int8)
U8 = _RNG.integers(0, 5, (3, 4)).astype(np.uint8)
B = F > 0
C = (F + 1j * F[::-1]).astype(np.complex64)
FNAN = np.where(F > 1, np.nan, F).astype(np.float32)

def _norm(x):   # "Thinking in JAX"
  x = x - x.mean(0)
  return x / x.std(0)


# name -> (m -> function, args); m is jax.numpy or stagecraft.numpy.
CASES = {
    "where": (lambda m: lambda c, x: m.where(c, x, 0.), (B, F)),
    "where_int_cond": (lambda m: lambda c, x: m.where(c, x, 1), (I8, F)),
    "where_broadcast": (lambda m: lambda c, x: m.where(c, x[0], x[:, :1]), (B, F)),
    "where_scalar_cond": (lambda m: lambda x: m.where(True, x, 2), (I8,)),
    "where_scalars": (lambda m: lambda c: m.where(c, 1., 2.), (B,)),
    "where_all_scalars": (lambda m: lambda: m.where(True, 1, 2.), ()),
    "where_empty": (lambda m: lambda c, x: m.where(c, x, 0),
                    (np.zeros((0, 2), bool), np.zeros((0, 2), np.float32))),
    "where_promote": (lambda m: lambda c, x, y: m.where(c, x, y), (B, I8, F)),
    "where_numpy_scalar": (lambda m: lambda c, x: m.where(c, x, np.float32(2)), (B, F)),
    "where_numpy_array": (lambda m: lambda c, x: m.where(c, x, np.zeros((3, 4), np.float32)),
                          (B, F)),
    "clip": (lambda m: lambda x: m.clip(x, 0.5, 2), (F,)),
    "clip_int": (lambda m: lambda x: m.clip(x, 1, 3), (I8,)),
    "clip_int_float_bound": (lambda m: lambda x: m.clip(x, 1.5), (I8,)),
    "clip_max_only": (lambda m: lambda x: m.clip(x, max=1), (F,)),
    "clip_no_bounds": (lambda m: lambda x: m.clip(x), (F,)),
    "clip_array_bounds": (lambda m: lambda x, lo: m.clip(x, lo, lo + 1), (F, F[0])),
    "clip_scalar": (lambda m: lambda: m.clip(3., 0, 1), ()),
    "clip_method": (lambda m: lambda x: m.asarray(x).clip(0, 1), (F,)),
    "cumsum": (lambda m: lambda x: m.cumsum(x), (F,)),
    "cumsum_axis": (lambda m: lambda x: m.cumsum(x, axis=-1), (I8,)),
    "cumsum_uint8": (lambda m: lambda x: m.cumsum(x, 0), (U8,)),
    "cumsum_bool": (lambda m: lambda x: m.cumsum(x, 1), (B,)),
    "cumsum_dtype": (lambda m: lambda x: m.cumsum(x, 1, dtype=np.float32), (I8,)),
    "cumsum_dtype_bool": (lambda m: lambda x: m.cumsum(x, 1, dtype=bool), (I8,)),
    "cumsum_complex": (lambda m: lambda x: m.cumsum(x, 0), (C,)),
    "cumsum_python_scalar": (lambda m: lambda: m.cumsum(3.), ()),
    "cumsum_empty": (lambda m: lambda x: m.cumsum(x, 0), (np.zeros((0, 2), np.float32),)),
    "cumsum_method": (lambda m: lambda x: m.asarray(x).cumsum(1), (F,)),
    "cumprod": (lambda m: lambda x: m.cumprod(x, axis=0), (F,)),
    "nancumsum": (lambda m: lambda x: m.nancumsum(x), (FNAN,)),
    "nancumprod": (lambda m: lambda x: m.nancumprod(x, 1), (FNAN,)),
    "nancumsum_int": (lambda m: lambda x: m.nancumsum(x, 1), (I8,)),
    "cumulative_sum": (lambda m: lambda x: m.cumulative_sum(x, axis=1, include_initial=True),
                       (I8,)),
    "cumulative_sum_1d": (lambda m: lambda x: m.cumulative_sum(x[0]), (F,)),
    "cumulative_prod": (lambda m: lambda x: m.cumulative_prod(x, axis=0, include_initial=True),
                        (I8,)),
    "sort": (lambda m: lambda x: m.sort(x), (F,)),
    "sort_axis0_descending": (lambda m: lambda x: m.sort(x, axis=0, descending=True), (I8,)),
    "sort_flat": (lambda m: lambda x: m.sort(x, axis=None), (F,)),
    "sort_unstable": (lambda m: lambda x: m.sort(x, stable=False), (F,)),
    "sort_complex_values": (lambda m: lambda x: m.sort(x), (C,)),
    "sort_method": (lambda m: lambda x: m.sort(x, axis=0), (FNAN,)),
    "argsort": (lambda m: lambda x: m.argsort(x), (F,)),
    "argsort_descending": (lambda m: lambda x: m.argsort(x, axis=0, descending=True), (I8,)),
    "argsort_descending_unstable": (
        lambda m: lambda x: m.argsort(x, descending=True, stable=False), (F,)),
    "argsort_flat": (lambda m: lambda x: m.argsort(x, axis=None), (F,)),
    "argsort_dtype": (lambda m: lambda x: m.argsort(x, dtype=np.int16), (F,)),
    "var": (lambda m: lambda x: m.var(x), (F,)),
    "var_keepdims": (lambda m: lambda x: m.var(x, axis=1, keepdims=True), (F,)),
    "var_ddof": (lambda m: lambda x: m.var(x, axis=0, ddof=1), (F,)),
    "var_ddof_too_big": (lambda m: lambda x: m.var(x, axis=0, ddof=5), (F,)),
    "var_float_correction": (lambda m: lambda x: m.var(x, axis=0, correction=0.5), (F,)),
    "var_int": (lambda m: lambda x: m.var(x, axis=(0, 1)), (I8,)),
    "var_complex": (lambda m: lambda x: m.var(x, axis=1), (C,)),
    "var_mean": (lambda m: lambda x: m.var(x, axis=0, mean=m.mean(x, 0, keepdims=True)), (F,)),
    "var_dtype": (lambda m: lambda x: m.var(x, dtype=np.float16), (F,)),
    "var_float16": (lambda m: lambda x: m.var(x, axis=1), (F.astype(np.float16),)),
    "var_list_axis": (lambda m: lambda x: m.var(x, axis=[0, 1]), (F,)),
    "var_method": (lambda m: lambda x: m.asarray(x).var(), (F,)),
    "std": (lambda m: lambda x: m.std(x, 0), (F,)),
    "std_ddof_keepdims": (lambda m: lambda x: m.std(x, axis=1, ddof=1, keepdims=True), (I8,)),
    "std_complex": (lambda m: lambda x: m.std(x), (C,)),
    "thinking_in_jax_norm": (lambda m: lambda x: _norm(m.asarray(x)), (F.reshape(4, 3),)),
    "mean_and_var": (lambda m: lambda x: (m.mean(x), m.var(x, axis=0)), (F,)),
}

# Same values, dtypes and weak types, but other equations than JAX's.
VALUES_ONLY = {
    # var's where= mask: JAX's `mean` counts before it sums (stagecraft's sums first).
    "var_where": (lambda m: lambda x, w: m.var(x, axis=1, where=w), (F, B)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_printed_jaxpr_equals_jax(name):
  mk, args = CASES[name]
  ours = str(sc.make_jaxpr(mk(jnp))(*args))
  theirs = str(jax.make_jaxpr(mk(jjnp))(*args))
  assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"


def _assert_like(got, want, name):
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    assert isinstance(g, Array), (name, type(g))
    assert (g.shape, g.dtype, g.weak_type) == (w.shape, w.dtype, w.weak_type), name
    np.testing.assert_allclose(np.asarray(g, np.complex128), np.asarray(w, np.complex128),
                               rtol=2e-3 if g.dtype == np.float16 else 2e-6, atol=1e-6,
                               err_msg=name)


@pytest.mark.parametrize("name", sorted({**CASES, **VALUES_ONLY}))
def test_eager_and_jit_values_like_jax(name):
  mk, args = {**CASES, **VALUES_ONLY}[name]
  want = mk(jjnp)(*args)
  _assert_like(mk(jnp)(*args), want, name)
  _assert_like(sc.jit(mk(jnp))(*args), want, name)


def test_jitted_functions_print_their_jax_names():
  cases = {"_where": lambda x: jnp.where(x > 0, x, 0.), "clip": lambda x: jnp.clip(x, 0, 1),
           "cumsum": jnp.cumsum, "cumprod": jnp.cumprod, "nancumsum": jnp.nancumsum,
           "nancumprod": jnp.nancumprod, "sort": jnp.sort, "argsort": jnp.argsort,
           "_var": jnp.var, "_std": jnp.std,
           "_cumsum_with_promotion": jnp.cumulative_sum}
  for name, f in cases.items():
    text = str(sc.make_jaxpr(f)(F[0]))
    assert re.search(rf"jit\[\s*name={name}\b", text), (name, text)


def test_python_scalars_enter_as_weak_literals():
  text = str(sc.make_jaxpr(lambda x: jnp.clip(x, 1, 2.5))(F))
  assert "] a 1:i32[] 2.5:f32[]" in text, text
  text = str(sc.make_jaxpr(lambda x: jnp.var(x, ddof=1))(F))
  assert "jit[name=_var jaxpr=_var] p 1:i32[]" in text, text


@pytest.mark.parametrize("x64", [False, True])
def test_dtypes_like_jax_x64(x64):
  fs = [lambda m: m.cumsum(I8), lambda m: m.cumsum(U8, dtype=bool),
        lambda m: m.cumulative_sum(U8, axis=0), lambda m: m.argsort(F),
        lambda m: m.var(I8), lambda m: m.std(F.astype(np.float16)),
        lambda m: m.where(B, 1, 2.), lambda m: m.clip(I8, 0, 2.5),
        lambda m: m.sort(np.float64(F) if x64 else F), lambda m: m.nancumprod(I8)]
  with sc.enable_x64(x64), jax.enable_x64(x64):
    for i, f in enumerate(fs):
      _assert_like(f(jnp), f(jjnp), f"case {i}")


_GRADS = {
    "where": (lambda m: lambda x: m.sum(m.where(x > 0, x ** 2, 0.5 * x)), (F,)),
    "clip": (lambda m: lambda x: m.sum(m.clip(x, -0.5, 0.7) * x), (F,)),
    "cumsum": (lambda m: lambda x: m.sum(m.cumsum(x, 1) ** 2), (F,)),
    "cumprod": (lambda m: lambda x: m.sum(m.cumprod(x, 0)), (F,)),
    "sort": (lambda m: lambda x: m.sum(m.sort(x, 0) * m.arange(4.0)), (F,)),
    "var": (lambda m: lambda x: m.var(x, axis=0, ddof=1).sum(), (F,)),
    "var_ddof_too_big": (lambda m: lambda x: m.var(x, axis=0, ddof=3).sum(), (F,)),
    "std": (lambda m: lambda x: m.std(x, 1).sum(), (F,)),
    "norm": (lambda m: lambda x: m.sum(_norm(x) ** 3), (F,)),
}


@pytest.mark.parametrize("name", sorted(_GRADS))
def test_grad_like_jax(name):
  mk, args = _GRADS[name]
  got = sc.grad(mk(jnp))(*args)
  want = jax.grad(mk(jjnp))(*args)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
  got_jit = sc.jit(sc.grad(mk(jnp)))(*args)
  np.testing.assert_allclose(np.asarray(got_jit), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["where", "clip", "cumsum", "std", "var"])
def test_grads_numerically(name):
  mk, args = _GRADS[name]
  x = np.float64(args[0]) + 0.05   # away from the kinks of where/clip
  check_grads(mk(jnp), (x.astype(np.float32),), order=1, modes=("fwd", "rev"), eps=1e-3,
              atol=5e-2, rtol=5e-2)


_VMAPS = {
    "where": (lambda m: lambda c, x: m.where(c, x, -1.), (B, F)),
    "clip": (lambda m: lambda x, lo: m.clip(x, lo, 1.), (F, F[:, 0])),
    "cumsum": (lambda m: lambda x: m.cumsum(x), (F,)),
    "argsort": (lambda m: lambda x: m.argsort(x, descending=True), (I8,)),
    "sort": (lambda m: lambda x: m.sort(x), (F,)),
    "var": (lambda m: lambda x: m.var(x, ddof=1), (F,)),
    "std": (lambda m: lambda x: m.std(x), (F,)),
}


@pytest.mark.parametrize("name", sorted(_VMAPS))
def test_vmap_like_jax(name):
  mk, args = _VMAPS[name]
  want = jax.vmap(mk(jjnp))(*args)
  _assert_like(sc.vmap(mk(jnp))(*args), want, name)
  _assert_like(sc.jit(sc.vmap(mk(jnp)))(*args), want, name)


def test_where_eager_is_one_compiled_call():
  # As JAX's: the selection is jitted, so a Python scalar is not materialized at the full
  # shape outside it, and repeated calls reuse the compiled program.
  x = jnp.asarray(F)
  assert jnp.where(x > 0, x, 0.).tolist() == np.where(F > 0, F, 0.).tolist()
  assert jnp.where(x > 0, x, 0.).tolist() == np.where(F > 0, F, 0.).tolist()
  assert float(jnp.clip(2., 0, 1)) == 1.0


def test_errors_like_jax():
  with pytest.raises(ValueError, match="either both or neither of x and y"):
    jnp.where(B, F)
  with pytest.raises(ValueError, match="No input was provided to the clip function"):
    jnp.clip()
  with pytest.raises(ValueError, match="Complex values have no ordering"):
    jnp.clip(C, 0, 1)
  with pytest.raises(TypeError, match="got an unexpected keyword argument 'a_min'"):
    jnp.clip(F, a_min=0)
  for f, name in [(jnp.clip, "clip"), (jnp.sort, "sort"), (jnp.argsort, "argsort"),
                  (jnp.cumsum, "cumsum"), (jnp.var, "var"), (jnp.std, "std")]:
    with pytest.raises(TypeError, match=re.escape(f"{name} requires ndarray or scalar "
                                                  f"arguments, got <class 'list'> at "
                                                  f"position 0.")):
      f([1.0, 2.0])
    with pytest.raises(TypeError, match="requires ndarray or scalar arguments"):
      getattr(jjnp, name)([1.0, 2.0])
  with pytest.raises(TypeError, match="'kind' argument to sort is not supported"):
    jnp.sort(F, kind="quicksort")
  with pytest.raises(TypeError, match="'order' argument to argsort is not supported"):
    jnp.argsort(F, order="x")
  with pytest.raises(ValueError, match="out of bounds"):
    jnp.sort(F, axis=2)
  with pytest.raises(ValueError, match="out of bounds"):
    jnp.cumsum(F, axis=-3)
  with pytest.raises(NotImplementedError, match="'out' argument to jnp.cumsum"):
    jnp.cumsum(F, out=F)
  with pytest.raises(ValueError, match="ddof and correction can't be provided"):
    jnp.var(F, ddof=1, correction=1)
  with pytest.raises(ValueError, match="dtype argument to jnp.std must be inexact"):
    jnp.std(F, dtype=np.int32)
  with pytest.raises(ValueError, match="does not yet support real dtype parameters"):
    jnp.var(C, dtype=np.float32)
  # A mean of another rank: lax's error, as JAX 0.10's.
  with pytest.raises(TypeError, match="sub: arrays must have the same number of dimensions"):
    jnp.var(F, axis=0, mean=F.mean(0))
  with pytest.raises(TypeError, match="sub: arrays must have the same number of dimensions"):
    jjnp.var(F, axis=0, mean=F.mean(0))
  with pytest.raises(sc.errors.ConcretizationTypeError):
    sc.jit(lambda x, a: jnp.var(x, axis=a))(F, 0)


def test_equal_rank_operands_are_broadcast_by_lax():
  text = str(sc.make_jaxpr(lambda x, y: x * y)(F[:, :1], F[:1]))
  assert text == str(jax.make_jaxpr(lambda x, y: x * y)(F[:, :1], F[:1]))
  assert "broadcast_in_dim" not in text
  with pytest.raises(TypeError, match=re.escape("add got incompatible shapes for "
                                                "broadcasting: (3, 4), (2, 4).")):
    jnp.add(F, F[:2])


@pytest.mark.parametrize("name", ["log10", "log2"])
@pytest.mark.parametrize("dtype", [np.complex64, np.float32, np.float16])
def test_log10_log2_values_and_jaxprs_match_jax(name, dtype):
  # A complex logarithm's parts are scaled separately, as JAX's: dividing by a complex
  # log(10) made the imaginary part of log10(-inf + 0j) nan (found by the long fuzz run).
  if dtype == np.complex64:
    x = np.array([-np.inf + 0j, np.inf + 1j, 1 + 1j, 0j, -2 - 3j], dtype)
  else:
    x = np.array([0.5, 3.0, 0.0, np.inf, -1.0], dtype)
  ours, theirs = getattr(jnp, name)(x), getattr(jjnp, name)(x)
  assert ours.dtype == theirs.dtype
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-6)
  assert (str(sc.make_jaxpr(getattr(jnp, name))(x))
          == str(jax.make_jaxpr(getattr(jjnp, name))(x)))


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("args", [(1.5, -1), (0.0, 2), (-2.0, 0.5), (np.float32(3.0), 1),
                                  (1.5, np.float32(2.0)),
                                  (np.array([-1, 0, 2], np.int32), 0.5)])
def test_heaviside_weak_types_under_jit_match_jax(x64, args):
  # A weakly typed x1 (a Python scalar passed to jit is a weak tracer) gives weak 0/1, as
  # JAX's (found by the long fuzz run: jit(heaviside)(1.5, -1) was strongly typed).
  ctx = sc.enable_x64() if x64 else sc.enable_x64(False)
  with ctx, jax.enable_x64(x64):
    for wrap_sc, wrap_jax in ((sc.jit, jax.jit), (lambda f: f, lambda f: f)):
      ours = wrap_sc(lambda a, b: jnp.heaviside(a, b))(*args)
      theirs = wrap_jax(lambda a, b: jjnp.heaviside(a, b))(*args)
      assert ours.dtype == theirs.dtype
      assert ours.aval.weak_type == theirs.aval.weak_type
      np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
