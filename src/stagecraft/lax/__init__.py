"""Primitives with JAX's `lax` names; each family module holds its primitives' rules."""
from stagecraft.lax.elementwise import *  # noqa: F401,F403
from stagecraft.lax.elementwise import (abs, acos, acosh, add, asin, asinh, atan, atan2, atanh,
                                        bitwise_and, bitwise_not, bitwise_or, bitwise_xor, cbrt,
                                        ceil, convert_element_type, cos, cosh, div, eq, erf,
                                        erf_inv, erfc, exp, exp2, expm1, floor, ge, gt,
                                        integer_pow, is_finite, le, log, log1p, logistic, lt, max,
                                        min, mul, ne, neg, pow, rem, round, rsqrt, select,
                                        select_n, sign, sin, sinh, sqrt, sub, tan, tanh)
from stagecraft.lax.shape import *  # noqa: F401,F403
from stagecraft.lax.slicing import *  # noqa: F401,F403
from stagecraft.lax.reduction import *  # noqa: F401,F403
from stagecraft.lax.dot import *  # noqa: F401,F403
from stagecraft.lax.special import *  # noqa: F401,F403
from stagecraft.lax.windowed import *  # noqa: F401,F403
from stagecraft.lax.sort import *  # noqa: F401,F403
from stagecraft.lax.cumulative import *  # noqa: F401,F403
from stagecraft.lax.ragged import *  # noqa: F401,F403
from stagecraft.lax.associative_scan import associative_scan  # noqa: F401
from stagecraft.lax.random_bits import *  # noqa: F401,F403
from stagecraft.lax.ad_util import *  # noqa: F401,F403
# NB: from control_flow's modules, whose `__all__` lists their lax names: a star import of the
# package would also bring in its submodules (`loops`, `common`, ...).
from stagecraft.lax.control_flow.conditionals import *  # noqa: F401,F403
from stagecraft.lax.control_flow.while_op import *  # noqa: F401,F403
from stagecraft.lax.control_flow.loops import *  # noqa: F401,F403
from stagecraft.lax.control_flow.loops import map  # noqa: F401
from stagecraft.lax.control_flow.solves import *  # noqa: F401,F403
from stagecraft.lax.conv import *  # noqa: F401,F403
from stagecraft.lax.fft import *  # noqa: F401,F403
from stagecraft.lax import linalg  # noqa: F401  (the lax.linalg submodule)
from stagecraft.lax.misc import *  # noqa: F401,F403
from stagecraft.lax.parallel import (all_gather, all_to_all, axis_index, axis_size,  # noqa: F401
                                     pbroadcast, pmax, pmean, pmin, ppermute, pshuffle, psum,
                                     psum_scatter, pcast, pswapaxes, psend, precv,
                                     ragged_all_to_all)
# The collectives' primitives under JAX's names (with JAX's params).
from stagecraft.lax.parallel import (all_gather_p, all_to_all_p, axis_index_p,  # noqa: F401
                                     pmax_p, pmin_p, ppermute_p, psum_p, ragged_all_to_all_p)
from stagecraft.lax.spmd import sharding_constraint_p, with_sharding_constraint  # noqa: F401,E402
from stagecraft.lax.spmd import device_put_p  # noqa: F401,E402


def __getattr__(name):
  # NB: names JAX 0.10 removed raise JAX's AttributeError (its deprecation message)
  if name == "pvary":
    raise AttributeError("jax.lax.pvary was deprecated in JAX v0.8.2 and removed in JAX "
                         "v0.10.0; use `jax.lax.pcast(..., to='varying')")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
