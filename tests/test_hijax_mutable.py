"""Mutable hijax types (jax.experimental.hijax's `HiPrimitive`, `MutableHiType`, `AvalQDD`,
`AvalMutableQDD`, `cur_qdd`): a Box holding a pytree of arrays, built as flax.nnx's hijax
Variables are (new/get/set primitives; the state's type, its "quasi-dynamic data", may
change), used eagerly, as a jit argument, closed over by jit and by scan, under grad and
eval_shape, each run on JAX 0.10.2 and on stagecraft in the same test and compared. The last
test runs flax.nnx's hijax Variables themselves (under `python -m stagecraft run`)."""
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.experimental
import jax.experimental.hijax
import jax.extend
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft as sc
import stagecraft.experimental
import stagecraft.experimental.hijax
import stagecraft.extend
import stagecraft.numpy as sjnp

LIBS = {"jax": (jax, jjnp, jax.experimental.hijax, jax.experimental, jax.extend),
        "sc": (sc, sjnp, stagecraft.experimental.hijax, stagecraft.experimental,
               stagecraft.extend)}


def defs(lib):
  """A mutable Box type and its primitives over one library (flax.nnx's hijax Variable, cut
  down: `new_box`, `box_get`, `box_set`)."""
  jx, jnp, hjx, experimental, extend = LIBS[lib]

  class BoxEffect(extend.core.Effect):
    pass
  box_effect = BoxEffect()
  hjx.control_flow_allowed_effects.add_type(BoxEffect)

  @dataclasses.dataclass(frozen=True)
  class BoxQDD:
    leaf_avals: tuple
    treedef: object

    def to_tangent_qdd(self):
      return BoxQDD(tuple(a.to_tangent_aval() for a in self.leaf_avals), self.treedef)

  class Box:
    __slots__ = ("_leaves", "_treedef")

    def __init__(self, leaves, treedef):
      object.__setattr__(self, "_leaves", tuple(leaves))
      object.__setattr__(self, "_treedef", treedef)

    def cur_qdd(self):
      return BoxQDD(tuple(map(jx.typeof, self._leaves)), self._treedef)

  class BoxTy(hjx.MutableHiType):
    def __hash__(self):
      return hash(BoxTy)

    def __eq__(self, other):
      return isinstance(other, BoxTy)

    def str_short(self, short_dtypes=False, **_):
      return "Box"

    def lo_ty_qdd(self, q):
      return [lo for a in q.leaf_avals for lo in a.lo_ty()]

    def new_from_loval(self, q, *lo):
      return Box(lo, q.treedef)

    def read_loval(self, q, box):
      return list(box_get_p.bind(box, treedef=q.treedef, avals=q.leaf_avals))

    def update_from_loval(self, q, box, *lo):
      box_set_p.bind(box, *lo, treedef=q.treedef)

    def to_tangent_aval(self):
      return self

  hjx.register_hitype(Box, lambda b: BoxTy())

  class NewBox(hjx.HiPrimitive):
    def is_high(self, *leaves, treedef):
      return True

    def impl(self, *leaves, treedef):
      return Box(leaves, treedef)

    def abstract_eval(self, *leaves, treedef):
      return hjx.AvalQDD(BoxTy(), BoxQDD(tuple(leaves), treedef)), {box_effect}

    def to_lojax(self, *leaves, treedef):
      return Box(leaves, treedef)

  class BoxSet(hjx.HiPrimitive):
    multiple_results = True

    def is_high(self, *avals, treedef):
      return True

    def impl(self, box, *leaves, treedef):
      object.__setattr__(box, "_leaves", tuple(leaves))
      object.__setattr__(box, "_treedef", treedef)
      return []

    def abstract_eval(self, box_mqdd, *leaf_avals, treedef):
      box_mqdd.mutable_qdd.update(BoxQDD(tuple(leaf_avals), treedef))
      return [], {box_effect}

    to_lojax = impl

  class BoxGet(hjx.HiPrimitive):
    multiple_results = True

    def impl(self, box, *, treedef, avals):
      return box._leaves

    def abstract_eval(self, box_aval, *, treedef, avals):
      return avals, {box_effect}

    to_lojax = impl

  new_box_p, box_set_p, box_get_p = NewBox("new_box"), BoxSet("box_set"), BoxGet("box_get")

  def new_box(tree):
    leaves, treedef = jx.tree.flatten(tree)
    return new_box_p.bind(*leaves, treedef=treedef)

  def box_get(box):
    q = experimental.cur_qdd(box)
    return jx.tree.unflatten(q.treedef, box_get_p.bind(box, treedef=q.treedef,
                                                       avals=q.leaf_avals))

  def box_set(box, tree):
    leaves, treedef = jx.tree.flatten(tree)
    box_set_p.bind(box, *leaves, treedef=treedef)

  return jx, jnp, new_box, box_get, box_set


def both(fn):
  return fn(*defs("jax")), fn(*defs("sc"))


def _np(tree):
  return {k: np.asarray(v) for k, v in tree.items()}


def test_box_eagerly():
  # a box made, read, and updated with a new structure (its state's type changes)
  def run(jx, jnp, new_box, box_get, box_set):
    b = new_box({"a": jnp.arange(3.)})
    box_set(b, {"a": box_get(b)["a"] * 2, "b": jnp.int32(7)})
    return str(jx.typeof(b)), _np(box_get(b))
  (jt, jv), (st, sv) = both(run)
  assert st == jt == "BoxTy()"
  assert sorted(sv) == sorted(jv) == ["a", "b"]
  for k in jv:
    assert sv[k].dtype == jv[k].dtype
    np.testing.assert_array_equal(sv[k], jv[k])


def test_box_as_jit_argument():
  # a box passed to jit (twice, as one value) is updated in place; a key added inside
  # appears after the call; the second call reuses the program
  def run(jx, jnp, new_box, box_get, box_set):
    traces = []

    @jx.jit
    def step(b, b2, x):
      traces.append(1)
      s = box_get(b)
      new = {"n": s["n"] + 1, "total": s.get("total", 0.) + jnp.sum(x)}
      box_set(b2, new)
      return new["total"] * 2
    b = new_box({"n": jnp.int32(0)})
    x = jnp.arange(4.)
    outs = [np.asarray(step(b, b, x)) for _ in range(3)]
    return outs, _np(box_get(b)), len(traces)
  (jo, jv, jn), (so, sv, sn) = both(run)
  np.testing.assert_array_equal(so, jo)
  assert sorted(sv) == sorted(jv) == ["n", "total"]
  for k in jv:
    np.testing.assert_array_equal(sv[k], jv[k])
  assert sn == jn == 2   # traced again once: the box's state type changed after the first


def test_box_closed_over_by_jit():
  # a jitted function that closes over a box: its state is a hidden argument and result
  def run(jx, jnp, new_box, box_get, box_set):
    counter = new_box(jnp.int32(0))

    @jx.jit
    def bump(x):
      box_set(counter, box_get(counter) + 1)
      return x * box_get(counter)
    outs = [np.asarray(bump(jnp.float32(2.))) for _ in range(3)]
    return outs, np.asarray(box_get(counter))
  (jo, jc), (so, scount) = both(run)
  np.testing.assert_array_equal(so, jo)
  assert int(scount) == int(jc) == 3


def test_box_closed_over_by_scan():
  # flax's test_mutable_hitypes_as_scan_captured: the box's state is carried by the loop
  def run(jx, jnp, new_box, box_get, box_set):
    b = new_box(jnp.float32(3.))

    def body(c, x):
      box_set(b, box_get(b) + x)
      return c + box_get(b), None
    c, _ = jx.lax.scan(body, jnp.float32(0.), jnp.arange(5.))
    return np.asarray(c), np.asarray(box_get(b))
  j, s = both(run)
  np.testing.assert_array_equal(s[0], j[0])
  np.testing.assert_array_equal(s[1], j[1])
  assert float(s[1]) == 13.


def test_box_under_grad():
  # flax's test_mutable_hitypes_as_captured_args: a box updated with a stop_gradient value
  # inside a differentiated function (no tangent reaches the box primitives)
  def run(jx, jnp, new_box, box_get, box_set):
    b = new_box(jnp.float32(2.))

    def loss(x):
      box_set(b, jx.lax.stop_gradient(x * 3))
      return x ** 2 + box_get(b)
    g = jx.grad(loss)(jnp.float32(4.))
    return np.asarray(g), np.asarray(box_get(b))
  j, s = both(run)
  np.testing.assert_array_equal(s[0], j[0])
  np.testing.assert_array_equal(s[1], j[1])
  assert float(s[1]) == 12.


def test_box_under_eval_shape():
  # eval_shape of a function updating a box argument: the result's shape, the box unchanged
  def run(jx, jnp, new_box, box_get, box_set):
    b = new_box(jnp.zeros((2, 3), "float32"))

    def f(b):
      box_set(b, box_get(b) + 1)
      return box_get(b).sum(0)
    out = jx.eval_shape(f, b)
    return out.shape, str(out.dtype), np.asarray(box_get(b))
  j, s = both(run)
  assert s[:2] == j[:2] == ((3,), "float32")
  np.testing.assert_array_equal(s[2], j[2])


_FLAX_SCRIPT = textwrap.dedent("""
  import json
  import jax, jax.numpy as jnp, optax
  from flax import nnx


  def run():
    out = {}
    with nnx.var_defaults(hijax=True):
      v = nnx.Variable({}, hijax=True)

      @jax.jit
      def f(x, metrics):
        metrics['x_sum'] = jnp.sum(x)
      f(jnp.ones((4, 5)), v)
      out['dynamic_structure'] = float(v['x_sum'])

      model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
      optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

      @jax.jit
      def train_step(x, y):
        graphdef, params, nondiff = nnx.split(model, nnx.Param, ...)
        def loss_fn(params):
          m = nnx.merge(graphdef, params, nondiff)
          return ((m(x) - y) ** 2).mean()
        loss, grads = jax.value_and_grad(loss_fn)(nnx.with_vars(params, hijax=False))
        optimizer.update(model, grads)
        return loss
      x = jnp.arange(16., dtype='float32').reshape(8, 2) / 16.
      y = jnp.ones((8, 3), 'float32')
      out['losses'] = [float(train_step(x, y)) for _ in range(3)]
      out['bias'] = [float(b) for b in model.bias[...]]
      out['step'] = int(optimizer.step[...])
      out['kernel_type'] = type(model.kernel).__name__
    return out


  if __name__ == '__main__':
    print(json.dumps(run()))
""")


def test_flax_hijax_variables(tmp_path):
  # flax.nnx's hijax Variables (a Variable whose tree grows inside jit; a train step that
  # closes over a model and an optimizer of hijax Variables): JAX here, stagecraft under
  # the runner
  script = tmp_path / "flax_hijax.py"
  script.write_text(_FLAX_SCRIPT)
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  src = str(pathlib.Path(sc.__file__).resolve().parent.parent)
  env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
  proc = subprocess.Popen([sys.executable, "-m", "stagecraft", "run", str(script)], env=env,
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  pytest.importorskip("flax")
  pytest.importorskip("optax")
  ns: dict = {"__name__": "flax_hijax"}
  exec(compile(_FLAX_SCRIPT, str(script), "exec"), ns)
  j = ns["run"]()
  o, e = proc.communicate(timeout=300)
  assert proc.returncode == 0, e[-3000:]
  s = json.loads(o.strip().splitlines()[-1])
  assert s["kernel_type"] == j["kernel_type"] == "HijaxVariable"
  assert s["dynamic_structure"] == j["dynamic_structure"] == 20.
  assert s["step"] == j["step"] == 3
  np.testing.assert_allclose(s["losses"], j["losses"], rtol=1e-5)
  np.testing.assert_allclose(s["bias"], j["bias"], rtol=1e-5, atol=1e-7)


def test_zeros_like_of_a_duck_array_keeps_its_sharding():
  # optax's zeros_like of flax's hijax Variables: a duck array (`__jax_array__`) whose own
  # `sharding` is over a concrete mesh gives a result with that sharding, as JAX's full_like
  def run(jx, jnp, *_):
    mesh = jx.make_mesh((2, 2), ("row", "col"), axis_types=(jx.sharding.AxisType.Auto,) * 2)
    x = jx.device_put(jnp.ones((8, 2), "float32"),
                      jx.sharding.NamedSharding(mesh, jx.P("row", "col")))

    class Duck:
      shape, dtype, sharding = x.shape, x.dtype, x.sharding

      def __jax_array__(self):
        return x
    z = jnp.zeros_like(Duck())
    return str(z.sharding.spec), np.asarray(z)
  j, s = both(run)
  assert s[0] == j[0] == "P('row', 'col')"
  np.testing.assert_array_equal(s[1], j[1])
