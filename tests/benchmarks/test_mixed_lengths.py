"""`benchmarks/mixed_lengths.py`: the batch it times, the baseline a user has without the option, and its report."""

import json
import subprocess
import sys

import torch
from conftest import REPO_ROOT, load_script


SCRIPT = REPO_ROOT / "benchmarks" / "mixed_lengths.py"


def test_the_mixed_batch_is_seeded_right_padded_and_in_range():
    module = load_script(SCRIPT)
    input_ids, attention_mask, lengths = module.mixed_batch(16, 64, 1024, seed=0)
    again, _, same_lengths = module.mixed_batch(16, 64, 1024, seed=0)
    assert torch.equal(input_ids, again) and lengths == same_lengths
    assert all(64 <= length <= 1024 for length in lengths) and len(set(lengths)) > 1
    assert input_ids.shape == (16, max(lengths))
    assert attention_mask.sum(dim=1).tolist() == lengths
    assert (input_ids[attention_mask == 0] == 1).all() and (input_ids[attention_mask == 1] != 1).all()


def test_length_sorted_micro_batches_hold_every_sequence_once_unchanged():
    module = load_script(SCRIPT)
    input_ids, attention_mask, lengths = module.mixed_batch(7, 5, 40, seed=1)
    batches = module.length_sorted_micro_batches(input_ids, attention_mask, lengths, micro_batch_size=3)
    assert [ids.shape[0] for ids, _ in batches] == [3, 3, 1]
    seen = []
    for ids, mask in batches:
        assert mask[:, -1].any()  # padded to its own longest sequence only
        for row in range(ids.shape[0]):
            seen.append(ids[row, : int(mask[row].sum())].tolist())
    assert sorted(seen) == sorted(input_ids[i, :n].tolist() for i, n in enumerate(lengths))
    assert [len(sequence) for sequence in seen] == sorted(lengths)


def test_quick_mode_writes_json_and_markdown(tmp_path):
    """Checks that the script runs and writes its outputs; it asserts nothing about speed."""
    json_path, markdown_path = tmp_path / "mixed.json", tmp_path / "mixed.md"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--output", str(json_path), "--markdown", str(markdown_path)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    results = json.loads(json_path.read_text())
    assert results["argv"] == ["--quick"]
    timings = results["mixed_lengths"]["timings"]
    assert timings["RoBERTa (sdpa), padded"]["ratio_of_medians"] == 1.0
    assert "BlockBERT n=2 (sdpa), padding-free" in timings and "BlockBERT n=2 (sdpa), padded" in timings
    assert 0 < results["mixed_lengths"]["padding_share"] < 1
    report = markdown_path.read_text()
    assert "Padding-free is " in report and "`python benchmarks/mixed_lengths.py --quick`" in report
