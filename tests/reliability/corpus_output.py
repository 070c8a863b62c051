"""The corpus's files for the output and hostile-name cases (:mod:`cases_output`): files of
every kind an output must not replace (an Optuna journal, a TOML config, a Parquet table, an
HTML page), and a model whose file, op and tensor names carry terminal escape sequences.

Built by code like the rest of the corpus (:mod:`corpus`), which calls :func:`build_output`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["EVIL", "MARKUP", "build_output", "hostile_model"]

# what a hostile name carries: a title change (OSC), clear screen, a one-byte CSI (C1), a
# carriage return and a backspace that would rewrite the line, a bell
EVIL = "\x1b]0;pwned\x07\x1b[2J\x9b31m\r\x08\x7f"
# and what an op or tensor name may carry besides: HTML and rich's markup
MARKUP = "<script>alert(1)</script>&[/][bold]"


def hostile_model() -> onnx.ModelProto:
    """The corpus's MLP (x[4, 64] -> MatMul -> Add -> Relu -> y) with every op, tensor and
    weight named with escape sequences in it."""
    n = {k: f"{k}{EVIL}{MARKUP}" for k in ("x", "w", "b", "h", "z", "y", "mm", "add", "relu")}
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", [n["x"], n["w"]], [n["h"]], name=n["mm"]),
        helper.make_node("Add", [n["h"], n["b"]], [n["z"]], name=n["add"]),
        helper.make_node("Relu", [n["z"]], [n["y"]], name=n["relu"]),
    ]
    graph = helper.make_graph(
        nodes,
        f"g{EVIL}",
        [helper.make_tensor_value_info(n["x"], TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info(n["y"], TensorProto.FLOAT, [4, 64])],
        [
            numpy_helper.from_array(rng.standard_normal((64, 64)).astype("f4"), n["w"]),
            numpy_helper.from_array(rng.standard_normal(64).astype("f4"), n["b"]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _journal(path: Path) -> None:
    """An Optuna journal holding one study of one trial (a study's storage)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(path)))
    study = optuna.create_study(study_name="kept", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)


def build_output(d: Path) -> dict[str, Path]:
    """Write the output corpus into ``d``: name -> path."""
    import pandas as pd
    from corpus import valid_model  # here: corpus imports this module

    out = {
        "hostile": d / f"evil{EVIL}.onnx",
        "hostile_missing": d / f"gone{EVIL}.onnx",
        # a name's bytes that are not UTF-8 (a raw 0x9b is a one-byte CSI to some terminals)
        "hostile_bytes": d / os.fsdecode(b"bytes\x9b[2J\xff.onnx"),
        "journal": d / "kept.journal",
        "config_toml": d / "autotune.toml",
        "parquet": d / "rows.parquet",
        "html_page": d / "page.html",
        "fused_model": d / "fused_before.onnx",
        "full_device": d / "full",
    }
    out["hostile"].write_bytes(hostile_model().SerializeToString())
    out["hostile_bytes"].write_bytes(hostile_model().SerializeToString())
    if not out["journal"].exists():
        _journal(out["journal"])
    out["config_toml"].write_text('[policy]\npreset = "transformer"\n')
    pd.DataFrame({"a": [1, 2]}).to_parquet(out["parquet"], index=False)
    out["html_page"].write_text("<!DOCTYPE html><html><body>an older page</body></html>\n")
    fused = valid_model()
    fused.producer_name = "autotune.apply"  # what `apply` writes, told by its content
    out["fused_model"].write_bytes(fused.SerializeToString())
    _device(out["full_device"])
    return out


def _device(path: Path) -> None:
    """A copy of /dev/full (a character device: every write fails, no space left), or where
    a device cannot be made (not root), a named pipe: neither is a regular file."""
    if path.exists():
        return
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except PermissionError:
        os.mkfifo(path)
