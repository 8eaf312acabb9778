"""`stagecraft.experimental.colocated_python`: JAX's colocated-Python API (running Python on
the CPU devices that sit next to accelerators, for Pathways/IFRT multi-host runtimes).

stagecraft's runtime is single-process PJRT, where there are no colocated CPU devices to run
on: the names are here so that libraries that import them (orbax.checkpoint imports
`colocated_python`, `func` and `serialization` at import time and uses them only on
Pathways) import; calling them raises NotImplementedError.
"""
from stagecraft.experimental.colocated_python.api import (
    colocated_cpu_devices as colocated_cpu_devices,
    colocated_python as colocated_python,
    colocated_python_class as colocated_python_class,
)
from stagecraft.experimental.colocated_python import func as func, serialization as serialization
