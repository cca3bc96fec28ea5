"""Read ``ckptctl.yaml``: the file, its YAML, and the typed config (``ckptctl.core.config``).

Used by ``launch``, ``recover``, ``classify`` and ``status``. Every problem is a
``ConfigError`` (exit 2, one line naming the file and the field): a file that
cannot be read, YAML that does not parse, a key given twice in one mapping (YAML
allows it and keeps the last value silently), nesting deeper than any real config
(``MAX_DEPTH``; a 100,000-deep document must not end in a RecursionError), a file
larger than ``MAX_CONFIG_BYTES``.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

import yaml

from ckptctl.core.config.overrides import ConfigOverrides, apply_overrides
from ckptctl.core.config.parse import config_from_dict
from ckptctl.core.config.schema import CkptctlConfig
from ckptctl.errors import ConfigError

#: Looked for in the working directory when no ``--config`` is given.
CONFIG_FILE_NAME = "ckptctl.yaml"
#: A config is a few kilobytes; anything this large is not one.
MAX_CONFIG_BYTES = 1 << 20
#: Deepest nesting of mappings/lists accepted (a real config uses 3).
MAX_DEPTH = 32


class _ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` without YAML 1.1's base-60 integers, refusing duplicate keys.

    Under plain ``yaml.safe_load``, ``nnodes: 1:4`` is the integer 64 (1*60+4),
    a silent wrong node count. This loader constructs exactly what SafeLoader
    does (no arbitrary objects) but reads ``1:4`` as the string it looks like.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                continue  # SafeLoader's own error names it
            if key in seen:
                mark = key_node.start_mark
                raise ConfigError(
                    f"key {key!r} is given twice (line {seen[key]} and line {mark.line + 1}); "
                    "YAML would keep only the last one"
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


_ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:int"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)


def _check_depth(text: str, source: str) -> None:
    """Refuse nesting deeper than ``MAX_DEPTH`` before the (recursive) composer sees it.

    Counts flow brackets and block indentation levels from the event stream, which
    PyYAML produces iteratively.
    """
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_ConfigLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else "?"
                    raise ConfigError(f"{source}: nested more than {MAX_DEPTH} levels deep (line {line})")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        return  # reported with its position by the load below
    except RecursionError as e:  # pragma: no cover - the parser is iterative in PyYAML 6
        raise ConfigError(f"{source}: nested too deep to read") from e


def parse_config_yaml(text: str, *, source: str = CONFIG_FILE_NAME) -> CkptctlConfig:
    """Parse ``ckptctl.yaml`` text; ``ConfigError`` (exit 2) names the file and the field."""
    _check_depth(text, source)
    try:
        data = yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader, see _ConfigLoader
    except ConfigError as e:
        raise ConfigError(f"{source}: {e.message}", hint=e.hint) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{source}: not valid YAML{where}: {problem}") from e
    except RecursionError as e:
        raise ConfigError(f"{source}: nested too deep to read") from e
    # launch.backend names a backend of the registry: ``ops.launch.load_config`` checks it
    # (after the command line's overrides; adapters never import the backends).
    return config_from_dict(data, source=source)


def read_config_text(path: str) -> str:
    """The file's text; every failure a one-line ``ConfigError`` (exit 2)."""
    try:
        st = os.stat(path)
    except FileNotFoundError as e:
        raise ConfigError(f"{path}: no such config file") from e
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config file: {e.strerror or e}") from e
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{path}: is a directory, not a config file")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path}: not a regular file (a FIFO or device is never a config)")
    if st.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: {st.st_size} bytes; a config file is at most {MAX_CONFIG_BYTES}")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})") from e
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config file: {e.strerror or e}") from e


def find_config(path: str | None, search_dir: str = ".") -> str | None:
    """``path`` as given, else ``<search_dir>/ckptctl.yaml`` when it exists, else None."""
    if path is not None:
        return path
    default = CONFIG_FILE_NAME if search_dir == "." else os.path.join(search_dir, CONFIG_FILE_NAME)
    return default if os.path.isfile(default) else None


def load_config(
    path: str | None = None,
    overrides: ConfigOverrides | None = None,
    *,
    search_dir: str = ".",
) -> CkptctlConfig:
    """The config from ``path`` (or ``<search_dir>/ckptctl.yaml`` if present, else defaults),
    with the command line's ``overrides`` applied. ``config.source`` names the file read.

    Relative paths in the file (``script``, ``log_dir``, ``run_root``) are taken
    relative to the working directory the job is launched from, as torchrun would.
    """
    found = find_config(path, search_dir)
    config = CkptctlConfig() if found is None else parse_config_yaml(read_config_text(found), source=found)
    return apply_overrides(config, overrides) if overrides is not None else config
