"""Write real framework checkpoints on CPU with each library's own save path.

Run as ``python -m tests.framework_writers KIND OUTDIR`` (one library per process:
their imports are heavy and some set global state). Tiny models built from a config,
synthetic data, no hub download. Used by tests/test_frameworks.py's fixtures.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _tiny_gpt2() -> object:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    return GPT2LMHeadModel(cfg)


def hf_trainer(out: Path) -> None:
    """HF Trainer: checkpoint-2 and checkpoint-4 (save_steps=2), then a save_only_model run."""
    import torch
    from transformers import Trainer, TrainingArguments

    class Data(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 16

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            ids = torch.arange(8) + i % 7
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    for sub, only_model in (("run", False), ("model_only", True)):
        args = TrainingArguments(
            output_dir=str(out / sub),
            max_steps=4,
            save_steps=2,
            per_device_train_batch_size=2,
            report_to=[],
            use_cpu=True,
            logging_steps=100,
            save_only_model=only_model,
            disable_tqdm=True,
        )
        Trainer(model=_tiny_gpt2(), args=args, train_dataset=Data()).train()


def accelerate_state(out: Path) -> None:
    """accelerate: checkpoints/checkpoint_0 and checkpoint_1 via save_state (automatic naming)."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    torch.manual_seed(0)
    acc = Accelerator(cpu=True, project_config=ProjectConfiguration(project_dir=str(out), automatic_checkpoint_naming=True))
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    model, opt, sched = acc.prepare(model, opt, sched)
    for _ in range(2):
        loss = model(torch.randn(3, 4)).sum()
        acc.backward(loss)
        opt.step()
        sched.step()
        opt.zero_grad()
        acc.save_state()


def lightning_files(out: Path) -> None:
    """Lightning: epoch=0-step=2.ckpt and epoch=0-step=4.ckpt (ModelCheckpoint), and weights-only ones."""
    import lightning as pl
    import torch

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.save_hyperparameters({"width": 8})
            self.net = torch.nn.Linear(4, 2)

        def configure_model(self) -> None:
            # only the ModelParallelStrategy run calls it: shard with FSDP2 on the CPU mesh
            from torch.distributed.fsdp import fully_shard

            if self.device_mesh is not None:
                fully_shard(self.net, mesh=self.device_mesh["data_parallel"])

        def training_step(self, batch: list[torch.Tensor], _i: int) -> torch.Tensor:
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> object:
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1)}

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 4)), batch_size=2)
    # .ckpt files (default strategy), weights-only files, and .ckpt/ directories (DCP + meta.pt)
    # from ModelParallelStrategy (FSDP2 on CPU, gloo, one device)
    for sub, weights_only, strategy in (
        ("run", False, "auto"),
        ("weights", True, "auto"),
        ("sharded", False, pl.pytorch.strategies.ModelParallelStrategy()),
    ):
        ckpt = pl.pytorch.callbacks.ModelCheckpoint(
            dirpath=str(out / sub), every_n_train_steps=2, save_top_k=-1, save_weights_only=weights_only
        )
        trainer = pl.Trainer(
            max_steps=4, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
            enable_model_summary=False, callbacks=[ckpt], strategy=strategy,
        )
        trainer.fit(Module(), data)


def deepspeed_zero(out: Path) -> None:
    """DeepSpeed ZeRO-1 on CPU (gloo, world size 1): global_step2 and global_step4 + latest."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import importlib

    import deepspeed
    import torch

    # DeepSpeed's CPU backend JIT-compiles a shared-memory allreduce (a C++ build with a file lock
    # under ~/.cache/torch_extensions) on init; a world of one never uses it, and a build killed
    # by a timeout leaves the lock behind so every later writer waits on it forever (CI did).
    # (`import deepspeed.comm.torch as m` would bind torch itself: deepspeed.comm re-exports it.)
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "zero_optimization": {"stage": 1},
    }
    engine, _opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    for step in range(1, 5):
        loss = engine(torch.randn(2, 4)).sum()
        engine.backward(loss)
        engine.step()
        if step % 2 == 0:
            engine.save_checkpoint(str(out))


WRITERS = {
    "hf": hf_trainer,
    "accelerate": accelerate_state,
    "lightning": lightning_files,
    "deepspeed": deepspeed_zero,
}

if __name__ == "__main__":
    kind, outdir = sys.argv[1], Path(sys.argv[2])
    outdir.mkdir(parents=True, exist_ok=True)
    WRITERS[kind](outdir)
