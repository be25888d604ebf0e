"""Exporting BlockBERT: `torch.export` programs and ONNX files valid for every batch size and every length up to N.

A traced BlockBERT always lays attention out as `n` blocks of `b` tokens (docs/attention.md, "Tracing and export"), so
one program serves every length. A program cannot raise on tensor values, so inputs are checked on the host:
`check_inputs` before every call (`OnnxBlockBert` does it for you).

ONNX needs the `export` extra (`pip install blockbert-hf[export]`: onnx, onnxscript, onnxruntime).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.export import Dim
from transformers import AutoConfig, AutoTokenizer

from . import modeling_blockbert
from .configuration_blockbert import BlockBertConfig
from .saving import atomic_directory, open_text


INPUT_NAMES = ("input_ids", "attention_mask")
ONNX_FILE = "model.onnx"
# The text `export_onnx_folder` verifies on when no other is given: real prose, tokenized and cut to each length.
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
        default=None, metadata={"help": "UTF-8 text to verify the export on (default: a built-in English paragraph)"}
    )
    tolerance: float = field(default=1e-4, metadata={"help": "largest difference from the eager model allowed"})
    overwrite: bool = field(default=False, metadata={"help": "replace a non-empty output folder"})


def check_inputs(config: BlockBertConfig, input_ids, attention_mask=None) -> None:
    """The checks an exported program cannot make (docs/attention.md, "Inputs"), on torch tensors or numpy arrays:
    `(batch, L)` ids with `1 <= L <= N`, a mask of the same shape padded on the right. Raises a clear `ValueError`."""
    input_ids = np.asarray(input_ids)
    if input_ids.ndim != 2:
        raise ValueError(
            f"input_ids has shape {input_ids.shape}; expected (batch_size, sequence_length). For a single sequence "
            "add the batch dimension (input_ids[None])."
        )
    seq_len, max_len = input_ids.shape[1], config.max_sequence_length
    if not 1 <= seq_len <= max_len:
        raise ValueError(
            f"The input has L = {seq_len} tokens but this model takes 1 to N = {max_len}: truncate the input "
            f"(tokenizer(..., truncation=True, max_length={max_len}))."
        )
    if attention_mask is None:
        return
    is_real = np.asarray(attention_mask).astype(bool)
    if is_real.shape != input_ids.shape:
        raise ValueError(f"attention_mask has shape {is_real.shape}, expected input_ids' shape {input_ids.shape}.")
    left_padded = (is_real[:, 1:] & ~is_real[:, :-1]).any(axis=1)
    if left_padded.any():
        raise ValueError(
            f"attention_mask rows {np.flatnonzero(left_padded).tolist()} have padding before a real token. BlockBERT "
            "expects right padding: use tokenizer.padding_side = 'right'."
        )


def dynamic_shapes(config: BlockBertConfig) -> dict:
    """Dynamic batch size and sequence length (1 to N) for `input_ids` and `attention_mask`."""
    batch = Dim("batch", min=1, max=1 << 16)
    sequence = Dim("sequence", min=1, max=config.max_sequence_length)
    return {name: {0: batch, 1: sequence} for name in INPUT_NAMES}


class ExportableBlockBert(torch.nn.Module):
    """Wraps a BlockBERT model as `(input_ids, attention_mask) -> tuple of tensors`, in the order of `output_names`
    (an exported program and an ONNX graph take and return plain tensors)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model.eval()
        with torch.no_grad():
            example = self.model(**example_inputs(model.config), return_dict=True)
        self.output_names = [name for name, value in example.items() if isinstance(value, torch.Tensor)]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return tuple(outputs[name] for name in self.output_names)


def example_inputs(config: BlockBertConfig, batch_size: int = 2, seq_len: int | None = None) -> dict:
    """Right-padded example inputs for tracing (a length that is neither 1 nor N, so neither gets specialised)."""
    seq_len = seq_len or max(2, config.max_sequence_length // 2 + 1)
    first_real = 3 if config.vocab_size > 3 else 0
    input_ids = torch.arange(batch_size * seq_len).reshape(batch_size, seq_len) % (config.vocab_size - first_real)
    input_ids = input_ids + first_real
    attention_mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    attention_mask[1:, seq_len // 2 :] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, config.pad_token_id)
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def export_program(model: torch.nn.Module) -> torch.export.ExportedProgram:
    """`torch.export` of a BlockBERT model (any head) with dynamic batch size and sequence length; the program takes
    `input_ids` and `attention_mask` and returns the model's output."""
    model = model.eval()
    with torch.no_grad():
        return torch.export.export(
            model, (), example_inputs(model.config), dynamic_shapes=dynamic_shapes(model.config), strict=False
        )


def export_onnx(model: torch.nn.Module, path: str | Path) -> list[str]:
    """Writes `model` as an ONNX file with dynamic batch size and sequence length; returns its output names."""
    wrapper = ExportableBlockBert(model)
    inputs = example_inputs(model.config)
    with torch.no_grad():
        program = torch.onnx.export(
            wrapper,
            (inputs["input_ids"], inputs["attention_mask"]),
            input_names=list(INPUT_NAMES),
            output_names=wrapper.output_names,
            dynamic_shapes=tuple(dynamic_shapes(model.config).values()),
            dynamo=True,
            verbose=False,
        )
    program.save(str(path))
    return wrapper.output_names


class OnnxBlockBert:
    """Runs an exported BlockBERT with ONNX Runtime after checking its inputs on the host (length <= N, right
    padding): `OnnxBlockBert(folder)(input_ids, attention_mask)` -> `{output name: numpy array}`."""

    def __init__(self, folder: str | Path, config: BlockBertConfig | None = None):
        import onnxruntime

        folder = Path(folder)
        self.config = config or AutoConfig.from_pretrained(folder)
        self.session = onnxruntime.InferenceSession(str(folder / ONNX_FILE), providers=["CPUExecutionProvider"])
        self.output_names = [output.name for output in self.session.get_outputs()]

    def __call__(self, input_ids, attention_mask=None) -> dict[str, np.ndarray]:
        input_ids = np.asarray(input_ids, dtype=np.int64)
        attention_mask = np.ones_like(input_ids) if attention_mask is None else np.asarray(attention_mask, np.int64)
        check_inputs(self.config, input_ids, attention_mask)
        outputs = self.session.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
        return dict(zip(self.output_names, outputs))


def verification_lengths(config: BlockBertConfig) -> list[int]:
    """Lengths around the block boundaries and the limit: 2, b - 1, b, b + 1, N - 1, N (those within 2..N)."""
    b, max_len = config.effective_block_size, config.max_sequence_length
    return sorted({length for length in (2, b - 1, b, b + 1, max_len - 1, max_len) if 2 <= length <= max_len})


def max_difference(model: torch.nn.Module, runner: OnnxBlockBert, tokenizer, text: str, lengths) -> dict[int, float]:
    """Largest absolute difference between `runner` and `model` (eager) per length, on `text` tokenized and cut to
    each length, batched with a shorter right-padded copy."""
    words = text.split()
    differences = {}
    for length in lengths:
        texts = [" ".join(words[: len(words) // 2 + 1]), " ".join(words[: len(words) // 4 + 1])]
        batch = tokenizer(texts, truncation=True, max_length=length, padding="max_length", return_tensors="np")
        with torch.no_grad():
            expected = model(
                input_ids=torch.from_numpy(batch["input_ids"]),
                attention_mask=torch.from_numpy(batch["attention_mask"]),
                return_dict=True,
            )
        actual = runner(batch["input_ids"], batch["attention_mask"])
        differences[length] = max(
            float(np.abs(actual[name] - expected[name].numpy()).max()) for name in runner.output_names
        )
    return differences


def _load_model(model_folder: Path) -> torch.nn.Module:
    config = AutoConfig.from_pretrained(model_folder)
    if not isinstance(config, BlockBertConfig):
        raise ValueError(f"{model_folder} holds a {type(config).__name__}, not a BlockBERT model.")
    architecture = (config.architectures or ["BlockBertModel"])[0]
    model_class = getattr(modeling_blockbert, architecture, None)
    if model_class is None:
        raise ValueError(f"{model_folder}: unknown BlockBERT architecture {architecture!r} in config.json.")
    return model_class.from_pretrained(model_folder, attn_implementation="sdpa").eval()


def export_onnx_folder(
    model_folder: str | Path,
    output_folder: str | Path,
    text: str | None = None,
    tolerance: float = 1e-4,
    overwrite: bool = False,
) -> dict[int, float]:
    """Exports the model in `model_folder` to `output_folder/model.onnx` (with its config and tokenizer), after
    checking that ONNX Runtime matches the eager model within `tolerance` on real text at `verification_lengths`.

    Returns the max difference per length. Raises `ValueError` (and writes nothing) when the check fails.
    """
    model_folder, output_folder = Path(model_folder), Path(output_folder)
    if output_folder.exists() and any(output_folder.iterdir()) and not overwrite:
        raise ValueError(f"{output_folder} exists and is not empty: choose a new folder or pass --overwrite.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_folder)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{model_folder} has no tokenizer to verify the export on real text; save one beside the model "
            "(tokenizer.save_pretrained(folder))."
        ) from error
    tokenizer.padding_side = "right"
    model = _load_model(model_folder)
    with atomic_directory(output_folder) as staging:
        export_onnx(model, staging / ONNX_FILE)
        runner = OnnxBlockBert(staging, model.config)
        lengths = verification_lengths(model.config)
        differences = max_difference(model, runner, tokenizer, text or VERIFICATION_TEXT * 8, lengths)
        worst = max(differences.values())
        if not worst <= tolerance:
            raise ValueError(
                f"ONNX Runtime differs from the eager model by {worst:.3g} (> {tolerance:g}) on real text; per length: "
                f"{json.dumps(differences)}. Nothing was written."
            )
        model.config.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return differences


def export_onnx_command(model_folder: str, output_folder: str, args: OnnxExportArguments) -> dict[int, float]:
    """`examples/export_onnx.py`: `export_onnx_folder` with the verification text read from `args.text_file`."""
    text = None
    if args.text_file is not None:
        with open_text(args.text_file) as file:
            text = file.read()
    return export_onnx_folder(model_folder, output_folder, text, args.tolerance, args.overwrite)
