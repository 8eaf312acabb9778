"""Developer tools (they may import JAX: they inspect it, they are not the library)."""
