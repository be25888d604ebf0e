"""`--jobs K`: up to K cells at once, each `qa_comparison.py run --cells <cell>` logging to `<work_dir>/logs/`. The run
converts the models first and writes the results and report after the processes end, so that no two write one file."""

import logging
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, fields, replace
from pathlib import Path

from .grid import ComparisonConfig


logger = logging.getLogger(__name__)

SCRIPT = Path(__file__).resolve().parents[2] / "qa_comparison.py"


def config_args(config: ComparisonConfig) -> list[str]:
    """The command-line options that give `config` (those that differ from the defaults)."""
    args = []
    for option in fields(ComparisonConfig):
        value = getattr(config, option.name)
        default = option.default if option.default is not MISSING else option.default_factory()
        if value == default:
            continue
        values = value if isinstance(value, list) else [value]
        args += [f"--{option.name}", *(str(item) for item in values)]
    return args


def cell_command(config: ComparisonConfig, cell_name: str) -> list[str]:
    """The command of one cell's process: this run's options for that cell alone, without the report."""
    child = replace(config, cells=[cell_name], jobs=1, report_after_each_cell=False)
    return [sys.executable, str(SCRIPT), "run", *config_args(child)]


def _launch(command: Sequence[str], log_file: Path) -> subprocess.Popen:
    with open(log_file, "w") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT)


def run_in_parallel(
    commands: Mapping[str, Sequence[str]],
    jobs: int,
    log_dir: Path,
    launch: Callable[[Sequence[str], Path], subprocess.Popen] = _launch,
    poll_seconds: float = 2.0,
) -> list[str]:
    """Runs `commands` (name -> command), at most `jobs` at once, in their order; returns the names of those that
    exited with a non-zero status."""
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: give at least 1.")
    log_dir.mkdir(parents=True, exist_ok=True)
    pending, running, failed = list(commands), {}, []
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            log_file = log_dir / f"{name}.log"
            running[name] = launch(commands[name], log_file)
            logger.info(f"Cell {name} started (its log: {log_file}).")
        for name, process in list(running.items()):
            if process.poll() is None:
                continue
            del running[name]
            if process.returncode:
                failed.append(name)
                logger.error(f"Cell {name} failed (exit status {process.returncode}; see its log).")
            else:
                logger.info(f"Cell {name} finished.")
        if running:
            time.sleep(poll_seconds)
    return failed
