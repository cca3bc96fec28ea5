"""What a *resumable* checkpoint of each framework holds, as data (DESIGN.md).

One ``Layout`` per framework: how its checkpoints are named, which files and
folders (``Part``) its save writes, which of them its resume cannot do without
(``Need``), which one it writes last (the commit evidence: present means every
part written before it finished), and how each part is checked. The engine
(``ckptctl.runroot.frameworks``) reads a listing, picks the layout, and checks
exactly what the entry says; nothing here branches on a framework.

Every fact below was read in the writer's own save and load code (the
``source`` of each layout names the function); docs/frameworks.md has the table.
Pure: no I/O. Longer than most modules on purpose: two thirds of it is the one
table, kept beside the few functions that read it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ckptctl.core.names import (
    FILE_CHECKPOINT_SUFFIX,
    FILE_STEP,
    LIGHTNING_STEP,
    STEP_DIR_NAMES,
    TORCH_SAVE_FILE_NAME,
)
from ckptctl.core.verify import contract as v
from ckptctl.core.verify import writer_globals as W
from ckptctl.core.verify.dcp import SHARD_SUFFIX

Check = Literal["dcp", "torch-zip", "json", "safetensors", "safetensors-index", "deepspeed-dir", "text", "none"]
"""How a part is verified: a DCP directory against its .metadata; a torch.save zip by its
central directory (CRCs and the pickle scan with --deep); JSON by parsing; safetensors by
header vs size; an index by every tensor it lists being in the file it names; a DeepSpeed tag
directory nested in another framework's checkpoint by the DeepSpeed layout; text as is."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    """A file or folder the framework writes into a checkpoint."""

    name: str
    """Name template: literal text, ``{n}`` for a number (rank, index, shard), ``*`` for any text."""
    holds: str
    """What it holds, as the writer calls it (model, optimizer, scheduler, rng_state...)."""
    check: Check
    is_dir: bool = False
    ranked: bool = False
    """One per rank (``{n}`` is the rank): the ranks present must be 0..W-1 with no gap."""

    def pattern(self) -> re.Pattern[str]:
        return _compile(self.name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Need:
    """Something the framework's resume cannot do without: any one of ``parts`` satisfies it."""

    what: str
    """How the problem names it (``trainer_state.json``, ``model weights``)."""
    parts: tuple[str, ...]
    """``Part.name``s, any of which satisfies the need."""
    only_with: str | None = None
    """The need applies only when a part holding this is present (scheduler.pt with an optimizer)."""
    why: str = ""
    """Shown after the problem (``written last: the save did not finish``)."""
    code: v.ProblemCode | None = None
    """The problem's code when missing (default: commit-missing for the part written last,
    else part-missing)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    key: str
    """Stable identifier, the report's ``framework`` (``hf``, as ``core.names`` calls it)."""
    title: str
    """How messages name it (``HF Trainer``)."""
    step_name: str
    """Regex on the checkpoint's own name; group ``step`` is the step."""
    container: Literal["dir", "file"]
    parts: tuple[Part, ...] = ()
    needs: tuple[Need, ...] = ()
    written_last: str | None = None
    """The part written last (commit evidence), or None when the writer is atomic or has none."""
    signature: tuple[str, ...] = ()
    """Parts whose presence says this framework wrote the directory."""
    top_dcp: bool = False
    """The checkpoint directory itself is a DCP checkpoint (``.metadata`` at the top)."""
    dcp_model_prefixes_flat: bool = False
    """The model's parameters sit at the top level of the DCP state dict (torchtitan): top-level
    keys other than ``known_state_keys`` are reported as ``model``."""
    known_state_keys: frozenset[str] = frozenset()
    bookkeeping_keys: frozenset[str] = frozenset()
    """Top-level keys of the writer's archives that describe the save rather than hold state
    (DeepSpeed's ds_config, param_shapes...): left out of ``contents``."""
    pickle_globals: frozenset[tuple[str, str]] = frozenset()
    """The exact globals (module, qualified name) the writer pickles into its torch.save files
    (its own classes, ``core.writer_globals``); never a prefix."""
    source: str = ""
    """Where the facts come from (repository, file, function)."""


def _regex(template: str) -> str:
    """A name template as regex text, unanchored: ``{n}`` digits, ``*`` any text but ``/``."""
    pieces = re.split(r"(\{n\}|\*)", template)
    return "".join(r"([0-9]+)" if x == "{n}" else r"[^/]*" if x == "*" else re.escape(x) for x in pieces)


def _compile(template: str) -> re.Pattern[str]:
    return re.compile("^" + _regex(template) + r"\Z")


def _may_match(template: str, name: str) -> bool:
    """Could ``name`` match ``template``: its literal start and end (no regex compiled)?"""
    first = min((i for i in (template.find("{n}"), template.find("*")) if i >= 0), default=-1)
    if first < 0:
        return name == template
    head, tail = template[:first], template[max(template.rfind("{n}") + 3, template.rfind("*") + 1) :]
    return len(name) >= len(head) + len(tail) and name.startswith(head) and name.endswith(tail)


#: A part or state key whose name starts like this holds optimizer state (every writer below).
OPTIMIZER_NAME = re.compile(r"^(?:bf16_)?(?:optim|zero_pp_rank_\d+_mp_rank_\d+_optim)", re.IGNORECASE)

#: ``--require`` names and what each writer calls them.
REQUIRE_ALIASES: dict[str, frozenset[str]] = {
    "model": frozenset({"model", "state_dict", "module", "weights"}),
    "optimizer": frozenset({"optimizer", "optimizer_states", "optim", "optimizer_state_dict"}),
    "lr_scheduler": frozenset({"lr_scheduler", "lr_schedulers", "scheduler"}),
    "rng": frozenset({"rng", "rng_state", "random_states", "rng_state_dict"}),
    "dataloader": frozenset({"dataloader", "dl_state_dict", "sampler", "data_sampler"}),
    "train_state": frozenset({"train_state", "trainer_state", "loops", "global_steps"}),
}

# -- the parts several writers share ----------------------------------------------------

_HF_WEIGHTS = (
    Part(name="model.safetensors", holds="model", check="safetensors"),
    Part(name="model-{n}-of-{n}.safetensors", holds="model", check="safetensors"),
    Part(name="model.safetensors.index.json", holds="model", check="safetensors-index"),
    Part(name="pytorch_model.bin", holds="model", check="torch-zip"),
    Part(name="pytorch_model-{n}-of-{n}.bin", holds="model", check="torch-zip"),
    Part(name="pytorch_model.bin.index.json", holds="model", check="json"),
    Part(name="adapter_model.safetensors", holds="model", check="safetensors"),
    Part(name="adapter_model.bin", holds="model", check="torch-zip"),
)
# accelerate's FSDP helpers (utils/fsdp_utils.py save_fsdp_model / save_fsdp_optimizer),
# used by both accelerate's save_state and the HF Trainer under FSDP.
_FSDP_MODEL = (
    Part(name="pytorch_model_fsdp_{n}", holds="model", check="dcp", is_dir=True),
    Part(name="pytorch_model_fsdp.bin", holds="model", check="torch-zip"),
    Part(name="pytorch_model_fsdp_{n}.bin", holds="model", check="torch-zip"),
    Part(name="pytorch_model_fsdp_rank{n}.bin", holds="model", check="torch-zip", ranked=True),
    Part(name="pytorch_model_fsdp_{n}_rank{n}.bin", holds="model", check="torch-zip"),
)
_FSDP_OPTIMIZER = (Part(name="optimizer_{n}", holds="optimizer", check="dcp", is_dir=True),)
_ALL_MODEL_NAMES = tuple(p.name for p in (*_HF_WEIGHTS, *_FSDP_MODEL))

_DCP_TOP = Part(name=".metadata", holds="state", check="dcp")

LAYOUTS: tuple[Layout, ...] = (
    Layout(
        key="hf",
        title="HF Trainer",
        step_name=STEP_DIR_NAMES["hf"],
        container="dir",
        parts=(
            *_HF_WEIGHTS,
            *_FSDP_MODEL,
            Part(name="optimizer.pt", holds="optimizer", check="torch-zip"),
            Part(name="optimizer.bin", holds="optimizer", check="torch-zip"),
            *_FSDP_OPTIMIZER,
            Part(name="scheduler.pt", holds="scheduler", check="torch-zip"),
            Part(name="scaler.pt", holds="scaler", check="torch-zip"),
            Part(name="rng_state.pth", holds="rng_state", check="torch-zip"),
            Part(name="rng_state_{n}.pth", holds="rng_state", check="torch-zip", ranked=True),
            Part(name="trainer_state.json", holds="trainer_state", check="json"),
            Part(name="training_args.bin", holds="training_args", check="torch-zip"),
            Part(name="config.json", holds="config", check="json"),
            Part(name="generation_config.json", holds="config", check="json"),
            # under DeepSpeed the Trainer calls engine.save_checkpoint(output_dir): a tag directory
            # (model and optimizer states) and a 'latest' file inside checkpoint-N
            Part(name="global_step{n}", holds="deepspeed", check="deepspeed-dir", is_dir=True),
            Part(name="latest", holds="pointer", check="text"),
        ),
        needs=(
            Need(what="model weights", parts=(*_ALL_MODEL_NAMES, "global_step{n}"),
                 why="_load_from_checkpoint raises \"Can't find a valid checkpoint\""),
            Need(what="scheduler.pt", parts=("scheduler.pt",), only_with="optimizer",
                 why="without it Trainer silently resumes with a fresh optimizer"),
            Need(what="trainer_state.json", parts=("trainer_state.json",),
                 why="written last: the save did not finish"),
        ),
        written_last="trainer_state.json",
        signature=("trainer_state.json", "training_args.bin", "rng_state.pth", "rng_state_{n}.pth",
                   "optimizer.pt", "scheduler.pt"),
        pickle_globals=W.HF_TRAINER,
        source="huggingface/transformers src/transformers/trainer.py: Trainer._save_checkpoint "
        "(save_model, _save_optimizer_and_scheduler, _save_scaler, _save_rng_state, then "
        "state.save_to_json(trainer_state.json)); _load_from_checkpoint, "
        "_load_optimizer_and_scheduler (loads both only when optimizer and scheduler.pt exist)",
    ),
    Layout(
        key="accelerate",
        title="accelerate",
        step_name=STEP_DIR_NAMES["accelerate"],
        container="dir",
        parts=(
            Part(name="model.safetensors", holds="model", check="safetensors"),
            Part(name="model_{n}.safetensors", holds="model", check="safetensors"),
            Part(name="pytorch_model.bin", holds="model", check="torch-zip"),
            Part(name="pytorch_model_{n}.bin", holds="model", check="torch-zip"),
            *_FSDP_MODEL,
            Part(name="optimizer.bin", holds="optimizer", check="torch-zip"),
            Part(name="optimizer_{n}.bin", holds="optimizer", check="torch-zip"),
            *_FSDP_OPTIMIZER,
            Part(name="scheduler.bin", holds="scheduler", check="torch-zip"),
            Part(name="scheduler_{n}.bin", holds="scheduler", check="torch-zip"),
            Part(name="sampler.bin", holds="sampler", check="torch-zip"),
            Part(name="sampler_{n}.bin", holds="sampler", check="torch-zip"),
            Part(name="dl_state_dict.bin", holds="dl_state_dict", check="torch-zip"),
            Part(name="dl_state_dict_{n}.bin", holds="dl_state_dict", check="torch-zip"),
            Part(name="scaler.pt", holds="scaler", check="torch-zip"),
            Part(name="random_states_{n}.pkl", holds="random_states", check="torch-zip", ranked=True),
            Part(name="custom_checkpoint_{n}.pkl", holds="custom_checkpoint", check="torch-zip"),
            # under DeepSpeed: model.save_checkpoint(output_dir, ckpt_id="pytorch_model[_i]")
            Part(name="pytorch_model", holds="deepspeed", check="deepspeed-dir", is_dir=True),
            Part(name="pytorch_model_{n}", holds="deepspeed", check="deepspeed-dir", is_dir=True),
            Part(name="latest", holds="pointer", check="text"),
        ),
        needs=(
            Need(what="model weights",
                 parts=("model.safetensors", "model_{n}.safetensors", "pytorch_model.bin",
                        "pytorch_model_{n}.bin", *(p.name for p in _FSDP_MODEL), "pytorch_model",
                        "pytorch_model_{n}"),
                 why="load_state reads the model first"),
            Need(what="random_states_0.pkl", parts=("random_states_{n}.pkl",),
                 why="written last: the save did not finish"),
        ),
        written_last="random_states_{n}.pkl",
        signature=("random_states_{n}.pkl", "optimizer.bin", "scheduler.bin", "custom_checkpoint_{n}.pkl"),
        pickle_globals=W.ACCELERATE,
        source="huggingface/accelerate src/accelerate/accelerator.py: Accelerator.save_state "
        "(checkpoints/checkpoint_<i>, FSDP via save_fsdp_model/save_fsdp_optimizer); "
        "src/accelerate/checkpointing.py: save_accelerator_state (model, optimizer, scheduler, "
        "sampler, dl_state_dict, scaler, then random_states_<rank>.pkl)",
    ),
    Layout(
        key="lightning",
        title="Lightning",
        step_name=STEP_DIR_NAMES["lightning"],
        container="dir",
        parts=(_DCP_TOP, Part(name="meta.pt", holds="meta", check="torch-zip")),
        needs=(
            Need(what=".metadata", parts=(".metadata",), why="the distributed save did not commit",
                 code=v.METADATA_MISSING),
            Need(what="meta.pt", parts=("meta.pt",), why="written last by rank 0: the save did not finish"),
        ),
        written_last="meta.pt",
        signature=("meta.pt",),
        top_dcp=True,
        pickle_globals=W.LIGHTNING,
        source="Lightning-AI/pytorch-lightning src/lightning/pytorch/strategies/model_parallel.py and "
        "fsdp.py: save_checkpoint (DCP of state_dict|model + optimizer_<i>, then rank 0 "
        "torch.save(meta.pt)); fabric/strategies/fsdp.py _is_sharded_checkpoint",
    ),
    Layout(
        key="lightning",
        title="Lightning",
        step_name=STEP_DIR_NAMES["lightning"],
        container="file",
        parts=(Part(name="*", holds="checkpoint", check="torch-zip"),),
        needs=(Need(what="state_dict", parts=("state_dict",), why="the model's weights"),),
        pickle_globals=W.LIGHTNING,
        source="Lightning-AI/pytorch-lightning src/lightning/pytorch/callbacks/model_checkpoint.py "
        "(\"{epoch}-{step}\" names, '=' joins, .ckpt); trainer/connectors/checkpoint_connector.py "
        "dump_checkpoint (optimizer_states/lr_schedulers only when not weights_only); "
        "fabric/utilities/cloud_io.py _atomic_save",
    ),
    Layout(
        key="torchtitan",
        title="torchtitan",
        step_name=STEP_DIR_NAMES["torchtitan"],
        container="dir",
        parts=(
            _DCP_TOP,
            Part(name="model.safetensors.index.json", holds="model", check="safetensors-index"),
            Part(name="model-{n}-of-{n}.safetensors", holds="model", check="safetensors"),
            Part(name="model.safetensors", holds="model", check="safetensors"),
        ),
        needs=(
            Need(what=".metadata", parts=(".metadata", "model.safetensors.index.json"),
                 why="the save did not commit", code=v.METADATA_MISSING),
        ),
        top_dcp=True,
        dcp_model_prefixes_flat=True,
        known_state_keys=frozenset({"optimizer", "lr_scheduler", "dataloader", "train_state"}),
        source="pytorch/torchtitan torchtitan/components/checkpointer/dcp.py: "
        "_flattened_model_states_sd (model keys at the top level + optimizer, lr_scheduler, "
        "dataloader, train_state), _save_last_step (last_save_model_only, default True in base.py), "
        "_find_load_step (.metadata or model.safetensors.index.json)",
    ),
    Layout(
        key="megatron",
        title="Megatron torch_dist",
        step_name=STEP_DIR_NAMES["megatron"],
        container="dir",
        parts=(
            _DCP_TOP,
            Part(name="metadata.json", holds="metadata", check="json"),
            Part(name="common.pt", holds="common", check="torch-zip"),
            Part(name="integrity.json", holds="integrity", check="json"),
        ),
        needs=(
            Need(what=".metadata", parts=(".metadata",), why="the distributed save did not commit",
                 code=v.METADATA_MISSING),
            Need(what="metadata.json", parts=("metadata.json",),
                 why="written last by rank 0: the save did not finish"),
        ),
        written_last="metadata.json",
        signature=("metadata.json", "common.pt"),
        top_dcp=True,
        pickle_globals=W.MEGATRON,
        source="NVIDIA/Megatron-LM megatron/core/dist_checkpointing/serialization.py: save "
        "(strategy save, then metadata_finalize_fn writes metadata.json); core.py CONFIG_FNAME; "
        "megatron/training/checkpointing.py iter_{:07d}, latest_checkpointed_iteration.txt",
    ),
    Layout(
        key="deepspeed",
        title="DeepSpeed",
        step_name=STEP_DIR_NAMES["deepspeed"],
        container="dir",
        parts=(
            Part(name="mp_rank_{n}_model_states.pt", holds="module", check="torch-zip"),
            Part(name="zero_pp_rank_{n}_mp_rank_{n}_model_states.pt", holds="module", check="torch-zip"),
            Part(name="zero_pp_rank_{n}_mp_rank_{n}_optim_states.pt", holds="optimizer", check="torch-zip"),
            Part(name="bf16_zero_pp_rank_{n}_mp_rank_{n}_optim_states.pt", holds="optimizer", check="torch-zip"),
            Part(name="expp_rank_{n}_mp_rank_{n}_optim_states.pt", holds="optimizer", check="torch-zip"),
            Part(name="layer_{n}-model_{n}-model_states.pt", holds="module", check="torch-zip"),
            Part(name="expert_{n}_mp_rank_{n}_model_states.pt", holds="module", check="torch-zip"),
        ),
        needs=(
            Need(what="model states (mp_rank_00_model_states.pt)",
                 parts=("mp_rank_{n}_model_states.pt", "zero_pp_rank_{n}_mp_rank_{n}_model_states.pt"),
                 why="load_checkpoint reads it first"),
        ),
        signature=("mp_rank_{n}_model_states.pt", "zero_pp_rank_{n}_mp_rank_{n}_optim_states.pt",
                   "bf16_zero_pp_rank_{n}_mp_rank_{n}_optim_states.pt",
                   "zero_pp_rank_{n}_mp_rank_{n}_model_states.pt"),
        pickle_globals=W.DEEPSPEED,
        bookkeeping_keys=frozenset({
            "buffer_names", "param_shapes", "frozen_param_shapes", "shared_params", "frozen_param_fragments",
            "skipped_steps", "global_samples", "dp_world_size", "mp_world_size", "ds_config", "ds_version",
            "checkpoint_parallel_dimensions", "universal_checkpoint_info", "sparse_tensor_module_names",
        }),
        source="deepspeedai/DeepSpeed deepspeed/runtime/engine.py: save_checkpoint (tag "
        "global_step<N>, then rank 0 writes 'latest'), _get_ckpt_name, _get_zero_ckpt_name, "
        "_common_checkpoint_state (dp_world_size, mp_world_size), _save_zero_checkpoint",
    ),
    Layout(
        key="ckptctl",
        title="ckptctl",
        step_name=STEP_DIR_NAMES["ckptctl"],
        container="dir",
        parts=(_DCP_TOP, Part(name="ckptctl.json", holds="manifest", check="none")),
        needs=(Need(what=".metadata", parts=(".metadata",), why="the save did not commit",
                      code=v.METADATA_MISSING),),
        signature=("ckptctl.json",),
        top_dcp=True,
        source="ckptctl.training (DESIGN.md: manifest before the commit)",
    ),
    Layout(
        key="dcp",
        title="DCP",
        step_name=r"^(?P<step>)\Z",
        container="dir",
        parts=(_DCP_TOP,),
        needs=(Need(what=".metadata", parts=(".metadata",), why="the save did not commit",
                      code=v.METADATA_MISSING),),
        top_dcp=True,
        source="torch/distributed/checkpoint (DESIGN.md, DCP-FORMAT.md)",
    ),
    Layout(
        key="torch-save",
        title="torch.save file",
        step_name=TORCH_SAVE_FILE_NAME,
        container="file",
        parts=(Part(name="*", holds="checkpoint", check="torch-zip"),),
        source="torch.save (zip format since torch 1.6); Horovod's examples save "
        "checkpoint-{epoch}.pth.tar on rank 0",
    ),
)

_BY_KEY: dict[tuple[str, str], Layout] = {(lay.key, lay.container): lay for lay in LAYOUTS}


def layout(key: str, container: str = "dir") -> Layout:
    return _BY_KEY[(key, container)]


# -- file checkpoints: step from the name --------------------------------------------------

# The names (suffixes, where the step is) are ``core.names``'s (``\Z``-anchored, ASCII steps).


@dataclass(frozen=True, slots=True)
class FileCheckpointName:
    name: str
    step: int
    layout: Layout


def has_checkpoint_file_suffix(name: str) -> bool:
    """``.pt``, ``.pth``, ``.pth.tar``, ``.ckpt``, ``.bin``, ``.tar``: what torch.save archives are called."""
    return FILE_CHECKPOINT_SUFFIX.search(name) is not None


def parse_file_checkpoint_name(name: str) -> FileCheckpointName | None:
    """A single-file checkpoint's step from its name (``epoch=0-step=400.ckpt``,
    ``checkpoint-3.pth.tar``); None for a file that is not one."""
    if not FILE_CHECKPOINT_SUFFIX.search(name):
        return None
    m = LIGHTNING_STEP.search(name)
    if m is not None and name.endswith(".ckpt"):
        return FileCheckpointName(name, int(m.group("step")), layout("lightning", "file"))
    stem = FILE_CHECKPOINT_SUFFIX.sub("", name)
    m = FILE_STEP.match(stem)
    if m is None:
        return None
    return FileCheckpointName(name, int(m.group("step")), layout("torch-save", "file"))


def parse_lightning_dir_name(name: str) -> int | None:
    """The step of a Lightning sharded checkpoint directory (``epoch=0-step=400.ckpt``)."""
    m = LIGHTNING_STEP.search(name)
    return int(m.group("step")) if m is not None and name.endswith(".ckpt") else None


# -- matching a listing to a layout ---------------------------------------------------------


@dataclass(slots=True)
class Found:
    """The parts of a layout present in one checkpoint directory."""

    layout: Layout
    present: dict[str, list[str]] = field(default_factory=dict)
    """Part.name -> the entries (file or folder names) that matched it."""

    def entries(self) -> list[tuple[str, Part]]:
        by_name = {p.name: p for p in self.layout.parts}
        return [(e, by_name[pn]) for pn, es in self.present.items() for e in es]

    def holds(self) -> set[str]:
        by_name = {p.name: p for p in self.layout.parts}
        return {by_name[pn].holds for pn in self.present if pn in by_name}


@functools.lru_cache(maxsize=64)
def _combined(lay: Layout, is_dir: bool) -> tuple[re.Pattern[str], tuple[Part, ...]]:
    """One alternation per layout (a group per part): one match per file, not one per part."""
    parts = tuple(p for p in lay.parts if p.is_dir == is_dir)
    alts = "|".join(f"(?P<p{i}>{_regex(p.name)})" for i, p in enumerate(parts))
    return re.compile(f"^(?:{alts})\\Z" if alts else r"(?!)"), parts


def match_parts(lay: Layout, files: Iterable[str], dirs: Iterable[str]) -> Found:
    found = Found(layout=lay)
    for all_names, is_dir in ((sorted(files), False), (sorted(dirs), True)):
        # DCP shards belong to the DCP rules, never to a framework part
        names = [n for n in all_names if not n.endswith(SHARD_SUFFIX)]
        if len(names) <= 64 and not any(_may_match(p.name, n) for p in lay.parts if p.is_dir == is_dir for n in names):
            continue  # none can match: the layout's regex is not even compiled (most of a start's compiles)
        pattern, parts = _combined(lay, is_dir)
        for n in names:
            m = pattern.match(n)
            if m is not None:
                group = next(k for k, val in m.groupdict().items() if val is not None)
                p = parts[int(group[1:])]
                found.present.setdefault(p.name, []).append(n)
    return found


def detect_layout(name: str, files: Iterable[str], dirs: Iterable[str], *, framework_hint: str | None) -> Found | None:
    """Which framework wrote this directory: the most signature parts present, the name as tie-break.

    None when no framework layout matches (the caller falls back to plain DCP rules).
    """
    files = [f for f in files if not f.endswith(SHARD_SUFFIX)]  # DCP shards: no framework part
    dirs = list(dirs)
    best: tuple[int, int, Found] | None = None
    for lay in LAYOUTS:
        if lay.container != "dir" or lay.key in ("dcp",):
            continue
        found = match_parts(lay, files, dirs)
        score = sum(1 for s in lay.signature if s in found.present)
        named = 1 if re.match(lay.step_name, name) or lay.key == framework_hint else 0
        if lay.key == "lightning" and parse_lightning_dir_name(name) is not None:
            named = 1
        if score == 0 and not named:
            continue
        if named and not score and not found.present:
            continue  # a matching name over unrelated files: leave it to the generic rules
        if best is None or (score, named) > (best[0], best[1]):
            best = (score, named, found)
    return best[2] if best else None


def check_found(found: Found, *, contents: Iterable[str] = ()) -> list[v.Problem]:
    """Problems of a layout's needs (missing required parts) and ranked families (gaps)."""
    lay = found.layout
    holds = found.holds() | set(contents)
    problems: list[v.Problem] = []
    for need in lay.needs:
        if need.only_with is not None and not any(OPTIMIZER_NAME.match(h) if need.only_with == "optimizer"
                                                  else h == need.only_with for h in holds):
            continue
        if lay.container == "file":
            ok = any(p in holds for p in need.parts)
        else:
            ok = any(p in found.present for p in need.parts)
        if not ok:
            why = f" ({need.why})" if need.why else ""
            last = lay.written_last is not None and lay.written_last in need.parts
            problems.append(
                v.Problem(
                    v.INCOMPLETE,
                    f"{lay.title} checkpoint without {need.what}{why}",
                    code=need.code or (v.COMMIT_MISSING if last else v.PART_MISSING),
                )
            )
    for p in lay.parts:
        if not p.ranked or p.name not in found.present:
            continue
        pat = p.pattern()
        ranks = sorted(int(m.group(1)) for m in (pat.match(e) for e in found.present[p.name]) if m)
        missing = sorted(set(range(max(ranks) + 1)) - set(ranks)) if ranks else []
        if missing:
            shown = ", ".join(p.name.replace("{n}", str(r)) for r in missing[:4])
            problems.append(
                v.Problem(
                    v.INCOMPLETE,
                    f"{lay.title} checkpoint without {shown} (one file per rank, ranks 0..{max(ranks)})",
                    code=v.PART_MISSING,
                )
            )
    return problems


_NOT_STATE = frozenset({"state", "checkpoint", "config", "manifest", "deepspeed", "pointer"})
"""Part roles that are containers or pointers, not a piece of training state."""


def contents_of(found: Found | None, state_keys: Iterable[str]) -> list[str]:
    """The top-level state a checkpoint holds, as its writer names it, sorted."""
    names = set(state_keys)
    if found is not None:
        names -= found.layout.bookkeeping_keys
        names |= {h for h in found.holds() if h not in _NOT_STATE}
        if found.layout.dcp_model_prefixes_flat:
            known = found.layout.known_state_keys
            flat = {n for n in names if n not in known and n not in found.holds() and not OPTIMIZER_NAME.match(n)}
            if flat:
                names = (names - flat) | {"model"}
    return sorted(names)


def is_model_only(contents: Iterable[str]) -> bool:
    """No optimizer state among the contents (a weights export: training cannot resume from it)."""
    names = list(contents)
    return bool(names) and not any(OPTIMIZER_NAME.match(n) for n in names)


def missing_required(contents: Iterable[str], required: Iterable[str]) -> list[str]:
    """The ``--require`` names not held (each matched through ``REQUIRE_ALIASES`` or by its own name)."""
    have = set(contents)
    out = []
    for r in required:
        aliases = REQUIRE_ALIASES.get(r, frozenset()) | {r}
        if r == "optimizer" and any(OPTIMIZER_NAME.match(n) for n in have):
            continue
        if not (have & aliases):
            out.append(r)
    return out


def state_key_roots(fqns: Iterable[str], mapping: Mapping[str, str] | None = None) -> list[str]:
    """Top-level keys of a DCP state dict from its flattened FQNs (``optimizer.state.w`` -> optimizer)."""
    roots = {f.split(".", 1)[0] for f in fqns}
    if mapping:
        roots = {mapping.get(r, r) for r in roots}
    return sorted(roots)
