"""`stagecraft.extend.ifrt_programs`: jaxlib's IFRT program builders (`ifrt_programs`), as
JAX's `jax.extend.ifrt_programs` serves them: part of the XLA runtime stagecraft uses, given
as is (orbax.checkpoint imports it; its Pathways plugin programs need an IFRT proxy)."""
from jaxlib import _jax as _runtime

#: jaxlib's module of IFRT program constructors (`make_plugin_program`, ...).
ifrt_programs = _runtime.ifrt_programs
