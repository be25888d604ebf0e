"""Checking a model's first self-attention against `blockbert_hf.blockwise_attention`, the dense reference of
docs/attention.md, on the very hidden states the layer received."""

import torch

from blockbert_hf import blockwise_attention


def unpacked(packed: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """`(T, hidden)` vectors of a padding-free forward's real tokens as `(batch, seq_len, hidden)`, zero at padding."""
    is_real = attention_mask.bool()
    padded = packed.new_zeros(*is_real.shape, packed.shape[-1])
    padded[is_real] = packed
    return padded


def run_capturing_first_attention(model, input_ids, attention_mask, **kwargs):
    """Runs the model; returns the first self-attention's input hidden states, its output (context vectors) and its
    attention weights, and the model's outputs. Hidden states and context vectors are `(batch, seq_len, hidden)`,
    also where the forward computed the real tokens only (`padding_free`: then zero at padding)."""
    captured = {}

    def hook(module, args, output):
        captured.update(hidden=args[0], context=output[0], weights=output[1])

    handle = model.encoder.layer[0].attention.self.register_forward_hook(hook)
    try:
        outputs = model(input_ids, attention_mask=attention_mask, **kwargs)
    finally:
        handle.remove()
    if captured["hidden"].dim() == 2:
        captured.update(
            hidden=unpacked(captured["hidden"], attention_mask), context=unpacked(captured["context"], attention_mask)
        )
    return captured, outputs


def reference_attention(model, hidden, attention_mask, **rule):
    """The reference's context vectors `(batch, L, hidden)` and probabilities `(batch, heads, L, L)` from the first
    layer's projections of `hidden`. The rule is the model's config unless given (`head_shifts`, `num_blocks`,
    `block_size`)."""
    attention = model.encoder.layer[0].attention.self
    config = model.config
    rule = {
        "head_shifts": config.head_shifts,
        "num_blocks": config.num_blocks,
        "block_size": config.effective_block_size,
        **rule,
    }
    batch, seq_len, _ = hidden.shape
    query, key, value = (
        projection(hidden).view(batch, seq_len, attention.num_attention_heads, -1).transpose(1, 2)
        for projection in (attention.query, attention.key, attention.value)
    )
    context, probabilities = blockwise_attention(query, key, value, attention_mask.bool(), **rule)
    return context.transpose(1, 2).flatten(2), probabilities


def assert_first_attention_equals_reference(model, input_ids, attention_mask):
    """The first layer's context vectors of real tokens equal the reference's (float32: within 1e-5)."""
    with torch.no_grad():
        captured, _ = run_capturing_first_attention(model, input_ids, attention_mask)
        expected, _ = reference_attention(model, captured["hidden"], attention_mask)
    real = attention_mask.bool()
    torch.testing.assert_close(captured["context"][real], expected[real], atol=1e-5, rtol=1e-5)
