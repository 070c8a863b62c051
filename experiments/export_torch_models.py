"""Regenerate the real-exporter ONNX fixtures in ``tests/fixtures/exports``.

This script is NOT part of the package and is never imported by it.  It needs
PyPI's ``torch`` (CPU build), ``transformers``, ``onnx``, ``onnxscript`` and
``onnxruntime``, which the project's own venv deliberately does not carry.  Run
it from a separate virtualenv, e.g.::

    python3 -m venv .torchenv
    .torchenv/bin/pip install torch==2.13.0          # CPU wheel on local disk
    .torchenv/bin/pip install -c <(echo torch==2.13.0) \\
        transformers onnx onnxscript onnxruntime numpy
    .torchenv/bin/python experiments/export_torch_models.py --out tests/fixtures/exports

Every model is built from a config / plain torch code with a fixed seed (no
``from_pretrained``, no network), exported with the legacy TorchScript exporter
(``dynamo=False``) and with the dynamo exporter (``dynamo=True``), each with a
dynamic batch axis (and a dynamic sequence axis for the sequence models).  A
failing export is recorded in ``export_log.json`` in the output folder and the
script moves on; ``--check`` then runs each file in onnxruntime.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import torch
from torch import nn

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "exports"
SEED = 0
# Example shapes used while exporting.  Neither is 0/1 so that the exporters do
# not specialise the dynamic axes.
EXPORT_BATCH, EXPORT_SEQ = 2, 8
MAX_SEQ = 64  # max_position_embeddings / n_positions of the tiny transformers

# Dimension names used in the ONNX graph inputs for both exporters.
BATCH, SEQ = "batch", "seq"


# --------------------------------------------------------------------------- models


class HFEncoderWrapper(nn.Module):
    """Return only ``last_hidden_state`` so the ONNX graph has one tensor output."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return out.last_hidden_state


class HFDecoderWrapper(nn.Module):
    """Decoder-only models: no KV cache, ``last_hidden_state`` only."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False, return_dict=True
        )
        return out.last_hidden_state


class EncoderLayerWrapper(nn.Module):
    """``torch.nn.TransformerEncoderLayer`` (d_model 32, 4 heads, ffn 64, batch_first)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            d_model=32, nhead=4, dim_feedforward=64, dropout=0.1, batch_first=True
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision-style ResNet-18 (BasicBlock, [2, 2, 2, 2]) with a configurable width."""

    def __init__(self, width: int = 4, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers = []
        cin = width
        for i, cout in enumerate([width, width * 2, width * 4, width * 8]):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNReLU6(nn.Sequential):
    def __init__(self, cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1) -> None:
        super().__init__(
            nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(ConvBNReLU6(cin, hidden, k=1))
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),  # depthwise
            nn.Conv2d(hidden, cout, 1, bias=False),  # linear bottleneck
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision-style MobileNetV2 with a width multiplier that also scales the head."""

    # t (expansion), c (channels), n (repeats), s (stride): the paper's table.
    SETTINGS = (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    )

    def __init__(self, width_mult: float = 0.125, last_channel: int = 1280, classes: int = 10):
        super().__init__()
        cin = _make_divisible(32 * width_mult)
        last = _make_divisible(last_channel * width_mult)
        features: list[nn.Module] = [ConvBNReLU6(3, cin, stride=2)]
        for t, c, n, s in self.SETTINGS:
            cout = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(ConvBNReLU6(cin, last, k=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


def _init_bn(model: nn.Module) -> nn.Module:
    """Give BatchNorm non-trivial running stats so folding is observable."""
    g = torch.Generator().manual_seed(SEED + 1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(n, generator=g) * 0.1)
    return model


def build_bert(attn: str) -> nn.Module:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_SEQ,
        type_vocab_size=2,
        attn_implementation=attn,
    )
    return HFEncoderWrapper(BertModel(cfg, add_pooling_layer=False))


def build_gpt2(attn: str) -> nn.Module:
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(
        vocab_size=100,
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=MAX_SEQ,
        bos_token_id=0,  # the default 50256 lies outside the tiny vocabulary
        eos_token_id=0,
        attn_implementation=attn,
    )
    return HFDecoderWrapper(GPT2Model(cfg))


def build_llama(attn: str) -> nn.Module:
    from transformers import LlamaConfig, LlamaModel

    cfg = LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_SEQ,
        attn_implementation=attn,
    )
    return HFDecoderWrapper(LlamaModel(cfg))


# --------------------------------------------------------------------------- specs


@dataclass
class ModelSpec:
    name: str
    build: Callable[[str], nn.Module]  # argument: attn implementation ("" for non-HF)
    make_inputs: Callable[[int, int], dict[str, torch.Tensor]]  # (batch, seq) -> inputs
    seq_dims: dict[str, tuple[int, ...]]  # input name -> dynamic axes beyond batch (seq)
    hf: bool = False
    legacy_opsets: tuple[int, ...] = (14,)
    extdata: bool = False
    notes: list[str] = field(default_factory=list)


def _token_inputs(batch: int, seq: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(SEED + 2)
    ids = torch.randint(0, 100, (batch, seq), generator=g, dtype=torch.int64)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if batch > 1 and seq > 2:
        mask[1, -2:] = 0  # one padded row, so the mask path is live
    return {"input_ids": ids, "attention_mask": mask}


def _hidden_inputs(batch: int, seq: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(SEED + 2)
    return {"x": torch.randn(batch, seq, 32, generator=g)}


def _image_inputs(batch: int, _seq: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(SEED + 2)
    return {"image": torch.randn(batch, 3, 32, 32, generator=g)}


def model_specs(resnet_width: int, mobilenet_width: float) -> list[ModelSpec]:
    tok = {"input_ids": (1,), "attention_mask": (1,)}
    return [
        ModelSpec("bert", build_bert, _token_inputs, tok, hf=True, legacy_opsets=(14, 11, 9),
                  extdata=True),
        ModelSpec("gpt2", build_gpt2, _token_inputs, tok, hf=True),
        ModelSpec("llama", build_llama, _token_inputs, tok, hf=True),
        ModelSpec("encoder_layer", lambda _a: EncoderLayerWrapper(), _hidden_inputs, {"x": (1,)}),
        ModelSpec("resnet18", lambda _a: _init_bn(ResNet18(resnet_width)), _image_inputs,
                  {"image": ()}),
        ModelSpec("mobilenetv2", lambda _a: _init_bn(MobileNetV2(mobilenet_width)),
                  _image_inputs, {"image": ()}),
    ]  # fmt: skip


# --------------------------------------------------------------------------- export


def _fresh_model(spec: ModelSpec, attn: str) -> nn.Module:
    torch.manual_seed(SEED)
    model = spec.build(attn)
    model.eval()
    return model


def _legacy_dynamic_axes(spec: ModelSpec, inputs: dict[str, Any]) -> dict[str, dict[int, str]]:
    axes: dict[str, dict[int, str]] = {}
    for name in inputs:
        axes[name] = {0: BATCH, **{d: SEQ for d in spec.seq_dims[name]}}
    axes["output"] = {0: BATCH}
    if spec.seq_dims[next(iter(inputs))]:
        axes["output"][1] = SEQ
    return axes


def _dynamo_dynamic_shapes(spec: ModelSpec, inputs: dict[str, Any]) -> tuple[Any, ...]:
    """Positional ``dynamic_shapes`` (one dict per input, in the order of ``inputs``)."""
    from torch.export import Dim

    batch = Dim(BATCH, min=1, max=1024)
    seq = Dim(SEQ, min=1, max=MAX_SEQ)
    return tuple({0: batch, **{d: seq for d in spec.seq_dims[name]}} for name in inputs)


def _quiet() -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    return stack


def export_legacy(model: nn.Module, spec: ModelSpec, opset: int) -> onnx.ModelProto:
    inputs = spec.make_inputs(EXPORT_BATCH, EXPORT_SEQ)
    buf = io.BytesIO()
    # No torch.no_grad() here: under no_grad nn.TransformerEncoderLayer takes its fused
    # fast path (aten::_transformer_encoder_layer_fwd), which the legacy exporter cannot
    # export.  The legacy exporter runs the model in eval mode itself.
    with _quiet():
        torch.onnx.export(
            model,
            tuple(inputs.values()),
            buf,
            dynamo=False,
            opset_version=opset,
            input_names=list(inputs),
            output_names=["output"],
            dynamic_axes=_legacy_dynamic_axes(spec, inputs),
            do_constant_folding=True,
        )
    return onnx.load_from_string(buf.getvalue())


def export_dynamo(model: nn.Module, spec: ModelSpec) -> onnx.ModelProto:
    inputs = spec.make_inputs(EXPORT_BATCH, EXPORT_SEQ)
    with _quiet(), torch.no_grad():
        prog = torch.onnx.export(
            model,
            tuple(inputs.values()),
            dynamo=True,
            input_names=list(inputs),
            output_names=["output"],
            dynamic_shapes=_dynamo_dynamic_shapes(spec, inputs),
            external_data=False,
            optimize=True,
            verify=False,
            report=False,
            verbose=False,
        )
    assert prog is not None
    return prog.model_proto


# Debug metadata the dynamo exporter attaches to every node; dropped to keep the
# fixtures small and free of this machine's paths.  "namespace",
# "pkg.torch.onnx.name_scopes" and the rewriter's "rule_name" are kept.
_DROP_METADATA = ("pkg.torch.onnx.fx_node", "pkg.torch.onnx.class_hierarchy", "stack_trace")


def _strip_debug_info(model: onnx.ModelProto) -> None:
    """Drop doc strings and per-node debug metadata; the graph itself is untouched."""
    model.doc_string = ""
    for node in model.graph.node:
        node.doc_string = ""
        keep = [p for p in node.metadata_props if not p.key.endswith(_DROP_METADATA)]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)


def save(model: onnx.ModelProto, path: Path, extdata: bool = False) -> None:
    _strip_debug_info(model)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = path.with_name(path.name + ".data")
    if data.exists():
        data.unlink()
    if extdata:
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data.name,
            size_threshold=1024,  # tiny tensors (biases, LN) stay inline: both paths are exercised
            convert_attribute=False,
        )
        data.chmod(0o644)  # onnx creates the data file 0600
    else:
        onnx.save_model(model, str(path))


def _short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[:12])


def run_exports(out: Path, resnet_width: int, mobilenet_width: float, only: set[str]) -> dict:
    log: dict[str, Any] = {
        "versions": versions(),
        "export_shapes": {"batch": EXPORT_BATCH, "seq": EXPORT_SEQ},
        "files": {},
        "failures": {},
    }
    for spec in model_specs(resnet_width, mobilenet_width):
        if only and spec.name not in only:
            continue
        # HF models: try the default SDPA attention first, eager as fallback.
        attns = ["sdpa", "eager"] if spec.hf else [""]
        jobs: list[tuple[str, str, Callable[[nn.Module], onnx.ModelProto], bool]] = []
        for opset in spec.legacy_opsets:
            fname = f"{spec.name}_legacy_op{opset}.onnx"
            legacy = functools.partial(export_legacy, spec=spec, opset=opset)
            jobs.append((fname, f"legacy opset {opset}", legacy, False))
        if spec.extdata:
            legacy = functools.partial(export_legacy, spec=spec, opset=14)
            fname = f"{spec.name}_legacy_extdata.onnx"
            jobs.append((fname, "legacy opset 14 + external data", legacy, True))
        dynamo = functools.partial(export_dynamo, spec=spec)
        jobs.append((f"{spec.name}_dynamo.onnx", "dynamo", dynamo, False))
        for fname, how, fn, ext in jobs:
            errors = {}
            for attn in attns:
                try:
                    model = fn(_fresh_model(spec, attn))
                except Exception as exc:
                    msg = errors[attn or "default"] = _short_error(exc)
                    head = f"[fail] {fname} ({how}, attn={attn or '-'}): {msg.splitlines()[0]}"
                    print(head, file=sys.stderr)
                    if os.environ.get("EXPORT_TRACEBACK"):
                        traceback.print_exc()
                    continue
                save(model, out / fname, extdata=ext)
                opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
                entry = {
                    "exporter": how,
                    "opset": opset,
                    "attn_implementation": attn or None,
                    "producer": f"{model.producer_name} {model.producer_version}",
                }
                if errors:
                    entry["earlier_failures"] = errors
                log["files"][fname] = entry
                print(f"[ok]   {fname}: {how}, opset {opset}, attn={attn or '-'}")
                break
            else:
                log["failures"][fname] = {"exporter": how, "errors": errors}
    return log


def versions() -> dict[str, str]:
    import importlib.metadata as md

    pkgs = ["torch", "transformers", "onnx", "onnxscript", "onnx-ir", "onnxruntime", "numpy"]
    out = {"python": sys.version.split()[0]}
    for p in pkgs:
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            out[p] = "not installed"
    return out


# --------------------------------------------------------------------------- check


def check_with_ort(
    out: Path, log: dict[str, Any], specs: list[ModelSpec], batch: int = 2, seq: int = 16
) -> dict[str, dict[str, Any]]:
    """Run every fixture in onnxruntime at (batch, seq) and compare with eager torch."""
    import numpy as np
    import onnxruntime as ort

    by_name = {s.name: s for s in specs}
    results: dict[str, dict[str, Any]] = {}
    for path in sorted(out.glob("*.onnx")):
        spec = by_name[path.name.split("_legacy")[0].split("_dynamo")[0]]
        attn = log["files"].get(path.name, {}).get("attn_implementation") or ""
        inputs = spec.make_inputs(batch, seq)
        with torch.no_grad():
            ref = _fresh_model(spec, attn)(*inputs.values()).numpy()
        try:
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            feeds = {i.name: inputs[i.name].numpy() for i in sess.get_inputs()}
            (res,) = sess.run(None, feeds)
        except Exception as exc:
            entry: dict[str, Any] = {"ok": False, "error": _short_error(exc).splitlines()[0]}
            # Does it at least run at the shape it was traced with (shapes baked in)?
            small = spec.make_inputs(EXPORT_BATCH, EXPORT_SEQ)
            try:
                sess.run(None, {i.name: small[i.name].numpy() for i in sess.get_inputs()})
                entry["runs_at_export_shape"] = [EXPORT_BATCH, EXPORT_SEQ]
            except Exception:
                entry["runs_at_export_shape"] = None
            results[path.name] = entry
            continue
        err = float(np.abs(res - ref).max()) if res.shape == ref.shape else float("nan")
        results[path.name] = {
            "ok": bool(err < 1e-4),
            "shape": list(res.shape),
            "max_abs_err_vs_torch": err,
        }
    return results


# --------------------------------------------------------------------------- analysis

# Ops whose outputs depend only on tensor *shapes*: they start a shape subgraph.
_SHAPE_SOURCES = {"Shape", "Size"}


def _static_copy(model: onnx.ModelProto, dims: dict[str, int]) -> onnx.ModelProto:
    """Copy with every symbolic graph-input dim set from ``dims`` and no stored shape info."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for inp in m.graph.input:
        for d in inp.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.dim_value = dims[d.dim_param]
    del m.graph.value_info[:]
    for out in m.graph.output:
        out.type.tensor_type.ClearField("shape")
    return m


def _dim_status(vi: onnx.ValueInfoProto | None) -> str:
    if vi is None or not vi.type.HasField("tensor_type"):
        return "no_type"
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return "unknown_rank"
    if any(d.HasField("dim_param") for d in tt.shape.dim):
        return "unk_dim"  # inputs are static, so this is an inference-made unk__N
    if any(not d.HasField("dim_value") for d in tt.shape.dim):
        return "unknown_dim"
    return "static"


def shape_subgraph(model: onnx.ModelProto) -> dict[str, Any]:
    """Classify nodes by what their outputs depend on.

    * value-dependent: reachable from a graph input through something other than Shape/Size;
    * shape subgraph: not value-dependent, but reachable from a Shape/Size node (shape math,
      causal masks built from Range/ConstantOfShape, position-id slices, ...);
    * constant: depends on initializers / Constant nodes only (left unfolded by the exporter).
    ``consumers`` lists value-dependent nodes that take a shape-subgraph tensor as input, by
    ``op_type[input index]`` (Reshape[1], Expand[1], ...).
    """
    from collections import Counter

    value_dep = {i.name for i in model.graph.input}
    shape_dep: set[str] = set()
    shape_ops: Counter[str] = Counter()
    const_ops: Counter[str] = Counter()
    consumers: Counter[str] = Counter()
    for node in model.graph.node:
        ins = [i for i in node.input if i]
        outs = [o for o in node.output if o]
        if node.op_type in _SHAPE_SOURCES:
            shape_dep.update(outs)
            shape_ops[node.op_type] += 1
        elif any(i in value_dep for i in ins):
            value_dep.update(outs)
            for k, i in enumerate(node.input):
                if i in shape_dep:
                    consumers[f"{node.op_type}[{k}]"] += 1
        elif any(i in shape_dep for i in ins):
            shape_dep.update(outs)
            shape_ops[node.op_type] += 1
        else:
            const_ops[node.op_type] += 1
    return {
        "shape_subgraph_nodes": sum(shape_ops.values()),
        "shape_subgraph_ops": dict(sorted(shape_ops.items())),
        "shape_consumers": dict(sorted(consumers.items())),
        "unfolded_constant_ops": dict(sorted(const_ops.items())),
    }


def analyze(path: Path, batch: int = 2, seq: int = 16) -> dict[str, Any]:
    """Static inputs (batch, seq) -> onnx shape inference with data propagation -> counts."""
    from collections import Counter

    model = onnx.load(str(path))  # also loads external data
    static = _static_copy(model, {BATCH: batch, SEQ: seq})
    inferred = onnx.shape_inference.infer_shapes(static, strict_mode=False, data_prop=True)
    infos = {vi.name: vi for vi in inferred.graph.value_info}
    infos.update({vi.name: vi for vi in inferred.graph.output})
    status: Counter[str] = Counter()
    dynamic_by_op: Counter[str] = Counter()
    first_dynamic: list[str] = []
    for node in inferred.graph.node:
        for out in node.output:
            if not out:
                continue
            st = _dim_status(infos.get(out))
            status[st] += 1
            if st != "static":
                dynamic_by_op[node.op_type] += 1
                if len(first_dynamic) < 5:
                    first_dynamic.append(f"{node.op_type} {node.name} -> {out}: {st}")
    return {
        "nodes": len(model.graph.node),
        "initializers": len(model.graph.initializer),
        "op_histogram": dict(Counter(n.op_type for n in model.graph.node).most_common()),
        "tensors": sum(status.values()),
        "tensors_not_static": sum(v for k, v in status.items() if k != "static"),
        "status": dict(status),
        "not_static_by_producer_op": dict(dynamic_by_op.most_common()),
        "first_not_static": first_dynamic,
        **shape_subgraph(model),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--resnet-width",
        type=int,
        default=4,
        help="ResNet-18 base channels (8 gives ~0.7 MB per file)",
    )
    ap.add_argument("--mobilenet-width", type=float, default=0.125, help="MobileNetV2 multiplier")
    ap.add_argument("--only", action="append", default=[], help="export only these models")
    ap.add_argument("--check", action="store_true", help="run each file in onnxruntime")
    ap.add_argument(
        "--analyze",
        action="store_true",
        help="shape-inference and shape-subgraph statistics per file",
    )
    args = ap.parse_args(argv)

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    log = run_exports(args.out, args.resnet_width, args.mobilenet_width, set(args.only))
    log["resnet_width"], log["mobilenet_width"] = args.resnet_width, args.mobilenet_width
    if args.check:
        specs = model_specs(args.resnet_width, args.mobilenet_width)
        log["ort_check"] = check_with_ort(args.out, log, specs)
        for k, v in log["ort_check"].items():
            print(f"[ort]  {k}: {v}")
    if args.analyze:
        log["analysis"] = {p.name: analyze(p) for p in sorted(args.out.glob("*.onnx"))}
        for k, v in log["analysis"].items():
            print(
                f"[shape] {k}: {v['tensors_not_static']}/{v['tensors']} tensors not static, "
                f"{v['shape_subgraph_nodes']} shape-subgraph nodes"
            )
    if not args.only:
        (args.out / "export_log.json").write_text(json.dumps(log, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
