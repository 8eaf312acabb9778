"""`stagecraft.experimental.custom_partitioning` against JAX 0.10.2's
`jax.experimental.custom_partitioning`: the guide's FFT example over a mesh of the 4 CPU
devices (tests/conftest.py), the sharding-rule language (accepted and rejected strings, with
JAX's messages and printed rules), jaxprs, static_argnums, the call errors, and grad through
a custom_vjp wrapper. stagecraft never calls the partitioning callbacks; XLA partitions the
inlined body, so values equal JAX's."""
from __future__ import annotations

import jax
import jax._src.custom_partitioning_sharding_rule as jax_rules
import jax.experimental.custom_partitioning as jcp
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as snp
from stagecraft import compat, lax
from stagecraft.experimental import custom_partitioning as scp

needs4 = pytest.mark.skipif(len(sc.devices()) < 4 or len(jax.devices()) < 4,
                            reason="needs 4 devices")

JAX = (jax, jjnp, jcp)
SC = (sc, snp, scp)


def _outcome(f):
  """`str` of f()'s result, or (exception type name, message)."""
  try:
    return str(f())
  except Exception as e:  # noqa: BLE001 (compared with JAX's)
    return type(e).__name__, str(e)


# ---------------------------------------------------------------------------
# The guide's example (the docstring of jax.experimental.custom_partitioning)


def _guide_fft(lib, calls):
  """The guide's `my_fft`, built with `lib` = (jax, jax.numpy, custom_partitioning module);
  both of its `def_partition` forms: a rule string and an SdyShardingRule object."""
  jx, jnp, cp = lib
  NamedSharding, P = jx.sharding.NamedSharding, jx.sharding.PartitionSpec

  def supported_sharding(sharding, shape):
    rank = len(shape.shape)
    max_shared_dims = min(len(sharding.spec), rank - 1)
    names = (tuple(sharding.spec[:max_shared_dims])
             + tuple(None for _ in range(rank - max_shared_dims)))
    return NamedSharding(sharding.mesh, P(*names))

  def partition(mesh, arg_shapes, result_shape):
    calls.append("partition")
    arg_shardings = jx.tree.map(lambda x: x.sharding, arg_shapes)
    return (mesh, jnp.fft.fft, supported_sharding(arg_shardings[0], arg_shapes[0]),
            (supported_sharding(arg_shardings[0], arg_shapes[0]),))

  def infer_sharding_from_operands(mesh, arg_shapes, result_shape):
    calls.append("infer")
    arg_shardings = jx.tree.map(lambda x: x.sharding, arg_shapes)
    return supported_sharding(arg_shardings[0], arg_shapes[0])

  @cp.custom_partitioning
  def my_fft(x):
    return jnp.fft.fft(x)

  assert my_fft.def_partition(infer_sharding_from_operands=infer_sharding_from_operands,
                              partition=partition, sharding_rule="...i -> ...i") is partition
  @cp.custom_partitioning
  def my_fft2(x):
    return jnp.fft.fft(x)

  my_fft2.def_partition(
      infer_sharding_from_operands=infer_sharding_from_operands, partition=partition,
      sharding_rule=cp.SdyShardingRule(operand_mappings=((cp.BATCHING, "i"),),
                                       result_mappings=((cp.BATCHING, "i"),)))
  return my_fft, my_fft2


@needs4
def test_guide_fft_example_over_a_mesh_gives_jaxs_values():
  rng = np.random.RandomState(0)
  x2 = (rng.randn(8, 16) + 1j * rng.randn(8, 16)).astype(np.complex64)
  x1 = rng.randn(64).astype(np.complex64)
  results = {}
  for name, lib in (("jax", JAX), ("sc", SC)):
    jx = lib[0]
    calls: list = []
    my_fft, my_fft2 = _guide_fft(lib, calls)
    mesh = jx.sharding.Mesh(np.array(jx.devices()), ("x",))
    s = jx.sharding.NamedSharding(mesh, jx.sharding.PartitionSpec("x"))
    y2 = jx.jit(lambda v: v, out_shardings=s)(x2)
    f = jx.jit(my_fft, in_shardings=s, out_shardings=s)
    f2 = jx.jit(my_fft2, in_shardings=s, out_shardings=s)
    out2 = f(y2)
    assert out2.sharding.spec == jx.sharding.PartitionSpec("x")
    results[name] = (np.asarray(out2), np.asarray(f2(y2)), np.asarray(f(x1)),
                     np.asarray(my_fft(x2)), calls)
  ours, theirs = results["sc"], results["jax"]
  for a, b in zip(ours[:4], theirs[:4]):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(ours[0], np.fft.fft(x2), rtol=1e-4, atol=1e-4)
  assert "partition" in theirs[4] and ours[4] == []   # stagecraft never calls them


def test_runner_serves_the_module():
  compat.install()
  try:
    from jax.experimental.custom_partitioning import (  # noqa: F401
        BATCHING, ArrayMapping, CompoundFactor, SdyShardingRule, custom_partitioning,
        custom_partitioning_p)
    assert custom_partitioning is scp.custom_partitioning
  finally:
    compat.uninstall()
  public = sorted(n for n in dir(jcp) if not n.startswith("_"))
  assert sorted(scp.__all__) == public
  assert scp.BATCHING == jcp.BATCHING == "…"
  assert scp.custom_partitioning_p.name == "custom_partitioning"


# ---------------------------------------------------------------------------
# The sharding-rule language

RULES = [
    "i j, j k -> i k", "... i -> ... i", "...i -> ...i", "(i j) -> i j", "i -> i", "->",
    " -> ", "i->i", "", "i j", "i -> i -> i", "i -> (j k)", "i, -> i", "...,... -> ...",
    "i (j) -> i", "i ((j k)) -> i", "i 1 -> i", "i -> 1", "i ... -> i", "... ... -> i",
    "i_j -> i_j", "i$ -> i", "a , b -> c", "i j -> j i k", "(i j -> k", "i j) -> k",
    "…0 -> …0", "i -> ...", "i, j", "-> i", "i ->", "(...) -> i", "(i ...) -> i",
    "ij2 -> ij2", "2i -> i", ", -> ", "i,,j->k", "..., ... -> ...", "(a b) -> (a b)",
    "(a) -> a", "() -> i", "a b c -> (a b) c", "... (a b) -> ... a b", "i . -> i",
    "i .. -> i", "i.... -> i", "i\tj -> i j", "i -> i, i", "a-b -> a", "i > j", "a 0 -> a",
    "é -> é", "_ -> _", "(a (b c)) -> a", "a) -> a", "(a b)(c d) -> a b c d",
    "a(b c)d -> a b c d", "... a ... -> a", "...0 -> i", "...1 i -> ...1 i",
    "...12 -> ...12", "...0 i, ...1 j -> ...0 ...1", "...a -> i", "...0a -> i",
    "... 0 -> i", "i ...0a -> i", "(i j , k -> k", "(i j, k) -> i j k", "... (i -> i",
    "i -> (k l", ") -> i", "(i j) (k) -> i", "( , ) -> i", "i' -> j", "i ...", "²i -> i",
    "i² -> i²", "(i j) -> i", "(i,j)->i", "...... -> i", "(.) -> i", "(i  k->", "_ -> $",
    "a->_$", "a->_)", "...01->", " ->...000", "_, ... a ... -> i", "ia_... $$$->", "0->1 .",
    "a_j...…1.", "i -> _ k (j",
]
RULE_KWARGS = [
    ("i j, j k -> i k", dict(reduction_factors=("j",))),
    ("i j, j k -> i k", dict(reduction_factors=["j"])),
    ("i j, j k -> i k", dict(need_replication_factors=("i",), permutation_factors=("k",))),
    ("i j, j k -> i k", dict(reduction_factors=("j",), permutation_factors=("j",))),
    ("i -> i", dict(reduction_factors=("j",))),
    ("i j, j k -> i k", dict(k=3)), ("i -> i", dict(k=3)), ("(a b) -> (a b)", dict(a=2, b=3)),
    ("(a b) -> (a b)", dict(a=2)), ("(a b) -> a", dict(b=3)), ("(a b) -> a", dict(a=3)),
    ("->i", dict(i=2, j=2)), ("j->a", dict(a=2, j=2)), ("->(kk,ii)k", dict(k=2)),
    (",k-> ", dict(reduction_factors=("k",), need_replication_factors=("k", "i"))),
    ("k->a,k i", dict(reduction_factors=("z",), permutation_factors=("i",), i=2, a=2)),
]


def test_rule_strings_parse_as_jaxs():
  for rule in RULES:
    assert (_outcome(lambda: scp.str_to_sdy_sharding_rule(rule))
            == _outcome(lambda: jax_rules.str_to_sdy_sharding_rule(rule))), rule
  for rule, kw in RULE_KWARGS:
    assert (_outcome(lambda: scp.str_to_sdy_sharding_rule(rule, **kw))
            == _outcome(lambda: jax_rules.str_to_sdy_sharding_rule(rule, **kw))), (rule, kw)
  assert _outcome(lambda: scp.str_to_sdy_sharding_rule(3)) == (
      "TypeError", "rule must be a str, but got <class 'int'>")
  assert str(scp.str_to_sdy_sharding_rule("i j, j k -> i k", reduction_factors=("j",))) == (
      "SdyShardingRule((('i', 'j'), ('j', 'k')), (('i', 'k'),), {} reduction_factors=('j',))")


def test_rule_objects_validate_and_print_as_jaxs():
  def cases(m):
    A, C, B, R = m.ArrayMapping, m.CompoundFactor, m.BATCHING, m.SdyShardingRule
    return [
        lambda: R(((B, C("a", "b")),), ((B, "a", "c"),), b=3),
        lambda: R(((C("a", "b"),),), (("a", "b"),), b=3),
        lambda: R((("i", "j"), ("j", "k")), (("i", "k"),), reduction_factors=("j",),
                  need_replication_factors=("i",), permutation_factors=("k",)),
        lambda: R([("i",)], [("i",)]), lambda: R((A("i"),), (A("i"),), reduction_factors=["i"]),
        lambda: R((A("i"),), (A("i"),), reduction_factors=("x",)),
        lambda: R((A("i"),), (A("i"),), reduction_factors=("i",), permutation_factors=("i",)),
        lambda: R((), ()), lambda: R(((),), ((),)), lambda: R((("i", 3),), (("i",),)),
        lambda: R(((C("a", "b"),),), ((C("a", "b"),),)),
        lambda: R(((C("a", "b"),),), ((C("a", "b"),),), a=2, b=3),
        lambda: R(((C("a", "b"),),), ((C("a", "b"),),), a=2, b=3, c=4),
        lambda: R("i", "i"), lambda: R((("i",),), (("i",),), i=2),
        lambda: C("a"), lambda: C(), lambda: C("a", 1), lambda: C("a", B), lambda: C("a", ""),
        lambda: repr(C("a", "b")), lambda: repr(A("a", C("b", "c"))), lambda: A("a", B),
        lambda: A(B, B, "a"), lambda: A(), lambda: A(1), lambda: A("a", "a"), lambda: A(""),
        lambda: A("…0"), lambda: A(("a", "b")), lambda: A("a", "…0"),
    ]
  for i, (ours, theirs) in enumerate(zip(cases(scp), cases(jcp))):
    assert _outcome(ours) == _outcome(theirs), i


def test_def_partition_keywords_and_rules_as_jaxs():
  def part(*args):
    raise AssertionError("never called")

  def attempt(m, **kw):
    f = m.custom_partitioning(lambda x: x)
    f.def_partition(part, **kw)
    return f.sharding_rule

  rule = lambda m: m.SdyShardingRule((("i",),), (("i",),))  # noqa: E731
  for kw in [dict(sharding_rule="i j$ -> i j"), dict(sharding_rule=3),
             dict(sharding_rule=(("i",),)), dict(sharding_rule="i -> i", k=3),
             dict(sharding_rule="(i k) j -> i k j", k=3),
             dict(sharding_rule="i j -> i j", reduction_factors=["i"]),
             dict(reduction_factors=("i",)), dict(reduction_factors=(), k=3),
             dict(sharding_rule=lambda *a: "i -> i", i=3)]:
    assert _outcome(lambda: attempt(scp, **kw)) == _outcome(lambda: attempt(jcp, **kw)), kw
  for m in (scp, jcp):   # keyword arguments next to a rule object
    with pytest.raises(ValueError) as e:
      attempt(m, sharding_rule=rule(m), k=3, permutation_factors=("i",),
              reduction_factors=("i",))
    assert str(e.value) == ("Unknown keyword arguments: {'k': 3, 'reduction_factors': "
                            "('i',), 'permutation_factors': ('i',)}")
    assert attempt(m, sharding_rule=rule(m), reduction_factors=()) is not None


# ---------------------------------------------------------------------------
# Calls: jaxprs, static_argnums, errors


def _programs(m, lax_mod):
  def part(*args):
    raise AssertionError("never called")

  def g(x, n, y):
    return {"a": lax_mod.sin(x) * n, "b": (y, x + y)}

  g1 = m.custom_partitioning(g)
  g1.def_partition(part, sharding_rule="i j, i j -> i j, i j, i j")
  g2 = m.custom_partitioning(g, static_argnums=(1,))
  g2.def_partition(part, sharding_rule="i j, i j -> i j, i j, i j",)

  def h(x, n=2.0):
    return x * n

  h1 = m.custom_partitioning(h)
  h1.def_partition(part, infer_sharding_from_operands=part, sharding_rule="... -> ...")
  return g1, g2, h1


def test_jaxprs_print_as_jaxs():
  x = np.arange(12.0, dtype=np.float32).reshape(4, 3)
  (g1, g2, h1), (jg1, jg2, jh1) = _programs(scp, lax), _programs(jcp, jax.lax)
  pairs = [(sc.make_jaxpr(g1, static_argnums=1)(x, 3, x),
            jax.make_jaxpr(jg1, static_argnums=1)(x, 3, x)),
           (sc.make_jaxpr(lambda a, b: g2(a, 3, y=b))(x, x),
            jax.make_jaxpr(lambda a, b: jg2(a, 3, y=b))(x, x)),
           (sc.make_jaxpr(lambda a: g2(a, n=2.5, y=a))(x),
            jax.make_jaxpr(lambda a: jg2(a, n=2.5, y=a))(x)),
           (sc.make_jaxpr(h1)(x), jax.make_jaxpr(jh1)(x))]
  for ours, theirs in pairs:
    assert str(ours) == str(theirs)
  assert "static_args=(3,)" in str(pairs[1][0])
  assert "partition=<function _programs.<locals>.part at 0xXXXXXXXXXXXX>" in str(pairs[0][0])
  # values: eagerly and under jit, static arguments as given
  ours = sc.jit(lambda a, b: g2(a, 3, b))(x, x)
  theirs = jax.jit(lambda a, b: jg2(a, 3, b))(x, x)
  for o, t in zip(sc.tree.leaves(ours), jax.tree.leaves(theirs)):
    np.testing.assert_allclose(o, t, rtol=1e-6)
  np.testing.assert_allclose(g2(x, 3, x)["a"], theirs["a"], rtol=1e-6)
  np.testing.assert_allclose(h1(x), jh1(x))


def test_call_errors_as_jaxs():
  x = np.ones((4, 3), np.float32)
  (g1, g2, h1), (jg1, jg2, jh1) = _programs(scp, lax), _programs(jcp, jax.lax)
  g0 = scp.custom_partitioning(lambda v: v, static_argnums=(3,))
  g0.def_partition(None)
  jg0 = jcp.custom_partitioning(lambda v: v, static_argnums=(3,))
  jg0.def_partition(None)
  cases = [
      (lambda: g2(x), lambda: jg2(x)),                       # missing argument
      (lambda: g2(x, 1, 2, 3), lambda: jg2(x, 1, 2, 3)),     # too many
      (lambda: g2(x, 1, z=2), lambda: jg2(x, 1, z=2)),        # unknown keyword
      (lambda: g0(x), lambda: jg0(x)),                        # static position out of range
      (lambda: sc.vmap(g1, in_axes=(0, None, 0))(x, 2.0, x),
       lambda: jax.vmap(jg1, in_axes=(0, None, 0))(x, 2.0, x)),
      (lambda: sc.grad(lambda v: h1(v).sum())(x), lambda: jax.grad(lambda v: jh1(v).sum())(x)),
      (lambda: sc.jvp(h1, (x,), (x,)), lambda: jax.jvp(jh1, (x,), (x,))),
  ]
  for ours, theirs in cases:
    assert _outcome(ours) == _outcome(theirs)

  def kwonly(v, *, n=1):
    return v * n

  for m in (scp, jcp):
    k = m.custom_partitioning(kwonly)
    k.def_partition(None)
    with pytest.raises(TypeError, match="keyword arguments could not be resolved to positions"):
      k(x, n=2)
    cb = m.custom_partitioning(lambda v: v)
    cb.def_partition(None, propagate_user_sharding=lambda *a: None)
    with pytest.raises(NotImplementedError, match="Shardy is used, but sharding propagation "
                                                  "callbacks instead of sharding_rule"):
      cb(x)
    with pytest.raises(AttributeError):   # no def_partition
      m.custom_partitioning(lambda v: v)(x)
  with pytest.raises(sc.errors.UnexpectedTracerError,
                     match="in a position indicated as static by static_argnums"):
    sc.jit(lambda a, n: g2(a, n, a))(x, 3.0)
  with pytest.raises(jax.errors.UnexpectedTracerError):
    jax.jit(lambda a, n: jg2(a, n, a))(x, 3.0)


# ---------------------------------------------------------------------------
# grad through a custom_vjp wrapper, and the rule checked in a program over a mesh


def _fft_with_vjp(lib):
  jx, jnp, cp = lib

  def partition(mesh, arg_shapes, result_shape):
    return mesh, jnp.fft.fft, result_shape.sharding, (arg_shapes[0].sharding,)

  @cp.custom_partitioning
  def my_fft(x):
    return jnp.fft.fft(x)

  my_fft.def_partition(partition=partition, sharding_rule="...i -> ...i")

  @jx.custom_vjp
  def fft(x):
    return my_fft(x)

  def fwd(x):
    return my_fft(x), None

  def bwd(_, g):
    return (my_fft(g),)   # the DFT matrix is symmetric: the transpose of fft is fft

  fft.defvjp(fwd, bwd)
  w = np.linspace(-1.0, 1.0, 16, dtype=np.float32)
  return lambda x: jnp.sum(jnp.real(fft(x.astype(jnp.complex64))) * w)


@needs4
def test_grad_through_custom_vjp_over_a_mesh_as_jaxs():
  x = np.random.RandomState(1).randn(8, 16).astype(np.float32)
  outs = []
  for jx, lib in ((sc, SC), (jax, JAX)):
    s = jx.sharding.NamedSharding(jx.sharding.Mesh(np.array(jx.devices()), ("x",)),
                                  jx.sharding.PartitionSpec("x"))
    loss = _fft_with_vjp(lib)
    outs.append(np.asarray(jx.jit(jx.grad(loss), in_shardings=s, out_shardings=s)(x)))
  ref = jax.grad(lambda v: jjnp.sum(jjnp.real(jjnp.fft.fft(v.astype(jjnp.complex64)))
                                    * np.linspace(-1.0, 1.0, 16, dtype=np.float32)))(x)
  np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-4)


@needs4
def test_rule_checked_against_the_operation_in_a_mesh_program_as_jaxs():
  x, y, z = (np.ones(s, np.float32) for s in [(8, 4), (4, 6), (4, 8, 4)])
  cases = [("i j, j k -> i k, i j", {}, (x, y)), ("i j, j -> i k, i j", {}, (x, y)),
           ("i j, j k -> i k, i", {}, (x, y)), ("i j, j k -> i k", {}, (x, y)),
           ("i j -> i k, i j", {}, (x, y)), ("... i j k, j k -> i k, i j", {}, (x, y)),
           ("i j, (j l) k -> i k, i j", dict(l=2), (x, y)),
           ("i j, j k -> (i l) k, i j", dict(l=2), (x, y)),
           ("... i j, j k -> ... i k, ... i j", {}, (z, y)),
           ("... i j, ... j k -> ... i k, ... i j", {}, (z, y)),
           ("...0 i j, ...1 j k -> ...0 i k, ...0 i j", {}, (z, y)),
           ("... i, j k -> ... k, i j", {}, (z, y)), ("i j, j k -> (i j) k, i j", {}, (x, y))]

  def run(lib, rule, kw, args):
    jx, jnp, cp = lib

    @cp.custom_partitioning
    def f(a, b):
      return a @ b, a

    f.def_partition(None, sharding_rule=rule, **kw)
    s = jx.sharding.NamedSharding(jx.sharding.Mesh(np.array(jx.devices()), ("x",)),
                                  jx.sharding.PartitionSpec())
    return _outcome(lambda: jx.jit(f, in_shardings=(s, s)).lower(*args) and "lowered")

  for rule, kw, args in cases:
    assert run(SC, rule, kw, args) == run(JAX, rule, kw, args), rule
  # without a mesh, or over a mesh of one device, the rule is not looked at, as in JAX
  f = scp.custom_partitioning(lambda a: a * 2)
  f.def_partition(None, sharding_rule="i -> i, i")
  assert sc.jit(f)(x).shape == (8, 4)
  one = sc.sharding.NamedSharding(sc.sharding.Mesh(np.array(sc.devices()[:1]), ("x",)),
                                  sc.sharding.PartitionSpec())
  assert "stablehlo.multiply" in sc.jit(f, in_shardings=one).lower(x).as_text()
