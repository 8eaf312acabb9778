"""`stagecraft.experimental.compilation_cache`: JAX's `jax.experimental.compilation_cache`
package; its module `compilation_cache` sets the directory of the persistent compilation
cache (`from jax.experimental.compilation_cache import compilation_cache as cc`)."""
__all__: list[str] = []
