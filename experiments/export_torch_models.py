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

The tiny GPT-2 and Llama are also exported as one decode step with HF's dynamic
KV cache (``gpt2_decode``, ``llama_decode``) into the ``decode/`` subfolder, with
its own ``export_log.json``: ``input_ids [batch, 1]``, ``attention_mask [batch,
past + 1]``, Llama's ``position_ids [batch, 1]`` and ``past_key_values.{i}.key``
/ ``.value [batch, kv_heads, past, head_dim]`` in; ``logits`` and
``present.{i}.key`` / ``.value [batch, kv_heads, past + 1, head_dim]`` out.
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


def gpt2_config(attn: str) -> Any:
    """The tiny GPT-2 of both the prefill and the decode-step fixtures."""
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=100,
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=MAX_SEQ,
        bos_token_id=0,  # the default 50256 lies outside the tiny vocabulary
        eos_token_id=0,
        attn_implementation=attn,
    )


def llama_config(attn: str) -> Any:
    """The tiny Llama (grouped-query: 4 heads on 2 KV heads) of both kinds of fixture."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_SEQ,
        attn_implementation=attn,
    )


def build_gpt2(attn: str) -> nn.Module:
    from transformers import GPT2Model

    return HFDecoderWrapper(GPT2Model(gpt2_config(attn)))


def build_llama(attn: str) -> nn.Module:
    from transformers import LlamaModel

    return HFDecoderWrapper(LlamaModel(llama_config(attn)))


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


def _fresh_model(spec: ModelSpec | DecodeSpec, attn: str) -> nn.Module:
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
    axes = _legacy_dynamic_axes(spec, inputs)
    return _legacy_export(model, inputs, ["output"], axes, opset)


def export_dynamo(model: nn.Module, spec: ModelSpec) -> onnx.ModelProto:
    inputs = spec.make_inputs(EXPORT_BATCH, EXPORT_SEQ)
    return _dynamo_export(model, inputs, ["output"], _dynamo_dynamic_shapes(spec, inputs))


def _legacy_export(
    model: nn.Module,
    inputs: dict[str, torch.Tensor],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    opset: int,
) -> onnx.ModelProto:
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
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            do_constant_folding=True,
        )
    return onnx.load_from_string(buf.getvalue())


def _dynamo_export(
    model: nn.Module,
    inputs: dict[str, torch.Tensor],
    output_names: list[str],
    dynamic_shapes: tuple[Any, ...],
) -> onnx.ModelProto:
    with _quiet(), torch.no_grad():
        prog = torch.onnx.export(
            model,
            tuple(inputs.values()),
            dynamo=True,
            input_names=list(inputs),
            output_names=output_names,
            dynamic_shapes=dynamic_shapes,
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


Job = tuple[str, str, Callable[[nn.Module], onnx.ModelProto], bool]  # file, how, export, extdata


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
        jobs: list[Job] = []
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
        _run_jobs(out, jobs, attns, functools.partial(_fresh_model, spec), log)
    return log


def _run_jobs(
    out: Path, jobs: list[Job], attns: list[str], fresh: Callable[[str], nn.Module], log: dict
) -> None:
    """Run each export with the first attention implementation that works; log the rest."""
    for fname, how, fn, ext in jobs:
        errors = {}
        for attn in attns:
            try:
                model = fn(fresh(attn))
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


# --------------------------------------------------------------------------- decode steps

# A subfolder: the prefill tests take every exports/*.onnx and give it [batch, seq] inputs.
DECODE_DIR = "decode"
EXPORT_PAST = EXPORT_SEQ  # past length of the example inputs (neither 0 nor 1, see above)
PAST = "past"
# The mask and present length.  The dynamo exporter names the derived Dim ``past + 1`` so; the
# legacy exporter takes any name, and optimum's ONNX configs give it the same form.
TOTAL = "past + 1"
DECODE_CHECK_SIZES = ((2, 16), (1, 1), (3, MAX_SEQ - 1))  # (batch, past); past + 1 <= MAX_SEQ


class HFDecodeStepWrapper(nn.Module):
    """One decode step of a ``*ForCausalLM`` over flat tensors, through HF's ``DynamicCache``.

    ``forward(input_ids, attention_mask, [position_ids,] past.0.key, past.0.value, ...)``
    returns ``(logits, present.0.key, present.0.value, ...)``.  The exporters take tensors, not
    a Cache object, so the cache is built here from the flat past; the dynamic cache appends
    the new token's key/value row to it along the sequence axis (past ++ new).
    """

    def __init__(self, model: nn.Module, layers: int, position_ids: bool) -> None:
        super().__init__()
        self.model, self.layers, self.position_ids = model, layers, position_ids

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *rest: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        from transformers import DynamicCache

        position_ids, past = (rest[0], rest[1:]) if self.position_ids else (None, rest)
        cache = DynamicCache()
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=True,
            return_dict=True,
        )
        present = [t for layer in out.cache.layers for t in (layer.keys, layer.values)]
        return (out.logits, *present)


@dataclass(frozen=True)
class DecodeSpec:
    """A decode-step fixture: the prefill model's config and seed, with its LM head."""

    name: str
    config: Callable[[str], Any]  # attn implementation -> HF config
    causal_lm: str  # the transformers *ForCausalLM class
    kv_heads: int
    head_dim: int
    position_ids: bool  # an input (Llama: rotary positions) or derived from the past length

    def build(self, attn: str) -> nn.Module:
        import transformers

        cfg = self.config(attn)
        lm = getattr(transformers, self.causal_lm)(cfg)
        return HFDecodeStepWrapper(lm, cfg.num_hidden_layers, self.position_ids)

    @property
    def layers(self) -> int:
        return int(self.config("eager").num_hidden_layers)

    def past_names(self) -> list[str]:
        return [f"past_key_values.{i}.{t}" for i in range(self.layers) for t in ("key", "value")]

    def output_names(self) -> list[str]:
        return ["logits", *(n.replace("past_key_values", "present") for n in self.past_names())]

    def make_inputs(self, batch: int, past: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(SEED + 3)
        ids = torch.randint(0, 100, (batch, 1), generator=g, dtype=torch.int64)
        mask = torch.ones(batch, past + 1, dtype=torch.int64)
        if batch > 1 and past > 2:
            mask[1, :2] = 0  # one left-padded row (batched generation pads left): mask path live
        inputs = {"input_ids": ids, "attention_mask": mask}
        if self.position_ids:  # generate()'s rule: the count of attended tokens before this one
            inputs["position_ids"] = mask.sum(-1, keepdim=True) - 1
        for name in self.past_names():
            shape = (batch, self.kv_heads, past, self.head_dim)
            inputs[name] = torch.randn(*shape, generator=g)
        return inputs


DECODE_SPECS = (
    DecodeSpec("gpt2_decode", gpt2_config, "GPT2LMHeadModel", 2, 16, position_ids=False),
    DecodeSpec("llama_decode", llama_config, "LlamaForCausalLM", 2, 8, position_ids=True),
)


def _decode_legacy_axes(spec: DecodeSpec, inputs: dict[str, Any]) -> dict[str, dict[int, str]]:
    axes: dict[str, dict[int, str]] = {name: {0: BATCH} for name in inputs}
    axes["attention_mask"][1] = TOTAL
    axes.update({name: {0: BATCH, 2: PAST} for name in spec.past_names()})
    logits, *present = spec.output_names()
    axes[logits] = {0: BATCH}
    axes.update({name: {0: BATCH, 2: TOTAL} for name in present})
    return axes


def _decode_dynamic_shapes(spec: DecodeSpec, inputs: dict[str, Any]) -> tuple[Any, ...]:
    """``(input_ids, attention_mask, rest)``: the wrapper's ``*rest`` is one nested tuple."""
    from torch.export import Dim

    batch = Dim(BATCH, min=1, max=1024)
    past = Dim(PAST, min=1, max=MAX_SEQ - 1)
    rest = [{0: batch, 2: past} if n in spec.past_names() else {0: batch} for n in inputs]
    return ({0: batch}, {0: batch, 1: past + 1}, tuple(rest[2:]))


def export_decode_legacy(model: nn.Module, spec: DecodeSpec, opset: int) -> onnx.ModelProto:
    inputs = spec.make_inputs(EXPORT_BATCH, EXPORT_PAST)
    axes = _decode_legacy_axes(spec, inputs)
    return _legacy_export(model, inputs, spec.output_names(), axes, opset)


def export_decode_dynamo(model: nn.Module, spec: DecodeSpec) -> onnx.ModelProto:
    inputs = spec.make_inputs(EXPORT_BATCH, EXPORT_PAST)
    shapes = _decode_dynamic_shapes(spec, inputs)
    return _dynamo_export(model, inputs, spec.output_names(), shapes)


def run_decode_exports(out: Path, only: set[str]) -> dict:
    """Both exporters on each decode step, into ``out`` (the decode subfolder)."""
    log: dict[str, Any] = {
        "versions": versions(),
        "export_shapes": {"batch": EXPORT_BATCH, "past": EXPORT_PAST},
        "files": {},
        "failures": {},
    }
    for spec in DECODE_SPECS:
        if only and spec.name not in only:
            continue
        legacy = functools.partial(export_decode_legacy, spec=spec, opset=14)
        dynamo = functools.partial(export_decode_dynamo, spec=spec)
        jobs: list[Job] = [
            (f"{spec.name}_legacy_op14.onnx", "legacy opset 14", legacy, False),
            (f"{spec.name}_dynamo.onnx", "dynamo", dynamo, False),
        ]
        _run_jobs(out, jobs, ["sdpa", "eager"], functools.partial(_fresh_model, spec), log)
    return log


def check_decode_with_ort(out: Path, log: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each decode step in onnxruntime vs eager torch; present must start with the past."""
    import numpy as np
    import onnxruntime as ort

    by_name = {s.name: s for s in DECODE_SPECS}
    results: dict[str, dict[str, Any]] = {}
    for path in sorted(out.glob("*.onnx")):
        spec = by_name[path.name.split("_legacy")[0].split("_dynamo")[0]]
        attn = log["files"].get(path.name, {}).get("attn_implementation") or ""
        model = _fresh_model(spec, attn)
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        entry: dict[str, Any] = {"ok": True}
        for batch, past in DECODE_CHECK_SIZES:
            inputs = spec.make_inputs(batch, past)
            with torch.no_grad():
                ref = [t.numpy() for t in model(*inputs.values())]
            try:
                got = sess.run(None, {k: v.numpy() for k, v in inputs.items()})
            except Exception as exc:
                entry.update(
                    ok=False, error=f"{batch}x{past}: " + _short_error(exc).splitlines()[0]
                )
                break
            err = max(float(np.abs(g - r).max()) for g, r in zip(got, ref, strict=True))
            keeps = all(
                np.array_equal(g[:, :, :past], inputs[n].numpy())
                for g, n in zip(got[1:], spec.past_names(), strict=True)
            )
            entry[f"{batch}x{past}"] = {"max_abs_err_vs_torch": err, "present_keeps_past": keeps}
            entry["ok"] = entry["ok"] and err < 1e-4 and keeps
        results[path.name] = entry
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


def analyze(path: Path, dims: dict[str, int] | None = None) -> dict[str, Any]:
    """Static inputs (``dims``: batch 2, seq 16) -> onnx shape inference with data propagation."""
    from collections import Counter

    model = onnx.load(str(path))  # also loads external data
    static = _static_copy(model, dims or {BATCH: 2, SEQ: 16})
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
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        help="export only these models (bert, ..., gpt2_decode, llama_decode)",
    )
    ap.add_argument("--check", action="store_true", help="run each file in onnxruntime")
    ap.add_argument(
        "--analyze",
        action="store_true",
        help="shape-inference and shape-subgraph statistics per file",
    )
    args = ap.parse_args(argv)

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    only = set(args.only)
    decode = {s.name for s in DECODE_SPECS}
    if not only or only - decode:
        _prefill(args, only - decode)
    if not only or only & decode:
        _decode(args, only & decode, write_log=not only or not decode - only)
    return 0


def _prefill(args: argparse.Namespace, only: set[str]) -> None:
    log = run_exports(args.out, args.resnet_width, args.mobilenet_width, only)
    log["resnet_width"], log["mobilenet_width"] = args.resnet_width, args.mobilenet_width
    if args.check:
        specs = model_specs(args.resnet_width, args.mobilenet_width)
        log["ort_check"] = check_with_ort(args.out, log, specs)
        for k, v in log["ort_check"].items():
            print(f"[ort]  {k}: {v}")
    if args.analyze:
        log["analysis"] = _analysis(args.out, {BATCH: 2, SEQ: 16})
    if not only:
        _write_log(args.out / "export_log.json", log)


def _decode(args: argparse.Namespace, only: set[str], write_log: bool) -> None:
    out = args.out / DECODE_DIR
    log = run_decode_exports(out, only)
    if args.check:
        log["ort_check"] = check_decode_with_ort(out, log)
        for k, v in log["ort_check"].items():
            print(f"[ort]  {DECODE_DIR}/{k}: {v}")
    if args.analyze:
        log["analysis"] = _analysis(out, {BATCH: 2, PAST: 16, TOTAL: 17})
    if write_log:
        _write_log(out / "export_log.json", log)


def _analysis(out: Path, dims: dict[str, int]) -> dict[str, Any]:
    analysis = {p.name: analyze(p, dims) for p in sorted(out.glob("*.onnx"))}
    for k, v in analysis.items():
        print(
            f"[shape] {k}: {v['tensors_not_static']}/{v['tensors']} tensors not static, "
            f"{v['shape_subgraph_nodes']} shape-subgraph nodes"
        )
    return analysis


def _write_log(path: Path, log: dict[str, Any]) -> None:
    path.write_text(json.dumps(log, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
