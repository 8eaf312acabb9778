"""`stagecraft.experimental.colocated_python.func`: the name of a module of JAX's colocated
Python machinery (`jax.experimental.colocated_python.func`, its internals: how calls and
their arguments are sent to a colocated host).

stagecraft runs colocated Python in its own process (see the package), so it has no such
machinery and this module holds none of JAX's names: it exists so that libraries that
import it along with the package (orbax's checkpointing, for its multi-host transport)
import; reading a name from it raises AttributeError.
"""
__all__: list = []
