"""``torch.compile(module, backend="autotune")``: found through its entry point, each captured
graph runs its generated kernels, a graph break leaves the code between the graphs to eager
PyTorch, and new shapes tune (or hit the plan cache) for those shapes. The oracle is the
eager module (float32 within 1e-4, plans at precision fp32)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch_models as tm
from torch._dynamo.exc import BackendCompilerFailed

FAST = {"trials": 3, "cost": "analytic", "precision": "fp32", "config": {"codegen_check": "off"}}


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()  # every test compiles from nothing


def _compiled(module: torch.nn.Module, cache: Path, **more: object) -> torch.nn.Module:
    options = {**FAST, "cache_dir": str(cache), **more}
    return torch.compile(module, backend="autotune", options=options)  # type: ignore[return-value]


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))


def test_the_backend_runs_a_llama_layer_as_the_eager_module(tmp_path: Path) -> None:
    module, inputs = tm.make_llama_layer()
    fast = _compiled(module, tmp_path)
    with torch.no_grad():
        _close(fast(*inputs), module(*inputs))
    assert len(list((tmp_path / "plans").glob("*.json"))) == 1


class _Branchy(torch.nn.Module):
    """Data-dependent control flow between two linear layers: a graph break."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        if h.sum() > 0:
            h = h * 2
        return self.b(h)


def test_a_graph_break_leaves_the_branch_to_eager_and_both_sides_are_right(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    module = _Branchy().eval()
    fast = _compiled(module, tmp_path)
    x = torch.randn(4, 16)
    with torch.no_grad():
        for sign in (1.0, -1.0):  # both branches
            module.a.bias.fill_(5.0 * sign)
            _close(fast(x), module(x))
    assert len(list((tmp_path / "plans").glob("*.json"))) >= 2  # a graph each side


def test_new_shapes_tune_for_those_shapes_and_old_ones_reuse_their_kernels(
    tmp_path: Path,
) -> None:
    module, _ = tm.make_vit_block()
    fast = _compiled(module, tmp_path)
    with torch.no_grad():
        for tokens in (5, 7, 5, 9):
            y = torch.randn(1, tokens, 32)
            _close(fast(y), module(y))
    assert len(list((tmp_path / "plans").glob("*.json"))) == 3  # one plan per shape


def test_an_unknown_option_names_itself(tmp_path: Path) -> None:
    module, inputs = tm.make_vit_block()
    fast = _compiled(module, tmp_path, trails=3)
    with pytest.raises(BackendCompilerFailed, match="unknown autotune backend option 'trails'"):
        fast(*inputs)
