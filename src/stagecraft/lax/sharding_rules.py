"""Sharding rules of the lax primitives (JAX's sharding in types, for Explicit mesh axes).

An aval whose value has a dimension split over Explicit mesh axes carries that sharding
(`ShapedArray.sharding`: a NamedSharding over an AbstractMesh, one spec entry per
dimension); abstract evaluation of a primitive with such an operand asks
`core.sharding_rules[prim]` for the sharding of the result. This module registers the rules
of the primitives whose family modules predate sharding in types: elementwise n-ary ops,
`select_n`, `convert_element_type`, `broadcast_in_dim`, `reshape`, `transpose`, `squeeze`,
`rev`, `concatenate`, the reductions, `argmax`/`argmin`, the cumulative reductions and the
control-flow primitives (whose results have their bodies' types). `dot_general` and
`reshard` keep theirs beside them (lax/dot.py, lax/spmd.py). A primitive without a rule
raises NotImplementedError when an operand is split (core's hook), never a wrong type.

Each rule follows the behaviour of JAX 0.10.2's rule of the same primitive (the result
specs, and `ShardingTypeError` with JAX's message where JAX rejects a program); the code is
written from that behaviour:

- elementwise: per dimension, the operands' entries must agree; an unsplit entry (or a
  dimension of size 1) defers to a split one; rank-0 operands do not take part. A result
  naming one mesh axis on two dimensions is rejected.
- reshape: an unsplit operand stays unsplit; reshapes that only add or drop dimensions of
  size 1 keep the entries; splitting one dimension gives its mesh axes to the leading
  pieces they divide (major to minor); merging dimensions works when only the major one
  is split; anything else asks for `out_sharding=`.
- reductions drop the reduced dimensions' entries; cumulative ones need the reduced
  dimension unsplit.

Transposition: the cotangent of a linear operand must have the operand's type (JAX passes
the primal's sharding to the transposed op); `typed_transpose` reshards a cotangent whose
type differs from a split operand type, around the transpose rules of the linear primitives
registered here.
"""
from __future__ import annotations

from typing import Any, Sequence

from stagecraft import core, dtypes
from stagecraft.core import ShapedArray
from stagecraft.interpreters import ad
from stagecraft.lax import cumulative, elementwise, reduction, shape, special
from stagecraft.lax.ad_util import stop_gradient_p
from stagecraft.lax.control_flow.conditionals import cond_p
from stagecraft.lax.control_flow.loops import scan_p
from stagecraft.lax.control_flow.while_op import while_p
from stagecraft.lax.misc import optimization_barrier_p
from stagecraft.sharding import NamedSharding, PartitionSpec, ShardingTypeError

__all__ = ["entries", "mesh_of", "make_sharding", "nary_rule", "register_nary"]


# ---------------------------------------------------------------------------
# Helpers


def entries(a: Any) -> tuple:
  """Per dimension of aval `a`, its spec entry: None, a mesh axis name or a tuple of them."""
  s = getattr(a, "_sharding", None)
  if s is None:
    return (None,) * len(a.shape)
  return tuple(s.spec) + (None,) * (len(a.shape) - len(s.spec))


def mesh_of(avals: Sequence[Any]):
  """The AbstractMesh of the operands that have a sharding (None if none has).

  Raises:
    ShardingTypeError: operands typed over different meshes (JAX's message).
  """
  mesh = None
  for a in avals:
    s = getattr(a, "_sharding", None)
    if s is None:
      continue
    if mesh is not None and s.mesh != mesh:
      raise ShardingTypeError(f"Mesh for all inputs should be equal. Got one mesh: {mesh} and "
                              f"another mesh: {s.mesh}")
    mesh = s.mesh
  return mesh


def make_sharding(mesh, spec: Sequence[Any]) -> NamedSharding | None:
  """The type sharding with entries `spec` over `mesh` (None when no entry is split)."""
  spec = tuple(None if e is None or e == () else e[0] if isinstance(e, tuple) and len(e) == 1
               else e for e in spec)
  if mesh is None or all(e is None for e in spec):
    return None
  return NamedSharding(mesh, PartitionSpec(*spec))


def _names(e) -> tuple:
  return () if e is None else e if isinstance(e, tuple) else (e,)


def _dims_str(shape, spec) -> str:
  out = []
  for d, e in zip(shape, spec):
    n = _names(e)
    out.append(str(d) if not n else f"{d}@{n[0]}" if len(n) == 1 else f"{d}@({','.join(n)})")
  return ",".join(out)


# ---------------------------------------------------------------------------
# Elementwise n-ary operations


def nary_rule(name: str):
  """The sharding rule of the elementwise primitive `name` (see the module docstring)."""
  def rule(*avals, **params):
    mesh = mesh_of(avals)
    ranked = [a for a in avals if a.shape]
    if not ranked:
      return None
    specs = [entries(a) for a in ranked]
    out = []
    for i in range(len(ranked[0].shape)):
      es = [s[i] for s in specs]
      if all(e == es[0] for e in es):
        out.append(es[0])
        continue
      nontrivial = [e for e, a in zip(es, ranked) if not (e is None and a.shape[i] == 1)]
      if not nontrivial or all(e == nontrivial[0] for e in nontrivial):
        out.append(nontrivial[0] if nontrivial else None)
        continue
      got = None
      for e in es:
        if got is None:
          got = e
        elif e is not None and e != got:
          raise ShardingTypeError(
              f"{name} got incompatible shardings for broadcasting: "
              f"{', '.join(str(tuple(s)) for s in specs)}.")
      out.append(got)
    used = [n for e in out for n in _names(e)]
    if len(used) != len(set(used)):
      shape_out = tuple(max(a.shape[i] for a in ranked) for i in range(len(out)))
      ins = ", ".join(f"{dtypes.short_name(a.dtype)}[{_dims_str(a.shape, entries(a))}]"
                      for a in avals)
      res = f"{dtypes.short_name(ranked[0].dtype)}[{_dims_str(shape_out, out)}]"
      raise ShardingTypeError(f"{name} operation with inputs: {ins} produces an illegally "
                              f"sharded result: {res}")
    return make_sharding(mesh, out)
  return rule


def register_nary(prims) -> None:
  """Registers `nary_rule` for each elementwise primitive in `prims`."""
  for p in prims:
    core.sharding_rules[p] = nary_rule(p.name)


_ELEMENTWISE_EXCLUDED = {"select_n", "convert_element_type", "bitcast_convert_type"}
register_nary([v for v in vars(elementwise).values()
               if isinstance(v, core.Primitive) and v.name not in _ELEMENTWISE_EXCLUDED])
register_nary([v for v in vars(special).values() if isinstance(v, core.Primitive)])
register_nary([stop_gradient_p, ad.add_any_p] +
              ([ad.add_jaxvals_p] if getattr(ad, "add_jaxvals_p", None) is not None else []))


def _bitcast_rule(x, *, new_dtype):
  if x.dtype.itemsize != new_dtype.itemsize:
    raise NotImplementedError("bitcast_convert_type between dtypes of different widths of a "
                              "value split over Explicit mesh axes")
  return x._sharding


def _select_n_rule(which, *cases):
  typed = [c for c in cases if c._sharding is not None]
  if not typed:
    if which.shape and which._sharding is not None:
      return which._sharding   # NB: JAX's cases are over the same mesh; ours are unsharded
    return None
  first = typed[0]._sharding
  if any(c._sharding != first for c in typed[1:]):
    raise ShardingTypeError("select cases must have the same shardings, got "
                            f"[{', '.join(str(c.sharding) for c in cases)}].")
  if which.shape and which._sharding is not None and which._sharding != first:
    raise ShardingTypeError(
        f"select `which` must be scalar or have the same sharding as cases, got `which` "
        f"sharding {which.sharding} but case sharding {cases[0].sharding}.")
  return first


core.sharding_rules[elementwise.select_n_p] = _select_n_rule
core.sharding_rules[elementwise.convert_element_type_p] = lambda x, **_: x._sharding
core.sharding_rules[elementwise.bitcast_convert_type_p] = _bitcast_rule


# ---------------------------------------------------------------------------
# Shape operations


def _broadcast_in_dim_rule(x, *, shape, broadcast_dimensions, **_):
  out = [None] * len(shape)
  for e, d in zip(entries(x), broadcast_dimensions):
    out[d] = e
  return make_sharding(x._sharding.mesh, out)


def _transpose_rule(x, *, permutation):
  es = entries(x)
  return make_sharding(x._sharding.mesh, [es[p] for p in permutation])


def _squeeze_rule(x, *, dimensions):
  drop = set(d % max(len(x.shape), 1) for d in dimensions)
  return make_sharding(x._sharding.mesh,
                       [e for i, e in enumerate(entries(x)) if i not in drop])


def _rev_rule(x, *, dimensions):
  return x._sharding


def _concatenate_rule(*xs, dimension):
  mesh = mesh_of(xs)
  specs = [entries(x) for x in xs]
  if any(s[dimension] is not None for s in specs):
    raise NotImplementedError(
        "concatenate along a dimension split over Explicit mesh axes (reshard the operands "
        "first)")
  out = list(specs[0])
  for s in specs[1:]:
    for i, e in enumerate(s):
      if out[i] is None:
        out[i] = e
      elif e is not None and e != out[i]:
        raise ShardingTypeError(
            f"All operands should have the same sharding. Got shardings "
            f"{', '.join(str(x.sharding) for x in xs)}")
  return make_sharding(mesh, out)


def _reshape_error(x, new_sizes):
  raise ShardingTypeError(
      "This reshape is not supported. Please specify the sharding of the output via the "
      f"`out_sharding` argument of jax.lax.reshape. Got operand type: {x}, new sizes: "
      f"{tuple(new_sizes)}")


def _split_axes(mesh, names: tuple, sizes: Sequence[int], x, new_sizes) -> list:
  """Gives mesh axes `names` (major first) to the pieces `sizes` of a split dimension, each
  piece taking the leading axes whose product divides it."""
  out, it = [], list(names)
  for size in sizes:
    took = []
    while size > 1 and it:
      n = mesh.shape[it[0]]
      if size % n:
        _reshape_error(x, new_sizes)
      size //= n
      took.append(it.pop(0))
    out.append(tuple(took))
  if it:
    _reshape_error(x, new_sizes)
  return out


def _reshape_rule(x, *, new_sizes, dimensions, **_):
  mesh = x._sharding.mesh
  old, new = tuple(x.shape), tuple(new_sizes)
  es = entries(x)
  if [d for d in old if d != 1] == [d for d in new if d != 1]:
    kept = iter(e for d, e in zip(old, es) if d != 1)
    return make_sharding(mesh, [None if d == 1 else next(kept) for d in new])
  # Group the dimensions: each group of `old` maps to a group of `new` of equal product.
  groups, i, j = [], 0, 0
  while i < len(old) or j < len(new):
    gi, gj = [i], [j]
    if i >= len(old) or j >= len(new):
      _reshape_error(x, new_sizes)
    po, pn = old[i], new[j]
    i, j = i + 1, j + 1
    while po != pn:
      if po < pn:
        if i >= len(old):
          _reshape_error(x, new_sizes)
        po *= old[i]
        gi.append(i)
        i += 1
      else:
        if j >= len(new):
          _reshape_error(x, new_sizes)
        pn *= new[j]
        gj.append(j)
        j += 1
    groups.append((gi, gj))
  out: list = [None] * len(new)
  for gi, gj in groups:
    gspec = [es[k] for k in gi]
    if all(e is None for e in gspec):
      continue
    if len(gi) == 1 and len(gj) == 1:
      out[gj[0]] = es[gi[0]]
    elif len(gi) == 1:   # one dimension split into several
      for k, names in zip(gj, _split_axes(mesh, _names(es[gi[0]]), [new[k] for k in gj],
                                          x, new_sizes)):
        out[k] = names or None
    elif len(gj) == 1:   # several dimensions merged: only the major one may be split
      if any(e is not None for e in gspec[1:]):
        _reshape_error(x, new_sizes)
      out[gj[0]] = es[gi[0]]
    else:
      _reshape_error(x, new_sizes)
  return make_sharding(mesh, out)


core.sharding_rules[shape.broadcast_in_dim_p] = _broadcast_in_dim_rule
core.sharding_rules[shape.transpose_p] = _transpose_rule
core.sharding_rules[shape.squeeze_p] = _squeeze_rule
core.sharding_rules[shape.rev_p] = _rev_rule
core.sharding_rules[shape.concatenate_p] = _concatenate_rule
core.sharding_rules[shape.reshape_p] = _reshape_rule


# ---------------------------------------------------------------------------
# Reductions


def _reduce_rule(x, *, axes, **_):
  axes = set(axes)
  return make_sharding(x._sharding.mesh,
                       [e for i, e in enumerate(entries(x)) if i not in axes])


def _cumulative_rule(x, *, axis, reverse):
  if entries(x)[axis] is not None:
    raise ShardingTypeError(f"Input should be unsharded over the axis being reduced. Got "
                            f"input type={x} and axis={axis}")
  return x._sharding


for _p in (reduction.reduce_sum_p, reduction.reduce_prod_p, reduction.reduce_max_p,
           reduction.reduce_min_p, reduction.reduce_and_p, reduction.reduce_or_p,
           reduction.reduce_xor_p, reduction.argmax_p, reduction.argmin_p):
  core.sharding_rules[_p] = _reduce_rule
for _p in (cumulative.cumsum_p, cumulative.cumprod_p, cumulative.cummax_p,
           cumulative.cummin_p, cumulative.cumlogsumexp_p):
  core.sharding_rules[_p] = _cumulative_rule


# ---------------------------------------------------------------------------
# Primitives whose results have the types their bodies give


def _from_body(*avals, **params):
  return None   # NB: for primitives with several results: keep abstract eval's avals


for _p in (cond_p, scan_p, while_p, optimization_barrier_p):
  core.sharding_rules[_p] = _from_body


# ---------------------------------------------------------------------------
# Transposition keeps the operands' types


def typed_transpose(rule, reshard):
  """`rule` (a transpose rule) whose cotangents are resharded, where their type differs,
  to the type of their linear operand (`reshard(ct, sharding)`)."""
  def transpose(ct, *args, **params):
    cts = rule(ct, *args, **params)
    if not any(type(a) is ad.UndefinedPrimal and type(a.aval) is ShapedArray
               for a in args):
      return cts
    out = list(cts) if isinstance(cts, (list, tuple)) else [cts]
    for k, (a, c) in enumerate(zip(args, out)):
      if (type(a) is ad.UndefinedPrimal and type(a.aval) is ShapedArray and c is not None
          and not isinstance(c, ad.Zero)):
        have = core.get_aval(c)
        # NB: only to a split type: an unsplit aval may stand for a layout jit's in_shardings
        # give (not in types yet), which the partitioner keeps.
        if (type(have) is ShapedArray and a.aval._sharding is not None
            and have._sharding != a.aval._sharding and have.shape == a.aval.shape):
          out[k] = reshard(c, a.aval._sharding, have._sharding)
    return out
  transpose.untyped = rule
  return transpose


def wrap_transposes(reshard) -> None:
  """Makes the transpose rules of the linear primitives with rules here keep types."""
  for p in list(core.sharding_rules):
    rule = ad.primitive_transposes.get(p)
    if rule is not None and not hasattr(rule, "untyped"):
      ad.primitive_transposes[p] = typed_transpose(rule, reshard)
