"""Cost models by kind: ``make_cost_model("analytic", target)`` and a JSON loader.

Implementations are imported lazily, so a kind (and what it pulls in: scikit-learn for
``learned``) costs nothing until someone asks for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from costmodel.base import CostModel, read_model_doc
from costmodel.exceptions import CostModelError
from costmodel.spec import Target

__all__ = ["KINDS", "available_cost_models", "load_cost_model", "make_cost_model"]

KINDS = ("analytic", "learned", "simulator")


def available_cost_models() -> list[str]:
    return sorted(KINDS)


def _model_class(kind: str) -> type[CostModel]:
    if kind == "analytic":
        from costmodel.analytic import AnalyticModel

        return AnalyticModel
    if kind == "learned":
        from costmodel.learned import LearnedModel

        return LearnedModel
    if kind == "simulator":
        from costmodel.simulator import SimulatorModel

        return SimulatorModel
    raise CostModelError(
        f"unknown cost model '{kind}'; available: {', '.join(available_cost_models())}"
    )


def make_cost_model(kind: str, target: Target, **kw: Any) -> CostModel:
    """A fresh cost model of ``kind`` for ``target``; ``kw`` go to its constructor.

    Raises:
        CostModelError: an unknown kind (the message lists the known ones), or a kind whose
            implementation cannot be imported.
    """
    return _model_class(kind)(target, **kw)


def load_cost_model(path: str | Path) -> CostModel:
    """Rebuild whatever kind of model :meth:`CostModel.save` wrote to ``path``.

    Raises:
        CostModelError: unreadable file or unknown kind.
    """
    doc = read_model_doc(path)  # read once: the kind picks the class that rebuilds it
    if "kind" not in doc:
        raise CostModelError(f"cannot read cost model file '{path}': no 'kind'")
    return _model_class(str(doc["kind"])).from_doc(doc, path)
