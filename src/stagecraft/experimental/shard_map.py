"""`stagecraft.experimental.shard_map`: JAX's deprecated `jax.experimental.shard_map`.

JAX 0.10.2 keeps this module as a deprecated legacy API (deprecated in JAX 0.8.0): its one
name, `shard_map(f, mesh, in_specs, out_specs, check_rep=True)`, is `jax.shard_map` with the
mesh and specs given positionally, `axis_names=set()` (manual over every mesh axis) and
`check_vma=check_rep`. Reading the name (`from jax.experimental.shard_map import shard_map`)
warns once per process with JAX's DeprecationWarning; use `stagecraft.shard_map` instead.

  >>> import warnings
  >>> with warnings.catch_warnings():
  ...   warnings.simplefilter("ignore", DeprecationWarning)
  ...   from stagecraft.experimental.shard_map import shard_map
"""
from __future__ import annotations

from typing import Any, Callable

from stagecraft.experimental import deprecation_getattr
from stagecraft.shard_map import shard_map as _new_shard_map
from stagecraft.sharding import AbstractMesh, Mesh

__all__ = ["shard_map"]

_MESSAGE = "jax.experimental.shard_map is deprecated in v0.8.0. Used jax.shard_map instead."


def _deprecated_shard_map(f: Callable, mesh: Mesh | AbstractMesh | None, in_specs: Any,
                          out_specs: Any, check_rep: bool = True) -> Callable:
  """Maps `f` over the blocks of `mesh` (JAX's deprecated
  `jax.experimental.shard_map.shard_map`; use `stagecraft.shard_map`).

  The same as `stagecraft.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
  axis_names=set(), check_vma=check_rep)`: `f` is manual over every axis of `mesh`; an
  `in_specs` entry of None makes that argument static (as in JAX 0.10.2, whose
  experimental shard_map no longer reads None as replicated); `mesh=None` takes the mesh in
  context.

  Args:
    f: the per-device function (pytrees of arrays in and out).
    mesh: a Mesh (or an AbstractMesh under `set_mesh`), or None for the mesh in context.
    in_specs: a PartitionSpec per positional argument (a pytree prefix of the arguments).
    out_specs: a PartitionSpec per output (a pytree prefix of the outputs).
    check_rep: check that outputs are the same along the mesh axes their out_specs leave
      out (`check_vma` of `stagecraft.shard_map`).

  Returns:
    The mapped function; its results are Arrays laid out over the mesh by `out_specs`.

  Raises:
    TypeError, ValueError: as `stagecraft.shard_map` (a non-callable `f`, a bad mesh or
      specs, an output varying along an axis its out_spec leaves out when `check_rep`).
  """
  return _new_shard_map(f, out_specs=out_specs, in_specs=in_specs, mesh=mesh,
                        axis_names=set(), check_vma=check_rep)


_deprecated_shard_map.__name__ = _deprecated_shard_map.__qualname__ = "shard_map"
_deprecations = {"shard_map": (_MESSAGE, _deprecated_shard_map)}


__getattr__ = deprecation_getattr(__name__, _deprecations)
