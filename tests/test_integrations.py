"""What users combine BlockBERT with: `transformers.Trainer` on every head, PEFT LoRA on the attention projections, and
the built wheel (what it holds; installed in a clean virtual environment, a saved folder loading without it)."""

import copy
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import peft
import pytest
import torch
from conftest import REPO_ROOT, random_batch, tiny_config
from transformers import Trainer, TrainingArguments

from blockbert_hf import (
    BlockBertForMaskedLM,
    BlockBertForMultipleChoice,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
)


NUM_EXAMPLES, SEQ_LEN, NUM_CHOICES = 8, 40, 3
# What a saved folder needs to load with trust_remote_code and to serve the question-answering pipeline.
REMOTE_CODE_FILES = {"configuration_blockbert.py", "modeling_blockbert.py", "pipeline_question_answering.py"}
CONTEXT = "The battleship was launched in 1912 and served in both world wars. " * 6


def _examples(model_class) -> list[dict]:
    """A tiny in-memory dataset with the labels each head's loss takes; lengths vary, so rows carry padding."""
    lengths = [SEQ_LEN - 5 * (row % 4) for row in range(NUM_EXAMPLES)]
    if model_class is BlockBertForMultipleChoice:
        ids, mask = random_batch(lengths * NUM_CHOICES, SEQ_LEN)
        ids, mask = ids.view(NUM_CHOICES, NUM_EXAMPLES, SEQ_LEN), mask.view(NUM_CHOICES, NUM_EXAMPLES, SEQ_LEN)
        return [
            {"input_ids": ids[:, row], "attention_mask": mask[:, row], "labels": torch.tensor(row % NUM_CHOICES)}
            for row in range(NUM_EXAMPLES)
        ]
    ids, mask = random_batch(lengths, SEQ_LEN)
    examples = []
    for row, length in enumerate(lengths):
        example = {"input_ids": ids[row], "attention_mask": mask[row]}
        if model_class is BlockBertForMaskedLM:
            example["labels"] = torch.where(torch.rand(SEQ_LEN) < 0.3, ids[row], -100).masked_fill(mask[row] == 0, -100)
        elif model_class is BlockBertForTokenClassification:
            example["labels"] = (ids[row] % 3).masked_fill(mask[row] == 0, -100)
        elif model_class is BlockBertForQuestionAnswering:
            example["start_positions"] = torch.tensor(row % length)
            example["end_positions"] = torch.tensor(min(row % length + 2, length - 1))
        else:
            example["labels"] = torch.tensor(row % 2)
        examples.append(example)
    return examples


@pytest.mark.parametrize(
    "model_class",
    [
        BlockBertForMaskedLM,
        BlockBertForQuestionAnswering,
        BlockBertForSequenceClassification,
        BlockBertForTokenClassification,
        BlockBertForMultipleChoice,
    ],
)
def test_trainer_trains_every_head(model_class, tmp_path):
    model = model_class(tiny_config(num_labels=3 if model_class is BlockBertForTokenClassification else 2))
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        max_steps=3,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=_examples(model_class))
    trainer.train()

    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and torch.isfinite(torch.tensor(losses)).all(), losses
    unchanged = [name for name, parameter in model.named_parameters() if torch.equal(parameter, before[name])]
    # named_parameters lists tied tensors (MLM decoder and word embeddings) once: every one of them must have moved.
    assert not unchanged, f"{model_class.__name__}: parameters the Trainer did not update: {unchanged}"


# ---------------------------------------------------------------------------------------------------------------------
# PEFT LoRA
# ---------------------------------------------------------------------------------------------------------------------


def test_peft_lora_on_the_attention_projections(tmp_path):
    config = tiny_config()
    base = BlockBertForMaskedLM(config).eval()
    base_copy = copy.deepcopy(base)  # get_peft_model wraps `base` in place
    input_ids, attention_mask = random_batch([SEQ_LEN, 25], SEQ_LEN)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    with torch.no_grad():
        base_logits = base(input_ids, attention_mask=attention_mask).logits

    lora = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["query", "key", "value"])
    model = peft.get_peft_model(base, lora)
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    wrapped = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if hasattr(module, "lora_A")}
    assert wrapped == {"query", "key", "value"}
    assert len(trainable) == 2 * 3 * config.num_hidden_layers  # lora_A and lora_B of 3 projections per layer

    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(2):  # lora_B starts at zero: after two steps lora_A has had gradients too
        optimizer.zero_grad()
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        assert torch.isfinite(loss)
        loss.backward()
        with_gradient = {name for name, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
        assert with_gradient <= trainable
        optimizer.step()
    assert with_gradient == trainable

    model.eval()
    with torch.no_grad():
        adapted = model(input_ids=input_ids, attention_mask=attention_mask).logits
    assert (adapted - base_logits).abs().max() > 1e-4  # the adapters changed what the model computes

    model.save_pretrained(tmp_path / "adapter")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in (tmp_path / "adapter").iterdir()}
    reloaded = peft.PeftModel.from_pretrained(base_copy, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=input_ids, attention_mask=attention_mask).logits, adapted, rtol=0, atol=1e-6
        )

    merged = model.merge_and_unload()
    assert type(merged) is BlockBertForMaskedLM and not any("lora_" in name for name, _ in merged.named_parameters())
    with torch.no_grad():
        merged_logits = merged(input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(merged_logits, adapted, rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# The wheel
# ---------------------------------------------------------------------------------------------------------------------


def _run(command, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("timeout", 300)
    completed = subprocess.run([str(part) for part in command], capture_output=True, text=True, **kwargs)
    assert completed.returncode == 0, f"{command}:\n{completed.stdout[-2000:]}\n{completed.stderr[-4000:]}"
    return completed


def _build_wheel(tmp_path: Path) -> Path:
    """Builds the wheel from a copy of the project: setuptools writes `build/` and `*.egg-info` into the tree it builds,
    and a stale `build/lib` from an earlier build would put modules removed since into the wheel."""
    project = tmp_path / "project"
    shutil.copytree(REPO_ROOT / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for path in REPO_ROOT.iterdir():  # setup.cfg, pyproject.toml and the files they name (README.md, LICENSE)
        if path.is_file():
            shutil.copy2(path, project / path.name)
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", tmp_path / "dist", project])
    (wheel,) = (tmp_path / "dist").glob("blockbert_hf-*.whl")
    return wheel


def test_wheel_holds_the_model_code_and_the_pipeline_not_the_benchmarks(tmp_path):
    names = zipfile.ZipFile(_build_wheel(tmp_path)).namelist()
    package = {name.split("/", 1)[1] for name in names if name.startswith("blockbert_hf/")}
    assert REMOTE_CODE_FILES | {"__init__.py"} <= package
    assert "benchmarking.py" not in package
    outside = [name for name in names if not name.startswith(("blockbert_hf/", "blockbert_hf-"))]
    assert not outside, f"the wheel holds files outside the package: {outside}"


@pytest.fixture
def fresh_venv(tmp_path):
    """A new virtual environment without system site-packages, removed afterwards (with torch it takes about 1 GB)."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv])
    yield venv
    shutil.rmtree(venv, ignore_errors=True)


@pytest.mark.slow
def test_wheel_installs_in_a_clean_environment_and_saved_folders_load_without_it(tmp_path, fresh_venv, tokenizer):
    """About 1.5 minutes: a fresh virtual environment gets torch (TORCH_INSTALL, by default this environment's torch
    version: the CPU wheel on this project's machines) and the wheel with its dependencies. The installed package
    saves a QA model; after `pip uninstall blockbert-hf` the folder still loads with `trust_remote_code=True`, as a
    model and as the question-answering pipeline it carries."""
    wheel = _build_wheel(tmp_path)
    venv, python = fresh_venv, fresh_venv / "bin" / "python"
    torch_install = os.environ.get("TORCH_INSTALL", f"torch=={torch.__version__.split('+')[0]}").split()
    _run([python, "-m", "pip", "install", "-q", "--no-compile", *torch_install, wheel], timeout=1200)
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    environment["HF_HUB_OFFLINE"] = "1"
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    folder = tmp_path / "qa-model"

    save = textwrap.dedent(f"""
        import json, sys
        import blockbert_hf
        from transformers import AutoTokenizer
        from blockbert_hf import BlockBertConfig, BlockBertForQuestionAnswering
        from blockbert_hf.saving import save_atomically
        from blockbert_hf.tokenization import match_tokenizer_to_config

        tokenizer = AutoTokenizer.from_pretrained({str(tmp_path / "tokenizer")!r})
        config = BlockBertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=64, max_position_embeddings=66, num_blocks=2)
        model = BlockBertForQuestionAnswering(config).eval()
        save_atomically({str(folder)!r}, model.save_pretrained,
                        match_tokenizer_to_config(tokenizer, config).save_pretrained)
        print(json.dumps({{"package": blockbert_hf.__file__, "prefix": sys.prefix}}))
    """)
    where = json.loads(_run([python, "-c", save], env=environment, cwd=tmp_path).stdout.splitlines()[-1])
    # The package imported is the installed wheel, not this checkout's src/.
    assert Path(where["prefix"]).resolve() == venv.resolve()
    assert Path(where["package"]).resolve().is_relative_to(venv.resolve())
    assert REMOTE_CODE_FILES <= {path.name for path in folder.iterdir()}

    _run([python, "-m", "pip", "uninstall", "-y", "-q", "blockbert-hf"], env=environment)
    load = textwrap.dedent(f"""
        import importlib.util, json
        from transformers import AutoModelForQuestionAnswering, pipeline

        assert importlib.util.find_spec("blockbert_hf") is None, "blockbert_hf is still importable"
        model = AutoModelForQuestionAnswering.from_pretrained({str(folder)!r}, trust_remote_code=True)
        qa = pipeline("question-answering", model={str(folder)!r}, tokenizer={str(folder)!r}, trust_remote_code=True)
        answer = qa(question="When was the battleship launched?", context={CONTEXT!r})
        print(json.dumps([type(model).__name__, type(qa).__name__, answer]))
    """)
    loaded = _run([python, "-c", load], env=environment, cwd=tmp_path).stdout.splitlines()[-1]
    model_class, pipeline_class, answer = json.loads(loaded)
    assert model_class == "BlockBertForQuestionAnswering" and pipeline_class == "ExtractiveQuestionAnsweringPipeline"
    assert set(answer) == {"score", "start", "end", "answer"} and 0 <= answer["score"] <= 1
    assert CONTEXT[answer["start"] : answer["end"]] == answer["answer"]
