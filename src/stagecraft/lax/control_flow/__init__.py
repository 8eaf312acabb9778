"""Structured control flow: `cond`/`switch` (one `cond` primitive), `while_loop`,
`fori_loop`, `scan` and `map`, each a primitive carrying closed jaxprs with its rules
(abstract eval, lowering, jvp, partial eval/transpose, batching, DCE) beside it."""
from stagecraft.lax.control_flow import conditionals, loops, while_op
from stagecraft.lax.control_flow.conditionals import *  # noqa: F401,F403
from stagecraft.lax.control_flow.while_op import *  # noqa: F401,F403
from stagecraft.lax.control_flow.loops import *  # noqa: F401,F403

__all__ = [*conditionals.__all__, *while_op.__all__, *loops.__all__]
