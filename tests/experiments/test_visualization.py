"""The attention-mask pictures: they draw the block rule of docs/attention.md, and the script writes them."""

import pytest
import torch
from conftest import REPO_ROOT, load_script


plot = load_script("experiments/plot_attention_masks.py")


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def rule_mask(heads_per_shift: list[int], sequence_length: int) -> torch.Tensor:
    """docs/attention.md: in a head with shift s, query block i attends key block (i + s) mod n, written out per
    position pair (no model code)."""
    num_blocks = len(heads_per_shift)
    block_size = sequence_length // num_blocks
    shifts = [shift for shift, count in enumerate(heads_per_shift) for _ in range(count)]
    mask = torch.zeros(len(shifts), sequence_length, sequence_length, dtype=torch.bool)
    for head, shift in enumerate(shifts):
        for query in range(sequence_length):
            for key in range(sequence_length):
                mask[head, query, key] = key // block_size == (query // block_size + shift) % num_blocks
    return mask


@pytest.mark.parametrize(
    ("heads_per_shift", "counts", "sequence_length"),
    [("10:2", [10, 2], 24), ("8:2:2", [8, 2, 2], 24), ("8:2:2", [8, 2, 2], 12)],
)
def test_mask_is_the_block_rule(heads_per_shift, counts, sequence_length):
    mask = plot.blockwise_attention_mask(heads_per_shift, sequence_length)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, rule_mask(counts, sequence_length))


def test_mask_rejects_more_blocks_than_tokens():
    with pytest.raises(ValueError, match="at least one token"):
        plot.blockwise_attention_mask("8:2:2", sequence_length=2)


def test_mask_leaves_the_callers_random_stream_alone():
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    plot.blockwise_attention_mask("10:2", 12)
    assert torch.equal(torch.rand(3), expected)


def test_script_writes_both_pictures(tmp_path):
    assert plot.build_parser().parse_args([]).output_dir == "docs/figures"
    assert plot.main(["--output_dir", str(tmp_path), "--sequence_length", "12"]) == 0
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names == ["attention_mask_n2_10-2.png", "attention_mask_n3_8-2-2.png"]  # no temporary file left behind
    assert names == sorted([plot.figure_file_name("10:2"), plot.figure_file_name([8, 2, 2])])
    for name in names:
        assert (tmp_path / name).read_bytes().startswith(PNG_SIGNATURE)


def test_committed_pictures_exist():
    for heads_per_shift in ("10:2", "8:2:2"):
        assert (
            (REPO_ROOT / "docs" / "figures" / plot.figure_file_name(heads_per_shift))
            .read_bytes()
            .startswith(PNG_SIGNATURE)
        )
