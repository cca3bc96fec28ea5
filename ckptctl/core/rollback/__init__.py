"""Rollback, undo and retention as pure plans.

``model`` (candidates, actor, audit record, plan, refusal), ``plan`` (``plan_rollback``,
``plan_undo``), ``retention`` (``keep_last`` as a policy). Import each name from the module
that defines it.
"""
