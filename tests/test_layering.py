"""Imports point one way (DESIGN.md's layers, docs/architecture.md): every import of
src/stagecraft, function-level ones included, goes to the same or a lower layer; a lazy
(function-level) import of a stagecraft module says why in an `NB:` comment just above it; and no module
uses another module's private (`_name`) names. Exceptions are listed below, each with why."""
import ast
import functools
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "stagecraft"

# Module prefixes per layer, lowest first (the longest matching prefix decides).
LAYERS = {
    1: ["runtime.client", "runtime.cache", "runtime.jax_runtime", "runtime.mlir_text",
        "sharding", "layout", "version", "monitoring", "logging_config"],
    2: ["core", "dtypes", "errors", "config", "tree_util", "traceback_util", "shape_poly",
        "source_info_util", "tree", "indexing", "key_reuse", "dump_ir"],
    3: ["interpreters"],
    # typing: `ArrayLike` names the runtime's Array.
    # dlpack: `numpy.from_dlpack` (layer 7) calls it.
    # lib: `jax.lib.__version__`, the runtime's (jaxlib's) version.
    4: ["runtime", "runtime.array", "runtime.dispatch", "runtime.spmd", "typing", "dlpack",
        "lib"],
    5: ["lax"],
    # state: Refs at the jit boundary (pjit discharges them).
    6: ["custom_derivatives", "custom_dce", "custom_batching", "ad_checkpoint", "api_util",
        "pjit", "state", "cache_miss"],
    7: ["numpy", "scipy", "random", "nn", "image", "ops", "flatten_util", "callback",
        "debug", "debugger", "debug_sharding", "ffi"],
    # interpreters.xla: JAX's facade over the eager dispatch (`xla.apply_primitive`).
    8: ["api", "ref", "stages", "shard_map", "xla_computation", "test_util", "distributed",
        "experimental", "profiler", "extend", "export", "interpreters.xla"],
    9: ["implicit", "optim", "examples", "example_libraries", "compat", "cli", "__main__"],
}

# (importing module, imported module): why the upward import is intrinsic.
UPWARD_ALLOWED = {
    ("stagecraft.interpreters.ad", "stagecraft.lax.shape"):
        "a materialized zero tangent is a lax broadcast, and lax registers its rules in ad",
    ("stagecraft.interpreters.batching", "stagecraft.lax.shape"):
        "moving and broadcasting batch axes are lax shape ops, which register batching rules",
    ("stagecraft.pjit", "stagecraft.stages"):
        "jit(f).trace()/.lower() return stage objects; stages builds on pjit",
}

# (module, other module, name): why a private name crosses modules.
PRIVATE_ALLOWED = {
}


def _modules() -> dict[str, pathlib.Path]:
  out = {}
  for p in sorted(PKG.rglob("*.py")):
    rel = p.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
      parts = parts[:-1]
    out[".".join(parts)] = p
  return out


MODULES = _modules()


def layer(mod: str) -> int | None:
  """The layer of a stagecraft module (None: the top-level package facade)."""
  rel = mod.removeprefix("stagecraft").removeprefix(".")
  if not rel:
    return None
  best, best_len = None, -1
  for n, prefixes in LAYERS.items():
    for p in prefixes:
      if (rel == p or rel.startswith(p + ".")) and len(p) > best_len:
        best, best_len = n, len(p)
  return best


def _resolve(name: str) -> str:
  while name and name not in MODULES:
    name = name.rpartition(".")[0]
  return name


class _Import:
  def __init__(self, src, dst, lineno, lazy, names):
    self.src, self.dst, self.lineno, self.lazy, self.names = src, dst, lineno, lazy, names


def _imports(mod: str, path: pathlib.Path):
  """(imports, private uses) of one module: every import of a stagecraft module, and every
  `from m import _x` / `m._x` naming another stagecraft module's private name."""
  text = path.read_text()
  lines = text.splitlines()
  # (node, inside a function) for every node, in one walk (a parent map took ~20 s over
  # the package, at collection, in each xdist worker)
  nodes = []
  stack = [(ast.parse(text), False)]
  while stack:
    node, in_func = stack.pop()
    nodes.append((node, in_func))
    inner = in_func or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    stack.extend((c, inner) for c in ast.iter_child_nodes(node))
  nodes.reverse()   # NB: source order does not matter below, but keep it stable

  is_pkg = path.name == "__init__.py"
  imports, private, aliases = [], [], {}
  for node, in_func in nodes:
    if isinstance(node, ast.Import):
      for a in node.names:
        if a.name.startswith("stagecraft"):
          imports.append(_Import(mod, _resolve(a.name), node.lineno, in_func, []))
          if a.asname:
            aliases[a.asname] = _resolve(a.name)
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = mod if is_pkg else mod.rpartition(".")[0]
        for _ in range(node.level - 1):
          base = base.rpartition(".")[0]
        modname = base + ("." + node.module if node.module else "")
      else:
        modname = node.module or ""
      if not modname.startswith("stagecraft"):
        continue
      for a in node.names:
        full = f"{modname}.{a.name}"
        if full in MODULES:   # a submodule
          imports.append(_Import(mod, full, node.lineno, in_func, []))
          aliases[a.asname or a.name] = full
        else:
          imports.append(_Import(mod, _resolve(modname), node.lineno, in_func, [a.name]))
          if a.name.startswith("_") and not a.name.startswith("__"):
            private.append((mod, _resolve(modname), a.name, node.lineno))
  for node, _ in nodes:
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.value.id in aliases and node.attr.startswith("_")
        and not node.attr.startswith("__") and aliases[node.value.id] != mod):
      private.append((mod, aliases[node.value.id], node.attr, node.lineno))
  return imports, private, lines


@functools.cache
def analysis() -> dict:
  """{module: (imports, private uses, lines)} of every stagecraft module (computed on first
  use, not at collection)."""
  return {m: _imports(m, p) for m, p in MODULES.items()}


def test_every_module_has_a_layer():
  missing = [m for m in MODULES if m != "stagecraft" and layer(m) is None]
  assert not missing, f"modules with no layer in tests/test_layering.py LAYERS: {missing}"


def test_no_upward_imports():
  bad = []
  for mod, (imports, _, _) in analysis().items():
    src_layer = layer(mod)
    if src_layer is None:
      continue
    for imp in imports:
      dst_layer = layer(imp.dst)
      if dst_layer is not None and dst_layer > src_layer:
        if (mod, imp.dst) not in UPWARD_ALLOWED:
          bad.append(f"{MODULES[mod].relative_to(SRC)}:{imp.lineno}: {mod} (layer "
                     f"{src_layer}) imports {imp.dst} (layer {dst_layer})")
  assert not bad, ("Imports must point to the same or a lower layer (docs/architecture.md); "
                   "move the code to the layer that owns it:\n" + "\n".join(bad))


def test_lazy_imports_say_why():
  bad = []
  for mod, (imports, _, lines) in analysis().items():
    for imp in imports:
      if not imp.lazy:
        continue
      here = lines[imp.lineno - 1]
      # NB: the reason may be a comment on the line or a few lines above (or the helper's
      # docstring just above it).
      if not any("NB:" in ln for ln in lines[max(0, imp.lineno - 5):imp.lineno]):
        bad.append(f"{MODULES[mod].relative_to(SRC)}:{imp.lineno}: {here.strip()}")
  assert not bad, ("Import stagecraft modules at the top of the module; a function-level "
                   "import must be an intrinsic cycle and say why with a `# NB:` comment:\n"
                   + "\n".join(bad))


@pytest.mark.parametrize("package", ["stagecraft.lax", "stagecraft.numpy"])
def test_modules_of_a_package_skip_its_facade(package):
  # A module of lax/ (numpy/) imports the family module that defines a name, not the
  # package facade, which imports every module of the package.
  bad = [f"{MODULES[m].relative_to(SRC)}:{i.lineno}" for m, (imports, _, _) in analysis().items()
         if m.startswith(package + ".") for i in imports if i.dst == package]
  assert not bad, f"imports of the {package} facade from inside it: {bad}"


def test_top_level_imports_have_no_cycle():
  # Only the few lazy (NB) imports may close a cycle; the top-level import graph is a DAG.
  graph = {m: {i.dst for i in imports if not i.lazy and i.dst and i.dst != m}
           for m, (imports, _, _) in analysis().items()}
  state: dict = {}

  def visit(m, path):
    state[m] = "open"
    for d in sorted(graph.get(m, ())):
      if state.get(d) == "open":
        cycle = path[path.index(d):] + [d] if d in path else [m, d]
        raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
      if d not in state:
        visit(d, path + [d])
    state[m] = "done"
  for m in sorted(graph):
    if m not in state:
      visit(m, [m])


def test_few_lazy_imports():
  lazy = [(m, i.dst) for m, (imports, _, _) in analysis().items() for i in imports if i.lazy]
  assert len(lazy) <= 12, f"{len(lazy)} function-level imports (at most a handful): {lazy}"


def test_no_private_names_across_modules():
  bad = []
  for mod, (_, private, _) in analysis().items():
    for src, dst, name, lineno in private:
      if dst != src and (src, dst, name) not in PRIVATE_ALLOWED:
        bad.append(f"{MODULES[src].relative_to(SRC)}:{lineno}: {src} uses {dst}.{name}")
  assert not bad, ("A module uses another's private name; make it public in the module that "
                   "owns it (and keep it out of __all__):\n" + "\n".join(bad))


@pytest.mark.parametrize("src,dst", sorted(UPWARD_ALLOWED))
def test_allowed_upward_imports_exist(src, dst):
  # NB: an exception nobody needs any more is removed, so the list stays short and true.
  assert any(i.dst == dst for i in analysis()[src][0]), f"{src} no longer imports {dst}"


def test_checker_sees_violations(tmp_path):
  # The checker itself: an upward import, an undocumented lazy import and a private name.
  text = ("from stagecraft import api\n"
          "def f():\n  from stagecraft.lax import shape\n  return shape._helper\n")
  p = tmp_path / "probe.py"
  p.write_text(text)
  imports, private, _ = _imports("stagecraft.core", p)
  assert any(layer(i.dst) == 8 for i in imports)
  assert any(i.lazy and i.dst == "stagecraft.lax.shape" for i in imports)
  assert ("stagecraft.core", "stagecraft.lax.shape", "_helper", 4) in private
