"""Test helpers."""
from __future__ import annotations

import contextlib
import re
import sys

import numpy as np

from stagecraft import core, tree_util
from stagecraft.interpreters import lowering, partial_eval as pe
from stagecraft.runtime import dispatch


def staged_call(fun, *args):
  """Runs `fun(*args)` the way jit does (trace -> lower -> compile -> execute), without the
  jit wrapper: a check that staged and eager numerics agree. Args are flat arrays; returns
  the flat outputs (a single output unwrapped)."""
  avals = [core.get_aval(a) for a in args]
  single = []

  def flat_fun(*xs):
    out = fun(*xs)
    leaves, tree = tree_util.tree_flatten(out)
    single.append(not isinstance(out, (list, tuple)))
    return leaves

  jaxpr, consts = pe.trace_to_jaxpr(flat_fun, avals)
  core.check_jaxpr(jaxpr)
  # NB: a one-equation program is named as eager dispatch names it (after its primitive):
  # where the two modules are the same text, they share one compiled executable (whose
  # bits agree by construction), and only programs that differ from eager's compile again.
  name = jaxpr.eqns[0].primitive.name if len(jaxpr.eqns) == 1 else "staged"
  text = lowering.lower_jaxpr_to_module(name, jaxpr)
  exe = dispatch.Executable(dispatch.compile_module(text),
                            [v.aval for v in (*jaxpr.constvars, *jaxpr.invars)],
                            jaxpr.out_avals, text)
  outs = exe.call([*consts, *args])
  return outs[0] if single[0] and len(outs) == 1 else outs


def tol(dtype) -> dict:
  """Per-dtype tolerances for comparing with NumPy."""
  dtype = np.dtype(dtype)
  return {np.dtype("float16"): dict(rtol=2e-3, atol=2e-3),
          np.dtype("float32"): dict(rtol=2e-5, atol=2e-6),
          np.dtype("float64"): dict(rtol=1e-12, atol=1e-12),
          np.dtype("complex64"): dict(rtol=2e-5, atol=2e-6)}.get(dtype, dict(rtol=1e-2, atol=1e-2)
                                                                if "bfloat16" in dtype.name
                                                                else dict(rtol=0, atol=0))


# -- the 2x2 ("data", "model") mesh of the sharding tests (4 CPU devices, conftest.py)

import pytest  # noqa: E402


@pytest.fixture(scope="module")
def mesh():
  from stagecraft.sharding import make_mesh
  return make_mesh((2, 2), ("data", "model"))


@pytest.fixture(scope="module")
def jmesh():
  """The same 2x2 mesh as JAX objects (the oracle)."""
  import jax
  import jax.sharding as jsh
  return jsh.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "model"))


def f32(*shape, seed=0):
  """A float32 array of standard normal values (seeded)."""
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- comparing output trees

def _is_array_like(x) -> bool:
  return isinstance(x, (np.ndarray, np.generic, bool, int, float, complex)) or hasattr(x, "__array__")


def _flatten_with_paths(tree, path: str = "") -> list:
  """[(path, leaf)] of a pytree of stagecraft's or JAX's making. Tuples (namedtuples too),
  lists and dicts are walked by index / key; None is kept as a leaf, so an output that is
  None on one side and missing on the other is told apart; any other node is flattened by
  stagecraft's registry, then JAX's. Array-likes (stagecraft, JAX and NumPy arrays,
  scalars) are leaves."""
  if tree is None or _is_array_like(tree):
    return [(path, tree)]
  if isinstance(tree, (tuple, list)):
    return [pl for i, c in enumerate(tree) for pl in _flatten_with_paths(c, f"{path}[{i}]")]
  if isinstance(tree, dict):
    try:
      keys = sorted(tree)
    except TypeError:
      keys = list(tree)
    return [pl for k in keys for pl in _flatten_with_paths(tree[k], f"{path}[{k!r}]")]
  import jax
  for flatten, keystr in ((tree_util.tree_flatten_with_path, tree_util.keystr),
                          (jax.tree_util.tree_flatten_with_path, jax.tree_util.keystr)):
    children = flatten(tree)[0]
    if [p for p, _ in children] != [()]:
      return [pl for p, c in children for pl in _flatten_with_paths(c, path + keystr(p))]
  return [(path, tree)]


def assert_trees_allclose(actual, expected, *, rtol: float = 1e-7, atol: float = 0.0,
                          check_dtypes: bool = False, err_msg: str = "") -> None:
  """Asserts two output pytrees agree: first the same leaves (a missing or extra output fails,
  naming its path), then for each leaf the same shape, the same dtype (with `check_dtypes`)
  and values within `np.testing.assert_allclose(rtol=, atol=)`. Leaves may be stagecraft,
  JAX or NumPy arrays or scalars; tuple vs list and namedtuple vs tuple are not told apart;
  None matches only None."""
  def where(path):
    return f"leaf {path or '<root>'}" + (f" ({err_msg})" if err_msg else "")

  got, want = _flatten_with_paths(actual), _flatten_with_paths(expected)
  got_paths, want_paths = [p for p, _ in got], [p for p, _ in want]
  if got_paths != want_paths:
    missing = [p or "<root>" for p in want_paths if p not in set(got_paths)]
    extra = [p or "<root>" for p in got_paths if p not in set(want_paths)]
    raise AssertionError(
        f"tree structures differ{f' ({err_msg})' if err_msg else ''}: actual has {len(got)} "
        f"leaves, expected {len(want)}; missing from actual: {missing}; extra in actual: "
        f"{extra}" + ("" if missing or extra else
                      f"; leaf order differs: {got_paths} vs {want_paths}"))
  for (path, a), (_, e) in zip(got, want):
    if a is None or e is None:
      if not (a is None and e is None):
        raise AssertionError(f"{where(path)}: actual {a!r}, expected {e!r}")
      continue
    a, e = np.asarray(a), np.asarray(e)
    if a.shape != e.shape:
      raise AssertionError(f"{where(path)}: shape {a.shape} != expected {e.shape}")
    if check_dtypes and a.dtype != e.dtype:
      raise AssertionError(f"{where(path)}: dtype {a.dtype} != expected {e.dtype}")
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=where(path))


# -- stagecraft.numpy against jax.numpy, case by case (tests/test_jnp_jitted_functions_2.py,
#    _3.py, test_jnp_printing_4.py). A case is `(mk, args)`: `mk(m)` builds the function from
#    a numpy module `m` (jax.numpy or stagecraft.numpy).

def jaxpr_texts(mk, args, x64: bool = False) -> tuple[str, str]:
  """The printed jaxprs of `mk(stagecraft.numpy)` and `mk(jax.numpy)` at `args`
  (stagecraft's first), x64 off or on for both."""
  import jax
  import jax.numpy as jjnp
  import stagecraft
  import stagecraft.numpy as snp
  if x64:
    with stagecraft.enable_x64(), jax.enable_x64(True):
      return jaxpr_texts(mk, args)
  return str(stagecraft.make_jaxpr(mk(snp))(*args)), str(jax.make_jaxpr(mk(jjnp))(*args))


def as_x64(args) -> tuple:
  """`args` with float32 arrays widened to float64 (the other dtypes kept)."""
  return tuple(a.astype(np.float64) if getattr(a, "dtype", None) == np.float32 else a
               for a in args)


def assert_like_jax(got, want, name: str = "", *, rtol: float = 1e-5,
                    atol: float = 1e-5) -> None:
  """Asserts that the outputs `got` (stagecraft Arrays) match JAX's `want` leaf by leaf:
  the same shape, dtype and weak type, and values within `rtol`/`atol` (2e-3 for float16),
  NaNs equal."""
  import jax
  from stagecraft.runtime.array import Array
  got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
  assert len(got_leaves) == len(want_leaves), name
  for g, w in zip(got_leaves, want_leaves):
    assert isinstance(g, Array), (name, type(g))
    assert (g.shape, g.dtype, g.weak_type) == (w.shape, w.dtype, w.weak_type), (
        name, (g.shape, g.dtype, g.weak_type), (w.shape, w.dtype, w.weak_type))
    r = 2e-3 if g.dtype == np.float16 else rtol
    np.testing.assert_allclose(np.asarray(g, np.complex128), np.asarray(w, np.complex128),
                               rtol=r, atol=atol, equal_nan=True, err_msg=name)


def jnp_printing_tests(cases: dict, x64_cases, known: dict | None = None, *,
                       value_cases=None, x64_value_cases=None, x64_narrow_too: bool = True,
                       rtol: float = 1e-5, atol: float = 1e-5,
                       x64_tol: float | None = None, grad_cases: dict | None = None,
                       grad_atol: float = 1e-5) -> dict:
  """The test functions shared by the jnp printing corpora (`tests/test_jnp_*`), for a
  module to add with `globals().update(...)`:

  - `test_printed_jaxpr_equals_jax` / `_x64`: `cases` (name -> (mk, args), `mk(np_module)`
    the program) print as JAX's, x64 off and, for `x64_cases`, on (float32 args widened);
  - `test_known_difference_still_differs`: the `known` programs (name -> (mk, args)) still
    print differently, so a fix shows up as a failure asking to move the case;
  - `test_eager_and_jit_values_like_jax`: eager and jitted values of `value_cases` (default:
    every case, known ones included) match JAX's (shape, dtype, weak type, values);
  - `test_values_like_jax_x64`: so under x64 for `x64_value_cases` (default `x64_cases`),
    with the float32 args too when `x64_narrow_too`, within `x64_tol` (default: `rtol`,
    `atol`);
  - `test_grad_like_jax` (with `grad_cases`, name -> (mk, args) of a scalar function): the
    gradients in every argument equal JAX's (rtol 1e-5, `grad_atol`)."""
  import jax
  import jax.numpy as jjnp
  import stagecraft as sc
  import stagecraft.numpy as snp
  known = known or {}
  every = {**cases, **known}
  value_cases = sorted(every) if value_cases is None else value_cases
  x64_value_cases = list(x64_cases) if x64_value_cases is None else x64_value_cases

  @pytest.mark.parametrize("name", sorted(cases))
  def test_printed_jaxpr_equals_jax(name):
    ours, theirs = jaxpr_texts(*cases[name])
    assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"

  @pytest.mark.parametrize("name", list(x64_cases))
  def test_printed_jaxpr_equals_jax_x64(name):
    mk, args = cases[name]
    ours, theirs = jaxpr_texts(mk, as_x64(args), x64=True)
    assert ours == theirs, f"\n--- stagecraft\n{ours}\n--- JAX\n{theirs}"

  @pytest.mark.parametrize("name", sorted(known))
  def test_known_difference_still_differs(name):
    ours, theirs = jaxpr_texts(*known[name])
    assert ours != theirs, f"{name} now prints as JAX's: move it to the cases"

  @pytest.mark.parametrize("name", value_cases)
  def test_eager_and_jit_values_like_jax(name):
    mk, args = every[name]
    want = mk(jjnp)(*args)
    assert_like_jax(mk(snp)(*args), want, name, rtol=rtol, atol=atol)
    assert_like_jax(sc.jit(mk(snp))(*args), want, name, rtol=rtol, atol=atol)

  @pytest.mark.parametrize("name", x64_value_cases)
  def test_values_like_jax_x64(name):
    mk, args = cases[name]
    with sc.enable_x64(), jax.enable_x64(True):
      for a in ((args, as_x64(args)) if x64_narrow_too else (as_x64(args),)):
        assert_like_jax(mk(snp)(*a), mk(jjnp)(*a), name,
                        rtol=rtol if x64_tol is None else x64_tol,
                        atol=atol if x64_tol is None else x64_tol)

  @pytest.mark.parametrize("name", sorted(grad_cases or {}))
  def test_grad_like_jax(name):
    mk, args = grad_cases[name]
    argnums = tuple(range(len(args)))
    got = sc.grad(mk(snp), argnums)(*args)
    want = jax.grad(mk(jjnp), argnums)(*args)
    for g, w in zip(got, want):
      np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=grad_atol,
                                 err_msg=name)

  # NB: only the tests with cases (a module may call this twice: cases, then grad_cases)
  tests = [(cases, test_printed_jaxpr_equals_jax), (x64_cases, test_printed_jaxpr_equals_jax_x64),
           (value_cases, test_eager_and_jit_values_like_jax),
           (x64_value_cases, test_values_like_jax_x64), (grad_cases, test_grad_like_jax),
           (known, test_known_difference_still_differs)]
  return {t.__name__: t for which, t in tests if which}


def jnp_error_tests(cases: dict, message_cases=(), *, either_type: bool = False) -> dict:
  """`test_errors_like_jax` for a module to add with `globals().update(...)`: each of `cases`
  (name -> f, where `f(np_module)` raises) raises under stagecraft.numpy what it raises under
  jax.numpy: an instance of JAX's exception type (`either_type`: either type a subclass of
  the other) and, for `message_cases`, the same message (up to the traceback note after
  a `---` line)."""
  import jax.numpy as jjnp
  import stagecraft.numpy as snp
  first = lambda e: str(e).split("\n---")[0]  # noqa: E731

  @pytest.mark.parametrize("name", sorted(cases))
  def test_errors_like_jax(name):
    with pytest.raises(Exception) as want:
      cases[name](jjnp)
    with pytest.raises(Exception) as got:
      cases[name](snp)
    g, w = got.value, want.value
    assert isinstance(g, type(w)) or (either_type and isinstance(w, type(g))), (
        name, repr(g), repr(w))
    if name in message_cases:
      assert first(g) == first(w)

  return {"test_errors_like_jax": test_errors_like_jax}


def saved_residual_types(ours, theirs, *args) -> tuple[list, list]:
  """The (shape, dtype) of each residual `saved_residuals` reports for stagecraft's function
  `ours` and JAX's `theirs` at `args` (what `grad` saves, in order)."""
  from jax._src.ad_checkpoint import saved_residuals as jax_saved
  from stagecraft.ad_checkpoint import saved_residuals
  return ([(a.shape, str(a.dtype)) for a, _ in saved_residuals(ours, *args)],
          [(a.shape, str(a.dtype)) for a, _ in jax_saved(theirs, *args)])


def sets_sorted(message: str) -> str:
  """`message` with every printed set of strings (`{'b', 'a'}`) in sorted order: JAX prints
  some sets in its messages, and a set's order changes from one process to the next."""
  return re.sub(r"\{('[^'{}]*'(?:, '[^'{}]*')*)\}",
                lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", message)


@contextlib.contextmanager
def served():
  """`stagecraft.compat.install()` (`import jax` served by stagecraft, as under `python -m
  stagecraft run`) for the block, undone after unless it was installed already; checks that
  the real `jax` module comes back."""
  from stagecraft import compat
  from stagecraft.runtime import jax_runtime
  if compat.is_installed():
    yield
    return
  real_jax = sys.modules.get("jax")
  compat.install()
  try:
    yield
  finally:
    compat.uninstall()
    # NB: install() imports the real jax for its runtime when this process had not yet
    assert sys.modules.get("jax") is (real_jax or jax_runtime.jax_module("jax"))


def error_of(fn) -> tuple[type, str]:
  """The type and message of the exception `fn()` raises (AssertionError if none)."""
  try:
    fn()
  except Exception as e:  # noqa: BLE001 -- the exception is what is compared
    return type(e), str(e)
  raise AssertionError("no exception raised")


def assert_same_error(ours, theirs) -> None:
  """`ours()` and `theirs()` (stagecraft's and JAX's call) raise exceptions of the same class
  name with the same message."""
  t1, m1 = error_of(ours)
  t2, m2 = error_of(theirs)
  assert t1.__name__ == t2.__name__, (t1, t2)
  assert m1 == m2
