"""Task distillation in `run_qa` (`blockbert_hf.train.qa.task_distillation`): the KL loss over the window's or each
block's real positions, the teacher reading every block as an input of its own, the fp16 cache of its logits (refused
for other windows), and runs: alpha 0 is plain fine-tuning, a run from the cache equals the run that computed it."""

import pytest
import torch
from conftest import SAMPLE_TEXT, make_model, random_batch, tiny_config
from safetensors import safe_open
from safetensors.torch import load_file

from blockbert_hf import BlockBertForQuestionAnswering
from blockbert_hf.saving import save_atomically
from blockbert_hf.tokenization import match_tokenizer_to_config, read_text_lines, train_roberta_tokenizer
from blockbert_hf.train.qa import QARunConfig, run_qa
from blockbert_hf.train.qa.task_distillation import distillation_kl, span_distillation_loss, teacher_span_logits
from blockbert_hf.train.runs import read_metrics


SQUAD_V1 = SAMPLE_TEXT.parent / "squad_v1.1_dev_sample.json"


def test_the_kl_is_zero_for_the_teachers_own_logits_and_ignores_padding():
    generator = torch.Generator().manual_seed(0)
    teacher = torch.randn(3, 10, generator=generator)
    is_real = torch.arange(10)[None, :] < torch.tensor([[10], [6], [0]])  # the last row is padding only
    student = teacher.clone()
    student[~is_real] = 50.0
    assert distillation_kl(student, teacher, is_real, temperature=2.0) == pytest.approx(0.0, abs=1e-6)
    other = torch.randn(3, 10, generator=generator)
    kl = distillation_kl(other, teacher, is_real, temperature=1.0)
    real = is_real[:2]
    expected = torch.stack([
        torch.nn.functional.kl_div(
            torch.log_softmax(other[row][real[row]], -1), torch.log_softmax(teacher[row][real[row]], -1),
            log_target=True, reduction="sum",
        )
        for row in range(2)
    ]).mean()  # fmt: skip
    torch.testing.assert_close(kl, expected)
    assert distillation_kl(other, teacher, is_real, temperature=3.0) > 0


def test_the_per_block_loss_is_the_mean_over_blocks_of_their_own_softmaxes():
    generator = torch.Generator().manual_seed(1)
    student, teacher = torch.randn(2, 2, 12, generator=generator)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 9:] = 0
    loss = span_distillation_loss(student, student, teacher, teacher, mask, 1.0, block_size=6)
    blocks = [(0, slice(0, 6)), (0, slice(6, 12)), (1, slice(0, 6)), (1, slice(6, 9))]
    per_block = [
        torch.nn.functional.kl_div(
            torch.log_softmax(student[row, cut], -1), torch.log_softmax(teacher[row, cut], -1),
            log_target=True, reduction="sum",
        )
        for row, cut in blocks
    ]  # fmt: skip
    torch.testing.assert_close(loss, torch.stack(per_block).mean())


def test_the_teacher_reads_each_block_as_an_input_of_its_own():
    teacher = make_model(BlockBertForQuestionAnswering, tiny_config(attention_pattern="full"), "sdpa")
    input_ids, attention_mask = random_batch([64, 40], 64, generator=torch.Generator().manual_seed(0))
    start, end = teacher_span_logits(teacher, {"input_ids": input_ids, "attention_mask": attention_mask}, 32)
    with torch.no_grad():
        for row, cut in ((0, slice(0, 32)), (0, slice(32, 64)), (1, slice(0, 32)), (1, slice(32, 40))):
            alone = teacher(input_ids[row : row + 1, cut])
            torch.testing.assert_close(start[row, cut], alone.start_logits[0])
            torch.testing.assert_close(end[row, cut], alone.end_logits[0])
    assert start[1, 40:].eq(0).all()


@pytest.fixture(scope="module")
def qa_folders(tmp_path_factory):
    """A tiny QA model (N = 128) and a 'teacher': another tiny QA model with the same tokenizer."""
    import json

    folder = tmp_path_factory.mktemp("task_distillation")
    contexts = sorted({p["context"] for a in json.loads(SQUAD_V1.read_text())["data"] for p in a["paragraphs"]})
    tokenizer = train_roberta_tokenizer(contexts + read_text_lines(SAMPLE_TEXT)[:50], vocab_size=1000,
                                        model_max_length=128)  # fmt: skip
    folders = {}
    for seed, name in ((0, "student"), (1, "teacher")):
        config = tiny_config(vocab_size=len(tokenizer), max_position_embeddings=130)
        match_tokenizer_to_config(tokenizer, config)
        torch.manual_seed(seed)
        folders[name] = save_atomically(
            folder / name, BlockBertForQuestionAnswering(config).save_pretrained, tokenizer.save_pretrained
        )
    return folders


def _config(qa_folders, output_dir, **changes) -> QARunConfig:
    fields = dict(
        model_name_or_path=str(qa_folders["student"]), train_file=str(SQUAD_V1), do_train=True,
        output_dir=str(output_dir), max_train_steps=3, per_device_train_batch_size=4, learning_rate=1e-3,
        max_train_samples=12, doc_stride=32, logging_steps=1, per_device_eval_batch_size=8,
    )  # fmt: skip
    return QARunConfig(**{**fields, **changes})


def _weights(output_dir):
    return load_file(output_dir / "model" / "model.safetensors")


def test_alpha_zero_is_plain_fine_tuning_and_a_cached_teacher_gives_the_same_run(qa_folders, tmp_path):
    plain = run_qa(_config(qa_folders, tmp_path / "plain"))
    teacher = str(qa_folders["teacher"])
    cache = tmp_path / "teacher_logits.safetensors"
    run_qa(_config(qa_folders, tmp_path / "alpha0", teacher_model_name_or_path=teacher, distillation_alpha=0.0))
    for name, tensor in _weights(tmp_path / "plain").items():
        torch.testing.assert_close(_weights(tmp_path / "alpha0")[name], tensor, rtol=0, atol=0)
    distilled = run_qa(_config(qa_folders, tmp_path / "computed", teacher_model_name_or_path=teacher,
                               teacher_logits=str(cache)))  # fmt: skip
    assert cache.is_file() and distilled["teacher"] == teacher and distilled["distillation_alpha"] == 0.5
    # --teacher_logits_only writes the same file and nothing else
    only = tmp_path / "only.safetensors"
    run_qa(_config(qa_folders, tmp_path / "only", teacher_model_name_or_path=teacher, teacher_logits=str(only),
                   teacher_logits_only=True))  # fmt: skip
    assert not (tmp_path / "only").exists()
    for name, tensor in load_file(cache).items():
        torch.testing.assert_close(load_file(only)[name], tensor, rtol=0, atol=0)
    with safe_open(str(only), framework="pt") as written, safe_open(str(cache), framework="pt") as expected:
        assert written.metadata() == expected.metadata()  # the same windows' digest
    card = (tmp_path / "computed" / "model" / "README.md").read_text()
    assert "distillation: from `teacher`, temperature 2.0, alpha 0.5" in card
    cached = run_qa(_config(qa_folders, tmp_path / "cached", teacher_logits=str(cache)))
    losses = [[r["loss"] for r in read_metrics(tmp_path / run / "metrics.jsonl")] for run in ("computed", "cached")]
    assert losses[0] == losses[1]
    plain_losses = [r["loss"] for r in read_metrics(tmp_path / "plain" / "metrics.jsonl")]
    assert losses[0] != plain_losses
    assert cached["completed_steps"] == plain["completed_steps"] == 3


def test_a_cache_of_other_windows_or_a_missing_teacher_is_refused(qa_folders, tmp_path):
    cache = tmp_path / "teacher_logits.safetensors"
    run_qa(_config(qa_folders, tmp_path / "a", teacher_model_name_or_path=str(qa_folders["teacher"]),
                   teacher_logits=str(cache)))  # fmt: skip
    with pytest.raises(ValueError, match="computed on other training windows"):
        run_qa(_config(qa_folders, tmp_path / "b", teacher_logits=str(cache), max_train_samples=8))
    with pytest.raises(ValueError, match="does not exist: give --teacher_model_name_or_path"):
        run_qa(_config(qa_folders, tmp_path / "c", teacher_logits=str(tmp_path / "missing.safetensors")))
    only = dict(teacher_model_name_or_path=str(qa_folders["teacher"]), teacher_logits_only=True)
    with pytest.raises(ValueError, match="exists already; delete it"):
        run_qa(_config(qa_folders, tmp_path / "e", teacher_logits=str(cache), **only))
    with pytest.raises(ValueError, match="give --teacher_model_name_or_path and --teacher_logits"):
        run_qa(_config(qa_folders, tmp_path / "f", **only))
    with pytest.raises(ValueError, match="trains nothing: leave out --do_eval"):
        run_qa(_config(qa_folders, tmp_path / "g", teacher_logits=str(tmp_path / "new.safetensors"), do_eval=True,
                       validation_file=str(SQUAD_V1), **only))  # fmt: skip
    with pytest.raises(ValueError, match="--distillation_alpha must be in"):
        run_qa(_config(qa_folders, tmp_path / "d", teacher_logits=str(cache), distillation_alpha=1.5))
