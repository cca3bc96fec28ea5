"""CLI flags over file values: ``ConfigOverrides`` and ``apply_overrides``.

Each flag value is checked on its own (the message names the flag), then the
changed config is validated as a whole by its dataclasses. Stdlib only; import
these names from ``ckptctl.core.config``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ckptctl.core.config.checks import (
    _fail,
    check_endpoint,
    check_hosts,
    check_int,
    check_local_dir,
    check_nproc_per_node,
    check_word,
    parse_nnodes,
)
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.errors import ConfigError

__all__ = ["ConfigOverrides", "apply_overrides"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigOverrides:
    """Values given on the command line; ``None`` (or empty) leaves the file's value."""

    run_root: str | None = None
    """``--run-root``"""
    nnodes: str | None = None
    """``--nnodes``"""
    nproc_per_node: int | str | None = None
    """``--nproc-per-node``"""
    rdzv_backend: str | None = None
    """``--rdzv-backend``"""
    rdzv_endpoint: str | None = None
    """``--rdzv-endpoint``"""
    rdzv_id: str | None = None
    """``--rdzv-id``"""
    max_restarts: int | None = None
    """``--max-restarts``"""
    log_dir: str | None = None
    """``--log-dir``"""
    script: str | None = None
    """The first word after the options (or after ``--``)."""
    script_args: tuple[str, ...] | None = None
    """The words after the script; with ``script`` set they replace the file's ``script_args``."""
    exclude_hosts: tuple[str, ...] = ()
    """``--exclude-host`` (repeatable); added to the file's ``exclude_hosts``."""


_FLAG = {
    "run_root": "--run-root",
    "nnodes": "--nnodes",
    "nproc_per_node": "--nproc-per-node",
    "rdzv_backend": "--rdzv-backend",
    "rdzv_endpoint": "--rdzv-endpoint",
    "rdzv_id": "--rdzv-id",
    "max_restarts": "--max-restarts",
    "log_dir": "--log-dir",
    "exclude_hosts": "--exclude-host",
}


def _nproc_from_flag(value: int | str) -> int | str:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


def apply_overrides(config: CkptctlConfig, overrides: ConfigOverrides) -> CkptctlConfig:
    """The config with the command line's values in place of the file's.

    Each flag value is checked on its own first, so an error names the flag
    (``--nnodes: '0' ...``); the result is then validated as a whole (a message
    about a combination names the config fields).
    """
    o = overrides
    if o.nnodes is not None:
        parse_nnodes(o.nnodes, _FLAG["nnodes"])
    if o.nproc_per_node is not None:
        check_nproc_per_node(_nproc_from_flag(o.nproc_per_node), _FLAG["nproc_per_node"])
    if o.rdzv_backend is not None:
        check_word(o.rdzv_backend, _FLAG["rdzv_backend"])
    if o.rdzv_endpoint is not None:
        check_endpoint(o.rdzv_endpoint, _FLAG["rdzv_endpoint"])
    if o.rdzv_id is not None:
        check_word(o.rdzv_id, _FLAG["rdzv_id"])
    if o.max_restarts is not None:
        check_int(o.max_restarts, _FLAG["max_restarts"], minimum=0)
    if o.log_dir is not None:
        check_local_dir(o.log_dir, _FLAG["log_dir"])
    if o.exclude_hosts:
        check_hosts(tuple(o.exclude_hosts), _FLAG["exclude_hosts"])
    if o.run_root is not None and not o.run_root:
        raise _fail(_FLAG["run_root"], "must not be empty")

    launch_changes: dict[str, Any] = {}
    for name in ("nnodes", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "max_restarts", "log_dir"):
        value = getattr(o, name)
        if value is not None:
            launch_changes[name] = value
    if o.nproc_per_node is not None:
        launch_changes["nproc_per_node"] = _nproc_from_flag(o.nproc_per_node)
    if o.script is not None:
        launch_changes["script"] = o.script
        launch_changes["script_args"] = tuple(o.script_args or ())
    elif o.script_args is not None:
        launch_changes["script_args"] = tuple(o.script_args)
    if o.exclude_hosts:
        launch_changes["exclude_hosts"] = tuple(dict.fromkeys((*config.launch.exclude_hosts, *o.exclude_hosts)))
    try:
        launch = dataclasses.replace(config.launch, **launch_changes)
        return dataclasses.replace(
            config,
            launch=launch,
            run_root=o.run_root if o.run_root is not None else config.run_root,
        )
    except ConfigError as e:
        where = f"{config.source}: " if config.source else ""
        raise ConfigError(
            f"{where}{e.message} (after applying the command-line flags)", hint=e.hint
        ) from e
