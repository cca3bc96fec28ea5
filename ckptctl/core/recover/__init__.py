"""Recover (RB-7 as a loop): the decisions, the plan, the incident ledger, the cadence.

``decisions`` (triage, drain, what follows an attempt), ``plan`` (``RecoveryPlan``),
``incidents`` (what each failure cost), ``cadence`` (checkpoint interval against MTBF).
Import each name from the module that defines it.
"""
