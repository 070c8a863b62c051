"""Fusion rules as data: the pattern language, the built-in table, a registry with presets,
the policy that selects rules, and the greedy (rule-based) plan.

    >>> reg = default_registry()
    >>> reg.register(Rule("my_gelu", 77, "Gelu > Mul[scalar]", presets=("transformer",)))
    >>> groups, applied = greedy(ctx, reg.rules("transformer"))
"""

from __future__ import annotations

from search_space.rules.greedy import Match, edges_of, greedy, match, resolve, unmatched_report
from search_space.rules.match import Failure, PatternMatcher
from search_space.rules.pattern import Pattern, RuleError, compile_pattern
from search_space.rules.policy import (
    Policy,
    PolicyError,
    load_policy,
    parse_bytes,
    policy_rules,
    rule_registry,
)
from search_space.rules.registry import (
    DEFAULT_RULES,
    PRESETS,
    Rule,
    RuleConflict,
    RuleRegistry,
    default_registry,
)

__all__ = [
    "DEFAULT_RULES",
    "PRESETS",
    "Failure",
    "Match",
    "Pattern",
    "PatternMatcher",
    "Policy",
    "PolicyError",
    "Rule",
    "RuleConflict",
    "RuleError",
    "RuleRegistry",
    "compile_pattern",
    "default_registry",
    "edges_of",
    "greedy",
    "load_policy",
    "match",
    "parse_bytes",
    "policy_rules",
    "resolve",
    "rule_registry",
    "unmatched_report",
]
