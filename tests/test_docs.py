"""Runs every ```python block of the user guide (docs/*.md).

The blocks of one file run in order in one namespace, so later blocks use names defined by
earlier ones. A block whose first line is `# skip-test` is not run. Each block asserts its own
numbers, so a wrong statement in the guide fails here.
"""
from __future__ import annotations

import pathlib
import re
import sys
import types

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def _blocks(path: pathlib.Path) -> list[tuple[int, str]]:
  text = path.read_text()
  out = []
  for m in _BLOCK.finditer(text):
    code = m.group(1)
    if code.lstrip().startswith("# skip-test"):
      continue
    out.append((text.count("\n", 0, m.start()) + 2, code))
  return out


_FILES = sorted(DOCS.glob("*.md"))


def test_docs_exist():
  assert _FILES, f"no Markdown files under {DOCS}"


@pytest.mark.parametrize("path", _FILES, ids=[p.name for p in _FILES])
def test_every_python_block_is_found(path):
  """A ```python fence that the runner would miss (indented, unterminated) is an error."""
  text = path.read_text()
  found = len(_BLOCK.findall(text))
  fences = len(re.findall(r"```python", text))
  assert found == fences, (f"{path.name}: {fences} ```python fences but {found} runnable "
                           f"blocks; start each fence at column 0 and close it with ```.")


@pytest.mark.parametrize("path", _FILES, ids=[p.name for p in _FILES])
def test_doc_blocks_run(path, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)   # blocks that write files write them here
  # A real module in sys.modules, so that dataclasses and pickling can find the namespace.
  module = types.ModuleType(f"docs_{path.stem}")
  monkeypatch.setitem(sys.modules, module.__name__, module)
  ns = module.__dict__
  from stagecraft.config import config
  flags = dict(config.values)
  try:
    for line, code in _blocks(path):
      try:
        exec(compile(code, f"{path.name}:{line}", "exec"), ns)
      except Exception as e:
        raise AssertionError(f"the python block at {path.name} line {line} failed: "
                             f"{type(e).__name__}: {e}") from e
  finally:   # a page that fails half-way must not leave its flags to the next test
    for name, value in flags.items():
      if config.read(name) is not value:
        config.update(name, value)
