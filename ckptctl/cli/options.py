"""Options shared by several commands, declared once (STYLE.md habit 6)."""

from __future__ import annotations

from typing import Annotated

import typer

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Write one JSON document to stdout (schema in the README).")
]
DeepOpt = Annotated[
    bool,
    typer.Option(
        "--deep",
        help="Read every byte: zip CRC-32 of every DCP record, manifest checksums, "
        "pickle opcode scan of every record.",
    ),
]
WorldSizeOpt = Annotated[
    int | None,
    typer.Option("--world-size", min=1, help="Assert the world size that wrote the checkpoint."),
]
CheckFiniteOpt = Annotated[
    bool,
    typer.Option("--check-finite", help="Decode tensors (imports torch) and flag NaN/Inf values."),
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Show the plan; change nothing.")
]
YesOpt = Annotated[bool, typer.Option("--yes", help="Confirm a destructive action.")]
RootArg = Annotated[
    str, typer.Argument(help="Run root: a local path or fsspec URL (s3://, memory://, file://).")
]
ConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--config",
        "-c",
        metavar="FILE",
        help="ckptctl.yaml: launch, recover and classify settings (its classify.signatures "
        "catalogs are added to classify's). Default: ./ckptctl.yaml if present.",
    ),
]
SignaturesOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--signatures",
        metavar="FILE",
        help="Extra signature catalog (YAML, docs/classify.md); its entries take precedence "
        "over the built-in ones, same id replaces. Repeatable.",
    ),
]
RequireOpt = Annotated[
    str | None,
    typer.Option(
        "--require",
        help="Comma-separated parts the checkpoint must hold (model, optimizer, lr_scheduler, rng, "
        "dataloader, train_state, or a writer's own name); a missing one is a problem.",
    ),
]
IncludeModelOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--include-model-only",
        help="Accept a model-only export (no optimizer state) as the newest checkpoint; skipped by default.",
    ),
]
