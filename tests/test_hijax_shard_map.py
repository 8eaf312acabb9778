"""Hijax types in shard_map (JAX's hijax types guide, docs/new_docs/301/hijax-types.md, its
"shard_map" section): a quantized array type (`QArray`: int8 values with per-row scales)
with a `HiPspec` (`QArrayP`) and the type's `shard`/`unshard`, as shard_map arguments and
results over a mesh of 4 devices, run on JAX 0.10.2 and on stagecraft in the same test and
compared (typeof strings, printed jaxprs, shardings, values, error texts)."""
from dataclasses import dataclass

import jax
import jax.experimental.hijax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.experimental.hijax
import stagecraft.numpy as sjnp

LIBS = {"jax": (jax, jjnp, jax.experimental.hijax),
        "sc": (sc, sjnp, stagecraft.experimental.hijax)}


def defs(lib):
  """The guide's QArray type (printing its sharding), its HiPspec `QArrayP`, `shard` and
  `unshard`, and the `Quantize`/`Dequantize` primitives, over one library."""
  jx, jnp, hjx = LIBS[lib]

  @dataclass(frozen=True)
  class QArray:
    qvalue: object
    scale: object

  @dataclass(frozen=True)
  class QArrayTy(hjx.HiType):
    shape: tuple
    sharding: object

    def lo_ty(self):
      scale_sharding = self.sharding.update(spec=jx.P(*self.sharding.spec[:-1]))
      return [hjx.ShapedArray(self.shape, jnp.dtype("int8"), sharding=self.sharding),
              hjx.ShapedArray(self.shape[:-1], jnp.dtype("float32"), sharding=scale_sharding)]

    def lower_val(self, q):
      return [q.qvalue, q.scale]

    def raise_val(self, qvalue, scale):
      return QArray(qvalue, scale)

    def to_tangent_aval(self):
      return hjx.ShapedArray(self.shape, jnp.dtype("float32"), sharding=self.sharding)

    def str_short(self, short_dtypes=False, mesh_axis_types=False):
      dims = [str(d) if p is None else f"{d}@{p}"
              for d, p in zip(self.shape, self.sharding.spec)]
      return f"q8[{','.join(dims)}]"
    __repr__ = str_short

    def shard(self, mesh, manual_axes, check_vma, spec):
      qvalue_ty, _ = self.lo_ty()
      qspec, _ = spec.to_lo()
      t = qvalue_ty.shard(mesh, manual_axes, check_vma, qspec)
      return QArrayTy(t.shape, t.sharding)

    def unshard(self, mesh, check_vma, spec):
      qvalue_ty, _ = self.lo_ty()
      qspec, _ = spec.to_lo()
      t = qvalue_ty.unshard(mesh, check_vma, qspec)
      return QArrayTy(t.shape, t.sharding)

  @dataclass(frozen=True)
  class QArrayP(hjx.HiPspec):
    spec: object

    def to_lo(self):
      return (self.spec, self.spec)

  hjx.register_hitype(QArray, lambda q: QArrayTy(q.qvalue.shape,
                                                 jx.typeof(q.qvalue).sharding))

  class Quantize(hjx.VJPHiPrimitive):
    def __init__(self, x_aval):
      self.in_avals = (x_aval,)
      self.out_aval = QArrayTy(x_aval.shape, x_aval.sharding)
      self.params = {}
      super().__init__()

    def expand(self, x):
      scale = jnp.max(jnp.abs(x), axis=-1) / 127.
      return QArray(jnp.round(x / scale[..., None]).astype(jnp.int8), scale)

  class Dequantize(hjx.VJPHiPrimitive):
    def __init__(self, q_aval):
      self.in_avals = (q_aval,)
      self.out_aval = hjx.ShapedArray(q_aval.shape, jnp.dtype("float32"),
                                      sharding=q_aval.sharding)
      self.params = {}
      super().__init__()

    def expand(self, qx):
      return qx.qvalue.astype("float32") * qx.scale[..., None]

  def quantize(x):
    return Quantize(jx.typeof(x))(x)

  def dequantize(qx):
    return Dequantize(jx.typeof(qx))(qx)

  return dict(jx=jx, jnp=jnp, P=jx.P, QArrayP=QArrayP, quantize=quantize,
              dequantize=dequantize)


def both(fn):
  """`fn(d, rows)` on each library, under its mesh of 4 devices (axis 'i', Explicit) in
  context; `rows`: f32[8,3] split over 'i'."""
  out = []
  for lib in ("jax", "sc"):
    d = defs(lib)
    jx, jnp = d["jx"], d["jnp"]
    mesh = jx.make_mesh((4,), ("i",))
    with jx.set_mesh(mesh):
      rows = jx.device_put(jnp.arange(24., dtype="float32").reshape(8, 3) - 7., jx.P("i"))
      out.append(fn(d, rows))
  return out


def _q(q):
  return np.asarray(q.qvalue), np.asarray(q.scale)


def test_hijax_result_with_hipspec():
  # the guide's `quantize_shards`: each device quantizes its rows; the QArray result is
  # assembled by QArrayP(P('i')) (its qvalue and scale split over 'i')
  def run(d, rows):
    jx, P = d["jx"], d["P"]
    shapes = []

    @jx.jit
    @jx.shard_map(in_specs=P("i"), out_specs=d["QArrayP"](P("i")))
    def quantize_shards(x):
      shapes.append(jx.typeof(x).shape)
      return d["quantize"](x)
    q = quantize_shards(rows)
    jaxpr = str(quantize_shards.trace(rows).jaxpr)
    return (str(jx.typeof(q)), str(q.qvalue.sharding.spec), str(q.scale.sharding.spec),
            shapes[0], jaxpr, _q(q), _q(d["quantize"](rows)))
  j, s = both(run)
  assert s[:4] == j[:4] == ("q8[8@i,3]", "P('i', None)", "P('i',)", (2, 3))
  assert s[4] == j[4]
  assert "QArrayP(spec=P('i',)),)" in s[4]
  for a, b, c in zip(j[5], s[5], s[6]):   # equal to JAX's, and to the whole array quantized
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(b, c)


def test_hijax_argument_with_hipspec():
  # the guide's `dequantize_shards`: a QArray argument split by QArrayP(P('i')); the body
  # sees a q8[2,3] block; its dequantized rows are pvary'd to the out_spec, as JAX's
  def run(d, rows):
    jx, jnp, P = d["jx"], d["jnp"], d["P"]
    seen = []

    @jx.jit
    @jx.shard_map(in_specs=d["QArrayP"](P("i")), out_specs=P("i"))
    def dequantize_shards(qx):
      seen.append((str(jx.typeof(qx)), str(jx.typeof(qx).sharding)))
      return d["dequantize"](qx)
    qrows = d["quantize"](rows)
    out = dequantize_shards(qrows)
    err = jnp.max(jnp.abs(out - rows))
    return (seen[0], str(jx.typeof(out)), str(dequantize_shards.trace(qrows).jaxpr),
            np.asarray(out), np.asarray(err))
  j, s = both(run)
  assert s[0] == j[0]
  assert s[0][0] == "q8[2,3]" and "axis_types=(Manual,)" in s[0][1]
  assert s[1] == j[1] == "float32[8@i,3]"
  assert s[2] == j[2]
  assert "pvary[axes=('i',)]" in s[2]
  np.testing.assert_array_equal(s[3], j[3])
  np.testing.assert_array_equal(s[4], j[4])


def test_hijax_in_and_out_with_arrays_and_tuples():
  # hijax and array arguments and results together (a replicated array argument, a tuple
  # of results), and a QArray passed through
  def run(d, rows):
    jx, jnp, P, QP = d["jx"], d["jnp"], d["P"], d["QArrayP"]

    @jx.jit
    @jx.shard_map(in_specs=(QP(P("i")), P()), out_specs=(P("i"), QP(P("i")), QP(P("i"))))
    def f(qx, y):
      return d["dequantize"](qx) + y, qx, d["quantize"](d["dequantize"](qx) * y)
    qrows = d["quantize"](rows)
    a, b, c = f(qrows, jnp.arange(3., dtype="float32"))
    return (np.asarray(a), str(jx.typeof(b)), _q(b), str(jx.typeof(c)), _q(c),
            str(c.qvalue.sharding.spec))
  j, s = both(run)
  np.testing.assert_array_equal(s[0], j[0])
  assert (s[1], s[3], s[5]) == (j[1], j[3], j[5]) == ("q8[8@i,3]", "q8[8@i,3]", "P('i', None)")
  for a, b in zip((*j[2], *j[4]), (*s[2], *s[4])):
    np.testing.assert_array_equal(a, b)


def test_hijax_result_replicated_without_check_vma():
  # out_specs QArrayP(P()): one device's block is the result (unshard keeps its shape)
  def run(d, rows):
    jx, P = d["jx"], d["P"]

    @jx.jit
    @jx.shard_map(in_specs=P("i"), out_specs=d["QArrayP"](P()), check_vma=False)
    def f(x):
      return d["quantize"](x[:1])
    q = f(rows)
    return str(jx.typeof(q)), _q(q)
  j, s = both(run)
  assert s[0] == j[0] == "q8[1,3]"
  for a, b in zip(j[1], s[1]):
    np.testing.assert_array_equal(a, b)


def test_hijax_primitives_inside_body_only():
  # hijax values only inside the body (array arguments and results, PartitionSpecs): the
  # dequantized value is typed invariant, as Dequantize's out_aval says, and pvary'd
  def run(d, rows):
    jx, P = d["jx"], d["P"]
    f = jx.jit(jx.shard_map(lambda x: d["dequantize"](d["quantize"](x)),
                            in_specs=P("i"), out_specs=P("i")))
    return np.asarray(f(rows)), str(f.trace(rows).jaxpr)
  j, s = both(run)
  np.testing.assert_array_equal(s[0], j[0])
  assert s[1] == j[1]


@pytest.mark.parametrize("case", ["hi_arg_pspec", "array_arg_hipspec", "hi_out_pspec"])
def test_hijax_spec_mismatch_errors(case):
  # a hijax argument or result given a PartitionSpec, or an array given a HiPspec: JAX's
  # AttributeErrors
  def run(d, rows):
    jx, P, QP = d["jx"], d["P"], d["QArrayP"]
    qrows = d["quantize"](rows)
    f, arg = {
        "hi_arg_pspec": (jx.shard_map(lambda q: q, in_specs=P("i"), out_specs=QP(P("i"))),
                         qrows),
        "array_arg_hipspec": (jx.shard_map(lambda x: x, in_specs=QP(P("i")),
                                           out_specs=P("i")), rows),
        "hi_out_pspec": (jx.shard_map(d["quantize"], in_specs=P("i"), out_specs=P("i")),
                         rows),
    }[case]
    with pytest.raises(AttributeError) as e:
      jx.jit(f)(arg)
    return str(e.value)
  j, s = both(run)
  assert s == j
  assert "object has no attribute" in s


def test_hijax_shard_map_eagerly():
  # outside jit JAX 0.10.2 fails ('QArrayTy' object has no attribute 'ndim'); stagecraft
  # runs it as a shard_map of the arrays, with the results jit gives (docs/differences.md)
  def run(d, rows):
    jx, P, QP = d["jx"], d["P"], d["QArrayP"]
    f = jx.shard_map(d["quantize"], in_specs=P("i"), out_specs=QP(P("i")))
    try:
      q = f(rows)
    except AttributeError as e:
      return str(e)
    g = jx.shard_map(d["dequantize"], in_specs=QP(P("i")), out_specs=P("i"))
    return str(jx.typeof(q)), _q(q), np.asarray(g(q)), _q(jx.jit(f)(rows))
  j, s = both(run)
  assert j == "'QArrayTy' object has no attribute 'ndim'"
  assert s[0] == "q8[8@i,3]"
  for a, b in zip(s[1], s[3]):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_allclose(s[2], np.arange(24., dtype="float32").reshape(8, 3) - 7.,
                             atol=0.05)
