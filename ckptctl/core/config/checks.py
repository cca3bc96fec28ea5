"""Field checks of ``ckptctl.yaml`` (pure): each names the field (``launch.nnodes: ...``)
or the flag (``--nnodes: ...``) it checks, so one message tells the user what to fix.

Shared by the config dataclasses' ``__post_init__`` (``ckptctl.core.config``), by the
reading of plain YAML data and by the command-line overrides.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ckptctl.errors import ConfigError

#: ``nproc_per_node`` words torchrun understands besides a number.
NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")
#: What ``recover`` does when fewer healthy hosts than the minimum node count remain.
MIN_NODES_POLICIES = ("wait", "shrink")
#: Schedulers ``recover`` knows how to drain a host in.
DRAIN_KINDS = ("slurm", "kubernetes", "none")

MinNodesPolicy = Literal["wait", "shrink"]
DrainKind = Literal["slurm", "kubernetes", "none"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NNODES = re.compile(r"^\s*(\d+)\s*(?::\s*(\d+)\s*)?$")
_HOST = re.compile(r"^[^\s,]+$")


# -- field checks: shared by __post_init__ (names like `launch.nnodes`) and by the
# CLI overrides (names like `--nnodes`), so a bad flag is reported by its flag name.


def _fail(where: str, problem: str) -> ConfigError:
    return ConfigError(f"{where}: {problem}", hint="docs/launch.md lists every key of ckptctl.yaml")


def parse_nnodes(value: str, where: str = "launch.nnodes") -> tuple[int, int]:
    """``"4"`` -> ``(4, 4)``; ``"1:4"`` -> ``(1, 4)``. Raises ``ConfigError`` naming ``where``."""
    m = _NNODES.match(value) if isinstance(value, str) else None
    if m is None:
        raise _fail(where, f"{value!r} is not N or MIN:MAX (e.g. \"2\" or \"1:4\")")
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) is not None else lo
    if lo < 1:
        raise _fail(where, f"{value!r}: the minimum node count must be at least 1")
    if hi < lo:
        raise _fail(where, f"{value!r}: MAX is smaller than MIN")
    return lo, hi


def check_nproc_per_node(value: object, where: str = "launch.nproc_per_node") -> None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _fail(where, f"{value!r} is not a number or one of {', '.join(NPROC_WORDS)}")
    if isinstance(value, int):
        if value < 1:
            raise _fail(where, f"{value} must be at least 1")
    elif value not in NPROC_WORDS:
        raise _fail(where, f"{value!r} is not a number or one of {', '.join(NPROC_WORDS)}")


def check_word(value: object, where: str) -> None:
    """A non-empty string without whitespace (backend names, ids, flags)."""
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise _fail(where, f"{value!r} must be a non-empty string without spaces")


def check_endpoint(value: object, where: str = "launch.rdzv_endpoint") -> None:
    """``host``, ``host:port`` or ``[v6addr]:port``."""
    check_word(value, where)
    if not isinstance(value, str):  # pragma: no cover - check_word raised already
        raise _fail(where, f"{value!r} is not a string")
    host, port = value, None
    if value.startswith("["):
        close = value.find("]")
        if close < 0:
            raise _fail(where, f"{value!r}: unclosed '[' in an IPv6 address")
        host, rest = value[1:close], value[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise _fail(where, f"{value!r} is not HOST:PORT")
            port = rest[1:]
    elif value.count(":") == 1:
        host, port = value.split(":")
    elif value.count(":") > 1:
        raise _fail(where, f"{value!r}: write an IPv6 address as [ADDR]:PORT")
    if not host:
        raise _fail(where, f"{value!r} has no host")
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise _fail(where, f"{value!r}: port must be a number between 1 and 65535")


def check_int(value: object, where: str, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"{value!r} is not an integer")
    if value < minimum:
        raise _fail(where, f"{value} must be at least {minimum}")


def check_seconds(value: object, where: str, *, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(where, f"{value!r} is not a number of seconds")
    if not math.isfinite(value):
        raise _fail(where, f"{value!r} is not a finite number of seconds")
    if value < 0 or (value == 0 and not allow_zero):
        raise _fail(where, f"{value!r} must be {'>= 0' if allow_zero else '> 0'}")


def check_hosts(value: object, where: str) -> None:
    if not isinstance(value, tuple):
        raise _fail(where, "must be a list of host names")
    for i, h in enumerate(value):
        if not isinstance(h, str) or not _HOST.match(h):
            raise _fail(f"{where}[{i}]", f"{h!r} is not a host name (no spaces or commas)")
    dupes = sorted({h for h in value if value.count(h) > 1})
    if dupes:
        raise _fail(where, f"lists {', '.join(dupes)} more than once")


def check_str_tuple(value: object, where: str, *, non_empty: bool = False) -> None:
    if not isinstance(value, tuple):
        raise _fail(where, "must be a list of strings")
    if non_empty and not value:
        raise _fail(where, "must not be empty")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise _fail(f"{where}[{i}]", f"{item!r} is not a string")
        if non_empty and not item:
            raise _fail(f"{where}[{i}]", "must not be empty")


def check_str_map(value: object, where: str, *, env_names: bool = False) -> None:
    if not isinstance(value, Mapping):
        raise _fail(where, "must be a mapping of names to strings")
    for k, v in value.items():
        if not isinstance(k, str) or (env_names and not _ENV_NAME.match(k)) or not k:
            raise _fail(where, f"{k!r} is not a valid {'variable ' if env_names else ''}name")
        if not isinstance(v, str):
            raise _fail(f"{where}.{k}", f"{v!r} is not a string")


def check_local_dir(value: object, where: str) -> None:
    if not isinstance(value, str) or not value:
        raise _fail(where, f"{value!r} must be a non-empty path")
    if "://" in value and not value.startswith("file://"):
        raise _fail(where, f"{value!r}: logs are written line by line, so this must be a local directory")


def is_local_url(url: str) -> bool:
    """A plain path or ``file://`` URL (as opposed to ``s3://``, ``gs://``, ``memory://`` ...)."""
    return "://" not in url or url.startswith("file://")


def local_path(url: str) -> str:
    """``file:///a/b`` -> ``/a/b``; a plain path unchanged."""
    return url[len("file://") :] if url.startswith("file://") else url


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(where, f"must be a mapping, not {type(value).__name__}")
    return value


def _scalar_str(value: object, where: str) -> str:
    # Numbers are welcome where a string is meant (`--steps, 1000`); booleans and
    # nulls are not: YAML turns `yes`/`off`/`~` into them, which is rarely what was meant.
    if isinstance(value, bool) or value is None or not isinstance(value, (str, int, float)):
        raise _fail(where, f"{value!r} is not a string (quote it in YAML)")
    return value if isinstance(value, str) else str(value)


def _str_list(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise _fail(where, "must be a list")
    return tuple(_scalar_str(v, f"{where}[{i}]") for i, v in enumerate(value))


def _command(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        # One program name is fine; a command line needs a list (argv is never split by a shell).
        if not value or any(c.isspace() for c in value):
            raise _fail(where, f"{value!r}: give the command as a list, e.g. [srun, --nodes=2, torchrun]")
        return (value,)
    return _str_list(value, where)


def _str_map(value: object, where: str) -> dict[str, str]:
    return {str(k): _scalar_str(v, f"{where}.{k}") for k, v in _mapping(value, where).items()}


def _number(value: object, where: str) -> object:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise _fail(where, f"{value!r} is not a number") from None
    return value


def check_watch_settings(data: Mapping[str, Any], where: str = "recover.watch") -> dict[str, Any]:
    """``recover.watch``: every key a field of the loss watch's ``WatchConfig``, of its type
    (taken from the field's default: bool, int, or a finite number), in its range."""
    from ckptctl.core.watch.model import WatchConfig, WatchConfigError

    fields = {f.name: f for f in dataclasses.fields(WatchConfig)}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{where}.{key}"
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            raise ConfigError(
                f"unknown key {name!r}" + (f" (did you mean {where + '.' + close[0]!r}?)" if close else ""),
                hint=f"known keys under {where}: {', '.join(fields)}",
            )
        default = fields[key].default
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise _fail(name, f"{value!r} is not true or false")
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int):
                raise _fail(name, f"{value!r} is not an integer")
        elif isinstance(default, float) and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
        ):
            raise _fail(name, f"{value!r} is not a finite number")
        out[key] = value
    try:
        WatchConfig(**out)
    except WatchConfigError as e:
        raise _fail(where, str(e)) from e
    return out
