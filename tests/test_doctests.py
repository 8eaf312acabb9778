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
  result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
  assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
