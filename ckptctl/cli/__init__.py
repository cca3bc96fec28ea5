"""Thin Typer layer: parse, call one operation in ``ckptctl.ops``, render, exit code."""
