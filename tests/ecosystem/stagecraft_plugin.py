"""A pytest plugin that serves `import jax` from stagecraft for a whole pytest run:
`python -m pytest -p stagecraft_plugin ...` (with this directory on `sys.path`) calls
`stagecraft.compat.install()` as `python -m stagecraft run` does before running a script.

It installs in `pytest_load_initial_conftests`, before the `conftest.py` files of the paths
on the command line are imported (equinox's tests/conftest.py sets
`jax.config.update("jax_numpy_dtype_promotion", "strict")`: that must reach stagecraft's
config, not JAX's); `pytest_configure` installs too, for a plugin registered later."""
import pytest

from stagecraft import compat


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
  compat.install()


def pytest_configure(config):
  compat.install()
