"""The package as users install it: the wheel holds the model and its library and nothing of the experiments;
`import blockbert_hf` needs only `install_requires`; the training library names its extra when that is missing; the
wheel installed in a clean virtual environment saves a folder that loads without it."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import CARRIED_CODE_FILES, REPO_ROOT


CONTEXT = "The battleship was launched in 1912 and served in both world wars. " * 6
# Every module of the installed package: saving and tokenization helpers, what a saved folder carries (model/),
# conversion, export (onnx/) and the training library (train/).
WHEEL_MODULES = {
    f"blockbert_hf/{module}.py"
    for module in (
        "__init__",
        "saving",
        "tokenization",
        "command_line",
        "conversion/__init__",
        "conversion/errors",
        "conversion/report",
        "conversion/source",
        "conversion/verification",
        "conversion/weights",
        "model/__init__",
        "model/attention_blockbert",
        "model/configuration_blockbert",
        "model/modeling_blockbert",
        "model/pipeline_question_answering",
        "model/question_answering_windows",
        "onnx/__init__",
        "onnx/attention",
        "onnx/export",
        "onnx/int8_per_token",
        "onnx/length_switch",
        "onnx/quantization",
        "onnx/runtime",
        "train/__init__",
        "train/distillation/__init__",
        "train/distillation/arguments",
        "train/distillation/objective",
        "train/distillation/trainer",
        "train/hub",
        "train/model_card",
        "train/pretraining/__init__",
        "train/pretraining/arguments",
        "train/pretraining/data",
        "train/pretraining/documents",
        "train/pretraining/evaluation",
        "train/pretraining/model",
        "train/pretraining/trainer",
        "train/qa/__init__",
        "train/qa/__main__",
        "train/qa/arguments",
        "train/qa/data",
        "train/qa/evaluation",
        "train/qa/features",
        "train/qa/finetuning",
        "train/qa/objective",
        "train/qa/postprocessing",
        "train/qa/preparation",
        "train/qa/task_distillation",
        "train/qa/training",
        "train/runs",
    )
}
# Names of the experiments' modules (experiments/, benchmarks/), none of which may be in the wheel.
EXPERIMENT_WORDS = ("demo", "minilm", "measuring", "visualization", "comparison", "long_context", "benchmark", "cards")
# The training library's extra and what it brings.
TRAIN_MODULES = (
    "blockbert_hf.train.runs",
    "blockbert_hf.train.pretraining",
    "blockbert_hf.train.distillation",
    "blockbert_hf.train.qa",
)
TRAIN_PACKAGES = ("accelerate", "datasets", "evaluate")


def _python_without(packages, code: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter where `packages` cannot be imported (as if they were not installed)."""
    blocked = "import sys\n" + "".join(f"sys.modules[{package!r}] = None\n" for package in packages)
    return subprocess.run([sys.executable, "-c", blocked + code], capture_output=True, text=True, timeout=300)


def test_the_package_imports_and_loads_a_saved_folder_with_only_its_install_requires(tmp_path):
    # tqdm is not blocked: transformers itself needs it.
    optional = (*TRAIN_PACKAGES, "matplotlib", "onnx", "onnxruntime", "onnxscript", "peft", "tensorboard")
    code = textwrap.dedent(f"""
        import blockbert_hf, blockbert_hf.conversion, blockbert_hf.onnx.export, blockbert_hf.tokenization
        from blockbert_hf import BlockBertConfig, BlockBertForQuestionAnswering
        from transformers import AutoModelForQuestionAnswering

        config = BlockBertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=4,
                                 intermediate_size=32, max_position_embeddings=34, num_blocks=2)
        BlockBertForQuestionAnswering(config).save_pretrained({str(tmp_path / "model")!r})
        print(type(AutoModelForQuestionAnswering.from_pretrained({str(tmp_path / "model")!r})).__name__)
    """)
    completed = _python_without(optional, code)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.split()[-1] == "BlockBertForQuestionAnswering"


@pytest.mark.parametrize("module", TRAIN_MODULES)
@pytest.mark.parametrize("missing", TRAIN_PACKAGES)
def test_the_training_library_without_its_extra_names_the_extra(module, missing):
    completed = _python_without([missing], f"import {module}")
    assert completed.returncode != 0
    last_line = completed.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ImportError") and missing in last_line and "blockbert-hf[train]" in last_line, (
        last_line
    )


def test_the_train_extra_lists_what_the_training_library_needs():
    import configparser

    setup = configparser.ConfigParser()
    setup.read(REPO_ROOT / "setup.cfg")
    train = {line.split(">")[0].split("=")[0].strip() for line in setup["options.extras_require"]["train"].split()}
    assert set(TRAIN_PACKAGES) <= train


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


def test_the_wheel_holds_the_model_and_its_library_and_nothing_else(tmp_path):
    names = zipfile.ZipFile(_build_wheel(tmp_path)).namelist()
    modules = {name for name in names if name.endswith(".py")}
    assert modules == WHEEL_MODULES, f"missing: {WHEEL_MODULES - modules}, unexpected: {modules - WHEEL_MODULES}"
    assert not {name for name in names if any(word in name for word in EXPERIMENT_WORDS)}
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
    """Slow (it installs torch): a fresh virtual environment gets torch (TORCH_INSTALL, by default this environment's
    torch version: the CPU wheel on this project's machines) and the wheel with its dependencies. The installed package
    saves a QA model; after `pip uninstall blockbert-hf` the folder still loads with `trust_remote_code=True`, as a
    model and as the question-answering pipeline it carries, and the model loaded so saves again (transformers' own
    save) into a folder that keeps its other files and loads."""
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
    assert CARRIED_CODE_FILES <= {path.name for path in folder.iterdir()}

    _run([python, "-m", "pip", "uninstall", "-y", "-q", "blockbert-hf"], env=environment)
    again = tmp_path / "saved-again"
    again.mkdir()
    (again / "notes.txt").write_text("kept")
    load = textwrap.dedent(f"""
        import importlib.util, json
        from transformers import AutoModelForQuestionAnswering, pipeline

        assert importlib.util.find_spec("blockbert_hf") is None, "blockbert_hf is still importable"
        model = AutoModelForQuestionAnswering.from_pretrained({str(folder)!r}, trust_remote_code=True)
        qa = pipeline("question-answering", model={str(folder)!r}, tokenizer={str(folder)!r}, trust_remote_code=True)
        answer = qa(question="When was the battleship launched?", context={CONTEXT!r})
        model.save_pretrained({str(again)!r})
        reloaded = AutoModelForQuestionAnswering.from_pretrained({str(again)!r}, trust_remote_code=True)
        print(json.dumps([type(model).__name__, type(qa).__name__, answer, type(reloaded).__name__]))
    """)
    loaded = _run([python, "-c", load], env=environment, cwd=tmp_path).stdout.splitlines()[-1]
    model_class, pipeline_class, answer, reloaded_class = json.loads(loaded)
    assert model_class == reloaded_class == "BlockBertForQuestionAnswering"
    assert pipeline_class == "ExtractiveQuestionAnsweringPipeline"
    assert CARRIED_CODE_FILES | {"notes.txt", "config.json", "model.safetensors"} <= {p.name for p in again.iterdir()}
    assert set(answer) == {"score", "start", "end", "answer"} and 0 <= answer["score"] <= 1
    assert CONTEXT[answer["start"] : answer["end"]] == answer["answer"]
