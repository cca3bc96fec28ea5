"""``ckptctl classify LOG...``: infra, job, preemption or unknown, with evidence (RB-7 step 1).

Exit codes: 10 infra (drain the named hosts, resume), 11 job (fix it, do not
resume), 12 preemption (just resume), 13 unknown (collect the logs it names);
1 when no input could be read, 2 for usage and signature-file errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ckptctl.cli import output as out
from ckptctl.cli.options import ConfigOpt, JsonOpt, SignaturesOpt
from ckptctl.cli.output import escape

if TYPE_CHECKING:
    from ckptctl.core.classify.events import Event
    from ckptctl.core.classify.suspects import Suspect
    from ckptctl.ops.classify_result import ClassifyResult

# ops is imported inside the command: `ckptctl --help` must stay fast.

LogsArg = Annotated[
    list[str],
    typer.Argument(
        metavar="LOG",
        help="Log files, directories (read recursively), globs, fsspec URLs (s3://...), "
        "or - for stdin; .gz is decompressed. Kernel logs (dmesg, journalctl), rank stderr, "
        "torchrun output, NCCL logs, Slurm and Kubernetes output, torchelastic error.json.",
        show_default=False,
    ),
]

JobsOpt = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        min=1,
        metavar="N",
        help="Worker processes that match the logs (the verdict does not depend on it). "
        "Default: 1, or one per CPU but one (up to 8) for 64 MB of logs or more on 4+ CPUs.",
        show_default=False,
    ),
]

_STYLE = {"infra": "red", "job": "magenta", "preemption": "cyan", "unknown": "yellow"}
_ROLE_LABEL = {"root_cause": "ROOT", "cause": "cause", "symptom": "symptom", "context": "context"}


def register(app: typer.Typer) -> None:
    """Add ``classify`` to the app."""

    @app.command("classify")
    def classify(
        logs: LogsArg,
        signatures: SignaturesOpt = None,
        jobs: JobsOpt = None,
        as_json: JsonOpt = False,
        config_path: ConfigOpt = None,
    ) -> None:
        """Classify a crashed training job from its logs: infra (drain the named hosts and
        resume), job (fix it, do not resume), preemption (just resume) or unknown (and which
        log would settle it). Exit code 10/11/12/13 by verdict."""
        from ckptctl.ops import classify as classify_ops
        from ckptctl.ops.launch import load_config

        configured = load_config(config_path).classify.signatures
        with out.byte_progress("reading logs") as bar:
            result = classify_ops.classify_logs(
                logs, extra_signature_files=[*configured, *(signatures or [])], progress=bar.advance, jobs=jobs
            )
        for s in result.skipped:
            out.warn(f"skipped {s.reason}" if s.reason.startswith(s.source) else f"skipped {s.source}: {s.reason}")
        for w in result.warnings:
            out.warn(w)
        if as_json:
            out.emit_json(result.to_json())
        else:
            _render(result)
        raise typer.Exit(result.exit_code)


def _where(e: Event) -> str:
    parts = []
    if e.host:
        parts.append(e.host + (f" (from {e.host_source})" if e.host_source not in (None, "line") else ""))
    if e.rank is not None:
        parts.append(f"rank {e.rank}")
    if e.gpu:
        parts.append(f"GPU {e.gpu}")
    elif e.gpu_index is not None:
        parts.append(f"GPU {e.gpu_index}")
    return ", ".join(parts)


def _evidence_line(e: Event, label: str) -> None:
    console = out.out()
    where = _where(e)
    console.print(
        f"  [bold]{label:<7}[/] {escape(e.file)}:{e.line}  [dim]{escape(e.signature.id)}[/]"
        + (f"  {escape(where)}" if where else "")
    )
    # ASCII only (it gets pasted into tickets): non-ASCII bytes of the log as escapes.
    text = e.text.encode("ascii", "backslashreplace").decode("ascii")
    console.print(f"          {escape(text)}", highlight=False)


def _suspect_where(s: Suspect) -> str:
    gpu = s.gpu and (s.gpu if s.gpu.startswith("cuda:") else f"GPU {s.gpu}")
    parts = [p for p in (s.host, s.pod and f"pod {s.pod}", gpu) if p]
    if s.rank is not None:
        parts.append(f"rank {s.rank}")
    elif s.local_rank is not None:
        parts.append(f"local rank {s.local_rank}")
    if s.peer is not None and s.peer != s.host:
        parts.append(f"peer {s.peer}")
    return " ".join(parts) or "?"


def _render(result: ClassifyResult) -> None:
    console = out.out()
    v = result.verdict
    style = _STYLE.get(v.category, "white")
    console.print(
        f"[bold {style}]{v.category.upper()}[/] ({v.confidence} confidence)"
        f"  [dim]{result.num_lines} lines in {len(result.sources)} file(s)[/]"
    )
    console.print(f"[bold]Action:[/] {escape(v.action)}")
    if v.hosts:
        console.print(f"[bold]Drain:[/] {escape(', '.join(v.hosts))}")
    if v.gpus:
        gpus = ", ".join(
            f"{g.host + ' ' if g.host else ''}{g.pci_bus_id or f'GPU {g.index}'}" for g in v.gpus
        )
        console.print(f"[bold]GPUs:[/] {escape(gpus)}")
    if v.suspect_hosts:
        console.print(f"[bold]Suspect hosts:[/] {escape(', '.join(v.suspect_hosts))}")
    if v.suspects:
        console.print("")
        stopped_only = all(sus.role == "stopped" for sus in v.suspects)
        console.print("[bold]Stopped from outside (nothing wrong with them)[/]" if stopped_only else "[bold]Suspects[/]")
        for sus in v.suspects:
            console.print(f"  {sus.role:<13} {escape(_suspect_where(sus))}: {escape(sus.reason)}", highlight=False)
    console.print("")
    console.print("[bold]Evidence[/]")
    if v.root_cause is not None:
        _evidence_line(v.root_cause, _ROLE_LABEL["root_cause"])
    for e in v.causes:
        if e is not v.root_cause:
            _evidence_line(e, "cause")
    for e in v.other_causes:
        _evidence_line(e, "other")
    shown: dict[str, int] = {}
    for e in v.symptoms:
        if shown.get(e.signature.id, 0) < 2:  # symptoms repeat: two of each is enough here
            shown[e.signature.id] = shown.get(e.signature.id, 0) + 1
            _evidence_line(e, _ROLE_LABEL["symptom"])
    if v.root_cause is None and not v.symptoms:
        console.print("  (no known failure signature matched)")
    console.print("")
    console.print("[bold]Why[/]")
    for reason in v.reasons:
        console.print(f"  - {escape(reason)}")
    if v.what_would_settle_it:
        console.print("")
        console.print("[bold]What would settle it[/]")
        for item in v.what_would_settle_it:
            console.print(f"  - {escape(item)}")
    if result.skipped:
        console.print("")
        console.print("[bold]Not read[/]")
        for s in result.skipped:
            console.print(f"  - {escape(s.source)}: {escape(s.reason)}")
