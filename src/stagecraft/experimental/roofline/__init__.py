"""`stagecraft.experimental.roofline`: JAX 0.10.2's `jax.experimental.roofline`.

`roofline(f)(*args)` traces `f` (under a `shard_map` when a mesh and specs are given; its
VJP with `vjp=True`) and walks the jaxpr with per-primitive rules that count flops and HBM
bytes (`RooflineResult`); `roofline_and_grad` gives the forward and backward counts. The
interpreter is `roofline.py`, the rules `rooflines.py` (see there for what is covered).
"""
from stagecraft.experimental.roofline.roofline import (
    RooflineResult, RooflineRuleContext, RooflineShape, register_roofline,
    register_standard_roofline, roofline, roofline_and_grad)
from stagecraft.experimental.roofline import rooflines as _rooflines  # noqa: F401 - rules

__all__ = ["RooflineResult", "RooflineRuleContext", "RooflineShape", "register_roofline",
           "register_standard_roofline", "roofline", "roofline_and_grad"]
