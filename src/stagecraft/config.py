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

from stagecraft import logging_config

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
  # JAX's kinds of option and their checks (`_check`): bool, int, float, str, optstr,
  # enum, optenum (None or one of the choices), enumclass (choices: the enum class),
  # dictstr, device, flag (JAX's absl-style flags: any value is stored)
  kind: str
  choices: tuple = ()
  trace: bool = False            # part of state_key (changes traced programs)


_B, _I, _F, _S = "bool", "int", "float", "str"

class NumpyDtypePromotion(enum.StrEnum):
  """The values of `jax_numpy_dtype_promotion` (JAX's enum: the option reads as a member,
  equal to its string)."""
  STANDARD = "standard"
  STRICT = "strict"


class ExplicitX64Mode(enum.IntEnum):
  """The values of `jax_explicit_x64_dtypes` (JAX's enum; set by member or by its
  lower-case name)."""
  WARN = enum.auto()
  ERROR = enum.auto()
  ALLOW = enum.auto()

  @classmethod
  def _missing_(cls, value):
    return {"warn": cls.WARN, "error": cls.ERROR, "allow": cls.ALLOW}.get(value)


class LegacyPrngKeyState(enum.StrEnum):
  """The values of `jax_legacy_prng_key`."""
  ALLOW = "allow"
  WARN = "warn"
  ERROR = "error"


class RuntimeTracebackMode(enum.StrEnum):
  """The values of `jax_send_traceback_to_runtime`."""
  OFF = "off"
  ON = "on"
  FULL = "full"


# JAX 0.10.2's options (names without the `jax_` prefix when JAX has one; the four JAX
# spells without it are marked in _UNPREFIXED), with JAX's defaults.
_OPTIONS: dict[str, _Opt] = {
    "check_vma": _Opt(False, _B),
    "eager_constant_folding": _Opt(False, _B),
    "jax2tf_associative_scan_reductions": _Opt(False, _B),
    "jax2tf_default_native_serialization": _Opt(True, _B),
    "allow_f16_reductions": _Opt(True, _B),
    "array_garbage_collection_guard": _Opt(None, 'optenum', ('allow', 'log', 'fatal')),
    "auto_pcast": _Opt(True, _B),
    "backend_target": _Opt('', 'flag'),
    "bcoo_cusparse_lowering": _Opt(False, _B),
    "captured_constants_report_frames": _Opt(0, _I),
    "captured_constants_warn_bytes": _Opt(2000000000, _I),
    "check_proxy_envs": _Opt(True, 'flag'),
    "check_static_indices": _Opt(False, _B, trace=True),
    "check_tracer_leaks": _Opt(False, _B),
    "compilation_cache_check_contents": _Opt(False, _B),
    "compilation_cache_dir": _Opt(None, 'optstr'),
    "compilation_cache_expect_pgle": _Opt(False, _B),
    "compilation_cache_include_metadata_in_key": _Opt(False, _B),
    "compilation_cache_max_size": _Opt(-1, _I),
    "compiler_detailed_logging_min_ops": _Opt(10, 'flag'),
    "compiler_enable_remat_pass": _Opt(True, _B),
    "cpu_collectives_implementation": _Opt('gloo', 'optenum', ('gloo', 'mpi', 'megascale')),
    "cpu_enable_async_dispatch": _Opt(True, 'flag'),
    "cpu_get_global_topology_timeout_minutes": _Opt(5, _I),
    "cpu_get_local_topology_timeout_minutes": _Opt(2, _I),
    "cross_host_transfer_socket_address": _Opt('', 'flag'),
    "cross_host_transfer_timeout_seconds": _Opt(None, 'flag'),
    "cross_host_transfer_transfer_size": _Opt(None, 'flag'),
    "cross_host_transport_addresses": _Opt('', 'flag'),
    "cuda_visible_devices": _Opt('all', 'flag'),
    "custom_vjp3": _Opt(False, _B),
    "debug_infs": _Opt(False, _B, trace=True),
    "debug_key_reuse": _Opt(False, _B, trace=True),
    "debug_leaked_clients_on_clear_backends": _Opt(False, _B),
    "debug_log_modules": _Opt('', _S),
    "debug_nans": _Opt(False, _B, trace=True),
    "default_device": _Opt(None, 'device', trace=True),
    "default_matmul_precision": _Opt(None, 'optenum', ('default', 'high', 'highest', 'bfloat16', 'tensorfloat32', 'float32', 'ANY_F8_ANY_F8_F32', 'ANY_F8_ANY_F8_F32_FAST_ACCUM', 'ANY_F8_ANY_F8_ANY', 'ANY_F8_ANY_F8_ANY_FAST_ACCUM', 'F16_F16_F16', 'F16_F16_F32', 'BF16_BF16_BF16', 'BF16_BF16_F32', 'BF16_BF16_F32_X3', 'BF16_BF16_F32_X6', 'BF16_BF16_F32_X9', 'TF32_TF32_F32', 'TF32_TF32_F32_X3', 'F32_F32_F32', 'F64_F64_F64'), trace=True),
    "default_prng_impl": _Opt('threefry2x32', 'enum', ('threefry2x32', 'threefry4x32', 'rbg', 'unsafe_rbg', 'philox2x32', 'philox4x32'), trace=True),
    "disable_bwd_checks": _Opt(False, _B),
    "disable_jit": _Opt(False, _B),
    "disable_most_optimizations": _Opt(False, 'flag'),
    "disable_vmap_shmap_error": _Opt(False, _B),
    "disallow_mesh_context_manager": _Opt(False, _B),
    "distributed_debug": _Opt(False, _B),
    "dump_ir_modes": _Opt('stablehlo', 'flag'),
    "dump_ir_to": _Opt('', 'flag'),
    "embedded_constants_max_bytes": _Opt(32, _I),
    "enable_checks": _Opt(False, _B),
    "enable_compilation_cache": _Opt(True, _B),
    "enable_custom_prng": _Opt(False, _B),
    "enable_pgle": _Opt(False, _B),
    "enable_preemption_service": _Opt(True, _B),
    "enable_recoverability": _Opt(False, _B),
    "enable_x64": _Opt(False, _B, trace=True),
    "error_checking_behavior_divide": _Opt('ignore', 'enum', ('ignore', 'raise')),
    "error_checking_behavior_nan": _Opt('ignore', 'enum', ('ignore', 'raise')),
    "error_checking_behavior_oob": _Opt('ignore', 'enum', ('ignore', 'raise')),
    "exec_time_optimization_effort": _Opt(0.0, _F),
    "experimental_unsafe_xla_runtime_errors": _Opt(False, _B),
    "explain_cache_misses": _Opt(False, _B),
    "explicit_x64_dtypes": _Opt(ExplicitX64Mode.WARN, 'enumclass', (ExplicitX64Mode,)),
    "export_calling_convention_version": _Opt(10, _I),
    "export_ignore_forward_compatibility": _Opt(False, _B),
    "force_dcn_cross_host_transfers": _Opt(False, 'flag'),
    "high_dynamic_range_gumbel": _Opt(False, _B, trace=True),
    "hlo_source_file_canonicalization_regex": _Opt(None, 'optstr'),
    "include_debug_info_in_dumps": _Opt(True, 'flag'),
    "include_full_tracebacks_in_locations": _Opt(True, _B),
    "legacy_prng_key": _Opt(LegacyPrngKeyState.ALLOW, 'enumclass', (LegacyPrngKeyState,)),
    "log_checkpoint_residuals": _Opt(False, _B),
    "log_compiles": _Opt(False, _B),
    "logging_level": _Opt('NOTSET', 'optenum', ('NOTSET', 'DEBUG', 'INFO', 'WARNING', 'ERROR', 'CRITICAL')),
    "memory_fitting_effort": _Opt(0.0, _F),
    "memory_fitting_level": _Opt('O2', 'enum', ('UNKNOWN', 'O0', 'O1', 'O2', 'O3')),
    "mock_gpu_topology": _Opt('', 'flag'),
    "mosaic_allow_hlo": _Opt(False, _B),
    "mutable_array_checks": _Opt(True, _B),
    "no_execution": _Opt(False, _B, trace=True),
    "no_tracing": _Opt(False, _B),
    "num_cpu_devices": _Opt(-1, _I),
    "numpy_dtype_promotion": _Opt(NumpyDtypePromotion.STANDARD, 'enumclass', (NumpyDtypePromotion,), trace=True),
    "numpy_rank_promotion": _Opt('allow', 'enum', ('allow', 'warn', 'raise'), trace=True),
    "oneapi_visible_devices": _Opt('all', 'flag'),
    "optimization_level": _Opt('UNKNOWN', 'enum', ('UNKNOWN', 'O0', 'O1', 'O2', 'O3')),
    "pallas_enable_debug_checks": _Opt(False, _B),
    "pallas_poison_buffers": _Opt(False, _B),
    "pallas_use_mosaic_gpu": _Opt(True, _B),
    "pallas_verbose_errors": _Opt(False, 'flag'),
    "persistent_cache_enable_xla_caches": _Opt('xla_gpu_per_fusion_autotune_cache_dir', 'optstr'),
    "persistent_cache_min_compile_time_secs": _Opt(1.0, _F),
    "persistent_cache_min_entry_size_bytes": _Opt(0, _I),
    "pgle_aggregation_percentile": _Opt(90, _I),
    "pgle_profiling_runs": _Opt(3, _I),
    "pjrt_client_create_options": _Opt(None, 'dictstr'),
    "platform_name": _Opt('', 'flag'),
    "platforms": _Opt(None, 'optstr'),
    "pprint_use_color": _Opt(True, _B),
    "ragged_dot_use_gpu_pallas_triton_lowering": _Opt(False, _B),
    "ragged_dot_use_ragged_dot_instruction": _Opt(True, _B),
    "raise_persistent_cache_errors": _Opt(False, _B),
    "random_seed_offset": _Opt(0, _I, trace=True),
    "refs_to_pins": _Opt(False, _B),
    "remat3": _Opt(False, _B),
    "remove_custom_partitioning_ptr_from_cache_key": _Opt(False, _B),
    "remove_size_one_mesh_axis_from_type": _Opt(False, _B),
    "rocm_visible_devices": _Opt('all', 'flag'),
    "scan3": _Opt(False, _B),
    "send_traceback_to_runtime": _Opt(RuntimeTracebackMode.OFF, 'enumclass', (RuntimeTracebackMode,)),
    "serialization_version": _Opt(0, _I),
    "share_binary_between_hosts": _Opt(False, _B),
    "share_binary_between_hosts_timeout_ms": _Opt(1200000, _I),
    "softmax_custom_jvp": _Opt(False, _B, trace=True),
    "sort_devices_by_process_index": _Opt(True, 'flag'),
    "source_url_schema": _Opt(None, 'optstr'),
    "thread_guard": _Opt(False, _B),
    "threefry_gpu_kernel_lowering": _Opt(False, _B),
    "threefry_partitionable": _Opt(True, _B, trace=True),
    "traceback_filtering": _Opt('auto', 'enum', ('off', 'tracebackhide', 'remove_frames', 'quiet_remove_frames', 'auto')),
    "traceback_in_locations_limit": _Opt(100, _I),
    "tracer_error_num_traceback_frames": _Opt(5, 'flag'),
    "transfer_guard": _Opt(None, 'optenum', ('allow', 'log', 'disallow', 'log_explicit', 'disallow_explicit')),
    "transfer_guard_device_to_device": _Opt(None, 'optenum', ('allow', 'log', 'disallow', 'log_explicit', 'disallow_explicit')),
    "transfer_guard_device_to_host": _Opt(None, 'optenum', ('allow', 'log', 'disallow', 'log_explicit', 'disallow_explicit')),
    "transfer_guard_host_to_device": _Opt(None, 'optenum', ('allow', 'log', 'disallow', 'log_explicit', 'disallow_explicit')),
    "use_direct_linearize": _Opt(True, _B),
    "use_emit_pipeline_primitive": _Opt(False, _B),
    "use_magma": _Opt('auto', 'enum', ('off', 'on', 'auto')),
    "use_shardy_partitioner": _Opt(True, _B),
    "use_simplified_jaxpr_constants": _Opt(False, _B, trace=True),
    "xla_backend": _Opt('', 'flag'),
    "xla_profile_version": _Opt(0, _I),
    "mock_num_gpu_processes": _Opt(0, 'flag'),
}
_UNPREFIXED = {"check_vma", "eager_constant_folding", "jax2tf_associative_scan_reductions",
               "jax2tf_default_native_serialization", "mock_num_gpu_processes"}

#: The options whose values stagecraft implements (any value); setting another option to a
#: value other than its default warns once. Other entries: values that need no work here.
HONOURED: dict[str, Callable[[Any], bool] | None] = {
    "enable_x64": None, "disable_jit": None, "debug_nans": None, "debug_infs": None,
    "check_static_indices": None, "disable_bwd_checks": None,
    "traceback_filtering": None, "compilation_cache_dir": None,
    "compilation_cache_max_size": None, "persistent_cache_min_compile_time_secs": None,
    "persistent_cache_min_entry_size_bytes": None, "log_compiles": None, "explain_cache_misses": None,
    "platforms": None, "platform_name": None, "num_cpu_devices": None, "enable_checks": None,
    "softmax_custom_jvp": None, "default_matmul_precision": None,
    "numpy_rank_promotion": None, "numpy_dtype_promotion": None, "default_device": None,
    "disallow_mesh_context_manager": None, "debug_key_reuse": None,
    "legacy_prng_key": None, "random_seed_offset": None,
    # jit's checks (pjit.py, dispatch.py): a trace raises under no_tracing, an execution of
    # a compiled program under no_execution (part of state_key, as JAX's jit key)
    "no_tracing": None, "no_execution": None,
    # False: reduce_sum of f16/bf16 over a non-singleton axis raises (lax/reduction.py)
    "allow_f16_reductions": None,
    # values that are what stagecraft does anyway
    "threefry_partitionable": None,
    "default_prng_impl": lambda v: v == "threefry2x32",
    "use_shardy_partitioner": lambda v: v is True,
    # "warn" and "error" (dtypes.check_user_dtype); "allow", JAX's 64-bit arrays without
    # x64, is not: stagecraft narrows those requests silently then
    "explicit_x64_dtypes": lambda v: v != ExplicitX64Mode.ALLOW,
    # implementation choices of JAX's with no visible effect on results
    "use_direct_linearize": None, "cpu_enable_async_dispatch": None,
    # False (JAX's default): a jit's closed-over arrays are constants in the program text;
    # True: they are arguments of the program (pjit.lower_traced)
    "use_simplified_jaxpr_constants": None,
    # the warning about large constants in a program's text (lowering.warn_captured_constants)
    "captured_constants_warn_bytes": None, "captured_constants_report_frames": None,
    "pprint_use_color": None, "logging_level": None, "debug_log_modules": None,
    # runtime/array.py ("fatal" reports as "log" does: the process is not stopped)
    "array_garbage_collection_guard": lambda v: v != "fatal",
    # runtime/transfer_guard.py
    "transfer_guard": None, "transfer_guard_host_to_device": None,
    "transfer_guard_device_to_device": None, "transfer_guard_device_to_host": None,
    # dump_ir: its `jaxpr_html` mode is not written (the other modes are)
    "dump_ir_to": None, "dump_ir_modes": None,
}

# The environment variables of the first stagecraft options, still read.
_LEGACY_ENV = {"enable_x64": "STAGECRAFT_ENABLE_X64",
               "compilation_cache_dir": "STAGECRAFT_COMPILATION_CACHE_DIR",
               "compilation_cache_max_size": "STAGECRAFT_COMPILATION_CACHE_MAX_SIZE"}


def _jax_name(name: str) -> str:
  return name if name in _UNPREFIXED else "jax_" + name


_TRUE, _FALSE = ("y", "yes", "t", "true", "on", "1"), ("n", "no", "f", "false", "off", "0")


def _parse_env(name: str, opt: _Opt, text: str):
  """The value of the environment variable text `text` for option `name`, as JAX reads
  it (a bool: `1`/`true`/`yes`/`on`/`t`/`y` or `0`/`false`/`no`/`off`/`f`/`n`)."""
  kind = opt.kind
  if kind == "flag":   # a flag is read as its default's type
    kind = {bool: _B, int: _I}.get(type(opt.default), _S)
  if kind == _B:
    t = text.strip().lower()
    if t not in _TRUE + _FALSE:
      raise ValueError(f"invalid truth value {t!r} for environment {_jax_name(name).upper()!r}")
    return t in _TRUE
  if kind == _I:
    return int(text)
  if kind == _F:
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
  """`value` validated (and normalized) for option `name` as JAX 0.10.2 checks it, with
  JAX's messages: a bool option takes any value (`bool(value)`), an int one None or an
  int, a float one None or a number, a string one a str (or None where JAX allows it), an
  enum one one of its choices, an enum-class one a member or its value (read back as the
  member), a flag anything.

  Raises:
    TypeError / ValueError: JAX's, for a value the option refuses (nothing changes)."""
  kind = opt.kind
  if kind == _B:
    return bool(value)
  if kind == _I:
    if value is not None and not isinstance(value, int):
      raise ValueError(f"new int config value must be None or of type int, got {value} of "
                       f"type {type(value)}")
    return value
  if kind == _F:
    if value is not None and not isinstance(value, (float, int)):
      raise ValueError(f"new float config value must be None or of type float, got {value} "
                       f"of type {type(value)}")
    return value
  if kind == _S:
    if not isinstance(value, str):
      raise TypeError(f"new string config value must be of type str, got {value} of type "
                      f"{type(value)}.")
    return value
  if kind == "optstr":
    if value is not None and not isinstance(value, str):
      raise ValueError(f"new string config value must be None or of type str, got {value} "
                       f"of type {type(value)}.")
    return value
  if kind == "dictstr":
    if value is not None and not isinstance(value, (dict, str)):
      raise ValueError(f"new string config value must be None or of type dict | str, got "
                       f"{value} of type {type(value)}.")
    return value
  if kind in ("enum", "optenum"):
    if (kind == "enum" or value is not None) and (
        type(value) is not str or value not in opt.choices):
      none = "None or " if kind == "optenum" else ""
      raise ValueError(f"new enum value must be {none}in {list(opt.choices)}, got {value} of "
                       f"type {type(value)}.")
    return value
  if kind == "enumclass":
    cls = opt.choices[0]
    if isinstance(value, str):
      return cls(value)   # NB: Python's ValueError "'x' is not a valid Cls", as JAX's
    if not isinstance(value, cls):
      raise TypeError(f"new enum value must be an instance of {cls}, got {value} of type "
                      f"{type(value)}.")
    return value
  if kind == "device":
    if value is not None and not isinstance(value, str) and not (
        hasattr(value, "platform") and hasattr(value, "id")):
      raise ValueError("jax.default_device must be passed either a Device object (e.g. "
                       "`jax.devices('cpu')[0]`) or a platform name string like 'cpu' or "
                       f"'gpu', got: {value!r}")
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
                   "jax_default_device", "jax_debug_key_reuse",
                   "jax_use_simplified_jaxpr_constants", "jax_random_seed_offset",
                   "jax_no_execution", "jax_allow_f16_reductions", "jax user contexts")


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
    for key in ("logging_level", "debug_log_modules"):   # JAX_LOGGING_LEVEL, ...
      if d[key] != _OPTIONS[key].default:
        logging_config.apply(key, d[key])

  def _refresh(self):
    d = self.__dict__
    d["state_key"] = (d["enable_x64"], d["debug_nans"] or d["debug_infs"],
                      d["numpy_rank_promotion"], d["numpy_dtype_promotion"],
                      d["default_matmul_precision"], d["default_prng_impl"],
                      d["threefry_partitionable"], d["softmax_custom_jvp"],
                      d["high_dynamic_range_gumbel"], id(d["default_device"]),
                      d["debug_key_reuse"], d["use_simplified_jaxpr_constants"],
                      d["random_seed_offset"], d["no_execution"], d["allow_f16_reductions"])
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
    if key in ("logging_level", "debug_log_modules"):
      logging_config.apply(key, value)
    self.__dict__[key] = value
    if key == "transfer_guard":   # as JAX's: the generic option sets each direction's
      for name in ("transfer_guard_host_to_device", "transfer_guard_device_to_device",
                   "transfer_guard_device_to_host"):
        self.update(name, value)
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


@contextlib.contextmanager
def transfer_guard(new_val: str):
  """`with transfer_guard(level):` sets the host-to-device, device-to-device and
  device-to-host guards (and the generic `jax_transfer_guard`) to `level` for a block: one
  of "allow", "log", "disallow", "log_explicit", "disallow_explicit" (runtime/transfer_guard.py
  says what each allows). An inner `transfer_guard_<direction>(...)` block overrides it for
  its direction.

  Raises:
    ValueError: for another level (nothing is changed)."""
  with contextlib.ExitStack() as stack:
    for name in ("transfer_guard_host_to_device", "transfer_guard_device_to_device",
                 "transfer_guard_device_to_host", "transfer_guard"):
      stack.enter_context(config._override(name, new_val))
    yield
