"""MLM pre-training (`blockbert_hf.train.pretraining`, `examples/run_mlm.py`): documents, DOC-SENTENCES packing,
masking, batch geometry, exact resume after an interruption, a 2-process run matching the 1-process loss, the guards
(output folder, launch, NaN loss), checkpoint rotation, and `examples/evaluate_mlm.py`'s refusal of meaningless
scores."""

import gzip
import json
import os
import runpy
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from conftest import REPO_ROOT, SAMPLE_TEXT, tiny_config, two_process_launcher
from safetensors.torch import load_file
from transformers import AutoTokenizer, RobertaConfig, RobertaForMaskedLM

from blockbert_hf import BlockBertForMaskedLM, BlockBertModel
from blockbert_hf.conversion import conversion_summary, convert_checkpoint, save_converted
from blockbert_hf.saving import save_atomically
from blockbert_hf.tokenization import match_tokenizer_to_config
from blockbert_hf.train.pretraining import (
    MaskedLMLoss,
    MaskingCollator,
    PretrainingArguments,
    batch_geometry,
    evaluate_saved_model,
    list_checkpoints,
    pack_documents,
    read_documents,
    run_pretraining,
    split_documents,
    tokenize_and_pack,
)
from blockbert_hf.train.pretraining import trainer as pretraining_trainer
from blockbert_hf.train.pretraining.model import config_from_checkpoint
from blockbert_hf.train.runs import NonFiniteLossError, OutputDirError, read_metrics


RUN_ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _tiny_args(output_dir, **overrides) -> PretrainingArguments:
    """2 layers, hidden 32, N = 64, n = 2: 8 sequences per step as 2 micro-batches of 4; 6 steps."""
    fields = dict(
        output_dir=str(output_dir),
        train_files=[str(SAMPLE_TEXT)],
        document_boundary="heading",
        validation_split_percentage=20,
        train_tokenizer_vocab_size=1000,
        max_seq_length=64,
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        num_blocks=2,
        heads_per_shift="3:1",
        tokens_per_batch=512,
        per_device_train_batch_size=4,
        max_train_steps=6,
        checkpointing_steps=3,
        logging_steps=1,
        eval_steps=3,
        learning_rate=1e-2,
        num_warmup_steps=1,
        report_to="none",
        max_eval_sequences=24,
    )
    fields.update(overrides)
    return PretrainingArguments(**fields)


def _losses(output_dir) -> list[tuple[tuple[int, str], float]]:
    """[((step, kind), value)] in the order of metrics.jsonl, kind "loss" or "eval_loss"."""
    return [
        ((record["step"], kind), record[kind])
        for record in read_metrics(output_dir / "metrics.jsonl")
        for kind in ("loss", "eval_loss")
        if kind in record
    ]


def _script_args(args: PretrainingArguments) -> list[str]:
    """The `examples/run_mlm.py` command line of `args` (options that differ from the defaults)."""
    defaults = PretrainingArguments(output_dir="unused")
    script_args = []
    for key, value in vars(args).items():
        if value is not None and (key == "output_dir" or value != getattr(defaults, key)):
            script_args += [f"--{key}"] + ([str(v) for v in value] if isinstance(value, list) else [str(value)])
    return script_args


# ---------------------------------------------------------------------------------------------------------------------
# Documents, packing, masking
# ---------------------------------------------------------------------------------------------------------------------


def test_document_boundaries(tmp_path):
    text = (
        " = First = \n\n Some text\nwrapped here .\n\n More .\n\n = = Section = = \n\n Tail .\n\n"
        " = Second = \n\n Other .\n"
    )
    assert list(split_documents(text.splitlines(), "file")) == [
        "= First =\nSome text wrapped here .\nMore .\n= = Section = =\nTail .\n= Second =\nOther ."
    ]
    assert list(split_documents(text.splitlines(), "heading")) == [
        "= First =\nSome text wrapped here .\nMore .\n= = Section = =\nTail .",
        "= Second =\nOther .",
    ]
    assert list(split_documents(text.splitlines(), "blank_line"))[:2] == ["= First =", "Some text wrapped here ."]
    with pytest.raises(ValueError, match="document_boundary"):
        list(split_documents([], "paragraph"))

    gz = tmp_path / "book.txt.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as handle:
        handle.write("Chapter 1\n\nIt was a dark\nnight.\n")
    records = tmp_path / "docs.jsonl"
    records.write_text(json.dumps({"text": "one"}) + "\n" + json.dumps({"text": "two\n\nparas"}) + "\n")
    assert read_documents([str(gz), str(records)], "file") == ["Chapter 1\nIt was a dark night.", "one", "two\nparas"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(ValueError, match="no field 'text'"):
        read_documents([str(bad)])
    with pytest.raises(FileNotFoundError):
        read_documents([str(tmp_path / "missing.txt")])


def test_packing_fills_to_n_and_never_crosses_documents(tokenizer):
    documents = read_documents([str(SAMPLE_TEXT)], "heading")
    assert len(documents) == 7  # the sample's 7 articles
    packed = tokenize_and_pack(documents, tokenizer, seq_len=64)
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    by_document = {}
    for row in packed:
        ids = row["input_ids"]
        assert ids[0] == bos and ids[-1] == eos and len(ids) <= 64
        by_document.setdefault(row["document"], []).append(ids)
    assert sorted(by_document) == list(range(7))
    for index, sequences in by_document.items():
        # Every sequence but a document's last is full; together they are exactly the document's tokens, in order.
        assert all(len(ids) == 64 for ids in sequences[:-1])
        content = [token for ids in sequences for token in ids[1:-1]]
        assert content == tokenizer(documents[index], add_special_tokens=False)["input_ids"]
    assert packed["sequence_id"] == list(range(len(packed)))

    small = pack_documents([[5] * 10, [6] * 3], seq_len=6, tokenizer=tokenizer)
    assert small["input_ids"] == [[bos, 5, 5, 5, 5, eos], [bos, 5, 5, 5, 5, eos], [bos, 5, 5, eos], [bos, 6, 6, 6, eos]]
    assert small["document"] == [0, 0, 0, 1]


def test_masking_rate_and_80_10_10(tokenizer):
    sequences = [
        {"input_ids": [0] + torch.randint(5, len(tokenizer), (62,)).tolist() + [2], "sequence_id": i}
        for i in range(300)
    ]
    batch = MaskingCollator(tokenizer, seed=0, epoch=0)(sequences)
    original = torch.tensor([s["input_ids"] for s in sequences])
    masked = batch["labels"] != -100
    assert not masked[:, 0].any() and not masked[:, -1].any()  # <s> and </s> are never masked
    rate = masked[:, 1:-1].float().mean().item()
    assert 0.14 < rate < 0.16, rate
    assert torch.equal(batch["labels"][masked], original[masked])
    replaced_by_mask = (batch["input_ids"][masked] == tokenizer.mask_token_id).float().mean().item()
    unchanged = (batch["input_ids"][masked] == original[masked]).float().mean().item()
    assert 0.77 < replaced_by_mask < 0.83 and 0.07 < unchanged < 0.13, (replaced_by_mask, unchanged)
    assert torch.equal(batch["input_ids"][~masked], original[~masked])


def test_masks_depend_only_on_seed_epoch_and_sequence(tokenizer):
    sequences = [
        {"input_ids": [0] + list(range(5, 5 + length)) + [2], "sequence_id": i}
        for i, length in enumerate([40, 62, 10, 55])
    ]
    collator = MaskingCollator(tokenizer, seed=3, epoch=1)
    together = collator(sequences)
    alone = collator([sequences[2]])  # other batch, other padding
    assert torch.equal(together["labels"][2, :12], alone["labels"][0])
    assert (together["labels"][2, 12:] == -100).all() and (together["attention_mask"][2, 12:] == 0).all()
    next_epoch = MaskingCollator(tokenizer, seed=3, epoch=2)
    assert not torch.equal(collator(sequences)["labels"], next_epoch(sequences)["labels"])


def test_batch_geometry():
    geometry = batch_geometry(131072, 512, num_processes=2, micro_batch=8)
    assert (geometry.sequences_per_step, geometry.accumulation_steps) == (256, 16)
    with pytest.raises(ValueError, match="not a multiple of max_seq_length"):
        batch_geometry(1000, 512, 1, 8)
    with pytest.raises(ValueError, match="cannot be split"):
        batch_geometry(512 * 6, 512, 1, 4)


# ---------------------------------------------------------------------------------------------------------------------
# Training runs
# ---------------------------------------------------------------------------------------------------------------------


def test_interrupted_run_resumes_exactly(tmp_path):
    """A run stopped after step 5 (its last checkpoint is step 3) and resumed gives the losses, evaluations and
    final weights of an uninterrupted run; dropout is on, so its RNG must be restored too."""
    reference = run_pretraining(_tiny_args(tmp_path / "reference", hidden_dropout_prob=0.1))
    assert reference["finished"] and reference["step"] == 6

    interrupted = _tiny_args(tmp_path / "resumed", hidden_dropout_prob=0.1)
    partial = run_pretraining(replace(interrupted, stop_after_step=5))
    assert not partial["finished"] and [path.name for path in list_checkpoints(interrupted.output_dir)] == ["step_3"]
    assert not (tmp_path / "resumed" / "final_model").exists()
    # What a kill leaves behind: a checkpoint half-written into its staging folder, a torn last metrics line.
    checkpoints = tmp_path / "resumed" / "checkpoints"
    (checkpoints / ".step_6.tmp-x8k2").mkdir()
    (checkpoints / ".step_6.tmp-x8k2" / "model.safetensors").write_bytes(b"half")
    with (tmp_path / "resumed" / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 6, "loss": 4.1')
    run_pretraining(replace(interrupted, resume_from_checkpoint="latest"))
    assert [path.name for path in checkpoints.iterdir()] == ["step_3", "step_6"]

    expected, actual = _losses(tmp_path / "reference"), _losses(tmp_path / "resumed")
    assert [key for key, _ in expected] == [key for key, _ in actual] and len(expected) == 8  # each logged once
    for (key, value), (_, resumed_value) in zip(expected, actual):
        assert resumed_value == pytest.approx(value, abs=1e-6), key
    assert dict(expected)[(6, "loss")] < dict(expected)[(1, "loss")] - 0.1  # it did learn something
    weights = [load_file(tmp_path / run / "final_model" / "model.safetensors") for run in ("reference", "resumed")]
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, rtol=0, atol=1e-6)

    # The final folder is a usable model with its tokenizer (trained on the fly, model_max_length = N).
    model = BlockBertForMaskedLM.from_pretrained(tmp_path / "resumed" / "final_model")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "resumed" / "final_model")
    assert tokenizer.model_max_length == 64 and model.config.vocab_size == len(tokenizer) == 1000
    results = json.loads((tmp_path / "resumed" / "results.json").read_text())
    assert results["eval_perplexity"] == pytest.approx(reference["eval_perplexity"], rel=1e-6)


def test_runs_with_other_seeds_are_validated_on_the_same_masked_tokens(tmp_path):
    """The seed changes initialisation, data order and training masks, never the validation set or its masks, so two
    seeds of one setup (the noise level of a comparison) are scored on the same tokens."""
    results = [
        run_pretraining(_tiny_args(tmp_path / f"seed{seed}", seed=seed, max_train_steps=1, checkpointing_steps=0))
        for seed in (0, 1)
    ]
    assert results[0]["eval_masked_tokens"] == results[1]["eval_masked_tokens"] > 0
    assert results[0]["eval_perplexity"] != results[1]["eval_perplexity"]  # but the models differ


def test_a_saved_model_is_scored_as_the_run_scored_it(tmp_path):
    args = _tiny_args(
        tmp_path / "run",
        max_train_steps=2,
        checkpointing_steps=0,
        validation_split_percentage=0,
        validation_files=[str(SAMPLE_TEXT)],
    )
    results = run_pretraining(args)
    completed = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "examples" / "evaluate_mlm.py"),
            str(tmp_path / "run" / "final_model"),
            "--validation_files",
            str(SAMPLE_TEXT),
            "--document_boundary",
            "heading",
            "--max_eval_sequences",
            "24",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    scored = json.loads(completed.stdout.strip().splitlines()[-1])
    assert scored["eval_masked_tokens"] == results["eval_masked_tokens"]
    assert scored["eval_perplexity"] == pytest.approx(results["eval_perplexity"], rel=1e-5)
    with pytest.raises(ValueError, match="at least one validation file"):
        evaluate_saved_model(str(tmp_path / "run" / "final_model"), [])


def test_continues_from_a_converted_checkpoint_with_other_blocks(tmp_path, tokenizer):
    """RoBERTa -> BlockBERT n = 1 (conversion), then pre-training it as n = 2 [3, 1] with --model_name_or_path."""
    roberta = RobertaForMaskedLM(
        RobertaConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=66,
        )
    )
    roberta.save_pretrained(tmp_path / "roberta")
    tokenizer.save_pretrained(tmp_path / "roberta")
    converted = convert_checkpoint(str(tmp_path / "roberta"), num_blocks=1)
    save_converted(converted, tmp_path / "converted", conversion_summary(converted, None))
    args = _tiny_args(
        tmp_path / "run",
        model_name_or_path=str(tmp_path / "converted"),
        train_tokenizer_vocab_size=None,
        num_hidden_layers=None,
        hidden_size=None,
        num_attention_heads=None,
        max_train_steps=2,
        checkpointing_steps=None,
        eval_steps=None,
    )
    results = run_pretraining(args)
    assert results["finished"] and results["model"]["num_blocks"] == 2 and results["model"]["block_size"] == 32
    assert results["model"]["heads_per_shift"] == [3, 1] and results["parameters"] == converted.model.num_parameters()
    # A new n without a head split gets the default one ([3, 1] for 4 heads, n = 2).
    default_split = run_pretraining(replace(args, output_dir=str(tmp_path / "default"), heads_per_shift=None))
    assert default_split["model"]["heads_per_shift"] == [3, 1]
    with pytest.raises(ValueError, match="has N = 64 but --max_seq_length is 128"):
        run_pretraining(replace(args, output_dir=str(tmp_path / "other"), max_seq_length=128, tokens_per_batch=1024))


def test_bad_run_options_give_clear_errors(tmp_path, tokenizer):
    with pytest.raises(ValueError, match="No tokenizer"):
        run_pretraining(_tiny_args(tmp_path / "a", train_tokenizer_vocab_size=None))
    with pytest.raises(ValueError, match="not a multiple"):
        run_pretraining(_tiny_args(tmp_path / "b", tokens_per_batch=500))
    with pytest.raises(ValueError, match="no complete checkpoint"):
        run_pretraining(_tiny_args(tmp_path / "c", resume_from_checkpoint="latest"))
    with pytest.raises(ValueError, match="either --train_files"):
        run_pretraining(_tiny_args(tmp_path / "d", train_files=None))


def test_two_processes_match_one_process(tmp_path):
    """Two gloo processes on the CPU with the same global batch give the 1-process losses."""
    args = dict(
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        checkpointing_steps=2,
        max_train_steps=4,
        eval_steps=2,
    )
    run_pretraining(_tiny_args(tmp_path / "one", **args))
    script_args = _script_args(_tiny_args(tmp_path / "two", **args))
    command = [
        *two_process_launcher(),
        str(REPO_ROOT / "examples" / "run_mlm.py"),
        *script_args,
    ]
    environment = {**RUN_ENV, "ACCELERATE_USE_CPU": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "two" / "results.json").read_text())["num_processes"] == 2
    # Both processes wrote their RNG state into the one atomic checkpoint folder; no staging folder is left.
    checkpoint = list_checkpoints(tmp_path / "two")[-1]
    assert {"random_states_0.pkl", "random_states_1.pkl", "trainer_state.json"} <= set(os.listdir(checkpoint))
    assert not [name for name in os.listdir(checkpoint.parent) if name.startswith(".")]
    expected, actual = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert [key for key, _ in expected] == [key for key, _ in actual] and len(expected) == 6
    for (key, value), (_, other) in zip(expected, actual):
        assert other == pytest.approx(value, abs=1e-4), key
    assert dict(expected)[(4, "loss")] < dict(expected)[(1, "loss")] - 0.1


# ---------------------------------------------------------------------------------------------------------------------
# Guards, checkpoint rotation, kills
# ---------------------------------------------------------------------------------------------------------------------


def test_save_total_limit_keeps_only_the_newest_checkpoints(tmp_path):
    run_pretraining(_tiny_args(tmp_path, max_train_steps=4, checkpointing_steps=1, eval_steps=None, save_total_limit=2))
    assert [path.name for path in list_checkpoints(tmp_path)] == ["step_3", "step_4"]


def test_an_output_folder_of_another_or_a_finished_run_is_refused_before_any_work(tmp_path, monkeypatch):
    """A fresh run with another tokenizer size in the folder of a run is refused (it would otherwise reuse that run's
    trained tokenizer/), as is a second run in a finished run's folder; --overwrite_output_dir starts over."""
    args = _tiny_args(tmp_path, max_train_steps=1, checkpointing_steps=None, eval_steps=None)
    run_pretraining(args)
    metrics = (tmp_path / "metrics.jsonl").read_text()
    with monkeypatch.context() as patched:
        patched.setattr(pretraining_trainer, "load_training_data", lambda args: pytest.fail("work started"))
        with pytest.raises(OutputDirError, match="--train_tokenizer_vocab_size 1000 there, 600 now"):
            run_pretraining(replace(args, train_tokenizer_vocab_size=600))
        with pytest.raises(OutputDirError, match=r"holds a finished run \(final_model, results.json\)"):
            run_pretraining(args)
    assert (tmp_path / "metrics.jsonl").read_text() == metrics
    run_pretraining(replace(args, train_tokenizer_vocab_size=600, overwrite_output_dir=True))
    assert len(AutoTokenizer.from_pretrained(tmp_path / "final_model")) == 600


def test_resume_refuses_changed_model_flags_or_learning_rate(tmp_path):
    args = _tiny_args(tmp_path, max_train_steps=4, checkpointing_steps=2, eval_steps=None, stop_after_step=2)
    run_pretraining(args)
    for changed in ({"learning_rate": 5e-3}, {"attention_pattern": "full"}, {"hidden_dropout_prob": 0.2}):
        name = next(iter(changed))
        with pytest.raises(OutputDirError, match=f"Cannot resume: .*--{name} "):
            run_pretraining(replace(args, resume=True, stop_after_step=None, **changed))
    with pytest.raises(OutputDirError, match="pass --resume to continue"):
        run_pretraining(replace(args, stop_after_step=None))
    # Logging is resume-safe; a checkpoint of another folder brings its run's trained tokenizer along.
    checkpoint = str(list_checkpoints(tmp_path)[-1])
    elsewhere = replace(args, output_dir=str(tmp_path / "b"), resume_from_checkpoint=checkpoint, logging_steps=2)
    results = run_pretraining(replace(elsewhere, stop_after_step=None))
    assert results["finished"] and results["step"] == 4 and (tmp_path / "b" / "tokenizer").is_dir()


class _Killed(Exception):
    """Stands for the process being killed."""


def test_a_run_killed_after_its_last_checkpoint_logs_nothing_twice_when_resumed(tmp_path, monkeypatch):
    args = _tiny_args(tmp_path, max_train_steps=2, checkpointing_steps=2, eval_steps=None)

    def killed(run):
        raise _Killed

    with monkeypatch.context() as patched:
        patched.setattr(pretraining_trainer, "save_final_model", killed)
        with pytest.raises(_Killed):  # after the final evaluation was logged, before the final model was saved
            run_pretraining(args)
    assert [key for key, _ in _losses(tmp_path)] == [(1, "loss"), (2, "loss"), (2, "eval_loss")]
    run_pretraining(replace(args, resume=True))
    assert [key for key, _ in _losses(tmp_path)] == [(1, "loss"), (2, "loss"), (2, "eval_loss")]


def test_a_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    calls = []
    original = MaskedLMLoss.__call__

    def turns_nan_at_step_3(self, model, batch, num_items_in_batch):
        calls.append(1)
        loss = original(self, model, batch, num_items_in_batch)
        return loss * float("nan") if len(calls) > 4 else loss  # 2 micro-batches per step

    monkeypatch.setattr(MaskedLMLoss, "__call__", turns_nan_at_step_3)
    with pytest.raises(NonFiniteLossError, match=r"loss is nan at step 3.*last good checkpoint is .*step_2"):
        run_pretraining(_tiny_args(tmp_path, max_train_steps=6, checkpointing_steps=2, eval_steps=None))
    assert [path.name for path in list_checkpoints(tmp_path)] == ["step_2"]
    assert not (tmp_path / "final_model").exists()
    weights = load_file(list_checkpoints(tmp_path)[0] / "model.safetensors")
    assert all(torch.isfinite(tensor).all() for tensor in weights.values())


def test_run_mlm_refuses_a_multi_process_launch_that_accelerate_runs_as_one_process(tmp_path):
    """Each process would otherwise run the whole job alone, all writing into one output folder."""
    args = _tiny_args(tmp_path / "out", max_train_steps=1, checkpointing_steps=None, eval_steps=None)
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "run_mlm.py"), *_script_args(args)],
        capture_output=True,
        text=True,
        env={**RUN_ENV, "WORLD_SIZE": "2"},
        timeout=300,
    )
    assert result.returncode != 0 and "set ACCELERATE_USE_CPU=1" in result.stderr
    assert not (tmp_path / "out").exists()


def _evaluate_mlm(monkeypatch, model_folder) -> int:
    argv = ["evaluate_mlm.py", str(model_folder), "--validation_files", str(SAMPLE_TEXT), "--max_eval_sequences", "4"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(REPO_ROOT / "examples" / "evaluate_mlm.py"), run_name="__main__")
    return exit_info.value.code


def test_evaluate_mlm_fails_on_a_random_mlm_head_or_a_nan_perplexity(tmp_path, tokenizer, monkeypatch, capsys):
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    # A sentence encoder converted without its MLM head: the head would be randomly initialised.
    save_atomically(tmp_path / "encoder", BlockBertModel(config).save_pretrained, tokenizer.save_pretrained)
    assert _evaluate_mlm(monkeypatch, tmp_path / "encoder") == 1
    assert "does not hold its MLM head: lm_head." in capsys.readouterr().err

    broken = BlockBertForMaskedLM(config)
    with torch.no_grad():
        broken.lm_head.dense.weight[0, 0] = float("nan")
    save_atomically(tmp_path / "nan", broken.save_pretrained, tokenizer.save_pretrained)
    assert _evaluate_mlm(monkeypatch, tmp_path / "nan") == 1
    output = capsys.readouterr()
    assert "validation loss of" in output.err and " is nan " in output.err
    assert json.loads(output.out.strip().splitlines()[-1])["eval_masked_tokens"] > 0


# ---------------------------------------------------------------------------------------------------------------------
# Adapting a converted checkpoint: a head on the frozen encoder, frozen word embeddings, other blocks and N
# ---------------------------------------------------------------------------------------------------------------------


def _checkpoint(folder, tokenizer, **config_overrides):
    """A tiny BlockBertForMaskedLM at N = 64 (full attention by default), saved with its tokenizer."""
    config = tiny_config(
        vocab_size=len(tokenizer), **{"attention_pattern": "full", "num_blocks": 1, **config_overrides}
    )
    match_tokenizer_to_config(tokenizer, config)
    save_atomically(folder, BlockBertForMaskedLM(config).save_pretrained, tokenizer.save_pretrained)
    return load_file(folder / "model.safetensors")


def _adapt_args(output_dir, model, **overrides) -> PretrainingArguments:
    fields = dict(
        model_name_or_path=str(model),
        train_tokenizer_vocab_size=None,
        num_hidden_layers=None,
        hidden_size=None,
        num_attention_heads=None,
        num_blocks=None,
        heads_per_shift=None,
        max_train_steps=3,
        checkpointing_steps=None,
        eval_steps=None,
    )
    return _tiny_args(output_dir, **{**fields, **overrides})


def _changed(before: dict, after: dict) -> set[str]:
    return {name for name, tensor in before.items() if name in after and not torch.equal(after[name], tensor)}


def test_a_head_trained_alone_leaves_the_encoder_as_it_was(tmp_path, tokenizer):
    start = _checkpoint(tmp_path / "start", tokenizer)
    results = run_pretraining(_adapt_args(tmp_path / "run", tmp_path / "start", train_only_mlm_head=True))
    final = load_file(tmp_path / "run" / "final_model" / "model.safetensors")
    head = {"lm_head.dense.weight", "lm_head.dense.bias", "lm_head.layer_norm.weight", "lm_head.layer_norm.bias"}
    assert _changed(start, final) == head | {"lm_head.bias"}  # the decoder weight is the frozen word embeddings
    assert results["trained_parameters"].startswith("the MLM head only")
    assert results["trainable_parameters"] == 32 * 32 + 32 + 2 * 32 + len(tokenizer)
    card = (tmp_path / "run" / "final_model" / "README.md").read_text()
    assert "trained_parameters: the MLM head only (dense layer, layer norm, output bias); the encoder frozen" in card


def test_frozen_word_embeddings_stay_while_the_encoder_trains(tmp_path, tokenizer):
    start = _checkpoint(tmp_path / "start", tokenizer)
    results = run_pretraining(_adapt_args(tmp_path / "run", tmp_path / "start", freeze_word_embeddings=True))
    final = load_file(tmp_path / "run" / "final_model" / "model.safetensors")
    changed = _changed(start, final)
    assert "roberta.embeddings.word_embeddings.weight" not in changed
    assert {"roberta.encoder.layer.0.attention.self.query.weight", "lm_head.dense.weight"} <= changed
    assert "roberta.embeddings.position_embeddings.weight" in changed
    assert (
        results["trained_parameters"] == "every parameter but the word embeddings and the decoder weight tied to them"
    )
    everything = run_pretraining(_adapt_args(tmp_path / "all", tmp_path / "start"))
    assert everything["trained_parameters"] == "every parameter"
    assert "roberta.embeddings.word_embeddings.weight" in _changed(
        start, load_file(tmp_path / "all" / "final_model" / "model.safetensors")
    )


def test_a_pattern_continues_from_the_reference_head_at_its_own_n(tmp_path, tokenizer):
    """The reference (full attention, N = 64) goes on as n = 2 blocks of 64 with positions restarting in each block:
    N = 128 from a 64-position checkpoint, with the reference's trained head and its evaluation before the first
    step."""
    _checkpoint(tmp_path / "start", tokenizer)
    run_pretraining(_adapt_args(tmp_path / "reference", tmp_path / "start", train_only_mlm_head=True))
    reference = tmp_path / "reference" / "final_model"
    pattern = dict(
        attention_pattern="blockwise",
        num_blocks=2,
        heads_per_shift="3:1",
        block_relative_positions=True,
        max_seq_length=128,
        tokens_per_batch=1024,
        eval_before_training=True,
    )
    # Its one step is the warmup's first, at learning rate 0: the head leaves the run as it came in.
    results = run_pretraining(_adapt_args(tmp_path / "n2", reference, max_train_steps=1, num_warmup_steps=1, **pattern))
    model = results["model"]
    assert (model["max_sequence_length"], model["num_blocks"], model["block_size"]) == (128, 2, 64)
    head = [load_file(folder / "model.safetensors") for folder in (reference, tmp_path / "n2" / "final_model")]
    assert torch.equal(head[0]["lm_head.dense.weight"], head[1]["lm_head.dense.weight"])
    assert [record["step"] for record in read_metrics(tmp_path / "n2" / "metrics.jsonl") if "eval_loss" in record] == [
        0,
        1,
    ]
    saved = BlockBertForMaskedLM.from_pretrained(tmp_path / "n2" / "final_model").config
    assert saved.block_relative_positions and saved.max_sequence_length == 128


def test_contradictory_adaptation_options_are_refused_before_any_work(tmp_path, tokenizer, monkeypatch):
    _checkpoint(tmp_path / "start", tokenizer)
    monkeypatch.setattr(pretraining_trainer, "load_training_data", lambda args: pytest.fail("work started"))
    for option in ("train_only_mlm_head", "freeze_word_embeddings"):
        with pytest.raises(ValueError, match=f"--{option} keeps weights of --model_name_or_path"):
            run_pretraining(_tiny_args(tmp_path / option, **{option: True}))
    # Two blocks of 64 with positions restarting in each give N = 128, not 64; the error says which options give it.
    with pytest.raises(
        ValueError,
        match=r"has N = 128 but --max_seq_length is 64 \(N is 2 blocks of 64, positions restarting in each\)",
    ):
        run_pretraining(
            _adapt_args(
                tmp_path / "a",
                tmp_path / "start",
                attention_pattern="blockwise",
                num_blocks=2,
                block_relative_positions=True,
            )
        )
    with pytest.raises(ValueError, match="--block_relative_positions --num_blocks 2 --attention_pattern blockwise"):
        run_pretraining(_adapt_args(tmp_path / "b", tmp_path / "start", max_seq_length=128, tokens_per_batch=1024))
    with pytest.raises(ValueError, match="--eval_before_training evaluates on held-out text"):
        run_pretraining(
            _adapt_args(tmp_path / "c", tmp_path / "start", eval_before_training=True, validation_split_percentage=0)
        )
    assert not any((tmp_path / name).exists() for name in ("a", "b", "c"))


def test_run_mlm_publishes_its_final_model_folder_with_activation_checkpointing(tmp_path, monkeypatch, hub):
    """`--push_to_hub` uploads final_model/ as saved (card, code and QA pipeline included) through the helper run_qa
    uses; a stand-in for the Hub records the upload (no network)."""
    enable = pretraining_trainer.enable_gradient_checkpointing
    checkpointed = []
    monkeypatch.setattr(
        pretraining_trainer,
        "enable_gradient_checkpointing",
        lambda model: enable(model) or checkpointed.append(model.is_activation_checkpointing),
    )
    args = _tiny_args(
        tmp_path / "tiny-mlm", max_train_steps=1, checkpointing_steps=0, push_to_hub=True, gradient_checkpointing=True
    )
    results = run_pretraining(args)
    assert checkpointed == [True] and results["hub_repo_id"] == "tiny-mlm"  # the output folder's name by default
    files = hub.uploaded("tiny-mlm")
    assert {
        "README.md", "config.json", "model.safetensors", "tokenizer.json", "modeling_blockbert.py",
        "pipeline_question_answering.py",
    } <= set(files)  # fmt: skip
    assert files == {path.name: path.read_bytes() for path in (tmp_path / "tiny-mlm" / "final_model").iterdir()}
    with pytest.raises(ValueError, match="--hub_model_id 'not a repo' is not a Hub repository id"):
        run_pretraining(_tiny_args(tmp_path / "other", push_to_hub=True, hub_model_id="not a repo"))
    assert not (tmp_path / "other").exists()


def test_a_given_block_size_equal_to_the_derived_one_is_kept_when_continuing(tmp_path):
    """--block_size equal to ceil(N / n) is the user's value, not a derived one read as unset on load."""
    tiny_config(num_blocks=1, heads_per_shift=None).save_pretrained(tmp_path / "checkpoint")
    args = _tiny_args(tmp_path / "run", model_name_or_path=str(tmp_path / "checkpoint"), block_size=32)
    config = config_from_checkpoint(args)
    assert config.block_size == 32
    config.save_pretrained(tmp_path / "continued")
    assert type(config).from_pretrained(tmp_path / "continued").block_size == 32
