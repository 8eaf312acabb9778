"""Details found by running JAX 0.10.2's own test files (`fft_test.py`, `lax_control_flow_test.py`,
`linalg_test.py`, ...) on stagecraft through a scratch harness. JAX is the oracle in each test."""
import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp


def _message(fn):
  try:
    fn()
  except Exception as e:  # noqa: BLE001 -- the exception is what is compared
    return type(e), str(e)
  raise AssertionError("no exception raised")


def _same_error(ours, theirs):
  t1, m1 = _message(ours)
  t2, m2 = _message(theirs)
  assert t1.__name__ == t2.__name__, (t1, t2)
  assert m1 == m2


# -- jax.numpy.fft: the messages name jax.numpy.fft.<name>, axes shown as given -------------

@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
def test_fftn_repeated_axes_message_as_jax(name):
  x = np.ones((2, 3), np.float32)
  _same_error(lambda: getattr(jnp.fft, name)(x, axes=[1, 1]),
              lambda: getattr(jax.numpy.fft, name)(x, axes=[1, 1]))
  _same_error(lambda: getattr(jnp.fft, name)(x, axes=(0, 0)),
              lambda: getattr(jax.numpy.fft, name)(x, axes=(0, 0)))


@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
def test_fft_axis_message_as_jax(name):
  x = np.ones((2, 3), np.float32)
  _same_error(lambda: getattr(jnp.fft, name)(x, axis=(0, 1)),
              lambda: getattr(jax.numpy.fft, name)(x, axis=(0, 1)))


@pytest.mark.parametrize("name", ["fft2", "ifft2", "rfft2", "irfft2"])
def test_fft2_axes_message_as_jax(name):
  x = np.ones((2, 3, 4), np.float32)
  _same_error(lambda: getattr(jnp.fft, name)(x, axes=(0, 1, 2)),
              lambda: getattr(jax.numpy.fft, name)(x, axes=(0, 1, 2)))


@pytest.mark.parametrize("name", ["fftfreq", "rfftfreq"])
def test_fftfreq_messages_as_jax(name):
  _same_error(lambda: getattr(jnp.fft, name)(n=[0, 1, 2]),
              lambda: getattr(jax.numpy.fft, name)(n=[0, 1, 2]))
  _same_error(lambda: getattr(jnp.fft, name)(n=4, d=[1, 2]),
              lambda: getattr(jax.numpy.fft, name)(n=4, d=[1, 2]))


def test_promote_dtypes_complex_as_jax():
  from jax._src.numpy.util import promote_dtypes_complex as theirs

  from stagecraft.numpy.util import promote_dtypes_complex as ours
  for args in [(np.ones(2, np.int8),), (np.ones(3, np.float32),), (np.ones(2, np.float16),),
               (np.ones(2, np.complex64), np.ones(2, np.float32)), (np.ones(2, np.int16),
                                                                   np.ones(2, np.float16))]:
    got, want = ours(*args), theirs(*args)
    assert [g.dtype for g in got] == [w.dtype for w in want]
    assert [getattr(g, "weak_type", False) for g in got] == \
        [getattr(w, "weak_type", False) for w in want]
