"""What the benchmarks run: random token ids, MLM labels as a collator makes them, and one AdamW training step of a
`*ForMaskedLM` model."""

from collections.abc import Callable

import torch

from .models import CANDIDATES, ModelSize, build_benchmark_model


def random_token_ids(batch_size: int, seq_len: int, vocab_size: int, generator=None) -> torch.Tensor:
    """Token ids that avoid the special ids (0-4) of every family, so no position is taken for padding."""
    return torch.randint(5, vocab_size, (batch_size, seq_len), generator=generator)


def masked_lm_labels(input_ids: torch.Tensor, fraction: float = 0.15, generator=None) -> torch.Tensor:
    """MLM labels as a collator would make them: the token id at a random `fraction` of positions, -100 elsewhere."""
    chosen = torch.rand(input_ids.shape, generator=generator) < fraction
    return torch.where(chosen, input_ids, torch.full_like(input_ids, -100))


def seeded_inputs(batch_size: int, seq_len: int, vocab_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """`random_token_ids` and their `masked_lm_labels` from one seeded generator: the same inputs in every process."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = random_token_ids(batch_size, seq_len, vocab_size, generator)
    return input_ids, masked_lm_labels(input_ids, generator=generator)


def make_training_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, input_ids, labels, autocast_dtype: str | None = None
) -> Callable:
    """One optimizer step of a `*ForMaskedLM` model. Gradients are released at the end of the step, so that a step
    starts with only weights and optimizer state allocated (the state in which the paper measures a step).
    `autocast_dtype` ("bfloat16"): the forward under `torch.autocast` (mixed precision; weights and AdamW state stay
    fp32, as with Trainer's `--bf16`)."""
    dtype = getattr(torch, autocast_dtype) if autocast_dtype else None

    def step():
        with torch.autocast(input_ids.device.type, dtype=dtype, enabled=dtype is not None):
            loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def masked_lm_with_adamw(
    candidate_key: str, seq_len: int, size: ModelSize, attention_dropout: float, device: str
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The `*ForMaskedLM` of a candidate in training mode on `device`, with its AdamW optimizer."""
    model = build_benchmark_model(
        CANDIDATES[candidate_key], seq_len, size, masked_lm=True, attention_dropout=attention_dropout
    )
    model = model.to(device).train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-5)
