"""The built-in fusion rules: a data table of named patterns with priorities (docs/fusion.md).

Each row is ``(name, priority, presets, kind, pattern, description)``; the pattern language is
documented in :mod:`search_space.rules.pattern`. Patterns follow what the torch exporters
(legacy TorchScript and dynamo) and the model zoo actually write. Higher priority wins when
matches overlap; every built-in priority is distinct, so built-ins never conflict with each other.
Larger, more specific patterns rank above the patterns they contain.
"""

from __future__ import annotations

__all__ = ["TABLE"]

T, C = ("transformer",), ("cnn",)
TC = ("transformer", "cnn")

# Activations FixPipe or a vector epilogue applies to a matmul/conv output tile.
ACT = (
    "Relu|LeakyRelu|PRelu|Elu|Selu|Celu|Clip|Sigmoid|HardSigmoid|HardSwish|Tanh|Gelu|Softplus|Mish"
)
BIAS = "Add[bias]?"
# x * (1 + erf(x / sqrt 2)) * 0.5, the 0.5 applied first or last.
GELU_ERF = "Div[scalar]|Mul[scalar] > Erf > Add[scalar] > Mul<Mul[scalar]? > Mul[scalar]?"
# 0.5x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), x^3 as Pow or as x*x*x.
GELU_TANH = (
    "Pow[scalar]|Mul > Mul? > Mul[scalar] > Add > Mul[scalar] > Tanh > Add[scalar]"
    " > Mul<Mul[scalar]? > Mul[scalar]?"
)
# mean, centre, variance, eps, sqrt, divide (or reciprocal and multiply), affine.
LAYERNORM = (
    "ReduceMean > Sub > Pow[scalar]|Mul > ReduceMean > Add[scalar] > Sqrt > Div|Reciprocal"
    " > Mul? > Mul[const]? > Add[const]?"
)
RMSNORM = "Pow[scalar]|Mul > ReduceMean > Add[scalar] > Sqrt > Div|Reciprocal > Mul? > Mul[const]?"
# QK^T (Q and K each optionally head-transposed and pre-scaled, K optionally expanded for
# grouped-query attention) -> scale -> mask -> softmax -> NaN guard -> PV (V optionally expanded).
ATTENTION = (
    "MatMul<(Transpose? > Mul[scalar]?)<(Expand? > Transpose? > Mul[scalar]?)"
    " > Div[scalar]|Mul[scalar]? > Where? > Add? > Cast? > Softmax > Cast? > IsNaN? > Where?"
    " > MatMul<(Transpose? > Expand?)"
)
CONV = "Conv > BatchNormalization?"

TABLE: tuple[tuple[str, int, tuple[str, ...], str, str, str], ...] = (
    # -- transformer --------------------------------------------------------------------------
    (
        "attention",
        100,
        T,
        "chain",
        ATTENTION,
        "QK^T, scale, mask, softmax (with its IsNaN/Where guard) and PV as one attention kernel",
    ),
    (
        "swiglu",
        95,
        T,
        "chain",
        f"MatMul|Gemm > {BIAS} > Sigmoid > Mul[inner] > Mul<(MatMul|Gemm > {BIAS})",
        "gate and up projections as one wide matmul with SiLU(gate) * up as its epilogue",
    ),
    (
        "matmul_bias_gelu_erf",
        92,
        T,
        "chain",
        f"MatMul|Gemm > {BIAS} > {GELU_ERF}",
        "matmul + bias + exact (Erf) GELU",
    ),
    (
        "matmul_bias_gelu_tanh",
        91,
        T,
        "chain",
        f"MatMul|Gemm > {BIAS} > {GELU_TANH}",
        "matmul + bias + tanh-approximated GELU",
    ),
    (
        "matmul_bias_silu",
        90,
        T,
        "chain",
        f"MatMul|Gemm > {BIAS} > Sigmoid > Mul[inner]",
        "matmul + bias + SiLU (x * sigmoid(x))",
    ),
    (
        "add_layernorm_decomposed",
        88,
        T,
        "chain",
        f"Add > {LAYERNORM}",
        "residual Add + LayerNorm written as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add",
    ),
    (
        "add_rmsnorm",
        87,
        T,
        "chain",
        f"Add > {RMSNORM}",
        "residual Add + RMSNorm written as Pow/ReduceMean/Add/Sqrt/Div|Reciprocal/Mul",
    ),
    (
        "add_layernorm",
        86,
        T,
        "chain",
        "Add > LayerNormalization",
        "residual Add + LayerNormalization op",
    ),
    (
        "layernorm_decomposed",
        84,
        T,
        "chain",
        LAYERNORM,
        "LayerNorm written as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add",
    ),
    (
        "rmsnorm",
        83,
        T,
        "chain",
        RMSNORM,
        "RMSNorm written as Pow/ReduceMean/Add/Sqrt/Div|Reciprocal/Mul",
    ),
    (
        "rotary",
        80,
        T,
        "chain",
        "Slice|Split > Neg > Concat<Slice? > Mul > Add<Mul",
        "rotary embedding: x * cos + rotate_half(x) * sin",
    ),
    ("gelu_erf", 76, T, "chain", GELU_ERF, "exact GELU in its Erf form"),
    ("gelu_tanh", 75, T, "chain", GELU_TANH, "tanh-approximated GELU"),
    (
        "qkv_projection",
        72,
        T,
        "siblings",
        f"(MatMul|Gemm > {BIAS}){{3}}",
        "Q, K and V projections of one activation as one wide matmul (horizontal fusion)",
    ),
    (
        "gate_up_projection",
        71,
        T,
        "siblings",
        f"(MatMul|Gemm > {BIAS}){{2}}",
        "two projections of one activation (gate/up, K/V) as one wide matmul",
    ),
    (
        "matmul_bias_act",
        58,
        T,
        "chain",
        f"MatMul > {BIAS} > {ACT}",
        "matmul + bias + activation (FixPipe or vector epilogue)",
    ),
    ("gemm_act", 57, TC, "chain", f"Gemm > {ACT}", "Gemm (bias built in) + activation"),
    (
        "matmul_bias_residual",
        54,
        T,
        "chain",
        f"MatMul|Gemm > {BIAS} > Add[!const]",
        "matmul + bias + residual Add",
    ),
    ("matmul_bias", 50, T, "chain", "MatMul|Gemm > Add[bias]", "matmul + bias"),
    (
        "softmax_dropout",
        40,
        T,
        "chain",
        "Cast? > Softmax > Cast? > Dropout",
        "Softmax followed by (inference, free) Dropout",
    ),
    # -- cnn ----------------------------------------------------------------------------------
    (
        "conv_bn_add_relu",
        68,
        C,
        "chain",
        f"{CONV} > Add > Relu",
        "Conv + BatchNorm + residual Add + ReLU (ResNet block tail)",
    ),
    ("conv_bn_silu", 67, C, "chain", f"{CONV} > Sigmoid > Mul[inner]", "Conv + BatchNorm + SiLU"),
    ("conv_bn_hardswish", 66, C, "chain", f"{CONV} > HardSwish", "Conv + BatchNorm + HardSwish"),
    (
        "conv_bn_hardswish_decomposed",
        65,
        C,
        "chain",
        f"{CONV} > HardSigmoid > Mul[inner]",
        "Conv + BatchNorm + HardSwish written as x * HardSigmoid(x)",
    ),
    ("conv_bn_relu6", 64, C, "chain", f"{CONV} > Clip", "Conv + BatchNorm + ReLU6 (Clip)"),
    ("conv_bn_relu", 63, C, "chain", f"{CONV} > Relu|LeakyRelu|PRelu", "Conv + BatchNorm + ReLU"),
    ("conv_bn_add", 62, C, "chain", f"{CONV} > Add", "Conv + BatchNorm + residual Add"),
    ("conv_bn", 61, C, "chain", "Conv > BatchNormalization", "Conv + BatchNorm"),
)
