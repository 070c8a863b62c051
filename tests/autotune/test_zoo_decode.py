"""Zoo decode steps (gpt2-decode, llama3-8b-decode) with a static or concat KV cache.

The oracle is a float64 numpy forward pass written here from the published architectures
(GPT-2: LayerNorm, tanh GELU, tied head; Llama: RMSNorm, rotate-half RoPE, GQA, SwiGLU) over
the zoo's named weights. It gives the K/V of the first L tokens (the cache fed to the decode
step) and the logits of all L + 1 tokens; it is checked against the zoo's prefill model, and
the decode step against both.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from test_zoo import dynamic_tensors, meta, run_ort, shape_of
from typer.testing import CliRunner

from autotune.cli import app
from search_space import load_graph
from search_space.zoo import (
    INPUT_RANGES_KEY,
    WEIGHT_INPUTS_KEY,
    ZOO_KEY,
    ZooError,
    build,
    list_models,
)

FORMS = ("static", "concat")
PREFILL = {"gpt2-decode": "gpt2", "llama3-8b-decode": "llama3-8b"}
# gpt2 at 0.25 has 3 heads (the cache slot indices span heads); llama at 0.1 has 3 query heads
# on 1 KV head (grouped-query repeat of the cache)
SCALE = {"gpt2-decode": 0.25, "llama3-8b-decode": 0.1}
BATCH, CACHE, LAYERS = 2, 16, 2


def info_of(model: onnx.ModelProto) -> dict:
    return json.loads(meta(model)[ZOO_KEY])


def small(name: str, weights: str = "random", **kw: Any) -> onnx.ModelProto:
    """A small decode step (`name`) or its prefill model, seed 3: the same weights."""
    scale = SCALE[name] if name in SCALE else SCALE[f"{name}-decode"]
    return build(name, weights=weights, scale=scale, layers=LAYERS, batch=BATCH, seed=3, **kw)


# -- the float64 oracle ----------------------------------------------------------------------
def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal attention on [B,H,S,D], merged back to [B,S,H*D]."""
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    seq = s.shape[-1]
    s = np.where(np.tril(np.ones((seq, seq), dtype=bool)), s, -np.inf)
    ctx = _softmax(s) @ v
    b, h, n, d = ctx.shape
    return ctx.transpose(0, 2, 1, 3).reshape(b, n, h * d)


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    b, s, hd = x.shape
    return x.reshape(b, s, heads, hd // heads).transpose(0, 2, 1, 3)


def _gpt2(w: dict[str, np.ndarray], ids: np.ndarray, info: dict) -> tuple:
    def ln(t: np.ndarray, p: str) -> np.ndarray:
        mu, var = t.mean(-1, keepdims=True), t.var(-1, keepdims=True)
        return (t - mu) / np.sqrt(var + 1e-5) * w[p + ".weight"] + w[p + ".bias"]

    def lin(t: np.ndarray, p: str) -> np.ndarray:
        return t @ w[p + ".weight"] + w[p + ".bias"]

    x = w["wte.weight"][ids] + w["wpe.weight"][np.arange(ids.shape[1])]
    cache = []
    for i in range(info["layers"]):
        p = f"h.{i}"
        q, k, v = np.split(lin(ln(x, p + ".ln_1"), p + ".attn.c_attn"), 3, axis=-1)
        q, k, v = (_heads(t, info["heads"]) for t in (q, k, v))
        cache.append((k, v))
        x = x + lin(_attend(q, k, v), p + ".attn.c_proj")
        y = lin(ln(x, p + ".ln_2"), p + ".mlp.c_fc")
        y = 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y**3)))
        x = x + lin(y, p + ".mlp.c_proj")
    return ln(x, "ln_f") @ w["wte.weight"].T, cache


def _llama(w: dict[str, np.ndarray], ids: np.ndarray, info: dict) -> tuple:
    heads, kv = info["heads"], info["kv_heads"]
    hd = info["hidden"] // heads
    inv = 500000.0 ** -(np.arange(0, hd, 2) / hd)
    ang = np.arange(ids.shape[1])[:, None] * inv[None]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(t: np.ndarray) -> np.ndarray:
        return t * cos + np.concatenate([-t[..., hd // 2 :], t[..., : hd // 2]], -1) * sin

    def rms(t: np.ndarray, p: str) -> np.ndarray:
        return t / np.sqrt((t**2).mean(-1, keepdims=True) + 1e-5) * w[p + ".weight"]

    x = w["embed_tokens.weight"][ids]
    cache = []
    for i in range(info["layers"]):
        p = f"layers.{i}"
        y = rms(x, p + ".input_layernorm")
        q, k, v = (y @ w[f"{p}.self_attn.{n}_proj.weight"] for n in "qkv")
        q, k, v = rope(_heads(q, heads)), rope(_heads(k, kv)), _heads(v, kv)
        cache.append((k, v))
        rep = heads // kv  # query head j reads KV head j // rep
        ctx = _attend(q, np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1))
        x = x + ctx @ w[p + ".self_attn.o_proj.weight"]
        y = rms(x, p + ".post_attention_layernorm")
        g, u = (y @ w[f"{p}.mlp.{n}_proj.weight"] for n in ("gate", "up"))
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + ".mlp.down_proj.weight"]
    return rms(x, "norm") @ w["lm_head.weight"], cache


def weights_of(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}


# -- structure at full size ------------------------------------------------------------------
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("name", "batch", "kv", "head_dim", "cache"),
    [("gpt2-decode", 8, 12, 64, 1023), ("llama3-8b-decode", 1, 8, 128, 2047)],
)
def test_full_scale_decode_is_valid_and_static(
    name: str, batch: int, kv: int, head_dim: int, cache: int, form: str
) -> None:
    model = build(name, weights="inputs", layers=2, cache_form=form)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 8 and [o.version for o in model.opset_import] == [17]
    assert dynamic_tensors(model) == []
    info = info_of(model)
    assert (info["batch"], info["cache_len"], info["cache_form"]) == (batch, cache, form)
    weights = set(json.loads(meta(model)[WEIGHT_INPUTS_KEY]))
    cache_names = [f"{i}.{t}" for i in (0, 1) for t in ("key", "value")]
    inputs = {vi.name: shape_of(vi) for vi in model.graph.input if vi.name not in weights}
    past = {
        f"past_key_values.{n}": [batch, kv, cache + (form == "static"), head_dim]
        for n in cache_names
    }
    assert inputs == {"input_ids": [batch, 1], **past}
    outputs = [(vi.name, shape_of(vi)) for vi in model.graph.output]
    assert outputs[0][0] == "logits" and outputs[0][1][:2] == [batch, 1]
    assert outputs[1:] == [(f"present.{n}", [batch, kv, cache + 1, head_dim]) for n in cache_names]
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["ScatterND"] == (4 if form == "static" else 0)
    assert ops["Softmax"] == 2 and ops["Trilu"] == ops["Where"] == 0  # one query sees every slot
    prefill = build(PREFILL[name], weights="inputs", layers=2, seq_len=8)
    order = json.loads(meta(prefill)[WEIGHT_INPUTS_KEY])
    assert json.loads(meta(model)[WEIGHT_INPUTS_KEY]) == order  # same names, same order
    shapes = {vi.name: shape_of(vi) for vi in prefill.graph.input}
    assert all(shapes[vi.name] == shape_of(vi) for vi in model.graph.input if vi.name in weights)
    assert info["params"] == info_of(prefill)["params"]


def test_list_models_describes_the_decode_steps() -> None:
    by_name = {i.name: i for i in list_models()}
    for name, prefill in PREFILL.items():
        info = by_name[name]
        assert info.params == by_name[prefill].params and info.layers == by_name[prefill].layers
        assert "decode step" in info.description and "KV cache of" in info.description
    assert by_name["llama3-8b-decode"].default_batch == 1
    assert by_name["gpt2-decode"].default_batch == 8


def test_cache_len_scales_and_stays_in_the_position_table() -> None:
    tenth = info_of(build("gpt2-decode", weights="inputs", scale=0.1, layers=1))
    assert tenth["cache_len"] == 103  # a 104-position table: cache + new token fill it
    llama = info_of(build("llama3-8b-decode", weights="inputs", scale=0.25, layers=1))
    assert llama["cache_len"] == 511
    top = build("gpt2-decode", weights="inputs", scale=0.1, layers=1, cache_len=103)
    assert info_of(top)["cache_len"] == 103


# -- numerics against the oracle and the prefill model ---------------------------------------
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", sorted(PREFILL))
def test_decode_step_matches_prefill_last_position(name: str, form: str) -> None:
    decode = small(name, cache_len=CACHE, cache_form=form)
    prefill = small(PREFILL[name], seq_len=CACHE + 1)
    onnx.checker.check_model(decode, full_check=True)
    w, info = weights_of(decode), info_of(decode)
    wp = weights_of(prefill)
    shape_only = small(name, "inputs", cache_len=CACHE, cache_form=form)
    names = json.loads(meta(shape_only)[WEIGHT_INPUTS_KEY])
    assert all(np.array_equal(w[n], wp[n]) for n in names)  # same seed, same weights

    rng = np.random.default_rng(11)
    vocab = json.loads(meta(decode)[INPUT_RANGES_KEY])["input_ids"][1] + 1
    ids = rng.integers(0, vocab, size=(BATCH, CACHE + 1), dtype=np.int64)
    logits, cache = (_gpt2 if name.startswith("gpt2") else _llama)(w, ids, info)
    (got_prefill,) = run_ort(prefill, {"input_ids": ids})
    np.testing.assert_allclose(got_prefill, logits, rtol=1e-4, atol=5e-5)  # the oracle holds

    feeds: dict[str, np.ndarray] = {"input_ids": ids[:, CACHE:]}
    for i, (k, v) in enumerate(cache):
        for kind, t in (("key", k), ("value", v)):
            past = t[:, :, :CACHE]
            if form == "static":  # slot L holds garbage the step must overwrite
                past = np.concatenate([past, rng.standard_normal(t[:, :, :1].shape)], axis=2)
            feeds[f"past_key_values.{i}.{kind}"] = past.astype(np.float32)
    outs = dict(zip([o.name for o in decode.graph.output], run_ort(decode, feeds), strict=True))
    assert outs["logits"].shape == (BATCH, 1, vocab)
    np.testing.assert_allclose(outs["logits"][:, 0], logits[:, -1], rtol=1e-4, atol=5e-5)
    np.testing.assert_allclose(outs["logits"], got_prefill[:, -1:], rtol=1e-4, atol=5e-5)
    for i, (k, v) in enumerate(cache):
        for kind, t in (("key", k), ("value", v)):
            present, past = outs[f"present.{i}.{kind}"], feeds[f"past_key_values.{i}.{kind}"]
            assert present.shape == t.shape
            np.testing.assert_array_equal(present[:, :, :CACHE], past[:, :, :CACHE])  # untouched
            np.testing.assert_allclose(present[:, :, CACHE], t[:, :, CACHE], rtol=1e-4, atol=2e-5)


def test_the_new_token_reads_the_past_slots_not_slot_l() -> None:
    model = small("llama3-8b-decode", cache_len=CACHE, cache_form="static")
    rng = np.random.default_rng(0)
    feeds = {
        vi.name: rng.standard_normal(shape_of(vi)).astype(np.float32)
        for vi in model.graph.input
        if vi.name != "input_ids"
    }
    feeds["input_ids"] = np.array([[5], [7]], dtype=np.int64)
    base = run_ort(model, feeds)[0]
    feeds["past_key_values.1.value"][:, :, 3] += 1.0  # one past token of the last layer moves
    moved = run_ort(model, feeds)[0]
    assert not np.allclose(moved, base)
    feeds["past_key_values.1.value"][:, :, CACHE] += 1.0  # slot L is overwritten: no effect
    np.testing.assert_array_equal(run_ort(model, feeds)[0], moved)


# -- bad arguments ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        (
            "gpt2-decode",
            {"cache_len": 1024},
            "`1 <= cache_len <= 1023` must hold for gpt2-decode at scale=1.0 (its 1024 "
            "positions hold the cache and the new token), but got cache_len=1024",
        ),
        (
            "llama3-8b-decode",
            {"scale": 0.1, "cache_len": 900},
            "`1 <= cache_len <= 815` must hold for llama3-8b-decode at scale=0.1",
        ),
        ("gpt2-decode", {"cache_len": 0}, "`cache_len >= 1` must hold, but got cache_len=0"),
        (
            "gpt2-decode",
            {"cache_form": "paged"},
            "cache_form must be one of static, concat, but got cache_form='paged'",
        ),
        (
            "llama3-8b",
            {"cache_len": 16},
            "llama3-8b has no KV cache (a *-decode model has), but got cache_len=16",
        ),
        ("gpt2", {"cache_form": "static"}, "gpt2 has no KV cache (a *-decode model has)"),
        ("resnet50", {"cache_len": 4}, "resnet50 has no KV cache"),
        (
            "gpt2-decode",
            {"seq_len": 8},
            "gpt2-decode decodes one new token per sequence (cache_len sets the past), but got "
            "seq_len=8",
        ),
    ],
)
def test_bad_decode_arguments_raise_zoo_error(
    name: str, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ZooError) as exc:
        build(name, weights="inputs", **kwargs)
    assert message in str(exc.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["zoo:gpt2-decode", "--cache-form", "paged"], "error: cache_form must be one of"),
        (["zoo:gpt2", "--cache-len", "16"], "error: gpt2 has no KV cache"),
        (["zoo:gpt2-decode", "--cache-len", "2000"], "error: `1 <= cache_len <= 1023`"),
    ],
)
def test_cli_rejects_bad_cache_flags_in_one_line(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["inspect", *args])
    assert res.exit_code == 1
    assert res.stderr.startswith(message) and len(res.stderr.strip().splitlines()) == 1


def test_cli_inspect_loads_a_decode_step() -> None:
    flags = ["--scale", "0.1", "--layers", "1", "--cache-len", "16", "--cache-form", "concat"]
    res = CliRunner().invoke(app, ["inspect", "zoo:llama3-8b-decode", *flags, "--json"])
    assert res.exit_code == 0, res.output
    model = build("llama3-8b-decode", weights="inputs", scale=0.1, layers=1, cache_len=16)
    assert {"ScatterND", "Softmax"} <= {op.op_type for op in load_graph(model).ops}


# -- the pipeline takes them -----------------------------------------------------------------
@pytest.mark.parametrize("form", FORMS)
def test_tune_apply_verify_a_decode_step(form: str, tmp_path: Path) -> None:
    zoo = ["--scale", "0.1", "--layers", "1", "--batch", "2", "--cache-len", "16"]
    zoo += ["--cache-form", form]
    plan, fused = str(tmp_path / "plan.json"), str(tmp_path / "fused.onnx")
    runner = CliRunner()
    res = runner.invoke(
        app,
        ["tune", "zoo:llama3-8b-decode", *zoo, "--trials", "4", "--cost", "analytic",
         "--polish", "0", "--measure-every", "2", "--storage", str(tmp_path / "s.journal"),
         "-o", plan],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    groups = json.loads(Path(plan).read_text())["groups"]
    assert any(len(g["ops"]) > 1 for g in groups)
    res = runner.invoke(app, ["apply", "zoo:llama3-8b-decode", *zoo, plan, "-o", fused])
    assert res.exit_code == 0, res.output
    outputs = [o.name for o in onnx.load(fused).graph.output]
    assert outputs == ["logits", "present.0.key", "present.0.value"]
    res = runner.invoke(app, ["verify", "zoo:llama3-8b-decode", *zoo, plan, "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert report["ok"] and report["graph_max_abs_err"] < 1e-4
