"""Case tables shared by several test files: the dtype shorthands (np.dtype objects) and the
dtype and shape pools of the elementwise tests."""
import ml_dtypes
import numpy as np

f16, f32, f64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
bf16 = np.dtype(ml_dtypes.bfloat16)
c64 = np.dtype(np.complex64)
i8, i16, i32 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32)
u8, u16, u32 = np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32)
b1 = np.dtype(np.bool_)

# The floating dtypes every elementwise op is tested in (test_lax_elementwise, test_lax_special).
FLOATS = (f32, f16, bf16)

# The shapes of the elementwise tests' operands (test_lax_elementwise, test_lax_elementwise_extra):
# a small pool, since every distinct aval compiles a program.
SHAPES = [(), (0,), (3,), (2, 3)]
