"""Launch backends: how ``recover`` (and ``launch --dry-run``) start, follow, ask about and
stop a training job, one named strategy per scheduler.

``base`` holds the protocol every backend implements (``JobBackend``) and the values it
returns; ``local`` (torchrun on this host) and ``slurm`` (a batch script through
``sbatch``) implement it; ``registry`` maps ``launch.backend`` names to them. Code outside
this package asks the registry for a backend and calls it: it never compares a
backend's name (``tests/test_import_rules.py`` keeps that). Import each name from the
module that defines it.
"""
