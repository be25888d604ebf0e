"""Training steps on a CUDA device against the CPU, at the shapes of the QA experiments (hidden 384, 12 heads of 32,
N = 1024 in 2 blocks, heads 10:2), for every attention pattern and kernel, with batches padded to the lengths that
select different kernels (full blocks, a padded last block, one block). Skipped without a CUDA device (CI); run on a GPU
machine with `pytest tests/model/test_cuda.py`."""

import copy

import pytest
import torch

from blockbert_hf import BlockBertConfig, BlockBertForQuestionAnswering


pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

PATTERNS = {
    "blockwise n=2 10:2": dict(num_blocks=2, heads_per_shift="10:2"),
    "blockwise n=4 6:2:2:2": dict(num_blocks=4, heads_per_shift="6:2:2:2"),
    "full": dict(attention_pattern="full", num_blocks=1),
}
BATCH, VOCAB = 16, 1000


def _model(pattern: str, implementation: str) -> BlockBertForQuestionAnswering:
    config = BlockBertConfig(
        vocab_size=VOCAB, hidden_size=384, num_hidden_layers=2, num_attention_heads=12, intermediate_size=1536,
        max_position_embeddings=1026, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        **PATTERNS[pattern],
    )  # fmt: skip
    config._attn_implementation = implementation
    torch.manual_seed(0)
    return BlockBertForQuestionAnswering(config)


def _batch(seq_len: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seq_len)
    lengths = torch.randint(max(1, seq_len // 2), seq_len + 1, (BATCH,), generator=generator)
    lengths[0] = seq_len  # the batch is padded to its longest sequence
    attention_mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
    input_ids = torch.randint(3, VOCAB, (BATCH, seq_len), generator=generator) * attention_mask
    starts = (torch.rand(BATCH, generator=generator) * lengths).long()
    return dict(input_ids=input_ids, attention_mask=attention_mask, start_positions=starts, end_positions=starts)


def _step(model, batch, device, dtype=None):
    model = model.to(device)
    batch = {name: value.to(device) for name, value in batch.items()}
    with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        loss = model(**batch).loss
    loss.backward()
    if device.type == "cuda":
        torch.cuda.synchronize()  # a kernel's error surfaces here, in this test
    grads = {name: parameter.grad.float().cpu() for name, parameter in model.named_parameters()}
    return loss.float().cpu(), grads


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize("seq_len", [1024, 1000, 700, 513, 512, 300, 37])
def test_a_training_step_on_cuda_matches_the_cpu(pattern, implementation, seq_len):
    model, batch = _model(pattern, implementation), _batch(seq_len)
    cpu_loss, cpu_grads = _step(copy.deepcopy(model), batch, torch.device("cpu"))
    cuda_loss, cuda_grads = _step(copy.deepcopy(model), batch, torch.device("cuda"))
    torch.testing.assert_close(cuda_loss, cpu_loss, rtol=1e-4, atol=1e-4)
    for name, grad in cpu_grads.items():
        torch.testing.assert_close(cuda_grads[name], grad, rtol=1e-3, atol=1e-4, msg=name)
    bf16_loss, bf16_grads = _step(copy.deepcopy(model), batch, torch.device("cuda"), torch.bfloat16)  # the recipe's
    assert torch.isfinite(bf16_loss) and abs(bf16_loss - cpu_loss) < 0.05 * cpu_loss
    assert all(torch.isfinite(grad).all() for grad in bf16_grads.values())
