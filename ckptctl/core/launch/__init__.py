"""Launch (RB-7 step Resume): the torchrun command, the capacity decision, the Slurm batch script.

``plan`` (``plan_launch``, ``plan_capacity``, exit codes), ``slurm_batch`` (the ``slurm``
backend's script). Import each name from the module that defines it.
"""
