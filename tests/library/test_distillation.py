"""Self-distillation (`blockbert_hf.train.distillation`, `examples/distill_blockbert.py`): the objective (normalised
per-layer MSE, cosine distance, the teacher's sliding windows), and runs on tiny converted checkpoints: the held-out
loss falls, a student that computes what its teacher computes has loss 0, a resumed run equals an uninterrupted one, and
bad options stop before any work."""

import json
from dataclasses import replace

import pytest
import torch
from conftest import SAMPLE_TEXT, load_script, tiny_roberta_source
from safetensors.torch import load_file

from blockbert_hf import BlockBertConfig, BlockBertModel
from blockbert_hf.conversion import conversion_summary, convert_checkpoint, save_converted
from blockbert_hf.train.distillation import (
    DistillationArguments,
    layer_losses,
    most_central_window,
    normalised_mse,
    parse_layer_weights,
    run_distillation,
    sliding_window_hidden_states,
    window_starts,
)
from blockbert_hf.train.runs import read_metrics


# --- the objective ---------------------------------------------------------------------------------------------------


def test_normalised_mse_counts_real_tokens_in_units_of_the_teachers_variance():
    generator = torch.Generator().manual_seed(0)
    teacher = torch.randn(2, 6, 8, generator=generator) * 30 + 5
    is_real = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    student = teacher.clone()
    student[~is_real] = 1e6  # padding is never compared
    assert normalised_mse(student, teacher, is_real) == 0
    mean = teacher[is_real].mean()
    torch.testing.assert_close(
        normalised_mse(torch.full_like(teacher, float(mean)), teacher, is_real), torch.tensor(1.0)
    )
    noisy = teacher + torch.randn(teacher.shape, generator=generator)
    scaled = normalised_mse(noisy * 100, teacher * 100, is_real)
    torch.testing.assert_close(scaled, normalised_mse(noisy, teacher, is_real))  # the layer's own scale


def test_identical_hidden_states_give_zero_losses():
    states = tuple(torch.randn(2, 5, 4) for _ in range(4))
    losses = layer_losses(states, states, torch.ones(2, 5, dtype=torch.bool))
    assert set(losses) == {"mse_layer_1", "mse_layer_2", "mse_layer_3", "cosine"}
    assert all(abs(float(value)) < 1e-6 for value in losses.values())


def test_each_token_takes_its_most_central_teacher_window():
    assert window_starts(1024, 512, 256) == [0, 256, 512]
    assert window_starts(1000, 512, 256) == [0, 256, 488]
    assert window_starts(300, 512, 256) == [0]
    owner = most_central_window(1024, [0, 256, 512], 512)
    assert owner[:384].eq(0).all() and owner[384:640].eq(1).all() and owner[640:].eq(2).all()


def test_sliding_window_targets_are_what_the_teacher_computes_on_each_window(tokenizer):
    config = BlockBertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=34, attention_pattern="full", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    teacher = BlockBertModel(config).eval()  # N = 32
    input_ids = torch.randint(3, len(tokenizer), (2, 64))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 50:] = 0
    input_ids[1, 50:] = tokenizer.pad_token_id
    states = sliding_window_hidden_states(teacher, input_ids, attention_mask, window=32, stride=16)
    with torch.no_grad():
        for start, tokens in ((0, slice(0, 24)), (16, slice(24, 40)), (32, slice(40, 64))):
            window = slice(start, start + 32)
            alone = teacher(input_ids[:, window], attention_mask=attention_mask[:, window], output_hidden_states=True)
            for layer, expected in zip(states, alone.hidden_states):
                local = slice(tokens.start - start, tokens.stop - start)
                real = attention_mask[:, tokens].bool()
                torch.testing.assert_close(layer[:, tokens][real], expected[:, local][real])
        short = sliding_window_hidden_states(teacher, input_ids[:, :32], attention_mask[:, :32], window=32, stride=16)
        direct = teacher(input_ids[:, :32], attention_mask=attention_mask[:, :32], output_hidden_states=True)
    for layer, expected in zip(short, direct.hidden_states):
        torch.testing.assert_close(layer, expected)


def test_layer_weights_are_all_last_or_one_per_layer():
    assert parse_layer_weights("all", 3) == [1.0, 1.0, 1.0]
    assert parse_layer_weights("last", 3) == [0.0, 0.0, 1.0]
    assert parse_layer_weights("0,0.5,1", 3) == [0.0, 0.5, 1.0]
    for bad in ("1,1", "a,b,c", "1,-1,1"):
        with pytest.raises(ValueError, match="--layer_weights .* 3 non-negative comma-separated weights"):
            parse_layer_weights(bad, 3)


# --- runs ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Tiny RoBERTa encoders (2 layers, hidden 48, 12 heads, 512 positions) converted to BlockBERT: `n1024` (n = 2,
    10:2, block-relative positions: N = 1024), and `same_as_teacher` (n = 2 blocks of 512 at N = 512 with every head
    at shift 0: every input lies in block 0, so it computes full attention)."""
    from blockbert_hf.tokenization import read_text_lines, train_roberta_tokenizer

    folder = tmp_path_factory.mktemp("distillation")
    tokenizer = train_roberta_tokenizer(read_text_lines(SAMPLE_TEXT), vocab_size=1000, model_max_length=512)
    torch.manual_seed(0)
    source = tiny_roberta_source(folder / "source", tokenizer, type_vocab_size=1)
    variants = {
        "n1024": dict(num_blocks=2, heads_per_shift="10:2", block_relative_positions=True),
        "same_as_teacher": dict(num_blocks=2, heads_per_shift=[12, 0], block_size=512),
        "full": dict(attention_pattern="full"),
    }
    for name, options in variants.items():
        checkpoint = convert_checkpoint(str(source), **options)
        save_converted(checkpoint, folder / name, conversion_summary(checkpoint, None))
    return folder


def tiny_args(converted, output_dir, model="n1024", **changes) -> DistillationArguments:
    fields = dict(
        output_dir=str(output_dir), model_name_or_path=str(converted / model), train_files=[str(SAMPLE_TEXT)],
        document_boundary="heading", validation_split_percentage=20, max_eval_sequences=4, tokens_per_batch=2048,
        per_device_train_batch_size=1, per_device_eval_batch_size=2, max_train_steps=6, learning_rate=1e-3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, logging_steps=1, report_to="none",
    )  # fmt: skip
    return DistillationArguments(**{**fields, **changes})


def test_distillation_lowers_the_held_out_loss_and_saves_a_model_with_its_card(converted, tmp_path):
    results = run_distillation(tiny_args(converted, tmp_path / "run", short_batch_every=3))
    assert results["finished"] and results["model"]["max_sequence_length"] == 1024 and results["teacher_window"] == 512
    evaluations = [record for record in read_metrics(tmp_path / "run" / "metrics.jsonl") if "eval_loss" in record]
    assert [record["step"] for record in evaluations] == [0, 6]
    first, last = evaluations
    assert last["eval_loss"] < first["eval_loss"] and last["eval_mse_layer_2"] < first["eval_mse_layer_2"]
    assert {"eval_mse_layer_1", "eval_mse_layer_2", "eval_cosine"} <= set(last)
    saved = tmp_path / "run" / "distilled_model"
    model = BlockBertModel.from_pretrained(saved)
    assert model.config.num_blocks == 2 and model.config.max_sequence_length == 1024
    source = BlockBertModel.from_pretrained(converted / "n1024")
    torch.testing.assert_close(model.embeddings.word_embeddings.weight, source.embeddings.word_embeddings.weight)
    card = (saved / "README.md").read_text()
    assert "distilled into its blockwise self" in card and "`n1024`" in card and "Held-out distillation loss" in card
    assert json.loads((tmp_path / "run" / "results.json").read_text())["eval_loss"] == last["eval_loss"]


def test_a_student_that_computes_what_its_teacher_computes_has_loss_zero(converted, tmp_path):
    args = tiny_args(converted, tmp_path / "run", model="same_as_teacher", max_train_steps=1, learning_rate=1e-9)
    run_distillation(args)
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert records[0]["step"] == 0 and records[0]["eval_loss"] < 1e-6
    assert records[1]["loss"] < 1e-6


def test_a_resumed_run_repeats_the_uninterrupted_one(converted, tmp_path):
    """Dropout on, stopped after step 4 with its last checkpoint at step 3, then resumed."""
    args = tiny_args(converted, tmp_path / "reference", hidden_dropout_prob=0.1, checkpointing_steps=3)
    args = replace(args, short_batch_every=2, eval_before_training=False)
    run_distillation(args)
    interrupted = replace(args, output_dir=str(tmp_path / "resumed"))
    assert not run_distillation(replace(interrupted, stop_after_step=4))["finished"]
    run_distillation(replace(interrupted, resume=True))
    losses = [
        [(record["step"], record.get("loss")) for record in read_metrics(tmp_path / run / "metrics.jsonl")]
        for run in ("reference", "resumed")
    ]
    assert losses[0] == losses[1] and len(losses[0]) == 7  # 6 steps and the final evaluation, each logged once
    weights = [load_file(tmp_path / run / "distilled_model" / "model.safetensors") for run in ("reference", "resumed")]
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, rtol=0, atol=0, msg=name)


def test_bad_options_stop_the_script_with_exit_status_2_before_any_work(converted, tmp_path, capsys):
    main = load_script("examples/distill_blockbert.py").main
    base = ["--output_dir", str(tmp_path / "run"), "--train_files", str(SAMPLE_TEXT), "--max_train_steps", "1"]
    cases = {
        "is a roberta checkpoint, not a BlockBERT one": ["--model_name_or_path", str(converted / "source")],
        "computes full attention": ["--model_name_or_path", str(converted / "full")],
        "--layer_weights '1,1,1'": ["--model_name_or_path", str(converted / "n1024"), "--layer_weights", "1,1,1"],
        "--learning_rate must be a number > 0": [
            "--model_name_or_path", str(converted / "n1024"), "--learning_rate", "0",
        ],
        "missing.txt does not exist": [
            "--model_name_or_path", str(converted / "n1024"), "--validation_files", str(tmp_path / "missing.txt"),
        ],
    }  # fmt: skip
    for message, arguments in cases.items():
        assert main([*base, *arguments]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
