"""Model zoo: structure, static shapes, both weight modes, numerics, published sizes."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

from search_space.zoo import (
    INPUT_RANGES_KEY,
    WEIGHT_INPUTS_KEY,
    ZOO_KEY,
    ZooError,
    ZooInfo,
    build,
    list_models,
)

NAMES = [
    "bert-base",
    "gpt2",
    "llama3-8b",
    "mobilenetv3",
    "resnet50",
    "transformer-base",
    "vit-b16",
]
# The decode steps (KV-cache inputs) are tested in test_zoo_decode.py.
DECODE_NAMES = ["gpt2-decode", "llama3-8b-decode"]
# Full-depth Llama is built in its own test; two layers show every op kind.
FULL_KW: dict[str, dict[str, int]] = {"llama3-8b": {"layers": 2}}
SMALL_SCALE = {name: 0.1 for name in NAMES} | {"llama3-8b": 0.05}


def meta(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def shape_of(vi: onnx.ValueInfoProto) -> list[int]:
    return [d.dim_value for d in vi.type.tensor_type.shape.dim]


def weight_params(model: onnx.ModelProto) -> int:
    """Trainable parameters counted from the graph's weight inputs (BN statistics excluded)."""
    names = set(json.loads(meta(model)[WEIGHT_INPUTS_KEY]))
    return sum(
        math.prod(shape_of(vi))
        for vi in model.graph.input
        if vi.name in names and not vi.name.endswith((".running_mean", ".running_var"))
    )


def dynamic_tensors(model: onnx.ModelProto) -> list[str]:
    """Tensors whose inferred shape is missing or has a dimension without a static value."""
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    g = inferred.graph
    infos = {vi.name: vi for vi in [*g.input, *g.value_info, *g.output]}
    produced = [out for node in g.node for out in node.output]
    bad = [name for name in produced if name not in infos]
    for vi in infos.values():
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
            bad.append(vi.name)
    return bad


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs in the ranges the model declares (token ids, 0/1 masks), else N(0, 1)."""
    rng = np.random.default_rng(seed)
    ranges = json.loads(meta(model)[INPUT_RANGES_KEY])
    feeds = {}
    for vi in model.graph.input:
        shape = shape_of(vi)
        if vi.name in ranges:
            lo, hi = ranges[vi.name]
            arr = rng.integers(lo, hi + 1, size=shape, dtype=np.int64)
            if "mask" in vi.name:
                arr[:, 0] = 1  # every row keeps at least one token, like a real CLS/BOS
            feeds[vi.name] = arr
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in sess.run(None, feeds)]


# -- listing ----------------------------------------------------------------------------------
def test_list_models_names_and_fields() -> None:
    infos = list_models()
    assert [i.name for i in infos] == sorted(NAMES + DECODE_NAMES)
    assert all(isinstance(i, ZooInfo) for i in infos)
    by_name = {i.name: i for i in infos}
    assert {n for n, i in by_name.items() if i.family == "cnn"} == {"mobilenetv3", "resnet50"}
    assert by_name["llama3-8b"].layers == 32
    assert by_name["resnet50"].layers == 16  # bottleneck blocks 3+4+6+3
    assert by_name["bert-base"].default_batch == 32
    assert all(i.description and i.params > 0 for i in infos)


# -- full scale, weights as inputs --------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_full_scale_shape_only_is_valid_and_static(name: str) -> None:
    model = build(name, weights="inputs", **FULL_KW.get(name, {}))
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version in (8, 9)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert dynamic_tensors(model) == []

    node_names = [n.name for n in model.graph.node]
    assert all(node_names) and len(set(node_names)) == len(node_names)

    weights = json.loads(meta(model)[WEIGHT_INPUTS_KEY])
    inputs = {vi.name for vi in model.graph.input}
    assert set(weights) <= inputs and len(set(weights)) == len(weights)
    data_inputs = inputs - set(weights)
    assert data_inputs == set(json.loads(meta(model)[INPUT_RANGES_KEY])) | (
        {"pixel_values"} if "pixel_values" in inputs else set()
    )
    # No weight data: what remains are structural constants (rotary tables are the largest).
    const_bytes = sum(len(t.raw_data) for t in model.graph.initializer)
    assert const_bytes < 4 * 2**20
    info = json.loads(meta(model)[ZOO_KEY])
    assert info["params"] == weight_params(model)
    if not FULL_KW.get(name):
        assert {i.name: i.params for i in list_models()}[name] == info["params"]


def test_llama_full_depth_node_count_scales_by_layer() -> None:
    counts = {n: len(build("llama3-8b", weights="inputs", layers=n).graph.node) for n in (1, 2)}
    full = build("llama3-8b", weights="inputs")
    per_layer = counts[2] - counts[1]
    assert len(full.graph.node) == counts[1] + 31 * per_layer
    onnx.checker.check_model(full, full_check=True)
    ops = Counter(n.op_type for n in full.graph.node)
    assert ops["Softmax"] == 32 and ops["Sigmoid"] == 32 and ops["Trilu"] == 1
    assert ops["Expand"] == 64  # K and V of every layer go from 8 to 32 heads
    assert shape_of(full.graph.output[0]) == [1, 2048, 128256]


# -- published sizes (independent oracles) ------------------------------------------------------
PUBLISHED = {
    "bert-base": 109.5e6,  # BertModel incl. pooler (Devlin et al.: "110M")
    "gpt2": 124.4e6,  # tied lm_head (Radford et al.: "117M" was a miscount; HF: 124M)
    "resnet50": 25.6e6,  # torchvision resnet50 (BN running stats are buffers)
    "vit-b16": 86.6e6,  # Dosovitskiy et al. ViT-Base, 1000-class head
    "mobilenetv3": 5.5e6,  # Howard et al. MobileNetV3-Large 1.0: 5.4M (torchvision 5.48M)
    # Vaswani et al. base: 65M with a shared 37000-token vocabulary; ours shares 32000.
    "transformer-base": 65e6 - (37000 - 32000) * 512,
    "llama3-8b": 8.03e9,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_count_matches_published(name: str) -> None:
    info = {i.name: i for i in list_models()}[name]
    assert info.params == pytest.approx(PUBLISHED[name], rel=0.035)


def test_llama_layer_param_count_by_hand() -> None:
    h, kv, ffn = 4096, 1024, 14336
    by_hand = h * h * 2 + h * kv * 2 + 3 * h * ffn + 2 * h
    one, two = (
        weight_params(build("llama3-8b", weights="inputs", layers=n, seq_len=8)) for n in (1, 2)
    )
    assert two - one == by_hand == 218_112_000


def test_resnet50_layer_census() -> None:
    ops = Counter(n.op_type for n in build("resnet50", weights="inputs").graph.node)
    # 1 stem conv + 16 blocks x 3 convs + 4 downsample convs; BN after each; one Add per block
    assert ops["Conv"] == 53 and ops["BatchNormalization"] == 53 and ops["Add"] == 16
    assert ops["Gemm"] == 1 and ops["MaxPool"] == 1 and ops["GlobalAveragePool"] == 1


def test_exporter_patterns_present() -> None:
    bert = Counter(n.op_type for n in build("bert-base", weights="inputs").graph.node)
    assert bert["Erf"] == 12 and bert["Softmax"] == 12 and bert["LayerNormalization"] == 25
    gpt2 = Counter(n.op_type for n in build("gpt2", weights="inputs").graph.node)
    assert gpt2["LayerNormalization"] == 0 and gpt2["Where"] == 12 and gpt2["Tanh"] == 12
    assert gpt2["Split"] == 12 and gpt2["ReduceMean"] == 2 * 25
    mbv3 = build("mobilenetv3", weights="inputs")
    depthwise = [
        n
        for n in mbv3.graph.node
        if n.op_type == "Conv" and any(a.name == "group" and a.i > 1 for a in n.attribute)
    ]
    assert len(depthwise) == 15
    ops = Counter(n.op_type for n in mbv3.graph.node)
    assert ops["HardSigmoid"] == 8 and ops["HardSwish"] > 0 and ops["BatchNormalization"] > 40


# -- small scale, random weights, run -------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_small_random_model_runs_in_onnxruntime(name: str) -> None:
    model = build(name, scale=SMALL_SCALE[name], seed=1)
    onnx.checker.check_model(model, full_check=True)
    assert WEIGHT_INPUTS_KEY not in meta(model)
    outs = run_ort(model, feeds_for(model))
    assert len(outs) == len(model.graph.output)
    for out, vi in zip(outs, model.graph.output, strict=True):
        assert list(out.shape) == shape_of(vi)
        assert np.isfinite(out).all()
        assert out.std() > 0


@pytest.mark.parametrize("name", ["bert-base", "gpt2", "transformer-base", "llama3-8b"])
def test_overrides_set_batch_and_seq(name: str) -> None:
    model = build(name, scale=SMALL_SCALE[name], layers=1, batch=2, seq_len=8)
    outs = run_ort(model, feeds_for(model))
    assert outs[0].shape[:2] == (2, 8)
    assert json.loads(meta(model)[ZOO_KEY])["layers"] == 1


@pytest.mark.parametrize(("name", "layers"), [("resnet50", 8), ("mobilenetv3", 9)])
def test_cnn_block_override_runs(name: str, layers: int) -> None:
    model = build(name, scale=0.1, layers=layers, batch=2)
    assert json.loads(meta(model)[ZOO_KEY])["layers"] == layers
    (out,) = run_ort(model, feeds_for(model))
    assert out.shape[0] == 2 and np.isfinite(out).all()


def test_scaling_keeps_head_dim_and_channels_aligned() -> None:
    info = json.loads(meta(build("bert-base", weights="inputs", scale=0.5))[ZOO_KEY])
    assert (info["hidden"], info["heads"], info["layers"], info["seq_len"]) == (384, 6, 6, 64)
    llama = json.loads(meta(build("llama3-8b", weights="inputs", scale=0.25))[ZOO_KEY])
    assert llama["heads"] % llama["kv_heads"] == 0 and llama["hidden"] % 8 == 0
    for scale in (0.01, 0.3, 0.7):
        for name in NAMES:
            model = build(name, weights="inputs", scale=scale)
            for vi in model.graph.input:
                if len(shape_of(vi)) == 4 and vi.name != "pixel_values":
                    assert shape_of(vi)[0] % 8 == 0, (name, scale, vi.name)


def test_random_weights_are_seeded() -> None:
    def blob(seed: int) -> bytes:
        model = build("resnet50", scale=0.05, seed=seed)
        return b"".join(t.raw_data for t in model.graph.initializer)

    assert blob(3) == blob(3) != blob(4)


def test_bert_onnxruntime_matches_reference_evaluator() -> None:
    model = build("bert-base", scale=0.1, layers=2, batch=2, seq_len=16, seed=5)
    feeds = feeds_for(model, seed=7)
    feeds["attention_mask"][1, 10:] = 0  # padding exercised
    got = run_ort(model, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, np.asarray(w), atol=1e-4, rtol=1e-4)


def test_padding_mask_hides_padded_tokens() -> None:
    model = build("bert-base", scale=0.1, layers=1, batch=1, seq_len=8)
    feeds = feeds_for(model)
    feeds["attention_mask"][:] = 1
    feeds["attention_mask"][0, 6:] = 0
    base = run_ort(model, feeds)[0]
    feeds["input_ids"][0, 6:] = (feeds["input_ids"][0, 6:] + 1) % 100
    moved = run_ort(model, feeds)[0]
    np.testing.assert_allclose(base[0, :6], moved[0, :6], atol=1e-5)


def test_causal_mask_hides_future_tokens() -> None:
    for name in ("gpt2", "llama3-8b"):
        model = build(name, scale=0.05, layers=1, seq_len=8)
        feeds = feeds_for(model)
        base = run_ort(model, feeds)[0]
        feeds["input_ids"][:, 5:] = (feeds["input_ids"][:, 5:] + 1) % 100
        moved = run_ort(model, feeds)[0]
        np.testing.assert_allclose(base[:, :5], moved[:, :5], atol=1e-5)
        assert not np.allclose(base[:, 5:], moved[:, 5:])


# -- bad arguments ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"name": "foo"},
            "unknown zoo model 'foo'; available: bert-base, gpt2, gpt2-decode, llama3-8b",
        ),
        ({"scale": 2.0}, "`0 < scale <= 1` must hold, but got scale=2.0"),
        ({"scale": 0.0}, "`0 < scale <= 1` must hold, but got scale=0.0"),
        ({"weights": "zeros"}, "weights must be one of random, inputs, but got weights='zeros'"),
        ({"layers": 13}, "`1 <= layers <= 12` must hold for bert-base, but got layers=13"),
        ({"layers": 0}, "`1 <= layers <= 12` must hold for bert-base, but got layers=0"),
        ({"batch": 0}, "`batch >= 1` must hold, but got batch=0"),
        ({"seq_len": 600}, "`1 <= seq_len <= 512` must hold for bert-base at scale=1.0"),
        ({"name": "resnet50", "seq_len": 8}, "resnet50 has no sequence axis"),
        ({"name": "resnet50", "layers": 3}, "`4 <= layers <= 16` must hold for resnet50"),
    ],
)
def test_bad_arguments_raise_zoo_error(kwargs: dict[str, object], message: str) -> None:
    args = {"name": "bert-base", "weights": "inputs"} | kwargs
    name = str(args.pop("name"))
    with pytest.raises(ZooError) as exc:
        build(name, **args)  # type: ignore[arg-type]
    assert message in str(exc.value)
    assert isinstance(exc.value, ValueError)


def test_random_weights_too_large_for_protobuf_is_a_clear_error() -> None:
    with pytest.raises(ZooError, match=r"needs \d+\.\d GiB .*use weights='inputs'"):
        build("llama3-8b", layers=2)


@pytest.mark.parametrize("name", ["resnet50", "mobilenetv3"])
def test_full_scale_cnn_with_random_weights_runs(name: str) -> None:
    model = build(name, batch=1)
    onnx.checker.check_model(model, full_check=True)
    (out,) = run_ort(model, feeds_for(model))
    assert out.shape == (1, 1000) and np.isfinite(out).all() and out.std() > 0
