"""`stagecraft.extend`: the API for library authors, as JAX's `jax.extend` (JAX 0.10.2).

Libraries that define their own primitives (equinox, quax, ...) use these modules and
`stagecraft.interpreters.{ad, batching, partial_eval, mlir}`; everything here is backed by
stagecraft's own machinery (its core, interpreters, runtime client and random module):

- `core`: `Primitive`, `CallPrimitive`, the jaxpr types, `jaxpr_as_fun`, `check_jaxpr`, the
  trace context, and `core.primitives`, every built-in primitive under its JAX name;
- `linear_util`: `WrappedFun`, `wrap_init`, `transformation*`, `cache`, `merge_linear_aux`;
- `backend`: the PJRT clients and devices of stagecraft's runtime;
- `random`: the Threefry PRNG implementation, `seed_with_impl`, `random_seed`,
  `threefry_2x32`, `threefry2x32_p`;
- `source_info_util`: name stacks and source locations;
- `sharding`: `GSPMDSharding` and the HLO sharding proto helpers;
- `lowering`, `mlir`: what is meaningful for a lowering to StableHLO *text* (MLIR's Python
  objects do not exist here; use `interpreters.mlir.lower_fun`, docs/differences.md).

JAX's `jax.extend.xla` (HLO pass hooks), `jax.extend.pallas` and `jax.extend.ifrt_programs`
have no counterpart.
"""
from __future__ import annotations

from stagecraft.extend import (backend, core, linear_util, lowering, mlir, random, sharding,
                               source_info_util)

__all__ = ["backend", "core", "linear_util", "lowering", "mlir", "random", "sharding",
           "source_info_util"]
