"""Where the inputs and files are: the sets' manifest, a cell's training file and folders (`CellLayout`), the source
model, and the names the recorded commands give the folders outside the repository."""

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from blockbert_hf.saving import sha256_of_file
from blockbert_hf.train.qa.data import split_squad_articles

from ..minilm import MINILM_VARIABLE, installed_minilm
from .grid import HALVES, PARAGRAPHS, Cell, ComparisonConfig


MEASUREMENTS_FILE = "measurements.json"  # written by the driver once an evaluation has finished: its completion mark
# How the recorded commands name the work and data folders (shell variables: the README's commands set them).
WORK_DIR_VARIABLE = "$WORK_DIR"
DISTILLED_DIR_VARIABLE = "$DISTILLED_DIR"  # the self-distilled encoders' folder (examples/distill_blockbert.py)
DATA_DIR_VARIABLE = "$DATA_DIR"
SQUAD_DEV = "SQuAD v1.1 dev (dev-v1.1.json.gz, CC BY-SA 4.0)"


@dataclass
class CellLayout:
    """Where a cell's files go."""

    config: ComparisonConfig
    cell: Cell

    @property
    def model(self) -> Path:
        return Path(self.config.work_dir) / "models" / self.cell.model_name

    @property
    def train(self) -> Path:
        return Path(self.config.work_dir) / "cells" / self.cell.name / "train"

    @property
    def trained_model(self) -> Path:
        return self.train / "model"

    @property
    def train_log(self) -> Path:
        return Path(self.config.work_dir) / "cells" / self.cell.name / "train_attempts.json"

    def eval(self, test_set: str) -> Path:
        return Path(self.config.work_dir) / "cells" / self.cell.name / "eval" / test_set

    @property
    def results(self) -> Path:
        return Path(self.config.results_dir) / self.cell.name

    @property
    def teacher_model(self) -> Path | None:
        """The fine-tuned model of a task-distilled cell's teacher (a cell of the same grid)."""
        if not self.cell.teacher:
            return None
        return Path(self.config.work_dir) / "cells" / self.cell.teacher / "train" / "model"

    @property
    def teacher_logits(self) -> Path | None:
        """Where a task-distilled cell's teacher logits are cached (fp16, a few MB, committed with the results so that
        a later session needs no teacher weights): one file per teacher and training windows."""
        if not self.cell.teacher:
            return None
        windows = f"{self.cell.training_set}-N{self.cell.max_seq_length}-{self.cell.qa_objective}"
        return Path(self.config.results_dir) / "teacher_logits" / f"{self.cell.teacher}-{windows}.safetensors"


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


def command_path(path: Path) -> str:
    """A path as the steps are given it: relative to the current folder where possible."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


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
