"""Pure core: decisions on plain data. Stdlib only; no I/O, no clock, no torch."""
