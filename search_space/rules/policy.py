"""Fusion policy: what the search may do, from a TOML config file and CLI flags (validated).

Example ``autotune.toml``::

    [policy]
    fusion_level = 3          # 0 none, 1 preset rules only, 2 rule-covered edges searched, 3 all
    preset = "transformer"    # rule set: transformer, cnn or all
    no_fusion_ops = ["Softmax"]
    max_fused_ops = 12
    benefit_threshold = 0.02  # skip a fusion that saves less than 2% of its ops' time
    max_mem_usage = "2GiB"    # peak bytes of live intermediates (a constraint on plans)
    safe_mode = true
    strict_safety = false     # safe mode also unfuses kernels it could not verify
    codegen_check = "auto"    # safe mode runs the output plan's generated kernels: auto|on|off
    share_repeated = true

    [policy.patterns]         # per rule: always | never | search
    attention = "never"

    [policy.precision]
    cosine_min = 0.999
    max_abs_err = 0.05
    max_rel_err = 0.05
    error_factor = 4.0
    outlier_scale = 64.0      # also check on activations this large (0: off)

    [[rules]]                 # user rules, same form as the built-in table
    name = "my_gelu"
    priority = 60
    pattern = "Mul > Sigmoid > Mul"
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from search_space.exceptions import AutofusionError
from search_space.rules.registry import Rule, RuleRegistry, default_registry

__all__ = [
    "Policy",
    "PolicyError",
    "load_policy",
    "parse_bytes",
    "policy_rules",
    "rule_registry",
]

MODES = ("always", "never", "search")
PRESETS = ("all", "transformer", "cnn")
CODEGEN_CHECKS = ("auto", "on", "off")


class PolicyError(AutofusionError):
    """A policy file or flag is invalid."""


@dataclass(frozen=True)
class Policy:
    """What fusion the search may consider (docs/fusion.md)."""

    fusion_level: int = 3
    preset: str = "all"
    no_fusion_ops: tuple[str, ...] = ()
    max_fused_ops: int = 16
    benefit_threshold: float = 0.0
    patterns: Mapping[str, str] = field(default_factory=dict)
    max_mem_usage: int | None = None
    safe_mode: bool = True
    strict_safety: bool = False
    codegen_check: str = "auto"
    share_repeated: bool = True
    cosine_min: float = 0.999
    max_abs_err: float = 0.05
    max_rel_err: float = 0.05
    error_factor: float = 4.0
    outlier_scale: float = 64.0
    rules: tuple[Mapping[str, Any], ...] = ()

    def replace(self, **changes: Any) -> Policy:
        return dataclasses.replace(self, **changes)

    def mode(self, rule: str) -> str:
        return self.patterns.get(rule, "search")

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["no_fusion_ops"] = list(self.no_fusion_ops)
        out["patterns"] = dict(self.patterns)
        out["rules"] = [dict(r) for r in self.rules]
        return out


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}


def parse_bytes(value: Any) -> int:
    """``2GiB``, ``512MB``, ``1e9`` or an int, as bytes.

    Raises:
        PolicyError: not a size.
    """
    if isinstance(value, bool):
        raise PolicyError(f"max_mem_usage must be a size like '2GiB', but got {value!r}")
    if isinstance(value, int | float):
        return int(value)
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise PolicyError(f"max_mem_usage must be a size like '2GiB', but got {value!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _choices(values: Mapping[str, Any], out: dict[str, Any], problems: list[str]) -> None:
    """The fields that name one of a few choices: ``preset`` and ``codegen_check``."""
    if "preset" in values:
        if values["preset"] in PRESETS:
            out["preset"] = values["preset"]
        else:
            problems.append(
                f"unknown preset {values['preset']!r}; available: {', '.join(sorted(PRESETS))}"
            )
    if "codegen_check" in values:
        if values["codegen_check"] in CODEGEN_CHECKS:
            out["codegen_check"] = values["codegen_check"]
        else:
            problems.append(
                f"codegen_check must be one of {', '.join(CODEGEN_CHECKS)}, "
                f"but got {values['codegen_check']!r}"
            )


def _validate(values: dict[str, Any], origin: str) -> Policy:
    problems: list[str] = []
    names = {f.name for f in dataclasses.fields(Policy)}
    unknown = sorted(set(values) - names)
    if unknown:
        problems.append(
            f"unknown field(s) {', '.join(unknown)}; fields: {', '.join(sorted(names))}"
        )
    out: dict[str, Any] = {}

    def num(key: str, kind: type, lo: float, hi: float) -> None:
        if key not in values:
            return
        v = values[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or (kind is int and v != int(v)):
            problems.append(
                f"{key} must be a{'n integer' if kind is int else ' number'}, but got {v!r}"
            )
        elif not lo <= v <= hi:
            problems.append(f"`{lo:g} <= {key} <= {hi:g}` must hold, but got {key}={v!r}")
        else:
            out[key] = kind(v)

    num("fusion_level", int, 0, 3)
    num("max_fused_ops", int, 1, 256)
    num("benefit_threshold", float, 0.0, 1.0)
    num("cosine_min", float, 0.0, 1.0)
    num("max_abs_err", float, 0.0, 1e30)
    num("max_rel_err", float, 0.0, 1e30)
    num("error_factor", float, 1.0, 1e30)
    num("outlier_scale", float, 0.0, 1e4)
    for key in ("safe_mode", "strict_safety", "share_repeated"):
        if key in values:
            if isinstance(values[key], bool):
                out[key] = values[key]
            else:
                problems.append(f"{key} must be true or false, but got {values[key]!r}")
    _choices(values, out, problems)
    if "no_fusion_ops" in values:
        v = values["no_fusion_ops"]
        if isinstance(v, str):
            v = [s.strip() for s in v.split(",") if s.strip()]
        if isinstance(v, list | tuple) and all(isinstance(s, str) for s in v):
            out["no_fusion_ops"] = tuple(v)
        else:
            problems.append(f"no_fusion_ops must be a list of op types, but got {v!r}")
    if "patterns" in values:
        pats = values["patterns"]
        if not isinstance(pats, Mapping):
            problems.append(f"patterns must be a table of rule = mode, but got {pats!r}")
        else:
            bad = {k: m for k, m in pats.items() if m not in MODES}
            if bad:
                problems.append(
                    f"pattern modes must be one of {', '.join(MODES)}, but got "
                    + ", ".join(f"{k}={m!r}" for k, m in bad.items())
                )
            else:
                out["patterns"] = dict(pats)
    if values.get("max_mem_usage") is not None:
        try:
            out["max_mem_usage"] = parse_bytes(values["max_mem_usage"])
        except PolicyError as err:
            problems.append(str(err))
    if "rules" in values:
        rules = values["rules"]
        if isinstance(rules, list) and all(isinstance(r, Mapping) for r in rules):
            out["rules"] = tuple(dict(r) for r in rules)
        else:
            problems.append("rules must be an array of tables ([[rules]])")
    if problems:
        raise PolicyError(f"policy {origin}: " + "; ".join(problems))
    return Policy(**out)


def load_policy(
    path: str | Path | None = None, overrides: Mapping[str, Any] | None = None
) -> Policy:
    """Read ``[policy]`` (+ ``[[rules]]``) from a TOML file, then apply flag overrides.

    Raises:
        PolicyError: missing or invalid file; every bad field named in one line.
    """
    values: dict[str, Any] = {}
    origin = "flags"
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise PolicyError(f"config file '{p}' not found")
        try:
            doc = tomllib.loads(p.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise PolicyError(f"config file '{p}' is not valid TOML: {err}") from None
        except RecursionError:  # the parser recurses once per level
            raise PolicyError(
                f"config file '{p}' is nested too deeply to be a config; it holds the tables "
                "[policy], [[rules]] and [tune]"
            ) from None
        unknown = sorted(set(doc) - {"policy", "rules", "tune"})
        if unknown:
            raise PolicyError(
                f"config file '{p}': unknown table(s) {', '.join(unknown)}; "
                "expected [policy], [[rules]], [tune]"
            )
        values = dict(doc.get("policy", {}))
        precision = values.pop("precision", {})
        if isinstance(precision, Mapping):
            values.update(precision)
        if "rules" in doc:
            values["rules"] = doc["rules"]
        origin = f"'{p}'"
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return _validate(values, origin)


def rule_registry(policy: Policy) -> RuleRegistry:
    """Built-in rules plus the policy's own ``[[rules]]`` (which may replace built-ins)."""
    return RuleRegistry.from_config(policy.rules) if policy.rules else default_registry()


def policy_rules(policy: Policy) -> Sequence[Rule]:
    """The rules a policy's preset selects, highest priority first."""
    return rule_registry(policy).rules(policy.preset)
