"""The per-block QA objective (`blockbert_hf.train.qa.objective`): its value on hand-built logits, the block labels of
answers inside a block, across a block boundary and absent, padding blocks left out, the window objective it equals
with one block per window, and a planted two-block window whose second [CLS] only the per-block objective trains."""

import math

import pytest
import torch
from conftest import SAMPLE_TEXT, tiny_config

from blockbert_hf import BlockBertForQuestionAnswering
from blockbert_hf.tokenization import match_tokenizer_to_config, read_text_lines
from blockbert_hf.train.qa import per_block_span_loss, prepare_train_features
from blockbert_hf.train.qa.objective import IGNORE_INDEX, block_span_labels, check_qa_objective, resolve_qa_objective


PREFIXED = "question_prefixed_blocks"


def lse(*values: float) -> float:
    return math.log(sum(math.exp(value) for value in values))


def test_the_loss_on_hand_built_logits_is_the_mean_over_blocks_of_each_blocks_own_softmax():
    """b = 3, windows of 6 tokens: A holds its answer in block 1; B has no answer, its last block one real token;
    C holds its answer in block 0 and its block 1 is padding."""
    start = torch.tensor(
        [[2.0, 0, 1, 0, 3, 1], [0, 1, 0, 5, 9, 9], [1, 0, 0, 9, 9, 9]], requires_grad=True
    )  # fmt: skip
    end = torch.tensor([[1.0, 0, 0, 0, 1, 2], [1, 1, 1, 2, 9, 9], [0, 0, 2, 9, 9, 9]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]])
    starts, ends = torch.tensor([4, 0, 1]), torch.tensor([5, 0, 2])
    loss = per_block_span_loss(start, end, starts, ends, block_size=3, attention_mask=mask)
    by_block = [
        # A, block 0: null (its first token); block 1: the answer at its tokens 1 (start) and 2 (end)
        (lse(2, 0, 1) - 2, lse(1, 0, 0) - 1),
        (lse(0, 3, 1) - 3, lse(0, 1, 2) - 2),
        # B: null in both blocks; its block 1 has one real token, the null token itself
        (lse(0, 1, 0) - 0, lse(1, 1, 1) - 1),
        (0.0, 0.0),
        # C, block 0: the answer at tokens 1 and 2; block 1 (padding only) is left out
        (lse(1, 0, 0) - 0, lse(0, 0, 2) - 2),
    ]
    expected = sum((s + e) / 2 for s, e in by_block) / len(by_block)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    assert torch.all(start.grad[1, 4:] == 0) and torch.all(start.grad[2, 3:] == 0)  # padding gets no gradient


def test_block_labels_answer_in_its_block_null_elsewhere_and_leave_out_blocks_a_crossing_answer_spans():
    starts, ends = torch.tensor([2, 4, 0, 7]), torch.tensor([4, 5, 0, 8])  # b = 3, three blocks
    start_labels, end_labels = block_span_labels(starts, ends, block_size=3, num_blocks=3)
    ignored = IGNORE_INDEX
    assert start_labels.tolist() == [[ignored, ignored, 0], [0, 1, 0], [0, 0, 0], [0, 0, 1]]
    assert end_labels.tolist() == [[ignored, ignored, 0], [0, 2, 0], [0, 0, 0], [0, 0, 2]]


def test_padding_blocks_change_nothing():
    generator = torch.Generator().manual_seed(0)
    start, end = torch.randn(2, 8, generator=generator), torch.randn(2, 8, generator=generator)
    mask = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])
    starts, ends = torch.tensor([5, 0]), torch.tensor([6, 0])
    loss = per_block_span_loss(start, end, starts, ends, 4, mask)
    garbage = torch.full((2, 5), 1e4)  # a third block and a bit, padding in every window: any logits
    padded = per_block_span_loss(
        torch.cat([start, garbage], 1), torch.cat([end, garbage], 1), starts, ends, 4,
        torch.cat([mask, torch.zeros(2, 5, dtype=torch.long)], 1),
    )  # fmt: skip
    assert padded.item() == pytest.approx(loss.item(), rel=1e-6)
    # A batch whose every block is left out (two blocks, an answer crossing between them) has a loss of 0, not NaN.
    crossing = per_block_span_loss(start[:1], end[:1], torch.tensor([3]), torch.tensor([4]), 4, mask[:1])
    assert crossing.item() == 0.0


@pytest.fixture(scope="module")
def qa_model(tokenizer):
    """A tiny BlockBERT QA model: N = 64, n = 2, b = 32, block-relative positions."""
    config = tiny_config(vocab_size=len(tokenizer), block_relative_positions=True)
    match_tokenizer_to_config(tokenizer, config)
    torch.manual_seed(0)
    return BlockBertForQuestionAnswering(config).eval()


def test_with_one_block_per_window_it_is_the_models_window_objective(tokenizer, qa_model):
    """The model's own loss (one softmax over the window, padding excluded) on a padded batch with answers and nulls,
    against the per-block loss with blocks as long as the batch."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(5, len(tokenizer), (3, 64), generator=generator)
    mask = torch.ones(3, 64, dtype=torch.long)
    mask[1, 40:], mask[2, 20:] = 0, 0
    input_ids[mask == 0] = tokenizer.pad_token_id
    starts, ends = torch.tensor([10, 0, 5]), torch.tensor([12, 0, 9])
    with torch.no_grad():
        outputs = qa_model(input_ids, attention_mask=mask, start_positions=starts, end_positions=ends)
    per_block = per_block_span_loss(outputs.start_logits, outputs.end_logits, starts, ends, 64, mask)
    assert per_block.item() == pytest.approx(outputs.loss.item(), rel=1e-6)
    assert per_block_span_loss(outputs.start_logits, outputs.end_logits, starts, ends, 32, mask) != pytest.approx(
        outputs.loss.item(), rel=1e-3
    )  # with two blocks it is another loss


def test_only_the_per_block_objective_trains_the_cls_of_a_block_without_the_answer(tokenizer, qa_model):
    """A planted two-block window (question-prefixed blocks of 32 tokens) whose answer is in block 0, and one without
    the answer. Block 1's [CLS] is what null-relative scoring compares block 1's spans with. The window softmax never
    labels it: gradient descent only pushes its logits down, in both windows. The per-block objective labels it null
    in both and pulls it up; it also still pulls the answer up in block 0, and block 0's [CLS] of the window without
    the answer."""
    context = " ".join(read_text_lines(SAMPLE_TEXT)[:12])
    answer = context.split(" ")[1]
    examples = {
        "id": ["planted"], "question": ["Who?"], "context": [context],
        "answers": [{"text": [answer], "answer_start": [context.index(answer)]}],
    }  # fmt: skip
    kwargs = dict(tokenizer=tokenizer, max_seq_length=64, doc_stride=8, layout=PREFIXED, block_size=32)
    features = prepare_train_features(examples, **kwargs)
    input_ids = torch.tensor(features["input_ids"][:2])  # the answer's window and the next, both full
    starts, ends = torch.tensor(features["start_positions"][:2]), torch.tensor(features["end_positions"][:2])
    assert input_ids.shape == (2, 64) and (input_ids[:, [0, 32]] == tokenizer.cls_token_id).all()
    assert 0 < starts[0] <= ends[0] < 32 and starts[1] == ends[1] == 0
    outputs = qa_model(input_ids, start_positions=starts, end_positions=ends)
    logits = (outputs.start_logits, outputs.end_logits)
    window_grads = torch.autograd.grad(outputs.loss, logits, retain_graph=True)
    per_block = per_block_span_loss(*logits, starts, ends, 32)
    block_grads = torch.autograd.grad(per_block, logits)
    for window_grad, block_grad, answer_token in zip(window_grads, block_grads, (starts[0], ends[0])):
        assert (window_grad[:, 32] > 0).all()  # the window softmax: block 1's [CLS] pushed down
        assert (block_grad[:, 32] < 0).all()  # per block: pulled up, labelled null
        assert block_grad[0, answer_token] < 0 and window_grad[0, answer_token] < 0
        assert block_grad[1, 0] < 0 and window_grad[1, 0] < 0  # block 0's [CLS] of the window without the answer


def test_the_objective_needs_a_null_token_per_block():
    config = tiny_config()
    assert resolve_qa_objective(config, None, "question_first") == "window"
    assert resolve_qa_objective(config, "per_block", PREFIXED) == "per_block"
    with pytest.raises(ValueError, match="--qa_objective per_block trains every block against its own null token"):
        resolve_qa_objective(config, "per_block", "question_first")
    config.question_answering = {"qa_objective": "per_block", "window_layout": PREFIXED}
    assert resolve_qa_objective(config, None, PREFIXED) == "per_block"  # the model's own, by default
    assert resolve_qa_objective(config, "window", "question_first") == "window"
    with pytest.raises(ValueError, match="The model records qa_objective 'per_block'"):
        resolve_qa_objective(config, None, "question_first")
    with pytest.raises(ValueError, match="qa_objective='block' is unknown"):
        check_qa_objective("block")
