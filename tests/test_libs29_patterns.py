"""Patterns from mujoco-mjx, ott-jax, dynamax, netket and kfac-jax (their own test suites and
small programs) that differed under stagecraft, each run in plain JAX code on JAX and on
stagecraft in the same test and compared. The libraries themselves are not in the `test`
extra."""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.interpreters import batching as jbatching

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft.interpreters import batching as sbatching

APIS = {"jax": (jax, jjnp, jbatching), "stagecraft": (sc, snp, sbatching)}


@pytest.mark.parametrize("api", list(APIS))
def test_register_vmappable_at_import_time(api):
  # mujoco.mjx's warp types module calls batching.register_vmappable(DataWarp, int, int,
  # to_elt, from_elt, None) when `from mujoco import mjx` runs: stagecraft raised there.
  lib, np_, batching = APIS[api]

  class Blob:   # a fresh type: registering it touches nothing else
    def __init__(self, x):
      self.x = x

  def to_elt(cont, get_idx, b, spec):
    return Blob(cont(b.x, spec))

  def from_elt(cont, size, b, spec):
    return Blob(cont(size, b.x, spec))

  assert batching.register_vmappable(Blob, int, int, to_elt, from_elt, None) is None
  if api == "stagecraft":   # (JAX keeps these in jax._src.interpreters.batching)
    assert Blob in batching.vmappables and int in batching.spec_types
  # JAX's public module has no is_vmappable (ott-jax reads it; its tests then fail on both).
  with pytest.raises(AttributeError, match="has no attribute 'is_vmappable'"):
    batching.is_vmappable   # noqa: B018
  # Ordinary vmaps are unaffected by the registration.
  x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
  out = lib.vmap(lambda r: np_.sin(r) * 2.0)(x)
  np.testing.assert_allclose(np.asarray(out), np.sin(x) * 2.0, rtol=1e-6)
  assert batching.unregister_vmappable(Blob) is None


def test_vmap_over_registered_vmappable_raises_on_stagecraft():
  # JAX runs the handlers; stagecraft does not (docs/differences.md): it says so at the call.
  class Blob2:
    def __init__(self, x):
      self.x = x

  sbatching.register_vmappable(Blob2, int, int, None, None, None)
  with pytest.raises(NotImplementedError, match="Blob2 was registered with register_vmappable"):
    sc.vmap(lambda b: b.x)(Blob2(np.ones(3, np.float32)))
  # A pytree that does not hold one still maps.
  out = sc.vmap(lambda t: t[0] + t[1])((np.ones(3, np.float32), np.arange(3.0, dtype=np.float32)))
  np.testing.assert_array_equal(np.asarray(out), np.arange(3.0) + 1)


@pytest.mark.parametrize("api", list(APIS))
def test_tracers_are_weakly_referenceable(api):
  # TensorFlow Probability's bijector cache (dynamax's MVN sampling) wraps each traced value
  # in a weakref: stagecraft's tracers had no __weakref__ slot (TypeError).
  import weakref
  lib, np_, _ = APIS[api]
  seen = []

  def f(x):
    r = weakref.ref(x)
    seen.append(r() is x)
    return np_.sin(x) * 2.0

  x = np.float32(0.5)
  outs = [lib.jit(f)(x), lib.grad(f)(x), lib.vmap(f)(np.ones(2, np.float32)),
          lib.jvp(f, (x,), (np.float32(1.0),))[1]]
  assert seen == [True] * 4
  ref = [np.sin(0.5) * 2.0, np.cos(0.5) * 2.0, np.sin(np.ones(2)) * 2.0, np.cos(0.5) * 2.0]
  for o, r in zip(outs, ref):
    np.testing.assert_allclose(np.asarray(o), r, rtol=1e-6)


def _primitive_subclass_jaxpr(api):
  # kfac-jax's LossTag subclasses jax.extend.core.Primitive and defines `impl` and
  # `abstract_eval` as methods (the latter returning (avals, effects)); stagecraft's
  # Primitive.__init__ hid them behind instance attributes ("Abstract evaluation ... not
  # implemented").
  import importlib
  lib, np_, _ = APIS[api]
  ext_core = importlib.import_module(("jax" if api == "jax" else "stagecraft") + ".extend.core")

  class Tag(ext_core.Primitive):
    multiple_results = True

    def __init__(self):
      super().__init__("my_tag")

    def impl(self, *args, **params):
      return list(args)

    def abstract_eval(self, *args, **params):
      return list(args), ext_core.no_effects if hasattr(ext_core, "no_effects") else set()

  tag = Tag()

  def f(x):
    y, = tag.bind(np_.sin(x))
    return y * 2.0

  text = str(lib.make_jaxpr(f)(np.float32(1.0)))
  assert "my_tag" in text and "sin" in text
  out = tag.bind(np.float32(0.5), np.float32(1.5))
  np.testing.assert_allclose([np.asarray(o) for o in out], [0.5, 1.5])
  return text


def test_primitive_subclass_with_impl_and_abstract_eval_methods():
  texts = [_primitive_subclass_jaxpr(a) for a in APIS]
  assert texts[0] == texts[1]


def test_core_gensym_deprecated_alias():
  # kfac-jax's tag graph matcher reads jax.core.gensym (JAX 0.10.2 keeps it, deprecated).
  import jax.core as jcore
  import stagecraft.core as score
  msgs = []
  for mod, aval in ((jcore, jcore.ShapedArray((2,), np.float32)),
                    (score, score.ShapedArray((2,), np.dtype(np.float32)))):
    with pytest.warns(DeprecationWarning) as rec:
      g = mod.gensym
    msgs.append(str(rec[0].message))
    v = g()(aval)
    assert (v.aval.shape, v.aval.dtype) == ((2,), np.float32)
  assert msgs[0] == msgs[1]
  with pytest.raises(AttributeError, match="has no attribute 'not_a_name'"):
    score.not_a_name   # noqa: B018
