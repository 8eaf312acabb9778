"""`debug.breakpoint` opens jdb as JAX's does: the same session (commands read from `stdin=`,
output to `stdout=`) prints the same text under JAX and stagecraft, with the runtime values
of the traced locals of each frame."""
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import debugger


def _session(api, np_, transform, commands, arg, **bp_kwargs):
  """The text jdb prints for `commands` at a breakpoint in `f` under `transform`."""
  out = io.StringIO()

  def f(x):
    y, z = np_.sin(x), np_.cos(x)
    scale = 3   # a Python value stays one
    api.debug.breakpoint(stdin=io.StringIO(commands), stdout=out, num_frames=2, **bp_kwargs)
    return y * z * scale

  result = transform(api, f)(arg)
  return out.getvalue(), np.asarray(result)


_TRANSFORMS = {
    "jit": lambda api, f: api.jit(f),
    "eager": lambda api, f: f,
    "grad": lambda api, f: api.grad(f),
    "vmap": lambda api, f: api.vmap(f),
    "jit_of_grad": lambda api, f: api.jit(api.grad(f)),
}

_COMMANDS = ("p y\npp (y, z)\nx + 1\nscale * 2\nnot_defined\np 1/0\nl\nu\nu\nd\nd\nw\n"
             "help p\nc\n")


@pytest.mark.parametrize("name", sorted(_TRANSFORMS))
def test_session_prints_as_jax(name):
  arg = np.arange(2, dtype=np.float32) if name == "vmap" else 2.0
  commands = _COMMANDS * 2 if name == "vmap" else _COMMANDS   # vmap: one stop per example
  theirs, their_result = _session(jax, jnp, _TRANSFORMS[name], commands, arg)
  ours, our_result = _session(sc, snp, _TRANSFORMS[name], commands, arg)
  assert ours == theirs
  np.testing.assert_array_equal(our_result, their_result)
  assert "Entering jdb:" in ours and "(jdb) " in ours


def test_runtime_values_of_traced_locals():
  out, _ = _session(sc, snp, _TRANSFORMS["jit"], "p y\np scale\nc\n", 2.0)
  lines = out.splitlines()
  assert lines[0] == "Entering jdb:"
  assert lines[1] == f"(jdb) {sc.numpy.sin(2.0).astype(np.float32)!r}".replace(
      ", weak_type=True", "")   # values a compiled program hands over have no weak type
  assert lines[2] == "(jdb) 3"


def test_quit_stops_the_program_not_the_process():
  def f(x):
    sc.debug.breakpoint(stdin=io.StringIO("q\n"), stdout=io.StringIO())
    return x + 1

  with pytest.raises(sc.errors.JaxRuntimeError, match="SystemExit"):
    sc.jit(f)(1.0)
  assert float(sc.jit(lambda x: x * 2)(2.0)) == 4.0   # the runtime stays usable
  # end of input quits too, as JAX's jdb
  def g(x):
    sc.debug.breakpoint(stdin=io.StringIO(""), stdout=io.StringIO())
    return x
  with pytest.raises(sc.errors.JaxRuntimeError, match="SystemExit"):
    sc.jit(g)(1.0)


def test_token_orders_the_breakpoint_and_is_returned():
  out = io.StringIO()

  def f(x):
    y = snp.sin(x)
    y = sc.debug.breakpoint(token=y, stdin=io.StringIO("p y\nc\n"), stdout=out, num_frames=1)
    return y * 2

  np.testing.assert_allclose(np.asarray(sc.jit(f)(1.0)), 2 * np.sin(1.0), rtol=1e-6)
  assert out.getvalue().splitlines()[1] == "(jdb) Array(0.84147096, dtype=float32)"
  with pytest.raises(ValueError, match="mutually exclusive"):
    sc.debug.breakpoint(token=snp.ones(2), ordered=True)


def test_frames_are_the_users():
  frames, traced, rebuild = debugger.capture_frames(0, num_frames=1)
  assert frames[0].filename == __file__ and traced == []
  assert frames[0].source[frames[0].offset].strip().startswith("frames, traced, rebuild")
  assert rebuild([])[0].locals.keys() == frames[0].locals.keys()
