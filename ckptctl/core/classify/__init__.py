"""Failure classification (RB-7 step 1): signatures, line attribution, scanning, verdict.

Pure: stdlib only, no I/O, no clock. One module per responsibility:

* ``catalog``: the signature schema (``Signature``, ``parse_catalog``, ``merge_catalogs``);
* ``attribution``: whom a line names from its shape alone (``attribute_line``);
* ``scan``: the keyword prefilter and per-line matching (``Matcher``, ``BlockScanner``);
* ``events``: per-file events with their context (torchrun tables, sections,
  name resolution, kernel message heads) (``FileScanner``);
* ``evidence``: bounded collection over all files (``EvidenceCollector``);
* ``verdict``: infra / job / preemption / unknown (``decide_verdict``);
* ``suspects``: whom a verdict points at, role and reason (``Suspect``).

``ckptctl.ops.classify`` wires these to real files. Import each name from the module
that defines it (``from ckptctl.core.classify.events import Event``).
"""
