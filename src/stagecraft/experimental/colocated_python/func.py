"""JAX's `colocated_python.func` module: nothing of it runs on stagecraft (see the package);
it exists so that `from jax.experimental.colocated_python import func` imports."""
