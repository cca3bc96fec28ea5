"""Everything that reads or changes a run root (DESIGN.md, "Layers"; docs/architecture.md).

- ``root``: ``RunRoot`` (storage, path, URL), opened once and passed along.
- ``reports``: result values (``CheckpointReport``, ``LocateResult``, ...), no I/O.
- ``inspect``: scan a run root, inspect one checkpoint against the contract.
- ``deep``: the deep check (every byte: CRCs, pickle scan, ``--check-finite``).
- ``locate``: the read-only use cases (list, locate, verify).
- ``candidates``: what the rollback/undo planners need, from one listing.
- ``lock``: the run-root lock as use cases take it (hold, hold for a pass, holder).
- ``audit``: one typed record per action, written and read.
- ``mutate``: the only code that renames or removes step directories, each act audited.

Imports: ``core`` and ``adapters`` only (never ``ops``/``cli``/``training``); torch only
lazily (``--check-finite``). Importing this package imports none of its modules.
"""
