"""The checks behind docs/feature_comparison.md: what it says about RoBERTa, Longformer, BigBird and ModernBERT that
is not taken from their documentation is measured here, on tiny randomly initialised models of the installed
transformers. If an upgrade of transformers makes one of these fail, the table is stale: update both.

The checks of other models' behaviour (and of transformers itself) are marked `other_models`, which the default run
leaves out, so that a transformers upgrade cannot fail BlockBERT's suite for another model's reason:
`pytest -m other_models tests/docs/test_feature_table.py` runs them. The checks of BlockBERT's own cells and of the page
stay in the default run. The export checks are also marked slow."""

import re
from pathlib import Path

import pytest
import torch
import transformers
from conftest import REPO_ROOT
from transformers import (
    AutoModelForQuestionAnswering,
    BertConfig,
    BertModel,
    BigBirdConfig,
    BigBirdModel,
    LongformerConfig,
    LongformerModel,
    ModernBertConfig,
    ModernBertModel,
    RobertaConfig,
    RobertaModel,
    pipeline,
)
from transformers.pipelines import SUPPORTED_TASKS

from blockbert_hf import BlockBertConfig, BlockBertModel


THIS_FILE = "tests/docs/test_feature_table.py"
SIZES = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
# BigBird's block-sparse pattern with these blocks needs more than (5 + 2 * 1) * 4 = 28 tokens; shorter inputs run
# full attention. LENGTH tokens alone are therefore block-sparse, and so is the padded batch of PADDED_LENGTH.
BIGBIRD_BLOCKS = dict(block_size=4, num_random_blocks=1)
LENGTH, PADDED_LENGTH = 40, 64
ARCHITECTURES = ["roberta", "longformer", "bigbird", "bigbird-full", "modernbert", "blockbert"]
other_models = pytest.mark.other_models


def other(*values):
    """A parameter set about another model than BlockBERT."""
    return pytest.param(*values, marks=other_models)


def tiny_config(architecture: str):
    """A 2-layer (ModernBERT: 3, so that it has a global and two sliding-window layers), hidden-32 config with room
    for 64 tokens, whose attention pattern is exercised at 40 tokens (windows of 8, blocks of 4 or 32)."""
    if architecture == "roberta":
        return RobertaConfig(**SIZES, max_position_embeddings=66)
    if architecture == "longformer":
        return LongformerConfig(**SIZES, max_position_embeddings=66, attention_window=8)
    if architecture in ("bigbird", "bigbird-full"):
        attention_type = "original_full" if architecture == "bigbird-full" else "block_sparse"
        return BigBirdConfig(
            **SIZES, max_position_embeddings=64, attention_type=attention_type, hidden_act="gelu", **BIGBIRD_BLOCKS
        )
    if architecture == "modernbert":
        fields = dict(SIZES, num_hidden_layers=3)
        special_ids = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, cls_token_id=0, sep_token_id=2)
        return ModernBertConfig(**fields, max_position_embeddings=64, local_attention=8, **special_ids)
    if architecture == "blockbert":
        return BlockBertConfig(**SIZES, max_position_embeddings=66)  # n = 2 blocks of 32, heads 3:1
    raise ValueError(architecture)


MODEL_CLASSES = {
    "roberta": RobertaModel,
    "longformer": LongformerModel,
    "bigbird": BigBirdModel,
    "bigbird-full": BigBirdModel,
    "modernbert": ModernBertModel,
    "blockbert": BlockBertModel,
}


def tiny_model(architecture: str):
    return MODEL_CLASSES[architecture](tiny_config(architecture)).eval()


def encode(model, input_ids, attention_mask) -> torch.Tensor:
    if isinstance(model, BigBirdModel):
        # A short input switches BigBird to full attention for every later call (see the test below): switch back.
        model.set_attention_type(model.config.attention_type)
    with torch.no_grad():
        return model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def padding_difference(model, padding_side: str) -> float:
    """Max |difference| of a LENGTH-token sequence's outputs encoded alone and in a batch padded to PADDED_LENGTH
    (on `padding_side`) beside a sequence without padding."""
    pad = model.config.pad_token_id
    sequence = torch.randint(3, SIZES["vocab_size"], (1, LENGTH))
    alone = encode(model, sequence, torch.ones_like(sequence))[0]
    input_ids = torch.randint(3, SIZES["vocab_size"], (2, PADDED_LENGTH))
    attention_mask = torch.ones_like(input_ids)
    real = slice(0, LENGTH) if padding_side == "right" else slice(PADDED_LENGTH - LENGTH, PADDED_LENGTH)
    input_ids[0], attention_mask[0] = pad, 0
    input_ids[0, real], attention_mask[0, real] = sequence[0], 1
    batched = encode(model, input_ids, attention_mask)[0, real]
    return (alone - batched).abs().max().item()


# ---------------------------------------------------------------------------------------------------------------------
# Attention kernels, context length and pattern of the configs
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("architecture", "sdpa", "flash", "flex"),
    [
        other("roberta", True, True, True),
        other("longformer", False, False, False),
        other("bigbird", False, False, False),
        other("modernbert", True, True, True),
        ("blockbert", True, False, True),
    ],
)
def test_attention_kernels_declared_by_the_installed_classes(architecture, sdpa, flash, flex):
    model_class = MODEL_CLASSES[architecture]
    assert model_class._supports_sdpa is sdpa
    assert model_class._supports_flash_attn is flash
    assert model_class._supports_flex_attn is flex


@other_models
def test_longformer_and_bigbird_run_their_own_attention_whatever_kernel_is_asked_for():
    for architecture in ("longformer", "bigbird"):
        model = tiny_model(architecture)
        model.set_attn_implementation("sdpa")  # warns and keeps the eager implementation
        assert model.config._attn_implementation == "eager"


@other_models
def test_default_configs_context_and_attention_pattern():
    bigbird = BigBirdConfig()
    assert bigbird.max_position_embeddings == 4096
    assert (bigbird.attention_type, bigbird.block_size, bigbird.num_random_blocks) == ("block_sparse", 64, 3)
    modernbert = ModernBertConfig()
    assert modernbert.max_position_embeddings == 8192 and modernbert.local_attention == 128
    assert modernbert.layer_types[:6] == ["full_attention", "sliding_attention", "sliding_attention"] * 2
    assert LongformerConfig().attention_window == 512


@other_models
def test_bigbird_switches_to_full_attention_on_a_short_input_and_stays_switched():
    model = tiny_model("bigbird")
    assert model.attention_type == "block_sparse"
    with torch.no_grad():
        model(input_ids=torch.randint(3, SIZES["vocab_size"], (1, 20)))  # 20 <= 28 tokens
    assert model.attention_type == "original_full"
    with torch.no_grad():
        model(input_ids=torch.randint(3, SIZES["vocab_size"], (1, PADDED_LENGTH)))
    assert model.attention_type == "original_full"  # a long input later still gets full attention
    assert model.config.attention_type == "block_sparse"


# ---------------------------------------------------------------------------------------------------------------------
# Padding invariance
# ---------------------------------------------------------------------------------------------------------------------


def check_padding(architecture: str, side: str, invariant: bool) -> None:
    """Invariant: the padded batch gives the lone sequence's outputs (< 1e-5); not: they differ clearly (> 1e-3)."""
    difference = padding_difference(tiny_model(architecture), side)
    message = f"{architecture}: alone vs {side}-padded max |diff| = {difference:.2e}"
    assert difference < 1e-5 if invariant else difference > 1e-3, message


@pytest.mark.parametrize(
    ("architecture", "invariant"),
    [
        other("roberta", True),
        other("longformer", True),
        other("bigbird", False),  # block-sparse: the layout is built over the padded length
        other("bigbird-full", True),
        other("modernbert", True),
        ("blockbert", True),
    ],
)
def test_right_padding_invariance(architecture, invariant):
    check_padding(architecture, "right", invariant)


@other_models
@pytest.mark.parametrize(
    ("architecture", "invariant"),
    [
        ("roberta", True),  # positions count real tokens only
        ("longformer", True),
        ("bigbird", False),  # absolute positions 0, 1, 2, ... shift with left padding
        ("bigbird-full", False),
        ("modernbert", True),  # rotary positions: only relative positions matter
    ],
)
def test_left_padding_invariance(architecture, invariant):
    check_padding(architecture, "left", invariant)


def test_blockbert_refuses_left_padding():
    with pytest.raises(ValueError, match="right padding"):
        padding_difference(tiny_model("blockbert"), "left")


# ---------------------------------------------------------------------------------------------------------------------
# Exactness: which settings reproduce RoBERTa / BERT, loading their weights name for name
# ---------------------------------------------------------------------------------------------------------------------


def _roberta_weights_in_longformer(roberta, attention_window: int):
    longformer = LongformerModel(
        LongformerConfig(**SIZES, max_position_embeddings=66, attention_window=attention_window)
    )
    result = longformer.load_state_dict(roberta.state_dict(), strict=False)
    # Everything but Longformer's separate projections for global attention comes from RoBERTa, name for name.
    assert not result.unexpected_keys
    assert all(
        ".query_global." in key or ".key_global." in key or ".value_global." in key for key in result.missing_keys
    )
    for layer in longformer.encoder.layer:
        attention = layer.attention.self
        for name in ("query", "key", "value"):
            getattr(attention, f"{name}_global").load_state_dict(getattr(attention, name).state_dict())
    return longformer.eval()


@other_models
def test_longformer_with_roberta_weights_reproduces_roberta_only_when_its_window_covers_the_input():
    roberta = tiny_model("roberta")
    input_ids = torch.randint(3, SIZES["vocab_size"], (2, LENGTH))
    attention_mask = torch.ones_like(input_ids)
    input_ids[1, 30:], attention_mask[1, 30:] = roberta.config.pad_token_id, 0
    expected = encode(roberta, input_ids, attention_mask)
    real = attention_mask.bool()
    # A one-sided window of 64 >= 40 tokens: every token sees every token, as in RoBERTa.
    covering = encode(_roberta_weights_in_longformer(roberta, 128), input_ids, attention_mask)
    assert (covering - expected)[real].abs().max() < 1e-5
    local = encode(_roberta_weights_in_longformer(roberta, 8), input_ids, attention_mask)
    assert (local - expected)[real].abs().max() > 1e-3


@other_models
def test_bigbird_full_attention_with_bert_weights_reproduces_bert():
    bert = BertModel(BertConfig(**SIZES, max_position_embeddings=64, pad_token_id=0)).eval()
    bigbird = tiny_model("bigbird-full")
    weights = {key.replace("pooler.dense.", "pooler."): value for key, value in bert.state_dict().items()}
    result = bigbird.load_state_dict(weights, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    input_ids = torch.randint(3, SIZES["vocab_size"], (2, LENGTH))
    attention_mask = torch.ones_like(input_ids)
    input_ids[1, 30:], attention_mask[1, 30:] = 0, 0
    with torch.no_grad():
        expected, actual = (
            bert(input_ids, attention_mask=attention_mask),
            bigbird(input_ids, attention_mask=attention_mask),
        )
    real = attention_mask.bool()
    assert (actual.last_hidden_state - expected.last_hidden_state)[real].abs().max() < 1e-5
    assert (actual.pooler_output - expected.pooler_output).abs().max() < 1e-5


@other_models
def test_installed_transformers_ships_no_checkpoint_conversion_scripts():
    models = Path(transformers.__file__).parent / "models"
    assert not sorted(models.glob("*/convert_*.py"))


# ---------------------------------------------------------------------------------------------------------------------
# Question answering on transformers 5
# ---------------------------------------------------------------------------------------------------------------------


@other_models
def test_question_answering_pipeline_is_removed_from_transformers():
    assert "question-answering" not in SUPPORTED_TASKS
    with pytest.raises(KeyError, match="question-answering has been removed"):
        pipeline("question-answering")


@pytest.mark.parametrize(
    "architecture", [other("roberta"), other("longformer"), other("bigbird"), other("modernbert"), "blockbert"]
)
def test_every_architecture_has_a_question_answering_head(architecture):
    config = tiny_config(architecture)
    model = AutoModelForQuestionAnswering.from_config(config).eval()
    # Question and context as RoBERTa's tokenizer joins them (Longformer's head finds the question by these separators).
    input_ids = torch.randint(3, SIZES["vocab_size"], (1, LENGTH))
    separator = getattr(config, "sep_token_id", None)
    input_ids[0, [10, 11, LENGTH - 1]] = config.eos_token_id if separator is None else separator
    with torch.no_grad():
        outputs = model(input_ids=input_ids)
    assert outputs.start_logits.shape == outputs.end_logits.shape == (1, LENGTH)


# ---------------------------------------------------------------------------------------------------------------------
# Export (slow: each check traces and exports a model)
# ---------------------------------------------------------------------------------------------------------------------


class LastHiddenState(torch.nn.Module):
    """(input_ids, attention_mask) -> last hidden state: one tensor out, for torch.onnx.export."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def export_batch(model, length: int = 48):
    input_ids = torch.randint(3, SIZES["vocab_size"], (2, length))
    attention_mask = torch.ones_like(input_ids)
    input_ids[1, length - 8 :], attention_mask[1, length - 8 :] = model.config.pad_token_id, 0
    return input_ids, attention_mask


def dynamic_length():
    length = torch.export.Dim("length", min=2, max=64)
    return {"input_ids": {1: length}, "attention_mask": {1: length}}


@pytest.mark.slow
@other_models
@pytest.mark.parametrize(
    ("architecture", "exports"),
    [("roberta", True), ("longformer", False), ("bigbird", False), ("modernbert", True)],
)
def test_torch_export_with_a_dynamic_sequence_length(architecture, exports):
    model = tiny_model(architecture)
    input_ids, attention_mask = export_batch(model)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if not exports:
        # Longformer: a branch on a tensor value (whether any token has global attention); BigBird: its switch between
        # block-sparse and full attention and its padding to whole blocks depend on the length.
        with pytest.raises(RuntimeError):
            torch.export.export(model, args=(), kwargs=inputs, dynamic_shapes=dynamic_length())
        return
    program = torch.export.export(model, args=(), kwargs=inputs, dynamic_shapes=dynamic_length()).module()
    for length in (48, 20):
        batch = {name: value[:, :length] for name, value in inputs.items()}
        real = batch["attention_mask"].bool()
        with torch.no_grad():
            difference = (program(**batch).last_hidden_state - model(**batch).last_hidden_state)[real].abs().max()
        assert difference < 1e-5


@pytest.mark.slow
@other_models
def test_torch_export_of_bigbird_at_a_fixed_length():
    model = tiny_model("bigbird")
    input_ids, attention_mask = export_batch(model)
    program = torch.export.export(model, args=(), kwargs={"input_ids": input_ids, "attention_mask": attention_mask})
    real = attention_mask.bool()
    with torch.no_grad():
        exported = program.module()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        difference = (exported - encode(model, input_ids, attention_mask))[real].abs().max()
    assert difference < 1e-5


@pytest.mark.slow
@other_models
@pytest.mark.parametrize(
    ("architecture", "dynamic", "exports"),
    [("roberta", True, True), ("longformer", True, False), ("bigbird", False, False), ("modernbert", True, True)],
)
def test_onnx_export(architecture, dynamic, exports, tmp_path):
    """torch.onnx.export(dynamo=True) and ONNX Runtime; BigBird is tried at a fixed length (its dynamic-length
    torch.export already fails above)."""
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model = tiny_model(architecture)
    input_ids, attention_mask = export_batch(model)
    wrapped = LastHiddenState(model).eval()
    export = dict(
        dynamo=True, dynamic_shapes=dynamic_length() if dynamic else None, input_names=["input_ids", "attention_mask"]
    )
    if not exports:
        # Longformer fails in torch.export, BigBird when its graph is decomposed into ONNX operators.
        with pytest.raises(torch.onnx.OnnxExporterError):
            torch.onnx.export(wrapped, (input_ids, attention_mask), **export)
        return
    torch.onnx.export(wrapped, (input_ids, attention_mask), **export).save(tmp_path / "model.onnx")
    session = onnxruntime.InferenceSession(tmp_path / "model.onnx")
    for length in (48, 20):
        ids, mask = input_ids[:, :length], attention_mask[:, :length]
        (outputs,) = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        expected = encode(model, ids, mask)
        assert (torch.from_numpy(outputs) - expected)[mask.bool()].abs().max() < 1e-4


# ---------------------------------------------------------------------------------------------------------------------
# The page itself
# ---------------------------------------------------------------------------------------------------------------------


def test_every_test_the_page_cites_exists():
    page = (REPO_ROOT / "docs" / "feature_comparison.md").read_text(encoding="utf-8")
    cited = re.findall(r"`(?:(tests/[\w/]+\.py)::)?(test_\w+)`", page)
    assert len(cited) > 20
    missing = [
        f"{path or THIS_FILE}::{name}"
        for path, name in cited
        if not re.search(rf"^def {name}\(", (REPO_ROOT / (path or THIS_FILE)).read_text(), re.M)
    ]
    assert not missing, f"docs/feature_comparison.md cites tests that do not exist: {missing}"
