"""shard_map: a function written per device, mapped over the blocks of a device mesh.

`shard_map(f, mesh, in_specs, out_specs)(*args)` splits each argument into blocks by its
PartitionSpec (dimension i split over the mesh axes named at i), runs `f` once per device on
that device's blocks, with collectives (`lax.psum(x, "data")`, `lax.all_gather(y, "model")`,
`lax.axis_index`, ...) over the mesh axis names, and assembles the results from the blocks
by `out_specs`. Semantics follow JAX's `shard_map` (top level in JAX 0.10, formerly under
its experimental namespace): a mesh axis an out_spec does not mention means the result is the
same on every device along that axis (checked when `check_rep`), and one copy is kept.

Axes can be manual (the default: all of them) or automatic (`auto=` / `axis_names=`): over
automatic axes the body sees whole values and XLA's partitioner handles them.

The primitive `shard_map` carries the per-device closed jaxpr and the mesh, specs and
manual axes (stagecraft/lax/spmd.py); its rules are pmap's (interpreters/mapping.py's MapRules)
generalized to several axes:
psum transposes to psum, so the cotangent of a result replicated over manual axes is divided
by their size before the transposed body, and the cotangent of an operand replicated over
manual axes is psum'med over them. Residuals of partial evaluation are per-device values:
each gets a leading axis split over all manual axes. Lowering emits an
`sdy.manual_computation` (as JAX does) inside the program over the mesh
(runtime/spmd.py). This module holds the user-facing function.
"""
from __future__ import annotations

from typing import Any, Callable

import optree

from stagecraft.traceback_util import api_boundary
from stagecraft import core, tree_util
from stagecraft.api_util import check_out_leaves, flatten, fun_name as _fun_name
from stagecraft.core import ClosedJaxpr, ShapedArray
from stagecraft.interpreters import partial_eval as pe
from stagecraft.interpreters.mapping import varying_axes
from stagecraft.lax.spmd import local_aval, shard_map_env, shard_map_p, split_size
from stagecraft.runtime.array import Array
from stagecraft.sharding import Mesh, PartitionSpec, current_mesh

__all__ = ["shard_map"]


# ---------------------------------------------------------------------------
# The user-facing shard_map


def _spec_leaf(x) -> bool:
  return x is None or isinstance(x, PartitionSpec)


def _flat_specs(prefix, tree, what: str, fun_name: str) -> list[PartitionSpec]:
  try:
    specs = tree_util.broadcast_prefix(prefix, tree, is_leaf=_spec_leaf)
  except ValueError:
    raise ValueError(f"shard_map applied to the function '{fun_name}' was given {what} "
                     f"{prefix!r}, which is not a tree prefix of the "
                     f"{'arguments tuple' if what == 'in_specs' else 'output'}; give one "
                     f"PartitionSpec per argument (or a prefix of their structure).") from None
  for s in specs:
    if s is not None and not isinstance(s, PartitionSpec):
      raise TypeError(f"shard_map {what} entries must be PartitionSpecs (or None), got "
                      f"{s!r}.")
  return [PartitionSpec() if s is None else s for s in specs]


def _check_spec(spec: PartitionSpec, aval: ShapedArray, mesh: Mesh, manual, where: str,
                fun_name: str, *, split: bool):
  if len(spec) > len(aval.shape):
    raise ValueError(f"shard_map applied to the function '{fun_name}' was given {where} "
                     f"with spec {spec}, which has {len(spec)} entries, for a value of rank "
                     f"{len(aval.shape)} ({aval.str_short()}); give at most one entry per "
                     f"dimension.")
  seen = []
  for i in range(len(spec)):
    for n in spec._names(i):
      if n not in mesh.axis_names:
        raise ValueError(f"shard_map: {where} has spec {spec}, which names the axis {n!r} "
                         f"that the mesh does not have; its axes are {mesh.axis_names}.")
      if n not in manual:
        raise ValueError(f"shard_map: {where} has spec {spec}, which names the automatic "
                         f"axis {n!r}; specs may name only the manual axes {tuple(manual)}.")
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


def shard_map(f: Callable, mesh: Mesh | None = None, in_specs: Any = None,
              out_specs: Any = None, check_rep: bool = True, auto: Any = frozenset(), *,
              axis_names: Any = None, check_vma: bool | None = None) -> Callable:
  """Maps `f`, written for one device's blocks, over the devices of `mesh`.

  Args:
    f: a function of arrays (pytrees) returning arrays (pytrees), called with each device's
      blocks; collectives over the mesh axis names communicate between devices.
    mesh: the device Mesh (default: the mesh entered with `with mesh:`).
    in_specs: a PartitionSpec per positional argument (or a pytree prefix of the arguments
      tuple): dimension i of the argument is split over the mesh axes the spec names at i
      (it must divide); None or P() gives every device the whole argument.
    out_specs: the same for the outputs: how the blocks assemble into the global result. A
      manual mesh axis the spec does not name means the result is the same along that axis.
    check_rep: check that results are the same along the axes their out_specs leave out
      (psum/pmax/pmin/all_gather make values the same along an axis); raises otherwise.
      (`check_vma` is accepted as JAX's newer name.)
    auto: mesh axes left automatic (the body sees whole values along them and XLA's
      partitioner handles them); the others are manual. `axis_names` (JAX's newer form)
      names the manual axes instead.

  Returns:
    The mapped function; its results are Arrays laid out over the mesh by `out_specs`
    (global shapes: each block dimension times the size of the axes it is split over).

  Raises:
    ValueError: a spec naming an axis the mesh lacks (or an automatic one, or one twice),
      more entries than the value's rank, a dimension not divisible by its axes, specs
      that are not a tree prefix, an output that may vary along an axis its out_spec leaves
      out (with check_rep), or no mesh.
    TypeError: non-callable `f`, or a spec that is not a PartitionSpec.
    NameError: a collective over an axis the mesh does not bind manually.
  """
  if not callable(f):
    raise TypeError(f"shard_map expects a callable, got {f!r}.")
  if mesh is None:
    mesh = current_mesh()
    if mesh is None:
      raise ValueError("shard_map needs a mesh: pass mesh=Mesh(...), or call inside "
                       "`with mesh:`.")
  if not isinstance(mesh, Mesh):
    raise TypeError(f"shard_map: mesh must be a stagecraft.sharding.Mesh, got "
                    f"{type(mesh).__name__}.")
  if check_vma is not None:
    check_rep = check_vma
  if axis_names is not None:
    manual = frozenset(axis_names if isinstance(axis_names, (set, frozenset, list, tuple))
                       else (axis_names,))
  else:
    manual = frozenset(mesh.axis_names) - frozenset(auto)
  for n in manual:
    if n not in mesh.axis_names:
      raise ValueError(f"shard_map: axis {n!r} is not an axis of the mesh {mesh.axis_names}.")
  fun_name = _fun_name(f)
  manual_t = tuple(n for n in mesh.axis_names if n in manual)
  traces: dict = {}

  def trace(in_tree, avals, specs):
    local = [local_aval(a, s, mesh) for a, s in zip(avals, specs)]
    store = []

    def flat(*xs):
      out = f(*optree.tree_unflatten(in_tree, xs))
      leaves, out_tree = flatten(out)
      check_out_leaves(leaves, out_tree, fun_name, "shard_map")
      store[:] = [out_tree]
      return leaves
    with shard_map_env(mesh, manual):
      jaxpr, consts = pe.trace_to_jaxpr(flat, local)
    closed = ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), [])
    out_tree = store[0]
    o_specs = _flat_specs(out_specs, optree.tree_unflatten(out_tree, [0] * out_tree.num_leaves),
                          "out_specs", fun_name)
    out_paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(
        optree.tree_unflatten(out_tree, list(range(out_tree.num_leaves))))[0]]
    for s, a, path in zip(o_specs, closed.out_avals, out_paths):
      _check_spec(s, a, mesh, manual, f"out_specs{path}", fun_name, split=False)
    if check_rep:
      in_vary = [frozenset()] * len(consts) + [
          frozenset(n for i in range(len(s)) for n in s._names(i)) for s in specs]
      vary = varying_axes(closed.jaxpr, in_vary)
      for k, (s, v) in enumerate(zip(o_specs, vary)):
        used = {n for i in range(len(s)) for n in s._names(i)}
        bad = [n for n in manual_t if n in v and n not in used]
        if bad:
          raise ValueError(
              f"shard_map applied to the function '{fun_name}' was given out_specs which "
              f"require replication which can't be statically inferred given the mesh:\n\n"
              f"The mesh given has shape {tuple(mesh.devices.shape)} with corresponding axis "
              f"names {mesh.axis_names}.\n\nout_specs{out_paths[k]} is {s} which implies "
              f"that the corresponding output value is replicated across mesh axis "
              f"{bad[0]!r}, but it may vary along {', '.join(map(repr, bad))}.\n\nCheck if "
              f"these output values are meant to be replicated over those mesh axes (reduce "
              f"them first, e.g. lax.psum). If not, revise the corresponding out_specs "
              f"entries. If so, disable the check by passing check_rep=False to shard_map.")
    cacheable = not any(isinstance(c, core.Tracer) for c in consts)
    return closed, consts, out_tree, tuple(o_specs), cacheable

  @api_boundary
  def wrapped(*args, **kwargs):
    if kwargs:
      raise TypeError(f"shard_map applied to the function '{fun_name}' was called with "
                      f"keyword arguments {sorted(kwargs)}; pass them positionally.")
    leaves, in_tree = flatten(args)
    specs = _flat_specs(in_specs, args, "in_specs", fun_name)
    paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(args)[0]]
    avals = []
    for x, s, path in zip(leaves, specs, paths):
      try:
        aval = x.aval if type(x) is Array else core.get_aval(x)
      except TypeError:
        raise TypeError(f"shard_map: the argument at args{path} of {fun_name} is not an "
                        f"array (got {type(x).__name__}).") from None
      _check_spec(s, aval, mesh, manual, f"the argument at args{path}", fun_name, split=True)
      avals.append(aval)
    key = (in_tree, tuple(specs), *avals)
    entry = traces.get(key)
    if entry is None:
      entry = trace(in_tree, avals, specs)
      if entry[4]:
        traces[key] = entry
    closed, consts, out_tree, o_specs, _ = entry
    outs = shard_map_p.bind(
        *consts, *leaves, jaxpr=closed, mesh=mesh,
        in_specs=(PartitionSpec(),) * len(consts) + tuple(specs), out_specs=o_specs,
        manual_axes=manual, check_rep=bool(check_rep), name=fun_name)
    return optree.tree_unflatten(out_tree, outs)

  wrapped.__name__ = f"shard_map_{fun_name}"
  wrapped.__doc__ = getattr(f, "__doc__", None)
  return wrapped

