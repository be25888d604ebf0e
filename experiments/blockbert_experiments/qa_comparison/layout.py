"""Where the inputs and files are: the sets' manifest, a cell's training file and folders (`CellLayout`), the source
model, and the names the recorded commands give the folders outside the repository. A cell that starts from a
self-distilled encoder (`Cell.distilled_from`, a folder of `--distilled_dir`) gets a copy of it instead of a conversion
of the source (`prepare_distilled_model`)."""

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from blockbert_hf.model.configuration_blockbert import BlockBertConfig, parse_heads_per_shift
from blockbert_hf.saving import atomic_directory, sha256_of_file
from blockbert_hf.train.qa.data import split_squad_articles

from ..minilm import MINILM_VARIABLE, installed_minilm
from .grid import HALVES, PARAGRAPHS, Cell, ComparisonConfig


MEASUREMENTS_FILE = "measurements.json"  # written by the driver once an evaluation has finished: its completion mark
# How the recorded commands name the work and data folders (shell variables: the README's commands set them).
WORK_DIR_VARIABLE = "$WORK_DIR"
DISTILLED_DIR_VARIABLE = "$DISTILLED_DIR"  # the self-distilled encoders' folder (examples/distill_blockbert.py)
DATA_DIR_VARIABLE = "$DATA_DIR"
SQUAD_DEV = "SQuAD v1.1 dev (dev-v1.1.json.gz, CC BY-SA 4.0)"
STARTING_MODEL_FILE = "adapted_from.json"  # in a distilled cell's model folder (the file name existing folders use)
WEIGHTS = "model.safetensors"


class CellLayout:
    """Where a cell's files go; `teacher_model` and `teacher_logits` are None for a cell without a task teacher."""

    def __init__(self, config: ComparisonConfig, cell: Cell):
        work, results = Path(config.work_dir), Path(config.results_dir)
        self.model = work / "models" / cell.model_name
        self.folder = work / "cells" / cell.name
        self.train = self.folder / "train"
        self.trained_model = self.train / "model"
        self.train_log = self.folder / "train_attempts.json"
        self.results = results / cell.name
        # A task-distilled cell's teacher (a cell of the same grid): its fine-tuned model, and its logits over the
        # cell's training windows, cached in fp16 (a few MB, committed with the results: a later session needs no
        # teacher weights).
        logits = f"{cell.teacher}-{cell.training_set}-N{cell.max_seq_length}-{cell.qa_objective}.safetensors"
        self.teacher_model = work / "cells" / cell.teacher / "train" / "model" if cell.teacher else None
        self.teacher_logits = results / "teacher_logits" / logits if cell.teacher else None

    def eval(self, test_set: str) -> Path:
        return self.folder / "eval" / test_set


def read_manifest(config: ComparisonConfig) -> dict:
    """The `manifest.json` of `config.data_dir`, which lists the sets (file, half, questions, target tokens)."""
    path = Path(config.data_dir) / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: build the sets first from {SQUAD_DEV} (docs/qa_long_context_data.md), e.g. "
            "`python experiments/build_long_context_qa.py --squad_file path/to/dev-v1.1.json.gz --tokenizer $MINILM "
            f"--output_dir {config.data_dir}`, or pass --data_dir."
        )
    return json.loads(path.read_text(encoding="utf-8"))


def test_set_names(config: ComparisonConfig, manifest: Mapping) -> list[str]:
    """The sets to evaluate on: the second half's and the dev articles' sets of the manifest (or `config.test_sets`),
    in manifest order; each cell is evaluated on those of its `eval_half` (`cell_sets`)."""
    available = [name for name, entry in manifest["sets"].items() if entry["half"] in HALVES]
    unknown = [name for name in config.test_sets if name not in available]
    if unknown:
        raise ValueError(f"Unknown test set(s) {unknown}: {config.data_dir} has {', '.join(available)}.")
    return [name for name in available if not config.test_sets or name in config.test_sets]


def cell_sets(manifest: Mapping, test_sets: Sequence[str], cell: Cell) -> list[str]:
    """The sets of `test_sets` a cell is evaluated on: its `eval_sets` where it names them (of any half: Stage A of the
    distillation comparison reads the dev articles before the test sets), else those of its `eval_half`."""
    if cell.eval_sets is not None:
        return [name for name in test_sets if name in cell.eval_sets]
    return [name for name in test_sets if manifest["sets"][name]["half"] == cell.eval_half]


def training_file(config: ComparisonConfig, cell: Cell, manifest: Mapping, create: bool = False) -> Path:
    """The SQuAD file a cell trains on; the paragraphs set is the first half of `squad_file` (the file the sets were
    built from, by the manifest), split on first use."""
    if cell.training_set == PARAGRAPHS:
        stem = manifest["source"]["file"].removesuffix(".gz").removesuffix(".json")
        path = Path(config.work_dir) / "data" / f"{stem}.first-half.json"
        if create and not path.is_file():
            check_squad_source(config, manifest)
            first_half, _ = split_squad_articles(config.squad_file, path.parent)
            if first_half != path:  # the same bytes under another file name
                first_half.replace(path)
        return path
    if cell.training_set not in manifest["sets"]:
        raise ValueError(
            f"Cell {cell.name} trains on {cell.training_set}, which {config.data_dir} does not have: build it with "
            f"--train_lengths {cell.max_seq_length}."
        )
    return Path(config.data_dir) / manifest["sets"][cell.training_set]["file"]


def check_squad_source(config: ComparisonConfig, manifest: Mapping) -> None:
    """The paragraphs set must come from the file the other sets were built from (same article halves): `squad_file`,
    given and with the sha256 the manifest records."""
    source = manifest["source"]["file"]
    if config.squad_file is None:
        raise FileNotFoundError(
            f"The paragraphs cell trains on the first half of {source}, the file {config.data_dir} was built from: "
            f"pass it as --squad_file (for the committed sets, {SQUAD_DEV}: --squad_file path/to/dev-v1.1.json.gz)."
        )
    path = Path(config.squad_file)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: pass --squad_file, the SQuAD file the sets were built from.")
    expected = manifest["source"]["sha256"]
    if sha256_of_file(path) != expected:
        raise ValueError(f"{path} is not the file {config.data_dir} was built from (sha256 {expected[:12]}...).")


def resolve_source_model(config: ComparisonConfig) -> Path:
    """`config.source_model`, or the model folder of the installed all-MiniLM-L6-v2 package (checked by sha256)."""
    if config.source_model:
        path = Path(config.source_model)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"--source_model {path} is not a model folder (no config.json).")
        return path
    return installed_minilm()


def recorded_names(config: ComparisonConfig, source: Path) -> dict[str, Path]:
    """The folders the recorded commands name rather than give (`recorded_command`): the work folder, the data
    folder, the self-distilled encoders' folder, and the installed all-MiniLM-L6-v2 when it is the source."""
    names = {WORK_DIR_VARIABLE: Path(config.work_dir), DATA_DIR_VARIABLE: Path(config.data_dir)}
    if config.distilled_dir:
        names[DISTILLED_DIR_VARIABLE] = Path(config.distilled_dir)
    if not config.source_model:
        names[MINILM_VARIABLE] = source
    return names


def check_distilled_models(config: ComparisonConfig, cells: Sequence[Cell]) -> None:
    """Refuses, before any work, cells whose distilled encoder is missing (or a run without --distilled_dir)."""
    starting = [cell for cell in cells if cell.distilled_from]
    if starting and not config.distilled_dir:
        names = ", ".join(cell.name for cell in starting)
        raise ValueError(
            f"Cells {names} start from models named by their distilled_from: pass --distilled_dir, the folder that "
            "holds the self-distilled encoders by name."
        )
    folder = Path(config.distilled_dir or "")
    missing = sorted({c.distilled_from for c in starting if not (folder / c.distilled_from / WEIGHTS).is_file()})
    if missing:
        raise FileNotFoundError(
            f"{config.distilled_dir} has no distilled encoder {', '.join(missing)}: rebuild it from its committed "
            "parts (`python experiments/weight_parts.py restore ...`, results/distillation/README.md) or distil it "
            "with examples/distill_blockbert.py."
        )


def prepare_distilled_model(config: ComparisonConfig, cell: Cell, target: Path) -> dict:
    """Copies the cell's distilled encoder to `target` (atomically) with the cell's attention fields where they differ
    from the encoder's (a `ValueError` where they do not give the cell's N); returns what `STARTING_MODEL_FILE`
    records."""
    source = Path(config.distilled_dir or "") / cell.distilled_from
    model_config = BlockBertConfig.from_pretrained(source)
    wanted = {key: getattr(cell, key) for key in ("attention_pattern", "num_blocks", "block_relative_positions")}
    if cell.heads_per_shift:
        wanted["heads_per_shift"] = parse_heads_per_shift(cell.heads_per_shift)
    overrides = {key: value for key, value in wanted.items() if getattr(model_config, key) != value}
    if "num_blocks" in overrides and "heads_per_shift" not in overrides:
        overrides["heads_per_shift"] = None  # the default split of the new n
    if overrides.get("block_relative_positions"):
        # Positions restarting in each block: the blocks of the cell's N (a block-relative block size would
        # otherwise default to all the position rows, and N to n times them).
        overrides["block_size"] = cell.max_seq_length // cell.num_blocks
    if overrides:
        fields = {**model_config.to_dict(), **overrides}
        if ("num_blocks" in overrides or "block_relative_positions" in overrides) and "block_size" not in overrides:
            fields["block_size"] = None  # re-derived for the new blocks
        model_config = BlockBertConfig.from_dict(fields)
    if model_config.max_sequence_length != cell.max_seq_length:
        changed = f" (with {overrides})" if overrides else ""
        raise ValueError(
            f"Cell {cell.name} has N = {cell.max_seq_length} but its distilled encoder {source} has N = "
            f"{model_config.max_sequence_length}{changed}: start it from an encoder of its own N."
        )
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


def is_saved_model(folder: Path) -> bool:
    """Whether a model was saved there: `config.json` is written last by the atomic save."""
    return (folder / "config.json").is_file()


def missing_keys(value: object, keys: Mapping[str, Mapping | None], prefix: str = "") -> list[str]:
    """The dotted names of `keys` (nested; None: a value) that `value` lacks, checked before a results file is
    indexed."""
    if not isinstance(value, Mapping):
        return [prefix.rstrip(".") or "everything (not a JSON object)"]
    missing = []
    for key, inner in keys.items():
        if key not in value:
            missing.append(prefix + key)
        elif inner is not None:
            missing += missing_keys(value[key], inner, f"{prefix}{key}.")
    return missing


def read_json(path: Path):
    """The JSON document in `path`, or None where the file does not exist (yet)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
