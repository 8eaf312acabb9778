"""Details found by running JAX 0.10.2's own test files on stagecraft through a scratch
harness (session 36). JAX is the oracle in each test."""
import jax
import jax.ad_checkpoint as jax_ckpt
import jax.scipy.spatial.transform as jst
from jax._src import ad_checkpoint as jax_ad_checkpoint_internal   # (the oracle's name_p)
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.ad_checkpoint as sst_ckpt
import stagecraft.numpy as jnp
import stagecraft.scipy.spatial.transform as sst


def _bits(x):
  return np.asarray(x).tobytes()


# -- scipy.spatial.transform: no rank promotion; JAX's bits ------------------------------------

_Q = np.random.RandomState(0).randn(3, 4).astype(np.float32)


@pytest.mark.parametrize("shape", ["single", "stack"])
@pytest.mark.parametrize("method", ["inv_rotvec", "inv_quat", "magnitude", "as_matrix"])
def test_rotation_runs_under_rank_promotion_raise_with_jax_bits(shape, method):
  q = _Q[0] if shape == "single" else _Q

  def run(ns):
    r = ns.Rotation.from_quat(q)
    if method == "inv_rotvec":
      return r.inv().as_rotvec()
    if method == "inv_quat":
      return r.inv().as_quat()
    if method == "magnitude":
      return r.magnitude()
    return r.as_matrix()

  with sc.numpy_rank_promotion("raise"), jax.numpy_rank_promotion("raise"):
    ours, theirs = run(sst), run(jst)
  assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
  assert _bits(ours) == _bits(theirs)


@pytest.mark.parametrize("times", [0.0, np.zeros(1), np.zeros(2), np.array([0.5, 1.5])],
                         ids=["scalar", "one", "two", "between"])
def test_slerp_runs_under_rank_promotion_raise_with_jax_bits(times):
  def run(ns, lib):
    key_times = lib.numpy.arange(3, dtype=np.float32)
    return ns.Slerp.init(key_times, ns.Rotation.from_quat(_Q))(times).as_rotvec()

  with sc.numpy_rank_promotion("raise"), jax.numpy_rank_promotion("raise"):
    ours, theirs = run(sst, sc), run(jst, jax)
  assert ours.shape == theirs.shape
  assert _bits(ours) == _bits(theirs)


# -- debug.print / debug.callback: JAX's format checks, the two-call form, static args -------

def _outcome(fn):
  try:
    fn()
  except Exception as e:  # noqa: BLE001 -- the exception is what is compared
    return type(e).__name__, str(e).replace("JitTracer", "Tracer")
  return None


_DEBUG_CALLS = {
    "unused kwarg": lambda lib, x: lib.jit(lambda x: lib.debug.print("h: {x}", x=x, y=x))(x),
    "unused positional": lambda lib, x: lib.jit(lambda x: lib.debug.print("hello", x))(x),
    "f-string": lambda lib, x: lib.jit(lambda x: lib.debug.print(f"h: {x}", x=x))(x),
    "missing kwarg": lambda lib, x: lib.debug.print("hello {a}"),
    "missing positional": lambda lib, x: lib.debug.print("hello {}"),
    "index out of range": lambda lib, x: lib.debug.print("hello {1}", 2),
    "option in second call": lambda lib, x: lib.debug.print(ordered=True)(
        "hello {a}", a=42, partitioned=True),
    "print kwarg in first call": lambda lib, x: lib.debug.print(ordered=True, a=42),
    "print positional in first call": lambda lib, x: lib.debug.print(None, 42, ordered=True),
    "callback kwarg in first call": lambda lib, x: lib.debug.callback(ordered=True, a=42),
    "callback positional in first call": lambda lib, x: lib.debug.callback(None, 42),
    "not callable": lambda lib, x: lib.debug.callback(3, 42),
    "not callable, two calls": lambda lib, x: lib.debug.callback(ordered=True)(3, 42),
}


@pytest.mark.parametrize("case", sorted(_DEBUG_CALLS))
def test_debug_print_and_callback_errors_as_jax(case):
  call = _DEBUG_CALLS[case]
  theirs = _outcome(lambda: call(jax, jax.numpy.arange(2)))
  ours = _outcome(lambda: call(sc, jnp.arange(2)))
  assert theirs is not None and ours == theirs


def _printed(capfd, fn):
  fn()
  return capfd.readouterr().out


def test_debug_two_call_forms_and_static_callback_args_as_jax(capfd):
  def run(lib):
    lib.debug.print(ordered=True)("x: {x}", x=42)
    lib.debug.callback(ordered=True)(print, 100, sep="|", end="!\n")
    lib.jit(lambda x: lib.debug.print(ordered=True)("x: {x} {}", x, x=x))(lib.numpy.arange(2))
    lib.jit(lambda x: lib.debug.callback(print, "label", x, sep=":"))(lib.numpy.arange(2))
    lib.effects_barrier()

  theirs, ours = _printed(capfd, lambda: run(jax)), _printed(capfd, lambda: run(sc))
  assert theirs == "x: 42\n100!\nx: [0 1] [0 1]\nlabel:[0 1]\n"
  assert ours == theirs


def _ckpt(lib):
  return sst_ckpt if lib is sc else jax_ckpt


def _named_print_program(lib):
  def f(x):
    y = _ckpt(lib).checkpoint_name(x + 1., "y")
    z = _ckpt(lib).checkpoint_name(y * 2., "z")
    lib.debug.print("y: {}, z: {}", y, z)
    return _ckpt(lib).checkpoint_name(lib.numpy.exp(z), "w")
  return f


def _all_but(lib, *names):
  name_p = sst_ckpt.name_p if lib is sc else jax_ad_checkpoint_internal.name_p

  def policy(prim, *_, **params):
    return params["name"] not in names if prim is name_p else True
  return policy


@pytest.mark.parametrize("policy", ["everything", "nothing", "all but y", "all but y, z",
                                    "any name but z", "only w"])
def test_remat_repeats_a_saved_debug_print_when_its_operands_are_recomputed(capfd, policy):
  # JAX's rule: a debug print the policy saves runs again in the backward pass only when
  # all its operands are recomputed there anyway.
  def run(lib):
    cp = lib.checkpoint_policies
    pol = {"everything": cp.everything_saveable, "nothing": cp.nothing_saveable,
           "all but y": _all_but(lib, "y"), "all but y, z": _all_but(lib, "y", "z"),
           "any name but z": cp.save_any_names_but_these("z"),
           "only w": cp.save_only_these_names("w")}[policy]
    g = lib.grad(lib.checkpoint(_named_print_program(lib), policy=pol))(2.)
    lib.effects_barrier()
    return float(g)

  theirs = _printed(capfd, lambda: run(jax))
  ours = _printed(capfd, lambda: run(sc))
  assert theirs.count("y: 3.0, z: 6.0") in (1, 2)
  assert ours == theirs


def test_unordered_debug_print_and_callback_in_a_sharded_jit_as_jax(capfd):
  # A side-effecting call with no results inside a program over a mesh used to stop in
  # XLA's partitioner ("Side-effect HLO must have sharding").
  def run(lib):
    mesh = lib.sharding.Mesh(np.array(lib.devices()[:4]), ["dev"])
    spec = lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec("dev"))
    out_spec = lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec())

    def f(x):
      lib.debug.print("{}", x)
      y = x.dot(x)
      lib.debug.callback(lambda v: print("sum", v), y)
      return y
    out = lib.jit(f, in_shardings=spec, out_shardings=out_spec)(np.arange(8, dtype=np.int32))
    lib.effects_barrier()
    return int(out)

  assert len(jax.devices()) >= 4 and len(sc.devices()) >= 4
  theirs = (run(jax), capfd.readouterr().out)
  ours = (run(sc), capfd.readouterr().out)
  assert theirs == (140, "[0 1 2 3 4 5 6 7]\nsum 140\n")
  assert ours == theirs


# -- debug.inspect_array_sharding of traced values --------------------------------------------

def _inspected(lib, f, *args, **jit_kwargs):
  got = []

  def f_(x):
    lib.debug.inspect_array_sharding(
        x, callback=lambda s: got.append((isinstance(s, lib.sharding.Sharding),
                                          len(s.device_set), getattr(s, "spec", None))))
    return f(x)
  lib.jit(f_, **jit_kwargs)(*args)
  return got


def test_inspect_array_sharding_in_a_one_device_jit_and_its_grad_as_jax():
  for lib in (jax, sc):
    assert _inspected(lib, lambda x: x * x, np.arange(8, dtype=np.int32)) == [(True, 1, None)]
    got = []

    def f_(x):
      lib.debug.inspect_array_sharding(x, callback=lambda s: got.append(len(s.device_set)))
      return (x * x).sum()
    lib.jit(lib.grad(f_))(np.arange(8, dtype=np.float32))
    assert got == [1]


@pytest.mark.parametrize("spec", [("x", "y"), ("x",), (None, "y"), ()])
def test_inspect_array_sharding_in_a_jit_over_a_mesh_as_jax(spec):
  def run(lib):
    mesh = lib.sharding.Mesh(np.array(lib.devices()[:4]).reshape(2, 2), ["x", "y"])
    s = lib.sharding.NamedSharding(mesh, lib.sharding.PartitionSpec(*spec))
    x = lib.device_put(np.arange(16, dtype=np.float32).reshape(4, 4), s)
    ((is_sharding, n, got),) = _inspected(lib, lambda x: x * 2, x)
    return is_sharding, n, tuple(got)

  assert run(sc) == run(jax) == (True, 4, spec)


# -- jax.errors constructors taking a tracer (JAX's signatures) -------------------------------

@pytest.mark.parametrize("name", ["ConcretizationTypeError", "TracerBoolConversionError",
                                  "TracerArrayConversionError",
                                  "TracerIntegerConversionError",
                                  "NonConcreteBooleanIndexError"])
def test_tracer_errors_built_from_a_tracer_say_what_jax_says(name):
  def outcome(lib):
    def g(x):
      raise getattr(lib.errors, name)(x)
    try:
      lib.jit(g)(1.0)
    except Exception as e:  # noqa: BLE001 -- the exception is what is compared
      return type(e).__name__, str(e)
    raise AssertionError("no exception")

  theirs = outcome(jax)
  assert f"https://docs.jax.dev/en/latest/errors.html#jax.errors.{name}" in theirs[1]
  assert outcome(sc) == theirs


def test_concretization_error_with_context_and_tracer_subclass_init_as_jax():
  def outcome(lib):
    def h(x):
      raise lib.errors.ConcretizationTypeError(x, "while computing a shape. ")
    try:
      lib.jit(h)(1.0)
    except lib.errors.ConcretizationTypeError as e:
      return str(e)

  assert outcome(sc) == outcome(jax)

  class FakeTracer(sc.core.Tracer):   # JAX's Tracer.__init__(trace, aval)
    def __init__(self, trace):
      super().__init__(trace, None)
  t = FakeTracer(None)
  assert t._trace is None and t.aval is None


# -- pure_callback / io_callback: 64-bit result types without x64; failures logged -----------

def _io_callback(lib):
  return (sc.experimental.io_callback if lib is sc else
          __import__("jax.experimental", fromlist=["io_callback"]).io_callback)


@pytest.mark.parametrize("kind", ["pure", "io"])
@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.complex128, np.int32])
def test_callback_result_types_of_64_bits_without_x64_as_jax(kind, dtype):
  def outcome(lib):
    cb = lib.pure_callback if kind == "pure" else _io_callback(lib)
    try:
      out = lib.jit(lambda x: cb(lambda x: np.asarray(42, dtype),
                                 lib.ShapeDtypeStruct((), dtype), x))(0.0)
      lib.effects_barrier()
      return "ok", np.asarray(out).dtype, np.asarray(out).item()
    except Exception as e:  # noqa: BLE001 -- the exception is what is compared
      return type(e).__name__, str(e)

  assert outcome(sc) == outcome(jax)


@pytest.mark.parametrize("kind", ["pure", "io"])
def test_a_failing_callback_is_logged_as_jax(kind, caplog):
  def fail(x):
    raise RuntimeError("Ooops")

  for lib in (jax, sc):
    cb = lib.pure_callback if kind == "pure" else _io_callback(lib)
    caplog.clear()
    with caplog.at_level("ERROR"), pytest.raises(RuntimeError):
      lib.jit(lambda x: cb(fail, lib.ShapeDtypeStruct((), np.float32), x))(0.0
                                                                          ).block_until_ready()
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.getMessage() == f"jax.{kind}_callback failed"
    assert record.exc_info is not None and "Ooops" in str(record.exc_info[1])


# -- broadcast_shapes: JAX's checks of each shape -----------------------------------------------

@pytest.mark.parametrize("args", [((-1,),), ("hello",), ((2, -1), (2, 1)), ((2, 3), (3, 2)),
                                  ((2, 3), (1,)), ((2.0, 3),), (3,),
                                  ((np.int64(2), 3), (1,))], ids=repr)
@pytest.mark.parametrize("where", ["lax", "numpy"])
def test_broadcast_shapes_checks_as_jax(args, where):
  def outcome(lib):
    fn = lib.lax.broadcast_shapes if where == "lax" else lib.numpy.broadcast_shapes
    try:
      return "ok", fn(*args)
    except Exception as e:  # noqa: BLE001 -- the exception is what is compared
      return type(e).__name__, str(e)

  assert outcome(sc) == outcome(jax)
