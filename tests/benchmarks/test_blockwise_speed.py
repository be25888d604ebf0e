import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, load_script

from blockbert_benchmarks.models import bert_base_config
from blockbert_hf import partner_block


SCRIPT = REPO_ROOT / "benchmarks" / "blockwise_speed.py"


def test_quick_mode_writes_json_and_markdown(tmp_path):
    """Checks that the script runs and writes its outputs; it asserts nothing about speed."""
    json_path, markdown_path = tmp_path / "speed.json", tmp_path / "speed.md"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--output", str(json_path), "--markdown", str(markdown_path)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    results = json.loads(json_path.read_text())
    assert set(results["forward"]) == {"full (sdpa)", "blockwise n=2 (sdpa)", "blockwise n=3 (sdpa)"}
    assert results["forward"]["full (sdpa)"]["ratio_of_medians"] == 1.0
    assert "| blockwise n=4 |" in markdown_path.read_text()


def test_a_failed_write_leaves_the_previous_results(tmp_path, monkeypatch):
    """A write that fails half-way (disk full, killed run) leaves the old results file whole, and no temporary file."""
    timing = {"median_s": 1.0, "ratio_of_medians": 1.0, "median_paired_ratio": 1.0}
    saved_run = tmp_path / "saved.json"
    saved_run.write_text(
        json.dumps(
            {
                "machine": "test machine",
                "args": {"repeats": 2, "batch_size": 1, "seq_len": 128, "layers": 1, "op_seq_len": 256},
                "forward": {"full (sdpa)": timing},
                "attention_op": {"full SDPA": timing},
            }
        )
    )
    markdown_path = tmp_path / "speed.md"
    markdown_path.write_text("old results")
    script = load_script("benchmarks/blockwise_speed.py")
    write_text = Path.write_text

    def torn_write(path, data, *args, **kwargs):
        write_text(path, data[: len(data) // 2], *args, **kwargs)
        raise OSError("No space left on device")

    monkeypatch.setattr(Path, "write_text", torn_write)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--from_json", str(saved_run), "--markdown", str(markdown_path)])
    with pytest.raises(OSError, match="No space left"):
        script.main()
    monkeypatch.undo()
    assert markdown_path.read_text() == "old results"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["saved.json", "speed.md"]


@pytest.mark.parametrize("num_blocks", [2, 4])
def test_the_timed_blockwise_op_is_blockbert_attention(num_blocks):
    """The attention op timed alone computes BlockBERT's (bidirectional) blockwise attention, not a causal one."""
    seq_len, heads, head_dim = 64, 12, 8
    query, key, value = (torch.randn(1, seq_len, heads, head_dim) for _ in range(3))
    candidates = load_script("benchmarks/blockwise_speed.py").attention_op_candidates(query, key, value)
    with torch.inference_mode():
        measured = candidates[f"blockwise n={num_blocks}"]()
    config = bert_base_config(seq_len, num_blocks=num_blocks)
    shifts = [shift for shift, count in enumerate(config.heads_per_shift) for _ in range(count)]
    block = torch.arange(seq_len) // (seq_len // num_blocks)
    expected = []
    for head, shift in enumerate(shifts):
        allowed = block[None, :] == partner_block(block[:, None], shift, num_blocks)
        q, k, v = (x[:, :, head : head + 1].transpose(1, 2) for x in (query, key, value))
        expected.append(torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed))
    expected = torch.cat(expected, dim=1).transpose(1, 2).reshape(1, seq_len, heads * head_dim)
    torch.testing.assert_close(measured, expected, atol=1e-5, rtol=1e-5)
