"""jax.numpy's parameter names and kinds as JAX 0.10.2's: libraries pass them by keyword
(flax's attention calls `jnp.broadcast_to(array=...)`), so each public function of
`stagecraft.numpy` takes every parameter JAX's does, under the same name and kind; and the
keywords added for that behave as JAX's (`device=`, `out_sharding=`, `out=`)."""
from __future__ import annotations

import inspect

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp

_P = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _params(f, kinds):
  return [p.name for p in inspect.signature(f).parameters.values() if p.kind in kinds]


def _mismatches(jmod, smod):
  out = []
  for name in dir(jmod):
    f, g = getattr(jmod, name), getattr(smod, name, None)
    if (name.startswith("_") or g is None or not callable(f) or isinstance(f, type)
        or inspect.ismodule(f)):
      continue
    try:
      inspect.signature(f), inspect.signature(g)
    except (TypeError, ValueError):
      continue
    missing = [p for p in _params(f, _P) if p not in _params(g, _P)]
    pos = (inspect.Parameter.POSITIONAL_OR_KEYWORD,)
    jpos, spos = _params(f, pos), _params(g, pos)
    if missing or spos[:len(jpos)] != jpos:
      out.append((name, missing, jpos, spos))
  return out


@pytest.mark.parametrize("mod", ["numpy", "numpy.fft", "numpy.linalg"])
def test_every_jax_parameter_is_taken_by_name(mod):
  import importlib
  jmod = importlib.import_module(f"jax.{mod}")
  smod = importlib.import_module(f"stagecraft.{mod}")
  assert _mismatches(jmod, smod) == []


def _kw_calls(api, np_):
  x = np_.array([1.5, -2.0, np_.inf, -np_.inf])
  i = np_.array([12, 18])
  return [
      np_.broadcast_to(array=np_.arange(3), shape=(2, 3)),
      np_.fmax(x1=x, x2=1.0), np_.fmin(x1=x, x2=1.0),
      np_.gcd(x1=i, x2=8), np_.lcm(x1=i, x2=8),
      np_.i0(x=np_.array([0.5, 1.0])), np_.iscomplex(x=x), np_.isreal(x=x),
      np_.isneginf(x, out=None), np_.isposinf(x, out=None), *np_.modf(x[:2], out=None),
      np_.ravel(np_.ones((2, 3)), out_sharding=None),
      np_.repeat(np_.arange(3), 2, out_sharding=None),
      np_.astype(np_.arange(3), np_.float32, device=api.devices()[1]),
      np_.empty_like(np_.ones(2), device=api.devices()[1]) * 0,
      np_.eye(2, device=api.devices()[1]),
      np_.fft.fftfreq(4, device=api.devices()[1]),
      np_.fft.rfftfreq(4, device=api.devices()[1]),
      np_.permute_dims(np_.ones((2, 3)), axes=(1, 0)),
  ]


def test_keywords_give_jax_s_values_and_placements():
  ours, theirs = _kw_calls(sc, snp), _kw_calls(jax, jjnp)
  for a, b in zip(ours, theirs):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.weak_type == b.weak_type
  placed = [(sorted(d.id for d in a.devices()), a.committed) for a in ours[-6:-1]]
  assert placed == [(sorted(d.id for d in b.devices()), b.committed) for b in theirs[-6:-1]]
  assert placed == [([1], True)] * 5


@pytest.mark.parametrize("name", ["isneginf", "isposinf", "modf"])
def test_out_argument_raises_jax_s_error(name):
  msgs = []
  for np_ in (jjnp, snp):
    with pytest.raises(NotImplementedError) as e:
      getattr(np_, name)(np_.ones(2), out=np_.ones(2))
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]


def test_out_sharding_of_ravel_and_repeat_on_an_explicit_mesh():
  got = []
  for api, np_ in ((jax, jjnp), (sc, snp)):
    mesh = api.make_mesh((2,), ("x",), axis_types=(api.sharding.AxisType.Explicit,))
    with api.set_mesh(mesh):
      a = api.device_put(np_.arange(8.0).reshape(4, 2), api.P("x", None))
      r = api.jit(lambda a: np_.ravel(a, out_sharding=api.P("x")))(a)
      t = api.jit(lambda a: np_.repeat(a, 2, axis=0, out_sharding=api.P("x", None)))(a)
      got.append([(np.asarray(v).tolist(), str(api.typeof(v)), tuple(v.sharding.spec))
                  for v in (r, t)])
  assert got[0] == got[1]


def test_array_methods_take_jax_s_parameters():
  """Every method of JAX's Array exists on stagecraft's and takes JAX's parameters."""
  a, b = jjnp.ones((2, 2)), snp.ones((2, 2))
  missing, params = [], []
  for name in dir(a):
    if name.startswith("_") or name in ("flat", "traceback"):   # flat raises; traceback:
      continue                                                  # JAX's dispatch frames
    if hasattr(a, name) and not hasattr(b, name):   # NB: deprecated names raise in both
      missing.append(name)
      continue
    if not hasattr(a, name):
      continue
    f, g = getattr(a, name), getattr(b, name)
    try:
      lost = [p for p in _params(f, _P) if p not in _params(g, _P)]
    except (TypeError, ValueError):
      continue
    has_kwargs = any(p.kind == p.VAR_KEYWORD for p in inspect.signature(g).parameters.values())
    if lost and not has_kwargs:
      params.append((name, lost))
  assert (missing, params) == ([], [])


def _array_method_values(api, np_):
  a = np_.arange(8.0)
  mesh = api.make_mesh((4,), ("x",))
  split = api.device_put(a, api.sharding.NamedSharding(mesh, api.P("x")))
  repl = api.device_put(a, api.sharding.NamedSharding(mesh, api.P()))
  c = a.clone()
  msgs = []
  for name in ("device_buffer", "device_buffers"):
    with pytest.raises(AttributeError) as e:
      getattr(a, name)
    msgs.append(str(e.value))
  return (np.asarray(c).tolist(), c is a, a.on_device_size_in_bytes(),
          split.on_device_size_in_bytes(), repl.on_device_size_in_bytes(), a.platform(),
          np.asarray(a.reshape(2, 4, out_sharding=None)).tolist(), msgs)


def test_array_clone_size_platform_and_deprecated_buffers():
  assert _array_method_values(sc, snp) == _array_method_values(jax, jjnp)
