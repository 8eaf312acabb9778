"""`python -m stagecraft run script.py` and `stagecraft.compat`: unmodified JAX programs on
stagecraft.

The programs in tests/jax_programs/ run under real JAX (`python script.py`) and under the
runner, each in its own process; their printed numbers must agree to printed precision.
The runner's contract (sys.argv, `__name__`, exit status, tracebacks, the ImportError for a
JAX module stagecraft lacks) and `compat.install()` / `uninstall()` are tested in process.
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap
import traceback

import pytest

import stagecraft
from stagecraft import cli, compat
from stagecraft.runtime import jax_runtime

HERE = pathlib.Path(__file__).resolve().parent
PROGRAMS = HERE / "jax_programs"
PROGRAM_NAMES = ["mlp_stax", "gp_regression", "tree_x64"]

CLI_SCRIPT = textwrap.dedent("""\
    import sys
    from os.path import dirname, isabs, realpath
    import jax
    import jax.numpy as jnp

    def inner(x):
      raise ValueError(f"bad value {x}")   # line 7

    print("argv", sys.argv[1:], __name__, jax.__name__, jnp.__name__)
    print("value", float(jax.jit(lambda x: x * 2)(jnp.float32(1.5))))
    if sys.argv[1:2] == ["raise"]:
      inner(3)                              # line 12
    print("path", sys.path[0] == dirname(realpath(__file__)), isabs(__file__))
    if sys.argv[1:2] == ["exit"]:
      sys.exit(int(sys.argv[2]))
    """)


def _env():
  env = dict(os.environ)
  env["JAX_PLATFORMS"] = "cpu"
  env["PYTHONPATH"] = os.pathsep.join(
      [str(HERE.parent / "src")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  return env


def _start(argv, cwd):
  return subprocess.Popen([sys.executable, *argv], cwd=cwd, env=_env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Starts every subprocess at once (they overlap their start-up) and collects
  `{name: (status, stdout, stderr)}`."""
  d = tmp_path_factory.mktemp("runner")
  (d / "cli_script.py").write_text(CLI_SCRIPT)
  procs = {}
  for name in PROGRAM_NAMES:
    procs[(name, "jax")] = _start([f"{name}.py"], PROGRAMS)
    procs[(name, "stagecraft")] = _start(["-m", "stagecraft", "run", f"{name}.py"], PROGRAMS)
  procs["exit"] = _start(["-m", "stagecraft", "run", "cli_script.py", "exit", "3"], d)
  procs["raise"] = _start(["-m", "stagecraft", "run", "cli_script.py", "raise"], d)
  out = {}
  for key, p in procs.items():
    stdout, stderr = p.communicate(timeout=300)
    out[key] = (p.returncode, stdout, stderr)
  return out


_NUM = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _assert_same_numbers(ours: str, theirs: str):
  """The two outputs agree line by line: the text between numbers exactly, integers
  exactly, and decimals to within one unit of the last digit printed."""
  a, b = ours.splitlines(), theirs.splitlines()
  assert len(a) == len(b), f"{len(a)} lines vs {len(b)}:\n{ours}\n---\n{theirs}"
  for x, y in zip(a, b):
    assert _NUM.sub("#", x) == _NUM.sub("#", y), f"\n{x}\n{y}"
    for p, q in zip(_NUM.findall(x), _NUM.findall(y)):
      if not any(c in p + q for c in ".eE"):
        assert p == q, f"\n{x}\n{y}"
        continue
      places = min(len(s.partition(".")[2]) for s in (p, q) if "." in s and "e" not in s.lower())
      assert abs(float(p) - float(q)) <= 1.01 * 10.0 ** -places, f"\n{x}\n{y}"


def test_number_comparison_catches_differences():
  _assert_same_numbers("loss 0.12345 step 3\n", "loss 0.12346 step 3\n")
  for other in ("loss 0.12355 step 3\n", "loss 0.12345 step 4\n", "cost 0.12345 step 3\n",
                "loss 0.12345 step 3\nextra\n"):
    with pytest.raises(AssertionError):
      _assert_same_numbers("loss 0.12345 step 3\n", other)


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_program_prints_the_same_numbers_as_jax(runs, name):
  status_j, out_j, err_j = runs[(name, "jax")]
  status_s, out_s, err_s = runs[(name, "stagecraft")]
  assert status_j == 0, err_j
  assert status_s == 0, err_s
  assert len(out_j.splitlines()) >= 5
  _assert_same_numbers(out_s, out_j)


def test_runner_passes_argv_name_and_exit_status(runs):
  status, out, err = runs["exit"]
  assert status == 3, err
  assert out.splitlines() == ["argv ['exit', '3'] __main__ stagecraft stagecraft.numpy",
                              "value 3.0", "path True True"]


def test_runner_prints_the_script_traceback(runs):
  status, out, err = runs["raise"]
  assert status == 1
  assert "value 3.0" in out
  lines = err.splitlines()
  start = lines.index("Traceback (most recent call last):")
  tb = "\n".join(lines[start:])
  assert re.search(r'File ".*cli_script\.py", line 12, in <module>', tb), tb
  assert re.search(r'File ".*cli_script\.py", line 7, in inner', tb), tb
  assert tb.rstrip().endswith("ValueError: bad value 3"), tb
  # the runner's own frames (cli.py, runpy) are not shown
  first_frame = lines[start + 1]
  assert "cli_script.py" in first_frame and "runpy" not in tb and "cli.py" not in tb, tb


def test_install_serves_jax_from_stagecraft(installed):
  import jax
  import jax.numpy as jnp
  import jax.example_libraries.optimizers as optimizers
  from jax import lax
  from jax.experimental import io_callback
  from jax.scipy.stats import norm
  assert jax is stagecraft and jnp is stagecraft.numpy and lax is stagecraft.lax
  assert jax.__version__ == stagecraft.__version__ == compat.JAX_API_VERSION
  assert norm.__name__ == "stagecraft.scipy.stats.norm"
  assert optimizers.__name__ == "stagecraft.example_libraries.optimizers"
  assert io_callback is stagecraft.experimental.io_callback
  # the stagecraft modules keep their own identity
  assert jnp.__spec__.name == "stagecraft.numpy"
  assert compat.is_installed()


def test_install_reports_modules_stagecraft_lacks(installed):
  with pytest.raises(ImportError, match=r"stagecraft does not provide jax\.experimental\."
                                        r"pallas\.fuser"):
    import jax.experimental.pallas.fuser  # noqa: F401
  with pytest.raises(ModuleNotFoundError, match=r"jax\.config is not a module"):
    import jax.config  # noqa: F401
  from jax import config
  assert config is stagecraft.config


def test_runtime_keeps_the_real_jax_after_install(installed):
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import NamedSharding, PartitionSpec as P
  assert float(jax.jit(lambda x: jnp.sum(x * 2))(jnp.arange(4.0))) == 12.0
  assert jax_runtime.jax_module("jax.sharding").__name__ == "jax.sharding"
  mesh = jax.make_mesh((len(jax.devices()),), ("x",))
  y = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("x")))
  np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: v + 1)(y)), np.arange(8.0) + 1)
  with pytest.raises(ImportError, match="needs the real 'jax.numpy'"):
    jax_runtime.jax_module("jax.numpy")   # never captured: importing it now gives stagecraft's


def test_uninstall_restores_jax():
  import jax as real_jax
  compat.install()
  compat.install()   # idempotent
  compat.uninstall()
  compat.uninstall()
  import jax
  import jax.numpy as jnp
  assert jax is real_jax and not compat.is_installed()
  assert jnp.__name__ == "jax.numpy" and float(jnp.ones(2).sum()) == 2.0


def test_stagecraft_name():
  assert compat.stagecraft_name("jax.scipy.stats") == "stagecraft.scipy.stats"
  assert compat.stagecraft_name("jax") == "stagecraft"
  for bad in ("jaxlib", "jax._src.core", "numpy"):
    with pytest.raises(ValueError, match="expected 'jax'"):
      compat.stagecraft_name(bad)


def test_run_in_process(tmp_path, capsys, installed):
  script = tmp_path / "cli_script.py"
  script.write_text(CLI_SCRIPT)
  argv_before = list(sys.argv)
  assert cli.main(["run", str(script), "a", "--", "-b"]) == 0
  out = capsys.readouterr().out
  assert "argv ['a', '--', '-b'] __main__ stagecraft stagecraft.numpy" in out
  assert sys.argv == argv_before
  with pytest.raises(SystemExit) as e:
    cli.main(["run", str(script), "exit", "4"])
  assert e.value.code == 4
  # run_script lets the exception through; its traceback reaches the script's line
  with pytest.raises(ValueError, match="bad value 3") as e:
    cli.run_script(str(script), ["raise"])
  frames = traceback.extract_tb(e.value.__traceback__)
  assert (frames[-1].filename, frames[-1].lineno) == (str(script), 7)
  # main prints it with the traceback starting at the script, and returns 1
  assert cli.main(["run", str(script), "raise"]) == 1
  err = capsys.readouterr().err
  assert err.splitlines()[1].strip().startswith(f'File "{script}", line 12')


def test_run_module_as_python_m(tmp_path, capsys, installed, monkeypatch):
  pkg = tmp_path / "mypkg"
  pkg.mkdir()
  (pkg / "__init__.py").write_text("")
  (pkg / "prog.py").write_text(CLI_SCRIPT)
  monkeypatch.chdir(tmp_path)
  argv_before, path_before = list(sys.argv), list(sys.path)
  assert cli.main(["run", "-m", "mypkg.prog", "a", "--", "-b", "--flag=1"]) == 0
  out = capsys.readouterr().out
  assert "argv ['a', '--', '-b', '--flag=1'] __main__ stagecraft stagecraft.numpy" in out
  assert sys.argv == argv_before and sys.path == path_before
  with pytest.raises(SystemExit) as e:
    cli.main(["run", "-m", "mypkg.prog", "exit", "4"])
  assert e.value.code == 4
  assert cli.main(["run", "-m", "mypkg.prog", "raise"]) == 1
  assert "bad value 3" in capsys.readouterr().err
  # a module that does not exist: Python's message and status
  assert cli.main(["run", "-m", "mypkg.nosuch"]) == 1
  assert capsys.readouterr().err == f"{sys.executable}: No module named mypkg.nosuch\n"


def test_run_missing_script(tmp_path, capsys):
  with pytest.raises(SystemExit) as e:
    cli.main(["run", str(tmp_path / "missing.py")])
  assert e.value.code == 2
  assert "can't open file" in capsys.readouterr().err
  assert not compat.is_installed()


def test_install_serves_jax_version_src_and_mirrors_pytree_registrations(installed):
  import jax
  import jax.tree_util as jtu
  real_tree_util = jax_runtime.jax_module("jax.tree_util")
  assert jax.__version__ == jax.version.__version__ == compat.JAX_API_VERSION
  assert jax.__version_info__ == tuple(int(p) for p in compat.JAX_API_VERSION.split("."))
  # JAX's internals stay JAX's, reachable as `jax._src`
  import jax._src.traceback_util as tu
  assert tu.__name__ == "jax._src.traceback_util"
  # a view of the real package: its modules are JAX's, but for the few names stagecraft
  # serves through it (compat._SRC_VIEWS: quax's jax._src.core.Trace)
  assert jax._src.traceback_util is sys.modules["jax._src.traceback_util"]
  assert jax._src.dispatch is sys.modules["jax._src.dispatch"]
  assert jax._src.core.Trace is not sys.modules["jax._src.core"].Trace

  class Node:
    def __init__(self, a, b):
      self.a, self.b = a, b
  jtu.register_pytree_node(Node, lambda n: ((n.a, n.b), None), lambda _, c: Node(*c))
  assert jtu.tree_leaves(Node(1, 2)) == [1, 2]
  assert real_tree_util.tree_leaves(Node(3, 4)) == [3, 4]    # JAX's registry has it too
  assert Node in sys.modules["jax._src.tree_util"]._registry


def test_uninstall_restores_version_and_src():
  version, info = stagecraft.__version__, stagecraft.__version_info__
  compat.install()
  compat.uninstall()
  assert (stagecraft.__version__, stagecraft.__version_info__) == (version, info)
  assert stagecraft.version.__version__ == version
  assert "_src" not in vars(stagecraft)
  assert not stagecraft.tree_util.registration_hooks


def test_install_serves_stagecraft_exceptions_under_jax_src_names():
  """`from jax._src.dtypes import TypePromotionError` (equinox catches it) is the class that
  stagecraft raises while installed; JAX's own class is back after `uninstall()`."""
  real_dtypes = jax_runtime.jax_module("jax._src.dtypes")
  real_cls = real_dtypes.TypePromotionError
  assert real_cls is not stagecraft.dtypes.TypePromotionError
  compat.install()
  try:
    from jax._src.dtypes import TypePromotionError
    assert TypePromotionError is stagecraft.dtypes.TypePromotionError
    with stagecraft.numpy_dtype_promotion("strict"):
      with pytest.raises(TypePromotionError):
        stagecraft.numpy.ones(2, "float16") + stagecraft.numpy.ones(2, "float32")
  finally:
    compat.uninstall()
  assert real_dtypes.TypePromotionError is real_cls


def test_install_serves_jax_src_functions_libraries_call():
  """flax.nnx's `checkify` calls `jax._src.checkify.checkify` (with `user_checks` as its
  default); blackjax ravels with `jax._src.flatten_util.ravel_pytree`; flax.nnx tests refs
  against `jax._src.state.types.AbstractRef`; lineax registers a transpose rule on
  `jax._src.ad_util.stop_gradient_p`. While installed these are stagecraft's: a checkified
  function finds the NaN of `sin(inf)` as JAX's does (JAX's own checkify rejects stagecraft's
  Arrays as outputs)."""
  import stagecraft.experimental.checkify as sc_checkify
  real = jax_runtime.jax_module("jax._src.checkify")
  real_checkify = real.checkify
  compat.install()
  try:
    from jax._src import checkify as checkify_lib
    from jax._src.ad_util import stop_gradient_p
    from jax._src.flatten_util import ravel_pytree
    from jax._src.state.types import AbstractRef
    assert checkify_lib.user_checks is sc_checkify.user_checks
    err, out = checkify_lib.checkify(stagecraft.numpy.sin, errors=checkify_lib.float_checks)(
        stagecraft.numpy.inf)
    assert err.get() == "nan generated by primitive: sin."
    err, out = checkify_lib.checkify(lambda x: x + 1.0)(stagecraft.numpy.ones(2))
    assert err.get() is None and out.tolist() == [2.0, 2.0]
    flat, unravel = ravel_pytree({"a": stagecraft.numpy.ones(2), "b": 3.0})
    assert type(flat) is stagecraft.runtime.Array and flat.tolist() == [1.0, 1.0, 3.0]
    assert stop_gradient_p is stagecraft.lax.ad_util.stop_gradient_p
    assert AbstractRef is stagecraft.state.AbstractRef
  finally:
    compat.uninstall()
  assert real.checkify is real_checkify
