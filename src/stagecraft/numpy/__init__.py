"""`stagecraft.numpy`: the NumPy API with JAX's numpy's semantics, composed from primitives."""
from stagecraft.numpy.lax_numpy import *  # noqa: F401,F403
from stagecraft.numpy.lax_numpy import (abs, absolute, acos, acosh, add, arange, arccos,
                                        arccosh, arcsin, arcsinh, arctan, arctan2, arctanh,
                                        around, array, asarray, asin, asinh, astype, atan,
                                        atan2, atanh, atleast_1d, bitwise_and, bitwise_invert,
                                        bitwise_not, bitwise_or, bitwise_xor, broadcast_arrays,
                                        broadcast_shapes, broadcast_to, can_cast, cbrt, ceil,
                                        clip, concatenate, cos, cosh, divide, dtype, e, equal,
                                        euler_gamma, exp, exp2, expand_dims, expm1, eye, finfo,
                                        floor, floor_divide, fmod, full, full_like, greater,
                                        greater_equal, identity, iinfo, inf, invert, iscomplexobj,
                                        isfinite, isinf, isnan, issubdtype, less, less_equal,
                                        linspace, log, log1p, log2, log10, logical_and,
                                        logical_not, logical_or, logical_xor, matrix_transpose,
                                        maximum, minimum, mod, moveaxis, multiply, nan, ndim,
                                        negative, newaxis, not_equal, ones, ones_like,
                                        permute_dims, pi, positive, power, promote_types,
                                        ravel, reciprocal, remainder, reshape, result_type,
                                        rint, round, shape, sign, sin, sinh, size, sqrt, square,
                                        squeeze, stack, subtract, swapaxes, tan, tanh,
                                        transpose, true_divide, trunc, where, zeros, zeros_like)
from stagecraft.numpy.reductions import (all, amax, amin, any, argmax, argmin, max, mean, min,
                                         prod, std, sum, var)
from stagecraft.numpy.contractions import dot, einsum, matmul, tensordot, vdot
from stagecraft.numpy.reductions import (average, count_nonzero, cumprod, cumproduct,  # noqa
                                         cumsum, cumulative_prod, cumulative_sum, nanargmax,
                                         nanargmin, nancumprod, nancumsum, nanmax, nanmean,
                                         nanmin, nanprod, nanstd, nansum, nanvar, ptp)
from stagecraft.numpy.contractions import (convolve, correlate, cross, einsum_path,  # noqa
                                           inner, kron, matvec, outer, vecdot, vecmat)
from stagecraft.numpy.sorting import *  # noqa: F401,F403
from stagecraft.numpy.setops import *  # noqa: F401,F403
from stagecraft.numpy.statistics import *  # noqa: F401,F403
from stagecraft.numpy.polynomial import *  # noqa: F401,F403
from stagecraft.numpy.index_tricks import *  # noqa: F401,F403
from stagecraft.numpy.window_functions import *  # noqa: F401,F403
from stagecraft.numpy import fft, linalg  # noqa: F401  (submodules)
from stagecraft.numpy.indexing import (argwhere, flatnonzero, nonzero, put, take,  # noqa: F401
                                       take_along_axis, where)
from stagecraft.numpy.scalar_types import *  # noqa: F401,F403
from stagecraft.numpy import array_methods as _array_methods  # noqa: F401  (attaches methods)
from stagecraft.runtime.array import Array as ndarray
