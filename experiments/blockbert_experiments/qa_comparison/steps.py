"""A cell's steps: the arguments of `examples/convert_roberta_to_blockbert.py` and `examples/run_qa.py`, their command
lines, and `run_step`, which runs one as a fresh process with its own peak memory (or in this process for tests)."""

import logging
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from os.path import relpath
from pathlib import Path

from blockbert_benchmarks.measuring.machine import recorded_command
from blockbert_benchmarks.measuring.memory import process_status_bytes, reset_peak_resident_set

from .. import EXAMPLES_DIR, run_example_in_process
from .grid import Cell, ComparisonConfig, batch_sizes, cell_recipe, eval_batch_size
from .layout import CellLayout, training_file
from .plan import estimated_steps


logger = logging.getLogger(__name__)


def convert_args(config: ComparisonConfig, cell: Cell, source: Path) -> list[str]:
    """The `examples/convert_roberta_to_blockbert.py` arguments of a cell's model."""
    model = CellLayout(config, cell).model
    args = [relpath(source), relpath(model), "--max_seq_length", str(cell.max_seq_length)]
    args += ["--attention_pattern", cell.attention_pattern, "--num_blocks", str(cell.num_blocks)]
    if cell.heads_per_shift:
        args += ["--heads_per_shift", cell.heads_per_shift]
    if cell.block_relative_positions:  # N = num_blocks x block_size, each block reading the first position rows
        args += ["--block_relative_positions", "--block_size", str(cell.max_seq_length // cell.num_blocks)]
    return args


def train_args(config: ComparisonConfig, cell: Cell, manifest: Mapping, train_minutes: float) -> list[str]:
    """The `examples/run_qa.py` arguments of a cell's fine-tuning (without `--resume`)."""
    layout = CellLayout(config, cell)
    recipe = cell_recipe(config, cell)
    per_device, accumulation = batch_sizes(config, cell)
    steps = estimated_steps(config, cell, manifest)
    checkpoint_every = max(1, math.floor(steps * config.checkpoint_minutes / max(train_minutes, 1e-9)))
    args = [
        "--model_name_or_path", relpath(layout.model),
        "--train_file", relpath(training_file(config, cell, manifest)),
        "--do_train",
        "--output_dir", relpath(layout.train),
        "--seed", str(cell.seed),
        "--max_seq_length", str(cell.max_seq_length),
        "--doc_stride", str(config.doc_stride),
        "--num_train_epochs", str(recipe.num_train_epochs),
        "--learning_rate", str(recipe.learning_rate),
        "--negative_window_rate", str(recipe.negative_window_rate),
        "--warmup_ratio", str(config.warmup_ratio),
        "--attention_probs_dropout_prob", str(config.attention_probs_dropout_prob),
        "--per_device_train_batch_size", str(per_device),
        "--gradient_accumulation_steps", str(accumulation),
        "--group_by_length",
        "--checkpointing_steps", str(checkpoint_every),
        "--save_total_limit", "1",
        "--mixed_precision", config.mixed_precision,
    ]  # fmt: skip
    if not cell.group_by_length:
        args.remove("--group_by_length")
    # run_qa lays out a block-relative model's windows as question_prefixed_blocks by default: such a cell names its own
    if cell.window_layout != "question_first" or cell.block_relative_positions:
        args += ["--window_layout", cell.window_layout]
    if cell.qa_objective != "window":  # the evaluations take it from the trained model
        args += ["--qa_objective", cell.qa_objective]
    if config.window_scoring is not None:
        args += ["--window_scoring", config.window_scoring]
    if cell.epoch_eval_set is not None:
        args += [
            "--do_eval", "--eval_strategy", "epoch",
            "--validation_file", relpath(Path(config.data_dir) / manifest["sets"][cell.epoch_eval_set]["file"]),
            "--per_device_eval_batch_size", str(eval_batch_size(config, cell.max_seq_length)),
        ]  # fmt: skip
    if cell.teacher is not None:  # the teacher's logits are computed once, cached beside the results
        args += [
            "--teacher_model_name_or_path", relpath(layout.teacher_model),
            "--teacher_logits", relpath(layout.teacher_logits),
            "--distillation_temperature", str(config.distillation_temperature),
            "--distillation_alpha", str(config.distillation_alpha),
        ]  # fmt: skip
    if recipe.max_train_samples is not None:
        args += ["--max_train_samples", str(recipe.max_train_samples)]
    if recipe.max_train_steps is not None:
        args += ["--max_train_steps", str(recipe.max_train_steps)]
    return args + _worker_args(config)


def eval_args(config: ComparisonConfig, cell: Cell, manifest: Mapping, test_set: str) -> list[str]:
    """The `examples/run_qa.py` arguments of a cell's evaluation on one test set."""
    layout = CellLayout(config, cell)
    args = [
        "--model_name_or_path", relpath(layout.trained_model),
        "--validation_file", relpath(Path(config.data_dir) / manifest["sets"][test_set]["file"]),
        "--do_eval",
        "--output_dir", relpath(layout.eval(test_set)),
        "--max_seq_length", str(cell.max_seq_length),
        "--doc_stride", str(config.doc_stride),
        "--per_device_eval_batch_size", str(eval_batch_size(config, cell.max_seq_length)),
        "--mixed_precision", config.eval_mixed_precision,
    ]  # fmt: skip
    if config.window_scoring is not None:
        args += ["--window_scoring", config.window_scoring]
    if config.max_eval_samples is not None:
        args += ["--max_eval_samples", str(config.max_eval_samples)]
    return args + _worker_args(config)


def _worker_args(config: ComparisonConfig) -> list[str]:
    workers = config.preprocessing_num_workers
    return [] if workers is None else ["--preprocessing_num_workers", str(workers)]


def command_line(script: str, args: Sequence[str], names: Mapping[str, Path] | None = None) -> str:
    """The step as a shell command from the repository root: as it runs, or, given `names` (`recorded_names`), as the
    results record it, with the folders outside the repository named (`$WORK_DIR/models/full-N512`)."""
    words = ["python", f"examples/{script}", *args]
    return shlex.join(words) if names is None else recorded_command(words, names)


@dataclass
class StepResult:
    """How a step ended: its exit status, wall seconds and peak RSS in MB (None where not measured), rounded to 0.1."""

    returncode: int
    seconds: float
    peak_rss_mb: float | None


class StepFailed(RuntimeError):
    """A step exited with a non-zero status: its cell is skipped and the run goes on with the next one."""


def check_step(result: StepResult, script: str, args: Sequence[str]) -> None:
    """Raises `StepFailed` with the command where the step did not succeed."""
    if result.returncode != 0:
        raise StepFailed(f"exit status {result.returncode}: {command_line(script, args)}")


def run_step(config: ComparisonConfig, script: str, args: Sequence[str], check: bool = True) -> StepResult:
    """Runs `examples/<script>` with `args`: as a fresh process with `config.threads` threads (its peak RSS from
    `wait4`), or, with `config.in_process`, by calling its `main` here; with `check`, a failure raises `StepFailed`."""
    logger.info(f"Running: {command_line(script, args)}")
    started = time.perf_counter()
    if config.in_process:  # its peak RSS from /proc, where the high-water mark can be reset
        reset = reset_peak_resident_set() is not None
        returncode = run_example_in_process(script, args)
        peak_rss_mb = process_status_bytes("VmHWM") / 2**20 if reset else None
    else:
        env = dict(os.environ, OMP_NUM_THREADS=str(config.threads), MKL_NUM_THREADS=str(config.threads))
        env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        process = subprocess.Popen([sys.executable, str(EXAMPLES_DIR / script), *args], env=env)
        try:
            _, status, usage = os.wait4(process.pid, 0)  # wait4: this child's own high-water mark
        except BaseException:
            process.kill()
            process.wait()
            raise
        returncode = process.returncode = os.waitstatus_to_exitcode(status)
        peak_rss_mb = usage.ru_maxrss / 1024
    seconds = round(time.perf_counter() - started, 1)
    result = StepResult(returncode, seconds, None if peak_rss_mb is None else round(peak_rss_mb, 1))
    if check:
        check_step(result, script, args)
    return result
