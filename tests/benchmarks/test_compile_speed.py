import json
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, load_script


SCRIPT = REPO_ROOT / "benchmarks" / "compile_speed.py"


def run_script(*arguments, timeout=300):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def test_quick_mode_writes_json_and_markdown(tmp_path):
    """Checks that the script compiles, times and writes its outputs; it asserts nothing about speed."""
    json_path, markdown_path = tmp_path / "compile.json", tmp_path / "compile.md"
    completed = run_script("--quick", "--output", str(json_path), "--markdown", str(markdown_path))
    assert completed.returncode == 0, completed.stderr
    results = json.loads(json_path.read_text())
    assert results["args"]["grid"] == ["2x64"] and results["args"]["quick"]
    shape = results["shapes"]["2x64"]
    assert (shape["batch_size"], shape["seq_len"]) == (2, 64)
    assert set(shape["forward"]) == {"eager (sdpa)", "compiled (sdpa)"}
    eager, compiled = shape["forward"]["eager (sdpa)"], shape["forward"]["compiled (sdpa)"]
    assert len(eager["times_s"]) == len(compiled["times_s"]) == results["args"]["repeats"]
    assert eager["ratio_of_medians"] == eager["median_paired_ratio"] == 1.0
    assert compiled["median_paired_ratio"] > 0
    assert shape["first_compiled_call_s"] > compiled["median_s"]
    assert shape["compile_s"] == pytest.approx(shape["first_compiled_call_s"] - compiled["median_s"])
    assert shape["max_abs_difference"] < 1e-4  # the compiled model computes what the eager one does
    markdown = markdown_path.read_text()
    assert "torch.compile(model, fullgraph=True, dynamic=True)" in markdown
    assert f"| 2x64 | {eager['median_s']:.3f} | {compiled['median_s']:.3f} |" in markdown
    # Re-rendering the saved run gives the same table.
    rendered = tmp_path / "rendered.md"
    completed = run_script("--from_json", str(json_path), "--markdown", str(rendered), timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert rendered.read_text() == markdown


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--grid", "8x1024,2by4096"], "is not BATCHxLENGTH"),
        (["--repeats", "0"], "must be at least 1"),
        (["--grid", "8x1024", "--layers", "0"], "must be at least 1"),
    ],
)
def test_bad_arguments_fail_before_measuring(capsys, arguments, message):
    with pytest.raises(SystemExit) as exit_info:
        load_script("benchmarks/compile_speed.py").parse_args(arguments)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
