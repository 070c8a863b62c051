"""From PyTorch to generated kernels: :func:`optimize` a module, the ``autotune`` backend of
``torch.compile``, and ``python:module:factory`` models on the command line. Needs the
``[torch]`` extra (torch, onnxscript, triton)."""

from __future__ import annotations

from autotune.frontend.optimize import OptimizedModule, optimize, policy_of

__all__ = ["OptimizedModule", "optimize", "policy_of"]
