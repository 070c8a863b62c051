"""Hardware specs as data (docs/cost-model.md): one TOML file per target, validated, overridable.

Shipped targets live in ``costmodel/specs/*.toml`` (package data). A user file may name a
``base`` target and override any field; ``--set FIELD=VALUE`` does the same from the CLI for a
what-if study (``--set l2_bytes=0``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from costmodel.exceptions import SpecError

__all__ = [
    "DERIVED_FIELDS",
    "PRECISIONS",
    "HardwareSpec",
    "Target",
    "available_targets",
    "fitted_lineage",
    "load_spec",
    "load_target",
]

PRECISIONS = ("auto", "fp32", "fp16", "bf16", "mixed")
_ZERO_OK = frozenset(
    {
        "l2_bytes",
        "gm_latency_cycles",
        "l2_latency_cycles",
        "mte3_latency_cycles",
        "kernel_head_cycles",
        "scalar_setup_cycles",
        "scalar_iter_cycles",
        "library_setup_cycles",
        "library_setup_reads",
        "cube_gm_bytes_per_cycle",
        "cross_core_sync_cycles",
        "kernel_gap_s",
        "mmad_fixed_cycles",
        "vector_issue_cycles",
    }
)


@dataclass(frozen=True)
class HardwareSpec:
    """One Ascend target. Rates are per core and per cycle unless the name says otherwise."""

    name: str
    arch: str  # "split" (910B: AIC and AIV meet through GM/L2) or "coupled" (910, 310P)
    cube_cores: int
    vector_cores: int
    clock_hz: float
    cube_flops_per_cycle: int
    cube_fp32_rate: float
    mmad_fixed_cycles: float
    vector_bytes_per_cycle: float
    vector_slow_op_rate: float
    vector_issue_cycles: float
    l1_bytes: int
    l0a_bytes: int
    l0b_bytes: int
    l0c_bytes: int
    ub_bytes: int
    l2_bytes: int
    l2_line_bytes: int
    hbm_bytes_per_s: float
    hbm_peak_bytes_per_s: float
    core_gm_bytes_per_cycle: float
    l2_read_bytes_per_cycle: float
    l2_write_bytes_per_cycle: float
    l1_to_l0a_bytes_per_cycle: float
    l1_to_l0b_bytes_per_cycle: float
    fixpipe_bytes_per_cycle: float
    nd2nz_rate: float
    gm_latency_cycles: float
    l2_latency_cycles: float
    mte3_latency_cycles: float
    kernel_head_cycles: float
    cross_core_sync_cycles: float
    kernel_gap_s: float
    l0c_to_ub: bool
    ub_align_bytes: int
    l1_align_bytes: int
    l0_align_bytes: int
    gm_burst_bytes: int
    # defaults only so that documents saved before these fields existed still load; every
    # shipped spec names them (and a spec file without a base must)
    scalar_setup_cycles: float = 0.0
    scalar_iter_cycles: float = 0.0
    # the longer prologue of CANN's own op kernels (what torch_npu and aclnn call): see
    # library() and the spec files' sources
    library_setup_cycles: float = 0.0
    # how many dependent reads of its tiling and offset tables that prologue holds, each a GM
    # latency when they come from HBM (a kernel timed alone) and an L2 latency when they are
    # in L2 (inside a step; never saving more than the whole prologue): see in_situ() and the
    # spec files' sources
    library_setup_reads: float = 0.0
    # the library prologue this spec charges on top of its own set-up (library() sets it): a
    # measured cost, which a closed form's fitted set-up factor (costmodel.analytic) must not
    # scale
    library_prologue_cycles: float = 0.0
    # a kernel inside a real step (in_situ() sets it): its prologue's reads hit L2
    in_situ_prologue: bool = False
    # the GM read path of a split chip's cube core (AIC), when it is wider than
    # core_gm_bytes_per_cycle (which then prices the vector cores' only); 0: the same
    cube_gm_bytes_per_cycle: float = 0.0

    # -- derived figures ----------------------------------------------------------------------
    @property
    def cube_peak_flops(self) -> float:
        """Nominal fp16 cube peak of the chip, FLOP/s (what the roofline uses)."""
        return self.cube_cores * self.cube_flops_per_cycle * self.clock_hz

    @property
    def hbm_bytes_per_cycle(self) -> float:
        """Effective HBM bandwidth of the chip per core-clock cycle."""
        return self.hbm_bytes_per_s / self.clock_hz

    @property
    def aivs_per_aic(self) -> int:
        """Vector cores working beside each cube core in a mixed kernel: the AIV pair of a
        split chip's AIC (``vector_cores // cube_cores``), 1 on a coupled core."""
        return max(1, self.vector_cores // self.cube_cores) if self.is_split else 1

    def gm_read_bytes_per_cycle(self, side: str) -> float:
        """The per-core cap on a load's HBM-miss bytes per cycle for the core that issues it
        (``side``: ``"cube"`` or ``"vector"``): a split chip's AIC reads GM at
        ``cube_gm_bytes_per_cycle`` where the spec names it, every other core at
        ``core_gm_bytes_per_cycle``."""
        if side == "cube" and self.cube_gm_bytes_per_cycle > 0:
            return self.cube_gm_bytes_per_cycle
        return self.core_gm_bytes_per_cycle

    @property
    def kernel_setup_cycles(self) -> float:
        """The device-side prologue of every kernel before its first data load: the scalar
        unit reads the kernel's tiling data from GM (a dependent load, one GM latency) and then
        sets up its pipes, queues and offsets (``scalar_setup_cycles``). One of CANN's own
        kernels takes ``library_prologue_cycles`` longer, a measured cost apart from this (a
        closed form's fitted set-up factor scales this, never that). Inside a step the
        tiling read hits L2 (:meth:`in_situ`)."""
        return self.prologue_read_cycles + self.scalar_setup_cycles

    @property
    def prologue_read_cycles(self) -> float:
        """One dependent read of a kernel's prologue (its tiling, an offset table): a GM
        latency for a kernel timed alone, an L2 latency for one inside a step."""
        return self.l2_latency_cycles if self.in_situ_prologue else self.gm_latency_cycles

    @property
    def library_prologue_us(self) -> float:
        """The library prologue this spec charges, in us (0 unless :meth:`library` made it)."""
        return self.library_prologue_cycles / self.clock_hz * 1e6

    @property
    def kernel_fixed_cycles(self) -> float:
        """Device cycles every kernel pays whatever its work: start-up head, set-up and a
        library kernel's longer prologue."""
        return self.kernel_head_cycles + self.kernel_setup_cycles + self.library_prologue_cycles

    @property
    def is_split(self) -> bool:
        return self.arch == "split"

    def library(self) -> HardwareSpec:
        """This chip running one of CANN's own op kernels (a ``torch_npu``/``aclnn`` call)
        rather than a kernel generated for one shape: the same pipes, with a scalar prologue
        longer by ``library_setup_cycles`` (a shape-generic kernel derives its tiling, offsets
        and tails at run time, and sets up the outputs a framework op always writes), charged
        as ``library_prologue_cycles``: ``library_setup_cycles`` timed alone, less what its
        ``library_setup_reads`` save when they hit L2 inside a step (:meth:`in_situ`)."""
        step = max(0.0, self.gm_latency_cycles - self.prologue_read_cycles)
        saved = min(self.library_setup_cycles, self.library_setup_reads * step)
        return self.replace(library_prologue_cycles=self.library_setup_cycles - saved)

    @property
    def in_situ_saving_us(self) -> float:
        """What a kernel's own prologue saves inside a step (its tiling read from L2, not
        HBM), in us: a measurement in situ plus this is the kernel timed alone."""
        return (
            (self.kernel_setup_cycles - self.in_situ().kernel_setup_cycles) / self.clock_hz * 1e6
        )

    def in_situ(self) -> HardwareSpec:
        """This chip running a kernel inside a real training or serving step rather than
        timed alone: the prologue's dependent reads (the tiling, a library kernel's offset
        tables) hit L2, where the launch before left or put them, so a tiny kernel's floor
        is the head, the scalar set-up and L2 latencies (kernel_details of real steps on
        910B-class chips: 1.2-2.2 us; the same kernels timed alone by ``msprof op``: 3-7 us).
        Its inputs are another matter: ``CostModel.evaluate``'s ``resident``."""
        situated = self.replace(in_situ_prologue=True)
        return situated.library() if self.library_prologue_cycles else situated

    def replace(self, **changes: Any) -> HardwareSpec:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        """Hash of every value the tool's own kernels are costed by: provenance for measurements
        made on this spec. ``library_setup_cycles`` and ``library_setup_reads`` are left out:
        they price only CANN's library kernels (:meth:`library`, whose spec has its own
        digest), so no table row or plan of a generated kernel depends on them. So is a field
        added after the first specs while it holds its default: a spec saved before the field
        existed loads with that default and costs every kernel as it did, so its digest stays
        what it was."""
        values = {
            k: v
            for k, v in self.to_dict().items()
            if k not in _LIBRARY_ONLY and not (k in _LATE_DEFAULTS and v == _LATE_DEFAULTS[k])
        }
        return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]


# set by HardwareSpec.library() and in_situ() only, never read from a spec file or --set
DERIVED_FIELDS = frozenset({"library_prologue_cycles", "in_situ_prologue"})
# fields that price only CANN's library kernels (left out of the digest)
_LIBRARY_ONLY = frozenset({"library_setup_cycles", "library_setup_reads"})
_FIELDS = {f.name: f for f in fields(HardwareSpec) if f.name not in DERIVED_FIELDS}
# fields added after the first specs, with the default a spec saved before them loads with
_LATE_DEFAULTS = {f.name: f.default for f in fields(HardwareSpec) if f.default is not MISSING}


@dataclass(frozen=True)
class Target:
    """A hardware spec plus the precision mode kernels are costed in (docs/cost-model.md).

    ``auto`` (the default, like the Ascend model converter): cube operands in fp16 with fp32
    accumulation, vector ops in the model's dtype. ``fp16``/``bf16``: everything 16-bit.
    ``fp32``: cube at its fp32 rate. ``mixed``: 16-bit cube and elementwise, fp32 reductions.
    """

    spec: HardwareSpec
    precision: str = "auto"

    def cube_itemsize(self, model_itemsize: int) -> int:
        return cube_itemsize(self.precision, model_itemsize)

    def vector_itemsize(self, model_itemsize: int, reduce: bool = False) -> int:
        if self.precision in ("fp16", "bf16") or (self.precision == "mixed" and not reduce):
            return min(2, model_itemsize)
        return model_itemsize

    def cube_rate(self, model_itemsize: int) -> float:
        """Fraction of the fp16 cube rate this precision runs at."""
        return self.spec.cube_fp32_rate if self.cube_itemsize(model_itemsize) == 4 else 1.0


def cube_itemsize(precision: str, model_itemsize: int) -> int:
    """Bytes of a cube operand of ``model_itemsize`` bytes under a precision mode (see
    :class:`Target`): 4 only under ``fp32``, else at most 2."""
    return 4 if precision == "fp32" and model_itemsize >= 4 else min(2, model_itemsize)


def available_targets() -> list[str]:
    files = resources.files("costmodel").joinpath("specs")
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".toml"))


def _read_toml(target: str) -> tuple[dict[str, Any], str]:
    if target.endswith(".toml") or "/" in target:
        path = Path(target)
        if not path.is_file():
            raise SpecError(f"hardware spec file '{target}' not found")
        try:
            return tomllib.loads(path.read_text()), str(path)
        except tomllib.TOMLDecodeError as err:
            raise SpecError(f"hardware spec '{target}' is not valid TOML: {err}") from None
        except RecursionError:  # the parser recurses once per level
            raise SpecError(f"hardware spec '{target}' is nested too deeply: not a spec") from None
    names = available_targets()
    if target not in names:
        raise SpecError(
            f"unknown target '{target}'; available: {', '.join(names)}, or a .toml path"
        )
    text = resources.files("costmodel").joinpath("specs", f"{target}.toml").read_text()
    return tomllib.loads(text), target


def _coerce(name: str, value: Any, problems: list[str]) -> Any:
    kind = _FIELDS[name].type
    if kind == "bool" or kind is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if isinstance(value, bool):
            return value
        problems.append(f"{name} must be true or false, but got {value!r}")
        return value
    if kind == "str" or kind is str:
        if name == "arch" and value not in ("split", "coupled"):
            problems.append(f"arch must be 'split' or 'coupled', but got {value!r}")
        return str(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        problems.append(f"{name} must be a number, but got {value!r}")
        return value
    if isinstance(value, bool) or number != number:
        problems.append(f"{name} must be a number, but got {value!r}")
        return value
    if number in (math.inf, -math.inf):
        problems.append(f"{name} must be a finite number, but got {value!r}")
        return value
    floor_ok = number >= 0 if name in _ZERO_OK else number > 0
    if not floor_ok:
        rule = ">= 0" if name in _ZERO_OK else "> 0"
        problems.append(f"{name} must be {rule}, but got {value!r}")
    if kind == "int" or kind is int:
        if number != int(number):
            problems.append(f"{name} must be a whole number, but got {value!r}")
        return int(number)
    return number


def load_spec(
    target: str = "ascend910b", overrides: Iterable[str] | Mapping[str, Any] = ()
) -> HardwareSpec:
    """Load a shipped target by name or a TOML file by path, then apply overrides.

    Args:
        target: ``ascend910b``, ``ascend910``, ``ascend310p`` or a path to a ``.toml`` file (which
            may set ``base = "ascend910b"`` and override only some fields).
        overrides: ``FIELD=VALUE`` strings (the CLI's ``--set``) or a mapping.

    Raises:
        SpecError: unknown target or file; every bad, missing or unknown field, in one line.
    """
    data, origin = _read_toml(target)
    data.pop("sources", None)
    base = data.pop("base", None)
    if base is not None:
        base_data, _ = _read_toml(str(base))
        base_data.pop("sources", None)
        base_data.pop("base", None)
        data = {**base_data, **data}
    items = overrides.items() if isinstance(overrides, Mapping) else _parse_sets(overrides)
    for key, value in items:
        if key not in _FIELDS:
            raise SpecError(f"--set {key}: unknown spec field; fields: {', '.join(_FIELDS)}")
        data[key] = value
    problems: list[str] = []
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        problems.append(f"unknown field(s) {', '.join(unknown)}")
    missing = [k for k in _FIELDS if k not in data]
    if missing:
        problems.append(f'missing field(s) {", ".join(missing)} (or set base = "ascend910b")')
    values = {k: _coerce(k, v, problems) for k, v in data.items() if k in _FIELDS}
    if problems:
        raise SpecError(f"hardware spec '{origin}': " + "; ".join(problems))
    return HardwareSpec(**values)


def _parse_sets(specs: Iterable[str]) -> list[tuple[str, str]]:
    out = []
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--set expects FIELD=VALUE (e.g. l2_bytes=0), but got '{spec}'")
        out.append((key.strip(), value.strip()))
    return out


def load_target(
    target: str = "ascend910b",
    overrides: Iterable[str] | Mapping[str, Any] = (),
    precision: str = "auto",
) -> Target:
    """A spec plus a precision mode.

    Raises:
        SpecError: as :func:`load_spec`, or an unknown precision mode.
    """
    if precision not in PRECISIONS:
        raise SpecError(f"unknown precision '{precision}'; available: {', '.join(PRECISIONS)}")
    return Target(load_spec(target, overrides), precision)


def fitted_lineage(name: str) -> list[str]:
    """The target names whose fitted artifacts (calibrated constants, learned model) serve
    ``name``, nearest first: a SKU of a chip (``ascend910b4``) shares its chip's
    (``ascend910b``), since the SKUs differ in core count, clock and memory (spec values), not
    in the per-core pipes the factors describe."""
    m = re.fullmatch(r"(ascend\d+[a-z]+)\d+", name)
    return [name, m.group(1)] if m else [name]
