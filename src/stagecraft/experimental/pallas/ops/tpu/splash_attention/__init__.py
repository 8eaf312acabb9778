"""`jax.experimental.pallas.ops.tpu.splash_attention` as served by stagecraft.

The mask classes (`splash_attention_mask`) are plain NumPy and behave as JAX 0.10.2's. The
Splash attention kernels (`make_splash_mha`, ...) are TPU Mosaic kernels: making one raises
NotImplementedError (JAX raises too off TPU, when the kernel is called). Keras 3's JAX
backend imports this package at start-up and uses the kernels only on TPU.
"""
from stagecraft.experimental.pallas.ops.tpu.splash_attention.splash_attention_kernel import (
    BlockSizes as BlockSizes, QKVLayout as QKVLayout, SegmentIds as SegmentIds,
    make_masked_mha_reference as make_masked_mha_reference,
    make_masked_mqa_reference as make_masked_mqa_reference,
    make_splash_mha as make_splash_mha,
    make_splash_mha_single_device as make_splash_mha_single_device,
    make_splash_mqa as make_splash_mqa,
    make_splash_mqa_single_device as make_splash_mqa_single_device)
from stagecraft.experimental.pallas.ops.tpu.splash_attention.splash_attention_mask import (
    CausalMask as CausalMask, FullMask as FullMask, LocalMask as LocalMask, Mask as Mask,
    MultiHeadMask as MultiHeadMask, NumpyMask as NumpyMask,
    make_causal_mask as make_causal_mask,
    make_local_attention_mask as make_local_attention_mask,
    make_random_mask as make_random_mask)
