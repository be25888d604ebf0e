"""The conversion report (`conversion_summary`, printed with `format_report`), the output folder's checks
(`check_output_dir`) and the atomic save of model, tokenizer and `conversion_report.json` (`save_converted`, which
names local inputs by their base names: the folder ships the report, the paths are the converting machine's)."""

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ..model.modeling_blockbert import BlockBertModel
from ..saving import atomic_directory, check_output_keeps_inputs, save_tokenizer
from ..train.model_card import conversion_model_card, is_hub_id, write_model_card
from .errors import ConversionError
from .verification import TextCoverage, VerificationCheck
from .weights import ConvertedCheckpoint


REPORT_FILE = "conversion_report.json"


def conversion_summary(
    converted: ConvertedCheckpoint,
    checks: Sequence[VerificationCheck] | None,
    text_coverage: TextCoverage | None = None,
) -> dict:
    """What was converted and how it verified, for the report printed and saved as `conversion_report.json`."""
    config = converted.config
    summary = {
        "source": str(converted.source),
        "source_model_type": converted.source_model_type,
        "source_architecture": converted.source_architecture,
        "tokenizer": {
            "source": str(converted.tokenizer_source),
            "class": type(converted.tokenizer).__name__,
            "size": len(converted.tokenizer),
        },
        "target_class": type(converted.model).__name__,
        "parameters": converted.model.num_parameters(),
        "source_sequence_length": converted.source_sequence_length,
        "sequence_length": config.max_sequence_length,
        "num_blocks": config.num_blocks,
        "block_size": config.effective_block_size,
        "heads_per_shift": config.heads_per_shift,
        "attention_pattern": config.attention_pattern,
        "position_embedding_style": config.position_embedding_style,
        "block_relative_positions": config.block_relative_positions,
        "hidden_act": config.hidden_act,
        "layer_norm_eps": config.layer_norm_eps,
        "type_vocab_size": config.type_vocab_size,
        "pad_token_id": config.pad_token_id,
        "tensors_copied": len(converted.copied),
        "extended": converted.extended,
        "initialised": converted.initialised,
        "dropped": converted.dropped,
        "notes": converted.notes,
    }
    if text_coverage is not None:
        summary["verification_text"] = {
            "words": text_coverage.words,
            "tokens": text_coverage.tokens,
            "unknown_tokens": text_coverage.unknown,
        }
    if checks is not None:
        summary["verification"] = [
            {
                "check": c.name,
                "max_abs_diff": c.max_abs_diff,
                "tolerance": c.tolerance,
                "passed": c.passed,
                "lengths": c.lengths,
            }
            for c in checks
        ]
    return summary


def format_report(summary: dict) -> str:
    s = summary
    extended = "".join(f"; {name} {src} -> {dst} (rows repeated)" for name, (src, dst) in s["extended"].items())
    lines = [
        f"source: {s['source']} ({s['source_model_type']}, {s['source_architecture']})",
        f"target: {s['target_class']}, {s['parameters']:,} parameters, {s['position_embedding_style']} positions, "
        f"hidden_act {s['hidden_act']}, layer_norm_eps {s['layer_norm_eps']}, type_vocab_size {s['type_vocab_size']}, "
        f"pad id {s['pad_token_id']}",
        f"N: {s['source_sequence_length']} -> {s['sequence_length']}; n = {s['num_blocks']} blocks of "
        f"b = {s['block_size']}, heads per shift {s['heads_per_shift']}, attention_pattern {s['attention_pattern']}"
        + ("; block-relative positions (restart at every block)" if s.get("block_relative_positions") else ""),
        f"tensors: {s['tensors_copied']} copied one to one{extended}",
        f"tokenizer: {s['tokenizer']['class']} from {s['tokenizer']['source']}, {s['tokenizer']['size']:,} tokens",
    ]
    if summary["dropped"]:
        lines.append(f"dropped on request: {', '.join(summary['dropped'])}")
    lines.extend(f"note: {note}" for note in summary["notes"])
    if "verification_text" in summary:
        text = summary["verification_text"]
        lines.append(
            f"verification text: {text['words']:,} words -> {text['tokens']:,} tokens, "
            f"{text['unknown_tokens']} unknown ({text['unknown_tokens'] / max(text['tokens'], 1):.1%})"
        )
    for check in summary.get("verification", []):
        verdict = "reported" if check["tolerance"] is None else ("PASS" if check["passed"] else "FAIL")
        limit = "" if check["tolerance"] is None else f" (limit {check['tolerance']:.0e})"
        lines.append(
            f"verify {check['check']}: max |diff| = {check['max_abs_diff']:.2e}{limit} {verdict}; "
            f"{len(check['lengths'])} inputs of {min(check['lengths'])}-{max(check['lengths'])} tokens"
        )
    return "\n".join(lines)


def check_output_dir(
    output_dir: str | os.PathLike, inputs: Mapping[str, str | os.PathLike | None], overwrite: bool = False
) -> None:
    """Refuses, before any work, an OUTPUT_DIR the conversion must not or cannot write: one that is or holds one of
    `inputs` (option name -> path; `OutputOverwritesInputError`, with or without `overwrite`), a non-empty folder
    without `overwrite`, a file, or a folder under one this user cannot write to (`ConversionError`). Not
    `blockbert_hf.train.runs.check_output_dir`: a conversion writes one folder once, with no run arguments to compare
    or checkpoints to resume, and needs no `train` extra; both refuse inputs with `check_output_keeps_inputs`."""
    output_dir = Path(output_dir)
    check_output_keeps_inputs(output_dir, inputs, output_name="OUTPUT_DIR")
    if output_dir.exists() and not output_dir.is_dir():
        raise ConversionError(f"OUTPUT_DIR {output_dir} is a file; choose a folder.")
    if output_dir.is_dir() and any(output_dir.iterdir()) and not overwrite:
        raise ConversionError(f"{output_dir} exists and is not empty; pass --overwrite_output_dir to replace it.")
    parent = Path(os.path.realpath(output_dir)).parent  # a symlinked OUTPUT_DIR is written where it points
    while not parent.exists():  # the folders the write would create
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConversionError(f"OUTPUT_DIR {output_dir} cannot be written: {parent} is not a folder you can write to.")


def recorded_name(source: str | os.PathLike) -> str:
    """How a shipped file names an input: a local file or folder by its base name (as the model cards do), a Hub id
    as given."""
    return Path(source).resolve().name if os.path.exists(source) else str(source)


def shipped_summary(summary: dict) -> dict:
    """`summary` as `conversion_report.json` records it: its inputs by `recorded_name`."""
    tokenizer = {**summary["tokenizer"], "source": recorded_name(summary["tokenizer"]["source"])}
    return {**summary, "source": recorded_name(summary["source"]), "tokenizer": tokenizer}


def save_converted(
    converted: ConvertedCheckpoint,
    output_dir: str | os.PathLike,
    summary: dict,
    overwrite: bool = False,
    base_model: str | None = None,
) -> Path:
    """Writes model (weights, config, code for `trust_remote_code`), tokenizer (`model_max_length = N`),
    `conversion_report.json` (`shipped_summary`) and the model card `README.md` into one atomic folder; the folder is
    reloaded first to check the saved weights. The card's `base_model` is `base_model`, else the source where it is a
    Hub id; a local source without a known Hub id gets none. `output_dir` is checked as `check_output_dir` does."""
    output_dir = Path(output_dir)
    base_model = base_model or (str(converted.source) if is_hub_id(str(converted.source)) else None)
    check_output_dir(
        output_dir, {"SOURCE": converted.source, "--tokenizer_name": converted.tokenizer_source}, overwrite
    )
    model = converted.model
    try:
        with atomic_directory(output_dir) as staging:
            model.save_pretrained(staging)
            save_tokenizer(converted.tokenizer, staging)
            (staging / REPORT_FILE).write_text(json.dumps(shipped_summary(summary), indent=2) + "\n")
            card = conversion_model_card(shipped_summary(summary), model.config, output_dir.resolve().name, base_model)
            write_model_card(card, staging)
            kwargs = {"add_pooling_layer": model.pooler is not None} if isinstance(model, BlockBertModel) else {}
            reloaded = type(model).from_pretrained(staging, **kwargs)
            expected = model.state_dict()
            for name, tensor in reloaded.state_dict().items():
                if not torch.equal(tensor, expected[name]):
                    raise ConversionError(
                        f"The saved checkpoint does not reload {name} unchanged; nothing was written."
                    )
    except OSError as error:  # e.g. a full disk: the atomic write left nothing behind
        raise ConversionError(f"Could not write {output_dir}: {error}; nothing was written.") from error
    return output_dir
