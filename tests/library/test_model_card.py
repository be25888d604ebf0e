"""The model card a training run writes next to its weights (`blockbert_hf.train.model_card`): `examples/run_qa.py` and
`examples/run_mlm.py` on tiny models write a `README.md` the Hub can read, whose model-index holds the run's own
evaluation, which sets `base_model` only for a Hub id and names local files and folders by their base names only."""

import json
import re
from types import SimpleNamespace

import pytest
from conftest import REPO_ROOT, load_script, tiny_config
from huggingface_hub import EvalResult, ModelCard
from test_pretraining import _script_args, _tiny_args
from test_run_qa import SQUAD_V1, WINDOW_ARGS, tiny_qa_folder  # noqa: F401 (tiny_qa_folder: a fixture)

from blockbert_hf.train.model_card import CARD_FILE, is_hub_id, qa_model_card, write_model_card
from blockbert_hf.train.qa import QARunConfig
from blockbert_hf.train.runs import read_metrics


# A path of this machine in a card: "/" + a folder after a space, quote, backtick or bracket (URLs have "//" after ":").
ABSOLUTE_PATH = re.compile(r"(?:^|[\s`'\"(\[])/[\w.-]+/", re.MULTILINE)
ONE_PROCESS = SimpleNamespace(num_processes=1, mixed_precision="no")


def _assert_no_machine_path(text: str, *folders) -> None:
    assert not ABSOLUTE_PATH.search(text), ABSOLUTE_PATH.search(text)
    for folder in (REPO_ROOT, *folders):
        assert str(folder) not in text


def _assert_losses_in_table(text: str, output_dir) -> None:
    """The card's training-results table holds the losses of metrics.jsonl: a row per evaluation (training and
    validation loss) where the run evaluated, else a row per logged training loss (runs this small show them all)."""
    records = read_metrics(output_dir / "metrics.jsonl")
    losses = {record["step"]: record["loss"] for record in records if "loss" in record}
    eval_losses = {record["step"]: record["eval_loss"] for record in records if "eval_loss" in record}
    assert losses
    if eval_losses:
        expected = [f"| {step} | {losses[step]:.4f} | {loss:.4f} |" for step, loss in eval_losses.items()]
    else:
        expected = [f"| {step} | {loss:.4f} |" for step, loss in losses.items()]
    for row in expected:
        assert row in text


def test_run_qa_writes_a_card_with_its_own_evaluation(tiny_qa_folder, tmp_path):  # noqa: F811 (the fixture)
    output = tmp_path / "tiny-squad"
    load_script("examples/run_qa.py").main(
        [
            "--model_name_or_path", str(tiny_qa_folder), "--train_file", str(SQUAD_V1),
            "--validation_file", str(SQUAD_V1), "--do_train", "--do_eval", "--max_train_steps", "4",
            "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--logging_steps", "2",
            "--max_eval_samples", "20", "--output_dir", str(output), "--license", "apache-2.0", *WINDOW_ARGS,
        ]
    )  # fmt: skip
    card = ModelCard.load(output / "model" / CARD_FILE)
    data = card.data
    assert (data.pipeline_tag, data.license, data.library_name) == ("question-answering", "apache-2.0", "transformers")
    assert data.base_model is None and data.datasets is None  # a local folder and a local file, not Hub repositories
    assert {"blockbert", "blockbert-hf"} <= set(data.tags)
    metrics = json.loads((output / "eval_metrics.json").read_text())
    assert {result.metric_type: result.metric_value for result in data.eval_results} == {
        "exact_match": metrics["exact_match"],
        "f1": metrics["f1"],
    }
    for result in data.eval_results:
        assert (result.task_type, result.dataset_name) == ("question-answering", SQUAD_V1.name)
    assert f"starting from a local checkpoint (`{tiny_qa_folder.name}`)" in card.text
    assert "20 questions" in card.text and "trust_remote_code=True" in card.text
    _assert_losses_in_table(card.text, output)
    _assert_no_machine_path(str(card), tmp_path, tiny_qa_folder.parent)


def test_run_mlm_writes_a_card_with_its_own_evaluation(tmp_path):
    output = tmp_path / "tiny-mlm"
    args = _tiny_args(output, max_train_steps=2, checkpointing_steps=None, eval_steps=1)
    load_script("examples/run_mlm.py").main(_script_args(args))
    card = ModelCard.load(output / "final_model" / CARD_FILE)
    data = card.data
    assert (data.pipeline_tag, data.license, data.library_name) == ("fill-mask", "other", "transformers")
    assert data.base_model is None and data.datasets is None  # from scratch, on a local file
    results = json.loads((output / "results.json").read_text())
    assert {result.metric_type: result.metric_value for result in data.eval_results} == {
        "loss": results["eval_loss"],
        "perplexity": results["eval_perplexity"],
    }
    (dataset,) = {(result.task_type, result.dataset_name) for result in data.eval_results}
    assert dataset == ("fill-mask", "wikitext2_test_sample.txt")
    assert "20% of the training documents, held out" in card.text and "from random weights" in card.text
    _assert_losses_in_table(card.text, output)
    _assert_no_machine_path(str(card), tmp_path)
    # The card's own snippet loads the folder and fills a mask.
    (snippet,) = re.findall(r"```python\n(.*?)```", card.text, re.DOTALL)
    namespace = {}
    exec(snippet.replace(f"path/to/{output.name}", str(output / "final_model")), namespace)
    assert namespace["fill_mask"].model.config.model_type == "blockbert"


def _qa_card(model_name_or_path: str, output_dir, results=None, **changes):
    config = QARunConfig(model_name_or_path=model_name_or_path, output_dir=str(output_dir), do_train=True, **changes)
    model_config = tiny_config()
    summary = {"completed_steps": 3, "train_examples": 10, "max_seq_length": 64, "doc_stride": 16}
    log = [{"step": 1, "loss": 5.5}, {"step": 2, "loss": 5.0}]
    return qa_model_card(config, model_config, ONE_PROCESS, {**summary, **(results or {})}, log)


def test_a_hub_id_is_the_base_model_and_a_local_folder_is_not(tmp_path):
    card = _qa_card("FacebookAI/roberta-base", tmp_path / "run", dataset_name="squad", do_eval=True)
    assert card.data.base_model == "FacebookAI/roberta-base" and card.data.datasets == ["rajpurkar/squad"]
    assert "[FacebookAI/roberta-base](https://huggingface.co/FacebookAI/roberta-base)" in card.text
    local = tmp_path / "checkpoints" / "my-blockbert"
    local.mkdir(parents=True)
    assert is_hub_id("FacebookAI/roberta-base") and not is_hub_id(str(local))
    card = _qa_card(str(local), tmp_path / "run", train_file=str(SQUAD_V1))
    assert card.data.base_model is None and "local checkpoint (`my-blockbert`)" in card.text
    _assert_no_machine_path(str(card), tmp_path)


def test_a_card_has_a_model_index_only_when_the_run_evaluated(tmp_path):
    card = _qa_card("FacebookAI/roberta-base", tmp_path / "run", dataset_name="squad", do_eval=True)
    assert card.data.eval_results is None and "did not evaluate" in card.text
    evaluated = {"exact": 40.0, "f1": 45.5, "eval_examples": 40}  # squad_v2's metric names exact match "exact"
    card = _qa_card("FacebookAI/roberta-base", tmp_path / "run", evaluated, dataset_name="squad_v2", do_eval=True)
    (dataset,) = {(r.dataset_type, r.dataset_split) for r in card.data.eval_results}
    assert dataset == ("rajpurkar/squad_v2", "validation")
    assert {r.metric_type: r.metric_value for r in card.data.eval_results} == {"exact_match": 40.0, "f1": 45.5}


def test_a_card_the_hub_could_not_read_is_never_written(tmp_path):
    card = ModelCard("---\nlicense: mit\n---\ntext\n")
    # results without the model name a model-index needs: the YAML is written, the Hub could not read it
    card.data.eval_results = [
        EvalResult(task_type="fill-mask", dataset_type="x", dataset_name="x", metric_type="loss", metric_value=1.0)
    ]
    with pytest.raises(ValueError, match="model_index"):
        write_model_card(card, tmp_path)
    assert not (tmp_path / CARD_FILE).exists()
