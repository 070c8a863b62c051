"""Checking generated code against onnxruntime: the whole runner per output, and every
kernel alone on onnxruntime's own values of its inputs (so an error is pinned on the kernel
that made it, not on the kernels before it).

A float32 tensor passes when every element is within ``1e-4 * |ref| + 1e-4 * max|ref|`` of
onnxruntime's; a half-precision one within ``1e-2`` of both, and so is a float32 tensor made
through ``tl.dot`` on half-precision operands (the plan's precision mode: ``auto`` takes the
cube's operands in float16) or, for a model's outputs, after any kernel that does; integers
and booleans exactly. Non-finite elements must match (a masked ``-inf`` is ``-inf`` in both).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from autotune.codegen.errors import CodegenError
from autotune.codegen.execute import load_package
from autotune.codegen.kernel_io import F16_MAX
from autotune.codegen.program import Program
from autotune.codegen.runtime import load_params, stored
from autotune.codegen.templates.common import KernelSource
from autotune.verify import draw_inputs
from autotune.verify.sources import np_dtype
from search_space.ir import Graph, is_compile_time

log = logging.getLogger(__name__)

__all__ = ["CodegenCheck", "KernelCheck", "TensorCheck", "check_package", "compare"]

_RTOL = {"float32": 1e-4, "float64": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}


@dataclass(frozen=True)
class TensorCheck:
    """One tensor against onnxruntime's: the largest error, absolute and relative to the
    tensor's largest magnitude, and whether it is within tolerance."""

    name: str
    max_abs_err: float
    max_rel_err: float
    ok: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "tensor": self.name,
            "max_abs_err": self.max_abs_err,
            "max_rel_err": self.max_rel_err,
            "ok": self.ok,
        }


@dataclass(frozen=True)
class KernelCheck:
    """One generated kernel run alone on onnxruntime's values of its inputs."""

    kernel: str
    group: int
    outputs: tuple[TensorCheck, ...]

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.outputs)

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "group": self.group,
            "ok": self.ok,
            "outputs": [t.to_json() for t in self.outputs],
        }


@dataclass(frozen=True)
class CodegenCheck:
    """A generated package against onnxruntime on the original model."""

    outputs: tuple[TensorCheck, ...]
    kernels: tuple[KernelCheck, ...]

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.outputs) and all(k.ok for k in self.kernels)

    @property
    def failing_groups(self) -> list[int]:
        return sorted({k.group for k in self.kernels if not k.ok})

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "outputs": [t.to_json() for t in self.outputs],
            "kernels": [k.to_json() for k in self.kernels],
        }


def compare(
    name: str, got: np.ndarray, ref: np.ndarray, dtype: str, rounding: str = ""
) -> TensorCheck:
    """``got`` against ``ref`` under the tolerance of ``dtype``, or of ``rounding`` (the format
    of the dot operands the values went through) where that is looser (module docstring)."""
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return TensorCheck(name, float("inf"), float("inf"), False)
    if ref.dtype.kind not in "fc":
        bad = float(np.count_nonzero(got != ref))
        return TensorCheck(name, bad, bad, bad == 0)
    g, r = got.astype(np.float64), ref.astype(np.float64)
    finite = np.isfinite(r)
    same_special = np.array_equal(np.isfinite(g), finite) and np.array_equal(
        g[~finite], r[~finite], equal_nan=True
    )
    diff = np.abs(g[finite] - r[finite])
    scale = float(np.max(np.abs(r[finite]), initial=0.0))
    rtol = max(_RTOL.get(dtype, 1e-4), _RTOL.get(rounding, 0.0))
    within = bool(np.all(diff <= rtol * np.abs(r[finite]) + rtol * max(scale, 1e-30)))
    err = float(np.max(diff, initial=0.0))
    return TensorCheck(name, err, err / scale if scale else err, within and same_special)


def reference_values(
    model: onnx.ModelProto, graph: Graph, feeds: Mapping[str, np.ndarray], tensors: list[str]
) -> dict[str, np.ndarray]:
    """onnxruntime's values of ``tensors`` (intermediates exposed as extra outputs)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for t in tensors:
        if t not in have:
            elem = helper.np_dtype_to_tensor_dtype(np_dtype(graph.tensors[t].dtype))
            m.graph.output.append(helper.make_tensor_value_info(t, elem, None))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, dict(feeds)), strict=True))


def _kernel_check(
    pkg: Any, k: KernelSource, group: int, values: dict[str, np.ndarray], graph: Graph
) -> KernelCheck:
    import torch

    device = pkg.runner.DEVICE
    ins = [  # in the types the kernel stores them in (the plan's precision)
        stored(torch.as_tensor(np.array(values[t], copy=True)), k.tensor_type(graph, t)[1])
        for t in k.inputs
    ]
    ins = [x.to(device) for x in ins]
    types = [k.tensor_type(graph, t) for t in k.outputs]
    outs = [
        torch.empty(shape, device=device, dtype=pkg.runner.torch_dtype(dtype))
        for shape, dtype in types
    ]
    fn = getattr(pkg.runner.K, k.name)
    fn[(k.launch.grid,)](*ins, *outs, **dict(k.launch.constexprs), num_stages=k.launch.num_stages)
    scratch = {s.name for s in k.scratch}
    for t, o in zip(k.outputs, outs, strict=True):
        if t in scratch:  # no reference: the next kernel of the group is checked on it
            values[t] = o.cpu().numpy()
    rounding = _rounding(
        [k.dot_dtype, *(k.tensor_type(graph, t)[1] for t in k.inputs if t in graph.tensors)]
    )
    checks = tuple(
        compare(
            t,
            o.cpu().numpy(),
            _saturated(values[t], k.tensor_type(graph, t)[1]),
            graph.tensors[t].dtype,
            rounding,
        )
        for t, o in zip(k.outputs, outs, strict=True)
        if t not in scratch
    )
    return KernelCheck(k.name, group, checks)


def _saturated(ref: np.ndarray, storage: str) -> np.ndarray:
    """onnxruntime's value as a float16 store holds it (``runtime.stored``): saturated at
    float16's largest finite value where the plan's precision narrows a wider float."""
    ref = np.asarray(ref)
    if storage != "float16" or ref.dtype not in (np.float32, np.float64):
        return ref
    return np.where(np.isfinite(ref), np.clip(ref, -F16_MAX, F16_MAX), ref)


def _rounding(formats: list[str]) -> str:
    """The narrowest half format among ``formats`` (a kernel's product operands, the types of
    what it reads), '' when none: a value made from half-precision data is held to that
    format's tolerance, float32 or not: onnxruntime's float32 value of a Cast after float16
    ops can be a float16 ulp from the Cast of its own float16 input (seen in a fuzzed graph,
    GlobalAveragePool -> GlobalMaxPool -> Cast, once more intermediates were exposed)."""
    return next((d for d in ("bfloat16", "float16") if d in formats), "")


def _interpreter_gap(program: Program, device: str) -> None:
    """Triton's interpreter has no bfloat16 arithmetic (its ``tl.dot`` multiplies bfloat16 bit
    patterns, its casts truncate): such a package is checked on a device only.

    Raises:
        CodegenError: naming the first kernel the interpreter cannot run faithfully.
    """
    if device != "cpu":
        return
    for k in program.kernels:
        types = [k.tensor_type(program.graph, t)[1] for t in (*k.inputs, *k.outputs)]
        if "bfloat16" in (k.dot_dtype, *types):
            raise CodegenError(
                f"kernel {k.name} computes in bfloat16, which Triton's CPU interpreter does not "
                "emulate; check it on a GPU or NPU, or generate at precision auto (float16)"
            )


def _package_params(pkg: Any, folder: str | Path) -> dict[str, np.ndarray]:
    """The compile-time tensors the package holds, by tensor name (what its runner loads)."""
    stored = load_params(Path(folder) / "params.npz")
    return {name: stored[f"t{i}"] for i, name in enumerate(pkg.runner.PARAMS)}


def check_package(
    folder: str | Path, model: onnx.ModelProto, program: Program, *, seed: int = 0
) -> CodegenCheck:
    """Run the package in ``folder`` (written for ``program``) and each of its kernels alone,
    and compare with onnxruntime on ``model`` with the same seeded inputs.

    Raises:
        CodegenError: a package in bfloat16 on Triton's CPU interpreter (``_interpreter_gap``).
    """
    graph = program.graph
    feeds = draw_inputs(model, graph, seed)
    pkg = load_package(folder)
    _interpreter_gap(program, pkg.runner.DEVICE)
    scratch = {s.name for k in program.kernels for s in k.scratch}
    wanted = sorted(
        {
            t
            for k in program.kernels
            for t in (*k.inputs, *k.outputs)
            if t not in scratch and not is_compile_time(graph, t) and t not in feeds
        }
    )
    ref = reference_values(model, graph, feeds, wanted)
    values: dict[str, np.ndarray] = {**feeds, **ref, **_package_params(pkg, folder)}
    kernels = tuple(
        _isolated(pkg, s.kernel, s.group, values, graph)
        for s in program.steps
        if s.kernel is not None
    )
    try:
        got = pkg.run({t: feeds[t] for t in pkg.INPUTS})
    except Exception as err:  # a failing run is a failed check, never a lost one
        log.warning("the generated package failed to run: %s", err)
        failed = float("inf")
        return CodegenCheck(
            tuple(TensorCheck(t, failed, failed, False) for t in graph.outputs), kernels
        )
    rounding = _rounding(
        [*(k.dot_dtype for k in program.kernels), *(program.storage(t) for t in graph.tensors)]
    )
    outputs = tuple(
        compare(
            t,
            got[t],
            _saturated(ref[t] if t in ref else values[t], program.storage(t)),
            graph.tensors[t].dtype,
            rounding,
        )
        for t in graph.outputs
    )
    return CodegenCheck(outputs, kernels)


def _isolated(
    pkg: Any, k: KernelSource, group: int, values: dict[str, np.ndarray], graph: Graph
) -> KernelCheck:
    """A kernel's check; a kernel that raises fails it (with every output marked)."""
    try:
        return _kernel_check(pkg, k, group, values, graph)
    except Exception as err:
        log.warning("kernel %s failed to run: %s", k.name, err)
        failed = float("inf")
        return KernelCheck(
            k.name, group, tuple(TensorCheck(t, failed, failed, False) for t in k.outputs)
        )
