"""The shell commands of README.md and of the docs pages that go with it parse with the parsers they go to.

Every command in a ```bash block (comments included) or in a `code span` of the prose that runs `python X.py` (a
script of the repository: `examples/`, `experiments/`, `benchmarks/`), `accelerate launch [launcher options] X.py` or
`python -m blockbert_hf...` is parsed, not run, by the parser of that script (its `build_parser()`; accelerate's own
parser for the launcher options). Placeholders (OUT, path/to/x, books/*.txt.gz) are ordinary words; a trailing `...`
("and more options") is dropped. `make X`: X is a target of the Makefile. `pip install .[a,b]`: the extras exist in
setup.cfg. `pytest tests/x.py`: the file exists.
"""

import argparse
from pathlib import Path

import pytest
from page_checks import (
    REPO_ROOT,
    Command,
    command_target,
    extras_in_setup_cfg,
    load_main_module,
    load_script,
    makefile_targets,
    page_commands,
    parse,
    read_page,
    requested_extras,
)


# The pages whose commands are checked.
PAGES = [
    "README.md",
    "docs/results.md",
    "docs/feature_comparison.md",
    "docs/qa_long_context_data.md",
    "results/qa_squad_halves/README.md",
    "docs/publishing.md",
    "docs/ecosystem.md",
    "docs/export.md",
    "docs/distillation.md",
]


def command_problem(command: Command) -> str | None:
    """What is wrong with a command, or None."""
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
    """For a command that ends in `...`: the arguments it leaves out may be required ones (of a subcommand too)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                allow_missing_arguments(subparser)
            continue
        action.required = False
        if not action.option_strings and action.nargs in (None, "+"):
            action.nargs = "?" if action.nargs is None else "*"


def is_checked(command: Command) -> bool:
    try:
        return command_target(command.argv).kind != "other"
    except ValueError:
        return True  # reported by the test


COMMANDS = [
    (page, command) for page in PAGES for command in page_commands(read_page(page), page) if is_checked(command)
]


@pytest.mark.parametrize(
    ("page", "command"),
    [pytest.param(page, c, id=f"{page}:{c.line} {' '.join(c.text.split()[:2])}") for page, c in COMMANDS],
)
def test_shell_command_parses(page, command):
    problem = command_problem(command)
    assert problem is None, f"{page}:{command.line}: `{command.text}`: {problem}"


def test_every_page_has_commands_to_check():
    assert {page for page, _ in COMMANDS} == set(PAGES)


def test_the_command_checks_catch_mistakes():
    commands = page_commands(
        "```bash\n"
        "python examples/convert_roberta_to_blockbert.py SRC OUT \\\n    --heads_per_block 10:2\n"
        "make tset  # `make format` fixes\n"
        "# two processes: ACCELERATE_USE_CPU=1 accelerate launch --num_procs 2 examples/run_mlm.py ...\n"
        "```\n\n"
        'Prose: `pip install -e ".[exprot]"`, `python examples/run_qa.py --no_such_option ...`, `ls -l`.\n'
        "Data: `python experiments/demo.py --train_files path/to/dev-v1.1.json.gz`.\n"
    )
    assert [command.line for command in commands] == [2, 4, 4, 5, 8, 8, 9]
    problems = [command_problem(command) for command in commands]
    assert "unrecognized arguments: --heads_per_block 10:2" in problems[0]
    assert problems[1:3] == ["no Makefile target tset", None]  # `make format` is a target
    assert "unrecognized arguments: --num_procs" in problems[3]
    assert problems[4] == "setup.cfg has no extra exprot"
    assert "unrecognized arguments: --no_such_option" in problems[5]
    assert "unrecognized arguments: --train_files" in problems[6]
