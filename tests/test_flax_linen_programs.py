"""flax.linen's guides run unchanged on stagecraft: what they needed, JAX the oracle.

The in-process tests write each pattern the guides hit against `lib` (jax or stagecraft):
`core.AbstractValue` (flax's `nn.scan` asserts avals are ones), `lax.scan(...,
_split_transpose=...)` (flax passes it), `jnp.result_type` of typed key arrays and
`pe.trace_to_jaxpr_nounits` with an unknown key aval (`nn.scan(split_rngs=...)` traces its
body with the rng's aval), `jnp.shape` / `ndim` / `size` of a `ShapeDtypeStruct`
(`nn.tabulate`), the repr of `addressable_shards` (the RNG guide prints it),
`PartitionSpec.UNCONSTRAINED` (flax.linen.spmd compares with it) and
`experimental.colocated_python` (orbax imports it). `test_linen_guide_program` runs a flax
program made of the guides' cells under JAX and under `python -m stagecraft run` and
compares the printed output exactly.
"""
from __future__ import annotations

import os
import pathlib
import pickle
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.extend.linear_util as jlu
import jax.interpreters.partial_eval as jpe
import numpy as np
import pytest

import stagecraft as sc
from stagecraft.extend import linear_util as slu
from stagecraft.interpreters import partial_eval as spe

LIBS = {"jax": (jax, jlu, jpe), "stagecraft": (sc, slu, spe)}
HERE = pathlib.Path(__file__).resolve().parent


def _outcome(f):
  try:
    return ("ok", repr(f()))
  except Exception as e:   # noqa: BLE001 -- the exception is the result compared
    return (type(e).__name__, str(e))


def _both(fn):
  """`fn(lib)` for JAX and for stagecraft."""
  return fn(jax), fn(sc)


# ---------------------------------------------------------------------------
# core.AbstractValue, lax.scan's _split_transpose


def test_avals_are_abstract_values():
  def run(lib):
    a = lib.core.ShapedArray((2, 3), np.float32)
    tok = lib.typeof(lib.lax.create_token())
    return (isinstance(a, lib.core.AbstractValue), isinstance(tok, lib.core.AbstractValue),
            isinstance(np.float32, lib.core.AbstractValue))
  j, s = _both(run)
  assert s == j == (True, True, False)


def test_scan_accepts_split_transpose():
  def run(lib):
    f = lambda c, x: (c + x, c * x)   # noqa: E731
    xs = lib.numpy.arange(5.0)
    c, ys = lib.lax.scan(f, 1.0, xs, _split_transpose=False)
    g = lib.grad(lambda x: lib.lax.scan(f, x, xs, _split_transpose=True)[1].sum())(2.0)
    return float(c), np.asarray(ys).tolist(), float(g)
  j, s = _both(run)
  assert s == j


# ---------------------------------------------------------------------------
# Typed keys: result_type, partial evaluation with an unknown key aval


def test_result_type_of_key_arrays():
  def run(lib):
    k = lib.random.key(0)
    ks = lib.random.split(k, 3)
    cases = [lambda: lib.numpy.result_type(k), lambda: lib.numpy.result_type(k, k),
             lambda: lib.numpy.result_type(ks), lambda: lib.dtypes.result_type(k),
             lambda: lib.dtypes.result_type(k, return_weak_type_flag=True),
             lambda: lib.numpy.result_type(k, 1.0), lambda: lib.numpy.result_type(k, ks),
             lambda: lib.numpy.result_type(k, np.float32),
             lambda: lib.numpy.result_type(k, lib.numpy.ones(2))]
    return [_outcome(c) for c in cases]
  j, s = _both(run)
  assert s == j
  assert j[0] == ("ok", "key<fry>") and j[5][0] == "ValueError"


def _scan_style_partial_eval(lib, lu, pe):
  """What flax's `nn.scan` does before its loop: trace the body once with the carry's avals
  unknown, and keep what is known (the broadcast values)."""
  key = lib.random.key(0)

  def body(k, x):
    w = lib.numpy.arange(3.0) * 2.0                     # known: no data dependence
    k2 = lib.random.fold_in(k, 7)                       # the rng key is an unknown
    return [w, lib.random.normal(k2, (2,)) + x, lib.random.key_data(k2)]

  avals = [lib.core.ShapedArray((), key.dtype), lib.core.ShapedArray((), np.float32)]
  dbg = lib.api_util.debug_info("scan", body, (None, None), {})
  _, out_pvals, _ = pe.trace_to_jaxpr_nounits(lu.wrap_init(body, debug_info=dbg),
                                              [pe.PartialVal.unknown(a) for a in avals])
  out = []
  for aval, const in out_pvals:
    out.append(("unknown", str(aval)) if aval is not None
               else ("known", np.asarray(const).tolist()))
  return out


def test_partial_eval_with_an_unknown_key_aval():
  j = _scan_style_partial_eval(*LIBS["jax"])
  s = _scan_style_partial_eval(*LIBS["stagecraft"])
  assert s == j
  assert j[0] == ("known", [0.0, 2.0, 4.0]) and j[1] == ("unknown", "float32[2]")


# ---------------------------------------------------------------------------
# jnp.shape / ndim / size of objects with a shape (nn.tabulate's ShapeDtypeStructs)


class _Plain:
  pass


@pytest.mark.parametrize("what", ["sds", "list", "nested_tuple", "float", "np_array",
                                  "object", "none", "str", "keys"])
def test_shape_ndim_size_as_jax(what):
  def run(lib):
    a = {"sds": lambda: lib.ShapeDtypeStruct((3, 4), np.float32), "list": lambda: [1, 2],
         "nested_tuple": lambda: (1, (2, 3)), "float": lambda: 3.0,
         "np_array": lambda: np.ones((2, 5)), "object": _Plain, "none": lambda: None,
         "str": lambda: "ab", "keys": lambda: lib.random.split(lib.random.key(0), 3)}[what]()
    out = []
    for f in (lib.numpy.shape, lib.numpy.ndim, lib.numpy.size,
              lambda a: lib.numpy.size(a, 0), lambda a: lib.numpy.size(a, -1)):
      with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = _outcome(lambda: f(a))
      out.append((r, [str(x.message) for x in w]))
    return out
  j, s = _both(run)
  assert s == j


def test_flax_summary_array_representation():
  """flax's `_ArrayRepresentation.from_array`: `(jnp.shape(x), jnp.result_type(x))`."""
  def run(lib):
    s = lib.ShapeDtypeStruct((2, 3), np.float32)
    return lib.numpy.shape(s), str(lib.numpy.result_type(s))
  j, s = _both(run)
  assert s == j == ((2, 3), "float32")


# ---------------------------------------------------------------------------
# Shard repr, PartitionSpec.UNCONSTRAINED, colocated_python


def test_addressable_shards_repr():
  def run(lib):
    mesh = lib.sharding.Mesh(np.array(lib.devices()[:2]), ("d",))
    x = lib.device_put(np.arange(6, dtype=np.float32).reshape(2, 3),
                       lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec("d")))
    return repr(x.addressable_shards)
  j, s = _both(run)
  assert s == j
  assert "data=[[0. 1. 2.]]" in j


def test_partition_spec_unconstrained():
  def run(lib):
    P = lib.sharding.PartitionSpec
    u = P.UNCONSTRAINED
    return (repr(u), repr(P(None, u)), pickle.loads(pickle.dumps(u)) is u,
            u in {u, None}, P(u) == P(u))
  j, s = _both(run)
  assert s == j


def test_partition_spec_unconstrained_in_a_sharding_raises():
  P = sc.sharding.PartitionSpec
  mesh = sc.sharding.Mesh(np.array(sc.devices()[:2]), ("d",))
  with pytest.raises(NotImplementedError, match="UNCONSTRAINED"):
    sc.sharding.NamedSharding(mesh, P(P.UNCONSTRAINED, "d"))


def test_colocated_python_as_jax():
  import jax.experimental.colocated_python as jcp
  import stagecraft.experimental.colocated_python as scp

  def run(lib, cp):
    d = lib.devices()
    mesh = lib.sharding.Mesh(np.array(d[:4]).reshape(2, 2)[:, ::-1], ("a", "b"))
    cm = cp.colocated_cpu_devices(mesh)
    f = cp.colocated_python(lambda x: x * 2 + 1)
    g = f.specialize(devices=d[:1])
    return (repr(cp.colocated_cpu_devices(d[2:4])), repr(cp.colocated_cpu_devices(d[3:4])),
            repr(cm), repr(cm.devices), np.asarray(f(lib.numpy.arange(3.0))).tolist(),
            np.asarray(g(lib.numpy.ones(2))).tolist())
  assert run(sc, scp) == run(jax, jcp)
  from stagecraft.experimental.colocated_python import func, serialization  # noqa: F401
  assert serialization.DeviceList is jax.experimental.colocated_python.serialization.DeviceList


# ---------------------------------------------------------------------------
# A flax.linen program made of the guides' cells, run under JAX and under stagecraft

LINEN_PROGRAM = textwrap.dedent("""\
    import warnings
    import jax, jax.numpy as jnp, numpy as np
    import flax.linen as nn
    from jax.sharding import Mesh, PartitionSpec as P
    from jax.experimental.shard_map import shard_map

    x = jnp.ones((3, 2))

    class ResidualMLPBlock(nn.Module):
      @nn.compact
      def __call__(self, x, _):
        h = nn.relu(nn.Dense(features=2)(x))
        return x + h, None

    # rng_guide: nn.scan with split rngs (its body is traced with the key's aval)
    ScanMLP = nn.scan(ResidualMLPBlock, variable_axes={'params': 0},
                      variable_broadcast=False, split_rngs={'params': True}, length=3)
    v = ScanMLP().init(jax.random.key(0), x, None)
    print(v)
    print(ScanMLP().apply(v, x, None))

    # rng_guide: nn.vmap with split rngs
    BatchDense = nn.vmap(nn.Dense, in_axes=0, out_axes=0, variable_axes={'params': 0},
                         split_rngs={'params': True})
    print(BatchDense(2).init(jax.random.key(0), x))

    # linen_intro / rnncell guide: an LSTM over a sequence (nn.RNN scans the cell)
    lstm = nn.RNN(nn.LSTMCell(features=2), return_carry=True)
    xs = jax.random.normal(jax.random.key(1), (1, 5, 2))
    lv = lstm.init(jax.random.key(2), xs)
    print(jax.tree_util.tree_map(jnp.shape, lv))
    print(lstm.apply(lv, xs))

    # quick_start: nn.tabulate (its rows hold ShapeDtypeStructs)
    class CNN(nn.Module):
      @nn.compact
      def __call__(self, x):
        x = nn.avg_pool(nn.relu(nn.Conv(4, (3, 3))(x)), (2, 2), (2, 2))
        return nn.Dense(3)(x.reshape((x.shape[0], -1)))
    print(CNN().tabulate(jax.random.key(0), jnp.ones((1, 8, 8, 1)),
                         console_kwargs={'force_terminal': False, 'width': 200}))

    # rng_guide: keys sharded over a mesh in shard_map, and the output's shards
    mesh = Mesh(np.array(jax.devices()[:2]), ('data',))
    class Noisy(nn.Module):
      @nn.compact
      def __call__(self, x):
        return nn.Dense(1)(x) + jax.random.normal(self.make_rng('params'), (x.shape[0], 1))
    model = Noisy()
    xb = jnp.arange(4.0).reshape(2, 2)
    variables = model.init(jax.random.key(3), xb)
    fwd = shard_map(lambda v, x, k: model.apply(v, x, rngs={'params': k[0]}), mesh=mesh,
                    in_specs=(P(), P('data'), P('data')), out_specs=P('data'))
    out = fwd(variables, xb, jax.random.split(jax.random.key(4), 2))
    print(out.addressable_shards)

    # flax_on_pjit: logical axis rules (flax.linen.spmd meets PartitionSpec.UNCONSTRAINED)
    rules = (('batch', 'data'), ('hidden', None))
    print(nn.logical_to_mesh_axes(('batch', 'hidden'), rules))
    """)


def _env():
  env = dict(os.environ)
  env["JAX_PLATFORMS"] = "cpu"
  env["PYTHONPATH"] = os.pathsep.join(
      [str(pathlib.Path(sc.__file__).resolve().parent.parent)]
      + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  return env


def test_linen_guide_program(tmp_path):
  pytest.importorskip("flax")
  script = tmp_path / "linen_guides.py"
  script.write_text(LINEN_PROGRAM)
  procs = [subprocess.Popen([sys.executable, *argv, script.name], cwd=tmp_path, env=_env(),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
           for argv in ([], ["-m", "stagecraft", "run"])]
  (jout, jerr), (sout, serr) = [p.communicate(timeout=300) for p in procs]
  assert procs[0].returncode == 0, jerr[-3000:]
  assert procs[1].returncode == 0, serr[-3000:]
  assert "fry" not in jout and "ResidualMLPBlock" not in jout   # the program ran its cells
  assert sout == jout
