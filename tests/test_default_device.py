"""`default_device` (JAX's `jax.default_device` context manager and `jax_default_device`
option): where uncommitted computations and transfers go, compared with JAX."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp


def _ids(x):
  return sorted(d.id for d in x.devices())


def _placements(lib, np_):
  x = np.arange(3.0, dtype=np.float32)
  return [_ids(np_.ones(3)), _ids(np_.asarray(x) + 1), _ids(lib.jit(lambda a: a * 2)(x)),
          _ids(lib.device_put(x)), _ids(lib.random.normal(lib.random.key(0), (2,)))]


@pytest.mark.skipif(len(jax.devices()) < 3, reason="needs 3 CPU devices (tests/conftest.py)")
def test_context_manager_places_uncommitted_work_as_jax():
  got, want = [], []
  for lib, np_, out in ((sc, snp, got), (jax, jnp, want)):
    out.append(_placements(lib, np_))
    with lib.default_device(lib.devices()[2]):
      out.append(_placements(lib, np_))
      assert lib.config.jax_default_device == lib.devices()[2]
    out.append(_placements(lib, np_))   # the same eager op again: back on device 0
  assert got == want
  assert got[1] == [[2]] * 5 and got[2] == [[0]] * 5


@pytest.mark.skipif(len(jax.devices()) < 2, reason="needs 2 CPU devices (tests/conftest.py)")
def test_config_option_accepts_a_device_a_platform_name_or_none():
  try:
    sc.config.update("jax_default_device", sc.devices()[1])
    assert _ids(snp.ones(2)) == [1]
    sc.config.update("jax_default_device", "cpu")
    assert _ids(snp.ones(2)) == [0]
  finally:
    sc.config.update("jax_default_device", None)
  assert sc.config.jax_default_device is None and _ids(snp.ones(2)) == [0]


@pytest.mark.parametrize("bad", [3, 1.5, object()])
def test_bad_value_raises_jax_error(bad):
  msgs = []
  for lib in (sc, jax):
    with pytest.raises(ValueError) as e:
      lib.config.update("jax_default_device", bad)
    msgs.append(str(e.value).split(", got")[0])
  assert msgs[0] == msgs[1]
  assert sc.config.jax_default_device is None


def test_top_level_name_is_the_option_state():
  assert sc.default_device.value is None
  assert "jax_default_device" in repr(sc.default_device)
