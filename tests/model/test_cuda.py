"""The model on a CUDA device against the CPU, at the shapes of the QA experiments (hidden 384, 12 heads of 32, N about
1024): every attention pattern x kernel (eager, sdpa) in float32 and bfloat16, training steps and inference, with
batches padded to the lengths that select different kernels (full blocks, a padded last block, one block); float16,
padded (not padding-free) batches and block-relative positions on n = 2; flex_attention compiled at two lengths.
Skipped without a CUDA device (CI); on a GPU machine: `pytest tests/model/test_cuda.py` (about 2-4 minutes), with
`CUDA_LAUNCH_BLOCKING=1` to name the kernel of an asynchronous CUDA error.

`BLOCKBERT_TEST_CUDA_DEVICE=cpu pytest tests/model/test_cuda.py -k "37"` runs the same checks with a second CPU copy
in place of the GPU: a check of the tests themselves on a machine without one."""

import copy
import os

import pytest
import torch

from blockbert_hf import BlockBertConfig, BlockBertForQuestionAnswering


DEVICE = torch.device(os.environ.get("BLOCKBERT_TEST_CUDA_DEVICE", "cuda"))
pytestmark = pytest.mark.skipif(DEVICE.type == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device")

# Each pattern at its own N (max_position_embeddings = N + 2, RoBERTa positions).
PATTERNS = {
    "full": dict(attention_pattern="full", num_blocks=1, max_position_embeddings=1026),
    "n=2 10:2": dict(num_blocks=2, heads_per_shift="10:2", max_position_embeddings=1026),
    "n=3 8:2:2": dict(num_blocks=3, heads_per_shift="8:2:2", max_position_embeddings=1026),
    "n=4 6:2:2:2, N=1022 (4 x 256)": dict(num_blocks=4, heads_per_shift="6:2:2:2", max_position_embeddings=1024),
    "sparse_fixed": dict(attention_pattern="sparse_fixed", sparse_stride=128, sparse_expressivity=32, num_blocks=1,
                         max_position_embeddings=1026),
}  # fmt: skip
N2 = PATTERNS["n=2 10:2"]
# Lengths as fractions of N: the longest sequence of a batch (the batch is padded to it); 37 tokens: one block.
LENGTHS = ["N", "0.7N", "N/2+1", "37"]
BATCH, VOCAB = 8, 1000


def _model(implementation: str, **fields) -> BlockBertForQuestionAnswering:
    config = BlockBertConfig(
        vocab_size=VOCAB, hidden_size=384, num_hidden_layers=2, num_attention_heads=12, intermediate_size=1536,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **fields,
    )  # fmt: skip
    torch.manual_seed(0)
    model = BlockBertForQuestionAnswering(config)
    model.set_attn_implementation(implementation)
    return model


def _seq_len(model, length: str) -> int:
    n = model.config.max_sequence_length
    return {"N": n, "0.7N": int(0.7 * n), "N/2+1": n // 2 + 1, "37": 37}[length]


def _batch(seq_len: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seq_len)
    lengths = torch.randint(max(1, seq_len // 2), seq_len + 1, (BATCH,), generator=generator)
    lengths[0] = seq_len  # the batch is padded to its longest sequence
    attention_mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
    input_ids = torch.randint(3, VOCAB, (BATCH, seq_len), generator=generator) * attention_mask
    starts = (torch.rand(BATCH, generator=generator) * lengths).long()
    return dict(input_ids=input_ids, attention_mask=attention_mask, start_positions=starts, end_positions=starts)


def _step(model, batch, device, dtype=None):
    """Loss and gradients of one training step, on the CPU in float32."""
    model = copy.deepcopy(model).to(device)
    batch = {name: value.to(device) for name, value in batch.items()}
    with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        loss = model(**batch).loss
    loss.backward()
    if device.type == "cuda":
        torch.cuda.synchronize()  # a kernel's error surfaces here, in this test
    grads = {name: parameter.grad.float().cpu() for name, parameter in model.named_parameters()}
    return loss.float().cpu(), grads


def _inference(model, batch, device, dtype=None):
    """Start logits at the real tokens, in evaluation mode, with the model's weights in `dtype`."""
    model = copy.deepcopy(model).eval().to(device=device, dtype=dtype or torch.float32)
    inputs = {name: batch[name].to(device) for name in ("input_ids", "attention_mask")}
    with torch.no_grad():
        logits = model(**inputs).start_logits
    if device.type == "cuda":
        torch.cuda.synchronize()
    return logits.float().cpu()[batch["attention_mask"].bool()]


def _assert_training_step_matches_cpu(model, batch, low_precision=(torch.bfloat16,)):
    cpu_loss, cpu_grads = _step(model, batch, torch.device("cpu"))
    device_loss, device_grads = _step(model, batch, DEVICE)
    torch.testing.assert_close(device_loss, cpu_loss, rtol=1e-4, atol=1e-4)
    for name, grad in cpu_grads.items():
        torch.testing.assert_close(device_grads[name], grad, rtol=1e-3, atol=1e-4, msg=name)
    for dtype in low_precision:  # the recipes train in bf16 autocast
        loss, grads = _step(model, batch, DEVICE, dtype)
        assert torch.isfinite(loss) and abs(loss - cpu_loss) < 0.05 * cpu_loss, (dtype, loss, cpu_loss)
        assert all(torch.isfinite(grad).all() for grad in grads.values()), dtype


def _assert_inference_matches_cpu(model, batch, low_precision=(torch.bfloat16,)):
    expected = _inference(model, batch, torch.device("cpu"))
    torch.testing.assert_close(_inference(model, batch, DEVICE), expected, rtol=1e-4, atol=1e-4)
    for dtype in low_precision:
        actual = _inference(model, batch, DEVICE, dtype)
        assert torch.isfinite(actual).all(), dtype
        assert (actual - expected).abs().max() < 0.1 * expected.abs().max() + 0.05, dtype


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_every_pattern_and_kernel_trains_and_infers_on_cuda_as_on_the_cpu(pattern, implementation, length):
    model = _model(implementation, **PATTERNS[pattern])
    batch = _batch(_seq_len(model, length))
    _assert_training_step_matches_cpu(model, batch)
    _assert_inference_matches_cpu(model, batch)


@pytest.mark.parametrize("length", ["N", "N/2+1"])
@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_float16_on_cuda_stays_finite_and_close_to_the_cpu(implementation, length):
    model = _model(implementation, **N2)
    batch = _batch(_seq_len(model, length))
    _assert_training_step_matches_cpu(model, batch, low_precision=(torch.float16,))
    _assert_inference_matches_cpu(model, batch, low_precision=(torch.float16,))


@pytest.mark.parametrize("length", ["N", "0.7N", "37"])
@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_padded_batches_without_padding_free_on_cuda_match_the_cpu(implementation, length):
    model = _model(implementation, **N2, padding_free=False)
    batch = _batch(_seq_len(model, length))
    _assert_training_step_matches_cpu(model, batch)
    _assert_inference_matches_cpu(model, batch)


@pytest.mark.parametrize("length", ["N", "0.7N", "37"])
@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_block_relative_positions_on_cuda_match_the_cpu(implementation, length):
    # 512 position rows read 2 x 512 tokens: the QA experiments' long model.
    model = _model(implementation, num_blocks=2, heads_per_shift="10:2", max_position_embeddings=514,
                   block_relative_positions=True)  # fmt: skip
    batch = _batch(_seq_len(model, length))
    _assert_training_step_matches_cpu(model, batch)
    _assert_inference_matches_cpu(model, batch)


@pytest.mark.parametrize("length", ["N", "0.7N"])
def test_compiled_flex_attention_on_cuda_matches_the_cpu(length):
    flex = _model("flex_attention", **N2)
    eager = _model("eager", **N2)  # the CPU reference: flex compiled for the CPU is not what this test checks
    batch = _batch(_seq_len(flex, length))
    if DEVICE.type == "cuda":  # torch's flex_attention has no backward on the CPU (the dry run's device)
        cpu_loss, cpu_grads = _step(eager, batch, torch.device("cpu"))
        flex_loss, flex_grads = _step(flex, batch, DEVICE)
        torch.testing.assert_close(flex_loss, cpu_loss, rtol=1e-4, atol=1e-4)
        for name, grad in cpu_grads.items():
            torch.testing.assert_close(flex_grads[name], grad, rtol=1e-3, atol=1e-4, msg=name)
    torch.testing.assert_close(
        _inference(flex, batch, DEVICE), _inference(eager, batch, torch.device("cpu")), rtol=1e-4, atol=1e-4
    )
