"""A pytest plugin that serves `import jax` from stagecraft for a whole pytest run:
`python -m pytest -p stagecraft_plugin ...` (with this directory on `sys.path`) calls
`stagecraft.compat.install()` before any test module is collected, as `python -m stagecraft
run` does before running a script."""
from stagecraft import compat


def pytest_configure(config):
  compat.install()
