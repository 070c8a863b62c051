"""A study's parameters read as what they decide (role, op types and scope), in Optuna's own
tables; a study made before these names cannot be resumed by mistake: one line says --new."""

from __future__ import annotations

from pathlib import Path

import optuna
from quick_study import run, tune_args

from autotune.tuner.study import open_storage


def _study(folder: Path) -> optuna.Study:
    storage, _ = open_storage(str(folder / "s.journal"))
    names = [n for n in optuna.get_all_study_names(storage) if not n.endswith(":measured")]
    return optuna.load_study(study_name=names[0], storage=storage)


def test_the_trials_table_names_role_and_scope(tmp_path: Path) -> None:
    result = run(*tune_args(tmp_path, trials=4), "--strategy", "joint")
    assert result.exit_code == 0, result.output
    columns = list(_study(tmp_path).trials_dataframe().columns)
    fuse = [c for c in columns if c.startswith("params_fuse/")]
    dense = [c for c in fuse if "epilogue MatMul>Add: encoder/layer.0/intermediate/dense" in c]
    assert len(dense) == 1, fuse
    tiles = [c.split(" ", 1) for c in columns if c.startswith("params_config/")]
    kinds = ("single", "cube_epilogue", "row_reduce", "attention", "horizontal_cube")
    assert tiles and any(rest.startswith(kinds) for _, rest in tiles), tiles
    assert "cube_epilogue MatMul+Add" in {rest for _, rest in tiles}


def test_a_study_of_the_old_names_asks_for_a_new_one(tmp_path: Path) -> None:
    """A study whose trials were named ``fuse/<key>`` (before readable names) would replay as
    other plans: resuming it fails with one line that names the fix; --new starts afresh."""
    assert run(*tune_args(tmp_path, trials=1)).exit_code == 0
    name = _study(tmp_path).study_name
    old = tmp_path / "old"
    old.mkdir()
    storage, _ = open_storage(str(old / "s.journal"))
    study = optuna.create_study(study_name=name, storage=storage)
    study.optimize(
        lambda t: float(t.suggest_categorical("fuse/Add>Transpose:fc4e81d4", [0, 1])), 1
    )
    failed = run(*tune_args(old, trials=2))
    assert failed.exit_code == 1
    errors = [line for line in failed.output.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "fuse/Add>Transpose:fc4e81d4" in errors[0], failed.output
    assert "older autotune" in errors[0] and "--new" in errors[0]
    assert "Traceback" not in failed.output
    fresh = run(*tune_args(old, trials=2), "--new")
    assert fresh.exit_code == 0, fresh.output
    assert f"{name}-2" in optuna.get_all_study_names(storage)


def test_candidates_are_named_as_kernels_are() -> None:
    """``autotune candidates`` names each candidate group as a plan names its kernel: unique,
    the scope its ops share first, and its op types alone in an unnamed model."""
    import onnx

    from autotune.candidates import analyse_candidates
    from costmodel.spec import load_target
    from search_space import load_graph
    from search_space.zoo import build

    model = build("bert-base", weights="inputs", layers=1, scale=0.25)
    for blank in (False, True):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        for node in copy.graph.node:
            node.name = "" if blank else node.name
        graph = load_graph(copy)
        rows = analyse_candidates(graph, load_target("ascend910b"))["candidates"]
        names = [r["name"] for r in rows]
        assert rows and len(set(names)) == len(names)
        for r in rows:
            types = {graph.op(o).op_type for o in r["ops"]}
            words = r["name"].split(": ")[-1].split("#")[0].removesuffix("+...").split("+")
            shared = not blank and len({o.split("/")[1] for o in r["ops"]}) == 1
            assert set(words) <= types and (": " in r["name"]) == shared, r
