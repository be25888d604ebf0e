"""The rules of docs/attention.md (block rule, empty partner blocks, padding invariance, n = 1, the dense formula,
cost, input errors), checked against a dense reference written here from the formula."""

import math

import pytest
import torch
from conftest import make_model, random_batch, tiny_config

from blockbert_hf import BlockBertModel, blockwise_attentions_to_dense, modeling_blockbert, sparse_fixed_pattern


def spec_mask(config, key_is_real: torch.Tensor) -> torch.Tensor:
    """M[b, h, t, u]: beta(u) == (beta(t) + s_h) mod n and u is a real token, on the sequence padded to n * b."""
    n, b = config.num_blocks, config.block_size
    batch, seq_len = key_is_real.shape
    padded = torch.zeros(batch, n * b, dtype=torch.bool)
    padded[:, :seq_len] = key_is_real
    positions = torch.arange(n * b)
    shifts = torch.tensor(config.head_shifts)
    allowed = (positions[None, None, :] // b) == ((positions[None, :, None] // b + shifts[:, None, None]) % n)
    return allowed[None] & padded[:, None, None, :]


def dense_reference(q, k, v, mask):
    """softmax(S) V with S = Q K^T / sqrt(d), -inf where M == 0, and zero rows where M is all zero."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return probs @ v, probs


def capture_first_attention(model, input_ids, attention_mask, **kwargs):
    """Runs the model and returns the first self-attention's input hidden states and its output (context vectors)."""
    captured = {}
    attention = model.encoder.layer[0].attention.self

    def hook(module, args, output):
        captured["hidden"] = args[0]
        captured["context"] = output[0]
        captured["weights"] = output[1]

    handle = attention.register_forward_hook(hook)
    try:
        outputs = model(input_ids, attention_mask=attention_mask, **kwargs)
    finally:
        handle.remove()
    return captured, outputs


def reference_for_layer(model, hidden, mask, seq_len):
    attention = model.encoder.layer[0].attention.self
    heads, head_dim = attention.num_attention_heads, attention.attention_head_size

    def split(x):
        x = torch.nn.functional.pad(x, (0, 0, 0, mask.shape[-1] - seq_len))
        return x.view(x.shape[0], -1, heads, head_dim).transpose(1, 2)

    q, k, v = (split(projection(hidden)) for projection in (attention.query, attention.key, attention.value))
    context, probs = dense_reference(q, k, v, mask)
    return context.transpose(1, 2).flatten(2)[:, :seq_len], probs[..., :seq_len, :seq_len]


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
    model = make_model(BlockBertModel, config, attn_implementation).eval()
    seq_len = max(lengths)
    input_ids, attention_mask = random_batch(lengths, seq_len)
    with torch.no_grad():
        captured, _ = capture_first_attention(model, input_ids, attention_mask, output_attentions=True)
        mask = spec_mask(config, attention_mask.bool())
        expected, expected_probs = reference_for_layer(model, captured["hidden"], mask, seq_len)
    real = attention_mask.bool()
    torch.testing.assert_close(captured["context"][real], expected[real], atol=1e-5, rtol=1e-5)
    if attn_implementation == "eager":
        dense = blockwise_attentions_to_dense(captured["weights"], config, seq_len)
        torch.testing.assert_close(
            dense[real[:, None, :, None].expand_as(dense)],
            expected_probs[real[:, None, :, None].expand_as(dense)],
            atol=1e-6,
            rtol=1e-5,
        )


def test_block_size_larger_than_default_follows_the_rule():
    config = tiny_config(num_blocks=2, block_size=40, num_hidden_layers=1)  # n * b = 80 > N = 64
    model = BlockBertModel(config).eval()
    input_ids, attention_mask = random_batch([64, 45, 39], 64)
    with torch.no_grad():
        captured, _ = capture_first_attention(model, input_ids, attention_mask)
        expected, _ = reference_for_layer(model, captured["hidden"], spec_mask(config, attention_mask.bool()), 64)
    real = attention_mask.bool()
    torch.testing.assert_close(captured["context"][real], expected[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_empty_partner_block_gives_zero_output_without_nan(attn_implementation):
    # n = 3, b = 22: a 30-token input fills 2 blocks. Shift 1: block 1 -> block 2 (past the end, empty).
    # Shift 2: block 0 -> block 2 (empty). Row 1 has 20 tokens: every partner block of block 0 but its own is empty.
    config = tiny_config(num_blocks=3, heads_per_shift=[2, 1, 1], num_hidden_layers=1)
    model = make_model(BlockBertModel, config, attn_implementation).eval()
    input_ids, attention_mask = random_batch([30, 20], 30)
    with torch.no_grad():
        captured, outputs = capture_first_attention(
            model, input_ids, attention_mask, output_attentions=attn_implementation == "eager"
        )
    b, d = config.block_size, 8
    context = captured["context"].view(2, 30, 4, d)
    assert not outputs.last_hidden_state.isnan().any()
    assert context[0, b:30, 2].abs().max() == 0  # shift 1, block 1 -> block 2 (past the end)
    assert context[0, :b, 3].abs().max() == 0  # shift 2, block 0 -> block 2 (past the end)
    assert context[1, :20, 2:].abs().max() == 0  # row 1: partner blocks hold only padding
    assert context[0, :b, 2].abs().max() > 0 and context[0, b:30, 3].abs().max() > 0
    if attn_implementation == "eager":
        probs = captured["weights"]  # (batch, heads, tiles, b, b)
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
    model = make_model(BlockBertModel, config, "eager").eval()
    input_ids, attention_mask = random_batch([32, 20], 32)  # L <= b = 32
    with torch.no_grad():
        captured, _ = capture_first_attention(model, input_ids, attention_mask)
        hidden = captured["hidden"]
        attention = model.encoder.layer[0].attention.self
        q, k, v = (
            p(hidden).view(2, 32, 4, 8).transpose(1, 2) for p in (attention.query, attention.key, attention.value)
        )
        key_mask = attention_mask.bool()[:, None, None, :]
        full, _ = dense_reference(q[:, :3], k[:, :3], v[:, :3], key_mask)
    context = captured["context"].view(2, 32, 4, 8)
    real = attention_mask.bool()
    torch.testing.assert_close(context[:, :, :3][real], full.transpose(1, 2)[real], atol=1e-5, rtol=1e-5)
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


def test_kernel_only_sees_block_tiles(monkeypatch):
    """Cost: scores are n blocks of b x b per head; no N x N matrix reaches the kernel."""
    config = tiny_config(num_blocks=4, heads_per_shift=[1, 1, 1, 1], num_hidden_layers=1)
    model = make_model(BlockBertModel, config, "eager").eval()
    seen = []
    original = modeling_blockbert._attention_probabilities

    def recording(query, key, *args):
        seen.append((tuple(query.shape), tuple(key.shape)))
        return original(query, key, *args)

    monkeypatch.setattr(modeling_blockbert, "_attention_probabilities", recording)
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


@pytest.mark.parametrize("attention_pattern", ["full", "sparse_fixed"])
def test_dense_patterns_equal_their_masked_reference(attention_pattern):
    config = tiny_config(
        attention_pattern=attention_pattern, sparse_stride=8, sparse_expressivity=2, num_hidden_layers=1
    )
    model = BlockBertModel(config).eval()
    lengths = [64, 37, 3]
    input_ids, attention_mask = random_batch(lengths, 64)
    allowed = attention_mask.bool()[:, None, None, :].expand(3, 4, 64, 64)
    if attention_pattern == "sparse_fixed":
        allowed = allowed & sparse_fixed_pattern(64, 8, 2)
    with torch.no_grad():
        captured, _ = capture_first_attention(model, input_ids, attention_mask)
        expected, _ = reference_for_layer(model, captured["hidden"], allowed, 64)
    real = attention_mask.bool()
    torch.testing.assert_close(captured["context"][real], expected[real], atol=1e-5, rtol=1e-5)
