"""Sharding rules of the lax primitives (JAX's sharding in types, for Explicit mesh axes).

An aval whose value has a dimension split over Explicit mesh axes carries that sharding
(`ShapedArray.sharding`: a NamedSharding over an AbstractMesh, one spec entry per
dimension); abstract evaluation of a primitive with such an operand asks
`core.sharding_rules[prim]` for the sharding of the result. This module registers the rules
of the primitives whose family modules predate sharding in types: elementwise n-ary ops,
`select_n`, `convert_element_type`, `broadcast_in_dim`, `reshape`, `transpose`, `squeeze`,
`rev`, `concatenate`, the reductions, `argmax`/`argmin`, the cumulative reductions, `slice`,
`dynamic_slice`, `dynamic_update_slice`, `pad`, `gather` and the scatters, `sort`, `top_k`,
`conv_general_dilated`, `fft`, the windowed reductions, the batched linear-algebra
primitives, the random-bit primitives and the control-flow primitives (whose results have
their bodies' types). `dot_general` and
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
- slice, dynamic_slice, pad, windowed reductions and convolution (unsplit kernel and input
  features) keep the operand's type; each resized split dimension must stay divisible by
  its mesh axes. dynamic_update_slice needs operand and update of one type.
- gather and scatter: JAX's rule (sliced dimensions full or unsplit, batch dimensions
  agreeing, index vectors unsplit); otherwise JAX's request for `out_sharding=`.
- concatenate: all operands of one type (along any dimension); sort and top_k: the sorted
  dimension unsplit; fft keeps the type; linear algebra: matrix dimensions unsplit, batch
  dimensions split alike, kept in every result.

Instantiated zero tangents and cotangents (`ad.zeros_like_aval`) have their aval's type,
as JAX's, and so have the zeros the transposes of dynamic_slice, dynamic_update_slice and
gather write the cotangent into (lax/slicing.py): the rules of dynamic_update_slice, the
scatters, concatenate and select_and_gather_add are as strict under differentiation as
JAX's. One leniency is left: a convolution kernel's cotangent contracts the split batch
away (JAX passes the kernel's type as `out_sharding`, which stagecraft's
conv_general_dilated does not take yet), so transpose rules run with `_deriving` set and
`conv_general_dilated`'s rule then gives that cotangent an unsplit type, resharded to the
kernel's by `typed_transpose`.

Transposition: the cotangent of a linear operand must have the operand's type (JAX passes
the primal's sharding to the transposed op); `typed_transpose` reshards a cotangent whose
type differs from a split operand type, around the transpose rules of the linear primitives
registered here.
"""
from __future__ import annotations

import contextvars
import math
from typing import Any, Sequence

from stagecraft import core, dtypes
from stagecraft.core import ShapedArray
from stagecraft.interpreters import ad
from stagecraft import sharding as sharding_lib
from stagecraft.lax import (cumulative, elementwise, linalg, prng, random_bits, reduction, shape,
                            slicing, special, windowed)
from stagecraft.lax.conv import conv_general_dilated_p
from stagecraft.lax.fft import fft_p
from stagecraft.lax.sort import sort_p, top_k_p
from stagecraft.lax.ad_util import stop_gradient_p
from stagecraft.lax.control_flow.conditionals import cond_p
from stagecraft.lax.control_flow.loops import scan_p
from stagecraft.lax.control_flow.while_op import while_p
from stagecraft.lax.misc import optimization_barrier_p
from stagecraft.sharding import NamedSharding, PartitionSpec, ShardingTypeError

__all__ = ["entries", "mesh_of", "make_sharding", "nary_rule", "register_nary",
           "varying_out_shape"]


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


def _broadcast_in_dim_rule(x, *, shape, broadcast_dimensions, sharding=None, **_):
  if sharding is not None:   # NB: JAX's `sharding` param (`out_sharding=` of the wrapper)
    return sharding_lib.type_sharding(sharding, len(shape))
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


def _tile_rule(x, *, reps):
  """JAX's rule: the operand's sharding, where every sharded dimension has `reps` 1."""
  if x._sharding is None:
    return None
  for i, (r, e) in enumerate(zip(reps, sharding_lib.spec_entries(x._sharding, x.ndim))):
    if r != 1 and e is not None:
      raise ShardingTypeError(
          f"Operand cannot be sharded on dimension {i} when the tiling is non-trivial. Got "
          f"input type: {x} with reps: {tuple(reps)}")
  return x._sharding


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


def _reshape_rule(x, *, new_sizes, dimensions, sharding=None, **_):
  if sharding is not None:   # NB: JAX's `sharding` param (`out_sharding=` of the wrapper)
    return sharding_lib.type_sharding(sharding, len(new_sizes))
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
core.sharding_rules[shape.tile_p] = _tile_rule
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
# Slicing, padding, gather/scatter, sorting, convolution, FFT, linear algebra, windows

# NB: set while a transpose rule of a primitive with a rule here runs; only the
# convolution rule reads it (a kernel cotangent contracts the split batch away, where JAX
# passes the kernel's type as `out_sharding`); see the module docstring.
_deriving: contextvars.ContextVar = contextvars.ContextVar("stagecraft_deriving",
                                                           default=False)


def _context_sharding(a) -> NamedSharding:
  """JAX's `aval.sharding`: ours when split, else unsplit over the abstract mesh in context
  (JAX's avals carry the mesh they were made under)."""
  if a._sharding is not None:
    return a._sharding
  m = sharding_lib.get_abstract_mesh()
  return sharding_lib.unsharded(a.ndim) if m.empty else NamedSharding(
      m, PartitionSpec(*[None] * a.ndim))


def _str_with_axis_types(a) -> str:
  """JAX's `str_short(mesh_axis_types=True)`: `float32[8@x,4]({Explicit: ('x', 'y')})`."""
  mesh = _context_sharding(a).mesh
  groups: dict = {}
  for n, t in zip(mesh.axis_names, mesh.axis_types):
    groups.setdefault(t, []).append(n)
  return f"{a.str_short(False)}({ {t: tuple(ns) for t, ns in groups.items()} })"


def _sub_size(mesh, e) -> int:
  return math.prod(mesh.shape[n] for n in _names(e))


def _abstract(prim, avals, params):
  """The avals `prim`'s abstract evaluation gives (its rule without the sharding hook)."""
  return getattr(prim.abstract_eval, "rule", prim.abstract_eval)(*avals, **params)


def varying_out_shape(out_shape, x, name: str):
  """The result sharding of an operation whose result may change the sizes of `x`'s
  dimensions (slice, pad, windows, convolution): `x`'s own, each resized split dimension
  divisible by its mesh axes (JAX's rule; an uneven split is rejected)."""
  if x._sharding is None:
    return None
  mesh = x._sharding.mesh
  for d_in, d_out, e in zip(x.shape, out_shape, entries(x)):
    if d_in != d_out and e is not None and d_out % _sub_size(mesh, e):
      raise ShardingTypeError(
          f"{name} on sharded dims where out dim ({d_out}) is not divisible by mesh axes "
          f"({_sub_size(mesh, e)}) with spec ({e}) is not implemented. Got input "
          f"type={x.str_short(True)} and output shape={tuple(out_shape)}")
  return x._sharding


def _varying_rule(prim, name: str):
  def rule(x, *rest, **params):
    out = _abstract(prim, (x, *rest), params)
    return varying_out_shape(out.shape, x, name)
  return rule


core.sharding_rules[shape.slice_p] = _varying_rule(shape.slice_p, "slicing")
core.sharding_rules[shape.pad_p] = _varying_rule(shape.pad_p, "padding")
core.sharding_rules[slicing.dynamic_slice_p] = _varying_rule(slicing.dynamic_slice_p,
                                                             "dynamic_slice")
for _p in (windowed.reduce_window_sum_p, windowed.reduce_window_max_p,
           windowed.reduce_window_min_p):
  core.sharding_rules[_p] = _varying_rule(_p, "reduce_window")


def _dus_rule(operand, update, *start_indices):
  if entries(operand) != entries(update) or mesh_of((operand, update)) is None:
    raise ShardingTypeError(
        f"dynamic_update_slice operand sharding must be equal to update sharding, got "
        f"operand sharding {_str_with_axis_types(operand)} and update sharding "
        f"{_str_with_axis_types(update)}.")
  return operand._sharding


core.sharding_rules[slicing.dynamic_update_slice_p] = _dus_rule


def _concatenate_rule(*xs, dimension):
  mesh_of(xs)
  typed = [x for x in xs if x._sharding is not None or
           not sharding_lib.get_abstract_mesh().empty]
  first = entries(typed[0])
  if any(entries(x) != first for x in typed[1:]):
    raise ShardingTypeError(
        f"All operands should have the same sharding. Got shardings "
        f"{', '.join(str(_context_sharding(x)) for x in xs)}")
  return typed[0]._sharding


core.sharding_rules[shape.concatenate_p] = _concatenate_rule


def _gather_spec(operand, indices, dnums, slice_sizes):
  """The result entries of a gather (JAX's rule), None when they are ambiguous."""
  ospec, ispec = list(entries(operand)), list(entries(indices))
  if all(e is None for e in ospec + ispec):
    return []
  full_or_unsplit = all(slice_sizes[i] == operand.shape[i] or ospec[i] is None
                        for i in dnums.start_index_map)
  batching = list(zip(dnums.operand_batching_dims, dnums.start_indices_batching_dims))
  resolvable = all(ispec[i] == ospec[o] or ospec[o] is None or ispec[i] is None
                   for o, i in batching)
  non_batch_unsplit = all(e is None for i, e in enumerate(ispec)
                          if i not in dnums.start_indices_batching_dims)
  if not (full_or_unsplit and resolvable and non_batch_unsplit):
    return None
  for o, i in batching:
    ispec[i] = ispec[i] or ospec[o]
  window = iter(i for i in range(operand.ndim) if i not in dnums.collapsed_slice_dims
                and i not in dnums.operand_batching_dims)
  batch = iter(ispec)
  out = []
  for d in range(len(dnums.offset_dims) + indices.ndim - 1):
    out.append(ospec[next(window)] if d in dnums.offset_dims else next(batch))
  return out


def _gather_rule(operand, indices, *, dimension_numbers, slice_sizes, **_):
  mesh = mesh_of((operand, indices))
  out = _gather_spec(operand, indices, dimension_numbers, slice_sizes)
  if out is None:
    raise ShardingTypeError(
        f"Use `.at[...].get(out_sharding=)` to provide output PartitionSpec for the gather "
        f"indexing as out sharding could not be resolved unambiguously (or would require "
        f"collectives on inputs). Got operand={operand!r}, indices={indices!r}")
  return make_sharding(mesh, out)


core.sharding_rules[slicing.gather_p] = _gather_rule


def _scatter_spec(operand, indices, updates, dnums):
  """The result entries of a scatter (JAX's rule), None when they are ambiguous. Unsplit
  `updates` stand for the slice's layout that jnp's `.at[]` gives them in JAX."""
  ospec, ispec, uspec = (list(entries(a)) for a in (operand, indices, updates))
  ivd = indices.ndim - 1
  window_o = [i for i in range(operand.ndim) if i not in dnums.inserted_window_dims
              and i not in dnums.operand_batching_dims]
  if updates._sharding is None:
    for u, o in zip(dnums.update_window_dims, window_o):
      uspec[u] = ospec[o]
  if all(e is None for e in ospec + ispec + uspec):
    return []
  # updates' batching dims: the indices' batching dims, numbered in updates
  scatter_dims = [d for d in range(updates.ndim) if d not in dnums.update_window_dims]
  ubatch = [scatter_dims[i if i < ivd else i - 1]
            for i in dnums.scatter_indices_batching_dims]
  triples = list(zip(dnums.operand_batching_dims, dnums.scatter_indices_batching_dims, ubatch))

  def resolvable(*es):
    named = [e for e in es if e is not None]
    return all(e == named[0] for e in named)
  ok = (all(resolvable(ospec[o], ispec[i], uspec[u]) for o, i, u in triples)
        and all((updates.shape[u] == operand.shape[o] and uspec[u] == ospec[o])
                or (uspec[u] is None and ospec[o] is None)
                for u, o in zip(dnums.update_window_dims, window_o))
        and all(ospec[i] is None for i in dnums.inserted_window_dims)
        and all(e is None for d, e in enumerate(uspec)
                if d not in ubatch and d not in dnums.update_window_dims)
        and all(e is None for d, e in enumerate(ispec[:ivd])
                if d not in dnums.scatter_indices_batching_dims)
        and ispec[ivd] is None)
  if not ok:
    return None
  out = list(ospec)
  for o, i, u in triples:
    out[o] = out[o] or ispec[i] or uspec[u]
  for u, o in zip(dnums.update_window_dims, window_o):
    out[o] = out[o] or uspec[u]
  return out


def _scatter_rule(operand, indices, updates, *, dimension_numbers, **_):
  mesh = mesh_of((operand, indices, updates))
  out = _scatter_spec(operand, indices, updates, dimension_numbers)
  if out is None:
    raise ShardingTypeError(
        f"Use `.at[...].set/add/mul/...(out_sharding=)` to provide output PartitionSpec for "
        f"the scatter update as out sharding could not be resolved unambiguously (or would "
        f"require collectives on inputs). Got operand={operand!r}, indices={indices!r}, "
        f"updates={updates!r}")
  return make_sharding(mesh, out)


for _p in (slicing.scatter_p, slicing.scatter_add_p, slicing.scatter_mul_p,
           slicing.scatter_min_p, slicing.scatter_max_p, slicing.scatter_sub_p):
  core.sharding_rules[_p] = _scatter_rule


def _sort_rule(*avals, dimension, is_stable, num_keys):
  # NB: JAX compares every operand's sharding; stagecraft's argsort adds an unsplit iota
  # (JAX's has the keys' type), so unsplit operands take the split ones' type.
  typed = [a._sharding for a in avals if a._sharding is not None]
  ndim = len(avals[0].shape)
  for s in typed:
    if sharding_lib.spec_entries(s, ndim)[dimension] is not None:
      raise ShardingTypeError(f"Arguments to sort must be unsharded over the sorting "
                              f"dimension. Got arg sharding={s} and sorting "
                              f"dimension={dimension}")
    if (s.mesh != typed[0].mesh or sharding_lib.spec_entries(s, ndim) !=
        sharding_lib.spec_entries(typed[0], ndim)):
      raise ShardingTypeError(f"Arguments to sort must have equal shardings, got: "
                              f"{' '.join(str(t) for t in typed)}")
  return [typed[0]] * len(avals)


def _top_k_rule(operand, *, k, axis):
  if entries(operand)[axis] is not None:
    raise ShardingTypeError(
        f"The input should be unsharded over the axis along which to compute the top_k "
        f"values. Got input type={operand} and axis={axis}")
  return [operand._sharding, operand._sharding]


core.sharding_rules[sort_p] = _sort_rule
core.sharding_rules[top_k_p] = _top_k_rule


def _conv_rule(lhs, rhs, *, dimension_numbers, **params):
  if rhs._sharding is None and entries(lhs)[dimension_numbers.lhs_spec[1]] is None:
    out = _abstract(conv_general_dilated_p, (lhs, rhs),
                    dict(params, dimension_numbers=dimension_numbers))
    return varying_out_shape(out.shape, lhs, "conv_general_dilated")
  if _deriving.get():
    # NB: the kernel's cotangent contracts the split batch away (JAX passes the kernel's
    # type as `out_sharding`); transposition reshards it to its operand's type.
    return None
  raise ShardingTypeError("Please specify the output sharding via `out_sharding` parameter "
                          "of `conv_general_dilated`")


core.sharding_rules[conv_general_dilated_p] = _conv_rule
core.sharding_rules[fft_p] = lambda x, **_: x._sharding


def _linalg_rule(prim, ranks):
  """JAX's rule of the batched linear-algebra primitives: the operands' matrix (or vector)
  dimensions unsplit, their batch dimensions split alike; results keep the batch split."""
  def rule(*avals, **params):
    batch = []
    for i, (rank, a) in enumerate(zip(ranks, avals)):
      spec = entries(a)
      if any(e is not None for e in spec[len(spec) - rank:]):
        raise ShardingTypeError(f"Input {i} to {prim.name} must be unsharded on non-batch "
                                f"dimensions, but got {_context_sharding(a).spec}.")
      batch.append(spec[:len(spec) - rank])
    if any(b != batch[0] for b in batch[1:]):
      raise ShardingTypeError(f"All inputs to {prim.name} must have the same batch "
                              f"sharding, but got {[PartitionSpec(*b) for b in batch]}.")
    mesh = mesh_of(avals)
    outs = _abstract(prim, avals, params)
    def one(o):
      return make_sharding(mesh, list(batch[0]) + [None] * (o.ndim - len(batch[0])))
    return [one(o) for o in outs] if prim.multiple_results else one(outs)
  return rule


for _name, _ranks in (("cholesky", (2,)), ("eig", (2,)), ("eigh", (2,)),
                      ("hessenberg", (2,)), ("householder_product", (2, 1)),
                      ("ormqr", (2, 1, 2)), ("lu", (2,)), ("lu_pivots_to_permutation", (1,)),
                      ("geqrf", (2,)), ("geqp3", (2, 1)), ("qr", (2,)), ("schur", (2,)),
                      ("svd", (2,)), ("symmetric_product", (2, 2)), ("tridiagonal", (2,)),
                      ("tridiagonal_solve", (1, 1, 1, 2))):
  _p = getattr(linalg, f"{_name}_p", None)
  if isinstance(_p, core.Primitive):
    core.sharding_rules[_p] = _linalg_rule(_p, _ranks)


def _triangular_solve_rule(a, b, *, left_side, transpose_a, **_):
  sa, sb = entries(a), entries(b)
  ba, bb = sa[:-2], sb[:-2]
  if ba != bb:
    raise ShardingTypeError(f"All inputs to triangular_solve must have the same batch "
                            f"sharding, but got {ba} and {bb}.")
  if sa[-2:][left_side ^ transpose_a] is not None:
    raise ShardingTypeError(
        f"triangular solve input `a` must be unsharded on the contracting axis, but got "
        f"{_context_sharding(a).spec} with left_side={left_side} and "
        f"transpose_a={transpose_a}.")
  if sb[-2:][not left_side] is not None:
    raise ShardingTypeError(
        f"triangular solve input `b` must be unsharded on the contracting axis, but got "
        f"{_context_sharding(b).spec} with left_side={left_side} and "
        f"transpose_a={transpose_a}.")
  out = ([sa[-2:][transpose_a], sb[-1]] if left_side else
         [sb[-2], sa[-2:][not transpose_a]])
  return make_sharding(mesh_of((a, b)), [*ba, *out])


core.sharding_rules[linalg.triangular_solve_p] = _triangular_solve_rule


def _select_and_gather_add_rule(tangents, operand, **params):
  if entries(tangents) != entries(operand):
    raise ShardingTypeError(f"select_and_gather_add tangents and operand shardings must "
                            f"match, got {_context_sharding(tangents)} and "
                            f"{_context_sharding(operand)}.")
  x = operand if operand._sharding is not None else tangents
  out = _abstract(windowed.select_and_gather_add_p, (tangents, operand), params)
  return varying_out_shape(out.shape, x, "reduce_window")


core.sharding_rules[windowed.select_and_scatter_add_p] = (
    lambda source, operand, **_: operand._sharding or source._sharding)
core.sharding_rules[windowed.select_and_gather_add_p] = _select_and_gather_add_rule

# Random bits: the counters are elementwise; rng_bit_generator's key keeps its type and its
# bits are unsplit (JAX's rule without `out_sharding`).
_threefry_nary = nary_rule(random_bits.threefry2x32_p.name)
core.sharding_rules[random_bits.threefry2x32_p] = (   # NB: two results, both of one type
    lambda *avals, **params: [_threefry_nary(*avals, **params)] * 2)
core.sharding_rules[random_bits.rng_bit_generator_p] = (
    lambda key, **_: [key._sharding, None])


# NB: the JVP rules need no leniency: the zero tangents they instantiate have their
# primal's type (`ad.zeros_like_aval`).


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
    token = _deriving.set(True)
    try:
      cts = rule(ct, *args, **params)
    finally:
      _deriving.reset(token)
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
        want = a.aval._sharding
        if want is not None and (want.spec.unreduced or want.spec.reduced):
          # NB: the cotangent of a reduced operand is unreduced (JAX's `to_ct_spec`)
          want = want.update(spec=want.spec.to_ct_spec())
        if (type(have) is ShapedArray and want is not None
            and have._sharding != want and have.shape == a.aval.shape):
          out[k] = reshard(c, want, have._sharding)
    return out
  transpose.untyped = rule
  return transpose


def wrap_transposes(reshard) -> None:
  """Makes the transpose rules of the linear primitives with rules here keep types."""
  for p in list(core.sharding_rules):
    rule = ad.primitive_transposes.get(p)
    if rule is not None and not hasattr(rule, "untyped"):
      ad.primitive_transposes[p] = typed_transpose(rule, reshard)


# ---------------------------------------------------------------------------
# Unreduced / reduced mesh axes (JAX's `ur_rule`s, `core.ur_rules`)
#
# A value unreduced along a mesh axis holds a partial sum on each device (`f32[4]{U:x}`);
# a reduced one a full copy whose cotangent is unreduced (`f32[4]{R:x}`). Operations that
# are linear in one operand keep the states; others reject unreduced operands with JAX's
# messages. Primitives without a rule here raise core's NotImplementedError.


def _u(a) -> frozenset:
  s = getattr(a, "_sharding", None)
  return s.spec.unreduced if s is not None else frozenset()


def _r(a) -> frozenset:
  s = getattr(a, "_sharding", None)
  return s.spec.reduced if s is not None else frozenset()


def _replicated_axes(a, mesh) -> frozenset:
  used = {n for e in entries(a) for n in _names(e)}
  return frozenset(mesh.axis_names) - used - _u(a) - _r(a) - set(a.vma)


def _nary_reduced(*avals) -> frozenset:
  """JAX's default: every reduced operand reduced along the same axes, and no other operand
  replicated, split or varying along them."""
  found = {r for a in avals if (r := _r(a))}
  if len(found) > 1:
    raise ShardingTypeError(f"All inputs should be reduced across the same mesh axes. Got "
                            f"specs: {found}")
  if not found:
    return frozenset()
  (red,) = found
  mesh = mesh_of(avals)
  for a in avals:
    if _replicated_axes(a, mesh) & red:
      raise ShardingTypeError(f"Inputs cannot be replicated on the same axes that another "
                              f"input is reduced on. Got input type: {a.str_short()} and "
                              f"reduced spec: {red}")
    if ({n for e in entries(a) for n in _names(e)} | set(a.vma)) & red:
      raise ShardingTypeError(
          f"Inputs cannot be sharded/varying on the same axes that another input is reduced "
          f"on. Reshard the input which is reduced to be sharded on the mesh axes it is "
          f"reduced on via `jax.sharding.reshard(inp, jax.P(...))`. Got input type: "
          f"{a.str_short()} and reduced spec: {red}")
  return red


def _not_implemented(name: str):
  return NotImplementedError(f"unreduced rule for {name} is not implemented. Please file an "
                             f"issue at https://github.com/jax-ml/jax/issues")


def _elementwise_ur_rule(name: str):
  def rule(*avals, **_):
    if len(avals) == 1:
      if _u(avals[0]):
        raise _not_implemented(name)
      return frozenset(), _r(avals[0])
    red = _nary_reduced(*avals)
    if any(_u(a) for a in avals):
      raise _not_implemented(name)
    return frozenset(), red
  return rule


def _add_ur_rule(x, y, **_):
  red = _nary_reduced(x, y)
  xu, yu = _u(x), _u(y)
  if xu and yu:
    if xu != yu:
      raise ShardingTypeError(f"lhs and rhs to `add` must be unreduced along the same mesh "
                              f"axes. Got lhs={xu}, rhs={yu}")
    return xu, red
  if xu or yu:
    a, b = ("lhs", "rhs") if xu else ("rhs", "lhs")
    raise ShardingTypeError(f"{a} is unreduced while {b} is not. `add` operation does not "
                            f"allow this because there will be implicit communication. Please "
                            f"reduce {a} via `reshard` before calling `add`.")
  return frozenset(), red


def _mul_ur_rule(x, y, **_):
  red = _nary_reduced(x, y)
  xu, yu = _u(x), _u(y)
  if xu and yu:
    raise ShardingTypeError(f"lhs and rhs to `mul` cannot be unreduced since mul is bilinear. "
                            f"Got lhs={xu}, rhs={yu}")
  if xu and xu != _r(y):
    raise ShardingTypeError(f"RHS should be reduced along the same axes LHS is unreduced on. "
                            f"Got lhs={x.str_short(False)} and rhs={y.str_short(False)}")
  if yu and _r(x) != yu:
    raise ShardingTypeError(f"LHS should be reduced along the same axes RHS is unreduced on. "
                            f"Got lhs={x.str_short(False)} and rhs={y.str_short(False)}")
  out_u = xu or yu
  return out_u, (frozenset() if out_u else red)


def _keep_ur_rule(x, *_, **__):
  return _u(x), _r(x)


def _convert_ur_rule(x, *, sharding=None, **_):
  spec = getattr(sharding, "spec", None)
  u = spec.unreduced if spec is not None and spec.unreduced else _u(x)
  r = spec.reduced if spec is not None and spec.reduced else _r(x)
  return u, r


def _reduce_sum_ur_rule(x, *, axes, out_sharding=None, **_):
  spec = getattr(out_sharding, "spec", None)
  if _u(x):
    return _u(x), _r(x)
  return (spec.unreduced if spec is not None else frozenset()), _r(x)


for _p in list(core.sharding_rules):
  if core.sharding_rules[_p].__qualname__.startswith("nary_rule"):
    core.ur_rules[_p] = _elementwise_ur_rule(_p.name)
core.ur_rules[elementwise.add_p] = _add_ur_rule
core.ur_rules[ad.add_any_p] = _add_ur_rule
core.ur_rules[elementwise.mul_p] = _mul_ur_rule
core.ur_rules[elementwise.convert_element_type_p] = _convert_ur_rule
core.ur_rules[reduction.reduce_sum_p] = _reduce_sum_ur_rule
def _dynamic_slice_ur_rule(x, *_, **__):
  if _u(x):
    raise _not_implemented("dynamic_slice")
  return frozenset(), _r(x)


def _dus_ur_rule(operand, update, *_):
  for what, get in (("unreduced", _u), ("reduced", _r)):
    if get(operand) != get(update):
      raise ShardingTypeError(
          f"dynamic_update_slice operand and update must be {what} along the same axes. Got "
          f"operand sharding {_str_with_axis_types(operand)} and update sharding "
          f"{_str_with_axis_types(update)}.")
  return _u(operand), _r(operand)


core.ur_rules[slicing.dynamic_slice_p] = _dynamic_slice_ur_rule
core.ur_rules[slicing.dynamic_update_slice_p] = _dus_ur_rule
# NB: JAX has no rule for broadcast_in_dim (an error there); here it keeps the states (it
# is linear), which scan's lowering needs to write an unreduced y into its stacked buffer.
for _p in (shape.transpose_p, shape.squeeze_p, stop_gradient_p, shape.slice_p,
           shape.reshape_p, shape.broadcast_in_dim_p):
  core.ur_rules[_p] = _keep_ur_rule
for _p in (cond_p, scan_p, while_p, optimization_barrier_p):
  core.ur_rules[_p] = lambda *avals, **params: None   # NB: the bodies' types


# ---------------------------------------------------------------------------
# Typed keys (JAX's key primitives): the keys' axes are laid out as their data's leading
# axes; the key-data axis and the drawn axes are never split.


def _key_mesh(*avals):
  return mesh_of(avals)


core.sharding_rules[prng.random_wrap_p] = lambda x, *, impl: make_sharding(
    _key_mesh(x), entries(x)[:-1])
core.sharding_rules[prng.random_unwrap_p] = lambda k: make_sharding(
    _key_mesh(k), (*entries(k), None))
core.sharding_rules[prng.random_seed_p] = lambda s, *, impl: s._sharding
core.sharding_rules[prng.random_bits_p] = lambda k, *, bit_width, shape: make_sharding(
    _key_mesh(k), (*entries(k), *(None,) * len(shape)))
core.sharding_rules[prng.random_split_p] = lambda k, *, shape: make_sharding(
    _key_mesh(k), (*entries(k), *(None,) * len(shape)))
core.sharding_rules[prng.random_fold_in_p] = lambda k, m: make_sharding(
    _key_mesh(k, m), tuple(a if a is not None else b for a, b in zip(entries(k), entries(m))))
