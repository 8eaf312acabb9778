"""Configuration: every option of JAX 0.10.2 under JAX's names, read with attribute access and
set with `update` (or a context manager), initialized from JAX's environment variables.

  >>> import stagecraft
  >>> stagecraft.config.update("jax_enable_x64", True)
  >>> stagecraft.config.enable_x64, stagecraft.config.jax_enable_x64
  (True, True)
  >>> stagecraft.config.update("jax_enable_x64", False)

Names: JAX's (`jax_enable_x64`); the `jax_` prefix may be left out (`enable_x64`). Each
option reads its environment variable at import (JAX's: the upper-cased name,
`JAX_ENABLE_X64`; the older `STAGECRAFT_*` names of the first options still work).

Options stagecraft implements take effect (see `HONOURED`); the others are accepted with
JAX's defaults and validation, and setting one to a value stagecraft cannot honour warns once
(docs/differences.md lists them). Options that change traced programs are part of
`config.state_key`, on which the tracing and compile caches key.
"""
from __future__ import annotations

import contextlib
import enum
import os
import sys
import warnings
from typing import Any, Callable, NamedTuple

import numpy as np

__all__ = ["Config", "config", "State", "enable_x64", "disable_jit", "debug_nans",
           "debug_infs", "numpy_rank_promotion", "numpy_dtype_promotion",
           "default_matmul_precision", "log_compiles", "explain_cache_misses",
           "default_device", "check_tracer_leaks", "checking_leaks", "debug_key_reuse",
           "enable_checks", "threefry_partitionable", "default_prng_impl",
           "enable_custom_prng", "legacy_prng_key", "softmax_custom_jvp",
           "allow_f16_reductions", "remove_size_one_mesh_axis_from_type", "auto_pcast",
           "no_execution", "no_tracing", "thread_guard", "array_garbage_collection_guard",
           "transfer_guard", "transfer_guard_host_to_device",
           "transfer_guard_device_to_device", "transfer_guard_device_to_host",
           "HONOURED", "UserContext", "make_user_context"]


class _Opt(NamedTuple):
  default: Any
  kind: str                      # bool, int, float, str, optstr, enum, any
  choices: tuple = ()
  trace: bool = False            # part of state_key (changes traced programs)


_B, _I, _F, _S = "bool", "int", "float", "str"
_PREC = (None, "default", "high", "highest", "bfloat16", "tensorfloat32", "float32",
         "ANY_F8_ANY_F8_F32", "ANY_F8_ANY_F8_F32_FAST_ACCUM", "ANY_F8_ANY_F8_ANY",
         "ANY_F8_ANY_F8_ANY_FAST_ACCUM", "F16_F16_F16", "F16_F16_F32", "BF16_BF16_BF16",
         "BF16_BF16_F32", "BF16_BF16_F32_X3", "BF16_BF16_F32_X6", "TF32_TF32_F32",
         "TF32_TF32_F32_X3", "F32_F32_F32", "F64_F64_F64", "fastest")
_GUARD = (None, "allow", "log", "disallow", "log_explicit", "disallow_explicit")

# JAX 0.10.2's options (names without the `jax_` prefix when JAX has one; the four JAX
# spells without it are marked in _UNPREFIXED), with JAX's defaults.
_OPTIONS: dict[str, _Opt] = {
    "enable_x64": _Opt(False, _B, trace=True),
    "disable_jit": _Opt(False, _B),
    "debug_nans": _Opt(False, _B, trace=True),
    "debug_infs": _Opt(False, _B, trace=True),
    "traceback_filtering": _Opt("auto", "enum", ("auto", "off", "tracebackhide",
                                                 "remove_frames", "quiet_remove_frames")),
    "compilation_cache_dir": _Opt(None, "path"),
    "compilation_cache_max_size": _Opt(-1, _I),
    "enable_compilation_cache": _Opt(True, _B),
    "persistent_cache_min_compile_time_secs": _Opt(1.0, _F),
    "persistent_cache_min_entry_size_bytes": _Opt(0, _I),
    "raise_persistent_cache_errors": _Opt(False, _B),
    "compilation_cache_check_contents": _Opt(False, _B),
    "compilation_cache_include_metadata_in_key": _Opt(False, _B),
    "compilation_cache_expect_pgle": _Opt(False, _B),
    "persistent_cache_enable_xla_caches": _Opt("xla_gpu_per_fusion_autotune_cache_dir", _S),
    "numpy_rank_promotion": _Opt("allow", "enum", ("allow", "warn", "raise"), trace=True),
    "numpy_dtype_promotion": _Opt("standard", "enum", ("standard", "strict"), trace=True),
    "default_matmul_precision": _Opt(None, "enum", _PREC, trace=True),
    "log_compiles": _Opt(False, _B),
    "explain_cache_misses": _Opt(False, _B),
    "log_checkpoint_residuals": _Opt(False, _B),
    "default_device": _Opt(None, "any", trace=True),
    "platforms": _Opt(None, "optstr"),
    "platform_name": _Opt("", _S),
    "num_cpu_devices": _Opt(-1, _I),
    "enable_checks": _Opt(False, _B),
    "check_tracer_leaks": _Opt(False, _B),
    "debug_key_reuse": _Opt(False, _B, trace=True),
    "threefry_partitionable": _Opt(True, _B, trace=True),
    "default_prng_impl": _Opt("threefry2x32", "enum", ("threefry2x32", "rbg", "unsafe_rbg"),
                              trace=True),
    "enable_custom_prng": _Opt(False, _B),
    "legacy_prng_key": _Opt("allow", "enum", ("allow", "warn", "error")),
    "random_seed_offset": _Opt(0, _I),
    "high_dynamic_range_gumbel": _Opt(False, _B, trace=True),
    "softmax_custom_jvp": _Opt(False, _B, trace=True),
    "allow_f16_reductions": _Opt(True, _B),
    "remove_size_one_mesh_axis_from_type": _Opt(False, _B),
    "auto_pcast": _Opt(True, _B),
    "no_execution": _Opt(False, _B),
    "no_tracing": _Opt(False, _B),
    "thread_guard": _Opt(False, _B),
    "array_garbage_collection_guard": _Opt(None, "enum", (None, "allow", "log", "fatal")),
    "transfer_guard": _Opt(None, "enum", _GUARD),
    "transfer_guard_host_to_device": _Opt(None, "enum", _GUARD),
    "transfer_guard_device_to_device": _Opt(None, "enum", _GUARD),
    "transfer_guard_device_to_host": _Opt(None, "enum", _GUARD),
    "use_shardy_partitioner": _Opt(True, _B),
    "use_direct_linearize": _Opt(True, _B),
    "use_simplified_jaxpr_constants": _Opt(False, _B, trace=True),
    "embedded_constants_max_bytes": _Opt(32, _I),
    "captured_constants_warn_bytes": _Opt(2_000_000_000, _I),
    "captured_constants_report_frames": _Opt(0, _I),
    "check_static_indices": _Opt(False, _B),
    "check_proxy_envs": _Opt(True, _B),
    "backend_target": _Opt("", _S),
    "xla_backend": _Opt("", _S),
    "bcoo_cusparse_lowering": _Opt(False, _B),
    "compiler_detailed_logging_min_ops": _Opt(10, _I),
    "compiler_enable_remat_pass": _Opt(True, _B),
    "cpu_collectives_implementation": _Opt("gloo", "enum", ("gloo", "mpi", "megascale")),
    "cpu_enable_async_dispatch": _Opt(True, _B),
    "cpu_get_global_topology_timeout_minutes": _Opt(5, _I),
    "cpu_get_local_topology_timeout_minutes": _Opt(2, _I),
    "cross_host_transfer_socket_address": _Opt("", _S),
    "cross_host_transfer_timeout_seconds": _Opt(None, "any"),
    "cross_host_transfer_transfer_size": _Opt(None, "any"),
    "cross_host_transport_addresses": _Opt("", _S),
    "cuda_visible_devices": _Opt("all", _S),
    "rocm_visible_devices": _Opt("all", _S),
    "oneapi_visible_devices": _Opt("all", _S),
    "custom_vjp3": _Opt(False, _B),
    "debug_leaked_clients_on_clear_backends": _Opt(False, _B),
    "debug_log_modules": _Opt("", _S),
    "disable_bwd_checks": _Opt(False, _B),
    "disable_most_optimizations": _Opt(False, _B),
    "disable_vmap_shmap_error": _Opt(False, _B),
    "disallow_mesh_context_manager": _Opt(False, _B),
    "distributed_debug": _Opt(False, _B),
    "dump_ir_modes": _Opt("stablehlo", _S),
    "dump_ir_to": _Opt("", _S),
    "enable_pgle": _Opt(False, _B),
    "enable_preemption_service": _Opt(True, _B),
    "enable_recoverability": _Opt(False, _B),
    "error_checking_behavior_divide": _Opt("ignore", "enum", ("ignore", "raise")),
    "error_checking_behavior_nan": _Opt("ignore", "enum", ("ignore", "raise")),
    "error_checking_behavior_oob": _Opt("ignore", "enum", ("ignore", "raise")),
    "exec_time_optimization_effort": _Opt(0.0, _F),
    "experimental_unsafe_xla_runtime_errors": _Opt(False, _B),
    "explicit_x64_dtypes": _Opt("warn", "enum", ("allow", "warn", "error")),
    "export_calling_convention_version": _Opt(10, _I),
    "export_ignore_forward_compatibility": _Opt(False, _B),
    "force_dcn_cross_host_transfers": _Opt(False, _B),
    "hlo_source_file_canonicalization_regex": _Opt(None, "optstr"),
    "include_debug_info_in_dumps": _Opt(True, _B),
    "include_full_tracebacks_in_locations": _Opt(True, _B),
    "logging_level": _Opt("NOTSET", _S),
    "memory_fitting_effort": _Opt(0.0, _F),
    "memory_fitting_level": _Opt("O2", _S),
    "mock_gpu_topology": _Opt("", _S),
    "mosaic_allow_hlo": _Opt(False, _B),
    "mutable_array_checks": _Opt(True, _B),
    "optimization_level": _Opt("UNKNOWN", _S),
    "pallas_enable_debug_checks": _Opt(False, _B),
    "pallas_poison_buffers": _Opt(False, _B),
    "pallas_use_mosaic_gpu": _Opt(True, _B),
    "pallas_verbose_errors": _Opt(False, _B),
    "pgle_aggregation_percentile": _Opt(90, _I),
    "pgle_profiling_runs": _Opt(3, _I),
    "pjrt_client_create_options": _Opt(None, "any"),
    "pprint_use_color": _Opt(True, _B),
    "ragged_dot_use_gpu_pallas_triton_lowering": _Opt(False, _B),
    "ragged_dot_use_ragged_dot_instruction": _Opt(True, _B),
    "refs_to_pins": _Opt(False, _B),
    "remat3": _Opt(False, _B),
    "remove_custom_partitioning_ptr_from_cache_key": _Opt(False, _B),
    "scan3": _Opt(False, _B),
    "send_traceback_to_runtime": _Opt("off", "enum", ("off", "on", "full")),
    "serialization_version": _Opt(0, _I),
    "share_binary_between_hosts": _Opt(False, _B),
    "share_binary_between_hosts_timeout_ms": _Opt(1_200_000, _I),
    "sort_devices_by_process_index": _Opt(True, _B),
    "source_url_schema": _Opt(None, "optstr"),
    "threefry_gpu_kernel_lowering": _Opt(False, _B),
    "traceback_in_locations_limit": _Opt(100, _I),
    "tracer_error_num_traceback_frames": _Opt(5, _I),
    "use_emit_pipeline_primitive": _Opt(False, _B),
    "use_magma": _Opt("auto", _S),
    "xla_profile_version": _Opt(0, _I),
    # JAX spells these without the `jax_` prefix:
    "check_vma": _Opt(False, _B),
    "eager_constant_folding": _Opt(False, _B),
    "jax2tf_associative_scan_reductions": _Opt(False, _B),
    "jax2tf_default_native_serialization": _Opt(True, _B),
    "mock_num_gpu_processes": _Opt(0, _I),
}
_UNPREFIXED = {"check_vma", "eager_constant_folding", "jax2tf_associative_scan_reductions",
               "jax2tf_default_native_serialization", "mock_num_gpu_processes"}

#: The options whose values stagecraft implements (any value); setting another option to a
#: value other than its default warns once. Other entries: values that need no work here.
HONOURED: dict[str, Callable[[Any], bool] | None] = {
    "enable_x64": None, "disable_jit": None, "debug_nans": None, "debug_infs": None,
    "traceback_filtering": None, "compilation_cache_dir": None,
    "compilation_cache_max_size": None, "persistent_cache_min_compile_time_secs": None,
    "persistent_cache_min_entry_size_bytes": None, "log_compiles": None, "explain_cache_misses": None,
    "platforms": None, "platform_name": None, "num_cpu_devices": None, "enable_checks": None,
    "softmax_custom_jvp": None, "default_matmul_precision": None,
    "numpy_rank_promotion": None, "numpy_dtype_promotion": None, "default_device": None,
    "disallow_mesh_context_manager": None, "debug_key_reuse": None,
    # values that are what stagecraft does anyway
    "threefry_partitionable": None,
    "default_prng_impl": lambda v: v == "threefry2x32",
    "use_shardy_partitioner": lambda v: v is True,
    "allow_f16_reductions": lambda v: v is True,
    # "warn" and "error" (dtypes.check_user_dtype); "allow", JAX's 64-bit arrays without
    # x64, is not: stagecraft narrows those requests silently then
    "explicit_x64_dtypes": lambda v: v in ("warn", "error"),
    # implementation choices of JAX's with no visible effect on results
    "use_direct_linearize": None, "cpu_enable_async_dispatch": None,
    # False (JAX's default): a jit's closed-over arrays are constants in the program text;
    # True: they are arguments of the program (pjit.lower_traced)
    "use_simplified_jaxpr_constants": None,
    # the warning about large constants in a program's text (lowering.warn_captured_constants)
    "captured_constants_warn_bytes": None, "captured_constants_report_frames": None,
    "pprint_use_color": None, "logging_level": None,
}

# The environment variables of the first stagecraft options, still read.
_LEGACY_ENV = {"enable_x64": "STAGECRAFT_ENABLE_X64",
               "compilation_cache_dir": "STAGECRAFT_COMPILATION_CACHE_DIR",
               "compilation_cache_max_size": "STAGECRAFT_COMPILATION_CACHE_MAX_SIZE"}


def _jax_name(name: str) -> str:
  return name if name in _UNPREFIXED else "jax_" + name


def _parse_env(name: str, opt: _Opt, text: str):
  if opt.kind == _B:
    return text.strip().lower() in ("1", "true", "yes", "on", "t", "y")
  if opt.kind == _I:
    return int(text)
  if opt.kind == _F:
    return float(text)
  return text


def _env_value(name: str, opt: _Opt):
  for var in (_jax_name(name).upper(), _LEGACY_ENV.get(name)):
    if var and os.environ.get(var) is not None:
      try:
        return _check(name, opt, _parse_env(name, opt, os.environ[var]))
      except (TypeError, ValueError) as e:
        warnings.warn(f"Ignoring the environment variable {var}={os.environ[var]!r}: {e}",
                      stacklevel=2)
  return opt.default


def _check(name: str, opt: _Opt, value):
  """`value` validated (and normalized) for option `name`; raises TypeError/ValueError."""
  jname = _jax_name(name)
  if isinstance(value, enum.Enum):
    value = value.value if isinstance(value.value, str) else value.name.lower()
  if opt.kind == _B:
    if not isinstance(value, (bool, int, np.bool_)) or value not in (0, 1):
      raise TypeError(f"Config option {jname!r} expects a bool, got {value!r}.")
    return bool(value)
  if opt.kind == _I:
    if isinstance(value, bool) or not isinstance(value, int):
      raise TypeError(f"Config option {jname!r} expects an int, got {value!r}.")
    return value
  if opt.kind == _F:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      raise TypeError(f"Config option {jname!r} expects a number, got {value!r}.")
    return float(value)
  if opt.kind == _S:
    if not isinstance(value, str):
      raise TypeError(f"Config option {jname!r} expects a string, got {value!r}.")
    return value
  if opt.kind == "optstr":
    if value is not None and not isinstance(value, str):
      raise TypeError(f"Config option {jname!r} expects a string or None, got {value!r}.")
    return value
  if opt.kind == "enum":
    if value not in opt.choices:
      raise ValueError(f"Config option {jname!r} expects one of "
                       f"{[c for c in opt.choices]}, got {value!r}.")
    return value
  if name == "default_device":
    if value is not None and not isinstance(value, str) and not (
        hasattr(value, "platform") and hasattr(value, "id")):
      raise ValueError("jax.default_device must be passed either a Device object (e.g. "
                       "`jax.devices('cpu')[0]`) or a platform name string like 'cpu' or "
                       f"'gpu', got: {value!r}")
    return value
  if opt.kind == "path":
    if value is not None and not isinstance(value, (str, os.PathLike)):
      raise TypeError(f"Config option {jname!r} expects a directory path (str or "
                      f"os.PathLike) or None, got {value!r} of type {type(value).__name__}.")
    if value is not None:
      value = os.fspath(value)
      if not value:
        raise ValueError(f"Config option {jname!r} expects a directory path or None, got an "
                         f"empty path; pass None to turn the persistent cache off.")
    return value
  return value


def _normalize(name: str) -> str:
  if name in _OPTIONS:
    return name
  if name.startswith("jax_") and name[4:] in _OPTIONS and name[4:] not in _UNPREFIXED:
    return name[4:]
  raise AttributeError(f"Unrecognized config option: {name}")


_STATE_IDS: dict[tuple, int] = {}


# The names of the values of `Config.state_key`, in order (a cache-miss explanation names
# the ones that differ, as JAX names its trace context's).
STATE_KEY_NAMES = ("jax_enable_x64", "jax_debug_nans", "jax_numpy_rank_promotion",
                   "jax_numpy_dtype_promotion", "jax_default_matmul_precision",
                   "jax_default_prng_impl", "jax_threefry_partitionable",
                   "jax_softmax_custom_jvp", "jax_high_dynamic_range_gumbel",
                   "jax_default_device", "jax_debug_key_reuse", "jax user contexts")


class Config:
  """Holds the options. Read `config.enable_x64` (or `config.jax_enable_x64`,
  `config.read("jax_enable_x64")`, `config.values`); set with `config.update(name, value)`.

  `state_key` is the tuple of the values of the options that change traced programs; it
  changes whenever one of them does, so caches can key on it cheaply."""

  def __init__(self):
    d = self.__dict__
    for name, opt in _OPTIONS.items():
      d[name] = _env_value(name, opt)
    d["_warned"] = set()
    d["_listeners"] = []
    self._refresh()

  def _refresh(self):
    d = self.__dict__
    d["state_key"] = (d["enable_x64"], d["debug_nans"] or d["debug_infs"],
                      d["numpy_rank_promotion"], d["numpy_dtype_promotion"],
                      d["default_matmul_precision"], d["default_prng_impl"],
                      d["threefry_partitionable"], d["softmax_custom_jvp"],
                      d["high_dynamic_range_gumbel"], id(d["default_device"]),
                      d["debug_key_reuse"], d["use_simplified_jaxpr_constants"])
    if _user_contexts:   # make_user_context: their values key the caches too
      d["state_key"] += (tuple(c.value for c in _user_contexts),)
    # NB: a small int per distinct state_key, for the hottest cache keys (jit's dispatch
    # fast path): an int hashes in no time, a 10-tuple does not.
    d["state_id"] = _STATE_IDS.setdefault(d["state_key"], len(_STATE_IDS))

  def update(self, name: str, value) -> None:
    """Sets option `name` (JAX's name, with or without `jax_`) to `value`.

    Raises:
      AttributeError: for an option JAX 0.10.2 does not have ("Unrecognized config
        option: ...", as JAX).
      TypeError / ValueError: for a value of the wrong type or outside the option's
        choices (nothing is changed).
    """
    key = _normalize(name)
    opt = _OPTIONS[key]
    value = _check(key, opt, value)
    if key in ("platforms", "platform_name", "num_cpu_devices", "default_device"):
      # NB: a runtime option: the runtime (a lower layer, imported on first use) applies it.
      from stagecraft.runtime import client
      client.configure(key, value)
    for hook in self.__dict__["_listeners"]:
      hook(key, value)
    self.__dict__[key] = value
    if opt.trace or key in ("debug_nans", "debug_infs"):
      self._refresh()
    self._warn_unhonoured(key, value)

  def _warn_unhonoured(self, key, value):
    if key in HONOURED:
      ok = HONOURED[key]
      if ok is None or ok(value):
        return
    elif value == _OPTIONS[key].default:
      return
    if key not in self._warned:
      self._warned.add(key)
      warnings.warn(f"Config option {_jax_name(key)!r} is accepted but not implemented by "
                    f"stagecraft; the value {value!r} has no effect (docs/differences.md).",
                    stacklevel=3)

  def parse_flags_with_absl(self) -> None:
    """JAX's `config.parse_flags_with_absl()` (test programs call it at import): applies
    the `--jax_<option>=<value>` arguments of `sys.argv` (values read as the environment
    variables' are), and ignores every other argument. An unknown `--jax_` option or a bad
    value warns and is skipped, as a bad environment variable is."""
    for arg in sys.argv[1:]:
      if not arg.startswith("--jax_"):
        continue
      name, _, text = arg[2:].partition("=")
      try:
        key = _normalize(name)
        self.update(key, _parse_env(key, _OPTIONS[key], text or "true"))
      except (AttributeError, TypeError, ValueError) as e:
        warnings.warn(f"Ignoring the flag {arg!r}: {e}", stacklevel=2)

  def config_with_absl(self) -> None:
    """JAX's `config.config_with_absl()`: here the same as `parse_flags_with_absl()`
    (stagecraft defines no absl flags)."""
    self.parse_flags_with_absl()

  def add_update_listener(self, hook: Callable[[str, Any], None]) -> None:
    """Calls `hook(name, value)` before each update (it may raise to refuse the value);
    lower layers that must react to an option (the runtime's device count) register one."""
    self.__dict__["_listeners"].append(hook)

  def read(self, name: str):
    return self.__dict__[_normalize(name)]

  def _read(self, name: str):
    return self.read(name)

  @property
  def values(self) -> dict:
    """{JAX name: value} of every option."""
    return {_jax_name(k): self.__dict__[k] for k in _OPTIONS}

  @property
  def x64_enabled(self) -> bool:
    """The current value of `jax_enable_x64` (JAX's read-only `config.x64_enabled`, which
    libraries' test utilities such as jaxopt's read)."""
    return self.__dict__["enable_x64"]

  def __getattr__(self, name):
    if name.startswith("jax_") and name[4:] in _OPTIONS:
      return self.__dict__[name[4:]]
    raise AttributeError(f"Unrecognized config option: {name}")

  def __setattr__(self, name, value):
    try:
      key = _normalize(name)
    except AttributeError:
      object.__setattr__(self, name, value)
      return
    raise AttributeError(f"Use config.update({_jax_name(key)!r}, value) to set an option.")

  @contextlib.contextmanager
  def _override(self, name, value):
    old = self.read(name)
    self.update(name, value)
    try:
      yield
    finally:
      self.update(name, old)


_user_contexts: list = []   # the UserContexts made so far (in state_key once there is one)

config = Config()


class UserContext:
  """A context whose value keys jit's tracing, lowering and compile caches (JAX's
  `jax.make_user_context`): `with ctx(value):` sets it for a block, `ctx.value` reads it.
  Values must be hashable."""

  def __init__(self, default_value=None):
    self._value = default_value

  @property
  def value(self):
    return self._value

  @contextlib.contextmanager
  def __call__(self, new_value):
    hash(new_value)   # NB: a TypeError here names an unhashable value, as a cache key would
    old, self._value = self._value, new_value
    config._refresh()
    try:
      yield
    finally:
      self._value = old
      config._refresh()

  def __repr__(self):
    return f"UserContext(value={self._value!r})"


def make_user_context(default_value=None) -> UserContext:
  """A new `UserContext` holding `default_value` (JAX's `jax.make_user_context`): jitted
  functions called under `with ctx(v):` are traced and compiled again when `v` differs
  from the value of their earlier calls. Not thread-safe to create (as JAX's).

  Raises:
    TypeError: when a value set with `ctx(value)` is not hashable.
  """
  ctx = UserContext(default_value)
  _user_contexts.append(ctx)
  config._refresh()
  return ctx


class State:
  """An option as JAX exposes it at the top level (`stagecraft.numpy_rank_promotion`):
  `State(value)` is a context manager setting it for a block, `.value` reads it."""

  def __init__(self, name: str, default_arg=None):
    self._name = name
    self._default_arg = default_arg
    self.__name__ = name

  def __call__(self, new_val=None):
    if new_val is None and self._default_arg is not None:
      new_val = self._default_arg
    return config._override(self._name, new_val)

  @property
  def value(self):
    return config.read(self._name)

  def __repr__(self):
    return f"State({_jax_name(self._name)}={self.value!r})"


enable_x64 = State("enable_x64", True)
class _DisableJit(State):
  """`disable_jit(disable=True)`: JAX's context manager running jitted functions (and the
  implicit jits of lax's control flow) eagerly in its block; its argument is `disable`."""

  def __call__(self, disable: bool = True):
    return config._override(self._name, bool(disable))


disable_jit = _DisableJit("disable_jit", True)
debug_nans = State("debug_nans", True)
debug_infs = State("debug_infs", True)
numpy_rank_promotion = State("numpy_rank_promotion")
numpy_dtype_promotion = State("numpy_dtype_promotion")
default_matmul_precision = State("default_matmul_precision")
log_compiles = State("log_compiles", True)
explain_cache_misses = State("explain_cache_misses", True)
default_device = State("default_device")
check_tracer_leaks = State("check_tracer_leaks", True)
checking_leaks = check_tracer_leaks
debug_key_reuse = State("debug_key_reuse", True)
enable_checks = State("enable_checks", True)
threefry_partitionable = State("threefry_partitionable", True)
default_prng_impl = State("default_prng_impl")
enable_custom_prng = State("enable_custom_prng", True)
legacy_prng_key = State("legacy_prng_key")
softmax_custom_jvp = State("softmax_custom_jvp", True)
allow_f16_reductions = State("allow_f16_reductions", True)
remove_size_one_mesh_axis_from_type = State("remove_size_one_mesh_axis_from_type", True)
auto_pcast = State("auto_pcast", True)
no_execution = State("no_execution", True)
no_tracing = State("no_tracing", True)
thread_guard = State("thread_guard", True)
array_garbage_collection_guard = State("array_garbage_collection_guard")
transfer_guard_host_to_device = State("transfer_guard_host_to_device")
transfer_guard_device_to_device = State("transfer_guard_device_to_device")
transfer_guard_device_to_host = State("transfer_guard_device_to_host")


def transfer_guard(new_val: str):
  """Context manager setting all three transfer guards (accepted; not enforced)."""
  return config._override("transfer_guard", new_val)
