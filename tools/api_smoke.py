"""The smoke calls of `tools/api_coverage.py`: one small, real call per public JAX name.

`SMOKE` maps a JAX name ("jax.scipy.special.gammaln") to a function of the library's module
for that namespace: `stagecraft.scipy.special` when stagecraft is measured, `jax.scipy.special`
when the table itself is checked (`python -m tools.api_coverage --against jax`), so every entry
must run on both. Each entry uses valid arguments; calls run eagerly and their array results are
waited for. Names without an entry get `generic`: a call with one or two float32 arrays
(three for special functions), then with int32 arrays, as an elementwise function takes them.

A few names cannot run on one CPU device in JAX itself (`ragged_all_to_all`, which XLA:CPU
does not compile, is lowered with `jit(...).lower(...)`; `psend`, `precv`, `pbroadcast`,
`scaled_matmul` and `scaled_dot_general` with block-scaling configs, which JAX lowers only for
GPUs, are traced with `make_jaxpr`): that is as far as JAX gets there, and the smoke call goes
as far.
"""
from __future__ import annotations

import dataclasses
import importlib
import io
from functools import partial

import numpy as np

f32 = np.float32
X = np.array([0.25, 0.5], f32)
Y = np.array([0.75, 1.5], f32)
I = np.array([1, 2], np.int32)
J = np.array([3, 4], np.int32)
B = np.array([True, False])
C = np.array([1 + 2j, 3 - 1j], np.complex64)
V = np.array([1.0, 2.0, 3.0], f32)
M = np.array([[2.0, 1.0, 0.0], [0.5, 3.0, 1.0], [0.0, 1.0, 4.0]], f32)   # nonsingular
S = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]], f32)   # SPD
U = np.triu(S)                                                          # upper triangular
IMG = np.arange(25, dtype=f32).reshape(1, 1, 5, 5)                      # NCHW
KER = np.ones((1, 1, 3, 3), f32)                                        # OIHW
DN = ("NCHW", "OIHW", "NCHW")
IDX = np.array([[0], [2]], np.int32)
SQ2 = np.ones((2, 2), f32)

_GENERIC_ARGS = [(X,), (X, Y), (X, Y, X), (I,), (I, J)]


def generic(mod, name: str):
  """Calls `mod.<name>` with the first argument tuple of `_GENERIC_ARGS` that it accepts
  and returns the result; raises the first call's exception when none runs (AttributeError
  if the name is absent). A result that is itself callable (a factory or decorator) does not
  count: such a name needs an entry in `SMOKE`."""
  f = getattr(mod, name)
  first = None
  for args in _GENERIC_ARGS:
    try:
      out = f(*args)
      wait(out)
    except Exception as e:  # noqa: BLE001 - try the next argument tuple
      first = first or e
      continue
    if callable(out):
      raise TypeError(f"{name}{tuple(np.shape(a) for a in args)} returned a callable; "
                      "give it an entry in tools/api_smoke.SMOKE")
    return out
  raise first


def wait(out) -> None:
  """Waits for every array in the (nested) result `out`, so that run-time errors surface."""
  if hasattr(out, "block_until_ready"):
    out.block_until_ready()
  elif isinstance(out, (tuple, list)):
    for o in out:
      wait(o)
  elif isinstance(out, dict):
    for o in out.values():
      wait(o)


def root(m):
  """The library's top-level package (`stagecraft` or `jax`) of the module `m`."""
  return importlib.import_module(m.__name__.split(".", 1)[0])


def jnp(m):
  return importlib.import_module(root(m).__name__ + ".numpy")


def key(m):
  """A raw uint32 PRNG key of the library of `m`."""
  return importlib.import_module(root(m).__name__ + ".random").PRNGKey(0)


def raises(exc_type, f, *args, **kwargs):
  """Calls f and checks that it raises `exc_type` (for names JAX defines only to raise)."""
  try:
    f(*args, **kwargs)
  except exc_type:
    return None
  raise AssertionError(f"{getattr(f, '__name__', f)} did not raise {exc_type.__name__}")


def lowered(m, f, *args):
  """The StableHLO text of `jit(f)` at `args` (for names that run only on accelerators or
  in multi-device programs)."""
  return root(m).jit(f).lower(*args).as_text()


def traced(m, f, *args):
  """The jaxpr of `f` at `args` (for names that JAX itself cannot lower on a CPU)."""
  return root(m).make_jaxpr(f)(*args)


def in_shard_map(m, f, x):
  """`f(x)` inside a shard_map over a one-device mesh with the axis "i"."""
  R = root(m)
  mesh = R.sharding.Mesh(np.array(R.devices()[:1]), ("i",))
  P = R.sharding.PartitionSpec
  return R.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)


def in_vmap(m, f, x):
  """`vmap(f, axis_name="i")(x)`: collectives over a batch axis."""
  return root(m).vmap(f, axis_name="i")(x)


# --- helpers for names whose call needs statements ---------------------------------------

def _save(m):
  buf = io.BytesIO()
  m.save(buf, V)
  return buf.getvalue()


def _savez(m):
  buf = io.BytesIO()
  m.savez(buf, a=V)
  return buf.getvalue()


def _load(m):
  buf = io.BytesIO()
  np.save(buf, V)
  buf.seek(0)
  return m.load(buf)


def _printoptions(m):
  with m.printoptions(precision=3):
    return repr(m.get_printoptions())


def _set_printoptions(m):
  m.set_printoptions(**m.get_printoptions())


def _register_dataclass(m):
  @dataclasses.dataclass
  class Point:
    x: object
    y: object
  m.register_dataclass(Point, data_fields=["x", "y"], meta_fields=[])
  return m.tree_leaves(Point(X, Y))


def _static(m):
  tu = importlib.import_module(root(m).__name__ + ".tree_util")

  @dataclasses.dataclass
  class Op:
    x: object
    name: str = m.static(default="add")
  tu.register_dataclass(Op)
  return m.leaves(Op(X))


class _Pair:
  def __init__(self, a, b):
    self.a, self.b = a, b


def _register_pytree_node(m):
  cls = type("Pair", (_Pair,), {})
  m.register_pytree_node(cls, lambda p: ((p.a, p.b), None), lambda _, c: cls(*c))
  return m.tree_leaves(cls(X, Y))


def _register_pytree_with_keys(m):
  cls = type("KeyedPair", (_Pair,), {})
  m.register_pytree_with_keys(
      cls, lambda p: (((m.GetAttrKey("a"), p.a), (m.GetAttrKey("b"), p.b)), None),
      lambda _, c: cls(*c))
  return m.tree_leaves_with_path(cls(X, Y))


def _register_pytree_node_class(m):
  cls = type("PairClass", (_Pair,), {
      "tree_flatten": lambda self: ((self.a, self.b), None),
      "tree_unflatten": classmethod(lambda c, aux, ch: c(*ch))})
  m.register_pytree_node_class(cls)
  return m.tree_leaves(cls(X, Y))


def _register_pytree_with_keys_class(m):
  cls = type("KeyedPairClass", (_Pair,), {
      "tree_flatten_with_keys": lambda self: (((m.GetAttrKey("a"), self.a),
                                               (m.GetAttrKey("b"), self.b)), None),
      "tree_unflatten": classmethod(lambda c, aux, ch: c(*ch))})
  m.register_pytree_with_keys_class(cls)
  return m.tree_leaves_with_path(cls(X, Y))


def _register_static(m):
  cls = type("StaticThing", (), {"__hash__": lambda s: 0, "__eq__": lambda s, o: True})
  m.register_static(cls)
  return m.tree_leaves([cls(), X])


def _slerp(m):
  rots = m.Rotation.from_euler("xyz", np.array([[0, 0, 0], [0, 0, 1]], f32))
  return m.Slerp.init(np.array([0.0, 1.0], f32), rots)(np.array(0.5, f32)).as_quat()


def _send_recv(m, y):
  token = m.psend(y, "i", [(0, 0)])
  return m.precv(token, root(m).ShapeDtypeStruct(y.shape, y.dtype), "i", [(0, 0)])


def _gather_dnums(m):
  return m.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,),
                                  start_index_map=(0,))


def _scatter_dnums(m):
  return m.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                   scatter_dims_to_operand_dims=(0,))


def _scatter(op):
  return lambda m: getattr(m, op)(V, IDX, np.array([9.0, 7.0], f32), _scatter_dnums(m))


def _init(name, *args, shape=(3, 3)):
  return lambda m: getattr(m, name)(*args)(key(m), shape)


def _rand(name, *args, **kwargs):
  return lambda m: getattr(m, name)(key(m), *args, **kwargs)


def _dist(ns, names, call):
  return {f"{ns}.{n}": (lambda n: lambda m: call(getattr(m, n)))(n)
          for n in names}


NUMPY = {
    "apply_along_axis": lambda m: m.apply_along_axis(lambda v: v.sum(), 0, M),
    "apply_over_axes": lambda m: m.apply_over_axes(m.sum, M, [0]),
    "arange": lambda m: m.arange(5),
    "argpartition": lambda m: m.argpartition(V, 1),
    "array_split": lambda m: m.array_split(V, 2),
    "astype": lambda m: m.astype(X, np.int32),
    "bartlett": lambda m: m.bartlett(5),
    "blackman": lambda m: m.blackman(5),
    "hamming": lambda m: m.hamming(5),
    "hanning": lambda m: m.hanning(5),
    "kaiser": lambda m: m.kaiser(5, 2.0),
    "lexsort": lambda m: m.lexsort((V, V[::-1])),
    "broadcast_to": lambda m: m.broadcast_to(X, (3, 2)),
    "broadcast_shapes": lambda m: m.broadcast_shapes((3, 1), (2,)),
    "can_cast": lambda m: m.can_cast(np.int32, np.float32),
    "choose": lambda m: m.choose(np.array([0, 1]), [X, Y]),
    "concat": lambda m: m.concat([X, Y]),
    "concatenate": lambda m: m.concatenate([X, Y]),
    "delete": lambda m: m.delete(V, 1),
    "diag_indices": lambda m: m.diag_indices(3),
    "diag_indices_from": lambda m: m.diag_indices_from(M),
    "diagonal": lambda m: m.diagonal(M),
    "dsplit": lambda m: m.dsplit(np.ones((1, 1, 4), f32), 2),
    "hsplit": lambda m: m.hsplit(np.ones((2, 4), f32), 2),
    "vsplit": lambda m: m.vsplit(np.ones((4, 2), f32), 2),
    "split": lambda m: m.split(np.arange(4, dtype=f32), 2),
    "einsum": lambda m: m.einsum("ij,j->i", M, V),
    "einsum_path": lambda m: m.einsum_path("ij,jk->ik", M, M),
    "expand_dims": lambda m: m.expand_dims(X, 0),
    "eye": lambda m: m.eye(3),
    "identity": lambda m: m.identity(3),
    "tri": lambda m: m.tri(3),
    "fill_diagonal": lambda m: m.fill_diagonal(M, 0.0, inplace=False),
    "fliplr": lambda m: m.fliplr(M),
    "fromfile": lambda m: raises(NotImplementedError, m.fromfile, "data.bin"),
    "fromiter": lambda m: raises(NotImplementedError, m.fromiter, iter([1.0]), f32),
    "fromfunction": lambda m: m.fromfunction(lambda i, j: i + j, (2, 2), dtype=f32),
    "frompyfunc": lambda m: m.frompyfunc(lambda a, b: a + b, 2, 1)(X, Y),
    "fromstring": lambda m: m.fromstring("1 2", sep=" "),
    "get_printoptions": lambda m: m.get_printoptions(),
    "set_printoptions": _set_printoptions,
    "printoptions": _printoptions,
    "histogramdd": lambda m: m.histogramdd(np.ones((4, 2), f32), bins=2),
    "insert": lambda m: m.insert(V, 1, 5.0),
    "interp": lambda m: m.interp(X, V, V),
    "isdtype": lambda m: m.isdtype(np.float32, "real floating"),
    "issubdtype": lambda m: m.issubdtype(np.float32, np.floating),
    "load": _load,
    "save": _save,
    "savez": _savez,
    "mask_indices": lambda m: m.mask_indices(3, m.triu),
    "matrix_transpose": lambda m: m.matrix_transpose(M),
    "matvec": lambda m: m.matvec(M, V),
    "vecmat": lambda m: m.vecmat(V, M),
    "moveaxis": lambda m: m.moveaxis(M, 0, 1),
    "partition": lambda m: m.partition(V, 1),
    "permute_dims": lambda m: m.permute_dims(M, (1, 0)),
    "piecewise": lambda m: m.piecewise(X, [X < 0.3], [lambda x: x, lambda x: -x]),
    "place": lambda m: m.place(V, V > 1, 0.0, inplace=False),
    "polyfit": lambda m: m.polyfit(V, V, 1),
    "promote_types": lambda m: m.promote_types(np.int32, np.float32),
    "put": lambda m: m.put(V, np.array([0]), 5.0, inplace=False),
    "put_along_axis": lambda m: m.put_along_axis(V, np.array([0]), 5.0, axis=0,
                                                 inplace=False),
    "reshape": lambda m: m.reshape(M, (9,)),
    "resize": lambda m: m.resize(V, (2, 2)),
    "rollaxis": lambda m: m.rollaxis(M, 1),
    "rot90": lambda m: m.rot90(M),
    "swapaxes": lambda m: m.swapaxes(M, 0, 1),
    "tensordot": lambda m: m.tensordot(M, M),
    "trace": lambda m: m.trace(M),
    "tril": lambda m: m.tril(M),
    "triu": lambda m: m.triu(M),
    "tril_indices": lambda m: m.tril_indices(3),
    "triu_indices": lambda m: m.triu_indices(3),
    "tril_indices_from": lambda m: m.tril_indices_from(M),
    "triu_indices_from": lambda m: m.triu_indices_from(M),
    "unpackbits": lambda m: m.unpackbits(np.array([3], np.uint8)),
    "vectorize": lambda m: m.vectorize(lambda a, b: a + b)(X, Y),
}

NUMPY_LINALG = {
    "cholesky": lambda m: m.cholesky(S),
    "cond": lambda m: m.cond(M),
    "cross": lambda m: m.cross(V, V[::-1]),
    "det": lambda m: m.det(M),
    "diagonal": lambda m: m.diagonal(M),
    "eig": lambda m: m.eig(M),
    "eigh": lambda m: m.eigh(S),
    "eigvals": lambda m: m.eigvals(M),
    "eigvalsh": lambda m: m.eigvalsh(S),
    "inv": lambda m: m.inv(M),
    "lstsq": lambda m: m.lstsq(M, V),
    "matrix_norm": lambda m: m.matrix_norm(M),
    "matrix_power": lambda m: m.matrix_power(M, 2),
    "matrix_rank": lambda m: m.matrix_rank(M),
    "matrix_transpose": lambda m: m.matrix_transpose(M),
    "multi_dot": lambda m: m.multi_dot([M, M, V]),
    "norm": lambda m: m.norm(M),
    "pinv": lambda m: m.pinv(M),
    "qr": lambda m: m.qr(M),
    "slogdet": lambda m: m.slogdet(M),
    "solve": lambda m: m.solve(M, V),
    "svd": lambda m: m.svd(M),
    "svdvals": lambda m: m.svdvals(M),
    "tensordot": lambda m: m.tensordot(M, M),
    "tensorinv": lambda m: m.tensorinv(np.eye(4, dtype=f32).reshape(4, 2, 2), ind=1),
    "tensorsolve": lambda m: m.tensorsolve(np.eye(4, dtype=f32).reshape(2, 2, 4),
                                           np.ones((2, 2), f32)),
    "trace": lambda m: m.trace(M),
}

NUMPY_FFT = {
    "fft2": lambda m: m.fft2(M),
    "ifft2": lambda m: m.ifft2(M),
    "rfft2": lambda m: m.rfft2(M),
    "irfft2": lambda m: m.irfft2(M),
    "fftfreq": lambda m: m.fftfreq(4),
    "rfftfreq": lambda m: m.rfftfreq(4),
}

LAX = {
    "after_all": lambda m: m.after_all(m.create_token(), m.create_token()),
    "all_gather": lambda m: in_vmap(m, lambda x: m.all_gather(x, "i"), M),
    "all_to_all": lambda m: in_vmap(m, lambda x: m.all_to_all(x, "i", 0, 0), SQ2),
    "approx_max_k": lambda m: m.approx_max_k(V, 2),
    "approx_min_k": lambda m: m.approx_min_k(V, 2),
    "argmax": lambda m: m.argmax(V, 0, np.int32),
    "argmin": lambda m: m.argmin(V, 0, np.int32),
    "associative_scan": lambda m: m.associative_scan(lambda a, b: a + b, V),
    "axis_index": lambda m: in_vmap(m, lambda x: x + m.axis_index("i"), V),
    "axis_size": lambda m: in_vmap(m, lambda x: x * m.axis_size("i"), V),
    "batch_matmul": lambda m: m.batch_matmul(M[None], M[None]),
    "betainc": lambda m: m.betainc(2.0, 3.0, 0.5),
    "bitcast_convert_type": lambda m: m.bitcast_convert_type(X, np.int32),
    "broadcast": lambda m: m.broadcast(X, (3,)),
    "broadcast_shapes": lambda m: m.broadcast_shapes((3, 1), (2,)),
    "broadcast_in_dim": lambda m: m.broadcast_in_dim(X, (3, 2), (1,)),
    "broadcast_like": lambda m: m.broadcast_like(f32(1.0), M),
    "broadcast_to_rank": lambda m: m.broadcast_to_rank(X, 2),
    "broadcasted_iota": lambda m: m.broadcasted_iota(np.int32, (2, 3), 1),
    "clamp": lambda m: m.clamp(f32(0.0), X, f32(0.4)),
    "collapse": lambda m: m.collapse(M, 0, 2),
    "composite": lambda m: m.composite(lambda x: x + 1.0, name="smoke.add_one")(X),
    "concatenate": lambda m: m.concatenate([X, Y], 0),
    "cond": lambda m: m.cond(True, lambda x: x, lambda x: -x, X),
    "conv": lambda m: m.conv(IMG, KER, (1, 1), "SAME"),
    "conv_dimension_numbers": lambda m: m.conv_dimension_numbers(IMG.shape, KER.shape, DN),
    "conv_general_dilated": lambda m: m.conv_general_dilated(IMG, KER, (1, 1), "SAME"),
    "conv_general_dilated_local": lambda m: m.conv_general_dilated_local(
        IMG, np.ones((1, 9, 5, 5), f32), (1, 1), "SAME", (3, 3)),
    "conv_general_dilated_patches": lambda m: m.conv_general_dilated_patches(
        IMG, (3, 3), (1, 1), "SAME"),
    "conv_general_permutations": lambda m: m.conv_general_permutations(DN),
    "conv_general_shape_tuple": lambda m: m.conv_general_shape_tuple(
        IMG.shape, KER.shape, (1, 1), [(1, 1), (1, 1)], DN),
    "conv_shape_tuple": lambda m: m.conv_shape_tuple(IMG.shape, KER.shape, (1, 1),
                                                     [(1, 1), (1, 1)]),
    "conv_transpose": lambda m: m.conv_transpose(IMG, KER, (2, 2), "SAME",
                                                 dimension_numbers=DN),
    "conv_transpose_shape_tuple": lambda m: m.conv_transpose_shape_tuple(
        IMG.shape, KER.shape, (2, 2), "SAME", DN),
    "conv_with_general_padding": lambda m: m.conv_with_general_padding(
        IMG, KER, (1, 1), [(1, 1), (1, 1)], None, None),
    "convert_element_type": lambda m: m.convert_element_type(X, np.int32),
    "custom_linear_solve": lambda m: m.custom_linear_solve(lambda x: 2.0 * x, X,
                                                           lambda mv, b: b / 2.0),
    "custom_root": lambda m: m.custom_root(lambda x: x - 1.0, f32(0.0),
                                           lambda f, x0: x0 - f(x0),
                                           lambda g, y: y / g(f32(1.0))),
    "dot_general": lambda m: m.dot_general(M, M, (((1,), (0,)), ((), ()))),
    "dynamic_index_in_dim": lambda m: m.dynamic_index_in_dim(X, 1),
    "dynamic_slice": lambda m: m.dynamic_slice(X, (0,), (1,)),
    "dynamic_slice_in_dim": lambda m: m.dynamic_slice_in_dim(X, 0, 1),
    "dynamic_update_index_in_dim": lambda m: m.dynamic_update_index_in_dim(M, V, 0, 0),
    "dynamic_update_slice": lambda m: m.dynamic_update_slice(X, np.array([9.0], f32), (0,)),
    "dynamic_update_slice_in_dim": lambda m: m.dynamic_update_slice_in_dim(
        X, np.array([9.0], f32), 0, 0),
    "empty": lambda m: m.empty((2,), np.float32),
    "expand_dims": lambda m: m.expand_dims(X, (0,)),
    "fft": lambda m: m.fft(C, m.FftType.FFT, (2,)),
    "fori_loop": lambda m: m.fori_loop(0, 3, lambda i, c: c + 1.0, X),
    "full": lambda m: m.full((2,), 1.0),
    "full_like": lambda m: m.full_like(X, 1.0),
    "gather": lambda m: m.gather(V, IDX, _gather_dnums(m), (1,)),
    "imag": lambda m: m.imag(C),
    "real": lambda m: m.real(C),
    "index_in_dim": lambda m: m.index_in_dim(X, 0),
    "index_take": lambda m: m.index_take(M, (np.array([0, 1]),), (0,)),
    "integer_pow": lambda m: m.integer_pow(X, 2),
    "iota": lambda m: m.iota(np.int32, 4),
    "map": lambda m: m.map(lambda x: x + 1.0, X),
    "pad": lambda m: m.pad(X, f32(0.0), [(1, 1, 0)]),
    "padtype_to_pads": lambda m: m.padtype_to_pads((5, 5), (3, 3), (1, 1), "SAME"),
    "pbroadcast": lambda m: traced(m, lambda x: in_shard_map(
        m, lambda y: m.pbroadcast(y, "i", 0), x), M),
    "pcast": lambda m: in_shard_map(m, lambda x: m.pcast(f32(2.0), "i", to="varying") * x, M),
    "platform_dependent": lambda m: m.platform_dependent(X, cpu=lambda x: x + 1.0,
                                                         default=lambda x: x),
    "pmax": lambda m: in_vmap(m, lambda x: m.pmax(x, "i"), V),
    "pmean": lambda m: in_vmap(m, lambda x: m.pmean(x, "i"), V),
    "pmin": lambda m: in_vmap(m, lambda x: m.pmin(x, "i"), V),
    "psum": lambda m: in_vmap(m, lambda x: m.psum(x, "i"), V),
    "ppermute": lambda m: in_vmap(m, lambda x: m.ppermute(x, "i", [(0, 1), (1, 0)]), X),
    "pshuffle": lambda m: in_vmap(m, lambda x: m.pshuffle(x, "i", [1, 0]), X),
    "psum_scatter": lambda m: in_shard_map(m, lambda x: m.psum_scatter(x, "i", tiled=True),
                                           M),
    "pswapaxes": lambda m: in_vmap(m, lambda x: m.pswapaxes(x, "i", 0), SQ2),
    "psend": lambda m: traced(m, lambda x: in_shard_map(m, partial(_send_recv, m), x), M),
    "precv": lambda m: traced(m, lambda x: in_shard_map(m, partial(_send_recv, m), x), M),
    "ragged_all_to_all": lambda m: lowered(m, lambda x: in_shard_map(
        m, lambda y: m.ragged_all_to_all(
            y[0], m.full_like(y[0], 0.0), np.zeros(1, np.int32), np.full(1, 3, np.int32),
            np.zeros(1, np.int32), np.full(1, 3, np.int32), axis_name="i")[None], x), M),
    "ragged_dot": lambda m: m.ragged_dot(np.ones((4, 3), f32), np.ones((2, 3, 2), f32),
                                         np.array([2, 2], np.int32)),
    "ragged_dot_general": lambda m: m.ragged_dot_general(
        np.ones((4, 3), f32), np.ones((2, 3, 2), f32), np.array([2, 2], np.int32),
        m.RaggedDotDimensionNumbers(dot_dimension_numbers=(([1], [1]), ([], [])),
                                    lhs_ragged_dimensions=[0], rhs_group_dimensions=[0])),
    "reduce": lambda m: m.reduce(X, f32(0.0), lambda a, b: a + b, (0,)),
    "reduce_and": lambda m: m.reduce_and(B, (0,)),
    "reduce_or": lambda m: m.reduce_or(B, (0,)),
    "reduce_xor": lambda m: m.reduce_xor(I, (0,)),
    "reduce_max": lambda m: m.reduce_max(X, (0,)),
    "reduce_min": lambda m: m.reduce_min(X, (0,)),
    "reduce_prod": lambda m: m.reduce_prod(X, (0,)),
    "reduce_sum": lambda m: m.reduce_sum(X, (0,)),
    "reduce_precision": lambda m: m.reduce_precision(X, 5, 10),
    "reduce_window": lambda m: m.reduce_window(V, f32(0.0), m.add, (2,), (1,), "VALID"),
    "reduce_window_shape_tuple": lambda m: m.reduce_window_shape_tuple((4,), (2,), (1,),
                                                                       [(0, 0)]),
    "reshape": lambda m: m.reshape(M, (9,)),
    "rev": lambda m: m.rev(X, (0,)),
    "rng_bit_generator": lambda m: m.rng_bit_generator(np.zeros(4, np.uint32), (2,)),
    "rng_uniform": lambda m: m.rng_uniform(f32(0.0), f32(1.0), (2,)),
    "scaled_dot": lambda m: m.scaled_dot(M, M, dimension_numbers=(((1,), (1,)), ((), ()))),
    "scan": lambda m: m.scan(lambda c, x: (c + x, c), f32(0.0), X),
    "scatter": _scatter("scatter"),
    "scatter_add": _scatter("scatter_add"),
    "scatter_sub": _scatter("scatter_sub"),
    "scatter_mul": _scatter("scatter_mul"),
    "scatter_min": _scatter("scatter_min"),
    "scatter_max": _scatter("scatter_max"),
    "scatter_apply": lambda m: m.scatter_apply(V, IDX, lambda x: x * 2.0, _scatter_dnums(m),
                                               update_shape=(2,)),
    "select": lambda m: m.select(B, X, Y),
    "slice": lambda m: m.slice(X, (0,), (1,)),
    "slice_in_dim": lambda m: m.slice_in_dim(X, 0, 1),
    "split": lambda m: m.split(V, (1, 2)),
    "squeeze": lambda m: m.squeeze(X[None], (0,)),
    "switch": lambda m: m.switch(1, [lambda x: x, lambda x: -x], X),
    "tile": lambda m: m.tile(X, (2,)),
    "top_k": lambda m: m.top_k(V, 2),
    "transpose": lambda m: m.transpose(M, (1, 0)),
    "while_loop": lambda m: m.while_loop(lambda c: c < 3, lambda c: c + 1, 0),
    "with_sharding_constraint": lambda m: root(m).jit(lambda x: m.with_sharding_constraint(
        x, root(m).sharding.SingleDeviceSharding(root(m).devices()[0])))(X),
}

LAX_LINALG = {
    "cholesky": lambda m: m.cholesky(S),
    "cholesky_update": lambda m: m.cholesky_update(np.linalg.cholesky(S).T, V),
    "eig": lambda m: m.eig(M),
    "eigh": lambda m: m.eigh(S),
    "hessenberg": lambda m: m.hessenberg(M),
    "householder_product": lambda m: m.householder_product(M, np.array([1.0, 0.5], f32)),
    "lu": lambda m: m.lu(M),
    "lu_pivots_to_permutation": lambda m: m.lu_pivots_to_permutation(
        np.array([1, 1, 2], np.int32), 3),
    "ormqr": lambda m: m.ormqr(M, np.array([1.0, 0.5], f32), M),
    "qdwh": lambda m: m.qdwh(M),
    "qr": lambda m: m.qr(M),
    "schur": lambda m: m.schur(M),
    "svd": lambda m: m.svd(M),
    "symmetric_product": lambda m: m.symmetric_product(M, S),
    "triangular_solve": lambda m: m.triangular_solve(U, M, left_side=True),
    "tridiagonal": lambda m: m.tridiagonal(S),
    "tridiagonal_solve": lambda m: m.tridiagonal_solve(
        np.array([0, 1, 1], f32), np.array([4, 4, 4], f32), np.array([1, 1, 0], f32),
        np.ones((3, 1), f32)),
}

QKV = np.ones((1, 4, 2, 8), f32)   # batch, time, heads, head dim
NN = {
    "dot_product_attention": lambda m: m.dot_product_attention(QKV, QKV, QKV),
    "get_scaled_dot_general_config": lambda m: m.get_scaled_dot_general_config("mxfp8"),
    "one_hot": lambda m: m.one_hot(I, 3),
    "scaled_dot_general": lambda m: traced(m, lambda a, b: m.scaled_dot_general(
        a, b, (((2,), (2,)), ((0,), (0,))), configs=[m.get_scaled_dot_general_config("mxfp8")]
        * 3), np.ones((1, 32, 32), f32), np.ones((1, 32, 32), f32)),
    "scaled_matmul": lambda m: traced(m, m.scaled_matmul, np.ones((1, 2, 4), f32),
                                       np.ones((1, 2, 4), f32), np.ones((1, 2, 1), f32),
                                       np.ones((1, 2, 1), f32)),
}

INITIALIZERS = {
    "constant": _init("constant", 0.5),
    "delta_orthogonal": _init("delta_orthogonal", shape=(3, 3, 4, 4)),
    "glorot_normal": _init("glorot_normal"),
    "glorot_uniform": _init("glorot_uniform"),
    "he_normal": _init("he_normal"),
    "he_uniform": _init("he_uniform"),
    "kaiming_normal": _init("kaiming_normal"),
    "kaiming_uniform": _init("kaiming_uniform"),
    "lecun_normal": _init("lecun_normal"),
    "lecun_uniform": _init("lecun_uniform"),
    "normal": _init("normal"),
    "orthogonal": _init("orthogonal"),
    "truncated_normal": _init("truncated_normal"),
    "uniform": _init("uniform"),
    "variance_scaling": _init("variance_scaling", 1.0, "fan_in", "normal"),
    "xavier_normal": _init("xavier_normal"),
    "xavier_uniform": _init("xavier_uniform"),
    "ones": lambda m: m.ones(key(m), (3, 3)),
    "zeros": lambda m: m.zeros(key(m), (3, 3)),
}

RANDOM = {
    "PRNGKey": lambda m: m.PRNGKey(0),
    "key": lambda m: m.key(0),
    "key_data": lambda m: m.key_data(m.key(0)),
    "key_dtype": lambda m: m.key_dtype(),
    "key_impl": lambda m: m.key_impl(m.key(0)),
    "wrap_key_data": lambda m: m.wrap_key_data(m.key_data(m.key(0))),
    "clone": lambda m: m.clone(m.key(0)),
    "fold_in": _rand("fold_in", 1),
    "split": _rand("split"),
    "bits": _rand("bits", (2,)),
    "ball": _rand("ball", 3),
    "bernoulli": _rand("bernoulli", 0.5, (2,)),
    "beta": _rand("beta", 2.0, 3.0, (2,)),
    "binomial": _rand("binomial", 5.0, 0.5, (2,)),
    "categorical": _rand("categorical", np.log(np.array([0.2, 0.8], f32))),
    "cauchy": _rand("cauchy", (2,)),
    "chisquare": _rand("chisquare", 2.0, (2,)),
    "choice": _rand("choice", 5, (2,)),
    "dirichlet": _rand("dirichlet", np.array([1.0, 2.0], f32)),
    "double_sided_maxwell": _rand("double_sided_maxwell", 0.0, 1.0, (2,)),
    "exponential": _rand("exponential", (2,)),
    "f": _rand("f", 2.0, 3.0, (2,)),
    "gamma": _rand("gamma", 2.0, (2,)),
    "generalized_normal": _rand("generalized_normal", 2.0, (2,)),
    "geometric": _rand("geometric", 0.5, (2,)),
    "gumbel": _rand("gumbel", (2,)),
    "laplace": _rand("laplace", (2,)),
    "loggamma": _rand("loggamma", 2.0, (2,)),
    "logistic": _rand("logistic", (2,)),
    "lognormal": _rand("lognormal", shape=(2,)),
    "maxwell": _rand("maxwell", (2,)),
    "multinomial": _rand("multinomial", 5.0, np.array([0.4, 0.6], f32)),
    "multivariate_normal": _rand("multivariate_normal", np.zeros(2, f32), np.eye(2, dtype=f32)),
    "normal": _rand("normal", (2,)),
    "orthogonal": _rand("orthogonal", 3),
    "pareto": _rand("pareto", 2.0, (2,)),
    "permutation": _rand("permutation", 5),
    "poisson": _rand("poisson", 2.0, (2,)),
    "rademacher": _rand("rademacher", (2,)),
    "randint": _rand("randint", (2,), 0, 5),
    "rayleigh": _rand("rayleigh", 1.0, (2,)),
    "t": _rand("t", 3.0, (2,)),
    "triangular": _rand("triangular", 0.0, 0.5, 1.0, (2,)),
    "truncated_normal": _rand("truncated_normal", -1.0, 1.0, (2,)),
    "uniform": _rand("uniform", (2,)),
    "wald": _rand("wald", 1.0, (2,)),
    "weibull_min": _rand("weibull_min", 1.0, 2.0, (2,)),
}

IMAGE = {
    "resize": lambda m: m.resize(M, (4, 4), "linear"),
    "scale_and_translate": lambda m: m.scale_and_translate(
        M, (4, 4), (0, 1), np.array([1.3, 1.3], f32), np.array([0.0, 0.0], f32), "linear"),
}

SEGMENTS = np.array([0, 1, 1], np.int32)
OPS = {name: (lambda name: lambda m: getattr(m, name)(V, SEGMENTS, num_segments=2))(name)
       for name in ("segment_sum", "segment_prod", "segment_max", "segment_min")}

SPECIAL = {
    "bernoulli": lambda m: m.bernoulli(4),
    "bessel_jn": lambda m: m.bessel_jn(X, v=1),
    "betainc": lambda m: m.betainc(2.0, 3.0, 0.5),
    "gammaln": lambda m: m.gammaln(2.5),
    "hyp1f1": lambda m: m.hyp1f1(1.0, 2.0, 0.5),
    "hyp2f1": lambda m: m.hyp2f1(1.0, 2.0, 3.0, 0.5),
    "multigammaln": lambda m: m.multigammaln(2.5, 2),
    "sph_harm_y": lambda m: m.sph_harm_y(np.array([2]), np.array([1]), np.array([0.5], f32),
                                         np.array([0.3], f32)),
}


def _cho_solve(m):
  return m.cho_solve(m.cho_factor(S), V)


SCIPY_LINALG = {
    "cho_factor": lambda m: m.cho_factor(S),
    "cho_solve": _cho_solve,
    "cholesky": lambda m: m.cholesky(S),
    "convolution_matrix": lambda m: m.convolution_matrix(V, 4),
    "det": lambda m: m.det(M),
    "dft": lambda m: m.dft(3),
    "eigh": lambda m: m.eigh(S),
    "eigh_tridiagonal": lambda m: m.eigh_tridiagonal(np.array([2, 2, 2], f32),
                                                     np.array([1, 1], f32), eigvals_only=True),
    "expm": lambda m: m.expm(0.1 * M),
    "expm_frechet": lambda m: m.expm_frechet(0.1 * M, M),
    "funm": lambda m: m.funm(M, lambda a: a * a),
    "hadamard": lambda m: m.hadamard(4),
    "helmert": lambda m: m.helmert(3),
    "hessenberg": lambda m: m.hessenberg(M),
    "hilbert": lambda m: m.hilbert(3),
    "inv": lambda m: m.inv(M),
    "invhilbert": lambda m: m.invhilbert(3),
    "invpascal": lambda m: m.invpascal(3),
    "leslie": lambda m: m.leslie(np.array([0.1, 2.0, 1.0], f32), np.array([0.2, 0.8], f32)),
    "lu": lambda m: m.lu(M),
    "lu_factor": lambda m: m.lu_factor(M),
    "lu_solve": lambda m: m.lu_solve(m.lu_factor(M), V),
    "pascal": lambda m: m.pascal(3),
    "polar": lambda m: m.polar(M),
    "qr": lambda m: m.qr(M),
    "qr_multiply": lambda m: m.qr_multiply(M, V),
    "rsf2csf": lambda m: m.rsf2csf(*m.schur(M)),
    "schur": lambda m: m.schur(M),
    "solve": lambda m: m.solve(M, V),
    "solve_sylvester": lambda m: m.solve_sylvester(M, S, M),
    "solve_triangular": lambda m: m.solve_triangular(U, V),
    "sqrtm": lambda m: m.sqrtm(S),
    "svd": lambda m: m.svd(M),
}

STATS = {
    "gaussian_kde": lambda m: m.gaussian_kde(np.array([0.0, 1.0, 2.5], f32))(X),
    **_dist("beta", ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"],
            lambda f: f(X, 2.0, 3.0)),
    **_dist("betabinom", ["logpmf", "pmf"], lambda f: f(I, 5, 2.0, 3.0)),
    **_dist("binom", ["logpmf", "pmf"], lambda f: f(I, 5, 0.4)),
    **_dist("nbinom", ["logpmf", "pmf"], lambda f: f(I, 5, 0.4)),
    **_dist("multinomial", ["logpmf", "pmf"],
            lambda f: f(np.array([2, 3], np.int32), 5, np.array([0.4, 0.6], f32))),
    **_dist("multivariate_normal", ["logpdf", "pdf"],
            lambda f: f(X, np.zeros(2, f32), np.eye(2, dtype=f32))),
    **_dist("truncnorm", ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"],
            lambda f: f(X, -1.0, 1.0)),
    **_dist("norm", ["logpdf"], lambda f: f(0.3)),
}

SCIPY_MISC = {
    "jax.scipy.signal.convolve2d": lambda m: m.convolve2d(M, M),
    "jax.scipy.signal.correlate2d": lambda m: m.correlate2d(M, M),
    "jax.scipy.signal.istft": lambda m: m.istft(m.stft(np.ones(64, f32), nperseg=16)[2],
                                                nperseg=16),
    "jax.scipy.optimize.minimize": lambda m: m.minimize(lambda x: ((x - 1.0) ** 2).sum(),
                                                        np.zeros(2, f32), method="BFGS"),
    "jax.scipy.optimize.OptimizeResults": lambda m: m.OptimizeResults(
        x=X, success=True, status=0, fun=f32(0.0), jac=X, hess_inv=None, nfev=1, njev=1,
        nit=1),
    "jax.scipy.interpolate.RegularGridInterpolator": lambda m: m.RegularGridInterpolator(
        (np.array([0.0, 1.0, 2.0], f32),), V)(np.array([[0.5]], f32)),
    "jax.scipy.ndimage.map_coordinates": lambda m: m.map_coordinates(
        M, [np.array([0.5], f32), np.array([1.5], f32)], order=1),
    "jax.scipy.spatial.transform.Rotation": lambda m: m.Rotation.from_euler(
        "xyz", V).as_matrix(),
    "jax.scipy.spatial.transform.Slerp": _slerp,
}

TREE = {
    "all": lambda m: m.all([True, True]),
    "map": lambda m: m.map(lambda x: x + 1.0, [X]),
    "map_with_path": lambda m: m.map_with_path(lambda p, x: x, [X]),
    "static": _static,
    "transpose": lambda m: m.transpose(m.structure([0, 0]), m.structure((0, 0)),
                                       [(1, 2), (3, 4)]),
    "unflatten": lambda m: m.unflatten(m.structure([0, 0]), [1, 2]),
}

TREE_UTIL = {
    "flatten_one_level": lambda m: m.flatten_one_level([X, Y]),
    "flatten_one_level_with_keys": lambda m: m.flatten_one_level_with_keys([X, Y]),
    "is_tree_node": lambda m: m.is_tree_node(list),
    "register_dataclass": _register_dataclass,
    "register_pytree_node": _register_pytree_node,
    "register_pytree_node_class": _register_pytree_node_class,
    "register_pytree_with_keys": _register_pytree_with_keys,
    "register_pytree_with_keys_class": _register_pytree_with_keys_class,
    "register_static": _register_static,
    "tree_all": lambda m: m.tree_all([True, True]),
    "tree_map": lambda m: m.tree_map(lambda x: x + 1.0, [X]),
    "tree_map_with_path": lambda m: m.tree_map_with_path(lambda p, x: x, [X]),
    "tree_transpose": lambda m: m.tree_transpose(m.tree_structure([0, 0]),
                                                 m.tree_structure((0, 0)), [(1, 2), (3, 4)]),
    "tree_unflatten": lambda m: m.tree_unflatten(m.tree_structure([0, 0]), [1, 2]),
    "treedef_children": lambda m: m.treedef_children(m.tree_structure([1, [2]])),
    "treedef_is_leaf": lambda m: m.treedef_is_leaf(m.tree_structure(1)),
    "treedef_tuple": lambda m: m.treedef_tuple([m.tree_structure(1), m.tree_structure(2)]),
}


def _prefixed(prefix, table):
  return {f"{prefix}.{k}": v for k, v in table.items()}


SMOKE = {
    **_prefixed("jax.numpy", NUMPY),
    **_prefixed("jax.numpy.linalg", NUMPY_LINALG),
    **_prefixed("jax.numpy.fft", NUMPY_FFT),
    **_prefixed("jax.lax", LAX),
    **_prefixed("jax.lax.linalg", LAX_LINALG),
    **_prefixed("jax.nn", NN),
    **_prefixed("jax.nn.initializers", INITIALIZERS),
    **_prefixed("jax.random", RANDOM),
    **_prefixed("jax.image", IMAGE),
    **_prefixed("jax.ops", OPS),
    **_prefixed("jax.scipy.special", SPECIAL),
    **_prefixed("jax.scipy.linalg", SCIPY_LINALG),
    **_prefixed("jax.scipy.stats", STATS),
    **SCIPY_MISC,
    **_prefixed("jax.tree", TREE),
    **_prefixed("jax.tree_util", TREE_UTIL),
}
