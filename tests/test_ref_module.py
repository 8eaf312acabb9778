"""`stagecraft.ref` against `jax.ref`: the same names, and get/set/swap/addupdate/free_ref
giving the same values and errors."""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import jax.ref
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import ref as sref


def test_names_are_jax_refs():
  theirs = {n for n in dir(jax.ref) if not n.startswith("_")}
  assert set(sref.__all__) == theirs
  assert sc.ref is sref


@pytest.mark.parametrize("jitted", [False, True])
def test_functional_forms_equal_jax(jitted):
  def prog(lib, np_, R):
    r = lib.new_ref(np_.arange(5.0))
    def body(r):
      old = R.swap(r, 0, 7.0)
      R.addupdate(r, 1, 10.0)
      R.set(r, 2, old + 1.0)
      R.addupdate(r, None, np_.ones(5))
      return R.get(r, 3), R.get(r)
    out = (lib.jit(body) if jitted else body)(r)
    return [np.asarray(o) for o in out] + [np.asarray(r[...])]
  ours, theirs = prog(sc, snp, sref), prog(jax, jjnp, jax.ref)
  for a, b in zip(ours, theirs):
    np.testing.assert_array_equal(a, b)
    assert a.dtype == b.dtype


def test_errors_and_free():
  r = sref.new_ref(snp.zeros(3))
  with pytest.raises(ValueError, match="Invalid shape for `swap`"):
    sref.set(r, None, snp.zeros(4))
  for R, lib, np_ in ((sref, sc, snp), (jax.ref, jax, jjnp)):
    with pytest.raises(ValueError, match=r"Invalid shape for `addupdate`. Ref shape: \(3,\)"):
      R.addupdate(lib.new_ref(np_.zeros(3)), None, 1.0)
  with pytest.raises(TypeError, match="expected a Ref"):
    sref.get(np.zeros(3))
  assert isinstance(sc.typeof(r), sref.AbstractRef)
  e = sref.empty_ref(sc.ShapeDtypeStruct((2, 3), snp.int32))
  assert e.shape == (2, 3) and e.dtype == np.int32
  sref.free_ref(e)
  with pytest.raises(ValueError, match="frozen"):
    e[...]
