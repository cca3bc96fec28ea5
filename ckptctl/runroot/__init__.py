"""Everything that reads or changes a run root (DESIGN.md, "Layers").

- ``reports``: result values (``CheckpointReport``, ``LocateResult``, ...), no I/O.
- ``inspect``: scan a run root, inspect one checkpoint against the contract.
- ``deep``: the deep check (every byte: CRCs, pickle scan, ``--check-finite``).
- ``locate``: the read-only use cases (list, locate, verify).

Imports: ``core`` and ``adapters`` only (never ``ops``/``cli``); torch only lazily
(``--check-finite``). Importing this package imports none of its modules.
"""
