"""Transfer guards: JAX's `jax_transfer_guard*` options, enforced where data moves.

A transfer is *implicit* when a computation moves data it was given (a NumPy array or Python
scalar operand of an eager op or a jitted call, `jnp.asarray(np_array)`, an Array on another
device as a jit argument, `np.asarray(x)` of an Array on an accelerator) and *explicit* when
the user asked for it (`device_put`, `device_get`). For each direction (`host_to_device`,
`device_to_device`, `device_to_host`) the option's level decides (JAX's table):

  level              implicit   explicit
  allow (default)    allow      allow
  log                log        allow
  disallow           raise      allow
  log_explicit       log        log
  disallow_explicit  raise      raise

A direction's own option wins; unset, the generic `jax_transfer_guard` applies. A refused
transfer raises `JaxRuntimeError` ("INVALID_ARGUMENT: Disallowed host-to-device transfer:
aval=..., dst_sharding=..."), a logged one is a WARNING record of the `stagecraft` logger
"stagecraft.transfer_guard" (JAX logs the same text through absl). Device-to-host reads on
the CPU platform are no transfer (the data is already in host memory), as in JAX. The
constants of a program (closed-over arrays) and tokens are the runtime's own moves: never
guarded.
"""
from __future__ import annotations

import logging

from stagecraft.config import config
from stagecraft.errors import JaxRuntimeError

__all__ = ["host_to_device", "device_to_device", "device_to_host", "active"]

_log = logging.getLogger("stagecraft.transfer_guard")

_KINDS = ("transfer_guard_host_to_device", "transfer_guard_device_to_device",
          "transfer_guard_device_to_host")

#: Whether any guard is set to something other than "allow" (the checks are free otherwise).
active = [False]


def _on_update(key: str, value) -> None:
  if key != "transfer_guard" and key not in _KINDS:
    return
  values = {k: config.read(k) for k in ("transfer_guard",) + _KINDS}
  values[key] = value
  active[0] = any(v not in (None, "allow") for v in values.values())


config.add_update_listener(_on_update)
_on_update("transfer_guard", config.read("transfer_guard"))   # set from the environment


def _level(kind: str) -> str:
  level = config.read(kind)
  if level is None:
    level = config.read("transfer_guard")
  return level or "allow"


def _sharding_text(device) -> str:
  return f"SingleDeviceSharding(device={device!r}, memory_kind=device)"


def _check(kind: str, what: str, explicit: bool, describe) -> None:
  level = _level(kind)
  if level == "allow":
    return
  if explicit and level in ("log", "disallow"):
    return
  if level in ("disallow", "disallow_explicit"):
    raise JaxRuntimeError(f"INVALID_ARGUMENT: Disallowed {what} transfer: {describe()}")
  _log.warning("%s transfer: %s", what, describe())


def host_to_device(aval, device, explicit: bool = False) -> None:
  """Checks a transfer of host data with abstract value `aval` to `device`.

  Raises:
    JaxRuntimeError: when the guard in effect disallows it."""
  if active[0]:
    _check("transfer_guard_host_to_device", "host-to-device", explicit,
           lambda: f"aval={aval!r}, dst_sharding={_sharding_text(device)}")


def device_to_device(aval, src_device, device, explicit: bool = False) -> None:
  """Checks a copy of an Array (abstract value `aval`) from `src_device` to `device`; an
  explicit one (`device_put`) is described without its source, as JAX's.

  Raises:
    JaxRuntimeError: when the guard in effect disallows it."""
  if active[0]:
    def describe():
      src = "" if explicit else f"sharding={_sharding_text(src_device)}, "
      return f"aval={aval!r}, {src}dst_sharding={_sharding_text(device)}"
    _check("transfer_guard_device_to_device", "device-to-device", explicit, describe)


def in_host_memory(device) -> bool:
  """Whether `device`'s buffers are host memory (the CPU platform's): reading them is no
  transfer."""
  return getattr(device, "platform", "cpu") == "cpu"


def device_to_host(aval, device, explicit: bool = False) -> None:
  """Checks a read of an Array (abstract value `aval`) on `device` into host memory; reads
  on the CPU platform are no transfer.

  Raises:
    JaxRuntimeError: when the guard in effect disallows it."""
  if active[0] and not in_host_memory(device):
    def describe():   # NB: as jaxlib's: "shape=(2,3), dtype=f32, device=cuda:0"
      dims = ",".join(str(d) for d in aval.shape)
      return f"shape=({dims}), dtype={aval.str_short().split('[')[0]}, device={device}"
    _check("transfer_guard_device_to_host", "device-to-host", explicit, describe)
