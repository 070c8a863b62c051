"""Code generation: a plan's fused groups as Triton kernels, and a runner that launches them.

``generate`` turns a graph and its plan into a :class:`Program` (one kernel per group, or the
group's ops where no template expresses it); ``write_package`` writes it as a small Python
package (``kernels.py``, ``runner.py``, ``params.npz``, ``manifest.json``).
"""

from autotune.codegen.errors import CodegenError, Unsupported
from autotune.codegen.package import write_package
from autotune.codegen.program import Program, build_program

__all__ = ["CodegenError", "Program", "Unsupported", "build_program", "write_package"]
