"""classify's signature catalog: the built-in catalogs and the user's files, parsed and merged.

The YAML is read here (safe loader); ``ckptctl.core.classify`` checks and merges
the parsed data.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources
from typing import Any

from ckptctl.core.classify.catalog import CatalogError, Signature, merge_catalogs, parse_catalog
from ckptctl.errors import CkptctlError, ConfigError

__all__ = [
    "BUILTIN_CATALOGS",
    "DEFAULT_CATALOG",
    "load_catalog",
    "load_default_signatures",
    "load_signature_file",
]

DEFAULT_CATALOG = "default.yaml"
#: The built-in catalogs (``ckptctl/signatures/``), in precedence order: a line becomes
#: an event of the first signature that matches it. XIDs first (the code decides), the
#: GPU drivers' other messages (GSP, amdgpu); then the fabric's, the MPI libraries', the host kernel's and
#: NCCL's specific errors, the schedulers', the distributed runtimes' (JAX/XLA), the accelerator
#: runtimes' status codes (Neuron, HIP; Ascend CANN/ACL/HCCL codes in ascend.yaml), the
#: platforms' preemption, maintenance and job-end wordings; the CUDA runtime's, driver's and math
#: libraries' error codes (those default.yaml does not decide); then the general catalog
#: (ending with the generic Python exception rule).
BUILTIN_CATALOGS = (
    "xids.yaml", "gpu_drivers.yaml", "fabric.yaml", "mpi.yaml", "host.yaml", "nccl.yaml", "slurm.yaml", "schedulers.yaml",
    "runtimes.yaml", "accelerators.yaml", "ascend.yaml", "preemption.yaml", "kubernetes.yaml", "platforms.yaml", "cuda.yaml",
    DEFAULT_CATALOG,
)  # fmt: skip


def _yaml_load(text: str, source: str) -> Any:
    import yaml

    # The C loader parses the built-in catalogs (250 signatures) in a tenth of the time.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # a safe loader (C or pure Python)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from e


@functools.lru_cache(maxsize=1)
def load_default_signatures() -> tuple[Signature, ...]:
    """The catalogs shipped in the package (``BUILTIN_CATALOGS``), in order; parsed once."""
    signatures: list[Signature] = []
    seen: set[str] = set()
    for name in BUILTIN_CATALOGS:
        text = resources.files("ckptctl.signatures").joinpath(name).read_text("utf-8")
        try:
            parsed = parse_catalog(_yaml_load(text, name), source=name)
        except CatalogError as e:  # pragma: no cover - the shipped catalogs are tested
            raise ConfigError(str(e)) from e
        for sig in parsed:
            if sig.id in seen:  # pragma: no cover - the shipped catalogs are tested
                raise ConfigError(f"{name}: id {sig.id!r} is also in another built-in catalog")
            seen.add(sig.id)
            signatures.append(sig)
    return tuple(signatures)


def load_signature_file(path: str) -> tuple[Signature, ...]:
    """One user signature file (a local path or fsspec URL); ``ConfigError`` names the problem."""
    from ckptctl.adapters.storage import Storage

    try:
        storage, inner = Storage.for_url(path)
        data = storage.read_bytes(inner)
    except CkptctlError as e:
        raise ConfigError(f"signature file {e.message}") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"signature file {path}: not UTF-8 text") from e
    try:
        return parse_catalog(_yaml_load(text, path), source=path)
    except CatalogError as e:
        raise ConfigError(str(e), hint="docs/classify.md describes the signature format") from e


def load_catalog(extra_signature_files: Sequence[str] = ()) -> tuple[Signature, ...]:
    """Built-in signatures with the user's files merged in front (same id replaces)."""
    extras = [load_signature_file(p) for p in extra_signature_files]
    return merge_catalogs(load_default_signatures(), extras)
