"""JAX's `array_serialization.serialization`: the abstract base of asynchronous checkpoint
managers (orbax.checkpoint tests `isinstance(checkpointer, GlobalAsyncCheckpointManagerBase)`).
Nothing here saves arrays (see the package)."""
from __future__ import annotations

import abc


class GlobalAsyncCheckpointManagerBase(abc.ABC):
  """JAX's interface of an asynchronous checkpoint manager of global arrays: subclasses
  implement `check_for_errors`, `wait_until_finished`, `serialize` and `deserialize`."""

  @abc.abstractmethod
  def check_for_errors(self):
    """Raises the error of a finished background save, if any."""

  @abc.abstractmethod
  def wait_until_finished(self):
    """Blocks until the pending save is done."""

  @abc.abstractmethod
  def serialize(self, arrays, tensorstore_specs, *, on_commit_callback):
    """Starts saving `arrays` to `tensorstore_specs`; `on_commit_callback()` when done."""

  @abc.abstractmethod
  def deserialize(self, shardings, tensorstore_specs, global_shapes=None, dtypes=None):
    """Reads arrays laid out by `shardings` from `tensorstore_specs`."""
