"""From plain data (what ``yaml.safe_load`` returned) to the typed config.

``config_from_dict`` checks every key (an unknown key is an error that names it
and suggests the nearest known one), turns YAML's shapes into the dataclasses'
field types, and lets the dataclasses of ``ckptctl.core.config.schema``
validate the values. Stdlib only; import ``config_from_dict`` from
``ckptctl.core.config``.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from typing import Any

from ckptctl.core.config.checks import (
    _command,
    _fail,
    _mapping,
    _number,
    _scalar_str,
    _str_list,
    _str_map,
    check_watch_settings,
)
from ckptctl.core.config.schema import (
    CkptctlConfig,
    ClassifyConfig,
    DrainConfig,
    LaunchConfig,
    RecoverConfig,
    SlurmConfig,
)
from ckptctl.errors import ConfigError

__all__ = ["config_from_dict"]


# Keys that are not YAML keys.
_NOT_KEYS = {"source"}


def _yaml_keys(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name not in _NOT_KEYS]


def _check_keys(data: Mapping[str, Any], cls: type, where: str) -> None:
    known = _yaml_keys(cls)
    for key in data:
        if not isinstance(key, str):
            raise _fail(where or "top level", f"key {key!r} is not a string")
        if key not in known:
            full = f"{where}.{key}" if where else key
            close = difflib.get_close_matches(key, known, n=1)
            suggestion = f" (did you mean {(where + '.' if where else '') + close[0]!r}?)" if close else ""
            raise ConfigError(
                f"unknown key {full!r}{suggestion}",
                hint=f"known keys{' under ' + where if where else ''}: {', '.join(known)}",
            )


def _launch_from(data: Mapping[str, Any]) -> LaunchConfig:
    _check_keys(data, LaunchConfig, "launch")
    kw: dict[str, Any] = {}
    for key, value in data.items():
        where = f"launch.{key}"
        if key == "nnodes":
            kw[key] = _scalar_str(value, where)
        elif key in ("script_args", "torchrun_args"):
            kw[key] = _str_list(value, where)
        elif key == "torchrun":
            kw[key] = _command(value, where)
        elif key in ("env", "rdzv_conf"):
            kw[key] = _str_map(value, where)
        elif key in ("hosts", "exclude_hosts"):
            if key == "hosts" and value is None:
                kw[key] = None
            else:
                kw[key] = _str_list(value, where)
        elif key in ("rdzv_id", "rdzv_endpoint") and isinstance(value, (int, float)) and not isinstance(value, bool):
            kw[key] = str(value)
        elif key in ("monitor_interval_s", "stop_grace_s"):
            kw[key] = _number(value, where)
        elif key in _BACKEND_SECTIONS:
            kw[key] = _BACKEND_SECTIONS[key](_mapping(value, where))
        elif key == "nproc_per_node" and isinstance(value, str) and value.strip().isdigit():
            kw[key] = int(value)
        else:
            kw[key] = value
    return LaunchConfig(**kw)


def _slurm_from(data: Mapping[str, Any]) -> SlurmConfig:
    _check_keys(data, SlurmConfig, "launch.slurm")
    kw: dict[str, Any] = {}
    for key, value in data.items():
        where = f"launch.slurm.{key}"
        if key == "sbatch_args":
            kw[key] = _str_list(value, where)
        elif key == "poll_s":
            kw[key] = _number(value, where)
        elif key == "time_limit" and isinstance(value, int) and not isinstance(value, bool):
            kw[key] = str(value)  # minutes, as sbatch reads a bare number
        else:
            kw[key] = value
    return SlurmConfig(**kw)


#: ``launch.<backend>:`` option sections (a backend with options of its own adds one here and
#: its dataclass to ``core/config/schema.py``).
_BACKEND_SECTIONS: dict[str, Callable[[Mapping[str, Any]], Any]] = {"slurm": _slurm_from}


def _recover_from(data: Mapping[str, Any]) -> RecoverConfig:
    _check_keys(data, RecoverConfig, "recover")
    kw: dict[str, Any] = {}
    for key, value in data.items():
        if key == "drain":
            drain = _mapping(value, "recover.drain")
            _check_keys(drain, DrainConfig, "recover.drain")
            kw[key] = DrainConfig(**drain)
        elif key == "watch":
            kw[key] = check_watch_settings(_mapping(value, "recover.watch"))
        elif key in ("capacity_timeout_s", "capacity_poll_s"):
            kw[key] = _number(value, f"recover.{key}")
        elif key == "hosts_command":
            kw[key] = _command(value, "recover.hosts_command")
        else:
            kw[key] = value
    return RecoverConfig(**kw)


def _classify_from(data: Mapping[str, Any]) -> ClassifyConfig:
    _check_keys(data, ClassifyConfig, "classify")
    if "signatures" in data:
        return ClassifyConfig(signatures=tuple(_str_list(data["signatures"], "classify.signatures")))
    return ClassifyConfig()


def config_from_dict(data: object, *, source: str | None = None) -> CkptctlConfig:
    """Build and validate a config from plain data (``None`` -> all defaults).

    Errors are ``ConfigError`` (exit 2) whose message starts with ``source`` and
    names the field or the unknown key.
    """
    try:
        if data is None:
            return CkptctlConfig(source=source)
        if not isinstance(data, Mapping):
            raise _fail("top level", f"must be a mapping of sections, not {type(data).__name__}")
        _check_keys(data, CkptctlConfig, "")
        run_root = data.get("run_root")
        return CkptctlConfig(
            run_root=run_root,
            launch=_launch_from(_mapping(data.get("launch"), "launch")),
            recover=_recover_from(_mapping(data.get("recover"), "recover")),
            classify=_classify_from(_mapping(data.get("classify"), "classify")),
            source=source,
        )
    except ConfigError as e:
        if source is None:
            raise
        raise ConfigError(f"{source}: {e.message}", hint=e.hint) from e
    except TypeError as e:  # pragma: no cover - a field missing from the dispatch above
        raise ConfigError(f"{source or 'config'}: {e}") from e
