"""Exporting jitted functions as versioned StableHLO (JAX's `jax.export`).

`export(jit(f))(*specs)` traces and lowers `f` for the given argument shapes and dtypes and
returns an `Exported`: the StableHLO module (as a StableHLO portable artifact, the
versioned bytecode StableHLO guarantees to load in later versions), the avals and tree
structures of the arguments and results, and the platform. `Exported.serialize()` gives
bytes that `deserialize` loads in another process; `Exported.call(*args)` runs the module
(eagerly, or inlined into the program being traced under `jit`), and is differentiable in
reverse mode (`grad`, `vjp`) through the exported VJP (`Exported.vjp()`, kept in the bytes
with `serialize(vjp_order=n)`), as in JAX.

What stagecraft exports: programs without host callbacks or ordered effects, for one or
several platforms (JAX's multi-platform convention: main takes the platform index first;
platforms whose lowerings differ get their own body, picked by `stablehlo.case`), on one
device or over a device mesh (JAX's device-polymorphic export: the arguments' shardings over
a Mesh or an AbstractMesh, jit's shardings, sharding constraints and shard_maps inside;
the module names the mesh's axes, not devices, and a call runs it on the caller's devices,
`nr_devices` of them). The rest raises a clear error (NotImplementedError). Shapes may hold
symbolic dimensions (`symbolic_shape("b, 4")`, JAX's shape polymorphism) for a subset of
primitives (elementwise operations, reductions, `dot_general`, transposes, concatenation,
broadcasts, reshapes, pads, iotas, slices, dynamic slices and updates, gathers, scatters,
sorts, cumulative reductions, argmin/argmax, cond, while, scan, `dim_as_value`; see
`_SYMBOLIC_OK` and `_SYMBOLIC_RULES`): the module then takes dynamic types
(`tensor<?x4xf32>`), and a call checks the concrete shapes (JAX's messages, those of JAX's
`shape_assertion`s, checked here before the call rather than in the module) and refines the
module to them. Their VJP has the same symbolic shapes.

The serialized format (not JAX's flatbuffers; `deserialize` reads only stagecraft's)::

  magic           8 bytes   b"SCEXPORT"
  sizes           14 bytes  big-endian: format version (u16), header length (u32),
                            payload length (u64)
  header          JSON (UTF-8): {"format": "stagecraft.Exported", "exported": [primal,
                  vjp, vjp of vjp, ...]}, one object per function with its fun_name, trees
                  (`stages.tree_to_json`), avals (weak types are not kept, as in JAX),
                  platforms, calling convention version, kept arguments, the mesh (axis
                  names, sizes, types) and each argument's and result's sharding over it
                  (axis names per dimension, or null), and the offset and size of its
                  module in the payload
  checksum        32 bytes  SHA-256 of everything above it followed by the payload
  payload         the modules' StableHLO portable artifacts, one after the other

Nothing is unpickled; a module is checked against its header (argument and result types of
its `main`) when it is loaded.
"""
from __future__ import annotations

import dataclasses
import io
import json
import re
from typing import Any, Callable, Sequence

import numpy as np
from jaxlib import xla_client as xc

from stagecraft import (api, api_util, core, custom_derivatives, dtypes, pjit, shape_poly, stages,
                        tree_util)
from stagecraft.core import ShapedArray, ShapeDtypeStruct
from stagecraft.errors import InconclusiveDimensionOperation
from stagecraft.interpreters import batching, lowering, mapping
from stagecraft.interpreters import partial_eval as pe
from stagecraft import lax
from stagecraft.lax import misc as lax_misc
from stagecraft.lax import slicing
from stagecraft.lax.conv import conv_dims_text, precision_config
from stagecraft.lax.reduction import max_identity, min_identity
from stagecraft.lax.windowed import select_and_scatter_add_p
from stagecraft.lax.control_flow import loops
from stagecraft.runtime import cache, client, mlir_text, spmd
from stagecraft.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

__all__ = ["DisabledSafetyCheck", "Exported", "export", "deserialize", "call",
           "call_exported", "call_exported_p", "default_export_platform",
           "minimum_supported_calling_convention_version",
           "maximum_supported_calling_convention_version", "register_pytree_node_serialization",
           "register_namedtuple_serialization", "symbolic_shape", "symbolic_args_specs",
           "is_symbolic_dim", "SymbolicScope", "FORMAT_VERSION"]

#: The calling conventions of exported modules this version writes and reads (JAX's range;
#: stagecraft's modules follow version 10 for one platform without effects: `main` takes the
#: kept array arguments and returns the results).
minimum_supported_calling_convention_version = 9
maximum_supported_calling_convention_version = 10
_CALLING_CONVENTION_VERSION = 10

#: The version of the byte format described in the module docstring.
FORMAT_VERSION = 3
_MAGIC = b"SCEXPORT"   # framed by runtime.cache.seal

register_pytree_node_serialization = stages.register_pytree_node_serialization
register_namedtuple_serialization = stages.register_namedtuple_serialization


class DisabledSafetyCheck:
  """A safety check to skip when exporting or calling (JAX's `DisabledSafetyCheck`): build
  one with `platform()` or `custom_call(target_name)`."""

  def __init__(self, _impl: str):
    self._impl = _impl

  @classmethod
  def platform(cls) -> "DisabledSafetyCheck":
    """Lets an Exported run on a platform other than the one it was exported for."""
    return cls("platform")

  @classmethod
  def custom_call(cls, target_name: str) -> "DisabledSafetyCheck":
    """Lets a custom call to `target_name`, which has no stability guarantee, be exported."""
    return cls(f"custom_call:{target_name}")

  def is_custom_call(self) -> str | None:
    """The custom call target this check allows, or None."""
    m = re.match(r"custom_call:(.+)$", self._impl)
    return m.group(1) if m else None

  def __str__(self):
    return self._impl

  __repr__ = __str__

  def __eq__(self, other):
    return isinstance(other, DisabledSafetyCheck) and self._impl == other._impl

  def __hash__(self):
    return hash(self._impl)


@dataclasses.dataclass(frozen=True, eq=False)
class Exported:
  """A jitted function lowered to StableHLO for one argument signature (JAX's `Exported`).

  Attributes:
    fun_name: the function's name (for messages).
    in_tree: the PyTreeDef of `(args, kwargs)`; out_tree: that of the result.
    in_avals / out_avals: the flat tuples of argument / result ShapedArrays.
    in_shardings_hlo / out_shardings_hlo: one None per argument / result, as JAX 0.10.2's
      exports (the layouts of a program over a mesh are given by `in_shardings_jax(mesh)`
      and `out_shardings_jax(mesh)`).
    nr_devices: the number of devices of the export mesh (1 for a one-device program).
    platforms: the platforms the module was lowered for; with several, main takes the
      platform's index first (`_platform_index`) and runs that platform's lowering.
    ordered_effects / unordered_effects: () (effectful programs are not exported).
    disabled_safety_checks: the `DisabledSafetyCheck`s given to `export`.
    mlir_module_serialized: the module as a StableHLO portable artifact (bytes).
    calling_convention_version: 10.
    module_kept_var_idx: the indices of the arguments the module takes (the others are
      unused and were pruned), sorted.
    uses_global_constants: whether main takes global constants: the platform index of a
      multi-platform module, or the dimension variables of symbolic avals (the module reads
      their values from the arguments' shapes).

  An Exported is compared and hashed by identity.
  """
  fun_name: str
  in_tree: Any
  in_avals: tuple
  out_tree: Any
  out_avals: tuple
  in_shardings_hlo: tuple
  out_shardings_hlo: tuple
  nr_devices: int
  platforms: tuple
  ordered_effects: tuple
  unordered_effects: tuple
  disabled_safety_checks: tuple
  mlir_module_serialized: bytes
  calling_convention_version: int
  module_kept_var_idx: tuple
  uses_global_constants: bool
  _get_vjp: Callable[["Exported"], "Exported"] | None = None
  _cache: dict = dataclasses.field(default_factory=dict, repr=False)
  # A program over a device mesh: per argument / result its NamedSharding over the export
  # mesh as an AbstractMesh (None: left to the partitioner); () for a one-device program.
  _in_named_shardings: tuple = ()
  _out_named_shardings: tuple = ()

  def mlir_module(self, serialized: bool = True) -> Any:
    """The module's text (the portable artifact printed by MLIR with its locations, as
    JAX's: `func.func public @main(%arg0: tensor<f32> loc("x")) -> (tensor<f32>
    {jax.result_info = "result"})`); with `serialized=False` the deserialized MLIR Module
    object instead (as JAX's)."""
    if not serialized:
      with _mlir_state()["ctx"]:
        return _load_module(self.mlir_module_serialized)
    text = self._cache.get("text")
    if text is None:
      with _mlir_state()["ctx"]:
        text = _load_module(self.mlir_module_serialized).operation.get_asm(
            enable_debug_info=True)
      # NB: the positions MLIR's parser gave the ops of stagecraft's module text (file "-")
      # say nothing to a reader: printed as unknown locations.
      text = self._cache["text"] = re.sub(r'loc\("-":\d+:\d+\)', "loc(unknown)", text)
    return text

  def __str__(self):
    return f"Exported(fun_name={self.fun_name}, ...)"

  __repr__ = __str__

  def in_shardings_jax(self, mesh: Any) -> tuple:
    """The argument layouts as NamedShardings over `mesh` (a Mesh or AbstractMesh with the
    export mesh's axis names, sizes and types), e.g. to `device_put` the arguments of a
    call; None for an argument left to the partitioner (every argument of a one-device
    export).

    Raises:
      ValueError: `mesh` differs from the export mesh in axis names, sizes or types (JAX's
        message).
    """
    return _named_on_mesh(self._in_named_shardings, self.in_avals, mesh)

  def out_shardings_jax(self, mesh: Any) -> tuple:
    """The result layouts as NamedShardings over `mesh` (as `in_shardings_jax`)."""
    return _named_on_mesh(self._out_named_shardings, self.out_avals, mesh)

  def has_vjp(self) -> bool:
    """Whether the VJP is available (`vjp()`): always for a fresh export, and for a
    deserialized one when it was serialized with `vjp_order >= 1`."""
    return self._get_vjp is not None

  def vjp(self) -> "Exported":
    """The exported VJP: takes the flat primal arguments then one cotangent per flat result,
    and returns the tuple of the flat arguments' cotangents.

    Raises:
      ValueError: "No VJP is available" (deserialized with `vjp_order=0`).
    """
    if self._get_vjp is None:
      raise ValueError("No VJP is available")
    return self._get_vjp(self)

  def serialize(self, vjp_order: int = 0) -> bytearray:
    """The bytes of this Exported (the format of this module's docstring), with the VJP
    functions up to `vjp_order` (2 allows `grad(grad(f))` of the deserialized function).

    Raises:
      ValueError: `vjp_order` negative, or more VJPs asked than are available; a tree
        holding a node type with no registered serialization.
      TypeError: a dict in a tree with a key that is not a str.
    """
    if not isinstance(vjp_order, int) or vjp_order < 0:
      raise ValueError(f"serialize: vjp_order must be a non-negative int, got {vjp_order!r}.")
    chain, exp = [], self
    for k in range(vjp_order + 1):
      chain.append(exp)
      if k < vjp_order:
        exp = exp.vjp()
    headers, modules, offset = [], [], 0
    for e in chain:
      module = bytes(e.mlir_module_serialized)
      headers.append(_header_of(e, offset, len(module)))
      modules.append(module)
      offset += len(module)
    payload = b"".join(modules)
    header = json.dumps({"format": "stagecraft.Exported", "exported": headers},
                        sort_keys=True, separators=(",", ":")).encode()
    return bytearray(cache.seal(_MAGIC, FORMAT_VERSION, (header,), payload))

  def call(self, *args, **kwargs):
    """Runs the exported function on `args`/`kwargs` (the tree structure, shapes and dtypes
    it was exported for), eagerly or inside `jit`; differentiable with `grad`/`vjp` (through
    `vjp()`), not with `jvp` nor `vmap` (as in JAX). A program exported over a mesh of
    `nr_devices` devices runs on the devices of its arguments (in their mesh's order), its
    arguments resharded as exported (`in_shardings_jax(mesh)` lays them out beforehand).

    Raises:
      ValueError: another tree structure, rank, dtype or dimension than exported; another
        platform than exported (unless `DisabledSafetyCheck.platform()`); a program
        exported for several devices called on another number of devices (JAX's message).
    """
    return call_exported(self)(*args, **kwargs)


# ---------------------------------------------------------------------------
# Symbolic shapes (the expressions are in stagecraft.shape_poly)

SymbolicScope = shape_poly.SymbolicScope
symbolic_shape = shape_poly.symbolic_shape
is_symbolic_dim = shape_poly.is_symbolic_dim


def symbolic_args_specs(args: Any, shapes_specs: Any, constraints: Sequence[str] = (),
                        scope: SymbolicScope | None = None):
  """JAX's `symbolic_args_specs`: ShapeDtypeStructs with symbolic shapes for `args` (one
  specification per leaf, or a prefix tree of them; all in one scope).

  Raises:
    ValueError: a malformed specification, or both `constraints` and `scope`.
  """
  leaves, tree = tree_util.tree_flatten(args)
  if shapes_specs is None or isinstance(shapes_specs, str):
    specs = [shapes_specs] * len(leaves)
  else:
    specs = tree_util.broadcast_prefix(shapes_specs, args)
  if scope is not None and constraints:
    raise ValueError("Cannot specify both a `scope` and `constraints`.")
  scope = scope or SymbolicScope(constraints)
  out = []
  for x, spec in zip(leaves, specs):
    shape = (tuple(np.shape(x)) if spec is None else
             symbolic_shape(spec, like=np.shape(x), scope=scope))
    out.append(ShapeDtypeStruct(shape, np.result_type(x)))
  return tree_util.tree_unflatten(tree, out)


# ---------------------------------------------------------------------------
# Exporting


def default_export_platform() -> str:
  """The platform `export` lowers for by default: `'cpu'`, `'cuda'`, `'rocm'` or `'tpu'`."""
  return _canonical_platform(client.default_device())


def _canonical_platform(device) -> str:
  p = device.platform
  if p == "gpu":
    return "rocm" if "rocm" in device.client.platform_version.lower() else "cuda"
  return p


def _lowering_platform(platform: str) -> str:
  # NB: JAX's lowering platform names (`cuda`, `rocm`; not PJRT's `gpu`): platform-dependent
  # code picks the branch of the exact platform.
  return platform


# Custom call targets with a stability guarantee (LAPACK/cuSOLVER kernels, partitioner
# markers); anything else needs DisabledSafetyCheck.custom_call(target).
_STABLE_TARGET = re.compile(
    r"^(lapack_[a-z]+_ffi|cusolver_[a-z]+_ffi|hipsolver_[a-z]+_ffi|cu_lu_pivots_to_permutation|"
    r"hip_lu_pivots_to_permutation|cusparse_gtsv2_ffi|cu_threefry2x32_ffi|"
    r"hip_threefry2x32_ffi|Sharding|SPMDFullToShardShape|SPMDShardToFullShape|"
    r"annotate_device_placement|stablehlo\.dynamic_reduce_window|shape_assertion)$")
_TARGET = re.compile(r'call_target_name\s*=\s*"([^"]*)"')


def export(fun_jit: Any, *, platforms: Sequence[str] | None = None,
           disabled_checks: Sequence[DisabledSafetyCheck] = ()) -> Callable[..., Exported]:
  """Exports a jitted function for serialization (JAX's `jax.export.export`).

  Args:
    fun_jit: the result of `stagecraft.jit` (or one of stagecraft's own functions, such
      as `jnp.sin`, which JAX's library jits).
    platforms: the platforms to lower for (`'cpu'`, `'cuda'`, `'rocm'`, `'tpu'`; a call
      runs the lowering of the platform it runs on); None or (): `default_export_platform()`.
    disabled_checks: `DisabledSafetyCheck`s to skip.

  Returns:
    A function taking the arguments (arrays, or `ShapeDtypeStruct`s / objects with `shape`
    and `dtype`, with a `sharding` over a Mesh or AbstractMesh for a program over a mesh;
    static arguments as values) and returning an `Exported`.

  Raises:
    TypeError: `platforms` is a string.
    ValueError: `fun_jit` is not a jitted function; an unknown or repeated platform; the
      module has custom calls with no stability guarantee (not allowed by
      `disabled_checks`); arguments sharded over several meshes.
    NotImplementedError: a primitive without a lowering for symbolic dimensions (named in
      the message), or a dimension variable that is no argument's dimension (alone or as
      `k*v + c`); symbolic dimensions in a program over a mesh; pmap; host callbacks or
      ordered effects.
    InconclusiveDimensionOperation: the function compares symbolic dimensions whose order
      depends on their values (JAX's error).

  Example:
    >>> import numpy as np, stagecraft as sc, stagecraft.numpy as jnp
    >>> exp = export(sc.jit(jnp.sin))(np.arange(4, dtype=np.float32))
    >>> exp.in_avals
    (ShapedArray(float32[4]),)
    >>> deserialize(exp.serialize()).call(np.zeros(4, np.float32))
    Array([0., 0., 0., 0.], dtype=float32)
  """
  if not isinstance(fun_jit, pjit.JitWrapped):
    if callable(fun_jit) and getattr(fun_jit, "__module__", "").startswith("stagecraft."):
      # NB: JAX's library functions (jnp.sin, ...) are jitted, so JAX exports them as they
      # are (`export(jnp.sin)` in its docstring); stagecraft's become jitted here.
      fun_jit = pjit.jit(fun_jit)
    else:
      raise ValueError(f"Function to be exported must be the result of `jit` but is: "
                       f"{fun_jit}")
  if platforms is None:
    platforms = (default_export_platform(),)
  if isinstance(platforms, str):
    raise TypeError(f"export: platforms must be a sequence of platform names, got the string "
                    f"{platforms!r}; write platforms=[{platforms!r}].")
  platforms = tuple(platforms) or (default_export_platform(),)   # NB: () as None, as JAX
  for p in platforms:
    if p not in ("cpu", "cuda", "rocm", "tpu"):
      raise ValueError(f"export: unknown platform {p!r}; expected one of 'cpu', 'cuda', "
                       f"'rocm', 'tpu'.")
  if len(set(platforms)) != len(platforms):
    raise ValueError(f"export: platforms {list(platforms)} names a platform twice.")
  disabled_checks = tuple(disabled_checks)
  for dc in disabled_checks:
    if not isinstance(dc, DisabledSafetyCheck):
      raise TypeError(f"export: disabled_checks must hold DisabledSafetyCheck objects, got "
                      f"{dc!r}.")

  def do_export(*args, **kwargs) -> Exported:
    args, kwargs, abstract = _strip_abstract_shardings(fun_jit, args, kwargs)
    traced = fun_jit.trace(*args, **kwargs)
    return _export_traced(traced, platforms, disabled_checks, abstract)

  return do_export


def _strip_abstract_shardings(fun_jit, args: tuple, kwargs: dict):
  """`args`/`kwargs` with each ShapeDtypeStruct sharded over an AbstractMesh made unsharded
  (jit traces it as any other), and the sharding of each dynamic leaf (None: none), or
  None when no leaf has one."""
  static, _ = fun_jit._argnums_for(len(args))
  dyn_pos = [i for i in range(len(args)) if i not in static]
  dyn = (tuple(args[i] for i in dyn_pos),
         {k: v for k, v in kwargs.items() if k not in fun_jit._static_argnames})
  found: list = []

  def strip(x):
    sh = getattr(x, "sharding", None) if isinstance(x, ShapeDtypeStruct) else None
    if isinstance(sh, NamedSharding) and isinstance(sh.mesh, AbstractMesh):
      found.append(sh)
      return ShapeDtypeStruct(x.shape, x.dtype, weak_type=x.weak_type)
    found.append(None)
    return x

  new_args, new_kwargs = tree_util.tree_map(strip, dyn)
  if all(f is None for f in found):
    return args, kwargs, None
  args = list(args)
  for j, i in enumerate(dyn_pos):
    args[i] = new_args[j]
  return tuple(args), {**kwargs, **new_kwargs}, found


def _export_layout(traced: stages.Traced, jaxpr, nconst: int, dce, abstract):
  """The device mesh of an exported program and its shardings: `(mesh, in_shardings (one
  per invar of `jaxpr`, constants first), out_shardings)`, None entries left to the
  partitioner; None for a one-device program. The mesh is the jit's (`runtime.spmd.resolve`:
  sharded arguments, jit's shardings, meshes used inside) or the AbstractMesh of the
  arguments' ShapeDtypeStructs (`abstract`: one NamedSharding or None per dynamic leaf)."""
  name = traced.fun_name
  n_dyn = len(jaxpr.invars) - nconst
  in_avals = [v.aval for v in jaxpr.invars[nconst:]]
  if abstract is not None:
    meshes = []
    for sh in abstract:
      if sh is not None and all(sh.mesh != m for m in meshes):
        meshes.append(sh.mesh)
    if len(meshes) > 1 or traced.sharded or spmd.jaxpr_meshes(dce):
      raise ValueError(f"export of {name}: the arguments' shardings are over "
                       f"{meshes[0]!r} but the program also uses "
                       f"{meshes[1] if len(meshes) > 1 else 'devices or another mesh'!r}; "
                       f"export a program over one mesh.")
    for i, sh in enumerate(abstract):
      if sh is not None:
        spmd.check_spec_fits(sh, in_avals[i], f"the sharding of argument "
                                              f"{traced.arg_names[i]} of {name}")
    return meshes[0], [None] * nconst + list(abstract), [None] * len(jaxpr.outvars)
  if not (traced.sharded or spmd.jaxpr_meshes(dce) or
          spmd.typed_context_mesh(jaxpr) is not None):
    return None
  lay = (traced.layout if traced.sharded else None) or pjit.SignatureLayout([None] * n_dyn, None, None,
                                              list(traced.arg_names), name)
  resolved = spmd.resolve(jaxpr, nconst, lay.committed, lay.explicit_in, lay.explicit_out,
                          lay.describe(in_avals))
  if resolved is None or resolved[0].size == 1:
    return None
  return resolved


def _export_traced(traced: stages.Traced, platforms: tuple, disabled_checks: tuple,
                   abstract: list | None = None) -> Exported:
  name = traced.fun_name
  closed = traced.lowered_jaxpr
  jaxpr = pe.convert_constvars_jaxpr(closed.jaxpr)
  nconst = len(closed.consts)
  n_in = len(jaxpr.invars)
  symbolic = any(_is_symbolic_aval(v.aval) for v in closed.jaxpr.invars)
  if symbolic:
    _check_scopes([v.aval for v in closed.jaxpr.invars], name)
  # NB: with symbolic dimensions every argument is kept: the module reads the dimension
  # variables from the arguments' shapes.
  instantiate = [False] * nconst + [traced.keep_unused or symbolic] * (n_in - nconst)
  dce, used = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate)
  if mapping.mesh_chain(dce):
    raise NotImplementedError(f"export of {name}: programs with pmap are not exported by "
                              f"stagecraft; write the pmap as a shard_map over a mesh.")
  # NB: the symbolic case is refused before the layout is resolved (whose spec checks would
  # fail first on a symbolic dimension, with a less useful message)
  if symbolic and (abstract is not None or traced.sharded or spmd.jaxpr_meshes(dce) or
                   spmd.typed_context_mesh(jaxpr) is not None):
    raise NotImplementedError(f"export of {name}: stagecraft exports programs over a device "
                              f"mesh with concrete shapes only (symbolic dimensions and "
                              f"shardings together are not supported).")
  layout = None if symbolic else _export_layout(traced, jaxpr, nconst, dce, abstract)
  if dce.effects:
    raise NotImplementedError(f"export of {name}: the program has effects "
                              f"({sorted(map(str, dce.effects))}); stagecraft exports "
                              f"effect-free programs only.")
  consts = [closed.consts[i] for i in range(nconst) if used[i]]
  kept = tuple(i - nconst for i in range(nconst, n_in) if used[i])
  in_avals = tuple(v.aval for v in closed.jaxpr.invars)
  out_avals = tuple(v.aval for v in closed.jaxpr.outvars)
  arg_names = [traced.arg_names[i] for i in kept]
  infos = stages.result_infos(traced.out_tree)
  mesh_layout = None
  in_named = out_named = ()
  nr_devices = 1
  if layout is not None:
    mesh, ins, outs = layout
    in_dyn = ins[nconst:]
    mesh_layout = (mesh, [in_dyn[i] for i in kept], outs)
    in_named = tuple(_abstract_named(s) for s in in_dyn)
    out_named = tuple(_abstract_named(s) for s in outs)
    nr_devices = mesh.size
  texts = []
  for platform in platforms:
    if symbolic:
      texts.append(_symbolic_module_text(name, dce, consts, [in_avals[i] for i in kept],
                                         platform, arg_names, infos))
    else:
      texts.append(_module_text(name, dce, consts, [in_avals[i] for i in kept], platform,
                                arg_names, infos, mesh_layout))
    _check_custom_calls(texts[-1], disabled_checks)
  text = texts[0] if len(texts) == 1 else _multi_platform_text(texts)
  module = _to_artifact(text)
  vjp_cache: list = []

  def get_vjp(primal: Exported) -> Exported:
    if not vjp_cache:
      vjp_cache.append(_export_vjp(primal, closed))
    return vjp_cache[0]

  return Exported(
      fun_name=name, in_tree=traced.in_tree, in_avals=in_avals, out_tree=traced.out_tree,
      # NB: as JAX 0.10.2's: the layouts are NamedShardings over the AbstractMesh
      # (`in_shardings_jax`); the HLO shardings are all None
      out_avals=out_avals, in_shardings_hlo=(None,) * len(in_avals),
      out_shardings_hlo=(None,) * len(out_avals), nr_devices=nr_devices,
      platforms=platforms, ordered_effects=(), unordered_effects=(),
      disabled_safety_checks=disabled_checks, mlir_module_serialized=module,
      calling_convention_version=_CALLING_CONVENTION_VERSION, module_kept_var_idx=kept,
      uses_global_constants=symbolic or len(platforms) > 1, _get_vjp=get_vjp,
      _in_named_shardings=in_named,
      _out_named_shardings=out_named)


# ---------------------------------------------------------------------------
# Shardings of a program over a device mesh


def _abstract_named(s: NamedSharding | None) -> NamedSharding | None:
  """`s` over its mesh's AbstractMesh (an exported artifact names no devices)."""
  if s is None:
    return None
  return NamedSharding(s.mesh.abstract_mesh, s.spec, memory_kind=s.memory_kind)


def _named_on_mesh(named: tuple, avals: tuple, mesh: Any) -> tuple:
  if not named:
    return (None,) * len(avals)
  out = []
  for s in named:
    if s is None:
      out.append(None)
      continue
    am = mesh.abstract_mesh
    if (am.axis_sizes != s.mesh.axis_sizes or am.axis_names != s.mesh.axis_names or
        am.axis_types != s.mesh.axis_types):
      raise ValueError(f"NamedSharding new mesh {mesh} does not match the mesh used for "
                       f"export {s.mesh}.")
    out.append(NamedSharding(mesh, s.spec, memory_kind=s.memory_kind))
  return tuple(out)


def _mesh_of(exported: Exported) -> AbstractMesh | None:
  for s in (*exported._in_named_shardings, *exported._out_named_shardings):
    if s is not None:
      return s.mesh
  return None


def _sdy_text(s: NamedSharding, ndim: int, mesh_symbol: str) -> str:
  """Shardy's `<@mesh_symbol, [{"a"}, {}]>` for `s` on a rank-`ndim` value."""
  text = s._sdy(ndim)
  assert text.startswith("<@mesh,")
  return f"<@{mesh_symbol}," + text[len("<@mesh,"):]


def _arg_loc(arg_names: Sequence[str] | None, i: int) -> str:
  """The location of main's argument `i`: its name, as JAX's exported modules (`loc("x")`)."""
  if not arg_names:
    return ""
  return " loc(" + json.dumps(arg_names[i]) + ")"


def _result_attr(result_infos: Sequence[str] | None, i: int) -> str:
  if not result_infos:
    return ""
  return " {jax.result_info = " + json.dumps(result_infos[i]) + "}"


def _module_text(name: str, jaxpr, consts: Sequence[Any], arg_avals: Sequence[ShapedArray],
                 platform: str, arg_names: Sequence[str] | None = None,
                 result_infos: Sequence[str] | None = None, mesh_layout=None) -> str:
  """A self-contained module: `main(kept args)` makes the constants (in the text) and calls
  the lowered program. Main's arguments carry their names as locations and its results
  JAX's `jax.result_info`. With `mesh_layout` (`(mesh, in_shardings of the kept arguments,
  out_shardings)`) the module is a program over that mesh (Shardy's `sdy.mesh`, and
  `sdy.sharding` on main's arguments and results that have one), as jit lowers it."""
  mesh = None if mesh_layout is None else mesh_layout[0]
  if mesh is None:
    module = lowering.ModuleContext(f"jit_{name}", platform=_lowering_platform(platform))
  else:
    module = lowering.ModuleContext(
        f"jit_{name}", platform=_lowering_platform(platform), num_partitions=mesh.size,
        axis_env=[(mapping.UnboundAxis(k), s) for k, s in enumerate(mesh.axis_sizes)])
    module.mesh = [(mesh.sdy_axis_names[n], int(s)) for n, s in mesh.shape.items()]
    module.sdy_mesh = mesh
  body_name = module.unique_func_name(f"_{lowering.sanitize_name(name)}_body")
  with lowering.bound_axes(module.axis_env):
    body = lowering.lower_jaxpr_to_fun(module, body_name, jaxpr)
  if module.host_callbacks:
    raise NotImplementedError("serialization of host_callbacks is not yet implemented")
  lines, operands = [], []
  for i, c in enumerate(consts):
    c = np.asarray(c)
    aval = jaxpr.invars[i].aval
    lines.append(f"    %c{i} = stablehlo.constant {lowering.dense_array(c.astype(aval.dtype))}"
                 f" : {lowering.ir_type(aval)}")
    operands.append(f"%c{i}")
  operands += [f"%arg{i}" for i in range(len(arg_avals))]
  in_types = [lowering.ir_type(v.aval) for v in jaxpr.invars]
  out_types = [lowering.ir_type(v.aval) for v in jaxpr.outvars]
  n = len(out_types)
  lhs = "%r = " if n == 1 else (f"%r:{n} = " if n else "")
  lines.append(f"    {lhs}func.call @{body_name}({', '.join(operands)}) : "
               f"({', '.join(in_types)}) -> ({', '.join(out_types)})")
  results = ["%r"] if n == 1 else [f"%r#{i}" for i in range(n)]
  lines.append(f"    return {', '.join(results)} : {', '.join(out_types)}" if n else
               "    return")
  in_sh = mesh_layout[1] if mesh_layout else [None] * len(arg_avals)
  out_sh = mesh_layout[2] if mesh_layout else [None] * len(out_types)
  args = ", ".join(
      f"%arg{i}: {lowering.ir_type(a)}"
      + (f" {{sdy.sharding = #sdy.sharding{s._sdy(len(a.shape))}}}" if s is not None else "")
      + _arg_loc(arg_names, i) for i, (a, s) in enumerate(zip(arg_avals, in_sh)))
  res = []
  for i, (t, s, v) in enumerate(zip(out_types, out_sh, jaxpr.outvars)):
    attrs = [f"jax.result_info = {json.dumps(result_infos[i])}"] if result_infos else []
    if s is not None:
      attrs.append(f"sdy.sharding = #sdy.sharding{s._sdy(len(v.aval.shape))}")
    res.append(t + (" {" + ", ".join(attrs) + "}" if attrs else ""))
  main = (f"  func.func public @main({args}) -> ({', '.join(res)}) {{\n"
          + "\n".join(lines) + "\n  }")
  funcs = "\n".join([*module.extra_ops, main, body, *module.funcs])
  if module.mesh:
    axes = ", ".join(f'"{n}"={s}' for n, s in module.mesh)
    funcs = f"  sdy.mesh @mesh = <[{axes}]>\n{funcs}"
  return (f"module @{module.name} attributes {{jax.uses_shape_polymorphism = false, "
          f"mhlo.num_partitions = {module.num_partitions} : i32, mhlo.num_replicas = 1 : i32}}"
          f" {{\n{funcs}\n}}\n")


def _multi_platform_text(texts: Sequence[str]) -> str:
  """One module for several platforms (JAX's multi-platform calling convention), from one
  module per platform (`texts`, in the order of `platforms`): `main` takes the platform's
  index in `platforms` first (`tensor<i32> {jax.global_constant = "_platform_index"}`), then
  the kept arguments. Platforms whose modules are the same text share one body (a program
  without platform-specific lowerings is the single-platform module plus that index);
  otherwise `stablehlo.case` on the index runs the platform's own body."""
  groups = list(dict.fromkeys(texts))
  st = _mlir_state()
  ir = st["ir"]
  funcs, others, mains = [], {}, []
  with st["ctx"], ir.Location.unknown():
    for g, text in enumerate(groups):
      mod = ir.Module.parse(text)
      ops = list(mod.body.operations)
      if g == 0:
        attrs = mod.operation.attributes
        head_attrs = ", ".join(f"{k} = {attrs[k]}" for k in attrs if k != "sym_name")
        mod_name = ir.StringAttr(mod.operation.attributes["sym_name"]).value
        main = next(op for op in ops if op.operation.name == "func.func" and
                    ir.StringAttr(op.attributes["sym_name"]).value == "main")
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        in_types = [str(t) for t in ftype.inputs]
        out_types = [str(t) for t in ftype.results]
        arg_attrs = (list(ir.ArrayAttr(main.attributes["arg_attrs"]))
                     if "arg_attrs" in main.attributes else [None] * len(in_types))
        res_attrs = (list(ir.ArrayAttr(main.attributes["res_attrs"]))
                     if "res_attrs" in main.attributes else [None] * len(out_types))
        arg_locs = [str(a.location) for a in main.regions[0].blocks[0].arguments]
      names = [ir.StringAttr(op.attributes["sym_name"]).value for op in ops
               if op.operation.name == "func.func"]
      renames = {n: f"{n}__platform{g}" for n in names
                 if n == "main" or len(groups) > 1}
      _rename_symbols(ir, mod, renames)
      for op in ops:
        if op.operation.name != "func.func":   # e.g. `sdy.mesh`: the same in every group
          key = (ir.StringAttr(op.attributes["sym_name"]).value
                 if "sym_name" in op.attributes else str(op))
          if others.setdefault(key, str(op)) != str(op):
            raise NotImplementedError(f"export: the platforms' modules disagree on "
                                      f"{key}; export once per platform.")
          continue
        if ir.StringAttr(op.attributes["sym_name"]).value == renames.get("main"):
          op.attributes["sym_visibility"] = ir.StringAttr.get("private")
          for k in ("arg_attrs", "res_attrs"):
            if k in op.attributes:
              del op.attributes[k]
        funcs.append("  " + op.operation.get_asm(enable_debug_info=True).replace("\n", "\n  "))
      mains.append(renames["main"])
  args = [f"%arg{i + 1}" for i in range(len(in_types))]
  sig = ['%arg0: tensor<i32> {jax.global_constant = "_platform_index"}']
  for a, t, attr, loc in zip(args, in_types, arg_attrs, arg_locs):
    sig.append(f"{a}: {t}" + (f" {attr}" if attr is not None and str(attr) != "{}" else "")
               + (f" {loc}" if loc != "loc(unknown)" else ""))
  res = [t + (f" {attr}" if attr is not None and str(attr) != "{}" else "")
         for t, attr in zip(out_types, res_attrs)]
  n = len(out_types)
  fn_type = f"({', '.join(in_types)}) -> ({', '.join(out_types)})"

  def call(fname: str, indent: str) -> tuple[list[str], list[str]]:
    lhs = "%r = " if n == 1 else (f"%r:{n} = " if n else "")
    vals = ["%r"] if n == 1 else [f"%r#{i}" for i in range(n)]
    return [f"{indent}{lhs}func.call @{fname}({', '.join(args)}) : {fn_type}"], vals

  if len(groups) == 1:
    body, outs = call(mains[0], "    ")
  else:
    regions = []
    for text in texts:
      lines, vals = call(mains[groups.index(text)], "      ")
      ret_types = ", ".join(out_types)
      lines.append(f'      "stablehlo.return"({", ".join(vals)}) : ({ret_types}) -> ()')
      regions.append("{\n" + "\n".join(lines) + "\n    }")
    lhs = "%c = " if n == 1 else (f"%c:{n} = " if n else "")
    body = [f'    {lhs}"stablehlo.case"(%arg0) ({", ".join(regions)}) : (tensor<i32>) -> '
            f'({", ".join(out_types)})']
    outs = ["%c"] if n == 1 else [f"%c#{i}" for i in range(n)]
  ret = f"    return {', '.join(outs)} : {', '.join(out_types)}" if n else "    return"
  main_text = (f"  func.func public @main({', '.join(sig)}) -> ({', '.join(res)}) {{\n"
               + "\n".join([*body, ret]) + "\n  }")
  parts = ["  " + o for o in others.values()] + [main_text, *funcs]
  return (f"module @{mod_name} attributes {{{head_attrs}}} {{\n" + "\n".join(parts)
          + "\n}\n")


def _rename_symbols(ir, mod, renames: dict) -> None:
  """Renames the functions of `mod` (old name -> new name) and every use of them."""
  ops = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in mod.body.operations
         if "sym_name" in op.attributes}
  # NB: two passes through temporary names, so a new name equal to an old one is safe.
  for stage in (0, 1):
    for i, (old, new) in enumerate(renames.items()):
      frm = old if stage == 0 else f"__stagecraft_tmp_{i}"
      to = f"__stagecraft_tmp_{i}" if stage == 0 else new
      ir.SymbolTable.replace_all_symbol_uses(frm, to, mod.operation)
      ir.SymbolTable.set_symbol_name(ops[old], to)


def _platform_index(exported: Exported, here: str) -> int:
  """The index in `exported.platforms` of the platform `here` (0 when it is not there and
  the platform check is disabled)."""
  if here in exported.platforms:
    return exported.platforms.index(here)
  if here == "cuda" and "rocm" in exported.platforms:
    return exported.platforms.index("rocm")
  return 0


def _check_custom_calls(text: str, disabled_checks: Sequence[DisabledSafetyCheck]) -> None:
  allowed = {dc.is_custom_call() for dc in disabled_checks} - {None}
  bad = sorted({t for t in _TARGET.findall(text)
                if not _STABLE_TARGET.match(t) and t not in allowed and "ALL" not in allowed})
  if bad:
    raise ValueError(
        f"Cannot serialize code with custom calls whose targets have no compatibility "
        f"guarantees. The targets are: {', '.join(bad)}. Allow one with "
        f"disabled_checks=[DisabledSafetyCheck.custom_call(target_name)].")


def _export_vjp(primal: Exported, closed) -> Exported:
  """Exports the VJP of the primal's jaxpr: flat primal arguments and one cotangent per flat
  result in, the tuple of the arguments' cotangents out (JAX's layout)."""
  n_in = len(primal.in_avals)

  def fun_vjp_jax(*args_and_cts):
    primals, cts = args_and_cts[:n_in], args_and_cts[n_in:]
    _, pullback = api.vjp(lambda *xs: core.eval_jaxpr(closed.jaxpr, closed.consts, *xs),
                          *primals)
    return tuple(pullback(list(cts)))

  specs = [ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)
           for a in (*primal.in_avals, *map(_tangent_aval, primal.out_avals))]
  traced = pjit.jit(fun_vjp_jax).trace(*specs)
  return _export_traced(traced, primal.platforms, primal.disabled_safety_checks)


def _tangent_aval(a: ShapedArray) -> ShapedArray:
  if dtypes.is_inexact(a.dtype):
    return ShapedArray(a.shape, a.dtype, a.weak_type)
  return ShapedArray(a.shape, dtypes.float0, a.weak_type)


# ---------------------------------------------------------------------------
# Symbolic dimensions (shape polymorphism): export, lowering, calling
#
# A program traced with symbolic avals (`f32[b,4]`) lowers to a module whose `main` takes
# dynamic types (`tensor<?x4xf32>`): it reads each dimension variable from an argument's
# shape (`stablehlo.get_dimension_size`), and the ops whose shapes depend on them take
# their shapes as runtime operands (`dynamic_broadcast_in_dim`, `dynamic_reshape`,
# `dynamic_iota`), as JAX's modules do. A call for concrete shapes checks them against the
# symbolic avals, then refines the module to those shapes (jaxlib's
# `refine_polymorphic_shapes`, StableHLO's shape refinement) and runs or inlines the
# refined module as a concrete one. The primitives supported with symbolic shapes are
# those of `_SYMBOLIC_OK` and `_SYMBOLIC_RULES`; others raise NotImplementedError.


class _Dyn:
  """A dynamic dimension in a type: prints `?` (`tensor<?x4xf32>`)."""
  __slots__ = ()

  def __str__(self):
    return "?"

  __repr__ = __str__


_DYN = _Dyn()


def _is_symbolic_aval(a) -> bool:
  return isinstance(a, ShapedArray) and not shape_poly.is_constant_shape(a.shape)


def _dyn_aval(a):
  """`a` with its symbolic dimensions made dynamic (for the types of the module)."""
  if not _is_symbolic_aval(a):
    return a
  return ShapedArray(tuple(_DYN if shape_poly.is_symbolic_dim(d) else d for d in a.shape),
                     a.dtype, a.weak_type)


def _dyn_type(a) -> str:
  return lowering.ir_type(_dyn_aval(a))


def _check_scopes(avals: Sequence[ShapedArray], fun_name: str) -> None:
  scopes = {id(d.scope): d for a in avals for d in a.shape if shape_poly.is_symbolic_dim(d)}
  if len(scopes) > 1:
    d1, d2 = list(scopes.values())[:2]
    raise ValueError(f"Invalid mixing of symbolic scopes when exporting {fun_name}: the "
                     f"dimensions '{d1}' and '{d2}' come from different scopes; parse them "
                     f"with one `symbolic_shape` call, or pass `scope=`.")


def _dim_solutions(avals: Sequence[ShapedArray], fun_name: str) -> dict:
  """For each dimension variable, where its value comes from: (argument index, dimension
  index, coefficient, constant) of the first argument dimension `coef*v + const` (JAX
  solves more general systems; stagecraft these)."""
  out: dict = {}
  for i, a in enumerate(avals):
    for j, d in enumerate(a.shape):
      if not shape_poly.is_symbolic_dim(d) or len(d.get_vars()) != 1:
        continue
      (v,) = d.get_vars()
      lin = d - shape_poly.parse_dim(v, d.scope)
      const = lin if shape_poly.is_constant_dim(lin) else None
      if const is None:   # not `v + c`: try `k*v + c`
        for k in range(2, 65):
          r = d - k * shape_poly.parse_dim(v, d.scope)
          if shape_poly.is_constant_dim(r):
            const = r
            break
        else:
          continue
      else:
        k = 1
      prev = out.get(v)
      if prev is None or (prev[2], prev[3]) != (1, 0) and (k, const) == (1, 0):
        out[v] = (i, j, k, const)
  missing = sorted(set(shape_poly.dim_vars([a.shape for a in avals])) - set(out))
  if missing:
    raise NotImplementedError(
        f"export of {fun_name}: the dimension variables {missing} do not appear alone (or "
        f"as `k*v + c`) in an argument's shape; stagecraft solves only those. Use a "
        f"specification where each variable is some argument's dimension.")
  return out


def _emit(fb, line: str) -> None:
  fb.lines.append(line)


def _i64_const(fb, k: int) -> str:
  key = ("__dim_const", int(k))
  r = fb.consts.get(key)
  if r is None:
    r = fb.fresh()
    _emit(fb, f"{r} = stablehlo.constant dense<{int(k)}> : tensor<i64>")
    fb.consts[key] = r
  return r


def _dim_value(fb, d) -> str:
  """An SSA value `tensor<i64>` holding the dimension `d` (int or expression)."""
  if shape_poly.is_constant_dim(d):
    return _i64_const(fb, d)
  key = ("__dim", d)
  r = fb.consts.get(key)
  if r is not None:
    return r

  def binop(op):
    def f(a, b):
      out = fb.fresh()
      _emit(fb, f"{out} = stablehlo.{op} {a}, {b} : tensor<i64>")
      return out
    return f

  add, mul, sub = binop("add"), binop("multiply"), binop("subtract")
  div, rem = binop("divide"), binop("remainder")
  maximum, minimum = binop("maximum"), binop("minimum")

  def less_than_zero(x):
    out = fb.fresh()
    _emit(fb, f"{out} = stablehlo.compare LT, {x}, {_i64_const(fb, 0)}, SIGNED : "
              f"(tensor<i64>, tensor<i64>) -> tensor<i1>")
    return out

  def select(c, a, b):
    out = fb.fresh()
    _emit(fb, f"{out} = stablehlo.select {c}, {a}, {b} : tensor<i1>, tensor<i64>")
    return out

  def sign_differs(r, k):   # r != 0 and sign(r) != sign(k), for k != 0
    nonzero, differs = fb.fresh(), fb.fresh()
    _emit(fb, f"{nonzero} = stablehlo.compare NE, {r}, {_i64_const(fb, 0)}, SIGNED : "
              f"(tensor<i64>, tensor<i64>) -> tensor<i1>")
    _emit(fb, f"{differs} = stablehlo.compare NE, {less_than_zero(r)}, {less_than_zero(k)}, "
              f"UNSIGNED : (tensor<i1>, tensor<i1>) -> tensor<i1>")
    out = fb.fresh()
    _emit(fb, f"{out} = stablehlo.and {nonzero}, {differs} : tensor<i1>")
    return out

  def floordiv(a, k):
    if not isinstance(k, str):   # floor division by a positive constant
      r = rem(a, _i64_const(fb, k))
      return sub(div(a, _i64_const(fb, k)),
                 select(less_than_zero(r), _i64_const(fb, 1), _i64_const(fb, 0)))
    # by a symbolic dimension's value: Python's floor division (toward -inf)
    return sub(div(a, k), select(sign_differs(rem(a, k), k), _i64_const(fb, 1),
                                 _i64_const(fb, 0)))

  def mod(a, k):
    if not isinstance(k, str):
      r = rem(a, _i64_const(fb, k))
      return add(r, select(less_than_zero(r), _i64_const(fb, k), _i64_const(fb, 0)))
    r = rem(a, k)
    return add(r, select(sign_differs(r, k), k, _i64_const(fb, 0)))

  r = d.evaluate(fb.dim_env, add=add, mul=mul, const=lambda c: _i64_const(fb, c),
                 floordiv=floordiv, mod=mod, max=maximum, min=minimum)
  fb.consts[key] = r
  return r


def _shape_value(fb, shape) -> str:
  """An SSA value `tensor<Nxi64>` holding `shape`."""
  if not shape:
    r = fb.fresh()
    _emit(fb, f"{r} = stablehlo.constant dense<> : tensor<0xi64>")
    return r
  return _vector(fb, [_dim_value(fb, d) for d in shape])


#: StableHLO ops whose results need static shapes (or shapes given as attributes): a rule
#: that emits one of them with a dynamic type has no symbolic lowering.
_STATIC_OPS = re.compile(r"stablehlo\.(iota|reshape|slice|pad|reduce_window|"
                         r"rng|rng_bit_generator|"
                         r"custom_call|fft|select_and_scatter|constant|broadcast_in_dim|"
                         r"convolution|triangular_solve|cholesky)\b")
_TYPE_DIMS = re.compile(r"^tensor<((?:[0-9?]+x)*)(.*)>$")   # (`?x4x`, element type)
_OP_NAME = re.compile(r'^\s*(?:%[^=]*=\s*)?"?(stablehlo\.\w+)')
_IOTA = re.compile(r'^(%\S+) = "stablehlo\.iota"\(\) \{iota_dimension = (\d+) : i64\} : '
                   r'\(\) -> (tensor<(?:[^<>]|<[^<>]*>)*>)$')
_SPLAT = re.compile(r"^(%\S+) = stablehlo\.constant dense<([^\"<>]*)> : (tensor<(?:[^<>]|<[^<>]*>)*>)$")
_BCAST = re.compile(r"^(%\S+) = stablehlo\.broadcast_in_dim (%\S+), dims = \[([^\]]*)\] : "
                    r"\((tensor<(?:[^<>]|<[^<>]*>)*>)\) -> (tensor<(?:[^<>]|<[^<>]*>)*>)$")


class _SymbolicFuncBuilder(lowering.FuncBuilder):
  """A FuncBuilder for a body with symbolic dimensions: `dim_env` maps each dimension
  variable to its `tensor<i64>` value; the lines that the ordinary lowering rules emit with
  a dynamic type are checked (splat constants and broadcasts become dynamic broadcasts,
  other static-shape ops raise NotImplementedError)."""

  def __init__(self, module, dim_env: dict):
    super().__init__(module)
    self.dim_env = dim_env
    self.eqn = None
    self.subcomp = lambda jaxpr, consts, args: _symbolic_subcomp(self, jaxpr, consts, args)

  def emit(self, line: str) -> None:
    if "?" in line and self.eqn is not None:
      line = self._dynamic(line)
      if line is None:
        return
    self.lines.append(line)

  def _shape_of_type(self, ty: str):
    eqn = self.eqn
    dims = "tensor<" + _TYPE_DIMS.match(ty).group(1)   # `tensor<?x4x`: any element type
    shapes = {a.shape for v in (*eqn.invars, *eqn.outvars)
              for a in (v.aval,) if _is_symbolic_aval(a) and _dyn_type(a).startswith(dims)
              and _TYPE_DIMS.match(_dyn_type(a)).group(1) == dims[len("tensor<"):]}
    if len(shapes) != 1:
      self._unsupported()
    return shapes.pop()

  def _unsupported(self, cause: BaseException | None = None):
    eqn = self.eqn
    avals = [v.aval for v in (*eqn.invars, *eqn.outvars) if _is_symbolic_aval(v.aval)]
    dims = sorted({str(d) for a in avals for d in a.shape if shape_poly.is_symbolic_dim(d)})
    raise NotImplementedError(
        f"export with symbolic dimensions: the primitive '{eqn.primitive.name}' on "
        f"{', '.join(a.str_short() for a in avals)} is not supported with the symbolic "
        f"dimension(s) {', '.join(repr(d) for d in dims)} (its lowering needs static "
        f"shapes). Export with concrete shapes, or avoid '{eqn.primitive.name}' on "
        f"symbolic axes.") from cause

  def _dynamic(self, line: str) -> str | None:
    m = _SPLAT.match(line)
    if m:
      r, val, ty = m.groups()
      shape = self._shape_of_type(ty)
      elt = _TYPE_DIMS.match(ty).group(2)
      s = self.fresh()
      self.lines.append(f"{s} = stablehlo.constant dense<{val}> : tensor<{elt}>")
      sv = _shape_value(self, shape)
      self.lines.append(f"{r} = stablehlo.dynamic_broadcast_in_dim {s}, {sv}, dims = [] : "
                        f"(tensor<{elt}>, tensor<{len(shape)}xi64>) -> {ty}")
      return None
    m = _BCAST.match(line)
    if m:
      r, x, dims, tin, tout = m.groups()
      shape = self._shape_of_type(tout)
      sv = _shape_value(self, shape)
      self.lines.append(f"{r} = stablehlo.dynamic_broadcast_in_dim {x}, {sv}, dims = [{dims}] "
                        f": ({tin}, tensor<{len(shape)}xi64>) -> {tout}")
      return None
    m = _IOTA.match(line)
    if m:
      r, dim, ty = m.groups()
      shape = self._shape_of_type(ty)
      sv = _shape_value(self, shape)
      self.lines.append(f"{r} = stablehlo.dynamic_iota {sv}, dim = {dim} : "
                        f"(tensor<{len(shape)}xi64>) -> {ty}")
      return None
    m = _OP_NAME.match(line)
    if m and _STATIC_OPS.fullmatch(m.group(1)):   # the op itself, not those of its regions
      self._unsupported()
    return line


def _sym_broadcast_in_dim(fb, eqn, x):
  out = eqn.outvars[0].aval
  sv = _shape_value(fb, out.shape)
  r = fb.fresh()
  dims = ", ".join(map(str, eqn.params["broadcast_dimensions"]))
  _emit(fb, f"{r} = stablehlo.dynamic_broadcast_in_dim {x}, {sv}, dims = [{dims}] : "
            f"({_dyn_type(eqn.invars[0].aval)}, tensor<{out.ndim}xi64>) -> {_dyn_type(out)}")
  return [r]


def _sym_reshape(fb, eqn, x, *rest):
  if eqn.params.get("dimensions") is not None or rest:
    fb._unsupported()
  return _dynamic_reshape(fb, eqn, x)


def _dynamic_reshape(fb, eqn, x):
  out = eqn.outvars[0].aval
  sv = _shape_value(fb, out.shape)
  r = fb.fresh()
  _emit(fb, f"{r} = stablehlo.dynamic_reshape {x}, {sv} : ({_dyn_type(eqn.invars[0].aval)}, "
            f"tensor<{out.ndim}xi64>) -> {_dyn_type(out)}")
  return [r]


def _sym_tile(fb, eqn, x):
  """As `_tile_lowering`, with the shapes as runtime operands: a reshape to
  [1, s0, 1, s1, ...], a broadcast to [r0, s0, r1, s1, ...], a reshape merging the pairs."""
  aval, out = eqn.invars[0].aval, eqn.outvars[0].aval
  reps = eqn.params["reps"]
  ones = ShapedArray(tuple(k for d in aval.shape for k in (1, d)), aval.dtype)
  pairs = ShapedArray(tuple(k for r, d in zip(reps, aval.shape) for k in (r, d)), aval.dtype)
  r1, r2, r3 = fb.fresh(), fb.fresh(), fb.fresh()
  dims = ", ".join(map(str, range(2 * aval.ndim)))
  _emit(fb, f"{r1} = stablehlo.dynamic_reshape {x}, {_shape_value(fb, ones.shape)} : "
            f"({_dyn_type(aval)}, tensor<{ones.ndim}xi64>) -> {_dyn_type(ones)}")
  _emit(fb, f"{r2} = stablehlo.dynamic_broadcast_in_dim {r1}, "
            f"{_shape_value(fb, pairs.shape)}, dims = [{dims}] : ({_dyn_type(ones)}, "
            f"tensor<{pairs.ndim}xi64>) -> {_dyn_type(pairs)}")
  _emit(fb, f"{r3} = stablehlo.dynamic_reshape {r2}, {_shape_value(fb, out.shape)} : "
            f"({_dyn_type(pairs)}, tensor<{out.ndim}xi64>) -> {_dyn_type(out)}")
  return [r3]


def _sym_squeeze(fb, eqn, x):
  return _dynamic_reshape(fb, eqn, x)


def _sym_iota(fb, eqn):
  out = eqn.outvars[0].aval
  sv = _shape_value(fb, out.shape)
  r = fb.fresh()
  _emit(fb, f"{r} = stablehlo.dynamic_iota {sv}, dim = {eqn.params['dimension']} : "
            f"(tensor<{out.ndim}xi64>) -> {_dyn_type(out)}")
  return [r]


def _sym_dim_as_value(fb, eqn):
  v = _dim_value(fb, eqn.params["dim"])
  out = eqn.outvars[0].aval
  if out.dtype == np.int64:
    return [v]
  r = fb.fresh()
  _emit(fb, f"{r} = stablehlo.convert {v} : (tensor<i64>) -> {lowering.ir_type(out)}")
  return [r]


def _sym_slice(fb, eqn, x):
  p = eqn.params
  n = eqn.invars[0].aval.ndim
  strides = p.get("strides") or (1,) * n
  vals = [_shape_value(fb, p["start_indices"]), _shape_value(fb, p["limit_indices"]),
          _shape_value(fb, strides)]
  r = fb.fresh()
  _emit(fb, f"{r} = stablehlo.real_dynamic_slice {x}, {', '.join(vals)} : "
            f"({_dyn_type(eqn.invars[0].aval)}, {', '.join([f'tensor<{n}xi64>'] * 3)}) -> "
            f"{_dyn_type(eqn.outvars[0].aval)}")
  return [r]


def _sym_split(fb, eqn, x):
  """One `real_dynamic_slice` per piece (the transpose of a concatenation of symbolic
  sizes)."""
  x_aval = eqn.invars[0].aval
  n, axis = x_aval.ndim, eqn.params["axis"]
  start, outs = [0] * n, []
  for v in eqn.outvars:
    limit = list(x_aval.shape)
    limit[axis] = start[axis] + v.aval.shape[axis]
    vals = [_shape_value(fb, start), _shape_value(fb, limit), _shape_value(fb, (1,) * n)]
    r = fb.fresh()
    _emit(fb, f"{r} = stablehlo.real_dynamic_slice {x}, {', '.join(vals)} : "
              f"({_dyn_type(x_aval)}, {', '.join([f'tensor<{n}xi64>'] * 3)}) -> "
              f"{_dyn_type(v.aval)}")
    outs.append(r)
    start[axis] = limit[axis]
  return outs


def _lower_fun(fb, fun: Callable, eqn, operands: Sequence[str]) -> list[str]:
  """Lowers `eqn` as `fun` (lax operations on tracers with the equation's symbolic avals)
  traced and lowered symbolically (JAX's `mlir.lower_fun`)."""
  jaxpr, consts = pe.trace_to_jaxpr(lambda *xs: list(fun(*xs)), [v.aval for v in eqn.invars])
  cs = [lowering.dense_constant(fb, c, v.aval) for c, v in zip(consts, jaxpr.constvars)]
  return _symbolic_subcomp(fb, jaxpr, cs, operands)


def _to_i64(fb, x: str, aval) -> str:
  if aval.dtype == np.int64:
    return x
  r = fb.fresh()
  _emit(fb, f"{r} = stablehlo.convert {x} : ({lowering.ir_type(aval)}) -> tensor<i64>")
  return r


def _vector(fb, scalars: Sequence[str]) -> str:
  """`tensor<Nxi64>` from N `tensor<i64>` values."""
  parts = []
  for v in scalars:
    r = fb.fresh()
    _emit(fb, f"{r} = stablehlo.reshape {v} : (tensor<i64>) -> tensor<1xi64>")
    parts.append(r)
  if len(parts) == 1:
    return parts[0]
  r = fb.fresh()
  _emit(fb, f"{r} = stablehlo.concatenate {', '.join(parts)}, dim = 0 : "
            f"({', '.join(['tensor<1xi64>'] * len(parts))}) -> tensor<{len(parts)}xi64>")
  return r


def _sym_dynamic_slice(fb, eqn, x, *starts):
  sizes = eqn.params["slice_sizes"]
  if shape_poly.is_constant_shape(sizes):   # a dynamic operand, static result sizes
    return _ordinary_lowering(fb, eqn, [x, *starts], _dyn_aval)
  # As JAX: `real_dynamic_slice` from the start indices clamped as dynamic_slice clamps them
  # (to [0, dim - size]); the refinement of a call makes it static.
  x_aval = eqn.invars[0].aval
  zero = _i64_const(fb, 0)
  clamped = []
  for k, (st, v) in enumerate(zip(starts, eqn.invars[1:])):
    s64 = _to_i64(fb, st, v.aval)
    hi = _dim_value(fb, x_aval.shape[k] - sizes[k])
    r = fb.fresh()
    _emit(fb, f"{r} = stablehlo.clamp {zero}, {s64}, {hi} : tensor<i64>")
    clamped.append(r)
  start = _vector(fb, clamped)
  n = x_aval.ndim
  limit = fb.fresh()
  _emit(fb, f"{limit} = stablehlo.add {start}, {_shape_value(fb, sizes)} : tensor<{n}xi64>")
  r = fb.fresh()
  _emit(fb, f"{r} = stablehlo.real_dynamic_slice {x}, {start}, {limit}, "
            f"{_shape_value(fb, (1,) * n)} : ({_dyn_type(x_aval)}, "
            f"{', '.join([f'tensor<{n}xi64>'] * 3)}) -> {_dyn_type(eqn.outvars[0].aval)}")
  return [r]


def _sym_gather(fb, eqn, operand, indices):
  p = eqn.params
  x_aval, i_aval = (v.aval for v in eqn.invars)
  sizes, dn = p["slice_sizes"], p["dimension_numbers"]
  upper = [x_aval.shape[d] - sizes[d] for d in dn.start_index_map]
  if (p["mode"] is slicing.GatherScatterMode.FILL_OR_DROP and dn.start_index_map
      and not shape_poly.is_constant_shape(upper)):
    # The in-bounds mask from the dimensions' values, around a gather that clamps.

    def fill(x, i):
      out = slicing.gather_p.bind(x, i, **{**p, "mode": slicing.GatherScatterMode.CLIP,
                                           "fill_value": None})
      i64 = dtypes.canonicalize_dtype(np.int64)   # NB: int32 without x64, silently
      iw = lax.convert_element_type(i, i64) if i.dtype != i64 else i
      ups = lax.broadcast_in_dim(lax.concatenate(
          [lax.broadcast_in_dim(lax.convert_element_type(u, i64), (1,), ())
           for u in map(_dim_scalar, upper)], 0), iw.shape, (iw.ndim - 1,))
      ok = lax.reduce_and(lax.bitwise_and(lax.ge(iw, lax.full_like(iw, 0)),
                                          lax.le(iw, ups)), (iw.ndim - 1,))
      batch = tuple(d for d in range(out.ndim) if d not in dn.offset_dims)
      mask = lax.broadcast_in_dim(ok, out.shape, batch)
      fv = p["fill_value"]
      if fv is None:
        fv = np.nan if np.issubdtype(out.dtype, np.inexact) else (
            True if out.dtype == np.bool_ else np.iinfo(out.dtype).min)
      return [lax.select(mask, out, lax.full_like(out, fv))]
    return _lower_fun(fb, fill, eqn, [operand, indices])
  if shape_poly.is_constant_shape(sizes):
    return _ordinary_lowering(fb, eqn, [operand, indices], _dyn_aval)
  if p["mode"] is slicing.GatherScatterMode.FILL_OR_DROP and dn.start_index_map:
    fb._unsupported()
  # Symbolic slice sizes: `dynamic_gather` takes them as an operand (made static by the
  # refinement of a call).
  attrs = (f"dimension_numbers = {slicing.gather_attrs(dn, i_aval.ndim - 1)}, "
           f"indices_are_sorted = {str(bool(p['indices_are_sorted'])).lower()}")
  r = fb.fresh()
  _emit(fb, f'{r} = "stablehlo.dynamic_gather"({operand}, {indices}, '
            f'{_shape_value(fb, sizes)}) {{{attrs}}} : ({_dyn_type(x_aval)}, '
            f'{_dyn_type(i_aval)}, tensor<{len(sizes)}xi64>) -> '
            f'{_dyn_type(eqn.outvars[0].aval)}')
  return [r]


def _zeros(fb, aval) -> str:
  """A zero array of the (symbolic) `aval`."""
  elt = lowering.elt_type(aval.dtype)
  z = fb.fresh()
  _emit(fb, f"{z} = stablehlo.constant dense<{lowering.dense_scalar(0, aval.dtype)}> : "
            f"tensor<{elt}>")
  if not aval.shape:
    return z
  r = fb.fresh()
  _emit(fb, f"{r} = stablehlo.dynamic_broadcast_in_dim {z}, {_shape_value(fb, aval.shape)}, "
            f"dims = [] : (tensor<{elt}>, tensor<{aval.ndim}xi64>) -> {_dyn_type(aval)}")
  return r


_split = core.split_list


def _sym_scan(fb, eqn, *args):
  """scan as a `while` over its steps (one per iteration), its length and the shapes of
  its values symbolic: the loop state is (xs, consts, step, carry, ys buffers), as the
  ordinary lowering's."""
  p = eqn.params
  nc, nk, length = p["num_consts"], p["num_carry"], p["length"]
  if lowering.has_ordered_effects(p["jaxpr"].jaxpr):
    fb._unsupported()
  consts, init, xs = _split(list(args), nc, nk)
  c_avals, _, x_avals = _split([v.aval for v in eqn.invars], nc, nk)
  out_avals = [v.aval for v in eqn.outvars]
  y_avals = out_avals[nk:]
  i32 = ShapedArray((), np.dtype(np.int32))
  nx = len(x_avals)
  state_avals = [*x_avals, *c_avals, i32, *out_avals[:nk], *y_avals]
  step = loops.step_jaxpr(p["jaxpr"], nc, nk, length, p["reverse"], 1, state_avals)
  state = [*xs, *consts, lowering.constant(fb, 0, i32), *init,
           *[_zeros(fb, a) for a in y_avals]]
  dyn = [_dyn_aval(a) for a in state_avals]

  def cond_body(*names):
    i = names[nx + nc]
    n = fb.fresh()
    _emit(fb, f"{n} = stablehlo.convert {_dim_value(fb, length)} : (tensor<i64>) -> "
              f"tensor<i32>")
    r = fb.fresh()
    _emit(fb, f"{r} = stablehlo.compare LT, {i}, {n}, SIGNED : (tensor<i32>, tensor<i32>) "
              f"-> tensor<i1>")
    return [r]

  cond = lowering.build_region(fb, dyn, [ShapedArray((), np.dtype(np.bool_))], cond_body)
  body = lowering.build_region(fb, dyn, dyn,
                               lambda *names: _symbolic_subcomp(fb, step, [], names))
  types = [_dyn_type(a) for a in state_avals]
  state = lowering.emit_op(fb, "stablehlo.while", state, types, types, regions=[cond, body])
  _, _, _, carry, ys = _split(state, nx, nc, 1, nk)
  return [*carry, *ys]


def _padding_value(fb, padding) -> str:
  """An SSA value `tensor<Nx2xi64>` holding the (lo, hi) pairs of `padding` (ints or
  symbolic dimensions)."""
  n = len(padding)
  r = fb.fresh()
  _emit(fb, f"{r} = stablehlo.reshape {_shape_value(fb, [v for lo_hi in padding for v in lo_hi])}"
            f" : (tensor<{2 * n}xi64>) -> tensor<{n}x2xi64>")
  return r


def _dynamic_reduce_window(fb, eqn, x, op, identity, *, window_dimensions, window_strides,
                           padding, base_dilation, window_dilation):
  """A `stablehlo.dynamic_reduce_window` custom call of `x` (`eqn`'s operand) from
  `identity(dtype)`, whose reducer applies `op` (a StableHLO op name, or a lowering
  callable `op(ctx, a, b, aval)`): window, strides, dilations and padding are operands, which
  may be symbolic (the refinement of a call makes them static), as in JAX's modules."""
  aval = eqn.invars[0].aval
  scalar = ShapedArray((), aval.dtype)
  module = fb.module
  body_name = module.unique_func_name(f"{eqn.primitive.name}_window_body")
  bfb = lowering.FuncBuilder(module)
  bctx = lowering.LoweringRuleContext(bfb, [scalar, scalar], [scalar])
  if callable(op):
    out = op(bctx, "%arg0", "%arg1", scalar)
  else:
    out = bctx.elementwise(op, "%arg0", "%arg1", aval=scalar)
  st = lowering.ir_type(scalar)
  module.funcs.append(
      f"  func.func private @{body_name}(%arg0: {st}, %arg1: {st}) -> ({st}) {{\n"
      + "".join(f"    {ln}\n" for ln in bfb.lines) + f"    return {out} : {st}\n  }}")
  nd = aval.ndim
  vectors = [_shape_value(fb, tuple(v)) for v in (window_dimensions, window_strides,
                                                  base_dilation, window_dilation)]
  pad = _padding_value(fb, padding)
  init = lowering.constant(fb, np.asarray(identity(aval.dtype)), scalar)
  r = fb.fresh()
  vec = f"tensor<{nd}xi64>"
  _emit(fb, f"{r} = stablehlo.custom_call @stablehlo.dynamic_reduce_window({x}, {init}, "
            f"{', '.join(vectors)}, {pad}) {{called_computations = [@{body_name}]}}"
            f" : ({_dyn_type(aval)}, {st}, {vec}, {vec}, {vec}, {vec}, tensor<{nd}x2xi64>) -> "
            f"{_dyn_type(eqn.outvars[0].aval)}")
  return [r]


def _sym_cumulative(fb, eqn, x):
  """cumsum/cumprod/cummax/cummin/cumlogsumexp as their ordinary lowering's reduce_window
  (a window over the whole axis, padded before it), written as the
  `stablehlo.dynamic_reduce_window` custom call, as JAX's modules do."""
  rule = lowering.lowering_rule(eqn.primitive)
  op, identity = rule.args   # NB: partial(cumulative._cumred_lowering, op, identity)
  aval = eqn.invars[0].aval
  axis, reverse = eqn.params["axis"], eqn.params["reverse"]
  n, nd = aval.shape[axis], aval.ndim
  ones = (1,) * nd
  pads = [((0, n - 1) if reverse else (n - 1, 0)) if d == axis else (0, 0) for d in range(nd)]
  return _dynamic_reduce_window(
      fb, eqn, x, op, identity, window_dimensions=[n if d == axis else 1 for d in range(nd)],
      window_strides=ones, padding=pads, base_dilation=ones, window_dilation=ones)


def _sym_reduce_window(fb, eqn, x):
  """reduce_window_{sum,max,min}: with constant params, the ordinary `stablehlo.reduce_window`
  on dynamic types; with symbolic padding (`SAME` on a symbolic axis), the
  `stablehlo.dynamic_reduce_window` custom call, as JAX's."""
  p = eqn.params
  if all(shape_poly.is_constant_shape(v) for v in p["padding"]):
    return _sym_static_attrs(fb, eqn, x)
  op, identity = lowering.lowering_rule(eqn.primitive).args
  if eqn.invars[0].aval.dtype == np.dtype(bool):   # as the ordinary lowering
    op = {"stablehlo.maximum": "stablehlo.or", "stablehlo.minimum": "stablehlo.and"}.get(op, op)
  return _dynamic_reduce_window(fb, eqn, x, op, identity, **p)


def _sym_pad(fb, eqn, x, padding_value):
  """pad as `stablehlo.dynamic_pad` (the paddings as operands, which may be symbolic)."""
  cfg = eqn.params["padding_config"]
  nd = len(cfg)
  lo, hi, interior = (_shape_value(fb, [c[k] for c in cfg]) for k in range(3))
  r = fb.fresh()
  vec = f"tensor<{nd}xi64>"
  _emit(fb, f"{r} = stablehlo.dynamic_pad {x}, {padding_value}, {lo}, {hi}, {interior} : "
            f"({_dyn_type(eqn.invars[0].aval)}, {lowering.ir_type(eqn.invars[1].aval)}, "
            f"{vec}, {vec}, {vec}) -> {_dyn_type(eqn.outvars[0].aval)}")
  return [r]


def _sym_stack(fb, eqn, *xs):
  axis = eqn.params["axis"]
  return _lower_fun(fb, lambda *xs: [lax.concatenate([lax.expand_dims(x, (axis,)) for x in xs],
                                                     axis)], eqn, xs)


def _dim_scalar(d):
  return lax_misc.dimension_as_value(d)


def _sym_static_attrs(fb, eqn, *operands):
  """The ordinary lowering of a primitive whose attributes (window sizes, strides, padding,
  FFT lengths) are constant and whose StableHLO op takes dynamic operand types (JAX's
  modules use `stablehlo.reduce_window` and `stablehlo.fft` so); the call's refinement
  makes them static."""
  saved, fb.eqn = fb.eqn, None   # NB: not checked against `_STATIC_OPS`
  try:
    return _ordinary_lowering(fb, eqn, operands, _dyn_aval)
  finally:
    fb.eqn = saved


def _sym_conv(fb, eqn, lhs, rhs):
  """conv_general_dilated: with constant padding, the ordinary `stablehlo.convolution` on
  dynamic types; with symbolic padding (`SAME` on a symbolic spatial axis), a
  `stablehlo.dynamic_conv` whose padding is an operand, as JAX's."""
  p = eqn.params
  if all(shape_poly.is_constant_shape(v) for v in p["padding"]):
    return _sym_static_attrs(fb, eqn, lhs, rhs)
  n = len(p["padding"])
  pad = _padding_value(fb, p["padding"])
  prec = precision_config(p["precision"])
  ints = lambda v: f"array<i64{': ' if v else ''}{', '.join(map(str, v))}>"
  attrs = (f"batch_group_count = {p['batch_group_count']} : i64, dimension_numbers = "
           f"#stablehlo.conv<{conv_dims_text(p['dimension_numbers'])}>, "
           f"feature_group_count = {p['feature_group_count']} : i64, lhs_dilation = "
           f"{ints(p['lhs_dilation'])}, precision_config = [#stablehlo<precision "
           f"{prec[0].name}>, #stablehlo<precision {prec[1].name}>], rhs_dilation = "
           f"{ints(p['rhs_dilation'])}, window_strides = {ints(p['window_strides'])}")
  lhs_aval, rhs_aval = (v.aval for v in eqn.invars)
  r = fb.fresh()
  _emit(fb, f'{r} = "stablehlo.dynamic_conv"({lhs}, {rhs}, {pad}) <{{{attrs}}}> : '
            f"({_dyn_type(lhs_aval)}, {_dyn_type(rhs_aval)}, tensor<{n}x2xi64>) -> "
            f"{_dyn_type(eqn.outvars[0].aval)}")
  return [r]


def _sym_select_and_scatter_add(fb, eqn, source, operand):
  """select_and_scatter_add (the derivative of a max/min pooling) as its ordinary lowering
  does it: the operand padded with the select's identity, `stablehlo.select_and_scatter`
  without padding (static attributes, dynamic types), the padding sliced off; the pad and
  the slice may be symbolic."""
  p = eqn.params
  padding = p["padding"]
  if all(type(v) is int and v == 0 for lo_hi in padding for v in lo_hi):
    return _sym_static_attrs(fb, eqn, source, operand)

  def fun(source, operand):
    aval = core.get_aval(operand)
    identity = (max_identity if p["select_prim"] is lax.ge_p else min_identity)(aval.dtype)
    padded = lax.pad(operand, np.asarray(identity, aval.dtype)[()],
                     [(lo, hi, 0) for lo, hi in padding])
    out = select_and_scatter_add_p.bind(
        source, padded, select_prim=p["select_prim"],
        window_dimensions=p["window_dimensions"], window_strides=p["window_strides"],
        padding=((0, 0),) * aval.ndim)
    return [lax.slice(out, [lo for lo, _ in padding],
                      [lo + d for (lo, _), d in zip(padding, aval.shape)])]
  return _lower_fun(fb, fun, eqn, [source, operand])


def _sym_fft(fb, eqn, x):
  if not shape_poly.is_constant_shape(eqn.params["fft_lengths"]):
    raise NotImplementedError("Shape polymorphism for FFT with non-constant fft_length is "
                              "not implemented for TPU and GPU")
  return _sym_static_attrs(fb, eqn, x)


_SYMBOLIC_RULES = {"broadcast_in_dim": _sym_broadcast_in_dim, "reshape": _sym_reshape,
                   "slice": _sym_slice,
                   "squeeze": _sym_squeeze, "iota": _sym_iota, "tile": _sym_tile,
                   "dim_as_value": _sym_dim_as_value,
                   "dynamic_slice": _sym_dynamic_slice, "gather": _sym_gather,
                   "scan": _sym_scan, "cumsum": _sym_cumulative, "cumprod": _sym_cumulative,
                   "cummax": _sym_cumulative, "cummin": _sym_cumulative,
                   "cumlogsumexp": _sym_cumulative, "pad": _sym_pad,
                   "stack": _sym_stack, "fft": _sym_fft, "split": _sym_split,
                   "reduce_window_sum": _sym_reduce_window,
                   "reduce_window_max": _sym_reduce_window,
                   "reduce_window_min": _sym_reduce_window,
                   "conv_general_dilated": _sym_conv,
                   "select_and_scatter_add": _sym_select_and_scatter_add}

#: Primitives whose ordinary lowering rules depend on their operands' types only, so they
#: lower unchanged with dynamic types (elementwise operations, reductions, contractions,
#: transposes, concatenation); each still goes through `_SymbolicFuncBuilder`'s check.
_SYMBOLIC_OK = {
    "neg", "sign", "floor", "ceil", "round", "is_finite", "exp", "exp2", "log", "log1p",
    "expm1", "tanh", "logistic", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
    "asinh", "acosh", "atanh", "sqrt", "rsqrt", "cbrt", "abs", "not", "erf", "erfc",
    "erf_inv", "lgamma", "digamma", "real", "imag", "conj", "square", "integer_pow",
    "add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2", "nextafter", "and",
    "or", "xor", "eq", "ne", "lt", "le", "gt", "ge", "shift_left", "shift_right_logical",
    "shift_right_arithmetic", "complex", "select_n", "clamp", "convert_element_type",
    "copy", "copy_p", "stop_gradient", "reduce_precision", "population_count", "clz",
    "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or",
    "reduce_xor", "dot_general", "transpose", "concatenate", "rev", "optimization_barrier",
    # control flow: the bodies come back to `_symbolic_subcomp` (FuncBuilder.subcomp)
    "cond", "while", "add_any",
    # no static shape in their attributes
    "dynamic_update_slice", "scatter", "scatter-add", "scatter-sub", "scatter-mul",
    "scatter-min", "scatter-max", "sort", "argmax", "argmin",
}

_CALL_PARAMS = ("jaxpr", "call_jaxpr")
#: Call-like primitives whose bodies are lowered inline in a symbolic module (their
#: operands are the body's arguments).
_INLINED_CALLS = ("jit", "custom_jvp_call", "custom_vjp_call")


def _ordinary_lowering(fb, eqn, operands: Sequence[str], to_aval: Callable) -> list[str]:
  """Lowers `eqn` with its primitive's ordinary rule, its avals mapped by `to_aval` (the
  jaxprs that rule lowers inline, branches and loop bodies, come back to
  `_symbolic_subcomp` through `fb.subcomp`)."""
  rule = lowering.lowering_rule(eqn.primitive)
  if rule is None:
    raise lowering.MissingRuleError(f"Primitive '{eqn.primitive.name}' has no lowering rule.")
  ctx = lowering.LoweringRuleContext(fb, [to_aval(v.aval) for v in eqn.invars],
                                     [to_aval(v.aval) for v in eqn.outvars])
  outs = rule(ctx, *operands, **eqn.params)
  if len(outs) != len(eqn.outvars):
    raise lowering.MissingRuleError(f"Lowering rule of '{eqn.primitive.name}' returned "
                                    f"{len(outs)} values for {len(eqn.outvars)} outputs.")
  return list(outs)


def _symbolic_subcomp(fb: _SymbolicFuncBuilder, jaxpr, consts: Sequence[str],
                      args: Sequence[str]) -> list[str]:
  """`lowering.jaxpr_subcomp` for a jaxpr with symbolic avals: calls are inlined, the
  shape-changing primitives get `_SYMBOLIC_RULES`, the others their ordinary rules."""
  env: dict = {}
  env.update(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))

  def read(v):
    if type(v) is core.Literal:
      return lowering.constant(fb, v.val, v.aval)
    return env[v]

  saved_eqn = fb.eqn   # NB: a nested body (a branch) is lowered inside its equation's rule
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    operands = [read(v) for v in eqn.invars]
    symbolic = name == "dim_as_value" or any(
        _is_symbolic_aval(v.aval) for v in (*eqn.invars, *eqn.outvars))
    inner = next((eqn.params[k] for k in _CALL_PARAMS
                  if isinstance(eqn.params.get(k), core.ClosedJaxpr)), None)
    if name in _INLINED_CALLS and inner is not None:
      cs = [lowering.dense_constant(fb, c, v.aval)
            for c, v in zip(inner.consts, inner.jaxpr.constvars)]
      outs = _symbolic_subcomp(fb, inner.jaxpr, cs, operands)
    elif symbolic and name in _SYMBOLIC_RULES:
      fb.eqn = eqn
      outs = _SYMBOLIC_RULES[name](fb, eqn, *operands)
    elif symbolic:
      fb.eqn = eqn
      if name not in _SYMBOLIC_OK:
        fb._unsupported()
      try:
        outs = _ordinary_lowering(fb, eqn, operands, _dyn_aval)
      except (InconclusiveDimensionOperation, TypeError) as e:
        fb._unsupported(e)
    else:
      fb.eqn = None
      outs = _ordinary_lowering(fb, eqn, operands, lambda a: a)
    fb.eqn = None
    env.update(zip(eqn.outvars, outs))
  fb.eqn = saved_eqn
  return [read(v) for v in jaxpr.outvars]


def _symbolic_module_text(name: str, jaxpr, consts: Sequence[Any],
                          arg_avals: Sequence[ShapedArray], platform: str,
                          arg_names: Sequence[str] | None = None,
                          result_infos: Sequence[str] | None = None) -> str:
  """The module of a program with symbolic avals: `main(dynamic args)` reads the dimension
  variables from the argument shapes and computes the body inline."""
  solutions = _dim_solutions(arg_avals, name)
  module = lowering.ModuleContext(f"jit_{name}", platform=_lowering_platform(platform))
  fb = _SymbolicFuncBuilder(module, {})
  args = [f"%arg{i}" for i in range(len(arg_avals))]
  for v, (i, j, k, c) in sorted(solutions.items()):
    d32 = fb.fresh()
    _emit(fb, f"{d32} = stablehlo.get_dimension_size {args[i]}, dim = {j} : "
              f"({_dyn_type(arg_avals[i])}) -> tensor<i32>")
    d = fb.fresh()
    _emit(fb, f"{d} = stablehlo.convert {d32} : (tensor<i32>) -> tensor<i64>")
    if c:
      d2 = fb.fresh()
      _emit(fb, f"{d2} = stablehlo.subtract {d}, {_i64_const(fb, c)} : tensor<i64>")
      d = d2
    if k != 1:
      d2 = fb.fresh()
      _emit(fb, f"{d2} = stablehlo.divide {d}, {_i64_const(fb, k)} : tensor<i64>")
      d = d2
    fb.dim_env[v] = d
  const_names = []
  for c, v in zip(consts, jaxpr.invars):
    const_names.append(lowering.dense_constant(fb, np.asarray(c), v.aval))
  outs = _symbolic_subcomp(fb, jaxpr, [], [*const_names, *args])
  if module.host_callbacks:
    raise NotImplementedError("serialization of host_callbacks is not yet implemented")
  out_types = [_dyn_type(v.aval) for v in jaxpr.outvars]
  body = "\n".join("    " + ln for ln in fb.lines)
  ret = (f"    return {', '.join(outs)} : {', '.join(out_types)}" if outs else "    return")
  sig = ", ".join(f"{a}: {_dyn_type(av)}{_arg_loc(arg_names, i)}"
                  for i, (a, av) in enumerate(zip(args, arg_avals)))
  res = ", ".join(t + _result_attr(result_infos, i) for i, t in enumerate(out_types))
  main = (f"  func.func public @main({sig}) -> ({res}) {{\n{body}\n{ret}\n  }}")
  funcs = "\n".join([main, *module.funcs])
  return (f"module @{module.name} attributes {{jax.uses_shape_polymorphism = true, "
          f"mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32}} {{\n{funcs}\n}}\n")


def _symbolic_env(exported: Exported, in_avals: Sequence[ShapedArray]) -> dict:
  """The values of the dimension variables for arguments of `in_avals` (concrete), checked
  against the exported symbolic avals, with JAX's messages."""
  specs = ",".join(f"{_arg_descriptor(exported, i, None)}.shape = "
                   f"({', '.join(map(str, a.shape))}{',' if len(a.shape) == 1 else ''})"
                   for i, a in enumerate(exported.in_avals))
  tail = (f" Please see https://docs.jax.dev/en/latest/export/shape_poly.html"
          f"#shape-assertion-errors for more details.")
  env: dict = {}
  found: list = []
  for v, (i, j, k, c) in sorted(_dim_solutions(exported.in_avals, exported.fun_name).items()):
    got = in_avals[i].shape[j]
    q, r = divmod(got - c, k)
    spec = exported.in_avals[i].shape[j]
    if r:
      raise ValueError(f"Input shapes do not match the polymorphic shapes specification. "
                       f"Division had remainder {r} when computing the value of '{v}'. Using "
                       f"the following polymorphic shapes specifications: {specs}. Obtained "
                       f"dimension variables: {''.join(found)}.{tail}")
    env[v] = q
    found.append(f"'{v}' = {q} from specification '{spec}' for dimension "
                 f"{_arg_descriptor(exported, i, j)} (= {got}), ")
  scope = next(d.scope for a in exported.in_avals for d in a.shape
               if shape_poly.is_symbolic_dim(d))
  for v, q in sorted(env.items()):
    if q < 1:
      raise ValueError(f"Input shapes do not match the polymorphic shapes specification. "
                       f"Expected value >= 1 for dimension variable '{v}'. Using the "
                       f"following polymorphic shapes specifications: {specs}. Obtained "
                       f"dimension variables: {''.join(found)}.{tail}")
  for i, (want, got) in enumerate(zip(exported.in_avals, in_avals)):
    for j, (w, g) in enumerate(zip(want.shape, got.shape)):
      if shape_poly.is_symbolic_dim(w) and w.evaluate(env) != g:
        raise ValueError(f"Input shapes do not match the polymorphic shapes specification. "
                         f"Found inconsistency between dimension size "
                         f"{_arg_descriptor(exported, i, j)} (= {g}) and the specification "
                         f"'{w}' (= {w.evaluate(env)}). Using the following polymorphic "
                         f"shapes specifications: {specs}. Obtained dimension variables: "
                         f"{''.join(found)}.{tail}")
  # NB: as JAX's shape assertions: each constraint of the scope, in order.
  for text, p, op in scope.constraint_checks():
    val = p.evaluate(env)
    if op == "==" and val != 0:
      raise ValueError(f"Input shapes do not match the symbolic shape constraint {text}. "
                       f"Expected '{p}' to be equal to 0, but found {val}.  Using the "
                       f"following polymorphic shapes specifications: {specs}. Obtained "
                       f"dimension variables: {''.join(found)}.{tail}")
    if op == ">=" and val < 0:
      raise ValueError(f"Input shapes do not match the symbolic shape constraint {text}. "
                       f"Expected '{p}' to be greater or equal to 0, but found {val}.  Using "
                       f"the following polymorphic shapes specifications: {specs}. Obtained "
                       f"dimension variables: {''.join(found)}.{tail}")
  return env


def _concrete_aval(a: ShapedArray, env: dict) -> ShapedArray:
  return ShapedArray(tuple(d.evaluate(env) if shape_poly.is_symbolic_dim(d) else d
                           for d in a.shape), a.dtype, a.weak_type)


def _refined(exported: Exported, in_avals: Sequence[ShapedArray]) -> Exported:
  """`exported` specialized to the concrete `in_avals`: its module refined to static shapes
  (cached per shapes)."""
  key = ("refined", tuple((a.shape, a.dtype) for a in in_avals))
  out = exported._cache.get(key)
  if out is not None:
    return out
  env = _symbolic_env(exported, in_avals)
  concrete_in = tuple(_concrete_aval(a, env) for a in exported.in_avals)
  concrete_out = tuple(_concrete_aval(a, env) for a in exported.out_avals)
  module = lowering.ModuleContext("refine", platform=_lowering_platform(exported.platforms[0]))
  fname, texts = _inlined_functions(exported, module)
  kept = exported.module_kept_var_idx
  multi = len(exported.platforms) > 1
  lines = []
  operands = ["%argp"] if multi else []
  for n, i in enumerate(kept):
    t_in, t_poly = lowering.ir_type(concrete_in[i]), _dyn_type(exported.in_avals[i])
    lines.append(f"    %c{n} = stablehlo.convert %arg{n} : ({t_in}) -> {t_poly}")
    operands.append(f"%c{n}")
  poly_out = [_dyn_type(a) for a in exported.out_avals]
  conc_out = [lowering.ir_type(a) for a in concrete_out]
  nout = len(poly_out)
  lhs = "%r = " if nout == 1 else (f"%r:{nout} = " if nout else "")
  poly_in = [_dyn_type(exported.in_avals[i]) for i in kept]
  lines.append(f"    {lhs}func.call @{fname}({', '.join(operands)}) : "
               f"({', '.join(['tensor<i32>'] * multi + poly_in)}) -> "
               f"({', '.join(poly_out)})")
  results = ["%r"] if nout == 1 else [f"%r#{i}" for i in range(nout)]
  outs = []
  for n, (r, tp, tc) in enumerate(zip(results, poly_out, conc_out)):
    lines.append(f"    %o{n} = stablehlo.convert {r} : ({tp}) -> {tc}")
    outs.append(f"%o{n}")
  lines.append(f"    return {', '.join(outs)} : {', '.join(conc_out)}" if nout else
               "    return")
  sig = ", ".join(["%argp: tensor<i32>"] * multi +
                  [f"%arg{n}: {lowering.ir_type(concrete_in[i])}" for n, i in enumerate(kept)])
  main = (f"  func.func public @main({sig}) -> ({', '.join(conc_out)}) {{\n"
          + "\n".join(lines) + "\n  }")
  text = ("module @refine attributes {jax.uses_shape_polymorphism = true, "
          "mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
          + "\n".join([main, *texts]) + "\n}\n")
  st = _mlir_state()
  with st["ctx"]:
    parsed = st["ir"].Module.parse(text)
    bytecode = _module_bytecode(parsed)
  try:
    refined = xc._xla.mlir.refine_polymorphic_shapes(bytecode, enable_shape_assertions=True,
                                                     validate_static_shapes=True)
  except Exception as e:   # noqa: BLE001 (the runtime's errors vary)
    raise ValueError(f"call of exported {exported.fun_name}: refining its module to the "
                     f"shapes {[a.str_short() for a in concrete_in]} failed: {e}") from None
  with st["ctx"]:
    refined_text = str(st["ir"].Module.parse(refined))
  out = dataclasses.replace(
      exported, in_avals=concrete_in, out_avals=concrete_out,
      mlir_module_serialized=_to_artifact(refined_text),
      uses_global_constants=len(exported.platforms) > 1,
      _get_vjp=None, _cache={})
  exported._cache[key] = out
  return out


def _module_bytecode(mod) -> bytes:
  buf = io.BytesIO()
  mod.operation.write_bytecode(buf)
  return buf.getvalue()


def _aval_to_json_sym(a: ShapedArray) -> list:
  return [[int(d) if shape_poly.is_constant_dim(d) else str(d) for d in a.shape], a.dtype.name,
          bool(a.weak_type)]


def _aval_from_json_sym(j, scope) -> ShapedArray:
  shape, name, weak = j
  if not any(isinstance(d, str) for d in shape):
    return stages.aval_from_json(j)
  dims = tuple(shape_poly.parse_dim(d, scope) if isinstance(d, str) else int(d)
               for d in shape)
  base = stages.aval_from_json([[1] * len(dims), name, weak])
  return ShapedArray(dims, base.dtype, base.weak_type)


# ---------------------------------------------------------------------------
# StableHLO portable artifacts (the runtime's MLIR bindings, loaded on first use)

_mlir: dict = {}


def _mlir_state():
  """(ir module, context, target version) of the runtime's MLIR bindings."""
  if not _mlir:
    # NB: jaxlib's MLIR bindings cost ~0.1 s to import; only export needs them.
    from jaxlib.mlir import ir, passmanager
    from jaxlib.mlir.dialects import stablehlo
    _mlir.update(ir=ir, passmanager=passmanager,
                 version=stablehlo.get_version_from_compatibility_requirement(
                     stablehlo.StablehloCompatibilityRequirement.WEEK_4))
  # NB: the context (every dialect of stagecraft's modules, Shardy's included) is per thread,
  # as MLIR contexts are not shared between threads.
  return {**_mlir, "ctx": mlir_text.context()}


def _to_artifact(text: str) -> bytes:
  st = _mlir_state()
  return bytes(xc._xla.mlir.serialize_portable_artifact(text, st["version"]))


def _load_module(artifact: bytes):
  st = _mlir_state()
  try:
    return xc._xla.mlir.deserialize_portable_artifact(bytes(artifact), st["ctx"])
  except Exception as e:   # noqa: BLE001 (the runtime's errors for bad bytecode vary)
    raise ValueError(f"the exported module is not a readable StableHLO portable artifact "
                     f"({type(e).__name__}: {e}); the bytes were altered.") from None


def _main_signature(artifact: bytes) -> tuple[list[str], list[str]]:
  """(argument types, result types) of the module's public `main`, as MLIR prints them."""
  st = _mlir_state()
  ir = st["ir"]
  with st["ctx"]:
    mod = _load_module(artifact)
    for op in mod.body.operations:
      if ir.StringAttr(op.attributes["sym_name"]).value == "main":
        ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        return [str(t) for t in ftype.inputs], [str(t) for t in ftype.results]
  raise ValueError("the exported module has no `main` function; the bytes were altered.")


def _inlined_functions(exported: Exported, module: lowering.ModuleContext,
                       meshes: dict | None = None) -> tuple[str, list]:
  """The exported module's functions, renamed to be unique in `module` (its `main` made
  private): (the name of its main, the functions' texts). Its `sdy.mesh` ops (a program
  over a mesh) are renamed too and added to `module.extra_ops`; `meshes` receives
  {old name: new name}."""
  st = _mlir_state()
  ir = st["ir"]
  with st["ctx"], ir.Location.unknown():
    mod = _load_module(exported.mlir_module_serialized)
    if "mhlo.frontend_attributes" in mod.operation.attributes:
      # NB: a portable artifact keeps Shardy's shardings as frontend attributes (Shardy is
      # no stable dialect); this pass of the runtime's turns them back into `sdy.mesh` and
      # `sdy.sharding` (as JAX's call of an exported module does).
      st["passmanager"].PassManager.parse(
          "builtin.module(xla-sdy-round-trip-import-shardy-attrs)").run(mod.operation)
    ops = list(mod.body.operations)
    olds, kinds = [], []
    for op in ops:
      if op.operation.name not in ("func.func", "sdy.mesh"):
        raise NotImplementedError(f"call of exported {exported.fun_name}: its module holds "
                                  f"{op.operation.name}, which stagecraft cannot inline.")
      olds.append(ir.StringAttr(op.attributes["sym_name"]).value)
      kinds.append(op.operation.name)
    base = lowering.sanitize_name(f"call_exported_{exported.fun_name}")
    news = [module.unique_func_name(base if o == "main" else f"{base}_{o}") for o in olds]
    _rename_symbols(ir, mod, dict(zip(olds, news)))
    for op, old in zip(ops, olds):
      if old == "main":
        op.attributes["sym_visibility"] = ir.StringAttr.get("private")
    texts = []
    for op, kind, old, new in zip(ops, kinds, olds, news):
      text = "  " + str(op).replace("\n", "\n  ")
      if kind == "sdy.mesh":
        module.extra_ops.append(text)
        if meshes is not None:
          meshes[old] = new
      else:
        texts.append(text)
  return news[olds.index("main")], texts


# ---------------------------------------------------------------------------
# Serialization


def _header_of(e: Exported, offset: int, size: int) -> dict:
  return {"fun_name": e.fun_name, "in_tree": stages.tree_to_json(e.in_tree),
          "out_tree": stages.tree_to_json(e.out_tree),
          "in_avals": [_aval_to_json_sym(a) for a in e.in_avals],
          "out_avals": [_aval_to_json_sym(a) for a in e.out_avals],
          "symbolic_constraints": list(_scope_of(e)._constraints_str)
          if _scope_of(e) is not None else None,
          "nr_devices": e.nr_devices, "platforms": list(e.platforms),
          "disabled_safety_checks": [str(d) for d in e.disabled_safety_checks],
          "calling_convention_version": e.calling_convention_version,
          "module_kept_var_idx": list(e.module_kept_var_idx),
          "mesh": _mesh_to_json(_mesh_of(e), e.fun_name),
          "in_shardings": _specs_to_json(e._in_named_shardings),
          "out_shardings": _specs_to_json(e._out_named_shardings),
          "module_offset": offset, "module_size": size}


def _mesh_to_json(mesh: AbstractMesh | None, fun_name: str):
  if mesh is None:
    return None
  if not all(isinstance(n, str) for n in mesh.axis_names):
    raise TypeError(f"serialize of exported {fun_name}: its mesh has axis names "
                    f"{mesh.axis_names}; only str axis names can be serialized.")
  return {"axis_names": list(mesh.axis_names), "axis_sizes": list(mesh.axis_sizes),
          "axis_types": [t.name for t in mesh.axis_types]}


def _specs_to_json(named: tuple):
  return [None if s is None else
          {"dims": [list(s.spec._names(i)) for i in range(len(s.spec))],
           "memory_kind": s.memory_kind} for s in named]


def _named_from_json(specs, mesh: AbstractMesh | None, n: int, what: str) -> tuple:
  if mesh is None:
    if specs and any(x is not None for x in specs):
      raise ValueError(f"{what} without a mesh")
    return ()
  if not isinstance(specs, list) or len(specs) != n:
    raise ValueError(f"{what}: expected {n} entries")
  out = []
  for spec in specs:
    if spec is None:
      out.append(None)
      continue
    dims = []
    for d in spec["dims"]:
      if not all(name in mesh.axis_names for name in d):
        raise ValueError(f"{what}: axes {d} not in the mesh {mesh.axis_names}")
      dims.append(None if not d else d[0] if len(d) == 1 else tuple(d))
    kind = spec["memory_kind"]
    out.append(NamedSharding(mesh, PartitionSpec(*dims),
                             memory_kind=None if kind is None else str(kind)))
  return tuple(out)


def deserialize(blob: bytes | bytearray) -> Exported:
  """Loads bytes made by `Exported.serialize` (in this or another process).

  Raises:
    TypeError: `blob` is not bytes.
    ValueError: bytes that are not a serialized stagecraft Exported (JAX's flatbuffers
      format is not read), are truncated or damaged (checksum), come from a newer format
      version, or whose modules disagree with their headers.
  """
  if not isinstance(blob, (bytes, bytearray, memoryview)):
    raise TypeError(f"deserialize: expected the bytes of Exported.serialize(), got "
                    f"{type(blob).__name__}.")
  data = bytes(blob)
  try:
    (head,), payload = cache.unseal(data, _MAGIC, FORMAT_VERSION)
  except cache.SealError as e:
    raise ValueError({
        "magic": f"deserialize: these {len(data)} bytes are not a serialized stagecraft "
                 f"Exported (they do not start with {_MAGIC!r}); pass the bytes of "
                 f"Exported.serialize(). (JAX's flatbuffers format is not read.)",
        "truncated": f"deserialize: truncated: {len(data)} bytes, shorter than the header.",
        "version": f"deserialize: these bytes have stagecraft export format version "
                   f"{e.found}, but this stagecraft reads version {FORMAT_VERSION}; export "
                   f"the function again with this version.",
        "length": f"deserialize: the bytes have length {len(data)} but their header "
                  f"announces {e.found} (truncated or padded).",
        "checksum": "deserialize: the bytes are damaged: their SHA-256 checksum does not "
                    "match their contents.",
    }[e.kind]) from None
  except ValueError as e:   # more sections than one: not ours
    raise ValueError(f"deserialize: the serialized Exported is malformed: {e}") from None
  try:
    header = json.loads(head.decode("utf-8"))
    if header.get("format") != "stagecraft.Exported":
      raise ValueError(f"not a stagecraft.Exported header: {header.get('format')!r}")
    entries = header["exported"]
    if not isinstance(entries, list) or not entries:
      raise ValueError("no exported function in the header")
    chain = [_from_header(e, payload) for e in entries]
  except (KeyError, TypeError, IndexError, AttributeError, UnicodeDecodeError,
          json.JSONDecodeError, ValueError) as e:
    raise ValueError(f"deserialize: the serialized Exported is malformed: {e}") from None
  out = None
  for e in reversed(chain):   # link each to its VJP
    nxt = out
    out = dataclasses.replace(e, _get_vjp=None if nxt is None else (lambda _, v=nxt: v))
  return out


def _from_header(h: dict, payload: bytes) -> Exported:
  version = int(h["calling_convention_version"])
  if not (minimum_supported_calling_convention_version <= version
          <= maximum_supported_calling_convention_version):
    raise ValueError(f"calling convention version {version} is outside the supported range "
                     f"[{minimum_supported_calling_convention_version}.."
                     f"{maximum_supported_calling_convention_version}]")
  off, size = int(h["module_offset"]), int(h["module_size"])
  if off < 0 or size <= 0 or off + size > len(payload):
    raise ValueError(f"module bytes [{off}, {off + size}) outside the payload")
  module = payload[off:off + size]
  constraints = h.get("symbolic_constraints")
  scope = SymbolicScope(constraints) if constraints is not None else None
  # NB: as JAX's serialization, the avals come back without weak types (a deserialized
  # function's results are not weakly typed).
  in_avals = tuple(_aval_from_json_sym(a, scope).update(weak_type=False)
                   for a in h["in_avals"])
  out_avals = tuple(_aval_from_json_sym(a, scope).update(weak_type=False)
                    for a in h["out_avals"])
  in_tree = stages.tree_from_json(h["in_tree"])
  out_tree = stages.tree_from_json(h["out_tree"])
  if in_tree.num_leaves != len(in_avals) or out_tree.num_leaves != len(out_avals):
    raise ValueError(f"the trees have {in_tree.num_leaves} and {out_tree.num_leaves} leaves "
                     f"for {len(in_avals)} arguments and {len(out_avals)} results")
  kept = tuple(int(i) for i in h["module_kept_var_idx"])
  if list(kept) != sorted(set(kept)) or any(not 0 <= i < len(in_avals) for i in kept):
    raise ValueError(f"module_kept_var_idx {list(kept)} does not fit {len(in_avals)} "
                     f"arguments")
  platforms = tuple(str(p) for p in h["platforms"])
  if not platforms:
    raise ValueError("no platform")
  ins, outs = _main_signature(module)
  want_in = ["tensor<i32>"] * (len(platforms) > 1) + [_dyn_type(in_avals[i]) for i in kept]
  want_out = [_dyn_type(a) for a in out_avals]
  if ins != want_in or outs != want_out:
    raise ValueError(f"the module's main takes ({', '.join(ins)}) and returns "
                     f"({', '.join(outs)}), but the header says ({', '.join(want_in)}) -> "
                     f"({', '.join(want_out)}); the bytes were altered")
  m = h.get("mesh")
  mesh = None if m is None else AbstractMesh(
      tuple(int(k) for k in m["axis_sizes"]), tuple(str(k) for k in m["axis_names"]),
      tuple(AxisType[t] for t in m["axis_types"]))
  in_named = _named_from_json(h.get("in_shardings"), mesh, len(in_avals), "in_shardings")
  out_named = _named_from_json(h.get("out_shardings"), mesh, len(out_avals), "out_shardings")
  return Exported(
      fun_name=str(h["fun_name"]), in_tree=in_tree, in_avals=in_avals, out_tree=out_tree,
      out_avals=out_avals, in_shardings_hlo=(None,) * len(in_avals),
      out_shardings_hlo=(None,) * len(out_avals),
      _in_named_shardings=in_named, _out_named_shardings=out_named,
      nr_devices=int(h["nr_devices"]),
      platforms=platforms, ordered_effects=(), unordered_effects=(),
      disabled_safety_checks=tuple(DisabledSafetyCheck(str(d))
                                   for d in h["disabled_safety_checks"]),
      mlir_module_serialized=module, calling_convention_version=version,
      module_kept_var_idx=kept,
      uses_global_constants=scope is not None or len(platforms) > 1, _get_vjp=None)


# ---------------------------------------------------------------------------
# Calling an Exported: the call_exported primitive


def _arg_descriptor(exported: Exported, arg_idx: int, dim_idx: int | None) -> str:
  placeholder = tree_util.tree_unflatten(exported.in_tree, [0] * exported.in_tree.num_leaves)
  paths = [p for p, _ in tree_util.tree_flatten_with_path(placeholder)[0]]
  path = paths[arg_idx]
  root = "args" if path and getattr(path[0], "idx", 0) == 0 else "kwargs"
  desc = root + tree_util.keystr(tuple(path[1:]))
  return desc if dim_idx is None else f"{desc}.shape[{dim_idx}]"


def _call_exported_abstract_eval(*in_avals, exported: Exported):
  if len(in_avals) != len(exported.in_avals):
    raise ValueError(f"call of exported {exported.fun_name}: {len(in_avals)} arguments for "
                     f"{len(exported.in_avals)} exported ones.")
  for i, (want, got) in enumerate(zip(exported.in_avals, in_avals)):
    if len(want.shape) != len(got.shape):
      raise ValueError(f"Rank mismatch for {_arg_descriptor(exported, i, None)}: expected "
                       f"{want.shape} and called with {got.shape}")
    if want.dtype != got.dtype:
      raise ValueError(f"Dtype mismatch for {_arg_descriptor(exported, i, None)}: expected "
                       f"{want.dtype} and called with {got.dtype}")
    for d, (w, g) in enumerate(zip(want.shape, got.shape)):
      if shape_poly.is_constant_dim(w) and w != g:
        raise ValueError(f"Shape mismatch for {_arg_descriptor(exported, i, d)} (expected "
                         f"same constant): expected {want.shape} and called with {got.shape}")
  if _scope_of(exported) is not None:   # symbolic dimensions
    if any(_is_symbolic_aval(a) for a in in_avals):
      raise NotImplementedError(f"call of exported {exported.fun_name} with symbolically "
                                f"shaped arguments is not supported by stagecraft.")
    env = _symbolic_env(exported, in_avals)
    return [_concrete_aval(a, env) for a in exported.out_avals]
  return [ShapedArray(a.shape, a.dtype, a.weak_type) for a in exported.out_avals]


def _scope_of(exported: Exported):
  """The scope of the exported avals' symbolic dimensions (None: all are concrete)."""
  for a in (*exported.in_avals, *exported.out_avals):
    for d in a.shape:
      if shape_poly.is_symbolic_dim(d):
        return d.scope
  return None


def _call_exported_lowering(ctx, *operands, exported: Exported):
  module = ctx.module
  here = module.platform
  here = "cuda" if here == "gpu" else here
  if (here not in exported.platforms and not (here == "cuda" and "rocm" in exported.platforms)
      and DisabledSafetyCheck.platform() not in exported.disabled_safety_checks):
    raise ValueError(f"Function '{exported.fun_name}' was exported for platforms "
                     f"'{exported.platforms}' but it is used on '{(here,)}'.")
  ndev = module.num_partitions * module.num_replicas
  if exported.nr_devices != 1 and ndev != exported.nr_devices:
    raise ValueError(f"Function {exported.fun_name} was exported for {exported.nr_devices} "
                     f"devices and is called in a context with {ndev} devices, which is not "
                     f"allowed.")
  if _scope_of(exported) is not None:   # symbolic dimensions: the module refined to these
    exported = _refined(exported, ctx.avals_in)
  mesh = _mesh_of(exported)
  if mesh is not None and module.sdy_mesh is None:
    raise NotImplementedError(f"call of exported {exported.fun_name}, a program over "
                              f"{exported.nr_devices} devices, inside a pmap or "
                              f"xla_computation is not supported; call it from jit or "
                              f"eagerly.")
  key = ("call_exported", id(exported))
  cached = module.call_cache.get(key)
  if cached is None:
    meshes: dict = {}
    fname, texts = _inlined_functions(exported, module, meshes)
    module.funcs.extend(texts)
    module.call_cache[key] = (fname, exported, meshes)
  else:
    fname, _, meshes = cached
  if mesh is not None:
    # NB: as JAX's, the arguments are laid out as exported (the partitioner reshards what
    # the caller passes), over the exported mesh: its logical devices are the caller's.
    symbol = meshes["mesh"]
    operands = list(operands)
    for i, s in enumerate(exported._in_named_shardings):
      if s is not None:
        aval = ctx.avals_in[i]
        r = ctx.fb.fresh()
        ctx.fb.emit(f"{r} = sdy.sharding_constraint {operands[i]} "
                    f"{_sdy_text(s, len(aval.shape), symbol)} : {lowering.ir_type(aval)}")
        operands[i] = r
  args = [operands[i] for i in exported.module_kept_var_idx]
  in_types = [lowering.ir_type(exported.in_avals[i]) for i in exported.module_kept_var_idx]
  if len(exported.platforms) > 1:   # the multi-platform convention: the index comes first
    index = _platform_index(exported, here)
    args.insert(0, ctx.constant(index, ShapedArray((), np.dtype(np.int32))))
    in_types.insert(0, "tensor<i32>")
  out_types = [lowering.ir_type(a) for a in exported.out_avals]
  n = len(out_types)
  base = ctx.fb.fresh()
  lhs = f"{base} = " if n == 1 else (f"{base}:{n} = " if n else "")
  ctx.fb.emit(f"{lhs}func.call @{fname}({', '.join(args)}) : ({', '.join(in_types)}) -> "
              f"({', '.join(out_types)})")
  outs = [base] if n == 1 else [f"{base}#{i}" for i in range(n)]
  if mesh is not None:
    for i, s in enumerate(exported._out_named_shardings):
      if s is not None:
        aval = exported.out_avals[i]
        r = ctx.fb.fresh()
        ctx.fb.emit(f"{r} = sdy.sharding_constraint {outs[i]} "
                    f"{_sdy_text(s, len(aval.shape), meshes['mesh'])} : "
                    f"{lowering.ir_type(aval)}")
        outs[i] = r
  return outs


def _call_exported_batch_rule(args, dims, *, exported: Exported):
  # NB: as in JAX, an exported module has one signature; vmap needs it re-exported batched.
  raise NotImplementedError(f"Batching rule for 'call_exported' not implemented (vmap of the "
                            f"exported {exported.fun_name}): export the vmapped function "
                            f"instead, e.g. export(jit(vmap(f)))(...).")


call_exported_p = core.Primitive("call_exported")
call_exported_p.multiple_results = True
# impl: the generic one (lower the one-equation program, which inlines the module; run it)
call_exported_p.def_abstract_eval(_call_exported_abstract_eval)
lowering.register_lowering(call_exported_p, _call_exported_lowering)
batching.primitive_batchers[call_exported_p] = _call_exported_batch_rule
# JVP: none, as in JAX: `call` wraps the primitive in a custom_vjp whose bwd calls vjp();
# forward mode raises custom_vjp's error. DCE: the default (pure).


def call_exported(exported: Exported) -> Callable[..., Any]:
  """The function that runs `exported` (`Exported.call` is `call_exported(exported)(...)`).

  Raises:
    ValueError: `exported` is not an Exported.
  """
  if not isinstance(exported, Exported):
    raise ValueError(f"The exported argument must be an export.Exported. Found {exported}.")

  @custom_derivatives.custom_vjp
  def f_flat(*args_flat):
    return tuple(call_exported_p.bind(*args_flat, exported=exported))

  def f_flat_fwd(*args_flat):
    return f_flat(*args_flat), args_flat

  def f_flat_bwd(residual, cts):
    exp_vjp = exported.vjp()
    fixed = [np.zeros(a.shape, dtypes.float0) if a.dtype == dtypes.float0 else ct
             for ct, a in zip(cts, exp_vjp.in_avals[len(residual):])]
    return tuple(call_exported(exp_vjp)(*residual, *fixed))

  f_flat.defvjp(f_flat_fwd, f_flat_bwd)

  def f_imported(*args, **kwargs):
    leaves, in_tree = api_util.flatten((args, kwargs))
    if in_tree != exported.in_tree:
      raise ValueError(
          f"The invocation args and kwargs must have the same pytree structure as when the "
          f"function '{exported.fun_name}' was exported, but they differ: called with "
          f"{tree_util.treedef_str(in_tree)}, exported for "
          f"{tree_util.treedef_str(exported.in_tree)}.")
    outs = f_flat(*leaves)
    return tree_util.tree_unflatten(exported.out_tree, list(outs))

  return f_imported


call = call_exported
