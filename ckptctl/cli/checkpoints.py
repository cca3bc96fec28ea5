"""Placeholder until list/locate/verify land."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the command(s) of this module to the app."""
