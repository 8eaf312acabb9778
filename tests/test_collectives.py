"""Collectives over named axes (psum, pmean, pmax, pmin, psum_scatter, all_gather, ppermute,
pshuffle, all_to_all, axis_index, axis_size) on 4 CPU devices: against their NumPy
definitions and JAX's pmap, under jit(pmap), pmap(jit), grad and vmap(axis_name=...), with
nested pmaps over a 2x2 grid and tuple axis names."""
from __future__ import annotations

import jax
import jax.numpy as jjnp
import re

import numpy as np
import pytest

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft import lax
from stagecraft.test_util import check_grads

N = 4
RNG = np.random.RandomState(0)


def _x(*shape):
  return RNG.randn(*shape).astype(np.float32)


def _jax(f, *args):
  """Runs a JAX pmap and blocks on it (a chain of unblocked JAX pmaps can abort)."""
  return np.asarray(jax.block_until_ready(f(*args)))


# ---------------------------------------------------------------------------
# Cases: (id, body(L) -> per-device function using the collectives module L, global input,
# NumPy definition of the global result, differentiable)

PERM = [(0, 1), (1, 2), (2, 0)]   # member 3 receives nothing -> zeros
SHUF = [2, 0, 3, 1]


def _np_ppermute(x):
  out = np.zeros_like(x)
  for s, d in PERM:
    out[d] = x[s]
  return out


def _np_scatter_untiled(x):   # x: (N, N, 2): member d holds x[d] (N, 2)
  return x.sum(0)


def _np_scatter_tiled(x):     # x: (N, 2N, 2): member i gets rows 2i:2i+2 of the sum
  return x.sum(0).reshape(N, 2, 2)


def _np_all_to_all(x):        # x: (N, N, 3): out[d][s] = x[s][d]
  return np.swapaxes(x, 0, 1)


CASES = [
    ("psum", lambda L: lambda x: L.psum(x, "i"), (N, 3),
     lambda x: np.broadcast_to(x.sum(0), x.shape), True),
    ("pmean", lambda L: lambda x: L.pmean(x, "i"), (N, 3),
     lambda x: np.broadcast_to(x.mean(0), x.shape), True),
    ("pmax", lambda L: lambda x: L.pmax(x, "i"), (N, 3),
     lambda x: np.broadcast_to(x.max(0), x.shape), False),   # no JVP, as JAX
    ("pmin", lambda L: lambda x: L.pmin(x, "i"), (N, 3),
     lambda x: np.broadcast_to(x.min(0), x.shape), False),
    ("psum_scatter", lambda L: lambda x: L.psum_scatter(x, "i"), (N, N, 2),
     _np_scatter_untiled, True),
    ("psum_scatter_tiled", lambda L: lambda x: L.psum_scatter(x, "i", tiled=True),
     (N, 2 * N, 2), _np_scatter_tiled, True),
    ("psum_scatter_dim1", lambda L: lambda x: L.psum_scatter(x, "i", scatter_dimension=1),
     (N, 2, N), lambda x: x.sum(0).T, True),
    ("all_gather", lambda L: lambda x: L.all_gather(x, "i"), (N, 3),
     lambda x: np.broadcast_to(x, (N,) + x.shape), True),
    ("all_gather_axis1", lambda L: lambda x: L.all_gather(x, "i", axis=1), (N, 3, 2),
     lambda x: np.broadcast_to(np.moveaxis(x, 0, 1), (N, 3, N, 2)), True),
    ("all_gather_tiled", lambda L: lambda x: L.all_gather(x, "i", tiled=True), (N, 2, 3),
     lambda x: np.broadcast_to(x.reshape(2 * N, 3), (N, 2 * N, 3)), True),
    ("ppermute", lambda L: lambda x: L.ppermute(x, "i", PERM), (N, 3), _np_ppermute, True),
    ("pshuffle", lambda L: lambda x: L.pshuffle(x, "i", SHUF), (N, 3),
     lambda x: x[SHUF], True),
    ("all_to_all", lambda L: lambda x: L.all_to_all(x, "i", 0, 0), (N, N, 3),
     _np_all_to_all, True),
    ("all_to_all_tiled",
     lambda L: lambda x: L.all_to_all(x, "i", 1, 0, tiled=True), (N, 3, 2 * N),
     lambda x: np.stack([np.concatenate([x[s, :, 2 * d:2 * d + 2] for s in range(N)], 0)
                         for d in range(N)]), True),
    ("axis_index", lambda L: lambda x: x * L.axis_index("i"), (N, 3),
     lambda x: x * np.arange(N)[:, None], True),
    ("psum_one", lambda L: lambda x: x * L.psum(1, "i"), (N, 3), lambda x: x * N, True),
    ("pytree", lambda L: lambda x: L.psum({"a": x, "b": (x * 2,)}, "i")["b"][0], (N, 3),
     lambda x: np.broadcast_to(2 * x.sum(0), x.shape), True),
]
IDS = [c[0] for c in CASES]

_pmapped: dict = {}


def _pm(case_id, wrap=None):
  """Module-level cache of pmapped functions (compiled once per test session)."""
  key = (case_id, wrap)
  if key not in _pmapped:
    body = dict((c[0], c[1]) for c in CASES)[case_id](lax)
    if wrap == "jit_inside":
      _pmapped[key] = sc.pmap(sc.jit(body), "i")
    elif wrap == "jit_outside":
      _pmapped[key] = sc.jit(sc.pmap(body, "i"))
    else:
      _pmapped[key] = sc.pmap(body, "i")
  return _pmapped[key]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_collective_vs_numpy(case):
  cid, _, shape, ref, _ = case
  x = _x(*shape)
  np.testing.assert_allclose(np.asarray(_pm(cid)(x)), ref(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_collective_vs_jax_pmap(case):
  cid, body, shape, _, _ = case
  x = _x(*shape)
  want = _jax(jax.pmap(body(jax.lax), "i"), x)
  np.testing.assert_allclose(np.asarray(_pm(cid)(x)), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("wrap", ["jit_inside", "jit_outside"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_collective_under_jit(case, wrap):
  cid, _, shape, ref, _ = case
  x = _x(*shape)
  np.testing.assert_allclose(np.asarray(_pm(cid, wrap)(x)), ref(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_collective_vmap_matches_pmap(case):
  cid, body, shape, ref, _ = case
  x = _x(*shape)
  got = sc.vmap(body(lax), axis_name="i")(x)
  np.testing.assert_allclose(np.asarray(got), ref(x), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(got), np.asarray(_pm(cid)(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", [c for c in CASES if c[4]], ids=[c[0] for c in CASES if c[4]])
def test_collective_grad_vs_jax(case):
  cid, body, shape, _, _ = case
  x = _x(*shape)
  w = _x(*np.shape(case[3](x)))

  g = sc.grad(lambda x: jnp.sum(jnp.sin(_pm(cid)(x)) * w))(x)
  jf = jax.pmap(body(jax.lax), "i")
  want = np.asarray(jax.block_until_ready(
      jax.grad(lambda x: jjnp.sum(jjnp.sin(jf(x)) * w))(x)))
  np.testing.assert_allclose(np.asarray(g), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cid", ["psum", "pmean", "all_gather_tiled", "ppermute",
                                 "psum_scatter", "all_to_all"])
def test_collective_check_grads(cid):
  x = _x(*dict((c[0], c[2]) for c in CASES)[cid])
  f = _pm(cid)
  check_grads(lambda x: jnp.sin(f(x)), (x,), order=1, modes=("fwd", "rev"), atol=2e-2,
              rtol=2e-2, eps=1e-2)


@pytest.mark.parametrize("case", [c for c in CASES if c[4]], ids=[c[0] for c in CASES if c[4]])
def test_collective_grad_inside_vmap_matches_pmap(case):
  cid, body, shape, _, _ = case
  x = _x(*shape)
  w = _x(*np.shape(case[3](x)))
  f = body(lax)
  g_v = sc.grad(lambda x: jnp.sum(jnp.sin(sc.vmap(f, axis_name="i")(x)) * w))(x)
  g_p = sc.grad(lambda x: jnp.sum(jnp.sin(_pm(cid)(x)) * w))(x)
  np.testing.assert_allclose(np.asarray(g_v), np.asarray(g_p), rtol=1e-4, atol=1e-5)


def test_axis_size_and_psum_one_static():
  seen = []

  def f(x):
    seen.append((lax.axis_size("i"), lax.psum(1, "i")))
    return x
  sc.pmap(f, "i")(np.zeros(N, np.float32))
  assert seen == [(N, N)]
  assert isinstance(seen[0][1], int)


def test_pmax_pmin_int():
  x = RNG.randint(-50, 50, size=(N, 5)).astype(np.int32)
  got = sc.pmap(lambda x: (lax.pmax(x, "i"), lax.pmin(x, "i"), lax.psum(x, "i")), "i")(x)
  np.testing.assert_array_equal(np.asarray(got[0]), np.broadcast_to(x.max(0), x.shape))
  np.testing.assert_array_equal(np.asarray(got[1]), np.broadcast_to(x.min(0), x.shape))
  np.testing.assert_array_equal(np.asarray(got[2]), np.broadcast_to(x.sum(0), x.shape))


def test_ppermute_ring_and_inverse():
  ring = [(i, (i + 1) % N) for i in range(N)]
  inv = [(d, s) for s, d in ring]
  x = _x(N, 2)
  f = sc.pmap(lambda x: lax.ppermute(lax.ppermute(x, "i", ring), "i", inv), "i")
  np.testing.assert_allclose(np.asarray(f(x)), x)
  g = sc.pmap(lambda x: lax.ppermute(x, "i", ring), "i")
  np.testing.assert_allclose(np.asarray(g(x)), np.roll(x, 1, axis=0))


# ---------------------------------------------------------------------------
# Nested pmap over a 2x2 grid and tuple axis names

X22 = _x(2, 2, 3)

_nested = {}


def _nested_fn(kind):
  if kind not in _nested:
    bodies = {
        "i": lambda x: lax.psum(x, "i"),
        "j": lambda x: lax.psum(x, "j"),
        "ij": lambda x: lax.psum(x, ("i", "j")),
        "idx": lambda x: (x * 0 + lax.axis_index("i"), x * 0 + lax.axis_index("j")),
        "gather_ij": lambda x: lax.pmax(x, ("i", "j")),
        "size": lambda x: x * lax.psum(1, ("i", "j")) + lax.axis_size("j"),
    }
    _nested[kind] = sc.pmap(sc.pmap(bodies[kind], "j"), "i")
  return _nested[kind]


def test_nested_psum_i():
  np.testing.assert_allclose(np.asarray(_nested_fn("i")(X22)),
                             np.broadcast_to(X22.sum(0, keepdims=True), X22.shape), rtol=1e-5)


def test_nested_psum_j():
  np.testing.assert_allclose(np.asarray(_nested_fn("j")(X22)),
                             np.broadcast_to(X22.sum(1, keepdims=True), X22.shape), rtol=1e-5)


def test_nested_psum_ij():
  np.testing.assert_allclose(np.asarray(_nested_fn("ij")(X22)),
                             np.broadcast_to(X22.sum((0, 1), keepdims=True), X22.shape),
                             rtol=1e-5)


def test_nested_pmax_ij_and_sizes():
  np.testing.assert_allclose(np.asarray(_nested_fn("gather_ij")(X22)),
                             np.broadcast_to(X22.max((0, 1), keepdims=True), X22.shape))
  np.testing.assert_allclose(np.asarray(_nested_fn("size")(X22)), X22 * 4 + 2, rtol=1e-6)


def test_nested_axis_index():
  i, j = _nested_fn("idx")(X22)
  ii, jj = np.meshgrid(np.arange(2), np.arange(2), indexing="ij")
  np.testing.assert_array_equal(np.asarray(i)[..., 0], ii)
  np.testing.assert_array_equal(np.asarray(j)[..., 0], jj)


def test_nested_vs_jax():
  # NB: JAX 0.10's nested pmap is broken (its shard_map meshes clash), so the oracle is
  # JAX's vmap of vmap with the same axis names.
  for body in [lambda L: lambda x: L.psum(x, "i") * L.axis_index("j"),
               lambda L: lambda x: L.pmean(x, ("i", "j")) + L.psum(x, "j")]:
    want = _jax(jax.vmap(jax.vmap(body(jax.lax), axis_name="j"), axis_name="i"), X22)
    got = sc.pmap(sc.pmap(body(lax), "j"), "i")(X22)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def test_nested_matches_vmap_vmap():
  body = lambda x: lax.psum(x, ("i", "j")) * lax.axis_index("i") + lax.psum(x, "j")
  got = sc.pmap(sc.pmap(body, "j"), "i")(X22)
  want = sc.vmap(sc.vmap(body, axis_name="j"), axis_name="i")(X22)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5)


def test_nested_grad():
  body = lambda x: jnp.sin(lax.psum(x, "j")) * lax.pmean(x, ("i", "j"))
  f = sc.pmap(sc.pmap(body, "j"), "i")
  jf = jax.vmap(jax.vmap(lambda x: jjnp.sin(jax.lax.psum(x, "j")) *
                         jax.lax.pmean(x, ("i", "j")), axis_name="j"), axis_name="i")
  g = sc.grad(lambda x: jnp.sum(f(x)))(X22)
  want = np.asarray(jax.block_until_ready(jax.grad(lambda x: jjnp.sum(jf(x)))(X22)))
  np.testing.assert_allclose(np.asarray(g), want, rtol=1e-4, atol=1e-5)


def test_pmap_of_vmap_tuple_axis():
  # pmap over 'i' (devices) of vmap over 'j' (in-device batch): the tuple axis spans both.
  x = _x(N, 3, 2)
  body = lambda x: lax.psum(x, ("i", "j")) + lax.psum(x, "j") * lax.axis_index("i")
  got = sc.pmap(sc.vmap(body, axis_name="j"), "i")(x)
  want = (np.broadcast_to(x.sum((0, 1), keepdims=True), x.shape) +
          np.broadcast_to(x.sum(1, keepdims=True), x.shape) * np.arange(N)[:, None, None])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  jwant = _jax(jax.pmap(jax.vmap(lambda x: jax.lax.psum(x, ("i", "j")) + jax.lax.psum(x, "j")
                                 * jax.lax.axis_index("i"), axis_name="j"), "i"), x)
  np.testing.assert_allclose(np.asarray(got), jwant, rtol=1e-5, atol=1e-5)


def test_vmap_of_pmap_axis_names():
  x = _x(3, N, 2)
  body = lambda x: lax.psum(x, "i") + lax.pmax(x, "v")
  got = sc.vmap(sc.pmap(body, "i"), axis_name="v")(x)
  want = (np.broadcast_to(x.sum(1, keepdims=True), x.shape) +
          np.broadcast_to(x.max(0, keepdims=True), x.shape))
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# Errors


def test_unbound_axis_name_in_jax_words():
  import jax
  for m in (sc, jax):   # NB: JAX's text for psum/pmax/pmin names psum
    with pytest.raises(NameError, match=re.escape(
        "Found an unbound axis name: k. To fix this, please call psum under `jax.shard_map`.")):
      m.pmap(lambda x: m.lax.pmax(x, "k"), "i")(np.zeros(N, np.float32))
  # nested pmaps (JAX 0.10's cannot nest them)
  with pytest.raises(NameError, match="Found an unbound axis name: zz"):
    sc.pmap(sc.pmap(lambda x: lax.psum(x, "zz"), "j"), "i")(np.zeros((2, 2), np.float32))


def test_unbound_axis_outside_map():
  with pytest.raises(NameError, match="unbound axis name"):
    lax.psum(jnp.ones(3), "i")
  with pytest.raises(NameError, match="unbound axis name"):
    lax.axis_index("i")


def test_ppermute_bad_perm():
  with pytest.raises(ValueError, match="unique"):
    sc.pmap(lambda x: lax.ppermute(x, "i", [(0, 1), (0, 2)]), "i")(np.zeros(N, np.float32))
  with pytest.raises(ValueError, match=r"\[0, 4\)"):
    sc.pmap(lambda x: lax.ppermute(x, "i", [(0, 7)]), "i")(np.zeros(N, np.float32))
  with pytest.raises(ValueError, match="permutation"):
    sc.pmap(lambda x: lax.pshuffle(x, "i", [0, 0, 1, 2]), "i")(np.zeros(N, np.float32))


def test_psum_scatter_bad_size():
  with pytest.raises(ValueError, match="size 4"):
    sc.pmap(lambda x: lax.psum_scatter(x, "i"), "i")(np.zeros((N, 3), np.float32))
  with pytest.raises(ValueError, match="divisible"):
    sc.pmap(lambda x: lax.psum_scatter(x, "i", tiled=True), "i")(np.zeros((N, 6), np.float32))


def test_axis_index_tuple_names():
  body = lambda x: x * 0 + lax.axis_index(("i", "j"))
  want = np.arange(4, dtype=np.float32).reshape(2, 2, 1) * np.ones((1, 1, 3), np.float32)
  _close = lambda a, b: np.testing.assert_allclose(np.asarray(a), b)
  _close(sc.pmap(sc.pmap(body, "j"), "i")(X22), want)
  _close(sc.vmap(sc.vmap(body, axis_name="j"), axis_name="i")(X22), want)
  _close(sc.pmap(sc.vmap(body, axis_name="j"), "i")(X22), want)
  jwant = _jax(jax.vmap(jax.vmap(lambda x: x * 0 + jax.lax.axis_index(("i", "j")),
                                 axis_name="j"), axis_name="i"), X22)
  _close(sc.pmap(sc.pmap(body, "j"), "i")(X22), jwant)
  # reversed order: j varies slowest
  body_ji = lambda x: x * 0 + lax.axis_index(("j", "i"))
  _close(sc.pmap(sc.pmap(body_ji, "j"), "i")(X22),
         np.arange(4, dtype=np.float32).reshape(2, 2).T[..., None] * np.ones((1, 1, 3)))


def test_all_gather_tuple_names_nested():
  f = sc.pmap(sc.pmap(lambda x: lax.all_gather(x, ("i", "j")), "j"), "i")
  np.testing.assert_allclose(np.asarray(f(X22)), np.broadcast_to(X22.reshape(4, 3),
                                                                 (2, 2, 4, 3)))
  g = sc.pmap(sc.pmap(lambda x: lax.all_gather(x, ("j", "i"), tiled=True), "j"), "i")
  np.testing.assert_allclose(np.asarray(g(X22)), np.broadcast_to(
      X22.transpose(1, 0, 2).reshape(12), (2, 2, 12)))


def test_axis_index_groups_psum_pmean_pmax_vs_jax():
  x = _x(N, 3)
  g = [[0, 1], [2, 3]]
  g2 = [[0, 3], [1, 2]]
  for body in [lambda L: lambda v: L.psum(v, "i", axis_index_groups=g),
               lambda L: lambda v: L.pmean(v, "i", axis_index_groups=g),
               lambda L: lambda v: L.pmax(v, "i", axis_index_groups=g2),
               lambda L: lambda v: v * L.psum(1, "i", axis_index_groups=g)]:
    want = _jax(jax.pmap(body(jax.lax), "i"), x)
    np.testing.assert_allclose(np.asarray(sc.pmap(body(lax), "i")(x)), want, rtol=1e-5)


def test_ppermute_tuple_names_nested():
  ring = [(k, (k + 1) % N) for k in range(N)]
  f = sc.pmap(sc.pmap(lambda x: lax.ppermute(x, ("i", "j"), ring), "j"), "i")
  np.testing.assert_allclose(np.asarray(f(X22)),
                             np.roll(X22.reshape(N, 3), 1, 0).reshape(2, 2, 3))
  g = sc.pmap(sc.pmap(lambda x: lax.ppermute(x, ("j", "i"), ring), "j"), "i")
  want = np.roll(X22.transpose(1, 0, 2).reshape(N, 3), 1, 0).reshape(2, 2, 3)
  np.testing.assert_allclose(np.asarray(g(X22)), want.transpose(1, 0, 2))
  gr = sc.grad(lambda x: jnp.sum(jnp.sin(f(x))))(X22)
  want_g = np.roll(np.cos(np.roll(X22.reshape(N, 3), 1, 0)), -1, 0).reshape(2, 2, 3)
  np.testing.assert_allclose(np.asarray(gr), want_g, rtol=1e-5)


@pytest.mark.parametrize("sa,ca", [(1, 2), (0, 1), (2, 0), (0, 2), (2, 1)])
def test_all_to_all_untiled_axes(sa, ca):
  shape = [2, 3, 5]
  shape[sa] = N
  x = _x(N, *shape)
  f = lambda L: lambda v: L.all_to_all(v, "i", sa, ca)
  pf = sc.pmap(f(lax), "i")
  want = _jax(jax.pmap(f(jax.lax), "i"), x)
  np.testing.assert_allclose(np.asarray(pf(x)), want)
  np.testing.assert_allclose(np.asarray(sc.vmap(f(lax), axis_name="i")(x)), want)
  # NB: JAX 0.10's grad of an untiled all_to_all with split_axis != concat_axis fails its
  # own cotangent type check, so the oracle is the vmap path and finite differences.
  g_p = sc.grad(lambda v: jnp.sum(jnp.sin(pf(v))))(x)
  g_v = sc.grad(lambda v: jnp.sum(jnp.sin(sc.vmap(f(lax), axis_name="i")(v))))(x)
  np.testing.assert_allclose(np.asarray(g_p), np.asarray(g_v), rtol=1e-5, atol=1e-6)
  check_grads(lambda v: jnp.sin(pf(v)), (x,), order=1, modes=("rev",), atol=2e-2, rtol=2e-2,
              eps=1e-2)


# ---------------------------------------------------------------------------
# pbroadcast: JAX 0.10.2 documents it as `psum(where(axis_index(axis) == source, x, 0))`
# (and has no CPU lowering for it): that formula, run by JAX, is the oracle.


def _jax_pbroadcast(v, axis, source):
  return jax.lax.psum(jjnp.where(jax.lax.axis_index(axis) == source, v, 0), axis)


@pytest.mark.parametrize("source", [0, 2, 3])
def test_pbroadcast_matches_jaxs_definition(source):
  x = np.random.default_rng(source).normal(size=(4, 3)).astype(np.float32)
  for ours, theirs in [(sc.pmap, jax.pmap), (sc.vmap, jax.vmap)]:
    got = ours(lambda v: lax.pbroadcast(v, "i", source), axis_name="i")(x)
    want = theirs(lambda v: _jax_pbroadcast(v, "i", source), axis_name="i")(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(got), np.broadcast_to(x[source], x.shape))
  w = np.arange(12.0, dtype=np.float32).reshape(4, 3)
  g = sc.grad(lambda x: (sc.pmap(lambda v: lax.pbroadcast(v, "i", source),
                                 axis_name="i")(x) * w).sum())(x)
  gj = jax.grad(lambda x: (jax.vmap(lambda v: _jax_pbroadcast(v, "i", source),
                                    axis_name="i")(x) * w).sum())(x)
  np.testing.assert_allclose(np.asarray(g), np.asarray(gj))


def test_pbroadcast_keeps_bits_and_pytrees():
  x = np.array([[np.nan, 1], [-0.0, 2], [3, np.inf], [4, 5]], np.float32)
  tree = {"a": x, "b": np.arange(4, dtype=np.int32)}
  out = sc.pmap(lambda t: lax.pbroadcast(t, "i", 1), axis_name="i")(tree)
  assert np.all(np.signbit(np.asarray(out["a"])[:, 0]))   # -0.0 copied, not summed
  np.testing.assert_array_equal(np.asarray(out["b"]), [1, 1, 1, 1])
  with pytest.raises(ValueError, match=r"source must be in \[0, 4\) for axis 'i' of size 4"):
    sc.vmap(lambda v: lax.pbroadcast(v, "i", 4), axis_name="i")(x)
  with pytest.raises(NameError):
    lax.pbroadcast(x, "nope", 0)


def test_collective_primitives_have_jaxs_names():
  for name in ["psum_p", "pmax_p", "pmin_p", "ppermute_p", "all_gather_p", "all_to_all_p",
               "axis_index_p", "sharding_constraint_p"]:
    assert getattr(lax, name).name == getattr(jax.lax, name).name
