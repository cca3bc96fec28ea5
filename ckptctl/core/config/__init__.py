"""The typed ``ckptctl.yaml``: what to launch, where checkpoints live, how recover behaves.

Pure: ``parse.config_from_dict`` turns the plain data that YAML produced into frozen
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

CLI flags override file values through ``overrides.ConfigOverrides`` + ``apply_overrides``.

The parts live by responsibility: ``schema`` (the dataclasses), ``parse`` (plain data ->
dataclasses), ``overrides`` (command-line flags) and ``checks`` (field checks). Import each
name from the module that defines it.
"""
