"""From a PyTorch module to ONNX, as the rest of the tool reads models.

The dynamo exporter (``torch.onnx.export(..., dynamo=True)``, which needs ``onnxscript``) is
tried first; where it fails, the TorchScript exporter, with its tracer's warnings taken as
errors: a trace that turned a tensor into a Python bool or number has baked one branch of
data-dependent control flow into the graph, and a model that gives the eager module's outputs
only for the example inputs is worse than none. Which exporter ran, and why the first did not,
is logged. The module's parameters and buffers stay its own: the graph's initializers are
matched to them by name (``Exported.weights``), so the generated runner reads the module's
tensors rather than copies.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from autotune.exceptions import AutotuneError

__all__ = ["Exported", "as_inputs", "export_module", "first_line", "tensors_of"]

log = logging.getLogger(__name__)
OPSET = 18


@dataclass(frozen=True)
class Exported:
    """A module as ONNX: the model, which exporter made it, the name of each example input
    (the graph input it is, unless the graph does not read it), the outputs' structure (one
    tensor, or a tuple or list of them), and the initializers that are the module's own
    parameters or buffers (of the same name)."""

    model: onnx.ModelProto
    exporter: str
    inputs: tuple[str, ...]
    structure: str  # "tensor", "tuple" or "list"
    weights: frozenset[str] = frozenset()


def as_inputs(example_inputs: Any) -> tuple[torch.Tensor, ...]:
    """Example inputs as a tuple (one tensor is a tuple of one).

    Raises:
        AutotuneError: an input that is not a tensor.
    """
    inputs = (
        tuple(example_inputs) if isinstance(example_inputs, tuple | list) else (example_inputs,)
    )
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise AutotuneError(
                f"example input {i} is a {type(x).__name__}; pass tensors (a tuple of them)"
            )
    return inputs


def export_module(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> Exported:
    """``module`` at the shapes of ``inputs`` as ONNX (module docstring).

    Raises:
        AutotuneError: inputs that do not match the module's forward, tensors on the meta
            device, outputs that are not tensors, or a module neither exporter takes (its
            reasons, or the graph break data-dependent control flow makes, in one line).
    """
    names = _input_names(module, inputs)
    _check_devices(module, inputs)
    structure = _structure(module, inputs)
    module = module.eval()
    try:
        model, exporter = _dynamo(module, inputs, names), "dynamo"
    except Exception as err:  # any failure of the new exporter: the legacy one gets its turn
        first = first_line(err)
        log.info("the dynamo exporter failed (%s); trying the TorchScript exporter", first)
        try:
            model, exporter = _legacy(module, inputs, names), "legacy"
        except _Traced as traced:
            raise AutotuneError(
                f"the module has data-dependent control flow ({traced}); the exported graph "
                "would hold one branch: make the branch a tensor op (torch.where) or optimize "
                "the parts around it (torch.compile(backend='autotune') breaks the graph there)"
            ) from None
        except Exception as err2:
            raise AutotuneError(
                f"the module could not be exported to ONNX: {first} (dynamo exporter); "
                f"{first_line(err2)} (TorchScript exporter)"
            ) from None
    log.info("exported with the %s exporter", exporter)
    return Exported(model, exporter, tuple(names), structure, _weights(module, model))


def _input_names(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> list[str]:
    """Names for the example inputs: the forward's parameter names they bind to."""
    try:
        bound = inspect.signature(module.forward).bind(*inputs)
    except TypeError as err:
        sig = inspect.signature(module.forward)
        raise AutotuneError(
            f"the example inputs do not match {type(module).__name__}.forward{sig}: {err}"
        ) from None
    names: list[str] = []
    for name, value in bound.arguments.items():
        values = value if isinstance(value, tuple) else (value,)  # *args
        names += [name] if len(values) == 1 else [f"{name}_{i}" for i in range(len(values))]
    return names


def _check_devices(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    tensors = [*module.parameters(), *module.buffers(), *inputs]
    if any(t.device.type == "meta" for t in tensors):
        raise AutotuneError(
            "the module or its example inputs are on the meta device (no values); load the "
            "weights (module.to_empty(device='cpu') and a state dict) before optimize()"
        )


def _structure(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> str:
    """What the eager module returns: one tensor, or a tuple or list of tensors."""
    with torch.no_grad():
        out = module(*inputs)
    if isinstance(out, torch.Tensor):
        return "tensor"
    if isinstance(out, tuple | list) and out and all(isinstance(o, torch.Tensor) for o in out):
        return type(out).__name__
    raise AutotuneError(
        f"the module returns a {type(out).__name__}, not tensors; optimize() needs a tensor or "
        "a tuple or list of tensors (wrap the module to return them)"
    )


def _dynamo(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], names: list[str]) -> Any:
    with _quiet():
        program = torch.onnx.export(
            module,
            inputs,
            input_names=names,
            dynamo=True,
            opset_version=OPSET,
            verbose=False,
            optimize=False,  # its constant folding would copy the weights it transposes
        )
    if program is None:
        raise RuntimeError("the exporter returned no program")
    return program.model_proto


class _Traced(AutotuneError):
    """The tracer turned a tensor into a Python value (data-dependent control flow)."""


def _legacy(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], names: list[str]) -> Any:
    buf = io.BytesIO()
    with warnings.catch_warnings(record=True) as seen, _quiet():
        warnings.simplefilter("always", torch.jit.TracerWarning)
        torch.onnx.export(
            module,
            inputs,
            buf,  # type: ignore[arg-type]  # a file object is documented
            input_names=names,
            dynamo=False,
            opset_version=OPSET,
            do_constant_folding=False,
        )
    traced = [w for w in seen if issubclass(w.category, torch.jit.TracerWarning)]
    if traced:
        w = traced[0]
        what = first_line(w.message).split(" might ")[0]  # "Converting a tensor to a ..."
        raise _Traced(f"{what} at {w.filename}:{w.lineno}")
    return onnx.load_from_string(buf.getvalue())


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporters print progress to stdout; keep the CLI's output to the tool's own."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _weights(module: torch.nn.Module, model: onnx.ModelProto) -> frozenset[str]:
    """Initializers that are the module's own tensors: of a parameter's or buffer's name and
    of its values (an exporter that folds a batch norm into the convolution before it keeps
    the convolution weight's name for the folded values, which stay the graph's own)."""
    own = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    same = set()
    for init in model.graph.initializer:
        t = own.get(init.name)
        if t is None or tuple(t.shape) != tuple(init.dims):
            continue
        value, mine = numpy_helper.to_array(init), t.detach().cpu()
        if mine.dtype == torch.bfloat16:  # no numpy type: compared as float32
            value, mine = value.astype(np.float32), mine.float()
        if np.array_equal(value, mine.numpy()):
            same.add(init.name)
    return frozenset(same)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_line(err: object) -> str:
    """The first line of an error's innermost cause (the exporters wrap theirs), no colours."""
    while isinstance(err, BaseException) and err.__cause__ is not None:
        err = err.__cause__
    text = _ANSI.sub("", str(err)).strip() or type(err).__name__
    return text.splitlines()[0][:300]


def tensors_of(structure: str, values: Sequence[torch.Tensor]) -> Any:
    """Outputs in the structure the eager module returns them in."""
    if structure == "tensor":
        return values[0]
    return list(values) if structure == "list" else tuple(values)
