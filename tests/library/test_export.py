"""Deployment: the traced attention layout, torch.export and ONNX programs valid for every length up to N, the
`examples/export_onnx.py` command, and torch.compile(fullgraph=True, dynamic=True) (docs/attention.md, "Tracing and
export"). The default suite runs one configuration per mechanism; the full grid is marked slow."""

import contextlib
import io
import json
import shutil

import pytest
import torch
from conftest import load_script, make_model, random_batch, tiny_config

from blockbert_hf import (
    BlockBertForMaskedLM,
    BlockBertForMultipleChoice,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
    BlockBertModel,
    modeling_blockbert,
)
from blockbert_hf import export as blockbert_export


EXPORTED_CLASSES = [BlockBertModel, BlockBertForMaskedLM, BlockBertForQuestionAnswering]
# N = 64 in every configuration; b = 64, 32, 22 and 32.
CONFIGS = {
    "n1": dict(num_blocks=1),
    "n2": dict(num_blocks=2),
    "n3": dict(num_blocks=3),
    "sparse_fixed": dict(attention_pattern="sparse_fixed", sparse_stride=16, sparse_expressivity=4),
}
SLOW_GRID = [pytest.param(name, cls, id=f"{name}-{cls.__name__}") for name in CONFIGS for cls in EXPORTED_CLASSES]


def grid_lengths(config) -> list[int]:
    b, max_len = config.effective_block_size, config.max_sequence_length
    return sorted({length for length in (1, b - 1, b, b + 1, max_len - 1, max_len) if 1 <= length <= max_len})


def grid_batches(lengths):
    """(name, input_ids, attention_mask) per length: one unpadded sequence, and a right-padded batch of three."""
    for length in lengths:
        yield f"L={length}", *random_batch([length], length)
        if length > 1:
            yield f"L={length} padded", *random_batch([length, (length + 1) // 2, 1], length)


def output_tensors(outputs) -> dict[str, torch.Tensor]:
    return {name: value for name, value in outputs.items() if isinstance(value, torch.Tensor)}


def max_differences(run, model, lengths) -> dict[str, float]:
    """Largest absolute difference between `run(input_ids, attention_mask)` (a dict of arrays) and eager per batch."""
    differences = {}
    for name, input_ids, attention_mask in grid_batches(lengths):
        with torch.no_grad():
            expected = output_tensors(model(input_ids=input_ids, attention_mask=attention_mask))
        actual = run(input_ids, attention_mask)
        assert set(actual) == set(expected)
        differences[name] = max(
            (torch.as_tensor(actual[key]) - value).abs().max().item() for key, value in expected.items()
        )
    return differences


# --- the traced layout ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_traced_attention_layout_agrees_with_eager(config_name, attn_implementation, monkeypatch):
    """The layout a traced program runs (n blocks of b tokens, masks always applied) computes what eager computes."""
    model = make_model(BlockBertModel, tiny_config(**CONFIGS[config_name]), attn_implementation)
    lengths = grid_lengths(model.config)
    batches = list(grid_batches(lengths))
    with torch.no_grad():
        expected = [model(input_ids=ids, attention_mask=mask).last_hidden_state for _, ids, mask in batches]
        monkeypatch.setattr(modeling_blockbert, "_is_traced", lambda: True)
        layout = modeling_blockbert.build_attention_layout(model.config, None, 1, 5, "cpu")
        if model.config.attention_pattern == "blockwise":
            config = model.config
            assert (layout.blocks_per_sequence, layout.block_len) == (config.num_blocks, config.effective_block_size)
        for (name, ids, mask), eager in zip(batches, expected):
            traced = model(input_ids=ids, attention_mask=mask).last_hidden_state
            torch.testing.assert_close(traced, eager, atol=1e-5, rtol=1e-5, msg=name)


def test_host_input_checks():
    config = tiny_config()
    blockbert_export.check_inputs(config, *random_batch([64, 3], 64))
    with pytest.raises(ValueError, match="L = 65 tokens"):
        blockbert_export.check_inputs(config, *random_batch([65], 65))
    with pytest.raises(ValueError, match=r"rows \[1\] have padding before a real token"):
        blockbert_export.check_inputs(config, torch.ones(2, 4, dtype=torch.long), torch.tensor([[1] * 4, [0, 1, 1, 1]]))
    with pytest.raises(ValueError, match="batch dimension"):
        blockbert_export.check_inputs(config, torch.ones(4, dtype=torch.long))


# --- torch.export -----------------------------------------------------------------------------------------------------


def check_exported_program(config_name, model_class, lengths=None):
    model = make_model(model_class, tiny_config(**CONFIGS[config_name]))
    program = blockbert_export.export_program(model).module()

    def run(input_ids, attention_mask):
        with torch.no_grad():
            return output_tensors(program(input_ids=input_ids, attention_mask=attention_mask))

    differences = max_differences(run, model, lengths or grid_lengths(model.config))
    assert max(differences.values()) < 1e-5, differences
    return differences


def test_exported_program_matches_eager_at_every_length():
    """One program with dynamic batch and length: 1, b, b + 1 and N, with and without padding (n = 2, b = 32)."""
    check_exported_program("n2", BlockBertForQuestionAnswering, lengths=[1, 32, 33, 64])


@pytest.mark.slow
@pytest.mark.parametrize("config_name, model_class", SLOW_GRID)
def test_exported_program_matches_eager_on_the_grid(config_name, model_class):
    print(config_name, model_class.__name__, check_exported_program(config_name, model_class))


# --- ONNX -------------------------------------------------------------------------------------------------------------


def onnx_runner(folder, config):
    pytest.importorskip("onnxruntime")
    runner = blockbert_export.OnnxBlockBert(folder, config)
    return lambda input_ids, attention_mask: runner(input_ids.numpy(), attention_mask.numpy())


@pytest.fixture(scope="module")
def saved_qa_model(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("qa_model")
    make_model(BlockBertForQuestionAnswering, tiny_config(vocab_size=len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def exported_qa_model(saved_qa_model, tmp_path_factory):
    """`examples/export_onnx.py` run once on a saved QA model (n = 2): its exit status, output and folder."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path_factory.mktemp("exported") / "onnx"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = load_script("examples/export_onnx.py").main([str(saved_qa_model), str(out)])
    return status, stdout.getvalue(), out


def test_export_command_writes_a_verified_onnx_model(exported_qa_model):
    status, printed, out = exported_qa_model
    assert status == 0
    report = json.loads(printed)
    assert report["max_difference"] < 1e-4
    assert sorted(int(length) for length in report["per_length"]) == [2, 31, 32, 33, 63, 64]
    assert {"model.onnx", "config.json", "tokenizer.json"} <= {path.name for path in out.iterdir()}


def test_onnx_runtime_matches_eager_at_every_length(exported_qa_model, saved_qa_model):
    out = exported_qa_model[2]
    model = BlockBertForQuestionAnswering.from_pretrained(saved_qa_model).eval()
    differences = max_differences(onnx_runner(out, model.config), model, [1, 32, 33, 64])
    assert max(differences.values()) < 1e-4, differences


def test_onnx_runtime_helper_checks_inputs_on_the_host(exported_qa_model):
    runner = blockbert_export.OnnxBlockBert(exported_qa_model[2])
    with pytest.raises(ValueError, match="L = 65 tokens"):
        runner(*(x.numpy() for x in random_batch([65], 65)))
    with pytest.raises(ValueError, match="padding before a real token"):
        runner(torch.ones(1, 4, dtype=torch.long).numpy(), [[0, 1, 1, 1]])


def test_export_command_writes_nothing_when_onnx_runtime_disagrees(
    exported_qa_model, tmp_path, tokenizer, monkeypatch, capsys
):
    """A wrong ONNX file (here: another model's) is caught on real text: exit 1, nothing written."""
    other = tmp_path / "other_model"
    make_model(BlockBertForQuestionAnswering, tiny_config(vocab_size=len(tokenizer))).save_pretrained(other)
    tokenizer.save_pretrained(other)

    def export_the_wrong_model(model, path):
        shutil.copyfile(exported_qa_model[2] / "model.onnx", path)
        return ["start_logits", "end_logits"]

    monkeypatch.setattr(blockbert_export, "export_onnx", export_the_wrong_model)
    out = tmp_path / "onnx"
    assert load_script("examples/export_onnx.py").main([str(other), str(out)]) == 1
    assert "differs from the eager model" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == [other]


@pytest.mark.slow
@pytest.mark.parametrize("config_name, model_class", SLOW_GRID)
def test_onnx_runtime_matches_eager_on_the_grid(config_name, model_class, tmp_path):
    pytest.importorskip("onnxscript")
    model = make_model(model_class, tiny_config(**CONFIGS[config_name]))
    blockbert_export.export_onnx(model, tmp_path / "model.onnx")
    differences = max_differences(onnx_runner(tmp_path, model.config), model, grid_lengths(model.config))
    print(config_name, model_class.__name__, differences)
    assert max(differences.values()) < 1e-4, differences


# --- torch.compile ----------------------------------------------------------------------------------------------------


ALL_HEADS = EXPORTED_CLASSES + [
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
    BlockBertForMultipleChoice,
]


@pytest.mark.parametrize("model_class", ALL_HEADS)
def test_compiles_to_one_graph_for_every_length(model_class):
    """fullgraph=True fails on any graph break; one compiled frame serves lengths below, at and above b."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    model = make_model(model_class, tiny_config())
    counter = CompileCounter()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=counter)
    for length in (5, 33, 64):
        input_ids, attention_mask = random_batch([length, (length + 1) // 2], length)
        if model_class is BlockBertForMultipleChoice:
            input_ids, attention_mask = input_ids[None], attention_mask[None]
        with torch.no_grad():
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
            expected, actual = model(**inputs), compiled(**inputs)
        torch.testing.assert_close(actual[0], expected[0], atol=1e-5, rtol=1e-5)
    assert counter.frame_count == 1
