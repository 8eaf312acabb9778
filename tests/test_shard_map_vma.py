"""Varying manual axes (vma) in types inside `shard_map(..., check_vma=True)` bodies, as JAX
0.10.2: `typeof(x)` prints `float32[3]{V:i}`, printed jaxprs show `{V:...}` binders, the
`pvary` equations JAX inserts where an invariant operand meets a varying one (literals too,
and body results whose out_specs split over axes they do not vary along), `psum_invariant`
for psum; grad inside a body computes and prints as JAX's (pvary^T = psum_invariant,
psum_invariant^T = pvary, pvary'd seeds); scan/cond type mismatches raise JAX's TypeErrors;
`aval.manual_axis_type` and `jax.sharding.ManualAxisType`. JAX runs the same programs in the
same test, on a 2- and a 4-device mesh."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as JP

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import core, lax
from stagecraft.sharding import AxisType, PartitionSpec as P


@pytest.fixture(scope="module")
def meshes():
  """(ours, JAX's) for a 2-device mesh ('i',) and a 4-device mesh ('i', 'j'), Auto axes."""
  auto, jauto = AxisType.Auto, jax.sharding.AxisType.Auto
  return {1: (sc.make_mesh((2,), ("i",), axis_types=(auto,)),
              jax.make_mesh((2,), ("i",), axis_types=(jauto,))),
          2: (sc.make_mesh((2, 2), ("i", "j"), axis_types=(auto, auto)),
              jax.make_mesh((2, 2), ("i", "j"), axis_types=(jauto, jauto)))}


def _lib(lib):
  """(library, its lax, its numpy, its PartitionSpec)."""
  return (sc, lax, snp, P) if lib is sc else (jax, jax.lax, jnp, JP)


X4 = np.arange(4.0, dtype=np.float32)
X44 = np.arange(16.0, dtype=np.float32).reshape(4, 4)
W2 = np.array([1.5, -2.0], np.float32)


# name: (mesh rank, body(lib, L, np_, *args), in_specs (tuples), out_specs (a tuple, or a
# list of tuples for several results), args)
PROGRAMS = {
    "pvary_operand": (1, lambda lib, L, n, x, w: x * w, (("i",), ()), ("i",), (X4, W2)),
    "pvary_literal": (1, lambda lib, L, n, x, w: x + 2.0, (("i",), ()), ("i",), (X4, W2)),
    "psum_invariant": (1, lambda lib, L, n, x, w: (L.psum(x * w, "i"), x), (("i",), ()),
                       [(), ("i",)], (X4, W2)),
    "psum_of_invariant": (1, lambda lib, L, n, x, w: L.psum(w, "i"), (("i",), ()), (),
                          (X4, W2)),
    "result_pvary_to_spec": (1, lambda lib, L, n, x, w: w * 3, (("i",), ()), ("i",),
                             (X4, W2)),
    "two_axes_psum_one": (2, lambda lib, L, n, x: L.psum(x, "j") * L.axis_index("i"),
                          (("i", "j"),), ("i",), (X44,)),
    "two_axes_mixed": (2, lambda lib, L, n, x, w: (x * w, L.pmax(x, ("i", "j"))),
                       (("i", "j"), (None, "j")), [("i", "j"), ()], (X44, X44[:2] + 1)),
    "collectives": (1, lambda lib, L, n, x, w: (L.all_gather(w, "i"),
                                                L.ppermute(w, "i", [(0, 1), (1, 0)]),
                                                L.pmax(x, "i"), L.psum(n.sin(x) @ w, "i")),
                    (("i",), ()), [("i",), ("i",), (), ()], (X4, W2)),
    "collectives_4": (2, lambda lib, L, n, x: (
        L.all_to_all(x, "i", 0, 1, tiled=True), L.psum_scatter(x, "j", tiled=True),
        L.pmean(x, "j"), L.pmin(x, "j") + L.axis_index(("j", "i"))),
        (("i",),), [(None, "i"), ("i", "j"), ("i",), ("i", "j")], (X44,)),
    "pcast": (1, lambda lib, L, n, x, w: L.pcast(w, "i", to="varying") + x, (("i",), ()),
              ("i",), (X4, W2)),
    "cond": (1, lambda lib, L, n, x, w: L.cond(w.sum() > 0, lambda a: a * 2,
                                               lambda a: a + w, x), (("i",), ()), ("i",),
             (X4, W2)),
    "scan": (1, lambda lib, L, n, x, w: L.scan(
        lambda c, xi: (c * xi, L.psum(c.sum(), "i")), L.pcast(w, "i", to="varying"),
        x.reshape(1, 2).repeat(3, 0)), (("i",), ()), [("i",), ()], (X4, W2)),
    "jit_inside": (1, lambda lib, L, n, x, w: lib.jit(lambda a, b: a * b)(x, w), (("i",), ()),
                   ("i",), (X4, W2)),
    "grad_inside": (1, lambda lib, L, n, x, w: lib.grad(lambda v: (x * v).sum())(w),
                    (("i",), ()), ("i",), (X4, W2)),
    "grad_inside_psum": (1, lambda lib, L, n, x, w: lib.grad(
        lambda v: L.psum((n.sin(x) * v).sum(), "i"))(w), (("i",), ()), (), (X4, W2)),
    "grad_inside_4": (2, lambda lib, L, n, x, w: lib.grad(lambda v: (x * v).sum())(w),
                      (("i", "j"), (None, "j")), (None, "j"), (X44, X44[:2] + 1)),
}


def _mapped(lib, mesh, name):
  rank, body, ins, out, args = PROGRAMS[name]
  lib_, L, n, Spec = _lib(lib)

  def spec(t):   # a list: one spec per output
    return tuple(Spec(*s) for s in t) if isinstance(t, list) else Spec(*t)
  return lib.shard_map(lambda *a: body(lib_, L, n, *a), mesh=mesh,
                       in_specs=tuple(Spec(*s) for s in ins), out_specs=spec(out)), args


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_typed_jaxprs_and_values_match_jax(meshes, name):
  ours, theirs = meshes[PROGRAMS[name][0]]
  f, args = _mapped(sc, ours, name)
  g, _ = _mapped(jax, theirs, name)
  text = str(sc.make_jaxpr(f)(*args))
  assert text == str(jax.make_jaxpr(g)(*args))
  assert "{V:" in text
  for a, b in zip(sc.tree_util.tree_leaves(sc.jit(f)(*args)),
                  jax.tree_util.tree_leaves(jax.jit(g)(*args))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


@pytest.mark.parametrize("name", ["grad_inside", "grad_inside_psum", "psum_of_invariant",
                                  "collectives", "grad_inside_4"])
def test_eager_values_match_jax(meshes, name):
  # NB: outside jit the body runs operation by operation on each device's values.
  ours, theirs = meshes[PROGRAMS[name][0]]
  f, args = _mapped(sc, ours, name)
  g, _ = _mapped(jax, theirs, name)
  for a, b in zip(sc.tree_util.tree_leaves(f(*args)), jax.tree_util.tree_leaves(g(*args))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def _typeofs(lib, mesh, jit: bool):
  lib_, L, n, Spec = _lib(lib)
  seen = []

  def body(x, w):
    seen.append(str(lib.typeof(x)))
    seen.append(str(lib.typeof(w)))
    y = L.psum(x, "j")
    seen.append(str(lib.typeof(y)))
    seen.append(repr(lib.typeof(y)))
    seen.append(sorted(lib.typeof(y).manual_axis_type.varying))
    seen.append(str(lib.typeof(x * w)))
    return y
  f = lib.shard_map(body, mesh=mesh, in_specs=(Spec("i", "j"), Spec()), out_specs=Spec("i"))
  out = (lib.jit(f) if jit else f)(X44, np.float32(2))
  return seen, np.asarray(out)


@pytest.mark.parametrize("jit", [True, False])
def test_typeof_inside_a_body_matches_jax(meshes, jit):
  ours, theirs = meshes[2]
  seen, out = _typeofs(sc, ours, jit)
  jseen, jout = _typeofs(jax, theirs, jit)
  assert seen == jseen
  assert seen[0] == "float32[2,2]{V:(i,j)}"
  np.testing.assert_array_equal(out, jout)


def test_grad_of_a_shard_map_matches_jax(meshes):
  ours, theirs = meshes[1]
  f, args = _mapped(sc, ours, "psum_invariant")
  g, _ = _mapped(jax, theirs, "psum_invariant")

  def loss(lib, h):
    return lambda x, w: sum(o.sum() ** 2 for o in lib.tree_util.tree_leaves(h(x, w)))
  for a, b in zip(sc.jit(sc.grad(loss(sc, f), argnums=(0, 1)))(*args),
                  jax.jit(jax.grad(loss(jax, g), argnums=(0, 1)))(*args)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def _error(thunk):
  try:
    thunk()
  except Exception as e:   # noqa: BLE001 (compared with JAX's)
    return type(e).__name__, str(e)
  return None


def _scan_carry_turns_varying(lib, L, n, x, w):
  def body(c, xi):
    return c + xi, c
  return L.scan(body, w, x.reshape(1, 2))[0]


def _cond_of_different_types(lib, L, n, x, w):
  return L.cond(x.sum() > 0, lambda: x, lambda: w)


def _while_carry_turns_varying(lib, L, n, x, w):
  return L.while_loop(lambda c: c.sum() < 10, lambda c: c + x, w)


def _psum_over_varying_and_invariant_axes(lib, L, n, x, w):
  return L.psum(x, ("i", "j"))


@pytest.mark.parametrize("body", [_scan_carry_turns_varying, _cond_of_different_types,
                                  _while_carry_turns_varying,
                                  _psum_over_varying_and_invariant_axes])
def test_type_errors_match_jax(meshes, body):
  ours, theirs = meshes[2]
  errs = []
  for lib, mesh in ((sc, ours), (jax, theirs)):
    lib_, L, n, Spec = _lib(lib)
    f = lib.shard_map(lambda x, w: body(lib_, L, n, x, w), mesh=mesh,
                      in_specs=(Spec("i"), Spec()), out_specs=Spec("i"))
    errs.append(_error(lambda: lib.make_jaxpr(f)(X4, W2)))
  assert errs[0] is not None
  assert "manual axis types do not match" in errs[0][1] or "input state" in errs[0][1]
  assert errs[0] == errs[1]


def test_manual_axis_type(meshes):
  ours, _ = meshes[1]
  m = sc.sharding.ManualAxisType(varying=frozenset({"i"}))
  jm = jax.sharding.ManualAxisType(varying=frozenset({"i"}))
  assert repr(m) == repr(jm)
  assert m.varying == jm.varying and not m.empty
  assert sc.sharding.ManualAxisType().empty == jax.sharding.ManualAxisType().empty
  with pytest.raises(ValueError) as e:
    sc.sharding.ManualAxisType(varying={"i"}, unreduced={"i"})
  with pytest.raises(ValueError) as je:
    jax.sharding.ManualAxisType(varying=frozenset({"i"}), unreduced=frozenset({"i"}))
  assert str(e.value) == str(je.value)
  # Outside shard_map: no varying axes, and avals compare and hash as before.
  a = sc.typeof(snp.ones(3))
  assert a.manual_axis_type.varying == jax.typeof(jnp.ones(3)).manual_axis_type.varying
  assert str(a) == str(jax.typeof(jnp.ones(3))) == "float32[3]"
  b = core.ShapedArray((3,), np.dtype("float32"))
  assert a == b and hash(a) == hash(b)
  v = b.update(vma=frozenset({"i"}))
  assert v != b and v.str_short() == "f32[3]{V:i}" and v.update(vma=()) == b


def test_check_vma_false_prints_no_types(meshes):
  ours, theirs = meshes[1]
  f = sc.shard_map(lambda x, w: x * w, mesh=ours, in_specs=(P("i"), P()), out_specs=P("i"),
                   check_vma=False)
  g = jax.shard_map(lambda x, w: x * w, mesh=theirs, in_specs=(JP("i"), JP()),
                    out_specs=JP("i"), check_vma=False)
  text = str(sc.make_jaxpr(f)(X4, W2))
  assert text == str(jax.make_jaxpr(g)(X4, W2))
  assert "{V:" not in text and "pvary" not in text
