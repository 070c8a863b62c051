"""How much longer CANN's own op kernels run than kernels written for the same shape: the
measurement behind ``library_setup_cycles`` (docs/cost-model.md, "Library kernels").

Some public sources time the same op at the same shapes twice, as CANN's library kernel (the
torch_npu column) and as a kernel written for the shape (Ascend C, PyAsc, TileLang), both by
msprof task duration on one chip. Their difference at small sizes is a per-kernel prologue the
library kernel pays (a shape-generic kernel reads its tiling and derives offsets and tails at
run time) and a kernel generated for one shape does not. Each pair here is one run (a source
file at one commit: a column re-timed under another CANN version is not paired across), op,
dtype and data shape (the first tensor: side tables such as RoPE's cos and sin are laid out
differently by different kernels) with both columns (the median of each when a column was
timed more than once), on device rows of vector kernels (cube-only kernels pay no prologue,
docs/cost-model.md).

``fit`` pairs (the PyAsc source, whose chip is stated, up to 1M elements, where the prologue is
not lost among differences in the main loop) give the spec's value: the median difference in
cycles at the chip's clock. ``check`` pairs (every other source) are printed beside it and are
not used: how well one prologue carries over to other ops.

    cd experiments && ../.venv/bin/python library_prologue.py   # -> results/library_prologue.csv
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from _table import RESULTS, emit

from costmodel.measure.real import read_real
from costmodel.measure.real.evaluate import library_pairs
from costmodel.spec import load_target

ROOT = Path(__file__).resolve().parent.parent
FIT_SOURCE = "compiler-team-ru/pyasc"
FIT_MAX_ELEMENTS = 1 << 20


def _pairs() -> list[dict[str, Any]]:
    rows, _ = read_real([ROOT / "datasets" / "real" / "ascend_kernels.csv"])
    clocks = {t: load_target(t).spec.clock_hz for t in {r.target for r in rows}}
    out = []
    for pair in library_pairs(rows):
        elements = math.prod(pair.data)
        fit = pair.source_name == FIT_SOURCE and elements <= FIT_MAX_ELEMENTS
        out.append(
            {
                "source": pair.source_name.split("/")[-1],
                "family": pair.family,
                "dtype": pair.dtype,
                "elements": elements,
                "library_us": round(pair.library_us, 3),
                "custom_us": round(pair.custom_us, 3),
                "diff_us": round(pair.diff_us, 3),
                "diff_cycles": round(pair.diff_us * 1e-6 * clocks[pair.target]),
                "use": "fit" if fit else "check",
            }
        )
    return sorted(out, key=lambda r: (r["use"] != "fit", r["source"], r["family"], r["elements"]))


def main() -> None:
    pairs = _pairs()
    emit(pairs, RESULTS / "library_prologue.csv", width=10)
    fit = [p["diff_cycles"] for p in pairs if p["use"] == "fit"]
    spec = load_target("ascend910b").spec
    print(
        f"fit: median over {len(fit)} pairs {statistics.median(fit):.0f} cycles "
        f"(spec library_setup_cycles {spec.library_setup_cycles:.0f})"
    )
    small = [p for p in pairs if p["use"] == "check" and p["elements"] <= FIT_MAX_ELEMENTS]
    for family in sorted({p["family"] for p in small}):
        diffs = [p["diff_us"] for p in small if p["family"] == family]
        print(
            f"check {family} up to {FIT_MAX_ELEMENTS} elements: median "
            f"{statistics.median(diffs):.2f} us over {len(diffs)} pairs"
        )


if __name__ == "__main__":
    main()
