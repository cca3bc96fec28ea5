"""Under torchrun: every rank saves its own tensors with DCP's HuggingFaceStorageWriter.

With ``save_distributed=False`` (the default) each rank writes the files its
``fqn_to_index_mapping`` names under the same names, so on 2 ranks the second
write of ``model-00001-of-00001.safetensors`` replaces the first while the index
still lists both ranks' tensors there (torch 2.13).
"""

import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import HuggingFaceStorageWriter

dist.init_process_group("gloo")
rank = dist.get_rank()
state = {f"layers.{rank}.weight": torch.full((4, 4), float(rank)), f"layers.{rank}.bias": torch.zeros(4)}
mapping = {f"layers.{r}.{p}": 1 for r in range(dist.get_world_size()) for p in ("weight", "bias")}
dcp.save(state, storage_writer=HuggingFaceStorageWriter(sys.argv[1], fqn_to_index_mapping=mapping))
dist.barrier()
dist.destroy_process_group()
