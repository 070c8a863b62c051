"""Convolutional networks: ResNet-50 and MobileNetV3-Large (torchvision structure, BN kept)."""

from __future__ import annotations

import onnx

from search_space.zoo.builder import BuildArgs, Builder, ModelSpec, make_divisible, scaled
from search_space.zoo.layers import gemm


def conv(
    b: Builder,
    x: str,
    c_in: int,
    c_out: int,
    k: int,
    name: str,
    *,
    stride: int = 1,
    groups: int = 1,
    bias: bool = False,
) -> str:
    """A square Conv with 'same'-style padding (k // 2), weight [c_out, c_in/groups, k, k]."""
    fan_in = c_in // groups * k * k
    with b.scope(name):
        inputs = [x, b.weight("weight", [c_out, c_in // groups, k, k], std=fan_in**-0.5)]
        if bias:
            inputs.append(b.weight("bias", [c_out]))
        return b.op(
            "Conv",
            inputs,
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[k // 2] * 4,
            group=groups,
        )


def batch_norm(b: Builder, x: str, c: int, name: str, eps: float) -> str:
    """Inference BatchNormalization; running statistics are weights but not parameters."""
    with b.scope(name):
        inputs = [
            x,
            b.weight("weight", [c], init="one"),
            b.weight("bias", [c]),
            b.weight("running_mean", [c], trainable=False),
            b.weight("running_var", [c], init="var", trainable=False),
        ]
        return b.op("BatchNormalization", inputs, epsilon=eps)


def _keep_blocks(stages: list[list[int]], essential: set[int], total: int) -> set[int]:
    """Block indices to keep: every essential block, then repeats by their rank in a stage."""
    repeats = sorted(
        (rank, idx) for stage in stages for rank, idx in enumerate(stage) if idx not in essential
    )
    return essential | {idx for _, idx in repeats[: total - len(essential)]}


# -- ResNet-50 ------------------------------------------------------------------------------
def _bottleneck(
    b: Builder, x: str, c_in: int, width: int, stride: int, name: str
) -> tuple[str, int]:
    c_out = 4 * width
    with b.scope(name):
        y = b.op("Relu", [batch_norm(b, conv(b, x, c_in, width, 1, "conv1"), width, "bn1", 1e-5)])
        y = conv(b, y, width, width, 3, "conv2", stride=stride)
        y = b.op("Relu", [batch_norm(b, y, width, "bn2", 1e-5)])
        y = batch_norm(b, conv(b, y, width, c_out, 1, "conv3"), c_out, "bn3", 1e-5)
        if stride != 1 or c_in != c_out:
            x = conv(b, x, c_in, c_out, 1, "downsample.0", stride=stride)
            x = batch_norm(b, x, c_out, "downsample.1", 1e-5)
        return b.op("Relu", [b.op("Add", [y, x])]), c_out


def build_resnet50(args: BuildArgs) -> onnx.ModelProto:
    """ResNet-50 v1.5 (stride on the 3x3 conv), Conv / BatchNormalization / Relu unfolded."""
    s = args.scale
    depth = [3, 4, 6, 3]
    starts = [sum(depth[:i]) for i in range(4)]
    stages = [list(range(st, st + n)) for st, n in zip(starts, depth, strict=True)]
    layers = args.pick_layers(16, minimum=4)
    keep = _keep_blocks(stages, set(starts), layers)
    widths = [scaled(w, s, multiple=8, minimum=8) for w in (64, 128, 256, 512)]
    stem = scaled(64, s, multiple=8, minimum=8)
    classes = scaled(1000, s, minimum=10)
    img = scaled(224, s, multiple=32, minimum=32)
    batch = args.pick_batch(32)

    b = Builder(args)
    x = b.input("pixel_values", [batch, 3, img, img])
    x = b.op("Relu", [batch_norm(b, conv(b, x, 3, stem, 7, "conv1", stride=2), stem, "bn1", 1e-5)])
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = stem
    for si, stage in enumerate(stages):
        kept = [idx for idx in stage if idx in keep]
        for j, _ in enumerate(kept):
            stride = 2 if j == 0 and si > 0 else 1
            x, c = _bottleneck(b, x, c, widths[si], stride, f"layer{si + 1}.{j}")
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    b.output(gemm(b, x, c, classes, "fc"), "logits", [batch, classes])
    extra = {"layers": len(keep), "batch": batch, "image": img}
    return b.model(family="cnn", doc="ResNet-50 v1.5 image classifier", extra=extra)


# -- MobileNetV3-Large ----------------------------------------------------------------------
# kernel, expanded, out, squeeze-excite, activation (RE = ReLU, HS = hardswish), stride
_MBV3_LARGE = [
    (3, 16, 16, False, "RE", 1),
    (3, 64, 24, False, "RE", 2),
    (3, 72, 24, False, "RE", 1),
    (5, 72, 40, True, "RE", 2),
    (5, 120, 40, True, "RE", 1),
    (5, 120, 40, True, "RE", 1),
    (3, 240, 80, False, "HS", 2),
    (3, 200, 80, False, "HS", 1),
    (3, 184, 80, False, "HS", 1),
    (3, 184, 80, False, "HS", 1),
    (3, 480, 112, True, "HS", 1),
    (3, 672, 112, True, "HS", 1),
    (5, 672, 160, True, "HS", 2),
    (5, 960, 160, True, "HS", 1),
    (5, 960, 160, True, "HS", 1),
]


def _act(b: Builder, x: str, kind: str) -> str:
    return b.op("Relu" if kind == "RE" else "HardSwish", [x])


def _squeeze_excite(b: Builder, x: str, c: int) -> str:
    sq = make_divisible(c // 4, 8)
    with b.scope("se"):
        p = b.op("GlobalAveragePool", [x])
        p = b.op("Relu", [conv(b, p, c, sq, 1, "fc1", bias=True)])
        p = b.op("HardSigmoid", [conv(b, p, sq, c, 1, "fc2", bias=True)], alpha=1.0 / 6, beta=0.5)
        return b.op("Mul", [p, x])


def _inverted_residual(
    b: Builder, x: str, c_in: int, cfg: tuple[int, int, int, bool, str, int], s: float
) -> tuple[str, int]:
    k, exp, out, se, act, stride = cfg
    exp, out = make_divisible(exp * s), make_divisible(out * s)
    eps = 1e-3
    y = x
    if exp != c_in:
        y = _act(
            b, batch_norm(b, conv(b, y, c_in, exp, 1, "expand.conv"), exp, "expand.bn", eps), act
        )
    y = conv(b, y, exp, exp, k, "depthwise.conv", stride=stride, groups=exp)
    y = _act(b, batch_norm(b, y, exp, "depthwise.bn", eps), act)
    if se:
        y = _squeeze_excite(b, y, exp)
    y = batch_norm(b, conv(b, y, exp, out, 1, "project.conv"), out, "project.bn", eps)
    if stride == 1 and c_in == out:
        y = b.op("Add", [y, x])
    return y, out


def build_mobilenetv3(args: BuildArgs) -> onnx.ModelProto:
    """MobileNetV3-Large: depthwise convs, hardswish, squeeze-excite, BatchNormalization."""
    s = args.scale
    stages: list[list[int]] = []
    for i, cfg in enumerate(_MBV3_LARGE):
        if i == 0 or cfg[2] != _MBV3_LARGE[i - 1][2]:
            stages.append([])
        stages[-1].append(i)
    c_prev = 16
    essential = set()
    for i, cfg in enumerate(_MBV3_LARGE):
        if cfg[2] != c_prev or cfg[5] != 1:
            essential.add(i)
        c_prev = cfg[2]
    keep = _keep_blocks(stages, essential, args.pick_layers(15, minimum=len(essential)))
    classes = scaled(1000, s, minimum=10)
    img = scaled(224, s, multiple=32, minimum=32)
    batch = args.pick_batch(32)

    b = Builder(args)
    x = b.input("pixel_values", [batch, 3, img, img])
    c = make_divisible(16 * s)
    with b.scope("features.0"):
        x = conv(b, x, 3, c, 3, "conv", stride=2)
        x = _act(b, batch_norm(b, x, c, "bn", 1e-3), "HS")
    for i, cfg in enumerate(_MBV3_LARGE):
        if i in keep:
            with b.scope(f"features.{i + 1}"):
                x, c = _inverted_residual(b, x, c, cfg, s)
    last = 6 * c
    with b.scope(f"features.{len(_MBV3_LARGE) + 1}"):
        x = _act(b, batch_norm(b, conv(b, x, c, last, 1, "conv"), last, "bn", 1e-3), "HS")
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    hidden = make_divisible(1280 * s)
    with b.scope("classifier"):
        x = b.op("HardSwish", [gemm(b, x, last, hidden, "0")])
        logits = gemm(b, x, hidden, classes, "3")
    b.output(logits, "logits", [batch, classes])
    extra = {"layers": len(keep), "batch": batch, "image": img}
    return b.model(family="cnn", doc="MobileNetV3-Large image classifier", extra=extra)


SPECS = [
    ModelSpec(
        "mobilenetv3",
        "cnn",
        "MobileNetV3-Large: 224x224, 15 inverted-residual blocks (depthwise, SE, hardswish)",
        default_batch=32,
        default_layers=15,
        min_layers=5,
        has_seq=False,
        build=build_mobilenetv3,
    ),
    ModelSpec(
        "resnet50",
        "cnn",
        "ResNet-50 v1.5: 224x224, bottleneck stages 3-4-6-3, Conv/BN/ReLU unfolded",
        default_batch=32,
        default_layers=16,
        min_layers=4,
        has_seq=False,
        build=build_resnet50,
    ),
]
