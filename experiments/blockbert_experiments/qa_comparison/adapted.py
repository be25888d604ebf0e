"""Cells that start from an adapted encoder (`Cell.adapted_from`: the final model of a run of the adaptation chain,
`experiments/adaptation.py`, in `--adaptation_dir`) or a self-distilled one (`Cell.distilled_from`: a folder of
`--distilled_dir`, `examples/distill_blockbert.py`'s model or its restored bf16 parts): it is copied to the cell's model
folder instead of a fresh conversion of the source, with the cell's own attention fields written into the copy's config
where they differ from the starting model's (e.g. 12:0 fine-tuned from the weights adapted with 10:2). `ADAPTED_FILE`
in that folder records where the weights came from; the recorded commands name the folders `$ADAPTATION_DIR` and
`$DISTILLED_DIR`."""

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from blockbert_hf.model.configuration_blockbert import BlockBertConfig, parse_heads_per_shift
from blockbert_hf.saving import atomic_directory, sha256_of_file

from .grid import Cell, ComparisonConfig
from .layout import ADAPTATION_DIR_VARIABLE, DISTILLED_DIR_VARIABLE


ADAPTED_FILE = "adapted_from.json"
RUNS_DIR = "runs"  # as experiments/adaptation.py lays out its folder
FINAL_MODEL_DIR = "final_model"
WEIGHTS = "model.safetensors"


def adapted_model_path(config: ComparisonConfig, cell: Cell) -> Path:
    """The cell's starting model: its distilled encoder, or the final model of its adaptation run."""
    if cell.distilled_from:
        return Path(config.distilled_dir or "") / cell.distilled_from
    return Path(config.adaptation_dir or "") / RUNS_DIR / cell.adapted_from / FINAL_MODEL_DIR


def check_adapted_models(config: ComparisonConfig, cells: Sequence[Cell]) -> None:
    """Refuses, before any work, cells whose adaptation run has no final model or whose distilled encoder is missing
    (or a run without --adaptation_dir or --distilled_dir)."""
    option = "--distilled_dir, the folder that holds the self-distilled encoders by name"
    missing = _missing_models(config, cells, "distilled_from", config.distilled_dir, option)
    if missing:
        raise FileNotFoundError(
            f"{config.distilled_dir} has no distilled encoder {', '.join(missing)}: rebuild it from its committed "
            "parts (`python experiments/weight_parts.py restore ...`, results/distillation/README.md) or distil it "
            "with examples/distill_blockbert.py."
        )
    option = "--adaptation_dir, the output folder of experiments/adaptation.py"
    missing = _missing_models(config, cells, "adapted_from", config.adaptation_dir, option)
    if missing:
        adapted = [cell for cell in cells if cell.adapted_from]
        needed = ", ".join(f"{run} ({', '.join(c.name for c in adapted if c.adapted_from == run)})" for run in missing)
        raise FileNotFoundError(
            f"{config.adaptation_dir} has no finished adaptation run {needed}: run `python experiments/adaptation.py "
            f"--output_dir {config.adaptation_dir} --runs reference {' '.join(missing)} ...` first."
        )


def _missing_models(config: ComparisonConfig, cells: Sequence[Cell], field: str, folder: str | None, option: str):
    """The starting models (by the cells' `field`) without weights; a `ValueError` where cells need them and the
    folder that holds them (`option`) is not given."""
    starting = [cell for cell in cells if getattr(cell, field)]
    if starting and not folder:
        names = ", ".join(cell.name for cell in starting)
        raise ValueError(f"Cells {names} start from models named by their {field}: pass {option}.")
    return sorted({getattr(c, field) for c in starting if not (adapted_model_path(config, c) / WEIGHTS).is_file()})


def config_overrides(cell: Cell, adapted: BlockBertConfig) -> dict:
    """The attention fields the cell sets that differ from the adapted model's config."""
    wanted = {
        "attention_pattern": cell.attention_pattern,
        "num_blocks": cell.num_blocks,
        "block_relative_positions": cell.block_relative_positions,
    }
    if cell.heads_per_shift:
        wanted["heads_per_shift"] = parse_heads_per_shift(cell.heads_per_shift)
    overrides = {key: value for key, value in wanted.items() if getattr(adapted, key) != value}
    if "num_blocks" in overrides and "heads_per_shift" not in overrides:
        overrides["heads_per_shift"] = None  # the default split of the new n
    if overrides.get("block_relative_positions"):
        # Positions restarting in each block: the blocks of the cell's N (a block-relative block size would
        # otherwise default to all the position rows, and N to n times them).
        overrides["block_size"] = cell.max_seq_length // cell.num_blocks
    return overrides


def adapted_config(cell: Cell, source: Path) -> tuple[BlockBertConfig, dict]:
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
            f"Cell {cell.name} has N = {cell.max_seq_length} but its adapted model {source} has N = "
            f"{config.max_sequence_length}{changed}: start it from an adaptation run at its own N."
        )
    return config, overrides


def prepare_adapted_model(config: ComparisonConfig, cell: Cell, target: Path) -> dict:
    """Copies the cell's adapted model to `target` (atomically) with the cell's attention fields; returns what
    `ADAPTED_FILE` records."""
    source = adapted_model_path(config, cell)
    model_config, overrides = adapted_config(cell, source)
    record = {**planned_record(cell), "sha256": sha256_of_file(source / WEIGHTS), "config_overrides": overrides}
    with atomic_directory(target) as staging:
        for path in source.iterdir():
            if path.is_file() and path.name != "config.json":
                shutil.copy2(path, staging / path.name)
        (staging / ADAPTED_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        model_config.save_pretrained(staging)  # config.json last: it marks the model as saved
    return record


def planned_record(cell: Cell) -> dict:
    """What `ADAPTED_FILE` records, before the copy is made (its overrides not known yet)."""
    if cell.distilled_from:
        path = f"{DISTILLED_DIR_VARIABLE}/{cell.distilled_from}"
        return {"distilled": cell.distilled_from, "path": path, "config_overrides": {}}
    path = f"{ADAPTATION_DIR_VARIABLE}/{RUNS_DIR}/{cell.adapted_from}/{FINAL_MODEL_DIR}"
    return {"run": cell.adapted_from, "path": path, "config_overrides": {}}


def adapted_command(record: dict, model: str) -> str:
    """The line the recorded commands give the copy (a shell comment: no script makes it)."""
    overrides = ", ".join(f"{key} {value}" for key, value in record["config_overrides"].items())
    if "distilled" in record:
        made = (
            f"python experiments/weight_parts.py restore --manifest results/distillation/parts/{record['distilled']}"
            f".parts.json --output_dir {record['path']} ..., as results/distillation/README.md rebuilds it"
        )
    else:
        made = f"python experiments/adaptation.py --output_dir {ADAPTATION_DIR_VARIABLE} --runs {record['run']}"
    return f"# {model}: a copy of {record['path']} ({made})" + (f" with {overrides}" if overrides else "")
