"""numpyro second pass: patterns from numpyro's examples and notebooks, run under JAX and
under stagecraft (`python -m stagecraft run` serves `import jax` from stagecraft through
`stagecraft.compat`) and compared. numpyro is not a test dependency: each test reproduces the
pattern in plain JAX code."""
from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import jax.test_util  # noqa: F401
import pytest

import stagecraft
import stagecraft.test_util  # noqa: F401
from stagecraft import compat


def _missing_attribute_texts(jax_mod):
  """The AttributeError texts of missing attributes of `jax`'s modules, as a program sees
  them (numpyro's truncated_distributions notebook reads `jax.experimental.host_callback`,
  which JAX 0.10.2 no longer has)."""
  import jax.experimental   # noqa: F401  (under compat: the served module)
  import jax.numpy
  out = []
  for path, attr in [("", "foo"), ("experimental", "host_callback"), ("numpy", "foo"),
                     ("lax", "foo"), ("random", "nope"), ("nn", "foo"),
                     ("scipy", "foo"), ("tree_util", "foo")]:
    m = jax_mod
    for part in filter(None, path.split(".")):
      m = getattr(m, part)
    with pytest.raises(AttributeError) as e:
      getattr(m, attr)
    out.append(str(e.value))
    assert not hasattr(m, attr)
  return out


def test_missing_module_attribute_names_the_jax_module(installed):
  import jax as served
  assert served is stagecraft
  texts = _missing_attribute_texts(served)
  compat.uninstall()
  assert texts == _missing_attribute_texts(jax)
  assert texts[1] == "module 'jax.experimental' has no attribute 'host_callback'"


def test_missing_module_attribute_after_uninstall_names_stagecraft(installed):
  import jax as served
  served.experimental.io_callback  # a real name still resolves while installed
  assert served.experimental.shard_map.__name__ == "stagecraft.experimental.shard_map"
  compat.uninstall()
  for m, text in [(stagecraft, "module 'stagecraft' has no attribute 'foo'"),
                  (stagecraft.numpy, "module 'stagecraft.numpy' has no attribute 'foo'"),
                  (stagecraft.experimental,
                   "module 'stagecraft.experimental' has no attribute 'foo'")]:
    with pytest.raises(AttributeError, match=f"^{text}$"):
      m.foo
  assert "__getattr__" not in vars(stagecraft.numpy)
  assert stagecraft.experimental.shard_map.__name__ == "stagecraft.experimental.shard_map"


class _Frame:
  """A stand-in for an object that is not array-like (numpyro's effect_handlers notebook
  converts a pandas column, `jnp.array(df["email"].values, dtype=jnp.float32)`)."""

  def __getitem__(self, k):
    return _Frame()

  def __iter__(self):
    return iter(())


def _conversions(jnp_mod):
  out = []
  for obj in [_Frame(), object(), "1.5", "abc", ["1", "2.5"], [1, "2"], ["1", None], None,
              b"12", [1, _Frame()]]:
    for kw in [{}, {"dtype": jnp_mod.float32}, {"dtype": jnp_mod.int32}]:
      try:
        r = jnp_mod.array(obj, **kw)
        out.append(("ok", str(r.dtype), r.shape, r.tolist(), r.weak_type))
      except Exception as e:   # noqa: BLE001  (the exception is what is compared)
        out.append((type(e).__name__, str(e).split(" at 0x")[0]))
  return out


def test_array_of_non_numeric_data_with_dtype_converts_as_numpy():
  got = _conversions(stagecraft.numpy)
  assert got == _conversions(jnp)
  assert ("ok", "float32", (), 1.5, False) in got
  assert ("ValueError", "could not convert string to float: 'abc'") in got


def _log1mexp(x):
  """numpyro.distributions.util.log1mexp's pattern: log(1 - exp(x)) for x < 0."""
  return jnp.where(x > -0.6931472, jnp.log(-jnp.expm1(x)), jnp.log1p(-jnp.exp(x)))


@pytest.mark.parametrize("x", [-0.32523, -0.5, -8.032])
def test_check_grads_tolerance_follows_the_compared_dtypes(x):
  """check_grads of a float32 function at a Python float (numpyro's test_log1mexp_grads):
  JAX compares each leaf with its dtype's tolerance (float32: 2e-3), not float64's."""
  jax.test_util.check_grads(_log1mexp, (x,), order=3)
  stagecraft.test_util.check_grads(_sc_log1mexp, (x,), order=3)


def _sc_log1mexp(x):
  snp = stagecraft.numpy
  return snp.where(x > -0.6931472, snp.log(-snp.expm1(x)), snp.log1p(-snp.exp(x)))


def _check_grads_outcome(test_util, f, args, **kw):
  try:
    test_util.check_grads(f, args, **kw)
    return "ok"
  except AssertionError:
    return "AssertionError"


def test_check_grads_tolerances_match_jax():
  snp = stagecraft.numpy
  cases = [  # (function under JAX, the same under stagecraft, args, kwargs)
      (lambda x: jnp.sin(x) * 1.0001 ** jnp.floor(x * 1e4),
       lambda x: snp.sin(x) * 1.0001 ** snp.floor(x * 1e4), (0.3,), {"order": 1}),
      (jnp.tanh, snp.tanh, (0.7,), {"order": 2}),
      (lambda x: jnp.sum(jnp.sin(x)), lambda x: snp.sum(snp.sin(x)),
       (jnp.linspace(0.0, 1.0, 5),), {"order": 1, "atol": 1e-9, "rtol": 1e-9}),
  ]
  for fj, fs, args, kw in cases:
    sargs = tuple(stagecraft.numpy.asarray(a) if hasattr(a, "shape") else a for a in args)
    assert (_check_grads_outcome(stagecraft.test_util, fs, sargs, **kw)
            == _check_grads_outcome(jax.test_util, fj, args, **kw)), (args, kw)
