"""The op family a real row's ``op`` column names: its own words, CANN's and torch_npu's
spellings (``FastGeluV2``, ``aclnnAdd``, ``npu_rms_norm``, ``RealDiv``) and op-level names
(``TransData``, ``SwiGlu``); a gradient op or an op with no one-kernel model stays unknown."""

from __future__ import annotations

import re

from costmodel.exceptions import MeasurementError

__all__ = ["FAMILIES", "family_of"]

_REDUCE = (
    "reducesum",
    "reducemean",
    "reducemax",
    "reducemin",
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "argmax",
    "argmin",
)
_BINARY = (
    "add",
    "sub",
    "mul",
    "div",
    "maximum",
    "minimum",
    "adds",
    "subs",
    "muls",
    "divs",
    "addn",
)
# op family -> words that name it (matched on the op column, lower case, punctuation dropped),
# tried in this order: the first family with a matching word wins
FAMILIES: dict[str, tuple[str, ...]] = {
    "add_rmsnorm": ("addrmsnorm", "add rms norm", "add_rms_norm", "npu_add_rms_norm"),
    "rmsnorm": ("rmsnorm", "rms norm", "rms_norm", "npu_rms_norm"),
    "add_layernorm": ("addlayernorm", "add layer norm", "add_layer_norm"),
    "layernorm": ("layernorm", "layer norm", "layer_norm", "layernormalization"),
    "swiglu": ("swiglu", "npu_swiglu"),
    "rope": ("rope", "rotary", "rotarymul", "npu_rotary_mul", "rotary_embedding"),
    "attention": (
        "attention",
        "flashattention",
        "fusedinferattentionscore",
        "promptflashattention",
        "sdpa",
        "scaled_dot_product",
        "flash",
    ),
    "gemv": ("addmv", "gemv", "matvec", "mv"),
    "matmul": ("matmul", "mm", "bmm", "linear", "gemm", "batchmatmul", "catlass"),
    "softmax": ("softmax",),
    "reduce": _REDUCE,
    "gather": ("gather", "embedding", "index_select"),
    "transdata": ("transdata",),
    "transpose": ("transpose", "permute"),
    "concat": ("concat", "cat"),
    "cast": ("cast",),
    "binary": _BINARY,
    "unary": (
        "gelu",
        "silu",
        "swish",
        "relu",
        "exp",
        "sigmoid",
        "tanh",
        "neg",
        "sqrt",
        "rsqrt",
        "abs",
        "log",
        "erf",
        "square",
    ),
}


def _words(text: str) -> str:
    return re.sub(r"[^a-z0-9_^@ ]+", " ", text.lower())


# what CANN, aclnn and torch_npu put around an op's name: FastGelu, GeluV2, ReduceSumD,
# aclnnAdd, npu_fast_gelu, RealDiv, ElementwiseAdd
_AFFIXES = {"aclnn", "npu", "fast", "real", "elementwise", "torch", "v1", "v2", "v3", "v4", "d"}
_OTHER_OPS = {"pool", "conv", "grad", "quant", "dequant", "scatter", "sort", "topk"}


def _camel(text: str) -> set[str]:
    """The CamelCase and snake_case parts of a name, lower case."""
    return {p.lower() for p in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", text)}


def _parts(text: str) -> set[str]:
    """The CamelCase and snake_case parts of an op name, lower case, with the affixes CANN
    and torch_npu add dropped (``FastGeluV2`` -> ``gelu``)."""
    lower = _camel(text) - _AFFIXES
    if lower & _OTHER_OPS:  # MaxPool is no ReduceMax: such a row stays an unknown op
        return set()
    return {p for p in lower if not p.isdigit()}


def family_of(op: str) -> str:
    """The family an op column names (the text before a parenthesis is tried first).

    Raises:
        MeasurementError: no family matches (the message lists the known ones).
    """
    head = op.split("(")[0]
    if _camel(head) & {"grad", "backward"}:  # SwiGluGrad is no SwiGlu
        raise MeasurementError(f"{op!r} is a gradient op; only forward ops are modelled")
    for text in (head, op):
        words = _words(text)
        squashed = words.replace(" ", "")
        tokens = set(words.split()) | _parts(text)
        for family, names in FAMILIES.items():
            for name in names:
                if " " in name or len(name) > 5:
                    if name.replace(" ", "") in squashed:
                        return family
                elif name in tokens:
                    return family
    raise MeasurementError(f"unknown op {op!r}; known families: {', '.join(FAMILIES)}")
