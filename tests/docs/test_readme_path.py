"""The README's path from a checkpoint to a published question-answering model, run as a user runs it on a tiny model:
its convert and fine-tune commands as the README gives them (the source model and the run's size swapped for tiny
ones), publishing with the option it names to a stand-in for the Hub, and the published model loaded back through
`pipeline(..., trust_remote_code=True)` and, with the export command of docs/export.md, on ONNX Runtime."""

import json
import shlex

import pytest
from conftest import REPO_ROOT, SAMPLE_TEXT, load_script, tiny_roberta_source
from page_checks import fenced_blocks, page_commands, read_page
from transformers import AutoTokenizer, pipeline


HUB_ID = "someone/minilm-n1024-qa"
# What makes the README's fine-tuning tiny: appended, so these win over the README's values.
TINY_RUN = ["--max_train_samples", "12", "--max_eval_samples", "6", "--num_train_epochs", "1"]
TINY_RUN += ["--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4"]
TINY_PRETRAINING = ["--max_train_steps", "1", "--tokens_per_batch", "2048", "--per_device_train_batch_size", "2"]
TINY_PRETRAINING += ["--report_to", "none"]


def readme_command(script: str) -> list[str]:
    """The arguments of the README's command that runs `script` (one command per script on the page)."""
    commands = [command for command in page_commands(read_page("README.md")) if script in command.argv[:3]]
    assert len(commands) == 1, f"README.md should run {script} once, runs it {len(commands)} times"
    argv = commands[0].argv
    return argv[argv.index(script) + 1 :]


def page_command(page: str, script: str) -> list[str]:
    blocks = [block for block in fenced_blocks(read_page(page), page) if block.language == "bash"]
    for block in blocks:
        for line in block.code.splitlines():
            words = shlex.split(line, comments=True)
            if script in words:
                return words[words.index(script) + 1 :]
    raise AssertionError(f"{page} has no command that runs {script}")


def swapped(argv: list[str], replacements: dict[str, str]) -> list[str]:
    return [replacements.get(word, word) for word in argv]


@pytest.fixture(scope="module")
def published(tmp_path_factory, tokenizer):
    """Runs the README's convert and fine-tune commands, the latter with --push_to_hub (as the README says to
    publish), against the Hub stand-in; returns the stand-in and the folder the run saved."""
    from hub_standin import HubStandIn

    folder = tmp_path_factory.mktemp("readme_path")
    source = tiny_roberta_source(folder / "source", tokenizer, type_vocab_size=1)  # one token type, as RoBERTa
    names = {"$MINILM": str(source)}
    names.update({f"outputs/{name}": str(folder / name) for name in ("minilm-n1024", "minilm-n1024-qa")})
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO_ROOT)  # the README's data paths are from the clone's root
        hub = HubStandIn().install(patch)
        convert = load_script("examples/convert_roberta_to_blockbert.py").main
        assert convert(swapped(readme_command("examples/convert_roberta_to_blockbert.py"), names)) == 0
        fine_tune = swapped(readme_command("examples/run_qa.py"), names)
        publish = ["--push_to_hub", "--hub_model_id", HUB_ID]
        assert load_script("examples/run_qa.py").main([*fine_tune, *TINY_RUN, *publish]) == 0
    return hub, folder


def test_the_published_model_answers_through_the_pipeline(published, tmp_path):
    hub, _ = published
    downloaded = hub.download(HUB_ID, tmp_path / "download")
    assert {"README.md", "pipeline_question_answering.py", "tokenizer.json", "model.safetensors"} <= {
        path.name for path in downloaded.iterdir()
    }
    qa = pipeline("question-answering", model=str(downloaded), trust_remote_code=True)
    answer = qa(question="Who is Robert Boulter?", context=read_page("data/samples/wikitext2_test_sample.txt"))
    assert answer["answer"] and answer["end"] > answer["start"]


def test_the_pretraining_command_continues_the_converted_checkpoint_at_its_n(published, tmp_path):
    """The README's `run_mlm.py` command on the folder its converter made (N = 1024: two blocks of the source's 512
    positions), without --max_seq_length: the run takes the checkpoint's N."""
    _, folder = published
    names = {"OUT": str(tmp_path / "run"), "outputs/minilm-n1024": str(folder / "minilm-n1024")}
    names["books/*.txt.gz"] = str(SAMPLE_TEXT)
    pretrain = load_script("examples/run_mlm.py").main
    assert pretrain([*swapped(readme_command("examples/run_mlm.py"), names), *TINY_PRETRAINING]) == 0
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["finished"] and results["model"]["num_blocks"] == 2 and results["model"]["block_size"] == 512
    assert json.loads((tmp_path / "run" / "run_args.json").read_text())["max_seq_length"] == 1024


@pytest.mark.slow
def test_the_published_model_runs_on_onnx_runtime(published, tmp_path):
    from blockbert_hf.model.pipeline_question_answering import ExtractiveQuestionAnsweringPipeline
    from blockbert_hf.onnx.export import OnnxBlockBertForQuestionAnswering

    hub, _ = published
    downloaded = hub.download(HUB_ID, tmp_path / "download")
    exported = tmp_path / "onnx"
    export_args = swapped(page_command("docs/export.md", "examples/export_onnx.py"), {"MODEL_FOLDER": str(downloaded)})
    assert load_script("examples/export_onnx.py").main(swapped(export_args, {"OUT": str(exported)})) == 0
    model = OnnxBlockBertForQuestionAnswering.from_pretrained(exported)
    qa = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=AutoTokenizer.from_pretrained(exported))
    answer = qa(question="Who is Robert Boulter?", context=read_page("data/samples/wikitext2_test_sample.txt"))
    assert answer["answer"]
