"""Cells that start from a self-distilled encoder (`Cell.distilled_from`, a folder of `--distilled_dir`): the encoder
is copied to the cell's model folder instead of a fresh conversion of the source, with the cell's own attention fields
written into the copy's config where they differ from the encoder's. `STARTING_MODEL_FILE` in that folder records
where the weights came from; the recorded commands name the encoders' folder `$DISTILLED_DIR`."""

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from blockbert_hf.model.configuration_blockbert import BlockBertConfig, parse_heads_per_shift
from blockbert_hf.saving import atomic_directory, sha256_of_file

from .grid import Cell, ComparisonConfig
from .layout import DISTILLED_DIR_VARIABLE


STARTING_MODEL_FILE = "adapted_from.json"  # the file name existing work folders use
WEIGHTS = "model.safetensors"


def distilled_model_path(config: ComparisonConfig, cell: Cell) -> Path:
    return Path(config.distilled_dir or "") / cell.distilled_from


def check_distilled_models(config: ComparisonConfig, cells: Sequence[Cell]) -> None:
    """Refuses, before any work, cells whose distilled encoder is missing (or a run without --distilled_dir)."""
    starting = [cell for cell in cells if cell.distilled_from]
    if starting and not config.distilled_dir:
        names = ", ".join(cell.name for cell in starting)
        raise ValueError(
            f"Cells {names} start from models named by their distilled_from: pass --distilled_dir, the folder that "
            "holds the self-distilled encoders by name."
        )
    missing = sorted({c.distilled_from for c in starting if not (distilled_model_path(config, c) / WEIGHTS).is_file()})
    if missing:
        raise FileNotFoundError(
            f"{config.distilled_dir} has no distilled encoder {', '.join(missing)}: rebuild it from its committed "
            "parts (`python experiments/weight_parts.py restore ...`, results/distillation/README.md) or distil it "
            "with examples/distill_blockbert.py."
        )


def config_overrides(cell: Cell, encoder: BlockBertConfig) -> dict:
    """The attention fields the cell sets that differ from the encoder's config."""
    wanted = {
        "attention_pattern": cell.attention_pattern,
        "num_blocks": cell.num_blocks,
        "block_relative_positions": cell.block_relative_positions,
    }
    if cell.heads_per_shift:
        wanted["heads_per_shift"] = parse_heads_per_shift(cell.heads_per_shift)
    overrides = {key: value for key, value in wanted.items() if getattr(encoder, key) != value}
    if "num_blocks" in overrides and "heads_per_shift" not in overrides:
        overrides["heads_per_shift"] = None  # the default split of the new n
    if overrides.get("block_relative_positions"):
        # Positions restarting in each block: the blocks of the cell's N (a block-relative block size would
        # otherwise default to all the position rows, and N to n times them).
        overrides["block_size"] = cell.max_seq_length // cell.num_blocks
    return overrides


def _copy_config(cell: Cell, source: Path) -> tuple[BlockBertConfig, dict]:
    """The config the cell's copy gets and the overrides it holds; a `ValueError` where they do not give the cell's
    N."""
    config = BlockBertConfig.from_pretrained(source)
    overrides = config_overrides(cell, config)
    if overrides:
        fields = {**config.to_dict(), **overrides}
        if ("num_blocks" in overrides or "block_relative_positions" in overrides) and "block_size" not in overrides:
            fields["block_size"] = None  # re-derived for the new blocks
        config = BlockBertConfig.from_dict(fields)
    if config.max_sequence_length != cell.max_seq_length:
        changed = f" (with {overrides})" if overrides else ""
        raise ValueError(
            f"Cell {cell.name} has N = {cell.max_seq_length} but its distilled encoder {source} has N = "
            f"{config.max_sequence_length}{changed}: start it from an encoder of its own N."
        )
    return config, overrides


def prepare_distilled_model(config: ComparisonConfig, cell: Cell, target: Path) -> dict:
    """Copies the cell's distilled encoder to `target` (atomically) with the cell's attention fields; returns what
    `STARTING_MODEL_FILE` records."""
    source = distilled_model_path(config, cell)
    model_config, overrides = _copy_config(cell, source)
    record = {**planned_record(cell), "sha256": sha256_of_file(source / WEIGHTS), "config_overrides": overrides}
    with atomic_directory(target) as staging:
        for path in source.iterdir():
            if path.is_file() and path.name != "config.json":
                shutil.copy2(path, staging / path.name)
        (staging / STARTING_MODEL_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        model_config.save_pretrained(staging)  # config.json last: it marks the model as saved
    return record


def planned_record(cell: Cell) -> dict:
    """What `STARTING_MODEL_FILE` records, before the copy is made (its overrides not known yet)."""
    path = f"{DISTILLED_DIR_VARIABLE}/{cell.distilled_from}"
    return {"distilled": cell.distilled_from, "path": path, "config_overrides": {}}


def copy_command(record: dict, model: str) -> str:
    """The line the recorded commands give the copy (a shell comment: no script makes it)."""
    overrides = ", ".join(f"{key} {value}" for key, value in record["config_overrides"].items())
    made = (
        f"python experiments/weight_parts.py restore --manifest results/distillation/parts/{record['distilled']}"
        f".parts.json --output_dir {record['path']} ..., as results/distillation/README.md rebuilds it"
    )
    return f"# {model}: a copy of {record['path']} ({made})" + (f" with {overrides}" if overrides else "")
