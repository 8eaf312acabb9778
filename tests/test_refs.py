"""`stagecraft.Ref` (JAX's `jax.Ref`, made by `new_ref`): eager refs, refs made inside a
traced function (discharged as they are traced, so they work under jit, grad, vmap and in
scan bodies), and the clear errors for what stagecraft does not do (an eager ref read or
written inside a staged function that is not a jit). JAX is the oracle; refs at jit
boundaries are tested in tests/test_refs_jit.py."""
from __future__ import annotations

import jax
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp


def _local_sin(lib):
  def g(x):
    ref = lib.new_ref(0.)
    ref[...] = lib.numpy.sin(x)
    return ref[...]
  return g


def _local_updates(lib):
  def h(x):
    ref = lib.new_ref(lib.numpy.zeros(3))
    ref[1] = x
    ref[...] = ref[...] * 2
    ref[2] = ref[1] + 1.
    return ref[...]
  return h


def _scan_reads(lib):
  def s(x):
    ref = lib.new_ref(x)
    return lib.lax.scan(lambda c, y: (c + ref[...] * y, None), 0., lib.numpy.arange(3.))[0]
  return s


@pytest.mark.parametrize("how", ["grad", "jit", "vmap", "jit_updates", "vmap_updates",
                                 "grad_updates", "scan_reads"])
def test_local_refs_as_jax(how):
  def run(lib):
    if how == "grad":
      out = lib.grad(_local_sin(lib))(1.)
    elif how == "jit":
      out = lib.jit(_local_sin(lib))(1.)
    elif how == "vmap":
      out = lib.vmap(_local_sin(lib))(lib.numpy.arange(3.))
    elif how == "jit_updates":
      out = lib.jit(_local_updates(lib))(3.)
    elif how == "vmap_updates":
      out = lib.vmap(lib.jit(_local_updates(lib)))(lib.numpy.arange(2.))
    elif how == "grad_updates":
      out = lib.grad(lambda x: _local_updates(lib)(x).sum())(1.)
    else:
      out = lib.jit(_scan_reads(lib))(2.)
    return np.asarray(out).tolist()
  np.testing.assert_allclose(run(sc), run(jax), rtol=1e-6)


def test_eager_ref_outside_transformations():
  r = sc.new_ref(jnp.arange(3.))
  r[1] = 5.
  assert np.asarray(r[...]).tolist() == [0., 5., 2.]
  # eager grad reads an eager ref as the constant it is
  assert float(sc.grad(lambda x: (x * r[...]).sum())(1.)) == 7.
  assert repr(r) == "Ref([0., 5., 2.], dtype=float32)"


def test_eager_ref_inside_staging_is_refused_not_baked():
  # under jit an eager ref is an input and an output (tests/test_refs_jit.py); where no jit
  # can take it (make_jaxpr), it is refused rather than baked in.
  r = sc.new_ref(jnp.zeros(3))
  assert float(sc.jit(lambda x: x + r[...])(1.)[0]) == 1.
  with pytest.raises(NotImplementedError, match=r"make_jaxpr"):
    sc.make_jaxpr(lambda x: x + r[...])(1.)
  with pytest.raises(NotImplementedError, match="eager"):
    sc.make_jaxpr(lambda x: r.__setitem__(0, x))(1.)
  # a differentiated value written into a ref the function closes over: JAX's error
  msgs = []
  for L, ref in [(jax, jax.new_ref(jax.numpy.zeros(3))), (sc, r)]:
    with pytest.raises(Exception, match="differentiated value") as e:
      L.grad(lambda x: ref.__setitem__(0, x) or x)(1.)
    msgs.append(str(e.value).splitlines()[0])
  assert msgs[0] == msgs[1]


def test_nested_write_into_a_local_ref_matches_jax():
  import jax
  import jax.numpy as jjnp
  outs = []
  for L, N in [(jax, jjnp), (sc, jnp)]:
    def w(x):
      ref = L.new_ref(x)

      def body(c, y):
        ref[...] = c + y
        return c + 1., None
      return L.lax.scan(body, 0., N.arange(3.))[0], ref[...]
    outs.append([float(v) for v in L.jit(w)(2.)])
  assert outs[1] == outs[0] == [3., 4.]


def test_new_ref_options_are_refused():
  with pytest.raises(NotImplementedError, match="memory_space"):
    sc.new_ref(1., memory_space="host")
