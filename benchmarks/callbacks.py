"""Host callbacks against JAX: `debug.print` in a jitted 1000-step loop (the printing itself
goes to /dev/null on both sides), and a jitted function with an unused `pure_callback`
against the same function without it (DCE removes the callback: the ratio is ~1)."""
from __future__ import annotations

import contextlib
import os
import sys

import numpy as np

from benchmarks.convnet import paired


@contextlib.contextmanager
def _quiet_stdout():
  # NB: the callbacks write to sys.stdout from runtime threads; send it to /dev/null.
  saved = sys.stdout
  with open(os.devnull, "w") as null:
    sys.stdout = null
    try:
      yield
    finally:
      sys.stdout = saved


def _print_loops(steps: int):
  import jax
  import jax.numpy as jjnp

  import stagecraft as sc
  import stagecraft.numpy as jnp

  def make(lib, np_):
    def body(i, c):
      lib.debug.print("step {} c={}", i, c)
      return c * 0.5 + 1.0
    return lib.jit(lambda x: lib.lax.fori_loop(0, steps, body, x))
  ours, theirs = make(sc, jnp), make(jax, jjnp)
  x, xj = jnp.float32(1.0), jjnp.float32(1.0)
  with _quiet_stdout():
    ours(x).block_until_ready()
    theirs(xj).block_until_ready()
  return (lambda: ours(x).block_until_ready()), (lambda: (theirs(xj).block_until_ready(),
                                                          jax.effects_barrier()))


def bench_print_loop(pairs: int, steps: int = 1000):
  """(ours, JAX) microseconds per call of a jitted fori_loop printing at each of `steps`."""
  ours, theirs = _print_loops(steps)
  with _quiet_stdout():
    return paired(ours, theirs, pairs=pairs, warmup=2)


def bench_unused_pure_callback(pairs: int):
  """(with the unused callback, without it) microseconds per call, both stagecraft."""
  import stagecraft as sc
  import stagecraft.numpy as jnp
  spec = sc.ShapeDtypeStruct((256,), jnp.float32)
  with_cb = sc.jit(lambda x: (sc.pure_callback(np.sin, spec, x), jnp.tanh(x) * 2)[1])
  without = sc.jit(lambda x: jnp.tanh(x) * 2)
  x = jnp.ones(256)
  with_cb(x).block_until_ready()
  without(x).block_until_ready()
  return paired(lambda: with_cb(x).block_until_ready(),
                lambda: without(x).block_until_ready(), pairs=pairs)
