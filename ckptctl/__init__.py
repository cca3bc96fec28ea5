"""ckptctl: recover distributed PyTorch training after a crash, correctly.

The library is usable without the CLI: see ``ckptctl.ops`` for the use cases,
``ckptctl.core`` for the pure decision logic and ``ckptctl.training`` for the
training-side checkpointer.
"""

__version__ = "0.1.0"
