"""shard_map's equations and the collectives inside print as JAX 0.10.2's (JAX's params:
`check_vma`, `mesh`, `newly_manual_axes`, sorted; all_gather's `all_gather_dimension`, axis
names as tuples, an untiled all_to_all as JAX's `tiled=False` equation), `psum_scatter` over
several axes gives JAX's values, and the out_specs errors name the spec's key path and the
prefix disagreement in JAX's words. JAX runs the same programs in the same test.

Bodies use check_vma=False (typed check_vma=True bodies, whose types carry varying manual
axes, `f32[2]{V:i}`, are tests/test_shard_map_vma.py's)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as JP

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import lax
from stagecraft.sharding import AxisType, PartitionSpec as P


@pytest.fixture(scope="module")
def meshes():
  ours = sc.make_mesh((2, 2), ("i", "j"), axis_types=(AxisType.Auto,) * 2)
  theirs = jax.make_mesh((2, 2), ("i", "j"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  return ours, theirs


X = np.arange(16.0, dtype=np.float32).reshape(4, 4)


def _specs(lib, spec):
  """`spec` (a pytree of tuples standing for PartitionSpecs) as `lib`'s PartitionSpecs."""
  Spec = P if lib is sc else JP
  if isinstance(spec, tuple) and all(not isinstance(e, tuple) or all(isinstance(n, str)
                                                                       for n in e)
                                     for e in spec):
    return Spec(*spec)
  return type(spec)(_specs(lib, s) for s in spec)


# (body in terms of a lax module, in_specs, out_specs); each body's collectives print JAX's
# params.
CASES = {
    "identity": (lambda L, x: x, ("j", "i"), ("j", "i")),
    "reductions": (lambda L, x: (L.pmax(x, "i"), L.pmin(x, ("i", "j")), L.pmean(x, "j")),
                   ("i", "j"), [(None, "j"), (), ("i",)]),
    "ppermute": (lambda L, x: L.ppermute(x, "i", [(0, 1), (1, 0)]) + L.axis_index("j"),
                 ("i",), (("i", "j"),)),
    "psum_scatter": (lambda L, x: L.psum_scatter(x, "i", tiled=True), (), ("i",)),
    "psum_scatter_2": (lambda L, x: L.psum_scatter(x, ("i", "j"), scatter_dimension=1,
                                                   tiled=True), (), (None, ("i", "j"))),
    "all_to_all": (lambda L, x: L.all_to_all(x, "i", 0, 1, tiled=True), ("i",), (None, "i")),
    "all_to_all_untiled": (lambda L, x: L.all_to_all(x, "i", 0, 1), ("i",), (None, "i")),
    "all_gather": (lambda L, x: L.all_gather(x, ("i", "j"), axis=1, tiled=True), ("i",), ()),
    "all_gather_stacked": (lambda L, x: L.all_gather(x, "j"), ("i",), ("i",)),
    "pshuffle": (lambda L, x: L.pshuffle(x, "i", [1, 0]), ("i",), ("i",)),
    "pswapaxes": (lambda L, x: L.pswapaxes(x, "i", 0), ("i",), ("i",)),
}


def _run(lib, L, mesh, body, in_spec, out_spec, **kw):
  spec_in = _specs(lib, in_spec)
  spec_out = _specs(lib, out_spec) if not isinstance(out_spec, list) else tuple(
      _specs(lib, s) for s in out_spec)
  return lib.shard_map(lambda x: body(L, x), mesh=mesh, in_specs=spec_in, out_specs=spec_out,
                       **kw)


@pytest.mark.parametrize("name", list(CASES))
def test_jaxprs_print_as_jax(meshes, name):
  body, in_spec, out_spec = CASES[name]
  ours, theirs = meshes
  f = _run(sc, lax, ours, body, in_spec, out_spec, check_vma=False)
  g = _run(jax, jax.lax, theirs, body, in_spec, out_spec, check_vma=False)
  assert str(sc.make_jaxpr(f)(X)) == str(jax.make_jaxpr(g)(X))


def test_values_of_the_new_forms_match_jax(meshes):
  ours, theirs = meshes
  for name in ("psum_scatter_2", "all_to_all_untiled", "pswapaxes", "all_gather_stacked"):
    body, in_spec, out_spec = CASES[name]
    f = sc.jit(_run(sc, lax, ours, body, in_spec, out_spec, check_vma=False))
    g = jax.jit(_run(jax, jax.lax, theirs, body, in_spec, out_spec, check_vma=False))
    np.testing.assert_array_equal(np.asarray(f(X)), np.asarray(g(X)), err_msg=name)

  # psum_scatter over two axes (grid order as named), untiled, and its transpose (all_gather).
  def loss(lib, L, mesh, spec):
    sm = lib.shard_map(lambda x: L.psum_scatter(x, ("j", "i"), scatter_dimension=0),
                       mesh=mesh, in_specs=spec(), out_specs=spec(("j", "i")))
    return lambda x: (sm(x) ** 2 * np.arange(16.0)).sum()
  ours_g = sc.jit(sc.grad(loss(sc, lax, ours, P)))(X)
  theirs_g = jax.jit(jax.grad(loss(jax, jax.lax, theirs, JP)))(X)
  np.testing.assert_allclose(np.asarray(ours_g), np.asarray(theirs_g), rtol=1e-6)


def _first_message_lines(fn, *args):
  with pytest.raises(ValueError) as e:
    fn(*args)
  return [line for line in str(e.value).splitlines() if "out_specs" in line or "key path" in
          line or "subtree" in line]


@pytest.mark.parametrize("out_spec", ["prefix", "tuple", "dict"])
def test_out_specs_replication_error_names_the_specs_key_path(meshes, out_spec):
  ours, theirs = meshes

  def make(lib, L, mesh, Spec):
    specs = {"prefix": Spec(), "tuple": (Spec(), Spec()),
             "dict": {"a": Spec(), "b": (Spec(), Spec("j"))}}[out_spec]

    def f(x):
      y = L.psum(x, ("i", "j"))
      return {"a": y, "b": (y, x)} if out_spec == "dict" else (y, x)
    return lib.shard_map(f, mesh=mesh, in_specs=Spec("i", "j"), out_specs=specs)
  ours_f, theirs_f = make(sc, lax, ours, P), make(jax, jax.lax, theirs, JP)
  want = _first_message_lines(jax.jit(theirs_f), X)
  assert _first_message_lines(sc.jit(ours_f), X) == want
  assert any({"prefix": "out_specs is P()", "tuple": "out_specs[1] is P()",
              "dict": "out_specs['b'][1] is P('j',)"}[out_spec] in w for w in want)
  # eagerly, JAX's message names no key path (nor the function: it names a wrapper)
  eager = _first_message_lines(theirs_f, X)[1:]
  assert _first_message_lines(ours_f, X)[1:] == eager
  assert eager[0].startswith("out_specs is P")


@pytest.mark.parametrize("what", ["list", "length", "dict", "in_list", "in_length"])
def test_specs_that_are_no_prefix_raise_jaxs_structure_error(meshes, what):
  ours, theirs = meshes

  def make(lib, mesh, Spec):
    out_specs = {"list": [Spec("i"), Spec()], "length": (Spec(), Spec(), Spec()),
                 "dict": {"a": Spec()}}.get(what, (Spec(), Spec()))
    in_specs = {"in_list": [Spec("i")], "in_length": (Spec(), Spec())}.get(what, Spec("i"))
    return lib.jit(lib.shard_map(lambda x: (x, x), mesh=mesh, in_specs=in_specs,
                                 out_specs=out_specs))
  with pytest.raises(ValueError) as je:
    make(jax, theirs, JP)(X)
  with pytest.raises(ValueError) as e:
    make(sc, ours, P)(X)
  assert str(e.value) == str(je.value)
  assert str(e.value).startswith("pytree structure error: different ")


def test_prefix_errors_as_jax():
  from jax._src import tree_util as jtu
  from stagecraft import tree_util
  cases = [((1, 2), (1, 2, 3)), ([1], (1,)), ({"a": 1}, {"b": 2}), ({"a": 1}, {"a": 1, "b": 2}),
           ((1, {"a": [1, 2]}), (1, {"a": [1, 2, 3]})), ((None, 1), ((1, 2), 3)),
           ((1, 2), (5, 6))]
  for prefix, tree in cases:
    ours = [str(f("in_axes")) for f in tree_util.prefix_errors(prefix, tree)]
    theirs = [str(f("in_axes")) for f in jtu.prefix_errors(prefix, tree)]
    assert ours == theirs, (prefix, tree)
  assert tree_util.prefix_errors((1, 2), (5, 6)) == []


def test_explicit_mesh_arguments_must_be_typed_as_in_specs():
  """On a mesh whose axes are all Explicit (make_mesh's default), an argument whose sharding
  type differs from its in_spec is rejected with JAX's message, eagerly and under jit; a
  mixed Explicit/Auto mesh is not checked (JAX 0.10.2)."""
  ours = sc.make_mesh((2, 2), ("i", "j"))
  theirs = jax.make_mesh((2, 2), ("i", "j"))
  put = {sc: lambda m, s: sc.device_put(X, sc.NamedSharding(m, s)),
         jax: lambda m, s: jax.device_put(X, jax.sharding.NamedSharding(m, s))}

  def outcome(lib, mesh, Spec, arg, spec, jit):
    f = lib.shard_map(lambda v: v * 2, mesh=mesh, in_specs=Spec(*spec), out_specs=Spec(*spec))
    f = lib.jit(f) if jit else f
    x = X if arg is None else put[lib](mesh, Spec(*arg))
    try:
      return str(lib.typeof(f(x)))
    except ValueError as e:
      return str(e)
  for arg, spec in [(None, ()), (None, ("i",)), (("i",), ()), (("i",), ("i",)),
                    (("i",), ("i", "j")), (("i", "j"), (("i", "j"),)), (("i", "j"), ("i", "j"))]:
    for jit in (False, True):
      assert (outcome(sc, ours, P, arg, spec, jit) == outcome(jax, theirs, JP, arg, spec, jit)
              ), (arg, spec, jit)
  with pytest.raises(ValueError, match=r"^in_specs passed to shard_map: P\('i', None\) does not "
                                       r"match the specs of the input: P\(None, None\) for arg: "
                                       r"float32\[4,4\]\. `in_specs` is an optional argument"):
    sc.shard_map(lambda v: v, mesh=ours, in_specs=P("i"), out_specs=P("i"))(X)
  mixed = sc.make_mesh((2, 2), ("i", "j"), axis_types=(AxisType.Explicit, AxisType.Auto))
  out = sc.jit(sc.shard_map(lambda v: v * 2, mesh=mixed, in_specs=P("i"), out_specs=P("i")))(X)
  np.testing.assert_array_equal(np.asarray(out), X * 2)
