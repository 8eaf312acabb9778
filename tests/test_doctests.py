"""Every docstring example in the library runs and prints what it shows."""
import doctest
import importlib
import pkgutil

import pytest

import stagecraft

MODULES = sorted(m.name for m in pkgutil.walk_packages(stagecraft.__path__, "stagecraft."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
  mod = importlib.import_module(name)
  # NB: exclude_empty: docstrings without examples are not run (each run of doctest's runner
  # stats every file in linecache, ~1 ms here, for thousands of docstrings)
  result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS,
                           exclude_empty=True)
  assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
