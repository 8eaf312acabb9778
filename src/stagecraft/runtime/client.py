"""The PJRT client and devices (jaxlib is the XLA runtime; DESIGN.md).

The CPU client is made here from jaxlib alone (`xla_client.make_cpu_client`, with jaxlib's
LAPACK kernels registered as FFI targets), so `import stagecraft` and a first computation
never import `jax`. The real jax (`jax_runtime.jax_module`, imported on that path only)
supplies the clients instead where only it knows how to make them:

- a platform other than the CPU: `jax_platforms` (or `JAX_PLATFORMS`) names one, or a PJRT
  plugin package is installed (`jax_plugins`, `jax_cuda12_plugin`, ..., `libtpu`): plugin
  discovery and initialization are JAX's;
- a distributed run (`stagecraft.distributed.initialize`): the coordination service and the
  gloo collectives of the CPU client (`use_jax_backends`).
"""
from __future__ import annotations

import functools
import gc
import importlib.util
import os
import sys
import warnings
from typing import Any

import numpy as np
from jaxlib import _jax
from jaxlib import xla_client as xc

from stagecraft.runtime import jax_runtime

__all__ = ["allow_sharding_propagation", "configure", "check_not_forked", "get_backend", "devices", "local_devices", "device_count", "local_device_count",
           "default_device", "process_index", "process_count", "single_device_sharding",
           "device_list", "compile_options", "Device", "default_backend", "process_indices",
           "host_id", "host_count", "host_ids", "backends", "clear_backends", "uses_jax",
           "use_jax_backends", "count_execution"]

_KNOWN_BACKENDS = ("cpu", "cuda", "gpu", "rocm", "tpu")

#: Packages whose presence means a PJRT plugin (GPU, TPU) that JAX's discovery would load.
_PLUGIN_MODULES = ("jax_plugins", "jax_cuda12_plugin", "jax_cuda13_plugin",
                   "jax_rocm60_plugin", "jax_rocm7_plugin", "libtpu")

#: Why the clients come from the real jax's backend registry (None: made here, CPU only).
_via_jax: list = [None]


def use_jax_backends(reason: str) -> None:
  """Makes the runtime take its clients from the real jax's backend registry from now on
  (called before the backend starts, e.g. by `distributed.initialize`)."""
  _via_jax[0] = reason


@functools.lru_cache(maxsize=None)
def _plugins_installed() -> bool:
  return any(importlib.util.find_spec(m) is not None for m in _PLUGIN_MODULES)


def _requested_platforms() -> list[str]:
  """The platforms `jax_platforms` (set through config, else `JAX_PLATFORMS`) asks for, in
  priority order ([] when unset)."""
  text = _platforms[0] if _platforms[0] is not None else os.environ.get("JAX_PLATFORMS")
  return [p.strip().lower() for p in (text or "").split(",") if p.strip()]


def uses_jax() -> bool:
  """Whether the clients come from the real jax (a non-CPU platform, a PJRT plugin, or a
  distributed run; see the module docstring) rather than from jaxlib directly."""
  if _via_jax[0] is not None:
    return True
  plats = _requested_platforms()
  if plats:
    return any(p != "cpu" for p in plats)
  return _plugins_installed()


def _xla_gc_callback(*args) -> None:
  """Frees what jaxlib queued for deletion (the Python tracebacks it keeps per execution and
  buffer) whenever Python's garbage collector runs, as JAX does when it is imported; without
  it, every dispatch leaks ~16 bytes per Python frame on the stack."""
  _jax.collect_garbage()


gc.callbacks.append(_xla_gc_callback)

# NB: jaxlib's tracebacks stay on (a global switch: JAX, imported beside stagecraft, reads them
# for its source locations); their queue is drained every `_DRAIN_EVERY` executions instead.
_DRAIN_EVERY = 1024
_executions = [0]


#: Whether this jaxlib's `array_result_handler` takes `_skip_checks` (0.10.2 does; a GPU
#: machine's newer jaxlib may not).
_HANDLER_SKIP_CHECKS = "_skip_checks" in (xc._xla.array_result_handler.__doc__ or "")


def array_result_handler(aval, sharding):
  """jaxlib's C++ result handler for a committed array of `aval` laid out by the runtime
  sharding `sharding` (its checks skipped where this jaxlib allows: the program's own
  sharding needs none)."""
  if _HANDLER_SKIP_CHECKS:
    return xc._xla.array_result_handler(aval, sharding, True, True)
  return xc._xla.array_result_handler(aval, sharding, True)


def count_execution() -> None:
  """Called after each program launch: every `_DRAIN_EVERY` launches, frees the Python
  tracebacks jaxlib kept for executions that finished on its own threads (queued for
  deletion; ~72 bytes a launch otherwise stay until Python's garbage collector runs, which a
  dispatch loop that allocates nothing lasting rarely triggers)."""
  n = _executions[0] + 1
  if n >= _DRAIN_EVERY:
    _jax.collect_garbage()
    n = 0
  _executions[0] = n

_cpu: list = [None]   # the CPU client made here (jaxlib alone)
_kernels_registered = [False]


def _register_cpu_kernels() -> None:
  """Registers jaxlib's CPU LAPACK kernels (`lapack_*_ffi`, ...) as XLA FFI targets, as JAX
  does when it imports its linear algebra (the same handlers: registering twice is fine)."""
  if _kernels_registered[0]:
    return
  from jaxlib import lapack  # NB: a jaxlib module, loaded with the first CPU client only
  for platform, targets in lapack.registrations().items():
    for name, fn, api_version in targets:
      xc.register_custom_call_target(name, fn, platform=platform, api_version=api_version)
  for name in lapack.batch_partitionable_targets():
    xc.register_custom_call_as_batch_partitionable(name)
  _kernels_registered[0] = True


def _num_cpu_devices() -> int | None:
  """`jax_num_cpu_devices` (config, else `JAX_NUM_CPU_DEVICES`) when set (> 0); None leaves
  the count to XLA_FLAGS `--xla_force_host_platform_device_count` (default 1)."""
  n = _num_cpu[0]
  if n is None:
    try:
      n = int(os.environ.get("JAX_NUM_CPU_DEVICES", "-1"))
    except ValueError:
      n = -1
  return n if n > 0 else None


def _quiet_info_logs() -> None:
  """XLA's C++ INFO lines (`PjRt-IFRT device count: ...`) go to stderr when a client is made
  with jaxlib alone; a process that imports JAX does not print them (JAX sets
  `TF_CPP_MIN_LOG_LEVEL=1` before jaxlib loads). Keep stderr as JAX's: the level is
  `TF_CPP_MIN_LOG_LEVEL`'s (1, INFO dropped, when unset or not a number), applied here
  because jaxlib may have read the environment before it was set (importing the real `jax`
  after stagecraft sets its default); `jax_logging_level` wins where given."""
  if os.environ.get("JAX_LOGGING_LEVEL", "NOTSET") not in ("NOTSET", ""):
    return
  try:
    level = int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1"))
  except ValueError:
    level = 1
  from jaxlib import utils  # NB: jaxlib's absl switch (what jax_logging_level sets in JAX)
  utils.absl_set_min_log_level(level)


def _cpu_client():
  if _cpu[0] is None:
    _register_cpu_kernels()
    _quiet_info_logs()
    _cpu[0] = xc.make_cpu_client(asynchronous=True, num_devices=_num_cpu_devices())
  return _cpu[0]


def started_backends() -> dict[str, Any]:
  """The clients started so far, by platform (starting none): `{}` before the first
  computation. JAX's `xla_bridge._backends` as a served `jax` shows it (chex's
  `set_n_cpu_devices` refuses to change the device count once it is non-empty)."""
  if uses_jax():
    real = sys.modules.get("jax._src.xla_bridge")
    return dict(getattr(real, "_backends", None) or {})
  return {} if _cpu[0] is None else {"cpu": _cpu[0]}


@functools.lru_cache(maxsize=None)
def get_backend(backend: str | None = None):
  """The PJRT client for `backend` ('cpu', 'gpu'/'cuda'; None: the default one).

  Raises:
    RuntimeError: if the backend is not available (the message lists those that are).
  """
  if backend is not None and not isinstance(backend, str):
    raise TypeError(f"backend must be a string such as 'cpu' or 'gpu', got {backend!r}.")
  check_not_forked()
  if backend is None and _requested_platforms():
    backend = _requested_platforms()[0]
  if uses_jax():
    xb = jax_runtime.jax_module("jax.extend.backend")
    try:
      b = xb.get_backend(backend)
    except RuntimeError as e:
      raise RuntimeError(f"Backend {backend!r} is not available: {e}. Available backends: "
                         f"{sorted(xb.backends())}.") from e
  elif backend is None or backend.lower() == "cpu":
    b = _cpu_client()
  elif backend.lower() in ("gpu", "cuda", "rocm", "tpu", "metal"):
    # JAX's words (libraries match "Unknown backend"), and why: no plugin is installed
    raise RuntimeError(f"Unknown backend: '{backend}' requested, but no platforms that are "
                       f"instances of {backend} are present. Platforms present are: cpu "
                       f"(no PJRT plugin for {backend} is installed)")
  else:
    raise RuntimeError(f"Unknown backend {backend}. Available backends are ['cpu']")
  if _started_in[0] is None:
    _started_in[0] = os.getpid()
  return b


def backends() -> dict[str, Any]:
  """The started PJRT clients by platform name (starting the default one first)."""
  get_backend()
  if uses_jax():
    return dict(jax_runtime.jax_module("jax.extend.backend").backends())
  return {"cpu": _cpu_client()}


def clear_backends() -> None:
  """Drops the clients and the caches here that refer to them; the next request starts a
  new client."""
  for cached in (get_backend, _first_local_device, single_device_sharding, device_list):
    cached.cache_clear()
  _cpu[0] = None
  if "jax.extend.backend" in jax_runtime.captured():
    jax_runtime.jax_runtime.jax_module("jax.extend.backend").clear_backends()


_platforms: list = [None]
_num_cpu: list = [None]   # jax_num_cpu_devices as set through config (None: unset)


def configure(option: str, value) -> None:
  """Applies a runtime option set through `config.update` (called by the config layer):
  `platforms` / `platform_name` pick the default backend; `num_cpu_devices` sets the number
  of CPU devices, which the runtime reads when it starts.

  Raises:
    RuntimeError: for `num_cpu_devices` once the runtime has started (as JAX).
  """
  if option in ("platforms", "platform_name"):
    if _started_in[0] is not None and value and value != _platforms[0]:
      get_backend.cache_clear()
      _first_local_device.cache_clear()
    _platforms[0] = value or None
  elif option == "default_device":
    _default_device[0] = value
  elif option == "num_cpu_devices":
    if _started_in[0] is not None:
      raise RuntimeError("jax_num_cpu_devices config should be updated before backends are "
                         "initialized.")
    _num_cpu[0] = value
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    if value is not None and value > 0:
      flags.append(f"--xla_force_host_platform_device_count={int(value)}")
    os.environ["XLA_FLAGS"] = " ".join(flags)


# The process the runtime started in: its thread pools do not survive fork(), so a forked
# child that compiles (or starts a backend) would deadlock inside XLA (JAX's too).
_started_in: list = [None]


def check_not_forked() -> None:
  """Raises RuntimeError in a process forked after the runtime started (compiling there
  would deadlock; running executables compiled before the fork and transfers still work);
  does nothing otherwise.

  Raises:
    RuntimeError: naming both processes and the fix.
  """
  pid = _started_in[0]
  if pid is not None and pid != os.getpid():
    raise RuntimeError(
        f"The stagecraft runtime (XLA) was started in process {pid}, and this process "
        f"({os.getpid()}) is a fork of it: XLA's threads do not survive fork(), so compiling "
        f"here would deadlock. Start worker processes with the 'spawn' or "
        f"'forkserver' start method (multiprocessing.get_context('spawn')), or fork before "
        f"the first stagecraft computation.")


def devices(backend: str | None = None) -> list[Any]:
  """All devices of `backend` (default backend when None), in id order."""
  return list(get_backend(backend).devices())


def local_devices(process_index: int | None = None, backend: str | None = None,
                  host_id: int | None = None) -> list[Any]:
  """The devices of `backend` attached to process `process_index` (default: this process),
  as JAX's `local_devices`.

  Raises:
    ValueError: for a process index outside `[0, process_count(backend))` (JAX's words).
  Warns (UserWarning) when `host_id`, JAX's old name of `process_index`, is given.
  """
  if host_id is not None:
    warnings.warn("The argument to jax.local_devices has been renamed from `host_id` to "
                  "`process_index`. This alias will eventually be removed; please update "
                  "your code.", stacklevel=2)
    process_index = host_id
  if process_index is None:
    return list(get_backend(backend).local_devices())
  if not 0 <= process_index < process_count(backend):
    raise ValueError(f"Unknown process_index {process_index}")
  return [d for d in devices(backend) if d.process_index == process_index]


def device_count(backend: str | None = None) -> int:
  """The number of devices of `backend` (all processes)."""
  return len(devices(backend))


def local_device_count(backend: str | None = None) -> int:
  """The number of devices of `backend` attached to this process."""
  return len(local_devices(backend=backend))


@functools.lru_cache(maxsize=None)
def _first_local_device():
  return local_devices()[0]


#: The device `config.update("jax_default_device", d)` (or `with default_device(d):`) set:
#: a Device, a platform name, or None for the default backend's first device.
_default_device: list = [None]
#: The same one-element list, for hot paths that read the option without a call.
default_device_cell = _default_device


def default_device():
  """The device uncommitted computations and transfers go to: the `jax_default_device`
  option's device (a platform name gives that platform's first local device), else the
  default backend's first local device."""
  d = _default_device[0]
  if d is None:
    return _first_local_device()
  if isinstance(d, str):
    return local_devices(backend=d)[0]
  return d


default_device.cache_clear = _first_local_device.cache_clear


def default_device_option():
  """The `jax_default_device` option as set (a Device, a platform name or None): part of
  the eager caches' keys, whose executables are compiled for the default device."""
  return _default_device[0]


def process_index(backend: str | None = None) -> int:
  """The index of this process among the processes of a distributed run (0 alone), on
  `backend` (default: the default backend)."""
  return get_backend(backend).process_index()


def process_count(backend: str | None = None) -> int:
  """The number of processes of a distributed run (1 alone), on `backend`."""
  return max(d.process_index for d in devices(backend)) + 1


# ---------------------------------------------------------------------------
# The runtime's sharding objects, handed with buffers to PJRT (transfers, results)
#
# jaxlib's C++ sharding classes read a few attributes that JAX adds to them in Python
# (`memory_kind`, and `_to_xla_hlo_sharding` for the layout of a buffer over its devices).
# `_install_runtime_methods` gives the single-device class those two where they are missing
# (JAX, if imported later, replaces them with its own, which read the same C++ fields);
# a sharding over a mesh is a `MeshSharding` (below), which computes its HloSharding itself
# (jaxlib's NamedSharding constructor would import jax).


def _memory_kind(self):
  return self._memory_kind


def _replicated_hlo_sharding(self, num_dimensions: int):
  return xc.HloSharding.replicate()


def _install_runtime_methods() -> None:
  cls = _jax.SingleDeviceSharding
  if not hasattr(cls, "memory_kind"):
    cls.memory_kind = property(_memory_kind)
  if not hasattr(cls, "_to_xla_hlo_sharding"):
    cls._to_xla_hlo_sharding = _replicated_hlo_sharding


_install_runtime_methods()


@functools.lru_cache(maxsize=None)
def single_device_sharding(device):
  """The runtime's sharding of a buffer on `device` alone."""
  return _jax.SingleDeviceSharding(device)


class MeshSharding:
  """The runtime's sharding of an array over a mesh of devices: `devices` (an ndarray of
  devices, one mesh axis per dimension) and, per array dimension, the mesh axes (positions)
  that split it, major to minor. PJRT reads its device list (`_internal_device_list`) and,
  per array rank, its HloSharding (`_to_xla_hlo_sharding`).

  The HloSharding tiles dimension i of the array by the product of the sizes of its mesh
  axes; the tile of each device is its coordinate along those axes (the first one major);
  the mesh axes no dimension uses replicate the tiles (a last, replicated tile dimension).
  Axes of size 1 change nothing and are left out; a sharding that splits no dimension is
  the replicated one.

  A plain class: jaxlib reads these attributes of any sharding object (subclassing its C++
  `Sharding` would inherit the Python members JAX attaches to that class once imported).
  """

  def __init__(self, devices: np.ndarray, dim_axes: tuple):
    self.devices = devices
    self.dim_axes = tuple(tuple(int(a) for a in axes) for axes in dim_axes)
    self._internal_device_list = device_list(tuple(devices.flat))
    self._hlo: dict = {}

  memory_kind = None
  _memory_kind = None

  @property
  def _device_assignment(self) -> tuple:
    return tuple(self.devices.flat)

  @property
  def device_set(self) -> set:
    return set(self.devices.flat)

  def _to_xla_hlo_sharding(self, num_dimensions: int):
    h = self._hlo.get(num_dimensions)
    if h is None:
      h = self._hlo[num_dimensions] = _mesh_hlo_sharding(self.devices.shape, self.dim_axes,
                                                          num_dimensions)
    return h

  def __eq__(self, other):
    return (type(other) is MeshSharding and self.dim_axes == other.dim_axes
            and self.devices.shape == other.devices.shape
            and tuple(self.devices.flat) == tuple(other.devices.flat))

  def __hash__(self):
    return hash((self.dim_axes, self.devices.shape, tuple(self.devices.flat)))

  def __repr__(self):
    return f"MeshSharding(mesh_shape={self.devices.shape}, dim_axes={self.dim_axes})"


def _mesh_hlo_sharding(mesh_shape: tuple, dim_axes: tuple, num_dimensions: int):
  keep = [a for a, n in enumerate(mesh_shape) if n > 1]   # axes of size 1 are no-ops
  pos = {a: k for k, a in enumerate(keep)}
  tiles, perm = [1] * num_dimensions, []
  for d, axes in enumerate(dim_axes[:num_dimensions]):
    for a in axes:
      if a in pos:
        tiles[d] *= mesh_shape[a]
        perm.append(pos[a])
  if not perm:
    return xc.HloSharding.replicate()
  rest = [pos[a] for a in keep if pos[a] not in perm]
  subgroups = []
  if rest:
    tiles.append(int(np.prod([mesh_shape[keep[k]] for k in rest])))
    perm.extend(rest)
    subgroups = [xc.OpSharding.Type.REPLICATED]
  return xc.HloSharding.iota_tile(dims=tiles, reshape_dims=[mesh_shape[a] for a in keep],
                                  transpose_perm=perm, subgroup_types=subgroups)


@functools.lru_cache(maxsize=None)
def device_list(devs: tuple) -> Any:
  return xc.DeviceList(devs)


def compile_options(num_replicas: int = 1, num_partitions: int = 1, device_assignment=None):
  """XLA compile options for `num_replicas` x `num_partitions` devices: JAX 0.10.2's (the
  SPMD partitioner with Shardy; JAX's default effort levels, no autoFDO profile).

  Args:
    device_assignment: None, or device ids (or devices) of shape (num_replicas,
      num_partitions) (a vector when num_partitions is 1).

  Raises:
    ValueError: if `device_assignment`'s shape does not match the counts.
  """
  opts = xc.CompileOptions()
  opts.num_replicas = num_replicas
  opts.num_partitions = num_partitions
  build = opts.executable_build_options
  build.use_spmd_partitioning = True
  build.use_shardy_partitioner = True
  if device_assignment is not None:
    a = np.asarray(device_assignment)
    if a.ndim == 1 and num_partitions == 1:
      a = a[:, None]
    if a.ndim != 2 or a.shape != (num_replicas, num_partitions):
      raise ValueError(f"device_assignment of shape {a.shape} does not match num_replicas="
                       f"{num_replicas} x num_partitions={num_partitions}.")
    if a.dtype == object:
      a = np.vectorize(lambda d: d.id, otypes=[int])(a)
    opts.device_assignment = xc.DeviceAssignment.create(a)
  # JAX 0.10.2's defaults; NB: other jaxlib versions (a GPU machine's own) may lack some of
  # these fields, which then keep jaxlib's defaults.
  for obj, field, value in ((build, "exec_time_optimization_effort", 0.0),
                            (build, "memory_fitting_effort", 0.0),
                            (build, "optimization_level", 0),      # EffortLevel.UNKNOWN
                            (build, "memory_fitting_level", 29),   # EffortLevel.O2
                            (opts, "profile_version", -1)):        # no autoFDO profile
    if hasattr(obj, field):
      setattr(obj, field, value)
  build.debug_options.xla_detailed_logging = True
  return opts


def allow_sharding_propagation(opts, text: str) -> None:
  """Sets, as JAX's compile of a single-device program (its shardings unspecified) does,
  XLA's permission to propagate shardings to each parameter and result of `text`'s main:
  a no-op on one device that the compiled module's HLO header shows."""
  i = text.find("func.func public @main(")
  j = text.find(") -> (", i) if i >= 0 else -1
  k = text.find(") {\n", j) if j >= 0 else -1
  if k < 0:
    return
  build = opts.executable_build_options
  build.allow_spmd_sharding_propagation_to_parameters = [True] * text.count("%arg", i, j)
  build.allow_spmd_sharding_propagation_to_output = [True] * (
      text.count("tensor<", j, k) + text.count("!stablehlo.token", j, k))


Device = xc.Device
"""The runtime's device class (`stagecraft.devices()[0]` is one): for `isinstance` checks."""


def default_backend() -> str:
  """The platform name of the default backend: `'cpu'`, `'gpu'` (CUDA or ROCm) or `'tpu'`."""
  return get_backend().platform


def _backend_devices(backend) -> list:
  if backend is not None and not isinstance(backend, str):   # a client object, as JAX takes
    return list(backend.devices())
  return devices(backend)


def process_indices(backend: str | Any | None = None) -> list[int]:
  """The indices of the processes of a distributed run, `[0, ..., process_count() - 1]`.

  Args:
    backend: a backend name (`'cpu'`, `'gpu'`), a client, or None for the default backend.
  """
  return list(range(max(d.process_index for d in _backend_devices(backend)) + 1))


def _renamed(old: str, new: str) -> None:
  warnings.warn(f"jax.{old} has been renamed to jax.{new}. This alias will eventually be "
                f"removed; please update your code.", UserWarning, stacklevel=3)


def host_id(backend: str | Any | None = None) -> int:
  """Deprecated alias of `process_index` (warns, as JAX does)."""
  _renamed("host_id", "process_index")
  if backend is not None and not isinstance(backend, str):
    return backend.process_index()
  return get_backend(backend).process_index()


def host_count(backend: str | Any | None = None) -> int:
  """Deprecated alias of `process_count` (warns, as JAX does)."""
  _renamed("host_count", "process_count")
  return len(process_indices(backend))


def host_ids(backend: str | Any | None = None) -> list[int]:
  """Deprecated alias of `process_indices` (warns, as JAX does)."""
  _renamed("host_ids", "process_indices")
  return process_indices(backend)
