"""The caches of the lowering's hot path give JAX's texts: literal constants' texts cached
by value (0.0 and -0.0 are equal but differ in bits) and the source locations' texts cached
by code object (two functions of the same code from two files, equal code objects, are two
places), each compared with JAX's text of the same program."""
import jax
import jax.numpy as jjnp
import numpy as np

import stagecraft as sc
import stagecraft.numpy as jnp

LIBS = ((jax, jjnp), (sc, jnp))


def _literals(x, i):
  # NB: each value once: JAX writes a constant per use of a literal, stagecraft one per
  # value and region (docs/differences.md, "Lowering is text")
  return (x * 2.5, x + np.float32(7.0), i * -1, i + 3, x * float("nan"), x * True, i * 0,
          i * np.int32(-2), x - np.float64(3.5))


def test_literal_constants_are_jaxs():
  x, i = np.ones(3, np.float32), np.ones(3, np.int32)
  for _ in range(2):   # NB: the second time from the cache
    theirs, ours = [lib.jit(_literals).lower(x, i) for lib, _ in LIBS]
    text = ours.as_text()
    assert text == theirs.as_text()
    assert "dense<0x7FC00000>" in text and "dense<-1>" in text and "dense<2.500000e+00>" in text


def test_zero_and_negative_zero_literals_keep_their_bits():
  # NB: 0.0 == -0.0 (one hash), so a cache keyed by value alone would give the second
  # program the first one's constant
  x = np.ones(3, np.float32)
  for sign in (1.0, -1.0, 1.0, -1.0):
    for make in (lambda: lambda x: x * (sign * 0.0), lambda: lambda x: x * np.float32(sign * 0.0),
                 lambda: lambda x: x + np.float64(sign * 0.0)):
      theirs, ours = [lib.jit(make()).lower(x) for lib, _ in LIBS]
      text = ours.as_text()
      assert text == theirs.as_text()
      assert ("dense<-0.000000e+00>" in text) == (sign < 0)
      assert ("dense<0.000000e+00>" in text) == (sign > 0)


_SOURCE = "def f(x):\n  return np_.sin(x) * 2\n"


def _from_file(np_, filename):
  """`f` compiled from `_SOURCE` as the file `filename`: the same code in every file (its
  code object equals the others', though its file differs)."""
  scope = {"np_": np_}
  exec(compile(_SOURCE, filename, "exec"), scope)
  return scope["f"]


def test_same_code_in_two_files_located_in_each(tmp_path):
  x = np.ones(3, np.float32)
  files = [str(tmp_path / "first.py"), str(tmp_path / "second.py")]
  for name in files + files[::-1]:
    theirs, ours = [lib.jit(_from_file(np_, name)).lower(x) for lib, np_ in LIBS]
    text = ours.as_text(debug_info=True)
    assert text == theirs.as_text(debug_info=True)
    assert f'"{name}":2:9' in text
    assert [f for f in files if f != name][0] not in text
    assert ours.as_text() == theirs.as_text()
    # the compiled HLO's stack frames name the file too
    assert name in ours.compile().as_text()


def test_same_code_in_two_files_in_printed_source_info(tmp_path):
  files = [str(tmp_path / "first.py"), str(tmp_path / "second.py")]
  for name in files + files[::-1]:
    theirs, ours = [lib.make_jaxpr(_from_file(np_, name))(1.0) for lib, np_ in LIBS]
    text = ours.pretty_print(source_info=True)
    assert text == theirs.pretty_print(source_info=True)
    assert f"{name}:2" in text


def test_two_lines_of_one_function_located_apart():
  def make(np_):
    def f(x):
      a = np_.sin(x)
      b = np_.sin(a)
      return b
    return f
  theirs, ours = [lib.jit(make(np_)).lower(1.0) for lib, np_ in LIBS]
  text = ours.as_text(debug_info=True)
  assert text == theirs.as_text(debug_info=True)
  lines = {ln.split(":")[1] for ln in text.splitlines() if "test_lowerspeed.py" in ln
           and "#loc" in ln and "to :" in ln}
  assert len(lines) >= 2
