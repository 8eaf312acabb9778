"""Details found by running JAX 0.10.2's own test files (`linalg_test.py`, `lax_control_flow_test.py`,
`checkify_test.py`, ...) on stagecraft through a scratch harness. JAX is the oracle in each test."""
import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from _util import assert_same_error, error_of


_message = error_of
_same_error = assert_same_error


# -- lax.scan: a carry whose structure changes and whose dtype changes is a structure error --

def test_scan_carry_structure_mismatch_with_dtype_change_message_as_jax():
  def body(x, _):
    return (x[0].astype("float32"),), None

  _same_error(lambda: sc.lax.scan(body, (jnp.array(0, "int32"),) * 2, None, length=1),
              lambda: jax.lax.scan(body, (jax.numpy.array(0, "int32"),) * 2, None, length=1))


def test_while_carry_structure_mismatch_with_dtype_change_message_as_jax():
  def body(x):
    return (x[0].astype("float32"),)

  _same_error(
      lambda: sc.lax.while_loop(lambda x: False, body, (jnp.array(0, "int32"),) * 2),
      lambda: jax.lax.while_loop(lambda x: False, body, (jax.numpy.array(0, "int32"),) * 2))


# -- an eager loop whose body calls pmap: one replicated program, as JAX's jit of it ---------

def _pmap_loop(lib, n):
  def body(i, x):
    result = lib.pmap(lambda z: lib.lax.psum(lib.numpy.sin(z), "i"), axis_name="i")(x)
    return result + x
  return lib.lax.fori_loop(0, 3, body, lib.numpy.ones(n))


def test_fori_loop_of_pmap_eager_as_jax():
  n = min(sc.device_count(), 4)
  ours = _pmap_loop(sc, n)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(_pmap_loop(jax, n)), rtol=1e-6)
  # and as the same loop without pmap
  x = np.ones(n, np.float32)
  for _ in range(3):
    x = np.broadcast_to(np.sin(x).sum(), x.shape) + x
  np.testing.assert_allclose(np.asarray(ours), x, rtol=1e-5)


def test_cond_of_pmap_eager():
  n = min(sc.device_count(), 4)
  f = sc.pmap(lambda z: sc.lax.psum(z, "i"), axis_name="i")
  out = sc.lax.cond(True, f, lambda z: z, jnp.arange(n, dtype=jnp.float32))
  np.testing.assert_allclose(np.asarray(out), np.full(n, n * (n - 1) / 2))


def test_fori_loop_of_pmap_too_many_positions_raises():
  n = sc.device_count() * 2
  with pytest.raises(ValueError, match="devices"):
    _pmap_loop(sc, n)


# -- a primitive without a rule: JAX's sentence first (users match it), then how to add one -----

def _rule_errors(lib, corem):
  p = corem.Primitive("foo33")
  p.def_abstract_eval(lambda x: x)
  p.def_impl(lambda x: x)
  return {"vmap": lambda: lib.vmap(p.bind)(lib.numpy.ones(3)),
          "jvp": lambda: lib.jvp(p.bind, (1.,), (1.,)),
          "jit": lambda: lib.jit(p.bind)(1.)}


@pytest.mark.parametrize("what", ["vmap", "jvp", "jit"])
def test_missing_rule_message_starts_as_jax(what):
  from jax.extend import core as jax_core
  from stagecraft import core as sc_core
  t1, m1 = _message(_rule_errors(sc, sc_core)[what])
  t2, m2 = _message(_rule_errors(jax, jax_core)[what])
  assert issubclass(t1, t2), (t1, t2)
  assert m1.startswith(m2), (m1, m2)
  assert "Register" in m1   # and says how to fix it


def test_missing_transpose_rule_message_starts_as_jax():
  from stagecraft.interpreters import ad
  from stagecraft import core as sc_core
  p = sc_core.Primitive("lin33")
  p.def_abstract_eval(lambda x: x)
  p.def_impl(lambda x: x)
  ad.defjvp(p, lambda g, x: p.bind(g))
  with pytest.raises(NotImplementedError, match=r"^Transpose rule \(for reverse-mode "
                     r"differentiation\) for 'lin33' not implemented"):
    sc.grad(p.bind)(1.)


# -- NumPy masked arrays: refused where JAX refuses them, read for shape/dtype by *_like ------

_MASKED = np.ma.array([1.5, 2.5, 3.5], mask=[0, 1, 0])


@pytest.mark.parametrize("call", [
    "asarray(x)", "array(x, copy=False)", "sum(x)", "mean(x)", "add(x, 1)", "linalg.norm(x)",
])
def test_masked_array_refused_as_jax(call):
  _same_error(lambda: eval(call, {"x": _MASKED, **vars(jnp), "linalg": jnp.linalg}),
              lambda: eval(call, {"x": _MASKED, **vars(jax.numpy), "linalg": jax.numpy.linalg}))


@pytest.mark.parametrize("call", [
    "zeros_like(x)", "ones_like(x)", "full_like(x, 3)", "zeros_like(x, shape=(2, 2))",
    "array(x)", "asarray(x, copy=True)", "asarray(x, dtype='int32')", "shape(x)",
])
def test_masked_array_accepted_as_jax(call):
  ours = eval(call, {"x": _MASKED, **vars(jnp)})
  theirs = eval(call, {"x": _MASKED, **vars(jax.numpy)})
  assert np.shape(ours) == np.shape(theirs)
  if not isinstance(theirs, tuple):
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


# -- pl.ds with a traced size as an index: a TypeError, as JAX's ------------------------------

def test_ds_traced_size_index_is_type_error_as_jax():
  import jax.experimental.pallas as jpl
  import stagecraft.experimental.pallas as spl
  x, jx = jnp.arange(10.), jax.numpy.arange(10.)
  with pytest.raises(TypeError, match="Shapes must be 1D sequences of concrete values"):
    jax.jit(lambda n: jx[jpl.ds(0, n)])(2)
  with pytest.raises(TypeError, match="Shapes must be 1D sequences of concrete values.*ds"):
    sc.jit(lambda n: x[spl.ds(0, n)])(2)
  # a traced start is fine in both
  np.testing.assert_array_equal(np.asarray(sc.jit(lambda n: x[spl.ds(n, 3)])(2)),
                                np.asarray(jax.jit(lambda n: jx[jpl.ds(n, 3)])(2)))


# -- out-of-range axes: JAX's words (after the function's name where ours names it) ----------

@pytest.mark.parametrize("call", [
    "numpy.squeeze(numpy.ones((1, 2)), axis=2)", "numpy.flip(numpy.ones(3), 2)",
    "numpy.expand_dims(numpy.ones(3), 4)", "numpy.moveaxis(numpy.ones(3), 3, 0)",
    "numpy.sum(numpy.ones((1, 2)), axis=-3)", "numpy.trim_zeros(numpy.ones(3), axis=2)",
    "lax.split(numpy.ones(3), [1, 2], axis=2)", "lax.expand_dims(numpy.ones(3), (3,))",
    "lax.associative_scan(numpy.add, numpy.ones(3), axis=2)",
    "lax.reduce_sum(numpy.ones((2, 2)), axes=(3,))",
    "lax.rev(numpy.ones(3), (2,))", "lax.rev(numpy.ones(3), (0, 0))",
])
def test_axis_out_of_range_message_contains_jax(call):
  t1, m1 = _message(lambda: eval(call, {"numpy": jnp, "lax": sc.lax}))
  t2, m2 = _message(lambda: eval(call, {"numpy": jax.numpy, "lax": jax.lax}))
  assert t1 is t2 or issubclass(t1, t2), (t1, t2)
  assert m2.rstrip(".") in m1, (m1, m2)


# -- jnp.array: copy/order/ndmin given both positionally and by keyword -----------------------

@pytest.mark.filterwarnings("ignore:Passing the copy")
def test_array_positional_and_keyword_copy_as_jax():
  x = np.ones(2, np.float32)
  _same_error(lambda: jnp.array(x, None, True, copy=False),
              lambda: jax.numpy.array(x, None, True, copy=False))
  _same_error(lambda: jnp.array(x, None, True, "K", ndmin=2, order=None),
              lambda: jax.numpy.array(x, None, True, "K", ndmin=2, order=None))
  ours = jnp.array([1, 2], None, False, "K", ndmin=2)
  theirs = jax.numpy.array([1, 2], None, False, "K", ndmin=2)
  assert ours.shape == theirs.shape == (1, 2)


# -- traced sizes of eye/identity/tri/tril_indices/triu_indices: JAX's exceptions and words ---

@pytest.mark.parametrize("call", [
    "np_.tri(n)", "np_.tri(3, n)", "np_.eye(n)", "np_.eye(3, n)", "np_.identity(n)",
    "np_.tril_indices(n)", "np_.triu_indices(3, n)", "np_.triu_indices(3, 0, n)",
])
def test_traced_size_messages_as_jax(call):
  def run(lib, np_):
    return lambda: lib.jit(lambda n: eval(call, {"np_": np_, "n": n}))(3)
  t1, m1 = _message(run(sc, jnp))
  t2, m2 = _message(run(jax, jax.numpy))
  assert t1.__name__ == t2.__name__
  assert m1 == m2


# -- scipy.linalg (JAX's linalg_test): constructors' checks, sqrtm of singular matrices, -----
# -- rsf2csf's eigenvalue choice, funm through the real Schur form, batched hessenberg -------

import jax.scipy.linalg as jsl  # noqa: E402
import scipy.linalg as osl  # noqa: E402

import stagecraft.scipy.linalg as ssl  # noqa: E402


@pytest.mark.parametrize("call", [
    "convolution_matrix(np.array([1., 2, 3]), 3, mode='bad')",
    "convolution_matrix(np.array(5.), 3)", "convolution_matrix(np.zeros((2, 0)), 3)",
    "fiedler_companion(np.ones((0,)))", "fiedler_companion(np.ones((3, 0)))",
    "leslie(np.array([1.0]), np.array([]))", "leslie(np.array([1., 2, 3]), np.array([0.5]))",
])
def test_linalg_constructor_errors_as_jax(call):
  _same_error(lambda: eval(call, {"np": np, **vars(ssl)}),
              lambda: eval(call, {"np": np, **vars(jsl)}))


@pytest.mark.parametrize("call", [
    "fiedler_companion(np.ones((1,), np.float32))",
    "fiedler_companion(np.ones((3, 1), np.float32))",
    "fiedler_companion(np.array([1., 2, 3, 4], np.float32))",
    "leslie(np.array([1, 2, 3]), np.array([5, 6]))",
    "leslie(np.ones((2, 3), np.float32), np.full((2, 2), 0.5, np.float32))",
])
def test_linalg_constructors_as_jax(call):
  with sc.numpy_rank_promotion("raise"), jax.numpy_rank_promotion("raise"):
    ours = eval(call, {"np": np, **vars(ssl)})
    theirs = eval(call, {"np": np, **vars(jsl)})
  assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
  np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


@pytest.mark.parametrize("diag", [[1, 0, 0], [0, 4, 0], [0, 0, 0, 9], [0, 0, 9, 0, 0, 4]])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_sqrtm_of_singular_diagonal_as_jax(diag, dtype):
  a = np.diag(np.array(diag)).astype(dtype)
  ours = np.asarray(ssl.sqrtm(a))
  np.testing.assert_allclose(ours, np.diag(np.sqrt(np.array(diag, np.float64))), atol=1e-6)
  np.testing.assert_allclose(ours, np.asarray(jsl.sqrtm(a)), atol=1e-6)


def test_sqrtm_general_and_batched():
  rng = np.random.RandomState(0)
  a = rng.randn(20, 20).astype(np.float32)
  np.testing.assert_allclose(np.asarray(ssl.sqrtm(a)), np.asarray(jsl.sqrtm(a)), atol=1e-5)
  b = rng.randn(3, 5, 5)
  r = np.asarray(ssl.sqrtm(b))
  np.testing.assert_allclose(r @ r, b, atol=1e-4)


@pytest.mark.parametrize("n", [4, 15, 50])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_rsf2csf_of_any_matrix_as_scipy(n, dtype):
  # JAX's test feeds matrices that are not in Schur form: the eigenvalue LAPACK gives first
  # decides each rotation
  rng = np.random.RandomState(n)
  t = rng.randn(n, n).astype(dtype)
  z = rng.randn(n, n).astype(dtype)
  if dtype == np.complex64:
    t = (t + 1j * rng.randn(n, n)).astype(dtype)
  for ours, ref in zip(ssl.rsf2csf(t, z), osl.rsf2csf(t, z)):
    np.testing.assert_allclose(np.asarray(ours), ref, atol=3e-5 * n, rtol=3e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_funm_with_branch_cut_as_scipy(dtype):
  rng = np.random.RandomState(1)
  a = (rng.rand(20, 20) * 10 - 5).astype(dtype)
  f = lambda x: x ** -2.718  # noqa: E731 -- a branch cut on the negative reals
  ours, err = ssl.funm(a, f, disp=False)
  ref, ref_err = osl.funm(a, f, disp=False)
  np.testing.assert_allclose(np.asarray(ours), ref, atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(float(err), ref_err, rtol=1e-3)


@pytest.mark.parametrize("shape", [(0, 5, 5), (2, 4, 4)])
def test_batched_hessenberg_with_q_under_rank_promotion_raise(shape):
  a = np.random.RandomState(0).rand(*shape).astype(np.float32)
  with sc.numpy_rank_promotion("raise"):
    h, q = ssl.hessenberg(a, calc_q=True)
  h, q = np.asarray(h), np.asarray(q)
  assert h.shape == q.shape == shape
  np.testing.assert_allclose(q @ h @ np.swapaxes(q, -1, -2), a, atol=1e-5)


@pytest.mark.parametrize("call", [
    "hadamard(-1)", "hadamard(7)", "hadamard(0)", "helmert(0)", "helmert(-1)",
])
def test_hadamard_helmert_errors_as_jax(call):
  _same_error(lambda: eval(call, vars(ssl)), lambda: eval(call, vars(jsl)))


@pytest.mark.parametrize("fn", ["qr", "cholesky", "svd", "eigh", "inv"])
@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_linalg_of_half_precision_is_not_implemented_as_jax(fn, dtype):
  x = np.eye(3).astype(dtype)
  with pytest.raises(NotImplementedError, match=f"Unsupported dtype {np.dtype(dtype).name}"):
    getattr(jax.numpy.linalg, fn)(x)
  with pytest.raises(NotImplementedError, match=f"Unsupported dtype {np.dtype(dtype).name}"):
    getattr(jnp.linalg, fn)(x)


@pytest.mark.parametrize("method", ["lu", "qr"])
def test_batched_slogdet_under_rank_promotion_raise(method):
  a = np.random.RandomState(0).randn(2, 3, 3).astype(np.float32)
  with sc.numpy_rank_promotion("raise"):
    sign, logdet = jnp.linalg.slogdet(a, method=method)
    g = sc.grad(lambda x: jnp.linalg.det(x).sum())(a)
  ref_sign, ref_logdet = np.linalg.slogdet(a)
  np.testing.assert_allclose(np.asarray(sign), ref_sign)
  np.testing.assert_allclose(np.asarray(logdet), ref_logdet, rtol=1e-5)
  np.testing.assert_allclose(np.asarray(g), np.asarray(jax.grad(
      lambda x: jax.numpy.linalg.det(x).sum())(a)), rtol=1e-4, atol=1e-5)


# -- checkify's index checks under jax_numpy_rank_promotion='raise' (JAX's checkify_test) ----

@pytest.mark.parametrize("idx, expected", [((0, 100), "index 100"), (((1, 20), (1, 4)), "index 20")])
def test_checkify_oob_gather_under_rank_promotion_raise(idx, expected):
  from stagecraft.experimental import checkify
  x = jnp.ones((2, 3, 7))
  with sc.numpy_rank_promotion("raise"):
    err, _ = checkify.checkify(sc.jit(lambda x, i: x.at[i].get()),
                               errors=checkify.index_checks)(x, idx)
  assert err.get().startswith("out-of-bounds indexing")
  assert expected in err.get()
