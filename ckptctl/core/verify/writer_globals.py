"""The pickle globals each framework's own save code writes into its torch.save files, exactly.

``verify --deep`` admits a global in a framework file only when it is on the records'
base list (``core.records``: tensor rebuild, numpy RNG state, plain containers) or here,
as the exact ``(module, qualified name)`` pair the writer's ``torch.save`` spells (the
class's ``__module__`` and ``__qualname__``). Never a module prefix: protocol 4 resolves a
dotted name attribute by attribute, so ``transformers.trainer_utils`` + ``os.system``
reaches ``os.system``; a prefix rule admitted it, an exact pair cannot. Loading a
framework file runs these (``torch.load(weights_only=False)`` constructs the classes),
which is why the report names them in a note.

Where each list comes from (read from the writers' source, checked against files their
own save code writes in tests/test_frameworks.py):

- HF Trainer ``training_args.bin``: ``TrainingArguments`` and the enums and dataclasses its
  fields hold (transformers ``training_args.py``, ``trainer_utils.py``, ``debug_utils.py``,
  ``trainer_pt_utils.py``), plus accelerate's state objects it caches
  (``accelerate.state.PartialState``, ``accelerate.utils.dataclasses.DistributedType``).
- accelerate ``save_state``: RNG states (numpy, base list), optimizer and scheduler state
  dicts (plain); ``custom_checkpoint_<n>.pkl`` holds whatever the user registered: its
  classes need ``--allow-global``.
- Lightning ``.ckpt`` / ``meta.pt``: ``hyper_parameters`` as an ``AttributeDict`` (lightning,
  pytorch_lightning, lightning_fabric spellings) or an ``argparse.Namespace``.
- DeepSpeed ``*_model_states.pt`` / ``*_optim_states.pt``: the loss scaler objects, the ZeRO
  stage enum and ``fragment_address`` (deepspeed ``runtime/fp16/loss_scaler.py``,
  ``runtime/zero/config.py``, ``utils/tensor_fragment.py``).
- Megatron ``common.pt``: ``args`` (an ``argparse.Namespace`` holding torch dtypes, base list,
  and Megatron enums), the rerun state machine's records and Transformer Engine's extra
  state (``io.BytesIO``), the classes Megatron itself registers with
  ``torch.serialization.add_safe_globals``.

A class a newer writer adds is refused (``hostile-pickle``) until listed here; meanwhile
``--allow-global MODULE.NAME`` admits it for one run.
"""

from __future__ import annotations

Global = tuple[str, str]

_ACCELERATE_STATE: frozenset[Global] = frozenset({
    ("accelerate.state", "PartialState"),
    ("accelerate.state", "AcceleratorState"),
    ("accelerate.utils.dataclasses", "DistributedType"),
    ("accelerate.utils.dataclasses", "ComputeEnvironment"),
    ("accelerate.utils.dataclasses", "DynamoBackend"),
    ("accelerate.utils.dataclasses", "PrecisionType"),
})  # fmt: skip

HF_TRAINER: frozenset[Global] = _ACCELERATE_STATE | frozenset({
    ("transformers.training_args", "TrainingArguments"),
    ("transformers.training_args", "OptimizerNames"),
    ("transformers.training_args", "ParallelMode"),
    ("transformers.trainer_utils", "IntervalStrategy"),
    ("transformers.trainer_utils", "SaveStrategy"),
    ("transformers.trainer_utils", "HubStrategy"),
    ("transformers.trainer_utils", "SchedulerType"),
    ("transformers.trainer_utils", "FSDPOption"),
    ("transformers.trainer_utils", "HPSearchBackend"),
    ("transformers.trainer_utils", "EvaluationStrategy"),
    ("transformers.debug_utils", "DebugOption"),
    ("transformers.trainer_pt_utils", "AcceleratorConfig"),
    ("transformers.trainer_pt_utils", "LabelSmoother"),
    # under DeepSpeed, TrainingArguments keeps its parsed config and accelerate's plugin
    ("transformers.integrations.deepspeed", "HfTrainerDeepSpeedConfig"),
    ("transformers.integrations.deepspeed", "HfDeepSpeedConfig"),
    ("accelerate.utils.dataclasses", "DeepSpeedPlugin"),
    ("torch", "device"),
})  # fmt: skip

ACCELERATE: frozenset[Global] = _ACCELERATE_STATE

LIGHTNING: frozenset[Global] = frozenset({
    ("lightning.fabric.utilities.data", "AttributeDict"),
    ("lightning_fabric.utilities.data", "AttributeDict"),
    ("pytorch_lightning.utilities.parsing", "AttributeDict"),
    ("lightning.pytorch.utilities.parsing", "AttributeDict"),
    ("argparse", "Namespace"),
})  # fmt: skip

DEEPSPEED: frozenset[Global] = frozenset({
    ("deepspeed.runtime.fp16.loss_scaler", "LossScaler"),
    ("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler"),
    ("deepspeed.runtime.fp16.loss_scaler", "LossScaleProfile"),
    ("deepspeed.runtime.zero.config", "ZeroStageEnum"),
    ("deepspeed.utils.tensor_fragment", "fragment_address"),
    ("torch", "device"),
})  # fmt: skip

MEGATRON: frozenset[Global] = frozenset({
    ("argparse", "Namespace"),
    ("_io", "BytesIO"),
    ("megatron.core.rerun_state_machine", "RerunState"),
    ("megatron.core.rerun_state_machine", "RerunDiagnostic"),
    ("megatron.core.rerun_state_machine", "RerunMode"),
    ("megatron.core.enums", "ModelType"),
    ("megatron.core.transformer.enums", "AttnBackend"),
    ("megatron.core.transformer.enums", "AttnMaskType"),
    ("torch", "device"),
})  # fmt: skip
