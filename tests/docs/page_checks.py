"""What the tests of `tests/docs/` need to read README.md and the docs pages: their fenced code blocks, the shell
commands in them and the parsers they go to, and the numbers of their `<!-- figures -->` regions. The rules themselves
are in `test_readme.py` (Python blocks), `test_page_commands.py` (shell commands) and `test_page_figures.py`
(figures)."""

import configparser
import contextlib
import importlib
import importlib.util
import io
import json
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import conftest
from accelerate.commands.launch import launch_command_parser

from blockbert_benchmarks.measuring.timing import median_paired_ratio


REPO_ROOT = conftest.REPO_ROOT
README = REPO_ROOT / "README.md"
# What a reader opens: README.md, the guides in docs/ and the reports beside their data in results/.
PAGES = [
    "README.md",
    *sorted(
        path.relative_to(REPO_ROOT).as_posix()
        for folder in ("docs", "results")
        for path in (REPO_ROOT / folder).rglob("*.md")
    ),
]


def read_page(page: str) -> str:
    """A page of the repository by its path from the root, e.g. `README.md` or `docs/results.md`."""
    return (REPO_ROOT / page).read_text(encoding="utf-8")


FENCE = re.compile(r"^```(\w*)\s*$")
INLINE_CODE = re.compile(r"`([^`]+)`")
NUMBER = r"\d+(?:[.,]\d+)*"
FIGURES_START, FIGURES_END = "<!-- figures -->", "<!-- /figures -->"


# ---------------------------------------------------------------------------------------------------------------------
# Fenced blocks and prose
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    language: str
    line: int  # page line of the block's first line of code
    code: str

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.code.splitlines() if line.strip()), "")


def fenced_blocks(text: str, page: str = "README.md") -> list[Block]:
    """The ``` blocks of a markdown text (the page `page`), in order."""
    blocks, language, start, lines = [], None, 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        fence = FENCE.match(line)
        if language is None and fence:
            language, start, lines = fence.group(1), number + 1, []
        elif language is not None and line.strip() == "```":
            blocks.append(Block(language, start, "\n".join(lines)))
            language = None
        elif language is not None:
            lines.append(line)
    if language is not None:
        raise ValueError(f"{page}: the ``` block opened at line {start - 1} is never closed")
    return blocks


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced blocks."""
    result, inside = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line) or (inside and line.strip() == "```"):
            inside = not inside
        elif not inside:
            result.append((number, line))
    return result


def paragraphs(lines: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    """Prose lines grouped into runs of consecutive non-blank lines (a code span never leaves its paragraph)."""
    groups = []
    for number, line in lines:
        if not line.strip():
            continue
        if groups and groups[-1][-1][0] == number - 1:
            groups[-1].append((number, line))
        else:
            groups.append([(number, line)])
    return groups


def inline_code(lines: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """(line, text) of the `code spans` of consecutive prose lines (a span may wrap onto the next line)."""
    joined, starts, offset = "", [], 0
    for number, line in lines:
        starts.append((offset, number))
        joined += line + "\n"
        offset = len(joined)
    for match in INLINE_CODE.finditer(joined):
        line = max(number for start, number in starts if start <= match.start())
        yield line, " ".join(match.group(1).split())


# ---------------------------------------------------------------------------------------------------------------------
# Shell commands
# ---------------------------------------------------------------------------------------------------------------------

ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Where a comment in a shell block or a span of prose holds a command of ours, the command starts here.
EMBEDDED_COMMAND = re.compile(
    r"(?:[A-Z_][A-Z0-9_]*=\S+\s+)*"
    r"(?:accelerate launch|python3? (?:-m blockbert_hf|(?:examples|experiments|benchmarks)/))\S*.*"
)
COMMAND_STARTS = ("python", "python3", "accelerate", "make", "pip", "pytest")


@dataclass(frozen=True)
class Command:
    line: int  # page line where the command starts
    text: str

    @property
    def elided(self) -> bool:
        """Whether the command ends in `...` ("and more options")."""
        return shlex.split(self.text)[-1:] == ["..."]

    @property
    def argv(self) -> list[str]:
        """The words of the command, without environment assignments in front and without a trailing `...`."""
        words = shlex.split(self.text)
        while words and ENV_ASSIGNMENT.match(words[0]):
            words.pop(0)
        while words and words[-1] == "...":
            words.pop()
        return words


def split_comment(line: str) -> tuple[str, str]:
    """A shell line's code and its `#` comment (a `#` that starts a word, outside quotes)."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index], line[index + 1 :]
    return line, ""


def split_commands(code: str) -> list[str]:
    """`a && b; c` -> ["a", "b", "c"] (operators outside quotes)."""
    lexer = shlex.shlex(code, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    commands, words = [], []
    for word in lexer:
        if word in ("&&", "||", ";", "|", "&"):
            commands.append(shlex.join(words))
            words = []
        else:
            words.append(word)
    return [command for command in [*commands, shlex.join(words)] if command]


def commands_in_prose(line: int, text: str) -> list[Command]:
    """A code span (or comment) that is a command, or holds one after some words of prose."""
    words = text.split()
    while words and ENV_ASSIGNMENT.match(words[0]):
        words.pop(0)
    if words and words[0] in COMMAND_STARTS:
        return [Command(line, command) for command in split_commands(text)]
    embedded = EMBEDDED_COMMAND.search(text)
    return [Command(line, embedded.group(0).strip())] if embedded else []


def shell_lines(block: Block) -> Iterator[tuple[int, str]]:
    """(page line, logical line) of a shell block: `\\` continuations joined."""
    pending, start = "", None
    for offset, line in enumerate(block.code.splitlines()):
        start = block.line + offset if start is None else start
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending, start = "", None
    if pending:
        yield start, pending


def page_commands(text: str, page: str = "README.md") -> list[Command]:
    """Every command of the shell blocks (their comments included) and of the prose's code spans, in page order."""
    commands = []
    for block in fenced_blocks(text, page):
        if block.language not in ("bash", "sh", "shell"):
            continue
        for line, logical in shell_lines(block):
            code, comment = split_comment(logical)
            commands += [Command(line, command) for command in split_commands(code)]
            commands += commands_in_prose(line, comment.strip())
            commands += [found for _, span in inline_code([(line, comment)]) for found in commands_in_prose(line, span)]
    for paragraph in paragraphs(prose_lines(text)):
        for line, span in inline_code(paragraph):
            commands += commands_in_prose(line, span)
    return sorted(commands, key=lambda command: command.line)


@dataclass(frozen=True)
class Target:
    """What a command runs, and the words that go to the target's own parser."""

    # "script" (a script of the repository: examples/X.py, ...), "module" (python -m blockbert_hf...), "make", "pip",
    # "pytest" or "other"
    kind: str
    name: str
    arguments: list[str]
    launcher_problem: str | None = None  # what `accelerate launch` said about its own options


def command_target(argv: list[str]) -> Target:
    if not argv:
        return Target("other", "", [])
    program, rest = Path(argv[0]).name, argv[1:]
    if program in ("python", "python3"):
        if rest[:1] == ["-m"] and len(rest) > 1:
            kind = "pytest" if rest[1] == "pytest" else "module" if rest[1].startswith("blockbert_hf") else "other"
            return Target(kind, rest[1], rest[2:])
        if rest and rest[0].endswith(".py"):
            return Target("script", rest[0], rest[1:])
    if program == "accelerate" and rest[:1] == ["launch"]:
        if not any(word.endswith(".py") for word in rest[1:]):
            return Target("other", "accelerate", rest)  # a fragment about the launcher alone
        launched, problem = parse(launch_command_parser(), rest[1:])
        if problem:
            return Target("script", next(word for word in rest if word.endswith(".py")), [], problem)
        return Target("script", launched.training_script, launched.training_script_args)
    if program == "make":
        return Target("make", "make", [word for word in rest if "=" not in word and not word.startswith("-")])
    if program == "pip" and rest[:1] == ["install"]:
        return Target("pip", "pip", rest[1:])
    if program == "pytest":
        return Target("pytest", "pytest", rest)
    return Target("other", program, rest)


def parse(parser, arguments: list[str]) -> tuple[Any, str | None]:
    """`parser.parse_args(arguments)` without exiting: (namespace, None), or (None, argparse's error line)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            return parser.parse_args(arguments), None
        except SystemExit as exit:
            if exit.code in (0, None):  # --help
                return None, None
    lines = stderr.getvalue().strip().splitlines()
    return None, lines[-1] if lines else "the parser exited"


# An example script imported as a module, once per path.
load_script = cache(conftest.load_script)


def load_main_module(name: str):
    """What `python -m NAME` runs: the module, or a package's `__main__`."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ModuleNotFoundError(f"no module named {name}")
    return importlib.import_module(f"{name}.__main__" if spec.submodule_search_locations else name)


def makefile_targets() -> set[str]:
    makefile = (REPO_ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", makefile, flags=re.MULTILINE))


def extras_in_setup_cfg() -> set[str]:
    setup = configparser.ConfigParser()
    setup.read(REPO_ROOT / "setup.cfg")
    return set(setup["options.extras_require"])


def requested_extras(words: list[str]) -> set[str]:
    """Extras of this package in `pip install` words: `.[a,b]`, `-e ".[a]"`, `blockbert-hf[a]`."""
    extras = set()
    for word in words:
        match = re.fullmatch(r"(?:\.|blockbert[-_]hf)\[([^\]]+)\]", word)
        if match:
            extras |= {extra.strip() for extra in match.group(1).split(",")}
    return extras


# ---------------------------------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """A figure of a page and where it comes from: `text` is the figure with its context as it appears on the page,
    `{}` standing for the number; `read` takes the loaded `source` (JSON data, or the text of any other file) to the
    value, which `format` writes as the page writes it. `stale` (a reason) marks a figure known to disagree with its
    file."""

    text: str
    source: str
    read: Callable[[Any], float]
    format: str = "{:.2f}"
    stale: str | None = None

    def value(self) -> str:
        path = REPO_ROOT / self.source
        data = json.loads(path.read_text()) if path.suffix == ".json" else path.read_text()
        return self.format.format(self.read(data))

    def pattern(self) -> re.Pattern:
        before, after = self.text.split("{}")
        return re.compile(phrase_pattern(before) + f"({NUMBER})" + phrase_pattern(after))


def phrase_pattern(phrase: str) -> str:
    """A regular expression for `phrase` wherever the page's line breaks fall in it."""
    return r"\s+".join(re.escape(word) for word in phrase.split(" "))


@dataclass(frozen=True)
class Region:
    page: str
    line: int  # page line of the opening marker
    text: str


def figure_regions(text: str, page: str = "README.md") -> list[Region]:
    """The text between each `<!-- figures -->` and the next `<!-- /figures -->` of a page."""
    regions, position = [], 0
    while (start := text.find(FIGURES_START, position)) != -1:
        end = text.find(FIGURES_END, start)
        line = text.count("\n", 0, start) + 1
        if end == -1 or FIGURES_START in text[start + len(FIGURES_START) : end]:
            raise ValueError(f"{page}:{line}: {FIGURES_START} without its {FIGURES_END}")
        regions.append(Region(page, line, text[start + len(FIGURES_START) : end]))
        position = end + len(FIGURES_END)
    if FIGURES_END in text[position:]:
        raise ValueError(f"{page}: a {FIGURES_END} without its {FIGURES_START}")
    return regions


def unaccounted_numbers(region: Region, figures: list[Figure], allowed: list[str]) -> list[str]:
    """`page:line: number (context)` for each number of a region that is neither the number of a figure nor part
    of an allowed phrase."""
    text, covered = region.text, set()
    for figure in figures:
        covered |= {match.span(1) for match in figure.pattern().finditer(text)}
    for phrase in allowed:
        covered |= {match.span() for match in re.finditer(phrase_pattern(phrase), text)}
    return [
        f"{region.page}:{region.line + text.count(chr(10), 0, match.start())}: {match.group(0)} "
        f"(in {' '.join(text[max(0, match.start() - 30) : match.end() + 30].split())!r})"
        for match in re.finditer(NUMBER, text)
        if not any(start <= match.start() and match.end() <= end for start, end in covered)
    ]


# Readers of results files: each returns a function from the loaded file to the value.


def json_key(*keys) -> Callable[[Any], Any]:
    def read(data):
        for key in keys:
            data = data[key]
        return data

    return read


def benchmark_row(data: dict, batch_size: int, seq_len: int, model: str) -> dict:
    section = next(s for s in data["sections"] if (s["batch_size"], s["seq_len"]) == (batch_size, seq_len))
    return section["rows"][model]


def time_ratio(shape: tuple[int, int], model: str, anchor: str) -> Callable[[dict], float]:
    """Same-run time ratio of a benchmarks results file: the median over rounds of model / anchor (as its tables)."""
    return lambda data: median_paired_ratio(
        benchmark_row(data, *shape, model)["times_s"], benchmark_row(data, *shape, anchor)["times_s"]
    )


def memory_ratio(shape: tuple[int, int], model: str, anchor: str) -> Callable[[dict], float]:
    """Peak memory of model / anchor in a benchmarks results file."""
    return lambda data: (
        benchmark_row(data, *shape, model)["peak_bytes"] / benchmark_row(data, *shape, anchor)["peak_bytes"]
    )


def markdown_cell(row: str, column: str) -> Callable[[str], float]:
    """A number in a markdown table: the row whose first cell is `row`, the column headed `column`."""

    def read(text: str) -> float:
        table = [
            [cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines()
            if line.startswith("|")
        ]
        header = next(cells for cells in table if column in cells)
        cells = next(cells for cells in table if cells[0] == row)
        return float(cells[header.index(column)].replace(",", ""))

    return read


def text_number(pattern: str) -> Callable[[str], float]:
    """The number a regular expression captures in a text file (for results recorded only in prose)."""
    return lambda text: float(re.search(pattern, text).group(1).replace(",", ""))
