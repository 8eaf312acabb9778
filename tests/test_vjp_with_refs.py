"""`jax.ad` and `vjp(...)[1].with_refs`: cotangents added into Refs, not computed
(`DontWant`), or returned (`GradValue`), against JAX 0.10.2 in the same test."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp


def _f(m):
  return lambda x, y: m.sin(x) * y + m.cos(y)


X = np.linspace(-1.0, 2.0, 5, dtype=np.float32)
Y = np.float32(0.7)


def _run(lib, m, dests_fn, jitted=False):
  """Calls with_refs with the destinations `dests_fn(lib, m)` builds (None stands for a
  fresh Ref of the primal's shape filled with ones); returns results and ref contents."""
  out, f_vjp = lib.vjp(_f(m), m.asarray(X), m.asarray(Y))
  dests = dests_fn(lib, m)
  refs = [lib.new_ref(m.ones_like(p)) if d is None else d
          for d, p in zip(dests, (m.asarray(X), m.asarray(Y)))]
  if jitted:   # the refs are arguments, the markers are closed over
    is_ref = [isinstance(r, lib.Ref) for r in refs]
    @lib.jit
    def g(ct, ref_args):
      it = iter(ref_args)
      return f_vjp.with_refs(*[next(it) if k else r for k, r in zip(is_ref, refs)])(ct)
    res = g(m.ones_like(out) * 2, [r for k, r in zip(is_ref, refs) if k])
  else:
    res = f_vjp.with_refs(*refs)(m.ones_like(out) * 2)
  return res, [r[...] if isinstance(r, (lib.Ref,)) else None for r in refs]


DESTS = {
    "ref_dontwant": lambda lib, m: (None, lib.ad.DontWant()),
    "value_dontwant": lambda lib, m: (lib.ad.GradValue(), lib.ad.DontWant()),
    "dontwant_value": lambda lib, m: (lib.ad.DontWant(), lib.ad.GradValue()),
    "ref_ref": lambda lib, m: (None, None),
    "value_value": lambda lib, m: (lib.ad.GradValue(), lib.ad.GradValue()),
}


def _norm(res):
  return [(type(r).__name__, None if type(r).__name__ in ("GradRef", "DidntWant")
           else np.asarray(r)) for r in res]


@pytest.mark.parametrize("jitted", [False, True])
@pytest.mark.parametrize("name", sorted(DESTS))
def test_with_refs_matches_jax(name, jitted):
  res, refs = _run(sc, snp, DESTS[name], jitted)
  jres, jrefs = _run(jax, jnp, DESTS[name], jitted)
  got, want = _norm(res), _norm(jres)
  assert [g[0].replace("ArrayImpl", "Array") for g in got] == \
      [w[0].replace("ArrayImpl", "Array") for w in want]
  for (_, g), (_, w) in zip(got, want):
    if w is not None:
      np.testing.assert_allclose(g, w, rtol=1e-6)
  for g, w in zip(refs, jrefs):
    if w is not None:
      np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)


def test_markers_are_jax_pytrees():
  for lib in (sc, jax):
    assert lib.tree.leaves((1.0, lib.ad.GradRef(), lib.ad.DidntWant())) == [1.0]
    assert repr(lib.ad.GradRef()) == "GradRef()" and repr(lib.ad.DontWant()) == "DontWant()"
    # the destinations are leaves (JAX does not register them)
    assert len(lib.tree.leaves((lib.ad.DontWant(), lib.ad.GradValue()))) == 2
  assert sorted(vars(sc.ad)) == sorted(vars(jax.ad))


def test_dontwant_cotangent_is_not_computed():
  """The equations that feed only an unwanted cotangent are not transposed. JAX prunes
  less (it still stages y's `neg`, though not the `mul` after it): stagecraft's jaxpr is
  JAX's without it. (Both transpose the broadcasting `add` whole: its `reduce_sum` for y's
  operand is staged, unused.)"""
  def prog(lib, m):
    def h(x, y):
      _, f_vjp = lib.vjp(_f(m), x, y)
      return f_vjp.with_refs(lib.ad.GradValue(), lib.ad.DontWant())(x)
    return str(lib.make_jaxpr(h)(m.asarray(X), m.asarray(Y)))
  ours, theirs = prog(sc, snp), prog(jax, jnp)
  assert " neg " not in ours and " neg " in theirs
  strip = lambda s: [l.split("=", 1)[1].split()[0] for l in s.splitlines()
                     if "=" in l and " neg " not in l]
  assert strip(ours) == strip(theirs)


def test_dict_primal_and_structure_errors():
  _, f_vjp = sc.vjp(lambda d: d["a"] * 2, {"a": snp.asarray(X)})
  assert f_vjp.with_refs({"a": sc.ad.DontWant()})(snp.asarray(X)) == ({"a": sc.ad.DidntWant()},)
  with pytest.raises(TypeError, match=r"structure of the primals"):
    f_vjp.with_refs(sc.ad.DontWant(), sc.ad.DontWant())
  with pytest.raises(TypeError, match=r"got float at maybe_ct_refs\[0\]\['a'\]"):
    f_vjp.with_refs({"a": 1.0})


def test_ref_shape_mismatch_is_jax_error():
  _, f_vjp = sc.vjp(_f(snp), snp.asarray(X), snp.asarray(Y))
  _, j_vjp = jax.vjp(_f(jnp), jnp.asarray(X), jnp.asarray(Y))
  msgs = []
  for lib, m, fn in ((sc, snp, f_vjp), (jax, jnp, j_vjp)):
    with pytest.raises(ValueError) as e:
      fn.with_refs(lib.new_ref(m.ones(2)), lib.ad.DontWant())(m.ones(5))
    msgs.append(str(e.value))
  assert msgs[0] == msgs[1]
