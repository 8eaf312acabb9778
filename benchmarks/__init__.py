"""Benchmarks of stagecraft against JAX in the same process run (ratios, never assertions)."""
