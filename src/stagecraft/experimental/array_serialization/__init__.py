"""`stagecraft.experimental.array_serialization`: the part of JAX's module that libraries
reach at import (orbax.checkpoint: `serialization.GlobalAsyncCheckpointManagerBase`, for an
isinstance test). JAX's tensorstore-backed `async_serialize`/`async_deserialize` are not
provided: orbax.checkpoint saves and restores with its own tensorstore code."""
