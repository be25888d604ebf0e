"""`qa_comparison.py run --jobs K`: each cell's process gets the run's options for that cell alone, at most K run at
once, failures are named, and the parallel run cannot be asked to run in this process."""

from dataclasses import replace
from pathlib import Path

import pytest
from transformers import HfArgumentParser

from blockbert_experiments.qa_comparison.grid import ComparisonConfig
from blockbert_experiments.qa_comparison.runner import _run_in_parallel, cell_command, run_in_parallel


def _parse(args: list[str]) -> ComparisonConfig:
    (config,) = HfArgumentParser(ComparisonConfig).parse_args_into_dataclasses(args=args)
    return config


def test_a_cell_process_gets_the_runs_options_for_that_cell_alone():
    config = ComparisonConfig(
        data_dir="data/sets",
        work_dir="work",
        learning_rate=2e-4,
        num_train_epochs=4.0,
        test_sets=["paragraph", "article"],
        mixed_precision="bf16",
        window_scoring="null_relative",
        long_block_relative_positions=True,
        preprocessing_num_workers=2,
        cells=["n512_full_seed0", "n512_full_seed1"],
        jobs=4,
    )
    command = cell_command(config, "n512_full_seed1")
    assert Path(command[1]).name == "qa_comparison.py" and Path(command[1]).is_file()
    assert command[2] == "run"
    expected = replace(config, cells=["n512_full_seed1"], jobs=1, report_after_each_cell=False)
    assert _parse(command[3:]) == expected
    passed = cell_command(ComparisonConfig(), "n512_full_seed0")[3:]  # only what differs from the defaults
    assert passed == ["--cells", "n512_full_seed0", "--report_after_each_cell", "False"]


class _FakeProcess:
    def __init__(self, name: str, running: set, peak: list, polls_to_finish: int, returncode: int):
        self.name, self.running, self.peak = name, running, peak
        self.polls_left, self.exit_status, self.returncode = polls_to_finish, returncode, None
        running.add(name)
        peak[0] = max(peak[0], len(running))

    def poll(self):
        self.polls_left -= 1
        if self.polls_left <= 0 and self.returncode is None:
            self.returncode = self.exit_status
            self.running.discard(self.name)
        return self.returncode


def test_cells_run_at_most_jobs_at_once_in_their_order_and_failures_are_named(tmp_path):
    running, peak, started = set(), [0], []

    def launch(command, log_file):
        started.append(command[0])
        assert log_file.parent == tmp_path / "logs"
        return _FakeProcess(command[0], running, peak, polls_to_finish=len(started), returncode=command[0] == "c")

    commands = {name: [name] for name in "abcde"}
    failed = run_in_parallel(commands, jobs=2, log_dir=tmp_path / "logs", launch=launch, poll_seconds=0)
    assert failed == ["c"]
    assert started == list("abcde")
    assert peak[0] == 2 and not running


def test_jobs_run_as_processes_and_must_be_at_least_one(tmp_path):
    with pytest.raises(ValueError, match="--in_process"):
        _run_in_parallel(ComparisonConfig(jobs=2, in_process=True), (), (), {}, [], tmp_path)
    with pytest.raises(ValueError, match="at least 1"):
        run_in_parallel({"a": ["a"]}, jobs=0, log_dir=tmp_path)
