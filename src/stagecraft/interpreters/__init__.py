"""One module per transformation, each with its Trace, its rule registry and its `def*`
helpers: partial_eval (staging, DCE), ad (jvp, linearize, transpose), batching (vmap),
lowering (StableHLO), calls (rules shared by call-like primitives), mapping (rules shared by
the maps over devices, replication, SPMD module lowering). See docs/architecture.md."""

__all__: list[str] = []
