"""The SPMD runtime: programs over several devices (pmap, jit of pmap, jit over a device
mesh, shard_map, eager ops on mesh Arrays), multi-device arguments and results, and the
device-assignment and layout rules for programs over a `Mesh`.

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
a `ValueError` (JAX's) names the two that disagree. A committed argument whose
sharding differs from an explicit in_sharding is an error too: data moves between layouts
only through `device_put(x, sharding)`, never silently. Uncommitted values (NumPy arrays,
scalars, Arrays on the default device) are placed as the program wants.

Collective-launch hazard (DESIGN.md): on a CPU host with fewer cores than devices, launching
a program with collectives while an earlier one is still running can hang inside XLA and
abort the process. `SpmdExecutable.call` waits for the previous collective program's
results before launching the next one (nothing to wait for when a program has no
collectives).
"""
from __future__ import annotations

import functools
import itertools
import math
import re
import threading
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import optree
from jaxlib import xla_client as xc

from stagecraft import core, dtypes, tree_util
from stagecraft.core import ClosedJaxpr, Jaxpr, JaxprEqn, ShapedArray, Var
from stagecraft.interpreters import lowering, mapping
from stagecraft.runtime import client, dispatch
from stagecraft.layout import Format, Layout
from stagecraft.runtime import array as array_mod
from stagecraft.runtime.array import Array
from stagecraft.sharding import (AxisType, IndivisibleError, Mesh, NamedSharding,
                                 PartitionSpec, Sharding, SingleDeviceSharding, concrete_mesh,
                                 get_abstract_mesh, to_named, type_sharding)

__all__ = ["shard_arg", "intern_sharding", "SpmdExecutable", "replicated_program",
           "replicated_executable", "chain_devices", "flatten_shardings",
           "check_device_assignment", "on_mesh", "jaxpr_meshes", "lower_sharded_module",
           "named_from_hlo", "compile_sharded", "resolve", "typed_context_mesh",
           "traced_device_put", "jaxpr_device", "loose_operands", "loosen",
           "ArrayCopySemantics", "bind_device_put", "device_put_impl",
           "check_spec_fits", "device_put_sharded", "make_array_from_callback",
           "make_array_from_single_device_arrays", "make_array_from_process_local_data",
           "apply_primitive", "call_closed", "call_closed_executable", "device_put",
           "typed_aval", "from_type"]

# ---------------------------------------------------------------------------
# Executables

_COLLECTIVE_HLO = re.compile(r"\b(all-reduce|all-gather|collective-permute|all-to-all|"
                             r"reduce-scatter|collective-broadcast)(-start)?\(")
_launch_lock = threading.Lock()
_last_collective: list = [None]   # one result buffer per device of the last collective launch


def _await_previous_collective():
  prev = _last_collective[0]
  if prev is not None:
    for b in prev:
      b.block_until_ready()
    _last_collective[0] = None


@functools.lru_cache(maxsize=256)
def _piece_indices(sharding: NamedSharding, shape: tuple) -> list:
  m = sharding.devices_indices_map(shape)
  return [m[d] for d in sharding.mesh.devices.flat]


def shard_arg(x: Any, aval: ShapedArray, sharding: NamedSharding) -> Any:
  """The runtime's multi-device array holding `x` laid out by `sharding` (no copy when `x`
  already is)."""
  if type(x) is Array:
    if x._sharding is not None and (x._sharding is sharding or x._sharding == sharding):
      return x._check_buf()
    if not isinstance(aval.dtype, np.dtype):   # typed keys: their data, laid out the same
      x, aval = x._physical(), core.physical_aval(aval)
    v = x._value
  elif isinstance(x, core.Tracer):
    raise core.escaped_tracer_error(x)
  else:
    v = np.asarray(x, dtype=aval.dtype)
  if v.dtype != aval.dtype:
    v = v.astype(aval.dtype)
  devs = list(sharding.mesh.devices.flat)
  if _spans_processes(sharding):
    # NB: `v` is either the global value (jit: as in JAX, a host value passed for a sharding
    # that spans processes is the whole array) or this process's block of it (pmap: its
    # local devices' rows). The two coincide when the process holds every block.
    return _shard_local(v, aval, sharding, client.process_index(),
                        local=tuple(v.shape) != tuple(aval.shape))
  if sharding.spec.unreduced:
    src = x._sharding if type(x) is Array else None
    pieces = _unreduced_pieces(v, aval.shape, src, sharding)
    # NB: one buffer per device (a replicated-looking layout would copy the first piece)
    bufs = [xc.batched_device_put(aval.update(shape=p.shape), client.single_device_sharding(d),
                                  [p], [d], True, False, enable_x64=True)
            for p, d in zip(pieces, devs)]
    return xc.ArrayImpl(aval, sharding._runtime, bufs, True, True)
  elif sharding.is_fully_replicated:
    pieces = [v] * len(devs)
  else:
    pieces = [v[idx] for idx in _piece_indices(sharding, aval.shape)]
  return xc.batched_device_put(aval, sharding._runtime, pieces, devs, True, False,
                               enable_x64=True)


def _unreduced_pieces(v: np.ndarray, shape: tuple, src: Any, dst: NamedSharding) -> list:
  """Each device's piece of `v` laid out by `dst`, which is unreduced along some mesh axes:
  the pieces of a group of devices differing only along those axes sum to the value. A
  device keeps the elements it held in `src` (the source layout, on the same mesh) along the
  unreduced axes that split a dimension there, and zeros elsewhere; along an unreduced axis
  the source did not split, the first device of the axis keeps the value (JAX's
  placement)."""
  mesh = dst.mesh
  names = mesh.axis_names
  sizes = dict(zip(names, mesh.devices.shape))
  same_mesh = (isinstance(src, NamedSharding) and isinstance(src.mesh, Mesh)
               and src.mesh.axis_names == names and src.mesh.devices.shape == mesh.devices.shape)
  src_names = ([src.spec._names(k) for k in range(len(shape))] if same_mesh
               else [()] * len(shape))
  used = {n for ns in src_names for n in ns}
  unred = dst.spec.unreduced
  pieces = []
  for pos, idx in zip(np.ndindex(*mesh.devices.shape), _piece_indices(dst, shape)):
    coord = dict(zip(names, pos))
    piece = np.array(v[idx])
    if any(coord[u] != 0 for u in unred if u not in used):
      piece[...] = 0
      pieces.append(piece)
      continue
    for k, ns in enumerate(src_names):
      if not any(n in unred for n in ns):
        continue
      start, stop, _ = idx[k].indices(shape[k])
      block = shape[k] // math.prod(sizes[n] for n in ns)
      keep = np.ones(stop - start, bool)
      for i in range(start, stop):
        b = i // block
        for n in reversed(ns):   # NB: the first name is the major digit
          if n in unred and b % sizes[n] != coord[n]:
            keep[i - start] = False
          b //= sizes[n]
      sel = [slice(None)] * piece.ndim
      sel[k] = ~keep
      piece[tuple(sel)] = 0
    pieces.append(piece)
  return pieces


@functools.lru_cache(maxsize=256)
def _spans_processes(sharding: NamedSharding) -> bool:
  """Whether some of `sharding`'s devices belong to other processes (checked once)."""
  me = client.process_index()
  return any(d.process_index != me for d in sharding.mesh.devices.flat)


def _local_blocks(sharding: NamedSharding, shape: tuple, me: int) -> list:
  """Per dimension of an array of `shape`: {(start, stop) of a block held by a device of
  process `me`: its offset in the process's local data}, the local data being the process's
  distinct blocks in global order, concatenated (they need not be contiguous globally)."""
  m = sharding.devices_indices_map(shape)
  local = [m[d] for d in sharding.mesh.devices.flat if d.process_index == me]
  out = []
  for k, n in enumerate(shape):
    spans = sorted({local_idx[k].indices(n)[:2] for local_idx in local})
    offsets, o = {}, 0
    for a, b in spans:
      offsets[(a, b)] = o
      o += b - a
    out.append(offsets)
  return out


def _shard_local(v: np.ndarray, aval: ShapedArray, sharding: NamedSharding, me: int, *,
                 local: bool = True):
  """A distributed run: each device of process `me` gets its piece of the global value.

  `local=True`: `v` is this process's part of the global value: per dimension, the distinct
  blocks its devices hold, in global order, concatenated (all of a replicated dimension).
  `local=False`: `v` is the whole global value.

  Raises:
    ValueError: when `v` does not have the shape this expects.
  """
  m = sharding.devices_indices_map(aval.shape)
  devs = [d for d in sharding.mesh.devices.flat if d.process_index == me]
  if local:
    blocks = _local_blocks(sharding, aval.shape, me)
    want = tuple(sum(b - a for a, b in offs) for offs in blocks)
  else:
    want = tuple(aval.shape)
  if tuple(v.shape) != want:
    what = ("this process's block of the global value" if local else "the global value")
    raise ValueError(f"{what.capitalize()} laid out by {sharding} with global shape "
                     f"{tuple(aval.shape)} must have shape {want}, got {tuple(v.shape)}.")
  bufs = []
  for d in devs:
    index = m[d]
    if local:
      sl = []
      for k, (s, n) in enumerate(zip(index, aval.shape)):
        a, b = s.indices(n)[:2]
        o = blocks[k][(a, b)]
        sl.append(slice(o, o + b - a))
      index = tuple(sl)
    piece = np.ascontiguousarray(v[index])
    bufs.append(xc.batched_device_put(aval.update(shape=piece.shape),
                                      client.single_device_sharding(d), [piece], [d], True,
                                      False, enable_x64=True))
  return xc.ArrayImpl(aval, sharding._runtime, bufs, True, True)


_interned: dict = {}


_type_shardings: dict = {}


def typed_aval(aval: ShapedArray, s: Any) -> ShapedArray:
  """`aval` with the sharding in its type of a value laid out by `s` (JAX's sharding in
  types: the dimensions split over Explicit mesh axes; none for other layouts)."""
  try:
    # NB: NamedShardings of equal layouts compare equal whatever their axes are called or
    # typed; the type names the axes, so the key does too.
    key = (s, tuple(s.spec), s.mesh.axis_names, s.mesh.axis_types, len(aval.shape))
    ts = _type_shardings[key]
  except KeyError:
    ts = _type_shardings[key] = type_sharding(s, len(aval.shape))
  except (TypeError, AttributeError):   # NB: not a NamedSharding
    ts = None
  if ts is aval._sharding:
    return aval
  return aval.update(sharding=ts)


def intern_sharding(sh: NamedSharding) -> NamedSharding:
  """One NamedSharding object per layout, so a result fed back into the program that made
  it is recognised by identity."""
  # NB: keyed on the spec as written too, so P("a") and P("a", None) keep their own repr.
  # (device_put/set_mesh: keyed on the mesh's axis types too, so an Array put on a mesh of
  # Explicit axes does not report an equal layout interned earlier over Auto axes.)
  return _interned.setdefault((sh, tuple(sh.spec), sh.mesh.axis_names, sh.mesh.axis_types),
                              sh)


class SpmdExecutable:
  """A program over several devices: global values in (each laid out by its sharding, split
  by the runtime), global values out (`Array`s split over the devices, or one copy for a
  replicated result)."""
  __slots__ = ("exe", "devices", "in_avals", "out_avals", "in_shardings", "out_shardings",
               "collective", "text", "donated", "_out_device", "_handlers", "_replicated",
               "callbacks")

  def __init__(self, exe, devices, in_avals, out_avals, in_shardings, out_shardings, text,
               donated=(), keep_replicated: bool = False):
    self.exe = exe
    self.devices = list(devices)
    self.in_avals = list(in_avals)
    self.out_avals = list(out_avals)
    self.in_shardings = [intern_sharding(s) for s in in_shardings]
    self.out_shardings = [intern_sharding(s) for s in out_shardings]
    self.out_avals = [typed_aval(a, s) for a, s in zip(self.out_avals, self.out_shardings)]
    self.text = text
    self.donated = tuple(donated)
    # The host callbacks of the program (each device calls them): it then runs to
    # completion, and a callback's exception surfaces as on one device.
    self.callbacks = dispatch.host_callbacks_of(text)
    try:
      hlo = "\n".join(m.to_string() for m in exe.hlo_modules())
    except Exception:   # pragma: no cover - a runtime without hlo_modules: be safe
      hlo = "all-reduce("
    self.collective = bool(_COLLECTIVE_HLO.search(hlo))
    d0 = self.devices[0]
    self._out_device = None if d0 == client.default_device() else d0
    # The runtime builds each split result's multi-device array itself; a replicated
    # result keeps the first device's copy (pmap), or every copy (keep_replicated: a mesh
    # program's results stay on the mesh, as its next call wants them).
    self._replicated = [s.is_fully_replicated and not keep_replicated
                        for s in self.out_shardings]
    self._handlers = [_first_piece if rep else
                      client.array_result_handler(core.physical_aval(av), sh._runtime)
                      for av, sh, rep in zip(self.out_avals, self.out_shardings,
                                             self._replicated)]
    dispatch.placement_used[0] = True

  def call1(self, args: Sequence[Any]) -> Array:
    return self.call(args)[0]

  def call(self, args: Sequence[Any]) -> list[Array]:
    bufs = [shard_arg(x, av, sh)
            for x, av, sh in zip(args, self.in_avals, self.in_shardings)]
    if self.collective:
      with _launch_lock:
        _await_previous_collective()
        results = self._execute(bufs, args)
        outs = results.consume_with_handlers(self._handlers)
        if outs:
          first = outs[0]
          # NB: the whole array (its block_until_ready waits for every device's piece);
          # its `_arrays` would make jaxlib import jax to give each piece a JAX aval.
          _last_collective[0] = [first]
        else:
          for b in bufs:
            b.block_until_ready()
    else:
      outs = self._execute(bufs, args).consume_with_handlers(self._handlers)
    if self.donated:
      for i in self.donated:
        x = args[i]
        if type(x) is Array and x._buf is not None and x._buf.is_deleted():
          x._buf = None
    dev = self._out_device
    return [Array(o, av, dev) if rep else Array(o, av, None, sh)
            for o, av, sh, rep in zip(outs, self.out_avals, self.out_shardings,
                                      self._replicated)]

  def _execute(self, bufs, args):
    try:
      if self.callbacks:
        return dispatch.run_with_callbacks(self.exe, bufs, self.callbacks)
      results = self.exe.execute_sharded(bufs)
      client.count_execution()
      return results
    except TypeError:
      dispatch.raise_if_donated(args)
      raise


def _first_piece(pieces):
  return pieces[0]


def replicated_program(exe, devices, in_avals, out_avals, text, donated=()) -> SpmdExecutable:
  """An SPMD program whose arguments and results are all replicated over `devices` (a jit
  containing pmaps): each argument goes whole to every device, one copy of each result
  comes back."""
  mesh = Mesh(np.array(list(devices), dtype=object), ("devices",))
  rep = NamedSharding(mesh, PartitionSpec())
  return SpmdExecutable(exe, devices, in_avals, out_avals, [rep] * len(in_avals),
                        [rep] * len(out_avals), text, donated)


def replicated_executable(name: str, jaxpr: Jaxpr, chain,
                          consts: Sequence[Any] | None = None) -> SpmdExecutable:
  """Lowers and compiles `jaxpr` (containing pmaps) as a replicated SPMD program (`consts`:
  the constvars' values, then constants of the text, not arguments)."""
  devices = chain_devices(chain)
  text = mapping.lower_spmd_module(name, jaxpr, chain, consts=consts)
  exe = dispatch.compile_module(text, devices, num_partitions=len(devices))
  in_avals = [v.aval for v in ((*jaxpr.constvars,) if consts is None else ()) +
              (*jaxpr.invars,)]
  return replicated_program(exe, devices, in_avals, [v.aval for v in jaxpr.outvars], text)




def chain_devices(chain, devices=None) -> list:
  """The devices a module over `chain` runs on: `devices` (the outermost pmap's) or the first
  local devices.

  Raises:
    ValueError: when more devices are needed than exist, or `devices` has the wrong length.
  """
  n = math.prod(s for _, s, _ in chain)
  devices = devices if devices is not None else chain[0][2]
  if devices is not None:
    if len(devices) != n:
      raise ValueError(f"pmap: the mapped axes ({mapping.describe_axes(chain)}) need {n} "
                       f"devices, but `devices` has {len(devices)}. Pass as many devices "
                       f"as the mapped axis size (nested pmaps: the product of their sizes).")
    return list(devices)
  if client.process_count() > 1:   # a distributed run: every process's devices
    glob = sorted(client.devices(), key=lambda d: (d.process_index, d.id))
    if n > len(glob):
      raise ValueError(f"pmap: the mapped axes ({mapping.describe_axes(chain)}) need {n} "
                       f"devices, but the distributed run has {len(glob)}.")
    return glob[:n]
  local = client.local_devices()
  if n > len(local):
    raise ValueError(
        f"compiling computation that requires {n} logical devices, but only {len(local)} XLA "
        f"devices are available (num_replicas=1, num_partitions={n}): the mapped axes "
        f"({mapping.describe_axes(chain)}) need one device per position. Map over at most "
        f"{len(local)} positions, or start Python with "
        f"XLA_FLAGS=--xla_force_host_platform_device_count={n} for more CPU devices.")
  return local[:n]




# ---------------------------------------------------------------------------
# Shardings given by users


def _leaves_and_tree(tree):
  return optree.tree_flatten(tree, none_is_leaf=False, namespace=tree_util.NAMESPACE)


def _is_sharding(x) -> bool:
  return isinstance(x, (NamedSharding, SingleDeviceSharding, PartitionSpec))


def _is_sharding_leaf(x) -> bool:
  return x is None or isinstance(x, (NamedSharding, SingleDeviceSharding, PartitionSpec))


def flatten_shardings(prefix, tree, what: str, keep_single: bool = False) -> list:
  """One sharding (or None) per leaf of `tree`, from a pytree prefix of it whose leaves are
  shardings, PartitionSpecs or None (NamedShardings; SingleDeviceShardings kept as they are
  when `keep_single`, else over a one-device mesh).

  Raises:
    ValueError: when `prefix` is not a tree prefix of `tree`.
  """
  if what == "jit in_shardings" and type(prefix) is list:
    prefix = tuple(prefix)   # NB: as JAX's, a list for the arguments tuple
  try:
    shs = tree_util.broadcast_prefix(prefix, tree, is_leaf=_is_sharding_leaf)
  except ValueError:
    raise prefix_error(prefix, tree, what) from None
  return [s if keep_single and isinstance(s, SingleDeviceSharding) else to_named(s, what)
          for s in shs]


def prefix_error(prefix, tree, what: str) -> ValueError:
  """JAX's error for shardings that are no tree prefix of what they describe: jit's
  (`pjit in_shardings`: the arguments tuple first), device_put's, or a plain one."""
  if what == "jit in_shardings" and (type(prefix) is not tuple or len(prefix) != len(tree)):
    name = "pjit in_shardings"
    msg = (f"{name} specification must be a tree prefix of the positional arguments tuple. "
           f"In particular, {name} must either be a Sharding, a PartitionSpec, or a tuple of "
           f"length equal to the number of positional arguments.")
    if type(prefix) is not tuple:
      msg += f" But {name} is not a tuple: got {type(prefix)} instead."
    else:
      msg += (f" But {name} is the wrong length: got a tuple or list of length {len(prefix)} "
              f"for an args tuple of length {len(tree)}.")
    if len(tree) == 1 and not tree_util.prefix_errors((prefix,), tree,
                                                      is_leaf=_is_sharding_leaf):
      msg += (f" Given the corresponding argument being passed, it looks like {name} might "
              f"need to be wrapped in a singleton tuple.")
    return ValueError(msg)
  # NB: as JAX's, against the value's structure with `PytreeLeaf` leaves, None a node
  errors = tree_util.prefix_errors(prefix, tree_util.leaves_as_pytree_leaf(tree),
                                   is_leaf=_is_sharding)
  if errors and what in ("jit in_shardings", "jit out_shardings"):
    return ValueError(tree_util.prefix_mismatch(errors, "p" + what))
  if errors and what == "device_put":
    return ValueError(f"device_put device specification must be a tree prefix of the "
                      f"corresponding value; \n  "
                      + tree_util.prefix_mismatch(errors, "device_put device", indent="  "))
  return ValueError(f"{what} must be a tree prefix of the value it describes, got "
                    f"{prefix!r} for the tree {_leaves_and_tree(tree)[1]}.")


def _da_desc(da: Sequence[Any]) -> str:
  return (f"device ids {[d.id for d in da]} on platform "
          f"{da[0].platform.upper() if da else '?'}")


def _side(da: Sequence[Any], desc: str | tuple[str, str]) -> str:
  """One side of JAX's device mismatch message ("argument x of f with shape float32[8] and
  with device ids [0, 1] on platform CPU"; "explicit input sharding with device ids ...";
  a `(description, place)` pair: "device_put inside jit with device ids ... at
  file:line:col (f)")."""
  desc, at = desc if isinstance(desc, tuple) else (desc, "")
  return (f"{desc}{' and' if desc.startswith('argument ') else ''} with {_da_desc(da)}"
          f"{' at ' + at if at else ''}")


def check_device_assignment(sources: Sequence[tuple[tuple, str]], api_name: str = "jit"
                            ) -> tuple:
  """The one device assignment all `sources` (device tuple, description) share.

  Raises:
    ValueError: naming the first two that differ.
  """
  first = None
  for da, desc in sources:
    if first is None:
      first = (da, desc)
    elif tuple(da) != tuple(first[0]):
      raise ValueError(
          f"Received incompatible devices for {api_name}ted computation. Got "
          f"{_side(*first)} and {_side(da, desc)}")
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
# The mesh a program uses


def jaxpr_meshes(jaxpr: Jaxpr) -> list[tuple[Mesh, Any]]:
  """The meshes used inside `jaxpr` (with_sharding_constraint, shard_map, device_put), each
  with a description for error messages (a str, or `(description, source place)`: see
  `_side`), in order of appearance (nested jaxprs included)."""
  found: list = []
  _collect(jaxpr, found)
  return found


def jaxpr_device(jaxpr: Jaxpr):
  """`(device, description)`: the device a program runs on because a `device_put` inside
  puts a value on a `SingleDeviceSharding` (JAX counts that sharding in the program's device
  assignment; a bare device it does not), with the place for error messages; None when none
  does or the program uses a mesh.

  Raises:
    ValueError: two such device_puts name different devices (JAX's words).
  """
  found: list = []
  _collect_devices(jaxpr, found)
  if not found or jaxpr_meshes(jaxpr):
    return None
  check_device_assignment([((d,), desc) for d, desc in found])
  return found[0]


def _collect_devices(jaxpr: Jaxpr, found: list):
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "device_put":
      found.extend((d.device, ("device_put inside jit", core.source_summary(eqn.source_info)))
                   for d in eqn.params["devices"] if isinstance(d, SingleDeviceSharding))
    for sub in core.subjaxprs(eqn):
      _collect_devices(sub, found)


def _collect(jaxpr: Jaxpr, found: list):
  for eqn in jaxpr.eqns:
    plain = True   # NB: params of plain values only (most equations'): no jaxprs inside
    for k, v in eqn.params.items():   # a mesh, or a sharding over one (constraints)
      if type(v) in _PLAIN:
        continue
      plain = False
      if k == "ctx_mesh":   # NB: the mesh in context when a jit was traced: not a use
        continue
      # NB: as JAX's, named with the equation's place; a sharding over an AbstractMesh (a
      # type: reshard, out_sharding) names no devices, and a reshard over a Mesh is a
      # device_put
      if isinstance(v, Mesh) and not v.empty:   # (sharding_constraint's context_mesh: Mesh())
        found.append((v, (f"{eqn.primitive.name} inside jit",
                          core.source_summary(eqn.source_info))))
      elif isinstance(v, NamedSharding) and isinstance(v.mesh, Mesh):
        name = "device_put" if eqn.primitive.name == "reshard" else eqn.primitive.name
        found.append((v.mesh, (f"{name} inside jit", core.source_summary(eqn.source_info))))
      elif k in ("in_shardings", "out_shardings"):   # a jit's recorded shardings
        found.extend((x.mesh, (f"{eqn.primitive.name} inside jit",
                               core.source_summary(eqn.source_info)))
                     for x in v if isinstance(x, NamedSharding) and isinstance(x.mesh, Mesh))
    if eqn.primitive.name == "device_put":   # NB: its shardings, one per operand
      for d in eqn.params["devices"]:
        if isinstance(d, NamedSharding) and isinstance(d.mesh, Mesh):
          found.append((d.mesh, ("device_put inside jit",
                                 core.source_summary(eqn.source_info))))
    if not plain:
      for sub in core.subjaxprs(eqn):
        _collect(sub, found)


# The types of param values that are no mesh, sharding or jaxpr (`_collect` skips them).
_PLAIN = frozenset((type(None), bool, int, float, str))


# ---------------------------------------------------------------------------
# Lowering and compiling a program over a mesh


def lower_sharded_module(name: str, jaxpr: Jaxpr, mesh: Mesh,
                         in_shardings: Sequence[NamedSharding | None],
                         out_shardings: Sequence[NamedSharding | None], *,
                         donated: Sequence[bool] | None = None,
                         result_names: Sequence[str] | None = None,
                         consts: Sequence[Any] | None = None,
                         arg_locs: Sequence[str | None] | None = None,
                         call_stack: tuple = ()) -> str:
  """The StableHLO module of `jaxpr` (main takes constvars then invars; with `consts`, the
  constvars' values, only invars: the constants are in the text) over `mesh`: one
  `sdy.sharding` attribute per argument/result given a sharding (None: left to the
  partitioner). `arg_locs`, `call_stack`: the arguments' names and the tracing call's
  frames, for the locations (`lowering.lower_jaxpr_to_module`)."""
  module = lowering.ModuleContext(
      name, axis_env=[(mapping.UnboundAxis(k), s) for k, s in enumerate(mesh.devices.shape)],
      num_partitions=mesh.size)
  module.mesh = [(mesh.sdy_axis_names[n], int(s)) for n, s in mesh.shape.items()]
  module.sdy_mesh = mesh
  avals_in = [v.aval for v in ((*jaxpr.constvars,) if consts is None else ()) +
              (*jaxpr.invars,)]
  arg_attrs = [None if s is None else
               f"sdy.sharding = #sdy.sharding{on_mesh(s, mesh)._sdy(_ndim(a))}"
               for s, a in zip(in_shardings, avals_in)]
  res_attrs = [None if s is None else
               f"sdy.sharding = #sdy.sharding{_result_sdy(module, s, mesh, _ndim(v.aval))}"
               for s, v in zip(out_shardings, jaxpr.outvars)]
  return lowering.lower_jaxpr_to_module(name, jaxpr, donated=donated, arg_attrs=arg_attrs,
                                        result_attrs=res_attrs, module=module, consts=consts,
                                        arg_locs=arg_locs, call_stack=call_stack)


def _ndim(aval) -> int:
  # NB: a typed key's data has one more (unsplit) dimension than the keys
  return len(core.physical_aval(aval).shape)


def _result_sdy(module, s: NamedSharding, mesh: Mesh, ndim: int) -> str:
  """The Shardy sharding of a result laid out by `s`: over the program's `mesh`, or over
  another shape of its devices (a type under `use_abstract_mesh`), its own `sdy.mesh`."""
  if _other_shape(s, mesh):
    return s._sdy(ndim, mesh_name=lowering.mesh_symbol(module, s.mesh))
  return on_mesh(s, mesh)._sdy(ndim)


def _other_shape(s: NamedSharding, mesh: Mesh) -> bool:
  """Whether `s` is over the devices of `mesh` in the same order but in another shape."""
  return (s.mesh.devices.shape != mesh.devices.shape
          and s.mesh._flat_devices == mesh._flat_devices)


def _spec_candidates(mesh: Mesh, ndim: int):
  """Every PartitionSpec of rank `ndim` over `mesh` (each axis used at most once; axes of
  size 1, which split nothing, left out, as JAX's specs read back from XLA)."""
  names = [n for n in mesh.axis_names if mesh.shape[n] > 1]
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
                    exe=None, consts: Sequence[Any] | None = None,
                    fun_name: str | None = None) -> SpmdExecutable:
  """Lowers (unless `text` is given) and compiles `jaxpr` over `mesh`; shardings left None
  are read back from the executable (what the partitioner chose). `consts`: the values of
  the constvars, constants of the text (see `lower_sharded_module`); `fun_name`: the
  program's name in compile logs and events (default: from the module's name).

  Returns:
    An SpmdExecutable taking main's arguments (constvars, unless `consts`, then invars) and
    giving Arrays laid out over the mesh (replicated results stay on every device)."""
  in_shardings, out_shardings = list(in_shardings), list(out_shardings)
  devices = list(mesh.devices.flat)
  avals_in = [v.aval for v in ((*jaxpr.constvars,) if consts is None else ()) +
              (*jaxpr.invars,)]
  avals_out = [v.aval for v in jaxpr.outvars]
  for _ in range(2):
    if text is None:
      text = lower_sharded_module(name, jaxpr, mesh, in_shardings, out_shardings,
                                  donated=donated, consts=consts)
    if exe is None:
      exe = dispatch.compile_module(text, devices, num_partitions=len(devices),
                                    fun_name=fun_name)
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
  return SpmdExecutable(exe, devices, avals_in, avals_out,
                             [on_mesh(s, mesh) for s in final_in],
                             [s if _other_shape(s, mesh) else on_mesh(s, mesh)
                              for s in final_out], text, donated_idx,
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
    ValueError: devices disagree (see the module docstring).
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
  ctx = None if has_mesh else typed_context_mesh(jaxpr)
  if ctx is not None:   # NB: as JAX, the program runs over the mesh of `set_mesh`
    has_mesh = True
    sources.append((ctx._flat_devices, "jit's context mesh"))
  if not has_mesh:
    return None
  check_device_assignment(sources)
  in_avals = [v.aval for v in jaxpr.invars[nconst:]]
  for i, (s, c) in enumerate(zip(explicit_in, committed)):
    for sh, what in ((s, "jit in_shardings"), (c, "the sharding")):
      if isinstance(sh, NamedSharding):
        check_spec_fits(sh, in_avals[i], f"{what} of {describe_arg(i)}")
  for k, (s, v) in enumerate(zip(explicit_out, jaxpr.outvars)):
    if s is not None:
      check_spec_fits(s, v.aval, f"jit out_shardings of output {k} with shape "
                                  f"{v.aval.str_short()}")
  mesh = None
  for s in (*explicit_in, *committed, *explicit_out):
    if isinstance(s, NamedSharding):
      mesh = s.mesh
      break
  if mesh is None:
    mesh = ctx if ctx is not None else inner[0][0]
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
  if ctx is not None and not (mesh.axis_names and mesh.are_all_axes_explicit):
    # NB: as JAX's over the context mesh: results typed over its Explicit axes (unsplit:
    # one None per dimension), replicated (P()) on a mesh with none
    explicit = AxisType.Explicit in mesh.axis_types
    outs = [s if s is not None else
            from_type(v.aval, mesh) if explicit or getattr(v.aval, "_sharding", None)
            else _replicated(mesh) for s, v in zip(outs, jaxpr.outvars)]
  ins = [None] * nconst + ins
  if mesh.axis_names and mesh.are_all_axes_explicit:
    # NB: on a mesh of Explicit axes a value whose type splits it has that layout (JAX's
    # sharding in types), and one of an unsplit type is replicated; but when jit was given
    # in_shardings/out_shardings outside `set_mesh`, unsplit types are left to the
    # partitioner (JAX's avals traced there have no mesh: their layout is unspecified).
    in_context = not get_abstract_mesh().empty
    typed_only = (in_context or not any(s is not None for s in (*explicit_in,
                                                                 *explicit_out))) and all(
        not isinstance(c, NamedSharding) or
        type_sharding(c, len(v.aval.shape)) == getattr(v.aval, "_sharding", None)
        for c, v in zip(committed, jaxpr.invars[nconst:]))
    ins = [s if s is not None or (getattr(v.aval, "_sharding", None) is None
                                  and not typed_only)
           else from_type(v.aval, mesh) for s, v in zip(ins, jaxpr.invars)]
    outs = [s if s is not None or (getattr(v.aval, "_sharding", None) is None
                                   and not typed_only)
            else from_type(v.aval, mesh) for s, v in zip(outs, jaxpr.outvars)]
  return mesh, ins, outs


def _replicated(mesh: Mesh) -> NamedSharding:
  return intern_sharding(NamedSharding(mesh, PartitionSpec()))


_PY_SCALARS = (int, float, bool, complex)


def loose_operands(args: Sequence[Any]) -> bool:
  """Whether an operation on `args`, none placed on a mesh, run under `set_mesh`, has
  results typed over no mesh, laid out `P()` (JAX's rule, read off its types): some operand
  has dimensions (a NumPy array, an Array made outside the mesh) and none is a Python
  scalar (JAX converts those under the mesh first, so they carry its type). Otherwise (only
  scalars, or no operands: iota, fills) the results' types are over the mesh, laid out with
  one None per dimension."""
  dims = False
  for a in args:
    if type(a) in _PY_SCALARS:
      return False
    if not dims and np.ndim(a):
      dims = True
  return dims


def loosen(outs: Sequence[Any], mesh: Mesh) -> None:
  """Lays the unsplit Arrays among `outs` (results over `mesh`) out as `P()` (the same
  layout as `P(None, ...)`, named as JAX's for values typed over no mesh)."""
  rep = _replicated(mesh)
  for o in outs:
    if (type(o) is Array and isinstance(o._sharding, NamedSharding)
        and o._sharding.mesh == mesh and o.aval._sharding is None):
      o._sharding = rep


def typed_context_mesh(jaxpr: Jaxpr | None = None) -> Mesh | None:
  """The mesh of `set_mesh`, over which JAX runs every program (jit, eager operations) none
  of whose arguments is placed elsewhere: each value laid out as its type says, unsplit ones
  replicated. None when no mesh is set (or it is empty)."""
  ctx = concrete_mesh()
  if ctx is None or ctx.empty:
    return None
  return ctx


def from_type(aval: Any, mesh: Mesh) -> NamedSharding | None:
  """The NamedSharding over `mesh` of a value of type `aval` (its split dimensions; a value
  with none is replicated), or None when the type is over a mesh of other axes."""
  ts = getattr(aval, "_sharding", None)
  if ts is None:   # NB: JAX's spec of an unsplit value: P(None, ...), one per dimension
    return NamedSharding(mesh, PartitionSpec(*[None] * len(getattr(aval, "shape", ()))))
  if (ts.mesh.axis_names, ts.mesh.axis_sizes) != (mesh.axis_names, mesh.axis_sizes):
    if math.prod(ts.mesh.axis_sizes) != mesh.size:
      return None
    # NB: a type over another shape of the program's devices (`use_abstract_mesh`): as
    # JAX's, over a Mesh of those devices in that shape
    other = Mesh(np.asarray(mesh._flat_devices, dtype=object).reshape(ts.mesh.axis_sizes),
                 ts.mesh.axis_names, axis_types=ts.mesh.axis_types)
    return NamedSharding(other, ts.spec)
  return NamedSharding(mesh, ts.spec)


# ---------------------------------------------------------------------------
# Arrays laid out over a mesh


# NB: device_put of a traced value under a NamedSharding is a sharding constraint; its
# primitive lives in lax/spmd.py, which installs the bind here (the runtime imports no
# primitive).
traced_device_put: list[Callable[[Any, NamedSharding], Any] | None] = [None]
#: An unreduced Array laid out anew (installed by lax/spmd.py: a compiled `reshard`).
unreduced_reshard: list[Callable[[Any, NamedSharding], Any] | None] = [None]


def check_spec_fits(s: NamedSharding, aval: ShapedArray, where: str, *, typed: bool = False):
  """Raises ValueError naming `where` when `s`'s spec is longer than `aval`'s rank; for a
  dimension not divisible by its mesh axes, JAX's errors: with `typed` (a type is being
  made: device_put, reshard, with_sharding_constraint) "Sharding spec ('b',) implies that
  array axis 0 is partitioned 4 times, but does not evenly divide ...", counting only the
  mesh's Explicit axes, as JAX's types do (a traced value may be constrained unevenly over
  Auto axes: XLA pads); otherwise (jit's in/out_shardings) the `IndivisibleError` of
  `NamedSharding.shard_shape`."""
  if len(s.spec) > len(aval.shape):
    raise ValueError(f"{where}: the spec {s.spec} has {len(s.spec)} entries but the value "
                     f"{aval.str_short()} has rank {len(aval.shape)}; give at most one entry "
                     f"per dimension.")
  if not typed:
    s.shard_shape(aval.shape)   # raises for a dimension its axes do not divide
    return
  explicit = set(s.mesh.explicit_axes)
  for dim, d in enumerate(aval.shape):
    names = tuple(a for a in s.spec._names(dim) if a in explicit)
    size = math.prod(s.mesh.shape[a] for a in names)
    if d % size:
      full = PartitionSpec(*s.spec, *([None] * (len(aval.shape) - len(s.spec))))
      abstract = NamedSharding(s.mesh.abstract_mesh, full)
      raise ValueError(
          f"Sharding spec {tuple(names)} implies that array axis {dim} is partitioned "
          f"{size} times, but does not evenly divide the dimension size {d}. Got shape: "
          f"{tuple(aval.shape)} and sharding {abstract!r}")


def device_put_sharded(x: Any, sharding: NamedSharding) -> Array:
  """One leaf laid out by `sharding` (split on the host, one piece per device; no copy if
  it already is).

  Raises:
    ValueError: a dimension not divisible by its mesh axes, or a spec longer than the rank.
  """
  aval = x.aval if type(x) is Array or isinstance(x, core.Tracer) else core.get_aval(x)
  check_spec_fits(sharding, aval, "device_put", typed=True)
  if isinstance(x, core.Tracer):
    return traced_device_put[0](x, sharding)
  sharding.shard_shape(aval.shape)   # a concrete value is split evenly (JAX's IndivisibleError)
  s = intern_sharding(sharding)
  aval = typed_aval(aval, s)
  if (type(x) is Array and x._sharding is not None and x._sharding == s and x.aval == aval
      and x._sharding.mesh.axis_types == s.mesh.axis_types):
    if x._sharding is s or tuple(x._sharding.spec) == tuple(s.spec):
      return x
    return Array(x._buf, aval, None, s)   # NB: the same layout, its spec as written
  if (type(x) is Array and isinstance(x._sharding, NamedSharding)
      and x._sharding.spec.unreduced and unreduced_reshard[0] is not None):
    # NB: partial sums leave their layout by a program (the sum is an all-reduce)
    return unreduced_reshard[0](x, s)
  buf = shard_arg(x, aval, s)
  dispatch.placement_used[0] = True
  return Array(buf, aval, None, s)


def make_array_from_callback(shape: Sequence[int], sharding: NamedSharding,
                             data_callback: Callable[[tuple], Any], dtype=None) -> Array:
  """A global Array of `shape` laid out by `sharding` whose pieces come from
  `data_callback(index)` (`index`: a tuple of slices into the global array), called once
  per addressable device. Pieces that are typed key arrays give a key array (of their key
  data laid out by `sharding`), as JAX's.

  Raises:
    ValueError: a piece of the wrong shape, or shape not divisible by the mesh axes.
  """
  shape = tuple(int(d) for d in shape)
  sharding = intern_sharding(to_named(sharding, "make_array_from_callback"))
  m = sharding.devices_indices_map(shape)
  me = client.process_index()
  devs = [d for d in sharding.mesh.devices.flat if d.process_index == me]
  raw = [data_callback(m[d]) for d in devs]
  if raw and type(raw[0]) in tree_util.staged_types:
    # typed key arrays (JAX's callbacks may give keys): the array of their key data
    # (`u32[*s, 2]`, the trailing axes unsplit), then key arrays around it
    data, rebuild = tree_util.staged_leaf_data(raw[0])
    tail = tuple(data.shape[len(raw[0].shape):])
    datas = iter([tree_util.staged_leaf_data(p)[0] for p in raw])
    return rebuild(make_array_from_callback((*shape, *tail), sharding,
                                            lambda _: next(datas)))
  pieces = []
  for d, p in zip(devs, raw):
    p = np.asarray(p)
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
  return Array(xc.ArrayImpl(aval, sharding._runtime, bufs, True, True),
               typed_aval(aval, sharding), None, sharding)


def from_device_blocks(pieces: Sequence[np.ndarray], shape: Sequence[int],
                       sharding: NamedSharding) -> Array:
  """An Array of global `shape` laid out by `sharding` whose devices (in
  `sharding.mesh.devices.flat` order, all of this process) hold `pieces` as they are (for
  an unreduced layout: each device's partial sum)."""
  s = intern_sharding(sharding)
  pieces = [np.ascontiguousarray(p) for p in pieces]
  aval = typed_aval(ShapedArray(tuple(int(d) for d in shape), pieces[0].dtype), s)
  bufs = [xc.batched_device_put(aval.update(shape=p.shape), client.single_device_sharding(d),
                                [p], [d], True, False, enable_x64=True)
          for p, d in zip(pieces, s.mesh.devices.flat)]
  dispatch.placement_used[0] = True
  return Array(xc.ArrayImpl(aval, s._runtime, bufs, True, True), aval, None, s)


def make_array_from_single_device_arrays(shape: Sequence[int], sharding: NamedSharding,
                                         arrays: Sequence[Array], *,
                                         dtype: Any = None) -> Array:
  """A global Array from one Array per addressable device of `sharding` (in the order of
  `sharding.mesh.devices.flat`), each holding that device's piece. `dtype` (default: the
  pieces' dtype) is required when no piece is given, and must match the pieces' dtype.
  Typed key arrays as pieces give a key array.

  Raises:
    ValueError: a wrong number of pieces or a piece of the wrong shape; no piece and no
      `dtype`, or a `dtype` other than the pieces' (JAX's words).
  """
  fname = "make_array_from_single_device_arrays"
  if not isinstance(arrays, (list, tuple)):
    raise TypeError(f"jax.{fname} `arrays` argument must be a list or tuple, but got "
                    f"{type(arrays)}.")
  if any(isinstance(a, core.Tracer) for a in arrays):
    raise ValueError(f"jax.{fname} requires a list of concrete arrays as input, but got "
                     f"types {set(map(type, arrays))}")
  if arrays and type(arrays[0]) in tree_util.staged_types:   # typed key arrays: their data
    data, rebuild = tree_util.staged_leaf_data(arrays[0])
    tail = tuple(data.shape[len(arrays[0].shape):])
    return rebuild(make_array_from_single_device_arrays(
        (*tuple(shape), *tail), sharding, [tree_util.staged_leaf_data(a)[0] for a in arrays]))
  if dtype is None:
    if not arrays:
      raise ValueError(f"If the Array has no addressable shards, `dtype` must be provided "
                       f"via the `dtype` argument to `jax.{fname}`.")
  else:
    dtype = dtypes.check_user_dtype(dtype, fname)
    if arrays and np.dtype(arrays[0].dtype) != dtype:
      raise ValueError(f"If `dtype` is provided to `jax.{fname}`, it must match the dtype "
                       f"of the addressable shards. Got dtype={dtype} and shard "
                       f"dtype={arrays[0].dtype}`.")
  shape = tuple(int(d) for d in shape)
  sharding = intern_sharding(to_named(sharding, "make_array_from_single_device_arrays"))
  m = sharding.devices_indices_map(shape)
  me = client.process_index()
  devs = [d for d in sharding.mesh.devices.flat if d.process_index == me]
  for a in arrays:
    held = a.devices() if hasattr(a, "devices") else ()
    if len(held) > 1:
      raise ValueError("When making an array from single-device arrays the input arrays must "
                       f"have one shard each. An argument array had {len(held)} shard(s).")
  if len(arrays) != len(devs):
    raise ValueError(f"make_array_from_single_device_arrays: {len(arrays)} arrays given for "
                     f"{len(devs)} addressable devices of {sharding}.")
  return make_array_from_callback(
      shape, sharding, lambda idx: np.asarray(arrays[[m[d] for d in devs].index(idx)]),
      dtype=np.asarray(arrays[0]).dtype if arrays else dtype)


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

  In a single process (as JAX's) `local_data` may be a pytree, `sharding` a pytree prefix of
  it (None an empty subtree: `(None, None)` places nothing and returns None), and
  `global_shape` a prefix of shapes; the data is placed with `device_put(local_data,
  sharding)`.

  Raises:
    ValueError: when the local block does not match the sharding; in a single process, a
      `sharding` that is not a prefix of `local_data` (JAX's "pytree structure error"), or a
      `global_shape` other than the local data's shape.
  """
  if client.process_count() == 1:
    errors = tree_util.prefix_errors(sharding, local_data)
    if errors:
      raise errors[0]("broadcast_prefix prefix_tree")
    shapes = tree_util.broadcast_prefix(
        global_shape, local_data, is_leaf=lambda x: x is None or isinstance(x, tuple))
    for want, leaf in zip(shapes, tree_util.tree_leaves(local_data)):
      if want is not None and tuple(want) != np.shape(leaf):
        raise ValueError(
            f"When calling `make_array_from_process_local_data` on a single process, "
            f"global_shape should be None or equal to local_data.shape.Got "
            f"global_shape={want} and local_data.shape={np.shape(leaf)}.")
    return device_put(local_data, sharding)
  sharding = intern_sharding(to_named(sharding, "make_array_from_process_local_data"))
  v = np.asarray(local_data)
  if global_shape is None:
    global_shape = _grow(sharding, v.shape)
  global_shape = tuple(int(d) for d in global_shape)
  aval = ShapedArray(global_shape, dtypes.canonicalize_dtype(v.dtype))
  if client.process_count() == 1 or not _spans_processes(sharding):
    if v.shape != global_shape:
      raise ValueError(f"make_array_from_process_local_data: one process holds all of "
                       f"{sharding}, so the local data must have the global shape "
                       f"{global_shape}, got {v.shape}.")
    return device_put_sharded(v.astype(aval.dtype, copy=False), sharding)
  try:
    buf = _shard_local(v.astype(aval.dtype, copy=False), aval, sharding,
                            client.process_index())
  except ValueError as e:
    raise ValueError(f"make_array_from_process_local_data: {e}") from None
  dispatch.placement_used[0] = True
  return Array(buf, typed_aval(aval, sharding), None, sharding)


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
  return lambda i: (f"argument {('x', 'y')[i] if len(avals) <= 2 else i} of {name} with "
                    f"shape {avals[i].str_short(False)}")


def apply_primitive(prim: core.Primitive, args: Sequence[Any], params: dict,
                    placement: Sequence[Any]) -> Any:
  """`prim` run eagerly on arguments some of which are split over a mesh: one SPMD program
  over that mesh (arguments keep their layout; results as the partitioner lays them out),
  cached per (primitive, params, avals, layouts)."""
  avals = [a.aval if type(a) is Array else core.get_aval(a) for a in args]
  ctx = None
  if not any(placement):   # NB: none placed: over the mesh of `set_mesh` (in the key)
    ctx = concrete_mesh()
    loose = (ctx.axis_types, loose_operands(args))
  else:   # NB: equal layouts over meshes of other axis types or names compare equal: key
    # on those (the results' shardings name the mesh)
    loose = tuple((p.mesh.axis_types, p.mesh.axis_names) if isinstance(p, NamedSharding)
                  else None for p in placement)
  try:
    key = (prim, tuple(placement), ctx, loose, *avals, *params.items())
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
    if ctx is not None and loose[1] is True:
      outs = [o if getattr(v.aval, "_sharding", None) is not None else _replicated(mesh)
              for o, v in zip(outs, outvars)]
    ex = compile_sharded(prim.name, jaxpr, mesh, ins, outs)
    if key is not None:
      if len(_eager_cache) >= _MAX_CACHE:
        _eager_cache.clear()
      _eager_cache[key] = ex
  outs = ex.call(args)
  return outs if prim.multiple_results else outs[0]


def call_closed(closed: ClosedJaxpr, name: str, args: Sequence[Any],
                placement: Sequence[Any]) -> list:
  """A jit equation's closed jaxpr run eagerly on arguments split over a mesh (its consts
  are constants of the program's text)."""
  table = _closed_cache.setdefault(closed, {})
  ex = table.get(tuple(placement))
  if ex is None:
    avals = closed.in_avals
    r = resolve(closed.jaxpr, 0, placement, None, None, _describe_leaf(name, avals))
    mesh, ins, outs = r
    ex = table[tuple(placement)] = compile_sharded(f"jit_{name}", closed.jaxpr, mesh, ins,
                                                   outs, consts=closed.consts)
  return ex.call(args)


def call_closed_executable(closed: ClosedJaxpr, name: str) -> SpmdExecutable:
  """The program of a jit equation whose body uses a mesh (shard_map, constraints) and whose
  arguments are not laid out over one: shardings left to the partitioner (its consts are
  constants of the program's text)."""
  n = len(closed.in_avals)
  mesh, ins, outs = resolve(closed.jaxpr, 0, [None] * n, None, None,
                            _describe_leaf(name, closed.in_avals))
  return compile_sharded(f"jit_{name}", closed.jaxpr, mesh, ins, outs, consts=closed.consts)


def _leaves_with_paths(x: Any) -> tuple[list, Any]:
  """`(path, leaf)` pairs and the treedef of `x`, a typed PRNG key's leaf being its data (as
  jit sees it; the treedef rebuilds the key)."""
  with_paths = tree_util.tree_flatten_with_path(x)[0]
  leaves, treedef = tree_util.tree_flatten_traced(x)
  return [(path, leaf) for (path, _), leaf in zip(with_paths, leaves)], treedef


def device_put(x: Any, device=None, *, src: Any = None, donate: Any = False,
               may_alias: Any = None) -> Any:
  """Places `x` (a pytree of arrays or scalars) on `device` (default: the first device).

  Args:
    x: Array, NumPy array, Python scalar, jax.Array, or a pytree of them.
    device: a device from `stagecraft.devices()`, `memory.Space.Device` (stays where it is),
      a sharding (`NamedSharding(mesh, spec)`
      splits each leaf on the host and places one piece per device;
      `SingleDeviceSharding(d)` is device d), a pytree prefix of `x` of shardings, or None.
    src: where `x` is (a device, a sharding, or a pytree prefix of them): accepted, as JAX
      uses it only to move data between memory kinds stagecraft does not have.
    donate: a bool or a pytree prefix of `x` of bools: the caller gives up the input; as
      JAX's on CPU (best effort), the input stays usable here.
    may_alias: a bool, None or a pytree prefix of `x`: whether the result may be the input
      itself when it is already in place (None: unless donated). False always copies.

  Returns:
    The same tree of `Array`s, committed to `device` when one is given (uncommitted on the
    default device otherwise). Computations run on the device of their committed inputs.
    This is the one way data moves between layouts: jit never reshards committed inputs.
    Inside a transformation (jit, grad, vmap, ...) it is one `device_put` equation over all
    leaves, as JAX's (`devices`, `srcs`, `copy_semantics`: REUSE_INPUT, ALWAYS_COPY for
    `may_alias=False`, DONATE_INPUT for `donate=True`); a NamedSharding types its result
    (split dimensions over Explicit axes) and names the program's devices.

  Raises:
    TypeError: if `device` is not a device or sharding, or a leaf is not an array-like (its
      key path is named).
    NotImplementedError: for `memory.Space.Host` / `Any` (no host memory in stagecraft).
    ValueError: a split dimension not divisible by its mesh axes; `donate` and `may_alias`
      both True for a leaf; a bare PartitionSpec with no mesh set; a donated device_put
      transposed by grad (JAX's words).
  """
  if isinstance(device, core.MemorySpace):
    if device is not core.MemorySpace.Device:
      raise NotImplementedError(
          f"device_put to {device!r}: stagecraft keeps arrays in device memory only (no host "
          f"offloading); use jax.memory.Space.Device or a device.")
    device = None   # NB: where the value is, in device memory (the only memory here)
  if core.trace_state.trace is not core.eval_trace and not (
      device is not None and _has_format(device)):
    # NB: as JAX's, inside a transformation (jit, grad, vmap, ...) one `device_put`
    # equation for all the leaves (the primitive lives in lax/spmd.py)
    return _staged_device_put(x, device, src, donate, may_alias)
  if donate is False and may_alias is None:
    return _device_put(x, device)
  leaves, treedef = tree_util.tree_flatten(x)
  flags = []
  for what, v in (("donate", donate), ("may_alias", may_alias)):
    if isinstance(v, bool) or v is None:
      flags.append([v] * len(leaves))
    else:
      try:
        flags.append(tree_util.broadcast_prefix(v, x, is_leaf=lambda y: y is None))
      except ValueError:
        raise prefix_error(v, x, f"device_put {what}") from None
  copies = []
  for d, m in zip(*flags):
    if m and d:
      raise ValueError("may_alias and donate cannot be True at the same time.")
    copies.append(not (not d if m is None else m))   # NB: JAX's ALWAYS_COPY / DONATE_INPUT
  out = tree_util.tree_leaves(_device_put(x, device))
  out = [_fresh_copy(o) if c and (o is i or _same_buffer(o, i)) else o
         for o, i, c in zip(out, leaves, copies)]
  return tree_util.tree_unflatten(treedef, out)


#: JAX's copy semantics of a device_put (the runtime's enum: `REUSE_INPUT`, `ALWAYS_COPY`,
#: `DONATE_INPUT`), one per leaf in the `device_put` equation's `copy_semantics`.
ArrayCopySemantics = xc.ArrayCopySemantics

#: `device_put_p.bind` (installed by lax/spmd.py, which defines the primitive).
bind_device_put: list[Callable | None] = [None]


def _is_placement_leaf(x) -> bool:
  return (x is None or isinstance(x, (Sharding, PartitionSpec, Format))
          or hasattr(x, "client"))


def _flat_prefix(v, x, n: int, what: str) -> list:
  """One entry per leaf of `x` from `v`: a device, sharding, spec or None for all, or a
  pytree prefix of `x` of them."""
  if _is_placement_leaf(v):
    return [v] * n
  try:
    return tree_util.broadcast_prefix(v, x, is_leaf=_is_placement_leaf)
  except ValueError:
    raise prefix_error(v, x, what) from None


def _spec_to_sharding(v):
  """A bare PartitionSpec means `NamedSharding(mesh of set_mesh, spec)` (JAX's words when
  no mesh is set)."""
  if not isinstance(v, PartitionSpec):
    return v
  mesh = concrete_mesh()
  if mesh is None:
    raise ValueError("Please set a mesh via `jax.set_mesh` if a PartitionSpec is passed to "
                     "device_put")
  return NamedSharding(mesh, v)


def _source_of(src, x):
  """Where a leaf is (JAX's `_infer_src_sharding`): `src` when given; a concrete Array's
  sharding (the primal of a JVP tracer too); a value typed over a mesh all of whose axes
  are Explicit: the sharding in its type; else None."""
  if src is not None:
    return src
  v = core.to_concrete_value(x) if isinstance(x, core.Tracer) else x
  if type(v) is Array:
    return v.sharding
  aval = core.get_aval(x)
  ts = getattr(aval, "_sharding", None)
  if ts is not None and ts.mesh.are_all_axes_explicit:
    return ts
  return None


def _staged_device_put(x, device, src, donate, may_alias):
  """`device_put` inside a transformation: one `device_put` equation (JAX's params
  `devices`, `srcs`, `copy_semantics`, one entry per leaf); NumPy leaves left in place with
  no target and no copy are returned as they are (JAX folds that equation away)."""
  with_paths, treedef = _leaves_with_paths(x)
  leaves = [leaf for _, leaf in with_paths]
  n = len(leaves)
  devices = [_spec_to_sharding(d) for d in _flat_prefix(device, x, n, "device_put")]
  srcs = [_spec_to_sharding(s) for s in _flat_prefix(src, x, n, "device_put source")]
  srcs = [_source_of(s, leaf) for s, leaf in zip(srcs, leaves)]
  flags = []
  for what, v in (("donate", donate), ("may_alias", may_alias)):
    flags.append([v] * n if isinstance(v, bool) or v is None
                 else _flat_prefix(v, x, n, f"device_put {what}"))
  copies = []
  for d, m in zip(*flags):
    if m and d:
      raise ValueError("may_alias and donate cannot be True at the same time.")
    if m is None:
      m = not d
    copies.append(ArrayCopySemantics.REUSE_INPUT if m and not d else
                  ArrayCopySemantics.DONATE_INPUT if d and not m else
                  ArrayCopySemantics.ALWAYS_COPY)
  for (path, leaf), d in zip(with_paths, devices):
    if d is not None and not isinstance(d, Sharding) and not hasattr(d, "client"):
      raise ValueError(f"`jax.device_put` only accepts `None`, `jax.sharding.Sharding`, "
                       f"`jax.Device`, `Format`, `jax.memory.Space` or a pytree of these "
                       f"values. Received invalid value: {d}")
    if isinstance(d, NamedSharding):
      aval = leaf.aval if type(leaf) is Array else core.get_aval(leaf)
      check_spec_fits(d, aval, "device_put", typed=True)
      d.shard_shape(aval.shape)
  if (all(isinstance(v, (np.ndarray, np.generic)) for v in leaves)
      and all(d is None for d in devices)
      and all(c == ArrayCopySemantics.REUSE_INPUT for c in copies)):
    return x   # NB: JAX's folding of a device_put of constants that does nothing
  outs = bind_device_put[0](leaves, tuple(devices), tuple(srcs), tuple(copies))
  return tree_util.tree_unflatten(treedef, outs)


def device_put_impl(*xs, devices, srcs, copy_semantics) -> list:
  """The eager `device_put` equation: each value placed on its device or sharding (None:
  left where it is), copied when its copy semantics is not `REUSE_INPUT`."""
  outs = []
  for x, d, c in zip(xs, devices, copy_semantics):
    y = _device_put(x, d)
    if c != ArrayCopySemantics.REUSE_INPUT and (y is x or _same_buffer(y, x)):
      y = _fresh_copy(y)
    outs.append(y)
  return outs


def _same_buffer(a: Any, b: Any) -> bool:
  """Whether the Arrays `a` and `b` hold the same device memory."""
  if not (isinstance(a, Array) and isinstance(b, Array)):
    return False
  if a._buf is b._buf:
    return True
  try:
    return a.unsafe_buffer_pointer() == b.unsafe_buffer_pointer()
  except Exception:   # noqa: BLE001 (split Arrays have no single pointer: not the same)
    return False


def _fresh_copy(a: Any) -> Any:
  """A new Array with `a`'s value, placement and type (device_put's `may_alias=False`)."""
  return a.copy()


def _device_put(x: Any, device=None) -> Any:
  if isinstance(device, SingleDeviceSharding):
    device = device.device
  if device is not None and _has_format(device):
    return device_put_formats(x, device)
  if device is not None and not hasattr(device, "client"):
    shs = flatten_shardings(device, x, "device_put", keep_single=True)
    with_paths, treedef = _leaves_with_paths(x)
    out = []
    for (path, leaf), s in zip(with_paths, shs):
      if s is None or isinstance(s, SingleDeviceSharding):
        out.append(dispatch.device_put_leaf(leaf, None if s is None else s.device,
                                    tree_util.keystr(path)))
        continue
      try:
        out.append(device_put_sharded(leaf, s))
      except (TypeError, ValueError) as e:
        if str(e).startswith("Sharding spec "):   # JAX's words, which name no leaf
          raise
        if isinstance(e, IndivisibleError):   # JAX's, from shard_shape: no leaf named
          raise
        msg = str(e).removeprefix("device_put: ")
        raise type(e)(f"device_put: the leaf at {tree_util.keystr(path) or 'the root'}: "
                      f"{msg}") from None
    return tree_util.tree_unflatten(treedef, out)
  with_paths, treedef = _leaves_with_paths(x)
  out = [dispatch.device_put_leaf(leaf, device, tree_util.keystr(path)) for path, leaf in with_paths]
  return tree_util.tree_unflatten(treedef, out)



def _is_format_leaf(x) -> bool:
  return x is None or isinstance(x, (Format, Sharding, PartitionSpec)) or hasattr(x, "client")


def _has_format(tree) -> bool:
  if isinstance(tree, Format):
    return True
  if hasattr(tree, "client") or isinstance(tree, Sharding):
    return False
  return any(isinstance(x, Format) for x in tree_util.tree_leaves(tree, is_leaf=_is_format_leaf))


def device_put_formats(x: Any, formats: Any) -> Any:
  """`device_put` with Formats (a pytree prefix of `x` of Formats, shardings and devices):
  each leaf with a concrete Format is placed on its sharding and copied into its memory
  layout (JAX's words for a Format that is not concrete)."""
  with_paths, treedef = _leaves_with_paths(x)
  try:
    fmts = tree_util.broadcast_prefix(formats, x, is_leaf=_is_format_leaf)
  except ValueError:
    raise prefix_error(formats, x, "device_put") from None
  out = []
  for (path, leaf), f in zip(with_paths, fmts):
    if not isinstance(f, Format):
      out.append(device_put(leaf, f))
      continue
    out.append(_device_put_format(leaf, f, tree_util.keystr(path)))
  return tree_util.tree_unflatten(treedef, out)


def _device_put_format(x: Any, f: Format, path: str) -> Any:
  if f.layout is None and f.sharding is None:
    return dispatch.device_put_leaf(x, None, path)
  aval = core.get_aval(x) if not isinstance(x, Array) else x.aval
  if not isinstance(f.sharding, Sharding) or not isinstance(f.layout, (Layout, type(None))):
    raise ValueError(f"sharding and layout in `Layout` instance should be concrete. Got "
                     f"layout: {f} for input {aval.str_short(False)}")
  if f.layout is None:
    return device_put(x, f.sharding)
  if isinstance(x, Array) and x.committed and x.format == f:
    return x
  try:
    f.layout.check_compatible_aval(aval.shape)
  except ValueError as e:
    raise ValueError(f"One of jit outputs with pytree key path result is incompatible with "
                     f"its layout annotation {f.layout}: {e}") from None
  if not (isinstance(f.sharding, SingleDeviceSharding)
          and f.sharding.device == client.default_device()):
    raise NotImplementedError(
        f"device_put: stagecraft supports Formats (memory layouts) on the default device "
        f"only, got sharding {f.sharding!r}.")
  y = dispatch.device_put_leaf(x, f.sharding.device, path)
  if isinstance(x, Array) and y is x:   # NB: a new Array: x keeps its own layout
    y = Array(x._buf, x.aval, x._device)
    array_mod.mark_committed(y)
  want = f.layout._xla_text(aval.dtype)
  y._laid = None
  if dispatch.buffer_layout_text(y._buf) != want:
    y._laid = dispatch.relayout(y._buf, aval, want)
  return y


dispatch.mesh_apply_primitive[0] = apply_primitive


def _replicated_primitive(name: str, jaxpr: Jaxpr) -> SpmdExecutable | None:
  """The program of an eager one-equation `jaxpr` whose body holds pmaps (a `fori_loop` of
  pmaps): replicated over their devices, as JAX's jit of it; None when it holds none."""
  chain = mapping.mesh_chain(jaxpr)
  return replicated_executable(name, jaxpr, chain) if chain else None


dispatch.replicated_primitive[0] = _replicated_primitive
