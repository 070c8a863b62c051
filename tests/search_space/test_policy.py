"""Policy files and flags are validated, every bad field named in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from search_space.rules import Policy, PolicyError, load_policy, parse_bytes


def test_defaults_and_file(tmp_path: Path) -> None:
    assert load_policy() == Policy()
    path = tmp_path / "autotune.toml"
    path.write_text(
        "[policy]\nfusion_level = 2\npreset = 'cnn'\nno_fusion_ops = ['Softmax']\n"
        "max_mem_usage = '2GiB'\n[policy.patterns]\nattention = 'never'\n"
        "[policy.precision]\ncosine_min = 0.99\n[[rules]]\nname = 'mine'\npriority = 5\n"
        "pattern = 'Mul > Sigmoid'\n"
    )
    p = load_policy(path)
    assert (p.fusion_level, p.preset, p.no_fusion_ops) == (2, "cnn", ("Softmax",))
    assert p.max_mem_usage == 2 * 1024**3 and p.mode("attention") == "never"
    assert p.mode("gelu_erf") == "search" and p.cosine_min == 0.99
    assert p.rules[0]["name"] == "mine"
    assert load_policy(path, {"fusion_level": 3, "preset": None}).fusion_level == 3


def test_every_bad_field_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        "[policy]\nfusion_level = 7\nsafe_mode = 'yes'\nmax_fused_ops = 2.5\nwarp = 1\n"
        "[policy.patterns]\nattention = 'sometimes'\n"
    )
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    msg = str(err.value)
    assert "\n" not in msg
    for needle in (
        "`0 <= fusion_level <= 3`",
        "safe_mode must be true or false",
        "max_fused_ops must be an integer",
        "unknown field(s) warp",
        "attention='sometimes'",
    ):
        assert needle in msg


def test_file_problems(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="not found"):
        load_policy(tmp_path / "none.toml")
    bad = tmp_path / "x.toml"
    bad.write_text("[policy\n")
    with pytest.raises(PolicyError, match="not valid TOML"):
        load_policy(bad)
    bad.write_text("[polcy]\n")
    with pytest.raises(PolicyError, match="unknown table"):
        load_policy(bad)


@pytest.mark.parametrize(("text", "value"), [("512MB", 512e6), ("1KiB", 1024), (2048, 2048)])
def test_sizes(text, value) -> None:
    assert parse_bytes(text) == value
    with pytest.raises(PolicyError):
        parse_bytes("lots")
