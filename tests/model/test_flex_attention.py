"""flex_attention (compiled by torch on first use) against the dense reference and the eager kernel, over patterns
and lengths.

torch's CPU flex kernel has given wrong results at lengths of 8 mod 16 and failed to compile some patterns in one
process; these tests keep checking the next torch. The full length matrix is marked slow (`make test-all`).
"""

import copy

import pytest
import torch
from attention_checks import reference_attention, run_capturing_first_attention
from conftest import make_model, random_batch, tiny_config

from blockbert_hf import BlockBertModel, attention_blockbert


PATTERNS = {
    "blockwise n=2": {},
    "blockwise n=3": {"num_blocks": 3, "heads_per_shift": [2, 1, 1]},
    "full": {"attention_pattern": "full"},
    "sparse_fixed": {"attention_pattern": "sparse_fixed", "sparse_stride": 8, "sparse_expressivity": 2},
}
# Each new shape costs a compile (seconds on CPU): the default suite checks a few lengths that torch got wrong.
QUICK_CHECKS = {"blockwise n=2": [8, 40], "full": [40], "sparse_fixed": [24]}
ALL_LENGTHS = list(range(1, 81)) + [127, 128, 129, 200, 256]


def eager_and_flex(fields: dict) -> tuple[BlockBertModel, BlockBertModel]:
    config = tiny_config(max_position_embeddings=258, num_hidden_layers=1, **fields)
    eager = BlockBertModel(copy.deepcopy(config)).eval()
    eager.set_attn_implementation("eager")
    flex = BlockBertModel(copy.deepcopy(config)).eval()
    flex.load_state_dict(eager.state_dict())
    flex.set_attn_implementation("flex_attention")
    return eager, flex


def mismatches(fields: dict, lengths: list[int]) -> list[tuple[int, float]]:
    """(length, max difference) for every length where flex differs from eager on a batch with a padded row."""
    eager, flex = eager_and_flex(fields)
    found = []
    for length in lengths:
        input_ids, attention_mask = random_batch([length, max(1, length - 3)], length)
        with torch.no_grad():
            expected = eager(input_ids, attention_mask=attention_mask).last_hidden_state
            actual = flex(input_ids, attention_mask=attention_mask).last_hidden_state
        real = attention_mask.bool()
        difference = (expected - actual)[real].abs().max().item()
        if not difference < 1e-4:
            found.append((length, difference))
    return found


@pytest.fixture(autouse=True)
def _flex_not_yet_given_up(monkeypatch):
    monkeypatch.setattr(attention_blockbert, "_flex_unavailable", False)


def xfail_if_flex_fell_back(pattern: str) -> None:
    if attention_blockbert._flex_unavailable:
        # The model fell back to sdpa (and warned): what was compared is sdpa. Known with torch 2.13 on CPU for
        # sparse_fixed compiled after other patterns in one process (Inductor's CppCompileError).
        pytest.xfail(f"torch could not compile flex_attention for {pattern}; BlockBERT fell back to sdpa")


def check_flex_against_eager(pattern: str, lengths: list[int]) -> None:
    found = mismatches(PATTERNS[pattern], lengths)
    xfail_if_flex_fell_back(pattern)
    assert found == []


def test_flex_attention_equals_the_reference():
    """Padded rows, a last block shorter than b (flex pads it to 32) and empty partner blocks."""
    config = tiny_config(num_blocks=3, heads_per_shift=[2, 1, 1], num_hidden_layers=1)
    model = make_model(BlockBertModel, config, "flex_attention")
    input_ids, attention_mask = random_batch([64, 45, 22, 1], 64)
    with torch.no_grad():
        captured, _ = run_capturing_first_attention(model, input_ids, attention_mask)
        expected, _ = reference_attention(model, captured["hidden"], attention_mask)
    xfail_if_flex_fell_back("blockwise n=3")
    real = attention_mask.bool()
    torch.testing.assert_close(captured["context"][real], expected[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pattern", QUICK_CHECKS)
def test_flex_attention_equals_eager(pattern):
    check_flex_against_eager(pattern, QUICK_CHECKS[pattern])


@pytest.mark.slow
@pytest.mark.parametrize("pattern", PATTERNS)
def test_flex_attention_equals_eager_at_every_length(pattern):
    check_flex_against_eager(pattern, ALL_LENGTHS)


def test_a_flex_compile_error_falls_back_to_sdpa_with_one_warning(monkeypatch, caplog):
    class InductorError(RuntimeError):
        pass

    def failing_flex(*args, **kwargs):
        raise InductorError("CppCompileError: C++ compile error")

    monkeypatch.setattr(attention_blockbert, "_COMPILE_ERRORS", ("InductorError",))
    monkeypatch.setitem(attention_blockbert.ALL_ATTENTION_FUNCTIONS._global_mapping, "flex_attention", failing_flex)
    eager, flex = eager_and_flex(PATTERNS["blockwise n=2"])
    input_ids, attention_mask = random_batch([40, 33], 40)
    with torch.no_grad(), caplog.at_level("WARNING"):
        expected = eager(input_ids, attention_mask=attention_mask).last_hidden_state
        first = flex(input_ids, attention_mask=attention_mask).last_hidden_state
        second = flex(input_ids, attention_mask=attention_mask).last_hidden_state
    real = attention_mask.bool()
    torch.testing.assert_close(first[real], expected[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(second, first)
    assert sum("flex_attention could not be compiled" in record.message for record in caplog.records) == 1
