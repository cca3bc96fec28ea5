"""The launch backends by name: ``launch.backend`` in ckptctl.yaml selects one.

Adding a backend (Kubernetes, ...) is one module beside ``local.py``/``slurm.py`` that
implements ``base.JobBackend``, plus one line in ``BACKENDS`` below.
"""

from __future__ import annotations

from collections.abc import Callable

from ckptctl.backends.base import JobBackend
from ckptctl.backends.local import LocalBackend
from ckptctl.backends.slurm import SlurmBackend
from ckptctl.errors import ConfigError

#: ``launch.backend`` value -> the backend's constructor.
BACKENDS: dict[str, Callable[[], JobBackend]] = {
    LocalBackend.name: LocalBackend,
    SlurmBackend.name: SlurmBackend,
}


def names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def find(name: str | None) -> JobBackend | None:
    """The backend called ``name``; None for a name no backend has (an old record, a typo)."""
    make = BACKENDS.get(name or "")
    return None if make is None else make()


def get(name: str) -> JobBackend:
    """The backend called ``name``; ``ConfigError`` (exit 2) naming the known ones otherwise."""
    backend = find(name)
    if backend is None:
        raise ConfigError(
            f"launch.backend: {name!r} is not one of {', '.join(BACKENDS)}",
            hint="docs/launch.md lists every key of ckptctl.yaml",
        )
    return backend
