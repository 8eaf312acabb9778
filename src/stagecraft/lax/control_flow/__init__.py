"""Structured control flow: `cond`/`switch` (one `cond` primitive), `while_loop`,
`fori_loop`, `scan` and `map`, and `custom_linear_solve` (`custom_root` builds on a
custom_jvp), each a primitive carrying closed jaxprs with its rules (abstract eval, lowering,
jvp, partial eval/transpose, batching, DCE) beside it."""
from stagecraft.lax.control_flow import conditionals, loops, solves, while_op
from stagecraft.lax.control_flow.conditionals import *  # noqa: F401,F403
from stagecraft.lax.control_flow.while_op import *  # noqa: F401,F403
from stagecraft.lax.control_flow.loops import *  # noqa: F401,F403
from stagecraft.lax.control_flow.solves import *  # noqa: F401,F403

__all__ = [*conditionals.__all__, *while_op.__all__, *loops.__all__, *solves.__all__]
