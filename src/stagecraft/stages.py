"""Ahead-of-time stages of `jit`: `jit(f).trace(...)` -> `Traced`, `.lower()` -> `Lowered`,
`.compile()` -> `Compiled`.

Each stage is specialized to the argument signature it was made for (tree structure, shape and
dtype of each leaf, values of static arguments). A `Compiled` runs that executable only; it
type-checks its arguments against the signature (every dynamic argument, also those the
program does not read) and refuses to be transformed.

    >>> import stagecraft as sc
    >>> def f(x, y): return 2 * x + y
    >>> lowered = sc.jit(f).lower(3, 4)
    >>> compiled = lowered.compile()
    >>> compiled(3, 4)
    Array(10, dtype=int32, weak_type=True)
"""
from __future__ import annotations

import base64
import collections
import json
from typing import Any, Callable, Protocol, Sequence, Union, runtime_checkable

import numpy as np
import optree
from jaxlib import xla_client as xc

from stagecraft import api_util, core, dtypes, pjit, tree_util
from stagecraft.config import config
from stagecraft.interpreters import lowering
from stagecraft.layout import Format, Layout
from stagecraft.core import ClosedJaxpr, ShapedArray, ShapeDtypeStruct
from stagecraft.runtime import cache, client, dispatch, mlir_text
from stagecraft.runtime.array import Array
from stagecraft.runtime import spmd
from stagecraft.sharding import AxisType, Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

__all__ = ["ArgInfo", "Traced", "Lowered", "Compiled", "CostAnalysis", "deserialize_compiled",
           "CompilerOptions", "Wrapped", "register_pytree_node_serialization",
           "register_namedtuple_serialization", "tree_to_json", "tree_from_json",
           "aval_to_json", "aval_from_json"]

_MAX_LISTED = 5


class ArgInfo:
  """What a stage knows of one dynamic argument leaf: its aval (`shape`, `dtype`,
  `weak_type`) and whether it is donated."""
  __slots__ = ("_aval", "donated")

  def __init__(self, aval: ShapedArray, donated: bool):
    self._aval = aval
    self.donated = donated

  shape = property(lambda self: self._aval.shape)
  dtype = property(lambda self: self._aval.dtype)
  weak_type = property(lambda self: self._aval.weak_type)

  def __repr__(self):
    return f"ArgInfo({self._aval.str_short()}, donated={self.donated})"

  def __eq__(self, other):
    return (isinstance(other, ArgInfo) and self._aval == other._aval
            and self.donated == other.donated)

  def __hash__(self):
    return hash((self._aval, self.donated))


class CostAnalysis(dict):
  """XLA's cost analysis: property name (`'flops'`, `'bytes accessed'`, ...) -> float.

  NB: older JAX returned a list with one such dict per computation; `costs[0]` returns the
  dict itself so that code written for either form reads `costs[0]['flops']`.
  """

  def __getitem__(self, key):
    if key == 0 and type(key) is int:
      return self
    return dict.__getitem__(self, key)


def _sds(aval: ShapedArray) -> ShapeDtypeStruct:
  return ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _out_sds(aval: ShapedArray) -> ShapeDtypeStruct:
  """A result's ShapeDtypeStruct, as JAX's `out_info`: with its type's sharding when that
  is over a mesh whose axes are all Explicit or Manual (else the compiler decides)."""
  s = aval.sharding if isinstance(aval, ShapedArray) else None
  if s is None or s.mesh.empty or not all(
      t in (AxisType.Explicit, AxisType.Manual) for t in s.mesh.axis_types):
    return _sds(aval)
  return ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type, sharding=s)


class _Signature:
  """What every stage shares: the traced signature, the jit options and the argument
  structure (`in_tree` of `(dyn_args, dyn_kwargs)`, one name per leaf)."""
  __slots__ = ("entry", "in_tree", "arg_names", "in_avals", "donated", "keep_unused", "name",
               "device", "layout")

  def __init__(self, entry, in_tree, arg_names, in_avals, donated, keep_unused, name, device,
               layout=None):
    self.layout = layout   # a sharded signature's pjit.SignatureLayout, or None
    self.entry = entry
    self.in_tree = in_tree
    self.arg_names = arg_names
    self.in_avals = in_avals
    self.donated = donated
    self.keep_unused = keep_unused
    self.name = name
    self.device = device

  def args_info(self):
    infos = [ArgInfo(a, i in self.donated) for i, a in enumerate(self.in_avals)]
    return tree_util.tree_unflatten(self.in_tree, infos)

  def in_avals_tree(self):
    """JAX's `Stage.in_avals`: the tree of `(dyn_args, dyn_kwargs)` with the avals."""
    return tree_util.tree_unflatten(self.in_tree, list(self.in_avals))

  def out_info(self):
    return tree_util.tree_unflatten(self.entry.out_tree,
                                 [_out_sds(a) for a in self.entry.jaxpr.out_avals])


def trace_jit(wrapped: pjit.JitWrapped, args: tuple, kwargs: dict) -> Traced:
  """`jit(f).trace(*args, **kwargs)`: the traced signature of the call (see `Traced`)."""
  entry, leaves, dev, static_argnums, donated = wrapped._stage(args, kwargs)
  dyn_argnums = [i for i in range(len(args)) if i not in static_argnums]
  dyn = (tuple(args[i] for i in dyn_argnums),
         {k: v for k, v in kwargs.items() if k not in wrapped._static_argnames})
  in_tree = api_util.flatten(dyn)[1]
  with_paths = tree_util.tree_flatten_with_path(dyn)[0]
  names, _ = api_util.arg_names(api_util.fun_signature(wrapped._fun), dyn_argnums, list(dyn[1]),
                            with_paths)
  nconst = len(entry.consts)
  in_avals = tuple(v.aval for v in entry.jaxpr.jaxpr.invars[nconst:])
  layout = None
  if type(dev) is dispatch.Placement:
    layout, dev = wrapped._layout(entry, args, kwargs, static_argnums, dev), None
  elif wrapped._formats is not None:
    layout = wrapped._format_signature(entry, args, kwargs, static_argnums)
  device = wrapped._device if wrapped._device is not None else dev
  sig = _Signature(entry, in_tree, names, in_avals, frozenset(donated), wrapped._keep_unused,
                   api_util.fun_name(wrapped._fun), device, layout)
  return Traced(sig)


def result_infos(out_tree) -> list[str]:
  """JAX's `jax.result_info` of each result leaf of `out_tree`: `result` and its key path
  (`result['a']`, `result[0]`)."""
  leaves = tree_util.tree_unflatten(out_tree, list(range(out_tree.num_leaves)))
  return ["result" + tree_util.keystr(p)
          for p, _ in tree_util.tree_flatten_with_path(leaves)[0]]


#: True while the JAX runner is installed (`stagecraft.compat.install`): the stages print
#: as JAX's objects do, `<jax._src.stages.Compiled object at 0x...>` (JAX's have no repr).
jax_reprs = [False]


def _stage_repr(obj, kind: str) -> str:
  if jax_reprs[0]:
    return f"<jax._src.stages.{kind} object at {id(obj):#x}>"
  return f"{kind}({obj._sig.name})"


class Traced:
  """A function traced for one argument signature.

  Attributes:
    jaxpr: the ClosedJaxpr of the traced function (its consts closed over; the flat dynamic
      arguments are its invars).
    out_info: the output pytree of ShapeDtypeStructs.
    in_tree / out_tree: the tree structures of `(dyn_args, dyn_kwargs)` and of the output.
    args_info: `(dyn_args, dyn_kwargs)` with an `ArgInfo` per leaf.
  """

  __slots__ = ("_sig",)

  def __init__(self, sig: _Signature):
    self._sig = sig

  @property
  def jaxpr(self) -> ClosedJaxpr:
    return self._sig.entry.closed

  out_info = property(lambda self: self._sig.out_info())
  args_info = property(lambda self: self._sig.args_info())
  in_tree = property(lambda self: tree_util.PyTreeDef(self._sig.in_tree))
  in_avals = property(lambda self: self._sig.in_avals_tree())
  donate_argnums = property(lambda self: tuple(sorted(self._sig.donated)))
  out_tree = property(lambda self: tree_util.PyTreeDef(self._sig.entry.out_tree))
  fun_name = property(lambda self: self._sig.name)
  # stagecraft extensions (used by `stagecraft.export`): jit's `keep_unused`, the name of
  # each flat argument (`x`, `y['a']`), whether the signature is laid out over a device mesh
  # (jit's shardings or sharded arguments) and that layout (pjit.SignatureLayout), and the
  # jaxpr that is lowered (with jax_use_simplified_jaxpr_constants, the constants of its jit
  # equations hoisted into its own).
  keep_unused = property(lambda self: self._sig.keep_unused)
  arg_names = property(lambda self: tuple(self._sig.arg_names))
  sharded = property(lambda self: type(self._sig.layout) is pjit.SignatureLayout)
  layout = property(lambda self: self._sig.layout)
  lowered_jaxpr = property(lambda self: self._sig.entry.hoisted())

  def lower(self, *, lowering_platforms: tuple[str, ...] | None = None,
            _private_parameters: Any = None) -> Lowered:
    """Lowers the traced function to a StableHLO module (unused arguments pruned unless
    `keep_unused`; static arguments are constants of the module).

    Args:
      lowering_platforms: None, or platform names to lower for; only the platform of the
        program's device is supported here (JAX lowers for several, for export).
      _private_parameters: JAX's private lowering parameters; must be None here.

    Raises:
      NotImplementedError: other lowering platforms, or private parameters.
    """
    sig = self._sig
    if lowering_platforms is not None:
      own = (sig.device or client.default_device()).platform
      if tuple(lowering_platforms) != (own,):
        raise NotImplementedError(
            f"Traced.lower(lowering_platforms={lowering_platforms!r}): stagecraft lowers "
            f"for the program's own platform ({own!r}) only")
    if _private_parameters is not None:
      raise NotImplementedError("Traced.lower(_private_parameters=...) is JAX's private "
                                "lowering API; stagecraft has no such parameters")
    with lowering.for_device(sig.device):
      lowered = pjit.lower_traced(sig.entry, set(sig.donated), sig.keep_unused, sig.name,
                                  layout=sig.layout)
    return Lowered(sig, lowered)

  def __repr__(self):
    return _stage_repr(self, "Traced")


class Lowered:
  """A function lowered to a StableHLO module for one argument signature.

  Attributes:
    in_tree / out_tree, args_info, out_info: as on `Traced`.
  """

  __slots__ = ("_sig", "_lowered", "_computation", "_jit_options")

  def __init__(self, sig: _Signature, lowered: pjit.LoweredSignature):
    self._sig = sig
    self._lowered = lowered
    self._computation = None
    self._jit_options = None   # the compiler_options of the jit it comes from

  out_info = property(lambda self: self._sig.out_info())
  args_info = property(lambda self: self._sig.args_info())
  in_tree = property(lambda self: tree_util.PyTreeDef(self._sig.in_tree))
  in_avals = property(lambda self: self._sig.in_avals_tree())
  donate_argnums = property(lambda self: tuple(sorted(self._sig.donated)))
  out_tree = property(lambda self: tree_util.PyTreeDef(self._sig.entry.out_tree))

  def _xla_computation(self):
    if self._computation is None:
      self._computation = xc._xla.mlir.mlir_module_to_xla_computation(
          self._lowered.text, use_tuple_args=False, return_tuple=False)
    return self._computation

  def as_text(self, dialect: str = "stablehlo", *, debug_info: bool = False) -> str:
    """The module as text.

    Args:
      dialect: `"stablehlo"` (the module handed to XLA) or `"hlo"` (XLA's HLO text of it,
        before optimization).
      debug_info: with the locations of the arguments and ops (`loc("jit(f)/sin"(callsite(
        "f"("file.py":3:9 to :20) at ...)))`, aliased as `#locN` at the end, as JAX's
        `as_text(debug_info=True)`); the program is the same.

    Raises:
      ValueError: for another dialect.
    """
    if dialect == "stablehlo":
      return mlir_text.pretty(self._lowered.text, self._result_infos(), debug_info)
    if dialect == "hlo":
      return self._xla_computation().as_hlo_text()
    raise ValueError(f"Lowered.as_text: unknown dialect {dialect!r}; expected 'stablehlo' "
                     f"or 'hlo'.")

  def _result_infos(self) -> list[str]:
    return result_infos(self._sig.entry.out_tree)

  def compiler_ir(self, dialect: str = "stablehlo"):
    """The module in the compiler's representation.

    Args:
      dialect: `"stablehlo"` gives the module text (str); `"hlo"` gives XLA's computation
        object (`as_hlo_text()`, `as_serialized_hlo_module_proto()`, `as_hlo_dot_graph()`).

    Raises:
      ValueError: for another dialect.
    """
    if dialect == "stablehlo":
      return self._lowered.text
    if dialect == "hlo":
      return self._xla_computation()
    raise ValueError(f"Lowered.compiler_ir: unknown dialect {dialect!r}; expected "
                     f"'stablehlo' or 'hlo'.")

  def cost_analysis(self) -> CostAnalysis:
    """XLA's HLO cost analysis of the unoptimized module (`'flops'`, `'bytes accessed'`,
    ...), for the default backend."""
    backend = (self._sig.device or client.default_device()).client
    return CostAnalysis(xc._xla.hlo_module_cost_analysis(
        backend, self._xla_computation().as_hlo_module()))

  def compile(self, compiler_options: dict[str, Any] | None = None, *,
              device_assignment: tuple | None = None) -> Compiled:
    """Compiles the module with XLA.

    Args:
      compiler_options: XLA options by name (for example
        `{"xla_cpu_enable_fast_math": False}`), passed as option overrides; None or empty:
        the defaults (and the in-memory compilation cache).
      device_assignment: None, or the devices the program runs on; as JAX's, it must be
        the lowering's own (its mesh's devices, or the one device: the committed
        arguments' or the default device).

    Returns:
      A `Compiled` callable with the dynamic arguments of the signature.

    Raises:
      TypeError: if `compiler_options` is not a dict of str to bool/int/float/str.
      ValueError: a `device_assignment` other than the lowering's (JAX's message).
    """
    sig = self._sig
    if device_assignment is not None:
      mesh = self._lowered.mesh_layout
      spmd = self._lowered.spmd_devices
      own = (list(spmd) if spmd is not None else list(mesh[0].devices.flat)
             if mesh is not None else [sig.device or client.default_device()])
      given = list(device_assignment)
      if given != own:
        raise ValueError(
            f"device_assignment passed to `.compile` must match the device_assignment "
            f"calculated from array shardings and out_shardings. Got device ids passed to "
            f"compile {[d.id for d in given]} on platform {given[0].platform.upper()} and "
            f"devices ids calculated from array shardings and out_shardings "
            f"{[d.id for d in own]} on platform {own[0].platform.upper()}")
    exe = None
    if self._jit_options:
      compiler_options = {**self._jit_options, **(compiler_options or {})}
    if compiler_options:
      mesh = self._lowered.mesh_layout
      exe = _compile_with_options(self._lowered.text, sig.device, compiler_options,
                                  None if mesh is None else list(mesh[0].devices.flat))
    call = pjit.compile_lowered(self._lowered, sig.device, exe)
    return Compiled(sig, call)

  def __repr__(self):
    return _stage_repr(self, "Lowered")


def _compile_with_options(text: str, device, options: dict[str, Any], devices=None):
  pjit.check_compiler_options(options, "compile")
  devices = devices or [device or client.default_device()]
  opts = client.compile_options(1, len(devices), np.array([[d.id for d in devices]]))
  opts.env_option_overrides = list(options.items())
  dispatch.compile_count[0] += 1
  return devices[0].client.compile_and_load(text, client.device_list(tuple(devices)), opts)


class Compiled:
  """A function compiled for one argument signature. Call it with the dynamic arguments of
  that signature (the static ones are built in).

  Raises (on call):
    TypeError: if the arguments' tree structure differs from `in_tree`, if a leaf's shape or
      dtype differs from the compiled one (every leaf is checked, also those the program
      does not read), or if an argument is a tracer (a Compiled cannot be transformed by
      jit, grad, vmap, ...).
  """

  # NB: slots, no __dict__: `jit(compiled)` copies a wrapped function's __dict__ onto itself.
  # NB: weakly referenceable, as JAX's (jit of it raises its own error on tracers)
  __slots__ = ("_sig", "_executable", "__weakref__")

  def __init__(self, sig: _Signature, call: pjit.CompiledCall):
    self._sig = sig
    self._executable = call

  out_info = property(lambda self: self._sig.out_info())
  args_info = property(lambda self: self._sig.args_info())
  in_tree = property(lambda self: tree_util.PyTreeDef(self._sig.in_tree))
  in_avals = property(lambda self: self._sig.in_avals_tree())
  donate_argnums = property(lambda self: tuple(sorted(self._sig.donated)))
  out_tree = property(lambda self: tree_util.PyTreeDef(self._sig.entry.out_tree))

  def __call__(self, *args, **kwargs):
    leaves, tree = api_util.flatten((args, kwargs))
    for x in leaves:
      if isinstance(x, core.Tracer):
        raise TypeError(
            f"Cannot apply JAX transformations to a function lowered and compiled for a "
            f"particular signature. Detected argument of Tracer type {type(x)}. Call the "
            f"jitted function (`jit(f)`) inside transformations instead of its compiled "
            f"stage.")
    sig = self._sig
    if tree != sig.in_tree:
      errors = list(tree_util.equality_errors_pytreedef(sig.in_tree, tree))
      listed = "".join(f"\n    * at {_args_keystr(path)}, seen {a} but now given {b}, so {why}"
                       for path, a, b, why in errors)
      raise TypeError(
          f"Function compiled with input pytree does not match the input pytree it was "
          f"called with. There are {len(errors)} mismatches, including:{listed}")
    self._check_types(leaves)
    if config.no_execution:
      dispatch.raise_no_execution(f"jit({sig.name})")
    return self._executable(leaves)

  def _check_types(self, leaves: Sequence[Any]):
    sig = self._sig
    fun_name = sig.name
    mismatches = []
    for name, x, ref in zip(sig.arg_names, leaves, sig.in_avals):
      aval = x.aval if type(x) is Array else api_util.abstractify(x, name, fun_name)
      if aval is core.abstract_token or ref is core.abstract_token:   # a token argument
        if aval is not ref:
          mismatches.append(f"Argument '{name}' compiled with {ref.str_short(False)} and "
                            f"called with {aval.str_short(False)}")
      elif aval.shape != ref.shape or aval.dtype != ref.dtype:
        mismatches.append(f"Argument '{name}' compiled with {ref.str_short(False)} and "
                          f"called with {aval.str_short(False)}")
    if mismatches:
      listed = mismatches[:_MAX_LISTED]
      if len(mismatches) > _MAX_LISTED:
        listed.append(f"and {len(mismatches) - _MAX_LISTED} more")
      raise TypeError(
          "Argument types differ from the types for which this computation was compiled. "
          "Perhaps you are calling the compiled executable with a different enable_x64 mode "
          "than when it was AOT compiled? The mismatches are:\n" + "\n".join(listed) +
          "\nCall with matching types, or lower and compile again for the new types.")

  @property
  def input_shardings(self):
    """The layout of each argument: `(args, kwargs)` with a sharding per leaf (a
    NamedSharding for a program over a mesh, else the SingleDeviceSharding of its device)."""
    return tree_util.tree_unflatten(self._sig.in_tree, self._leaf_shardings())

  @property
  def output_shardings(self):
    """The layout of each output leaf, in the output's structure."""
    call = self._executable
    if isinstance(call, (pjit.ShardedCall, pjit.SpmdCall, _LoadedMultiDeviceCall)):
      outs = list(call.program.out_shardings)
    else:
      outs = [self._single()] * len(call.out_avals)
    return tree_util.tree_unflatten(self._sig.entry.out_tree, outs)

  @property
  def input_formats(self):
    """The `Format` of each argument, `(args, kwargs)` as `input_shardings`: the layout the
    program takes it in (as the runtime reports it; None for a program over several devices
    and for an argument the program does not read) and its sharding."""
    lays = self._executable_layouts()[0]
    return tree_util.tree_unflatten(self._sig.in_tree, [
        Format(l, s) for l, s in zip(lays, self._leaf_shardings())])

  @property
  def output_formats(self):
    """The `Format` of each output leaf, in the output's structure (layouts as the runtime
    reports them; None for a program over several devices)."""
    lays = self._executable_layouts()[1]
    shs = optree.tree_leaves(self.output_shardings, none_is_leaf=True,
                             namespace=tree_util.NAMESPACE)
    return tree_util.tree_unflatten(self._sig.entry.out_tree, [
        Format(l, s) for l, s in zip(lays, shs)])

  def _executable_layouts(self):
    """(per dynamic leaf, per output) the compiled layouts of a single-device program."""
    call = self._executable
    n_in, n_out = len(self._sig.in_avals), len(self._sig.entry.jaxpr.out_avals)
    if isinstance(call, pjit.FormatCall):
      return call.in_layouts, call.out_layouts
    if type(call) is not pjit.CompiledCall:
      return [None] * n_in, [None] * n_out
    params = call.exe.get_parameter_layouts()[len(call.const_bufs):]
    ins: list = [None] * n_in
    for i, p in zip(range(n_in) if call.kept is None else call.kept, params):
      ins[i] = Layout.from_pjrt_layout(p)
    return ins, [Layout.from_pjrt_layout(p) for p in call.exe.get_output_layouts()]

  def _single(self):
    return SingleDeviceSharding(self._executable.device or client.default_device())

  def _leaf_shardings(self) -> list:
    call = self._executable
    if isinstance(call, pjit.ShardedCall):
      return call.input_shardings()
    if isinstance(call, _LoadedMultiDeviceCall) and call.leaf_shardings is not None:
      return list(call.leaf_shardings)
    if isinstance(call, (pjit.SpmdCall, _LoadedMultiDeviceCall)):
      return [call.program.in_shardings[0]] * len(self._sig.in_avals)
    return [self._single()] * len(self._sig.in_avals)

  def as_text(self) -> str:
    """The optimized HLO text of the executable."""
    modules = self._executable.exe.hlo_modules()
    return "\n".join(m.to_string() for m in modules)

  def cost_analysis(self) -> CostAnalysis | None:
    """XLA's cost analysis of the compiled executable, or None if the backend has none."""
    try:
      return CostAnalysis(self._executable.exe.cost_analysis())
    except (RuntimeError, NotImplementedError):   # NB: backends without a cost model
      return None

  def memory_analysis(self):
    """XLA's memory statistics of the executable (`argument_size_in_bytes`,
    `output_size_in_bytes`, `temp_size_in_bytes`, `generated_code_size_in_bytes`, ...), or
    None if the backend has none."""
    try:
      return self._executable.exe.get_compiled_memory_stats()
    except (RuntimeError, NotImplementedError):
      return None

  def runtime_executable(self):
    """The PJRT loaded executable."""
    return self._executable.exe

  def serialize(self) -> bytes:
    """The executable and everything calling it needs, as bytes that `deserialize_compiled`
    loads in this or a fresh process with the same jaxlib, from the bytes alone.

    Held: the runtime's executable; argument names and avals; output avals; closed-over
    constants; the argument and output tree structures (`in_tree`, `out_tree`, in the
    explicit encoding `tree_to_json` of `stagecraft.export`); for programs over several
    devices (pmap inside jit, sharded jit) the device ids, the mesh and every layout. The
    format (`runtime.cache`) has a header with a format version, the jaxlib version and a
    SHA-256 checksum; no pickle is involved. A tree holding a node type that has no
    serialization registered (`stagecraft.export.register_pytree_node_serialization`) is
    left out: such bytes load only with the trees passed to `deserialize_compiled`.

    Raises:
      ValueError: for a one-device executable placed on a non-default device (compile
        without `device=`).
    """
    call, sig = self._executable, self._sig
    meta = {"kind": "stagecraft.Compiled", "name": sig.name, "arg_names": list(sig.arg_names),
            "in_avals": [aval_to_json(a) for a in sig.in_avals],
            "kept": call.kept, "donated": list(call.donated)}
    meta["in_tree"], meta["out_tree"], why = _trees_json(sig.in_tree, sig.entry.out_tree)
    if why:
      meta["tree_error"] = why
    if isinstance(call, pjit.CompiledCall):
      if call.device is not None:
        raise ValueError("Compiled.serialize: only one-device executables for the default "
                         "device can be serialized; compile without `device=`.")
      meta["program"] = "single"
      meta["out_avals"] = [aval_to_json(a) for a in call.out_avals]
      meta["consts"] = [_const_json(np.asarray(b)) for b in call.const_bufs]
      return cache.serialize_executable(call.exe, meta)
    program = call.program
    meta["program"] = "mesh" if _is_sharded(call) else "replicated"
    meta["devices"] = [d.id for d in program.devices]
    meta["main_in_avals"] = [aval_to_json(a) for a in program.in_avals]
    meta["out_avals"] = [aval_to_json(a) for a in program.out_avals]
    meta["program_donated"] = list(program.donated)
    meta["consts"] = [_const_json(np.asarray(c)) for c in call.consts]
    if meta["program"] == "mesh":
      mesh = call.mesh
      meta["mesh"] = {"ids": mesh.device_ids.tolist(), "shape": list(mesh.devices.shape),
                      "names": list(mesh.axis_names),
                      "types": [t.name for t in mesh.axis_types]}
      meta["in_specs"] = [_spec_json(sh) for sh in program.in_shardings]
      meta["out_specs"] = [_spec_json(sh) for sh in program.out_shardings]
      meta["leaf_specs"] = [_spec_json(sh) for sh in self._leaf_shardings()]
    return cache.serialize_executable(program.exe, meta)

  def __repr__(self):
    return _stage_repr(self, "Compiled")


def _args_keystr(path: tuple) -> str:
  """A key path into `(args, kwargs)` as JAX writes it: `args[0]['w']`, `kwargs['z'].a`."""
  if not path:
    return "(args, kwargs)"
  return ("args" if path[0][1] == 0 else "kwargs") + tree_util.node_path_str(path[1:])


def _is_sharded(call) -> bool:
  return isinstance(call, pjit.ShardedCall) or getattr(call, "mesh", None) is not None


def _const_json(c: np.ndarray) -> dict:
  return {"aval": aval_to_json(core.get_aval(c)),
          "data": base64.b64encode(np.ascontiguousarray(c).tobytes()).decode()}


def _const_from_json(c: dict) -> np.ndarray:
  aval = aval_from_json(c["aval"])
  return np.frombuffer(base64.b64decode(c["data"]), aval.dtype).reshape(aval.shape)


def _spec_json(sh: NamedSharding) -> list:
  return [None if p is None else (p if isinstance(p, str) else list(p)) for p in sh.spec]


def _spec_from_json(mesh: Mesh, spec: list) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec(*[p if p is None or isinstance(p, str)
                                              else tuple(p) for p in spec]))


# ---------------------------------------------------------------------------
# Avals and dtypes as JSON

_DTYPES_BY_NAME = {np.dtype(d).name: np.dtype(d) for d in (
    dtypes.bool_, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8,
    dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.bfloat16, dtypes.float16,
    dtypes.float32, dtypes.float64, dtypes.complex64, dtypes.complex128,
    dtypes.float8_e4m3fn, dtypes.float8_e5m2, dtypes.float0)}


def aval_to_json(a: ShapedArray) -> list:
  """`[shape, dtype name, weak_type]` of an aval (the serialized formats' encoding)."""
  return [list(a.shape), a.dtype.name, bool(a.weak_type)]


def aval_from_json(j) -> ShapedArray:
  """The ShapedArray of `aval_to_json`'s encoding.

  Raises:
    ValueError: for an encoding that is not `[list of int, known dtype name, bool]`.
  """
  try:
    shape, name, weak = j
    dtype = _DTYPES_BY_NAME[name]
    shape = tuple(int(d) for d in shape)
  except (TypeError, ValueError, KeyError):
    raise ValueError(f"not a serialized aval (expected [shape, dtype name, weak_type]): "
                     f"{j!r}") from None
  if any(d < 0 for d in shape) or not isinstance(weak, bool):
    raise ValueError(f"not a serialized aval (expected [shape, dtype name, weak_type]): "
                     f"{j!r}")
  return ShapedArray(shape, dtype, weak)


# ---------------------------------------------------------------------------
# Tree structures as JSON (the rules of JAX's `jax.export` serialization)
#
# A node is encoded as: "*" (a leaf), null (None), {"tuple": [...]}, {"list": [...]},
# {"dict": [[key, child], ...]} (str keys, in the dict's order), or
# {"custom": name, "aux": base64 bytes, "children": [...]} for a type registered with
# `register_pytree_node_serialization` (namedtuples: `register_namedtuple_serialization`).

_serialization_registry: dict[type, tuple[str, Callable[[Any], bytes]]] = {}
_deserialization_registry: dict[str, tuple[type, Callable[[bytes], Any], Callable]] = {}


def register_pytree_node_serialization(nodetype: type, *, serialized_name: str,
                                       serialize_auxdata: Callable[[Any], bytes],
                                       deserialize_auxdata: Callable[[bytes], Any],
                                       from_children: Callable | None = None) -> type:
  """Lets tree structures holding `nodetype` nodes be serialized (`Exported.serialize`,
  `Compiled.serialize`). JAX's `jax.export.register_pytree_node_serialization`.

  Args:
    nodetype: a pytree node class (registered with `tree_util.register_pytree_node` unless
      `from_children` is given).
    serialized_name: the name stored in the bytes; deserialization looks it up.
    serialize_auxdata: `aux_data -> bytes` (the aux data of the node's flatten function).
    deserialize_auxdata: `bytes -> aux_data`.
    from_children: `(aux_data, children) -> node`; default: the registered unflatten
      function.

  Returns:
    `nodetype` (usable as a class decorator).

  Raises:
    ValueError: `nodetype` or `serialized_name` registered already; no `from_children`
      for a type that is not a registered pytree node.
  """
  if nodetype in _serialization_registry:
    raise ValueError(f"Duplicate serialization registration for type `{nodetype}`. Previous "
                     f"registration was with serialized_name "
                     f"`{_serialization_registry[nodetype][0]}`.")
  if serialized_name in _deserialization_registry:
    raise ValueError(f"Duplicate serialization registration for serialized_name "
                     f"`{serialized_name}`. Previous registration was for type "
                     f"`{_deserialization_registry[serialized_name][0]}`.")
  if from_children is None:
    entry = optree.register_pytree_node.get(nodetype, namespace=tree_util.NAMESPACE)
    if entry is None or not tree_util.is_tree_node(nodetype):
      raise ValueError(f"If `from_children` is not present, you must call first "
                       f"`stagecraft.tree_util.register_pytree_node` for `{nodetype}`")
    from_children = entry.unflatten_func
  _serialization_registry[nodetype] = (serialized_name, serialize_auxdata)
  _deserialization_registry[serialized_name] = (nodetype, deserialize_auxdata, from_children)
  return nodetype


def _is_namedtuple(t: type) -> bool:
  return (isinstance(t, type) and issubclass(t, tuple)
          and isinstance(getattr(t, "_fields", None), tuple)
          and all(isinstance(f, str) for f in t._fields))


def register_namedtuple_serialization(nodetype: type, *, serialized_name: str) -> type:
  """Lets tree structures holding the namedtuple class `nodetype` be serialized (its field
  names are stored and must match on deserialization). JAX's
  `jax.export.register_namedtuple_serialization`.

  Raises:
    ValueError: `nodetype` is not a namedtuple class, or is registered already.
  """
  if not _is_namedtuple(nodetype):
    raise ValueError("Use `stagecraft.export.register_pytree_node_serialization` for types "
                     "other than `collections.namedtuple`.")

  def from_children(fields, children):
    if list(fields) != list(nodetype._fields):
      raise ValueError(f"the serialized namedtuple `{serialized_name}` has fields "
                       f"{list(fields)}, but {nodetype.__name__} has {list(nodetype._fields)}.")
    return nodetype(*children)

  return register_pytree_node_serialization(
      nodetype, serialized_name=serialized_name,
      serialize_auxdata=lambda _: json.dumps(list(nodetype._fields)).encode(),
      deserialize_auxdata=lambda b: json.loads(b.decode()), from_children=from_children)


def _ordered_dict_keys(keys) -> bytes:
  if not all(isinstance(k, str) for k in keys):
    raise NotImplementedError(f"Serialization of collections.OrderedDict is supported only "
                              f"when the keys are strings. Found keys: {keys}.")
  return json.dumps(list(keys)).encode()


register_pytree_node_serialization(
    collections.OrderedDict, serialized_name="collections.OrderedDict",
    serialize_auxdata=_ordered_dict_keys, deserialize_auxdata=lambda b: json.loads(b.decode()),
    from_children=lambda keys, children: collections.OrderedDict(zip(keys, children)))


class _Leaf:
  __slots__ = ()

  def __repr__(self):
    return "*"


_LEAF = _Leaf()


def tree_to_json(treedef) -> Any:
  """The JSON-able encoding of a tree structure (see the comment above).

  Raises:
    TypeError: a dict with a key that is not a str.
    ValueError: a node type without a registered serialization (the message says how to
      register one).
  """
  def enc(x):
    if x is _LEAF:
      return "*"
    if x is None:
      return None
    t = type(x)
    if t is tuple:
      return {"tuple": [enc(c) for c in x]}
    if t is list:
      return {"list": [enc(c) for c in x]}
    if t is dict:
      for k in x:
        if not isinstance(k, str):
          raise TypeError(f"Serialization is supported only for dictionaries with string "
                          f"keys. Found key {k} of type {type(k)}.")
      return {"dict": [[k, enc(v)] for k, v in x.items()]}
    if t in _serialization_registry:
      name, ser = _serialization_registry[t]
      children, aux = tree_util.flatten_one_level(x)
      data = ser(aux)
      if not isinstance(data, (bytes, bytearray)):
        raise ValueError(f"The custom serialization function for `{t}` must return a `bytes` "
                         f"object. It returned a {type(data)}.")
      return {"custom": name, "aux": base64.b64encode(bytes(data)).decode(),
              "children": [enc(c) for c in children]}
    raise ValueError(f"Cannot serialize PyTreeDef containing an unregistered type `{t}`. Use "
                     f"`stagecraft.export.register_pytree_node_serialization` or "
                     f"`stagecraft.export.register_namedtuple_serialization`.")
  return enc(tree_util.tree_unflatten(treedef, [_LEAF] * treedef.num_leaves))


def tree_from_json(obj: Any):
  """The tree structure (a PyTreeDef) of `tree_to_json`'s encoding.

  Raises:
    ValueError: a malformed encoding, or a custom node name not registered in this process
      (`register_pytree_node_serialization`).
  """
  def dec(x, depth):
    if depth > 1000:
      raise ValueError("serialized tree structure nested too deeply")
    if x == "*":
      return 0
    if x is None:
      return None
    if isinstance(x, dict) and len(x) == 1 and "tuple" in x and isinstance(x["tuple"], list):
      return tuple(dec(c, depth + 1) for c in x["tuple"])
    if isinstance(x, dict) and len(x) == 1 and "list" in x and isinstance(x["list"], list):
      return [dec(c, depth + 1) for c in x["list"]]
    if isinstance(x, dict) and len(x) == 1 and "dict" in x and isinstance(x["dict"], list):
      if not all(isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], str)
                 for kv in x["dict"]):
        raise ValueError(f"malformed serialized dict node: {x!r:.200}")
      return {k: dec(v, depth + 1) for k, v in x["dict"]}
    if isinstance(x, dict) and set(x) == {"custom", "aux", "children"}:
      name = x["custom"]
      if name not in _deserialization_registry:
        raise ValueError(f"Unknown custom PyTree node serialized_name `{name}`: register it "
                         f"with stagecraft.export.register_pytree_node_serialization (or "
                         f"register_namedtuple_serialization) before deserializing.")
      _, deser, from_children = _deserialization_registry[name]
      children = [dec(c, depth + 1) for c in x["children"]]
      return from_children(deser(base64.b64decode(x["aux"])), children)
    raise ValueError(f"malformed serialized tree node: {x!r:.200}")
  return tree_util.tree_structure(dec(obj, 0))


def _trees_json(in_tree, out_tree) -> tuple[Any, Any, str | None]:
  try:
    return tree_to_json(in_tree), tree_to_json(out_tree), None
  except (TypeError, ValueError, NotImplementedError) as e:
    return None, None, str(e)


class _LoadedEntry:
  """The part of a traced signature a deserialized Compiled needs (its outputs)."""
  __slots__ = ("out_tree", "jaxpr")

  def __init__(self, out_tree, out_avals):
    self.out_tree = out_tree
    self.jaxpr = _OutAvals(out_avals)


class _OutAvals:
  __slots__ = ("out_avals",)

  def __init__(self, out_avals):
    self.out_avals = out_avals


class _LoadedMultiDeviceCall:
  """A deserialized program over several devices: `program` (an SpmdExecutable), the
  constants it takes first, and for a mesh program the layout each leaf must have."""
  simple = False
  device = None

  def __init__(self, program, consts, kept, donated, in_avals, out_tree, mesh=None,
               leaf_shardings=None, names=()):
    self.program = program
    self.exe = program.exe
    self.consts = consts
    self.kept = kept
    self.donated = tuple(donated)
    self.in_avals = in_avals
    self.out_avals = program.out_avals
    self.out_tree = out_tree
    self.mesh = mesh
    self.leaf_shardings = leaf_shardings
    self.names = names

  def __call__(self, leaves: Sequence[Any]):
    idx = range(len(leaves)) if self.kept is None else self.kept
    if self.leaf_shardings is not None:
      for i in idx:
        x, sh = leaves[i], self.leaf_shardings[i]
        if type(x) is Array and (x._sharding is not None or x._device is not None):
          if x.sharding != sh:
            raise ValueError(
                f"Array(s) sharding does not match the input(s) sharding. Got Array sharding: "
                f"{x.sharding} and input sharding: {sh} for argument {self.names[i]} with "
                f"shape {x.aval.str_short()}\nMove the argument with "
                f"stagecraft.device_put(x, sharding) first.")
    outs = self.program.call([*self.consts, *[leaves[i] for i in idx]])
    return tree_util.tree_unflatten(self.out_tree, outs)


def deserialize_compiled(data: bytes, in_tree=None, out_tree=None) -> Compiled:
  """Rebuilds a `Compiled` from `Compiled.serialize()` bytes without tracing or compiling.

  Args:
    data: the bytes.
    in_tree: the treedef of the call's `(args, kwargs)` (`compiled.in_tree` when it was
      serialized); out_tree: the treedef of its output (`compiled.out_tree`). Either may be
      None (a stagecraft extension): the one stored in the bytes is used.

  Returns:
    A `Compiled` for the devices it was compiled for (the default device for a one-device
    program), type-checking its arguments as the original did.

  Raises:
    TypeError: `in_tree` or `out_tree` is neither None nor a PyTreeDef.
    ValueError: bytes that are not a serialized Compiled, are corrupt, or come from another
      format or jaxlib version (naming both); trees whose leaf counts disagree with it; a
      tree left as None that the bytes do not hold; devices this process lacks.
  """
  for what, tree in (("in_tree", in_tree), ("out_tree", out_tree)):
    if tree is not None and not tree_util.is_treedef(tree):
      raise TypeError(f"deserialize_compiled: {what} must be the treedef (a PyTreeDef) of the "
                      f"Compiled that was serialized (compiled.{what}) or None, got {tree!r} "
                      f"of type {type(tree).__name__}.")
  header = cache.header_of(data)
  meta = header.get("meta")
  if not isinstance(meta, dict) or meta.get("kind") != "stagecraft.Compiled":
    raise ValueError("deserialize_compiled: these bytes hold an executable but not a "
                     "serialized Compiled (Compiled.serialize() makes those).")
  try:
    return _rebuild(data, header, meta, in_tree, out_tree)
  except (KeyError, TypeError, IndexError) as e:   # a header of the right kind, malformed
    raise ValueError(f"deserialize_compiled: the serialized Compiled's header is malformed "
                     f"({type(e).__name__}: {e}); serialize the Compiled again.") from None


def _rebuild(data, header, meta, in_tree, out_tree) -> Compiled:
  program = meta.get("program", "single")
  for what in ("in_tree", "out_tree"):
    given = in_tree if what == "in_tree" else out_tree
    if given is None:
      if meta.get(what) is None:
        raise ValueError(f"deserialize_compiled: these bytes hold no {what} (the tree held a "
                         f"node type without a registered serialization: "
                         f"{meta.get('tree_error', 'an older format')}); pass the {what} of "
                         f"the Compiled that was serialized.")
      given = tree_from_json(meta[what])
    given = tree_util.spec_of(given)
    if what == "in_tree":
      in_tree = given
    else:
      out_tree = given
  in_avals = tuple(aval_from_json(a) for a in meta["in_avals"])
  out_avals = [aval_from_json(a) for a in meta["out_avals"]]
  if in_tree.num_leaves != len(in_avals) or out_tree.num_leaves != len(out_avals):
    raise ValueError(
        f"deserialize_compiled: the trees do not fit the executable: in_tree has "
        f"{in_tree.num_leaves} leaves for {len(in_avals)} arguments and out_tree "
        f"{out_tree.num_leaves} leaves for {len(out_avals)} outputs. Pass the in_tree and "
        f"out_tree of the Compiled that was serialized.")
  kept = meta["kept"]
  if kept is not None and any(not isinstance(i, int) or not 0 <= i < len(in_avals)
                              for i in kept):
    raise ValueError(f"deserialize_compiled: the header's kept arguments {kept} do not fit "
                     f"its {len(in_avals)} arguments; the bytes were altered.")
  used = [in_avals[i] for i in (range(len(in_avals)) if kept is None else kept)]
  const_values = [_const_from_json(c) for c in meta["consts"]]
  const_avals = [aval_from_json(c["aval"]) for c in meta["consts"]]
  donated = tuple(meta["donated"])
  names = tuple(meta["arg_names"])
  if program == "single":
    # NB: a one-device Compiled is serialized for the default device only; its payload runs
    # there, so a header naming another device was altered (loading it there would crash
    # the runtime).
    header_devices = header.get("devices")
    default = client.default_device()
    if header_devices != [default.id]:
      raise ValueError(f"deserialize_compiled: the header names devices {header_devices}, "
                       f"but a serialized Compiled runs on the default device ({default.id}); "
                       f"the bytes were altered or come from another kind of program.")
    exe, _ = cache.deserialize_executable(data, [default])
    cache.check_signature(exe, const_avals + used, out_avals, "deserialize_compiled")
    consts = [dispatch.to_buffer(c, a, transfer=None)
              for c, a in zip(const_values, const_avals)]
    call = pjit.CompiledCall(exe, kept, consts, list(in_avals), out_avals, out_tree, donated, "",
                            None)
  elif program in ("replicated", "mesh"):
    devs = _devices(meta["devices"], header)
    main_in = [aval_from_json(a) for a in meta["main_in_avals"]]
    if main_in != const_avals + used:
      raise ValueError("deserialize_compiled: the header's program arguments disagree with "
                       "its constants and kept arguments; the bytes were altered.")
    exe, _ = cache.deserialize_executable(data, devs)
    # NB: an SPMD executable's entry layout is per device (shards): check the argument
    # count and dtypes only, and let the mesh layouts (checked by the runtime) do the rest.
    _check_counts(exe, main_in, out_avals)
    pdonated = [int(i) for i in meta["program_donated"]]
    if program == "replicated":
      prog = spmd.replicated_program(exe, devs, main_in, out_avals, "", pdonated)
      consts = const_values
      call = _LoadedMultiDeviceCall(prog, consts, kept, donated, list(in_avals), out_tree)
    else:
      m = meta["mesh"]
      by_id = {d.id: d for d in devs}
      grid = np.array([by_id[i] for i in np.asarray(m["ids"]).flat],
                      dtype=object).reshape(tuple(m["shape"]))
      mesh = Mesh(grid, tuple(m["names"]), tuple(AxisType[t] for t in m["types"]))
      in_sh = [_spec_from_json(mesh, s) for s in meta["in_specs"]]
      out_sh = [_spec_from_json(mesh, s) for s in meta["out_specs"]]
      prog = spmd.SpmdExecutable(exe, devs, main_in, out_avals, in_sh, out_sh, "",
                                 pdonated, keep_replicated=True)
      consts = [Array(spmd.shard_arg(c, a, sh), a, None, sh)
                for c, a, sh in zip(const_values, const_avals, prog.in_shardings)]
      leaf_sh = [_spec_from_json(mesh, s) for s in meta["leaf_specs"]]
      call = _LoadedMultiDeviceCall(prog, consts, kept, donated, list(in_avals), out_tree,
                                    mesh, leaf_sh, names)
  else:
    raise ValueError(f"deserialize_compiled: unknown program kind {program!r} in the header; "
                     f"the bytes come from a newer stagecraft or were altered.")
  sig = _Signature(_LoadedEntry(out_tree, out_avals), in_tree, names, in_avals,
                   frozenset(donated), False, meta["name"], None)
  return Compiled(sig, call)


def _devices(ids, header) -> list:
  backend = client.get_backend(header.get("platform") if header.get("platform") !=
                               client.default_device().platform else None)
  by_id = {d.id: d for d in backend.local_devices()}
  missing = [i for i in ids if i not in by_id]
  if missing:
    raise ValueError(f"deserialize_compiled: the program was compiled for devices {list(ids)}, "
                     f"but this process has only devices {sorted(by_id)}; start the process "
                     f"with as many devices (e.g. XLA_FLAGS="
                     f"--xla_force_host_platform_device_count={len(ids)}).")
  return [by_id[i] for i in ids]


def _check_counts(exe, in_avals, out_avals) -> None:
  try:
    ins, outs = cache.entry_signature(exe)
  except (IndexError, ValueError):   # pragma: no cover (a runtime we do not know)
    return
  want_in = ["bool" if a.dtype.name == "void" else a.dtype.name for a in in_avals]
  want_out = ["bool" if a.dtype.name == "void" else a.dtype.name for a in out_avals]
  if [d for d, _ in ins] != want_in or [d for d, _ in outs] != want_out:
    raise ValueError("deserialize_compiled: the executable's arguments or results differ "
                     "from its header; the bytes were altered or belong to another program. "
                     "Serialize the Compiled again.")


CompilerOptions = dict[str, Union[str, bool]]
"""The type of `Lowered.compile(compiler_options=...)`: XLA option names to values."""


@runtime_checkable
class Wrapped(Protocol):
  """What `jit` returns: a function that can also be traced, lowered and compiled ahead of
  time for given arguments (`isinstance(jit(f), Wrapped)` is True)."""

  def __call__(self, *args, **kwargs):
    """Runs the function, tracing, lowering and compiling it first when needed."""
    raise NotImplementedError

  def trace(self, *args, **kwargs) -> Traced:
    """The `Traced` stage for these arguments (the jaxpr, not yet lowered)."""
    raise NotImplementedError

  def lower(self, *args, **kwargs) -> Lowered:
    """The `Lowered` stage for these arguments (the StableHLO module, not yet compiled)."""
    raise NotImplementedError
