"""stagecraft.ffi: handlers written against XLA's typed FFI, compiled here with the machine's
C++ compiler, called eagerly, under jit and vmap, against NumPy and jax.ffi (the same
registered targets serve both)."""
import ctypes
import inspect
import os
import shutil
import subprocess

import jax
import jax.numpy as jjnp
import numpy as np
import pytest

import stagecraft
import stagecraft.numpy as jnp
from stagecraft import ffi
from stagecraft.core import ShapedArray

SDS = stagecraft.ShapeDtypeStruct

HANDLERS = r"""
#include <atomic>
#include <cstdint>
#include <string_view>
#include "xla/ffi/api/ffi.h"
namespace ffi = xla::ffi;

// y = x * factor
static ffi::Error ScaleImpl(float factor, ffi::Buffer<ffi::F32> x,
                            ffi::ResultBuffer<ffi::F32> y) {
  for (size_t i = 0, n = x.element_count(); i < n; ++i)
    y->typed_data()[i] = x.typed_data()[i] * factor;
  return ffi::Error::Success();
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(SgScale, ScaleImpl,
    ffi::Ffi::Bind().Attr<float>("factor").Arg<ffi::Buffer<ffi::F32>>()
        .Ret<ffi::Buffer<ffi::F32>>());

// Every attribute kind: y = x * d + shift + i32 + u8 (+ sum(arr) if flag);
// n = 100 * len(mode) + len(arr); an error for mode == "fail".
static ffi::Error AttrsImpl(int64_t shift, int32_t i32, double d, bool flag, uint8_t u8,
                            std::string_view mode, ffi::Span<const int32_t> arr,
                            ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y,
                            ffi::ResultBuffer<ffi::S32> n) {
  if (mode == "fail") return ffi::Error::InvalidArgument("sg_attrs: mode 'fail' requested");
  double extra = static_cast<double>(shift) + i32 + u8;
  if (flag) for (int32_t v : arr) extra += v;
  for (size_t i = 0, m = x.element_count(); i < m; ++i)
    y->typed_data()[i] = static_cast<float>(x.typed_data()[i] * d + extra);
  n->typed_data()[0] = static_cast<int32_t>(mode.size() * 100 + arr.size());
  return ffi::Error::Success();
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(SgAttrs, AttrsImpl,
    ffi::Ffi::Bind().Attr<int64_t>("shift").Attr<int32_t>("i32").Attr<double>("d")
        .Attr<bool>("flag").Attr<uint8_t>("u8").Attr<std::string_view>("mode")
        .Attr<ffi::Span<const int32_t>>("arr").Arg<ffi::Buffer<ffi::F32>>()
        .Ret<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::S32>>());

// y = x, counting the calls (a side effect).
static std::atomic<int64_t> calls{0};
extern "C" int64_t sg_calls() { return calls.load(); }
static ffi::Error CountImpl(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  calls++;
  for (size_t i = 0, n = x.element_count(); i < n; ++i) y->typed_data()[i] = x.typed_data()[i];
  return ffi::Error::Success();
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(SgCount, CountImpl,
    ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());

// out = a + b row by row, where a leading dimension of 1 (or a rank-1 operand) repeats:
// the batched form that vmap's expand_dims / broadcast_all / legacy_vectorized produce.
static size_t Rows(ffi::AnyBuffer::Dimensions d) { return d.size() >= 2 ? d[0] : 1; }
static ffi::Error AddRowsImpl(ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b,
                              ffi::ResultBuffer<ffi::F32> out) {
  size_t rows = Rows(out->dimensions()), row = out->element_count() / rows;
  size_t ra = Rows(a.dimensions()), rb = Rows(b.dimensions());
  if (a.element_count() != ra * row || b.element_count() != rb * row)
    return ffi::Error::InvalidArgument("sg_add_rows: rows of different sizes");
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < row; ++j)
      out->typed_data()[i * row + j] =
          a.typed_data()[(i % ra) * row + j] + b.typed_data()[(i % rb) * row + j];
  return ffi::Error::Success();
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(SgAddRows, AddRowsImpl,
    ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Arg<ffi::Buffer<ffi::F32>>()
        .Ret<ffi::Buffer<ffi::F32>>());
"""


def _compiler():
  for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
    if name and shutil.which(name):
      return shutil.which(name)
  return None


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
  cxx = _compiler()
  if cxx is None:
    pytest.skip("no C++ compiler to build the FFI handlers")
  d = tmp_path_factory.mktemp("ffi")
  src, so = d / "handlers.cc", d / "libhandlers.so"
  src.write_text(HANDLERS)
  cmd = [cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-w", f"-I{ffi.include_dir()}",
         str(src), "-o", str(so)]
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
  if r.returncode:
    pytest.skip(f"the C++ compiler could not build the handlers:\n{r.stderr[-2000:]}")
  lib = ctypes.cdll.LoadLibrary(str(so))
  for name, sym in [("sg_scale", lib.SgScale), ("sg_attrs", lib.SgAttrs),
                    ("sg_count", lib.SgCount), ("sg_add_rows", lib.SgAddRows)]:
    ffi.register_ffi_target(name, ffi.pycapsule(sym), platform="cpu")
  lib.sg_calls.restype = ctypes.c_int64
  return lib


def scale(x, factor, **kw):
  kw.setdefault("vmap_method", "sequential")
  return ffi.ffi_call("sg_scale", SDS(x.shape, x.dtype), **kw)(x, factor=np.float32(factor))


def test_api_matches_jax():
  assert set(ffi.__all__) >= {n for n in dir(jax.ffi) if not n.startswith("_")}
  for name in ["ffi_call", "register_ffi_target", "pycapsule", "include_dir",
               "register_ffi_type_id", "register_ffi_type", "ffi_lowering",
               "build_ffi_lowering_function"]:
    ours = inspect.signature(getattr(ffi, name)).parameters
    theirs = inspect.signature(getattr(jax.ffi, name)).parameters
    assert list(ours) == list(theirs), name
    assert [p.default for p in ours.values()] == [p.default for p in theirs.values()], name


def test_include_dir_has_the_ffi_header():
  assert os.path.isfile(os.path.join(ffi.include_dir(), "xla", "ffi", "api", "ffi.h"))
  assert ffi.include_dir() == jax.ffi.include_dir()


def test_scale_eager_jit_vmap(lib):
  x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
  np.testing.assert_array_equal(scale(x, 2.5), x * np.float32(2.5))
  np.testing.assert_array_equal(stagecraft.jit(lambda x: scale(x, 3.0))(x), x * 3)
  for method in ["sequential", "sequential_unrolled", "expand_dims", "broadcast_all",
                 "legacy_vectorized"]:
    got = stagecraft.vmap(lambda r: scale(r, -1.5, vmap_method=method))(x)
    np.testing.assert_array_equal(got, x * np.float32(-1.5), err_msg=method)
    got = stagecraft.jit(stagecraft.vmap(lambda r: scale(r, 2.0, vmap_method=method),
                                         in_axes=1, out_axes=1))(x)
    np.testing.assert_array_equal(got, x * 2, err_msg=method)
  # The same registered target through JAX's ffi_call.
  theirs = jax.jit(lambda x: jax.ffi.ffi_call("sg_scale", jax.ShapeDtypeStruct(x.shape,
                                                                                 x.dtype))(
      x, factor=np.float32(3.0)))(x)
  np.testing.assert_array_equal(stagecraft.jit(lambda x: scale(x, 3.0))(x), theirs)


def test_lowering_text():
  f = ffi.ffi_call("any_target", SDS((2, 3), np.float32))
  text = stagecraft.jit(lambda x: f(x, factor=np.float32(2.0), n=3, s="hi")).lower(
      jnp.ones((2, 3))).compiler_ir()
  assert '"stablehlo.custom_call"(%arg0)' in text
  assert 'call_target_name = "any_target"' in text and "api_version = 4 : i32" in text
  assert ('backend_config = {factor = 0x40000000 : f32, n = 3 : i64, s = "hi"}' in text)
  assert "operand_layouts = [dense<[1, 0]> : tensor<2xindex>]" in text
  assert "has_side_effect = false" in text


def test_every_attribute_kind_matches_numpy_and_jax(lib):
  x = np.array([0.0, 1.0, -3.0], np.float32)
  kw = dict(shift=10, i32=np.int32(100), d=0.5, flag=True, u8=np.uint8(7), mode="abc",
            arr=np.array([1, 2, 3], np.int32))
  want_y = (x * 0.5 + 10 + 100 + 7 + 6).astype(np.float32)
  results = [SDS((3,), np.float32), SDS((), np.int32)]
  f = ffi.ffi_call("sg_attrs", results)
  for g in (f, stagecraft.jit(lambda x: f(x, **kw))):
    y, n = g(x, **kw) if g is f else g(x)
    np.testing.assert_array_equal(y, want_y)
    assert int(n) == 303 and n.dtype == np.int32
  ty, tn = jax.ffi.ffi_call("sg_attrs", [jax.ShapeDtypeStruct((3,), np.float32),
                                         jax.ShapeDtypeStruct((), np.int32)])(x, **kw)
  np.testing.assert_array_equal(ty, want_y)
  assert int(tn) == 303
  # A list in, a list out; a tuple in, a tuple out.
  assert isinstance(f(x, **kw), list)
  assert isinstance(ffi.ffi_call("sg_attrs", tuple(results))(x, **kw), tuple)
  y, _ = f(x, **{**kw, "flag": False})
  np.testing.assert_array_equal(y, want_y - 6)


def test_handler_error_is_raised(lib):
  f = ffi.ffi_call("sg_attrs", [SDS((3,), np.float32), SDS((), np.int32)])
  kw = dict(shift=1, i32=np.int32(1), d=1.0, flag=False, u8=np.uint8(1), mode="fail",
            arr=np.zeros(2, np.int32))
  with pytest.raises(Exception, match="sg_attrs: mode 'fail' requested"):
    f(np.ones(3, np.float32), **kw)[0].block_until_ready()


def test_side_effect_keeps_unused_calls(lib):
  def g(effect):
    def fn(x):
      ffi.ffi_call("sg_count", SDS(x.shape, x.dtype), has_side_effect=effect)(x)
      return x + 1
    return stagecraft.jit(fn)

  x = np.ones(4, np.float32)
  before = lib.sg_calls()
  g(False)(x).block_until_ready()
  assert lib.sg_calls() == before          # dead code: removed
  g(True)(x).block_until_ready()
  assert lib.sg_calls() == before + 1      # an effect: kept
  jaxpr = stagecraft.make_jaxpr(lambda x: ffi.ffi_call(
      "sg_count", SDS((4,), np.float32), has_side_effect=True)(x))(x)
  assert jaxpr.jaxpr.effects and "has_side_effect = true" in stagecraft.jit(lambda x: ffi.ffi_call(
      "sg_count", SDS((4,), np.float32), has_side_effect=True)(x)).lower(x).compiler_ir()


@pytest.mark.parametrize("method", ["expand_dims", "broadcast_all", "legacy_vectorized",
                                    "sequential"])
def test_vmap_methods_with_an_unbatched_operand(lib, method):
  add = ffi.ffi_call("sg_add_rows", SDS((4,), np.float32), vmap_method=method)
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  b = np.array([10, 20, 30, 40], np.float32)
  got = stagecraft.vmap(add, in_axes=(0, None))(a, b)
  np.testing.assert_array_equal(got, a + b)
  theirs = jax.vmap(jax.ffi.ffi_call("sg_add_rows", jax.ShapeDtypeStruct((4,), np.float32),
                                     vmap_method=method), in_axes=(0, None))(a, b)
  np.testing.assert_array_equal(got, theirs)
  jaxpr = str(stagecraft.make_jaxpr(stagecraft.vmap(add, in_axes=(0, None)))(a, b))
  theirs_jaxpr = str(jax.make_jaxpr(jax.vmap(jax.ffi.ffi_call(
      "sg_add_rows", jax.ShapeDtypeStruct((4,), np.float32), vmap_method=method),
      in_axes=(0, None)))(a, b))
  for line in ["input_layouts", "output_layouts", "result_avals"]:
    ours = [ln.strip() for ln in jaxpr.splitlines() if ln.strip().startswith(line)]
    want = [ln.strip() for ln in theirs_jaxpr.splitlines() if ln.strip().startswith(line)]
    assert ours == want, (line, ours, want)


def test_vmap_without_method_raises():
  f = ffi.ffi_call("sg_scale", SDS((3,), np.float32))
  with pytest.raises(NotImplementedError, match="Got vmap_method=None"):
    stagecraft.vmap(lambda x: f(x, factor=np.float32(1)))(np.ones((2, 3), np.float32))


def test_layouts_and_aliases(lib):
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  # The handler sees the column-major buffer (axis 1 slowest), copies it as it is, and the
  # result is read back row-major.
  f = ffi.ffi_call("sg_scale", SDS((2, 3), np.float32), input_layouts=[(1, 0)])
  got = stagecraft.jit(lambda x: f(x, factor=np.float32(1)))(x)
  np.testing.assert_array_equal(got, x.T.ravel().reshape(2, 3))
  theirs = jax.ffi.ffi_call("sg_scale", jax.ShapeDtypeStruct((2, 3), np.float32),
                            input_layouts=[(1, 0)])(x, factor=np.float32(1))
  np.testing.assert_array_equal(got, theirs)
  g = ffi.ffi_call("sg_scale", SDS((2, 3), np.float32), input_output_aliases={0: 0})
  np.testing.assert_array_equal(stagecraft.jit(lambda x: g(x, factor=np.float32(2)))(x), 2 * x)
  text = stagecraft.jit(lambda x: g(x, factor=np.float32(2))).lower(x).compiler_ir()
  assert ("output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = "
          "[], operand_index = 0, operand_tuple_indices = []>]") in text


def test_errors_match_jax():
  def both(fn_ours, fn_jax, exc):
    with pytest.raises(exc) as e1:
      fn_ours()
    with pytest.raises(exc) as e2:
      fn_jax()
    assert str(e1.value).splitlines()[0] == str(e2.value).splitlines()[0]

  x = np.ones(2, np.float32)
  both(lambda: ffi.ffi_call("t", SDS((), np.float32), vmap_method="bad"),
       lambda: jax.ffi.ffi_call("t", jax.ShapeDtypeStruct((), np.float32),
                                vmap_method="bad"), ValueError)
  both(lambda: ffi.ffi_call("t", [3]), lambda: jax.ffi.ffi_call("t", [3]), ValueError)
  both(lambda: ffi.ffi_call("t", SDS((), np.float32), legacy_backend_config="c"),
       lambda: jax.ffi.ffi_call("t", jax.ShapeDtypeStruct((), np.float32),
                                legacy_backend_config="c"), ValueError)
  both(lambda: ffi.ffi_call("t", SDS((), np.float32), input_output_aliases={0: 0})(x),
       lambda: jax.ffi.ffi_call("t", jax.ShapeDtypeStruct((), np.float32),
                                input_output_aliases={0: 0})(x), ValueError)
  both(lambda: ffi.ffi_call("t", SDS((2,), np.float32), input_output_aliases={3: 0})(x),
       lambda: jax.ffi.ffi_call("t", jax.ShapeDtypeStruct((2,), np.float32),
                                input_output_aliases={3: 0})(x), ValueError)
  both(lambda: ffi.ffi_call("t", SDS((2,), np.float32), input_layouts=[None, None])(x),
       lambda: jax.ffi.ffi_call("t", jax.ShapeDtypeStruct((2,), np.float32),
                                input_layouts=[None, None])(x), ValueError)
  both(lambda: ffi.ffi_call("t", SDS((2,), np.float32))(x, a=[1, 2]),
       lambda: jax.ffi.ffi_call("t", jax.ShapeDtypeStruct((2,), np.float32))(x, a=[1, 2]),
       TypeError)
  both(lambda: stagecraft.jit(lambda x: ffi.ffi_call(
      "t", SDS((2,), np.float32), custom_call_api_version=2)(x, a=1)).lower(x),
       lambda: jax.jit(lambda x: jax.ffi.ffi_call(
           "t", jax.ShapeDtypeStruct((2,), np.float32), custom_call_api_version=2)(x, a=1)
       ).lower(x), ValueError)
  both(lambda: ffi.register_ffi_type_id("n", None),
       lambda: jax.ffi.register_ffi_type_id("n", None), ValueError)
  with pytest.raises(ValueError, match="The FFI call to `sg_scale` cannot be differentiated"):
    stagecraft.grad(lambda x: scale(x, 2.0).sum())(x)


def test_legacy_api_version_text():
  f = ffi.ffi_call("old", SDS((), np.float32), custom_call_api_version=2,
                   legacy_backend_config='a"b')
  text = stagecraft.jit(lambda x: f(x)).lower(np.float32(1)).compiler_ir()
  assert 'api_version = 2 : i32' in text and r'backend_config = "a\22b"' in text


def test_results_keep_the_given_dtype():
  f = ffi.ffi_call("t", SDS((3,), np.float64))
  out = stagecraft.eval_shape(lambda x: f(x), np.ones(3, np.float32))
  assert out.dtype == np.float64 and out.shape == (3,)


def test_attribute_text():
  assert ffi.ir_attribute(True) == "true"
  assert ffi.ir_attribute(np.bool_(False)) == "false"
  assert ffi.ir_attribute(-3) == "-3 : i64"
  assert ffi.ir_attribute(np.uint16(9)) == "9 : ui16"
  assert ffi.ir_attribute(1.5) == "0x3FF8000000000000 : f64"
  assert ffi.ir_attribute(np.float16(1)) == "0x3C00 : f16"
  assert ffi.ir_attribute(np.dtype(np.int8)) == "i8"
  assert ffi.ir_attribute((1, "a")) == '[1 : i64, "a"]'
  assert ffi.ir_attribute({"k": 2}) == "{k = 2 : i64}"
  assert ffi.ir_attribute(np.array([[1, 2]], np.int32)) == \
      'dense<"0x0100000002000000"> : tensor<1x2xi32>'
  with pytest.raises(TypeError, match="No attribute handler"):
    ffi.ir_attribute(object())
  p = stagecraft.make_jaxpr(lambda x: ffi.ffi_call("t", SDS((), np.float32))(
      x, arr=np.arange(2), cfg={"a": 1}))(np.float32(0))
  (k1, v1), (k2, v2) = p.jaxpr.eqns[0].params["attributes"]
  assert (k1, k2) == ("arr", "cfg") and hash(v1) == hash(ffi.HashableArray(np.arange(2)))
  assert v2["a"] == 1


def test_pycapsule_wraps_an_address(lib):
  cap = ffi.pycapsule(lib.SgScale)
  get = ctypes.pythonapi.PyCapsule_GetPointer
  get.restype, get.argtypes = ctypes.c_void_p, (ctypes.py_object, ctypes.c_char_p)
  assert get(cap, None) == ctypes.cast(lib.SgScale, ctypes.c_void_p).value


def test_user_primitive_with_ffi_lowering(lib):
  from stagecraft import core
  from stagecraft.interpreters import lowering
  p = core.Primitive("sg_user_scale")
  p.def_abstract_eval(lambda x, **_: ShapedArray(x.shape, x.dtype))
  lowering.register_lowering(p, ffi.ffi_lowering("sg_scale"))
  x = np.arange(4, dtype=np.float32)
  np.testing.assert_array_equal(stagecraft.jit(lambda x: p.bind(x, factor=np.float32(4)))(x),
                                4 * x)


def test_side_effect_under_vmap_and_x64(lib):
  f = ffi.ffi_call("sg_count", SDS((3,), np.float32), has_side_effect=True,
                   vmap_method="sequential")
  x = np.arange(12, dtype=np.float32).reshape(4, 3)
  before = lib.sg_calls()
  out = stagecraft.jit(stagecraft.vmap(f))(x)
  np.testing.assert_array_equal(out, x)
  assert lib.sg_calls() == before + 4
  with stagecraft.enable_x64():
    y = scale(np.ones(3, np.float32), 2.0)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, 2.0)
    text = stagecraft.jit(lambda x: ffi.ffi_call("t", SDS((), np.float32))(x, a=1, b=0.5)
                          ).lower(np.float32(0)).compiler_ir()
    assert "a = 1 : i64, b = 0x3FE0000000000000 : f64" in text
