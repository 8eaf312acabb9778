"""debug.visualize_sharding / visualize_array_sharding print JAX's table (JAX is the oracle:
the same shapes and shardings over a 2x2 mesh of CPU devices, without colour)."""
import jax
import jax.sharding as jsh
import numpy as np
import pytest

import stagecraft
from stagecraft import debug, debug_sharding
from stagecraft.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

CASES = [
    ((8, 8), ("x", "y")), ((8, 8), ("x",)), ((8, 8), (None, "y")), ((8, 8), ("y", "x")),
    ((8, 8), (("x", "y"),)), ((8, 4), ()), ((4, 16), ("x", "y")), ((16, 4), (None, "x")),
    ((8,), ("x",)), ((8,), (("x", "y"),)), ((8,), ()), ((6,), ("y",)), ((2, 2), ("x", "y")),
]


def _meshes():
  devs = stagecraft.devices()
  if len(devs) < 4:
    pytest.skip("needs 4 devices")
  ours = Mesh(np.array(devs[:4]).reshape(2, 2), ("x", "y"))
  theirs = jsh.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
  return ours, theirs


def _printed(capsys, fn) -> str:
  capsys.readouterr()
  fn()
  return capsys.readouterr().out


@pytest.mark.parametrize("shape,spec", CASES)
def test_text_matches_jax(capsys, shape, spec):
  ours, theirs = _meshes()
  got = _printed(capsys, lambda: debug.visualize_sharding(
      shape, NamedSharding(ours, P(*spec)), use_color=False))
  want = _printed(capsys, lambda: jax.debug.visualize_sharding(
      shape, jsh.NamedSharding(theirs, jsh.PartitionSpec(*spec)), use_color=False))
  assert got == want
  assert got.startswith("┌")   # (labels of cells too wide for the console are cut, as in JAX)


@pytest.mark.parametrize("kw", [dict(scale=0.5), dict(scale=2.0), dict(min_width=15),
                                dict(max_width=30), dict(scale=1.5, min_width=4)])
def test_options_match_jax(capsys, kw):
  ours, theirs = _meshes()
  for shape, spec in [((8, 8), ("x", "y")), ((8,), ("x",)), ((4, 8), ("y",))]:
    got = _printed(capsys, lambda: debug.visualize_sharding(
        shape, NamedSharding(ours, P(*spec)), use_color=False, **kw))
    want = _printed(capsys, lambda: jax.debug.visualize_sharding(
        shape, jsh.NamedSharding(theirs, jsh.PartitionSpec(*spec)), use_color=False, **kw))
    assert got == want, (shape, spec, kw)


def test_labels_name_the_devices_of_each_block(capsys):
  ours, _ = _meshes()
  out = _printed(capsys, lambda: debug.visualize_sharding(
      (8, 8), NamedSharding(ours, P("x")), use_color=False))
  lines = [ln for ln in out.splitlines() if "CPU" in ln]
  assert [ln.strip("│ ") for ln in lines] == ["CPU 0,1", "CPU 2,3"]
  out = _printed(capsys, lambda: debug.visualize_sharding(
      (8, 8), NamedSharding(ours, P("x", "y")), use_color=False))
  cells = [c.strip() for ln in out.splitlines() if "CPU" in ln for c in ln.split("│") if c.strip()]
  assert cells == ["CPU 0", "CPU 1", "CPU 2", "CPU 3"]


def test_visualize_array_sharding(capsys):
  ours, theirs = _meshes()
  x = np.arange(64, dtype=np.float32).reshape(8, 8)
  arr = stagecraft.device_put(x, NamedSharding(ours, P("x", "y")))
  jarr = jax.device_put(x, jsh.NamedSharding(theirs, jsh.PartitionSpec("x", "y")))
  got = _printed(capsys, lambda: debug.visualize_array_sharding(arr, use_color=False))
  want = _printed(capsys, lambda: jax.debug.visualize_array_sharding(jarr, use_color=False))
  assert got == want
  one = stagecraft.device_put(np.ones(4, np.float32), stagecraft.devices()[1])
  got = _printed(capsys, lambda: debug.visualize_array_sharding(one, use_color=False))
  want = _printed(capsys, lambda: jax.debug.visualize_sharding(
      (4,), jsh.SingleDeviceSharding(jax.devices()[1]), use_color=False))
  assert got == want and "CPU 1" in got


def test_single_device_sharding(capsys):
  got = _printed(capsys, lambda: debug_sharding.draw(
      (3, 5), SingleDeviceSharding(stagecraft.devices()[0]), use_color=False))
  want = _printed(capsys, lambda: jax.debug.visualize_sharding(
      (3, 5), jsh.SingleDeviceSharding(jax.devices()[0]), use_color=False))
  assert got == want


def test_color_with_a_color_map(capsys, monkeypatch):
  ours, theirs = _meshes()
  calls = []

  def cmap(v):
    calls.append(float(v))
    return (float(v), 0.5, 1 - float(v), 1.0)

  out = _printed(capsys, lambda: debug_sharding.draw(
      (8, 8), NamedSharding(ours, P("x", "y")), use_color=True, color_map=cmap))
  # The captured output is no colour console: boxed cells, and the map is not used.
  assert calls == [] and "┌" in out and "CPU 3" in out
  monkeypatch.setenv("FORCE_COLOR", "1")
  for shape, spec in [((8, 8), ("x", "y")), ((8,), (("x", "y"),)), ((8, 8), ("x",))]:
    got = _printed(capsys, lambda: debug_sharding.draw(
        shape, NamedSharding(ours, P(*spec)), use_color=True, color_map=cmap))
    want = _printed(capsys, lambda: jax.debug.visualize_sharding(
        shape, jsh.NamedSharding(theirs, jsh.PartitionSpec(*spec)), use_color=True,
        color_map=cmap))
    assert got == want and "\x1b[" in got and "┌" not in got
  assert list(debug_sharding._colors(lambda v: v, 4)) == pytest.approx([0, 1, 2 / 3, 1 / 3])
  assert debug_sharding._text_color("#FFFFFF") == "#000000"
  assert debug_sharding._text_color("#101010") == "#ffffff"


def test_blocks():
  ours, _ = _meshes()
  devs, heights, widths = debug_sharding.blocks((8, 4), NamedSharding(ours, P("y")))
  assert devs == {(0, 0): {0, 2}, (1, 0): {1, 3}}
  assert heights == {(0, 0): 0.5, (1, 0): 0.5} and widths == {(0, 0): 1.0, (1, 0): 1.0}


def test_errors():
  ours, _ = _meshes()
  with pytest.raises(ValueError, match="only"):
    debug.visualize_sharding((2, 2, 2), NamedSharding(ours, P()))
  with pytest.raises(ValueError, match="1 and 2 dimensions"):
    debug_sharding.draw((), NamedSharding(ours, P()))
  # As JAX's: a leaf that is no Array has no `.sharding` (JAX names its own wrapper type).
  with pytest.raises(AttributeError, match="has no attribute 'sharding'"):
    jax.debug.visualize_array_sharding(np.ones(3))
  with pytest.raises(AttributeError, match="has no attribute 'sharding'"):
    debug.visualize_array_sharding(np.ones(3))
