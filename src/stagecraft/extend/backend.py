"""`stagecraft.extend.backend`: the PJRT clients and devices of stagecraft's runtime (JAX's
`jax.extend.backend`). The clients are the very ones stagecraft compiles and runs on
(`stagecraft.runtime.client`), so a library may compile on them, read their devices, or ask
for compile options.

  >>> get_backend().platform
  'cpu'
  >>> get_default_device() == get_backend().local_devices()[0]
  True

JAX's `ifrt_proxy` (a remote-runtime client) has no counterpart.
"""
from __future__ import annotations

from typing import Any, Callable

from stagecraft.config import config
from stagecraft.runtime import client, dispatch, jax_runtime

__all__ = ["backend_xla_version", "backends", "clear_backends",
           "clear_in_memory_compilation_cache", "get_backend", "get_compile_options",
           "get_default_device", "register_backend_cache", "register_backend_factory"]


def _xb():
  # The real `jax.extend.backend` (even while `import jax` is served by stagecraft), for what
  # only JAX's backend registry does (plugin factories, compile options with JAX's extra
  # keywords): imported on those paths only.
  return jax_runtime.jax_module("jax.extend.backend")


def get_backend(platform: str | Any | None = None) -> Any:
  """The PJRT client of `platform` (`'cpu'`, `'gpu'`, `'cuda'`; None: the default one, as
  `config.jax_platforms` picks it); a client passed in is returned as it is.

  Raises:
    RuntimeError: if the platform is not available (the message lists those that are).
  """
  if platform is not None and not isinstance(platform, str):
    return platform
  return client.get_backend(platform)


def backends() -> dict[str, Any]:
  """The available PJRT clients, by platform name (initializing them on first use)."""
  return client.backends()


def backend_xla_version(platform: str | None = None) -> int | None:
  """The XLA version of `platform`'s client (None if the client does not say)."""
  return getattr(get_backend(platform), "xla_version", None)


def get_default_device() -> Any:
  """The device computations go to by default: `config.jax_default_device` (a device, or a
  platform name whose first device is meant), else the default backend's first device."""
  dev = config.default_device
  if dev is None:
    return client.default_device()
  if isinstance(dev, str):
    return client.local_devices(backend=dev)[0]
  return dev


def get_compile_options(num_replicas: int, num_partitions: int, device_assignment=None,
                        **kwargs) -> Any:
  """XLA compile options for `num_replicas` x `num_partitions` devices (the runtime's
  `xla_client.CompileOptions`; other keywords of JAX's function pass through)."""
  if not kwargs:
    return client.compile_options(num_replicas, num_partitions, device_assignment)
  return _xb().get_compile_options(num_replicas=num_replicas, num_partitions=num_partitions,
                                   device_assignment=device_assignment, **kwargs)


def clear_in_memory_compilation_cache() -> None:
  """Drops the compiled executables held in memory (the eager primitives', jit's), so the
  next calls compile again; the persistent cache on disk is kept."""
  dispatch.clear_caches()


def clear_backends() -> None:
  """Drops the PJRT clients and every cache that refers to them, so the next computation
  starts a new client. Arrays made before stay on the old client (as in JAX, do not use them
  afterwards)."""
  dispatch.clear_caches()
  client.clear_backends()


def register_backend_cache(cache: Any, for_what: str) -> None:
  """Registers a cache (an object with `cache_clear()`, e.g. a `functools.lru_cache`
  function) to be emptied with the compiled programs (`stagecraft.clear_caches`,
  `clear_backends`).

  Raises:
    TypeError: if `cache` has no `cache_clear` method.
  """
  if not callable(getattr(cache, "cache_clear", None)):
    raise TypeError(f"register_backend_cache({for_what!r}): expected a cache with a "
                    f"cache_clear() method (e.g. an functools.lru_cache function), got "
                    f"{cache!r}.")
  dispatch.register_cache_clearer(cache.cache_clear)


def register_backend_factory(name: str, factory: Callable, *, priority: int = 0,
                             fail_quietly: bool = True, experimental: bool = False,
                             make_topology: Callable | None = None) -> None:
  """Registers a PJRT client factory for platform `name` with the runtime (JAX's
  `register_backend_factory`; it takes effect for clients not yet started, which then come
  from JAX's backend registry)."""
  client.use_jax_backends("register_backend_factory")
  _xb().register_backend_factory(name, factory, priority=priority, fail_quietly=fail_quietly,
                                 experimental=experimental, make_topology=make_topology)
