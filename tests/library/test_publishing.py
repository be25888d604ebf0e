"""Publishing to the Hub: every route uploads one complete folder (weights, config, the model's code, the QA pipeline
file, the tokenizer, the model card) in one commit, against a stand-in for the Hub that records each upload
(`tests/hub_standin.py`, no network): `save_pretrained(push_to_hub=True)`, `push_to_hub()`, and transformers' Trainer.
The scripts' `--push_to_hub` is tested with the scripts (test_run_qa.py, test_pretraining.py)."""

import json
import logging

import pytest
import torch
from conftest import CARRIED_CODE_FILES, random_batch, tiny_config
from huggingface_hub import ModelCard
from transformers import AutoTokenizer, Trainer, TrainingArguments, pipeline

from blockbert_hf import BlockBertForQuestionAnswering, BlockBertForSequenceClassification
from blockbert_hf.tokenization import match_tokenizer_to_config


MODEL_FILES = {"config.json", "model.safetensors"} | CARRIED_CODE_FILES
TOKENIZER_FILES = {"tokenizer.json", "tokenizer_config.json"}
RUN_CARD = "---\nlicense: apache-2.0\nbase_model: someone/source-model\n---\n\n# A fine-tuned BlockBERT\n\nF1 51.2\n"


def tiny_qa_model(tokenizer) -> BlockBertForQuestionAnswering:
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    return BlockBertForQuestionAnswering(config).eval()


@pytest.fixture
def run_folder(tmp_path, tokenizer):
    """A model folder as a training run leaves it: model, tokenizer and the run's card."""
    folder = tmp_path / "tiny-blockbert-qa"
    tiny_qa_model(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "README.md").write_text(RUN_CARD)
    return folder


def test_save_pretrained_with_push_to_hub_uploads_the_whole_folder_and_keeps_its_card(run_folder, tokenizer, hub):
    """Saving again into a run's folder and pushing uploads the folder as it now is: the pipeline file that
    `config.custom_pipelines` names, the tokenizer saved there before, and the run's card, which stays as it was."""
    model = BlockBertForQuestionAnswering.from_pretrained(run_folder)
    model.save_pretrained(run_folder, push_to_hub=True, repo_id="someone/tiny-blockbert-qa", private=True)

    files = hub.uploaded("someone/tiny-blockbert-qa")
    assert set(files) >= MODEL_FILES | TOKENIZER_FILES | {"README.md"}
    assert json.loads(files["config.json"])["custom_pipelines"]["question-answering"]["impl"].startswith(
        "pipeline_question_answering."
    )
    assert files["README.md"] == RUN_CARD.encode() and (run_folder / "README.md").read_text() == RUN_CARD
    assert files == {path.name: path.read_bytes() for path in run_folder.iterdir()}  # the folder, nothing else
    assert hub.repos["someone/tiny-blockbert-qa"].private is True  # create_repo's options reach the Hub
    assert hub.commits[0].message == "Upload model"


def test_save_pretrained_with_push_to_hub_into_a_new_folder_gives_it_transformers_card(tmp_path, tokenizer, hub):
    """A folder without a card gets the one transformers gives: the repository's own card where it has one, else
    transformers' template; it is written into the folder too. The repository defaults to the folder's name."""
    model = tiny_qa_model(tokenizer)
    model.save_pretrained(tmp_path / "fresh", push_to_hub=True)
    files = hub.uploaded("fresh")
    assert set(files) == MODEL_FILES | {"README.md"}
    assert ModelCard(files["README.md"].decode()).data.library_name == "transformers"
    assert files["README.md"] == (tmp_path / "fresh" / "README.md").read_bytes()

    hub.repos["fresh"].files["README.md"] = b"---\nlicense: mit\n---\n\n# The card on the Hub\n"
    model.save_pretrained(tmp_path / "again", push_to_hub=True, repo_id="fresh", commit_message="Second")
    assert hub.commits[-1].message == "Second"
    assert "# The card on the Hub" in hub.commits[-1].files["README.md"].decode()


def test_push_to_hub_uploads_the_tokenizer_and_card_of_the_folder_the_model_came_from(run_folder, tmp_path, hub):
    model = BlockBertForQuestionAnswering.from_pretrained(run_folder)
    model.push_to_hub("someone/tiny-blockbert-qa", commit_message="Publish")
    files = hub.uploaded("someone/tiny-blockbert-qa")
    assert set(files) >= MODEL_FILES | TOKENIZER_FILES | {"README.md"}
    assert files["README.md"] == RUN_CARD.encode()
    assert files["model.safetensors"] == (run_folder / "model.safetensors").read_bytes()

    # What was published loads and answers as the folder does.
    downloaded = hub.download("someone/tiny-blockbert-qa", tmp_path / "downloaded")
    question = {"question": "Where was it built?", "context": "The battleship was built in Kiel in 1912."}
    published = pipeline("question-answering", model=str(downloaded), trust_remote_code=True)(**question)
    local = pipeline("question-answering", model=str(run_folder), trust_remote_code=True)(**question)
    assert (published["start"], published["end"]) == (local["start"], local["end"])
    assert published["score"] == pytest.approx(local["score"])
    assert AutoTokenizer.from_pretrained(downloaded)(question["context"]).input_ids == (
        AutoTokenizer.from_pretrained(run_folder)(question["context"]).input_ids
    )


def test_push_to_hub_of_a_model_without_a_folder_names_the_tokenizer_it_leaves_out(tokenizer, hub, caplog):
    """A model made in memory has no tokenizer to upload: the warning says how to push one, as in transformers."""
    model = tiny_qa_model(tokenizer)
    model.add_model_tags(["long-documents"])
    with caplog.at_level(logging.WARNING):
        model.push_to_hub("someone/in-memory", revision="v1")
    commit = hub.commits[0]
    assert set(commit.files) == MODEL_FILES | {"README.md"} and commit.revision == "v1"
    assert "long-documents" in ModelCard(commit.files["README.md"].decode()).data.tags
    assert "tokenizer.push_to_hub('someone/in-memory')" in caplog.text
    tokenizer.push_to_hub("someone/in-memory", revision="v1")  # the ecosystem's way, into the same branch
    assert TOKENIZER_FILES <= set(hub.commits[1].files)


def test_push_to_hub_keeps_the_weights_it_publishes_equal_to_the_model(run_folder, hub):
    """The model in memory is what is published, not the folder it was loaded from."""
    model = BlockBertForQuestionAnswering.from_pretrained(run_folder)
    with torch.no_grad():
        model.qa_outputs.bias.fill_(0.5)
    model.push_to_hub("someone/changed")
    downloaded = hub.uploaded("someone/changed")["model.safetensors"]
    assert downloaded != (run_folder / "model.safetensors").read_bytes()


def test_the_trainer_publishes_its_output_folder_with_the_model_code_and_pipeline(tokenizer, tmp_path, hub):
    """`TrainingArguments(push_to_hub=True)`: the Trainer saves the model through BlockBERT's `save_pretrained`, so
    its upload carries the code and the QA pipeline beside its own card and the tokenizer."""
    config = tiny_config(vocab_size=len(tokenizer))
    match_tokenizer_to_config(tokenizer, config)
    input_ids, attention_mask = random_batch([40, 30, 20, 40], 40, vocab_size=len(tokenizer))
    rows = [{"input_ids": i, "attention_mask": m, "labels": int(i[1]) % 2} for i, m in zip(input_ids, attention_mask)]
    args = TrainingArguments(
        output_dir=str(tmp_path / "trainer"), max_steps=1, per_device_train_batch_size=4, report_to=[],
        save_strategy="no", use_cpu=True, push_to_hub=True, hub_model_id="someone/trainer-blockbert",
    )  # fmt: skip
    trainer = Trainer(BlockBertForSequenceClassification(config), args, train_dataset=rows, processing_class=tokenizer)
    trainer.train()
    trainer.push_to_hub()
    files = hub.uploaded("someone/trainer-blockbert")
    assert set(files) >= MODEL_FILES | TOKENIZER_FILES | {"README.md"}
    assert ModelCard(files["README.md"].decode()).data.library_name == "transformers"
