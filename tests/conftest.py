import importlib.util
import json
import os
import socket
import sys
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: it reads this once

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from blockbert_benchmarks.measuring.machine import machine_description  # noqa: E402
from blockbert_hf import BlockBertConfig, BlockBertForQuestionAnswering  # noqa: E402
from blockbert_hf.saving import write_json_atomically  # noqa: E402
from blockbert_hf.tokenization import (  # noqa: E402
    match_tokenizer_to_config,
    read_text_lines,
    train_roberta_tokenizer,
)


REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_TEXT = REPO_ROOT / "data" / "samples" / "wikitext2_test_sample.txt"
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
# The code a saved folder carries (docs/publishing.md): the model's file and what it imports relatively (attention,
# config, the QA pipeline and its windows).
CARRIED_CODE_FILES = frozenset(
    {
        "attention_blockbert.py",
        "configuration_blockbert.py",
        "modeling_blockbert.py",
        "pipeline_question_answering.py",
        "question_answering_windows.py",
    }
)


def load_script(path):
    """A script of the repository (`path` relative to its root, e.g. `examples/run_qa.py`) imported as a module; its
    `if __name__ == "__main__"` part does not run."""
    path = REPO_ROOT / path
    spec = importlib.util.spec_from_file_location(f"script_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def two_process_launcher() -> list[str]:
    """`accelerate launch` starting two gloo processes on the CPU (run it with ACCELERATE_USE_CPU=1), on a free port.

    With accelerate 1.x, `accelerate launch --cpu --num_processes 2` starts ONE process unless MPI is configured;
    `--multi_gpu` with ACCELERATE_USE_CPU starts two through torchrun. A free port, not the default 29500, so that a
    process another run left behind cannot hold the rendezvous."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port),
    ]  # fmt: skip


def tiny_config(**overrides) -> BlockBertConfig:
    """A 2-layer, 4-head, hidden-32 BlockBERT with N = 64 (RoBERTa positions), n = 2, b = 32, heads [3, 1]."""
    fields = dict(
        vocab_size=120,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=66,
        num_blocks=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    fields.update(overrides)
    return BlockBertConfig(**fields)


def tiny_roberta_source(folder, tokenizer, **config_overrides):
    """A saved 2-layer RoBERTa encoder with its tokenizer (hidden 48, 12 heads, so that 10:2, 8:2:2 and 9:3 split it)
    at N = 512: a source model for the conversion and adaptation chains. `config_overrides` go to `RobertaConfig`."""
    from transformers import RobertaConfig, RobertaModel

    config = RobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=12,
        intermediate_size=96,
        max_position_embeddings=514,
        **config_overrides,
    )
    RobertaModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def planted_qa_model(tokenizer, markers, null_strength=0.0, **config_overrides):
    """A tiny BlockBERT QA model whose answer is set by its weights: every layer adds nothing to the residual stream
    (its output projections are zero), so each token's final state is its normalized word embedding. Dimension 0 is
    large only for the start marker `markers[0]`, dimension 1 only for the end marker `markers[1]`, and the QA head
    reads them as start and end logits. With `null_strength`, the CLS token gets both dimensions, so the null answer
    scores between filler spans and the planted span. `config_overrides` go to `tiny_config`."""
    config = tiny_config(vocab_size=len(tokenizer), **config_overrides)
    match_tokenizer_to_config(tokenizer, config)
    model = BlockBertForQuestionAnswering(config).eval()
    with torch.no_grad():
        for layer in model.roberta.encoder.layer:
            for dense in (layer.attention.output.dense, layer.output.dense):
                dense.weight.zero_()
                dense.bias.zero_()
        embeddings = model.roberta.embeddings
        embeddings.position_embeddings.weight.zero_()
        embeddings.token_type_embeddings.weight.zero_()
        words = embeddings.word_embeddings.weight
        words[:, :2] = 0.0
        words[markers[0], 0] = 10.0
        words[markers[1], 1] = 10.0
        words[tokenizer.cls_token_id, :2] = null_strength
        model.qa_outputs.weight.zero_()
        model.qa_outputs.bias.zero_()
        model.qa_outputs.weight[0, 0] = 1.0
        model.qa_outputs.weight[1, 1] = 1.0
    return model


def make_model(model_class, config, attn_implementation="sdpa"):
    """A model in eval mode that runs the given attention kernel."""
    model = model_class(config)
    model.set_attn_implementation(attn_implementation)
    return model.eval()


def random_batch(lengths, seq_len, vocab_size=120, pad_token_id=1, generator=None):
    """Right-padded input ids (no pad id inside the real tokens) and the matching attention mask."""
    input_ids = torch.full((len(lengths), seq_len), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(lengths), seq_len), dtype=torch.long)
    for row, length in enumerate(lengths):
        input_ids[row, :length] = torch.randint(3, vocab_size, (length,), generator=generator)
        attention_mask[row, :length] = 1
    return input_ids, attention_mask


@pytest.fixture(scope="session")
def tokenizer():
    """A RoBERTa-style byte-level BPE tokenizer trained on the bundled WikiText-2 sample (pad id 1, mask id 4)."""
    return train_roberta_tokenizer(read_text_lines(SAMPLE_TEXT), vocab_size=1000, model_max_length=64)


@pytest.fixture
def hub(monkeypatch):
    """A stand-in for the Hugging Face Hub that records what every publishing call uploads (`hub_standin.py`)."""
    from hub_standin import HubStandIn

    return HubStandIn().install(monkeypatch)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# `make test-durations` sets BLOCKBERT_TEST_DURATIONS=FILE:NAME: the session's counts and wall time are recorded under
# NAME in FILE (JSON), from which the README's stated durations are read.
_session = {"started": None, "machine": None}


def pytest_sessionstart(session):
    _session["started"] = time.perf_counter()
    _session["machine"] = machine_description()  # before any test changes torch's thread count


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    target = os.environ.get("BLOCKBERT_TEST_DURATIONS")
    if not target or _session["started"] is None:
        return
    path, _, name = target.rpartition(":")
    if not path or not name:
        raise pytest.UsageError(f"BLOCKBERT_TEST_DURATIONS={target!r}: expected FILE:NAME, e.g. durations.json:default")
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return  # interrupted or broken: no duration worth stating
    outcomes = ("passed", "failed", "xfailed", "skipped")
    counts = {outcome: len(terminalreporter.stats.get(outcome, [])) for outcome in outcomes}
    recorded = json.loads(Path(path).read_text()) if Path(path).is_file() else {}
    recorded[name] = {
        "markers": config.option.markexpr,
        "tests": counts["passed"] + counts["failed"] + counts["xfailed"],
        **counts,
        "seconds": round(time.perf_counter() - _session["started"], 1),
        "machine": _session["machine"],
    }
    write_json_atomically(path, recorded)
