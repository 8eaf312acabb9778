"""stagecraft.numpy against jax.numpy (and NumPy) on the parts the core tests leave out: the
abstract scalar types and the other non-function names, `vectorize`, reductions with
`where=`/`initial=`/`promote_integers=`/`mean=`, einsum with repeated indices and `optimize=`,
the methods and operators of `jax.Array` on Arrays and tracers, and `array`/`asarray`
keywords."""
import copy
import inspect
import warnings

import jax
import jax.numpy as jjnp
import ml_dtypes
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.errors import ConcretizationTypeError
from stagecraft.runtime.array import Array
from stagecraft.test_util import check_grads


def assert_same(got, want, rtol=1e-6, atol=1e-6):
  """Same shape and dtype as jax.numpy's result, and close values (NaN where it has NaN)."""
  got, want = np.asarray(got), np.asarray(want)
  assert got.shape == want.shape, (got.shape, want.shape)
  assert got.dtype == want.dtype, (got.dtype, want.dtype)
  if got.dtype.kind in "fc" or got.dtype == ml_dtypes.bfloat16:
    np.testing.assert_allclose(got.astype(np.complex128), want.astype(np.complex128),
                               rtol=rtol, atol=atol, equal_nan=True)
  else:
    np.testing.assert_array_equal(got, want)


def assert_tree_same(got, want, **kw):
  gl, wl = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
  assert len(gl) == len(wl), (len(gl), len(wl))
  for g, w in zip(gl, wl):
    assert_same(g, w, **kw)


# ---------------------------------------------------------------------------
# 1. Scalar types and the other non-function names

ABSTRACT = ["generic", "number", "integer", "signedinteger", "unsignedinteger", "inexact",
            "floating", "complexfloating", "character", "flexible", "object_"]
CONCRETE = ["bool_", "bool", "int4", "uint4", "int2", "int8", "int16", "int32", "int64",
            "uint8", "uint32", "float16", "bfloat16", "float32", "float64", "complex64",
            "complex128", "float8_e4m3fn", "float8_e5m2", "float8_e3m4", "float4_e2m1fn",
            "float8_e8m0fnu", "csingle", "cdouble"]


def test_every_public_name_of_jax_numpy_exists():
  missing = [n for n in dir(jjnp) if not n.startswith("_") and not hasattr(jnp, n)]
  assert missing == []


def test_non_function_names_are_the_same_kind_of_object():
  names = [n for n in dir(jjnp) if not n.startswith("_")
           and not inspect.isfunction(getattr(jjnp, n)) and not callable(getattr(jjnp, n))]
  for n in names:   # constants and submodules
    want = getattr(jjnp, n)
    if isinstance(want, (float, type(None), type(np))):
      assert type(getattr(jnp, n)) is type(want), n
    if isinstance(want, float):
      assert getattr(jnp, n) == want or (np.isnan(getattr(jnp, n)) and np.isnan(want)), n
  for n in ABSTRACT + ["dtype", "ComplexWarning"]:
    assert getattr(jnp, n) is getattr(jjnp, n), n   # NumPy's own classes, re-exported
  assert jnp.iinfo is jjnp.iinfo and jnp.finfo is jjnp.finfo
  assert jnp.newaxis is None and jnp.euler_gamma == np.euler_gamma
  with jnp.printoptions(precision=2):
    assert np.get_printoptions()["precision"] == 2


def test_issubdtype_matches_jax_on_all_pairs():
  names = ABSTRACT + CONCRETE
  for a in names:
    for b in names:
      assert jnp.issubdtype(getattr(jnp, a), getattr(jnp, b)) == (
          jjnp.issubdtype(getattr(jjnp, a), getattr(jjnp, b))), (a, b)
  for a, b in [(np.int64, int), ("float32", float), (np.int32, int), (bool, np.bool_),
               ("int8", jnp.integer), (float, jnp.floating), (jnp.float32, "float32")]:
    assert jnp.issubdtype(a, b) == jjnp.issubdtype(a, b), (a, b)


def test_abstract_types_on_array_dtypes_and_isinstance():
  x, i, u = jnp.ones(2), jnp.arange(2), jnp.arange(2, dtype=jnp.uint8)
  assert jnp.issubdtype(x.dtype, jnp.floating) and jnp.issubdtype(x.dtype, jnp.inexact)
  assert jnp.issubdtype(i.dtype, jnp.signedinteger) and not jnp.issubdtype(i.dtype,
                                                                           jnp.floating)
  assert jnp.issubdtype(u.dtype, jnp.unsignedinteger) and jnp.issubdtype(u.dtype, jnp.number)
  assert jnp.issubdtype(jnp.ones(2, jnp.bfloat16).dtype, jnp.floating)
  assert isinstance(np.float32(1), jnp.floating) and isinstance(np.int8(1), jnp.integer)
  assert not isinstance(jnp.float32(1), jnp.floating)   # an Array, as in JAX
  assert isinstance(np.float32(1), jnp.float32) and not isinstance(np.float64(1), jnp.float32)
  assert jnp.bool is jnp.bool_ and jnp.bool_(1).dtype == np.bool_
  assert jnp.csingle is jnp.complex64 and jnp.cdouble is jnp.complex128
  assert np.dtype(jnp.int4) == ml_dtypes.int4 and np.dtype(jnp.float8_e3m4).name == "float8_e3m4"
  assert jnp.iinfo(jnp.int4).max == 7 and jnp.finfo(jnp.bfloat16).eps == 2 ** -7
  assert jnp.finfo(jnp.ones(2)).eps == np.finfo(np.float32).eps
  assert jnp.iinfo(jnp.arange(2, dtype=jnp.int8)).min == -128
  assert issubclass(jnp.ComplexWarning, RuntimeWarning)


# ---------------------------------------------------------------------------
# 2. vectorize


def _cross(m):
  return lambda a, b: m.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                               a[0] * b[1] - a[1] * b[0]])


RNG = np.random.default_rng(0)
V23 = RNG.normal(size=(2, 3)).astype(np.float32)
V13 = RNG.normal(size=(1, 2, 3)).astype(np.float32)
V213 = RNG.normal(size=(2, 1, 3)).astype(np.float32)
M423 = RNG.normal(size=(4, 2, 3)).astype(np.float32)

VECTORIZE_CASES = [
    ("scalar fn", lambda m: m.vectorize(lambda x, y: x * y + 1)(V23, V23[0])),
    ("size-1 loop dims", lambda m: m.vectorize(lambda x: x * 2)(np.ones((1, 1), np.float32))),
    ("python scalar", lambda m: m.vectorize(lambda x: x * 2)(3.0)),
    ("two outputs", lambda m: m.vectorize(lambda x, y: (x + y, x * y))(V23[:, :1], V23[0])),
    ("cross", lambda m: m.vectorize(_cross(m), signature="(k),(k)->(k)")(V13, V213)),
    ("matvec", lambda m: m.vectorize(lambda a, v: a @ v, signature="(n,k),(k)->(n)")(
        M423, M423[:, 0])),
    ("reduce core", lambda m: m.vectorize(lambda v: v.sum(), signature="(n)->()")(M423)),
    ("excluded int", lambda m: m.vectorize(lambda x, n: x * n, excluded={1})(V23, 4)),
    ("excluded str", lambda m: m.vectorize(lambda x, s=1: x + s, excluded={"s"})(V23, s=5)),
    ("kwargs dropped", lambda m: m.vectorize(lambda x, s=1: x + s)(V23, s=5)),
    ("None arg", lambda m: m.vectorize(lambda x, y: x if y is None else x + y)(V23, None)),
    ("output core", lambda m: m.vectorize(lambda v: (v.max(), v * 2),
                                          signature="(n)->(),(n)")(M423)),
]


@pytest.mark.parametrize("case", VECTORIZE_CASES, ids=lambda c: c[0])
def test_vectorize_matches_jax(case):
  _, f = case
  assert_tree_same(f(jnp), f(jjnp), rtol=1e-5)


def test_vectorize_under_transformations():
  f = jnp.vectorize(lambda a, v: a @ v, signature="(n,k),(k)->(n)")
  want = np.einsum("bnk,bk->bn", M423, np.broadcast_to(V23[None, 0], (4, 3)))
  assert_same(sc.jit(f)(M423, V23[0]), want, rtol=1e-5)
  assert_same(sc.vmap(f)(M423, np.stack([V23[0]] * 4)), want, rtol=1e-5)
  g = sc.grad(lambda x: jnp.vectorize(jnp.sin)(x).sum())(V23)
  assert_same(g, np.cos(V23), rtol=1e-6)
  with sc.enable_x64():
    check_grads(lambda a, v: f(a, v), (M423.astype(np.float64), V23[0].astype(np.float64)),
                order=1, modes=("fwd", "rev"))


def test_vectorize_errors():
  with pytest.raises(ValueError, match="not a valid gufunc signature: \\(n\\)->\\(n"):
    jnp.vectorize(lambda x: x, signature="(n)->(n")(V23)
  with pytest.raises(ValueError, match="does not have enough dimensions for all core "
                                       "dimensions \\('n', 'k'\\)"):
    jnp.vectorize(lambda a, v: a @ v, signature="(n,k),(k)->(n)")(V23[0], V23[0])
  with pytest.raises(ValueError, match="inconsistent size for core dimension 'k': 2 vs 3"):
    jnp.vectorize(lambda a, b: a + b, signature="(k),(k)->(k)")(V23, V23[:, :2])
  with pytest.raises(ValueError, match="output shape \\(\\) does not match core dimensions"):
    jnp.vectorize(lambda a: a.sum(), signature="(k)->(k)")(V23)
  with pytest.raises(TypeError, match="wrong number of positional arguments: expected 2"):
    jnp.vectorize(lambda a, b: a, signature="(k),(k)->(k)")(V23)
  with pytest.raises(TypeError, match="output must be a tuple when multiple outputs"):
    jnp.vectorize(lambda a: a, signature="(k)->(k),(k)")(V23)
  with pytest.raises(TypeError, match="can only exclude integer or string arguments"):
    jnp.vectorize(lambda x: x, excluded={1.5})
  with pytest.raises(ValueError, match="contains negative numbers"):
    jnp.vectorize(lambda x: x, excluded={-1})
  with pytest.raises(ValueError, match="Cannot pass None at locations"):
    jnp.vectorize(lambda a, b: a, signature="(k),(k)->(k)")(V23, None)


# ---------------------------------------------------------------------------
# 3. Reductions with where=, initial=, promote_integers=, mean=

RX = np.arange(12, dtype=np.float32).reshape(3, 4) - 4.5
RX[1, 1] = np.nan
RM = (np.arange(12).reshape(3, 4) % 3) != 0
RI = (np.arange(12, dtype=np.int8).reshape(3, 4) - 5)
RF = np.where(np.isnan(RX), 0.5, RX).astype(np.float32)

REDUCTION_CASES = [
    ("sum where", lambda m: m.sum(RF, where=RM)),
    ("sum where broadcast row", lambda m: m.sum(RF, axis=0, where=RM[0])),
    ("sum where scalar", lambda m: m.sum(RF, where=True)),
    ("sum where keepdims", lambda m: m.sum(RF, axis=1, where=RM, keepdims=True)),
    ("sum int8 initial where", lambda m: m.sum(RI, initial=5, where=RM)),
    ("sum bool where", lambda m: m.sum(RM, where=RM[::-1])),
    ("sum f16 where", lambda m: m.sum(np.full(3, 1000, np.float16), where=np.array([1, 0, 1],
                                                                                 bool))),
    ("sum no promote", lambda m: m.sum(RI, promote_integers=False)),
    ("sum bool no promote", lambda m: m.sum(RM, promote_integers=False)),
    ("prod where", lambda m: m.prod(RI, axis=1, where=RM)),
    ("prod uint8 no promote", lambda m: m.prod(RI.astype(np.uint8), axis=0,
                                               promote_integers=False)),
    ("max where initial", lambda m: m.max(RF, axis=1, where=RM, initial=-1.)),
    ("max all masked", lambda m: m.max(RF, where=np.zeros_like(RM), initial=-5.)),
    ("min int where initial", lambda m: m.min(RI, where=RM, initial=100)),
    ("max bool where", lambda m: m.max(np.array([True, False]), where=np.array([False, True]),
                                       initial=False)),
    ("max bf16 where", lambda m: m.max(RF.astype(ml_dtypes.bfloat16), where=RM, initial=-3.)),
    ("amin initial", lambda m: m.amin(RF, axis=0, initial=-100.)),
    ("mean where", lambda m: m.mean(RF, axis=1, where=RM)),
    ("mean int where", lambda m: m.mean(RI, where=RM)),
    ("mean empty where", lambda m: m.mean(RF, where=np.zeros_like(RM))),
    ("var where", lambda m: m.var(RF, axis=0, where=RM)),
    ("var complex where", lambda m: m.var(RF + 1j * RF[::-1], axis=1, where=RM)),
    ("std where ddof", lambda m: m.std(RI, where=RM, ddof=1)),
    ("std correction", lambda m: m.std(RF, axis=1, correction=1)),
    ("var mean=", lambda m: m.var(RF, axis=0, mean=m.zeros((1, 4)))),
    ("std mean= where", lambda m: m.std(RF, axis=1, mean=m.ones((3, 1)), where=RM)),
    ("all where", lambda m: m.all(RF > -2, where=RM, axis=0)),
    ("any where", lambda m: m.any(RF > 100, where=RM, axis=1, keepdims=True)),
    ("all complex", lambda m: m.all(np.array([1j, 1 + 0j], np.complex64))),
    ("nansum where", lambda m: m.nansum(RX, where=RM, axis=1)),
    ("nanprod where", lambda m: m.nanprod(RX, where=RM)),
    ("nanmax where", lambda m: m.nanmax(RX, where=RM, initial=0., axis=0)),
    ("nanmin where", lambda m: m.nanmin(RX, where=RM, initial=50.)),
    ("nanmean where", lambda m: m.nanmean(RX, where=RM, axis=1)),
    ("nanvar where", lambda m: m.nanvar(RX, where=RM, axis=0)),
    ("nanstd where ddof", lambda m: m.nanstd(RX, where=RM, ddof=1)),
    ("nanvar mean=", lambda m: m.nanvar(RX, axis=1, mean=m.ones((3, 1)))),
    ("argmax keepdims", lambda m: m.argmax(RF, axis=1, keepdims=True)),
    ("nanargmin keepdims", lambda m: m.nanargmin(RX, axis=0, keepdims=True)),
    ("argmax all keepdims", lambda m: m.argmax(RF, keepdims=True)),
]


@pytest.mark.parametrize("case", REDUCTION_CASES, ids=lambda c: c[0])
def test_reductions_match_jax(case):
  _, f = case
  assert_same(f(jnp), f(jjnp), rtol=2e-6)


def test_reductions_with_where_under_jit_and_vmap():
  f = lambda x, w: (jnp.mean(x, where=w, axis=0), jnp.max(x, where=w, initial=0., axis=1),
                    jnp.var(x, where=w))
  want = (jjnp.mean(RF, where=RM, axis=0), jjnp.max(RF, where=RM, initial=0., axis=1),
          jjnp.var(RF, where=RM))
  assert_tree_same(sc.jit(f)(RF, RM), want, rtol=1e-5)
  got = sc.vmap(lambda x, w: jnp.sum(x, where=w))(RF, RM)
  assert_same(got, jjnp.sum(RF, where=RM, axis=1))


def test_reductions_with_where_x64():
  with sc.enable_x64():
    assert jnp.sum(RI, where=RM).dtype == np.int64
    assert jnp.sum(RI.astype(np.int32), where=RM).dtype == np.int64   # widened to default
    assert jnp.sum(RI.astype(np.int32), promote_integers=False).dtype == np.int32
    assert jnp.mean(RI, where=RM).dtype == np.float32   # as JAX: int8 -> float32 under x64
    x = RF.astype(np.float64)
    np.testing.assert_allclose(np.asarray(jnp.var(x, where=RM, axis=1)),
                               np.var(x, where=RM, axis=1), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jnp.max(x, where=RM, initial=-1., axis=0)),
                               np.max(x, where=RM, initial=-1., axis=0))
    np.testing.assert_allclose(np.asarray(jnp.nanmean(x, where=RM)),
                               np.nanmean(x, where=RM), rtol=1e-12)


def test_reductions_with_where_grads():
  x = RF.astype(np.float64)
  with sc.enable_x64():
    check_grads(lambda v: jnp.mean(v, where=RM, axis=1), (x,), order=1, modes=("fwd", "rev"))
    check_grads(lambda v: jnp.var(v, where=RM), (x,), order=1, modes=("fwd", "rev"))
    check_grads(lambda v: jnp.max(v, where=RM, initial=-10., axis=0), (x,), order=1,
                modes=("fwd", "rev"))
    check_grads(lambda v: jnp.nanstd(v, where=RM, axis=0), (x,), order=1,
                modes=("fwd", "rev"))


@pytest.mark.parametrize("f, exc, msg", [
    (lambda m: m.max(RF, where=RM), ValueError,
     "reduction operation max does not have an identity, so to use a where mask one has to "
     "specify 'initial'"),
    (lambda m: m.nanmin(RF, where=RM), ValueError, "does not have an identity"),
    (lambda m: m.sum(RF, where=[True] * 4), TypeError,
     "sum requires ndarray or scalar arguments"),
    (lambda m: m.mean(RF, where=np.ones(4, np.int32)), ValueError,
     r"jnp.mean: where must be None or a boolean array; got where.dtype=dtype\('int32'\)"),
    (lambda m: m.max(RF, initial=np.zeros(2)), ValueError,
     r"initial value must be a scalar. Got array of shape \(2,\)"),
    (lambda m: m.var(RF, ddof=1, correction=1), ValueError,
     "ddof and correction can't be provided simultaneously"),
    (lambda m: m.var(RF + 1j, dtype=np.float32), ValueError,
     "does not yet support real dtype parameters"),
], ids=["max where", "nanmin where", "where list", "where int", "initial array",
        "ddof+correction", "var complex real dtype"])
def test_reduction_errors_match_jax(f, exc, msg):
  for m in (jjnp, jnp):
    with pytest.raises(exc, match=msg):
      f(m)


# ---------------------------------------------------------------------------
# 4. einsum

E33 = np.arange(9, dtype=np.float32).reshape(3, 3)
E34 = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
E332 = np.arange(18, dtype=np.float32).reshape(3, 3, 2)

EINSUM_CASES = [
    ("ii->i", (E33,), {}), ("ii", (E33,), {}), ("ii->", (E33,), {"optimize": False}),
    ("iij->j", (E332,), {}), ("iij,jk->ik", (E332, E34[:2]), {}),
    ("iii->i", (np.arange(8.).reshape(2, 2, 2),), {}),
    ("iji->ij", (np.arange(12, dtype=np.float32).reshape(2, 3, 2),), {}),
    ("ii,ii->i", (E33, E33), {}), ("...ii->...i", (np.arange(18.).reshape(2, 3, 3),), {}),
    ("ijji->j", (np.arange(36, dtype=np.float32).reshape(3, 2, 2, 3),), {}),
    ("iij,kjj->ik", (E332, np.arange(12, dtype=np.float32).reshape(3, 2, 2)), {}),
    ("ii,jj->ij", (E33, E33), {}), ("i,ij->", (np.ones(3, np.int32), E33), {}),
    ("ij,jk,kl", (E33, E34, E34.T), {"optimize": "greedy"}),
    ("ij,jk,kl", (E33, E34, E34.T), {"optimize": "dp"}),
    ("ij,jk,kl", (E33, E34, E34.T), {"optimize": "branch-2"}),
    ("ij,jk,kl", (E33, E34, E34.T), {"optimize": False}),
    ("ij,jk,kl", (E33, E34, E34.T), {"optimize": True}),
    ("ij,jk,kl", (E33, E34, E34.T), {"optimize": [(1, 2), (0, 1)]}),
    ("i,i,i->", (np.ones(3), np.ones(3), np.ones(3)), {"optimize": False}),
    ("ij->", (E33,), {"optimize": False}),
]


@pytest.mark.parametrize("case", EINSUM_CASES, ids=lambda c: f"{c[0]} {c[2]}")
def test_einsum_matches_jax_and_numpy(case):
  spec, ops, kw = case
  got = jnp.einsum(spec, *ops, **kw)
  assert_same(got, jjnp.einsum(spec, *ops, **kw), rtol=1e-5)
  np.testing.assert_allclose(np.asarray(got), np.einsum(spec, *ops), rtol=1e-5)


def test_einsum_interleaved_path_and_errors():
  assert_same(jnp.einsum(E33, [0, 1], E34, [1, 2], [0, 2]), E33 @ E34, rtol=1e-5)
  assert_same(jnp.einsum(E33, [0, 0]), np.trace(E33))
  assert_same(jnp.einsum(E33, [0, ...], E34, [0, 2]),
              jjnp.einsum(E33, [0, ...], E34, [0, 2]), rtol=1e-5)
  for opt in (False, True, "auto", "greedy"):
    path, info = jnp.einsum_path("ij,jk,kl", E33, E34, E34.T, optimize=opt)
    jpath, _ = jjnp.einsum_path("ij,jk,kl", E33, E34, E34.T, optimize=opt)
    assert path == jpath, opt
    assert "Optimized FLOP count" in str(info)
    assert_same(jnp.einsum("ij,jk,kl", E33, E34, E34.T, optimize=path),
                E33 @ E34 @ E34.T, rtol=1e-5)
  with pytest.raises(NotImplementedError, match="The 'out' argument to jnp.einsum"):
    jnp.einsum("ij", E33, out=E33)
  with pytest.raises(ValueError, match=r"Size of label 'j' for operand 1 \(3\) does not match"):
    jnp.einsum("ij,jk", E33, E33[:2])
  with pytest.raises(ValueError, match=r"Size of label 'i' for operand 0"):
    jnp.einsum("ii", E34)


def test_einsum_diagonals_under_transformations():
  x = E332.astype(np.float64)
  with sc.enable_x64():
    check_grads(lambda a: jnp.einsum("iij->j", a), (x,), order=1, modes=("fwd", "rev"))
    check_grads(lambda a, b: jnp.einsum("iij,jk->ik", a, b), (x, E34[:2].astype(np.float64)),
                order=1, modes=("fwd", "rev"))
  assert_same(sc.jit(lambda a: jnp.einsum("ii->i", a))(E33), np.diag(E33))
  assert_same(sc.vmap(lambda a: jnp.einsum("ii", a))(np.stack([E33, 2 * E33])),
              np.array([12., 24.], np.float32))


# ---------------------------------------------------------------------------
# 5. Methods and operators of jax.Array

MX = np.arange(6, dtype=np.float32).reshape(2, 3)
MI = np.arange(6, dtype=np.int32).reshape(2, 3)


def _method_cases(m, x, i):
  return {
      "shifts": (i << 2, 1 << i, i >> 1, 64 >> i, i << i),
      "divmod": divmod(x, 2.) + divmod(7., x + 1),
      "matmul mixed": (x @ np.ones(3, np.float32), np.ones(2, np.float32) @ x,
                       x @ m.ones((3,), m.int32)),
      "round": (round(x * 1.3), round(x * 1.37, 1), x.round(1), (x * 1.5).__round__()),
      "cumulative": (x.cumsum(), x.cumprod(axis=1), i.cumsum(axis=0, dtype=m.float32)),
      "ptp": (x.ptp(), x.ptp(axis=0, keepdims=True)),
      "view": (x.view(m.int32), x.view(m.uint8), x.view(m.float16), i.view(m.float32),
               x.view(), m.arange(4, dtype=m.uint8).view(m.int32),
               m.array([True, False]).view(m.uint8), m.arange(2, dtype=m.uint8).view(bool),
               (x + 1j).view(m.float32), m.arange(4.).view(m.complex64)),
      "byteswap": (i.byteswap(), x.byteswap(), m.arange(3, dtype=m.int8).byteswap(),
                   (x + 2j).byteswap()),
      "sorting": (x.sort(axis=None), x.argsort(axis=0, descending=True),
                  x.argpartition(1, axis=1), x.ravel().searchsorted(x[0], side="right")),
      "selection": (x.repeat(2, axis=1), x.take(m.array([0, 2]), axis=1), x.trace(),
                    x.diagonal(), x.compress(m.array([True, False]), axis=0, size=1),
                    m.array([2, 0, 1]).choose([m.arange(3), m.arange(3) * 10,
                                                m.arange(3) * 100], mode="clip")),
      "complex": (x.conj(), (x * 1j).real, (x * 1j).imag, (x + 1j).conjugate()),
      "copies": (x.copy(), copy.copy(x), copy.deepcopy(x), x.astype(m.int8),
                 x.astype(m.float32, copy=True)),
      "slices": tuple(x._split(3, axis=1)) + tuple(
          x._multi_slice(((0, 0), (1, 1)), ((1, 3), (2, 3)), ((0,), ()))),
      "reductions": (x.sum(where=x > 1), x.max(initial=10.), x.min(axis=0, where=x > 0,
                                                                     initial=100.),
                     x.mean(where=x > 0), x.std(axis=1), i.prod(promote_integers=False),
                     x.argmax(axis=1, keepdims=True), x.any(where=x > 3), x.all(axis=0)),
      "shape": (x.reshape(3, 2), x.reshape((3, 2), order="F"), x.ravel(order="F"),
                x.flatten(), x[None].squeeze(), x.swapaxes(0, 1), x.T, x.mT,
                x.transpose(1, 0), x.clip(1, 3), x.clip(max=2), x.dot(np.ones(3, np.float32))),
  }


def test_array_methods_match_jax():
  # NB: both sides jitted (one compile each); the eager Arrays share these methods, and a
  # few groups run eagerly below.
  got = sc.jit(lambda x, i: _method_cases(jnp, x, i))(MX, MI)
  want = jax.jit(lambda x, i: _method_cases(jjnp, x, i))(MX, MI)
  for name in want:
    assert_tree_same(got[name], want[name]), name
  eager = _method_cases(jnp, jnp.asarray(MX), jnp.asarray(MI))
  for name in ("shifts", "view", "byteswap", "copies"):
    assert_tree_same(eager[name], want[name]), name
  assert_same(jnp.asarray(MX).var(ddof=1), jjnp.asarray(MX).var(ddof=1))
  assert_tree_same(jnp.asarray(MI).nonzero(), jjnp.asarray(MI).nonzero())
  assert_tree_same(jnp.asarray(MI).nonzero(size=8, fill_value=-1),
                   jjnp.asarray(MI).nonzero(size=8, fill_value=-1))


def test_array_methods_on_tracers_differentiate_and_batch():
  g = sc.grad(lambda v: (v.cumsum() * v.ptp()).sum() + v @ v)(jnp.arange(3.))
  assert_same(g, np.array([2., 6., 10.], np.float32))
  assert sc.vmap(lambda v: v.view(jnp.int32))(jnp.ones((2, 3))).shape == (2, 3)


def test_var_method_under_jit():
  assert_same(sc.jit(lambda x: x.var())(MX), np.var(MX))


def test_tracer_buffer_attributes_match_jax():
  seen = {}

  def f(x):
    for n in ["device", "sharding", "committed", "nbytes", "itemsize", "addressable_shards",
              "is_fully_replicated", "is_fully_addressable", "global_shards"]:
      try:
        seen[n] = getattr(x, n)
      except (AttributeError, ConcretizationTypeError) as e:
        seen[n] = type(e).__name__
    return x

  sc.jit(f)(jnp.ones(3))
  assert seen == {"device": "AttributeError", "sharding": "AttributeError",
                  "committed": "ConcretizationTypeError", "nbytes": 12, "itemsize": 4,
                  "addressable_shards": "ConcretizationTypeError",
                  "is_fully_replicated": "ConcretizationTypeError",
                  "is_fully_addressable": "ConcretizationTypeError",
                  "global_shards": "ConcretizationTypeError"}


def test_array_buffer_methods_and_protocols():
  x = jnp.asarray(MX)
  assert x.to_device(sc.devices()[0]).committed
  assert x.addressable_data(0).shape == (2, 3) and x.is_fully_addressable
  assert len(x.global_shards) == 1
  assert x.tobytes() == MX.tobytes() and x.tobytes("F") == MX.tobytes("F")
  assert x.item(1) == 1.0 and isinstance(x.item(1), float)
  assert x.__array_namespace__() is jnp
  with pytest.warns(DeprecationWarning, match="Implicit conversion of an array to a dtype"):
    assert x.__numpy_dtype__ == np.float32   # deprecated, as JAX's
  assert (2 in jnp.arange(3)) and (5 not in jnp.arange(3))
  with pytest.raises(TypeError, match="arrays are immutable and do not support in-place item "
                                      "assignment.*x.at\\[idx\\].set\\(y\\)"):
    x[0] = 1.
  with pytest.raises(NotImplementedError, match="do not implement the arr.flat property"):
    x.flat
  with pytest.raises(ValueError, match="search array must be one-dimensional"):
    1. in x
  with pytest.raises(NotImplementedError, match="`type` argument of array.view"):
    x.view(jnp.int32, type=np.ndarray)
  with pytest.raises(ValueError, match="its size must be a divisor"):
    jnp.ones(3, jnp.int8).view(jnp.int32)
  with pytest.raises(ValueError, match="view\\(\\) of a 0d array"):
    jnp.float32(1).view(jnp.int8)
  with pytest.raises(ValueError, match="0-d operands are not allowed"):
    x @ 2


# ---------------------------------------------------------------------------
# 6. array / asarray keywords


def test_array_copies_and_asarray_does_not():
  x = jnp.arange(3.)
  y, z = jnp.array(x), jnp.asarray(x, copy=True)
  assert y is not x and z is not x and x.copy() is not x
  assert jnp.asarray(x) is x and jnp.array(x, copy=False) is x
  x.delete()   # the copies own their buffers
  assert_same(y, np.arange(3, dtype=np.float32))
  assert_same(z, np.arange(3, dtype=np.float32))
  donated = jnp.arange(4.)
  kept = jnp.array(donated)
  sc.jit(lambda v: v + 1, donate_argnums=0)(donated)
  assert_same(kept, np.arange(4, dtype=np.float32))
  jaxpr = sc.make_jaxpr(lambda v: jnp.array(v) + jnp.asarray(v, copy=True))(kept)
  # as JAX: a tracer's copy is a `copy` equation
  assert [e.primitive.name for e in jaxpr.jaxpr.eqns] == ["copy", "copy", "add"]


def test_array_keywords():
  x = jnp.arange(3.)
  assert jnp.array([1, 2], ndmin=3).shape == (1, 1, 2)
  assert jnp.array(x, ndmin=2).shape == (1, 3)
  assert jnp.array(x, order=None).shape == (3,) and jnp.asarray(x, order="K") is x
  dev = sc.devices()[0]
  assert jnp.asarray([1., 2.], device=dev).committed
  assert jnp.array(x, device=dev).devices() == {dev}
  with pytest.raises(NotImplementedError, match="Only implemented for order='K'"):
    jnp.array(x, order="C")
  with pytest.raises(NotImplementedError, match="Only implemented for order='K'"):
    jnp.asarray(x, order="F")
  with pytest.warns(DeprecationWarning, match="positionally is deprecated"):
    assert jnp.array([1, 2], None, True, "K", 2).shape == (1, 2)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert jnp.array(x, jnp.int32).dtype == np.int32
  with pytest.raises(OverflowError):
    jnp.array(2 ** 40)


# ---------------------------------------------------------------------------
# 7. The remaining functions: ufunc/frompyfunc, put_along_axis, place, apply_along_axis,
#    roots, from_dlpack

UX = np.arange(1, 7, dtype=np.int32).reshape(2, 3)


def _ufunc_cases(m):
  f = m.frompyfunc(lambda x, y: x * y + 1, 2, 1, identity=1)
  g = m.frompyfunc(lambda x, y: x - y, 2, 1)
  h = m.frompyfunc(lambda x: x * 2, 1, 1)
  two = m.frompyfunc(lambda x: (x, x * 2), 1, 2)
  return {
      "call": (f(UX, 2), h(UX), two(UX)),
      "reduce": (f.reduce(UX), f.reduce(UX, axis=1), f.reduce(UX, axis=None),
                 f.reduce(UX, axis=1, keepdims=True), f.reduce(UX, axis=1, initial=2),
                 f.reduce(UX, axis=1, where=UX > 2), g.reduce(UX), g.reduce(UX, axis=-1),
                 f.reduce(np.zeros((0, 3), np.float32)), g.reduce(UX, dtype=np.float32)),
      "accumulate": (g.accumulate(UX), g.accumulate(UX, axis=1),
                     g.accumulate(UX, dtype=np.float32)),
      "outer": (g.outer(np.arange(2), np.arange(3)),),
      "at": (g.at(np.zeros(3, np.float32), np.array([0, 0, 2]), 1., inplace=False),
             h.at(np.arange(4), np.array([1, 1]), inplace=False),
             g.at(np.zeros((2, 3), np.float32), (np.array([0, 1]), np.array([1, 1])),
                  np.array([5., 6.], np.float32), inplace=False)),
      "reduceat": (g.reduceat(np.arange(8), np.array([0, 4, 1, 5])),),
      "attributes": (np.int32(f.nin), np.int32(f.nout), np.int32(h.nargs)),
  }


def test_ufunc_matches_jax():
  got, want = _ufunc_cases(jnp), _ufunc_cases(jjnp)
  for name in want:
    assert_tree_same(got[name], want[name]), name
  f = jnp.frompyfunc(lambda x, y: x - y, 2, 1)
  assert isinstance(f, jnp.ufunc) and repr(f) == "<jnp.ufunc '<lambda>'>"
  assert_same(sc.jit(lambda v: f.reduce(v, axis=1))(UX), jjnp.array([-4, -7], np.int32))
  with pytest.raises(ValueError, match="does not have an identity, so to use a where mask"):
    f.reduce(UX, where=UX > 2)
  with pytest.raises(ValueError, match="zero-size array to reduction operation"):
    f.reduce(np.zeros((0, 2)))
  with pytest.raises(NotImplementedError, match="cannot operate inplace"):
    f.at(UX, 0, 1)
  with pytest.raises(ValueError, match="reduce only supported for binary ufuncs"):
    jnp.frompyfunc(lambda x: x, 1, 1).reduce(UX)
  with pytest.raises(ValueError, match="outer only supported for binary ufuncs"):
    jnp.frompyfunc(lambda x: x, 1, 1).outer(UX, UX)
  with pytest.raises(NotImplementedError, match="tuple of axes"):
    f.reduce(UX, axis=(0, 1))


def test_put_along_axis_place_apply_along_axis():
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  for m in (jnp, jjnp):
    with pytest.raises(ValueError, match="cannot modify arrays in-place"):
      m.put_along_axis(x, np.array([[0], [2]]), 9., axis=1)
    with pytest.raises(ValueError, match="cannot modify arrays in-place"):
      m.place(x, x > 2, 0.)
  for f in [lambda m: m.put_along_axis(x, np.array([[0], [2]]), 9., axis=1, inplace=False),
            lambda m: m.put_along_axis(x, np.array([[1, 0, 1]]), np.array([[7., 8., 9.]],
                                                                          np.float32),
                                       axis=0, inplace=False),
            lambda m: m.put_along_axis(x, np.array([4, 0]), -1., axis=None, inplace=False),
            lambda m: m.place(np.arange(6.), np.arange(6) % 2 == 0,
                              np.array([10., 20.]), inplace=False),
            lambda m: m.place(x, x > 2, np.array([-1.], np.float32), inplace=False),
            lambda m: m.apply_along_axis(lambda v: v.sum(), 1, x),
            lambda m: m.apply_along_axis(lambda v: v * 2, 0, x),
            lambda m: m.apply_along_axis(lambda v: m.outer(v, v), -1, x),
            lambda m: m.apply_along_axis(lambda v, k: v[:k], 1, x, 2),
            lambda m: m.apply_along_axis(lambda v: v.sum(), 0, np.zeros((3, 0), np.float32))]:
    assert_same(f(jnp), f(jjnp))
  assert_same(sc.jit(lambda v, mk: jnp.place(v, mk, np.array([1., 2.], np.float32),
                                             inplace=False))(x, x > 1),
              jjnp.place(x, x > 1, np.array([1., 2.], np.float32), inplace=False))


@pytest.mark.parametrize("p", [[0, 0, 1., -3, 2], [1, 0, 0, -1], [3.], [0, 0, 0.],
                               [0, 1., -6, 11, -6, 0]])
def test_roots_match_jax(p):
  for strip in (True, False):
    got = np.asarray(jnp.roots(np.array(p), strip_zeros=strip))
    want = np.asarray(jjnp.roots(np.array(p), strip_zeros=strip))
    assert got.dtype == want.dtype and got.shape == want.shape
    if strip:   # geev's order: compare as sets
      got, want = np.sort_complex(got), np.sort_complex(want)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, equal_nan=True)
  if len(p) == 6:
    with sc.enable_x64():
      r = jnp.roots(np.array(p, np.float64))
      assert r.dtype == np.complex128
      np.testing.assert_allclose(np.sort_complex(np.asarray(r)),
                                 np.sort_complex(np.roots(p).astype(complex)), atol=1e-8)


def test_roots_under_jit_and_errors():
  got = sc.jit(lambda p: jnp.roots(p, strip_zeros=False))(np.array([0, 1., -3, 2], np.float32))
  np.testing.assert_allclose(np.asarray(got)[:2], [1, 2], rtol=1e-5)
  assert np.isnan(np.asarray(got)[2])
  with pytest.raises(ConcretizationTypeError):
    sc.jit(jnp.roots)(np.array([1., -3, 2], np.float32))
  with pytest.raises(ValueError, match="Input must be a rank-1 array"):
    jnp.roots(np.ones((2, 2)))


def test_from_dlpack():
  assert_same(jnp.from_dlpack(np.arange(3.)), jjnp.from_dlpack(np.arange(3.)))
  assert_same(jnp.from_dlpack(jnp.arange(3)), np.arange(3, dtype=np.int32))
  assert isinstance(jnp.from_dlpack(jjnp.arange(3.)), Array)
  with pytest.raises(TypeError, match="__dlpack__"):
    jnp.from_dlpack([1, 2])
