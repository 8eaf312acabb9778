"""What dm-haiku 0.0.17's own tests and examples found differing under stagecraft, each
pattern run in plain JAX code on JAX and on stagecraft in the same test (haiku is not in the
`test` extra)."""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

APIS = {"jax": (jax, jjnp), "stagecraft": (sc, snp)}


def test_precision_str_and_lookup_by_string():
  # haiku's LinearTest.test_precision matches `str(precision).lower()` in the HLO text
  seen = {}
  for name, (api, jnp) in APIS.items():
    P = api.lax.Precision
    out = [(str(p), repr(p), format(p), P(p.name.lower())) for p in P]
    out = [(a, b, c, repr(d)) for a, b, c, d in out]
    hlo = api.jit(lambda x: jnp.dot(x, x, precision=P.HIGH)).lower(
        np.ones((2, 2), np.float32)).compiler_ir(dialect="hlo").as_hlo_text()
    line = next(l for l in hlo.split("\n") if "dot(" in l)
    out.append(f"operand_precision={{{str(P.HIGH).lower()},{str(P.HIGH).lower()}}}" in line)
    with pytest.raises(ValueError) as e:
      P("nope")
    out.append(str(e.value))
    seen[name] = out
  assert seen["stagecraft"] == seen["jax"]
  assert seen["jax"][3] is True
