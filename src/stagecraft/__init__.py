"""stagecraft: a JAX-style staging compiler (trace -> jaxpr -> StableHLO -> XLA).

Public API with JAX's names: `jit`, `make_jaxpr`, `eval_shape`, `device_put`, `devices`,
`numpy`, `lax`, `tree_util`, `config`.
"""
from stagecraft.config import config, debug_infs, debug_nans, default_device, disable_jit, enable_x64
from stagecraft.config import (allow_f16_reductions, array_garbage_collection_guard, auto_pcast,
                               check_tracer_leaks, checking_leaks, debug_key_reuse,
                               default_matmul_precision, default_prng_impl, enable_checks,
                               enable_custom_prng, explain_cache_misses, legacy_prng_key, make_user_context,
                               log_compiles, no_execution, no_tracing, numpy_dtype_promotion,
                               numpy_rank_promotion, remove_size_one_mesh_axis_from_type,
                               softmax_custom_jvp, thread_guard, threefry_partitionable,
                               transfer_guard, transfer_guard_device_to_device,
                               transfer_guard_device_to_host, transfer_guard_host_to_device)
from stagecraft import dtypes, tree_util, tree, errors, version
from stagecraft.version import __version__, __version_info__
from stagecraft.dtypes import float0
from stagecraft.core import ShapeDtypeStruct, ShapedArray, ensure_compile_time_eval
from stagecraft.errors import (ConcretizationTypeError, DeviceAssignmentMismatchError,
                               DonatedBufferError,
                               TracerArrayConversionError, TracerIntegerConversionError,
                               UnexpectedTracerError)
from stagecraft.indexing import ds
from stagecraft.runtime import (Array, block_until_ready, device_count,
                                device_put, devices, local_device_count, local_devices,
                                process_count, process_index)
from stagecraft.runtime.client import (Device, default_backend, host_count, host_id, host_ids,
                                       process_indices)
from stagecraft.runtime.array import copy_to_host_async, device_get, live_arrays
from stagecraft import typing
from stagecraft import lax
from stagecraft import numpy
from stagecraft.api import (eval_shape, grad, hessian, jacfwd, jacobian, jacrev, jit, jvp,
                            linear_transpose, linearize, make_jaxpr, pmap, value_and_grad, vjp,
                            vmap)
from stagecraft.api import clear_caches, fwd_and_bwd, print_environment_info, typeof
from stagecraft.api import Ref, freeze, new_ref
from stagecraft import api as _api
from stagecraft import sharding
from stagecraft.sharding import NamedSharding, P, Shard, make_mesh
from stagecraft.shard_map import shard_map, smap
from stagecraft.runtime.spmd import (make_array_from_callback,
                                     make_array_from_process_local_data,
                                     make_array_from_single_device_arrays)
from stagecraft.custom_derivatives import (closure_convert, custom_gradient, custom_jvp,
                                           custom_vjp)
from stagecraft import custom_batching
from stagecraft.ad_checkpoint import checkpoint, checkpoint_policies, remat
from stagecraft.custom_dce import custom_dce
from stagecraft import random, scipy, nn  # after api: they use jit
from stagecraft import stages
from stagecraft import debug
from stagecraft.callback import pure_callback
from stagecraft.runtime.dispatch import effects_barrier
from stagecraft.xla_computation import xla_computation
from stagecraft.sharding import set_mesh
from stagecraft.lax.spmd import reshard
from stagecraft.source_info_util import named_call, named_scope

import importlib as _importlib
import types as _types

from stagecraft import core as _core_mod

# JAX's `jax.ad`: the destinations and results of `vjp(...)[1].with_refs`.
ad = _types.SimpleNamespace(DontWant=_api.DontWant, DidntWant=_api.DidntWant,
                            GradRef=_api.GradRef, GradValue=_api.GradValue)

# JAX's `jax.memory`: the memory spaces `device_put` takes.
memory = _types.SimpleNamespace(Space=_core_mod.MemorySpace)

# Subsystems loaded on first use (`stagecraft.image`, `import stagecraft.ops`).
# NB: implicit arrays (and plum, which they use) cost ~0.2 s to import: on first use only.
_LAZY_SUBMODULES = ("image", "ops", "flatten_util", "experimental", "implicit", "optim",
                    "distributed", "profiler", "ffi", "example_libraries", "compat", "extend",
                    "export", "test_util", "ref", "lib")


# Names defined in a lazily loaded submodule (JAX exports them at the top level too).
_LAZY_NAMES = {"empty_ref": "ref", "free_ref": "ref"}


def __getattr__(name):
  if name in _LAZY_SUBMODULES:
    return _importlib.import_module(f"{__name__}.{name}")
  if name in _LAZY_NAMES:
    return getattr(_importlib.import_module(f"{__name__}.{_LAZY_NAMES[name]}"), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
  return sorted({*globals(), *_LAZY_SUBMODULES, *_LAZY_NAMES})
