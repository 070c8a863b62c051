"""The flags that mean the same in every command, each declared once: the MODEL flags
(``--input-shape`` and the zoo build flags) and the policy flags, as (default, ``Annotated``
typer type) by parameter name. :mod:`autotune.cli.common` bundles them into a command's
signature (``model_options``, ``policy_options``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["FLAGS", "FUSION_FLAGS", "POLICY_FLAGS", "SEED_MAX", "ForceOpt"]

# every --seed: what numpy's legacy seeding (Optuna's samplers) takes, for every command alike
SEED_MAX = 2**32 - 1

# every bundled flag once: (parameter, default, typer annotation)
FLAGS: dict[str, tuple[Any, Any]] = {
    "input_shape": (
        None,
        Annotated[
            list[str] | None,
            typer.Option(
                "--input-shape", help="Static shape of a dynamic input, NAME=1x128 (repeat)."
            ),
        ],
    ),
    "weights": (
        "inputs",
        Annotated[str, typer.Option(help="Zoo weights: 'inputs' (shape-only) or 'random'.")],
    ),
    "scale": (1.0, Annotated[float, typer.Option(help="Zoo: shrink the model, 0 < scale <= 1.")]),
    "layers": (
        None,
        Annotated[int | None, typer.Option(help="Zoo: number of layers/blocks to build.")],
    ),
    "batch": (None, Annotated[int | None, typer.Option(help="Zoo: batch size.")]),
    "seq_len": (
        None,
        Annotated[int | None, typer.Option("--seq-len", help="Zoo: sequence length.")],
    ),
    "cache_len": (
        None,
        Annotated[
            int | None,
            typer.Option("--cache-len", help="Zoo decode steps: tokens already in the KV cache."),
        ],
    ),
    "cache_form": (
        None,
        Annotated[
            str | None,
            typer.Option(
                "--cache-form",
                help="Zoo decode steps: 'static' (preallocated, ScatterND; default) or 'concat'.",
            ),
        ],
    ),
    "shape_range": (
        None,
        Annotated[
            list[str] | None,
            typer.Option(
                "--shape-range",
                help="A dynamic dim over a range, NAME=LO..HI (its dim_param; a zoo model's "
                "batch, seq or cache), e.g. seq=16..512 (repeat per dim).",
            ),
        ],
    ),
    "buckets": (
        None,
        Annotated[
            list[str] | None,
            typer.Option(
                "--buckets",
                help="A ranged dim's bucket edges: pow2 (default) or NAME=E1,E2,... ending at "
                "its HI (repeat per dim).",
            ),
        ],
    ),
    "traffic": (
        None,
        Annotated[
            Path | None,
            typer.Option(
                "--traffic",
                help="CSV of observed shapes (a column per ranged dim, and count) that "
                "weights the buckets; equal weights without it.",
            ),
        ],
    ),
    "config": (
        None,
        Annotated[
            Path | None,
            typer.Option("--config", help="A TOML config file ([policy], [[rules]])."),
        ],
    ),
    "preset": (
        None,
        Annotated[str | None, typer.Option(help="Rule preset: transformer, cnn or all.")],
    ),
    "fusion_level": (
        None,
        Annotated[
            int | None, typer.Option("--fusion-level", help="0 none .. 3 everything legal.")
        ],
    ),
    "no_fusion_ops": (
        None,
        Annotated[
            str | None,
            typer.Option("--no-fusion-ops", help="Op types that never fuse, comma-separated."),
        ],
    ),
    "max_fused_ops": (
        None,
        Annotated[int | None, typer.Option("--max-fused-ops", help="Largest group, in ops.")],
    ),
    "benefit_threshold": (
        None,
        Annotated[
            float | None,
            typer.Option(
                "--benefit-threshold", help="Skip fusions saving less than this fraction."
            ),
        ],
    ),
    "strict_safety": (
        None,
        Annotated[
            bool | None,
            typer.Option(
                "--strict-safety",
                help="Safe mode also unfuses kernels it could not verify (default: keeps "
                "them, counted as unverified).",
            ),
        ],
    ),
    "codegen_check": (
        None,
        Annotated[
            str | None,
            typer.Option(
                "--codegen-check",
                help="Safe mode also runs the saved plan's generated Triton kernels against "
                "onnxruntime and unfuses the groups whose kernel disagrees: auto (when the "
                "codegen extra is installed, on an npu/cuda device or a small model), on, off.",
            ),
        ],
    ),
}
POLICY_FLAGS = (
    "preset",
    "fusion_level",
    "no_fusion_ops",
    "max_fused_ops",
    "benefit_threshold",
    "strict_safety",
    "codegen_check",
)
FUSION_FLAGS = tuple(
    f for f in POLICY_FLAGS if f not in ("strict_safety", "codegen_check")
)  # commands that verify nothing

# every command that writes a file: an existing file of another kind (a model, a journal, a
# config...) is refused unless --force; what the command reads is refused whatever it says
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Write over an existing file of another kind than the output (a model, a "
        "journal, a config...); never over a file the command reads.",
    ),
]
