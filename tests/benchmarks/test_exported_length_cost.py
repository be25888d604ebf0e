"""`benchmarks/exported_length_cost.py`: the model it exports, its inputs, and its report (nothing here asserts
speed)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO_ROOT, load_script


SCRIPT = REPO_ROOT / "benchmarks" / "exported_length_cost.py"


def test_cell_inputs_are_seeded_unpadded_pairs():
    module = load_script(SCRIPT)
    inputs = module.cell_inputs(2, 12, 100, seed=3)
    again = module.cell_inputs(2, 12, 100, seed=3)
    assert all(np.array_equal(inputs[name], again[name]) for name in inputs)
    assert inputs["input_ids"].shape == (2, 12) and inputs["attention_mask"].all()
    assert inputs["token_type_ids"][:, :3].sum() == 0 and inputs["token_type_ids"][:, 3:].all()


def test_lengths_beyond_the_model_are_refused(capsys):
    with pytest.raises(SystemExit):
        load_script(SCRIPT).main(["--lengths", "1025"])
    assert "--lengths must lie in 1..N = 1024" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_mode_writes_json_and_markdown(tmp_path):
    pytest.importorskip("onnxruntime")
    json_path, markdown_path = tmp_path / "cost.json", tmp_path / "cost.md"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--output", str(json_path), "--markdown", str(markdown_path)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    results = json.loads(json_path.read_text())
    assert results["command"] == "python benchmarks/exported_length_cost.py --quick"
    assert [(cell["batch_size"], cell["length"]) for cell in results["cells"]][:4] == [
        (1, 5),
        (1, 16),
        (1, 17),
        (1, 32),
    ]
    assert all(cell["fp32_max_difference"] < 1e-4 for cell in results["cells"])
    assert sum(results["profile"]["shares"].values()) <= 1 + 1e-9
    report = markdown_path.read_text()
    assert "| 1 | 17 |" in report and "ONNX Runtime's time by operator" in report
