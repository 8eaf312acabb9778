"""Transfers, compilation (cached), execution, and the generic eager impl of primitives.

Eager `prim.bind(*arrays)` lowers a one-equation jaxpr, compiles it once per
(primitive, params, avals) and runs the cached executable, so eager and jitted numerics agree.
"""
from __future__ import annotations

import contextvars
import gc
import logging
import os
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np
from jaxlib import xla_client as xc

from stagecraft import core, dtypes, dump_ir, monitoring, tree_util
from stagecraft.core import Jaxpr, JaxprEqn, ShapedArray, Var
from stagecraft.interpreters import lowering
from stagecraft.config import config
from stagecraft.runtime import cache, client, transfer_guard
from stagecraft.runtime import array as array_mod
from stagecraft.runtime.array import Array
from stagecraft import sharding as sharding_lib
from stagecraft.sharding import SingleDeviceSharding, concrete_mesh, to_named

__all__ = ["placement_used", "to_buffer", "Placement", "target_placement", "target_device",
           "commits_default", "mark_all_committed",
           "device_put_leaf", "block_until_ready", "compile_count", "compile_module",
           "forget_module", "trim_host_memory",
           "Executable", "mesh_apply_primitive", "apply_primitive", "HostCallback",
           "host_callbacks_of", "execute_with_callbacks", "run_with_callbacks",
           "effects_barrier", "find_special", "check_special", "result_handlers",
           "runtime_handlers", "wrap_results", "TOKEN_BUFFER_AVAL",
           "cache_clearers", "register_cache_clearer", "clear_caches"]

try:  # the runtime's own array type, accepted wherever an Array is
  from jaxlib._jax import ArrayImpl as _JaxArray
except ImportError:  # pragma: no cover
  _JaxArray = None

# ---------------------------------------------------------------------------
# Host -> device


#: Set once some Array lives off the default device (or a mesh is set: `set_mesh`); until
#: then dispatch skips placement.
placement_used = [False]
# NB: `set_mesh` (platform layer) turns placement on through this hook
sharding_lib.on_set_mesh[0] = lambda: placement_used.__setitem__(0, True)


def _put_np(x: np.ndarray, aval: ShapedArray, device, committed: bool = False,
            force_copy: bool = False) -> Any:
  return xc.batched_device_put(aval, client.single_device_sharding(device), [x], [device],
                               committed, force_copy, enable_x64=True)


def to_buffer(x: Any, aval: ShapedArray, device=None, committed: bool = False, *,
              transfer: str | None = "implicit") -> Any:
  """A device buffer holding `x` with dtype `aval.dtype` on `device` (default device when
  None); no copy for an Array already there. Host data is always copied, so later writes to
  a NumPy input never change the Array. `transfer` is how the transfer guards see a move:
  "implicit" (a computation's operand), "explicit" (`device_put`) or None (the runtime's
  own: a program's constants).

  Raises:
    JaxRuntimeError: where a transfer guard disallows the move (runtime/transfer_guard.py).
  """
  if type(x) is Array:
    buf = x._buf
    if buf is None:
      x._check_buf()
    if x._sharding is not None:   # split over devices: gathered onto one
      return _move(x, device)
    if x._device is device or device is None and x._device is None:
      return buf
    if transfer is not None and transfer_guard.active[0]:
      transfer_guard.device_to_device(x.aval, x.device, device or client.default_device(),
                                      transfer == "explicit")
    return _move(x, device)
  device = device or client.default_device()
  if type(x) is core.Token:
    return _token_buffer(x, device, committed)
  if _JaxArray is not None and type(x) is _JaxArray:
    if x.dtype == aval.dtype and not x.is_deleted() and x.devices() == {device}:
      return x
    x = np.asarray(x)
  if isinstance(x, core.Tracer):
    raise core.escaped_tracer_error(x)
  if transfer is not None and transfer_guard.active[0]:
    # NB: named by the host value's own aval (a Python int is an int32[] even where an f32
    # operand takes it), as JAX's
    transfer_guard.host_to_device(_host_aval(x, aval), device, transfer == "explicit")
  handler = dtypes.canonicalize_value_handlers.get(type(x))
  if handler is not None:   # a type registered by a library (JAX's canonicalize handlers)
    x = handler(x)
  if aval.dtype == dtypes.float0:   # NB: i1 zeros in the program (lowering.py)
    aval = aval.update(dtype=np.dtype(np.bool_), weak_type=False)
    return _put_np(np.zeros(aval.shape, np.bool_), aval, device, committed)
  arr = np.asarray(x, dtype=aval.dtype)
  return _put_np(arr, aval, device, committed, force_copy=arr is x)


def _host_aval(x: Any, aval: ShapedArray) -> ShapedArray:
  try:
    own = core.get_aval(x)
  except TypeError:
    return aval
  return own if type(own) is ShapedArray else aval


#: The buffer of a token value on the device: an empty bool array (as JAX's, and as PJRT passes
#: `!stablehlo.token` arguments and results).
TOKEN_BUFFER_AVAL = ShapedArray((0,), np.dtype(np.bool_))


def _token_buffer(tok: core.Token, device, committed: bool) -> Any:
  # A token argument: the buffer the token holds when it is a token buffer already there (the
  # program then waits for the computation that made it), else a new empty one.
  buf = tok._buf
  if type(buf) is Array and buf.aval == TOKEN_BUFFER_AVAL and buf._sharding is None:
    if buf._buf is not None and (buf._device is device or device is None and buf._device is None):
      return buf._buf
  tok.block_until_ready()
  return _put_np(np.zeros((0,), np.bool_), TOKEN_BUFFER_AVAL, device or client.default_device(),
                 committed)


def _move(x: Array, device) -> Any:
  device = device or client.default_device()
  return _put_np(np.asarray(x._value), x.aval, device, True, False)


class Placement(tuple):
  """Per argument of a call that meets Arrays laid out over a mesh: its committed sharding
  (NamedSharding / SingleDeviceSharding) or None (uncommitted). Part of jit cache keys."""
  __slots__ = ()


def target_placement(args: Sequence[Any], describe: Any = None):
  """Where a computation on `args` runs: None (the default device), a device (the one
  non-default device of its Arrays), or a `Placement` when some Array is split over a mesh
  (or some argument is a ShapeDtypeStruct carrying a sharding).

  Raises:
    ValueError: Arrays on two different single devices (no mesh); the
      message names the two arguments with `describe` (index -> "argument x of f with
      shape float32[3]"; a Primitive: its operands, named as JAX's jnp functions name
      theirs), as JAX's.
  """
  for a in args:
    t = type(a)
    if (t is Array and a._sharding is not None) or (
        t is core.ShapeDtypeStruct and a.sharding is not None):
      return Placement(committed_sharding(a) for a in args)
  return target_device(args, describe)


def committed_sharding(a):
  """The sharding an argument is committed to (NamedSharding, SingleDeviceSharding: an
  Array placed on a device, the default one included), or None (uncommitted)."""
  t = type(a)
  if t is Array:
    if a._sharding is not None:
      return a._sharding
    if a._device is not None:
      return SingleDeviceSharding(a._device)
    if id(a) in array_mod.committed_to_default:
      return SingleDeviceSharding(client.default_device())
    return None
  if t is core.ShapeDtypeStruct and a.sharding is not None:
    return to_named(a.sharding, "ShapeDtypeStruct.sharding")
  return None


def target_device(args: Sequence[Any], describe: Any = None):
  """The device a computation on `args` runs on: the one non-default device among its
  Array arguments, or None (the default device).

  Raises:
    ValueError: if Arrays on two different non-default devices meet (or
      one committed to the default device meets one elsewhere); `describe` as for
      `target_placement`.
  """
  dev = first = None
  for i, a in enumerate(args):
    if type(a) is Array and a._device is not None:
      if dev is None:
        dev, first = a._device, i
      elif a._device != dev:
        _incompatible(args, (first, dev), (i, a._device), describe)
  if dev is not None:
    # NB: an Array committed to the default device (device_put(x, devices()[0])) does not
    # move either: meeting one on another device is an error, as in JAX.
    for i, a in enumerate(args):
      if type(a) is Array and a._device is None and id(a) in array_mod.committed_to_default:
        _incompatible(args, (i, client.default_device()), (first, dev), describe)
  return dev


def _incompatible(args, one, other, describe):
  """JAX's error for two arguments `one` and `other` (`(index, device)` each) committed to
  different devices."""
  if isinstance(describe, core.Primitive):   # an eager primitive's operands
    describe = _primitive_args(describe, args)
  if describe is None:
    describe = lambda i: f"argument {i} with shape {core.get_aval(args[i]).str_short(False)}"
  (i, d1), (j, d2) = sorted([one, other], key=lambda e: e[0])
  raise ValueError(
      f"Received incompatible devices for jitted computation. Got {describe(i)} and with "
      f"device ids [{d1.id}] on platform {d1.platform.upper()} and {describe(j)} and with "
      f"device ids [{d2.id}] on platform {d2.platform.upper()}")


def device_put_leaf(x, device, path):
  if type(x) is core.Token:   # a token: a new one whose buffer is on `device`
    buf = x._buf
    if type(buf) is not Array or buf.aval != TOKEN_BUFFER_AVAL:
      buf = Array(to_buffer(x, TOKEN_BUFFER_AVAL), TOKEN_BUFFER_AVAL)
    return core.Token(device_put_leaf(buf, device, path))
  try:
    aval = core.get_aval(x)
  except OverflowError:
    raise   # NB: JAX's message as it is
  except TypeError:
    raise TypeError(f"Argument '{x}' of type {type(x)} is not a valid JAX type") from None
  if isinstance(x, core.Tracer):
    # NB: as JAX's, a device (or none) inside a trace does not place the value: the program
    # runs where its device assignment says.
    return x
  if device is None:
    return x if type(x) is Array else Array(to_buffer(x, aval, transfer="explicit"), aval)
  dev = None if device == client.default_device() else device
  if dev is not None:
    placement_used[0] = True
  if type(x) is Array:
    if x._device == dev and (dev is not None or id(x) in array_mod.committed_to_default):
      return x
    if transfer_guard.active[0] and x._sharding is None and x.device != device:
      transfer_guard.device_to_device(x.aval, x.device, device, explicit=True)
    phys = x._physical()   # NB: typed keys move as their key data (the same buffer)
    out = Array(_put_np(np.asarray(phys._value), phys.aval, device, True), aval, dev)
  else:
    out = Array(to_buffer(x, aval, device, committed=True, transfer="explicit"), aval, dev)
  if dev is None:
    array_mod.mark_committed(out)
  return out


def block_until_ready(x: Any) -> Any:
  """Waits until every Array in the pytree `x` is computed; returns `x`."""
  for leaf in tree_util.tree_leaves(x):
    if hasattr(leaf, "block_until_ready"):   # Arrays and jax.Arrays
      leaf.block_until_ready()
  return x


# ---------------------------------------------------------------------------
# Compilation

_MAX_CACHE = 4096
#: The global compile cache is bounded in bytes too (module text + generated code).
_MAX_CACHE_BYTES = 256 << 20
_compile_cache: dict[Any, Any] = {}
_cache_sizes: dict[Any, int] = {}
_cache_bytes = [0]
_keys_by_text: dict[str, list] = {}


def _evict_one() -> None:
  key = next(iter(_compile_cache))   # NB: the oldest entry (insertion order)
  _drop(key)


def _drop(key) -> None:
  _compile_cache.pop(key, None)
  _cache_bytes[0] -= _cache_sizes.pop(key, 0)
  keys = _keys_by_text.get(key[0])
  if keys is not None:
    if key in keys:
      keys.remove(key)
    if not keys:
      del _keys_by_text[key[0]]


_released = [0]


def forget_module(text: str) -> None:
  """Drops the executables compiled from `text` from the global compile cache (called when
  the function that owns them is collected; owners still holding one keep it alive).

  Every 64 executables released, the C allocator is asked to give freed memory back to the
  system (glibc's `malloc_trim`), so that the process's RSS goes down, not only its heap."""
  with _compile_lock:
    for key in list(_keys_by_text.get(text, ())):
      _drop(key)
      _released[0] += 1
  if _released[0] >= 64:
    _released[0] = 0
    trim_host_memory()
  _trim_pending[0] = True


_trim_pending = [False]


def _after_gc(phase, info) -> None:
  # NB: executables released by a collection (a function in a reference cycle) free most of
  # their memory only when the cycle goes: trim once after that collection.
  if phase == "stop" and _trim_pending[0] and info.get("collected", 0):
    _trim_pending[0] = False
    trim_host_memory()


gc.callbacks.append(_after_gc)


def trim_host_memory() -> None:
  """Returns freed C heap memory to the operating system where the C library can
  (glibc's `malloc_trim(0)`); does nothing elsewhere."""
  try:
    _libc().malloc_trim(0)
  except (OSError, AttributeError):
    pass


_libc_handle: list = []


def _libc():
  if not _libc_handle:
    import ctypes  # noqa: PLC0415 (only when executables are released)
    _libc_handle.append(ctypes.CDLL("libc.so.6"))
  return _libc_handle[0]


def _size_of(text: str, exe) -> int:
  try:
    st = exe.get_compiled_memory_stats()
    code = st.generated_code_size_in_bytes + st.host_generated_code_size_in_bytes
  except Exception:  # noqa: BLE001 - a runtime without memory stats: count the text only
    code = 0
  return len(text) + code
# NB: re-entrant: a garbage collection during a compile (an allocation inside the runtime
# holding this lock) can finalize a jitted function, whose finalizer (`forget_module`) takes
# the lock again on the same thread; a plain Lock deadlocked there. Dropping cache entries
# during a compile is safe: compile_module inserts its own entry after the compile.
_compile_lock = threading.RLock()
compile_count = [0]   # number of XLA compilations (tests and benchmarks read it)


#: XLA option overrides (`(name, value)` pairs) for the programs compiled while set: a jit's
#: `compiler_options` (`pjit.jit`). Part of the in-memory and on-disk cache keys.
compile_overrides: contextvars.ContextVar[tuple] = contextvars.ContextVar(
    "compile_overrides", default=())


def compile_module(text: str, devices: Sequence[Any] | None = None, *, num_replicas: int = 1,
                   num_partitions: int = 1, fun_name: str | None = None) -> Any:
  """Compiles StableHLO `text` for `devices` (default: the default device). `fun_name` names
  the program in `monitoring` events (default: from the module's name).

  Cached in memory on the text and options, and, when `config.compilation_cache_dir` is set,
  on disk (runtime/cache.py): an in-memory miss first looks for an entry there (keyed on the
  text without its locations, options, device kind and jaxlib version) and stores what it
  compiles. A bad entry
  or an unusable directory warns and compiles; it never fails the call.

  Returns:
    the runtime LoadedExecutable.

  Raises:
    RuntimeError: in a process forked after the runtime started (it would deadlock).
  """
  devs = tuple(devices) if devices is not None else (client.default_device(),)
  callbacks = host_callbacks_of(text)
  overrides = compile_overrides.get()
  key = (text, devs, num_replicas, num_partitions, callbacks, overrides)
  exe = _compile_cache.get(key)
  if exe is not None:
    return exe
  client.check_not_forked()   # NB: before the lock, which a forked child may find held
  with _compile_lock:
    exe = _compile_cache.get(key)
    if exe is None:
      while _compile_cache and (len(_compile_cache) >= _MAX_CACHE
                                or _cache_bytes[0] >= _MAX_CACHE_BYTES):
        _evict_one()
      backend = devs[0].client
      ids = np.array([d.id for d in devs])
      assignment = ids.reshape(num_replicas, num_partitions)
      opts = client.compile_options(num_replicas, num_partitions, assignment)
      if num_replicas == 1 and num_partitions == 1:
        client.allow_sharding_propagation(opts, text)
      if overrides:
        opts.env_option_overrides = list(overrides)
      if config.dump_ir_to:   # jax_dump_ir_to: the module compiled
        dumped = dump_ir.dump_module(text, _module_name(text))
        if dumped:
          monitoring.logger("compiler").info("Dumped the module to %s.", dumped)
      cache_dir = config.compilation_cache_dir
      disk_key = None
      log = monitoring.compile_log("dispatch", config.log_compiles)
      started = time.time()
      if cache_dir and not callbacks:   # NB: Python callables cannot be stored on disk
        cache_dir = os.fspath(cache_dir)
        disk_key = cache.cache_key(text + (f"\n// compiler_options {overrides!r}"
                                           if overrides else ""),
                                   devs, num_replicas, num_partitions)
        monitoring.record_event(monitoring.CACHE_REQUEST_EVENT)
        t = time.monotonic()
        exe = cache.lookup(cache_dir, disk_key, devs, opts)
        explain = (monitoring.logger("compiler") if config.explain_cache_misses
                   else None)   # (JAX's logger of the persistent cache)
        if exe is not None:
          monitoring.record_event(monitoring.CACHE_HIT_EVENT)
          monitoring.record_event_duration_secs(monitoring.CACHE_RETRIEVAL_EVENT,
                                                time.monotonic() - t)
          if config.log_compiles:
            monitoring.logger("compiler").warning(
                "Persistent compilation cache hit for '%s' with key %r",
                _module_name(text), disk_key)
        elif explain is not None:
          explain.warning("PERSISTENT COMPILATION CACHE MISS for '%s' with key %r",
                          _module_name(text), disk_key)
      if exe is None:
        t = time.monotonic()
        with monitoring.timed(monitoring.BACKEND_COMPILE_EVENT, fun_name or
                              monitoring.module_fun_name(text)):
          if callbacks:
            exe = backend.compile_and_load(_mlir_module(text), client.device_list(devs), opts,
                                           list(callbacks))
          else:
            exe = backend.compile_and_load(text, client.device_list(devs), opts)
        compile_count[0] += 1
        # NB: as JAX: programs that compile faster than jax_persistent_cache_min_compile_time_secs
        # (default 1 s) are not worth a disk entry; entries smaller than a positive
        # jax_persistent_cache_min_entry_size_bytes are not written either.
        took = time.monotonic() - t
        if disk_key is not None and took < config.persistent_cache_min_compile_time_secs:
          if explain is not None:
            explain.warning("Not writing persistent cache entry for '%s' because it took < "
                            "%.2f seconds to compile (%.2fs)", _module_name(text),
                            config.persistent_cache_min_compile_time_secs, took)
        elif (disk_key is not None and
              cache.store(cache_dir, disk_key, exe,
                          min_size=config.persistent_cache_min_entry_size_bytes)):
          monitoring.record_event(monitoring.CACHE_MISS_EVENT)
          cache.evict(cache_dir, config.compilation_cache_max_size)
      if log is not None:
        name = fun_name or monitoring.module_fun_name(text, always=True)
        log.log(logging.WARNING if config.log_compiles else logging.DEBUG,
                f"Finished XLA compilation of {name} in {time.time() - started:.9f} sec")
      _compile_cache[key] = exe
      size = _cache_sizes[key] = _size_of(text, exe)
      _cache_bytes[0] += size
      _keys_by_text.setdefault(text, []).append(key)
  return exe


def _module_name(text: str) -> str:
  """The symbol name of the module in StableHLO `text` (`jit_f`), as JAX's cache logs
  name a program."""
  head = text[:300]
  i = head.find("module @")
  return head[i + 8:].split(None, 1)[0].strip('"') if i >= 0 else "<unknown>"


# ---------------------------------------------------------------------------
# Host callbacks


def host_callbacks_of(text: str) -> tuple:
  """The host callbacks a module's custom calls index (`lowering.ModuleText`), or ()."""
  return getattr(text, "host_callbacks", ())


_mlir_context: list = []


def _mlir_module(text: str):
  """`text` parsed into an MLIR module of the runtime's MLIR bindings: the runtime takes the
  callables of host callbacks only with a parsed module, not with text."""
  # NB: jaxlib's MLIR bindings cost ~0.1 s to import; only modules with callbacks need them.
  from jaxlib.mlir import ir
  from jaxlib.mlir.dialects import chlo, sdy, stablehlo
  from jaxlib.mlir._mlir_libs import _jax_mlir_ext
  if not _mlir_context:
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    ctx = ir.Context()
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    sdy.register_dialect(ctx)
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    _mlir_context.append(ctx)
  with _mlir_context[0]:
    return ir.Module.parse(str(text))


class HostCallback:
  """A Python function called by a running program (a host-callback custom call).

  Called by the runtime with NumPy arrays (and the token first, for `token=True`); returns
  the results as a tuple. An exception raised by `fn` is kept, so that the call site can
  raise it (`finish_callbacks`) instead of the runtime's generic error."""
  __slots__ = ("fn", "name", "token", "errors", "__weakref__")

  def __init__(self, fn, name: str, token: bool = False):
    self.fn = fn
    self.name = name
    self.token = token
    self.errors: list[BaseException] = []

  def __call__(self, *args):
    try:
      if self.token:
        return (args[0], *self.fn(*args[1:]))
      return tuple(self.fn(*args))
    except BaseException as e:
      self.errors.append(e)
      raise


_callbacks_lock = threading.Lock()


def execute_with_callbacks(exe, bufs: Sequence[Any], callbacks: Sequence[HostCallback]):
  """Runs a program with host callbacks to completion; returns its per-device results
  (as `execute_sharded(...).disassemble_into_single_device_arrays()`).

  Programs with callbacks complete before their call returns, so their callbacks run in
  call order (ordered effects across calls) and their errors surface here.

  Raises:
    JaxRuntimeError: naming the callback that raised, chained to its exception.
  """
  return run_with_callbacks(exe, bufs, callbacks).disassemble_into_single_device_arrays()


def run_with_callbacks(exe, bufs: Sequence[Any], callbacks: Sequence[HostCallback]):
  """Runs a program with host callbacks (on one device or several: each calls them) to
  completion; returns its `execute_sharded` results, not yet consumed.

  Raises:
    JaxRuntimeError: naming the callback that raised, chained to its exception (the first
      one raised; the same callback raising on several devices is reported once).
  """
  error = res = None
  try:
    res = exe.execute_sharded(bufs, with_tokens=True)
    client.count_execution()
    token = res.consume_token()
    token.block_until_ready()
  except xc.XlaRuntimeError as e:
    error = e
  with _callbacks_lock:
    raised = []
    for cb in callbacks:
      if cb.errors:
        raised.append((cb, cb.errors[0]))
        cb.errors.clear()   # NB: the other devices' errors of this call go with it
  if raised:
    cb, original = raised[0]
    raise xc.XlaRuntimeError(
        f"{cb.name} raised {type(original).__name__}: {original} (the program that called "
        f"it stopped; the runtime stays usable)") from original
  if error is not None:
    raise error
  return res


def effects_barrier() -> None:
  """Waits until every effect of the programs run so far has happened (JAX's
  `effects_barrier`). Programs with host callbacks complete before their call returns, so
  there is nothing left to wait for; kept for JAX programs that call it."""


# ---------------------------------------------------------------------------
# Executables


def result_handlers(out_avals: Sequence[ShapedArray], device=None) -> list:
  """One handler per result for `execute_sharded(...).consume_with_handlers`: each makes
  an Array of the result's buffer (cheaper than disassembling the results first).

  NB: jaxlib gives a Python handler its buffers as arrays with a JAX aval, and imports
  `jax.core` (all of jax) the first time it builds one; `runtime_handlers` with
  `wrap_results` do the same work without jax."""
  return [lambda bufs, av=av, dev=device: Array(bufs[0], av, dev) for av in out_avals]


def _handler_aval(aval: ShapedArray) -> ShapedArray:
  if aval is core.abstract_token:   # token results are empty bool buffers
    return TOKEN_BUFFER_AVAL
  # float0 results are i1 buffers in the program (lowering.py)
  if aval.dtype == dtypes.float0:
    return aval.update(dtype=np.dtype(np.bool_), weak_type=False)
  if not isinstance(aval.dtype, np.dtype):   # typed keys: their data's buffers
    return core.physical_aval(aval)
  return aval


def runtime_handlers(out_avals: Sequence[ShapedArray], device=None) -> list:
  """One result handler of the runtime's (C++) per result, for
  `execute_sharded(...).consume_with_handlers`: it gives the runtime's array of the result's
  buffer on `device` (the default device when None), which `wrap_results` makes an Array.
  Unlike Python handlers (`result_handlers`), these never make jaxlib import jax."""
  dev = device if device is not None else client.default_device()
  sh = client.single_device_sharding(dev)
  return [client.array_result_handler(_handler_aval(av), sh)
          for av in out_avals]


def wrap_results(bufs: Sequence[Any], out_avals: Sequence[ShapedArray],
                 device=None) -> list[Array]:
  """Arrays of the runtime arrays `bufs` that `runtime_handlers` gave (one per aval); a
  `core.Token` (holding its buffer, an empty bool Array) for each token result."""
  return [Array(b, av, device) if av is not core.abstract_token else _token(b, device)
          for b, av in zip(bufs, out_avals)]


def _token(buf, device) -> core.Token:
  return core.Token(Array(buf, TOKEN_BUFFER_AVAL, device))


class Executable:
  """A compiled program with its input/output avals; `call(args)` takes flat array-likes.
  `device` is where it runs (None: the default device)."""
  __slots__ = ("exe", "in_avals", "out_avals", "text", "device", "callbacks", "handlers")

  def __init__(self, exe, in_avals, out_avals, text, device=None):
    self.exe = exe
    self.in_avals = tuple(in_avals)
    self.out_avals = tuple(out_avals)
    self.text = text
    self.device = device
    self.callbacks = host_callbacks_of(text)
    self.handlers = runtime_handlers(self.out_avals, device)

  def _buffers(self, args):
    dev = self.device
    if dev is None and not placement_used[0]:
      return [a._buf if type(a) is Array else to_buffer(a, av)
              for a, av in zip(args, self.in_avals)]
    return [to_buffer(a, av, dev) for a, av in zip(args, self.in_avals)]

  def _run(self, args: Sequence[Any]) -> list:
    try:
      if self.callbacks:
        res = run_with_callbacks(self.exe, self._buffers(args), self.callbacks)
      else:
        res = self.exe.execute_sharded(self._buffers(args))
        client.count_execution()
      return res.consume_with_handlers(self.handlers)
    except TypeError:
      raise_if_donated(args)
      raise

  def call(self, args: Sequence[Any]) -> list[Array]:
    return wrap_results(self._run(args), self.out_avals, self.device)

  def call1(self, args: Sequence[Any]) -> Array:
    """`call` for a program with one result."""
    av = self.out_avals[0]
    if av is core.abstract_token:
      return _token(self._run(args)[0], self.device)
    return Array(self._run(args)[0], av, self.device)


def raise_if_donated(args):
  """After a failed execute: a donated (deleted) Array among `args` raises
  DonatedBufferError; otherwise returns and the caller re-raises the original error."""
  for a in args:
    if type(a) is Array and a._buf is None:
      a._check_buf()


def _params_key(params: dict) -> tuple:
  return tuple(params.items())


_prim_cache: dict[Any, Executable] = {}

# NB: eager ops on Arrays split over a mesh run as SPMD programs (runtime/spmd.py, which
# builds on this module and installs its `apply_primitive` here).
mesh_apply_primitive: list = [None]
# NB: an eager primitive whose body holds pmaps (a loop or branch of them) is one replicated
# SPMD program over their devices, as a jit of it (runtime/spmd.py installs the compiler:
# `(name, jaxpr) -> executable or None` when the body maps over no devices).
replicated_primitive: list = [None]


def _primitive_args(prim: core.Primitive, args: Sequence[Any]) -> Callable[[int], str]:
  """Describes argument `i` of an eager primitive as JAX's jitted NumPy functions name
  theirs (`x`, `y` for one or two operands)."""
  def describe(i):
    name = ("x", "y")[i] if len(args) <= 2 else str(i)
    return (f"argument {name} of {prim.name} with shape "
            f"{core.get_aval(args[i]).str_short(False)}")
  return describe


#: {primitive: () -> hashable}: primitives whose lowering reads configuration options (the
#: key primitives read `jax_threefry_partitionable`): the value joins the key of their eager
#: programs' cache, as the options join jit's.
lowering_reads_config: dict = {}


def raise_no_execution(name: str):
  """JAX's RuntimeError for running the program `name` (`jit(f)`) under config
  `no_execution`."""
  raise RuntimeError(f"JAX tried to execute function {name}, but the no_execution config "
                     f"option is set")


def apply_primitive(prim: core.Primitive, args: Sequence[Any], params: dict) -> Any:
  """The generic eager impl: run `prim` on concrete `args` via a cached one-equation program.

  Raises:
    RuntimeError: under config `no_execution` (JAX's message, naming `jit(<primitive>)`).
  """
  if config.no_execution:
    raise_no_execution(f"jit({prim.name})")
  dev = None
  if placement_used[0]:
    dev = target_placement(args, prim)
    if type(dev) is Placement:   # some argument is split over a mesh: an SPMD program
      return mesh_apply_primitive[0](prim, args, params, dev)
    if concrete_mesh() is not None:
      # NB: as JAX's, under `set_mesh` an operation none of whose operands is placed runs
      # over the mesh (its results replicated there, committed); one on a device is JAX's
      # "incompatible devices" error (the device against "jit's context mesh")
      return mesh_apply_primitive[0](prim, args, params,
                                     Placement(committed_sharding(a) for a in args))
  # NB: results of Arrays committed to the default device are committed (a dict's truth
  # when there are none: the eager path pays nothing more)
  committed = _committed_to_default and dev is None and commits_default(args)
  avals = [a.aval if type(a) is Array else core.get_aval(a) for a in args]
  try:
    key = (prim, dev, client.default_device_option(), *avals, *params.items())
    if prim in lowering_reads_config:
      key = (*key, lowering_reads_config[prim]())
    ex = _prim_cache.get(key)
  except TypeError:   # unhashable params: compile without caching
    key, ex = None, None
  if ex is None:
    ex = _compile_primitive(prim, avals, params, dev)
    if key is not None:
      if len(_prim_cache) >= _MAX_CACHE:
        _prim_cache.clear()
      _prim_cache[key] = ex
  if not (committed or config.state_key[1]):
    return ex.call(args) if prim.multiple_results else ex.call1(args)
  outs = ex.call(args) if prim.multiple_results else [ex.call1(args)]
  if config.state_key[1]:   # debug_nans / debug_infs
    check_special(prim.name, outs)
  if committed:
    mark_all_committed(outs)
  return outs if prim.multiple_results else outs[0]


_committed_to_default = array_mod.committed_to_default


def commits_default(args: Sequence[Any]) -> bool:
  """Whether some Array among `args` is committed to the default device
  (`device_put(x, devices()[0])`): computations on it give committed results, as JAX's."""
  if not array_mod.committed_to_default:
    return False
  return any(type(a) is Array and a._device is None and a._sharding is None
             and id(a) in array_mod.committed_to_default for a in args)


def mark_all_committed(values: Sequence[Any]) -> None:
  """Marks the Arrays among `values` (on the default device) committed to it."""
  for v in values:
    if type(v) is Array and v._device is None and v._sharding is None:
      array_mod.mark_committed(v)


def eager_call1(prim: core.Primitive, args: Sequence[Any]) -> Any:
  """`apply_primitive(prim, args, {})` for two Arrays on the default device whose program
  is compiled already (a binary primitive with one result, the generic impl and no params
but its default ones),
  or None: the caller then takes the general path. The eager `x + y` of NumPy's
  operators."""
  if config.state_key[1] or config.no_execution:
    return None
  x, y = args
  if placement_used[0] and (x._sharding is not None or x._device is not None
                            or y._sharding is not None or y._device is not None
                            or concrete_mesh() is not None):
    return None   # NB: placed operands or a mesh set: the general path
  if _committed_to_default and (id(x) in _committed_to_default
                                or id(y) in _committed_to_default):
    return None   # committed results: `apply_primitive`
  d = prim.default_params   # NB: `bind` adds them: `apply_primitive`'s key has them
  ex = _prim_cache.get((prim, None, client.default_device_cell[0], x.aval, y.aval)
                       if d is None else
                       (prim, None, client.default_device_cell[0], x.aval, y.aval,
                        *d.items()))
  if ex is None or ex.callbacks:
    return None
  # NB: two Arrays on the default device: their buffers go straight in.
  try:
    res = ex.exe.execute_sharded([x._buf, y._buf])
  except TypeError:
    raise_if_donated(args)
    raise
  client.count_execution()
  return Array(res.consume_with_handlers(ex.handlers)[0], ex.out_avals[0], ex.device)


def find_special(values: Sequence[Any]) -> str | None:
  """"nan" or "inf" if some inexact value among `values` is one that config `debug_nans` /
  `debug_infs` asks to catch, else None (waits for the values)."""
  for v in values:
    dt = getattr(v, "dtype", None)
    if dt is None or not dtypes.is_inexact(dt):
      continue
    a = np.asarray(v)
    if config.debug_nans and np.isnan(a).any():
      return "nan"
    if config.debug_infs and np.isinf(a).any():
      return "inf"
  return None


def check_special(name: str, values: Sequence[Any]) -> None:
  """Raises FloatingPointError (JAX's message: `invalid value (nan) encountered in log`) if
  `find_special(values)` finds one."""
  kind = find_special(values)
  if kind is not None:
    raise FloatingPointError(f"invalid value ({kind}) encountered in {name}")


def _compile_primitive(prim, avals, params, device=None) -> Executable:
  # NB: JAX's lines for the jit it runs an eager primitive with, in its order
  log = monitoring.compile_log("dispatch", config.log_compiles)
  level, name = logging.WARNING if config.log_compiles else logging.DEBUG, f"jit({prim.name})"
  t0 = time.time()
  out = prim.abstract_eval(*avals, **params)
  out_avals = list(out) if prim.multiple_results else [out]
  invars = [Var(a) for a in avals]
  outvars = [Var(a) for a in out_avals]
  jaxpr = Jaxpr([], invars, outvars, [JaxprEqn(invars, outvars, prim, params)])
  if log is not None:
    log.log(level, f"Finished tracing {prim.name} for jit in {time.time() - t0:.9f} sec")
  if replicated_primitive[0] is not None and device is None and next(
      core.subjaxprs(jaxpr.eqns[0]), None) is not None:
    ex = replicated_primitive[0](prim.name, jaxpr)
    if ex is not None:
      return ex
  if config.dump_ir_to:
    dump_ir.dump_jaxpr(prim.name, jaxpr)
  if log is not None:
    mapping = ["UnspecifiedValue"] * len(avals)
    if device is not None:
      mapping = [repr(SingleDeviceSharding(device))] * len(avals)
    monitoring.logger("interpreters.pxla").log(
        level, monitoring.compiling_line(name, avals, mapping))
  t1 = time.time()
  with lowering.for_device(device):
    text = lowering.lower_jaxpr_to_module(prim.name, jaxpr)
  if log is not None:
    log.log(level, f"Finished jaxpr to MLIR module conversion {name} in "
                   f"{time.time() - t1:.9f} sec")
  exe = compile_module(text, None if device is None else [device], fun_name=name)
  return Executable(exe, avals, out_avals, text, device)


core.default_impl[0] = apply_primitive

if _JaxArray is not None:
  def _jax_array_aval(x):
    return ShapedArray(tuple(x.shape), dtypes.canonicalize_dtype(x.dtype),
                       bool(getattr(x, "weak_type", False)))
  core.pytype_aval_mappings[_JaxArray] = _jax_array_aval


# ---------------------------------------------------------------------------
# Clearing the caches (`stagecraft.clear_caches`)

#: Functions that empty a cache of traced or compiled programs; each module with such a cache
#: registers one, so that `clear_caches` reaches them without importing them.
cache_clearers: list = []


def register_cache_clearer(clear):
  """Registers `clear()` (no arguments) to run in `clear_caches`; returns it (a decorator)."""
  cache_clearers.append(clear)
  return clear


def clear_caches() -> None:
  """Empties the in-memory compile cache, the eager primitives' executables and every cache
  registered with `register_cache_clearer`, so that the next call traces and compiles again.
  The persistent (on-disk) compilation cache is kept."""
  with _compile_lock:
    for key in list(_compile_cache):
      _drop(key)
  _prim_cache.clear()
  for clear in list(cache_clearers):
    clear()


# ---------------------------------------------------------------------------
# Memory layouts (stagecraft.layout): only Formats given by the user reach here.


def buffer_layout_text(buf) -> str:
  """XLA's text of a runtime buffer's memory layout (`{1,0}`)."""
  return str(buf._pjrt_layout._xla_layout())


def relayout(buf, aval: ShapedArray, dst: str, device=None):
  """A copy of the single-device buffer `buf` (of `aval`) in the memory layout `dst` (XLA's
  layout text, `"{0,1}"`): an identity program whose argument takes `buf`'s layout and whose
  result has `dst` (compiled once per shape, dtype and layouts). `buf` itself when it has
  `dst` already."""
  src = buffer_layout_text(buf)
  if src == dst:
    return buf
  ty = lowering.ir_type(aval)
  text = ("module @jit_relayout attributes {mhlo.num_partitions = 1 : i32, "
          "mhlo.num_replicas = 1 : i32} {\n"
          f'  func.func public @main(%arg0: {ty} {{mhlo.layout_mode = "{src}"}}) -> '
          f'({ty} {{mhlo.layout_mode = "{dst}"}}) {{\n'
          f"    return %arg0 : {ty}\n  }}\n}}\n")
  exe = compile_module(text, None if device is None else [device])
  return exe.execute_sharded([buf]).disassemble_into_single_device_arrays()[0][0]
