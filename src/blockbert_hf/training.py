"""The training toolkit shared by pre-training (`blockbert_hf.pretraining`) and QA fine-tuning
(`blockbert_hf.qa.finetuning`).

An output folder of a run holds:
- `run_args.json`: the arguments of the run that owns the folder, written before any work (`claim_output_dir`);
- `checkpoints/step_K`: Accelerate's `save_state` (model, optimizer, scheduler, RNG states of every process) plus
  `trainer_state.json` (step, data position, metrics lines, the run's arguments), written atomically;
- `metrics.jsonl`: one JSON record per line (`MetricsLog`).

The guards run before any work: `check_launch` (a multi-process launch that Accelerate runs as one process), and
`check_output_dir` (an output folder that is or holds an input of the run, one of another run, a finished run, or a
resume with changed arguments).
"""

import argparse
import gc
import json
import math
import os
import shutil
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from .extras import TRAIN_EXTRA, require_extra


require_extra("blockbert_hf.training", "train", TRAIN_EXTRA)

import torch  # noqa: E402
from accelerate.logging import get_logger  # noqa: E402
from transformers import get_scheduler  # noqa: E402
from transformers.trainer_pt_utils import get_parameter_names  # noqa: E402

from .saving import (  # noqa: E402
    atomic_directory,
    check_output_keeps_inputs,
    remove_stale_staging,
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
# Guards
# ---------------------------------------------------------------------------------------------------------------------


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
    several times slower than in fp32 (about 9x for MiniLM on an AVX2 CPU), not faster."""
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
    return ", ".join(f"--{name} {saved!r} there, {current!r} now" for name, (saved, current) in differing.items())


def _read_json(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


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
    refuses a folder whose `run_args.json` differs from `run_args` (naming the arguments), one that holds a finished
    run, checkpoints, or outputs without `run_args.json`. `overwrite` (`--overwrite_output_dir`) and
    `resume_from` (`--resume`: "latest" or a checkpoint folder) are the explicit choices; a resume refuses arguments
    that differ from the checkpoint's run (other than `layout.resume_safe`) instead of ignoring them."""
    output_dir = Path(output_dir)
    if overwrite and resume_from:
        raise OutputDirError("--overwrite_output_dir starts over and --resume continues: pass one of them.")
    saved = _read_json(output_dir / RUN_ARGS_FILE)
    fresh = not (overwrite or resume_from)
    if fresh and saved is not None:
        differing = differing_arguments(saved, run_args, layout.resume_safe)
        if differing:
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
    """Complete checkpoints of a run folder (`checkpoints/step_K` with `trainer_state.json`), oldest first."""
    folder = Path(output_dir) / CHECKPOINTS_DIR
    if not folder.is_dir():
        return []
    found = [path for path in folder.glob("step_*") if path.name[5:].isdigit() and (path / TRAINER_STATE).is_file()]
    return sorted(found, key=lambda path: int(path.name[5:]))


def resolve_checkpoint(output_dir: str | os.PathLike, which: str) -> Path:
    """`which`: "latest" (the newest complete checkpoint in `output_dir`) or a checkpoint folder."""
    if which == "latest":
        checkpoints = list_checkpoints(output_dir)
        if not checkpoints:
            raise OutputDirError(f"Cannot resume: no complete checkpoint in {Path(output_dir) / CHECKPOINTS_DIR}.")
        return checkpoints[-1]
    path = Path(which)
    if not (path / TRAINER_STATE).is_file():
        raise OutputDirError(f"Cannot resume from {path}: it is not a complete checkpoint (no {TRAINER_STATE}).")
    return path


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

# Trainer's `get_decay_parameter_names`: no weight decay on biases and normalization weights.
_NO_DECAY_NAME_PATTERNS = [r"bias", r"layernorm", r"layer_norm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]


def decay_parameter_names(model: torch.nn.Module) -> set[str]:
    return set(get_parameter_names(model, [torch.nn.LayerNorm], _NO_DECAY_NAME_PATTERNS))


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
    "HelpFormatter",
    "CHECKPOINTS_DIR",
    "METRICS_FILE",
    "RUN_ARGS_FILE",
    "TRAINER_STATE",
    "MetricsLog",
    "NonFiniteLossError",
    "OutputDirError",
    "OutputLayout",
    "check_finite",
    "check_launch",
    "check_output_dir",
    "checkpoint_to_resume",
    "claim_output_dir",
    "create_optimizer",
    "create_scheduler",
    "decay_parameter_names",
    "differing_arguments",
    "list_checkpoints",
    "load_checkpoint",
    "read_metrics",
    "read_trainer_state",
    "resolve_checkpoint",
    "rotate_checkpoints",
    "run_arguments",
    "save_checkpoint",
    "step_scheduler",
    "warmup_steps",
]
