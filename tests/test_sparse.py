"""stagecraft.experimental.sparse against jax.experimental.sparse (JAX is the oracle, run in
the same test on the same inputs): BCOO construction, layouts and padding, the primitives
under jit/grad/vmap, their printed jaxprs, the composed bcoo functions, sparsify, BCSR and
the older formats."""
import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.experimental import sparse as jsparse

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.experimental import sparse

M = np.array([[0., 1, 0, 2], [3, 0, 0, 0], [0, 0, 4, 5]], np.float32)
B3 = (np.arange(24.).reshape(2, 3, 4) % 3).astype(np.float32)   # batched, zeros inside
N = np.array([[1., 0, 2], [0, 0, 0], [0, 3, 0], [4, 0, 0]], np.float32)


def same(ours, theirs, exact=False):
  """Values (and, for sparse arrays, structure) equal to JAX's."""
  if isinstance(theirs, jsparse.JAXSparse):
    assert type(ours).__name__ == type(theirs).__name__
    assert repr(ours) == repr(theirs)
    for a, b in zip(ours.tree_flatten()[0], theirs.tree_flatten()[0]):
      same(a, b, exact)
    return
  a, b = np.asarray(ours), np.asarray(theirs)
  assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
  if exact:
    np.testing.assert_array_equal(a, b)
  else:
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def fd(s, x, **kw):
  """`s.BCOO.fromdense(x, **kw)` with a static nse (JAX needs one under jit)."""
  x = np.asarray(x)
  nb, ndn = kw.get("n_batch", 0), kw.get("n_dense", 0)
  mask = x != 0
  if ndn:
    mask = mask.any(axis=tuple(range(x.ndim - ndn, x.ndim)))
  nse = int(mask.sum(axis=tuple(range(nb, mask.ndim))).max())
  return s.BCOO.fromdense(x, nse=nse, **kw)


def both(f, *args):
  """`f(sparse_module, numpy_module, *args)` on stagecraft and on JAX."""
  return f(sparse, jnp, *args), f(jsparse, jjnp, *args)


def test_bcoo_construction_layouts_and_methods_match_jax():
  cases = [
      lambda s, np_: fd(s, M),
      lambda s, np_: s.BCOO.fromdense(M, nse=7),                  # padding: index = shape
      lambda s, np_: s.BCOO.fromdense(M, nse=3),                  # truncated
      lambda s, np_: fd(s, B3, n_batch=1),
      lambda s, np_: fd(s, B3, n_batch=1, n_dense=1),
      lambda s, np_: fd(s, M, n_dense=1),
      lambda s, np_: fd(s, B3, index_dtype=np.int8),
      lambda s, np_: fd(s, M).T,
      lambda s, np_: fd(s, B3, n_batch=1).transpose((0, 2, 1)),
      lambda s, np_: fd(s, B3, n_dense=1).transpose((1, 0, 2)),
      lambda s, np_: -fd(s, M),
      lambda s, np_: fd(s, M) * 2.0,
      lambda s, np_: 3 * fd(s, M),
      lambda s, np_: fd(s, M) * np_.asarray(M + 1),
      lambda s, np_: fd(s, M).sum(0),
      lambda s, np_: fd(s, B3, n_batch=1, n_dense=1).sum((0, 2)),
      lambda s, np_: fd(s, M).reshape(4, 3),
      lambda s, np_: fd(s, M).reshape((2, 6)),
      lambda s, np_: fd(s, M) @ fd(s, N),
      lambda s, np_: fd(s, M) @ fd(s, np.array([3., 0, 2, 1], np.float32)),
      lambda s, np_: fd(s, B3, n_batch=1) @ fd(s, B3.transpose(0, 2, 1) % 2, n_batch=1),
      lambda s, np_: s.bcoo_sum_duplicates(s.BCOO(
          (np_.asarray([1., 2, 3, 4]), np_.asarray([[0, 1], [2, 2], [0, 1], [3, 4]])),
          shape=(3, 4)), nse=4),
      lambda s, np_: s.BCOO((np_.asarray([1., 2, 3, 4]),
                             np_.asarray([[2, 1], [0, 2], [0, 1], [3, 4]])),
                            shape=(3, 4)).sort_indices(),
      lambda s, np_: s.bcoo_extract(s.BCOO.fromdense(M, nse=6), np_.asarray(M + 1)),
  ]
  v = np.arange(4.0, dtype=np.float32)
  dense_cases = (
      lambda s, np_: fd(s, M) @ v,
      lambda s, np_: fd(s, M) @ N,
      lambda s, np_: np_.asarray(M.T) @ fd(s, M),
      lambda s, np_: np_.arange(3.0) @ fd(s, M),
      lambda s, np_: fd(s, M).sum(),
      lambda s, np_: s.todense(fd(s, B3, n_batch=1, n_dense=1)),
      lambda s, np_: fd(s, B3, n_batch=1) @ np_.ones((2, 4, 3)),
      lambda s, np_: s.bcoo_dot_general(np_.ones((2, 4)), fd(s, B3, n_batch=1),
                                        dimension_numbers=(((1,), (2,)), ((0,), (0,)))))
  # beyond JAX (which raises NotImplementedError): contracting dense dimensions, dot batch
  # dimensions that are not sparse batch dimensions; compared with the dense product
  R = np.linspace(-1, 1, 24).reshape(3, 4, 2).astype(np.float32)
  beyond = ((0, 1, (((1, 2), (0, 1)), ((), ())), R),
            (1, 1, (((0, 2), (0, 1)), ((), ())), R[:2]),
            (0, 0, (((2,), (1,)), ((1,), (0,))), R[:, :, 0]),
            (1, 0, (((1,), (0,)), ((), ())), R[:, 0, :]))

  def program(s, np_):
    out = [[(x, x.todense()) for x in (c(s, np_) for c in cases)],
           [f(s, np_) for f in dense_cases]]
    if s is sparse:
      out.append([s.bcoo_dot_general(fd(s, B3, n_batch=nb, n_dense=ndn), rhs,
                                     dimension_numbers=dims) for nb, ndn, dims, rhs in beyond])
    return out
  # one compiled program per side (eager sparse ops each compile: JAX's would take ~30 s)
  ours_all, ours_dense, ours_beyond = sc.jit(lambda: program(sparse, jnp))()
  theirs_all, theirs_dense = jax.jit(lambda: program(jsparse, jjnp))()
  # nse computed from the values (eagerly; JAX's, under jit, given the nse it computes)
  dup = lambda s, np_, **kw: s.BCOO((np_.asarray([1., 0, 3, 2]), np_.asarray(
      [[0, 1], [1, 1], [2, 2], [0, 1]])), shape=(3, 4)).sum_duplicates(**kw)
  ours = dup(sparse, jnp)
  ours_all.append((ours, ours.todense()))
  theirs_all.append(jax.jit(lambda: (lambda x: (x, x.todense()))(dup(jsparse, jjnp, nse=2)))())
  for i, ((ours, ours_dense_i), (theirs, theirs_dense_i)) in enumerate(zip(ours_all,
                                                                           theirs_all)):
    try:
      same(ours, theirs, exact=True)
      same(ours_dense_i, theirs_dense_i, exact=True)
      if i < len(cases):
        assert (ours.indices_sorted, ours.unique_indices) == (theirs.indices_sorted,
                                                              theirs.unique_indices)
    except AssertionError as e:
      raise AssertionError(f"case {i}: {e}") from None
  (A, _), (jA, _) = ours_all[3], theirs_all[3]
  for name in ("shape", "dtype", "ndim", "size", "nse", "n_batch", "n_sparse", "n_dense",
               "indices_sorted", "unique_indices"):
    assert getattr(A, name) == getattr(jA, name), name
  assert str(sc.tree_util.tree_structure(A)) == str(jax.tree_util.tree_structure(jA))
  for ours, theirs in zip(ours_dense, theirs_dense):
    same(ours, theirs)
  for ours, (_, _, dims, rhs) in zip(ours_beyond, beyond):
    same(ours, jax.lax.dot_general(B3, rhs, dims))


def test_bcoo_errors_match_jax():
  for f in (lambda s, np_: s.BCOO.fromdense(M) @ np_.ones(5),
            lambda s, np_: s.BCOO((np_.ones(3), np_.zeros((6, 2), np.int32)), shape=(3, 4)),
            lambda s, np_: s.BCOO.fromdense(M, nse=2.5),
            lambda s, np_: s.bcoo_transpose(s.BCOO.fromdense(M), permutation=(0, 0)),
            lambda s, np_: s.bcoo_extract(np_.zeros((3, 2), np.int32), M)):
    with pytest.raises(Exception) as ours:
      f(sparse, jnp)
    with pytest.raises(Exception) as theirs:
      f(jsparse, jjnp)
    assert type(ours.value) is type(theirs.value), (ours.value, theirs.value)
    assert (str(ours.value).replace("stagecraft.runtime.array.Array", "jaxlib._jax.ArrayImpl")
            == str(theirs.value))
  with pytest.raises(sc.errors.ConcretizationTypeError, match="nse argument of bcoo_fromdense"):
    sc.jit(lambda m: sparse.BCOO.fromdense(m).data)(M)
  with pytest.raises(ValueError, match="nse must be specified when using the function within"):
    sc.jit(lambda d, i: sparse.bcoo_sum_duplicates(sparse.BCOO((d, i), shape=(3, 4))).data)(
        np.ones(2, np.float32), np.zeros((2, 2), np.int32))


def _jaxpr_text(make_jaxpr, f, *args):
  return str(make_jaxpr(f)(*args)).replace("stagecraft.numpy", "jax.numpy")


def test_bcoo_jaxprs_print_as_jax():
  A = jsparse.BCOO.fromdense(M, nse=5)
  v = np.arange(4.0, dtype=np.float32)
  programs = [
      (lambda s: lambda m: s.BCOO.fromdense(m, nse=5).data, (M,)),
      (lambda s: lambda d, i: s.BCOO((d, i), shape=(3, 4)).todense(), (A.data, A.indices)),
      (lambda s: lambda d, i, v: s.BCOO((d, i), shape=(3, 4)) @ v, (A.data, A.indices, v)),
      (lambda s: lambda d, i: s.BCOO((d, i), shape=(3, 4)).T.data, (A.data, A.indices)),
      (lambda s: lambda d, i: s.bcoo_sum_duplicates(s.BCOO((d, i), shape=(3, 4)), nse=5).data,
       (A.data, A.indices)),
      (lambda s: lambda d, i: s.bcoo_sort_indices(s.BCOO((d, i), shape=(3, 4))).data,
       (A.data, A.indices)),
      (lambda s: lambda d, i: (s.BCOO((d, i), shape=(3, 4))
                               @ s.BCOO((d, i), shape=(3, 4)).T).data, (A.data, A.indices)),
      (lambda s: lambda d, i: (-s.BCOO((d, i), shape=(3, 4)) * 2.0).data, (A.data, A.indices)),
      (lambda s: lambda d: s.BCOO((d, A.indices), shape=(3, 4)).todense(), (A.data,)),
  ]
  for mk, args in programs:
    ours = _jaxpr_text(sc.make_jaxpr, mk(sparse), *args)
    theirs = _jaxpr_text(jax.make_jaxpr, mk(jsparse), *args)
    assert ours == theirs
  # reverse mode: todense transposes to bcoo_extract; dot_general to itself and to the
  # sampled product
  grads = [
      (lambda s: sc_or_jax(s).grad(lambda d: s.BCOO((d, A.indices), shape=(3, 4))
                                   .todense().sum()), (A.data,)),
      (lambda s: sc_or_jax(s).grad(lambda d, v: (s.BCOO((d, A.indices), shape=(3, 4)) @ v)
                                   .sum(), argnums=(0, 1)), (A.data, v)),
      (lambda s: sc_or_jax(s).vmap(lambda v: s.BCOO((A.data, A.indices), shape=(3, 4)) @ v),
       (np.ones((2, 4), np.float32),)),
      (lambda s: sc_or_jax(s).vmap(lambda d: s.BCOO((d, A.indices), shape=(3, 4)).todense()),
       (np.ones((2, 5), np.float32),)),
  ]
  for i, (mk, args) in enumerate(grads):
    ours = _jaxpr_text(sc.make_jaxpr, mk(sparse), *args)
    theirs = _jaxpr_text(jax.make_jaxpr, mk(jsparse), *args)
    if i == 1:   # JAX also stages a dead zero (`_:f32[5] = broadcast_in_dim 0.0`)
      theirs = "\n".join(l for l in theirs.split("\n") if not l.strip().startswith("_:f32[5] = broadcast_in_dim 0.0"))
    assert ours == theirs


def sc_or_jax(s):
  return sc if s is sparse else jax


def test_bcoo_under_jit_grad_vmap_match_jax():
  v = np.linspace(-1, 1, 4).astype(np.float32)
  W = np.linspace(-2, 2, 12).reshape(4, 3).astype(np.float32)
  d = np.array([1., 2, 3, 4, 5, 7], np.float32)
  idx = np.array([[0, 1], [0, 3], [1, 0], [2, 2], [2, 3], [3, 4]])   # last: padding
  ds, vs = np.stack([d, 2 * d, -d]), np.stack([v, v + 1, v - 1])

  def everything(s, T, np_):
    def loss(d, w):
      A = s.BCOO((d, idx), shape=(3, 4))
      y = A @ w                                   # sparse x dense
      z = (A.T @ y).sum() + (A * A.todense()).data.sum()
      C = s.bcoo_sum_duplicates(s.BCOO((np_.concatenate([d, d]), np_.concatenate(
          [A.indices, A.indices])), shape=(3, 4)), nse=6)
      E = s.bcoo_sort_indices(s.bcoo_transpose(A, permutation=(1, 0)))
      return z + (y ** 2).sum() + (C.data ** 2).sum() + (E.data * np_.arange(6.0)).sum()
    f = lambda d, v: s.BCOO((d, idx), shape=(3, 4)) @ v
    out = [T.grad(loss, argnums=0)(d, W), T.grad(loss, argnums=1)(d, W)]
    out += [getattr(T, jac)(f, argnums)(d, v) for jac in ("jacfwd", "jacrev") for argnums in (0, 1)]
    out += [T.vmap(f, (0, None))(ds, v), T.vmap(f, (None, 0))(d, vs), T.vmap(f)(ds, vs)]
    # vmap of the sparse-result primitives: a mapped BCOO gains a batch dimension
    out.append(T.vmap(lambda m: s.BCOO.fromdense(m, nse=4))(B3))
    out.append(T.vmap(lambda m: (s.BCOO.fromdense(m, nse=4).T @ s.BCOO.fromdense(m, nse=4))
                      .todense())(B3))
    out.append(T.vmap(lambda m: s.bcoo_sort_indices(s.BCOO.fromdense(m, nse=5).T).data)(B3))
    # grad through fromdense (its JVP is an extract) and through a batched BCOO
    out.append(T.grad(lambda m: (s.BCOO.fromdense(m, nse=8, n_batch=1)
                                 @ np.ones((2, 4, 1), np.float32)).sum())(B3))
    return out

  ours = sc.jit(lambda: everything(sparse, sc, jnp))()
  theirs = jax.jit(lambda: everything(jsparse, jax, jjnp))()
  assert len(ours) == len(theirs)
  for a, b in zip(ours, theirs):
    same(a, b)
  # sparse x sparse: JAX has no transpose rule for bcoo_spdot_general; compared with dense
  def sp(d):
    A = sparse.BCOO((d, idx), shape=(3, 4))
    return ((A @ A.T).data ** 3).sum()

  def dense(d):
    A = jsparse.BCOO((d, idx), shape=(3, 4)).todense()
    return ((A @ A.T) ** 3).sum()
  same(sc.jit(sc.grad(sp))(d), jax.grad(dense)(d))


def test_bcoo_shape_functions_match_jax():
  cases = [
      lambda s, np_: s.bcoo_broadcast_in_dim(fd(s, M), shape=(2, 3, 4),
                                             broadcast_dimensions=(1, 2)),
      lambda s, np_: s.bcoo_broadcast_in_dim(fd(s, M, n_dense=1), shape=(3, 4, 5),
                                             broadcast_dimensions=(0, 1)),
      lambda s, np_: s.bcoo_broadcast_in_dim(fd(s, B3, n_batch=1), shape=(2, 3, 1, 4),
                                             broadcast_dimensions=(0, 1, 3)),
      lambda s, np_: s.bcoo_concatenate([fd(s, M), fd(s, M * 2)], dimension=0),
      lambda s, np_: s.bcoo_concatenate([fd(s, M), fd(s, M[:, :2])], dimension=1),
      lambda s, np_: s.bcoo_concatenate([fd(s, B3, n_batch=1), fd(s, B3, n_batch=1)],
                                        dimension=0),
      lambda s, np_: s.bcoo_slice(fd(s, M), start_indices=(1, 1), limit_indices=(3, 4)),
      lambda s, np_: s.bcoo_slice(fd(s, B3, n_batch=1, n_dense=1), start_indices=(1, 0, 1),
                                  limit_indices=(2, 3, 3)),
      lambda s, np_: s.bcoo_slice(fd(s, M), start_indices=(0, 0), limit_indices=(3, 4),
                                  strides=(2, 2)),
      lambda s, np_: s.bcoo_dynamic_slice(fd(s, M), (np_.asarray(1), 2), (2, 2)),
      lambda s, np_: s.bcoo_dynamic_slice(fd(s, B3, n_batch=1), (1, 5, 0), (1, 2, 3)),
      lambda s, np_: s.bcoo_rev(fd(s, B3, n_batch=1, n_dense=1), (0, 1, 2)),
      lambda s, np_: s.bcoo_squeeze(fd(s, M[None, :, None, :], n_batch=1), dimensions=(0, 2)),
      lambda s, np_: s.bcoo_reduce_sum(fd(s, B3, n_batch=1), axes=(0, 2)),
      lambda s, np_: s.bcoo_reshape(fd(s, B3, n_batch=1), new_sizes=(2, 12)),
      lambda s, np_: s.bcoo_multiply_sparse(fd(s, M), fd(s, M + np.eye(3, 4, dtype=np.float32))),
      lambda s, np_: s.bcoo_multiply_dense(fd(s, B3, n_batch=1), np_.arange(4.0)),
      lambda s, np_: s.bcoo_update_layout(fd(s, B3, n_batch=1), n_batch=0),
      lambda s, np_: s.bcoo_update_layout(fd(s, B3), n_dense=1, on_inefficient=None),
  ]
  dense = lambda x: x.todense() if hasattr(x, "todense") else x
  ours = sc.jit(lambda: [(x, dense(x)) for x in (c(sparse, jnp) for c in cases)])()
  theirs = jax.jit(lambda: [(x, dense(x)) for x in (c(jsparse, jjnp) for c in cases)])()
  for i, ((a, ad), (b, bd)) in enumerate(zip(ours, theirs)):
    assert repr(a) == repr(b), i
    same(ad, bd)
  with pytest.raises(sparse.SparseEfficiencyError):
    sparse.bcoo_update_layout(fd(sparse, M), n_dense=1)
  # dense fallbacks: gather and convolution
  x = sparse.BCOO.fromdense(M)
  same(sparse.bcoo_gather(x, np.array([[2], [0]]), sc.lax.GatherDimensionNumbers(
      offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,)), (1, 4)).todense(),
       M[[2, 0]])
  same(sparse.bcoo_conv_general_dilated(sparse.BCOO.fromdense(M[None, None]), np.ones(
      (1, 1, 2, 2), np.float32), window_strides=(1, 1), padding="VALID"),
       jax.lax.conv_general_dilated(M[None, None], np.ones((1, 1, 2, 2), np.float32), (1, 1),
                                    "VALID"))


def test_sparsify_and_sparse_autodiff_match_jax():
  Md = M[:2]

  def program(s, np_, T):
    A = fd(s, Md)
    E = fd(s, np.eye(2, 4, dtype=np.float32))
    fs = [lambda x: x + np_.ones((2, 4)), lambda x: x + x, lambda x: x + E, lambda x: x - x,
          lambda x: x.sum(), lambda x: np_.sin(x) * 2, lambda x: x @ np_.ones(4),
          lambda x: x[0], lambda x: x[:, 1:3], lambda x: x.T.reshape(8),
          lambda x: T.jit(lambda y: y * 3)(x), lambda x: x / 2, lambda x: np_.abs(-x) ** 2,
          lambda x: (x * np_.arange(4.0)).astype(np.int32), lambda x: x.sum(0) @ x.T,
          lambda x: np_.concatenate([x, x], axis=0), lambda x: np_.expand_dims(x, 0)]
    outs = [s.sparsify(f)(A) for f in fs]
    outs.append(s.grad(lambda x: (x * x).sum())(A))
    outs.append(s.jacfwd(lambda x: x @ np_.ones(4))(A))
    outs.append(s.jacrev(lambda x: x @ np_.ones(4))(A))
    outs.append(s.value_and_grad(lambda x, y: (x @ y).sum(), argnums=(0, 1))(A, np_.ones(4)))
    return outs
  ours = sc.jit(lambda: program(sparse, jnp, sc))()
  theirs = jax.jit(lambda: program(jsparse, jjnp, jax))()
  for i, (a, b) in enumerate(zip(tree_leaves_sparse(ours), tree_leaves_sparse(theirs))):
    same(a, b)
  # errors (JAX's messages) and the jaxpr of a sparsified function
  A, jA = sparse.BCOO.fromdense(Md), jsparse.BCOO.fromdense(Md)
  for f in (lambda np_: lambda x: np_.cumsum(x), lambda np_: lambda x: np_.exp(x)):
    with pytest.raises(NotImplementedError) as ours_e:
      sparse.sparsify(f(jnp))(A)
    with pytest.raises(NotImplementedError) as theirs_e:
      jsparse.sparsify(f(jjnp))(jA)
    assert str(ours_e.value) == str(theirs_e.value)
  assert (str(sc.make_jaxpr(sparse.sparsify(lambda x: jnp.sin(x) @ jnp.ones(4)))(A))
          == str(jax.make_jaxpr(jsparse.sparsify(lambda x: jjnp.sin(x) @ jjnp.ones(4)))(jA)))


def tree_leaves_sparse(tree):
  is_sp = lambda x: isinstance(x, (sparse.JAXSparse, jsparse.JAXSparse))
  return [x for x in jax.tree_util.tree_leaves(tree, is_leaf=is_sp)]


def test_bcsr_coo_csr_and_helpers_match_jax():
  v = np.arange(4.0, dtype=np.float32)
  W = np.ones((4, 2), np.float32)

  def program(s, np_, T):
    X = s.BCSR.fromdense(M, nse=5)
    Xb = s.BCSR.fromdense(B3, nse=8, n_batch=1)
    C, R, K = (s.COO.fromdense(M, nse=5), s.CSR.fromdense(M, nse=5),
               s.CSC.fromdense(M, nse=5))
    return [X, X.todense(), X @ v, X @ W, Xb.todense(), X.to_bcoo(),
            s.BCSR.from_bcoo(s.BCOO.fromdense(M, nse=5)).indptr,
            s.bcsr_extract(X.indices, X.indptr, np_.asarray(M + 1)),
            T.grad(lambda d: (s.BCSR((d, X.indices, X.indptr), shape=(3, 4)) @ v).sum())(X.data),
            C.todense(), C @ v, C @ W, C.T @ np_.ones(3), R.todense(), R @ v, R @ W,
            R.T @ np_.ones(3), K.todense(), K @ v,
            T.grad(lambda d: (s.CSR((d, R.indices, R.indptr), shape=(3, 4)) @ v).sum())(R.data),
            s.eye(3, 4, k=1).todense(), s.empty((2, 3)).todense()]
  ours = sc.jit(lambda: program(sparse, jnp, sc))()
  theirs = jax.jit(lambda: program(jsparse, jjnp, jax))()
  for a, b in zip(tree_leaves_sparse(ours), tree_leaves_sparse(theirs)):
    if isinstance(b, jsparse.JAXSparse):
      assert repr(a) == repr(b)
      same(a.todense(), b.todense())
    else:
      same(a, b)
  # Its default dtype is float64, so with x64 off it warns, as JAX's does.
  for lib, sp in ((sc, sparse), (jax, jsparse)):
    with pytest.warns(UserWarning, match="^Explicitly requested dtype float64 is not avail"):
      R = sp.random_bcoo(lib.random.key(0), (4, 5), nse=6)
  R = sparse.random_bcoo(sc.random.key(0), (4, 5), nse=6, dtype=np.float32)
  assert repr(R) == "BCOO(float32[4, 5], nse=6)" and int((R.todense() != 0).sum()) == 6
  with pytest.raises(NotImplementedError):
    sparse.linalg.spsolve(None, None, None, None)
