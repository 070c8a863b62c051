"""The cost-model interface every model implements (TVM meta_schedule style).

A cost model scores a *plan*: a sequence of kernels run back to back on one stream. Kernel
``i`` may read what kernel ``i-1`` just wrote (L2 residency), so order matters.
"""

from __future__ import annotations

import abc
import gzip
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from costmodel.exceptions import CostModelError, InfeasibleConfig
from costmodel.kernel import Kernel, KernelBatch
from costmodel.l2_context import L2Touches, contexts, resident_bytes
from costmodel.spec import HardwareSpec, Target
from search_space.atomic import atomic_write_bytes

__all__ = ["CostModel", "KernelCost", "MeasuredKernel", "read_model_doc"]


@dataclass(frozen=True)
class KernelCost:
    """What one kernel of a plan costs, and what bounds it.

    Attributes:
        latency_us: wall time of the kernel including its launch gap and heads.
        pipes_us: busy time of each pipe (MTE2, MTE1, M, FIX, V, MTE3) on the busiest core.
        bound: the pipe or resource that dominates (a pipe name, ``HBM``, ``L2`` or ``launch``).
        hbm_bytes: bytes that went to or from HBM (L2 misses and write-backs).
        l2_hit_rate: fraction of loaded bytes served by L2.
        gap_us: the share of ``latency_us`` that is the device-side gap after the previous
            kernel on the stream (``kernel_gap_s``); ``device_us`` is the rest.
    """

    latency_us: float
    pipes_us: Mapping[str, float] = field(default_factory=dict)
    bound: str = ""
    hbm_bytes: float = 0.0
    l2_hit_rate: float = 0.0
    gap_us: float = 0.0

    @property
    def device_us(self) -> float:
        """The kernel from its start to its end on the device (what msprof's task duration
        measures): its latency without the gap before it."""
        return self.latency_us - self.gap_us

    def to_json(self) -> dict[str, Any]:
        return {
            "latency_us": self.latency_us,
            "device_us": self.device_us,
            "pipes_us": dict(self.pipes_us),
            "bound": self.bound,
            "hbm_bytes": self.hbm_bytes,
            "l2_hit_rate": self.l2_hit_rate,
        }


class MeasuredKernel(Protocol):
    """What :meth:`CostModel.update` learns from: one kernel as it ran, the L2 context it
    started in and what it cost. :class:`costmodel.measure.Measurement` is the record that
    carries it (the measurements sit above the models they measure with)."""

    @property
    def kernel(self) -> Kernel: ...

    @property
    def resident(self) -> Sequence[float]: ...

    @property
    def cost(self) -> KernelCost: ...


class CostModel(abc.ABC):
    """Scores kernels on one target.

    Contract: :meth:`evaluate` returns one :class:`KernelCost` per kernel, in order, treating
    the sequence as one plan run back to back (each kernel pays its launch gap and heads; L2
    contents carry from one kernel to the next, starting from what ``resident`` names, as
    kernels before the plan left it: a kernel inside a real step finds its inputs there).
    Latencies are finite and positive for every feasible kernel; an infeasible kernel (a buffer
    overflow) raises ``InfeasibleConfig`` and is never cheap. Results are deterministic for a
    given model state. :meth:`update` feeds measured rows (a no-op for models that do not
    learn: :attr:`learns`); :meth:`save` / :meth:`load` round-trip the model state through a
    JSON file, never pickle.

    A search calls the rest, each with a default made of :meth:`evaluate` that a model may
    replace with a faster equal: :meth:`residency` (each kernel's L2 context in a plan),
    :meth:`latencies` (kernels each in its own context: the search's memo of kernel costs),
    :meth:`predict_batch` (a group's config grid) and :attr:`prior` (what ranks the grids).
    ``tests/costmodel/test_contract.py`` checks every registered model against all of it.
    """

    kind: str = ""

    def __init__(self, target: Target) -> None:
        self.target = target

    @abc.abstractmethod
    def evaluate(
        self, kernels: Sequence[Kernel], resident: Mapping[str, float] | None = None
    ) -> list[KernelCost]:
        """Cost of each kernel of a plan, in order.

        Args:
            kernels: the plan's kernels, run back to back.
            resident: what is in L2 when the plan starts: tensor name -> bytes written, in
                the order they were written (the last most recent), as the kernels before the
                plan left them (:func:`~costmodel.residency.written_inputs`). Each model's L2
                keeps of them what it holds; ``None`` is a cold L2.

        Raises:
            InfeasibleConfig: a kernel whose footprint overflows a buffer.
        """

    def predict(
        self, kernels: Sequence[Kernel], resident: Mapping[str, float] | None = None
    ) -> np.ndarray:
        """Latency (us) of each kernel of a plan, in order (``resident`` as :meth:`evaluate`)."""
        return np.array([c.latency_us for c in self.evaluate(kernels, resident)], dtype=np.float64)

    # -- a search's way in: many kernels, each in its own L2 context --------------------------
    def residency(
        self,
        kernels: Sequence[Kernel],
        touches: Sequence[L2Touches] | None = None,
        warm: Mapping[str, float] | None = None,
    ) -> list[list[float]]:
        """Per kernel of a plan, its L2 context as this model sees it: the fraction of each
        load stream's tensor that the earlier kernels left in L2 (what a measured row
        records). ``touches``: each kernel's :func:`~costmodel.l2_context.l2_touches`, when
        the caller keeps them; ``warm``: :meth:`evaluate`'s ``resident``. This default: an
        LRU of whole tensors in the spec's whole L2 (:func:`~costmodel.l2_context.contexts`).
        """
        return contexts(kernels, float(self.target.spec.l2_bytes), touches, warm)

    def latencies(
        self, kernels: Sequence[Kernel], resident: Sequence[Sequence[float]]
    ) -> np.ndarray:
        """Latency (us) of each kernel alone in the L2 context given for it (a row of
        :meth:`residency`), not carried from the kernels before it: a search scores only the
        kernels a move changed. A model whose :meth:`evaluate` carries L2 as its
        :meth:`residency` says gives :meth:`predict` of the plan for
        ``latencies(kernels, residency(kernels))``. This default: each kernel evaluated alone,
        its context's bytes resident.

        Raises:
            InfeasibleConfig: a kernel whose footprint overflows a buffer.
        """
        return np.array(
            [
                self.evaluate([k], resident_bytes(k, row))[0].latency_us
                for k, row in zip(kernels, resident, strict=True)
            ],
            dtype=np.float64,
        )

    def predict_batch(
        self, batch: KernelBatch, resident: Mapping[str, float] | None = None
    ) -> np.ndarray:
        """Latency (us) of every config of one group (``batch``), each run alone after
        ``resident`` (as :meth:`evaluate`); ``+inf`` where a config overflows a buffer (a
        config grid ranked for the search). This default: each config's kernel evaluated."""
        out = np.full(len(batch), np.inf)
        for i in range(len(batch)):
            try:
                out[i] = self.evaluate([batch.kernel(i)], resident)[0].latency_us
            except InfeasibleConfig:
                continue
        return out

    @property
    def prior(self) -> CostModel:
        """The model whose predictions :meth:`update` never changes: a learned model's
        uncorrected prior, else the model itself. A study records measured rows in its L2
        contexts, and scores with it what must not move with a refit."""
        return self

    @property
    def learns(self) -> bool:
        """Whether :meth:`update` may change the predictions (and :attr:`version` with
        them): a study then refits it on what it measures."""
        return False

    def update(self, rows: Sequence[MeasuredKernel]) -> None:  # noqa: B027 - optional hook
        """Learn from measured kernels (:class:`costmodel.measure.Measurement` records);
        models that do not learn ignore them."""

    @property
    def version(self) -> str:
        """Changes whenever the model's predictions may change (stored on every trial)."""
        return f"{self.kind}-{self.target.spec.digest()}-{self.target.precision}"

    def state(self) -> dict[str, Any]:
        """JSON-ready model state (beyond the target)."""
        return {}

    def load_state(self, state: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Restore what :meth:`state` returned."""

    def save(self, path: str | Path) -> None:
        """Write ``{"kind", "target", "precision", "state"}`` as JSON, atomically
        (gzip-compressed when the name ends in ``.gz``)."""
        doc = {
            "kind": self.kind,
            "target": self.target.spec.to_dict(),
            "precision": self.target.precision,
            "state": self.state(),
        }
        data = json.dumps(doc, separators=(",", ":")).encode()
        atomic_write_bytes(path, gzip.compress(data, 9) if str(path).endswith(".gz") else data)

    @classmethod
    def load(cls, path: str | Path) -> CostModel:
        """Rebuild a model saved by :meth:`save` (JSON or gzip JSON; nothing is unpickled).

        Raises:
            CostModelError: unreadable file, or a file saved by another kind of model.
        """
        return cls.from_doc(read_model_doc(path), path)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], path: str | Path = "") -> CostModel:
        """Rebuild a model from the document :meth:`save` wrote (``path`` names it in errors).

        Raises:
            CostModelError: a malformed document, or one saved by another kind of model.
        """
        try:
            spec = HardwareSpec(**doc["target"])
            kind = doc["kind"]
        except (KeyError, TypeError) as err:
            raise CostModelError(f"cannot read cost model file '{path}': {err}") from None
        if cls.kind and kind != cls.kind:
            raise CostModelError(f"'{path}' holds a '{kind}' cost model, not '{cls.kind}'")
        return cls.from_state(Target(spec, doc.get("precision", "auto")), doc.get("state", {}))

    @classmethod
    def from_state(cls, target: Target, state: Mapping[str, Any]) -> CostModel:
        """A model of this kind for ``target`` with ``state`` restored."""
        model = cls(target)
        model.load_state(state)
        return model


def read_model_doc(path: str | Path) -> dict[str, Any]:
    """The JSON document of a saved cost model (plain or gzip-compressed).

    Raises:
        CostModelError: unreadable, not JSON, or not a JSON object.
    """
    try:
        data = Path(path).read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        return doc
    except (OSError, ValueError, EOFError) as err:
        raise CostModelError(f"cannot read cost model file '{path}': {err}") from None
    except RecursionError:  # the parser recurses once per level
        raise CostModelError(
            f"cannot read cost model file '{path}': nested too deeply to be a cost model; give "
            "one `autotune calibrate --fit` wrote"
        ) from None
