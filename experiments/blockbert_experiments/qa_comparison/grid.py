"""The grids of the QA experiments in priority order (`GRIDS`), their `Cell`s, `ComparisonConfig` (the command line's
options) and the recipe and batch sizes a cell trains with. What each grid measures: the README of its results folder.
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace

from blockbert_hf.train.qa.objective import check_qa_objective

from .. import option


BASELINE = "n512_full_seed0"
PARAGRAPHS = "paragraphs"  # training set of the ablation: the first half's questions with their paragraph as context
HALVES = ("second", "dev")  # what a cell is evaluated on: the test half, or the dev articles (recipe choice)
# Training windows without their question's answer kept at this rate (labelled null): about one per answer window.
SCREENING_NEGATIVE_RATE = 0.08


@dataclass(frozen=True)
class Cell:
    """One cell: the model, seed, training set (`train_<N>` by default) and evaluation sets, and where set its own
    `run_qa` options; `distilled_from`: the self-distilled encoder it starts from, `teacher`: its task teacher;
    `convergence_check`: dev sets and the F1 the cell must reach on each before it is scored on any other set."""

    name: str
    max_seq_length: int
    attention_pattern: str = "blockwise"
    num_blocks: int = 1
    heads_per_shift: str | None = None
    seed: int = 0
    train_set: str | None = None
    learning_rate: float | None = None
    num_train_epochs: float | None = None
    negative_window_rate: float | None = None
    eval_half: str = "second"
    window_layout: str = "question_first"
    block_relative_positions: bool = False
    epoch_eval_set: str | None = None
    eval_sets: tuple[str, ...] | None = None
    qa_objective: str = "window"
    distilled_from: str | None = None
    teacher: str | None = None
    group_by_length: bool = True
    max_train_samples: int | None = None
    effective_batch_size: int | None = None
    max_train_steps: int | None = None
    convergence_check: tuple[tuple[str, float], ...] | None = None

    @property
    def training_set(self) -> str:
        return self.train_set or f"train_{self.max_seq_length}"

    @property
    def model_name(self) -> str:
        """The converted model's folder name: cells that differ only in seed or training set share it."""
        name = f"{self.attention_pattern}-N{self.max_seq_length}"
        if self.attention_pattern == "blockwise":
            name += f"-n{self.num_blocks}-{(self.heads_per_shift or 'default').replace(':', '_')}"
        if self.block_relative_positions:
            name += "-block-relative"
        if self.distilled_from:
            name += f"-from-{self.distilled_from}"
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
        objective = ", per-block objective" if self.qa_objective == "per_block" else ""
        distilled = ", self-distilled" if self.distilled_from else ""
        teacher = f", task-distilled from {self.teacher}" if self.teacher else ""
        return f"N={self.max_seq_length} {model}, seed {self.seed}{trained}{objective}{distilled}{teacher}"

    def record(self) -> dict:
        """The cell as its results file records it: the fields added since the first cells were recorded only where a
        cell sets them, so that those cells' records keep their keys."""
        optional = ("distilled_from", "teacher", "max_train_samples", "effective_batch_size", "max_train_steps")
        left_out = [name for name in (*optional, "convergence_check") if getattr(self, name) is None]
        if self.group_by_length:
            left_out.append("group_by_length")  # likewise: recorded only where a cell draws its batches at random
        return {name: value for name, value in asdict(self).items() if name not in left_out}


# The comparison, on the recipe chosen on the dev articles (`--recipe_dir`), in two arms: Table 4 in small (N = 512,
# contexts filled to one 512-token window) and the long-document arm (sliding windows of 512 against BlockBERT at
# N = 1024 and 2048, trained on whole articles with negatives sampled as in the screening).
TABLE4_SETS = ("paragraph", "window_512")
LONG_SETS = ("paragraph", "window_512", "article", "sweep_512", "sweep_1024", "sweep_2048", "sweep_4096", "sweep_8192")
TABLE4 = dict(train_set="train_512", eval_sets=TABLE4_SETS)
LONG_ARM = dict(train_set="train_article", negative_window_rate=SCREENING_NEGATIVE_RATE)

# In priority order: what goes when time runs short is dropped from the end. N = 2048 uses n = 4: blocks of 512, each
# within the source's 512 position rows.
GRID: tuple[Cell, ...] = (
    Cell("n512_full_article_seed0", 512, "full", **LONG_ARM, eval_sets=LONG_SETS),
    Cell("n512_full_article_seed1", 512, "full", seed=1, **LONG_ARM, eval_sets=("paragraph", "window_512", "article")),
    Cell("n512_full_seed0", 512, "full", **TABLE4),
    Cell("n512_n2_10-2_seed0", 512, "blockwise", 2, "10:2", **TABLE4),
    Cell("n512_full_seed1", 512, "full", seed=1, **TABLE4),
    Cell("n512_n2_10-2_seed1", 512, "blockwise", 2, "10:2", seed=1, **TABLE4),
    Cell("n512_n3_8-2-2_seed0", 512, "blockwise", 3, "8:2:2", **TABLE4),
    Cell("n1024_n2_10-2", 1024, "blockwise", 2, "10:2", **LONG_ARM, eval_sets=LONG_SETS),
    Cell("n2048_n4_6-2-2-2", 2048, "blockwise", 4, "6:2:2:2", **LONG_ARM, eval_sets=LONG_SETS),
    Cell("n512_sparse_fixed", 512, "sparse_fixed", **TABLE4),
    Cell("n512_n3_8-2-2_seed1", 512, "blockwise", 3, "8:2:2", seed=1, **TABLE4),
)


# The recipe's choice on the dev articles (full attention at N = 512): one-epoch screening runs of each learning rate,
# the most likely for a small encoder first.
SCREENING_LEARNING_RATES = (1e-4, 2e-4, 5e-5, 3e-4)


def _dev_cell(name: str, **settings) -> Cell:
    """A recipe cell: full attention at N = 512 on whole articles, evaluated on the dev articles (unless `settings`
    say otherwise)."""
    defaults = dict(max_seq_length=512, attention_pattern="full", eval_half="dev", **LONG_ARM)
    return Cell(name, **{**defaults, **settings})


RECIPE_GRID: tuple[Cell, ...] = tuple(
    _dev_cell(f"dev_n512_full_lr{rate:g}", learning_rate=rate, num_train_epochs=1.0)
    for rate in SCREENING_LEARNING_RATES
)

# Then the epochs at the chosen rate: one run of the longest count, evaluated after every epoch (instead of one run per
# count).
RECIPE_EPOCHS = (2, 3, 4)
EPOCHS_GRID: tuple[Cell, ...] = (
    _dev_cell(
        f"dev_n512_full_ep{RECIPE_EPOCHS[-1]}",
        num_train_epochs=float(RECIPE_EPOCHS[-1]),
        epoch_eval_set="dev_window_512",
    ),
)

# Then the long model's window layout at N = 1024 (n = 2, 10:2): the question first with positions running on, against
# the question prefixed to every block with positions restarting in each.
N1024_N2 = dict(max_seq_length=1024, attention_pattern="blockwise", num_blocks=2, heads_per_shift="10:2")
PREFIXED = dict(window_layout="question_prefixed_blocks", block_relative_positions=True)
LAYOUT_GRID: tuple[Cell, ...] = (
    _dev_cell("dev_n1024_n2_question_first", **N1024_N2, num_train_epochs=1.0),
    _dev_cell("dev_n1024_n2_prefixed_blocks", **N1024_N2, num_train_epochs=1.0, **PREFIXED),
)
# Last, its training objective (question-prefixed blocks): one softmax over the window against one per block.
OBJECTIVE_GRID: tuple[Cell, ...] = tuple(
    _dev_cell(f"dev_n1024_n2_objective_{objective}", **N1024_N2, **PREFIXED, qa_objective=objective)
    for objective in ("window", "per_block")
)


# The distillation comparison's Stage A (results/distillation/stage_a, docs/distillation.md): (a) full attention and
# (b) n = 2 converted, (c) n = 2 from the self-distilled encoder, (d) (c) task-distilled from (a), (e) (c) and (f) (b)
# with the question prefixed to both blocks; the dev articles first, then the Table-4 sets.
DISTILLED_ENCODER_N512 = "minilm-n512-distilled"  # results/distillation/parts: its bf16 parts and restore command
STAGE_A_SETS = ("dev_paragraph", "dev_window_512", *TABLE4_SETS)
STAGE_A = dict(TABLE4, eval_sets=STAGE_A_SETS, learning_rate=2e-4, num_train_epochs=2.0)
# Prefixed, a filled context can overflow into a short window without the answer: batches grouped by length gather
# those, so these cells draw their batches at random.
PREFIXED_BLOCKS = dict(PREFIXED, group_by_length=False)


def _stage_a_distilled(name: str, seed: int, task_distilled: bool = False, prefixed: bool = False) -> Cell:
    distilled = dict(distilled_from=DISTILLED_ENCODER_N512, teacher="n512_full_seed0" if task_distilled else None)
    layout = PREFIXED_BLOCKS if prefixed else {}
    return Cell(name, 512, "blockwise", 2, "10:2", seed, **STAGE_A, **distilled, **layout)


DISTILLED_TABLE4_GRID: tuple[Cell, ...] = (
    Cell("n512_full_seed0", 512, "full", **STAGE_A),  # (a), also (d)'s teacher
    Cell("n512_n2_10-2_seed0", 512, "blockwise", 2, "10:2", **STAGE_A),  # (b)
    _stage_a_distilled("n512_n2_10-2_distilled_seed0", 0, task_distilled=False),  # (c)
    _stage_a_distilled("n512_n2_10-2_distilled_kd_seed0", 0, task_distilled=True),  # (d)
    Cell("n512_full_seed1", 512, "full", seed=1, **STAGE_A),
    _stage_a_distilled("n512_n2_10-2_distilled_seed1", 1, task_distilled=False),  # only if (c) is chosen
    _stage_a_distilled("n512_n2_10-2_distilled_kd_seed1", 1, task_distilled=True),  # only if (d) is chosen
    _stage_a_distilled("n512_n2_10-2_distilled_prefixed_seed0", 0, prefixed=True),  # (e)
    _stage_a_distilled("n512_n2_10-2_distilled_prefixed_seed1", 1, prefixed=True),  # only if (e) is chosen
    Cell("n512_n2_10-2_prefixed_seed0", 512, "blockwise", 2, "10:2", **STAGE_A, **PREFIXED_BLOCKS),  # (f)
)

# Stage B (results/distillation/stage_b, the decision rule's sixth amendment): N = 1024 over whole articles, sliding
# windows of 512 against n = 2 from the self-distilled encoder with the question prefixed to both blocks: 10:2, and 12:0
# (no head reads the other block: the lower bound). Every arm trains one epoch of every whole-article training question
# at the learning and negative rates chosen on the dev articles, batch 16; the dev sets first, then the verdict's set.
STAGE_B_TRAINING = dict(learning_rate=2e-4, num_train_epochs=1.0, effective_batch_size=16, group_by_length=False)
STAGE_B = dict(LONG_ARM, eval_sets=("dev_window_512", "dev_article", "article"), **STAGE_B_TRAINING)
# The sliding-windows cells' F1 before any test set: within single windows, and over whole articles (the null's test).
STAGE_B_CONVERGENCE_CHECK = (("dev_window_512", 45.0), ("dev_article", 43.0))
STAGE_B_SLIDING = dict(STAGE_B, convergence_check=STAGE_B_CONVERGENCE_CHECK)


def _stage_b_blockbert(heads: str, seed: int) -> Cell:
    name = f"n1024_n2_{heads.replace(':', '-')}_distilled_seed{seed}"
    return Cell(name, 1024, "blockwise", 2, heads, seed, **STAGE_B, **PREFIXED, distilled_from=DISTILLED_ENCODER_N512)


DISTILLED_LONG_GRID: tuple[Cell, ...] = (
    *(Cell(f"n512_full_article_seed{seed}", 512, "full", seed=seed, **STAGE_B_SLIDING) for seed in (0, 1, 2)),
    *(_stage_b_blockbert("10:2", seed) for seed in (0, 1, 2)),
    _stage_b_blockbert("12:0", 0),
)

GRIDS = {
    "comparison": GRID,
    "recipe": RECIPE_GRID,
    "epochs": EPOCHS_GRID,
    "layout": LAYOUT_GRID,
    "objective": OBJECTIVE_GRID,
    "distilled_table4": DISTILLED_TABLE4_GRID,
    "distilled_long": DISTILLED_LONG_GRID,
}
RECIPE_GRIDS = ("recipe", "epochs", "layout", "objective")  # reported together, in one results folder


@dataclass
class ComparisonConfig:
    """What `run_comparison`, `plan_comparison` and `write_report` need; `experiments/qa_comparison.py` parses it."""

    data_dir: str = option("outputs/long_qa_data", "the sets of experiments/build_long_context_qa.py")
    squad_file: str | None = option(None, "the SQuAD file the sets were built from (the paragraphs cell trains on it)")
    source_model: str | None = option(
        None, "the pretrained BERT/RoBERTa folder (default: the installed all-MiniLM-L6-v2)"
    )
    work_dir: str = option("outputs/qa_comparison", "converted models, checkpoints, predictions (large)")
    results_dir: str = option("results/qa_comparison", "small result files, the report and the plot")
    grid: str = option(
        "comparison",
        (
            "which grid: comparison (the attention configurations on the test half); recipe, epochs, layout or "
            "objective (the recipe's choice on the dev articles, results/qa_recipe/README.md); distilled_table4 or "
            "distilled_long (the distillation comparison's Stages A and B, results/distillation/README.md)"
        ),
    )
    distilled_dir: str | None = option(None, "the self-distilled encoders by name (results/distillation/README.md)")
    distillation_temperature: float = option(2.0, "T of the task-distilled cells")
    distillation_alpha: float = option(0.5, "the distillation loss's share of the task-distilled cells' loss")
    cells: list[str] = option(
        [],
        "run only these cells (default all): "
        + "; ".join(f"{name}: {', '.join(c.name for c in cells)}" for name, cells in GRIDS.items()),
    )
    test_sets: list[str] = option([], "evaluate only these sets (default: every test set of data_dir)")
    dry_run: bool = option(False, "print the plan with time estimates and stop")
    threads: int = option(2, "CPU threads of each step (OMP_NUM_THREADS)")
    preprocessing_num_workers: int | None = option(
        None, "processes of each step that cut questions into windows (same windows)"
    )
    # ---- the recipe, the same for every cell (a cell may set its own learning rate, epochs and negative rate)
    recipe_dir: str | None = option(
        None, "the recipe choice's results folder, whose choices override the options below"
    )
    window_scoring: str | None = option(
        None, "how answers are ranked across windows: null_relative or raw (default: run_qa's)"
    )
    long_window_layout: str = option(
        "question_first", "the window layout of the comparison's BlockBERT models at N > 512"
    )
    long_block_relative_positions: bool = option(False, "positions restart at every block in those models")
    long_qa_objective: str = option(
        "window", "the training objective of those models: window or per_block (question-prefixed blocks)"
    )
    learning_rate: float = option(5e-5, "chosen on the dev articles from 5e-5, 1e-4, 2e-4, 3e-4 (--grid recipe)")
    num_train_epochs: float = 1.0
    negative_window_rate: float = option(1.0, "share of the training windows without the answer that are kept")
    effective_batch_size: int = option(32, "windows per optimizer step")
    warmup_ratio: float = 0.1
    attention_probs_dropout_prob: float = option(
        0.0, "attention dropout while fine-tuning: 0 keeps PyTorch's fused SDPA kernel (faster on CPU)"
    )
    doc_stride: int = 128
    train_tokens_per_batch: int = option(
        4096, "per-device batch = this // N windows (gradient accumulation makes up the rest)"
    )
    eval_tokens_per_batch: int = option(16384, "evaluation batch = this // N windows")
    checkpoint_minutes: float = option(5.0, "about this much training between checkpoints")
    mixed_precision: str = option("no", "of fine-tuning: no or bf16 (autocast)")
    eval_mixed_precision: str = option("no", "of evaluation: no or bf16")
    max_train_samples: int | None = option(None, "only the first K training questions")
    max_train_steps: int | None = option(None, "at most K optimizer steps (overrides the epochs)")
    max_eval_samples: int | None = option(None, "only the first K questions of each set")
    # ---- the report
    baseline: str = option(BASELINE, "the cell every other cell is compared with")
    bootstrap_samples: int = 10_000
    bootstrap_seed: int = 0
    in_process: bool = option(False, "run the steps in this process (tests; memory is then not per step)")
    jobs: int = option(1, "cells run at once, each as its own process")
    report_after_each_cell: bool = option(True, "rewrite the report after each cell")


def grid_cells(config: ComparisonConfig) -> tuple[Cell, ...]:
    """The cells of `config.grid`; the comparison's BlockBERT models at N > 512 take the `config.long_*` options."""
    if config.grid not in GRIDS:
        raise ValueError(f"--grid {config.grid!r} is unknown: choose among {', '.join(GRIDS)}.")
    if config.grid != "comparison":
        return GRIDS[config.grid]
    per_block = check_qa_objective(config.long_qa_objective) == "per_block"
    if per_block and config.long_window_layout != "question_prefixed_blocks":
        raise ValueError(
            "--long_qa_objective per_block trains every block against its own null token: it needs "
            f"--long_window_layout question_prefixed_blocks, not {config.long_window_layout!r}."
        )
    options = ("window_layout", "block_relative_positions", "qa_objective")
    layout = {name: getattr(config, f"long_{name}") for name in options}
    return tuple(
        replace(cell, **layout) if cell.max_seq_length > 512 and cell.attention_pattern == "blockwise" else cell
        for cell in GRID
    )


@dataclass(frozen=True)
class Recipe:
    """The fine-tuning recipe of one cell: the run's, with the cell's own values where it sets them."""

    learning_rate: float
    num_train_epochs: float
    negative_window_rate: float
    max_train_samples: int | None = None
    effective_batch_size: int | None = None
    max_train_steps: int | None = None


def cell_recipe(config: ComparisonConfig, cell: Cell) -> Recipe:
    own = {field.name: getattr(cell, field.name) for field in fields(Recipe)}
    return Recipe(**{name: getattr(config, name) if value is None else value for name, value in own.items()})


def select_cells(names: Sequence[str], grid: Sequence[Cell] = GRID) -> list[Cell]:
    """The cells called `names` (all when empty), in the grid's priority order."""
    known = {cell.name for cell in grid}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"Unknown cell(s) {unknown}: choose among {', '.join(cell.name for cell in grid)}.")
    return [cell for cell in grid if not names or cell.name in names]


def batch_sizes(config: ComparisonConfig, cell: Cell) -> tuple[int, int]:
    """Per-device training batch (the largest divisor of the cell's effective batch within `train_tokens_per_batch`)
    and gradient accumulation steps."""
    batch = cell_recipe(config, cell).effective_batch_size
    fits = max(1, config.train_tokens_per_batch // cell.max_seq_length)
    per_device = max(d for d in range(1, batch + 1) if batch % d == 0 and d <= fits)
    return per_device, batch // per_device


def eval_batch_size(config: ComparisonConfig, max_seq_length: int) -> int:
    """Windows per evaluation batch: `eval_tokens_per_batch` tokens at N."""
    return max(1, config.eval_tokens_per_batch // max_seq_length)
