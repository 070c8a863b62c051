"""The PyTorch front end on the test suite's models: what ``optimize()`` costs the first time
(export, study, kernels) and on a plan-cache hit, and how far its outputs are from eager.

For each model of ``tests/autotune/torch_models.py`` (a ResNet block, a Llama layer, a decode
step over a static cache, a ViT block): the wall seconds of the first ``optimize()`` into a
fresh cache (``--trials`` trials, analytic cost, precision fp32 so the oracle is exact), of a
second one (the cache hit: export and kernel generation only), which exporter ran, the
kernels and groups of the plan, and the largest error of the generated module against the
eager module relative to the output's largest magnitude. Kernels run on npu or cuda when
present, else under Triton's CPU interpreter (so the run time is not reported: it is not the
device's).

    cd experiments && ../.venv/bin/python bench_frontend.py
    cd experiments && ../.venv/bin/python bench_frontend.py --trials 20

Writes experiments/results/frontend.csv.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _table import RESULTS, emit  # experiments/_table.py (scripts run from this folder)

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "autotune"))  # the models

MODELS = ("make_resnet_block", "make_llama_layer", "make_decode_step", "make_vit_block")


def bench(name: str, trials: int, cache: Path) -> dict[str, Any]:
    import torch
    import torch_models

    import autotune
    from autotune.codegen.execute import read_manifest

    module, inputs = getattr(torch_models, name)()
    opts = {"trials": trials, "cost": "analytic", "precision": "fp32", "cache_dir": cache}
    t0 = time.perf_counter()
    fast = autotune.optimize(module, inputs, **opts)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    fast = autotune.optimize(module, inputs, **opts)
    again = time.perf_counter() - t0
    with torch.no_grad():
        got, want = fast(*inputs), module(*inputs)
    gots = got if isinstance(got, tuple) else (got,)
    wants = want if isinstance(want, tuple) else (want,)
    err = max(float((g - w).abs().max() / w.abs().max()) for g, w in zip(gots, wants, strict=True))
    groups = read_manifest(fast.folder)["groups"]
    return {
        "model": name.removeprefix("make_"),
        "exporter": fast.exporter,
        "groups": len(groups),
        "kernels": sum(len(g["kernels"]) for g in groups),
        "first_s": round(first, 1),
        "cache_hit_s": round(again, 2),
        "max_rel_err": f"{err:.1e}",
        "device": fast.device,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--csv", default=str(RESULTS / "frontend.csv"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="autotune-cache-") as tmp:
        rows = [bench(name, args.trials, Path(tmp) / name) for name in MODELS]
    emit(rows, args.csv)


if __name__ == "__main__":
    main()
