"""Programs over a device mesh: sharded jit, `with_sharding_constraint`, sharded Arrays.

A jit whose inputs are laid out over a `Mesh` (by `in_shardings`, or because its arguments
are Arrays already split over the mesh), whose outputs are (`out_shardings`), or whose body
holds a `with_sharding_constraint` or a `shard_map`, becomes one SPMD program: the module
declares `sdy.mesh @mesh = <["data"=2, "model"=2]>`, its arguments and results carry the
`sdy.sharding` attributes given, and XLA's Shardy partitioner splits the computation over
`mesh.size` partitions (device i of the program is `mesh.devices.flat[i]`). Inputs and
outputs left unspecified are chosen by the partitioner and read back from the compiled
executable, as JAX's `lower_sharding_computation` / `MeshExecutable` do.

Device-assignment rules (JAX's `_get_and_check_device_assignment`): every explicit sharding,
every committed argument (an Array split over a mesh or placed on a non-default device) and
every mesh used inside the program must name the same devices in the same order, else
`DeviceAssignmentMismatchError` names the two that disagree. A committed argument whose
sharding differs from an explicit in_sharding is an error too: data moves between layouts
only through `device_put(x, sharding)`, never silently. Uncommitted values (NumPy arrays,
scalars, Arrays on the default device) are placed as the program wants.
"""
from __future__ import annotations

import itertools
import math
import weakref
from typing import Any, Callable, Sequence

import numpy as np
from jaxlib import xla_client as xc

from stagecraft import core
from stagecraft.core import ClosedJaxpr, Jaxpr, JaxprEqn, ShapedArray, Var
from stagecraft.errors import DeviceAssignmentMismatchError
from stagecraft.interpreters import ad, batching, lowering, pxla
from stagecraft.runtime import client, dispatch
from stagecraft.runtime.array import Array
from stagecraft.sharding import (Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding,
                                 _mesh_stack)

__all__ = ["sharding_constraint_p", "with_sharding_constraint", "jaxpr_meshes",
           "lower_sharded_module", "compile_sharded", "device_put_sharded",
           "make_array_from_callback", "make_array_from_single_device_arrays",
           "make_array_from_process_local_data"]


# ---------------------------------------------------------------------------
# Shardings given by users


def to_named(s: Any, what: str) -> NamedSharding | None:
  """`s` as a NamedSharding (a bare PartitionSpec inside `with mesh:`), or None.

  Raises:
    TypeError: for anything else; ValueError: a PartitionSpec with no mesh entered.
  """
  if s is None or isinstance(s, NamedSharding):
    return s
  if isinstance(s, PartitionSpec):
    if not _mesh_stack:
      raise ValueError(f"{what}: a bare PartitionSpec {s} needs a mesh: use "
                       f"NamedSharding(mesh, spec), or call inside `with mesh:`.")
    return NamedSharding(_mesh_stack[-1], s)
  if isinstance(s, SingleDeviceSharding):
    mesh = Mesh(np.array([s.device], dtype=object), ("_single",))
    return NamedSharding(mesh, PartitionSpec())
  device = "a device from stagecraft.devices(), " if what == "device_put" else ""
  raise TypeError(f"{what}: expected {device}a NamedSharding, a PartitionSpec (inside `with "
                  f"mesh:`) or None, got {s!r} of type {type(s).__name__}.")


def _is_sharding_leaf(x) -> bool:
  return x is None or isinstance(x, (NamedSharding, SingleDeviceSharding, PartitionSpec))


def flatten_shardings(prefix, tree, what: str, keep_single: bool = False) -> list:
  """One sharding (or None) per leaf of `tree`, from a pytree prefix of it whose leaves are
  shardings, PartitionSpecs or None (NamedShardings; SingleDeviceShardings kept as they are
  when `keep_single`, else over a one-device mesh).

  Raises:
    ValueError: when `prefix` is not a tree prefix of `tree`.
  """
  import optree
  from stagecraft import tree_util
  from stagecraft.api import _flatten
  p_leaves, p_def = optree.tree_flatten(prefix, is_leaf=_is_sharding_leaf, none_is_leaf=True,
                                        namespace=tree_util.NAMESPACE)
  try:
    subtrees = p_def.flatten_up_to(tree)
  except ValueError:
    raise ValueError(f"{what} must be a tree prefix of the value it describes, got "
                     f"{prefix!r} for the tree {_flatten(tree)[1]}.") from None
  out = []
  for s, sub in zip(p_leaves, subtrees):
    s = s if keep_single and isinstance(s, SingleDeviceSharding) else to_named(s, what)
    out.extend([s] * len(_flatten(sub)[0]))
  return out


def _da_desc(da: Sequence[Any]) -> str:
  return (f"device ids {[d.id for d in da]} on platform "
          f"{da[0].platform.upper() if da else '?'}")


def check_device_assignment(sources: Sequence[tuple[tuple, str]], api_name: str = "jit"
                            ) -> tuple:
  """The one device assignment all `sources` (device tuple, description) share.

  Raises:
    DeviceAssignmentMismatchError: naming the first two that differ.
  """
  first = None
  for da, desc in sources:
    if first is None:
      first = (da, desc)
    elif tuple(da) != tuple(first[0]):
      raise DeviceAssignmentMismatchError(
          f"Received incompatible devices for {api_name}ted computation. Got {first[1]} with "
          f"{_da_desc(first[0])} and {desc} with {_da_desc(da)}. Move the inputs onto one "
          f"set of devices first with stagecraft.device_put(x, sharding); data never moves "
          f"between devices on its own.")
  return first[0] if first else ()


def on_mesh(s: NamedSharding, mesh: Mesh) -> NamedSharding:
  """`s` expressed over `mesh` (same devices): axes renamed by position; a replicated
  sharding fits any mesh of the same devices.

  Raises:
    ValueError: when `s` splits over a mesh of another shape.
  """
  if s.mesh == mesh:
    return s
  if s.mesh._flat_devices == mesh._flat_devices:
    if s.is_fully_replicated:
      return NamedSharding(mesh, PartitionSpec())
    if s.mesh.devices.shape == mesh.devices.shape:
      rename = dict(zip(s.mesh.axis_names, mesh.axis_names))
      spec = [None if not s.spec._names(i) else tuple(rename[n] for n in s.spec._names(i))
              for i in range(len(s.spec))]
      return NamedSharding(mesh, PartitionSpec(*spec))
  raise ValueError(f"One program can use one device mesh, but it meets {s.mesh!r} and "
                   f"{mesh!r} (same devices, different shapes). Use one Mesh for every "
                   f"sharding of the program, or device_put the inputs onto it.")


# ---------------------------------------------------------------------------
# with_sharding_constraint

sharding_constraint_p = core.Primitive("sharding_constraint")


def _sc_abstract_eval(aval, *, sharding):
  return aval


sharding_constraint_p.def_abstract_eval(_sc_abstract_eval)


def _sc_impl(x, *, sharding):
  # NB: eagerly, the constraint is the layout asked for: an explicit device_put.
  return device_put_sharded(x, sharding)


sharding_constraint_p.def_impl(_sc_impl)


def _sc_jvp(primals, tangents, *, sharding):
  (x,), (t,) = primals, tangents
  out = sharding_constraint_p.bind(x, sharding=sharding)
  if type(t) is ad.Zero:
    return out, t
  return out, sharding_constraint_p.bind(t, sharding=sharding)


def _sc_transpose(ct, x, *, sharding):
  if type(ct) is ad.Zero:
    return [None]
  return [sharding_constraint_p.bind(ct, sharding=sharding)]


def _sc_batch(args, dims, *, sharding):
  (x,), (d,) = args, dims
  spec = list(sharding.spec) + [None] * (x.ndim - 1 - len(sharding.spec))
  spec.insert(d, None)
  return sharding_constraint_p.bind(x, sharding=NamedSharding(sharding.mesh,
                                                              PartitionSpec(*spec))), d


def _sc_lowering(ctx, x, *, sharding):
  module = ctx.module
  mesh = module.sdy_mesh
  if mesh is None or module.manual_depth is not None:
    return [x]   # no mesh (xla_computation, a pmap program) or inside shard_map: nothing
  s = on_mesh(sharding, mesh)
  aval = ctx.avals_in[0]
  r = ctx.fb.fresh()
  ctx.fb.emit(f"{r} = sdy.sharding_constraint {x} {s._sdy(len(aval.shape))} : "
              f"{lowering.ir_type(aval)}")
  return [r]


ad.primitive_jvps[sharding_constraint_p] = _sc_jvp
ad.primitive_transposes[sharding_constraint_p] = _sc_transpose
batching.primitive_batchers[sharding_constraint_p] = _sc_batch
lowering.register_lowering(sharding_constraint_p, _sc_lowering)


def with_sharding_constraint(x: Any, shardings: Any) -> Any:
  """Asks that the value(s) `x` be laid out by `shardings` at this point of a program (the
  partitioner reshards around it as needed), as JAX's `lax.with_sharding_constraint`.
  Outside jit it is `device_put(x, shardings)`.

  Args:
    x: an array or a pytree of arrays.
    shardings: a NamedSharding (or a PartitionSpec inside `with mesh:`) or a pytree prefix
      of `x` of them.

  Returns:
    `x`, unchanged in value; in StableHLO each leaf passes through `sdy.sharding_constraint`.

  Raises:
    ValueError: a spec naming a dimension the value does not have, a dimension not
      divisible by its mesh axes, or a tree mismatch.
    TypeError: for something that is not a sharding.
  """
  from stagecraft import tree_util
  from stagecraft.api import _flatten
  import optree
  leaves, treedef = _flatten(x)
  shs = flatten_shardings(shardings, x, "with_sharding_constraint shardings")
  paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(x)[0]]
  outs = []
  for leaf, s, path in zip(leaves, shs, paths):
    if s is None:
      outs.append(leaf)
      continue
    aval = core.get_aval(leaf)
    _check_spec_fits(s, aval, f"with_sharding_constraint at {path or 'the value'}")
    outs.append(sharding_constraint_p.bind(leaf, sharding=s))
  return optree.tree_unflatten(treedef, outs)


def _check_spec_fits(s: NamedSharding, aval: ShapedArray, where: str):
  if len(s.spec) > len(aval.shape):
    raise ValueError(f"{where}: the spec {s.spec} has {len(s.spec)} entries but the value "
                     f"{aval.str_short()} has rank {len(aval.shape)}; give at most one entry "
                     f"per dimension.")
  try:
    s.shard_shape(aval.shape)   # raises for a dimension its axes do not divide
  except ValueError as e:
    raise ValueError(f"{where}: {e}") from None


# ---------------------------------------------------------------------------
# The mesh a program uses


def jaxpr_meshes(jaxpr: Jaxpr) -> list[tuple[Mesh, str]]:
  """The meshes used inside `jaxpr` (with_sharding_constraint, shard_map), each with a
  description for error messages, in order of appearance (nested jaxprs included)."""
  found: list = []
  _collect(jaxpr, found)
  return found


def _collect(jaxpr: Jaxpr, found: list):
  for eqn in jaxpr.eqns:
    if eqn.primitive is sharding_constraint_p:
      found.append((eqn.params["sharding"].mesh, "with_sharding_constraint inside jit"))
    elif "mesh" in eqn.params and isinstance(eqn.params["mesh"], Mesh):
      found.append((eqn.params["mesh"], f"{eqn.primitive.name} inside jit"))
    for sub in pxla._subjaxprs(eqn):
      _collect(sub, found)


# ---------------------------------------------------------------------------
# Lowering and compiling a program over a mesh


def lower_sharded_module(name: str, jaxpr: Jaxpr, mesh: Mesh,
                         in_shardings: Sequence[NamedSharding | None],
                         out_shardings: Sequence[NamedSharding | None], *,
                         donated: Sequence[bool] | None = None,
                         result_names: Sequence[str] | None = None) -> str:
  """The StableHLO module of `jaxpr` (main takes constvars then invars) over `mesh`: one
  `sdy.sharding` attribute per argument/result given a sharding (None: left to the
  partitioner)."""
  module = lowering.ModuleContext(
      name, axis_env=[(pxla._Unbound(k), s) for k, s in enumerate(mesh.devices.shape)],
      num_partitions=mesh.size)
  module.mesh = [(str(n), int(s)) for n, s in mesh.shape.items()]
  module.sdy_mesh = mesh
  avals_in = [v.aval for v in (*jaxpr.constvars, *jaxpr.invars)]
  arg_attrs = [None if s is None else
               f"sdy.sharding = #sdy.sharding{on_mesh(s, mesh)._sdy(len(a.shape))}"
               for s, a in zip(in_shardings, avals_in)]
  res_attrs = [None if s is None else
               f"sdy.sharding = #sdy.sharding{on_mesh(s, mesh)._sdy(len(v.aval.shape))}"
               for s, v in zip(out_shardings, jaxpr.outvars)]
  return lowering.lower_jaxpr_to_module(name, jaxpr, donated=donated, arg_attrs=arg_attrs,
                                        result_attrs=res_attrs, module=module)


def _spec_candidates(mesh: Mesh, ndim: int):
  """Every PartitionSpec of rank `ndim` over `mesh` (each axis used at most once)."""
  names = list(mesh.axis_names)
  # Each mesh axis goes to a dimension or nowhere; within a dimension any order.
  for assign in itertools.product(range(ndim + 1), repeat=len(names)):
    per_dim = [[n for n, a in zip(names, assign) if a == d] for d in range(ndim)]
    for orders in itertools.product(*[itertools.permutations(p) for p in per_dim]):
      entries = [None if not o else (o[0] if len(o) == 1 else tuple(o)) for o in orders]
      while entries and entries[-1] is None:   # NB: P("a"), as people write it
        entries.pop()
      yield PartitionSpec(*entries)


def named_from_hlo(hlo_sharding, mesh: Mesh, ndim: int) -> NamedSharding | None:
  """The NamedSharding over `mesh` equal to XLA's `hlo_sharding` for a rank-`ndim` value,
  or None if none is."""
  if hlo_sharding.is_replicated():
    return NamedSharding(mesh, PartitionSpec())
  for spec in _spec_candidates(mesh, ndim):
    s = NamedSharding(mesh, spec)
    if s._runtime._to_xla_hlo_sharding(ndim) == hlo_sharding:
      return s
  return None


def compile_sharded(name: str, jaxpr: Jaxpr, mesh: Mesh,
                    in_shardings: Sequence[NamedSharding | None],
                    out_shardings: Sequence[NamedSharding | None], *,
                    donated: Sequence[bool] | None = None, text: str | None = None,
                    exe=None) -> pxla.SpmdExecutable:
  """Lowers (unless `text` is given) and compiles `jaxpr` over `mesh`; shardings left None
  are read back from the executable (what the partitioner chose).

  Returns:
    An SpmdExecutable taking main's arguments (constvars then invars) and giving Arrays
    laid out over the mesh (replicated results stay on every device)."""
  in_shardings, out_shardings = list(in_shardings), list(out_shardings)
  devices = list(mesh.devices.flat)
  avals_in = [v.aval for v in (*jaxpr.constvars, *jaxpr.invars)]
  avals_out = [v.aval for v in jaxpr.outvars]
  for _ in range(2):
    if text is None:
      text = lower_sharded_module(name, jaxpr, mesh, in_shardings, out_shardings,
                                  donated=donated)
    if exe is None:
      exe = dispatch.compile_module(text, devices, num_partitions=len(devices))
    final_in = _read_back(in_shardings, avals_in, exe.get_parameter_shardings, mesh)
    final_out = _read_back(out_shardings, avals_out, exe.get_output_shardings, mesh)
    if None not in final_in and None not in final_out:
      break
    # A layout the mesh cannot name: ask for it replicated and compile again.
    in_shardings = [NamedSharding(mesh, PartitionSpec()) if f is None else f
                    for f in final_in]
    out_shardings = [NamedSharding(mesh, PartitionSpec()) if f is None else f
                     for f in final_out]
    text = exe = None
  donated_idx = [i for i, d in enumerate(donated or ()) if d]
  return pxla.SpmdExecutable(exe, devices, avals_in, avals_out,
                             [on_mesh(s, mesh) for s in final_in],
                             [on_mesh(s, mesh) for s in final_out], text, donated_idx,
                             keep_replicated=True)


def _read_back(given, avals, get, mesh):
  if all(s is not None for s in given):
    return list(given)
  hlos = get()
  if hlos is None:   # NB: a one-partition executable reports no shardings: all replicated
    return [s if s is not None else NamedSharding(mesh, PartitionSpec()) for s in given]
  out = []
  for s, a, h in zip(given, avals, hlos):
    out.append(s if s is not None else
               named_from_hlo(xc.HloSharding.from_proto(h), mesh, len(a.shape)))
  return out


# ---------------------------------------------------------------------------
# Resolving a jit call's layout


def resolve(jaxpr: Jaxpr, nconst: int, committed: Sequence[Any],
            explicit_in: Sequence[NamedSharding | None] | None,
            explicit_out: Sequence[NamedSharding | None] | None,
            describe_arg: Callable[[int], str]) -> tuple[Mesh, list, list] | None:
  """The mesh and the in/out shardings (None: for the partitioner) of a jit signature, or
  None when nothing asks for a mesh (an ordinary one-device program).

  Args:
    jaxpr: the traced jaxpr (consts as its first `nconst` invars).
    committed: per dynamic leaf, its committed sharding (NamedSharding /
      SingleDeviceSharding) or None.
    explicit_in / explicit_out: jit's in_shardings / out_shardings per leaf (or None).
    describe_arg: leaf index -> "argument x of f with shape f32[8]".

  Raises:
    DeviceAssignmentMismatchError: devices disagree (see the module docstring).
    ValueError: a committed argument laid out otherwise than its explicit in_sharding; a
      sharding whose spec is longer than its value's rank or does not divide its shape.
  """
  n_in = len(jaxpr.invars) - nconst
  explicit_in = list(explicit_in) if explicit_in is not None else [None] * n_in
  explicit_out = list(explicit_out) if explicit_out is not None else [None] * len(
      jaxpr.outvars)
  inner = jaxpr_meshes(jaxpr)
  sources = []
  for i, s in enumerate(explicit_in):
    if s is not None:
      sources.append((s._device_assignment, "explicit input sharding"))
  for i, c in enumerate(committed):
    if c is not None:
      sources.append((c._device_assignment, describe_arg(i)))
  for s in explicit_out:
    if s is not None:
      sources.append((s._device_assignment, "explicit output sharding"))
  for m, desc in inner:
    sources.append((m._flat_devices, desc))
  has_mesh = (any(isinstance(c, NamedSharding) for c in committed) or
              any(s is not None for s in (*explicit_in, *explicit_out)) or bool(inner))
  if not has_mesh:
    return None
  check_device_assignment(sources)
  in_avals = [v.aval for v in jaxpr.invars[nconst:]]
  for i, (s, c) in enumerate(zip(explicit_in, committed)):
    for sh, what in ((s, "jit in_shardings"), (c, "the sharding")):
      if isinstance(sh, NamedSharding):
        _check_spec_fits(sh, in_avals[i], f"{what} of {describe_arg(i)}")
  for k, (s, v) in enumerate(zip(explicit_out, jaxpr.outvars)):
    if s is not None:
      _check_spec_fits(s, v.aval, f"jit out_shardings of output {k} with shape "
                                  f"{v.aval.str_short()}")
  mesh = None
  for s in (*explicit_in, *committed, *explicit_out):
    if isinstance(s, NamedSharding):
      mesh = s.mesh
      break
  if mesh is None:
    mesh = inner[0][0]
  errors = []
  ins = []
  for i, (s, c) in enumerate(zip(explicit_in, committed)):
    if isinstance(c, SingleDeviceSharding):
      c = NamedSharding(mesh, PartitionSpec()) if mesh.size == 1 else c
    if s is not None and c is not None and not (
        isinstance(c, NamedSharding) and on_mesh(c, mesh) == on_mesh(s, mesh)):
      errors.append(f"Got Array sharding: {c} and input sharding: {s} for "
                    f"{describe_arg(i)}")
    ins.append(on_mesh(s, mesh) if s is not None else
               on_mesh(c, mesh) if isinstance(c, NamedSharding) else None)
  if errors:
    shown = errors[:5]
    raise ValueError("Array(s) sharding does not match the input(s) sharding. Here are "
                     f"{'the ' + str(len(errors)) if len(errors) <= 5 else '5 out of ' + str(len(errors))} "
                     "mismatches:\n" + "\n".join(shown) +
                     "\nMove the argument with stagecraft.device_put(x, sharding) first, or "
                     "pass in_shardings matching it.")
  outs = [None if s is None else on_mesh(s, mesh) for s in explicit_out]
  return mesh, [None] * nconst + ins, outs


# ---------------------------------------------------------------------------
# Arrays laid out over a mesh


def device_put_sharded(x: Any, sharding: NamedSharding) -> Array:
  """One leaf laid out by `sharding` (split on the host, one piece per device; no copy if
  it already is).

  Raises:
    ValueError: a dimension not divisible by its mesh axes, or a spec longer than the rank.
  """
  aval = x.aval if type(x) is Array or isinstance(x, core.Tracer) else core.get_aval(x)
  _check_spec_fits(sharding, aval, "device_put")
  if isinstance(x, core.Tracer):
    return sharding_constraint_p.bind(x, sharding=sharding)
  s = pxla.intern_sharding(sharding)
  if type(x) is Array and x._sharding is not None and x._sharding == s:
    return x
  buf = pxla.shard_arg(x, aval, s)
  dispatch.placement_used[0] = True
  return Array(buf, aval, None, s)


def make_array_from_callback(shape: Sequence[int], sharding: NamedSharding,
                             data_callback: Callable[[tuple], Any], dtype=None) -> Array:
  """A global Array of `shape` laid out by `sharding` whose pieces come from
  `data_callback(index)` (`index`: a tuple of slices into the global array), called once
  per addressable device.

  Raises:
    ValueError: a piece of the wrong shape, or shape not divisible by the mesh axes.
  """
  from stagecraft import dtypes
  shape = tuple(int(d) for d in shape)
  sharding = pxla.intern_sharding(to_named(sharding, "make_array_from_callback"))
  m = sharding.devices_indices_map(shape)
  me = client.process_index()
  devs = [d for d in sharding.mesh.devices.flat if d.process_index == me]
  pieces = []
  for d in devs:
    p = np.asarray(data_callback(m[d]))
    want = tuple(len(range(*s.indices(n))) for s, n in zip(m[d], shape))
    if p.shape != want:
      raise ValueError(f"make_array_from_callback: the callback gave a piece of shape "
                       f"{p.shape} for index {m[d]} on {d}; expected {want}.")
    pieces.append(p)
  dt = dtypes.canonicalize_dtype(dtype if dtype is not None else pieces[0].dtype)
  aval = ShapedArray(shape, dt)
  bufs = [xc.batched_device_put(aval.update(shape=p.shape), client.single_device_sharding(d),
                                [p.astype(dt, copy=False)], [d], True, False, enable_x64=True)
          for d, p in zip(devs, pieces)]
  dispatch.placement_used[0] = True
  return Array(xc.ArrayImpl(aval, sharding._runtime, bufs, True, True), aval, None, sharding)


def make_array_from_single_device_arrays(shape: Sequence[int], sharding: NamedSharding,
                                         arrays: Sequence[Array]) -> Array:
  """A global Array from one Array per addressable device of `sharding` (in the order of
  `sharding.mesh.devices.flat`), each holding that device's piece.

  Raises:
    ValueError: a wrong number of pieces or a piece of the wrong shape.
  """
  shape = tuple(int(d) for d in shape)
  sharding = pxla.intern_sharding(to_named(sharding, "make_array_from_single_device_arrays"))
  m = sharding.devices_indices_map(shape)
  me = client.process_index()
  devs = [d for d in sharding.mesh.devices.flat if d.process_index == me]
  if len(arrays) != len(devs):
    raise ValueError(f"make_array_from_single_device_arrays: {len(arrays)} arrays given for "
                     f"{len(devs)} addressable devices of {sharding}.")
  return make_array_from_callback(
      shape, sharding, lambda idx: np.asarray(arrays[[m[d] for d in devs].index(idx)]),
      dtype=np.asarray(arrays[0]).dtype if arrays else None)


def make_array_from_process_local_data(sharding: NamedSharding, local_data: Any,
                                       global_shape: Sequence[int] | None = None) -> Array:
  """A global Array laid out by `sharding` over the devices of every process, from this
  process's part `local_data`: per dimension, the distinct blocks its devices hold, in global
  order and concatenated when they are not contiguous (all of a replicated dimension).

  Args:
    sharding: a NamedSharding whose mesh may span processes.
    local_data: a NumPy array (or Array) with this process's block.
    global_shape: the global shape (default: the local shape with each split dimension
      grown by the number of processes along it).

  Raises:
    ValueError: when the local block does not match the sharding.
  """
  sharding = pxla.intern_sharding(to_named(sharding, "make_array_from_process_local_data"))
  v = np.asarray(local_data)
  if global_shape is None:
    global_shape = _grow(sharding, v.shape)
  global_shape = tuple(int(d) for d in global_shape)
  from stagecraft import dtypes
  aval = ShapedArray(global_shape, dtypes.canonicalize_dtype(v.dtype))
  if client.process_count() == 1 or not pxla._spans_processes(sharding):
    if v.shape != global_shape:
      raise ValueError(f"make_array_from_process_local_data: one process holds all of "
                       f"{sharding}, so the local data must have the global shape "
                       f"{global_shape}, got {v.shape}.")
    return device_put_sharded(v.astype(aval.dtype, copy=False), sharding)
  try:
    buf = pxla._shard_local(v.astype(aval.dtype, copy=False), aval, sharding,
                            client.process_index())
  except ValueError as e:
    raise ValueError(f"make_array_from_process_local_data: {e}") from None
  dispatch.placement_used[0] = True
  return Array(buf, aval, None, sharding)


def _grow(sharding: NamedSharding, local_shape) -> tuple:
  """The global shape whose block held by this process's devices has `local_shape`."""
  me = client.process_index()
  mesh = sharding.mesh
  out = []
  for i, d in enumerate(local_shape):
    names = sharding.spec._names(i)
    if not names:
      out.append(d)
      continue
    total = math.prod(mesh.shape[n] for n in names)
    # positions along these axes held by this process
    local_pos = set()
    for pos in np.ndindex(*mesh.devices.shape):
      if mesh.devices[pos].process_index == me:
        coord = dict(zip(mesh.axis_names, pos))
        k = 0
        for n in names:
          k = k * mesh.shape[n] + coord[n]
        local_pos.add(k)
    if not local_pos:
      raise ValueError(f"make_array_from_process_local_data: no device of process {me} is in "
                       f"the mesh of {sharding}; this process holds no block of it.")
    out.append(d * total // len(local_pos))
  return tuple(out)


# ---------------------------------------------------------------------------
# Eager operations on Arrays laid out over a mesh

_MAX_CACHE = 4096
_eager_cache: dict = {}
_closed_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _describe_leaf(name: str, avals):
  return lambda i: f"argument {i} of {name} with shape {avals[i].str_short()}"


def apply_primitive(prim: core.Primitive, args: Sequence[Any], params: dict,
                    placement: Sequence[Any]) -> Any:
  """`prim` run eagerly on arguments some of which are split over a mesh: one SPMD program
  over that mesh (arguments keep their layout; results as the partitioner lays them out),
  cached per (primitive, params, avals, layouts)."""
  avals = [a.aval if type(a) is Array else core.get_aval(a) for a in args]
  try:
    key = (prim, tuple(placement), *avals, *params.items())
    ex = _eager_cache.get(key)
  except TypeError:   # unhashable params
    key, ex = None, None
  if ex is None:
    out = prim.abstract_eval(*avals, **params)
    out_avals = list(out) if prim.multiple_results else [out]
    invars = [Var(a) for a in avals]
    outvars = [Var(a) for a in out_avals]
    jaxpr = Jaxpr([], invars, outvars, [JaxprEqn(invars, outvars, prim, params)])
    mesh, ins, outs = resolve(jaxpr, 0, placement, None, None,
                              _describe_leaf(prim.name, avals))
    ex = compile_sharded(prim.name, jaxpr, mesh, ins, outs)
    if key is not None:
      if len(_eager_cache) >= _MAX_CACHE:
        _eager_cache.clear()
      _eager_cache[key] = ex
  outs = ex.call(args)
  return outs if prim.multiple_results else outs[0]


def call_closed(closed: ClosedJaxpr, name: str, args: Sequence[Any],
                placement: Sequence[Any]) -> list:
  """A jit equation's closed jaxpr run eagerly on arguments split over a mesh."""
  table = _closed_cache.setdefault(closed, {})
  ex = table.get(tuple(placement))
  if ex is None:
    avals = closed.in_avals
    r = resolve(closed.jaxpr, 0, placement, None, None, _describe_leaf(name, avals))
    mesh, ins, outs = r
    ex = table[tuple(placement)] = compile_sharded(f"jit_{name}", closed.jaxpr, mesh, ins,
                                                   outs)
  return ex.call(args)


def call_closed_executable(closed: ClosedJaxpr, name: str) -> pxla.SpmdExecutable:
  """The program of a jit equation whose body uses a mesh (shard_map, constraints) and whose
  arguments are not laid out over one: shardings left to the partitioner."""
  n = len(closed.in_avals)
  mesh, ins, outs = resolve(closed.jaxpr, 0, [None] * n, None, None,
                            _describe_leaf(name, closed.in_avals))
  return compile_sharded(f"jit_{name}", closed.jaxpr, mesh, ins, outs)
