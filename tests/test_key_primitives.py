"""JAX's key primitives in stagecraft's programs: `random_seed`, `random_wrap`,
`random_unwrap`, `random_bits`, `random_split`, `random_fold_in` on values of dtype
`key<fry>` (`stagecraft.lax.prng`), lowered on the key data `u32[..., 2]`.

JAX 0.10.2 is the oracle in the same process: the printed jaxprs of the raw-key functions,
the values (eager, jitted, vmapped, with `jax_threefry_partitionable` off), and structural
operations on key values (lowered on the data, vmapped over its trailing axis)."""
import numpy as np
import pytest

import jax
import jax.numpy as jjnp

import stagecraft as sc
from stagecraft import lax
from stagecraft.lax import prng


def _both(fn):
  return fn(jax), fn(sc)


RAW_KEY_PROGRAMS = {
    "split": lambda m: (lambda k: m.random.split(k)),
    "split3_first": lambda m: (lambda k: m.random.split(k, 3)[0]),
    "split_shape": lambda m: (lambda k: m.random.split(k, (2, 3))),
    "fold_in": lambda m: (lambda k: m.random.fold_in(k, 3)),
    "bits_u8": lambda m: (lambda k: m.random.bits(k, (2,), "uint8")),
    "bits_u32": lambda m: (lambda k: m.random.bits(k, (2, 3))),
    "vmap_split": lambda m: m.vmap(lambda k: m.random.split(k)),
}


@pytest.mark.parametrize("name", sorted(RAW_KEY_PROGRAMS))
def test_raw_key_jaxprs_print_as_jax_s(name):
  mk = RAW_KEY_PROGRAMS[name]
  arg = lambda m: m.random.split(m.random.PRNGKey(1), 4) if name.startswith("vmap") else \
      m.random.PRNGKey(1)
  want, got = _both(lambda m: str(m.make_jaxpr(mk(m))(arg(m))))
  assert got == want
  want, got = _both(lambda m: np.asarray(m.jit(mk(m))(arg(m))))
  np.testing.assert_array_equal(got, want)


def test_seed_jaxpr_and_values():
  want, got = _both(lambda m: str(m.make_jaxpr(lambda s: m.random.PRNGKey(s))(7)))
  assert got == want
  assert "random_seed[impl=fry]" in got and "random_unwrap" in got
  for seed in (0, 7, 2 ** 31 - 1):
    want, got = _both(lambda m: np.asarray(m.jit(m.random.PRNGKey)(seed)))
    np.testing.assert_array_equal(got, want)


def test_values_with_threefry_partitionable_off():
  def run(m):
    k = m.random.PRNGKey(3)
    f = m.jit(lambda k: (m.random.bits(k, (5,)), m.random.split(k, 3), m.random.fold_in(k, 9),
                         m.random.bits(k, (3,), "uint8")))
    out = [f(k)]
    m.config.update("jax_threefry_partitionable", False)
    try:
      out.append(f(k))   # a new trace: the lowering reads the option
      out.append((m.random.bits(k, (5,)), m.random.split(k, 3), m.random.fold_in(k, 9),
                  m.random.bits(k, (3,), "uint8")))
    finally:
      m.config.update("jax_threefry_partitionable", True)
    out.append(f(k))
    return [[np.asarray(y) for y in x] for x in out]
  want, got = _both(run)
  for w, g in zip(want, got):
    for a, b in zip(w, g):
      np.testing.assert_array_equal(b, a)
  assert not np.array_equal(got[0][0], got[1][0])   # the two schemes differ


def test_vmapped_and_eager_values():
  def run(m):
    keys = m.random.split(m.random.PRNGKey(0), 3)
    return (np.asarray(m.vmap(lambda k: m.random.bits(k, (4,)))(keys)),
            np.asarray(m.vmap(lambda k, i: m.random.fold_in(k, i))(keys, jjnp.arange(3) if
                                                                  m is jax else sc.numpy.arange(3))),
            np.asarray(m.vmap(m.random.split, (0, None))(keys, 2)),
            np.asarray(m.random.normal(keys[1], (2,))))
  for a, b in zip(*_both(run)):
    np.testing.assert_allclose(b, a, rtol=1e-6)


def _key_data(k):
  return prng.random_unwrap_p.bind(k)


def _keys(d):
  return prng.random_wrap_p.bind(d, impl=prng.threefry_impl)


STRUCTURAL = {
    "rev": (lambda m, k: m.lax.rev(k, (0,))),
    "slice": (lambda m, k: m.lax.slice(k, (1,), (3,))),
    "concatenate": (lambda m, k: m.lax.concatenate([k, k], 0)),
    "reshape": (lambda m, k: m.lax.reshape(k, (2, 2))),
    "broadcast_in_dim": (lambda m, k: m.lax.broadcast_in_dim(k, (3, 4), (1,))),
    "transpose": (lambda m, k: m.lax.transpose(m.lax.reshape(k, (2, 2)), (1, 0))),
    "dynamic_slice": (lambda m, k: m.lax.dynamic_slice(k, (np.int32(1),), (2,))),
    "select_n": (lambda m, k: m.lax.select_n(np.array([True, False, True, False]), k,
                                             m.lax.rev(k, (0,)))),
}


@pytest.mark.parametrize("name", sorted(STRUCTURAL))
def test_structural_ops_on_key_values_lower_on_the_data(name):
  op = STRUCTURAL[name]
  want = np.asarray(jax.random.key_data(jax.jit(
      lambda k: op(jax, jax.random.split(k, 4)))(jax.random.key(5))))

  def ours(d):
    return _key_data(op(sc, prng.random_split_p.bind(_keys(d), shape=(4,))))
  got = np.asarray(sc.jit(ours)(sc.random.PRNGKey(5)))
  np.testing.assert_array_equal(got, want)


def test_key_primitive_errors():
  with pytest.raises(TypeError, match="random_wrap: key data must be uint32"):
    sc.make_jaxpr(lambda d: _keys(d))(np.zeros(3, np.uint32))
  with pytest.raises(TypeError, match="random_bits expects an array of typed PRNG keys"):
    sc.make_jaxpr(lambda d: prng.random_bits_p.bind(d, bit_width=32, shape=()))(
        np.zeros(2, np.uint32))
  with pytest.raises(TypeError, match="bit width of 8, 16, 32 or 64"):
    sc.make_jaxpr(lambda d: prng.random_bits_p.bind(_keys(d), bit_width=7, shape=()))(
        np.zeros(2, np.uint32))


def test_key_values_have_zero_derivatives():
  # the samplers' keys are not differentiated: grad through a draw scales the noise only
  def f(m, x):
    return (x * m.random.normal(m.random.PRNGKey(2), (3,))).sum()
  want, got = _both(lambda m: np.asarray(m.grad(lambda x: f(m, x))(np.ones(3, np.float32))))
  np.testing.assert_allclose(got, want, rtol=1e-6)
  jvp_out = sc.jvp(lambda d: _key_data(prng.random_split_p.bind(_keys(d), shape=(2,))),
                   (sc.random.PRNGKey(0),), (np.zeros(2, sc.dtypes.float0),))
  assert jvp_out[1].dtype == sc.dtypes.float0 and jvp_out[1].shape == (2, 2)


# Typed keys are traced as `key<fry>` values: programs take and return keys, and the key
# functions and the samplers below print JAX's equations (random_split, slice/squeeze of
# keys, nested `_normal`/`_uniform` jits over keys).
R = lambda m: m.random
TYPED_KEY_PROGRAMS = {
    "split": (lambda m: lambda k: R(m).split(k), "typed"),
    "split_index": (lambda m: lambda k: R(m).split(k, 3)[1], "typed"),
    "split_slices": (lambda m: lambda k: (R(m).split(k, 4)[1:3], R(m).split(k, 4)[::-1]),
                     "typed"),
    "fold_in": (lambda m: lambda k: R(m).fold_in(k, 5), "typed"),
    "bits": (lambda m: lambda k: R(m).bits(k, (3,)), "typed"),
    "jit_identity": (lambda m: m.jit(lambda k: k), "typed"),
    "key_of_seed": (lambda m: lambda s: R(m).key(s), "seed"),
    "key_data": (lambda m: lambda k: R(m).key_data(k), "typed"),
    "wrap_key_data": (lambda m: lambda d: R(m).wrap_key_data(d), "raw"),
    "uniform": (lambda m: lambda k: R(m).uniform(k, (3,)), "typed"),
    "normal": (lambda m: lambda k: R(m).normal(k, (3,)), "typed"),
    "normal_raw_key": (lambda m: lambda k: R(m).normal(k, (3,)), "raw"),
    "bernoulli": (lambda m: lambda k: R(m).bernoulli(k, 0.3, (3,)), "typed"),
    "exponential": (lambda m: lambda k: R(m).exponential(k, (2,)), "typed"),
    "gumbel": (lambda m: lambda k: R(m).gumbel(k, (2,)), "typed"),
    "gumbel_high": (lambda m: lambda k: R(m).gumbel(k, (2,), mode="high"), "typed"),
    "truncated_normal": (lambda m: lambda k: R(m).truncated_normal(k, -1., 1., (2,)),
                         "typed"),
    "randint": (lambda m: lambda k: R(m).randint(k, (3,), 0, 10), "typed"),
    "categorical": (lambda m: lambda k: R(m).categorical(k, np.zeros(4, np.float32)),
                    "typed"),
    "permutation": (lambda m: lambda k: R(m).permutation(k, 5), "typed"),
    "choice": (lambda m: lambda k: R(m).choice(k, 5, (2,)), "typed"),
    "vmap_normal": (lambda m: m.vmap(lambda k: R(m).normal(k, (2,))), "batch"),
    "scan_carrying_a_key": (lambda m: lambda k: m.lax.scan(
        lambda c, _: (R(m).split(c)[0], R(m).normal(c)), k, None, length=3), "typed"),
}


def _arg(m, kind):
  return {"typed": lambda: R(m).key(0), "raw": lambda: R(m).PRNGKey(0), "seed": lambda: 3,
          "batch": lambda: R(m).split(R(m).key(0), 3)}[kind]()


@pytest.mark.parametrize("name", sorted(TYPED_KEY_PROGRAMS))
def test_typed_key_programs_print_as_jax_s(name):
  mk, kind = TYPED_KEY_PROGRAMS[name]
  want, got = _both(lambda m: str(m.make_jaxpr(mk(m))(_arg(m, kind))))
  assert got == want


@pytest.mark.parametrize("name", sorted(TYPED_KEY_PROGRAMS))
def test_typed_key_programs_values(name):
  mk, kind = TYPED_KEY_PROGRAMS[name]

  def run(m):
    out = m.jit(mk(m))(_arg(m, kind))
    return [np.asarray(R(m).key_data(x)) if m.numpy.issubdtype(x.dtype, m.dtypes.prng_key)
            else np.asarray(x) for x in m.tree_util.tree_leaves(out)]
  for a, b in zip(*_both(run)):
    np.testing.assert_allclose(b, a, rtol=1e-6)


def test_key_arrays_through_eager_shard_map_and_device_put():
  def run(m):
    mesh = m.sharding.Mesh(np.array(m.devices()[:2]), ("d",))
    P = m.sharding.PartitionSpec
    f = m.shard_map(lambda x, k: x + R(m).normal(k[0], (1, 1)), mesh=mesh,
                    in_specs=(P("d"), P("d")), out_specs=P("d"))
    keys = R(m).split(R(m).key(4), 2)
    placed = m.device_put(keys, m.sharding.NamedSharding(mesh, P("d")))
    return (np.asarray(f(m.numpy.arange(4.0).reshape(2, 2), keys)),
            np.asarray(R(m).key_data(placed)), str(placed.dtype), placed.shape)
  want, got = _both(run)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
  np.testing.assert_array_equal(got[1], want[1])
  assert got[2:] == want[2:]


def test_eager_programs_over_two_meshes_of_the_same_devices_keep_their_mesh():
  # an eager operation on arguments placed over a mesh is cached per layout; two meshes of
  # the same devices and shape but other axis names must not share results' shardings
  def run(m):
    devs = np.array(m.devices()[:4]).reshape(2, 2)
    out = []
    for names in (("data", "model"), ("x", "y")):
      mesh = m.sharding.Mesh(devs, names, axis_types=(m.sharding.AxisType.Explicit,) * 2)
      with m.set_mesh(mesh):
        k = R(m).key(3)
        x = R(m).normal(k, (4, 8), out_sharding=m.sharding.PartitionSpec(None, names[1]))
        spec = m.sharding.PartitionSpec(None, names[1])
        y = m.jit(lambda k: R(m).normal(k, (4, 8), out_sharding=spec))(k)
        mesh_of_key = getattr(k.sharding, "mesh", None)
        out.append((str(m.typeof(x)), repr(x.sharding.spec), str(m.typeof(y)),
                    None if mesh_of_key is None else tuple(mesh_of_key.axis_names),
                    np.asarray(x).tolist()))
    return out
  want, got = _both(run)
  assert got == want
