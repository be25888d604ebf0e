"""Exporting BlockBERT: `torch.export` programs and ONNX files valid for every batch size and every length up to N.

A traced BlockBERT lays attention out as eager does: one unpadded block of `L` tokens when `L <= b`, the `ceil(L / b)`
blocks of `b` tokens the input fills otherwise (docs/attention.md, "Tracing and export"). The two layouts are two
programs (`length_ranges`): `export_program` returns both behind one module that runs the one made for the input's
length, and `export_onnx` joins them in one ONNX file. A program cannot raise on tensor values, so inputs are checked
on the host: `check_inputs` before every call (`blockbert_hf.onnx.runtime`, whose `OnnxBlockBert` does it for you
and whose `OnnxBlockBertForQuestionAnswering` runs an exported folder in the question-answering pipeline).
`export_onnx_folder` exports and verifies a saved folder; `quantize_int8` makes its int8 variant.

`Int8Recipe` and `blockbert_hf.onnx.quantization` say what the int8 variant keeps in fp32 and why.

ONNX needs the `export` extra (`pip install blockbert-hf[export]`: onnx, onnxscript, onnxruntime).
"""

import contextlib
import json
import logging
import math
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.export import Dim
from transformers import AutoConfig, AutoTokenizer

from ..model import modeling_blockbert
from ..model.configuration_blockbert import BlockBertConfig
from ..model.pipeline_question_answering import ExtractiveQuestionAnsweringPipeline, model_window_layout
from ..model.question_answering_windows import tokenize_windows
from ..saving import atomic_directory, open_text, save_tokenizer
from ..tokenization import TOKENIZER_FILES, missing_tokenizer_files
from .quantization import (
    ACTIVATION_SCALES,
    Int8Recipe,
    check_onnxruntime_version,
    cpu_has_vnni,
    quantize_graph,
)
from .runtime import (
    INPUT_NAMES,
    INT8_ONNX_FILE,
    ONNX_FILE,
    TOKEN_TYPE_INPUT,
    OnnxBlockBert,
    OnnxBlockBertForQuestionAnswering,
    input_names,
)


logger = logging.getLogger(__name__)


QUANTIZATION_REPORT = "quantization.json"
# Files that hold a tokenizer's vocabulary, any one group of which makes a folder's tokenizer loadable.
# The question `export_onnx_folder` asks of the verification text, as the question-answering pipeline would.
VERIFICATION_QUESTION = "What does BlockBERT reduce?"
# Questions about `VERIFICATION_TEXT` the int8 model answers through the pipeline, over the text and over the text
# repeated to fill several windows: its answers are compared with the eager model's (`answer_agreement`).
VERIFICATION_QUESTIONS = (
    VERIFICATION_QUESTION,
    "What does BlockBERT introduce into the attention matrix?",
    "Which model does BlockBERT extend?",
    "What can attention heads capture?",
    "What kind of datasets were the experiments conducted on?",
    "What does BlockBERT use less of than RoBERTa?",
    "What rose through the night?",
    "What stood alone in a wide brown lake?",
    "What was still burning above the water?",
)
# The text `export_onnx_folder` verifies on when no other is given: real prose, repeated to fill every block.
VERIFICATION_TEXT = (
    "BlockBERT is a lightweight and efficient BERT model that is designed to better model long-distance dependencies. "
    "Our model extends BERT by introducing sparse block structures into the attention matrix to reduce both memory "
    "consumption and training time, which also enables attention heads to capture either short- or long-range "
    "contextual information. We conduct experiments on several benchmark question answering datasets with various "
    "paragraph lengths. Results show that BlockBERT uses less memory and less training time than RoBERTa, while "
    "keeping comparable and sometimes better prediction accuracy. The river rose through the night, and by morning "
    "the old stone bridge stood alone in a wide brown lake, its lamps still burning above the water."
)


@dataclass
class OnnxExportArguments:
    """Options of `examples/export_onnx.py` (besides the model folder and the output folder)."""

    text_file: str | None = field(
        default=None,
        metadata={"help": "UTF-8 text to verify on, as the context of a question (default: a built-in paragraph)"},
    )
    tolerance: float = field(default=1e-4, metadata={"help": "largest difference from the eager model allowed (> 0)"})
    quantize: bool = field(
        default=False,
        metadata={
            "help": f"also write {INT8_ONNX_FILE}: int8 weights for the matrix products with a weight (attention's "
            "other products, the embeddings and the task head stay in fp32), activations quantized at run time "
            f"(--int8_activations), with in {QUANTIZATION_REPORT} its difference from the eager model per length and "
            "how many of its answers to built-in questions equal the eager model's (a warning when some do not; not "
            "bound by --tolerance: measure its accuracy on your task)"
        },
    )
    int8_activations: str = field(
        default="per_block",
        metadata={
            "help": "with --quantize: one activation scale per token and block of 128 channels (per_block: ONNX "
            "Runtime's MatMulNBits, keeps the answers), per token (per_token: MatMulInteger after SmoothQuant "
            "smoothing calibrated on the verification text, faster, changes more answers) or per tensor (per_tensor: "
            "quantize_dynamic, changes the most); blockbert_hf.onnx.quantization says why",
            "choices": list(ACTIVATION_SCALES),
        },
    )
    reduce_range: bool | None = field(
        default=None,
        metadata={
            "help": "with --int8_activations per_token or per_tensor: true for weights in 7 bits rather than 8, "
            "false for 8 (default: 7 only where this CPU has no VNNI, as ONNX Runtime advises; the file is best run "
            "on CPUs like the one that made it)"
        },
    )
    fused_attention: bool = field(
        default=True,
        metadata={
            "help": "attention as ONNX Runtime's fused MultiHeadAttention (faster; runs on ONNX Runtime only); "
            "--no_fused_attention keeps it as standard ONNX ops, for other ONNX back ends"
        },
    )
    overwrite: bool = field(default=False, metadata={"help": "replace a non-empty output folder"})

    def __post_init__(self):
        check_tolerance(self.tolerance)
        self.int8_recipe()  # refuses a bad combination before any work

    def int8_recipe(self) -> Int8Recipe:
        return Int8Recipe(activations=self.int8_activations, reduce_range=self.reduce_range)


def check_tolerance(tolerance: float) -> None:
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance > 0):
        raise ValueError(f"--tolerance must be a finite number > 0 (e.g. 1e-4), got {tolerance!r}.")


def check_exportable(config: BlockBertConfig, architecture: str | None = None) -> None:
    """Refuses a multiple-choice model: its inputs are `(batch, num_choices, L)` and the programs here take
    `(batch, L)`."""
    architecture = architecture or (config.architectures or ["BlockBertModel"])[0]
    if architecture == "BlockBertForMultipleChoice":
        raise ValueError(
            "BlockBertForMultipleChoice cannot be exported: it takes (batch, num_choices, L) inputs and "
            "blockbert_hf.onnx.export makes programs for (batch, L) inputs. Run it eagerly or with "
            "torch.compile(model, fullgraph=True, dynamic=True)."
        )


def length_ranges(config: BlockBertConfig) -> list[tuple[int, int]]:
    """The ranges of sequence lengths that get a program each: `[(1, b), (b + 1, N)]` for a blockwise model with
    `N > b` (one unpadded block up to `b` tokens, `ceil(L / b)` blocks of `b` above), `[(1, N)]` otherwise."""
    max_len, block_size = config.max_sequence_length, config.effective_block_size
    if config.attention_pattern != "blockwise" or max_len <= block_size:
        return [(1, max_len)]
    return [(1, block_size), (block_size + 1, max_len)]


def dynamic_shapes(config: BlockBertConfig, lengths: tuple[int, int] | None = None) -> dict:
    """Dynamic batch size and sequence length (`lengths`, default 1 to N) for every input (`input_names(config)`)."""
    shortest, longest = lengths or (1, config.max_sequence_length)
    batch = Dim("batch", min=1, max=1 << 16)
    sequence = Dim("sequence", min=shortest, max=longest)
    return {name: {0: batch, 1: sequence} for name in input_names(config)}


def example_length(lengths: tuple[int, int]) -> int:
    """A length inside `lengths` to trace with, neither 1 nor an end of the range where it can be avoided (a traced
    size of 1, or an end, would be specialised)."""
    shortest, longest = lengths
    return min(longest, max(shortest, 2, (shortest + longest) // 2 + 1))


class ExportableBlockBert(torch.nn.Module):
    """Wraps a BlockBERT model as `(input_ids, attention_mask[, token_type_ids]) -> tuple of tensors`, in the order
    of `output_names` (an exported program and an ONNX graph take and return plain tensors)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.eval()  # the wrapper too: the exporter warns about a module in training mode
        with torch.no_grad():
            example = self.model(**example_inputs(model.config), return_dict=True)
        self.output_names = [name for name, value in example.items() if isinstance(value, torch.Tensor)]

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        outputs = self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True
        )
        return tuple(outputs[name] for name in self.output_names)


def example_inputs(config: BlockBertConfig, batch_size: int = 2, seq_len: int | None = None) -> dict:
    """Right-padded example inputs for tracing (by default of `example_length` over 1 to N), with token types 0 then 1
    when the model has them."""
    seq_len = seq_len or example_length((1, config.max_sequence_length))
    first_real = 3 if config.vocab_size > 3 else 0
    input_ids = torch.arange(batch_size * seq_len).reshape(batch_size, seq_len) % (config.vocab_size - first_real)
    input_ids = input_ids + first_real
    attention_mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    attention_mask[1:, seq_len // 2 :] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, config.pad_token_id)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if TOKEN_TYPE_INPUT in input_names(config):
        token_type_ids = torch.zeros(batch_size, seq_len, dtype=torch.long)
        token_type_ids[:, seq_len // 4 :] = 1
        inputs[TOKEN_TYPE_INPUT] = token_type_ids.masked_fill(attention_mask == 0, 0)
    return inputs


class ProgramsByLength(torch.nn.Module):
    """Exported programs of one model, each made for a range of lengths, as one module: called with the model's
    keyword inputs (`input_names(config)`), it runs the program made for the length of `input_ids`."""

    def __init__(self, programs: dict[tuple[int, int], torch.nn.Module]):
        super().__init__()
        self.ranges = list(programs)
        self.programs = torch.nn.ModuleList(programs.values())

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **inputs):
        seq_len = input_ids.shape[-1]
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        for (shortest, longest), program in zip(self.ranges, self.programs):
            if shortest <= seq_len <= longest:
                return program(input_ids=input_ids, attention_mask=attention_mask, **inputs)
        raise ValueError(
            f"The input has L = {seq_len} tokens; the exported programs take {self.ranges[0][0]} to "
            f"{self.ranges[-1][1]}: truncate the input to the model's N."
        )


@dataclass
class ExportedBlockBert:
    """The `torch.export` programs of a model, one per range of lengths (`length_ranges`): `programs[(1, b)]`, ...
    `module()` runs the one made for the input's length."""

    programs: dict[tuple[int, int], torch.export.ExportedProgram]

    def module(self) -> ProgramsByLength:
        return ProgramsByLength({lengths: program.module() for lengths, program in self.programs.items()})


@contextlib.contextmanager
def _in_eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Runs the block with `model` in eval mode (programs are made without dropout), then puts back the mode of each
    of its modules as it was."""
    modes = {module: module.training for module in model.modules()}
    model.eval()
    try:
        yield
    finally:
        for module, training in modes.items():
            module.train(training)


def export_program(model: torch.nn.Module) -> ExportedBlockBert:
    """`torch.export` of a BlockBERT model (any head but multiple choice) with dynamic batch size and sequence
    length, one program per range of `length_ranges`; each takes `input_names(model.config)` as keywords and returns
    the model's output. The programs compute what the model computes in eval mode; the model is left in the mode it
    was in."""
    check_exportable(model.config, type(model).__name__)
    programs = {}
    with _in_eval_mode(model), torch.no_grad():
        for lengths in length_ranges(model.config):
            inputs = example_inputs(model.config, seq_len=example_length(lengths))
            shapes = dynamic_shapes(model.config, lengths)
            programs[lengths] = torch.export.export(model, (), inputs, dynamic_shapes=shapes, strict=False)
    return ExportedBlockBert(programs)


def export_onnx(model: torch.nn.Module, path: str | Path, fused_attention: bool = True) -> list[str]:
    """Writes `model` as an ONNX file with dynamic batch size and sequence length, taking `input_names(model.config)`;
    returns its output names. A blockwise model's two programs (`length_ranges`) are joined in the file by an `If`
    on the input's length, their weights stored once (`onnx_length_switch`). With `fused_attention` (where the
    pattern allows it), attention is ONNX Runtime's fused `MultiHeadAttention` (`onnx_attention`); without, standard
    ONNX ops that any back end runs. As `export_program`, it exports the eval mode and leaves the model in the mode it
    was in."""
    check_exportable(model.config, type(model).__name__)
    with _in_eval_mode(model):
        return _export_onnx(model, path, fused_attention)


def _export_onnx(model: torch.nn.Module, path: str | Path, fused_attention: bool) -> list[str]:
    import onnx

    from .attention import exported_attention, skip_mask_when_all_keys_real
    from .length_switch import switch_by_length

    wrapper = ExportableBlockBert(model)
    names = input_names(model.config)
    graphs = []
    with exported_attention(model, fused_attention) as translations:
        for lengths in length_ranges(model.config):
            inputs = example_inputs(model.config, seq_len=example_length(lengths))
            with torch.no_grad():
                program = torch.onnx.export(
                    wrapper,
                    tuple(inputs[name] for name in names),
                    input_names=list(names),
                    output_names=wrapper.output_names,
                    dynamic_shapes=tuple(dynamic_shapes(model.config, lengths).values()),
                    custom_translation_table=translations,
                    dynamo=True,
                    verbose=False,
                )
            graphs.append((lengths, program.model_proto))
    if len(graphs) == 1:
        onnx_model = graphs[0][1]
    else:
        (short_lengths, short), (_, long) = graphs
        onnx_model = switch_by_length(short, long, short_lengths[1])
    onnx.save(skip_mask_when_all_keys_real(onnx_model), str(path))
    return wrapper.output_names


def calibration_batches(folder: Path, config: BlockBertConfig) -> dict[int, dict[str, np.ndarray]]:
    """What `quantize_int8` measures activations on by default: `verification_batches` of `VERIFICATION_TEXT` with
    the tokenizer saved in `folder`, at every `verification_lengths`."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"int8 calibration tokenizes real text with the tokenizer in {folder}, which does not load ({error}): "
            "save it there (tokenizer.save_pretrained), or pass calibration batches."
        ) from error
    tokenizer.padding_side = "right"
    return verification_batches(config, tokenizer, VERIFICATION_TEXT, verification_lengths(config))


def _runs_length(program: str, length: int, by_length) -> bool:
    """Whether the program named `program` ("model", "short", "long") of `split_by_length`'s result runs `length`."""
    return by_length is None or (length <= by_length[2]) == (program == "short")


def quantize_int8(
    folder: str | Path,
    recipe: Int8Recipe | None = None,
    file_name: str = INT8_ONNX_FILE,
    calibration: dict[int, dict[str, np.ndarray]] | None = None,
) -> Int8Recipe:
    """Writes `folder/model_int8.onnx` (or `file_name`): the int8 quantization of `folder/model.onnx` as `recipe` says
    (default `Int8Recipe()`: int8 weights for the matrix products with a weight, activations quantized at run time
    per token and block of channels, the task head and the embeddings in fp32; `blockbert_hf.onnx.quantization`).
    `calibration`: `{length: model inputs}` that the per-token recipe's smoothing measures activations on (default
    `calibration_batches`). The quantizers do not look inside an `If`, so a model joined by length is quantized graph
    by graph (each calibrated on the lengths it runs) and joined again, with fused attention always masked while they
    run (`onnx_attention.always_masked`). Returns the recipe applied (`reduce_range` decided for this CPU)."""
    import onnx

    from .attention import always_masked, skip_mask_when_all_keys_real
    from .length_switch import split_by_length, switch_by_length

    folder = Path(folder)
    recipe = recipe or Int8Recipe()
    if calibration is None and recipe.activations == "per_token" and recipe.smoothing is not None:
        calibration = calibration_batches(folder, AutoConfig.from_pretrained(folder))
    model = onnx.load(folder / ONNX_FILE)
    by_length = split_by_length(model)
    programs = {"model": model} if by_length is None else {"short": by_length[0], "long": by_length[1]}
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        quantized = []
        for name, program in programs.items():
            source, target = Path(scratch, f"{name}.onnx"), Path(scratch, f"{name}_int8.onnx")
            onnx.save(always_masked(program), source)
            feeds = None
            if calibration is not None:  # each program on the lengths it runs
                feeds = [batch for length, batch in calibration.items() if _runs_length(name, length, by_length)]
            applied = quantize_graph(source, target, recipe, feeds)
            quantized.append(onnx.load(target))
        joined = quantized[0] if by_length is None else switch_by_length(*quantized, by_length[2])
        onnx.save(skip_mask_when_all_keys_real(joined), folder / file_name)
    return applied


def verification_lengths(config: BlockBertConfig) -> list[int]:
    """Lengths around the block boundaries and the limit: 2, b - 1, b, b + 1, N - 1, N (those within 2..N)."""
    b, max_len = config.effective_block_size, config.max_sequence_length
    return sorted({length for length in (2, b - 1, b, b + 1, max_len - 1, max_len) if 2 <= length <= max_len})


def verification_batches(config: BlockBertConfig, tokenizer, text: str, lengths) -> dict[int, dict[str, np.ndarray]]:
    """Per length, the model inputs of two question/context pairs tokenized as the question-answering pipeline does
    (`VERIFICATION_QUESTION` first, the context cut to fit: token types 0 then 1 with a BERT tokenizer), padded on the
    right to the length. The context is `text` repeated until it fills N tokens, so the first pair holds real text
    in every block; the second holds about half as many tokens. Lengths too short for the question take the context
    alone. A model fine-tuned on the `"question_prefixed_blocks"` window layout (`config.question_answering`) gets
    windows of that layout: the question at the start of every block."""
    if not text.strip():
        raise ValueError("The verification text is empty: give real text (e.g. a paragraph of the training data).")
    text_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    if text_tokens == 0:
        raise ValueError("The verification text has no tokens for this tokenizer: give real text.")
    context = " ".join([text.strip()] * (config.max_sequence_length // text_tokens + 2))
    question_tokens = len(tokenizer(VERIFICATION_QUESTION, add_special_tokens=False)["input_ids"])
    pair_minimum = question_tokens + tokenizer.num_special_tokens_to_add(pair=True) + 1
    layout, block_size = model_window_layout(config)
    batches = {}
    for length in lengths:
        rows = []
        for row_length in (length, max(length // 2, min(length, pair_minimum))):
            if row_length >= pair_minimum and block_size is not None:
                windows = tokenize_windows(
                    tokenizer, [VERIFICATION_QUESTION], [context], row_length, 0, layout=layout, block_size=block_size
                )
                row = {name: windows[name][0] for name in tokenizer.model_input_names if name in windows}
            elif row_length >= pair_minimum:
                row = tokenizer(VERIFICATION_QUESTION, context, truncation="only_second", max_length=row_length)
            else:
                row = tokenizer(context, truncation=True, max_length=row_length)
            rows.append({name: row[name] for name in ("input_ids", "attention_mask", TOKEN_TYPE_INPUT) if name in row})
        batch = tokenizer.pad(rows, padding="max_length", max_length=length, return_tensors="np")
        inputs = {name: np.asarray(batch[name], dtype=np.int64) for name in INPUT_NAMES}
        if TOKEN_TYPE_INPUT in input_names(config):
            # A tokenizer that makes no token types (RoBERTa's) means type 0 everywhere, as in the eager model.
            inputs[TOKEN_TYPE_INPUT] = np.asarray(batch.get(TOKEN_TYPE_INPUT, np.zeros_like(inputs["input_ids"])))
            inputs[TOKEN_TYPE_INPUT] = inputs[TOKEN_TYPE_INPUT].astype(np.int64)
        batches[length] = inputs
    return batches


def at_real_tokens(values, attention_mask):
    """The outputs of real tokens (`values[attention_mask == 1]`) for outputs with one row per token, all of `values`
    for the others (arrays or tensors): outputs at padding are not defined (docs/attention.md, "Padding"), so they are
    not compared."""
    is_real = np.asarray(attention_mask).astype(bool)
    return values[is_real] if values.shape[: is_real.ndim] == is_real.shape else values


def max_difference(model: torch.nn.Module, runner: OnnxBlockBert, batches: dict) -> dict[int, float]:
    """Largest absolute difference at real tokens between `runner` and `model` (eager) per length of
    `verification_batches`."""
    differences = {}
    for length, inputs in batches.items():
        with torch.no_grad():
            expected = model(**{name: torch.from_numpy(value) for name, value in inputs.items()}, return_dict=True)
        actual = runner(**inputs)
        mask = inputs["attention_mask"]
        differences[length] = max(
            float(np.abs(at_real_tokens(actual[name] - expected[name].numpy(), mask)).max())
            for name in runner.output_names
        )
    return differences


def check_model_folder(model_folder: Path) -> BlockBertConfig:
    """The folder's config, after checking that it is an exportable BlockBERT folder with tokenizer files (without
    loading anything from the Hub)."""
    if not model_folder.is_dir():
        raise ValueError(f"The model folder {model_folder} does not exist (or is not a folder).")
    if not (model_folder / "config.json").is_file():
        raise ValueError(f"{model_folder} has no config.json: give a folder written by model.save_pretrained.")
    missing = missing_tokenizer_files(model_folder)
    if missing is not None:
        wanted = " or ".join(" + ".join(group) for group in TOKENIZER_FILES)
        missing = f" (missing: {', '.join(missing)})" if missing else ""
        raise ValueError(
            f"{model_folder} has no tokenizer to verify the export on real text and to ship with it: it needs "
            f"{wanted}{missing}. Save the model's tokenizer beside it: tokenizer.save_pretrained(folder)."
        )
    config = AutoConfig.from_pretrained(model_folder)
    if not isinstance(config, BlockBertConfig):
        raise ValueError(f"{model_folder} holds a {type(config).__name__}, not a BlockBERT model.")
    architecture = (config.architectures or ["BlockBertModel"])[0]
    if getattr(modeling_blockbert, architecture, None) is None:
        raise ValueError(f"{model_folder}: unknown BlockBERT architecture {architecture!r} in config.json.")
    check_exportable(config, architecture)
    return config


def verification_pairs(config: BlockBertConfig, tokenizer) -> list[tuple[str, str]]:
    """`VERIFICATION_QUESTIONS` over `VERIFICATION_TEXT`, and over the text repeated to fill about two and a half
    times N tokens (several windows, every block holding text): the question/context pairs the int8 model's answers
    are checked on."""
    text_tokens = len(tokenizer(VERIFICATION_TEXT, add_special_tokens=False)["input_ids"])
    long_context = " ".join([VERIFICATION_TEXT] * max(2, math.ceil(2.5 * config.max_sequence_length / text_tokens)))
    return [(question, context) for context in (VERIFICATION_TEXT, long_context) for question in VERIFICATION_QUESTIONS]


def answer_agreement(reference_model, model, tokenizer, pairs: list[tuple[str, str]]) -> dict:
    """The answers of `model` and `reference_model` (question-answering models, PyTorch or ONNX Runtime) to `pairs`
    of (question, context) through the question-answering pipeline: how many are the same text, and the ones that
    are not."""
    questions, contexts = [question for question, _ in pairs], [context for _, context in pairs]
    # The pipeline's default overlap (up to N / 2) leaves short models no room for the questions; any is fair here.
    doc_stride = min(128, reference_model.config.max_sequence_length // 8)
    answers = []
    for qa_model in (reference_model, model):
        qa = ExtractiveQuestionAnsweringPipeline(model=qa_model, tokenizer=tokenizer)
        outputs = qa(question=questions, context=contexts, batch_size=8, doc_stride=doc_stride)
        answers.append([output["answer"] for output in (outputs if isinstance(outputs, list) else [outputs])])
    changed = [
        {"question": question, "context_characters": len(context), "fp32": expected, "int8": actual}
        for (question, context), expected, actual in zip(pairs, *answers)
        if expected != actual
    ]
    return {"pairs": len(pairs), "same_answers": len(pairs) - len(changed), "changed": changed}


def int8_report(model, folder: Path, tokenizer, batches: dict, recipe: Int8Recipe, pairs=None) -> dict:
    """What `quantization.json` records of the int8 model in `folder`: its recipe, the CPU's VNNI, its max difference
    from the eager `model` per length, and, for a question-answering model, its answers to real question/context
    pairs (`pairs`, default `verification_pairs`) against the eager model's. Changed answers are logged as a warning
    and named in the report's `warning`."""
    runner = OnnxBlockBert(folder, model.config, INT8_ONNX_FILE)
    report = {
        "file": INT8_ONNX_FILE,
        "recipe": recipe.to_dict(),
        "cpu_has_vnni": cpu_has_vnni(),
        "max_difference_per_length": max_difference(model, runner, batches),
        "answer_agreement": None,
        "warning": None,
    }
    if "start_logits" in runner.output_names:
        pairs = pairs or verification_pairs(model.config, tokenizer)
        try:
            agreement = answer_agreement(model, OnnxBlockBertForQuestionAnswering(runner), tokenizer, pairs)
        except ValueError as error:  # questions too long for the model's windows: what remains is the difference
            report["warning"] = f"The int8 model's answers were not compared: {error}"
            logger.warning(report["warning"])
            return report
        report["answer_agreement"] = agreement
        if agreement["changed"]:
            report["warning"] = (
                f"{INT8_ONNX_FILE} changes {len(agreement['changed'])} of {agreement['pairs']} answers of the fp32 "
                f"model on the verification questions (listed in {QUANTIZATION_REPORT}): measure its accuracy on your "
                "task before using it, or use model.onnx."
            )
            logger.warning(report["warning"])
    return report


def export_onnx_folder(
    model_folder: str | Path,
    output_folder: str | Path,
    text: str | None = None,
    tolerance: float = 1e-4,
    overwrite: bool = False,
    quantize: bool = False,
    recipe: Int8Recipe | None = None,
    verification_questions: list[tuple[str, str]] | None = None,
    fused_attention: bool = True,
) -> dict[int, float]:
    """Exports the model in `model_folder` to `output_folder/model.onnx` (with its config and tokenizer; attention
    fused where `fused_attention`, see `export_onnx`), after checking that ONNX Runtime matches the eager model within
    `tolerance` on question/context pairs of real text (`text`, default `VERIFICATION_TEXT`) at
    `verification_lengths` (`verification_batches`).

    With `quantize`, also writes `model_int8.onnx` (`quantize_int8` with `recipe`) and `quantization.json`
    (`int8_report`): the recipe, its max difference per length measured the same way, and for a question-answering
    model how many of its answers to real questions equal the eager model's (`verification_questions`, (question,
    context) pairs; default `verification_pairs`), with a warning (logged and in the file) when some do not.

    Returns the max difference per length. Raises `ValueError` (and writes nothing) when the folder or an argument is
    unusable, before any work, or when the check fails.
    """
    check_tolerance(tolerance)
    text = VERIFICATION_TEXT if text is None else text
    if not text.strip():
        raise ValueError("The verification text is empty: give real text or leave it out to use the built-in one.")
    model_folder, output_folder = Path(model_folder), Path(output_folder)
    config = check_model_folder(model_folder)
    if quantize:
        check_onnxruntime_version(recipe or Int8Recipe())
    if output_folder.exists() and any(output_folder.iterdir()) and not overwrite:
        raise ValueError(f"{output_folder} exists and is not empty: choose a new folder or pass --overwrite.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_folder)
    except (OSError, ValueError) as error:
        raise ValueError(f"The tokenizer files of {model_folder} do not load: {error}") from error
    tokenizer.padding_side = "right"
    batches = verification_batches(config, tokenizer, text, verification_lengths(config))
    model_class = getattr(modeling_blockbert, (config.architectures or ["BlockBertModel"])[0])
    model = model_class.from_pretrained(model_folder, attn_implementation="sdpa").eval()
    with atomic_directory(output_folder) as staging:
        export_onnx(model, staging / ONNX_FILE, fused_attention)
        runner = OnnxBlockBert(staging, model.config, ONNX_FILE)
        differences = max_difference(model, runner, batches)
        worst = max(differences.values())
        if not worst <= tolerance:
            raise ValueError(
                f"ONNX Runtime differs from the eager model by {worst:.3g} (> {tolerance:g}) on real text; per length: "
                f"{json.dumps(differences)}. Nothing was written."
            )
        if quantize:
            applied = quantize_int8(staging, recipe, calibration=batches)
            report = int8_report(model, staging, tokenizer, batches, applied, verification_questions)
            (staging / QUANTIZATION_REPORT).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        model.config.save_pretrained(staging)
        save_tokenizer(tokenizer, staging)
    return differences


def export_onnx_command(model_folder: str, output_folder: str, args: OnnxExportArguments) -> dict[int, float]:
    """`examples/export_onnx.py`: `export_onnx_folder` with the verification text read from `args.text_file`."""
    text = None
    if args.text_file is not None:
        with open_text(args.text_file) as file:
            text = file.read()
        if not text.strip():
            raise ValueError(f"--text_file {args.text_file} is empty: give a file of real text, or leave it out.")
    return export_onnx_folder(
        model_folder,
        output_folder,
        text,
        args.tolerance,
        args.overwrite,
        args.quantize,
        recipe=args.int8_recipe(),
        fused_attention=args.fused_attention,
    )
