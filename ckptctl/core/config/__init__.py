"""The typed ``ckptctl.yaml``: what to launch, where checkpoints live, how recover behaves.

Pure: ``config_from_dict`` turns the plain data that YAML produced into frozen
dataclasses, and every dataclass validates itself on construction (so a config
built in code, or changed with ``dataclasses.replace``, is checked the same
way). Every message names the field (``launch.nnodes: ...``); an unknown key is
an error that names the key and suggests the nearest known one. Stdlib only:
the YAML text is read by ``ckptctl.adapters.config_file.load_config``.

File layout (every key optional; docs/launch.md is the reference)::

    run_root: /shared/ckpt/run-1234      # checkpoint root (path or fsspec URL)
    launch:                              # how `ckptctl launch` builds torchrun
      nnodes: "1:4"                      # N or MIN:MAX (elastic)
      nproc_per_node: 8
      rdzv_endpoint: head-node:29400
      script: train.py
      script_args: [--steps, 1000]
    recover:                             # what `ckptctl recover` does around it
      min_nodes_policy: wait             # or shrink
      drain: {kind: slurm}

CLI flags override file values through ``ConfigOverrides`` + ``apply_overrides``.

This module is the import point; the parts live by responsibility in
``config_schema`` (the dataclasses), ``config_parse`` (plain data -> dataclasses),
``config_overrides`` (command-line flags) and ``config_checks`` (field checks).
"""

from __future__ import annotations

from ckptctl.core.config.checks import (  # the checks live there; names stay importable from here
    BACKENDS,
    DRAIN_KINDS,
    MIN_NODES_POLICIES,
    NPROC_WORDS,
    Backend,
    DrainKind,
    MinNodesPolicy,
    check_endpoint,
    check_hosts,
    check_int,
    check_local_dir,
    check_nproc_per_node,
    check_seconds,
    check_str_map,
    check_str_tuple,
    check_watch_settings,
    check_word,
    is_local_url,
    local_path,
    parse_nnodes,
)
from ckptctl.core.config.overrides import ConfigOverrides, apply_overrides
from ckptctl.core.config.parse import config_from_dict
from ckptctl.core.config.schema import (
    CkptctlConfig,
    ClassifyConfig,
    DrainConfig,
    LaunchConfig,
    RecoverConfig,
    SlurmConfig,
)

__all__ = [
    "BACKENDS",
    "DRAIN_KINDS",
    "MIN_NODES_POLICIES",
    "NPROC_WORDS",
    "Backend",
    "CkptctlConfig",
    "ClassifyConfig",
    "ConfigOverrides",
    "DrainConfig",
    "DrainKind",
    "LaunchConfig",
    "MinNodesPolicy",
    "RecoverConfig",
    "SlurmConfig",
    "apply_overrides",
    "check_endpoint",
    "check_hosts",
    "check_int",
    "check_local_dir",
    "check_nproc_per_node",
    "check_seconds",
    "check_str_map",
    "check_str_tuple",
    "check_watch_settings",
    "check_word",
    "config_from_dict",
    "is_local_url",
    "local_path",
    "parse_nnodes",
]
