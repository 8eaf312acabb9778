"""`stagecraft.experimental.pjit`: JAX's deprecated `jax.experimental.pjit`.

JAX 0.10.2 keeps one name here, `pjit` (deprecated since October 2025): `jax.jit` with
`in_shardings` and `out_shardings` also accepted positionally, whose bare PartitionSpecs
refer to the mesh in context (`with mesh:` or `set_mesh`). Reading the name
(`from jax.experimental.pjit import pjit`) warns once per process with JAX's
DeprecationWarning; use `stagecraft.jit` instead.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from stagecraft.experimental import deprecation_getattr
from stagecraft.pjit import jit

__all__ = ["pjit"]

_MESSAGE = "jax.experimental.pjit.pjit has been deprecated. Please use `jax.jit` instead."


def _deprecated_pjit(fun: Callable, in_shardings: Any = None, out_shardings: Any = None,
                     static_argnums: int | Sequence[int] | None = None,
                     static_argnames: str | Iterable[str] | None = None,
                     donate_argnums: int | Sequence[int] | None = None,
                     donate_argnames: str | Iterable[str] | None = None,
                     keep_unused: bool = False, device: Any = None, backend: str | None = None,
                     inline: bool = False,
                     compiler_options: dict[str, Any] | None = None) -> Callable:
  """Compiles `fun` (JAX's deprecated `jax.experimental.pjit.pjit`; use `stagecraft.jit`).

  The same as `stagecraft.jit(fun, in_shardings=..., out_shardings=..., ...)`, with the
  shardings also accepted as the second and third positional arguments. A bare
  PartitionSpec means `NamedSharding(mesh in context, spec)`.

  Args:
    fun: a function of arrays (pytrees of arrays) returning arrays.
    in_shardings / out_shardings: a Sharding, a PartitionSpec (under `with mesh:`), None
      (unspecified) or a pytree prefix of the positional arguments / outputs of those.
    static_argnums, static_argnames, donate_argnums, donate_argnames, keep_unused, device,
      backend, inline: as `stagecraft.jit`.
    compiler_options: XLA compiler options; stagecraft passes none to XLA, so only None or
      an empty dict is accepted.

  Returns:
    The compiled function (a `stagecraft.jit` wrapper: `lower`, `trace`, `eval_shape`).

  Raises:
    NotImplementedError: for non-empty `compiler_options`.
    TypeError, ValueError: as `stagecraft.jit`.
  """
  if compiler_options:
    raise NotImplementedError(f"pjit: compiler_options are not supported by stagecraft (got "
                              f"{sorted(compiler_options)}); leave them out.")
  return jit(fun, in_shardings=in_shardings, out_shardings=out_shardings,
             static_argnums=static_argnums, static_argnames=static_argnames,
             donate_argnums=donate_argnums, donate_argnames=donate_argnames,
             keep_unused=keep_unused, device=device, backend=backend, inline=inline)


_deprecated_pjit.__name__ = _deprecated_pjit.__qualname__ = "pjit"
_deprecations = {"pjit": (_MESSAGE, _deprecated_pjit)}


__getattr__ = deprecation_getattr(__name__, _deprecations)
