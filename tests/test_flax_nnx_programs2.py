"""flax NNX programs, third pass (docs_nnx minigpt): patterns that differed from JAX, each
written in plain JAX code and run the same way under JAX and stagecraft.

- minigpt: under `set_mesh`, `typeof(x).sharding` of an unsplit value is over the mesh in
  context (the model reshards its logits to `typeof(inputs).sharding` inside `nnx.jit`), and
  typed key arrays have a `sharding`.
"""
from __future__ import annotations

import jax
import numpy as np

import stagecraft


def _explicit_mesh(lib):
  return lib.make_mesh((2, 2), ("batch", "model"),
                       axis_types=(lib.sharding.AxisType.Explicit,) * 2)


def _typeof_under_mesh(lib):
  mesh = _explicit_mesh(lib)
  P = lib.sharding.PartitionSpec
  out = []
  with lib.set_mesh(mesh):
    x = lib.numpy.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    out.append(str(lib.typeof(x).sharding))

    @lib.jit
    def f(a, w):
      logits = a @ w
      out.append(str(lib.typeof(a).sharding))
      return lib.sharding.reshard(logits, lib.typeof(a).sharding)

    w = lib.device_put(lib.numpy.ones((4, 4), np.float32), P(None, "model"))
    y = f(x, w)
    out.append(str(lib.typeof(y)))
    out.append(np.asarray(y).tolist())
  # NB: not compared: `typeof(x).sharding` after the block (JAX's aval keeps the mesh it was
  # made under; stagecraft's unsplit type reads the mesh in context; docs/differences.md)
  return out


def test_typeof_sharding_is_over_the_context_mesh():
  assert _typeof_under_mesh(stagecraft) == _typeof_under_mesh(jax)


def _key_sharding(lib):
  mesh = _explicit_mesh(lib)
  P = lib.sharding.PartitionSpec
  k = lib.random.key(0)
  ks = lib.random.split(k, 4)
  out = [type(k.sharding).__name__, k.sharding.device_set == ks.sharding.device_set,
         len(k.sharding.device_set)]
  kd = lib.device_put(ks, lib.sharding.NamedSharding(mesh, P("batch")))
  out.append(str(kd.sharding))
  out.append(np.asarray(lib.random.key_data(kd)).tolist())
  return out


def test_key_array_sharding():
  assert _key_sharding(stagecraft) == _key_sharding(jax)


def _donation_warning(lib):
  """minigpt's train step donates a batch split over the mesh: JAX names the unusable
  donated buffer by its shard's shape."""
  import warnings
  mesh = _explicit_mesh(lib)
  P = lib.sharding.PartitionSpec
  with lib.set_mesh(mesh):
    x = lib.device_put(np.arange(8 * 4, dtype=np.int32).reshape(8, 4), P("batch", None))
    f = lib.jit(lambda a: (a.astype(np.float32) * 2).sum(), donate_argnums=(0,))
    with warnings.catch_warnings(record=True) as w:
      warnings.simplefilter("always")
      r = f(x)
  return float(r), [str(m.message) for m in w if "donated" in str(m.message)]


def test_donation_warning_names_the_shard_shape():
  got, want = _donation_warning(stagecraft), _donation_warning(jax)
  assert want[1] and got == want


def _warn_twice_around_registration(lib):
  """A DeprecationWarning from one place is shown once under the default filter even when
  a pytree type is registered between the two warnings (flax's gspmd guide: importing orbax
  registered types between two `rngs.fork(split=...)` warnings)."""
  import warnings

  def warn():
    warnings.warn("old api", DeprecationWarning, stacklevel=1)

  class Node:
    def __init__(self, a):
      self.a = a

  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("default")
    warn()
    lib.tree_util.register_pytree_node(Node, lambda n: ((n.a,), None),
                                       lambda _, c: Node(*c))
    warn()
  return [str(m.message) for m in w]


def test_registration_keeps_the_warnings_already_shown():
  assert _warn_twice_around_registration(stagecraft) == _warn_twice_around_registration(jax)
