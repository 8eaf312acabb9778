"""`stagecraft.experimental.pallas` against JAX 0.10.2's `jax.experimental.pallas` in
interpret mode (`pallas_call(..., interpret=True)`, the only mode JAX runs on CPU): the
quickstart's and the grid/BlockSpec guide's kernels, the reduction with `pl.when`, scratch
buffers, scalar prefetch, aliases, Element blocks, out-of-bounds blocks, the transformations
(jit, vmap, jvp; grad's error), the errors JAX raises for bad specs and kernels, the helpers,
and the tpu/triton/mosaic_gpu submodules. Each example is built once per library and run on
both."""
from __future__ import annotations

import re
from functools import partial

import jax
import jax.experimental.pallas as jpl
import jax.experimental.pallas.tpu as jpltpu
import jax.experimental.pallas.triton as jplt
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft.experimental import pallas as spl
from stagecraft.experimental.pallas import tpu as spltpu, triton as splt

JAX = (jax, jjnp, jpl, jpltpu, jplt)
SC = (sc, snp, spl, spltpu, splt)
LIBS = pytest.mark.parametrize("lib", [JAX, SC], ids=["jax", "stagecraft"])


def _outcome(f):
  """f()'s result as a NumPy array (or a list of them), or (exception type, message)."""
  try:
    out = f()
  except Exception as e:  # noqa: BLE001 (compared with JAX's)
    return type(e).__name__, re.sub(" at 0x[0-9a-f]+", " at 0x", str(e))
  if isinstance(out, (tuple, list)):
    return [np.asarray(o) for o in out]
  return np.asarray(out)


def _same(f):
  """Runs f(lib) on JAX and on stagecraft; the values are equal bit for bit (NaNs equal),
  or both raise the same exception type and message."""
  a, b = _outcome(lambda: f(JAX)), _outcome(lambda: f(SC))
  if isinstance(a, tuple):
    assert a == b
    return a
  assert not isinstance(b, tuple), b
  if isinstance(a, list):
    assert len(a) == len(b)
    for x, y in zip(a, b):
      assert x.dtype == y.dtype
      np.testing.assert_array_equal(x, y)
  else:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)
  return a


# ---------------------------------------------------------------------------
# the quickstart (docs/pallas/quickstart.md), in interpret mode


def _add_vectors(lib):
  jx, jnp, pl, _, _ = lib

  def add_vectors_kernel(x_ref, y_ref, o_ref):
    x, y = x_ref[...], y_ref[...]
    o_ref[...] = x + y

  @jx.jit
  def add_vectors(x, y):
    return pl.pallas_call(add_vectors_kernel, out_shape=jx.ShapeDtypeStruct(x.shape, x.dtype),
                          interpret=True)(x, y)
  return add_vectors(jnp.arange(8), jnp.arange(8))


def test_quickstart_add_vectors():
  np.testing.assert_array_equal(_same(_add_vectors), 2 * np.arange(8))


def _add_sliced(lib):
  jx, jnp, pl, _, _ = lib

  def add_sliced_kernel(x_ref, y_ref, o_ref):
    small_mid = x_ref.shape[0] // 2
    x_left, x_right = x_ref.at[:small_mid], x_ref.at[small_mid:]
    y_left, y_right = y_ref.at[:small_mid], y_ref.at[small_mid:]
    large_mid = 2 * small_mid
    o_ref.at[:large_mid][:small_mid] = x_left[...] + y_left[...]
    o_ref.at[:large_mid][small_mid:] = x_left[...] + y_right[...]
    o_ref.at[large_mid:][:small_mid] = x_right[...] + y_left[...]
    o_ref.at[large_mid:][small_mid:] = x_right[...] + y_right[...]
  return pl.pallas_call(add_sliced_kernel, out_shape=jx.ShapeDtypeStruct((8,), jnp.int32),
                        interpret=True)(jnp.arange(4), 10 * jnp.arange(4))


def test_quickstart_ref_views():
  np.testing.assert_array_equal(_same(_add_sliced), [0, 11, 20, 31, 2, 13, 22, 33])


def _iota(lib, tpu):
  jx, jnp, pl, pltpu, _ = lib

  def iota_kernel(o_ref):
    i = pl.program_id(0)
    o_ref[i] = i
  extra = dict(out_specs=pl.BlockSpec(memory_space=pltpu.SMEM)) if tpu else {}
  return pl.pallas_call(iota_kernel, out_shape=jx.ShapeDtypeStruct((8,), jnp.int32),
                        grid=(8,), interpret=True, **extra)()


@pytest.mark.parametrize("tpu", [False, True])
def test_quickstart_iota(tpu):
  np.testing.assert_array_equal(_same(lambda lib: _iota(lib, tpu)), np.arange(8))


def _matmul(lib, x, y, activation, batched=False):
  jx, jnp, pl, _, _ = lib

  def matmul_kernel(x_ref, y_ref, z_ref, *, activation):
    z_ref[...] = activation(x_ref[...] @ y_ref[...])

  def matmul(x, y, *, activation):
    return pl.pallas_call(
        partial(matmul_kernel, activation=activation),
        out_shape=jx.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype),
        grid=(2, 2),
        in_specs=[pl.BlockSpec((x.shape[0] // 2, x.shape[1]), lambda i, j: (i, 0)),
                  pl.BlockSpec((y.shape[0], y.shape[1] // 2), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((x.shape[0] // 2, y.shape[1] // 2), lambda i, j: (i, j)),
        interpret=True)(x, y)
  act = getattr(jx.nn, activation)
  if batched:
    return jx.vmap(partial(matmul, activation=act))(jnp.asarray(x), jnp.asarray(y))
  return matmul(jnp.asarray(x), jnp.asarray(y), activation=act)


def test_quickstart_matmul_grid_blockspecs():
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(32, 16)).astype(np.float32), rng.normal(size=(16, 24)).astype(
      np.float32)
  z = _same(lambda lib: _matmul(lib, x, y, "relu"))
  np.testing.assert_allclose(z, np.maximum(x @ y, 0), rtol=1e-5, atol=1e-5)


def test_quickstart_matmul_vmap():
  rng = np.random.default_rng(1)
  x, y = rng.normal(size=(3, 16, 8)).astype(np.float32), rng.normal(size=(3, 8, 16)).astype(
      np.float32)
  z = _same(lambda lib: _matmul(lib, x, y, "relu", batched=True))
  np.testing.assert_allclose(z, np.maximum(x @ y, 0), rtol=1e-5, atol=1e-5)


def _sum(lib, x, correct):
  jx, jnp, pl, _, _ = lib
  block = (8, 8)

  def correct_sum_kernel(x_ref, o_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
      o_ref[...] = jnp.zeros_like(o_ref)
    o_ref[...] += x_ref[...]

  def incorrect_sum_kernel(x_ref, o_ref):
    o_ref[...] += x_ref[...]
  r, *out_shape = x.shape
  blocks = tuple(o // b for o, b in zip(out_shape, block))
  if correct:
    grid, kernel = (*blocks, r), correct_sum_kernel
    in_map, out_map = (lambda i, j, k: (k, i, j)), (lambda i, j, k: (i, j))
  else:
    grid, kernel = (r, *blocks), incorrect_sum_kernel
    in_map, out_map = (lambda i, j, k: (i, j, k)), (lambda i, j, k: (j, k))
  return pl.pallas_call(kernel, grid=grid, in_specs=[pl.BlockSpec((None, *block), in_map)],
                        out_specs=pl.BlockSpec(block, out_map),
                        out_shape=jx.ShapeDtypeStruct(out_shape, x.dtype),
                        interpret=True)(jnp.asarray(x))


def test_pipelining_reduction_with_when():
  x = np.random.default_rng(2).normal(size=(4, 16, 16)).astype(np.float32)
  np.testing.assert_allclose(_same(lambda lib: _sum(lib, x, True)), x.sum(0), rtol=1e-5)
  # the guide's incorrect kernel accumulates into an uninitialized (NaN) output
  assert np.isnan(_same(lambda lib: _sum(lib, x, False))).all()


# ---------------------------------------------------------------------------
# the grid and BlockSpec guide (docs/pallas/grid_blockspec.md)


def _program_ids(lib, x_shape, block_shape, grid, index_map):
  jx, jnp, pl, _, _ = lib

  def program_ids_kernel(o_ref):
    axes = 0
    for axis in range(len(grid)):
      axes += pl.program_id(axis) * 10 ** (len(grid) - 1 - axis)
    o_ref[...] = jnp.full(o_ref.shape, axes)
  return pl.pallas_call(program_ids_kernel,
                        out_shape=jx.ShapeDtypeStruct(x_shape, dtype=np.int32), grid=grid,
                        in_specs=[], out_specs=pl.BlockSpec(block_shape, index_map),
                        interpret=True)()


@pytest.mark.parametrize("x_shape,block_shape,grid,three", [
    ((8, 6), (2, 3), (4, 2), False),
    ((7, 5), (2, 3), (4, 2), False),    # out-of-bounds blocks
    ((1, 2), (2, 3), (1, 1), False),    # an array smaller than its block
    ((8, 6), (2, 3), (4, 2, 10), True),  # a block revisited along the last grid axis
])
def test_grid_guide_program_ids(x_shape, block_shape, grid, three):
  index_map = (lambda i, j, k: (i, j)) if three else (lambda i, j: (i, j))
  out = _same(lambda lib: _program_ids(lib, x_shape, block_shape, grid, index_map))
  if x_shape == (8, 6) and not three:
    assert out[2, 3] == 11


def test_grid_guide_squeezed_dims():
  def f(lib, squeezed):
    jx, jnp, pl, _, _ = lib

    def kernel(o_ref):
      assert o_ref.shape == (2,)
      o_ref[...] = jnp.full((2,), 10 * pl.program_id(1) + pl.program_id(0))
    dim = pl.squeezed if squeezed else None
    return pl.pallas_call(kernel, jx.ShapeDtypeStruct((3, 4), dtype=np.int32),
                          out_specs=pl.BlockSpec((dim, 2), lambda i, j: (i, j)), grid=(3, 2),
                          interpret=True)()
  expect = [[0, 0, 10, 10], [1, 1, 11, 11], [2, 2, 12, 12]]
  np.testing.assert_array_equal(_same(lambda lib: f(lib, False)), expect)
  np.testing.assert_array_equal(_same(lambda lib: f(lib, True)), expect)


# ---------------------------------------------------------------------------
# more specs: Element blocks, partial writes, aliases, scratch, scalar prefetch, ds


def _double(lib, x, grid, in_spec, out_spec, aliases=None, out=None):
  jx, jnp, pl, _, _ = lib

  def k(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2
  out = x if out is None else out
  return pl.pallas_call(k, out_shape=jx.ShapeDtypeStruct(out.shape, out.dtype), grid=grid,
                        in_specs=in_spec(pl), out_specs=out_spec(pl),
                        input_output_aliases=aliases or {}, interpret=True)(jnp.asarray(x))


def test_blocks_partial_coverage_and_element_blocks():
  x = np.arange(10, dtype=np.float32)
  blk = lambda pl: pl.BlockSpec((4,), lambda i: (i,))   # noqa: E731
  # 3 blocks of 4 cover the 10 elements (the last one reads and drops padding)
  np.testing.assert_array_equal(_same(lambda lib: _double(lib, x, (3,), lambda pl: [blk(pl)],
                                                          blk)), 2 * x)
  # 2 blocks leave the last two elements uninitialized (NaN)
  out = _same(lambda lib: _double(lib, x, (2,), lambda pl: [blk(pl)], blk))
  assert np.isnan(out[8:]).all()
  # Element block dimensions: the index map gives element offsets (overlapping blocks)
  el = lambda pl: pl.BlockSpec((pl.Element(4),), lambda i: (i * 3,))   # noqa: E731
  np.testing.assert_array_equal(_same(lambda lib: _double(lib, x, (3,), lambda pl: [el(pl)],
                                                          el)), 2 * x)
  # the aliased input is the output's initial value: unwritten elements keep it
  np.testing.assert_array_equal(
      _same(lambda lib: _double(lib, x, (2,), lambda pl: [blk(pl)], blk, aliases={0: 0})),
      np.concatenate([2 * x[:8], x[8:]]))


def test_integer_outputs_start_at_the_minimum_and_ds_slices():
  def f(lib):
    jx, jnp, pl, _, _ = lib

    def k(x_ref, o_ref):
      o_ref[pl.ds(0, 3)] = x_ref[pl.ds(5, 3)]
      o_ref[4] = x_ref[pl.ds(1, 4)].sum()
    return pl.pallas_call(k, out_shape=jx.ShapeDtypeStruct((10,), jnp.int32),
                          interpret=True)(jnp.arange(10, dtype=jnp.int32))
  out = _same(f)
  assert out[3] == np.iinfo(np.int32).min and out[4] == 10


def test_scratch_shapes_persist_across_the_grid():
  def f(lib):
    jx, jnp, pl, pltpu, _ = lib

    def k(x_ref, o_ref, acc_ref):
      @pl.when(pl.program_id(0) == 0)
      def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)
      acc_ref[...] += x_ref[...]
      o_ref[...] = acc_ref[...]
    x = jnp.arange(24.0).reshape(4, 6)
    return pl.pallas_call(k, out_shape=jx.ShapeDtypeStruct((4, 6), jnp.float32), grid=(4,),
                          in_specs=[pl.BlockSpec((None, 6), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((None, 6), lambda i: (i, 0)),
                          scratch_shapes=[pltpu.VMEM((6,), jnp.float32)], interpret=True)(x)
  np.testing.assert_array_equal(_same(f), np.cumsum(np.arange(24.0).reshape(4, 6), 0))


def test_prefetch_scalar_grid_spec():
  def f(lib):
    jx, jnp, pl, pltpu, _ = lib

    def k(idx_ref, x_ref, o_ref):
      o_ref[...] = x_ref[...] + idx_ref[pl.program_id(0)]
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(3,),
        in_specs=[pl.BlockSpec((None, 4), lambda i, idx: (idx[i], 0))],
        out_specs=pl.BlockSpec((None, 4), lambda i, idx: (i, 0)))
    x = jnp.arange(16.0).reshape(4, 4)
    return pl.pallas_call(k, out_shape=jx.ShapeDtypeStruct((3, 4), jnp.float32),
                          grid_spec=spec, interpret=True)(jnp.array([2, 0, 3]), x)
  np.testing.assert_array_equal(_same(f), np.arange(16.0).reshape(4, 4)[[2, 0, 3]]
                                + np.array([2, 0, 3])[:, None])


def test_pytree_operands_loops_and_run_scoped():
  def f(lib):
    jx, jnp, pl, pltpu, _ = lib

    def k(xs, o_ref):
      a_ref, b_ref = xs["a"], xs["b"]

      def body(tmp_ref):
        tmp_ref[...] = a_ref[...] * 2

        @pl.loop(0, 3)
        def _(i):
          tmp_ref[...] += b_ref[...]
        o_ref[...] = tmp_ref[...]
      pl.run_scoped(body, pltpu.VMEM((4,), jnp.float32))
    xs = {"a": jnp.arange(4.0), "b": jnp.ones(4)}
    return pl.pallas_call(k, out_shape=jx.ShapeDtypeStruct((4,), jnp.float32),
                          interpret=True)(xs)
  np.testing.assert_array_equal(_same(f), 2 * np.arange(4.0) + 3)


def test_triton_masked_load_store_and_atomic_add():
  def f(lib):
    jx, jnp, pl, _, plt = lib

    def k(x_ref, idx_ref, o_ref):
      o_ref[...] = jnp.zeros_like(o_ref)
      rows = jnp.arange(8)
      v = plt.load(x_ref.at[rows], mask=rows < 5, other=-1.0)
      plt.store(o_ref.at[rows], v * 10, mask=rows % 2 == 0)
      plt.atomic_add(o_ref, idx_ref[...], jnp.ones(3))
    return pl.pallas_call(k, out_shape=jx.ShapeDtypeStruct((8,), jnp.float32),
                          interpret=True)(jnp.arange(8.0), jnp.array([1, 1, 6]))
  # (JAX's interpreter writes a repeated index once: o[1] gets 1, not 2)
  np.testing.assert_array_equal(_same(f), [0, 1, 20, 0, 40, 0, -9, 0])


def test_debug_print_in_kernel(capfd):
  def f(lib):
    jx, jnp, pl, _, _ = lib

    def k(x_ref, o_ref):
      pl.debug_print("program {}", pl.program_id(0))
      o_ref[...] = x_ref[...]
    return pl.pallas_call(k, out_shape=jx.ShapeDtypeStruct((4,), jnp.float32), grid=(2,),
                          interpret=True)(jnp.ones(4))
  f(JAX)
  jax_out = capfd.readouterr().out
  f(SC)
  assert capfd.readouterr().out == jax_out == "program 0\nprogram 1\n"


# ---------------------------------------------------------------------------
# transformations


def _sin_mul(lib):
  jx, jnp, pl, _, _ = lib

  def k(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.sin(x_ref[...]) * y_ref[...]
  spec = pl.BlockSpec((4,), lambda i: (i,))
  return lambda x, y: pl.pallas_call(k, out_shape=jx.ShapeDtypeStruct(x.shape, x.dtype),
                                     grid=(2,), in_specs=[spec, spec], out_specs=spec,
                                     interpret=True)(x, y)


@pytest.mark.parametrize("how", ["jit", "jvp", "jit_jvp", "vmap", "vmap_axis1", "grad",
                                 "linearize"])
def test_transformations(how):
  def f(lib):
    jx, jnp, _, _, _ = lib
    g = _sin_mul(lib)
    x, y = jnp.arange(8.0), jnp.full(8, 2.0)
    ones = jnp.ones(8)
    if how == "jit":
      return jx.jit(g)(x, y)
    if how == "jvp":
      return jx.jvp(g, (x, y), (ones, ones))
    if how == "jit_jvp":
      return jx.jit(lambda a, b: jx.jvp(g, (a, b), (ones, ones)))(x, y)
    if how == "vmap":
      return jx.vmap(lambda b: g(x, b))(jnp.arange(24.0).reshape(3, 8))
    if how == "vmap_axis1":
      return jx.vmap(g, in_axes=(1, None))(jnp.arange(24.0).reshape(8, 3), y)
    if how == "grad":   # JAX's pallas_call has no transpose
      return jx.grad(lambda b: g(x, b).sum())(y)
    return jx.linearize(lambda a: g(a, a), x)[0]
  out = _same(f)
  if how in ("grad", "linearize"):
    assert out[0] == "ValueError" and out[1].startswith("Linearization failed")


# ---------------------------------------------------------------------------
# errors


def _call(lib, *, kernel=None, grid=(2,), in_specs=None, out_specs=None, interpret=True,
          aliases=None, args=None, **kw):
  jx, jnp, pl, _, _ = lib

  def k(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2
  x = jnp.arange(8.0)
  spec = pl.BlockSpec((4,), lambda i: (i,))
  in_specs = [spec] if in_specs is None else in_specs(pl)
  out_specs = spec if out_specs is None else out_specs(pl)
  return pl.pallas_call(kernel or k, out_shape=jx.ShapeDtypeStruct((8,), jnp.float32),
                        grid=grid, in_specs=in_specs, out_specs=out_specs,
                        input_output_aliases=aliases or {}, interpret=interpret,
                        **kw)(*(args(jnp) if args else (x,)))


_CONST = {"jax": jjnp.ones(4), "sc": snp.ones(4)}


@pytest.mark.parametrize("case", [
    "no_interpret", "specs_length", "specs_not_sequence", "index_map_count",
    "index_map_float", "index_map_const", "block_rank", "alias_range", "alias_output_range", "alias_type",
    "alias_type_clean", "kernel_arity", "kernel_const", "kernel_returns", "write_dtype", "write_shape",
    "grid_spec_and_grid"])
def test_errors_match_jax(case):
  def f(lib):
    jnp = lib[1]
    const = _CONST["jax" if lib is JAX else "sc"]
    pl = lib[2]
    if case == "no_interpret":
      return _call(lib, interpret=False)
    if case == "specs_length":
      return _call(lib, in_specs=lambda pl: [pl.BlockSpec((4,), lambda i: (i,))] * 2)
    if case == "specs_not_sequence":
      return _call(lib, in_specs=lambda pl: pl.BlockSpec((4,), lambda i: (i,)))
    if case == "index_map_count":
      return _call(lib, in_specs=lambda pl: [pl.BlockSpec((4,), lambda i: (i, 0))])
    if case == "index_map_float":
      return _call(lib, in_specs=lambda pl: [pl.BlockSpec((4,), lambda i: (i * 1.0,))])
    if case == "index_map_const":
      return _call(lib, in_specs=lambda pl: [pl.BlockSpec((4,), lambda i: (
          (const[0] + i).astype(jnp.int32),))])
    if case == "block_rank":
      return _call(lib, in_specs=lambda pl: [pl.BlockSpec((4, 4), lambda i: (i, i))])
    if case == "alias_range":
      return _call(lib, aliases={1: 0})
    if case == "alias_output_range":
      return _call(lib, aliases={0: 3})
    if case == "alias_type":
      return _call(lib, aliases={0: 0}, args=lambda jnp: (jnp.arange(8),))
    if case == "alias_type_clean":   # the kernel traces: the aliases are checked after
      def k(x_ref, o_ref):
        o_ref[...] = x_ref[...].astype(jnp.float32)
      return _call(lib, kernel=k, aliases={0: 0}, args=lambda jnp: (jnp.arange(8),))
    if case == "kernel_arity":
      return _call(lib, args=lambda jnp: (jnp.ones(8), jnp.ones(8)),
                   in_specs=lambda pl: [pl.BlockSpec((4,), lambda i: (i,))] * 2)
    if case == "kernel_const":
      def k(x_ref, o_ref):
        o_ref[...] = x_ref[...] + const
      return _call(lib, kernel=k)
    if case == "kernel_returns":
      def k(x_ref, o_ref):
        o_ref[...] = x_ref[...]
        return 1
      return _call(lib, kernel=k)
    if case == "write_dtype":
      def k(x_ref, o_ref):
        o_ref[...] = x_ref[...].astype(jnp.int32)
      return _call(lib, kernel=k)
    if case == "write_shape":
      def k(x_ref, o_ref):
        o_ref[...] = x_ref[:2]
      return _call(lib, kernel=k)
    return pl.pallas_call(lambda o: None, out_shape=lib[0].ShapeDtypeStruct((2,), jnp.float32),
                          grid=(2,), grid_spec=pl.GridSpec(grid=(2,)), interpret=True)()
  out = _same(f)
  assert isinstance(out, tuple), out


def test_program_id_outside_a_kernel():
  for pl in (jpl, spl):
    with pytest.raises(AssertionError):
      pl.program_id(0)


# ---------------------------------------------------------------------------
# API objects and helpers


def test_api_objects_print_as_jax():
  for pl in (jpl, spl):
    assert str(pl.Blocked(4)) == "Blocked(4)" and str(pl.Element(3)) == "Element(3)"
    assert repr(pl.squeezed) == "Squeezed()" and str(pl.ANY) == "any"
    assert repr(pl.ds(1, 3)) == "Slice(start=1, size=3, stride=1)"
    assert repr(pl.GridSpec(grid=3)) == ("GridSpec(grid=(3,), grid_names=None, "
                                         "in_specs=NoBlockSpec, out_specs=NoBlockSpec, "
                                         "scratch_shapes=())")
    assert (pl.cdiv(10, 3), pl.next_power_of_2(5), pl.strides_from_shape((2, 3, 4))) == (
        4, 8, (12, 4, 1))
  with pytest.raises(ValueError, match="All fields in CostEstimate must be ints"):
    spl.CostEstimate(flops=1.0, transcendentals=0, bytes_accessed=0)
  assert not hasattr(spl, "load") and not hasattr(jpl, "load")   # triton's in 0.10.2


def test_estimate_cost_matches_jax():
  def f(x, y):
    return jjnp.exp(x @ y) + 1.0

  def g(x, y):
    return snp.exp(x @ y) + 1.0
  a = jpl.estimate_cost(f, jax.ShapeDtypeStruct((8, 16), np.float32),
                        jax.ShapeDtypeStruct((16, 4), np.float32))
  b = spl.estimate_cost(g, sc.ShapeDtypeStruct((8, 16), np.float32),
                        sc.ShapeDtypeStruct((16, 4), np.float32))
  assert (a.flops, a.transcendentals, a.bytes_accessed) == (
      b.flops, b.transcendentals, b.bytes_accessed)


def test_submodules_and_tpu_only_operations():
  params = spltpu.CompilerParams(dimension_semantics=[spltpu.PARALLEL])
  jparams = jpltpu.CompilerParams(dimension_semantics=[jpltpu.PARALLEL])
  assert params.dimension_semantics == (spltpu.PARALLEL,)
  assert str(jparams.dimension_semantics[0].value) == str(params.dimension_semantics[0].value)
  assert splt.CompilerParams(num_warps=4).num_warps == 4
  assert repr(spltpu.VMEM) == repr(jpltpu.VMEM) == "VMEM"
  assert spltpu.VMEM((8,), np.float32).shape == jpltpu.VMEM((8,), np.float32).shape
  with pytest.raises(NotImplementedError, match=r"pallas\.tpu\.prng_seed .*TPU hardware PRNG"):
    spltpu.prng_seed(0)
  with pytest.raises(NotImplementedError, match=r"pallas\.mosaic_gpu\.copy_gmem_to_smem"):
    from stagecraft.experimental.pallas import mosaic_gpu as plgpu
    plgpu.copy_gmem_to_smem(None, None, None)
  with pytest.raises(NotImplementedError, match=r"pallas\.core_map"):
    spl.core_map(None)
  # a pallas_call forced into interpret mode by pltpu's context manager
  with spltpu.force_tpu_interpret_mode():
    np.testing.assert_array_equal(_call(SC, interpret=False), 2 * np.arange(8.0))


# ---------------------------------------------------------------------------
# the TPU guides' kernels (docs/pallas/tpu/sparse.md, matmul.md), in interpret mode


def _dsd(lib):
  """The sparse guide's Dense = Sparse @ Dense kernel: scalar prefetch read by the index
  maps and the kernel, an alias counted over the prefetch operands, a VMEM accumulator."""
  jx, jnp, pl, pltpu, _ = lib
  blk, n_rows = 8, 4
  rng = np.random.default_rng(3)
  idx_i, idx_k = np.array([0, 0, 2, 3, 3]), np.array([1, 3, 0, 1, 2])
  blocks = rng.uniform(size=(5, blk, blk)).astype(np.float32)
  y = rng.uniform(size=(n_rows * blk, 2 * blk)).astype(np.float32)
  num_blocks = 5

  def dsd_kernel(idxs_i_ref, idxs_k_ref, x_ref, y_ref, _, o_ref, accum_scratch):
    blk_idx = pl.program_id(1)
    changed = idxs_i_ref[blk_idx] != idxs_i_ref[jnp.maximum(blk_idx - 1, 0)]

    @pl.when((blk_idx == 0) | changed)
    def _():
      accum_scratch[...] = jnp.zeros_like(accum_scratch)
    accum_scratch[...] += jnp.dot(x_ref[0, :, :], y_ref[...],
                                  preferred_element_type=jnp.float32)
    next_change = idxs_i_ref[blk_idx] != idxs_i_ref[jnp.minimum(blk_idx + 1, num_blocks)]

    @pl.when((blk_idx == num_blocks - 1) | next_change)
    def _():
      o_ref[...] = accum_scratch[...].astype(o_ref.dtype)
  o_map = lambda j, b, bi, bk: (bi[b], j)   # noqa: E731
  spec = pltpu.PrefetchScalarGridSpec(
      num_scalar_prefetch=2, grid=(2, num_blocks),
      in_specs=[pl.BlockSpec((1, blk, blk), lambda j, b, bi, bk: (b, 0, 0)),
                pl.BlockSpec((blk, blk), lambda j, b, bi, bk: (bk[b], j)),
                pl.BlockSpec((blk, blk), o_map)],
      out_specs=pl.BlockSpec((blk, blk), o_map),
      scratch_shapes=[pltpu.VMEM((blk, blk), jnp.float32)])
  kernel = pl.pallas_call(dsd_kernel, grid_spec=spec,
                          out_shape=jx.ShapeDtypeStruct((n_rows * blk, 2 * blk), jnp.float32),
                          input_output_aliases={4: 0},
                          compiler_params=pltpu.CompilerParams(
                              dimension_semantics=("parallel", "arbitrary")),
                          interpret=True)
  return kernel(jnp.asarray(idx_i), jnp.asarray(idx_k), jnp.asarray(blocks), jnp.asarray(y),
                jnp.zeros((n_rows * blk, 2 * blk), jnp.float32))


def test_tpu_sparse_guide_dsd_kernel():
  out = _same(_dsd)
  assert (out[8:16] == 0).all() and out[:8].any()   # row block 1 is never visited



def _scratch_kernel(lib):
  jx, jnp, pl, pltpu, _ = lib

  def k(x_ref, y_ref, o_ref, acc):
    @pl.when(pl.program_id(0) == 0)
    def _():
      acc[...] = jnp.zeros_like(acc)
    acc[...] += x_ref[...] * y_ref[...]
    o_ref[...] = acc[...] + pl.program_id(0)
  spec = pl.BlockSpec((2,), lambda i: (i,))
  return lambda x, y: pl.pallas_call(
      k, out_shape=jx.ShapeDtypeStruct(x.shape, x.dtype), grid=(3,), in_specs=[spec, spec],
      out_specs=spec, scratch_shapes=[pltpu.VMEM((2,), jnp.float32)], interpret=True)(x, y)


@pytest.mark.parametrize("how", ["one", "nested", "axes", "alias"])
def test_vmap_adds_a_grid_axis(how):
  def f(lib):
    jx, jnp, pl = lib[:3]
    x, ys = jnp.arange(6.0), jnp.arange(24.0).reshape(2, 2, 6)
    g = _scratch_kernel(lib)
    if how == "one":
      return jx.vmap(lambda y: g(x, y))(ys[0])
    if how == "nested":
      return jx.vmap(jx.vmap(g, in_axes=(None, 0)), in_axes=(None, 1))(x, ys)
    if how == "axes":
      return jx.vmap(g, in_axes=(0, 1))(ys[0], ys[1].T)

    def h(a, b):   # an unbatched input aliased to the (batched) output
      def k(a_ref, b_ref, o_ref):
        o_ref[:3] = a_ref[:3] + b_ref[:3]
      return pl.pallas_call(k, out_shape=jx.ShapeDtypeStruct(a.shape, a.dtype),
                            input_output_aliases={1: 0}, interpret=True)(a, b)
    return jx.vmap(h, in_axes=(0, None))(ys[0], x)
  _same(f)


def test_vmap_prints_jax_grid_mapping():
  texts = []
  for lib in (JAX, SC):
    jx, jnp = lib[:2]
    g = _scratch_kernel(lib)
    text = str(jx.make_jaxpr(jx.vmap(lambda y: g(jnp.arange(6.0), y)))(jnp.ones((4, 6))))
    texts.append([line.strip() for line in text.splitlines()
                  if line.strip().startswith(("grid_mapping", "out_avals", "interpret"))])
  assert texts[0] == texts[1] and len(texts[0]) == 3
  assert "grid=(4, 3)" in texts[0][0]


@pytest.mark.parametrize("body", ["dynamic_strided_ds", "views", "loops_and_cond"])
def test_kernel_bodies(body):
  def f(lib):
    jx, jnp, pl = lib[:3]
    x = jnp.arange(16.0)

    def dynamic_strided_ds(x_ref, o_ref):
      start = pl.multiple_of(pl.program_id(0) * 4, 4)
      o_ref[pl.ds(start, 4)] = x_ref[pl.ds(start, 4)] * 2
      o_ref[pl.ds(0, 4, stride=2)] = x_ref[pl.ds(1, 4, stride=3)]

    def helper(r):
      r[...] = r[...] + 1

    def views(x_ref, o_ref):
      o_ref[...] = x_ref[...]
      helper(o_ref.at[2:6])
      v = o_ref.at[8:].at[1:3]
      v[...] = v[...] * 100
      o_ref[15] = o_ref.at[0:4].shape[0] * 10.0

    def loops_and_cond(x_ref, o_ref):
      o_ref[...] = jnp.zeros_like(o_ref)

      def step(i, c):
        o_ref[i] = x_ref[i] * c
        return c + 1
      jx.lax.fori_loop(0, 8, step, 1.0)
      jx.lax.cond(x_ref[0] > -1, lambda: o_ref.__setitem__(9, 99.0), lambda: None)
    kernel = {"dynamic_strided_ds": dynamic_strided_ds, "views": views,
              "loops_and_cond": loops_and_cond}[body]
    grid = (4,) if body == "dynamic_strided_ds" else ()
    return pl.pallas_call(kernel, out_shape=jx.ShapeDtypeStruct((16,), jnp.float32), grid=grid,
                          interpret=True)(x)
  _same(f)
