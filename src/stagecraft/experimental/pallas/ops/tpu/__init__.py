"""`stagecraft.experimental.pallas.ops.tpu`: JAX's TPU Pallas kernels' import path; only
`splash_attention` is provided (see its docstring)."""
