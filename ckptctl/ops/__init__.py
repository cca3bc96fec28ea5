"""Use cases: wire adapters to the core, return result objects, never print.

One module per noun (checkpoints, classify, watch, rollback, launch, recover).
"""
