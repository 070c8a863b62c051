"""The runner module of a generated package: a ``torch.nn.Module`` that launches the
program's kernels in order (buffers allocated once per device), and ``run(inputs)``."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.codegen.program import Program, Step
from autotune.codegen.templates.common import Scratch
from search_space.ir import Graph, is_compile_time

__all__ = ["RunnerNames", "params_of", "runner_source"]


def _ident(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    return name if name and not name[0].isdigit() else f"x_{name}"


@dataclass
class RunnerNames:
    """Python names of the program's tensors: inputs as arguments, compile-time tensors as
    module buffers ``self.pN``, intermediates ``bufN`` (workspace slots), outputs ``outN``."""

    graph: Graph
    params: list[str]
    fed: Sequence[str]
    names: dict[str, str] = field(default_factory=dict)
    workspace: list[str] = field(default_factory=list)
    assigned: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        used: set[str] = set()
        for t in self.fed:
            name = _ident(t)
            while name in used or name in ("self", "ws", "K", "torch"):
                name += "_"
            used.add(name)
            self.names[t] = name
        for i, t in enumerate(self.params):
            self.names[t] = f"self.p{i}"

    def bound(self, tensor: str) -> str:
        """A name for a tensor the runner assigns (a view, a framework op's result)."""
        self.assigned.add(tensor)
        return self._name(tensor, slot=False)

    def of(self, tensor: str) -> str:
        """A tensor's name; a new one written by a kernel gets a workspace slot."""
        return self._name(tensor, slot=True)

    def _name(self, tensor: str, slot: bool) -> str:
        if tensor not in self.names:
            if tensor in self.graph.outputs:
                self.names[tensor] = f"out{self.graph.outputs.index(tensor)}"
            elif slot:
                self.names[tensor] = f"buf{len(self.workspace)}"
                self.workspace.append(tensor)
            else:
                self.names[tensor] = f"v{len(self.names)}"
        return self.names[tensor]


def params_of(program: Program, fed: Sequence[str]) -> list[str]:
    """Compile-time tensors the program reads, in first-use order (fed inputs excluded)."""
    g = program.graph
    out: dict[str, None] = {}
    for step in program.steps:
        for t in _reads(step, g):
            if t in g.tensors and t not in fed and is_compile_time(g, t):
                out[t] = None
    return list(out)


def _reads(step: Step, g: Graph) -> list[str]:
    if step.kernel is not None:
        return list(step.kernel.inputs)
    if step.extern is not None:
        return [t for t in g.op(step.extern.op).inputs if t]
    assert step.view is not None
    return [step.view.source]


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _alloc(program: Program, tensor: str, scratch: Mapping[str, Scratch] | None = None) -> str:
    if scratch and tensor in scratch:
        shape, dtype = scratch[tensor].shape, scratch[tensor].dtype
    else:
        shape, dtype = program.graph.tensors[tensor].static_shape, program.storage(tensor)
    return f"torch.empty({tuple(shape)!r}, dtype=torch_dtype({dtype!r}), device=dev)"


def _narrowed(program: Program, tensor: str) -> bool:
    return program.storage(tensor) != program.graph.tensors[tensor].dtype


def _as(program: Program, name: str, tensor: str, declared: bool) -> str:
    """``name`` converted to ``tensor``'s declared type (``declared``) or to the type it is
    stored in, where the plan's precision stores it narrower (else ``name`` as it is)."""
    if not _narrowed(program, tensor):
        return name
    if declared:
        return f"{name}.to(torch_dtype({program.graph.tensors[tensor].dtype!r}))"
    return f"stored({name}, {program.storage(tensor)!r})"


def _step_lines(step: Step, program: Program, names: RunnerNames, lines: list[str]) -> None:
    g = program.graph
    if step.view is not None:
        target = step.view.target
        shape = tuple(g.tensors[target].static_shape)
        source = names.of(step.view.source)
        lines.append(f"{names.bound(target)} = {source}.view({shape!r})")
        return
    if step.extern is not None:
        op = g.op(step.extern.op)
        attrs = {k: _plain(v) for k, v in op.attributes}
        # the framework computes in the declared types, kernels read the stored ones
        given = ", ".join(_as(program, names.of(t), t, True) if t else "None" for t in op.inputs)
        outs = [t for t in op.outputs if t]
        lines.append(f"# {op.op_type} '{op.name}' runs in the framework: {step.extern.reason}")
        target = ", ".join(names.bound(t) for t in outs)
        lines.append(
            f"{target}, = extern_op({op.op_type!r}, {attrs!r}, [{given}], {len(op.outputs)})"
        )
        lines += [
            f"{names.of(t)} = {_as(program, names.of(t), t, False)}"
            for t in outs
            if _narrowed(program, t)
        ]
        return
    k = step.kernel
    assert k is not None
    for t in k.outputs:
        names.of(t)
    args = [names.of(t) for t in (*k.inputs, *k.outputs)]
    meta = [f"{n}={v}" for n, v in k.launch.constexprs]
    lines.append(
        f"K.{k.name}[({k.launch.grid},)]({', '.join([*args, *meta])}, "
        f"num_stages={k.launch.num_stages})"
    )


def runner_source(
    program: Program, meta: Mapping[str, Any], fed: Sequence[str]
) -> tuple[str, list[str]]:
    """The runner module's text, and the compile-time tensors it loads (``params.npz``);
    ``fed`` are the graph inputs a caller gives (an initializer listed as an input is not)."""
    g = program.graph
    params = params_of(program, fed)
    names = RunnerNames(g, params, fed)
    body: list[str] = []
    for step in program.steps:
        _step_lines(step, program, names, body)
    for t in g.outputs:
        names.of(t)
    allocs_out = [
        f"{names.of(t)} = {_alloc(program, t)}"
        for t in g.outputs
        if names.of(t).startswith("out") and t not in names.assigned
    ]
    scratch = {s.name: s for k in program.kernels for s in k.scratch}
    work = [_alloc(program, t, scratch) for t in names.workspace]
    args = ", ".join(f"{names.names[t]}: torch.Tensor" for t in fed)
    take = [
        f"{names.names[t]} = {_as(program, names.names[t], t, False)}.contiguous()" for t in fed
    ]
    unpack = [f"{names.of(t)} = ws[{i}]" for i, t in enumerate(names.workspace)]
    inputs = {t: (tuple(g.tensors[t].static_shape), g.tensors[t].dtype) for t in fed}
    text = _TEMPLATE.format(
        model=meta.get("model", g.name),
        plan=meta.get("plan", ""),
        target=meta.get("target", ""),
        inputs=repr(inputs),
        outputs=repr(tuple(g.outputs)),
        params=repr(params),
        param_types=repr([program.storage(t) for t in params]),
        args=args,
        arg_names=", ".join(names.names[t] for t in fed),
        workspace="\n".join(f"            {w}," for w in work) or "            ",
        body=_indent(
            [
                *take,
                "dev = " + (names.names[fed[0]] + ".device" if fed else "self.device"),
                "ws = self.workspace(dev)",
                *unpack,
                *allocs_out,
                *body,
            ],
            2,
        ),
        returns=", ".join(_as(program, names.of(t), t, True) for t in g.outputs) + ",",
    )
    return text, params


def _indent(lines: list[str], level: int) -> str:
    return "\n".join("    " * level + line for line in lines)


_TEMPLATE = '''"""Runner of the kernels generated for {model} under plan {plan} (target {target}).

Generated by `autotune codegen`; launches every kernel in the plan's order. Buffers between
kernels are allocated once per device and reused; outputs are fresh on every call. Tensors are
stored in the types the plan's precision gives them; inputs and outputs keep the model's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from autotune.codegen.runtime import (
    check_inputs,
    extern_op,
    load_params,
    pick_device,
    stored,
    to_numpy,
    torch_dtype,
)

DEVICE = pick_device()  # npu, cuda, or the CPU interpreter (sets TRITON_INTERPRET=1)

from . import kernels as K  # noqa: E402  (after the device: the interpreter is chosen at import)

INPUTS = {inputs}
OUTPUTS = {outputs}
PARAMS = {params}
PARAM_TYPES = {param_types}  # as stored on the device (the plan's precision)


class Model(torch.nn.Module):
    """The model's forward as the generated kernels (compile-time tensors are buffers)."""

    def __init__(self, params: Mapping[str, Any] | None = None, device: str = DEVICE) -> None:
        """``params`` (by tensor name) are used as given; the rest are read from
        params.npz."""
        super().__init__()
        saved = load_params(Path(__file__).with_name("params.npz"))
        params = {{**{{name: saved[f"t{{i}}"] for i, name in enumerate(PARAMS)
                      if f"t{{i}}" in saved}}, **(params or {{}})}}
        missing = [name for name in PARAMS if name not in params]
        if missing:
            raise ValueError(f"parameter '{{missing[0]}}' is neither given nor in params.npz")
        for i, name in enumerate(PARAMS):
            value = stored(torch.as_tensor(params[name]), PARAM_TYPES[i])
            self.register_buffer(f"p{{i}}", value.to(device))
        self.device = torch.device(device)
        self._ws: dict[str, list[torch.Tensor]] = {{}}

    def workspace(self, dev: torch.device) -> list[torch.Tensor]:
        """Buffers between kernels, allocated on first use per device."""
        if str(dev) not in self._ws:
            self._ws[str(dev)] = [
{workspace}
            ]
        return self._ws[str(dev)]

    def forward(self, {args}) -> tuple[torch.Tensor, ...]:
{body}
        return ({returns})


_MODELS: dict[str, Model] = {{}}


def run(inputs: Mapping[str, Any], device: str = DEVICE) -> dict[str, Any]:
    """Outputs by name for inputs by name (numpy arrays or tensors of the model's shapes)."""
    check_inputs(inputs, INPUTS)
    if device not in _MODELS:
        _MODELS[device] = Model(device=device)
    model = _MODELS[device]
    args = [torch.as_tensor(inputs[name]).to(device) for name in INPUTS]
    with torch.no_grad():
        outs = model(*args)
    return to_numpy(outs, OUTPUTS)
'''
