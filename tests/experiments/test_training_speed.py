"""experiments/mlm_throughput.py: a run's speed read from its own record."""

import json

import pytest
from conftest import load_script


throughput = load_script("experiments/mlm_throughput.py")


def write_run(folder, steps):
    folder.mkdir()
    (folder / "run_args.json").write_text(json.dumps({"num_blocks": 2, "max_seq_length": 512}))
    tokens, seconds, rows = 0, 0.0, []
    for step, (step_tokens, step_seconds) in enumerate(steps, start=1):
        tokens, seconds = tokens + step_tokens, seconds + step_seconds
        rows.append(
            {
                "step": step,
                "real_tokens_seen": tokens,
                "train_seconds": seconds,
                "tokens_per_second": step_tokens / step_seconds,
            }
        )
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_the_warm_up_steps_are_left_out_of_the_speed(tmp_path):
    run = write_run(tmp_path / "run", [(1000, 10.0), (1000, 1.0), (3000, 2.0)])
    speed = throughput.run_speed(run, warmup_steps=1, corpus_tokens=4000 * 3600)
    assert speed["tokens_per_second"] == pytest.approx(4000 / 3.0, abs=0.1)
    assert speed["steps_measured"] == "2-3"
    assert speed["settings"]["num_blocks"] == 2
    assert speed["hours_per_epoch"]["hours"] == pytest.approx(3.0)
    assert throughput.run_speed(run, warmup_steps=0)["tokens_per_second"] == pytest.approx(5000 / 13.0, abs=0.1)


def test_the_script_records_the_command_and_refuses_a_run_too_short(tmp_path, capsys):
    main = throughput.main
    run = write_run(tmp_path / "run", [(1000, 10.0), (2000, 1.0)])
    output = tmp_path / "speed.json"
    assert main(["--run_dir", str(run), "--output", str(output), "--command", "run_mlm.py ..."]) == 0
    assert json.loads(output.read_text())["command"] == "run_mlm.py ..."
    short = write_run(tmp_path / "short", [(1000, 10.0)])
    assert main(["--run_dir", str(short), "--output", str(tmp_path / "no.json"), "--command", "x"]) == 2
    assert "logged 1 training step(s)" in capsys.readouterr().err
    assert not (tmp_path / "no.json").exists()
