"""`stagecraft.scipy.stats`: statistical distributions and functions with the API of JAX
0.10.2's `jax.scipy.stats`.

Each distribution is a submodule (`norm`, `gamma`, `poisson`, ...) holding exactly the
functions JAX's has (`logpdf`/`pdf` or `logpmf`/`pmf`, and where JAX has them `cdf`,
`logcdf`, `sf`, `logsf`, `ppf`, `isf`); they broadcast their arguments and promote them to
one inexact dtype as JAX does. `gaussian_kde`, `mode`, `rankdata` and `sem` are at the top
level. Everything is composed from `stagecraft.numpy`, `stagecraft.lax` and
`stagecraft.scipy.special`, so it traces under `jit`, `vmap` and `grad`.
"""
from stagecraft.scipy.stats import (bernoulli, beta, betabinom, binom, cauchy, chi2, dirichlet,
                                    expon, gamma, gennorm, geom, gumbel_l, gumbel_r, laplace,
                                    logistic, multinomial, multivariate_normal, nbinom, norm,
                                    pareto, poisson, t, truncnorm, uniform, vonmises,
                                    wrapcauchy)
from stagecraft.scipy.stats._core import mode, rankdata, sem
from stagecraft.scipy.stats.kde import gaussian_kde

__all__ = ["bernoulli", "beta", "betabinom", "binom", "cauchy", "chi2", "dirichlet", "expon",
           "gamma", "gaussian_kde", "gennorm", "geom", "gumbel_l", "gumbel_r", "laplace",
           "logistic", "mode", "multinomial", "multivariate_normal", "nbinom", "norm",
           "pareto", "poisson", "rankdata", "sem", "t", "truncnorm", "uniform", "vonmises",
           "wrapcauchy"]
