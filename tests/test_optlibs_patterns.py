"""Patterns from jaxopt, mctx, jraph and rlax (their own test suites and examples) that
failed or differed under stagecraft, each run in plain JAX code on JAX and on stagecraft in
the same test and compared. The libraries themselves are not in the `test` extra."""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

APIS = {"jax": (jax, jjnp), "stagecraft": (sc, snp)}


def test_config_x64_enabled_reads_enable_x64():
  # jaxopt's test_util: `_canonicalize_dtype(jax.config.x64_enabled, dtype)`.
  seen = {}
  for name, (api, _) in APIS.items():
    vals = [api.config.x64_enabled]
    with api.enable_x64(True):
      vals.append(api.config.x64_enabled)
    vals.append(api.config.x64_enabled)
    seen[name] = vals
    with pytest.raises(AttributeError):
      api.config.x64_enabled = True
  assert seen["stagecraft"] == seen["jax"] == [False, True, False]
