import json
import subprocess
import sys

from conftest import REPO_ROOT


def test_quick_mode_writes_json_and_markdown(tmp_path):
    """Checks that the script runs and writes its outputs; it asserts nothing about speed."""
    json_path, markdown_path = tmp_path / "speed.json", tmp_path / "speed.md"
    subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "blockwise_speed.py"),
            "--quick",
            "--output",
            str(json_path),
            "--markdown",
            str(markdown_path),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    results = json.loads(json_path.read_text())
    assert set(results["forward"]) == {"full (sdpa)", "blockwise n=2 (sdpa)", "blockwise n=3 (sdpa)"}
    assert results["forward"]["full (sdpa)"]["ratio_of_medians"] == 1.0
    assert "| blockwise n=4 |" in markdown_path.read_text()
