"""`experimental.layout` (Layout, Format), `Array.format`, Formats in jit's shardings,
`device_put` with a Format and `Compiled.input_formats`/`output_formats`, against JAX run in
the same test on the same inputs (CPU)."""
import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.experimental import layout as jlayout
from jax.sharding import SingleDeviceSharding as JSDS

import stagecraft as sc
import stagecraft.numpy as jnp
from stagecraft.experimental import layout as slayout
from stagecraft.sharding import SingleDeviceSharding as SSDS

SHAPE = (4, 8)
HOST = np.arange(32, dtype=np.float32).reshape(SHAPE)


def _both(fn):
  """fn(jax-like module, jnp, layout module, SingleDeviceSharding of device 0) for JAX and
  for stagecraft."""
  return (fn(jax, jjnp, jlayout, JSDS(jax.devices()[0])),
          fn(sc, jnp, slayout, SSDS(sc.devices()[0])))


def _err(thunk):
  try:
    thunk()
  except Exception as e:   # noqa: BLE001
    return type(e).__name__, str(e).replace("jax._src.layout", "stagecraft.layout")
  return None


def test_layout_and_format_reprs_and_equality():
  def f(j, np_, L, s):
    Layout, Format = L.Layout, L.Format
    a = Layout((1, 0))
    return [repr(a), repr(Layout((1, 0), tiling=((8, 128),), sub_byte_element_size_in_bits=4)),
            repr(Layout.AUTO), repr(Format()), repr(Format(Layout.AUTO)),
            repr(Format(a, s)), a == Layout((1, 0)), a == Layout((0, 1)),
            hash(a) == hash(Layout([1, 0])), a.update(tiling=((2,),)) == Layout((1, 0), ((2,),)),
            repr(a.update(major_to_minor=(0, 1))),
            Format(a, s) == Format(Layout((1, 0)), s), Format(a, s) == Format(None, s)]
  got_j, got_s = _both(f)
  assert got_s == got_j


def test_format_and_layout_errors():
  def f(j, np_, L, s):
    Layout, Format = L.Layout, L.Format
    return [_err(lambda: Format(Layout((1, 0)))), _err(lambda: Format(3)),
            _err(lambda: Format(None, "cpu")),
            _err(lambda: Layout((1, 0)).check_compatible_aval((3,)))]
  got_j, got_s = _both(f)
  assert [e and e[0] for e in got_s] == ["ValueError", "TypeError", "TypeError", "ValueError"]
  assert got_s == got_j


def test_array_format_default():
  def f(j, np_, L, s):
    x = np_.ones(SHAPE)
    return [repr(x.format), repr(np_.ones(()).format), repr(np_.ones((2, 3, 4)).format)]
  got_j, got_s = _both(f)
  assert "major_to_minor=(0, 1)" in got_s[0]
  assert got_s == got_j


def test_auto_layouts_lowering_and_compiled_formats():
  def f(j, np_, L, s):
    def apply_fn(x, y):
      return x[0, :], y[:, 0]
    duck = j.ShapeDtypeStruct(SHAPE, np.float32)
    lowered = j.jit(apply_fn, in_shardings=L.Format(L.Layout.AUTO),
                    out_shardings=L.Format(L.Layout.AUTO)).trace(duck, duck).lower()
    c = lowered.compile()
    return [lowered.as_text(), repr(c.input_formats), repr(c.output_formats)]
  got_j, got_s = _both(f)
  assert 'mhlo.layout_mode = "auto"' in got_s[0]
  assert got_s == got_j


def test_plain_jit_compiled_formats():
  def f(j, np_, L, s):
    c = j.jit(lambda x, y: (x * 2, y.sum())).lower(HOST, HOST[0]).compile()
    return [repr(c.input_formats), repr(c.output_formats)]
  got_j, got_s = _both(f)
  assert got_s == got_j


def test_concrete_layouts_lowering_values_and_formats():
  def f(j, np_, L, s):
    fmt = L.Format(L.Layout((1, 0)), s)
    g = j.jit(lambda x: x * 2, in_shardings=fmt, out_shardings=fmt)
    lowered = g.lower(HOST)
    c = lowered.compile()
    out = g(HOST)
    x = np_.asarray(HOST)
    return [lowered.as_text(), repr(c.input_formats), repr(c.output_formats),
            np.asarray(out).tolist(), repr(out.format), np.asarray(c(x)).tolist(),
            repr(c(x).format), np.asarray(out + 1).tolist(), repr((out + 1).format),
            np.asarray(j.jit(lambda a: a[0] * 3)(out)).tolist()]
  got_j, got_s = _both(f)
  assert 'mhlo.layout_mode = "{0,1}"' in got_s[0]
  assert got_s[3] == (HOST * 2).tolist()
  assert got_s == got_j


def test_default_and_scalar_layouts_not_written():
  def f(j, np_, L, s):
    g = j.jit(lambda x: (x * 2, x.sum()),
              out_shardings=(L.Format(L.Layout((0, 1)), s), L.Format(L.Layout(()), s)))
    return [g.lower(HOST).as_text(), [np.asarray(o).tolist() for o in g(HOST)]]
  got_j, got_s = _both(f)
  assert "layout_mode" not in got_s[0]
  assert got_s == got_j


def test_device_put_with_format_relayouts_data():
  def f(j, np_, L, s):
    y = j.device_put(HOST, L.Format(L.Layout((1, 0)), s))
    z = j.device_put(y, L.Format(L.Layout((0, 1)), s))
    return [repr(y.format), y.committed, np.asarray(y).tolist(), np.asarray(y[1]).tolist(),
            np.asarray(np_.sin(y)).round(5).tolist(), repr(z.format),
            np.asarray(z).tolist(), repr(j.device_put(HOST, L.Format()).format),
            j.device_put(HOST, L.Format()).committed]
  got_j, got_s = _both(f)
  assert got_s[0] != got_s[5]
  assert got_s == got_j


def test_device_put_format_errors():
  def f(j, np_, L, s):
    return [_err(lambda: j.device_put(np.ones(3), L.Format(L.Layout((1, 0)), s))),
            _err(lambda: j.device_put(np.ones((3, 3)), L.Format(L.Layout.AUTO, s)))]
  got_j, got_s = _both(f)
  assert all(e is not None and e[0] == "ValueError" for e in got_s)
  assert got_s == got_j


def test_jit_layout_rank_errors():
  def f(j, np_, L, s):
    return [_err(lambda: j.jit(lambda x: x, in_shardings=L.Format(L.Layout((0,)), s))(
                np.ones((2, 2)))),
            _err(lambda: j.jit(lambda x: x.sum(), out_shardings=L.Format(L.Layout((1, 0)), s))(
                np.ones((2, 2))))]
  got_j, got_s = _both(f)
  assert all(e is not None and e[0] == "ValueError" for e in got_s)
  assert got_s == got_j


def test_committed_mismatched_layout_is_an_error_uncommitted_is_relaid():
  def f(j, np_, L, s):
    def apply_fn(x, y):
      return x[0, :], y[:, 0]
    exe = j.jit(apply_fn, in_shardings=L.Format(L.Layout.AUTO),
                out_shardings=L.Format(L.Layout.AUTO)).lower(HOST, HOST).compile()
    fmt = L.Format(L.Layout((1, 0)), s)
    col = j.jit(lambda x: x * 1, in_shardings=fmt).lower(HOST).compile()
    x = np_.asarray(HOST)                        # uncommitted, default layout
    y = j.device_put(HOST, fmt)                  # committed, column-major
    d = j.device_put(HOST, L.Format(L.Layout((0, 1)), s))   # committed, default
    return [[np.asarray(o).tolist() for o in exe(x, x)], _err(lambda: exe(x, y)),
            np.asarray(col(x)).tolist(), np.asarray(col(y)).tolist(), _err(lambda: col(d)),
            _err(lambda: exe(y, y))]
  got_j, got_s = _both(f)
  assert got_s[1] is not None and "Passed layout" in got_s[1][1]
  assert got_s == got_j


def test_formats_feed_another_jit():
  def f(j, np_, L, s):
    duck = j.ShapeDtypeStruct(SHAPE, np.float32)
    apply_exe = j.jit(lambda x, y: (x[0], y[:, 0]), in_shardings=L.Format(L.Layout.AUTO),
                      out_shardings=L.Format(L.Layout.AUTO)).trace(duck, duck).lower().compile()
    arg_formats, kw = apply_exe.input_formats
    init = j.jit(lambda x, y: (x * 2, y * 3), out_shardings=arg_formats).trace(
        duck, duck).lower().compile()
    x2, y2 = init(HOST, HOST)
    return [init.output_formats == arg_formats, kw,
            [np.asarray(o).tolist() for o in apply_exe(x2, y2)]]
  got_j, got_s = _both(f)
  assert got_s[0] is True
  assert got_s == got_j


def test_with_layout_constraint_not_supported():
  with pytest.raises(NotImplementedError):
    slayout.with_layout_constraint(jnp.ones(3), slayout.Layout((0,)))


def test_layout_from_pjrt_layout_reads_runtime():
  x = sc.device_put(HOST, slayout.Format(slayout.Layout((1, 0)), SSDS(sc.devices()[0])))
  lay = slayout.Layout.from_pjrt_layout(x._laid._pjrt_layout)
  assert lay.major_to_minor == (1, 0) and lay.tiling == ()
  assert np.asarray(x).tolist() == HOST.tolist()


def test_formats_and_keyword_arguments():
  def f(j, np_, L, s):
    one = j.jit(lambda x, y: x + y, in_shardings=L.Format(L.Layout.AUTO))
    tup = j.jit(lambda x, y: x + y, in_shardings=(L.Format(L.Layout.AUTO),))
    a = np_.ones((2, 2))
    return [one.lower(a, y=a).as_text(), np.asarray(one(a, y=a)).tolist(),
            _err(lambda: tup.lower(a, y=a))]
  got_j, got_s = _both(f)
  assert got_s[2] is not None and got_s[2][0] == "ValueError"
  assert got_s == got_j


def test_deleted_array_format():
  def f(j, np_, L, s):
    y = j.device_put(HOST, L.Format(L.Layout((1, 0)), s))
    y.delete()
    return repr(y.format)
  got_j, got_s = _both(f)
  assert "layout=None" in got_s
  assert got_s == got_j


def test_sharded_array_format():
  from jax.sharding import NamedSharding as JNS, PartitionSpec as JP
  from stagecraft.sharding import NamedSharding as SNS, PartitionSpec as SP
  jm, sm = jax.make_mesh((4,), ("a",)), sc.make_mesh((4,), ("a",))
  got_j = repr(jax.device_put(HOST.T, JNS(jm, JP("a"))).format)
  got_s = repr(sc.device_put(HOST.T, SNS(sm, SP("a"))).format)
  assert "major_to_minor=(0, 1)" in got_s
  assert got_s == got_j
