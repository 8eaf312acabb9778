"""`stagecraft.experimental.pallas.ops`: the import paths of JAX's bundled Pallas kernels.
Only `tpu.splash_attention` is provided (libraries such as Keras import it at start-up):
its masks work; its TPU kernels raise NotImplementedError when made."""
