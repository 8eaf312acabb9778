"""tests/ecosystem/: optax, chex, equinox and flax on stagecraft (the `ecosystem` extra).

The whole directory is skipped when the pinned libraries are not installed
(`pip install -e .[ecosystem]`).
"""
import pytest

for _name in ("optax", "chex", "equinox", "flax"):
  pytest.importorskip(_name, reason=f"{_name} is not installed (pip install -e .[ecosystem])")
