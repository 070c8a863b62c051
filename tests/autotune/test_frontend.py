"""The PyTorch front end: ``optimize(module, example_inputs)`` and the plan cache. Models are
plain torch (``torch_models``); the oracle is the eager module itself (float32 within 1e-4:
the plans are tuned at precision fp32, so products keep float32 operands)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import torch_models as tm

import autotune
from autotune.codegen.execute import read_manifest
from autotune.codegen.runtime import load_params
from autotune.exceptions import AutotuneError
from autotune.frontend import optimize
from search_space import AutofusionError

FAST = {"trials": 3, "cost": "analytic", "precision": "fp32", "config": {"codegen_check": "off"}}


def _close(got: object, want: object) -> None:
    gots = got if isinstance(got, tuple | list) else (got,)
    wants = want if isinstance(want, tuple | list) else (want,)
    assert type(got) is type(want) and len(gots) == len(wants)
    for g, w in zip(gots, wants, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4 * float(w.abs().max()))


@pytest.mark.parametrize(
    "make", [tm.make_resnet_block, tm.make_llama_layer, tm.make_decode_step, tm.make_vit_block]
)
def test_optimize_reproduces_the_eager_module(make, tmp_path: Path) -> None:
    module, inputs = make()
    fast = optimize(module, inputs, cache_dir=tmp_path, **FAST)
    with torch.no_grad():
        _close(fast(*inputs), module(*inputs))
    # new inputs of the same shapes, through the same kernels
    other = tuple(torch.randn_like(x) if x.is_floating_point() else x for x in inputs)
    with torch.no_grad():
        _close(fast(*other), module(*other))


def test_the_module_keeps_its_weights_and_the_kernels_read_them(tmp_path: Path) -> None:
    module, inputs = tm.make_vit_block()
    fast = optimize(module, inputs, cache_dir=tmp_path, **FAST)
    with torch.no_grad():
        module.fc2.weight.mul_(-1.5)  # in place: the generated module reads the same tensor
        _close(fast(*inputs), module(*inputs))
    stored = load_params(fast.folder / "params.npz")  # the package holds no copy of them
    assert len(stored) < len(fast.package.runner.PARAMS)


def test_a_second_optimize_tunes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module, inputs = tm.make_resnet_block()
    optimize(module, inputs, cache_dir=tmp_path, **FAST)
    assert len(list((tmp_path / "plans").glob("*.json"))) == 1

    def no_tuning(*args: object, **kwargs: object) -> None:
        raise AssertionError("tuned on a cache hit")

    monkeypatch.setattr("autotune.api.tune", no_tuning)
    again = optimize(module, inputs, cache_dir=tmp_path, **FAST)
    with torch.no_grad():
        _close(again(*inputs), module(*inputs))
    with pytest.raises(AssertionError, match="tuned on a cache hit"):  # new shapes: a miss
        optimize(module, (torch.randn(1, 8, 5, 5),), cache_dir=tmp_path, **FAST)
    with pytest.raises(AssertionError, match="tuned on a cache hit"):  # another target
        optimize(module, inputs, cache_dir=tmp_path, **{**FAST, "target": "ascend910"})


def test_the_cache_moves_with_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "env"))
    module, inputs = tm.make_vit_block()
    optimize(module, inputs, **FAST)
    assert len(list((tmp_path / "env" / "plans").glob("*.json"))) == 1


def test_a_damaged_cache_entry_is_reported_and_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    module, inputs = tm.make_resnet_block()
    optimize(module, inputs, cache_dir=tmp_path, **FAST)
    (entry,) = (tmp_path / "plans").glob("*.json")
    entry.write_text(entry.read_text()[:40])  # a write cut short
    with caplog.at_level(logging.WARNING):
        fast = optimize(module, inputs, cache_dir=tmp_path, **FAST)
    assert "damaged plan cache entry" in caplog.text
    with torch.no_grad():
        _close(fast(*inputs), module(*inputs))
    assert entry.read_text().rstrip().endswith("}")  # replaced by the new study's plan


class _Branchy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent control flow
            return x * 2
        return x - 1


class _Svd(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.svd(x)[1]


class _Pair(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"y": x + 1}


@pytest.mark.parametrize(
    ("module", "inputs", "says"),
    [
        (_Branchy(), (torch.randn(3, 3),), "data-dependent control flow (Converting a tensor"),
        (_Svd(), (torch.randn(3, 3),), "linalg_svd"),
        (_Pair(), (torch.randn(3, 3),), "returns a dict"),
        (_Pair(), (torch.randn(3, 3), torch.randn(3)), "do not match _Pair.forward"),
        (_Pair(), (3.0,), "example input 0 is a float"),
        (_Pair(), (torch.randn(3, 3, device="meta"),), "meta device"),
    ],
)
def test_bad_modules_and_inputs_are_one_line_and_nothing_is_cached(
    module: torch.nn.Module, inputs: tuple, says: str, tmp_path: Path
) -> None:
    with pytest.raises(AutotuneError) as info:
        optimize(module, inputs, cache_dir=tmp_path, **FAST)
    assert says in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "plans").exists()


def test_a_target_or_config_that_does_not_load_is_one_line(tmp_path: Path) -> None:
    module, inputs = tm.make_vit_block()
    for bad in ({"target": str(tmp_path / "missing.toml")}, {"config": {"fusion_level": 9}},
                {"optimization_level": 5}):  # fmt: skip
        with pytest.raises(AutofusionError) as info:
            optimize(module, inputs, cache_dir=tmp_path, **{**FAST, **bad})
        assert "\n" not in str(info.value)
    assert not (tmp_path / "plans").exists()


def test_optimization_level_zero_fuses_nothing(tmp_path: Path) -> None:
    module, inputs = tm.make_vit_block()
    fast = optimize(module, inputs, cache_dir=tmp_path, optimization_level=0, **FAST)
    (entry,) = (tmp_path / "plans").glob("*.json")
    groups = autotune.load_plan(entry).record.groups
    assert groups and all(len(g.ops) == 1 for g in groups)
    with torch.no_grad():
        _close(fast(*inputs), module(*inputs))


def test_autotune_optimize_is_the_front_ends() -> None:
    assert autotune.optimize is optimize


@pytest.mark.parametrize("make", [tm.make_llama_layer, tm.make_vit_block])
def test_exported_blocks_generate_every_group_as_one_kernel(make, tmp_path: Path) -> None:
    """The dynamo exporter's forms (Q, K and V sliced and squeezed out of one projection; a
    slice of K beside its projection) are stored from the tile, not split into two kernels."""
    module, inputs = make()
    fast = optimize(module, inputs, cache_dir=tmp_path, **FAST)
    groups = read_manifest(fast.folder)["groups"]
    assert all(len(g["kernels"]) == 1 and "unfused" not in g for g in groups), groups
