"""Deployment: the traced attention layout, torch.export and ONNX programs valid for every length up to N, the
`examples/export_onnx.py` command, and torch.compile(fullgraph=True, dynamic=True) (docs/attention.md, "Tracing and
export"). The default suite runs one configuration per mechanism; the full grid is marked slow."""

import collections
import contextlib
import copy
import io
import json
import re
import shutil

import numpy as np
import pytest
import torch
from conftest import SAMPLE_TEXT, load_script, make_model, random_batch, tiny_config
from transformers import AutoTokenizer, BertTokenizer

from blockbert_hf import (
    BlockBertForMaskedLM,
    BlockBertForMultipleChoice,
    BlockBertForQuestionAnswering,
    BlockBertForSequenceClassification,
    BlockBertForTokenClassification,
    BlockBertModel,
    attention_blockbert,
    modeling_blockbert,
)
from blockbert_hf.model.pipeline_question_answering import ExtractiveQuestionAnsweringPipeline
from blockbert_hf.onnx import export as blockbert_export
from blockbert_hf.onnx.export import at_real_tokens
from blockbert_hf.onnx.quantization import Int8Recipe, cpu_has_vnni
from blockbert_hf.onnx.runtime import check_inputs
from blockbert_hf.tokenization import match_tokenizer_to_config, read_text_lines


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
            at_real_tokens((torch.as_tensor(actual[key]) - value).abs(), attention_mask).max().item()
            for key, value in expected.items()
        )
    return differences


def assert_span_logits_close(actual, expected, attention_mask, atol=1e-5, rtol=1e-5):
    """Start and end logits (tensors or arrays) equal at the real tokens (outputs at padding are not defined)."""
    for name in ("start_logits", "end_logits"):
        torch.testing.assert_close(
            torch.as_tensor(at_real_tokens(actual[name], attention_mask)),
            torch.as_tensor(at_real_tokens(expected[name], attention_mask)),
            atol=atol,
            rtol=rtol,
        )


# --- the traced layout ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_traced_attention_layout_agrees_with_eager(config_name, attn_implementation, monkeypatch):
    """The layout a traced program runs (eager's blocks, masks always applied, blocks padded whatever the padding)
    computes what eager computes."""
    model = make_model(BlockBertModel, tiny_config(**CONFIGS[config_name]), attn_implementation)
    lengths = grid_lengths(model.config)
    batches = list(grid_batches(lengths))
    with torch.no_grad():
        expected = [model(input_ids=ids, attention_mask=mask).last_hidden_state for _, ids, mask in batches]
        for module in (attention_blockbert, modeling_blockbert):  # the attention layout and the input checks
            monkeypatch.setattr(module, "is_traced", lambda: True)
        config = model.config
        if config.attention_pattern == "blockwise":
            layout = attention_blockbert.build_attention_layout(config, None, 1, 5, "cpu")
            assert (layout.blocks_per_sequence, layout.block_len, layout.pads_input) == (1, 5, False)
            block_size = config.effective_block_size
            if config.max_sequence_length > block_size:
                layout = attention_blockbert.build_attention_layout(config, None, 1, block_size * 2, "cpu")
                assert (layout.blocks_per_sequence, layout.block_len, layout.pads_input) == (2, block_size, True)
        for (name, ids, mask), eager in zip(batches, expected):
            traced = model(input_ids=ids, attention_mask=mask).last_hidden_state
            is_real = mask.bool()
            torch.testing.assert_close(traced[is_real], eager[is_real], atol=1e-5, rtol=1e-5, msg=name)


def test_host_input_checks():
    config = tiny_config()
    check_inputs(config, *random_batch([64, 3], 64))
    with pytest.raises(ValueError, match="L = 65 tokens"):
        check_inputs(config, *random_batch([65], 65))
    with pytest.raises(ValueError, match=r"rows \[1\] have padding before a real token"):
        check_inputs(config, torch.ones(2, 4, dtype=torch.long), torch.tensor([[1] * 4, [0, 1, 1, 1]]))
    with pytest.raises(ValueError, match="batch dimension"):
        check_inputs(config, torch.ones(4, dtype=torch.long))


@pytest.mark.parametrize(
    "input_ids, other, message",
    [
        (np.zeros((1, 0), np.int64), {}, "nothing to encode. Pass at least one token"),
        (np.zeros((0, 4), np.int64), {}, "batch_size = 0"),
        (np.array([[5, -1, 7]]), {}, r"from -1 to 7, outside this model's vocabulary \[0, 120\)"),
        (np.array([[5, 120]]), {}, r"from 5 to 120, outside"),
        (np.array([[5.7, 6.0]]), {}, "dtype float64; expected integers"),
        (np.array([[5, 6]]), {"attention_mask": [[1, 2]]}, "only 0 .padding. and 1"),
        (np.array([[5, 6]]), {"token_type_ids": [[0, 1]]}, r"values from 0 to 1; this model has 1 token type"),
        (np.array([[5, 6]]), {"token_type_ids": [[0]]}, r"token_type_ids has shape \(1, 1\)"),
        (np.array([[5, 6]]), {"token_type_ids": [[0.0, 0.0]]}, "token_type_ids has dtype float64"),
    ],
)
def test_host_input_checks_refuse_what_a_program_would_misread(input_ids, other, message):
    """A program fails on or misreads what the host refuses: L = 0, negative ids, float ids."""
    with pytest.raises(ValueError, match=message):
        check_inputs(tiny_config(), input_ids, **other)


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
    """Dynamic batch and length: every length from 1 to N, with and without padding (n = 2, b = 32)."""
    check_exported_program("n2", BlockBertForQuestionAnswering, lengths=range(1, 65))


@pytest.mark.parametrize(
    ("config_name", "ranges"),
    [("n2", [(1, 32), (33, 64)]), ("n3", [(1, 22), (23, 64)]), ("n1", [(1, 64)]), ("sparse_fixed", [(1, 64)])],
)
def test_one_program_per_side_of_the_block_size(config_name, ranges):
    """A blockwise model has one layout up to b tokens (one unpadded block) and one above (ceil(L / b) blocks): a
    program for each, each declaring its range of lengths; other patterns have one."""
    config = tiny_config(**CONFIGS[config_name])
    assert blockbert_export.length_ranges(config) == ranges
    exported = blockbert_export.export_program(make_model(BlockBertModel, config))
    assert list(exported.programs) == ranges
    for lengths, program in exported.programs.items():
        declared = {(int(bounds.lower), int(bounds.upper)) for bounds in program.range_constraints.values()}
        assert lengths in declared
    with pytest.raises(ValueError, match="L = 65 tokens"):
        exported.module()(*random_batch([65], 65))


@pytest.fixture(scope="module")
def bert_tokenizer():
    """A BERT-style WordPiece tokenizer (token type ids 0 for a question, 1 for its context) over the words of the
    bundled WikiText-2 sample and of the export's verification text."""
    texts = read_text_lines(SAMPLE_TEXT) + [blockbert_export.VERIFICATION_TEXT]
    words = collections.Counter(word for text in texts for word in re.findall(r"\w+|[^\w\s]", text.lower()))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [word for word, _ in words.most_common(400)]
    return BertTokenizer(vocab={word: index for index, word in enumerate(vocab)}, model_max_length=64)


def bert_style_model(model_class, vocab_size=120):
    """A tiny BERT-derived BlockBERT (BERT positions, two token types, N = 64) whose token types matter."""
    bert_style = dict(position_embedding_style="bert", type_vocab_size=2, max_position_embeddings=64, pad_token_id=0)
    config = tiny_config(vocab_size=vocab_size, **bert_style)
    model = make_model(model_class, config)
    with torch.no_grad():
        model.base_model.embeddings.token_type_embeddings.weight.normal_(0.0, 1.0)
    return model


def question_context_types(attention_mask, question_tokens=5):
    """Token types as a question/context pair has them: 0 on the question, 1 on the context, 0 on padding."""
    token_type_ids = torch.ones_like(attention_mask)
    token_type_ids[:, :question_tokens] = 0
    return token_type_ids * attention_mask


def test_exported_attention_follows_the_input_length():
    """Attention in an exported program costs what it costs eagerly: up to b tokens, one block of `L x L` scores;
    above, `b x b` scores for each of the `ceil(L / b)` blocks (never the `n` blocks of `N`)."""
    model = make_model(BlockBertModel, tiny_config(**CONFIGS["n3"]), "sdpa")  # b = 22, N = 64
    for (_, longest), program in blockbert_export.export_program(model).programs.items():
        nodes = list(program.graph.nodes)
        batch, length = next(node.meta["val"].shape for node in nodes if node.name == "input_ids")
        queries = [
            node.meta["val"].shape
            for node in nodes
            if node.target == torch.ops.aten.scaled_dot_product_attention.default
        ]
        assert queries
        for rows, _, query_len, _ in queries:
            if longest <= 22:
                assert (rows, query_len) == (batch, length)
            else:
                assert query_len == 22 and str(rows) == str(batch * ((length + 21) // 22))


def test_exported_program_takes_token_types():
    """A model with two token types is exported with `token_type_ids` as a third input, and answers like eager."""
    model = bert_style_model(BlockBertForQuestionAnswering)
    assert model.config.max_sequence_length == 64
    program = blockbert_export.export_program(model).module()
    for length in (1, 32, 33, 64):
        input_ids, attention_mask = random_batch([length, (length + 1) // 2], length, pad_token_id=0)
        token_type_ids = question_context_types(attention_mask)
        with torch.no_grad():
            expected = model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            without_types = model(input_ids=input_ids, attention_mask=attention_mask)
            actual = program(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        if length > 5:
            assert not torch.allclose(without_types.start_logits, expected.start_logits, atol=1e-3)
        assert_span_logits_close(actual, expected, attention_mask)


def test_models_with_one_token_type_keep_two_inputs():
    assert blockbert_export.input_names(tiny_config()) == ("input_ids", "attention_mask")
    exported = blockbert_export.export_program(make_model(BlockBertModel, tiny_config()))
    for program in exported.programs.values():
        inputs = [spec.arg.name for spec in program.graph_signature.input_specs if spec.kind.name == "USER_INPUT"]
        assert inputs == ["input_ids", "attention_mask"]


def test_export_program_leaves_the_model_in_the_mode_it_was_in():
    """The programs are made in eval mode (no dropout); the model given is handed back as it came, as torch.export
    leaves it."""
    model = BlockBertForQuestionAnswering(tiny_config(hidden_dropout_prob=0.1)).train()
    exported = blockbert_export.export_program(model)
    assert model.training and all(module.training for module in model.modules())
    input_ids, attention_mask = random_batch([40, 25], 40)
    outputs = exported.module()(input_ids=input_ids, attention_mask=attention_mask)
    model.eval()
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask)
    is_real = attention_mask.bool()
    torch.testing.assert_close(outputs["start_logits"][is_real], expected.start_logits[is_real])


def test_multiple_choice_is_refused_before_any_work():
    """A multiple-choice head takes (batch, num_choices, L) inputs: refused with a clear message, not a RuntimeError."""
    model = make_model(BlockBertForMultipleChoice, tiny_config())
    with pytest.raises(ValueError, match="BlockBertForMultipleChoice cannot be exported"):
        blockbert_export.export_program(model)
    with pytest.raises(ValueError, match="BlockBertForMultipleChoice cannot be exported"):
        blockbert_export.export_onnx(model, "unused.onnx")


@pytest.mark.slow
@pytest.mark.parametrize("config_name, model_class", SLOW_GRID)
def test_exported_program_matches_eager_on_the_grid(config_name, model_class):
    print(config_name, model_class.__name__, check_exported_program(config_name, model_class))


# --- ONNX -------------------------------------------------------------------------------------------------------------


def onnx_runner(folder, config):
    pytest.importorskip("onnxruntime")
    runner = blockbert_export.OnnxBlockBert(folder, config)
    return lambda input_ids, attention_mask: runner(input_ids.numpy(), attention_mask.numpy())


def run_export_command(argv):
    """`examples/export_onnx.py` with `argv`: its exit status and what it printed."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = load_script("examples/export_onnx.py").main([str(arg) for arg in argv])
    return status, stdout.getvalue()


@pytest.fixture(scope="module")
def saved_qa_model(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("qa_model")
    make_model(BlockBertForQuestionAnswering, tiny_config(vocab_size=len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def exported_qa_model(saved_qa_model, tmp_path_factory):
    """`examples/export_onnx.py --quantize` run once on a saved QA model (n = 2): its exit status, output and folder."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path_factory.mktemp("exported") / "onnx"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = load_script("examples/export_onnx.py").main([str(saved_qa_model), str(out), "--quantize"])
    return status, stdout.getvalue(), out


def test_export_command_writes_a_verified_onnx_model(exported_qa_model):
    status, printed, out = exported_qa_model
    assert status == 0
    report = json.loads(printed)
    assert report["max_difference"] < 1e-4
    assert sorted(int(length) for length in report["per_length"]) == [2, 31, 32, 33, 63, 64]
    assert {"model.onnx", "config.json", "tokenizer.json"} <= {path.name for path in out.iterdir()}


def test_quantize_writes_an_int8_model_with_its_recipe_difference_and_answer_agreement(exported_qa_model):
    """quantization.json records the recipe, the CPU's VNNI, the max difference per length, and the int8 model's answers
    to every verification question (over the text and over the text filling several windows) against the eager
    model's, with a warning exactly when some differ."""
    status, printed, out = exported_qa_model
    assert status == 0
    report = json.loads((out / blockbert_export.QUANTIZATION_REPORT).read_text())
    assert report["file"] == blockbert_export.INT8_ONNX_FILE
    assert report["recipe"] == Int8Recipe().resolved().to_dict()
    assert report["cpu_has_vnni"] == cpu_has_vnni()
    assert set(report["max_difference_per_length"]) == set(json.loads(printed)["per_length"])
    assert all(np.isfinite(value) for value in report["max_difference_per_length"].values())
    agreement = report["answer_agreement"]
    assert agreement["pairs"] == 2 * len(blockbert_export.VERIFICATION_QUESTIONS)
    assert agreement["same_answers"] + len(agreement["changed"]) == agreement["pairs"]
    assert (report["warning"] is None) == (not agreement["changed"])
    int8, fp32 = out / blockbert_export.INT8_ONNX_FILE, out / blockbert_export.ONNX_FILE
    assert int8.stat().st_size < fp32.stat().st_size


def test_the_export_warns_when_int8_changes_answers(saved_qa_model, tmp_path, monkeypatch, caplog):
    """An int8 model whose answers differ from the eager model's is reported (logged warning, `warning` and the
    changed answers in quantization.json), not only measured by its logit difference: here its start logits are
    reversed along the sequence, so that it picks other starts."""
    original_call = blockbert_export.OnnxBlockBert.__call__

    def call_with_int8_reversed(self, *args, **kwargs):
        outputs = original_call(self, *args, **kwargs)
        if self.path.name == blockbert_export.INT8_ONNX_FILE:
            outputs["start_logits"] = outputs["start_logits"][:, ::-1].copy()
        return outputs

    monkeypatch.setattr(blockbert_export.OnnxBlockBert, "__call__", call_with_int8_reversed)
    with caplog.at_level("WARNING", logger="blockbert_hf.onnx.export"):
        blockbert_export.export_onnx_folder(saved_qa_model, tmp_path / "onnx", quantize=True)
    report = json.loads((tmp_path / "onnx" / blockbert_export.QUANTIZATION_REPORT).read_text())
    changed = report["answer_agreement"]["changed"]
    assert changed and report["answer_agreement"]["same_answers"] < report["answer_agreement"]["pairs"]
    assert {"question", "fp32", "int8"} <= set(changed[0]) and changed[0]["fp32"] != changed[0]["int8"]
    assert f"changes {len(changed)} of" in report["warning"]
    assert report["warning"] in caplog.text


def int8_graphs(path):
    """The two graphs of a quantized model joined by length, each with its initializers as arrays."""
    import onnx
    from onnx import numpy_helper

    from blockbert_hf.onnx.length_switch import split_by_length

    short, long, _ = split_by_length(onnx.load(path))
    for model in (short, long):
        yield model.graph, {value.name: numpy_helper.to_array(value) for value in model.graph.initializer}


def assert_head_attention_and_embeddings_in_fp32(graph, initializers):
    """Attention's products of two activations, the QA head's projection ([hidden, 2]) and the embedding tables stay
    fp32."""
    float_products = [node for node in graph.node if node.op_type == "MatMul"]
    assert all(node.input[1] not in initializers for node in float_products[:-1])  # attention's products
    head = float_products[-1]  # fed by the last LayerNorm
    assert initializers[head.input[1]].shape == (32, 2) and initializers[head.input[1]].dtype == np.float32
    embeddings = [node for node in graph.node if node.op_type == "Gather" and node.input[0] in initializers]
    assert embeddings and all(initializers[node.input[0]].dtype == np.float32 for node in embeddings)


def test_the_int8_recipe_quantizes_weight_products_with_per_block_activations(exported_qa_model):
    """model_int8.onnx (the default recipe): in both graphs, the encoder's weight products as 8-bit MatMulNBits
    computing in int8 (activations quantized per token and block at run time); the rest in fp32."""
    from onnx import helper

    for graph, initializers in int8_graphs(exported_qa_model[2] / blockbert_export.INT8_ONNX_FILE):
        products = [node for node in graph.node if node.op_type == "MatMulNBits"]
        assert len(products) == 2 * 6  # 2 layers: query, key, value, attention output, 2 feed-forward
        for node in products:
            attributes = {attribute.name: helper.get_attribute_value(attribute) for attribute in node.attribute}
            assert (attributes["bits"], attributes["accuracy_level"], attributes["block_size"]) == (8, 4, 128)
        assert not any(node.op_type in ("MatMulInteger", "DynamicQuantizeLinear") for node in graph.node)
        assert_head_attention_and_embeddings_in_fp32(graph, initializers)


def test_the_per_tensor_recipe_quantizes_weights_per_channel(exported_qa_model, tmp_path):
    """`Int8Recipe(activations="per_tensor")`: ONNX Runtime's dynamic quantization of the weight products, one
    weight scale per output channel; the same parts kept in fp32."""
    for file_name in (blockbert_export.ONNX_FILE, "config.json"):
        shutil.copyfile(exported_qa_model[2] / file_name, tmp_path / file_name)
    applied = blockbert_export.quantize_int8(tmp_path, Int8Recipe(activations="per_tensor"), file_name="pt.onnx")
    assert applied.reduce_range is (cpu_has_vnni() is False)
    for graph, initializers in int8_graphs(tmp_path / "pt.onnx"):
        integer_products = [node for node in graph.node if node.op_type == "MatMulInteger"]
        assert len(integer_products) == 2 * 6
        for node in integer_products:
            assert initializers[node.input[3]].size > 1  # the weight's zero points: one per output channel
        assert_head_attention_and_embeddings_in_fp32(graph, initializers)


def test_the_per_token_recipe_calibrates_on_real_text_and_stays_close_to_fp32(exported_qa_model, tmp_path):
    """`Int8Recipe(activations="per_token")`: the weight products as uint8-by-int8 `MatMulInteger`s, one activation
    quantization per distinct input (a layer's query, key and value share one), smoothed from maxima measured on the
    folder's tokenizer and the verification text; the same parts kept in fp32; the logits near the fp32 model's."""
    folder = exported_qa_model[2]
    for path in folder.iterdir():
        if path.name != blockbert_export.INT8_ONNX_FILE:
            shutil.copyfile(path, tmp_path / path.name)
    applied = blockbert_export.quantize_int8(tmp_path, Int8Recipe(activations="per_token"), file_name="token.onnx")
    assert applied.smoothing == 0.5 and applied.reduce_range is (cpu_has_vnni() is False)
    for graph, initializers in int8_graphs(tmp_path / "token.onnx"):
        types = [node.op_type for node in graph.node]
        assert types.count("MatMulInteger") == 2 * 6 and types.count("QuantizeLinear") == 2 * 4
        smoothed = [node for node in graph.node if node.name.endswith("/smoothed")]
        assert len(smoothed) == 2 * 4
        assert_head_attention_and_embeddings_in_fp32(graph, initializers)
    fp32 = blockbert_export.OnnxBlockBert(folder, file_name=blockbert_export.ONNX_FILE)
    int8 = blockbert_export.OnnxBlockBert(tmp_path, file_name="token.onnx")
    batches = blockbert_export.calibration_batches(tmp_path, fp32.config)
    for inputs in batches.values():
        expected, actual = fp32(**inputs)["start_logits"], int8(**inputs)["start_logits"]
        assert np.abs(actual - expected).mean() < 0.05 * np.abs(expected).mean()
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "tokenizer_config.json").unlink()
    with pytest.raises(ValueError, match="calibration tokenizes real text"):
        blockbert_export.quantize_int8(tmp_path, Int8Recipe(activations="per_token"), file_name="again.onnx")
    assert not (tmp_path / "again.onnx").exists()


def test_quantization_weight_range_follows_the_cpu(monkeypatch):
    """Per-tensor activations: 7-bit weights (reduce_range) exactly where the CPU quantizing has no VNNI, unless the
    recipe says; per-block activations have no such setting (ONNX Runtime picks its kernel on the CPU running it)."""
    from blockbert_hf.onnx import quantization as onnx_quantization

    per_tensor = Int8Recipe(activations="per_tensor")
    monkeypatch.setattr(onnx_quantization.platform, "machine", lambda: "x86_64")
    for flags, vnni in (({"avx2", "fma"}, False), ({"avx512f", "avx512_vnni"}, True), ({"avx_vnni"}, True)):
        monkeypatch.setattr(onnx_quantization, "cpu_flags", lambda flags=flags: flags)
        assert onnx_quantization.cpu_has_vnni() is vnni
        assert per_tensor.resolved().reduce_range is (not vnni)
        assert Int8Recipe(activations="per_token").resolved().reduce_range is (not vnni)
        assert Int8Recipe(activations="per_tensor", reduce_range=False).resolved().reduce_range is False
        assert Int8Recipe().resolved().reduce_range is None
    monkeypatch.setattr(onnx_quantization, "cpu_flags", lambda: None)  # no /proc/cpuinfo: unknown, 8 bits
    assert onnx_quantization.cpu_has_vnni() is None and per_tensor.resolved().reduce_range is False
    parser = load_script("examples/export_onnx.py").build_parser()
    for activations in ("per_tensor", "per_token"):
        for value, expected in (("true", True), ("false", False)):
            argv = ["model", "out", "--quantize", "--int8_activations", activations, "--reduce_range", value]
            (args, _) = parser.parse_args_into_dataclasses(argv)
            assert args.int8_recipe() == Int8Recipe(activations=activations, reduce_range=expected)
    (args, _) = parser.parse_args_into_dataclasses(["model", "out", "--quantize"])
    assert args.int8_recipe() == Int8Recipe()
    with pytest.raises(ValueError, match="block_size must be a power of 2"):
        Int8Recipe(block_size=96)
    with pytest.raises(ValueError, match="smoothing must be between 0 and 1"):
        Int8Recipe(activations="per_token", smoothing=1.5)


def test_quantizing_per_block_refuses_an_onnx_runtime_without_its_kernels(saved_qa_model, tmp_path, monkeypatch):
    """8-bit MatMulNBits needs ONNX Runtime 1.22: an older one is refused before anything is exported."""
    import onnxruntime

    monkeypatch.setattr(onnxruntime, "__version__", "1.21.0")
    with pytest.raises(ValueError, match="needs onnxruntime >= 1.22 .* this is 1.21.0"):
        blockbert_export.export_onnx_folder(saved_qa_model, tmp_path / "onnx", quantize=True)
    assert not (tmp_path / "onnx").exists()


def test_the_onnx_file_joins_the_programs_by_length_and_stores_the_weights_once(exported_qa_model, saved_qa_model):
    """model.onnx and model_int8.onnx each hold the program up to b (32) and the one above behind an `If` on the
    length; the weights are stored once, no NaN check runs over attention probabilities, and the int8 file quantizes
    the matrix products of both."""
    import onnx
    from onnx import numpy_helper

    from blockbert_hf.onnx.length_switch import split_by_length

    out = exported_qa_model[2]
    for file_name in (blockbert_export.ONNX_FILE, blockbert_export.INT8_ONNX_FILE):
        short, long, short_max_length = split_by_length(onnx.load(out / file_name))
        assert short_max_length == 32
        operators = [{node.op_type for node in graph.graph.node} for graph in (short, long)]
        assert not any("IsNaN" in ops for ops in operators)  # sdpa took an additive mask, not a boolean one
        if file_name == blockbert_export.INT8_ONNX_FILE:
            assert all("MatMulNBits" in ops for ops in operators)
    joined = onnx.load(out / blockbert_export.ONNX_FILE)
    (switch,) = [node for node in joined.graph.node if node.op_type == "If"]
    graphs = [joined.graph] + [attribute.g for attribute in switch.attribute]
    stored = sum(numpy_helper.to_array(value).nbytes for graph in graphs for value in graph.initializer)
    model = BlockBertForQuestionAnswering.from_pretrained(saved_qa_model)
    weight_bytes = sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())
    assert 0.9 * weight_bytes < stored < 1.1 * weight_bytes


@pytest.mark.parametrize("file_name", ["model.onnx", "model_int8.onnx"])
def test_the_question_answering_pipeline_runs_on_an_exported_folder(
    exported_qa_model, saved_qa_model, tokenizer, file_name
):
    """The same windows and ranking as with the PyTorch model: the same answers (fp32), or answers from the context
    (int8, whose logits differ)."""
    out = exported_qa_model[2]
    onnx_model = blockbert_export.OnnxBlockBertForQuestionAnswering.from_pretrained(out, file_name=file_name)
    onnx_qa = ExtractiveQuestionAnsweringPipeline(model=onnx_model, tokenizer=AutoTokenizer.from_pretrained(out))
    eager_model = BlockBertForQuestionAnswering.from_pretrained(saved_qa_model).eval()
    eager_qa = ExtractiveQuestionAnsweringPipeline(model=eager_model, tokenizer=tokenizer)
    context = " ".join([blockbert_export.VERIFICATION_TEXT] * 3)  # several windows of N = 64 tokens
    questions = ["What does BlockBERT reduce?", "Where did the bridge stand?"]
    expected = eager_qa(question=questions, context=context, batch_size=2)
    actual = onnx_qa(question=questions, context=context, batch_size=2)
    for answer, reference in zip(actual, expected):
        assert answer["answer"] == context[answer["start"] : answer["end"]]
        if file_name == "model.onnx":
            assert (answer["start"], answer["end"]) == (reference["start"], reference["end"])
            assert answer["score"] == pytest.approx(reference["score"], abs=1e-4)


def test_the_onnx_question_answering_model_refuses_what_it_cannot_run(exported_qa_model, tmp_path):
    model = blockbert_export.OnnxBlockBertForQuestionAnswering.from_pretrained(exported_qa_model[2])
    with pytest.raises(ValueError, match="runs on the CPU"):
        model.to("cuda")
    assert model.to("cpu") is model
    with pytest.raises(ValueError, match="has no model_int8.onnx"):
        blockbert_export.OnnxBlockBert(tmp_path, file_name=blockbert_export.INT8_ONNX_FILE)


def test_the_onnx_question_answering_model_takes_what_the_pytorch_model_takes(exported_qa_model, saved_qa_model):
    """Tensors, numpy arrays and lists give the PyTorch model's logits; what the exported program has no input for
    (`inputs_embeds`, `position_ids`, ...) is refused rather than dropped."""
    model = blockbert_export.OnnxBlockBertForQuestionAnswering.from_pretrained(exported_qa_model[2])
    eager = BlockBertForQuestionAnswering.from_pretrained(saved_qa_model).eval()
    input_ids, attention_mask = random_batch([40, 25], 40)
    with torch.no_grad():
        expected = eager(input_ids=input_ids, attention_mask=attention_mask)
    is_real = attention_mask.bool()
    for convert in (lambda tensor: tensor, lambda tensor: tensor.numpy(), lambda tensor: tensor.tolist()):
        outputs = model(input_ids=convert(input_ids), attention_mask=convert(attention_mask))
        for name in ("start_logits", "end_logits"):
            torch.testing.assert_close(outputs[name][is_real], expected[name][is_real], atol=1e-4, rtol=1e-4)
    start_logits, _ = model(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)
    torch.testing.assert_close(start_logits[is_real], expected.start_logits[is_real], atol=1e-4, rtol=1e-4)
    embeddings = eager.roberta.embeddings.word_embeddings(input_ids)
    for unsupported in (dict(inputs_embeds=embeddings), dict(position_ids=torch.arange(40).expand(2, 40))):
        with pytest.raises(ValueError, match=f"no input for {next(iter(unsupported))}"):
            model(input_ids=input_ids, attention_mask=attention_mask, **unsupported)
    with pytest.raises(ValueError, match="no input for inputs_embeds"):
        model(inputs_embeds=embeddings, attention_mask=attention_mask)


def test_onnx_models_take_optimums_arguments_and_save_and_load_back(exported_qa_model, tmp_path):
    """`from_pretrained(folder, provider=..., session_options=..., file_name=...)` and `save_pretrained(folder)`, as
    optimum's ORTModel names them: a saved model loads back with the same logits, the int8 file under its own name
    (found without file_name when it is the folder's only ONNX file); the session options given are the session's."""
    import onnxruntime

    out = exported_qa_model[2]
    input_ids, attention_mask = random_batch([40, 25], 40)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    for file_name in (blockbert_export.ONNX_FILE, blockbert_export.INT8_ONNX_FILE):
        model = blockbert_export.OnnxBlockBertForQuestionAnswering.from_pretrained(
            out, file_name=file_name, provider="CPUExecutionProvider", session_options=options
        )
        assert model.runner.session.get_session_options().intra_op_num_threads == 1
        expected = model(input_ids=input_ids, attention_mask=attention_mask)
        model.save_pretrained(tmp_path / file_name)
        saved = {path.name for path in (tmp_path / file_name).iterdir()}
        assert {file_name, "config.json"} <= saved and not any(name.endswith(".onnx") for name in saved - {file_name})
        loaded = blockbert_export.OnnxBlockBertForQuestionAnswering.from_pretrained(tmp_path / file_name)
        assert loaded.runner.path.name == file_name
        assert_span_logits_close(loaded(input_ids=input_ids, attention_mask=attention_mask), expected, attention_mask)
    runner = blockbert_export.OnnxBlockBert.from_pretrained(tmp_path / blockbert_export.ONNX_FILE)
    runner.save_pretrained(tmp_path / blockbert_export.ONNX_FILE)  # into the folder it was loaded from
    assert blockbert_export.OnnxBlockBert.from_pretrained(tmp_path / blockbert_export.ONNX_FILE).output_names == [
        "start_logits",
        "end_logits",
    ]


def test_onnx_models_refuse_a_provider_they_cannot_run_and_an_ambiguous_folder(exported_qa_model, tmp_path):
    import onnxruntime

    out = exported_qa_model[2]
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        with pytest.raises(ValueError, match="no CUDAExecutionProvider .install onnxruntime-gpu"):
            blockbert_export.OnnxBlockBertForQuestionAnswering.from_pretrained(out, provider="CUDAExecutionProvider")
    with pytest.raises(ValueError, match="no NoSuchExecutionProvider; it has: .*CPUExecutionProvider"):
        blockbert_export.OnnxBlockBert.from_pretrained(out, provider="NoSuchExecutionProvider")
    for file_name in ("a.onnx", "b.onnx", "config.json"):
        shutil.copyfile(
            out / (file_name if file_name == "config.json" else blockbert_export.ONNX_FILE), tmp_path / file_name
        )
    with pytest.raises(ValueError, match=r"several ONNX files \(a.onnx, b.onnx\): pick one with file_name="):
        blockbert_export.OnnxBlockBert.from_pretrained(tmp_path)
    assert blockbert_export.OnnxBlockBert.from_pretrained(tmp_path, file_name="b.onnx").path.name == "b.onnx"


def test_onnx_runtime_matches_eager_at_every_length(exported_qa_model, saved_qa_model):
    out = exported_qa_model[2]
    model = BlockBertForQuestionAnswering.from_pretrained(saved_qa_model).eval()
    differences = max_differences(onnx_runner(out, model.config), model, range(1, 65))
    assert max(differences.values()) < 1e-4, differences


def attention_ops(graph) -> collections.Counter:
    """How many nodes of each attention op `graph` holds, inside the `If` branches of its fused attention too."""
    counts = collections.Counter(
        node.op_type for node in graph.node if node.op_type in ("MultiHeadAttention", "Softmax")
    )
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                counts += attention_ops(attribute.g)
    return counts


def test_exported_attention_is_fused_and_skips_the_mask_without_padding(exported_qa_model, tmp_path):
    """In both programs of model.onnx and of model_int8.onnx each head group's attention (2 layers x 2 shifts) is one
    MultiHeadAttention node inside an `If` on its key mask: without a mask (query, key, value) when no key of the batch
    is masked, with it otherwise. That both give eager's outputs: test_onnx_runtime_matches_eager_at_every_length, on
    unpadded and padded batches. A "sparse_fixed" model (its mask depends on the query) and `fused_attention=False`
    keep standard ops."""
    import onnx

    from blockbert_hf.onnx.length_switch import split_by_length

    programs = []
    for file_name in (blockbert_export.ONNX_FILE, blockbert_export.INT8_ONNX_FILE):  # int8: put back after quantizing
        short, long, _ = split_by_length(onnx.load(exported_qa_model[2] / file_name))
        programs += [short, long]
    for program in programs:
        switches = [node for node in program.graph.node if node.op_type == "If"]
        assert len(switches) == 2 * 2
        for switch in switches:
            branches = {attribute.name: attribute.g for attribute in switch.attribute}
            (unmasked,), (masked,) = branches["then_branch"].node, branches["else_branch"].node
            assert unmasked.op_type == masked.op_type == "MultiHeadAttention"
            assert len(unmasked.input) == 3 and masked.input[4]
        assert attention_ops(program.graph) == {"MultiHeadAttention": 2 * 2 * 2}

    model = make_model(BlockBertForQuestionAnswering, tiny_config())
    blockbert_export.export_onnx(model, tmp_path / blockbert_export.ONNX_FILE, fused_attention=False)
    assert set(attention_ops(onnx.load(tmp_path / blockbert_export.ONNX_FILE).graph)) == {"Softmax"}
    differences = max_differences(onnx_runner(tmp_path, model.config), model, grid_lengths(model.config))
    assert max(differences.values()) < 1e-4, differences
    sparse = make_model(BlockBertModel, tiny_config(**CONFIGS["sparse_fixed"]))
    blockbert_export.export_onnx(sparse, tmp_path / "sparse.onnx")
    assert set(attention_ops(onnx.load(tmp_path / "sparse.onnx").graph)) == {"Softmax"}


def test_onnx_runtime_helper_checks_inputs_on_the_host(exported_qa_model):
    runner = blockbert_export.OnnxBlockBert(exported_qa_model[2])
    with pytest.raises(ValueError, match="L = 65 tokens"):
        runner(*(x.numpy() for x in random_batch([65], 65)))
    with pytest.raises(ValueError, match="padding before a real token"):
        runner(torch.ones(1, 4, dtype=torch.long).numpy(), [[0, 1, 1, 1]])


@pytest.fixture(scope="module")
def exported_bert_qa_model(bert_tokenizer, tmp_path_factory):
    """`examples/export_onnx.py` run once on a saved BERT-style QA model with a short --text_file, recording the
    inputs its verification runs: (exit status, output, folder, eager model, {length: inputs})."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    root = tmp_path_factory.mktemp("bert_qa")
    model = bert_style_model(BlockBertForQuestionAnswering, vocab_size=len(bert_tokenizer))
    model.save_pretrained(root / "model")
    bert_tokenizer.save_pretrained(root / "model")
    (root / "text.txt").write_text("The river rose through the night.\n")  # 7 tokens: repeated to fill N = 64
    verified = {}
    original_call = blockbert_export.OnnxBlockBert.__call__

    def recording_call(self, *args, **kwargs):
        inputs = dict(zip(("input_ids", "attention_mask", "token_type_ids"), args), **kwargs)
        input_ids = np.asarray(inputs["input_ids"])
        verified[input_ids.shape[1]] = (input_ids, inputs.get("attention_mask"), inputs.get("token_type_ids"))
        return original_call(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(blockbert_export.OnnxBlockBert, "__call__", recording_call)
        status, printed = run_export_command([root / "model", root / "onnx", "--text_file", root / "text.txt"])
    return status, printed, root / "onnx", model, verified


def test_export_verifies_on_question_context_pairs_that_fill_every_block(exported_bert_qa_model, bert_tokenizer):
    """Verification runs question/context pairs (token types 0 then 1) whose longest row holds text in every block."""
    status, printed, _, model, verified = exported_bert_qa_model
    assert status == 0, printed
    reported = sorted(int(length) for length in json.loads(printed)["per_length"])
    assert reported == sorted(verified) == [2, 31, 32, 33, 63, 64]
    config = model.config
    for length in (config.max_sequence_length - 1, config.max_sequence_length):
        input_ids, attention_mask, token_type_ids = verified[length]
        assert attention_mask is not None and token_type_ids is not None, "verified without mask or token types"
        full_row, short_row = np.asarray(attention_mask)
        assert full_row.all() and 0 < short_row.sum() < length
        token_type_ids = np.asarray(token_type_ids)
        context = np.flatnonzero(token_type_ids[0] == 1)
        assert token_type_ids[0, 0] == 0 and len(context) > 0
        # Context text (mostly words, not [UNK] or special tokens) fills the last block too.
        last_block = (length - 1) // config.effective_block_size
        tokens = input_ids[0, context[context // config.effective_block_size == last_block]]
        assert np.isin(tokens, bert_tokenizer.all_special_ids, invert=True).sum() > len(tokens) // 2 > 0


def test_onnx_runtime_matches_eager_with_token_types(exported_bert_qa_model):
    status, _, out, model, _ = exported_bert_qa_model
    assert status == 0
    assert {"model.onnx", "config.json", "tokenizer.json"} <= {path.name for path in out.iterdir()}
    runner = blockbert_export.OnnxBlockBert(out)
    for length in (1, 32, 33, 64):
        input_ids, attention_mask = random_batch([length, (length + 1) // 2], length, model.config.vocab_size, 0)
        token_type_ids = question_context_types(attention_mask)
        with torch.no_grad():
            expected = model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        actual = runner(input_ids.numpy(), attention_mask.numpy(), token_type_ids.numpy())
        assert_span_logits_close(actual, expected, attention_mask, atol=1e-4, rtol=1e-7)
    with pytest.raises(ValueError, match="pass token_type_ids"):
        runner(input_ids.numpy(), attention_mask.numpy())
    with pytest.raises(ValueError, match="this model has 2 token type"):
        runner(input_ids.numpy(), attention_mask.numpy(), token_type_ids.numpy() * 2)


def test_onnx_runtime_helper_refuses_ids_it_would_misread(exported_qa_model):
    """ONNX Runtime would wrap negative ids and the int64 conversion would truncate float ids."""
    runner = blockbert_export.OnnxBlockBert(exported_qa_model[2])
    with pytest.raises(ValueError, match="outside this model's vocabulary"):
        runner(np.array([[5, -3, 7]]))
    with pytest.raises(ValueError, match="dtype float64; expected integers"):
        runner(np.array([[5.7, 6.2]]))
    with pytest.raises(ValueError, match="an empty input has nothing to encode"):
        runner(np.zeros((1, 0), np.int64))


def test_export_command_refuses_a_missing_model_folder(tmp_path, capsys):
    status, _ = run_export_command([tmp_path / "no_such_model", tmp_path / "onnx"])
    assert status == 1
    assert f"The model folder {tmp_path / 'no_such_model'} does not exist" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kept, missing", [((), ""), (("vocab.json",), " (missing: merges.txt)")])
def test_export_command_refuses_a_folder_without_tokenizer_files(tmp_path, tokenizer, kept, missing, capsys):
    """Export never verifies on, nor ships, a stand-in tokenizer: the folder must hold the model's own."""
    folder = tmp_path / "model"
    make_model(BlockBertForQuestionAnswering, tiny_config(vocab_size=len(tokenizer))).save_pretrained(folder)
    for name in kept:
        (folder / name).write_text(json.dumps(tokenizer.get_vocab()))
    status, _ = run_export_command([folder, tmp_path / "onnx"])
    assert status == 1
    error = capsys.readouterr().err
    expected = "tokenizer.json or vocab.json + merges.txt or vocab.txt or spiece.model" + missing
    assert f"{folder} has no tokenizer" in error and expected in error
    assert not (tmp_path / "onnx").exists()


def test_export_command_refuses_a_multiple_choice_model(tmp_path, tokenizer, capsys):
    folder = tmp_path / "model"
    make_model(BlockBertForMultipleChoice, tiny_config(vocab_size=len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    status, _ = run_export_command([folder, tmp_path / "onnx"])
    assert status == 1
    assert "BlockBertForMultipleChoice cannot be exported" in capsys.readouterr().err
    assert not (tmp_path / "onnx").exists()


@pytest.mark.parametrize("tolerance", ["nan", "inf", "-1e-4", "0"])
def test_export_command_refuses_a_bad_tolerance_before_any_work(saved_qa_model, tmp_path, tolerance, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_export_command([saved_qa_model, tmp_path / "onnx", f"--tolerance={tolerance}"])
    assert exit_info.value.code == 2
    assert "--tolerance must be a finite number > 0" in capsys.readouterr().err
    assert not (tmp_path / "onnx").exists()


def test_export_command_refuses_an_empty_text_file(saved_qa_model, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("\n  \n")
    status, _ = run_export_command([saved_qa_model, tmp_path / "onnx", "--text_file", tmp_path / "empty.txt"])
    assert status == 1
    assert "empty.txt is empty" in capsys.readouterr().err
    assert not (tmp_path / "onnx").exists()


def test_export_command_writes_nothing_when_onnx_runtime_disagrees(
    exported_qa_model, tmp_path, tokenizer, monkeypatch, capsys
):
    """A wrong ONNX file (here: another model's) is caught on real text: exit 1, nothing written."""
    other = tmp_path / "other_model"
    make_model(BlockBertForQuestionAnswering, tiny_config(vocab_size=len(tokenizer))).save_pretrained(other)
    tokenizer.save_pretrained(other)

    def export_the_wrong_model(model, path, fused_attention=True):
        shutil.copyfile(exported_qa_model[2] / "model.onnx", path)
        return ["start_logits", "end_logits"]

    monkeypatch.setattr(blockbert_export, "export_onnx", export_the_wrong_model)
    out = tmp_path / "onnx"
    assert load_script("examples/export_onnx.py").main([str(other), str(out)]) == 1
    assert "differs from the eager model" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == [other]


def test_onnx_export_honours_block_relative_positions(tmp_path, tokenizer):
    """Block-relative positions (n = 2, b = C = 64, N = 128: twice the position table): the command verifies up to the
    new N, and ONNX Runtime matches eager below, at and past the table's end, with and without padding."""
    tokenizer = copy.deepcopy(tokenizer)
    config = tiny_config(vocab_size=len(tokenizer), block_relative_positions=True)
    model = make_model(BlockBertForQuestionAnswering, config)
    assert config.max_sequence_length == 128 and config.max_position_embeddings == 66
    match_tokenizer_to_config(tokenizer, config)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    status, printed = run_export_command([tmp_path / "model", tmp_path / "onnx"])
    assert status == 0, printed
    assert sorted(int(length) for length in json.loads(printed)["per_length"]) == [2, 63, 64, 65, 127, 128]
    runner = blockbert_export.OnnxBlockBert(tmp_path / "onnx")
    assert runner.config.block_relative_positions and runner.config.max_sequence_length == 128
    differences = max_differences(onnx_runner(tmp_path / "onnx", model.config), model, [1, 64, 65, 128])
    assert max(differences.values()) < 1e-4, differences
    with pytest.raises(ValueError, match="L = 129 tokens"):
        runner(*(x.numpy() for x in random_batch([129], 129)))


def test_exported_program_honours_block_relative_bert_positions():
    """BERT positions and token types with block-relative positions (b = 64, N = 128): one program for every length."""
    bert_style = dict(position_embedding_style="bert", type_vocab_size=2, max_position_embeddings=64, pad_token_id=0)
    model = make_model(BlockBertForQuestionAnswering, tiny_config(block_relative_positions=True, **bert_style))
    with torch.no_grad():
        model.base_model.embeddings.token_type_embeddings.weight.normal_(0.0, 1.0)
    program = blockbert_export.export_program(model).module()
    for length in (1, 64, 65, 128):
        input_ids, attention_mask = random_batch([length, (length + 1) // 2], length, pad_token_id=0)
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask)
        inputs["token_type_ids"] = question_context_types(attention_mask)
        with torch.no_grad():
            expected, actual = model(**inputs), program(**inputs)
        assert_span_logits_close(actual, expected, attention_mask)


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
def test_compiles_to_one_graph_per_side_of_the_block_size(model_class):
    """fullgraph=True fails on any graph break; one compiled graph serves every length up to b, one every length
    above (b = 32 here), as `length_ranges` says."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    model = make_model(model_class, tiny_config())
    counter = CompileCounter()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=counter)
    for length in (5, 32, 33, 64, 20, 47):
        input_ids, attention_mask = random_batch([length, (length + 1) // 2], length)
        if model_class is BlockBertForMultipleChoice:
            input_ids, attention_mask = input_ids[None], attention_mask[None]
        with torch.no_grad():
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
            expected, actual = model(**inputs), compiled(**inputs)
        torch.testing.assert_close(
            at_real_tokens(actual[0], attention_mask), at_real_tokens(expected[0], attention_mask), atol=1e-5, rtol=1e-5
        )
    assert counter.frame_count == len(blockbert_export.length_ranges(model.config)) == 2
