"""shard_map: a function written per device, mapped over the blocks of a device mesh.

`shard_map(f, out_specs=..., in_specs=..., mesh=...)(*args)` splits each argument into blocks
by its PartitionSpec (dimension i split over the mesh axes named at i), runs `f` once per
device on that device's blocks, with collectives (`lax.psum(x, "data")`,
`lax.all_gather(y, "model")`, `lax.axis_index`, ...) over the mesh axis names, and assembles
the results from the blocks by `out_specs`. A mesh axis an out_spec does not mention means
the result is the same on every device along that axis (checked when `check_vma`), and one
copy is kept. Semantics follow JAX 0.10.2's `jax.shard_map`:

- `f` is positional-only and may be left out (`@shard_map(out_specs=P('x'))`, or
  `@partial(shard_map, out_specs=...)`); everything else is keyword-only.
- `mesh=None` takes the mesh in context (`with set_mesh(mesh):`, or the enclosing shard_map
  for a nested one), resolved at the first call and kept, as JAX does.
- `in_specs` left out (`Infer`) is inferred from the arguments when every manual axis is
  `Explicit`: an Array laid out by a NamedSharding over the mesh is split by its spec
  (restricted to the manual axes), anything else is replicated. A `None` entry makes that
  argument static (passed to `f` as it is, not traced).
- `axis_names` (a set) makes `f` manual over those mesh axes only; over the others (automatic)
  the body sees whole values and XLA's partitioner handles them. A shard_map nested in
  another's body may be manual over further axes.
- `check_vma=True` types each value inside as invariant or varying along each manual axis
  (JAX's "varying manual axes": `ShapedArray.vma`, printed `f32[3]{V:i}`; an argument varies
  along the manual axes its in_spec splits; `lax.pcast(x, name, to='varying')` makes an
  invariant value varying, and JAX's `pvary` equations are inserted where an invariant
  operand meets a varying one, before a collective, and on results whose out_specs split
  over axes they do not vary along; psum is `psum_invariant`), and rejects, with JAX's
  messages, out_specs that claim replication of a varying value, loops whose carries change
  type and cond branches of different types (the types, and interpreters/mapping.py's
  `varying_axes` in its strict mode).

The form of JAX's former `jax.experimental.shard_map.shard_map(f, mesh, in_specs, out_specs,
check_rep=True, auto=frozenset())` keeps working (any argument after `f` given positionally,
or `check_rep`/`auto` given): there `None` specs mean replicated, the mesh is taken when
shard_map is called, and `check_rep` runs the replication analysis of that API (fixed points
for loops, a varying cond predicate makes results vary, all_gather's results are replicated).

The primitive `shard_map` carries the per-device closed jaxpr and the mesh, specs and
manual axes (stagecraft/lax/spmd.py); its rules are pmap's (interpreters/mapping.py's MapRules)
generalized to several axes. A typed (check_vma) body transposes as JAX's (pvary^T =
psum_invariant, psum_invariant^T = pvary); in an untyped one psum transposes to psum, so
the cotangent of a result replicated over manual axes is divided by their size before the
transposed body, and the cotangent of an operand replicated over manual axes is psum'med
over them. Lowering emits an
`sdy.manual_computation` (as JAX does) inside the program over the mesh (runtime/spmd.py).
This module holds the user-facing function.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np
import optree

from stagecraft.traceback_util import api_boundary
from stagecraft import core, tree_util
from stagecraft.api_util import check_out_leaves, flatten, fun_name as _fun_name
from stagecraft.core import ClosedJaxpr, ShapedArray
from stagecraft import lax, pjit, sharding as sharding_lib
from stagecraft.lax import parallel
from stagecraft.interpreters import batching, partial_eval as pe
from stagecraft.interpreters.mapping import (checking_vma, eqn_varying_axes, ordered_axes,
                                             varying_axes)
from stagecraft.numpy import asarray as _asarray
from stagecraft.runtime.array import Array
from stagecraft.runtime import dispatch, spmd
from stagecraft.lax.spmd import (body_vma, enclosing_shard_map, local_aval, outside_shard_map,
                                 shard_map_env, shard_map_p, name_shard_map_body,
                                 shard_map_name, split_size)
from stagecraft.sharding import (AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec,
                                 concrete_mesh, current_mesh, get_abstract_mesh)

__all__ = ["shard_map", "smap", "Infer", "HiPspec"]


class HiPspec:
  """The partition spec of a hijax-typed shard_map argument or result (JAX's
  `jax.experimental.hijax.HiPspec`, exported there). A subclass gives `to_lo()`: one
  PartitionSpec per array of the type's `lo_ty()`, by which those arrays are split or
  assembled; the type's `shard(mesh, manual_axes, check_vma, spec)` gives its type inside
  the body, `unshard(mesh, check_vma, spec)` the result's type outside."""

  def to_lo(self) -> tuple:
    raise NotImplementedError(f"subclass {type(self)} must implement `to_lo`")

  def to_tangent_spec(self) -> "HiPspec":
    raise NotImplementedError(f"subclass {type(self)} must implement `to_tangent_spec`")

  def to_ct_spec(self) -> "HiPspec":
    raise NotImplementedError(f"subclass {type(self)} must implement `to_ct_spec`")


#: Set by `experimental.hijax`: `eval_lojax[0](jaxpr, vals, consts)` evaluates a jaxpr whose
#: hijax-typed values are held as their types' value classes (a body's lowered program).
eval_lojax: list = [None]


def _is_hi_spec(s) -> bool:
  return isinstance(s, HiPspec)


class _InferType:
  """The default of shard_map's `in_specs`: infer them from the arguments' shardings."""
  __slots__ = ()

  def __repr__(self):
    return "Infer"


Infer = _InferType()
_MISSING = object()


# ---------------------------------------------------------------------------
# Specs


def _spec_leaf(x) -> bool:
  return x is None or isinstance(x, (PartitionSpec, HiPspec))


def _spec_names(spec: PartitionSpec) -> frozenset:
  return frozenset(n for i in range(len(spec)) for n in spec._names(i))


def _flat_specs(prefix, tree, what: str, fun_name: str, *, legacy: bool) -> list:
  """One spec per leaf of `tree` (None entries kept, or replicated in the legacy form)."""
  try:
    specs = tree_util.broadcast_prefix(prefix, tree, is_leaf=_spec_leaf)
  except ValueError:
    errors = tree_util.prefix_errors(prefix, tree, is_leaf=_spec_leaf)
    if errors:   # NB: JAX's message for the first disagreement
      raise errors[0](f"shard_map {what}") from None
    raise ValueError(f"shard_map applied to the function '{fun_name}' was given {what} "
                     f"{prefix!r}, which is not a tree prefix of the "
                     f"{'arguments tuple' if what == 'in_specs' else 'output'}; give one "
                     f"PartitionSpec per argument (or a prefix of their structure).") from None
  for s in specs:
    if s is not None and not isinstance(s, (PartitionSpec, HiPspec)):
      raise TypeError(f"shard_map {what} entries must be PartitionSpecs (or None), got "
                      f"{s!r}.")
  if legacy or what == "out_specs":
    return [PartitionSpec() if s is None else s for s in specs]
  return specs


def _check_explicit_input(spec: PartitionSpec, aval) -> None:
  """On a mesh whose axes are all Explicit, an argument's sharding type must be its in_spec
  (JAX 0.10.2's check: shard_map does not reshard typed arguments).

  Raises:
    ValueError: with JAX's message, naming both specs (padded to the argument's rank) and
      the argument's type.
  """
  def entries(p):
    out = [e[0] if isinstance(e, tuple) and len(e) == 1 else (tuple(e) if isinstance(
        e, (tuple, list)) else e) for e in p]
    return out + [None] * (len(aval.shape) - len(out))
  want, have = entries(spec), entries(aval.sharding.spec)
  if want != have:
    raise ValueError(
        f"in_specs passed to shard_map: {PartitionSpec(*want)} does not match the specs of "
        f"the input: {PartitionSpec(*have)} for arg: {aval}. `in_specs` is an optional "
        f"argument so you can omit specifying it and shard_map will infer the in_specs from "
        f"the arguments. If you want to reshard your inputs, you can use `jax.reshard` on "
        f"the arguments and then pass those args to shard_map.")


def _spec_paths(prefix, tree) -> list[str]:
  """For each leaf of `tree`, the key path (`keystr`) of the spec of the prefix `prefix`
  that covers it."""
  items = tree_util.tree_flatten_with_path(prefix, is_leaf=_spec_leaf)[0]
  paths = tree_util.tree_unflatten(tree_util.tree_structure(prefix, is_leaf=_spec_leaf),
                                   [tree_util.keystr(k) for k, _ in items])
  return tree_util.broadcast_prefix(paths, tree)


def _check_specs_jax(specs: Any, manual: frozenset, what: str, mesh, legacy: bool):
  """JAX's check of in_specs/out_specs: PartitionSpec leaves naming manual axes only."""
  items = tree_util.tree_flatten_with_path(specs, is_leaf=_spec_leaf)[0]
  bad_type = [f"  {what}{tree_util.keystr(k)} is {x} of type {type(x).__name__}, "
              for k, x in items
              if x is not None and not isinstance(x, (PartitionSpec, HiPspec))]
  if bad_type:
    raise TypeError(f"shard_map {what} argument must be a pytree of "
                    f"`jax.sharding.PartitionSpec` instances, but:\n\n" + "\n\n".join(bad_type)
                    + f"\n\nCheck the {what} values passed to shard_map.")
  msgs = []
  for k, p in items:
    if p is None or isinstance(p, HiPspec):   # as JAX's: a HiPspec is not checked
      continue
    for i in range(len(p)):
      for n in p._names(i):
        if n not in manual:
          note = ""
          if legacy and n in mesh.axis_names:
            note = f" (the automatic axis {n!r}; specs may name only the manual axes)"
          elif n not in mesh.axis_names:
            note = "" if not legacy else f" (not an axis of the mesh {mesh.axis_names})"
          msgs.append(f"  {what}{tree_util.keystr(k)} refers to {n!r}{note}")
  if msgs:
    raise ValueError(f"shard_map {what} argument must refer to an axis marked as manual "
                     f"({manual}), but:\n\n" + "\n\n".join(msgs) + "\n\n"
                     f"Check the {what} values passed to shard_map.")


def _check_spec(spec: PartitionSpec, aval: ShapedArray, mesh: Mesh, where: str,
                fun_name: str, *, split: bool):
  """Rank, repeated axes and divisibility of one value's spec."""
  if len(spec) > len(aval.shape):
    raise ValueError(f"shard_map applied to the function '{fun_name}' was given {where} "
                     f"with spec {spec}, which has {len(spec)} entries, for a value of rank "
                     f"{len(aval.shape)} ({aval.str_short()}); give at most one entry per "
                     f"dimension.")
  seen = []
  for i in range(len(spec)):
    for n in spec._names(i):
      if n in seen:
        raise ValueError(f"shard_map: {where} has spec {spec}, which uses the mesh axis "
                         f"{n!r} twice.")
      seen.append(n)
    k = split_size(mesh, spec, i)
    if split and aval.shape[i] % k:
      raise ValueError(f"shard_map applied to the function '{fun_name}' was given {where} "
                       f"of shape {aval.str_short()}, whose dimension {i} (size "
                       f"{aval.shape[i]}) is not divisible by {k}, the size of the mesh "
                       f"axes {spec._names(i)} its spec {spec} splits it over.")


def _inferred_spec(x: Any, mesh: Mesh, manual: frozenset) -> PartitionSpec:
  """The in_spec JAX infers for `x`: its sharding's spec over `mesh` restricted to the
  manual axes (P() for a value not laid out over the mesh)."""
  sh = getattr(core.get_aval(x), "sharding", None) if isinstance(x, core.Tracer) else \
      getattr(x, "sharding", None)
  if not isinstance(sh, NamedSharding):
    return PartitionSpec()
  src = sh.mesh
  if isinstance(src, AbstractMesh):
    # NB: a traced value's type names the abstract mesh of its layout (jit's arguments
    # laid out over an Explicit mesh): its axes must be the shard_map mesh's.
    if tuple(src.axis_names) != tuple(mesh.axis_names) or tuple(
        src.axis_sizes) != tuple(mesh.devices.shape):
      return PartitionSpec()
    rename = {n: n for n in mesh.axis_names}
  elif not isinstance(src, Mesh):
    return PartitionSpec()
  elif src.axis_names != mesh.axis_names:
    if src.devices.shape != mesh.devices.shape or (
        [d.id for d in src.devices.flat] != [d.id for d in mesh.devices.flat]):
      return PartitionSpec()
    rename = dict(zip(src.axis_names, mesh.axis_names))
  else:
    rename = {n: n for n in mesh.axis_names}
  out = []
  for i in range(len(sh.spec)):
    names = [rename[n] for n in sh.spec._names(i)]
    kept = [n if n in manual else None for n in names]
    while kept and kept[-1] is None:
      kept.pop()
    if None in kept:
      raise ValueError(f"Invalid spec: {sh.spec}")
    out.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
  while out and out[-1] is None:
    out.pop()
  return PartitionSpec(*out)


# ---------------------------------------------------------------------------
# The replication (varying manual axes) check of the results


def _vma_error(fun_name: str, mesh: Mesh, fails: list[tuple[str, PartitionSpec, frozenset]],
               legacy: bool) -> str:
  """JAX's message for outputs whose out_specs claim replication along axes they may vary
  along (`fails`: (out_specs path, spec, varying axes) per such output)."""
  msgs = []
  for path, spec, vary in fails:
    used = _spec_names(spec)
    unmentioned = [n for n in mesh.axis_names if n not in used]
    if len(unmentioned) > 1:
      need = ",".join(map(str, ordered_axes(used, mesh.axis_names)))
      got = ",".join(map(str, ordered_axes(vary, mesh.axis_names)))
      diff = ",".join(str(n) for n in unmentioned if n in vary)
      msgs.append(f"* out_specs{path} is {spec} which implies that the corresponding output "
                  f"value is only varying across mesh axes {{{need}}} and not {{{diff}}}, but "
                  f"it was inferred to be possibly varying over {{{got}}}")
    else:
      msgs.append(f"* out_specs{path} is {spec} which implies that the corresponding output "
                  f"value is replicated across mesh axis '{unmentioned[0]}', but could not "
                  f"infer replication over any axes")
  if len(msgs) == 1:
    msgs = [msgs[0][2:]]
  flag = ("the check_rep=False argument to `jax.experimental.shard_map.shard_map`" if legacy
          else "the check_vma=False argument to `jax.shard_map`")
  return (f"shard_map applied to the function '{fun_name}' was given out_specs which require "
          f"replication which can't be statically inferred given the mesh:\n\n"
          f"The mesh given has shape {tuple(mesh.shape.values())} with corresponding axis "
          f"names {mesh.axis_names}.\n\n" + "\n\n".join(msgs) + "\n\n"
          f"Check if these output values are meant to be replicated over those mesh axes. "
          f"If not, consider revising the corresponding out_specs entries. If so, consider "
          f"disabling the check by passing {flag}.")


# ---------------------------------------------------------------------------
# The mesh


def _resolve_mesh(mesh: Any) -> tuple[Mesh, Any]:
  """(the concrete Mesh to run over, the mesh whose axis types apply): `mesh` as given,
  else the mesh in context (an enclosing shard_map's, `set_mesh`'s, or `with mesh:`'s).

  Raises:
    ValueError: no mesh in context, a mesh that differs from the one in context, an empty
      mesh, or an AbstractMesh with no concrete mesh of its shape in context.
    TypeError: something that is not a mesh.
  """
  ctx = get_abstract_mesh()
  enclosing = enclosing_shard_map()
  if mesh is None:
    if enclosing is not None:
      return enclosing[0], ctx
    if ctx.empty:
      legacy = current_mesh()
      if legacy is None:
        raise ValueError("The context mesh cannot be empty. Use `jax.set_mesh(mesh)` to "
                         "enter into a mesh context")
      return legacy, legacy
    types_mesh, mesh = ctx, None
  else:
    if not isinstance(mesh, (Mesh, AbstractMesh)):
      raise TypeError(f"shard_map requires a `jax.sharding.Mesh` or a "
                      f"`jax.sharding.AbstractMesh` instance for its second argument, but got "
                      f"{mesh} of type {type(mesh)}.")
    if not ctx.empty and mesh.abstract_mesh != ctx:
      raise ValueError(f"The context mesh {ctx} should match the mesh passed to shard_map "
                       f"{mesh}")
    if mesh.empty:
      raise ValueError(f"shard_map requires a non-empty mesh. Got {mesh}")
    if isinstance(mesh, Mesh):
      return mesh, mesh
    types_mesh = mesh
  # An abstract mesh: run over the concrete mesh of its shape in context.
  candidates = [enclosing[0] if enclosing else None, concrete_mesh(), current_mesh()]
  for c in candidates:
    if c is not None and (c.axis_sizes, c.axis_names) == (types_mesh.axis_sizes,
                                                          types_mesh.axis_names):
      return c, types_mesh
  raise ValueError(f"shard_map over {types_mesh} needs devices: call it under "
                   f"`with jax.set_mesh(mesh):` for a Mesh of the same axis sizes and names.")


# ---------------------------------------------------------------------------
# The user-facing shard_map


def shard_map(f: Callable | None = None, /, *args: Any, out_specs: Any = _MISSING,
              in_specs: Any = Infer, mesh: Mesh | AbstractMesh | None = None,
              axis_names: Any = frozenset(), check_vma: bool | None = None,
              check_rep: bool | None = None, auto: Any = None) -> Callable:
  """Maps `f`, written for one device's blocks, over the devices of a mesh (JAX 0.10.2's
  `shard_map` signature: `shard_map(f=None, /, *, out_specs, in_specs=Infer, mesh=None,
  axis_names=frozenset(), check_vma=True)`; see the module docstring, also for the older
  positional form).

  Args:
    f: a function of arrays (pytrees) returning arrays (pytrees), called with each device's
      blocks; collectives over the mesh axis names communicate between devices. Left out,
      shard_map returns a decorator.
    out_specs: a PartitionSpec per output (or a pytree prefix of the outputs): how the
      blocks assemble into the global result; a manual axis a spec leaves out means the
      output is the same along it.
    in_specs: a PartitionSpec per positional argument (or a pytree prefix of the arguments
      tuple): dimension i is split over the mesh axes the spec names at i (it must
      divide); P() gives every device the whole argument; a None entry makes the argument
      static. Left out: inferred from the arguments (every manual axis must be Explicit).
    mesh: a Mesh (or an AbstractMesh, run on the mesh of its shape set by `set_mesh`);
      default: the mesh in context.
    axis_names: the set of mesh axes `f` is manual over (default: all); over the others the
      body sees whole values.
    check_vma: check that outputs are the same along the manual axes their out_specs leave
      out, typing values as JAX does (see the module docstring).

  Returns:
    The mapped function (or a decorator when `f` is None); its results are Arrays laid out
    over the mesh by `out_specs` (global shapes: each block dimension times the size of
    the axes it is split over).

  Raises:
    TypeError: a non-callable `f`; specs that are not PartitionSpecs; `axis_names` that is
      not a set; `in_specs` left out with axes that are not Explicit; loops or conds whose
      varying manual axes do not match (check_vma).
    ValueError: no mesh (in context); a mesh other than the one in context; axis names not
      of the mesh; a spec naming an axis that is not manual, or one twice, or with more
      entries than the value's rank, or a dimension not divisible by its axes; specs that are
      not a tree prefix; an output that may vary along an axis its out_spec leaves out
      (check_vma), with JAX's message.
    NameError: a collective over an axis the mesh does not bind manually.
  """
  if args or check_rep is not None or auto is not None:
    return _legacy_shard_map(f, args, out_specs, in_specs, mesh, axis_names, check_vma,
                             check_rep, auto)
  if out_specs is _MISSING:
    raise TypeError("shard_map() missing 1 required keyword-only argument: 'out_specs'")
  kwargs = dict(out_specs=out_specs, in_specs=in_specs, mesh=mesh, axis_names=axis_names,
                check_vma=True if check_vma is None else check_vma)
  if f is None:
    return lambda g: _shard_map(g, **kwargs)
  return _shard_map(f, **kwargs)


def _legacy_shard_map(f, args, out_specs, in_specs, mesh, axis_names, check_vma, check_rep,
                      auto):
  """`shard_map(f, mesh, in_specs, out_specs, check_rep=True, auto=frozenset())`."""
  names = ("mesh", "in_specs", "out_specs", "check_rep", "auto")
  if len(args) > len(names):
    raise TypeError(f"shard_map takes at most {len(names) + 1} positional arguments (f, "
                    f"{', '.join(names)}), got {len(args) + 1}.")
  given = dict(zip(names, args))
  mesh = given.get("mesh", mesh)
  in_specs = given.get("in_specs", in_specs)
  out_specs = given.get("out_specs", out_specs)
  check_rep = given.get("check_rep", check_rep)
  auto = given.get("auto", auto)
  if not callable(f):
    raise TypeError(f"shard_map expects a callable, got {f!r}.")
  if mesh is None:
    mesh = current_mesh()
    if mesh is None:
      raise ValueError("shard_map needs a mesh: pass mesh=Mesh(...), or call inside "
                       "`with jax.set_mesh(mesh):` (or `with mesh:`).")
  if not isinstance(mesh, Mesh):
    raise TypeError(f"shard_map: mesh must be a stagecraft.sharding.Mesh, got "
                    f"{type(mesh).__name__}.")
  check = True if check_rep is None and check_vma is None else bool(
      check_rep if check_rep is not None else check_vma)
  if axis_names:
    manual = frozenset(axis_names if isinstance(axis_names, (set, frozenset, list, tuple))
                       else (axis_names,))
  else:
    manual = frozenset(mesh.axis_names) - frozenset(auto or ())
  for n in manual:
    if n not in mesh.axis_names:
      raise ValueError(f"jax.shard_map requires axis_names={manual} to be a subset of "
                       f"mesh.axis_names={frozenset(mesh.axis_names)}: {n!r} is not an axis "
                       f"of the mesh.")
  return _Mapped(f, mesh, manual, None if in_specs is Infer else in_specs,
                 None if out_specs is _MISSING else out_specs, check, legacy=True).wrapped


def _shard_map(f, *, out_specs, in_specs, mesh, axis_names, check_vma, typed_inputs=True):
  if not callable(f):
    raise TypeError(f"shard_map requires a callable for its first argument, but got {f} of "
                    f"type {type(f)}.")
  state: dict = {}

  @functools.wraps(f)
  @api_boundary
  def wrapped(*args, **kwargs):
    mapped = state.get("mapped")
    if mapped is None or not mapped.fixed:
      mapped = _new_form(f, mesh, axis_names, in_specs, out_specs, check_vma)
      mapped.typed_inputs = typed_inputs
      # NB: as JAX, a mesh taken from the context at the first call is kept (but one taken
      # from an enclosing shard_map is looked up again: `f` may be traced in other bodies).
      state["mapped"] = mapped
    return mapped.wrapped(*args, **kwargs)
  return wrapped


def _new_form(f, mesh, axis_names, in_specs, out_specs, check_vma) -> "_Mapped":
  nested = mesh is None and enclosing_shard_map() is not None
  run_mesh, types_mesh = _resolve_mesh(mesh)
  if not isinstance(axis_names, (set, frozenset)):
    raise TypeError(f"`axis_names` argument of shard_map should be of type `frozenset` or "
                    f"`set`. Got type: {type(axis_names)}")
  axis_names = frozenset(axis_names) or frozenset(types_mesh.axis_names)
  if not axis_names <= frozenset(types_mesh.axis_names):
    raise ValueError(f"jax.shard_map requires axis_names={axis_names} to be a subset of "
                     f"mesh.axis_names={frozenset(types_mesh.axis_names)}")
  types = dict(zip(types_mesh.axis_names, types_mesh.axis_types))
  ordered = [n for n in types_mesh.axis_names if n in axis_names]
  if in_specs is Infer and not all(types[n] == AxisType.Explicit for n in ordered):
    raise TypeError(f"shard_map in_specs argument must be a pytree of "
                    f"`jax.sharding.PartitionSpec` instances, but it was `None` when "
                    f"axis_names={axis_names} are of type "
                    f"{', '.join(str(types[n]) for n in ordered)}")
  if in_specs is not Infer and in_specs is not None:
    _check_specs_jax(in_specs, axis_names, "in_specs", types_mesh, False)
  _check_specs_jax(out_specs, axis_names, "out_specs", types_mesh, False)
  already = frozenset(n for n in ordered if types[n] == AxisType.Manual)
  manual = axis_names - already
  for specs in (in_specs, out_specs):
    if specs is Infer or specs is None:
      continue
    for p in tree_util.tree_leaves(specs, is_leaf=_spec_leaf):
      if isinstance(p, PartitionSpec) and _spec_names(p) & already:
        raise NotImplementedError(
            f"shard_map: the spec {p} names {sorted(map(str, _spec_names(p) & already))}, "
            f"which an enclosing shard_map already maps over; a nested shard_map's specs "
            f"may name only its own manual axes.")
  mapped = _Mapped(f, run_mesh, manual, in_specs, out_specs, check_vma, legacy=False,
                   infer=in_specs is Infer)
  mapped.fixed = not nested
  mapped.mesh_from_context = mesh is None
  return mapped


def _hi_pair(aval, spec) -> bool:
  """Whether an argument or result is hijax-typed or has a HiPspec."""
  return core.is_hi(aval) or isinstance(spec, HiPspec)


def _any_spec_names(spec) -> frozenset:
  """The mesh axes a PartitionSpec, or the PartitionSpecs of a HiPspec, split over."""
  if isinstance(spec, HiPspec):
    return frozenset().union(*map(_spec_names, spec.to_lo()))
  return _spec_names(spec)


def _check_hi_arg(aval, spec) -> None:
  """A hijax-typed argument needs a HiPspec (JAX's error when given a PartitionSpec);
  an array given a HiPspec fails in `core.shard_aval`, as JAX's."""
  if core.is_hi(aval) and not isinstance(spec, HiPspec):
    raise AttributeError(f"'{type(aval).__name__}' object has no attribute 'ndim'")


def _check_hi_out(aval, spec, check_vma: bool) -> None:
  """A hijax-typed result needs a HiPspec, an array result a PartitionSpec (JAX's errors)."""
  if core.is_hi(aval) and not isinstance(spec, HiPspec):
    raise AttributeError(f"'{type(aval).__name__}' object has no attribute "
                         f"'{'mat' if check_vma else 'ndim'}'")
  if not core.is_hi(aval) and isinstance(spec, HiPspec):
    raise AttributeError(f"'{type(spec).__name__}' object has no attribute 'unreduced'")


def run_hi(vals: list, params: dict) -> list:
  """Runs a shard_map equation whose arguments or results are hijax-typed (its specs of
  those `HiPspec`s) on values (hijax ones as their types' value classes: Arrays eagerly,
  tracers while jit lowers it) as a shard_map of their arrays, as JAX's `to_lojax` of
  shard_map: each hijax argument is lowered to its arrays (`lower_val`) split by its spec's
  `to_lo()`, the body runs on its block types' values (`raise_val`) and its hijax results
  are lowered and assembled by their specs' `to_lo()`, and raised with their types'
  `unshard`.

  Args:
    vals: one value per operand of the equation (`params['jaxpr']`'s invars).
    params: the equation's params (`mesh`, `in_specs`, `out_specs`, `jaxpr`, `check_vma`,
      `newly_manual_axes`).
  Returns: one value per result (hijax ones as value classes).
  """
  body, mesh, check = params["jaxpr"], params["mesh"], params["check_vma"]
  in_avals, out_avals = body.in_avals, body.out_avals
  lo_vals, lo_in = [], []
  for v, a, s in zip(vals, in_avals, params["in_specs"]):
    if core.is_hi(a):
      lo_vals.extend(a.lower_val(v))
      lo_in.extend(s.to_lo())
    else:
      lo_vals.append(v)
      lo_in.append(s)
  lo_out = [x for a, s in zip(out_avals, params["out_specs"])
            for x in (s.to_lo() if core.is_hi(a) else (s,))]

  def lowered(*xs):
    it = iter(xs)
    vals_ = [a.raise_val(*[next(it) for _ in a.lo_ty()]) if core.is_hi(a) else next(it)
             for a in in_avals]
    outs = eval_lojax[0](body.jaxpr, vals_, body.consts)
    return tuple(x for a, o in zip(out_avals, outs)
                 for x in (a.lower_val(o) if core.is_hi(a) else (o,)))
  lowered.__name__ = shard_map_name(params)
  mapped = _Mapped(lowered, mesh, params["newly_manual_axes"], tuple(lo_in), tuple(lo_out),
                   check, legacy=False)
  outs = iter(mapped.wrapped(*lo_vals))
  results = []
  for a, s in zip(out_avals, params["out_specs"]):
    if core.is_hi(a):
      t = core.unshard_aval(mesh, check, s, a)
      results.append(t.raise_val(*[next(outs) for _ in t.lo_ty()]))
    else:
      results.append(next(outs))
  return results


def _pvary_to_specs(out_specs, out, leaves, manual, fun_name) -> list:
  """The body's results made to vary along the manual axes their out_specs split (JAX's
  implicit pvary of a check_vma body's results); on a spec error, `leaves` as they are
  (the caller reports it)."""
  try:
    specs = _flat_specs(out_specs, out, "out_specs", fun_name, legacy=True)
  except (ValueError, TypeError):
    return leaves
  res = []
  for x, s in zip(leaves, specs):
    a = x.aval if isinstance(x, core.Tracer) else None
    if isinstance(s, HiPspec) or core.is_hi(a):
      res.append(x)
      continue
    have = a.vma if isinstance(a, ShapedArray) else frozenset()
    missing = (_spec_names(s) & manual) - have
    res.append(parallel.pvary(x, tuple(missing)) if missing else x)
  return res


class _Mapped:
  """A shard_map of `f` over a resolved mesh and manual axes, with its trace cache."""

  def __init__(self, f, mesh: Mesh, manual: frozenset, in_specs, out_specs, check: bool, *,
               legacy: bool, infer: bool = False):
    if not callable(f):
      raise TypeError(f"shard_map expects a callable, got {f!r}.")
    self.f, self.mesh, self.manual = f, mesh, frozenset(manual)
    self.in_specs, self.out_specs, self.check = in_specs, out_specs, bool(check)
    self.legacy, self.infer, self.fixed = legacy, infer, True
    # NB: False for stagecraft's own shard_maps over blocks it made (no sharding types)
    self.typed_inputs = True
    # True: the mesh came from the context (`set_mesh`), and the equation's `mesh` prints
    # as its AbstractMesh, as JAX's (which keeps only the abstract mesh then).
    self.mesh_from_context = False
    self.fun_name = _fun_name(f)
    self.traces: dict = {}
    self.wrapped = self._make_wrapped()

  def _trace(self, in_tree, avals, specs, static):
    """Traces `f` on the blocks of the dynamic arguments (specs[i] None: static)."""
    mesh, manual, fun_name = self.mesh, self.manual, self.fun_name
    dyn_specs = [s for s in specs if s is not None]
    typed = self.check and not self.legacy   # JAX's varying manual axes in types
    local = [None if _hi_pair(a, s) else
             local_aval(a, s, mesh, body_vma(a, s, manual) if typed else None,
                        manual if typed else None)
             for a, s in zip(avals, dyn_specs)]
    if None in local:   # hijax types: their own `shard`, read inside the body's context
      with shard_map_env(mesh, manual, typed):
        local = [core.shard_aval(mesh, manual, self.check, s, a) if l is None else l
                 for a, s, l in zip(avals, dyn_specs, local)]
    store = []

    def flat(*xs):
      it, st = iter(xs), iter(static)
      leaves = [next(st) if s is None else next(it) for s in specs]
      out = self.f(*tree_util.tree_unflatten(in_tree, leaves))
      out_leaves, out_tree = flatten(out)
      check_out_leaves(out_leaves, out_tree, fun_name, "shard_map")
      store[:] = [out_tree]
      if typed:
        out_leaves = _pvary_to_specs(self.out_specs, out, out_leaves, manual, fun_name)
      return out_leaves
    with shard_map_env(mesh, manual, typed):
      jaxpr, consts = pe.trace_to_jaxpr(flat, local)
    closed = ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), [])
    name_shard_map_body(closed, fun_name)
    out_tree = store[0]
    out_shape = tree_util.tree_unflatten(out_tree, [0] * out_tree.num_leaves)
    o_specs = _flat_specs(self.out_specs, out_shape, "out_specs", fun_name, legacy=True)
    out_paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(
        tree_util.tree_unflatten(out_tree, list(range(out_tree.num_leaves))))[0]]
    for s, a, path in zip(o_specs, closed.out_avals, out_paths):
      if _hi_pair(a, s):
        _check_hi_out(a, s, self.check)
        continue
      if self.legacy:
        self._check_names(s, f"out_specs{path}")
      _check_spec(s, a, mesh, f"out_specs{path}", fun_name, split=False)
    if self.check:
      in_vary = [frozenset()] * len(consts) + [_any_spec_names(s) & manual for s in dyn_specs]
      with checking_vma(not self.legacy, mesh.axis_names):
        vary = varying_axes(closed.jaxpr, in_vary)
      fails = [(path, s, v) for s, v, path in zip(o_specs, vary, out_paths)
               if isinstance(s, PartitionSpec)
               and any(n in v and n not in _spec_names(s) for n in manual)]
      if fails and self.legacy:
        self._legacy_rep_error(*fails[0])
      if fails:
        # NB: JAX 0.10.2 reports the first such output only, at its spec's key path in
        # out_specs (`out_specs[1]`; nothing for a spec that covers every output).
        first = next(i for i, (s, v) in enumerate(zip(o_specs, vary))
                     if isinstance(s, PartitionSpec)
                     and any(n in v and n not in _spec_names(s) for n in manual))
        spec_path = _spec_paths(self.out_specs, out_shape)[first]
        raise ValueError(_vma_error(fun_name, mesh, [(spec_path, *fails[0][1:])],
                                    legacy=False))
    cacheable = not any(isinstance(c, core.Tracer) for c in consts)
    return closed, consts, out_tree, tuple(o_specs), cacheable

  def _runs_eagerly(self, dyn) -> bool:  # noqa: E301
    """JAX 0.10's eager shard_map: called outside any transformation, over every mesh
    axis, the body runs operation by operation on each device's values (see
    `_eager_shard_map`)."""
    return (type(core.current_trace()) is core.EvalTrace
            and self.manual == frozenset(self.mesh.axis_names)
            and enclosing_shard_map() is None
            and not any(isinstance(x, core.Tracer) for x in dyn))

  def _check_names(self, spec: PartitionSpec, where: str):
    """The legacy form's checks of the axes a spec names."""
    mesh = self.mesh
    for n in _spec_names(spec):
      if n not in mesh.axis_names:
        raise ValueError(f"shard_map: {where} has spec {spec}, which names the axis {n!r} "
                         f"that the mesh does not have; its axes are {mesh.axis_names}.")
      if n not in self.manual:
        raise ValueError(f"shard_map: {where} has spec {spec}, which names the automatic "
                         f"axis {n!r}; specs may name only the manual axes "
                         f"{tuple(a for a in mesh.axis_names if a in self.manual)}.")

  def _legacy_rep_error(self, path: str, s: PartitionSpec, v: frozenset):
    mesh = self.mesh
    bad = [n for n in mesh.axis_names if n in self.manual and n in v and
           n not in _spec_names(s)]
    raise ValueError(
        f"shard_map applied to the function '{self.fun_name}' was given out_specs which "
        f"require replication which can't be statically inferred given the mesh:\n\n"
        f"The mesh given has shape {tuple(mesh.devices.shape)} with corresponding axis "
        f"names {mesh.axis_names}.\n\nout_specs{path} is {s} which implies "
        f"that the corresponding output value is replicated across mesh axis "
        f"{bad[0]!r}, but it may vary along {', '.join(map(repr, bad))}.\n\nCheck if "
        f"these output values are meant to be replicated over those mesh axes (reduce "
        f"them first, e.g. lax.psum). If not, revise the corresponding out_specs "
        f"entries. If so, disable the check by passing check_rep=False to shard_map.")

  def _make_wrapped(self):
    fun_name, mesh = self.fun_name, self.mesh

    @api_boundary
    def wrapped(*args, **kwargs):
      if kwargs:
        raise TypeError(f"shard_map applied to the function '{fun_name}' was called with "
                        f"keyword arguments {sorted(kwargs)}; pass them positionally.")
      leaves, in_tree = flatten(args)
      explicit = all(t == AxisType.Explicit for t in mesh.axis_types)
      if self.infer:
        specs = [_inferred_spec(x, mesh, self.manual) for x in leaves]
      else:
        specs = _flat_specs(self.in_specs, args, "in_specs", fun_name, legacy=self.legacy)
      paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(args)[0]]
      avals, dyn, static, hi = [], [], [], False
      for x, s, path in zip(leaves, specs, paths):
        if s is None:
          static.append(x)
          continue
        try:
          aval = core.get_aval(x)
        except TypeError:
          raise TypeError(f"shard_map: the argument at args{path} of {fun_name} is not an "
                          f"array (got {type(x).__name__}).") from None
        if _hi_pair(aval, s):
          _check_hi_arg(aval, s)
          hi = True
        else:
          if self.legacy:
            self._check_names(s, f"the argument at args{path}")
          _check_spec(s, aval, mesh, f"the argument at args{path}", fun_name, split=True)
          if explicit and self.typed_inputs and not self.legacy and not self.infer:
            _check_explicit_input(s, aval)
        avals.append(aval)
        dyn.append(x)
      hi = hi or any(isinstance(s, HiPspec) for s in
                     tree_util.tree_leaves(self.out_specs, is_leaf=_spec_leaf))
      # NB: unreduced/reduced arguments run compiled: the eager trace neither types the
      # operations on them nor reads each device's own partial sum.
      if not hi and self._runs_eagerly(dyn) and not any(
          s is not None and (s.unreduced or s.reduced) for s in specs):
        return _eager_shard_map(self, in_tree, specs, leaves)
      key = (in_tree, tuple(specs), *avals)
      try:
        key = (*key, *static) if static else key
        hash(key)
      except TypeError:
        key = None
      entry = self.traces.get(key) if key is not None else None
      if entry is None:
        entry = self._trace(in_tree, avals, specs, static)
        if entry[4] and key is not None:
          self.traces[key] = entry
      closed, consts, out_tree, o_specs, _ = entry
      dyn_specs = tuple(s for s in specs if s is not None)
      # NB: JAX's params in JAX's order; the function's name (for stagecraft's messages and
      # module names) is kept beside the body (`spmd.shard_map_name`), as JAX keeps it in
      # the body's debug info.
      params = dict(
          mesh=mesh, in_specs=(PartitionSpec(),) * len(consts) + dyn_specs, out_specs=o_specs,
          jaxpr=closed, check_vma=self.check, newly_manual_axes=self.manual,
          **({"mesh_from_context": True} if self.mesh_from_context else {}))
      hi = hi or any(core.is_hi(a) for a in closed.out_avals)
      if hi and type(core.current_trace()) is core.EvalTrace and not any(
          isinstance(x, core.Tracer) for x in (*consts, *dyn)):
        outs = run_hi([*consts, *dyn], params)   # eagerly: a shard_map of the arrays
      else:   # staged: a hijax-typed equation, lowered by jit (`experimental.hijax`)
        outs = shard_map_p.bind(*consts, *dyn, **params)
      return tree_util.tree_unflatten(out_tree, outs)

    if self.legacy:
      wrapped.__name__ = f"shard_map_{fun_name}"
      wrapped.__doc__ = getattr(self.f, "__doc__", None)
    return wrapped


def _axes_to_pspec(axis_name: Any, axis: int | None) -> PartitionSpec:
  return PartitionSpec() if axis is None else PartitionSpec(*[None] * axis, axis_name)


def smap(f: Callable | None = None, /, *, in_axes: Any = Infer, out_axes: Any,
         axis_name: Any) -> Callable:
  """A shard_map over one axis of the mesh in context (JAX 0.10.2's `jax.smap`): `f` is
  manual over `axis_name` only and sees, of each argument, the block along its `in_axes`
  axis (the other mesh axes stay automatic).

  Args:
    f: the function of one device's blocks; left out, `smap` returns a decorator.
    in_axes: an int, None (replicated), or a tuple of those per positional argument (nested
      containers as leaves allow); `Infer` (the default) infers the specs from the
      arguments' shardings (Explicit mesh axes).
    out_axes: an int, None, or a container of those: where the mapped axis appears in each
      output.
    axis_name: the mesh axis (a hashable name, not a sequence).

  Returns:
    `shard_map(f, mesh=None, in_specs=..., out_specs=..., axis_names={axis_name})`, the
    specs built as `P(None, ..., None, axis_name)` with `axis_name` at the given axis.

  Raises:
    TypeError: for a sequence `axis_name`, or axes that are not ints/None (JAX's words);
      when called, ValueError if no mesh is set (`stagecraft.set_mesh(mesh)`).
  """
  if f is None:
    return functools.partial(smap, in_axes=in_axes, out_axes=out_axes, axis_name=axis_name)
  if isinstance(axis_name, (list, tuple)):
    raise TypeError(f"smap axis_name should be a `str` or a `Hashable`, but got {axis_name}")
  if in_axes is not None and in_axes is not Infer and not isinstance(in_axes, (int, tuple)):
    raise TypeError("smap in_axes must be an int, None, jax.sharding.Infer, or a tuple of "
                    "entries corresponding to the positional arguments passed to the "
                    f"function, but got {in_axes}.")
  leaf = lambda x: x is None  # noqa: E731
  if in_axes is not Infer and not all(
      isinstance(a, int) for a in optree.tree_leaves(in_axes, none_is_leaf=True) if a is not None):
    raise TypeError("smap in_axes must be an int, None, jax.sharding.Infer, or (nested) "
                    f"container with those types as leaves, but got {in_axes}.")
  if not all(isinstance(a, int)
             for a in optree.tree_leaves(out_axes, none_is_leaf=True) if a is not None):
    raise TypeError("smap out_axes must be an int, None, or (nested) container with those "
                    f"types as leaves, but got {out_axes}.")
  to_spec = functools.partial(_axes_to_pspec, axis_name)
  in_specs = (Infer if in_axes is Infer else
              optree.tree_map(to_spec, in_axes, is_leaf=leaf, none_is_leaf=True))
  out_specs = optree.tree_map(to_spec, out_axes, is_leaf=leaf, none_is_leaf=True)
  return shard_map(f, mesh=None, in_specs=in_specs, out_specs=out_specs,
                   axis_names={axis_name}, check_vma=True)


# ---------------------------------------------------------------------------
# Eager shard_map (JAX 0.10's `ShardMapTrace`): outside `jit`, the body runs operation by
# operation with each value held for every device, so that Python code in the body sees
# per-device values (`print(x)` shows each device's block; a value the same on every
# device converts to a Python value). A value is an Array whose leading axes are the
# mesh's (in `mesh.axis_names` order) followed by the block's; each primitive runs vmapped
# over those axes with the mesh axis names bound (so collectives act across devices).


class ShardMapTrace(core.Trace):
  """Runs each primitive on every device's values of one eager shard_map."""
  __slots__ = ("parent", "mesh", "names", "sizes", "check", "strict", "outer_abstract")

  def __init__(self, mesh: Mesh, check: bool, strict: bool):
    super().__init__()
    self.parent = core.current_trace()
    self.mesh, self.check, self.strict = mesh, check, strict
    self.outer_abstract = sharding_lib.get_abstract_mesh_or_none()
    self.names = tuple(mesh.axis_names)
    self.sizes = tuple(mesh.shape[n] for n in self.names)

  def lift(self, block, vary: frozenset) -> "ShardMapTracer":
    return ShardMapTracer(self, block, vary)

  def process_primitive(self, prim, args, params):
    vals, mapped, vary = [], [], []
    for x in args:
      if isinstance(x, ShardMapTracer) and x._trace is self:
        vals.append(x.val)
        mapped.append(True)
        vary.append(x.vary)
      else:
        if isinstance(x, core.Tracer) and not x._trace._valid:
          raise core.escaped_tracer_error(x)
        vals.append(x)
        mapped.append(False)
        vary.append(frozenset())
    # NB: each device's values are untyped (the types are the tracers' `vary`).
    with core.set_current_trace(self.parent), core.checking_vma_types(False):
      if _runs_compiled(prim, params):
        with outside_shard_map(self.outer_abstract):
          outs = _compiled_per_device(self.mesh, prim, params, vals, mapped)
      else:
        outs = self._per_device(0, prim, params, vals, mapped)
    n_out = len(outs)
    if self.check:
      with checking_vma(self.strict, self.names):
        out_vary = eqn_varying_axes(_Eqn(prim, params), vary, n_out)
    else:
      out_vary = [frozenset(self.names)] * n_out
    tracers = [ShardMapTracer(self, o, v) for o, v in zip(outs, out_vary)]
    return tracers if prim.multiple_results else tracers[0]

  def _per_device(self, level: int, prim, params, vals, mapped) -> list:
    """`prim` applied to each device's operands: vmapped over the mesh axes from `level`
    on, named by them (results have every mesh axis in front)."""
    if level == len(self.names):
      out = prim.bind(*vals, **params)
      return list(out) if prim.multiple_results else [out]
    size = self.sizes[level]

    def inner(*xs):
      return self._per_device(level + 1, prim, params, list(xs), mapped)
    outs, dims = batching.batch_flat(
        inner, vals, [0 if m else batching.not_mapped for m in mapped],
        batching.AxisData(self.names[level], size))
    return [batching.matchaxis(o, d, 0, size) for o, d in zip(outs, dims)]


class _Eqn:
  """The primitive and params of one eager operation, for the varying-axes rules."""
  __slots__ = ("primitive", "params")

  def __init__(self, primitive, params):
    self.primitive, self.params = primitive, params


def _with_manual_states(aval, spec, mesh, manual):
  """`aval` typed with the unreduced/reduced manual axes of `spec` (`f32[]{U:i}`)."""
  manual = frozenset(manual)
  u, r = spec.unreduced & manual, spec.reduced & manual
  if not u and not r:
    return aval
  body_mesh = mesh.abstract_mesh.update_axis_types({n: AxisType.Manual for n in manual})
  return aval.update(sharding=NamedSharding(body_mesh, PartitionSpec(
      *(None,) * len(aval.shape), unreduced=u, reduced=r)))


class ShardMapTracer(core.Tracer):
  """One value of an eager shard_map body: `val` holds each device's block (the mesh's axes
  in front); `vary` the mesh axes along which blocks may differ."""
  __slots__ = ("val", "vary", "spec")

  def __init__(self, trace: ShardMapTrace, val, vary: frozenset, spec=None):
    self._trace = trace
    self.val = val
    self.vary = frozenset(vary)
    # NB: an argument's in_spec, for its unreduced/reduced manual axes (its type shows them)
    self.spec = spec

  @property
  def aval(self) -> ShapedArray:
    a = core.get_aval(self.val)
    trace = self._trace
    # NB: typed with its varying manual axes under check_vma, as JAX's (`{V:i}`).
    vma = self.vary if trace.check and trace.strict else None
    out = a.update(shape=a.shape[len(trace.names):], vma=vma)
    if self.spec is not None and vma is not None:
      out = _with_manual_states(out, self.spec, trace.mesh, trace.names)
    return out

  def to_concrete_value(self):
    """The value, where every device holds the same one (JAX's: with check_vma, a value
    varying along no axis converts to a Python value)."""
    if self._trace.check and not self.vary:
      with core.set_current_trace(self._trace.parent):
        return core.to_concrete_value(self.val[(0,) * len(self._trace.names)])
    return None

  def _blocks(self):
    trace = self._trace
    host = np.asarray(self.val)
    for idx, device in np.ndenumerate(trace.mesh.devices):
      yield idx, device, host[idx]

  def __str__(self) -> str:   # JAX's: each device's block
    names = f"({', '.join(map(str, self._trace.names))},)"
    return "\n".join(f"On {device} at mesh coordinates {names} = {idx}:\n{block}\n"
                      for idx, device, block in self._blocks())

  __repr__ = __str__

  def _short_repr(self) -> str:
    return str(self)


def _host_copy(x):
  """`x` copied through the host to an Array on the default device (typed keys: their data
  copied, the keys over it)."""
  aval = getattr(x, "aval", None)
  if type(x) is Array and not isinstance(aval.dtype, np.dtype):
    data = _asarray(np.asarray(x._physical()))
    return Array(data._buf, aval.update(sharding=None), data._device)
  return _asarray(np.asarray(x))


def _blocks_of(x, spec: PartitionSpec, mesh: Mesh):
  """The global array `x` split by `spec`: an Array of shape (*mesh.shape, *block), the
  block of device `idx` at `[idx]` (a mesh axis `spec` does not name: the same block)."""
  names = tuple(mesh.axis_names)
  # NB: through the host: the per-device values carry no layout (nor a sharding in their
  # type), whatever the argument's (a read of an Array laid out over several devices
  # imports the real jax, as such host reads do: see runtime/client.py).
  x = _host_copy(x) if not isinstance(x, core.Tracer) else x
  shape = core.get_aval(x).shape
  entries = tuple(spec) + (None,) * (len(shape) - len(spec))
  split, axes_of = [], {}
  for d, e in enumerate(entries):
    axes = () if e is None else (e if isinstance(e, tuple) else (e,))
    block = shape[d] // math.prod(mesh.shape[a] for a in axes) if axes else shape[d]
    for a in axes:
      axes_of[a] = len(split)
      split.append(mesh.shape[a])
    split.append(block)
  y = lax.reshape(x, tuple(split))
  block_dims = [i for i in range(len(split)) if i not in axes_of.values()]
  y = lax.transpose(y, tuple(axes_of[a] for a in names if a in axes_of) + tuple(block_dims))
  # the mesh axes the spec does not name: broadcast (every device holds the same block)
  out_shape = tuple(mesh.shape[a] for a in names) + tuple(split[i] for i in block_dims)
  named = [i for i, a in enumerate(names) if a in axes_of]
  keep = tuple(named) + tuple(range(len(names), len(out_shape)))
  return lax.broadcast_in_dim(y, out_shape, keep)


def _unreduced_result(val, spec: PartitionSpec, mesh: Mesh):
  """An eager result whose out_spec is unreduced along some axes: each device keeps its
  own block (its partial sum), split along the spec's other axes."""
  names = tuple(mesh.axis_names)
  blocks = np.asarray(val)
  block_shape = blocks.shape[len(names):]
  s = NamedSharding(mesh, spec)
  shape = tuple(d * math.prod(mesh.shape[n] for n in spec._names(i))
                for i, d in enumerate(block_shape))
  pieces = [blocks[pos] for pos in np.ndindex(*mesh.devices.shape)]
  return spmd.from_device_blocks(pieces, shape, s)


def _global_of(val, spec: PartitionSpec, mesh: Mesh):
  """Inverse of `_blocks_of`: the blocks assembled by `spec` (the first device's block
  along the mesh axes `spec` does not name)."""
  names = tuple(mesh.axis_names)
  shape = core.get_aval(val).shape
  block = shape[len(names):]
  entries = tuple(spec) + (None,) * (len(block) - len(spec))
  unnamed = [i for i, a in enumerate(names)
             if not any(a == e or (isinstance(e, tuple) and a in e) for e in entries)]
  if unnamed:
    starts = [0] * len(shape)
    limits = [1 if i in unnamed else n for i, n in enumerate(shape)]
    val = lax.reshape(lax.slice(val, starts, limits),
                      tuple(n for i, n in enumerate(shape) if i not in unnamed))
  left = [a for i, a in enumerate(names) if i not in unnamed]
  perm, out_shape = [], []
  for d, e in enumerate(entries):
    axes = () if e is None else (e if isinstance(e, tuple) else (e,))
    perm.extend(left.index(a) for a in axes)
    perm.append(len(left) + d)
    out_shape.append(block[d] * math.prod(mesh.shape[a] for a in axes))
  return lax.reshape(lax.transpose(val, tuple(perm)), tuple(out_shape))


def _eager_shard_map(mapped: "_Mapped", in_tree, specs, leaves):
  """Runs `mapped.f` on each device's blocks of the arguments, operation by operation (JAX
  0.10's eager shard_map), and assembles the results by the out_specs.

  Raises:
    ValueError: with check_vma, an output whose out_spec leaves out a mesh axis it varies
      along (JAX's message).
  """
  mesh, fun_name = mapped.mesh, mapped.fun_name
  trace = ShardMapTrace(mesh, mapped.check, not mapped.legacy)
  args = []
  for x, s in zip(leaves, specs):
    if s is None:
      args.append(x)
    else:
      args.append(ShardMapTracer(trace, _blocks_of(x, s, mesh), _spec_names(s),
                                 s if (s.unreduced or s.reduced) else None))
  try:
    with core.set_current_trace(trace), shard_map_env(mesh, mapped.manual,
                                                      mapped.check and not mapped.legacy):
      out = mapped.f(*tree_util.tree_unflatten(in_tree, args))
    out_leaves, out_tree = flatten(out)
    check_out_leaves(out_leaves, out_tree, fun_name, "shard_map")
    paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(out)[0]]
    o_specs = _flat_specs(mapped.out_specs, out, "out_specs", fun_name, legacy=True)
    results = []
    for x, s, path in zip(out_leaves, o_specs, paths):
      if not (isinstance(x, ShardMapTracer) and x._trace is trace):
        x = trace.lift(_blocks_of(x, PartitionSpec(), mesh), frozenset())
      if mapped.legacy:
        mapped._check_names(s, f"out_specs{path}")
      _check_spec(s, x.aval, mesh, f"out_specs{path}", fun_name, split=False)
      if mapped.check and any(n in x.vary and n not in _spec_names(s) for n in mapped.manual):
        if mapped.legacy:
          mapped._legacy_rep_error(path, s, x.vary)
        # NB: JAX 0.10.2's eager shard_map names no key path (its jit does), and names
        # not the user's function but `_rem_singleton`: it checks the outputs in a
        # shard_map of its own (`_match`) over that helper, which the message names.
        raise ValueError(_vma_error("_rem_singleton", mesh, [("", s, x.vary)],
                                    legacy=False))
      results.append((x.val, s))
  finally:
    trace.invalidate()
  outs = [_unreduced_result(v, s, mesh) if s.unreduced else
          spmd.device_put(_global_of(v, s, mesh), NamedSharding(mesh, s)) for v, s in results]
  return tree_util.tree_unflatten(out_tree, outs)



def _runs_compiled(prim, params) -> bool:
  """Whether an eager operation runs as its own compiled shard_map rather than vmapped over
  the mesh axes: a collective over several mesh axes at once (`all_gather(x, ('i', 'j'))`;
  vmap's rules take one named axis each), host callbacks (each device calls the host with
  its own values, as JAX's), and primitives without a batching rule."""
  if prim.name in ("pure_callback", "io_callback", "ffi_call"):
    return True
  if prim not in batching.primitive_batchers and prim not in batching.fancy_primitive_batchers:
    return True
  names = params.get("axis_name")
  return (prim in (parallel.all_gather_p, parallel.ppermute_p, parallel.reduce_scatter_p,
                   parallel.all_to_all_p)
          and isinstance(names, (tuple, list)) and len(names) > 1)


def _compiled_per_device(mesh: Mesh, prim, params, vals, mapped) -> list:
  """`prim` on each device's operands as one compiled shard_map (JAX's way for every eager
  primitive): each value's leading mesh axes are split over the mesh."""
  try:
    key = (mesh, prim, tuple(sorted(params.items())), tuple(mapped))
    fn = _compiled_cache.get(key)
  except TypeError:   # an unhashable param
    key = fn = None
  if fn is None:
    fn = _compiled_applier(mesh, prim, params, vals, mapped)
    if key is not None:
      if len(_compiled_cache) >= _MAX_COMPILED:   # bounded: a long eager session
        _compiled_cache.clear()
      _compiled_cache[key] = fn
  # NB: the results come back laid out over the mesh; the eager trace keeps its values on
  # the default device, in no mesh's type.
  return [_host_copy(o) for o in fn(*vals)]


#: The compiled appliers of `_compiled_per_device`, per mesh, primitive, params and which
#: operands are per device (their jit caches the executables per operand types); at most
#: `_MAX_COMPILED`, emptied by `clear_caches()`.
_compiled_cache: dict = {}
_MAX_COMPILED = 256
dispatch.register_cache_clearer(_compiled_cache.clear)


def _compiled_applier(mesh: Mesh, prim, params, vals, mapped):
  names = tuple(mesh.axis_names)
  k = len(names)

  def body(*blocks):
    xs = [lax.reshape(b, core.get_aval(b).shape[k:]) if m else b
          for b, m in zip(blocks, mapped)]
    out = prim.bind(*xs, **params)
    outs = list(out) if prim.multiple_results else [out]
    return tuple(lax.broadcast_in_dim(o, (1,) * k + core.get_aval(o).shape,
                                      tuple(range(k, k + core.get_aval(o).ndim)))
                 for o in outs)

  spec = PartitionSpec(*names)
  in_specs = tuple(spec if m else PartitionSpec() for m in mapped)
  n_out = len(prim.abstract_eval(*[
      core.get_aval(v).update(shape=core.get_aval(v).shape[k:]) if m else core.get_aval(v)
      for v, m in zip(vals, mapped)], **params)) if prim.multiple_results else 1
  return pjit.jit(_shard_map(body, out_specs=(spec,) * n_out, in_specs=in_specs, mesh=mesh,
                            axis_names=frozenset(names), check_vma=False,
                            typed_inputs=False))


