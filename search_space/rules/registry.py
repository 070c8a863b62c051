"""Rule records and the registry: presets, user rules in Python and from the config file."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from search_space.rules.pattern import RuleError, compile_pattern
from search_space.rules.table import TABLE

__all__ = [
    "DEFAULT_RULES",
    "PRESETS",
    "Rule",
    "RuleConflict",
    "RuleRegistry",
    "default_registry",
]

log = logging.getLogger(__name__)

PRESETS = ("all", "cnn", "transformer")
KINDS = ("chain", "siblings")
_CONFIG_KEYS = ("name", "priority", "pattern", "presets", "kind", "description")


class RuleConflict(RuleError):
    """Two rules of equal priority claim overlapping ops; one needs a higher priority."""


@dataclass(frozen=True)
class Rule:
    """A named fusion pattern. Constructing one parses its pattern.

    Attributes:
        name: unique within a registry.
        priority: higher wins when matches overlap.
        pattern: see :mod:`search_space.rules.pattern`.
        presets: the rule sets it belongs to, a subset of ("cnn", "transformer"), both by
            default; every rule belongs to "all".
        kind: "chain" (producer -> consumer) or "siblings" (matmuls sharing an input).
        description: one line for reports.

    Raises:
        RuleError: a bad name, priority, preset, kind or pattern (the message names the rule).
    """

    name: str
    priority: int
    pattern: str
    presets: tuple[str, ...] = ("cnn", "transformer")
    kind: str = "chain"
    description: str = ""

    def __post_init__(self) -> None:
        _check(isinstance(self.name, str) and self.name.strip() != "", "a rule needs a name")
        _check(
            isinstance(self.priority, int) and not isinstance(self.priority, bool),
            f"rule '{self.name}': priority must be an int, but got {self.priority!r}",
        )
        _check(
            self.kind in KINDS,
            f"rule '{self.name}': unknown kind '{self.kind}'; available: {', '.join(KINDS)}",
        )
        presets = (self.presets,) if isinstance(self.presets, str) else tuple(self.presets)
        bad = [p for p in presets if p not in PRESETS[1:]]
        _check(
            not bad,
            f"rule '{self.name}': unknown preset '{bad[0] if bad else ''}'; "
            f"available: {', '.join(PRESETS[1:])}",
        )
        object.__setattr__(self, "presets", tuple(sorted(set(presets))))
        _check(isinstance(self.pattern, str), f"rule '{self.name}': pattern must be a string")
        compile_pattern(self.name, self.pattern, self.kind)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "priority": self.priority,
            "pattern": self.pattern,
            "presets": list(self.presets),
            "kind": self.kind,
            "description": self.description,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Rule:
        """A rule from a config entry (name, priority, pattern; presets, kind, description).

        Raises:
            RuleError: a missing or unknown key, or any problem :class:`Rule` reports.
        """
        _check(isinstance(data, Mapping), f"a rule entry must be a table, but got {data!r}")
        label = data.get("name", "?")
        unknown = sorted(set(data) - set(_CONFIG_KEYS))
        _check(
            not unknown,
            f"rule '{label}': unknown key '{unknown[0] if unknown else ''}'; "
            f"available: {', '.join(_CONFIG_KEYS)}",
        )
        missing = [k for k in ("name", "priority", "pattern") if k not in data]
        _check(not missing, f"rule '{label}': missing key '{missing[0] if missing else ''}'")
        return cls(
            name=data["name"],
            priority=data["priority"],
            pattern=data["pattern"],
            presets=data.get("presets", ("cnn", "transformer")),
            kind=data.get("kind", "chain"),
            description=data.get("description", ""),
        )


def _check(cond: object, msg: str, exc: type[RuleError] = RuleError) -> None:
    if not cond:
        raise exc(msg)


DEFAULT_RULES: tuple[Rule, ...] = tuple(
    Rule(name, prio, pattern, presets, kind, desc)
    for name, prio, presets, kind, pattern, desc in TABLE
)


class RuleRegistry:
    """A mutable set of rules by name, queried by preset.

    Args:
        rules: the initial rules (e.g. :data:`DEFAULT_RULES`).
    """

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self._rules: dict[str, Rule] = {}
        for rule in rules:
            self.register(rule)

    def register(self, rule: Rule, *, replace: bool = False) -> Rule:
        """Add a rule (a user pattern in Python).

        Raises:
            RuleError: a rule of that name exists and ``replace`` is false.
        """
        _check(isinstance(rule, Rule), f"register() takes a Rule, but got {rule!r}")
        _check(
            replace or rule.name not in self._rules,
            f"rule '{rule.name}' is already registered; pass replace=True to override it",
        )
        self._rules[rule.name] = rule
        return rule

    @classmethod
    def from_config(
        cls, entries: Iterable[Mapping[str, Any]], *, defaults: bool = True
    ) -> RuleRegistry:
        """A registry from config-file rule tables (``[[rules]]`` in TOML).

        Args:
            entries: dicts with name, priority, pattern and optionally presets, kind and
                description. An entry named like a built-in replaces it (e.g. to re-prioritise).
            defaults: start from the built-in rules.

        Raises:
            RuleError: a bad entry, or two entries with one name.
        """
        reg = cls(DEFAULT_RULES if defaults else ())
        seen: set[str] = set()
        for entry in entries:
            rule = Rule.from_json(entry)
            _check(rule.name not in seen, f"rule '{rule.name}' appears twice in the config")
            seen.add(rule.name)
            if rule.name in reg:
                log.info("config rule '%s' replaces the built-in rule", rule.name)
            reg.register(rule, replace=True)
        return reg

    def rules(self, preset: str = "all") -> tuple[Rule, ...]:
        """The rules of a preset, highest priority first (then by name).

        Raises:
            RuleError: an unknown preset.
        """
        _check(
            preset in PRESETS,
            f"unknown preset '{preset}'; available: {', '.join(PRESETS)}",
        )
        chosen = [r for r in self._rules.values() if preset == "all" or preset in r.presets]
        return tuple(sorted(chosen, key=lambda r: (-r.priority, r.name)))

    def get(self, name: str) -> Rule:
        try:
            return self._rules[name]
        except KeyError:
            raise RuleError(
                f"unknown rule '{name}'; available: {', '.join(sorted(self._rules))}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._rules

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules("all"))

    def __len__(self) -> int:
        return len(self._rules)


def default_registry() -> RuleRegistry:
    """A fresh registry holding the built-in rules (safe to extend)."""
    return RuleRegistry(DEFAULT_RULES)
