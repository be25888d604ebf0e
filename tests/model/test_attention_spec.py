"""The rules of docs/attention.md (block rule, empty partner blocks, padding invariance, n = 1, the dense formula,
cost, input errors). The oracle is `blockbert_hf.blockwise_attention`, the dense formula the page quotes; its own
edge cases are checked here first."""

import inspect
import re

import pytest
import torch
from attention_checks import assert_first_attention_equals_reference, reference_attention, run_capturing_first_attention
from conftest import REPO_ROOT, make_model, random_batch, tiny_config

from blockbert_hf import (
    BlockBertModel,
    attention_blockbert,
    blockwise_attention,
    blockwise_attentions_to_dense,
    sparse_fixed_pattern,
)


# --- the reference ----------------------------------------------------------------------------------------------------


def test_the_docs_quote_the_reference():
    docs = (REPO_ROOT / "docs" / "attention.md").read_text()
    quoted = re.search(r"```python\n(def blockwise_attention\(.*?)```", docs, re.DOTALL)
    assert quoted is not None, "docs/attention.md does not quote blockwise_attention"
    assert quoted.group(1) == inspect.getsource(blockwise_attention)


def test_the_reference_follows_the_block_rule_on_a_short_last_block():
    # L = 5, b = 2, n = 3: blocks [0, 0, 1, 1, 2], the last one shorter. Shift 1: block 0 -> 1, 1 -> 2, 2 -> 0.
    query, key = torch.randn(2, 1, 1, 5, 4)
    value = torch.randn(1, 1, 5, 4)
    output, probabilities = blockwise_attention(query, key, value, torch.ones(1, 5, dtype=torch.bool), [1], 3, 2)
    allowed = torch.tensor([[0, 0, 1, 1, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 1], [1, 1, 0, 0, 0]])
    assert torch.equal(probabilities[0, 0] > 0, allowed.bool())
    torch.testing.assert_close(probabilities[0, 0].sum(-1), torch.ones(5))
    torch.testing.assert_close(output[0, 0, 2:4], value[0, 0, [4, 4]])  # block 1's one admissible key is position 4


def test_the_reference_excludes_padding_and_gives_zero_not_nan_for_empty_partner_blocks():
    # L = 6 with 3 real tokens, b = 3, n = 2: shift 0 attends the 3 real keys; shift 1 sends block 0 to block 1,
    # which holds only padding, and block 1 to block 0.
    query, key, value = torch.randn(3, 1, 2, 6, 4)
    key_is_real = torch.tensor([[True] * 3 + [False] * 3])
    output, probabilities = blockwise_attention(query, key, value, key_is_real, [0, 1], 2, 3)
    assert not output.isnan().any() and not probabilities.isnan().any()
    assert probabilities[0, :, :, 3:].abs().max() == 0  # padding keys get nothing
    assert output[0, 1, :3].abs().max() == 0 and probabilities[0, 1, :3].abs().max() == 0  # empty partner block
    changed_padding = value.clone()
    changed_padding[..., 3:, :] = 100.0
    torch.testing.assert_close(blockwise_attention(query, key, changed_padding, key_is_real, [0, 1], 2, 3)[0], output)


def test_the_reference_with_one_block_is_full_attention():
    query, key, value = torch.randn(3, 2, 4, 7, 8)
    key_is_real = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    output, _ = blockwise_attention(query, key, value, key_is_real, [0] * 4, 1, 7)
    expected = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=key_is_real[:, None, None])
    torch.testing.assert_close(output, expected, atol=1e-6, rtol=1e-5)


# --- the model against the reference ----------------------------------------------------------------------------------


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize(
    "num_blocks, heads_per_shift, lengths",
    [
        (2, [3, 1], [64, 41, 7]),
        (2, [2, 2], [50, 33, 32]),
        (3, [2, 1, 1], [64, 45, 22, 1]),
        (3, [1, 2, 1], [60, 23]),
        (4, [1, 1, 1, 1], [64, 50, 17, 16]),
        (4, [2, 0, 1, 1], [39, 63]),
    ],
)
def test_equals_dense_masked_reference(num_blocks, heads_per_shift, lengths, attn_implementation):
    config = tiny_config(num_blocks=num_blocks, heads_per_shift=heads_per_shift, num_hidden_layers=1)
    model = make_model(BlockBertModel, config, attn_implementation)
    seq_len = max(lengths)
    input_ids, attention_mask = random_batch(lengths, seq_len)
    with torch.no_grad():
        captured, _ = run_capturing_first_attention(model, input_ids, attention_mask, output_attentions=True)
        expected, expected_probs = reference_attention(model, captured["hidden"], attention_mask)
    real = attention_mask.bool()
    torch.testing.assert_close(captured["context"][real], expected[real], atol=1e-5, rtol=1e-5)
    if attn_implementation == "eager":
        dense = blockwise_attentions_to_dense(captured["weights"], config, seq_len)
        real_queries = real[:, None, :, None].expand_as(dense)
        torch.testing.assert_close(dense[real_queries], expected_probs[real_queries], atol=1e-6, rtol=1e-5)


def test_block_size_larger_than_default_follows_the_rule():
    config = tiny_config(num_blocks=2, block_size=40, num_hidden_layers=1)  # n * b = 80 > N = 64
    assert_first_attention_equals_reference(BlockBertModel(config).eval(), *random_batch([64, 45, 39], 64))


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_empty_partner_block_gives_zero_output_without_nan(attn_implementation):
    # n = 3, b = 22: a 30-token input fills 2 blocks. Shift 1: block 1 -> block 2 (past the end, empty).
    # Shift 2: block 0 -> block 2 (empty). Row 1 has 20 tokens: every partner block of block 0 but its own is empty.
    config = tiny_config(num_blocks=3, heads_per_shift=[2, 1, 1], num_hidden_layers=1)
    model = make_model(BlockBertModel, config, attn_implementation).eval()
    input_ids, attention_mask = random_batch([30, 20], 30)
    with torch.no_grad():
        captured, outputs = run_capturing_first_attention(
            model, input_ids, attention_mask, output_attentions=attn_implementation == "eager"
        )
    b, d = config.effective_block_size, 8
    context = captured["context"].view(2, 30, 4, d)
    assert not outputs.last_hidden_state.isnan().any()
    assert context[0, b:30, 2].abs().max() == 0  # shift 1, block 1 -> block 2 (past the end)
    assert context[0, :b, 3].abs().max() == 0  # shift 2, block 0 -> block 2 (past the end)
    assert context[1, :20, 2:].abs().max() == 0  # row 1: partner blocks hold only padding
    assert context[0, :b, 2].abs().max() > 0 and context[0, b:30, 3].abs().max() > 0
    if attn_implementation == "eager":
        probs = captured["weights"]  # (batch, heads, blocks, b, b)
        assert probs[0, 2, 1].abs().max() == 0 and probs[0, 3, 0].abs().max() == 0
        assert probs[1, 2:, 0].abs().max() == 0
        torch.testing.assert_close(probs[0, 0, 0].sum(-1), torch.ones(b))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_autocast_with_empty_blocks_has_no_nan_in_outputs_or_gradients(dtype, attn_implementation):
    config = tiny_config(num_blocks=3, heads_per_shift=[2, 1, 1])
    model = make_model(BlockBertModel, config, attn_implementation).train()
    input_ids, attention_mask = random_batch([30, 20, 5], 30)
    with torch.autocast("cpu", dtype=dtype):
        output = model(input_ids, attention_mask=attention_mask).last_hidden_state
    assert not output.isnan().any() and not output.isinf().any()
    output.float()[attention_mask.bool()].sum().backward()
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            assert torch.isfinite(parameter.grad).all(), name


@pytest.mark.parametrize("attention_pattern", ["blockwise", "full", "sparse_fixed"])
def test_padding_invariance(attention_pattern):
    config = tiny_config(
        num_blocks=3,
        heads_per_shift=[2, 1, 1],
        attention_pattern=attention_pattern,
        sparse_stride=16,
        sparse_expressivity=4,
    )
    model = BlockBertModel(config).eval()
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 65, (6,), generator=generator).tolist()
    input_ids, attention_mask = random_batch(lengths, 64, generator=generator)
    with torch.no_grad():
        alone = [model(input_ids[i : i + 1, :n]).last_hidden_state[0] for i, n in enumerate(lengths)]
        to_n = model(input_ids, attention_mask=attention_mask).last_hidden_state
        split = torch.randint(1, 5, (1,), generator=generator).item()
        for part in (slice(0, split), slice(split, None)):
            longest = max(lengths[part])
            batched = model(input_ids[part, :longest], attention_mask=attention_mask[part, :longest]).last_hidden_state
            for row, i in enumerate(range(*part.indices(len(lengths)))):
                torch.testing.assert_close(batched[row, : lengths[i]], alone[i], atol=1e-5, rtol=1e-5)
    for i, n in enumerate(lengths):
        torch.testing.assert_close(to_n[i, :n], alone[i], atol=1e-5, rtol=1e-5)


def test_short_input_sees_full_attention_in_shift_zero_heads_and_zero_elsewhere():
    config = tiny_config(num_blocks=2, heads_per_shift=[3, 1], num_hidden_layers=1)
    model = make_model(BlockBertModel, config, "eager")
    input_ids, attention_mask = random_batch([32, 20], 32)  # L <= b = 32
    with torch.no_grad():
        captured, _ = run_capturing_first_attention(model, input_ids, attention_mask)
        # Full attention for every head: the rule with one block.
        full, _ = reference_attention(model, captured["hidden"], attention_mask, head_shifts=[0] * 4, num_blocks=1)
    context, full = captured["context"].view(2, 32, 4, 8), full.view(2, 32, 4, 8)
    real = attention_mask.bool()
    torch.testing.assert_close(context[:, :, :3][real], full[:, :, :3][real], atol=1e-5, rtol=1e-5)
    assert context[:, :, 3].abs().max() == 0


def test_eager_equals_sdpa():
    config = tiny_config(num_blocks=3, heads_per_shift=[2, 1, 1])
    input_ids, attention_mask = random_batch([64, 40, 9], 64)
    eager = make_model(BlockBertModel, config, "eager").eval()
    sdpa = make_model(BlockBertModel, config, "sdpa").eval()
    sdpa.load_state_dict(eager.state_dict())
    with torch.no_grad():
        a = eager(input_ids, attention_mask=attention_mask).last_hidden_state
        b = sdpa(input_ids, attention_mask=attention_mask).last_hidden_state
    real = attention_mask.bool()
    torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=1e-5)


def test_kernel_only_sees_b_by_b_scores(monkeypatch):
    """Cost: the kernel computes b x b scores for each of the n blocks of a head; no N x N matrix reaches it."""
    config = tiny_config(num_blocks=4, heads_per_shift=[1, 1, 1, 1], num_hidden_layers=1)
    model = make_model(BlockBertModel, config, "eager").eval()
    seen = []
    original = attention_blockbert._attention_probabilities

    def recording(query, key, *args):
        seen.append((tuple(query.shape), tuple(key.shape)))
        return original(query, key, *args)

    monkeypatch.setattr(attention_blockbert, "_attention_probabilities", recording)
    input_ids, attention_mask = random_batch([64, 50], 64)
    with torch.no_grad():
        model(input_ids, attention_mask=attention_mask)
    assert len(seen) == 4  # one call per shift group
    for query_shape, key_shape in seen:
        assert query_shape[0] == 2 * 4 and query_shape[2] == key_shape[2] == 16  # (batch * n, heads, b, d)


def test_too_long_input_raises_before_compute():
    model = BlockBertModel(tiny_config()).eval()
    with pytest.raises(ValueError, match=r"L = 65 tokens but this model takes at most N = 64.*--max_seq_length"):
        model(torch.randint(3, 100, (1, 65)))


def test_left_padding_raises_naming_the_row():
    model = BlockBertModel(tiny_config()).eval()
    input_ids, attention_mask = random_batch([10, 10, 10], 10)
    attention_mask[2] = torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 1, 1])
    with pytest.raises(ValueError, match=r"rows \[2\] have padding before a real token"):
        model(input_ids, attention_mask=attention_mask)


@pytest.mark.parametrize("seq_len, paper_density", [(512, 44.20), (1024, 34.97)])
def test_sparse_fixed_density_matches_paper(seq_len, paper_density):
    density = sparse_fixed_pattern(seq_len, stride=128, expressivity=32).float().mean().item() * 100
    assert abs(density - paper_density) < 1.0


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("attention_pattern", ["full", "sparse_fixed"])
def test_dense_patterns_equal_their_masked_reference(attention_pattern, attn_implementation):
    config = tiny_config(
        attention_pattern=attention_pattern, sparse_stride=8, sparse_expressivity=2, num_hidden_layers=1
    )
    model = make_model(BlockBertModel, config, attn_implementation)
    input_ids, attention_mask = random_batch([64, 37, 3], 64)
    if attention_pattern == "full":
        # Full attention is the block rule with one block.
        with torch.no_grad():
            captured, _ = run_capturing_first_attention(model, input_ids, attention_mask)
            expected, _ = reference_attention(model, captured["hidden"], attention_mask, num_blocks=1, block_size=64)
    else:
        # Every real query may attend itself, so no row is empty: SDPA with the boolean mask is the reference.
        attention = model.encoder.layer[0].attention.self
        allowed = attention_mask.bool()[:, None, None, :] & sparse_fixed_pattern(64, 8, 2)
        with torch.no_grad():
            captured, _ = run_capturing_first_attention(model, input_ids, attention_mask)
            query, key, value = (
                projection(captured["hidden"]).view(3, 64, 4, 8).transpose(1, 2)
                for projection in (attention.query, attention.key, attention.value)
            )
            expected = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=allowed)
            expected = expected.transpose(1, 2).flatten(2)
    real = attention_mask.bool()
    torch.testing.assert_close(captured["context"][real], expected[real], atol=1e-5, rtol=1e-5)
