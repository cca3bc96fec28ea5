"""Verification (RB-7 step Verify): the checkpoint contract of DESIGN.md as pure functions.

``contract`` (problems, codes, the DCP and manifest checks), ``dcp`` (the ``.metadata``
index), ``manifest`` (ckptctl's manifest and commit marker), ``records`` (torch.save
records), ``layouts`` (framework layouts as data), ``safetensors``, ``pickle_shape`` and
``pickle_walk`` (restricted pickle reading), ``crc``, ``bounded_repr``. Import each name
from the module that defines it.
"""
