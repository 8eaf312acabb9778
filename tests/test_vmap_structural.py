"""vmap of the shape, slicing/indexing, reduction, cumulative and sort primitives: each
batched result equals a Python loop of the function over the batch (stacked along out_axes),
for several in_axes; vmap of jit; the batched jaxprs move the batch dim no more than JAX's
rules do (no `transpose` where JAX has none); and stagecraft.numpy indexing under vmap."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import stagecraft.numpy as jnp
from stagecraft import jit, lax, make_jaxpr, vmap
from stagecraft.lax.slicing import (GatherDimensionNumbers, GatherScatterMode,
                                    ScatterDimensionNumbers)

from _util import assert_trees_allclose

RNG = np.random.default_rng(0)
f32, i32 = np.float32, np.int32


def _take(a, i, ax):
  return a if ax is None else np.take(np.asarray(a), i, ax)


def _loop(f, args, in_axes, out_axes=0):
  """The per-example results of `f` stacked along `out_axes` (a tuple for several outputs)."""
  n = next(np.shape(a)[ax] for a, ax in zip(args, in_axes) if ax is not None)
  res = [f(*[_take(a, i, ax) for a, ax in zip(args, in_axes)]) for i in range(n)]
  if isinstance(res[0], (tuple, list)):
    return tuple(np.stack([np.asarray(r[j]) for r in res], out_axes)
                 for j in range(len(res[0])))
  return np.stack([np.asarray(r) for r in res], out_axes)


def _check(f, args, in_axes, out_axes=0, rtol=1e-6, jitted=False):
  g = jit(f) if jitted else f
  got = vmap(g, in_axes=tuple(in_axes), out_axes=out_axes)(*args)
  want = _loop(f, args, in_axes, out_axes)
  assert_trees_allclose(got, want, rtol=rtol, atol=1e-6)


def _batched(shape, ax, n=3, dtype=f32):
  """An array of the unbatched `shape` with a batch axis of size n inserted at `ax`."""
  s = list(shape)
  if ax is not None:
    s.insert(ax % (len(shape) + 1), n)
  if np.issubdtype(dtype, np.integer):
    return RNG.integers(-4, 5, s).astype(dtype)
  return RNG.standard_normal(s).astype(dtype)


def _idx(shape, ax, hi, n=3, lo=0):
  s = list(shape)
  if ax is not None:
    s.insert(ax % (len(shape) + 1), n)
  return RNG.integers(lo, hi, s).astype(i32)


def _primitives(jaxpr):
  return [e.primitive.name for e in jaxpr.jaxpr.eqns]


# ---------------------------------------------------------------------------
# The table: (name, f, unbatched operand shapes and dtypes, in_axes choices). Each operand is
# built with the batch axis at its in_axes entry.

_GDN = GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
_GDN2 = GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0, 1),
                               start_index_map=(1, 0))
_SDN = ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                               scatter_dims_to_operand_dims=(0,))


def _gather(x, i, mode=None):
  return lax.gather(x, i, _GDN, (1, 5), mode=mode)


def _scatter(fn, **kw):
  return lambda x, i, u: fn(x, i, u, _SDN, **kw)


def _reduce_general(x, y):
  return lax.reduce((x, y), (np.float32(0), np.float32(-np.inf)),
                    lambda a, b: (lax.add(a[0], b[0]), lax.max(a[1], b[1])), (1,))


_I = ((4, 1), i32)   # indices for _GDN/_SDN: 4 index vectors into dim 0 of a (6, 5) operand

TABLE = [
    ("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x, (2, 4, 3, 5), (1, 3)),
     [((4, 5), f32)], [(0,), (1,), (-1,)]),
    ("broadcast_in_dim_unsorted", lambda x: lax.broadcast_in_dim(x, (5, 2, 4), (2, 0)),
     [((4, 5), f32)], [(0,), (1,), (2,)]),
    ("broadcast_scalar", lambda x: lax.broadcast_in_dim(x, (2, 3), ()), [((), f32)], [(0,)]),
    ("reshape", lambda x: lax.reshape(x, (2, 10)), [((4, 5), f32)], [(0,), (1,), (2,)]),
    ("transpose", lambda x: lax.transpose(x, (2, 0, 1)), [((2, 4, 5), f32)],
     [(0,), (1,), (3,)]),
    ("squeeze", lambda x: lax.squeeze(x, (0, 2)), [((1, 4, 1, 5), f32)], [(0,), (2,), (-1,)]),
    ("rev", lambda x: lax.rev(x, (0, 1)), [((4, 5), f32)], [(0,), (1,), (2,)]),
    ("concatenate", lambda x, y: lax.concatenate([x, y, x], 1),
     [((4, 5), f32), ((4, 2), f32)], [(0, 0), (1, None), (None, 2), (2, 1)]),
    ("pad", lambda x, v: lax.pad(x, v, ((1, 2, 1), (-1, 0, 2))), [((4, 5), f32), ((), f32)],
     [(0, None), (1, None), (2, 0), (None, 0)]),
    ("slice", lambda x: lax.slice(x, (1, 0), (4, 5), (2, 3)), [((4, 5), f32)],
     [(0,), (1,), (2,)]),
    ("dynamic_slice", lambda x, i: lax.dynamic_slice(x, (i, 1), (2, 3)),
     [((4, 5), f32), ((), i32)], [(0, None), (1, None), (2, 0), (None, 0)]),
    ("dynamic_update_slice", lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 2)),
     [((4, 5), f32), ((2, 2), f32), ((), i32)],
     [(0, None, None), (1, 0, None), (None, 2, None), (2, None, 0), (None, None, 0),
      (None, 0, 0), (1, 1, 0)]),
    ("gather", _gather, [((6, 5), f32), _I], [(0, None), (1, None), (None, 0), (None, 1),
                                              (2, 0), (0, 2)]),
    ("gather_fill", lambda x, i: _gather(x, i, "fill"), [((6, 5), f32), _I],
     [(1, None), (None, 0), (0, 1)]),
    ("gather_2d", lambda x, i: lax.gather(x, i, _GDN2, (1, 1)), [((6, 5), f32), ((4, 2), i32)],
     [(0, None), (None, 1), (2, 0)]),
    ("scatter", _scatter(lax.scatter, unique_indices=True), [((6, 5), f32), _I, ((4, 5), f32)],
     [(0, None, None), (None, 0, None), (None, None, 2), (1, 0, 0), (None, 1, 1)]),
    ("scatter_add", _scatter(lax.scatter_add), [((6, 5), f32), _I, ((4, 5), f32)],
     [(0, None, None), (None, 0, None), (None, None, 2), (1, 0, 0), (2, 2, None)]),
    ("scatter_sub", _scatter(lax.scatter_sub), [((6, 5), f32), _I, ((4, 5), f32)],
     [(1, None, 0), (None, 0, 1)]),
    ("scatter_mul", _scatter(lax.scatter_mul), [((6, 5), f32), _I, ((4, 5), f32)],
     [(1, None, 0), (0, 0, 0)]),
    ("scatter_min", _scatter(lax.scatter_min), [((6, 5), f32), _I, ((4, 5), f32)],
     [(None, 0, 1), (2, 1, None)]),
    ("scatter_max", _scatter(lax.scatter_max, mode="clip"), [((6, 5), f32), _I, ((4, 5), f32)],
     [(0, 0, 0), (None, None, 1)]),
    ("reduce_sum", lambda x: lax.reduce_sum(x, (1,)), [((2, 4, 5), f32)], [(0,), (2,), (3,)]),
    ("reduce_max", lambda x: lax.reduce_max(x, (0, 2)), [((2, 4, 5), f32)], [(0,), (1,), (3,)]),
    ("reduce_min", lambda x: lax.reduce_min(x, (0,)), [((4, 5), f32)], [(0,), (1,)]),
    ("reduce_prod", lambda x: lax.reduce_prod(x, (1,)), [((4, 5), f32)], [(1,), (2,)]),
    ("reduce_and", lambda x: lax.reduce_and(x, (1,)), [((4, 5), i32)], [(0,), (2,)]),
    ("reduce_or", lambda x: lax.reduce_or(x, (0,)), [((4, 5), i32)], [(0,), (1,)]),
    ("reduce_xor", lambda x: lax.reduce_xor(x, (0, 1)), [((4, 5), i32)], [(1,), (2,)]),
    ("argmax", lambda x: lax.argmax(x, 1, np.int32), [((4, 5), f32)], [(0,), (1,), (2,)]),
    ("argmin", lambda x: lax.argmin(x, 0, np.int32), [((4, 5), f32)], [(0,), (1,), (2,)]),
    ("reduce_general", _reduce_general, [((4, 5), f32), ((4, 5), f32)],
     [(0, 0), (1, None), (None, 2), (2, 1)]),
    ("cumsum", lambda x: lax.cumsum(x, 1), [((4, 5), f32)], [(0,), (1,), (2,)]),
    ("cumprod", lambda x: lax.cumprod(x, 0, reverse=True), [((4, 5), f32)], [(0,), (2,)]),
    ("cummax", lambda x: lax.cummax(x, 1), [((4, 5), f32)], [(1,), (2,)]),
    ("cummin", lambda x: lax.cummin(x, 0), [((4, 5), f32)], [(0,), (1,)]),
    ("cumlogsumexp", lambda x: lax.cumlogsumexp(x, 1, reverse=True), [((4, 5), f32)],
     [(0,), (2,)]),
    ("sort", lambda x: lax.sort(x, 0), [((4, 5), f32)], [(0,), (1,), (2,)]),
    ("sort_multi", lambda k, v, w: lax.sort((k, v, w), 1, num_keys=2),
     [((4, 5), i32), ((4, 5), i32), ((4, 5), f32)],
     [(0, 0, 0), (1, None, 2), (None, 2, None), (2, 1, 0)]),
    ("top_k_last", lambda x: lax.top_k(x, 3), [((4, 5), f32)], [(0,), (1,), (2,)]),
    ("top_k_axis0", lambda x: lax.top_k(x, 2, axis=0), [((4, 5), f32)], [(0,), (2,)]),
    ("approx_max_k", lambda x: lax.approx_max_k(x, 2), [((4, 5), f32)], [(1,), (2,)]),
]


def _args_for(specs, in_axes, name):
  """Operands with the batch axis at their in_axes entry; integer operands of the indexing
  primitives are indices (some out of bounds for the clamping and filling modes)."""
  args = []
  for (shape, dtype), ax in zip(specs, in_axes):
    if dtype == i32 and name.startswith(("gather", "scatter")):
      lo, hi = (-1, 7) if name == "gather_fill" else (0, 5 if name == "gather_2d" else 6)
      args.append(_idx(shape, ax, hi, lo=lo))
    elif dtype == i32 and name.startswith("dynamic"):
      args.append(_idx(shape, ax, 6, lo=-2))
    else:
      args.append(_batched(shape, ax, dtype=dtype))
  return args


_CASES = [pytest.param(f, specs, ax, name, id=f"{name}-{ax}")
          for name, f, specs, axes in TABLE for ax in axes]


@pytest.mark.parametrize("f,specs,in_axes,name", _CASES)
def test_vmap_matches_loop(f, specs, in_axes, name):
  if name == "scatter":   # unique indices: a permutation prefix of range(6)
    args = _args_for(specs, in_axes, name)
    i_ax = in_axes[1]
    if i_ax is None:
      args[1] = RNG.permutation(6)[:4, None].astype(i32)
    else:
      idx = np.stack([RNG.permutation(6)[:4, None] for _ in range(3)]).astype(i32)
      args[1] = np.moveaxis(idx, 0, i_ax)
  else:
    args = _args_for(specs, in_axes, name)
  _check(f, args, in_axes)


@pytest.mark.parametrize("name", ["gather", "scatter_add", "dynamic_slice",
                                  "dynamic_update_slice", "sort_multi", "reduce_general",
                                  "pad", "top_k_last"])
def test_vmap_of_jit_matches_loop(name):
  _, f, specs, axes = next(t for t in TABLE if t[0] == name)
  in_axes = axes[-1]
  _check(f, _args_for(specs, in_axes, name), in_axes, jitted=True)


@pytest.mark.parametrize("out_axes", [0, 1, -1])
def test_out_axes(out_axes):
  x = _batched((4, 5), 1)
  _check(lambda a: lax.cumsum(lax.rev(a, (0,)), 1), [x], [1], out_axes=out_axes)


# ---------------------------------------------------------------------------
# Hypothesis: random shapes, axes and batch positions.


@st.composite
def _shape_and_bdim(draw, min_rank=1, max_rank=3):
  shape = tuple(draw(st.lists(st.integers(1, 4), min_size=min_rank, max_size=max_rank)))
  bdim = draw(st.integers(0, len(shape)))
  return shape, bdim


@given(_shape_and_bdim(), st.data())
def test_hyp_reductions(sb, data):
  shape, bdim = sb
  axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
  prim = data.draw(st.sampled_from([lax.reduce_sum, lax.reduce_max, lax.reduce_min]))
  x = _batched(shape, bdim, n=2)
  _check(lambda a: prim(a, axes), [x], [bdim], rtol=1e-5)
  axis = data.draw(st.integers(0, len(shape) - 1))
  _check(lambda a: lax.argmax(a, axis, np.int32), [x], [bdim])
  reverse = data.draw(st.booleans())
  _check(lambda a: lax.cumsum(a, axis, reverse=reverse), [x], [bdim], rtol=1e-5)
  _check(lambda a: lax.sort(a, axis), [x], [bdim])


@given(_shape_and_bdim(), st.data())
def test_hyp_shape_ops(sb, data):
  shape, bdim = sb
  x = _batched(shape, bdim, n=2)
  perm = tuple(data.draw(st.permutations(range(len(shape)))))
  _check(lambda a: lax.transpose(a, perm), [x], [bdim])
  rev_dims = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1)))))
  _check(lambda a: lax.rev(a, rev_dims), [x], [bdim])
  _check(lambda a: lax.reshape(a, (int(np.prod(shape)),)), [x], [bdim])
  # broadcast_in_dim into a result with one new dim at a drawn position
  pos = data.draw(st.integers(0, len(shape)))
  out_shape = shape[:pos] + (3,) + shape[pos:]
  dims = tuple(i if i < pos else i + 1 for i in range(len(shape)))
  _check(lambda a: lax.broadcast_in_dim(a, out_shape, dims), [x], [bdim])
  starts = tuple(data.draw(st.integers(0, d - 1)) for d in shape)
  _check(lambda a: lax.slice(a, starts, shape), [x], [bdim])
  cat = data.draw(st.integers(0, len(shape) - 1))
  y = _batched(shape, None)
  _check(lambda a, b: lax.concatenate([a, b], cat), [x, y], [bdim, None])


@given(_shape_and_bdim(min_rank=2), st.data())
def test_hyp_dynamic_slice(sb, data):
  shape, bdim = sb
  x = _batched(shape, bdim, n=2)
  sizes = tuple(data.draw(st.integers(1, d)) for d in shape)
  i_batched = data.draw(st.booleans())
  i = _idx((), 0 if i_batched else None, 5, n=2, lo=-3)
  f = lambda a, k: lax.dynamic_slice(a, (k,) + (1,) * (len(shape) - 1), sizes)
  _check(f, [x, i], [bdim, 0 if i_batched else None])
  u = _batched(sizes, None)
  g = lambda a, k: lax.dynamic_update_slice(a, u, (0,) * (len(shape) - 1) + (k,))
  _check(g, [x, i], [bdim, 0 if i_batched else None])


# ---------------------------------------------------------------------------
# The batch dim is moved no more than JAX's rules move it.


@pytest.mark.parametrize("f,shape,bdim,out_dim", [
    (lambda x: lax.reduce_sum(x, (0,)), (4, 5), 1, 0),
    (lambda x: lax.reduce_max(x, (1,)), (4, 5), 2, 1),
    (lambda x: lax.argmax(x, 0, np.int32), (4, 5), 1, 0),
    (lambda x: lax.cumsum(x, 0), (4, 5), 1, 1),
    (lambda x: lax.sort(x, 1), (4, 5), 0, 0),
    (lambda x: lax.sort(x, 0), (4, 5), 2, 2),
    (lambda x: lax.top_k(x, 2)[0], (4, 5), 2, 2),
    (lambda x: lax.rev(x, (1,)), (4, 5), 1, 1),
    (lambda x: lax.slice(x, (1, 1), (3, 4)), (4, 5), 1, 1),
    (lambda x: lax.squeeze(x, (0,)), (1, 5), 0, 0),   # (JAX moves the batch dim to the front)
    (lambda x: lax.pad(x, np.float32(0), ((1, 1, 0),)), (4,), 1, 1),
    # (dynamic_slice: JAX 0.10.2 batches it into a gather with the batch dim in front, which
    # stages a transpose; stagecraft does the same: tests/test_jaxpr_printing_lax.py)
])
def test_no_transpose(f, shape, bdim, out_dim):
  """With out_axes at the rule's own output dim, no transpose is staged (as JAX), and the
  result is right."""
  x = _batched(shape, bdim)
  jaxpr = make_jaxpr(vmap(f, in_axes=bdim, out_axes=out_dim))(x)
  assert "transpose" not in _primitives(jaxpr), jaxpr
  _check(f, [x], [bdim], out_axes=out_dim)


@pytest.mark.parametrize("f,shape,bdim", [
    (lambda L: lambda x: L.broadcast_in_dim(x, (4, 3, 5), (0, 2)), (4, 5), 1),
    (lambda L: lambda x: L.concatenate([x, x], 0), (4, 5), 1),
])
def test_batch_dim_to_front_as_jax(f, shape, bdim):
  """broadcast_in_dim and concatenate move the batch dim to the front, as JAX's rules do
  (the same printed jaxpr), and the result is right."""
  import jax
  x = _batched(shape, bdim)
  ours = make_jaxpr(vmap(f(lax), in_axes=bdim))(x)
  theirs = jax.make_jaxpr(jax.vmap(f(jax.lax), in_axes=bdim))(x)
  assert str(ours) == str(theirs)
  _check(f(lax), [x], [bdim])


def test_reduce_sum_batch_dim_kept():
  x = _batched((4, 5), 1)
  jaxpr = make_jaxpr(vmap(lambda a: lax.reduce_sum(a, (0,)), in_axes=1, out_axes=0))(x)
  assert _primitives(jaxpr) == ["reduce_sum"], jaxpr
  np.testing.assert_allclose(np.asarray(vmap(lambda a: lax.reduce_sum(a, (0,)),
                                             in_axes=1)(x)), x.sum(0), rtol=1e-5)


def test_gather_uses_batching_dims():
  x, i = _batched((6, 5), 0), _idx((4,), 0, 6)[..., None]
  jaxpr = make_jaxpr(vmap(_gather))(x, i)
  eqn, = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "gather"]
  dn = eqn.params["dimension_numbers"]
  assert dn.operand_batching_dims == (0,) and dn.start_indices_batching_dims == (0,)
  assert "transpose" not in _primitives(jaxpr)


def test_general_reduce_batched_init_raises():
  x = _batched((4,), 0)
  f = lambda a, init: lax.reduce(a, init, lax.add, (0,))
  with pytest.raises(NotImplementedError, match="batched initial values"):
    vmap(f)(x, np.arange(3, dtype=f32))


# ---------------------------------------------------------------------------
# stagecraft.numpy indexing and friends under vmap.


def test_numpy_index_batched_indices():
  xs, idx = _batched((6,), 0), _idx((), 0, 6, lo=-6)
  _check(lambda x, i: jnp.asarray(x)[i], [xs, idx], [0, 0])
  _check(lambda x, i: jnp.asarray(x)[i], [xs[0], idx], [None, 0])
  xs2 = _batched((6, 5), 1)
  _check(lambda x, i: jnp.asarray(x)[i, 1:4], [xs2, idx], [1, 0])
  ii = _idx((4,), 0, 6)
  _check(lambda x, i: jnp.asarray(x)[i], [xs2, ii], [1, 0])
  _check(lambda x, i: jnp.asarray(x)[:, i % 5], [xs2, ii], [1, None])


def test_numpy_at_updates():
  xs, idx = _batched((6,), 0), _idx((4,), 0, 6)   # repeated indices accumulate
  v = _batched((4,), 0)
  _check(lambda x, i, u: jnp.asarray(x).at[i].add(u), [xs, idx, v], [0, 0, 0])
  _check(lambda x, i, u: jnp.asarray(x).at[i].add(u), [xs[0], idx, v[0]], [None, 0, None])
  _check(lambda x, i: jnp.asarray(x).at[i].multiply(2.0), [xs, idx], [0, 0])
  _check(lambda x, i: jnp.asarray(x).at[i].max(0.5), [xs, idx], [0, None])
  _check(lambda x, i: jnp.asarray(x).at[i].min(0.5), [xs, idx], [None, 0])
  _check(lambda x, i: jnp.asarray(x).at[i].set(7.0), [xs, idx[:, :1]], [0, 0])
  _check(lambda x, i: jnp.asarray(x).at[i].get(mode="fill", fill_value=-1.0), [xs, idx + 3], [0, 0])


def test_numpy_take_along_sort_cumsum_concatenate():
  xs = _batched((4, 5), 2)
  _check(lambda x: jnp.sort(x, axis=0), [xs], [2])
  _check(lambda x: jnp.argsort(x, axis=1), [xs], [2])
  _check(lambda x: jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1), [xs], [2])
  idx = _idx((4, 5), 0, 5)
  _check(lambda x, i: jnp.take_along_axis(x, i, axis=1), [xs, idx], [2, 0])
  _check(lambda x, i: jnp.take_along_axis(x, i, axis=0), [xs[..., 0], idx % 4], [None, 0])
  _check(lambda x: jnp.cumsum(x, axis=1), [xs], [2], rtol=1e-5)
  _check(lambda x: jnp.cumsum(x), [xs], [0], rtol=1e-5)
  _check(lambda x, y: jnp.concatenate([x, y], axis=0), [xs, xs[..., 0]], [2, None])


def test_nested_vmap_indexing():
  """Two vmaps stack batching dims on gathers/scatters that already have some."""
  xs, idx = _batched((2, 6), 0), _idx((2,), 0, 6)
  f = lambda x, i: jnp.asarray(x)[i]
  got = vmap(vmap(f, in_axes=(1, 0)), in_axes=(0, 1))(np.moveaxis(xs, 1, 2), idx.T)
  want = np.array([[xs[a, b, idx[a, b]] for b in range(2)] for a in range(3)])
  np.testing.assert_allclose(np.asarray(got), want)
  g = lambda x, i, u: jnp.asarray(x).at[i].add(u)
  u = _batched((2,), 0)
  got = vmap(vmap(g))(xs, idx, u)
  want = xs.copy()
  for a in range(3):
    for b in range(2):
      want[a, b, idx[a, b]] += u[a, b]
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
  k = _batched((2, 4, 5), 0)
  got = vmap(vmap(lambda x: lax.sort(x, 0)), in_axes=1)(k)
  np.testing.assert_allclose(np.asarray(got), np.sort(np.moveaxis(k, 1, 0), axis=2))
