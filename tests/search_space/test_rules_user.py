"""Rule conflicts and their resolution, user rules from Python and TOML, bad patterns."""

from __future__ import annotations

import tomllib

import pytest
from rules_helpers import applied_counts, export_ctx

from search_space.rules import (
    DEFAULT_RULES,
    Match,
    Rule,
    RuleConflict,
    RuleError,
    RuleRegistry,
    default_registry,
    greedy,
    resolve,
)

# -- conflicts and resolution ----------------------------------------------------------------
GELU_ERF = next(r for r in DEFAULT_RULES if r.name == "gelu_erf")


def test_equal_priorities_on_the_same_ops_are_a_conflict() -> None:
    ctx = export_ctx("bert_legacy_op14.onnx")
    mine = Rule("my_gelu", GELU_ERF.priority, "Div[scalar] > Erf > Add > Mul > Mul")
    with pytest.raises(RuleConflict) as err:
        greedy(ctx, [GELU_ERF, mine])
    msg = str(err.value)
    assert f"rules 'gelu_erf' and 'my_gelu' (priority {GELU_ERF.priority}) both claim ops" in msg
    assert "give one a higher priority" in msg and "intermediate_act_fn/Erf" in msg


def test_the_higher_priority_wins() -> None:
    ctx = export_ctx("bert_legacy_op14.onnx")
    mine = Rule("my_gelu", GELU_ERF.priority + 1, "Div[scalar] > Erf > Add > Mul > Mul")
    assert applied_counts(ctx, [GELU_ERF, mine]) == {"my_gelu": 2}
    low = Rule("my_gelu", GELU_ERF.priority - 1, "Div[scalar] > Erf > Add > Mul > Mul")
    assert applied_counts(ctx, [GELU_ERF, low]) == {"gelu_erf": 2}


def test_resolve_prefers_priority_then_size_and_keeps_disjoint_matches() -> None:
    a = Match("a", 10, frozenset({"x", "y"}))
    b = Match("b", 20, frozenset({"y", "z"}))
    c = Match("a", 10, frozenset({"p", "q", "r"}))
    d = Match("a", 10, frozenset({"q"}))
    assert resolve([a, b, c, d]) == [b, c]
    same = Match("c", 20, frozenset({"z"}))
    with pytest.raises(RuleConflict, match="rules 'b' and 'c' \\(priority 20\\)"):
        resolve([b, same])


# -- user rules ------------------------------------------------------------------------------
def test_register_a_python_rule() -> None:
    reg = default_registry()
    reg.register(Rule("bias_gelu", 99, "Add[bias] > Gelu", presets=("transformer",)))
    got = applied_counts(export_ctx("bert_dynamo.onnx"), reg.rules("transformer"))
    assert got["bias_gelu"] == 2 and got["matmul_bias_act"] == 0
    with pytest.raises(RuleError, match="'bias_gelu' is already registered"):
        reg.register(Rule("bias_gelu", 1, "Add > Gelu"))
    assert "bias_gelu" not in default_registry()


def test_rules_from_a_toml_config() -> None:
    text = """
    [[rules]]
    name = "bias_gelu"
    priority = 99
    pattern = "Add[bias] > Gelu"
    presets = ["transformer"]

    [[rules]]
    name = "matmul_bias"
    priority = 98
    pattern = "MatMul|Gemm > Add[bias]"
    """
    entries = tomllib.loads(text)["rules"]
    reg = RuleRegistry.from_config(entries)
    assert reg.get("matmul_bias").priority == 98  # a config entry re-prioritises a built-in
    assert len(reg) == len(DEFAULT_RULES) + 1
    assert "bias_gelu" not in {r.name for r in reg.rules("cnn")}
    got = applied_counts(export_ctx("bert_dynamo.onnx"), reg.rules("transformer"))
    assert got["bias_gelu"] == 2 and got["matmul_bias"] == 10  # above qkv_projection now
    only = RuleRegistry.from_config(entries, defaults=False)
    assert [r.name for r in only] == ["bias_gelu", "matmul_bias"]
    rule = reg.get("bias_gelu")
    assert Rule.from_json(rule.to_json()) == rule


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"name": "a", "priority": 1, "pattern": "Add", "prio": 2}, "unknown key 'prio'"),
        ({"name": "a", "pattern": "Add"}, "missing key 'priority'"),
        ({"name": "a", "priority": "high", "pattern": "Add"}, "priority must be an int"),
        ({"name": "a", "priority": 1, "pattern": "Add", "presets": ["gpu"]}, "preset 'gpu'"),
        ({"name": "a", "priority": 1, "pattern": "Add", "kind": "tree"}, "unknown kind 'tree'"),
    ],
)
def test_bad_config_entries(entry: dict, problem: str) -> None:
    with pytest.raises(RuleError, match=problem):
        RuleRegistry.from_config([entry])


@pytest.mark.parametrize(
    ("pattern", "kind", "problem"),
    [
        ("", "chain", "the pattern is empty"),
        ("MatMul >> Add", "chain", "expected an op type, found '>' at column 9"),
        ("Matmul > Add", "chain", "unknown op type 'Matmul' \\(did you mean 'MatMul'\\?\\)"),
        ("MatMul > Add[biass]", "chain", "unknown predicate 'biass'; available: bias"),
        ("MatMul Add", "chain", "unexpected 'Add' \\('>' joins steps\\)"),
        ("MatMul > Add $", "chain", "unexpected character '\\$'"),
        ("MatMul > Add??", "chain", "unexpected '\\?'"),
        ("Reshape > Add", "chain", "the first step 'Reshape' is a view"),
        ("Softmax > Dropout|Relu", "chain", "mixes views"),
        ("MatMul > Add<(Mul<Add)", "chain", "cannot have side branches of its own"),
        ("Add > Relu", "siblings", "starts with a required MatMul\\|Gemm step"),
        ("(MatMul){1}", "siblings", "needs 2 <= n <= m, got \\{1\\}"),
        ("(MatMul > Add", "siblings", "expected '\\)', found the end"),
    ],
)
def test_bad_patterns_name_the_rule_and_the_problem(pattern: str, kind: str, problem: str) -> None:
    with pytest.raises(RuleError, match=f"rule 'mine': bad pattern .*{problem}"):
        Rule("mine", 1, pattern, kind=kind)
