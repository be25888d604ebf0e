"""The training toolkit shared by pre-training (`blockbert_hf.train.pretraining`) and QA fine-tuning
(`blockbert_hf.train.qa`).

An output folder of a run holds:
- `run_args.json`: the arguments of the run that owns the folder, written before any work (`claim_output_dir`);
- `checkpoints/step_K`: Accelerate's `save_state` (model, optimizer, scheduler, RNG states of every process) plus
  `trainer_state.json` (step, data position, metrics lines, the run's arguments), written atomically;
- `metrics.jsonl`: one JSON record per line (`MetricsLog`).

The guards run before any work: `check_at_least` / `check_positive` / `check_in_range` (option values, named in the
error), `check_input_paths` (local inputs that do not exist), `check_launch` (a multi-process launch that Accelerate
runs as one process), and `check_output_dir` (an output folder that is a file, is or holds an input of the run, is one
of another run, a finished run, or a resume with changed arguments or without a usable checkpoint).

The options the scripts share: `--report_to` (`trackers`), `--gradient_checkpointing` (`enable_gradient_checkpointing`),
`--push_to_hub` / `--hub_model_id` (`hub_repo_id`, checked before any work, and `push_folder_to_hub`).
"""

import argparse
import gc
import hashlib
import importlib.util
import json
import math
import os
import shutil
import zipfile
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from . import TRAIN_EXTRA, require_extra


require_extra("blockbert_hf.train.runs", "train", TRAIN_EXTRA)

import torch  # noqa: E402
from accelerate.logging import get_logger  # noqa: E402
from huggingface_hub import HfApi  # noqa: E402
from huggingface_hub.utils import HFValidationError, validate_repo_id  # noqa: E402
from safetensors import SafetensorError, safe_open  # noqa: E402
from transformers import Trainer, get_scheduler  # noqa: E402

from ..saving import (  # noqa: E402
    atomic_directory,
    check_output_keeps_inputs,
    remove_stale_staging,
    sha256_of_file,
    write_file_atomically,
    write_json_atomically,
)


logger = get_logger(__name__)

CHECKPOINTS_DIR = "checkpoints"
TRAINER_STATE = "trainer_state.json"
RUN_ARGS_FILE = "run_args.json"
METRICS_FILE = "metrics.jsonl"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """`--help` of the example scripts (`HfArgumentParser(..., formatter_class=HelpFormatter)`): the script's
    docstring as written, and each option's default."""


# ---------------------------------------------------------------------------------------------------------------------
# Options the training scripts share: trackers, activation checkpointing, publishing to the Hub
# ---------------------------------------------------------------------------------------------------------------------

REPORT_TO_CHOICES = ("auto", "tensorboard", "none")
REPORT_TO_HELP = "where Accelerate logs the metrics too: tensorboard, none, or auto (tensorboard if installed)"
GRADIENT_CHECKPOINTING_HELP = (
    "recompute each layer's activations in the backward pass (transformers' activation checkpointing): less memory, "
    "about a third more compute, the same gradients"
)
PUSH_TO_HUB_HELP = (
    "upload the finished model folder to the Hub (--hub_model_id, default the output folder's name), as transformers' "
    "*_no_trainer examples do; log in first (`hf auth login`)"
)
HUB_MODEL_ID_HELP = "the Hub repository of --push_to_hub, e.g. user/blockbert-squad (created if missing)"


def trackers(report_to: str) -> list[str] | None:
    """Accelerate's `log_with` for `--report_to`: None for `none`, TensorBoard for `auto` where it is installed."""
    if report_to not in REPORT_TO_CHOICES:
        raise ValueError(f"--report_to must be one of {', '.join(REPORT_TO_CHOICES)}, got {report_to!r}.")
    if report_to == "none":
        return None
    if report_to == "auto":
        return ["tensorboard"] if importlib.util.find_spec("tensorboard") is not None else None
    if importlib.util.find_spec("tensorboard") is None:
        raise ValueError("--report_to tensorboard needs the tensorboard package: pip install tensorboard.")
    return [report_to]


def enable_gradient_checkpointing(model) -> None:
    """Activation checkpointing of every layer (`--gradient_checkpointing`), refused for a model without it."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(f"--gradient_checkpointing: {type(model).__name__} does not support activation checkpointing.")
    model.activation_checkpointing_enable()


def hub_repo_id(hub_model_id: str | None, output_dir: str | os.PathLike) -> str:
    """The repository `--push_to_hub` uploads to (`--hub_model_id`, else the output folder's name, as transformers'
    examples), checked before any work."""
    repo_id = hub_model_id or Path(output_dir).resolve().name
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        option = "--hub_model_id" if hub_model_id else "--push_to_hub (the output folder's name as repository id)"
        raise ValueError(f"{option} {repo_id!r} is not a Hub repository id: {error}") from None
    return repo_id


def push_folder_to_hub(folder: str | os.PathLike, repo_id: str, commit_message: str = "End of training") -> str:
    """Uploads a finished model folder as it was saved (weights, config, code, tokenizer, card) with
    `HfApi.upload_folder`, creating the repository if needed; returns the repository id the Hub gave."""
    api = HfApi()
    repo_id = api.create_repo(repo_id, exist_ok=True).repo_id
    api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message=commit_message)
    logger.info(f"Uploaded {folder} to the Hub repository {repo_id}.")
    return repo_id


# ---------------------------------------------------------------------------------------------------------------------
# Guards
# ---------------------------------------------------------------------------------------------------------------------


def check_at_least(minimum: int, options: Mapping[str, int | float | None], hint: str = "") -> None:
    """Refuses the first of `options` (option name -> value; None: unset) below `minimum`, naming it."""
    for name, value in options.items():
        if value is not None and not value >= minimum:
            raise ValueError(f"{name} must be at least {minimum}, got {value}{hint}.")


def check_positive(options: Mapping[str, float | None], hint: str = "") -> None:
    """Refuses the first of `options` (option name -> value; None: unset) that is not a finite number > 0."""
    for name, value in options.items():
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a number > 0, got {value}{hint}.")


def check_in_range(options: Mapping[str, float | None], low: float, high: float, high_included: bool = True) -> None:
    """Refuses the first of `options` (option name -> value; None: unset) outside `[low, high]` (`[low, high)`)."""
    for name, value in options.items():
        if value is not None and not (low <= value <= high and (high_included or value < high)):
            raise ValueError(f"{name} must be in [{low}, {high}{']' if high_included else ')'}, got {value}.")


def check_input_paths(files: Mapping[str, str | os.PathLike | list | None], models: Mapping[str, str | None]) -> None:
    """Refuses, naming the option, `files` (option name -> path or list of paths) that do not exist, and `models`
    (option name -> folder or Hub id) that are neither an existing path nor a valid Hub id (a valid id that is not
    local is left to transformers, which may find it in its cache)."""
    for name, paths in files.items():
        for path in paths if isinstance(paths, (list, tuple)) else [paths]:
            if path is not None and not os.path.exists(path):
                raise ValueError(f"{name} {path} does not exist.")
    for name, path in models.items():
        if path is None or os.path.exists(path):
            continue
        try:
            validate_repo_id(str(path))
        except HFValidationError:
            raise ValueError(f"{name} {path}: no such folder (nor a Hub model id).") from None


def check_launch(accelerator, script: str) -> None:
    """Refuses a launch of several processes (`WORLD_SIZE`) that Accelerate set up as fewer: each process would run
    the whole job alone, all writing into one output folder."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > accelerator.num_processes:
        raise RuntimeError(
            f"Launched as {launched} processes (WORLD_SIZE) but Accelerate set up {accelerator.num_processes}: each "
            "would run the whole job alone, writing into the same output folder. On a machine without GPUs, set "
            f"ACCELERATE_USE_CPU=1: `ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes {launched} "
            f"{script} ...` (`accelerate launch --cpu --num_processes {launched}` starts one process unless MPI is set "
            "up)."
        )


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes in bf16 natively (AVX512-BF16 or AMX, as oneDNN reports it); elsewhere PyTorch emulates
    bf16 on the CPU."""
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def warn_emulated_bf16(accelerator, script: str) -> bool:
    """Warns (and returns True) when a run asks for bf16 autocast on a CPU that emulates bf16: there a training step is
    slower than in fp32, not faster."""
    emulated = accelerator.mixed_precision == "bf16" and accelerator.device.type == "cpu" and not cpu_has_native_bf16()
    if emulated:
        logger.warning(
            "--mixed_precision bf16 on a CPU without native bf16 (no AVX512-BF16 or AMX): PyTorch emulates it, several "
            f"times slower than fp32. Run {script} with --mixed_precision no on this machine.",
            main_process_only=True,
        )
    return emulated


def end_run(accelerator) -> None:
    """Ends a run on every process: frees the prepared objects, then ends the trackers and the process group.

    Call it once the caller's own references to the prepared model are gone. The order matters with several
    processes: a DDP model holds the process group, and a group torn down with the model's last reference, late and
    outside `destroy_process_group`, is where two-process gloo runs were seen to hang after their work was done.
    """
    accelerator.wait_for_everyone()
    accelerator.free_memory()
    gc.collect()  # free_memory collects before it drops its own references; a DDP model's cycles need a second pass
    accelerator.end_training()


class OutputDirError(ValueError):
    """The output folder cannot be used as this run asks (another run's, a finished one, or changed arguments)."""


@dataclass(frozen=True)
class OutputLayout:
    """What a script writes into its output folder besides `run_args.json`, `metrics.jsonl` and `checkpoints/`.

    `finished`: outputs of a finished run (a fresh run must not replace them silently); `other`: anything else it
    writes (removed with them by `--overwrite_output_dir`); `resume_safe`: arguments that may differ between the runs
    sharing a folder (logging, evaluation, checkpoint frequency): every other argument must match."""

    finished: tuple[str, ...]
    other: tuple[str, ...] = ()
    resume_safe: frozenset[str] = frozenset()

    def all_outputs(self) -> tuple[str, ...]:
        return (RUN_ARGS_FILE, METRICS_FILE, CHECKPOINTS_DIR, *self.finished, *self.other)


def run_arguments(args) -> dict:
    """A dataclass of run arguments as the JSON `run_args.json` holds (tuples become lists)."""
    return json.loads(json.dumps(asdict(args)))


def differing_arguments(saved: Mapping, current: Mapping, ignore: Collection[str] = ()) -> dict[str, tuple]:
    """`{name: (saved value, current value)}` for the arguments both runs have and that differ (`ignore` aside)."""
    return {
        name: (saved[name], current[name])
        for name in sorted(saved)
        if name in current and name not in ignore and saved[name] != current[name]
    }


def _describe(differing: Mapping[str, tuple]) -> str:
    described = []
    for name, (saved, current) in differing.items():
        if name == INPUT_DIGESTS:
            changed = sorted(option for option in set(saved) | set(current) if saved.get(option) != current.get(option))
            described += [f"the content of {option} changed ({saved.get(option)} there, {current.get(option)} now)"
                          for option in changed]  # fmt: skip
        else:
            described.append(f"--{name} {saved!r} there, {current!r} now")
    return ", ".join(described)


def _read_json(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


INPUT_DIGESTS = "input_digests"  # the key of `run_args.json` holding the content digests of local training inputs


def _digest_of_path(path: Path) -> str:
    """`"<bytes> bytes, sha256 <hex>"` of a file, or of a folder's files (their relative paths, sizes and contents)."""
    if path.is_file():
        return f"{path.stat().st_size} bytes, sha256 {sha256_of_file(path)}"
    digest, size = hashlib.sha256(), 0
    for file in sorted(item for item in path.rglob("*") if item.is_file()):
        size += file.stat().st_size
        digest.update(f"{file.relative_to(path).as_posix()}\0{sha256_of_file(file)}\0".encode())
    return f"{size} bytes, sha256 {digest.hexdigest()}"


def input_digests(inputs: Mapping[str, str | os.PathLike | list | None]) -> dict[str, str | list[str]]:
    """Content digests of the local training inputs (option name -> path or paths; Hub ids and None are left out):
    stored in `run_args.json` and checkpoints as `INPUT_DIGESTS`, so that a resume refuses a file whose content changed
    under the same path, as it refuses a changed path (it would skip batches it never trained on)."""
    digests = {}
    for name, paths in inputs.items():
        local = [Path(path) for path in (paths if isinstance(paths, list | tuple) else [paths]) if path is not None]
        if local and all(path.exists() for path in local):
            found = [_digest_of_path(path) for path in local]
            digests[name] = found if isinstance(paths, list | tuple) else found[0]
    return digests


def checkpoint_to_resume(resume: bool, resume_from_checkpoint: str | None) -> str | None:
    """`--resume_from_checkpoint latest|PATH`, else "latest" for `--resume`, else None (a fresh run)."""
    return resume_from_checkpoint or ("latest" if resume else None)


def check_output_dir(
    output_dir: str | os.PathLike,
    run_args: Mapping,
    layout: OutputLayout,
    *,
    resume_from: str | None = None,
    overwrite: bool = False,
    inputs: Mapping[str, str | os.PathLike | None] | None = None,
) -> Path | None:
    """Checks, before any work, that this run may write into `output_dir`; returns the checkpoint to resume from.

    Every run refuses an `output_dir` that is or holds one of `inputs` (option name -> path, e.g. the starting model:
    the run would write over it, and `--overwrite_output_dir` delete it; `OutputOverwritesInputError`). A fresh run
    refuses a folder whose `run_args.json` differs from `run_args` (naming the arguments) once that run trained (it
    left a checkpoint, a logged step or a finished output: a run refused or failed before training does not block its
    own retry), one that holds a finished run, checkpoints, or outputs without `run_args.json`; every run refuses an
    `output_dir` that is a file. `overwrite` (`--overwrite_output_dir`) and `resume_from` (`--resume`: "latest" or a
    checkpoint folder) are the explicit choices; a resume refuses arguments that differ from the checkpoint's run
    (other than `layout.resume_safe`) instead of ignoring them."""
    output_dir = Path(output_dir)
    if overwrite and resume_from:
        raise OutputDirError("--overwrite_output_dir starts over and --resume continues: pass one of them.")
    if output_dir.exists() and not output_dir.is_dir():
        raise OutputDirError(f"--output_dir {output_dir} is a file: choose a folder (a new or an empty one).")
    saved = _read_json(output_dir / RUN_ARGS_FILE)
    fresh = not (overwrite or resume_from)
    if fresh and saved is not None:
        differing = differing_arguments(saved, run_args, layout.resume_safe)
        if differing and _trained_in(output_dir, layout):
            raise OutputDirError(
                f"{output_dir} holds a run with other arguments ({_describe(differing)}): pass "
                "--overwrite_output_dir to replace it, or choose another --output_dir."
            )
    check_output_keeps_inputs(output_dir, inputs or {}, output_name="--output_dir")
    if overwrite:
        return None
    if resume_from:
        return _check_resume(output_dir, saved, run_args, layout, resume_from)
    found = [name for name in layout.all_outputs() if name != RUN_ARGS_FILE and (output_dir / name).exists()]
    if saved is None and found:
        raise OutputDirError(
            f"{output_dir} holds the outputs of an earlier run ({', '.join(found)}) but no {RUN_ARGS_FILE} to compare "
            "with: pass --overwrite_output_dir to replace them, or choose another --output_dir."
        )
    finished = [name for name in layout.finished if (output_dir / name).exists()]
    if finished:
        raise OutputDirError(
            f"{output_dir} holds a finished run ({', '.join(finished)}): pass --overwrite_output_dir to replace it, "
            "or choose another --output_dir."
        )
    if list_checkpoints(output_dir):
        raise OutputDirError(
            f"{output_dir} already holds checkpoints of this run: pass --resume to continue from the latest, or "
            "--overwrite_output_dir to start over."
        )
    return None


def _trained_in(output_dir: Path, layout: OutputLayout) -> bool:
    """Whether the run of `output_dir` trained: it left a checkpoint, a logged step or a finished output. What a run
    writes before training (a tokenizer, the opened metrics log) a fresh run writes anew."""
    metrics = output_dir / METRICS_FILE
    logged = metrics.is_file() and metrics.stat().st_size > 0
    return logged or bool(list_checkpoints(output_dir)) or any((output_dir / name).exists() for name in layout.finished)


def _check_resume(output_dir: Path, saved: Mapping | None, run_args: Mapping, layout: OutputLayout, which: str) -> Path:
    """The checkpoint to resume from, once its run's arguments (and the folder's) match this run's."""
    checkpoint = resolve_checkpoint(output_dir, which)
    recorded = read_trainer_state(checkpoint).get("run_args")
    for origin, arguments in ((checkpoint, recorded), (output_dir / RUN_ARGS_FILE, saved)):
        differing = differing_arguments(arguments or {}, run_args, layout.resume_safe)
        if differing:
            raise OutputDirError(
                f"Cannot resume: {origin} was written by a run with other arguments ({_describe(differing)}). "
                "Resume with that run's arguments, or start a new run (--overwrite_output_dir or another "
                "--output_dir)."
            )
    return checkpoint


def claim_output_dir(
    accelerator, output_dir: str | os.PathLike, run_args: Mapping, layout: OutputLayout, *, overwrite: bool = False
) -> None:
    """After `check_output_dir`: removes an earlier run's outputs (`overwrite`) and what killed writes left behind,
    then records `run_args.json`. The main process writes (every process when `accelerator` is None); all wait."""
    output_dir = Path(output_dir)
    if accelerator is None or accelerator.is_main_process:
        if overwrite:
            for name in layout.all_outputs():
                path = output_dir / name
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
        for folder in (output_dir, output_dir / CHECKPOINTS_DIR):
            remove_stale_staging(folder)
        write_json_atomically(output_dir / RUN_ARGS_FILE, dict(run_args))
    if accelerator is not None:
        accelerator.wait_for_everyone()


# ---------------------------------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------------------------------


def list_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints of a run folder (`checkpoints/step_K` with `trainer_state.json`), oldest first. Not
    transformers' `get_last_checkpoint`: it finds `checkpoint-N` folders only, complete or not."""
    folder = Path(output_dir) / CHECKPOINTS_DIR
    if not folder.is_dir():
        return []
    found = [path for path in folder.glob("step_*") if path.name[5:].isdigit() and (path / TRAINER_STATE).is_file()]
    return sorted(found, key=lambda path: int(path.name[5:]))


def checkpoint_problem(checkpoint: str | os.PathLike) -> str | None:
    """Why `checkpoint` cannot be resumed from, or None: a missing or broken `trainer_state.json`, or a file cut
    short (safetensors weights whose header does not cover the file, a PyTorch file without its zip directory, as
    `Accelerator.save_state` writes them). Reads headers, not the tensors."""
    checkpoint = Path(checkpoint)
    try:
        state = read_trainer_state(checkpoint)
    except FileNotFoundError:
        return f"no {TRAINER_STATE}"
    except (OSError, ValueError) as error:
        return f"{TRAINER_STATE} is not readable JSON ({error})"
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        return f"{TRAINER_STATE} records no step"
    for path in sorted(checkpoint.iterdir()):
        try:
            if path.suffix == ".safetensors":
                with safe_open(path, "pt"):
                    pass
            elif path.suffix in (".bin", ".pkl", ".pt", ".pth"):
                with zipfile.ZipFile(path):
                    pass
        except (OSError, SafetensorError, zipfile.BadZipFile) as error:
            return f"{path.name} is cut short or corrupted ({error})"
    return None


def resolve_checkpoint(output_dir: str | os.PathLike, which: str) -> Path:
    """`which`: "latest" (the newest usable checkpoint in `output_dir`: a corrupted newer one, e.g. cut short by a
    full disk, is skipped with a warning that says why) or a checkpoint folder (refused when it is not usable)."""
    if which != "latest":
        path = Path(which)
        problem = checkpoint_problem(path)
        if problem is not None:
            raise OutputDirError(f"Cannot resume from {path}: {problem}.")
        return path
    checkpoints = list_checkpoints(output_dir)
    if not checkpoints:
        raise OutputDirError(f"Cannot resume: no complete checkpoint in {Path(output_dir) / CHECKPOINTS_DIR}.")
    skipped = []
    for checkpoint in reversed(checkpoints):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            for path, why in skipped:
                logger.warning(f"Skipped checkpoint {path}: {why}. Resuming from {checkpoint}.", main_process_only=True)
            return checkpoint
        skipped.append((checkpoint, problem))
    reasons = "; ".join(f"{path.name}: {why}" for path, why in skipped)
    raise OutputDirError(
        f"Cannot resume: no usable checkpoint in {Path(output_dir) / CHECKPOINTS_DIR} ({reasons}). Start over with "
        "--overwrite_output_dir."
    )


def read_trainer_state(checkpoint: str | os.PathLike) -> dict:
    return json.loads((Path(checkpoint) / TRAINER_STATE).read_text(encoding="utf-8"))


def save_checkpoint(
    accelerator, output_dir: str | os.PathLike, step: int, trainer_state: Mapping, save_total_limit: int | None = None
) -> Path:
    """`Accelerator.save_state` plus `trainer_state.json` into `checkpoints/step_{step}`, atomically: every process
    writes into one staging folder, renamed into place once all are done. Then keeps the newest `save_total_limit`."""
    target = Path(output_dir) / CHECKPOINTS_DIR / f"step_{step}"
    with atomic_directory(target, accelerator) as staging:
        accelerator.save_state(str(staging))
        if accelerator.is_main_process:
            write_json_atomically(staging / TRAINER_STATE, {"step": step, **trainer_state})
    if accelerator.is_main_process and save_total_limit:
        rotate_checkpoints(output_dir, save_total_limit)
    accelerator.wait_for_everyone()
    return target


def rotate_checkpoints(output_dir: str | os.PathLike, keep: int) -> list[Path]:
    """Deletes all but the newest `keep` complete checkpoints; returns the deleted ones. Our own rotation:
    Accelerate's `total_limit` needs its automatic naming, which ignores the folder given and prunes before writing."""
    removed = list_checkpoints(output_dir)[:-keep] if keep > 0 else []
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def load_checkpoint(accelerator, checkpoint: str | os.PathLike) -> dict:
    """Restores what `save_checkpoint` saved (model, optimizer, registered objects, RNG states); returns the
    trainer state."""
    accelerator.load_state(str(checkpoint))
    logger.info(f"Resumed from {checkpoint}.")
    return read_trainer_state(checkpoint)


# ---------------------------------------------------------------------------------------------------------------------
# Optimizer and schedule
# ---------------------------------------------------------------------------------------------------------------------


def dropout_seed(seed: int, step: int, process_index: int, micro_batch: int | None = None) -> int:
    """The seed of dropout's random stream for one optimizer step (or one of its micro-batches), on one process: it
    depends on these alone. Seeding torch's global RNG with it before each step makes a resumed run draw what an
    uninterrupted one draws; restoring the RNG state a checkpoint saved is not enough, because a DataLoader also
    draws from that RNG whenever an epoch's iterator is made, which a run resumed mid-epoch does at another point."""
    step_key = f"dropout-{step}" if micro_batch is None else f"dropout-{step}.{micro_batch}"
    digest = hashlib.blake2b(f"{seed}/{step_key}/{process_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def decay_parameter_names(model: torch.nn.Module) -> set[str]:
    """The parameters that take weight decay: all but biases and normalization weights, by transformers' `Trainer`
    rule (`Trainer.get_decay_parameter_names`, which reads nothing from the Trainer, so it is called without one)."""
    return set(Trainer.get_decay_parameter_names(None, model))


def create_optimizer(
    model: torch.nn.Module,
    learning_rate: float,
    weight_decay: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> torch.optim.AdamW:
    """AdamW with weight decay on every trainable parameter except biases and LayerNorm weights."""
    decay = decay_parameter_names(model)
    named = [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]
    groups = [
        {"params": [p for name, p in named if name in decay], "weight_decay": weight_decay},
        {"params": [p for name, p in named if name not in decay], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, eps=eps)


def warmup_steps(total_steps: int, warmup_ratio: float, num_warmup_steps: int | None = None) -> int:
    """`num_warmup_steps` if given, else `ceil(warmup_ratio x total_steps)` (as transformers' `TrainingArguments`)."""
    return num_warmup_steps if num_warmup_steps is not None else math.ceil(warmup_ratio * total_steps)


def create_scheduler(accelerator, optimizer, total_steps: int, num_warmup_steps: int, name: str = "linear"):
    """`transformers.get_scheduler`, registered for checkpointing. It is not passed to `accelerator.prepare` (which
    steps it once per process): `step_scheduler` steps it once per optimizer step."""
    scheduler = get_scheduler(name, optimizer, num_warmup_steps=num_warmup_steps, num_training_steps=total_steps)
    accelerator.register_for_checkpointing(scheduler)
    return scheduler


def step_scheduler(accelerator, scheduler) -> None:
    """One scheduler step per optimizer step, none when fp16's gradient scaler skipped the optimizer step."""
    if not accelerator.optimizer_step_was_skipped:
        scheduler.step()


# ---------------------------------------------------------------------------------------------------------------------
# Metrics log and the non-finite loss guard
# ---------------------------------------------------------------------------------------------------------------------


def _parse_metrics(path: Path) -> tuple[list[str], str | None]:
    """(the records of a metrics JSONL file as lines, a note on a dropped torn last line or None)."""
    if not path.is_file():
        return [], None
    lines = path.read_text(encoding="utf-8").split("\n")
    kept = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):  # no newline after it: the run was killed while writing it
                return kept, f"{path}:{number}: dropped a torn last line ({error})."
            raise ValueError(f"{path}:{number}: not a JSON record ({error}).") from error
        kept.append(line)
    return kept, None


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """The records of a metrics JSONL file; a torn last line is dropped, a malformed line elsewhere is an error
    naming the file and line."""
    return [json.loads(line) for line in _parse_metrics(Path(path))[0]]


class MetricsLog:
    """`metrics.jsonl` (written by the main process) and Accelerate's trackers. A resumed run first restores the
    file to what it held when its checkpoint was written (`trainer_state["metrics_lines"]`), so that records logged
    after the checkpoint by the killed run are neither kept nor duplicated."""

    def __init__(self, path: str | os.PathLike, accelerator, resume_state: Mapping | None = None):
        self.path, self.accelerator = Path(path), accelerator
        kept: list[str] = []
        if resume_state is not None:
            kept, torn = _parse_metrics(self.path)
            if torn:
                logger.warning(torn)
            if "metrics_lines" in resume_state:
                kept = kept[: resume_state["metrics_lines"]]
            else:  # a checkpoint that did not count its lines
                kept = [line for line in kept if json.loads(line).get("step", 0) <= resume_state["step"]]
        self.lines = len(kept)
        if accelerator.is_main_process:
            write_file_atomically(self.path, "".join(line + "\n" for line in kept))

    def log(self, record: dict) -> None:
        if self.accelerator.is_main_process:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
        self.lines += 1
        self.accelerator.log({key: value for key, value in record.items() if key != "step"}, step=record["step"])


class NonFiniteLossError(FloatingPointError):
    """The training loss (or, without a gradient scaler, the gradient norm) became NaN or infinite."""


def check_finite(accelerator, output_dir: str | os.PathLike, step: int, loss: float, grad_norm=None) -> None:
    """Stops a run whose loss is NaN/inf before the optimizer applies that step (the last checkpoint stays the last
    good one). A non-finite gradient norm counts too, except under fp16's gradient scaler, which skips such steps."""
    grad_norm = None if grad_norm is None else float(grad_norm)
    bad_norm = grad_norm is not None and not math.isfinite(grad_norm) and accelerator.scaler is None
    if math.isfinite(loss) and not bad_norm:
        return
    checkpoints = list_checkpoints(output_dir)
    what = f"loss is {loss}" if not math.isfinite(loss) else f"gradient norm is {grad_norm}"
    raise NonFiniteLossError(
        f"The training {what} at step {step}: training stopped. The last good checkpoint is "
        f"{checkpoints[-1] if checkpoints else 'none (no checkpoint was written)'}. Lower --learning_rate (or use "
        "bf16 instead of fp16) and start again with --overwrite_output_dir."
    )


__all__ = [
    "GRADIENT_CHECKPOINTING_HELP",
    "HUB_MODEL_ID_HELP",
    "PUSH_TO_HUB_HELP",
    "REPORT_TO_CHOICES",
    "REPORT_TO_HELP",
    "HelpFormatter",
    "CHECKPOINTS_DIR",
    "METRICS_FILE",
    "RUN_ARGS_FILE",
    "TRAINER_STATE",
    "MetricsLog",
    "NonFiniteLossError",
    "OutputDirError",
    "OutputLayout",
    "check_at_least",
    "check_finite",
    "check_in_range",
    "check_input_paths",
    "check_launch",
    "check_output_dir",
    "check_positive",
    "checkpoint_problem",
    "checkpoint_to_resume",
    "claim_output_dir",
    "create_optimizer",
    "create_scheduler",
    "decay_parameter_names",
    "differing_arguments",
    "enable_gradient_checkpointing",
    "hub_repo_id",
    "list_checkpoints",
    "push_folder_to_hub",
    "load_checkpoint",
    "read_metrics",
    "read_trainer_state",
    "resolve_checkpoint",
    "rotate_checkpoints",
    "run_arguments",
    "save_checkpoint",
    "step_scheduler",
    "trackers",
    "warmup_steps",
]
