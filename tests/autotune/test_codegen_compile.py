"""Generated kernels compile for a CUDA target with no GPU (sm_80, ``compile_check``) and keep
triton-ascend's documented constraints (``ascend_rules``); hand-made kernels show each check
fires.

Compiling is the slow part (LLVM and ptxas on two cores): each kernel of a distinct code shape
(its body but for shapes and strides, its launch, its pointer types) is compiled once, and the
cube kernels whose ``tl.dot`` operand tiles pass ``HEAVY`` bytes are left out (llama3-8b's
128 x 256 x 256 blocks: 7-18 s each, spilling at 255 registers; bert-base and resnet50 take
the same template paths with smaller blocks; experiments/bench_codegen_compile.py compiles
them), which keeps this file near a minute on two cores.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from codegen_helpers import single_group
from conftest import i64, vi
from onnx import helper, numpy_helper

from autotune.codegen.ascend_rules import RULES, check_ascend, check_kernel
from autotune.codegen.compile_check import CompileResult, code_shape, compile_package
from autotune.codegen.generate import generate
from autotune.codegen.kernel_text import footprint
from autotune.codegen.program import Program, Step
from autotune.codegen.templates.common import KernelSource, Launch, Scratch
from costmodel.spec import Target, load_target
from search_space import load_graph
from search_space.ir import Graph, KernelConfig
from search_space.zoo.catalog import build

CASES = [
    ("bert-base", "none"),
    ("bert-base", "greedy"),
    ("bert-base", "max"),  # its norms run in the matmul's kernel (matmul_rows)
    ("llama3-8b", "none"),
    ("llama3-8b", "greedy"),
    ("resnet50", "greedy"),
]
HEAVY = 256 * 1024  # bytes of tl.dot operand tiles (kernel_text.footprint(...).cube)


@dataclass(frozen=True)
class Package:
    folder: Path
    graph: Graph
    program: Program


@pytest.fixture(scope="module")
def target() -> Target:
    return load_target("ascend910b", (), "auto")


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory, target: Target) -> dict[str, Package]:
    root = tmp_path_factory.mktemp("codegen-compile")
    out = {}
    for model_name in dict.fromkeys(m for m, _ in CASES):
        layers = {} if model_name == "resnet50" else {"layers": 1}
        model = build(model_name, weights="random", scale=0.1, **layers)
        graph = load_graph(model)
        for plan in [p for m, p in CASES if m == model_name]:
            gen = generate(model, graph, plan, target, model_name=model_name)
            folder = gen.write(root / f"{model_name}-{plan}")
            out[f"{model_name}/{plan}"] = Package(folder, graph, gen.program)
    return out


def _light(packages: dict[str, Package]) -> Iterator[tuple[Package, list[KernelSource]]]:
    """Per package, its kernels of a code shape not seen before (the same body but for
    shapes and strides, the same launch and pointer types), less the heavy cube kernels.
    llama3-8b's unfused kernels are bert-base's single ops again: only their rules are
    checked."""
    seen: set[tuple[object, ...]] = set()
    for case, pkg in packages.items():
        if case == "llama3-8b/none":
            continue
        light = []
        for k in pkg.program.kernels:
            key = code_shape(k, pkg.graph)
            if key not in seen and footprint(k, pkg.graph).cube <= HEAVY:
                light.append(k)
            seen.add(key)
        yield pkg, light


def _compile(pkg: Package, kernels: list[KernelSource]) -> list[CompileResult]:
    sub = Program(pkg.graph, tuple(Step(0, kernel=k) for k in kernels), ())
    return compile_package(pkg.folder, pkg.graph, sub)


@pytest.fixture(scope="module")
def compiled(packages: dict[str, Package]) -> list[CompileResult]:
    return [r for pkg, light in _light(packages) for r in _compile(pkg, light)]


def test_generated_kernels_compile_for_sm80(compiled: list[CompileResult]) -> None:
    failures = [f"{r.kernel}: {r.error}" for r in compiled if not r.ok]
    assert not failures, "kernels that do not compile:\n" + "\n".join(failures)
    assert len(compiled) >= 60  # each code shape of the packages compiled once
    assert all(r.ptx_lines > 0 and r.registers > 0 for r in compiled)


@pytest.mark.parametrize("case", [f"{m}/{p}" for m, p in CASES])
def test_generated_kernels_keep_the_ascend_rules(
    case: str, packages: dict[str, Package], target: Target
) -> None:
    pkg = packages[case]
    found = check_ascend(pkg.program, pkg.graph, target.spec)
    assert not found, "\n".join(map(str, found))


# Hand-made kernels: one elementwise add and one tl.dot, over scratch buffers (their types
# are the kernel's own, so no graph tensor is needed).
ADD = """
@triton.jit
def add_kernel(in0, in1, out0, NPROG: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for tile in range(pid, 64, NPROG):
        x = tile * BLOCK + tl.arange(0, BLOCK)
        a = tl.load(in0 + x, mask=x < 4096, other=0)
        b = tl.load(in1 + x, mask=x < 4096, other=0)
        tl.store(out0 + x, (a + b).to(tl.float32), mask=x < 4096)
"""
DOT = """
@triton.jit
def dot_kernel(in0, in1, out0, NPROG: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    m = tl.arange(0, BLOCK_M)[:, None]
    n = tl.arange(0, BLOCK_N)[None, :]
    k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    a = tl.load(in0 + m * BLOCK_K + k[None, :])
    b = tl.load(in1 + k[:, None] * BLOCK_N + n)
    acc = tl.dot(a, b, acc)
    tl.store(out0 + m * BLOCK_N + n, acc)
"""


def hand_made(text: str, grid: int, dtype: str = "float32", **consts: int) -> KernelSource:
    name = text.split("def ")[1].split("(")[0]
    scratch = tuple(Scratch(t, (4096,), dtype) for t in ("a", "b", "c"))
    launch = Launch(grid, (("NPROG", grid), *consts.items()), num_stages=2)
    return KernelSource(name, textwrap.dedent(text).strip(), (), ("a", "b"), ("c",), launch,
                        "test", scratch)  # fmt: skip


def rules_broken(kernel: KernelSource, graph: Graph, target: Target) -> set[str]:
    return {v.rule for v in check_kernel(kernel, graph, target.spec)}


def test_hand_made_kernels_keep_the_rules(packages: dict[str, Package], target: Target) -> None:
    graph = packages["bert-base/none"].graph
    assert rules_broken(hand_made(ADD, 48, BLOCK=1024), graph, target) == set()
    dot = hand_made(DOT, 24, "float16", BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    assert rules_broken(dot, graph, target) == set()


def test_a_grid_over_the_cores_of_the_unit_breaks_grid_cores(
    packages: dict[str, Package], target: Target
) -> None:
    graph, spec = packages["bert-base/none"].graph, target.spec
    over_vector = hand_made(ADD, spec.vector_cores + 1, BLOCK=1024)
    assert rules_broken(over_vector, graph, target) == {"grid-cores"}
    # a tl.dot kernel runs on the cube cores: fewer than the vector cores
    over_cube = hand_made(DOT, spec.cube_cores + 1, "float16", BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    assert rules_broken(over_cube, graph, target) == {"grid-cores"}


def test_blocks_over_the_unified_buffer_break_ub_footprint(
    packages: dict[str, Package], target: Target
) -> None:
    graph = packages["bert-base/none"].graph
    big = hand_made(ADD, 48, BLOCK=1 << 15)  # two float32 loads, double-buffered: 512 KiB
    assert footprint(big, graph).vector == 2 * 2 * 4 * (1 << 15)
    found = check_kernel(big, graph, target.spec)
    assert [v.rule for v in found] == ["ub-footprint"]
    assert "unified buffer" in found[0].detail
    operands = hand_made(DOT, 24, "float16", BLOCK_M=256, BLOCK_N=256, BLOCK_K=512)
    assert any("L1" in v.detail for v in check_kernel(operands, graph, target.spec))


def test_an_operand_converted_for_the_dot_counts_in_l1_in_its_converted_format(
    packages: dict[str, Package],
) -> None:
    graph = packages["bert-base/none"].graph
    blocks = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}
    as_loaded = footprint(hand_made(DOT, 24, "float32", **blocks), graph)
    half = DOT.replace("tl.dot(a, b, acc)", "tl.dot(a.to(tl.float16), b.to(tl.float16), acc)")
    converted = footprint(hand_made(half, 24, "float32", **blocks), graph)
    assert as_loaded.cube == 2 * 2 * 4 * 64 * 64  # two float32 operands, double-buffered
    assert converted.cube == as_loaded.cube // 2
    assert converted.vector == as_loaded.vector  # the accumulator stays float32


def test_the_phases_a_barrier_separates_are_not_live_at_once(
    packages: dict[str, Package],
) -> None:
    graph = packages["bert-base/none"].graph
    one_phase = footprint(hand_made(ADD, 48, BLOCK=1024), graph)
    phased = ADD.replace("        b = tl.load", "        tl.debug_barrier()\n        b = tl.load")
    two_phases = footprint(hand_made(phased, 48, BLOCK=1024), graph)
    assert one_phase.vector == 2 * 2 * 4 * 1024  # a and b, double-buffered
    assert two_phases.vector == one_phase.vector // 2  # a, then b


BRANCHES = """
@triton.jit
def branch_kernel(in0, in1, out0, NPROG: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for tile in range(pid, 64, NPROG):
        x = tile * BLOCK + tl.arange(0, BLOCK)
        if tile < 32:
            a = tl.load(in0 + x, mask=x < 4096, other=0)
            tl.store(out0 + x, a, mask=x < 4096)
        else:
            b = tl.load(in1 + x, mask=x < 4096, other=0)
            tl.store(out0 + x, b, mask=x < 4096)
"""


def test_the_branches_of_an_if_are_not_live_at_once(packages: dict[str, Package]) -> None:
    graph = packages["bert-base/none"].graph
    assert footprint(hand_made(BRANCHES, 48, BLOCK=1024), graph).vector == 2 * 4 * 1024


UNSUPPORTED = {
    "tl.math.tanh(a + b)": "tl.math",
    "tl.sort(a + b)": "tl.sort",  # the overview marks it unsupported in every type
    "tl.inline_asm_elementwise('mov.b32 $0, $1;', '=r,r', [a], dtype=tl.float32, "
    "is_pure=True, pack=1)": "tl.inline_asm_elementwise",
    "(a + b).to(tl.float64)": "tl.float64",
}


@pytest.mark.parametrize("expr", list(UNSUPPORTED))
def test_an_unsupported_tl_function_breaks_tl_api(
    expr: str, packages: dict[str, Package], target: Target
) -> None:
    text = ADD.replace("(a + b).to(tl.float32)", expr)
    found = check_kernel(hand_made(text, 48, BLOCK=1024), packages["bert-base/none"].graph,
                         target.spec)  # fmt: skip
    assert "tl-api" in {v.rule for v in found}
    assert any(UNSUPPORTED[expr] in v.detail for v in found)


BREAKS = {  # (text edit, kernel dtype) -> the rule it breaks
    ("tl.program_id(0)", "tl.program_id(1)"): "grid-1d",
    ("tl.arange(0, BLOCK)", "tl.arange(0, 100)"): "arange",
    ("other=0)", "other=0, eviction_policy='evict_last')"): "call-args",
    ("(a + b).to(tl.float32)", "(a + b).to(tl.uint32)"): "dtype-args",
    ("x < 4096, other=0)\n", "x < 4096, other=0)[:, None, None, None, None, None]\n"): "rank",
}


@pytest.mark.parametrize("edit", list(BREAKS), ids=list(BREAKS.values()))
def test_each_rule_fires(
    edit: tuple[str, str], packages: dict[str, Package], target: Target
) -> None:
    text = ADD.replace(*edit)
    assert text != ADD
    found = rules_broken(hand_made(text, 48, BLOCK=1024), packages["bert-base/none"].graph, target)
    assert BREAKS[edit] in found


def test_dtype_rules_read_the_tensor_types(packages: dict[str, Package], target: Target) -> None:
    graph = packages["bert-base/none"].graph
    assert rules_broken(hand_made(ADD, 48, "float64", BLOCK=1024), graph, target) >= {"io-dtype"}
    half_acc = DOT.replace("dtype=tl.float32", "dtype=tl.float16")
    broken = rules_broken(hand_made(half_acc, 24, "float16", BLOCK_M=32, BLOCK_N=32,
                                    BLOCK_K=32), graph, target)  # fmt: skip
    assert "dot-operands" in broken


def test_every_rule_names_its_source_and_advice_is_opt_in(
    packages: dict[str, Package], target: Target
) -> None:
    assert len({r.id for r in RULES}) == len(RULES)
    assert all(r.source.startswith("docs/") and r.text for r in RULES)
    pkg = packages["bert-base/none"]
    advice = check_ascend(pkg.program, pkg.graph, target.spec, advice=True)
    advisory = {r.id for r in RULES if r.advisory}
    assert {v.rule for v in advice} & advisory  # int64 token ids, unstructured // and %
    assert not {v.rule for v in check_ascend(pkg.program, pkg.graph, target.spec)} & advisory


def write_kernels(folder: Path, *texts: str) -> Path:
    folder.mkdir()
    head = "import triton\nimport triton.language as tl\n\n\n"
    (folder / "kernels.py").write_text(head + "\n\n".join(textwrap.dedent(t) for t in texts))
    return folder


def test_a_kernel_that_does_not_compile_is_a_result(
    tmp_path: Path, packages: dict[str, Package]
) -> None:
    graph = packages["bert-base/none"].graph
    good = hand_made(ADD, 48, BLOCK=1024)
    bad = hand_made(ADD.replace("add_kernel", "bad_kernel"), 48, BLOCK=100)  # not a power of 2
    folder = write_kernels(tmp_path / "pkg", ADD, ADD.replace("add_kernel", "bad_kernel"))
    program = Program(graph, (Step(0, kernel=good), Step(0, kernel=bad)), ())
    ok, failed = compile_package(folder, graph, program)
    assert ok.ok and ok.ptx_lines > 0 and ok.registers > 0
    assert not failed.ok and failed.kernel == "bad_kernel"
    assert "power of 2" in failed.error and "\n" not in failed.error


def test_a_package_that_does_not_import_fails_every_kernel(
    tmp_path: Path, packages: dict[str, Package]
) -> None:
    graph = packages["bert-base/none"].graph
    folder = write_kernels(tmp_path / "pkg", ADD, "def broken(:\n")
    program = Program(graph, (Step(0, kernel=hand_made(ADD, 48, BLOCK=1024)),), ())
    (result,) = compile_package(folder, graph, program)
    assert not result.ok and result.error.startswith("kernels.py does not import")


def test_compiles_after_the_interpreter_ran_and_restores_the_env(
    tmp_path: Path, packages: dict[str, Package], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    import torch

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    folder = write_kernels(tmp_path / "pkg", ADD)
    spec = importlib.util.spec_from_file_location("interpreted_add", folder / "kernels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    a, b, c = torch.ones(4096), torch.full((4096,), 2.0), torch.empty(4096)
    module.add_kernel[(4,)](a, b, c, NPROG=4, BLOCK=1024)  # on the CPU interpreter
    assert torch.equal(c, torch.full((4096,), 3.0))
    graph = packages["bert-base/none"].graph
    program = Program(graph, (Step(0, kernel=hand_made(ADD, 48, BLOCK=1024)),), ())
    (result,) = compile_package(folder, graph, program)
    assert result.ok, result.error
    assert os.environ["TRITON_INTERPRET"] == "1" and "TRITON_CACHE_DIR" not in os.environ


def _compile_alone(model, config, tmp_path: Path, template: str) -> None:
    """The whole graph as one group under ``config``: one kernel of ``template``, compiled."""
    from autotune.codegen import build_program
    from autotune.codegen.package import write_package

    graph = load_graph(model)
    program = build_program(graph, single_group(graph), [config])
    assert [k.template for k in program.kernels] == [template] and not program.unfused
    folder = write_package(tmp_path / "pkg", model, program, {"model": "test"})
    (result,) = compile_package(folder, graph, program)
    assert result.ok, result.error


def test_products_of_different_widths_compile_with_their_branches(tmp_path: Path) -> None:
    """The if/elif over the products' column spans (matmul_segments) is compiled, not only
    interpreted: Triton's front end types what each branch defines."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"], name=f"proj{i}")
             for i in range(3)]  # fmt: skip
    widths = [64, 32, 32]  # grouped-query Q, K, V
    inits = [numpy_helper.from_array(rng.normal(size=[48, n]).astype(np.float32), f"w{i}")
             for i, n in enumerate(widths)]  # fmt: skip
    model = helper.make_model(helper.make_graph(
        nodes, "g", [vi("x", [8, 48])], [vi(f"y{i}", [8, n]) for i, n in enumerate(widths)],
        inits), opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
    config = KernelConfig(block_dim=4, base_m=16, base_n=32, base_k=16, m=16, n=32, k=16)
    _compile_alone(model, config, tmp_path, "matmul")


def test_a_convolution_and_its_global_pool_compile_as_one_kernel(tmp_path: Path) -> None:
    """The running per-column statistic over the row tiles (matmul_cols) is compiled: the
    loop-carried [1, BLOCK_N] accumulator and the reduction rows stored after it."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool")]  # fmt: skip
    w = numpy_helper.from_array(rng.normal(size=[32, 8, 3, 3]).astype(np.float32), "w")
    model = helper.make_model(helper.make_graph(
        nodes, "g", [vi("x", [2, 8, 7, 7])], [vi("y", [2, 32, 1, 1])], [w]),
        opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
    config = KernelConfig(block_dim=4, base_m=16, base_n=16, base_k=32, m=16, n=16, k=32)
    _compile_alone(model, config, tmp_path, "matmul_cols")


def test_a_squeeze_excitation_gate_compiles_as_one_kernel(tmp_path: Path) -> None:
    """The spreading phase (matmul_broadcast) is compiled: its loop over the tile's rows with
    an `if` per row, its own lanes and mask beside the matmul's."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["s", "w"], ["c"], name="fc2"),
             helper.make_node("HardSigmoid", ["c"], ["g"], name="gate"),
             helper.make_node("Mul", ["g", "fmap"], ["y"], name="scale")]  # fmt: skip
    w = numpy_helper.from_array(rng.normal(size=[32, 8, 1, 1]).astype(np.float32), "w")
    model = helper.make_model(helper.make_graph(
        nodes, "g", [vi("s", [2, 8, 1, 1]), vi("fmap", [2, 32, 7, 7])],
        [vi("y", [2, 32, 7, 7])], [w]), opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
    config = KernelConfig(block_dim=4, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)
    _compile_alone(model, config, tmp_path, "matmul_broadcast")


def test_a_projection_and_its_rotary_embedding_compile_as_paired_tiles(tmp_path: Path) -> None:
    """The paired tile (templates.rotary) is compiled: two accumulators of half the tile's
    width, and ``n`` rebound between the two halves' epilogues."""
    rng = np.random.default_rng(0)
    ints = [i64(n, v) for n, v in (("shape", [1, 8, 2, 32]), ("zero", [0]), ("half", [16]),
                                   ("end", [32]), ("last", [-1]))]  # fmt: skip
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"], name="proj"),
             helper.make_node("Reshape", ["p", "shape"], ["h"], name="heads"),
             helper.make_node("Slice", ["h", "zero", "half", "last"], ["x1"], name="s1"),
             helper.make_node("Slice", ["h", "half", "end", "last"], ["x2"], name="s2"),
             helper.make_node("Neg", ["x2"], ["n2"], name="neg"),
             helper.make_node("Concat", ["n2", "x1"], ["rot"], name="cat", axis=-1),
             helper.make_node("Mul", ["h", "cos"], ["a"], name="mcos"),
             helper.make_node("Mul", ["rot", "sin"], ["b"], name="msin"),
             helper.make_node("Add", ["a", "b"], ["y"], name="rope")]  # fmt: skip
    tables = [numpy_helper.from_array(rng.normal(size=[8, 1, 32]).astype(np.float32), n)
              for n in ("cos", "sin")]  # fmt: skip
    w = numpy_helper.from_array(rng.normal(size=[48, 64]).astype(np.float32), "w")
    model = helper.make_model(helper.make_graph(
        nodes, "g", [vi("x", [1, 8, 48])], [vi("y", [1, 8, 2, 32])], [w, *tables, *ints]),
        opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
    config = KernelConfig(block_dim=4, base_m=16, base_n=32, base_k=16, m=16, n=32, k=16)
    _compile_alone(model, config, tmp_path, "matmul")


def test_a_convolution_and_its_max_pool_compile_as_one_kernel(tmp_path: Path) -> None:
    """The banded kernel (matmul_window) is compiled: a K loop over a band's conv rows whose
    count is known only at run time, the barrier, and the window's loads after it."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1])]  # fmt: skip
    w = numpy_helper.from_array(rng.normal(size=[16, 8, 3, 3]).astype(np.float32), "w")
    model = helper.make_model(helper.make_graph(
        nodes, "g", [vi("x", [2, 8, 12, 12])], [vi("y", [2, 16, 6, 6])], [w]),
        opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
    config = KernelConfig(block_dim=4, base_m=16, base_n=16, base_k=32, m=16, n=16, k=32)
    _compile_alone(model, config, tmp_path, "matmul_window")
