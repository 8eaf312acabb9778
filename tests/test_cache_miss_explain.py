"""`jax_explain_cache_misses`: the log of each retrace, in JAX 0.10.2's words (call site,
"never seen function", the closest previous key's difference: config, argument structure,
static arguments, types, weak types), compared with JAX's log of the same program."""
from __future__ import annotations

import logging
import re
import types
from functools import partial

import jax
import jax.numpy as jjnp
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

JAX = types.SimpleNamespace(lib=jax, np=jjnp, logger="jax")
SC = types.SimpleNamespace(lib=sc, np=snp, logger="stagecraft")


def _types(m):
  def f(x, y=None):
    return x * 2
  jf = m.lib.jit(f)
  jf(m.np.arange(3))
  jf(m.np.arange(3.0))          # dtype
  jf(1.0)                       # weak type, rank
  jf(m.np.float32(1.0))         # rank
  jf(m.np.ones((2, 2)))
  jf(m.np.ones(3))              # seen: no log


def _structure(m):
  def f(x, y=None):
    return x
  jf = m.lib.jit(f)
  jf(m.np.float32(1.0))
  jf([m.np.ones(2)])
  jf((m.np.ones(2), 1))
  jf(m.np.ones(3), y=m.np.ones(2))

  @m.lib.jit
  def h(a, b):
    return a + b
  h(m.np.ones(2), m.np.ones(2))
  h(m.np.ones(2), b=m.np.ones(2))


def _static(m):
  g = partial(m.lib.jit, static_argnums=1)(lambda x, n: x * n)
  g(m.np.ones(2), 2)
  g(m.np.ones(2), 3)
  k = partial(m.lib.jit, static_argnames="n")(lambda x, n=1: x * n)
  k(m.np.ones(2), n=2)
  k(m.np.ones(2), n=3)
  s = partial(m.lib.jit, static_argnums=0)(lambda n, x: x * n)
  s(2, m.np.ones(2))
  s(2, m.np.ones(3))            # the dynamic argument after a static one


def _redefined_and_config(m):
  f = m.lib.jit(lambda x: x + 1)
  f(m.np.ones(2))
  for _ in range(3):
    m.lib.jit(lambda x: x - 1)(m.np.ones(2))
  with m.lib.numpy_rank_promotion("raise"):
    f(m.np.ones(2))
  m.np.sin(m.np.ones(3))        # the library's own functions: not logged
  m.np.sin(m.np.ones(4))


def _log(m, program, caplog) -> list[str]:
  """The cache-miss log lines of `program` run with library `m` (both libraries forget
  the call sites they have logged first, so each run starts alike)."""
  from jax._src.interpreters import partial_eval
  from stagecraft import cache_miss
  partial_eval.callsites_with_tracing_cache_miss.clear()
  cache_miss._callsites_missed.clear()
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger=m.logger):
    with m.lib.explain_cache_misses(True):
      program(m)
  out = [r.getMessage() for r in caplog.records if "TRACING CACHE MISS" in r.getMessage()]
  return [re.sub(r"id=\d+", "id=N", s).replace("jax._src.tree_util.Static",
                                               "stagecraft.cache_miss.Static")
          for s in out]


@pytest.mark.parametrize("program", [_types, _structure, _static, _redefined_and_config],
                         ids=["types", "structure", "static", "redefined_and_config"])
def test_explanations_equal_jax(program, caplog):
  want = _log(JAX, program, caplog)
  got = _log(SC, program, caplog)
  assert len(want) >= 3
  assert got == want


def test_explanation_names_the_difference(caplog):
  """The text itself (not only agreement with JAX): the call site, the argument and both
  types; config options by JAX's names."""
  got = _log(SC, _types, caplog)
  assert got[0].startswith("TRACING CACHE MISS at ") and "never seen function:\n    f id=N" \
      in got[0]
  assert got[1].endswith("different input types:\n  * at x, now f32[3] and before i32[3]")
  assert "now f32[]({}){weak_type=True} and before f32[3]({}){weak_type=False}https://" \
      in got[2]
  got = _log(SC, _redefined_and_config, caplog)
  assert "maybe the function is\n  being re-defined repeatedly" in got[2]
  assert got[-1].endswith("* jax_numpy_rank_promotion differs: now raise and before allow")
