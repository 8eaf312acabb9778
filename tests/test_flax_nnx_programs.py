"""flax's NNX documentation (docs_nnx guides, nnx_toy_examples) on stagecraft: the patterns in
those programs that differed from JAX, each run the same way under JAX and stagecraft.

The in-process tests write the pattern in plain JAX code (the same function given `jax` and
`stagecraft`); `test_nnx_program_prints_jax_output` runs a small flax.nnx program (nnx.scan,
nnx.Param with `out_sharding` over an Auto mesh, a traced `if` under nnx.jit, NumPy seeded
before `import jax`) as `python prog.py` and `python -m stagecraft run prog.py` and compares
what the two print.
"""
from __future__ import annotations

import contextlib
import io
import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import stagecraft
from _xla_flags import without_fast_flags

HERE = pathlib.Path(__file__).resolve().parent
SRC = pathlib.Path(stagecraft.__file__).resolve().parent.parent


def _raised(fn):
  """`(type name, message)` of what `fn()` raises."""
  with pytest.raises(Exception) as info:
    fn()
  return type(info.value).__name__, str(info.value)


def _mesh(lib, shape=(2, 2), names=("x", "y"), explicit=False):
  devs = lib.devices()
  if len(devs) < 4:
    pytest.skip("needs 4 devices")
  types = (lib.sharding.AxisType.Explicit if explicit else lib.sharding.AxisType.Auto,) * 2
  return lib.sharding.Mesh(np.array(devs[:4]).reshape(shape), names, axis_types=types)


# ---------------------------------------------------------------------------
# nnx.scan passes JAX's private `_split_transpose` keyword to lax.scan (nnx_basics).


@pytest.mark.parametrize("split", [False, True])
def test_scan_takes_split_transpose(split):
  def run(lib):
    def body(c, x):
      return c * x + 1.0, c
    xs = np.linspace(0.5, 1.5, 5, dtype=np.float32)
    out = lib.lax.scan(body, np.float32(1), xs, _split_transpose=split)
    g = lib.grad(lambda xs: lib.lax.scan(body, np.float32(1), xs,
                                          _split_transpose=split)[0])(xs)
    return [np.asarray(a) for a in (*out, g)]
  for want, got in zip(run(jax), run(stagecraft)):
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---------------------------------------------------------------------------
# dtype errors (flax_gspmd's `nnx.Param(jnp.ones(4,4), ...)`).


@pytest.mark.parametrize("call", [
    lambda jnp: jnp.ones(4, 4), lambda jnp: jnp.zeros(3, 4), lambda jnp: jnp.empty(2, 8),
    lambda jnp: jnp.zeros(3, "foo"), lambda jnp: jnp.zeros(3, object),
    lambda jnp: jnp.ones(3, "U5"), lambda jnp: jnp.array([1], dtype=4),
    lambda jnp: jnp.ones(3).astype(4), lambda jnp: jnp.full(3, 1.0, dtype=4),
])
def test_dtype_errors_read_as_jax(call):
  assert _raised(lambda: call(stagecraft.numpy)) == _raised(lambda: call(jax.numpy))


def test_ml_dtypes_still_accepted():
  import ml_dtypes
  for dt in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, "bfloat16"):
    assert stagecraft.numpy.ones(2, dt).dtype == jax.numpy.ones(2, dt).dtype


# ---------------------------------------------------------------------------
# jax.debug.visualize_array_sharding of a pytree node holding an array (flax_gspmd's
# `visualize_array_sharding(model.w1)`, an nnx.Param).


class _Box:
  def __init__(self, v):
    self.v = v
    self.shape = getattr(v, "shape", None)


def _box_flatten(b):
  return (b.v,), None


def _box_unflatten(_, children):
  return _Box(children[0])


jax.tree_util.register_pytree_node(_Box, _box_flatten, _box_unflatten)
stagecraft.tree_util.register_pytree_node(_Box, _box_flatten, _box_unflatten)


def test_visualize_array_sharding_of_pytree_node():
  def run(lib):
    mesh = _mesh(lib)
    x = lib.device_put(np.arange(32.0, dtype=np.float32).reshape(8, 4),
                       lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec("x", "y")))
    seen = []
    lib.debug.inspect_array_sharding({"a": _Box(x), "b": x}, callback=seen.append)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
      lib.debug.visualize_array_sharding(_Box(x), use_color=False)
    return [repr(s.spec) for s in seen], buf.getvalue()
  want, got = run(jax), run(stagecraft)
  assert got == want
  assert "CPU 3" in got[1]


# ---------------------------------------------------------------------------
# nn.initializers with out_sharding (flax's Linear/Param with sharding metadata), over a
# mesh of Explicit axes (JAX's samplers refuse Auto axes in out_sharding).


@pytest.mark.parametrize("name", ["lecun_normal", "glorot_uniform", "he_normal", "normal",
                                  "uniform", "truncated_normal", "zeros", "ones",
                                  "constant"])
def test_initializers_take_out_sharding(name):
  def run(lib):
    mesh = _mesh(lib, explicit=True)
    s = lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec(None, "y"))
    inits = lib.nn.initializers
    init = {"zeros": inits.zeros, "ones": inits.ones, "constant": inits.constant(0.5)}.get(
        name) or getattr(inits, name)()
    with lib.set_mesh(mesh):
      x = init(lib.random.key(3), (4, 8), np.float32, out_sharding=s)
      y = lib.jit(lambda k: init(k, (4, 8), np.float32, out_sharding=s))(lib.random.key(3))
      return [(np.asarray(a), repr(a.sharding.spec), str(lib.typeof(a))) for a in (x, y)]
  for (wv, *ws), (gv, *gs) in zip(run(jax), run(stagecraft)):
    np.testing.assert_array_equal(gv, wv)
    assert gs == ws


def test_orthogonal_refuses_out_sharding_as_jax():
  def run(lib):
    mesh = _mesh(lib, explicit=True)
    s = lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec(None, "y"))
    return _raised(lambda: lib.nn.initializers.orthogonal()(lib.random.key(0), (4, 4),
                                                           out_sharding=s))
  assert run(stagecraft) == run(jax)


# ---------------------------------------------------------------------------
# lax.conv_general_dilated's out_sharding (flax.nnx.Conv passes out_sharding=None; the MNIST
# tutorial's CNN).


def test_conv_takes_out_sharding():
  def run(lib):
    x = np.linspace(-1, 1, 4 * 2 * 25, dtype=np.float32).reshape(4, 2, 5, 5)
    w = np.linspace(-1, 1, 3 * 2 * 9, dtype=np.float32).reshape(3, 2, 3, 3)
    conv = lambda a, b, s: lib.lax.conv_general_dilated(a, b, (1, 1), "SAME", out_sharding=s)
    plain = conv(x, w, None)
    mesh = _mesh(lib, explicit=True)
    with lib.set_mesh(mesh):
      split = lib.jit(lambda a, b: conv(a, b, lib.sharding.PartitionSpec("x")))(x, w)
      typ = str(lib.typeof(split))
    return np.asarray(plain), np.asarray(split), typ, str(lib.make_jaxpr(
        lambda a, b: conv(a, b, None))(x, w))
  want, got = run(jax), run(stagecraft)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
  np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
  assert got[2:] == want[2:]


# ---------------------------------------------------------------------------
# astype must not reset Python's record of warnings shown (nnx_toy_examples/02: flax's
# '.value' DeprecationWarning showed again after each optax update, which calls astype).


def test_astype_does_not_repeat_default_warnings(recwarn):
  import warnings

  def run(lib):
    shown = []
    g = {"__name__": "__main__", "warnings": warnings}
    exec("def warn():\n  warnings.warn('once only', DeprecationWarning)\n", g)
    old = warnings.showwarning
    warnings.showwarning = lambda msg, *a, **k: shown.append(str(msg))
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("default")
        for _ in range(3):
          g["warn"]()
          lib.numpy.asarray(np.float32(1)).astype(np.int32)
    finally:
      warnings.showwarning = old
    return shown
  assert run(stagecraft) == run(jax) == ["once only"]


# ---------------------------------------------------------------------------
# copy_to_host_async of a sharded Array (nnx_toy_examples/04 prefetches its sharded loss).


@pytest.mark.parametrize("spec", [("x",), (), ("x", "y")])
def test_copy_to_host_async_of_sharded_arrays(spec):
  def run(lib):
    mesh = _mesh(lib)
    x = lib.device_put(np.arange(16.0, dtype=np.float32).reshape(4, 4),
                       lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec(*spec)))
    assert x.copy_to_host_async() is None
    lib.block_until_ready(x)
    return np.asarray(x)
  np.testing.assert_array_equal(run(stagecraft), run(jax))


# ---------------------------------------------------------------------------
# reshard with a spec longer than a value's rank (optimization_cookbook:
# `reshard(model, P(None, None))` over a model whose biases are 1-d).


def test_reshard_drops_trailing_none_entries():
  def run(lib):
    mesh = _mesh(lib, explicit=True)
    P = lib.sharding.PartitionSpec
    tree = {"w": np.ones((4, 8), np.float32), "b": np.arange(8.0, dtype=np.float32),
            "s": np.float32(2)}
    with lib.set_mesh(mesh):
      eager = lib.sharding.reshard(tree, P(None, None))
      traced = lib.jit(lambda t: lib.sharding.reshard(t, P(None, None)))(tree)
      err = _raised(lambda: lib.sharding.reshard(np.ones(8, np.float32), P("x", "y")))
    show = lambda t: {k: (str(lib.typeof(v)), np.asarray(v).tolist()) for k, v in t.items()}
    return show(eager), show(traced), err
  assert run(stagecraft) == run(jax)


# ---------------------------------------------------------------------------
# A sharding over Auto mesh axes that does not divide a dimension (nnx_toy_examples/10: a
# (32, 1) Param constrained to P(None, 'model') inside nnx.jit).


def test_uneven_sharding_constraint_over_auto_axes():
  def run(lib):
    mesh = _mesh(lib, (1, 4), ("data", "model"))
    s = lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec(None, "model"))
    x = np.arange(8.0, dtype=np.float32).reshape(8, 1)
    out = lib.jit(lambda y: lib.lax.with_sharding_constraint(y * 2, s) + 1)(x)
    errs = [_raised(lambda: lib.device_put(x, s)),
            _raised(lambda: lib.lax.with_sharding_constraint(lib.numpy.asarray(x), s)),
            _raised(lambda: lib.jit(lambda y: y, out_shardings=s)(x))]
    return np.asarray(out), errs
  (want, want_errs), (got, got_errs) = run(jax), run(stagecraft)
  np.testing.assert_array_equal(got, want)
  assert got_errs == want_errs
  assert want_errs[0][0] == "IndivisibleError"


# ---------------------------------------------------------------------------
# The scalar types' repr under `import jax` served by stagecraft (key_concepts prints a flax
# treedef holding `jnp.float32`).


def test_scalar_type_repr_names_jax_numpy_while_served():
  from stagecraft import compat
  want = [repr(jax.numpy.float32), repr(jax.numpy.int8), repr(jax.numpy.bfloat16)]
  assert repr(stagecraft.numpy.float32) == "<class 'stagecraft.numpy.float32'>"
  was = compat.is_installed()
  compat.install()
  try:
    got = [repr(stagecraft.numpy.float32), repr(stagecraft.numpy.int8),
           repr(stagecraft.numpy.bfloat16)]
  finally:
    if not was:
      compat.uninstall()
  assert got == want
  if not was:
    assert repr(stagecraft.numpy.float32) == "<class 'stagecraft.numpy.float32'>"


# ---------------------------------------------------------------------------
# A flax.nnx program run as a script under both.

PROGRAM = '''
import numpy as np
np.random.seed(0)           # before `import jax`, whose import draws from NumPy's RNG
import jax
import jax.numpy as jnp
from flax import nnx

print("numpy after import:", np.random.rand(3).tolist())

class Block(nnx.Module):
  def __init__(self, rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)
  def __call__(self, x):
    return nnx.relu(self.linear(x))

@nnx.split_rngs(splits=3)
@nnx.vmap(in_axes=(0,), out_axes=0)
def make(rngs):
  return Block(rngs)

blocks = make(nnx.Rngs(0))

@nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
def forward(x, block):
  return block(x)

print("scan:", np.round(np.asarray(forward(jnp.ones((2, 4)), blocks)), 5).tolist())

mesh = jax.make_mesh((1, 4), ("data", "model"),
                     axis_types=(jax.sharding.AxisType.Auto,) * 2)

class Head(nnx.Module):
  def __init__(self, rngs):
    self.w = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (8, 1)),
                       out_sharding=(None, "model"))
  def __call__(self, x):
    return x @ self.w

@nnx.jit
def make_head():
  return Head(nnx.Rngs(1))

with jax.set_mesh(mesh):
  head = make_head()
print("head:", np.round(np.asarray(head(jnp.ones((2, 8)))), 5).tolist())

class Model(nnx.Module):
  def __init__(self):
    self.flag = nnx.Param(jnp.array(1.0))

@nnx.jit
def branch(model):
  return 1 if model.flag[...] > 0 else 0

try:
  branch(Model())
except Exception as e:
  print(type(e).__name__, str(e).replace(__file__, "<file>"))
'''


def test_nnx_program_prints_jax_output(tmp_path):
  prog = tmp_path / "nnx_prog.py"
  prog.write_text(textwrap.dedent(PROGRAM))
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONHASHSEED="0",
             XLA_FLAGS=without_fast_flags(os.environ.get("XLA_FLAGS", "")))
  env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(HERE)] + (
      [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  procs = [subprocess.Popen([sys.executable, *argv, str(prog)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
           for argv in ([], ["-m", "stagecraft", "run"])]
  outs = []
  for p in procs:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    outs.append(out)
  want, got = outs
  assert "TracerBoolConversionError" in want and "scan:" in want
  assert got == want
