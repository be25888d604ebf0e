"""README.md cannot go stale: its Python blocks run, its shell commands parse, and its results are read from the files
that recorded them.

Python blocks. Every ```python block runs, in README order, in one shared namespace (like a doctest session), in a
fresh temporary folder that holds a link `data` to the repository's `data/` (as a clone's root would), with
HF_HUB_OFFLINE=1. A block may use what earlier blocks defined; any folder or name it uses must be made by a block of
the README. Tiny sizes: while the blocks run, `BlockBertConfig` gets small defaults for the size fields a block does
not pass: hidden_size = 4 x num_attention_heads, num_hidden_layers = 2, intermediate_size = 2 x hidden_size. Every
value a block passes (heads, N, n, heads_per_shift, ...) is kept, and so is the vocabulary size, so that any tokenizer
fits. A block that exports to ONNX (about half a minute) runs with the slow checks only
(`pytest -m slow tests/docs/test_readme.py`); no later block may need what it defines.

Shell commands. Every command in a ```bash block (comments included) or in a `code span` of the prose that runs
`python examples/X.py`, `accelerate launch [launcher options] examples/X.py` or `python -m blockbert_hf...` is parsed,
not run, by the parser of that script (its `build_parser()`; accelerate's own parser for the launcher options).
Placeholders (OUT, path/to/x, books/*.txt.gz) are ordinary words; a trailing `...` ("and more options") is dropped.
`make X`: X is a target of the Makefile. `pip install .[a,b]`: the extras exist in setup.cfg. `pytest tests/x.py`: the
file exists.

Figures. Every result the README reports (a speed or memory ratio, a perplexity, EM/F1, a time) is registered in
`FIGURES` below with the results file it comes from, and must equal that file's value as formatted there. The README
marks the passages that report results with `<!-- figures -->` ... `<!-- /figures -->` (HTML comments, not rendered;
inline within a paragraph or on their own lines around a table or block): every number inside them must be a
registered figure or one of the `ALLOWED` phrases, so a new figure without a source fails.
"""

import contextlib
import functools
import json
import os
import traceback
from pathlib import Path

import pytest
from readme_checks import (
    README,
    REPO_ROOT,
    Block,
    Command,
    Figure,
    Region,
    command_target,
    extras_in_setup_cfg,
    fenced_blocks,
    figure_regions,
    json_key,
    load_main_module,
    load_script,
    makefile_targets,
    markdown_cell,
    memory_ratio,
    parse,
    readme_commands,
    requested_extras,
    text_number,
    time_ratio,
    unaccounted_numbers,
)

from blockbert_hf import BlockBertConfig


README_TEXT = README.read_text()

# ---------------------------------------------------------------------------------------------------------------------
# Python blocks
# ---------------------------------------------------------------------------------------------------------------------


def with_tiny_sizes(original_init):
    """`BlockBertConfig.__init__` with the tiny-size defaults of the module docstring."""
    default_heads = BlockBertConfig.__dataclass_fields__["num_attention_heads"].default

    @functools.wraps(original_init)
    def init(self, *args, **kwargs):
        kwargs.setdefault("hidden_size", 4 * kwargs.get("num_attention_heads", default_heads))
        kwargs.setdefault("num_hidden_layers", 2)
        kwargs.setdefault("intermediate_size", 2 * kwargs["hidden_size"])
        original_init(self, *args, **kwargs)

    return init


def is_slow(block: Block) -> bool:
    return "onnx" in block.code.lower()


class ReadmeSession:
    """The Python blocks run one after the other in one namespace. A test may ask for any block: the blocks before it
    that have not run yet run first (except slow ones), so that `-k` can pick a single block."""

    def __init__(self, blocks: list[Block], folder: Path):
        self.blocks, self.folder = blocks, folder
        self.namespace = {"__name__": "__readme__"}
        self.next = 0
        self.failed: list[Block] = []

    def run(self, index: int) -> None:
        for earlier in self.blocks[self.next : index]:
            if not is_slow(earlier):
                with contextlib.suppress(pytest.fail.Exception):  # recorded in self.failed
                    self._execute(earlier)
        self.next = max(self.next, index + 1)
        block = self.blocks[index]
        if self.failed:
            pytest.fail(
                f"README.md:{block.line} ({block.first_line!r}) did not run: the block at README.md:"
                f"{self.failed[0].line} ({self.failed[0].first_line!r}) failed before it",
                pytrace=False,
            )
        self._execute(block)

    def _execute(self, block: Block) -> None:
        # Padding with blank lines makes the code's line numbers README.md's: tracebacks point at the README.
        code = compile("\n" * (block.line - 1) + block.code, str(README), "exec")
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(self.folder)
            patch.setenv("HF_HUB_OFFLINE", "1")
            patch.setattr(BlockBertConfig, "__init__", with_tiny_sizes(BlockBertConfig.__init__))
            try:
                exec(code, self.namespace)
            except Exception as error:
                self.failed.append(block)
                frames = traceback.extract_tb(error.__traceback__)
                first = next((i for i, frame in enumerate(frames) if frame.filename == str(README)), 0)
                where = next((frame.lineno for frame in reversed(frames) if frame.filename == str(README)), block.line)
                pytest.fail(
                    f"README.md:{where} (in the block at line {block.line}, {block.first_line!r}) raised "
                    f"{type(error).__name__}: {error}\n\n"
                    + "".join(traceback.format_list(frames[first:]) + traceback.format_exception_only(error)),
                    pytrace=False,
                )


PYTHON_BLOCKS = [block for block in fenced_blocks(README_TEXT) if block.language == "python"]


@pytest.fixture(scope="module")
def readme_session(tmp_path_factory):
    folder = tmp_path_factory.mktemp("readme")
    (folder / "data").symlink_to(REPO_ROOT / "data", target_is_directory=True)
    return ReadmeSession(PYTHON_BLOCKS, folder)


@pytest.mark.parametrize(
    "index",
    [
        pytest.param(index, marks=[pytest.mark.slow] if is_slow(block) else [], id=f"README.md:{block.line}")
        for index, block in enumerate(PYTHON_BLOCKS)
    ],
)
def test_python_block_runs(index, readme_session):
    readme_session.run(index)


def test_tiny_sizes_keep_what_a_block_passes():
    tiny = with_tiny_sizes(BlockBertConfig.__init__)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BlockBertConfig, "__init__", tiny)
        config = BlockBertConfig(num_attention_heads=4, max_position_embeddings=66, heads_per_shift="3:1")
        explicit = BlockBertConfig(hidden_size=96, num_hidden_layers=3)
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (16, 2, 32)
    assert (config.num_attention_heads, config.max_sequence_length, config.heads_per_shift) == (4, 64, [3, 1])
    assert config.vocab_size == 50265
    assert (explicit.hidden_size, explicit.num_hidden_layers, explicit.intermediate_size) == (96, 3, 192)
    assert BlockBertConfig().hidden_size == 768  # only while the blocks run


def test_a_failing_block_is_named_by_its_readme_line(tmp_path):
    blocks = [Block("python", 40, "x = 1"), Block("python", 50, "y = x\nz = y / 0")]
    session = ReadmeSession(blocks, tmp_path)
    with pytest.raises(pytest.fail.Exception, match=r"README.md:51 \(in the block at line 50, 'y = x'\).*Division"):
        session.run(1)
    with pytest.raises(pytest.fail.Exception, match="did not run: the block at README.md:50"):
        ReadmeSession([*blocks, Block("python", 60, "pass")], tmp_path).run(2)


# ---------------------------------------------------------------------------------------------------------------------
# Shell commands
# ---------------------------------------------------------------------------------------------------------------------

# Their owners give these a `build_parser()`; until then their commands are skipped (only while it is missing).
AWAITING_BUILD_PARSER = {"experiments/demo.py", "blockbert_hf.qa"}


def command_problem(command: Command) -> str | None:
    """What is wrong with a README command, or None. Skips a command whose parser is awaited."""
    try:
        target = command_target(command.argv)
    except ValueError as error:  # shlex: an unclosed quote
        return f"not a shell command: {error}"
    if target.launcher_problem:
        return f"accelerate launch: {target.launcher_problem}"
    if target.kind in ("script", "module"):
        if target.kind == "script" and not (REPO_ROOT / target.name).is_file():
            return f"{target.name} does not exist"
        try:
            module = load_script(target.name) if target.kind == "script" else load_main_module(target.name)
        except ModuleNotFoundError as error:
            return str(error)
        if not hasattr(module, "build_parser"):
            if target.name in AWAITING_BUILD_PARSER:
                pytest.skip(f"{target.name} has no build_parser() yet: its command line cannot be checked")
            return f"{target.name} has no build_parser(): add one that returns the parser main() uses"
        parser = module.build_parser()
        parser.prog = Path(target.name).name  # instead of pytest's: errors name the script
        if command.elided:
            allow_missing_arguments(parser)
        return parse(parser, target.arguments)[1]
    if target.kind == "make":
        unknown = sorted(set(target.arguments) - makefile_targets())
        return f"no Makefile target {', '.join(unknown)}" if unknown else None
    if target.kind == "pip":
        unknown = sorted(requested_extras(target.arguments) - extras_in_setup_cfg())
        return f"setup.cfg has no extra {', '.join(unknown)}" if unknown else None
    if target.kind == "pytest":
        paths = [word.split("::")[0] for word in target.arguments if word.startswith("tests/")]
        missing = [path for path in paths if not (REPO_ROOT / path).exists()]
        return f"{', '.join(missing)} does not exist" if missing else None
    return None


def allow_missing_arguments(parser) -> None:
    """For a command that ends in `...`: the arguments it leaves out may be required ones."""
    for action in parser._actions:
        action.required = False
        if not action.option_strings and action.nargs in (None, "+"):
            action.nargs = "?" if action.nargs is None else "*"


def is_checked(command: Command) -> bool:
    try:
        return command_target(command.argv).kind != "other"
    except ValueError:
        return True  # reported by the test


COMMANDS = [command for command in readme_commands(README_TEXT) if is_checked(command)]


@pytest.mark.parametrize(
    "command", [pytest.param(c, id=f"README.md:{c.line} {' '.join(c.text.split()[:2])}") for c in COMMANDS]
)
def test_shell_command_parses(command):
    problem = command_problem(command)
    assert problem is None, f"README.md:{command.line}: `{command.text}`: {problem}"


def test_the_command_checks_catch_mistakes():
    commands = readme_commands(
        "```bash\n"
        "python examples/convert_roberta_to_blockbert.py SRC OUT \\\n    --heads_per_shift 10:2\n"
        "make tset  # `make format` fixes\n"
        "# two processes: ACCELERATE_USE_CPU=1 accelerate launch --num_procs 2 examples/run_mlm.py ...\n"
        "```\n\n"
        'Prose: `pip install -e ".[exprot]"`, `python examples/run_qa.py --no_such_option ...`, `ls -l`.\n'
    )
    assert [command.line for command in commands] == [2, 4, 4, 5, 8, 8]
    problems = [command_problem(command) for command in commands]
    assert "unrecognized arguments: --heads_per_shift 10:2" in problems[0]
    assert problems[1:3] == ["no Makefile target tset", None]  # `make format` is a target
    assert "unrecognized arguments: --num_procs" in problems[3]
    assert problems[4] == "setup.cfg has no extra exprot"
    assert "unrecognized arguments: --no_such_option" in problems[5]


# ---------------------------------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------------------------------

TRAIN_STEP = "docs/benchmarks/train_step.json"
INFERENCE = "docs/benchmarks/inference.json"
PRETRAINING = "docs/pretraining_comparison/comparison.json"
QA_HALVES = "docs/qa_squad_halves/eval_metrics.json"


def ratio_of(numerator, denominator):
    return lambda data: numerator(data) / denominator(data)


DEMO = "docs/demo/results.json"
QA_COMPARISON = "docs/qa_comparison/results.json"
BLOCKWISE_512, FULL_512 = "n512_n2_10-2_seed0", "n512_full_seed0"
BLOCKWISE_512_SEED_1, FULL_512_SEED_1 = "n512_n2_10-2_seed1", "n512_full_seed1"
BLOCKWISE_1024, FULL_1024 = "n1024_n2_9-3", "n1024_full"


def comparison_f1(cell: str, test_set: str):
    return json_key("cells", cell, "sets", test_set, "f1")


def f1_loss(test_set: str, bound: str):
    """Full attention's F1 lead over BlockBERT n = 2 at N = 512 (the negated difference), or a bound of its interval."""
    return lambda data: -data["differences_to_baseline"][BLOCKWISE_512][test_set]["f1"][bound]


def seed_loss(test_set: str):
    """How much lower full attention at N = 512 scored (F1) with its second fine-tuning seed."""
    return lambda data: -data["seed_spread"][FULL_512_SEED_1][test_set]["f1"]["difference"]


DURATIONS = "docs/test_durations.json"


def demo_cost(kernel: str, model: str, ratio: str):
    return json_key("efficiency", "kernels", kernel, f"{ratio}_ratio_to_full", model)


FIGURES = [
    # `make demo`, as run here: its results file (docs/demo).
    Figure("with N = {} tokens in", DEMO, json_key("model", "max_seq_length"), "{}"),
    Figure("tokens in {} blocks of", DEMO, json_key("model", "num_blocks"), "{}"),
    Figure("blocks of {}, checks", DEMO, lambda r: r["model"]["max_seq_length"] // r["model"]["num_blocks"], "{}"),
    Figure("on {} bundled SQuAD articles", DEMO, lambda r: len(r["training"]["articles"]), "{}"),
    Figure("over {} tokens with full attention", DEMO, json_key("efficiency", "tokens"), "{:,}"),
    Figure("fresh clone in {} minutes", DEMO, lambda r: r["elapsed_seconds"] / 60, "{:.1f}"),
    Figure("F1 {} over the questions' own", DEMO, json_key("held_out", "own_paragraph", "f1"), "{:.1f}"),
    Figure("F1 {} over the whole", DEMO, json_key("held_out", "whole_document", "f1"), "{:.1f}"),
    Figure("(fine-tuned on {} questions", QA_HALVES, json_key("train_examples"), "{:,}"),
    Figure("reach F1 {} over paragraphs", QA_HALVES, json_key("f1"), "{:.1f}"),
    Figure("whole {}-token article", DEMO, json_key("held_out", "document_tokens"), "{:,}"),
    Figure("n = 4 took {}x the time", DEMO, demo_cost("eager", "n4", "time")),
    Figure("and {}x the peak memory of full attention", DEMO, demo_cost("eager", "n4", "memory")),
    Figure("scores, and {}x and", DEMO, demo_cost("sdpa", "n4", "time")),
    Figure("x and {}x with PyTorch's", DEMO, demo_cost("sdpa", "n4", "memory")),
    # What the measurements show: the benchmarks (BERT-base dims, same-run ratios, docs/benchmarks.md).
    Figure("n = 2 needs {}x", TRAIN_STEP, memory_ratio((4, 1024), "blockbert-n2-sdpa", "roberta-eager")),
    Figure("and {}x the inference time", INFERENCE, time_ratio((2, 4096), "blockbert-n2-sdpa", "roberta-sdpa")),
    Figure("(n = 4: {}x)", INFERENCE, time_ratio((2, 4096), "blockbert-n4-sdpa", "roberta-sdpa")),
    Figure("saves little time ({}x)", INFERENCE, time_ratio((8, 1024), "blockbert-n2-sdpa", "roberta-sdpa")),
    # The benchmarks table.
    Figure("RoBERTa-sdpa | {} (n=3", TRAIN_STEP, time_ratio((4, 1024), "blockbert-n2-sdpa", "roberta-sdpa")),
    Figure("(n=3: {})", TRAIN_STEP, time_ratio((4, 1024), "blockbert-n3-sdpa", "roberta-sdpa")),
    Figure("peak memory / RoBERTa | {} (", TRAIN_STEP, memory_ratio((4, 1024), "blockbert-n2-sdpa", "roberta-eager")),
    Figure("(n=3: {};", TRAIN_STEP, memory_ratio((4, 1024), "blockbert-n3-sdpa", "roberta-eager")),
    Figure("/ RoBERTa-sdpa | {},", INFERENCE, time_ratio((8, 1024), "blockbert-n2-sdpa", "roberta-eager")),
    Figure(", {} (", INFERENCE, time_ratio((8, 1024), "blockbert-n2-sdpa", "roberta-sdpa")),
    Figure(
        "({} in a 10-round repeat)",
        "docs/benchmarks/inference_8x1024_repeat/inference.json",
        time_ratio((8, 1024), "blockbert-n2-sdpa", "roberta-sdpa"),
        "{:.3f}",
    ),
    Figure("(window 512) | {} (", INFERENCE, time_ratio((2, 4096), "blockbert-n2-sdpa", "roberta-sdpa")),
    Figure("(n=4: {})", INFERENCE, time_ratio((2, 4096), "blockbert-n4-sdpa", "roberta-sdpa")),
    Figure("), {} |", INFERENCE, time_ratio((2, 4096), "blockbert-n2-sdpa", "longformer")),
    # The pre-training comparison: its setup and results.
    Figure("({} layers,", PRETRAINING, json_key("full-seed0", "model", "num_hidden_layers"), "{}"),
    Figure("hidden {},", PRETRAINING, json_key("full-seed0", "model", "hidden_size"), "{}"),
    Figure("N = {}, 6", PRETRAINING, json_key("full-seed0", "model", "max_sequence_length"), "{}"),
    Figure("{} M tokens per run", PRETRAINING, lambda runs: runs["full-seed0"]["train_tokens"] / 1e6, "{:.1f}"),
    Figure("perplexity was {} /", PRETRAINING, json_key("full-seed0", "eval_perplexity"), "{:.0f}"),
    # full-seed1 re-scored on the masks of the other runs (its logged value used other masks): only in this table.
    Figure(
        "/ {} for full attention (two seeds)",
        "docs/pretraining_comparison/README.md",
        markdown_cell("full-seed1", "val. perplexity, same masks"),
        "{:.0f}",
    ),
    Figure("{} for n = 2", PRETRAINING, json_key("blockwise-n2", "eval_perplexity"), "{:.0f}"),
    Figure("and {} for n = 3", PRETRAINING, json_key("blockwise-n3", "eval_perplexity"), "{:.0f}"),
    Figure(
        "at {}x the training tokens/s",
        PRETRAINING,
        ratio_of(json_key("blockwise-n2", "tokens_per_second"), json_key("full-seed1", "tokens_per_second")),
        "{:.1f}",
    ),
    # QA: MiniLM converted to n = 2, fine-tuned on one half of SQuAD v1.1 dev, evaluated on the other.
    Figure("for {} epochs", QA_HALVES, json_key("num_epochs"), "{}"),
    Figure("EM {} /", QA_HALVES, json_key("exact_match"), "{:.1f}"),
    Figure("F1 {} on", QA_HALVES, json_key("f1"), "{:.1f}"),
    Figure("({} minutes of training", QA_HALVES, lambda metrics: metrics["train_seconds"] / 60, "{:.1f}"),
    Figure("and {} s of evaluation", QA_HALVES, json_key("eval_seconds"), "{:.0f}"),
    # The pipeline's timing is recorded in the run's README only.
    Figure(
        "over a {}-token context",
        "docs/qa_squad_halves/README.md",
        text_number(r"a context of ([\d,]+) tokens"),
        "{:,.0f}",
    ),
    Figure("context in {} s", "docs/qa_squad_halves/README.md", text_number(r"\*\*([\d.]+) s\*\*"), "{:.2f}"),
    # The long-document QA comparison (docs/qa_comparison): BlockBERT n = 2 at N = 512 and 1024 against full attention
    # at N = 512.
    Figure("N = 512 scored F1 {} over single", QA_COMPARISON, comparison_f1(BLOCKWISE_512, "paragraph"), "{:.1f}"),
    Figure("paragraphs, {} over contexts", QA_COMPARISON, comparison_f1(BLOCKWISE_512, "sweep_4096"), "{:.1f}"),
    Figure(
        "contexts of {} tokens",
        QA_COMPARISON,
        json_key("cells", BLOCKWISE_512, "sets", "sweep_4096", "target_tokens"),
        "{:,}",
    ),
    Figure("and {} over whole articles, against", QA_COMPARISON, comparison_f1(BLOCKWISE_512, "article"), "{:.1f}"),
    Figure("against {},", QA_COMPARISON, comparison_f1(FULL_512, "paragraph"), "{:.1f}"),
    Figure(", {} and", QA_COMPARISON, comparison_f1(FULL_512, "sweep_4096"), "{:.1f}"),
    Figure("and {} for full attention with", QA_COMPARISON, comparison_f1(FULL_512, "article"), "{:.1f}"),
    Figure(
        "in {}x the time",
        QA_COMPARISON,
        lambda data: data["cells"][BLOCKWISE_512]["train"]["seconds"] / data["cells"][FULL_512]["train"]["seconds"],
    ),
    Figure("(by {} and", QA_COMPARISON, f1_loss("paragraph", "difference"), "{:.1f}"),
    Figure(
        "and {} F1 points, each",
        QA_COMPARISON,
        lambda data: -data["differences_at_the_same_seed"][BLOCKWISE_512_SEED_1]["paragraph"]["f1"]["difference"],
        "{:.1f}",
    ),
    Figure("seed scored {} points lower over paragraphs", QA_COMPARISON, seed_loss("paragraph"), "{:.1f}"),
    Figure("and {} lower over whole articles", QA_COMPARISON, seed_loss("article"), "{:.1f}"),
    Figure("it scored F1 {} over paragraphs", QA_COMPARISON, comparison_f1(BLOCKWISE_1024, "paragraph"), "{:.1f}"),
    Figure("and {} over whole articles, below", QA_COMPARISON, comparison_f1(BLOCKWISE_1024, "article"), "{:.1f}"),
    Figure(
        "so did full attention at N = {} (F1",
        QA_COMPARISON,
        json_key("cells", FULL_1024, "cell", "max_seq_length"),
        "{}",
    ),
    Figure("N = 1024 (F1 {} and", QA_COMPARISON, comparison_f1(FULL_1024, "paragraph"), "{:.1f}"),
    Figure(" and {}): at the same N", QA_COMPARISON, comparison_f1(FULL_1024, "article"), "{:.1f}"),
    Figure(
        "at N = {} (n = 2, 9:3, one seed)",
        QA_COMPARISON,
        json_key("cells", BLOCKWISE_1024, "cell", "max_seq_length"),
        "{}",
    ),
    Figure(
        "trained on {} positions",
        QA_COMPARISON,
        json_key("cells", BLOCKWISE_1024, "source_model", "sequence_length"),
        "{}",
    ),
    # Development: the suites' sizes and wall times, recorded by `make test-durations`.
    Figure("default suite: {} tests", DURATIONS, json_key("test", "tests"), "{}"),
    Figure("in about {} minutes on 2 CPU cores", DURATIONS, lambda d: d["test"]["seconds"] / 60, "{:.0f}"),
    Figure("slow checks too: {} tests", DURATIONS, json_key("test-all", "tests"), "{}"),
    Figure("tests, {} minutes", DURATIONS, lambda d: d["test-all"]["seconds"] / 60, "{:.0f}"),
]

# Numbers in figures regions that are not results: settings, names, the paper's figures.
ALLOWED = [
    *("n=2", "n=3", "n=4", "n = 2", "n = 3", "n = 4", "4x1024", "8x1024", "2x4096", "dropout 0.1", "window 512"),
    *("10-round", "(the paper: 0.73x)", "6-layer", "--num_train_epochs 2", "dev-v1.1", "2-core"),
    *("all-MiniLM-L6-v2", "SQuAD v1.1", "F1", "2 cores", "2 CPU cores"),
    "paper 0.73 / 0.64",  # the paper's Table 3
    *("N = 512 scored", "95%", "9:3", "N = 1024 the paper's", "full attention at N = 512 on"),
]


def figure_problem(figure: Figure, regions: list[Region]) -> str | None:
    """None when the figure is in a figures region and every time it is there, it shows the file's value."""
    expected = figure.value()
    shown = [match.group(1) for region in regions for match in figure.pattern().finditer(region.text)]
    if not shown:
        return f"{figure.text!r} is not in a figures region of README.md (expected {figure.text.format(expected)!r})"
    if any(number != expected for number in shown):
        return f"README.md shows {figure.text.format(shown[0])!r} but {figure.source} gives {expected}"
    return None


@pytest.mark.parametrize(
    "figure",
    [
        pytest.param(figure, id=figure.text, marks=[pytest.mark.xfail(reason=figure.stale, strict=True)])
        if figure.stale
        else pytest.param(figure, id=figure.text)
        for figure in FIGURES
    ],
)
def test_figure_is_read_from_its_results_file(figure):
    problem = figure_problem(figure, figure_regions(README_TEXT))
    assert problem is None, problem


def test_every_number_in_a_figures_region_is_registered_or_allowed():
    regions = figure_regions(README_TEXT)
    assert regions, "README.md has no <!-- figures --> region"
    unsourced = [problem for region in regions for problem in unaccounted_numbers(region, FIGURES, ALLOWED)]
    assert not unsourced, "numbers without a results file (register them in FIGURES, or ALLOWED):\n" + "\n".join(
        unsourced
    )


def test_the_figure_checks_catch_mistakes(tmp_path):
    results = tmp_path / "results.json"
    results.write_text('{"exact_match": 55.01}')
    source = os.path.relpath(results, REPO_ROOT)
    figure = Figure("EM {} on", source, json_key("exact_match"), "{:.1f}")
    regions = figure_regions("x <!-- figures -->EM 55.1 on\n12 questions<!-- /figures --> 7")
    assert figure_problem(figure, regions) == f"README.md shows 'EM 55.1 on' but {source} gives 55.0"
    assert figure_problem(figure, figure_regions("EM 55.0 on")) is not None  # outside a region
    assert [problem.split(" (")[0] for problem in unaccounted_numbers(regions[0], [figure], [])] == ["README.md:2: 12"]
    with pytest.raises(ValueError, match="without its"):
        figure_regions("<!-- figures --> 1")


def test_the_qa_comparison_claim_that_blockbert_at_n_1024_lost_on_every_test_set_holds():
    """The README says BlockBERT at N = 1024 scored below full attention at N = 512 on every test set."""
    assert " ".join(README_TEXT.split()).count("below full attention at N = 512 on every test set") == 1
    report = json.loads((REPO_ROOT / QA_COMPARISON).read_text())
    measured = report["cells"][BLOCKWISE_1024]
    assert measured["finished"] and set(measured["sets"]) == set(report["cells"][FULL_512]["sets"])
    for test_set, difference in report["differences_to_baseline"][BLOCKWISE_1024].items():
        assert difference["f1"]["excludes_zero"] and difference["f1"]["high"] < 0, (test_set, difference["f1"])


def test_the_qa_comparison_claim_that_blockbert_matched_full_attention_at_n_1024_holds():
    """The README says every interval between BlockBERT and full attention, both at N = 1024, includes zero."""
    assert "at the same N, every 95% interval of the difference between the two includes zero" in " ".join(
        README_TEXT.split()
    )
    report = json.loads((REPO_ROOT / QA_COMPARISON).read_text())
    assert report["cells"][FULL_1024]["finished"]
    differences = report["differences_at_the_same_window"][BLOCKWISE_1024]
    assert set(differences) == set(report["cells"][FULL_1024]["sets"])
    for test_set, difference in differences.items():
        assert not difference["f1"]["excludes_zero"], (test_set, difference["f1"])


def test_the_qa_comparison_claim_that_blockbert_lost_over_paragraphs_at_both_seeds_holds():
    """The README says BlockBERT n = 2 lost over paragraphs with both seeds, each interval excluding zero."""
    assert "each 95% interval over articles excluding zero" in README_TEXT
    report = json.loads((REPO_ROOT / QA_COMPARISON).read_text())
    for compared, cell in (
        ("differences_to_baseline", BLOCKWISE_512),
        ("differences_at_the_same_seed", BLOCKWISE_512_SEED_1),
    ):
        f1 = report[compared][cell]["paragraph"]["f1"]
        assert f1["excludes_zero"] and f1["high"] < 0, (compared, f1)
