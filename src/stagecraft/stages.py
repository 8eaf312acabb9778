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
from typing import Any, Protocol, Sequence, Union, runtime_checkable

import numpy as np
import optree
from jaxlib import xla_client as xc

from stagecraft import api_util, core, dtypes, pjit, tree_util
from stagecraft.core import ClosedJaxpr, ShapedArray, ShapeDtypeStruct
from stagecraft.runtime import cache, client, dispatch
from stagecraft.runtime.array import Array
from stagecraft.sharding import SingleDeviceSharding

__all__ = ["ArgInfo", "Traced", "Lowered", "Compiled", "CostAnalysis", "deserialize_compiled",
           "CompilerOptions", "Wrapped"]

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
    return optree.tree_unflatten(self.in_tree, infos)

  def out_info(self):
    return optree.tree_unflatten(self.entry.out_tree,
                                 [_sds(a) for a in self.entry.jaxpr.out_avals])


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
  device = wrapped._device if wrapped._device is not None else dev
  sig = _Signature(entry, in_tree, names, in_avals, frozenset(donated), wrapped._keep_unused,
                   api_util.fun_name(wrapped._fun), device, layout)
  return Traced(sig)


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
    entry = self._sig.entry
    jaxpr = entry.jaxpr.jaxpr
    n = len(entry.consts)
    return ClosedJaxpr(jaxpr.replace(constvars=jaxpr.invars[:n], invars=jaxpr.invars[n:]),
                       entry.consts)

  out_info = property(lambda self: self._sig.out_info())
  args_info = property(lambda self: self._sig.args_info())
  in_tree = property(lambda self: self._sig.in_tree)
  out_tree = property(lambda self: self._sig.entry.out_tree)

  def lower(self) -> Lowered:
    """Lowers the traced function to a StableHLO module (unused arguments pruned unless
    `keep_unused`; static arguments are constants of the module)."""
    sig = self._sig
    return Lowered(sig, pjit.lower_traced(sig.entry, set(sig.donated), sig.keep_unused,
                                         sig.name, layout=sig.layout))

  def __repr__(self):
    return f"Traced({self._sig.name})"


class Lowered:
  """A function lowered to a StableHLO module for one argument signature.

  Attributes:
    in_tree / out_tree, args_info, out_info: as on `Traced`.
  """

  __slots__ = ("_sig", "_lowered", "_computation")

  def __init__(self, sig: _Signature, lowered: pjit.LoweredSignature):
    self._sig = sig
    self._lowered = lowered
    self._computation = None

  out_info = property(lambda self: self._sig.out_info())
  args_info = property(lambda self: self._sig.args_info())
  in_tree = property(lambda self: self._sig.in_tree)
  out_tree = property(lambda self: self._sig.entry.out_tree)

  def _xla_computation(self):
    if self._computation is None:
      self._computation = xc._xla.mlir.mlir_module_to_xla_computation(
          self._lowered.text, use_tuple_args=False, return_tuple=False)
    return self._computation

  def as_text(self, dialect: str = "stablehlo") -> str:
    """The module as text.

    Args:
      dialect: `"stablehlo"` (the module handed to XLA) or `"hlo"` (XLA's HLO text of it,
        before optimization).

    Raises:
      ValueError: for another dialect.
    """
    if dialect == "stablehlo":
      return self._lowered.text
    if dialect == "hlo":
      return self._xla_computation().as_hlo_text()
    raise ValueError(f"Lowered.as_text: unknown dialect {dialect!r}; expected 'stablehlo' "
                     f"or 'hlo'.")

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

  def compile(self, compiler_options: dict[str, Any] | None = None) -> Compiled:
    """Compiles the module with XLA.

    Args:
      compiler_options: XLA options by name (for example
        `{"xla_cpu_enable_fast_math": False}`), passed as option overrides; None or empty:
        the defaults (and the in-memory compilation cache).

    Returns:
      A `Compiled` callable with the dynamic arguments of the signature.

    Raises:
      TypeError: if `compiler_options` is not a dict of str to bool/int/float/str.
    """
    sig = self._sig
    exe = None
    if compiler_options:
      mesh = self._lowered.mesh_layout
      exe = _compile_with_options(self._lowered.text, sig.device, compiler_options,
                                  None if mesh is None else list(mesh[0].devices.flat))
    call = pjit.compile_lowered(self._lowered, sig.device, exe)
    return Compiled(sig, call)

  def __repr__(self):
    return f"Lowered({self._sig.name})"


def _compile_with_options(text: str, device, options: dict[str, Any], devices=None):
  if not isinstance(options, dict):
    raise TypeError(f"compile: compiler_options must be a dict of option name to value, got "
                    f"{type(options).__name__}.")
  for k, v in options.items():
    if not isinstance(k, str) or not isinstance(v, (bool, int, float, str)):
      raise TypeError(f"compile: compiler_options must map option names (str) to bool, int, "
                      f"float or str values; got {k!r}: {v!r}.")
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
  __slots__ = ("_sig", "_executable")

  def __init__(self, sig: _Signature, call: pjit.CompiledCall):
    self._sig = sig
    self._executable = call

  out_info = property(lambda self: self._sig.out_info())
  args_info = property(lambda self: self._sig.args_info())
  in_tree = property(lambda self: self._sig.in_tree)
  out_tree = property(lambda self: self._sig.entry.out_tree)

  def __call__(self, *args, **kwargs):
    leaves, tree = api_util.flatten((args, kwargs))
    for x in leaves:
      if isinstance(x, core.Tracer):
        raise TypeError(
            f"Cannot apply JAX-style transformations to a function lowered and compiled for a "
            f"particular signature. Detected argument of Tracer type {type(x)}. Call the "
            f"jitted function (`jit(f)`) inside transformations instead of its compiled "
            f"stage.")
    sig = self._sig
    if tree != sig.in_tree:
      raise TypeError(
          f"Function compiled with input pytree does not match the input pytree it was "
          f"called with. Compiled for the structure of (args, kwargs)\n  {sig.in_tree}\nand "
          f"called with\n  {tree}.\nCall with arguments of the compiled structure (static "
          f"arguments left out), or lower and compile again.")
    self._check_types(leaves)
    return self._executable(leaves)

  def _check_types(self, leaves: Sequence[Any]):
    sig = self._sig
    fun_name = sig.name
    mismatches = []
    for name, x, ref in zip(sig.arg_names, leaves, sig.in_avals):
      aval = x.aval if type(x) is Array else api_util.abstractify(x, name, fun_name)
      if aval.shape != ref.shape or aval.dtype != ref.dtype:
        mismatches.append(f"Argument '{name}' compiled with {ref.str_short()} and called "
                          f"with {aval.str_short()}")
    if mismatches:
      listed = mismatches[:_MAX_LISTED]
      if len(mismatches) > _MAX_LISTED:
        listed.append(f"and {len(mismatches) - _MAX_LISTED} more")
      raise TypeError(
          "Argument types differ from the types for which this computation was compiled. "
          "The mismatches are:\n" + "\n".join(listed) +
          "\nCall with matching types, or lower and compile again for the new types.")

  @property
  def input_shardings(self):
    """The layout of each argument: `(args, kwargs)` with a sharding per leaf (a
    NamedSharding for a program over a mesh, else the SingleDeviceSharding of its device)."""
    return optree.tree_unflatten(self._sig.in_tree, self._leaf_shardings())

  @property
  def output_shardings(self):
    """The layout of each output leaf, in the output's structure."""
    call = self._executable
    if isinstance(call, pjit.ShardedCall):
      outs = list(call.program.out_shardings)
    elif isinstance(call, pjit.SpmdCall):
      outs = list(call.program.out_shardings)
    else:
      outs = [self._single()] * len(call.out_avals)
    return optree.tree_unflatten(self._sig.entry.out_tree, outs)

  def _single(self):
    return SingleDeviceSharding(self._executable.device or client.default_device())

  def _leaf_shardings(self) -> list:
    call = self._executable
    if isinstance(call, pjit.ShardedCall):
      return call.input_shardings()
    if isinstance(call, pjit.SpmdCall):
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
    """The executable and what calling it needs (argument names and avals, output avals,
    closed-over constants) as bytes, for `deserialize_compiled` in this or another process
    with the same jaxlib. The format (`runtime.cache`) has a header with a format version,
    the jaxlib version and a SHA-256 checksum; no pickle is involved.

    Raises:
      ValueError: for an executable placed on a non-default device (not supported).
    """
    call, sig = self._executable, self._sig
    if not isinstance(call, pjit.CompiledCall):
      raise ValueError("Compiled.serialize: programs over several devices (pmap, sharded "
                       "jit) cannot be serialized yet; serialize a one-device program.")
    if call.device is not None:
      raise ValueError("Compiled.serialize: only executables for the default device can be "
                       "serialized; compile without `device=`.")
    consts = [np.asarray(b) for b in call.const_bufs]
    meta = {
        "kind": "stagecraft.Compiled", "name": sig.name, "arg_names": list(sig.arg_names),
        "in_avals": [_aval_json(a) for a in call.in_avals],
        "out_avals": [_aval_json(a) for a in call.out_avals],
        "kept": call.kept, "donated": list(call.donated),
        "consts": [{"aval": _aval_json(core.get_aval(c)),
                    "data": base64.b64encode(np.ascontiguousarray(c).tobytes()).decode()}
                   for c in consts],
    }
    return cache.serialize_executable(call.exe, meta)

  def __repr__(self):
    return f"Compiled({self._sig.name})"


def _aval_json(a: ShapedArray) -> list:
  return [list(a.shape), a.dtype.name, bool(a.weak_type)]


def _aval_from_json(j) -> ShapedArray:
  shape, dtype, weak = j
  return ShapedArray(tuple(shape), dtypes.canonicalize_dtype(np.dtype(dtype)), weak)


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


def deserialize_compiled(data: bytes, in_tree, out_tree) -> Compiled:
  """Rebuilds a `Compiled` from `Compiled.serialize()` bytes without tracing or compiling.

  Args:
    data: the bytes.
    in_tree: the treedef of the call's `(args, kwargs)` (`compiled.in_tree` when it was
      serialized); out_tree: the treedef of its output (`compiled.out_tree`).

  Returns:
    A `Compiled` for the default device, type-checking its arguments as the original did.

  Raises:
    TypeError: `in_tree` or `out_tree` is not a PyTreeDef.
    ValueError: bytes that are not a serialized Compiled, are corrupt, or come from another
      format or jaxlib version (naming both); trees whose leaf counts disagree with it.
  """
  for what, tree in (("in_tree", in_tree), ("out_tree", out_tree)):
    if not isinstance(tree, tree_util.PyTreeDef):
      raise TypeError(f"deserialize_compiled: {what} must be the treedef (a PyTreeDef) of the "
                      f"Compiled that was serialized (compiled.{what}), got {tree!r} of type "
                      f"{type(tree).__name__}.")
  # NB: a Compiled is serialized for the default device only; its payload runs there, so a
  # header naming another device was altered (loading it there would crash the runtime).
  header_devices = cache.header_of(data).get("devices")
  default = client.default_device()
  if header_devices != [default.id]:
    raise ValueError(f"deserialize_compiled: the header names devices {header_devices}, but "
                     f"a serialized Compiled runs on the default device ({default.id}); the "
                     f"bytes were altered or come from another kind of program.")
  exe, meta = cache.deserialize_executable(data, [default])
  if meta.get("kind") != "stagecraft.Compiled":
    raise ValueError("deserialize_compiled: these bytes hold an executable but not a "
                     "serialized Compiled (Compiled.serialize() makes those).")
  in_avals = tuple(_aval_from_json(a) for a in meta["in_avals"])
  out_avals = [_aval_from_json(a) for a in meta["out_avals"]]
  if in_tree.num_leaves != len(in_avals) or out_tree.num_leaves != len(out_avals):
    raise ValueError(
        f"deserialize_compiled: the trees do not fit the executable: in_tree has "
        f"{in_tree.num_leaves} leaves for {len(in_avals)} arguments and out_tree "
        f"{out_tree.num_leaves} leaves for {len(out_avals)} outputs. Pass the in_tree and "
        f"out_tree of the Compiled that was serialized.")
  consts = []
  for c in meta["consts"]:
    aval = _aval_from_json(c["aval"])
    arr = np.frombuffer(base64.b64decode(c["data"]), aval.dtype).reshape(aval.shape)
    consts.append(dispatch.to_buffer(arr, aval))
  kept = meta["kept"]
  used = [in_avals[i] for i in (range(len(in_avals)) if kept is None else kept)]
  cache.check_signature(exe, [_aval_from_json(c["aval"]) for c in meta["consts"]] + used,
                        out_avals, "deserialize_compiled")
  call = pjit.CompiledCall(exe, kept, consts, list(in_avals), out_avals, out_tree,
                           tuple(meta["donated"]), "", None)
  sig = _Signature(_LoadedEntry(out_tree, out_avals), in_tree, tuple(meta["arg_names"]),
                   in_avals, frozenset(meta["donated"]), False, meta["name"], None)
  return Compiled(sig, call)


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
