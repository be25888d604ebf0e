"""Every script of `experiments/` starts as a user runs it, `python experiments/SCRIPT.py`, from a clone: its imports
resolve outside the installed package and without the test suite's `pythonpath`."""

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO_ROOT


@pytest.mark.parametrize("script", sorted(path.name for path in (REPO_ROOT / "experiments").glob("*.py")))
def test_every_experiment_script_prints_its_help(script, tmp_path):
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "experiments" / script), "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "usage:" in completed.stdout


def test_no_file_edits_sys_path():
    """The script folders import each other's helpers through `experiments/blockbert_benchmarks` (a link to
    `benchmarks/`'s package), never by editing `sys.path`."""
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    editing = [
        name
        for name in tracked
        if not (REPO_ROOT / name).is_symlink()
        and re.search(r"sys\.path\.(append|insert|extend)|sys\.path\s*[+]?=", (REPO_ROOT / name).read_text("utf-8"))
    ]
    assert editing == []
    assert (REPO_ROOT / "experiments" / "blockbert_benchmarks").resolve() == (
        REPO_ROOT / "benchmarks" / "blockbert_benchmarks"
    ).resolve()
