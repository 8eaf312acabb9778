"""Run unmodified JAX programs on stagecraft: `import jax` served by stagecraft.

`install()` makes every later `import jax`, `import jax.numpy as jnp`,
`from jax.scipy.stats import norm`, `import jax.example_libraries.optimizers`, ... give the
stagecraft module of the same path (`jax.X.Y` -> `stagecraft.X.Y`), so a JAX program or
notebook runs on stagecraft unchanged. `python -m stagecraft run script.py` calls it before
running the script. `uninstall()` gives `import jax` back to JAX.

  >>> from stagecraft import compat
  >>> compat.install()
  >>> import jax.numpy as jnp
  >>> jnp.__name__
  'stagecraft.numpy'
  >>> compat.uninstall()

How: a `sys.meta_path` finder answers the names `jax` and `jax.*` with a loader that imports
the stagecraft module and puts that very module object into `sys.modules` under the JAX name
(so `jax.numpy is stagecraft.numpy`, and the stagecraft module keeps its own `__spec__`).
The real `jax.*` modules already imported are set aside while installed and put back by
`uninstall()`. Two kinds of names are left to real JAX:

- `jax._src.*`, JAX's internals: stagecraft's runtime calls into real jax/jaxlib (the XLA
  runtime, DESIGN.md), whose code imports its internals lazily. While installed, the served
  `jax` module's attribute `_src` is a view of the real `jax._src` package (`_SrcView`), so
  that a library's `import jax._src.traceback_util as tu` or
  `jax._src.dispatch.wait_for_tokens` reaches JAX's module (equinox, jaxtyping and chex
  reach for a few), except that the names in `_SRC_VIEWS` are stagecraft's when reached
  that way (`import jax._src.core as core` gives quax stagecraft's `Trace`/`Tracer`; the
  real module, which JAX's own code uses, is untouched); `uninstall()` removes it.
  Pytree types registered through the served `jax.tree_util` are registered with JAX's own
  registry as well (flax.nnx reads `jax._src.tree_util._registry`). A few names of JAX's
  internals that libraries import to catch or test what stagecraft raises, or to call
  (`_SRC_ALIASES`: `jax._src.dtypes.TypePromotionError`, which equinox catches;
  `jax._src.checkify.checkify`, which flax.nnx calls) are rebound on the real
  module to stagecraft's object while installed, and put back by `uninstall()`.
- the real modules stagecraft's runtime reads (`stagecraft.runtime.jax_runtime`): captured
  before the alias is installed, and read from there.

While installed, `jax.__version__`, `jax.__version_info__` and `jax.version.__version__` /
`__version_info__` read `JAX_API_VERSION`, the JAX release whose API stagecraft serves
(libraries gate features on it: flax, optax, equinox); `uninstall()` puts stagecraft's own
version back.

While installed, a missing attribute of a served module names the JAX module, as JAX's
`AttributeError` does (`module 'jax.experimental' has no attribute 'host_callback'`).

A JAX module stagecraft does not provide (`jax.experimental.pallas.fuser`) raises a
`ModuleNotFoundError` (an `ImportError`) that names it and says so.
"""
from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import typing
from types import ModuleType

import numpy as np

import stagecraft
from stagecraft import dtypes, monitoring, stages, traceback_util, tree_util
from stagecraft import version as _version
from stagecraft import sharding as sharding_mod
import stagecraft.numpy as snp
import stagecraft.typing as sc_typing
from stagecraft.numpy import scalar_types
from stagecraft.runtime import array as array_mod, client, jax_runtime

__all__ = ["install", "uninstall", "is_installed", "stagecraft_name", "JAX_API_VERSION"]

#: The JAX release whose API stagecraft mirrors (and whose jax/jaxlib runtime it pins).
JAX_API_VERSION = "0.10.2"
_VERSION_NAMES = ("__version__", "__version_info__")

_PREFIX = "jax"
_PRIVATE = "jax._src"   # JAX's internals stay JAX's: real jax code imports them lazily

_state: dict = {"finder": None, "saved": {}}

#: Names in JAX's internal modules that stagecraft serves while installed: `(module, name)`
#: -> the stagecraft object. A library's `from jax._src.dtypes import TypePromotionError`
#: (equinox's `except TypePromotionError`) must catch the class stagecraft raises.
#: A value is the stagecraft object or "module:attr" (imported at `install()`).
#: flax.nnx's `checkify` calls `jax._src.checkify.checkify` with `user_checks` as a default
#: (evaluated at import); blackjax ravels pytrees with `jax._src.flatten_util.ravel_pytree`;
#: flax.nnx tests refs with `jax._src.state.types.AbstractRef`; lineax registers a transpose
#: rule on `jax._src.ad_util.stop_gradient_p`; jaxopt's tests catch
#: `jax._src.interpreters.ad.CustomVJPException`; quax's PRNG example makes raw keys with
#: `jax._src.random.threefry2x32`'s functions.
_SRC_ALIASES = {
    ("jax._src.dtypes", "TypePromotionError"): dtypes.TypePromotionError,
    **{("jax._src.checkify", n): f"stagecraft.experimental.checkify:{n}" for n in (
        "Error", "ErrorCategory", "JaxRuntimeError", "JaxException", "FailedCheckError",
        "NaNError", "OOBError", "DivisionByZeroError", "all_checks", "automatic_checks",
        "check", "check_error", "checkify", "debug_check", "div_checks", "float_checks",
        "index_checks", "init_error", "nan_checks", "user_checks")},
    ("jax._src.flatten_util", "ravel_pytree"): "stagecraft.flatten_util:ravel_pytree",
    ("jax._src.state.types", "AbstractRef"): "stagecraft.state:AbstractRef",
    ("jax._src.ad_util", "stop_gradient_p"): "stagecraft.lax.ad_util:stop_gradient_p",
    ("jax._src.interpreters.ad", "CustomVJPException"):
        "stagecraft.interpreters.ad:CustomVJPException",
    **{("jax._src.random.threefry2x32", f"threefry_{n}"): f"stagecraft.random:_jax_threefry_{n}"
       for n in ("seed", "split", "fold_in", "random_bits")},
}


#: Names of JAX's internal modules that a served `jax` shows in place of JAX's own when they
#: are reached through it, by attribute (`import jax._src.core as core`, `jax._src.pjit.jit_p`):
#: `{submodule of jax._src: {name: stagecraft object}}`. The real modules are untouched, so
#: JAX's own code (a program calling `jax._src.lax` directly) keeps JAX's. quax (implicit
#: arrays as a custom trace) subclasses `jax._src.core.Trace`/`Tracer`, enters its trace with
#: `take_current_trace`/`set_current_trace` and registers a rule on `jax._src.pjit.jit_p`.
_SRC_VIEWS = {
    # (pytype_aval_mappings: libraries register array types there, with
    # `dtypes.canonicalize_value_handlers`)
    "core": {**{n: f"stagecraft.core:{n}" for n in (
        "Trace", "Tracer", "ShapedArray", "AbstractValue", "Primitive", "jaxpr_as_fun",
        "pytype_aval_mappings")},
             **{n: f"stagecraft.extend.core:{n}" for n in (
                 "TraceTag", "set_current_trace", "take_current_trace")}},
    "pjit": {"jit_p": "stagecraft.pjit:jit_p"},
    "dtypes": {"canonicalize_value_handlers": "stagecraft.dtypes:canonicalize_value_handlers"},
    # chex's `set_n_cpu_devices` reads it to tell whether the backend has started
    "xla_bridge": {"_backends": lambda: client.started_backends()},
}


class _ModuleView(ModuleType):
  """A real module of `jax._src` as a served `jax` shows it: `_SRC_VIEWS`'s names are
  stagecraft's, every other attribute is the real module's."""

  def __init__(self, real: ModuleType, names: dict):
    super().__init__(real.__name__, real.__doc__)
    vars(self)["_real"] = real
    vars(self)["_names"] = names

  def __getattr__(self, name):
    if name in self._names:
      entry = self._names[name]
      obj = entry() if callable(entry) else _src_alias(entry)
      if obj is not None:
        return obj
    return getattr(self._real, name)

  def __dir__(self):
    return sorted(set(dir(self._real)) | set(self._names))


class _SrcView(ModuleType):
  """The real `jax._src` package as a served `jax`'s attribute `_src`: its submodules named
  in `_SRC_VIEWS` are `_ModuleView`s, the rest the real ones."""

  def __init__(self, real: ModuleType):
    super().__init__(real.__name__, real.__doc__)
    vars(self)["_real"] = real
    vars(self)["_views"] = {}

  def __getattr__(self, name):
    sub = getattr(self._real, name)
    if name in _SRC_VIEWS and isinstance(sub, ModuleType):
      if name not in self._views:
        self._views[name] = _ModuleView(sub, _SRC_VIEWS[name])
      return self._views[name]
    return sub

  def __dir__(self):
    return dir(self._real)


def _src_alias(obj):
  """The stagecraft object an `_SRC_ALIASES` value names (None: stagecraft lacks it)."""
  if not isinstance(obj, str):
    return obj
  mod, _, attr = obj.partition(":")
  return getattr(importlib.import_module(mod), attr, None)


def _served(name: str) -> bool:
  """Whether the module name `name` is served by stagecraft while installed."""
  if name != _PREFIX and not name.startswith(_PREFIX + "."):
    return False
  return not (name == _PRIVATE or name.startswith(_PRIVATE + "."))


def stagecraft_name(name: str) -> str:
  """The stagecraft module that serves the JAX module `name`: `jax.X.Y` -> `stagecraft.X.Y`.

  Raises:
    ValueError: if `name` is not `jax` or a `jax.*` name served by stagecraft (`jax._src.*`
      stays JAX's).
  """
  if not _served(name):
    raise ValueError(f"expected 'jax' or a 'jax.*' module name (not 'jax._src.*'), got "
                     f"{name!r}")
  return "stagecraft" + name[len(_PREFIX):]


def _not_provided(name: str) -> ModuleNotFoundError:
  return ModuleNotFoundError(
      f"No module named {name!r}: stagecraft does not provide {name} (`import jax` is served "
      f"by stagecraft, which has no module {stagecraft_name(name)!r}). Run this program with "
      f"JAX itself (`python script.py`) to use it.", name=name)


#: The submodules real JAX 0.10.2's `import jax` loads (so they are in `sys.modules` once
#: `jax` is): a served `import jax` registers stagecraft's counterparts under these names too.
#: treescope (penzai, flax.nnx's printing) resolves a class's `__module__`
#: (`jax.tree_util.SequenceKey`) through `sys.modules` and fails when it is missing.
#: (`jax.interpreters.xla` too: TFP reads `jax.interpreters.xla.canonicalize_dtype_handlers`
#: right after `import jax`; the module is main's, from 99834cf.)
_EAGER_SUBMODULES = (
    "api_util", "core", "custom_batching", "custom_derivatives", "debug", "distributed",
    "dlpack", "dtypes", "errors", "experimental", "experimental.compilation_cache",
    "experimental.compilation_cache.compilation_cache", "export", "ffi", "image",
    "interpreters", "interpreters.ad", "interpreters.batching", "interpreters.mlir",
    "interpreters.partial_eval", "interpreters.pxla", "interpreters.xla", "lax", "lax.linalg", "lib", "monitoring",
    "nn", "nn.initializers", "numpy", "numpy.fft", "numpy.linalg", "ops", "profiler", "random",
    "ref", "scipy", "sharding", "stages", "tree", "tree_util", "typing", "version")


def _register_eager_submodules() -> None:
  """Puts stagecraft's counterparts of `_EAGER_SUBMODULES` in `sys.modules` as `jax.X`, as
  real JAX's `import jax` leaves them (~50 ms for the few `import stagecraft` has not
  loaded)."""
  for sub in _EAGER_SUBMODULES:
    name = f"{_PREFIX}.{sub}"
    if name in sys.modules:
      continue
    try:
      mod = importlib.import_module(f"stagecraft.{sub}")
    except ImportError:
      continue
    sys.modules[name] = mod
    _name_as_jax(mod)


class _JaxAliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Finds `jax` and `jax.*` (but not `jax._src.*`) and loads them as stagecraft's modules."""

  def find_spec(self, fullname, path=None, target=None):
    if not _served(fullname):
      return None
    target_name = stagecraft_name(fullname)
    parent, _, child = target_name.rpartition(".")
    if target_name not in sys.modules:
      try:
        spec = importlib.util.find_spec(target_name)
      except ModuleNotFoundError:   # a parent is not a package (`jax.random.foo`)
        spec = None
      if spec is None:
        raise _not_provided(fullname)
    if parent:
      attr = getattr(sys.modules[parent], child, None)
      if attr is not None and not isinstance(attr, ModuleType):
        # NB: `jax.config` is JAX's config object, not a module; importing
        # `stagecraft.config` under that name would rebind `jax.config` to the module.
        owner = fullname.rpartition(".")[0]
        raise ModuleNotFoundError(
            f"No module named {fullname!r}: {fullname} is not a module but an attribute of "
            f"{owner} (use `from {owner} import {child}`).", name=fullname)
    return importlib.machinery.ModuleSpec(fullname, self)

  def create_module(self, spec):
    return None   # a placeholder; exec_module swaps in the stagecraft module

  def exec_module(self, module):
    # The import system returns whatever sys.modules holds under the name after exec_module,
    # so the stagecraft module itself is what the importer gets (and its spec is untouched).
    served = importlib.import_module(stagecraft_name(module.__name__))
    sys.modules[module.__name__] = served
    _name_as_jax(served)
    if module.__name__ == _PREFIX:
      _register_eager_submodules()
    if module.__name__ == _PREFIX and _state.pop("import_draws_pending", False):
      _draw_as_jax_import()


#: How many float64s real JAX's first `import jax` draws from NumPy's global RNG (the jittered
#: retry waits `np.random.rand(5)` of a default argument in `jax._src.clusters.k8s_cluster`).
_JAX_IMPORT_DRAWS = 5


def _draw_as_jax_import() -> None:
  """Advances NumPy's global RNG as real JAX's first import does, so that a program that
  seeds NumPy and then imports jax draws the numbers it draws under JAX."""
  np.random.rand(_JAX_IMPORT_DRAWS)


def expect_program_import() -> None:
  """Marks that a program that has not imported jax yet is about to run
  (`python -m stagecraft run`): its first served `import jax` then has the side effect real
  JAX's first import has on NumPy's global RNG (`_draw_as_jax_import`); stagecraft's runtime
  imported real JAX's internals before the program could seed NumPy."""
  _state["import_draws_pending"] = not is_installed()


def _jax_module_name(name: str) -> str:
  """The name a JAX program sees for the stagecraft module `name`: `stagecraft.X` -> `jax.X`."""
  return _PREFIX + name[len("stagecraft"):]


def _name_as_jax(module: ModuleType) -> None:
  """While installed, a missing attribute of the served module `module` raises JAX's
  `AttributeError` text, naming the JAX module (`module 'jax.experimental' has no attribute
  'host_callback'`, not `'stagecraft.experimental'`): a module `__getattr__` that defers to
  the module's own one, if any, and names the JAX module when that one finds nothing.
  Submodules it returns (lazily loaded ones) are named the same way. `uninstall()` puts the
  module's own `__getattr__` back."""
  name = module.__name__
  if not (name == "stagecraft" or name.startswith("stagecraft.")):
    return
  patched = _state.setdefault("named", {})
  if name in patched:
    return
  own = vars(module).get("__getattr__")
  jax_name = _jax_module_name(name)

  def __getattr__(attr):
    if own is not None:
      try:
        value = own(attr)
      except AttributeError as e:
        if str(e) != f"module {name!r} has no attribute {attr!r}":
          raise
      else:
        if isinstance(value, ModuleType) and is_installed():
          _name_as_jax(value)
        return value
    raise AttributeError(f"module {jax_name!r} has no attribute {attr!r}", name=attr,
                         obj=module)

  patched[name] = (module, own)
  module.__getattr__ = __getattr__


def _unname_as_jax() -> None:
  """Puts back the modules' own `__getattr__` (or none) that `_name_as_jax` wrapped."""
  for module, own in _state.pop("named", {}).values():
    if own is None:
      vars(module).pop("__getattr__", None)
    else:
      module.__getattr__ = own


def _mirror_registration(real_tree_util, nodetype, flatten, unflatten) -> None:
  """Registers `nodetype` (just registered with stagecraft's `tree_util`) with real JAX's
  registry too, so that a library's `type(x) in jax._src.tree_util._registry` (flax.nnx's
  test for pytree nodes) sees the types registered through the served `jax.tree_util`."""
  try:
    real_tree_util.register_pytree_node(nodetype, flatten, unflatten)
  except ValueError:   # already registered with real JAX (imported before install())
    pass


def is_installed() -> bool:
  """Whether `import jax` is currently served by stagecraft."""
  return _state["finder"] is not None


def install() -> None:
  """Serves `import jax` and `import jax.X.Y` from stagecraft (`stagecraft.X.Y`) from now on.

  Modules that already hold the real `jax` keep it; only later imports are served by
  stagecraft. stagecraft's runtime keeps using the real jax/jaxlib (the XLA runtime).
  Calling it again while installed does nothing.

  Example (a notebook cell, before the cell that imports jax)::

    from stagecraft import compat
    compat.install()
    import jax, jax.numpy as jnp     # stagecraft, stagecraft.numpy
  """
  if is_installed():
    return
  jax_runtime.capture()   # the real modules the runtime reads, before `jax` is aliased
  real_tree_util = jax_runtime.jax_module("jax.tree_util")
  aliased = []
  for (mod_name, attr), obj in _SRC_ALIASES.items():
    mod, obj = jax_runtime.jax_module(mod_name), _src_alias(obj)
    if obj is None or not hasattr(mod, attr):
      continue
    aliased.append((mod, attr, getattr(mod, attr)))
    setattr(mod, attr, obj)
  _state["src_aliases"] = aliased
  saved = {n: m for n, m in sys.modules.items() if _served(n)}
  for n in saved:
    del sys.modules[n]
  if not _state.get("import_draws_pending"):
    sys.modules[_PREFIX] = stagecraft
    _register_eager_submodules()
  # else: the program's first `import jax` goes through the finder (exec_module), which
  # puts stagecraft there and draws from NumPy's RNG as JAX's import does.
  real_src = sys.modules.get(_PRIVATE)
  if real_src is not None and "_src" not in vars(stagecraft):
    # NB: `import jax._src.x as y` reads the attribute `_src` of the module `jax` (stagecraft).
    stagecraft._src = _SrcView(real_src)
    _state["set_src"] = True
  _state["versions"] = [(m, n, getattr(m, n)) for m in (stagecraft, _version)
                        for n in _VERSION_NAMES]
  for m in (stagecraft, _version):
    m.__version__ = JAX_API_VERSION
    m.__version_info__ = tuple(int(p) for p in JAX_API_VERSION.split("."))
  hook = functools.partial(_mirror_registration, real_tree_util)
  tree_util.registration_hooks.append(hook)
  _state["hook"] = hook
  scalar_types.repr_module[0] = _PREFIX + ".numpy"   # `<class 'jax.numpy.float32'>`
  array_mod.name_as_jax(True)   # `type(x)` as JAX's concrete class, `jaxlib._jax.ArrayImpl`
  # `jax.Array` (and `jnp.ndarray`) as JAX's abstract class, named as JAX's (jaxtyping's
  # messages print it); the concrete class stays what every Array is.
  _state["array_attrs"] = [(m, m.Array if m is stagecraft else m.ndarray) for m in (
      stagecraft, snp)]
  stagecraft.Array = snp.ndarray = array_mod.JaxArray
  _state["array_like"] = sc_typing.ArrayLike   # `jax.typing.ArrayLike` holds `jax.Array`
  sc_typing.ArrayLike = typing.Union[array_mod.JaxArray, np.ndarray, sc_typing.StaticScalar]
  traceback_util.library_name[0] = "JAX"   # "For simplicity, JAX has removed its ..."
  monitoring.logger_root[0] = "jax._src"   # the compile logs on JAX's loggers
  stages.jax_reprs[0] = True
  sharding_mod.jax_reprs[0] = True   # `<jax._src.stages.Compiled object at 0x...>`
  for n, m in list(sys.modules.items()):
    if isinstance(m, ModuleType) and (n == "stagecraft" or n.startswith("stagecraft.")):
      _name_as_jax(m)
  finder = _JaxAliasFinder()
  sys.meta_path.insert(0, finder)
  _state["finder"], _state["saved"] = finder, saved
  importlib.invalidate_caches()


def uninstall() -> None:
  """Gives `import jax` back to JAX: removes the finder and the `jax.*` aliases and restores
  the real jax modules that `install()` set aside. Does nothing when not installed."""
  finder = _state["finder"]
  if finder is None:
    return
  if finder in sys.meta_path:
    sys.meta_path.remove(finder)
  for n in [n for n in sys.modules if _served(n)]:
    del sys.modules[n]
  sys.modules.update(_state["saved"])
  hook = _state.pop("hook", None)
  if hook in tree_util.registration_hooks:
    tree_util.registration_hooks.remove(hook)
  for m, n, v in _state.pop("versions", ()):
    setattr(m, n, v)
  for m, n, v in _state.pop("src_aliases", ()):
    setattr(m, n, v)
  if _state.pop("set_src", False):
    vars(stagecraft).pop("_src", None)
  scalar_types.repr_module[0] = "stagecraft.numpy"
  array_mod.name_as_jax(False)
  for m, v in _state.pop("array_attrs", ()):
    setattr(m, "Array" if m is stagecraft else "ndarray", v)
  if "array_like" in _state:
    sc_typing.ArrayLike = _state.pop("array_like")
  traceback_util.library_name[0] = "stagecraft"
  monitoring.logger_root[0] = "stagecraft"
  stages.jax_reprs[0] = False
  sharding_mod.jax_reprs[0] = False
  _unname_as_jax()
  _state["finder"], _state["saved"] = None, {}
  importlib.invalidate_caches()

