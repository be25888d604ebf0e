"""Heads, RoBERTa/BERT equivalence at n = 1, saving/loading, AutoClasses, trust_remote_code, pipelines, Trainer."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import make_model, random_batch, tiny_config
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoTokenizer,
    BertConfig,
    BertModel,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaModel,
    Trainer,
    TrainingArguments,
    pipeline,
)

from blockbert_hf import (
    BlockBertForMaskedLM,
    BlockBertForMultipleChoice,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
    BlockBertModel,
)
from blockbert_hf.saving import save_atomically
from blockbert_hf.tokenization import match_tokenizer_to_config


ROBERTA_FIELDS = dict(
    vocab_size=120,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=66,
    type_vocab_size=1,
    layer_norm_eps=1e-5,
    pad_token_id=1,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize(
    "blockbert_class, roberta_class", [(BlockBertModel, RobertaModel), (BlockBertForMaskedLM, RobertaForMaskedLM)]
)
def test_one_block_reproduces_roberta(blockbert_class, roberta_class, attn_implementation):
    roberta = make_model(roberta_class, RobertaConfig(**ROBERTA_FIELDS), attn_implementation)
    blockbert = make_model(blockbert_class, tiny_config(num_blocks=1), attn_implementation)
    result = blockbert.load_state_dict(roberta.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    input_ids, attention_mask = random_batch([64, 50, 3], 64)
    with torch.no_grad():
        expected = roberta(input_ids, attention_mask=attention_mask)[0]
        actual = blockbert(input_ids, attention_mask=attention_mask)[0]
    real = attention_mask.bool()
    assert (actual[real] - expected[real]).abs().max() < 1e-5


def test_one_block_reproduces_bert_with_bert_positions():
    bert_fields = dict(
        ROBERTA_FIELDS, max_position_embeddings=64, type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0
    )
    bert = make_model(BertModel, BertConfig(**bert_fields))
    blockbert = make_model(
        BlockBertModel,
        tiny_config(
            num_blocks=1,
            position_embedding_style="bert",
            **{
                k: bert_fields[k]
                for k in ("max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id")
            },
        ),
    )
    result = blockbert.load_state_dict(bert.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    input_ids, attention_mask = random_batch([64, 30], 64, pad_token_id=0)
    token_type_ids = (torch.arange(64) >= 20).long().expand(2, 64)
    with torch.no_grad():
        expected = bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        actual = blockbert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    real = attention_mask.bool()
    assert (actual[0][real] - expected[0][real]).abs().max() < 1e-5
    assert (actual.pooler_output - expected.pooler_output).abs().max() < 1e-5


def test_heads_forward_and_losses():
    config = tiny_config(num_labels=3)
    input_ids, attention_mask = random_batch([40, 25], 40)
    mlm = BlockBertForMaskedLM(config)
    labels = torch.full_like(input_ids, -100)
    labels[:, 5] = input_ids[:, 5]
    out = mlm(input_ids, attention_mask=attention_mask, labels=labels)
    assert out.logits.shape == (2, 40, 120) and out.loss.ndim == 0

    qa = BlockBertForQuestionAnswering(tiny_config())
    out = qa(
        input_ids,
        attention_mask=attention_mask,
        start_positions=torch.tensor([3, 4]),
        end_positions=torch.tensor([5, 6]),
    )
    assert out.start_logits.shape == (2, 40) and torch.isfinite(out.loss)

    seq = BlockBertForSequenceClassification(config)
    out = seq(input_ids, attention_mask=attention_mask, labels=torch.tensor([0, 2]))
    assert out.logits.shape == (2, 3) and torch.isfinite(out.loss)

    tok = BlockBertForTokenClassification(config)
    out = tok(input_ids, attention_mask=attention_mask, labels=torch.randint(0, 3, (2, 40)))
    assert out.logits.shape == (2, 40, 3) and torch.isfinite(out.loss)

    mc = BlockBertForMultipleChoice(config)
    out = mc(
        input_ids[:, None].expand(2, 4, 40),
        attention_mask=attention_mask[:, None].expand(2, 4, 40),
        labels=torch.tensor([1, 3]),
    )
    assert out.logits.shape == (2, 4) and torch.isfinite(out.loss)
    out.loss.backward()


def test_save_load_round_trip_keeps_weights_tied(tmp_path):
    model = BlockBertForMaskedLM(tiny_config()).eval()
    assert model.lm_head.decoder.weight.data_ptr() == model.roberta.embeddings.word_embeddings.weight.data_ptr()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert (tmp_path / "modeling_blockbert.py").exists() and (tmp_path / "configuration_blockbert.py").exists()
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert set(auto_map) >= {
        "AutoConfig",
        "AutoModel",
        "AutoModelForMaskedLM",
        "AutoModelForQuestionAnswering",
        "AutoModelForSequenceClassification",
        "AutoModelForTokenClassification",
        "AutoModelForMultipleChoice",
    }
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is BlockBertForMaskedLM
    assert loaded.lm_head.decoder.weight.data_ptr() == loaded.roberta.embeddings.word_embeddings.weight.data_ptr()
    input_ids, attention_mask = random_batch([30, 12], 30)
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(input_ids, attention_mask=attention_mask).logits,
            model(input_ids, attention_mask=attention_mask).logits,
        )


def test_trust_remote_code_without_the_package(tmp_path, tokenizer):
    """A saved folder loads with every AutoModelFor... in a process where `import blockbert_hf` fails."""
    config = tiny_config(vocab_size=len(tokenizer))
    model = BlockBertForMaskedLM(config).eval()
    match_tokenizer_to_config(tokenizer, config)
    save_atomically(tmp_path / "model", model.save_pretrained, tokenizer.save_pretrained)
    input_ids, attention_mask = random_batch([20, 9], 20, vocab_size=len(tokenizer))
    with torch.no_grad():
        expected = model.roberta(input_ids, attention_mask=attention_mask).last_hidden_state
    torch.save({"input_ids": input_ids, "attention_mask": attention_mask, "expected": expected}, tmp_path / "io.pt")
    script = textwrap.dedent(f"""
        import sys
        sys.modules["blockbert_hf"] = None  # hide the installed package
        try:
            import blockbert_hf
        except ImportError:
            pass
        else:
            raise SystemExit("blockbert_hf is importable")
        import torch
        from transformers import (AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForMultipleChoice,
            AutoModelForQuestionAnswering, AutoModelForSequenceClassification, AutoModelForTokenClassification,
            AutoTokenizer)
        folder = {str(tmp_path / "model")!r}
        io = torch.load({str(tmp_path / "io.pt")!r})
        base = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(base).__name__ == "BlockBertModel", type(base)
        with torch.no_grad():
            out = base(io["input_ids"], attention_mask=io["attention_mask"]).last_hidden_state
        print("max_diff", (out - io["expected"]).abs().max().item())
        for auto in (AutoModelForMaskedLM, AutoModelForQuestionAnswering, AutoModelForSequenceClassification,
                     AutoModelForTokenClassification, AutoModelForMultipleChoice):
            print(type(auto.from_pretrained(folder, trust_remote_code=True)).__name__)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        print("model_max_length", tokenizer.model_max_length)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.split("\n")
    assert float(next(line for line in lines if line.startswith("max_diff")).split()[1]) < 1e-5
    for name in (
        "BlockBertForMaskedLM",
        "BlockBertForQuestionAnswering",
        "BlockBertForSequenceClassification",
        "BlockBertForTokenClassification",
        "BlockBertForMultipleChoice",
    ):
        assert name in lines
    assert "model_max_length 64" in lines, result.stdout


def test_auto_classes_and_tokenizer_resolve_for_a_saved_folder(tmp_path, tokenizer):
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    save_atomically(tmp_path, BlockBertForMaskedLM(config).save_pretrained, tokenizer.save_pretrained)
    assert type(AutoModel.from_pretrained(tmp_path)) is BlockBertModel
    assert type(AutoModelForQuestionAnswering.from_pretrained(tmp_path)) is BlockBertForQuestionAnswering
    loaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded_tokenizer.model_max_length == config.max_sequence_length == 64
    assert loaded_tokenizer("The battleship").input_ids == tokenizer("The battleship").input_ids


def test_fill_mask_pipeline(tokenizer):
    config = tiny_config(vocab_size=len(tokenizer))
    model = BlockBertForMaskedLM(config).eval()
    fill = pipeline("fill-mask", model=model, tokenizer=match_tokenizer_to_config(tokenizer, config))
    predictions = fill(f"The battleship was {tokenizer.mask_token} in 1912.", top_k=3)
    assert len(predictions) == 3 and all(0 <= p["score"] <= 1 for p in predictions)
    assert all(p["token"] < len(tokenizer) for p in predictions)


def test_trainer_runs_and_lowers_the_loss(tmp_path):
    config = tiny_config()
    model = BlockBertForSequenceClassification(config)
    input_ids, attention_mask = random_batch([40] * 16, 40)
    labels = (input_ids[:, 0] % 2).long()
    dataset = [dict(input_ids=i, attention_mask=m, labels=y) for i, m, y in zip(input_ids, attention_mask, labels)]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_train_epochs=15,
        learning_rate=3e-3,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=dataset)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < losses[0]


def test_gradient_checkpointing_gives_identical_gradients():
    config = tiny_config(num_blocks=3, heads_per_shift=[2, 1, 1])
    input_ids, attention_mask = random_batch([64, 40], 64)
    gradients, attention_calls = [], []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = BlockBertForMaskedLM(config).train()
        if checkpointing:
            model.activation_checkpointing_enable()
        calls = []
        model.roberta.encoder.layer[0].attention.register_forward_hook(lambda *args, calls=calls: calls.append(1))
        labels = input_ids.masked_fill(~attention_mask.bool(), -100)
        model(input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        gradients.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        attention_calls.append(len(calls))
    assert attention_calls == [1, 2]  # checkpointing recomputes the layer in the backward pass
    assert gradients[0].keys() == gradients[1].keys()
    for name in gradients[0]:
        torch.testing.assert_close(gradients[0][name], gradients[1][name], atol=1e-6, rtol=1e-5)


def test_resize_token_embeddings_keeps_the_decoder_tied():
    model = BlockBertForMaskedLM(tiny_config())
    model.resize_token_embeddings(130)
    assert model.config.vocab_size == 130
    assert model.lm_head.decoder.weight.shape == (130, 32)
    assert model.lm_head.decoder.weight.data_ptr() == model.roberta.embeddings.word_embeddings.weight.data_ptr()
    assert model(torch.randint(3, 130, (1, 10))).logits.shape == (1, 10, 130)


def test_atomic_save_leaves_nothing_behind_on_failure(tmp_path):
    def broken(folder):
        (folder / "half.bin").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        save_atomically(tmp_path / "out", broken)
    assert list(tmp_path.iterdir()) == []


def test_sparse_prediction_gives_the_same_loss_with_logits_only_for_labelled_positions():
    input_ids, attention_mask = random_batch([40, 25], 40)
    labels = torch.full_like(input_ids, -100)
    labels[0, [3, 9]] = input_ids[0, [3, 9]]
    labels[1, 4] = input_ids[1, 4]
    dense = BlockBertForMaskedLM(tiny_config()).eval()
    sparse = BlockBertForMaskedLM(tiny_config(sparse_prediction=True)).eval()
    sparse.load_state_dict(dense.state_dict())
    with torch.no_grad():
        dense_out = dense(input_ids, attention_mask=attention_mask, labels=labels)
        sparse_out = sparse(input_ids, attention_mask=attention_mask, labels=labels)
        unlabelled = sparse(input_ids, attention_mask=attention_mask)
    assert sparse_out.logits.shape == (3, 120) and unlabelled.logits.shape == (2, 40, 120)
    torch.testing.assert_close(sparse_out.loss, dense_out.loss)
    torch.testing.assert_close(sparse_out.logits, dense_out.logits[labels != -100])


def test_attention_weights_only_when_asked():
    model = make_model(BlockBertModel, tiny_config(num_blocks=2), "eager")
    input_ids, attention_mask = random_batch([40, 25], 40)
    with torch.no_grad():
        assert model(input_ids, attention_mask=attention_mask).attentions is None
        attentions = model(input_ids, attention_mask=attention_mask, output_attentions=True).attentions
    assert len(attentions) == 2 and attentions[0].shape == (2, 4, 2, 32, 32)


def test_atomic_save_gives_an_ordinary_folder(tmp_path):
    import os
    import stat

    umask = os.umask(0)
    os.umask(umask)
    folder = save_atomically(tmp_path / "out", lambda staging: (staging / "a.txt").write_text("x"))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
