"""Host callbacks: primitives whose program calls a Python function on the host.

`pure_callback`, `io_callback`, `debug_callback` and `debug_print` (JAX's `callback.py` and
`debugging.py`): each equation holds the flat Python callable in its params. Eager, the
callable runs at once; in a compiled program it becomes a host-callback custom call of the
runtime (`xla_ffi_python_cpu_callback`, the callables handed to compile: DESIGN.md), which
calls it with the operands while the program runs.

Effects: `io_callback` has `IOEffect`, `debug_callback`/`debug_print` have `DebugEffect`
(the `Ordered*` variants with `ordered=True`), so DCE keeps them and ordered ones run in
program order (a token threads through them). `pure_callback` has no effect: unused, it goes.

Callables receive `Array`s (as in JAX) and return array-likes, checked against the declared
result shapes and dtypes.
"""
from __future__ import annotations

import copy
import functools
import logging
import sys
from typing import Any, Callable, Sequence

import numpy as np
import optree
from jaxlib import xla_client as xc

from stagecraft import core, dtypes, monitoring, tree_util
from stagecraft.core import ShapedArray
from stagecraft.interpreters import ad, batching, lowering, mlir
from stagecraft.lax import shape as lax_shape
from stagecraft.lax.control_flow import loops
from stagecraft.runtime import client, dispatch, spmd
from stagecraft.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding
from stagecraft.runtime.array import Array

__all__ = ["DebugEffect", "OrderedDebugEffect", "IOEffect", "OrderedIOEffect", "debug_effect",
           "ordered_debug_effect", "io_effect", "ordered_io_effect", "FlatCallback",
           "pure_callback_p", "io_callback_p", "debug_callback_p", "debug_print_p",
           "inspect_sharding_p",
           "VMAP_METHODS", "emit_python_callback"]


# ---------------------------------------------------------------------------
# Effects


class DebugEffect(core.Effect):
  """`debug.print` / `debug.callback`: runs, in no particular order."""


class OrderedDebugEffect(core.Effect):
  """`debug.print(..., ordered=True)`: runs in program order."""


class IOEffect(core.Effect):
  """`io_callback`: runs, in no particular order."""
  io = "unordered"   # NB: what control flow's batching rules test (they cannot import this)


class OrderedIOEffect(core.Effect):
  """`io_callback(..., ordered=True)`: runs in program order."""
  io = "ordered"


debug_effect = DebugEffect()
ordered_debug_effect = OrderedDebugEffect()
io_effect = IOEffect()
ordered_io_effect = OrderedIOEffect()
core.ordered_effects.add_type(OrderedDebugEffect)
core.ordered_effects.add_type(OrderedIOEffect)


# ---------------------------------------------------------------------------
# The callable held in params


class FlatCallback:
  """A user callback taking flat leaves: `__call__(*leaves)` rebuilds `(args, kwargs)` with
  `in_tree`, calls `callback_func` and returns its result's leaves (hashed by identity).
  `static`: `(index, value)` pairs of leaves fixed at trace time (not arrays: strings,
  objects), put back among the runtime leaves at their flat indices."""
  __slots__ = ("callback_func", "in_tree", "out_tree", "static")

  def __init__(self, callback_func: Callable, in_tree, static: tuple = ()):
    self.callback_func = callback_func
    self.in_tree = in_tree
    self.out_tree = None
    self.static = static

  def __call__(self, *leaves):
    leaves = list(leaves)
    for i, value in self.static:   # NB: in increasing index order
      leaves.insert(i, value)
    args, kwargs = optree.tree_unflatten(self.in_tree, leaves)
    out = self.callback_func(*args, **kwargs)
    out_leaves, self.out_tree = optree.tree_flatten(out, none_is_leaf=False,
                                                    namespace=tree_util.NAMESPACE)
    return out_leaves

  @property
  def name(self) -> str:
    return getattr(self.callback_func, "__qualname__", None) or repr(self.callback_func)

  def __repr__(self):
    return (f"_FlatCallback(callback_func={self.callback_func!r}, "
            f"in_tree={tree_util.PyTreeDef(self.in_tree)})")


def _to_arrays(leaves: Sequence[Any], avals: Sequence[ShapedArray]) -> list[Array]:
  """Operands handed to a callable: host NumPy arrays (or eager values) become Arrays."""
  out = []
  for x, aval in zip(leaves, avals):
    if type(x) is Array:
      out.append(x)
    else:
      if isinstance(x, np.ndarray) and aval.weak_type:
        # NB: as JAX's, a value handed over by a compiled program has no weak type.
        aval = aval.update(weak_type=False)
      x = np.asarray(x, aval.dtype)
      out.append(Array(dispatch.to_buffer(x, aval), aval))
  return out


def _check_results(outs: Sequence[Any], result_avals: Sequence[ShapedArray],
                   what: str) -> list[np.ndarray]:
  """The callable's results as NumPy arrays of the declared avals.

  Raises:
    RuntimeError: for another number of results, shape or dtype (JAX's messages).
  """
  if len(outs) != len(result_avals):
    raise RuntimeError(f"Mismatched number of outputs from callback. Expected: "
                       f"{len(result_avals)}, Actual: {len(outs)}")
  res = []
  for i, (o, aval) in enumerate(zip(outs, result_avals)):
    if isinstance(o, (bool, int, float, complex)) and not isinstance(o, np.generic):
      a = np.asarray(o, aval.dtype)   # NB: Python scalars take the declared dtype
    else:
      a = np.asarray(o)
      if a.dtype != aval.dtype and dtypes.canonicalize_dtype(a.dtype) == aval.dtype:
        a = a.astype(aval.dtype)
    if a.shape != aval.shape:
      raise RuntimeError(f"Incorrect output shape for return value #{i}: Expected: "
                         f"{aval.shape}, Actual: {a.shape}")
    if a.dtype != aval.dtype:
      raise RuntimeError(f"Incorrect output dtype for return value #{i}: Expected: "
                         f"{aval.dtype}, Actual: {a.dtype}")
    res.append(a)
  return res


# ---------------------------------------------------------------------------
# Lowering: one rule for every callback primitive


def _emit_callback(ctx, operands: Sequence[str], host_fn: Callable, name: str, *,
                   ordered: bool, side_effect: bool, token: str | None = None,
                   host_callbacks: list | None = None, partitioned: bool = False) -> list[str]:
  """Emits the host-callback custom call of `host_fn(*numpy operands) -> tuple of numpy
  results` (the results typed by `ctx.avals_out`); threads the ordered-effect token, or
  `token` when given (then the results start with the new token). The HostCallback made
  is appended to `host_callbacks` when given. `partitioned` (a call without results): in
  a program over a mesh, XLA's partitioner runs it once per device on that device's shards
  (the runtime's `xla_ffi_partitioned_python_*_callback` target, as JAX's)."""
  platform = client.get_backend().platform
  device = "gpu" if platform in ("cuda", "rocm", "gpu") else "cpu"
  target = f"xla_ffi{'_partitioned' if partitioned else ''}_python_{device}_callback"
  ordered = ordered or token is not None
  cb = dispatch.HostCallback(host_fn, name, token=ordered)
  if host_callbacks is not None:
    host_callbacks.append(cb)
  index = ctx.module.add_host_callback(cb)
  in_types = [lowering.ir_type(a) for a in ctx.avals_in]
  out_types = [lowering.ir_type(a) for a in ctx.avals_out]
  in_layouts = [_layout(a) for a in ctx.avals_in]
  out_layouts = [_layout(a) for a in ctx.avals_out]
  operands = list(operands)
  if ordered:
    operands.insert(0, ctx.get_token() if token is None else token)
    in_types.insert(0, "!stablehlo.token")
    out_types.insert(0, "!stablehlo.token")
    in_layouts.insert(0, "dense<> : tensor<0xindex>")
    out_layouts.insert(0, "dense<> : tensor<0xindex>")
  attrs = (f'call_target_name = "{target}", api_version = 4 : i32, '
           f'has_side_effect = {"true" if side_effect else "false"}, '
           f"backend_config = {{index = {index} : ui64}}, "
           f"operand_layouts = [{', '.join(in_layouts)}], "
           f"result_layouts = [{', '.join(out_layouts)}]")
  module = ctx.module
  if module.sdy_mesh is not None and module.manual_depth is None:
    # NB: as JAX, in a program over a mesh (outside shard_map) the callback runs once, on
    # the mesh's first device: the operands are gathered there. A call without results
    # (a debug print) has one entry too: XLA's partitioner requires a sharding on every
    # side-effecting op.
    if _MAXIMAL_MESH not in module.extra_ops:
      module.extra_ops.append(_MAXIMAL_MESH)
    per_value = ", ".join(["<@maximal_mesh_0, []>"] * max(1, len(out_types)))
    attrs += f", sdy.sharding = #sdy.sharding_per_value<[{per_value}]>"
  outs = lowering.emit_op(ctx.fb, "stablehlo.custom_call", operands, in_types, out_types, attrs)
  if ordered and token is None:
    ctx.set_token(outs[0])
    outs = outs[1:]
  return outs


def emit_python_callback(ctx, callback: Callable, token: str | None,
                         operands: Sequence[str], operand_avals: Sequence[ShapedArray],
                         result_avals: Sequence[ShapedArray], *, has_side_effect: bool,
                         returns_token: bool = True, partitioned: bool = False,
                         sharding: Any = None) -> tuple[list[str], str | None, Callable]:
  """Emits a host-callback custom call of `callback` inside a lowering rule (JAX's
  `mlir.emit_python_callback`, which libraries' rules call, e.g. equinox's `noinline`).

  Args:
    ctx: the rule's LoweringRuleContext.
    callback: `callback(*numpy arrays) -> sequence of array-likes`, called while the
      program runs with the operands as NumPy arrays (shapes/dtypes of `operand_avals`).
    token: an ordered-effect token (SSA name) to thread through the call, or None.
    operands: the operands' SSA names.
    operand_avals, result_avals: their avals and the results'.
    has_side_effect: whether XLA must keep the call even when its results go unused.
    returns_token, sharding: accepted for JAX's signature (the token is returned when one
      is given; the callback runs on the device that runs the program).
    partitioned: for a call without results: in a program over a mesh, called once per
      device with that device's shards.

  Returns:
    `(results, token, keepalive)`: the results' SSA names (one per `result_avals`), the new
    token (None without `token`), and the host callable (to keep alive with the module).

  Raises:
    ValueError: for `partitioned=True` with results (JAX's message).
    (while the program runs) RuntimeError texts of JAX for a wrong number, shape or dtype
      of results, reported as the program's JaxRuntimeError.
  """
  del returns_token, sharding
  if partitioned and result_avals:
    raise ValueError("Partitioned callback not supported with return values.")
  result_avals = list(result_avals)
  name = f"python callback {getattr(callback, '__qualname__', None) or callback!r}"

  def host_fn(*args):
    return tuple(_check_results(callback(*args), result_avals, name))
  sub = ctx.replace(avals_in=list(operand_avals), avals_out=result_avals)
  made: list = []
  outs = _emit_callback(sub, operands, host_fn, name, ordered=False,
                        side_effect=has_side_effect, token=token, host_callbacks=made,
                        partitioned=partitioned)
  new_token = None
  if token is not None:
    new_token, outs = outs[0], outs[1:]
  return list(outs), new_token, made[0]


_MAXIMAL_MESH = "  sdy.mesh @maximal_mesh_0 = <[], device_ids=[0]>"


def _layout(aval: ShapedArray) -> str:
  nd = len(aval.shape)
  if nd == 0:
    return "dense<> : tensor<0xindex>"
  return f"dense<[{', '.join(str(i) for i in reversed(range(nd)))}]> : tensor<{nd}xindex>"


def _result_avals_out(result_avals) -> list[ShapedArray]:
  return [ShapedArray(a.shape, a.dtype, False) for a in result_avals]


# ---------------------------------------------------------------------------
# pure_callback and io_callback

pure_callback_p = core.Primitive("pure_callback")
pure_callback_p.multiple_results = True
io_callback_p = core.Primitive("io_callback")
io_callback_p.multiple_results = True

VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all",
                "legacy_vectorized")


def _callback_abstract_eval(*avals, callback, result_avals, **_):
  return _result_avals_out(result_avals)


def _run_callback(callback: FlatCallback, result_avals, in_avals, leaves, kind: str = "pure"):
  try:
    outs = callback(*_to_arrays(leaves, in_avals))
  except BaseException:
    # NB: as JAX's, the failure and its traceback are logged (at ERROR) where it happens
    monitoring.logger("callback").exception(f"jax.{kind}_callback failed")
    raise
  return _check_results(outs, result_avals, callback.name)


def _callback_impl(*args, callback, result_avals, _kind="pure", **_):
  avals = [core.get_aval(a) if type(a) is not Array else a.aval for a in args]
  try:
    res = _run_callback(callback, result_avals, avals, args, _kind)
  except Exception as e:
    # NB: as JAX's, where the callback runs inside the runtime even eagerly: what it raises
    # (or a result of the wrong shape) comes out as JaxRuntimeError, a RuntimeError
    # (equinox's filter_pure_callback tests catch RuntimeError)
    raise dispatch.xc.XlaRuntimeError(
        f"{_kind} callback {callback.name} raised {type(e).__name__}: {e} (the program that called it "
        f"stopped; the runtime stays usable)") from e
  return [Array(dispatch.to_buffer(r, a), a) for r, a in zip(res, result_avals)]


def _callback_lowering_of(kind: str):
  def rule(ctx, *operands, callback, result_avals, **params):
    in_avals = list(ctx.avals_in)
    ordered = bool(params.get("ordered", False))

    def host_fn(*leaves):
      return tuple(_run_callback(callback, result_avals, in_avals, leaves, kind))
    return _emit_callback(ctx, operands, host_fn, f"{kind} callback {callback.name}",
                          ordered=ordered, side_effect=kind != "pure")
  return rule


def _pure_callback_jvp(primals, tangents, **params):
  raise ValueError("Pure callbacks do not support JVP. Please use `jax.custom_jvp` to use "
                   "callbacks while taking gradients.")


def _io_callback_jvp(primals, tangents, **params):
  raise ValueError("IO callbacks do not support JVP.")


def _index(x, d, i):
  return x if d is batching.not_mapped else lax_shape.index_in_dim(x, i, d, keepdims=False)


def _batched_avals(result_avals, size):
  return tuple(ShapedArray((size, *a.shape), a.dtype) for a in result_avals)


def _sequential(prim, axis_size, args, dims, params, unrolled: bool):
  """The callback once per example (JAX's `sequential` vmap_method: a `lax.map`;
  `sequential_unrolled`: a Python loop)."""
  if unrolled:
    rows = [prim.bind(*[_index(x, d, i) for x, d in zip(args, dims)], **params)
            for i in range(axis_size)]
    outs = [lax_shape.concatenate([lax_shape.expand_dims(r[k], (0,)) for r in rows], 0)
            if rows else None for k in range(len(params["result_avals"]))]
    return outs, [0] * len(outs)
  batched = [batching.moveaxis(x, d, 0) for x, d in zip(args, dims)
             if d is not batching.not_mapped]

  def body(xs):
    it = iter(xs)
    full = [x if d is batching.not_mapped else next(it) for x, d in zip(args, dims)]
    return prim.bind(*full, **params)
  outs = loops.map(body, batched)
  return list(outs), [0] * len(outs)


def _pure_callback_batch(args, dims, *, callback, result_avals, vmap_method, sharding):
  size = next(core.get_aval(x).shape[d] for x, d in zip(args, dims)
              if d is not batching.not_mapped)
  params = dict(callback=callback, result_avals=result_avals, vmap_method=vmap_method,
                sharding=sharding)
  if vmap_method in ("sequential", "sequential_unrolled"):
    return _sequential(pure_callback_p, size, args, dims, params,
                       vmap_method == "sequential_unrolled")
  if vmap_method not in ("expand_dims", "broadcast_all", "legacy_vectorized"):
    raise NotImplementedError(
        "vmap is only supported for the pure_callback primitive when vmap_method is one of "
        "'sequential', 'sequential_unrolled', 'expand_dims', 'broadcast_all', or "
        f"'legacy_vectorized'. Got vmap_method={vmap_method!r}.")
  new_args = []
  for x, d in zip(args, dims):
    if d is not batching.not_mapped:
      new_args.append(batching.moveaxis(x, d, 0))
    elif vmap_method == "expand_dims":
      new_args.append(lax_shape.expand_dims(x, (0,)))
    elif vmap_method == "broadcast_all":
      new_args.append(batching.broadcast(x, size, 0))
    else:
      new_args.append(x)
  outs = pure_callback_p.bind(*new_args, **{**params,
                                            "result_avals": _batched_avals(result_avals, size)})
  return outs, [0] * len(outs)


def _io_callback_batch(args, dims, *, callback, result_avals, ordered, sharding):
  if ordered:
    raise ValueError("Cannot `vmap` ordered IO callback.")
  size = next(core.get_aval(x).shape[d] for x, d in zip(args, dims)
              if d is not batching.not_mapped)
  params = dict(callback=callback, result_avals=result_avals, ordered=ordered,
                sharding=sharding)
  return _sequential(io_callback_p, size, args, dims, params, unrolled=False)


for _p, _kind in ((pure_callback_p, "pure"), (io_callback_p, "io")):
  _p.def_abstract_eval(_callback_abstract_eval)
  _p.def_impl(functools.partial(_callback_impl, _kind=_kind))
lowering.register_lowering(pure_callback_p, _callback_lowering_of("pure"))
lowering.register_lowering(io_callback_p, _callback_lowering_of("io"))
ad.primitive_jvps[pure_callback_p] = _pure_callback_jvp
ad.primitive_jvps[io_callback_p] = _io_callback_jvp


def _pure_callback_transpose(cts, *args, **params):
  raise ValueError("Pure callbacks do not support transpose. Please use `jax.custom_vjp` to "
                   "use callbacks while taking gradients.")


def _io_callback_transpose(cts, *args, **params):
  raise ValueError("IO callbacks do not support transpose.")


ad.primitive_transposes[pure_callback_p] = _pure_callback_transpose
ad.primitive_transposes[io_callback_p] = _io_callback_transpose
batching.primitive_batchers[pure_callback_p] = _pure_callback_batch
batching.primitive_batchers[io_callback_p] = _io_callback_batch
io_callback_p.def_effects(
    lambda ordered, **_: frozenset({ordered_io_effect if ordered else io_effect}))
core.pp_param_order[pure_callback_p] = ("callback", "result_avals", "sharding", "vmap_method")
core.pp_param_order[io_callback_p] = ("callback", "ordered", "result_avals", "sharding")


# ---------------------------------------------------------------------------
# debug_callback and debug_print: no results; jvp sees primals only; vmap runs per example

debug_callback_p = core.Primitive("debug_callback")
debug_callback_p.multiple_results = True
debug_print_p = core.Primitive("debug_print")
debug_print_p.multiple_results = True


def _debug_effects(ordered: bool, **_):
  return frozenset({ordered_debug_effect if ordered else debug_effect})


def _debug_callback_host(callback: FlatCallback, in_avals, leaves):
  callback(*_to_arrays(leaves, in_avals))


def format_print(fmt: str, in_tree, static_args, np_printoptions, leaves) -> str:
  """The text `debug.print` prints: `fmt.format(*args, **kwargs)` with the array leaves
  (Arrays) and the static ones put back, under the NumPy print options of trace time."""
  it = iter(leaves)
  statics = dict(static_args)
  n = len(leaves) + len(static_args)
  full = [statics[i] if i in statics else next(it) for i in range(n)]
  args, kwargs = optree.tree_unflatten(tree_util.spec_of(in_tree), full)
  with np.printoptions(**dict(np_printoptions)):
    return fmt.format(*args, **kwargs)


def _print_host(params, in_avals, leaves):
  text = format_print(params["fmt"], params["in_tree"], params["static_args"],
                      params["np_printoptions"], _to_arrays(leaves, in_avals))
  record = params.get("logging_record")
  if record is not None:   # `debug.log`: the text in a copy of the call site's record
    record = copy.copy(record)
    record.msg = text
    logging.getLogger(record.name).handle(record)
    return
  # NB: one write, so that lines printed by several devices at once do not interleave.
  sys.stdout.write(text + "\n")
  sys.stdout.flush()


def _debug_callback_impl(*args, callback, **_):
  avals = [a.aval if type(a) is Array else core.get_aval(a) for a in args]
  _debug_callback_host(callback, avals, args)
  return []


def _debug_print_impl(*args, **params):
  avals = [a.aval if type(a) is Array else core.get_aval(a) for a in args]
  _print_host(params, avals, args)
  return []


def _debug_callback_lowering(ctx, *operands, callback, ordered, partitioned):
  in_avals = list(ctx.avals_in)

  def host_fn(*leaves):
    _debug_callback_host(callback, in_avals, leaves)
    return ()
  return _emit_callback(ctx, operands, host_fn, f"debug callback {callback.name}",
                        ordered=ordered, side_effect=True, partitioned=partitioned)


def _debug_print_lowering(ctx, *operands, **params):
  in_avals = list(ctx.avals_in)

  def host_fn(*leaves):
    _print_host(params, in_avals, leaves)
    return ()
  return _emit_callback(ctx, operands, host_fn, "debug.print", ordered=params["ordered"],
                        side_effect=True, partitioned=params["partitioned"])


def _debug_jvp_of(prim):
  def rule(primals, tangents, **params):
    prim.bind(*primals, **params)
    return [], []
  return rule


def _debug_batch_of(prim):
  def rule(args, dims, **params):
    # NB: one call per example, in order, with static indices (as JAX prints under vmap).
    size = next(core.get_aval(x).shape[d] for x, d in zip(args, dims)
                if d is not batching.not_mapped)
    for i in range(size):
      prim.bind(*[_index(x, d, i) for x, d in zip(args, dims)], **params)
    return [], []
  return rule


for _p, _impl, _low in ((debug_callback_p, _debug_callback_impl, _debug_callback_lowering),
                        (debug_print_p, _debug_print_impl, _debug_print_lowering)):
  _p.def_abstract_eval(lambda *avals, **params: [])
  _p.def_impl(_impl)
  _p.def_effects(_debug_effects)
  lowering.register_lowering(_p, _low)
  ad.primitive_jvps[_p] = _debug_jvp_of(_p)
  batching.primitive_batchers[_p] = _debug_batch_of(_p)
core.pp_param_order[debug_callback_p] = ("callback", "ordered", "partitioned")
core.pp_param_order[debug_print_p] = ("fmt", "has_placeholders", "in_tree", "logging_record",
                                      "np_printoptions", "ordered", "partitioned",
                                      "static_args")


# ---------------------------------------------------------------------------
# inspect_sharding: `debug.inspect_array_sharding` of a traced value. Its lowering calls the
# user's callback with the value's sharding: at once in a one-device program; in a program
# over a mesh, from XLA's partitioner when it has chosen the sharding (jaxlib's
# "InspectSharding" custom call, whose backend config encodes the Python function), as JAX's.

inspect_sharding_p = core.Primitive("inspect_sharding")
inspect_sharding_p.multiple_results = True
inspect_sharding_p.def_abstract_eval(lambda aval, **_: [])
inspect_sharding_p.def_effects(lambda **_: frozenset({debug_effect}))   # (kept by DCE)


def _inspect_sharding_impl(value, *, callback):
  callback(value.sharding)
  return []


def _inspect_sharding_lowering(ctx, value, *, callback):
  module = ctx.module
  mesh = module.sdy_mesh
  if mesh is None and module.mesh is not None:
    raise NotImplementedError("inspect_array_sharding inside pmap is not implemented (JAX "
                              "does not implement it either).")
  if mesh is None or mesh.size == 1:
    device = client.default_device() if mesh is None else mesh.devices.flat[0]
    callback(SingleDeviceSharding(device))
    return []
  ndim = len(ctx.avals_in[0].shape)

  def from_partitioner(hlo_sharding):
    spec = (NamedSharding(mesh, PartitionSpec()) if hlo_sharding.is_manual() else
            spmd.named_from_hlo(hlo_sharding, mesh, ndim))
    callback(spec if spec is not None else
             NamedSharding(mesh, PartitionSpec()))   # NB: a tiling no spec names

  # NB: the module text holds the function's address, and any compile of that text (a
  # recompile after the executable left the cache, too) calls it: kept for the process.
  _partitioner_callbacks.append(from_partitioner)
  key = "".join(f"\\{b:02X}" for b in xc.encode_inspect_sharding_callback(from_partitioner))
  ty = lowering.ir_type(ctx.avals_in[0])
  lowering.emit_op(ctx.fb, "stablehlo.custom_call", [value], [ty], [ty],
                   f'call_target_name = "InspectSharding", api_version = 1 : i32, '
                   f'has_side_effect = true, backend_config = "{key}"')
  return []


_partitioner_callbacks: list[Callable] = []
inspect_sharding_p.def_impl(_inspect_sharding_impl)
lowering.register_lowering(inspect_sharding_p, _inspect_sharding_lowering)
ad.primitive_jvps[inspect_sharding_p] = lambda primals, tangents, **params: (
    inspect_sharding_p.bind(*primals, **params), [])
batching.primitive_batchers[inspect_sharding_p] = lambda args, dims, **params: (
    inspect_sharding_p.bind(*args, **params), [])


# Operands split over Explicit mesh axes: the results are unsharded (as JAX's types: the
# callback sees the whole gathered operands, on one device).
# Debug callbacks have no results.
for _p in (pure_callback_p, io_callback_p, debug_callback_p, debug_print_p):
  core.sharding_rules[_p] = lambda *avals, **params: None


mlir.register_python_callback_emitter(emit_python_callback)
