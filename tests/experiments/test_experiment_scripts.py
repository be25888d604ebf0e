"""Every script of `experiments/` starts as a user runs it, `python experiments/SCRIPT.py`, from a clone: its imports
resolve outside the installed package and without the test suite's `pythonpath`."""

import os
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
