"""Static checks of generated kernels against what triton-ascend documents for A2/A3 (910B).

Each rule of :data:`RULES` names its source, a file of github.com/Ascend/triton-ascend (docs
read at commit eeb030e7, 2026-04-18) and its section, and checks one kernel's parsed text and
launch. Advisory rules (performance, not correctness) run only with ``advice=True``. How the
tile footprint is estimated, and every rule in full: docs/codegen-ascend-rules.md.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from autotune.codegen.kernel_text import (
    KernelText,
    arg,
    created_dtype,
    footprint,
    text_of,
    tl_call,
    tl_dtype,
)
from autotune.codegen.program import Program
from autotune.codegen.templates.common import KernelSource
from costmodel.spec import HardwareSpec
from search_space.ir import Graph

__all__ = ["RULES", "TL_SUPPORTED", "Rule", "RuleViolation", "check_ascend", "check_kernel"]

_API = "docs/zh/triton_api"
_OUTLINE = "docs/sources/python-api/outline.md"
_LOAD_STORE = {"int8", "int16", "int32", "int64", "float16", "float32", "bfloat16", "bool"}
_DOT_OPERANDS = {"int8", "float16", "bfloat16", "float32"}
_ZEROS = {"uint8", "int8", "int16", "int32", "int64", "float16", "float32", "bfloat16"}
_DTYPE_ARGS = {  # function -> (position of its dtype argument, the dtypes its table allows)
    "zeros": (1, _ZEROS),
    "zeros_like": (1, _ZEROS),
    "full": (2, _ZEROS | {"int1"}),
    "cast": (1, _ZEROS | {"int1"}),
    "to": (0, _ZEROS | {"int1"}),
}
# the API list of docs/zh/triton_api/index.md (programming model, creation, shape, linear
# algebra, memory, indexing, iterators, math, random, reduction, scan, atomic, hints, debug,
# Ascend extensions) and the dtypes of its tables, less what the overview (outline.md) marks
# unsupported in every type even where the op's own page does not (the stricter source wins):
# dot_scaled, sort, inline_asm_elementwise, max_constancy, max_contiguous, multiple_of
_API_LIST = """
program_id num_programs arange cat full zeros zeros_like cast broadcast broadcast_to
expand_dims interleave join permute ravel reshape split trans view dot load store
make_block_ptr advance make_tensor_descriptor load_tensor_descriptor store_tensor_descriptor
flip where swizzle2d gather range static_range logical_and logical_or abs cdiv ceil clamp cos
div_rn erf exp exp2 fdiv floor fma log log2 maximum minimum rsqrt sigmoid sin softmax sqrt
sqrt_rn umulhi randint4x randint rand randn argmax argmin max min reduce sum xor_sum
associative_scan cumprod cumsum histogram atomic_add atomic_and atomic_cas atomic_max
atomic_min atomic_or atomic_xchg atomic_xor debug_barrier assume static_print static_assert
device_print device_assert extract_slice insert_slice get_element compile_hint multibuffer
parallel sync_block_set sync_block_wait int1 constexpr tensor dtype
"""
TL_SUPPORTED = frozenset(re.findall(r"\w+", _API_LIST)) | _ZEROS
_METHODS = "to cast trans reshape broadcast_to expand_dims permute ravel view split shape dtype T"
_TENSOR_ATTRS = {*_METHODS.split(" "), "element_ty"}


@dataclass(frozen=True)
class RuleViolation:
    """A kernel that breaks a rule, and how."""

    kernel: str
    rule: str
    detail: str


def _grid_1d(kc: KernelText, spec: HardwareSpec) -> Iterator[str]:
    for call in kc.tl_calls("program_id", "num_programs"):
        axis = arg(call, 0, "axis")
        if not (isinstance(axis, ast.Constant) and axis.value == 0):
            yield f"tl.{tl_call(call)} of axis {text_of(axis) or '?'}"


def _grid_cores(kc: KernelText, spec: HardwareSpec) -> Iterator[str]:
    dot = any(kc.tl_calls("dot"))
    unit, cores = ("cube", spec.cube_cores) if dot else ("vector", spec.vector_cores)
    if kc.k.launch.grid > cores:
        yield f"grid {kc.k.launch.grid} > {cores} {unit} cores of {spec.name}"


def _ub_footprint(kc: KernelText, spec: HardwareSpec) -> Iterator[str]:
    fp = footprint(kc.k, kc.graph)
    how = "double-buffered" if fp.double else "single-buffered"
    if fp.vector > spec.ub_bytes:
        yield f"{how} tiles of {fp.vector} B > {spec.ub_bytes} B of unified buffer"
    if fp.cube > spec.l1_bytes:
        yield f"{how} tl.dot operand tiles of {fp.cube} B > {spec.l1_bytes} B of L1"


def _tl_api(kc: KernelText, spec: HardwareSpec) -> Iterator[str]:
    for node in ast.walk(ast.Module(kc.fn.body, [])):  # the body: not @triton.jit
        if not isinstance(node, ast.Attribute) or isinstance(node.value, ast.Attribute):
            continue  # tl.math.exp: its inner tl.math is the one reported
        if tl_dtype(node) and node.attr not in TL_SUPPORTED:
            yield f"tl.{node.attr} is not a documented triton-ascend API (line {node.lineno})"
        elif not tl_dtype(node) and node.attr not in _TENSOR_ATTRS:
            yield f".{node.attr} is not a documented tensor method (line {node.lineno})"


def _io_dtype(kc: KernelText, spec: HardwareSpec) -> Iterator[str]:
    for param, dtype in kc.dtypes.items():
        if dtype not in _LOAD_STORE:
            yield f"{param} is {dtype}, which tl.load/tl.store do not support"


def _dot_operands(kc: KernelText, spec: HardwareSpec) -> Iterator[str]:
    for op in (kc.graph.op(name) for name in kc.k.ops):
        for t in op.inputs[:2] if op.op_type in ("MatMul", "Gemm", "Conv") else ():
            if kc.graph.tensors[t].dtype not in _DOT_OPERANDS:
                yield f"{op.op_type} '{op.name}' operand '{t}' is {kc.graph.tensors[t].dtype}"
    for dot in kc.tl_calls("dot"):
        if arg(dot, 5, "max_num_imprecise_acc") is not None:
            yield f"tl.dot with max_num_imprecise_acc (line {dot.lineno})"
        if tl_dtype(arg(dot, 6, "out_dtype")) not in ("", "float32", "int32"):
            yield f"tl.dot out_dtype {ast.unparse(dot)} (line {dot.lineno})"
        acc = arg(dot, 2, "acc")
        for init in kc.values.get(acc.id, []) if isinstance(acc, ast.Name) else []:
            if created_dtype(init) in ("float16", "bfloat16"):
                yield f"tl.dot accumulates in {created_dtype(init)} (line {dot.lineno})"


def _dtype_args(kc: KernelText, spec: HardwareSpec) -> Iterator[str]:
    for call in kc.calls:
        name = tl_call(call)
        if not name and isinstance(call.func, ast.Attribute) and call.func.attr in ("to", "cast"):
            name = "to"  # x.to(dtype), x.cast(dtype): the dtype comes first
        if name in _DTYPE_ARGS:
            pos, allowed = _DTYPE_ARGS[name]
            dtype = tl_dtype(arg(call, pos, "dtype"))
            if dtype and dtype not in allowed:
                yield f"{name} to {dtype} (line {call.lineno})"


def _call_args(kc: KernelText, spec: HardwareSpec) -> Iterator[str]:
    for call in kc.tl_calls("load", "store"):
        for kw in call.keywords:
            if kw.arg in ("cache_modifier", "eviction_policy", "volatile"):
                yield f"tl.{tl_call(call)} with {kw.arg} (line {call.lineno})"
    for call in kc.tl_calls("max", "min"):
        axis, idx = arg(call, 1, "axis"), arg(call, 2, "return_indices")
        if text_of(axis) in ("", "None") and text_of(idx) == "True":
            yield f"tl.{tl_call(call)} with return_indices and no axis (line {call.lineno})"
    shifts = [
        n
        for n in ast.walk(kc.fn)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.LShift | ast.RShift)
    ]
    yield from (
        f"a shift by a tensor (line {n.lineno})"
        for n in shifts
        if kc.extent(text_of(n.right)) is None
    )


def _rank(kc: KernelText, spec: HardwareSpec) -> Iterator[str]:
    for name, shape in kc.shapes.items():
        if len(shape) > 5:
            yield f"'{name}' is a {len(shape)}-D tile {shape}"


def _arange(kc: KernelText, spec: HardwareSpec) -> Iterator[str]:
    for call in kc.tl_calls("arange"):
        lo, hi = (kc.extent(text_of(a)) for a in [*call.args, None, None][:2])
        if lo is None or hi is None:
            continue
        n = hi - lo
        if not (1 <= n < 1 << 20 and n & (n - 1) == 0):  # TRITON_MAX_TENSOR_NUMEL
            yield f"tl.arange of {n} lanes (line {call.lineno})"


def _int64_scalar(kc: KernelText, spec: HardwareSpec) -> Iterator[str]:
    for i, t in enumerate(kc.k.inputs):
        if kc.dtypes[f"in{i}"] == "int64":
            yield f"in{i} ('{t}') is int64"


def _structured_divmod(kc: KernelText, spec: HardwareSpec) -> Iterator[str]:
    for call in kc.tl_calls("load", "store"):
        mask = arg(call, 1 if tl_call(call) == "load" else 2, "mask")
        for node in ast.walk(ast.Tuple([*call.args[:1], *([mask] if mask else [])])):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv | ast.Mod)):
                continue
            d = kc.extent(text_of(node.right)) or 1
            for dim, b in [(dim, kc.extent(dim) or 1) for dim in kc.shape(node.left)]:
                if b > 1 and d > 1 and b % d and d % b:
                    yield f"{dim}={b} against {text_of(node)} (line {node.lineno})"


@dataclass(frozen=True)
class Rule:
    """One documented constraint: id, what it asks, its source (file and section), and the
    check that lists how one kernel breaks it."""

    id: str
    text: str
    source: str
    check: Callable[[KernelText, HardwareSpec], Iterator[str]]
    advisory: bool = False


_MIGRATE, _GUIDE = "docs/en/migration_guide", "docs/en/programming_guide.md"
RULES: tuple[Rule, ...] = (
    Rule(
        "grid-1d",
        "The kernel reads grid axis 0 only.",
        f"{_MIGRATE}/migrate_from_gpu.md, Multi-Core Task Parallelism > Core Migration Principles",
        _grid_1d,
    ),
    Rule(
        "grid-cores",
        "The grid is at most the cores of the kernel's unit: AI (cube) cores "
        "with tl.dot, vector cores otherwise.",
        f"{_GUIDE}, Multi-Core Task Parallelism > "
        f"Setting the Maximum Number of Hardware Cores; {_MIGRATE}/architecture_difference.md",
        _grid_cores,
    ),
    Rule(
        "ub-footprint",
        "One program's tiles fit the unified buffer, those feeding tl.dot L1; "
        "a double-buffered load counts twice.",
        f"{_OUTLINE}, 约束说明 (ALL: 96KB/192KB); "
        f"{_GUIDE}, Tiling Optimization and How Do I Avoid UB Overflow",
        _ub_footprint,
    ),
    Rule(
        "tl-api",
        "Only documented tl functions, dtypes and tensor methods, none marked "
        "unsupported in every type.",
        f"{_API}/index.md and the op pages, 2.2.1 DataType; {_OUTLINE}, triton op 支持度总览",
        _tl_api,
    ),
    Rule(
        "io-dtype",
        "Every tensor loaded or stored is of a type tl.load/tl.store support.",
        f"{_API}/Memory_Pointer_Ops/tl.load.md, tl.store.md, 2.2.1 DataType",
        _io_dtype,
    ),
    Rule(
        "dot-operands",
        "tl.dot takes int8/float16/bfloat16/float32 operands into a float32 "
        "or int32 accumulator, without max_num_imprecise_acc.",
        f"{_API}/Linear_Algebra_Ops/dot.md, 2.1 参数说明 and 2.3 特殊限制说明",
        _dot_operands,
    ),
    Rule(
        "dtype-args",
        "A dtype given to tl.zeros(_like), tl.full, tl.cast or .to() is in its table.",
        f"{_API}/Creation_Ops/zeros.md, zeros_like.md, full.md, cast.md, 2.2",
        _dtype_args,
    ),
    Rule(
        "call-args",
        "No cache_modifier/eviction_policy/volatile on tl.load/store, no "
        "return_indices without axis on tl.max/min, no shift by a tensor.",
        f"{_API}/Memory_Pointer_Ops/tl.load.md 2.1; Reduction_Ops/max.md, min.md; "
        "Logical_Ops/lshift.md, rshift.md 2.3",
        _call_args,
    ),
    Rule(
        "rank",
        "Every tile has at most 5 dimensions.",
        f"{_API}/Math_Ops/exp.md and the other op pages, 2.2.2 Shape 支持",
        _rank,
    ),
    Rule(
        "arange",
        "Every tl.arange extent is a power of two from 1 to below 1048576.",
        f"{_API}/Creation_Ops/arange.md, 2.3; {_OUTLINE}, 约束说明",
        _arange,
    ),
    Rule(
        "int64-scalar",
        "No int64 tensor is loaded (int64 adds and compares run scalar).",
        f"{_MIGRATE}/performance_guidelines.md, Optimizing Data Types",
        _int64_scalar,
        advisory=True,
    ),
    Rule(
        "structured-divmod",
        "An index // or % a literal in an address or mask has a block "
        "that divides it or is a multiple of it.",
        "docs/en/architecture_design_and_core_features.md, 3.2.2.1 TritonToStructured",
        _structured_divmod,
        advisory=True,
    ),
)


def check_kernel(
    kernel: KernelSource, graph: Graph, spec: HardwareSpec, *, advice: bool = False
) -> list[RuleViolation]:
    """Every rule one kernel breaks (advisory rules too when ``advice``); a text that does
    not parse as a function breaks ``tl-api``."""
    try:
        kc = KernelText(kernel, graph)
    except (SyntaxError, StopIteration) as err:
        return [RuleViolation(kernel.name, "tl-api", f"the text does not parse: {err}")]
    rules = [r for r in RULES if advice or not r.advisory]
    return [RuleViolation(kernel.name, r.id, d) for r in rules for d in r.check(kc, spec)]


def check_ascend(
    program: Program, graph: Graph, spec: HardwareSpec, *, advice: bool = False
) -> list[RuleViolation]:
    """Every rule each kernel of ``program`` breaks on ``spec`` (see :data:`RULES`)."""
    return [v for k in program.kernels for v in check_kernel(k, graph, spec, advice=advice)]
