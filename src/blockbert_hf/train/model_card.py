"""Hub model cards of the models that `examples/run_qa.py` and `examples/run_mlm.py` train, as transformers'
`Trainer.create_model_card` writes them: `README.md` in the saved model folder, built from what the run itself knows
(its arguments, its final evaluation, its metrics log, the model's configuration); and the card of a folder
`examples/convert_roberta_to_blockbert.py` converted (`conversion_model_card`). Lineage: a card's `base_model` is the
starting model's Hub id, or for a local folder the Hub model the folder's own card records (`lineage_base_model`).

The YAML is written by `huggingface_hub.ModelCardData`, with the run's own evaluation as `EvalResult`s in its
`model-index` (only when there is one), and the card is parsed back by `huggingface_hub.ModelCard` before it is
written, so a card the Hub could not read is never saved. A card is meant to be published: it names local data files
and a local starting checkpoint by their base names only, never by a path of the machine that trained it.
"""

import importlib.metadata
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..saving import write_file_atomically
from .hub import HUB_DATASETS, is_hub_id


CARD_FILE = "README.md"
# The weights' terms follow the starting model's and the data's, which a run cannot check: "other" until --license.
DEFAULT_LICENSE = "other"
MAX_LOG_ROWS = 20  # rows of a card's training-results table; metrics.jsonl beside the run holds every logged step
FRAMEWORKS = ("blockbert-hf", "transformers", "torch", "accelerate", "datasets", "tokenizers")
# pipeline tag -> (task name of the model-index, the script that trains such a model)
TASKS = {
    "question-answering": ("Extractive question answering", "examples/run_qa.py"),
    "fill-mask": ("Masked language modeling", "examples/run_mlm.py"),
    "feature-extraction": ("Self-distillation from full attention", "examples/distill_blockbert.py"),
}

CITATION = """```bibtex
@inproceedings{qiu-etal-2020-blockwise,
  title = "Blockwise Self-Attention for Long Document Understanding",
  author = "Qiu, Jiezhong and Ma, Hao and Levy, Omer and Yih, Wen-tau and Wang, Sinong and Tang, Jie",
  booktitle = "Findings of the Association for Computational Linguistics: EMNLP 2020",
  year = "2020",
  pages = "2555--2565",
  publisher = "Association for Computational Linguistics",
  doi = "10.18653/v1/2020.findings-emnlp.232",
}
```
"""


# ---------------------------------------------------------------------------------------------------------------------
# Assembling, checking and writing a card
# ---------------------------------------------------------------------------------------------------------------------


def assemble_card(data: ModelCardData, body: str) -> ModelCard:
    """The card as the Hub reads it: YAML from `ModelCardData`, parsed back (and so checked) by `ModelCard`."""
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body.strip()}\n")


def write_model_card(card: ModelCard, model_dir: str | os.PathLike) -> Path:
    """Writes `model_dir/README.md` atomically once its text parses back as a Hub card; returns its path."""
    content = str(card)
    ModelCard(content)  # raises on YAML or a model-index the Hub could not read: such a card is never saved
    path = Path(model_dir) / CARD_FILE
    write_file_atomically(path, content)
    return path


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def recorded_base_model(folder: str | os.PathLike | None) -> str | None:
    """The Hub model a local model folder derives from, as its own card records it (`base_model`, e.g. the source a
    converted folder was made from), or None: a folder without a card, or whose card names no Hub id."""
    if not folder or not (Path(folder) / CARD_FILE).is_file():
        return None
    try:
        base_model = ModelCard.load(Path(folder) / CARD_FILE).data.base_model
    except Exception:  # a card the Hub could not read names nothing
        return None
    if isinstance(base_model, list):
        base_model = base_model[0] if len(base_model) == 1 else None
    return base_model if isinstance(base_model, str) and is_hub_id(base_model) else None


def lineage_base_model(starting_model: str | None) -> str | None:
    """The `base_model` of a model trained from `starting_model`: its Hub id, or for a local folder the Hub model its
    card records (converted and adapted folders carry it), never an id made up for a local folder."""
    if is_hub_id(starting_model):
        return starting_model
    return recorded_base_model(starting_model)


@dataclass(frozen=True)
class DataSource:
    """Training or evaluation data as a card names it: a Hub dataset by id (config, split), or local files by base
    name. `detail` says how much of it was used, e.g. "61 questions"."""

    hub_id: str | None = None
    config: str | None = None
    split: str | None = None
    files: tuple[str, ...] = ()
    detail: str | None = None

    @classmethod
    def local(cls, paths: Sequence[str | os.PathLike], detail: str | None = None) -> "DataSource":
        return cls(files=tuple(Path(path).name for path in paths), detail=detail)

    @classmethod
    def named(cls, name: str, config: str | None, split: str | None, detail: str | None = None) -> "DataSource":
        """A dataset given by name: a local path (which `datasets` and the QA loader also take) or a Hub id."""
        if os.path.exists(name):
            return cls.local([name], detail)
        return cls(hub_id=name, config=config, split=split, detail=detail)

    @property
    def name(self) -> str:
        if not self.hub_id:
            return ", ".join(self.files)
        return f"{self.hub_id} ({self.config})" if self.config else self.hub_id

    def describe(self) -> str:
        if self.hub_id:
            text = f"[{self.name}](https://huggingface.co/datasets/{self.hub_id})"
            text += f", split `{self.split}`" if self.split else ""
        else:
            names = ", ".join(f"`{name}`" for name in self.files)
            text = f"the local file{'s' if len(self.files) > 1 else ''} {names}"
        return text + (f" ({self.detail})" if self.detail else "")


@dataclass
class RunDescription:
    """What a card says about a finished run. `evaluation`: metric type -> (display name, value)."""

    pipeline_tag: str
    name: str
    model_config: object
    starting_model: str | None  # --model_name_or_path; None: trained from scratch
    train_data: DataSource
    eval_data: DataSource | None
    evaluation: Mapping[str, tuple[str, float]]
    hyperparameters: Mapping[str, object]
    training_log: Sequence[Mapping]
    license: str = DEFAULT_LICENSE


def build_model_card(run: RunDescription) -> ModelCard:
    """The card of a finished run: YAML metadata (a model-index only with an evaluation) and the text below it."""
    task_name, script = TASKS[run.pipeline_tag]
    base_model = lineage_base_model(run.starting_model)
    is_blockbert = getattr(run.model_config, "model_type", None) == "blockbert"
    eval_results = [
        EvalResult(
            task_type=run.pipeline_tag,
            task_name=task_name,
            dataset_type=run.eval_data.hub_id or run.eval_data.name,
            dataset_name=run.eval_data.name,
            dataset_config=run.eval_data.config,
            dataset_split=run.eval_data.split,
            metric_type=metric,
            metric_name=display,
            metric_value=value,
        )
        for metric, (display, value) in run.evaluation.items()
    ]
    data = ModelCardData(
        model_name=run.name,
        base_model=base_model,
        license=run.license,
        library_name="transformers",
        pipeline_tag=run.pipeline_tag,
        tags=["blockbert-hf", *(["blockbert", "blockwise-attention"] if is_blockbert else [])],
        datasets=[run.train_data.hub_id] if run.train_data.hub_id else None,  # Hub datasets only: no dead links
        metrics=list(run.evaluation) or None,
        eval_results=eval_results or None,
    )
    hyperparameters = "\n".join(f"- {key}: {value}" for key, value in run.hyperparameters.items())
    body = f"""
<!-- Written by blockbert-hf's {script} from the run's arguments, evaluation and metrics.jsonl. -->

# {run.name}

{_introduction(run, base_model)}

{_results_text(run)}

## Model

{markdown_table(["", ""], model_rows(run.model_config))}
## How to use

{_usage(run)}
## Training procedure

### Hyperparameters

{hyperparameters}

### Training results

{_training_results(run.training_log)}
### Framework versions

{_framework_versions()}

## Citation

BlockBERT: "Blockwise Self-Attention for Long Document Understanding", Qiu et al., Findings of EMNLP 2020.

{CITATION}"""
    return assemble_card(data, body)


def _introduction(run: RunDescription, base_model: str | None) -> str:
    data = run.train_data.describe()
    if run.pipeline_tag == "question-answering":
        what, further = f"fine-tuned for extractive question answering on {data}", ""
    elif run.pipeline_tag == "feature-extraction":
        what = (
            "distilled into its blockwise self: trained to reproduce, layer by layer, the hidden states that the same "
            "weights compute with full attention (sliding windows of the teacher's N where inputs are longer), on "
            f"{data}"
        )
        further = ""
    else:
        what, further = f"pre-trained as a masked language model on {data}", "further "
    if base_model and is_hub_id(run.starting_model):
        return f"This model is [{base_model}](https://huggingface.co/{base_model}) {further}{what}."
    if run.starting_model:
        folder = Path(run.starting_model).resolve().name  # its name only: the path is the training machine's
        derived = f", which derives from [{base_model}](https://huggingface.co/{base_model})" if base_model else ""
        return f"This model was {what}, starting from a local checkpoint (`{folder}`{derived})."
    return f"This model was {what}, starting from random weights."


def _results_text(run: RunDescription) -> str:
    if not run.evaluation:
        return "The run that trained it did not evaluate it."
    results = "\n".join(f"- {display}: {value:.4f}" for display, value in run.evaluation.values())
    return f"It achieves the following results on {run.eval_data.describe()}:\n\n{results}"


def model_rows(config) -> list[list[object]]:
    rows = [["architecture", (getattr(config, "architectures", None) or [type(config).__name__])[0]]]
    if all(hasattr(config, key) for key in ("num_hidden_layers", "hidden_size", "num_attention_heads")):
        size = f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, {config.num_attention_heads} heads"
        rows.append(["size", size])
    if getattr(config, "model_type", None) != "blockbert":
        return rows
    rows += [["N (longest input)", f"{config.max_sequence_length:,} tokens"], ["attention", config.attention_pattern]]
    if config.attention_pattern == "blockwise":
        rows += [
            ["blocks n, block size b", f"{config.num_blocks}, {config.effective_block_size}"],
            ["heads per shift", ":".join(str(count) for count in config.heads_per_shift)],
        ]
    return rows


def _usage(run: RunDescription) -> str:
    """A loading snippet; `trust_remote_code=True` where the folder carries the model's code (`auto_map`)."""
    config, path = run.model_config, f"path/to/{run.name}"
    remote = bool(getattr(config, "auto_map", None))
    remote_argument = ", trust_remote_code=True" if remote else ""
    note = (
        "The folder carries its model's code, which is not part of transformers: loading it needs "
        "`trust_remote_code=True`.\n\n"
        if remote
        else ""
    )
    if run.pipeline_tag == "fill-mask":
        code = (
            "from transformers import pipeline\n\n"
            f'fill_mask = pipeline("fill-mask", model="{path}"{remote_argument})\n'
            'fill_mask(f"The capital of France is {fill_mask.tokenizer.mask_token}.")'
        )
    elif run.pipeline_tag == "feature-extraction":
        code = (
            "from transformers import AutoModel, AutoTokenizer\n\n"
            "# an encoder: fine-tune it (examples/run_qa.py --model_name_or_path FOLDER) or read its hidden states\n"
            f'model = AutoModel.from_pretrained("{path}"{remote_argument})\n'
            f'tokenizer = AutoTokenizer.from_pretrained("{path}")'
        )
    elif "question-answering" in (getattr(config, "custom_pipelines", None) or {}):
        # transformers 5 has no built-in question-answering pipeline: the folder carries BlockBERT's
        code = (
            "from transformers import pipeline\n\n"
            "# contexts of any length: windows of N tokens overlapping by doc_stride, the best span over all windows\n"
            f'qa = pipeline("question-answering", model="{path}", trust_remote_code=True)\n'
            'qa(question="Who founded the company?", context=open("document.txt").read())'
        )
    else:
        code = (
            "from transformers import AutoModelForQuestionAnswering, AutoTokenizer\n\n"
            f'model = AutoModelForQuestionAnswering.from_pretrained("{path}"{remote_argument})\n'
            f'tokenizer = AutoTokenizer.from_pretrained("{path}")'
        )
    return f"{note}```python\n{code}\n```\n"


def _training_results(training_log: Sequence[Mapping]) -> str:
    """As transformers' cards: a row per evaluation (the latest training loss logged by then, the validation loss), or
    without evaluations a row per logged training loss; at most `MAX_LOG_ROWS` rows, evenly spaced."""
    losses = {record["step"]: record["loss"] for record in training_log if "loss" in record}
    eval_losses = {record["step"]: record["eval_loss"] for record in training_log if "eval_loss" in record}
    steps = sorted(eval_losses or losses)
    if not steps:
        return "No training step was logged.\n"
    shown = steps
    if len(steps) > MAX_LOG_ROWS:  # the first and the last included
        shown = sorted({steps[round(i * (len(steps) - 1) / (MAX_LOG_ROWS - 1))] for i in range(MAX_LOG_ROWS)})
    rows = []
    for step in shown:
        logged = [logged_step for logged_step in losses if logged_step <= step]
        row = [step, _number(losses[max(logged)] if logged else None)]
        if eval_losses:
            row.append(_number(eval_losses[step]))
        rows.append(row)
    header = ["Step", "Training loss", *(["Validation loss"] if eval_losses else [])]
    what = "evaluations" if eval_losses else "logged steps"
    count = f"All {len(steps)} {what}" if len(shown) == len(steps) else f"{len(shown)} of the {len(steps)} {what}"
    return f"{count}; the run's `metrics.jsonl` holds every logged step.\n\n" + markdown_table(header, rows)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _framework_versions() -> str:
    versions = []
    for package in FRAMEWORKS:
        try:
            versions.append(f"- {package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return "\n".join(versions)


def _finite(metrics: Mapping[str, tuple[str, float | None]]) -> dict[str, tuple[str, float]]:
    """The metrics with a finite value: the Hub's model-index takes numbers (a perplexity may overflow to inf)."""
    return {key: (name, value) for key, (name, value) in metrics.items() if value is not None and math.isfinite(value)}


# ---------------------------------------------------------------------------------------------------------------------
# The cards of run_qa and run_pretraining
# ---------------------------------------------------------------------------------------------------------------------


def _run_name(output_dir: str | os.PathLike) -> str:
    return Path(output_dir).resolve().name  # as transformers' Trainer names its card: the output folder


def qa_model_card(config, model_config, accelerator, results: Mapping, training_log: Sequence[Mapping]) -> ModelCard:
    """The card of a model `run_qa(config)` fine-tuned. `results`: the run's summary, with its SQuAD metrics once it
    has evaluated (what `eval_metrics.json` holds)."""

    def source(file: str | None, split: str, count: int | None) -> DataSource:
        detail = f"{count:,} questions" if count is not None else None
        if file or os.path.exists(config.dataset_name):
            return DataSource.local([file or config.dataset_name], detail)
        if config.mrqa_subset:
            detail = f"the {config.mrqa_subset} subset" + (f", {detail}" if detail else "")
        return DataSource(
            HUB_DATASETS.get(config.dataset_name, config.dataset_name), config.dataset_config_name, split, (), detail
        )

    # squad_v2's metric names exact match "exact"; the model-index uses the Hub's metric id for both versions
    exact_match = results.get("exact_match", results.get("exact"))
    evaluation = _finite({"exact_match": ("Exact match", exact_match), "f1": ("F1", results.get("f1"))})
    eval_data = (
        source(config.validation_file, config.validation_split, results.get("eval_examples")) if evaluation else None
    )
    processes, accumulation = accelerator.num_processes, config.gradient_accumulation_steps
    hyperparameters = {
        "learning_rate": config.learning_rate,
        "per_device_train_batch_size": config.per_device_train_batch_size,
        "num_processes": processes,
        "gradient_accumulation_steps": accumulation,
        "total_train_batch_size": config.per_device_train_batch_size * processes * accumulation,
        "optimizer": f"AdamW (betas 0.9, 0.999, epsilon 1e-08), weight decay {config.weight_decay}",
        "lr_scheduler_type": "linear",
        "lr_scheduler_warmup_ratio": config.warmup_ratio,
        "training_steps": results.get("completed_steps"),
        "num_epochs": results.get("num_epochs"),
        "max_seq_length": results.get("max_seq_length"),
        "doc_stride": results.get("doc_stride"),
        "negative_window_rate": config.negative_window_rate,
        "window_scoring": results.get("window_scoring"),
        "qa_objective": results.get("qa_objective"),
        "version_2_with_negative": results.get("version_2_with_negative"),
        "mixed_precision": accelerator.mixed_precision,
        "seed": config.seed,
    }
    if results.get("teacher"):  # task distillation: the teacher, by its folder's name only
        hyperparameters["distillation"] = (
            f"from `{Path(results['teacher']).name}`, temperature {results['distillation_temperature']}, alpha "
            f"{results['distillation_alpha']}"
        )
    return build_model_card(
        RunDescription(
            pipeline_tag="question-answering",
            name=_run_name(config.output_dir),
            model_config=model_config,
            starting_model=config.model_name_or_path,
            train_data=source(config.train_file, config.train_split, results.get("train_examples")),
            eval_data=eval_data,
            evaluation=evaluation,
            hyperparameters=hyperparameters,
            training_log=training_log,
            license=config.license,
        )
    )


def document_data_sources(args, eval_sequences: int | None, seq_len: int) -> tuple[DataSource, DataSource]:
    """The training and held-out data of a run that reads documents as `run_mlm.py` does (`train_files` or
    `dataset_name`; `validation_files`, `validation_split_percentage` or the dataset's validation split)."""
    if args.train_files:
        train_data = DataSource.local(args.train_files)
    else:
        train_data = DataSource.named(args.dataset_name, args.dataset_config_name, "train")
    detail = f"{eval_sequences:,} sequences of {seq_len} tokens" if eval_sequences else None
    if args.validation_files:
        return train_data, DataSource.local(args.validation_files, detail)
    if args.validation_split_percentage:
        held_out = f"{args.validation_split_percentage:g}% of the training documents, held out"
        held_out += f"; {detail}" if detail else ""
        return train_data, DataSource(train_data.hub_id, train_data.config, None, train_data.files, held_out)
    return train_data, DataSource(train_data.hub_id, train_data.config, "validation", train_data.files, detail)


def mlm_model_card(args, model_config, accelerator, results: Mapping, training_log: Sequence[Mapping]) -> ModelCard:
    """The card of a model `run_pretraining(args)` trained. `results`: what its `results.json` holds."""
    train_data, eval_data = document_data_sources(args, results.get("eval_sequences"), args.max_seq_length)
    evaluation = _finite(
        {
            "loss": ("Validation loss (masked tokens)", results.get("eval_loss")),
            "perplexity": ("Perplexity", results.get("eval_perplexity")),
        }
    )
    if args.num_warmup_steps is not None:
        warmup = {"lr_scheduler_warmup_steps": args.num_warmup_steps}
    else:
        warmup = {"lr_scheduler_warmup_ratio": args.warmup_ratio}
    hyperparameters = {
        "learning_rate": args.learning_rate,
        "tokens_per_batch (B x N)": args.tokens_per_batch,
        "max_seq_length (N)": args.max_seq_length,
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "num_processes": accelerator.num_processes,
        "optimizer": f"AdamW (betas {args.adam_beta1}, {args.adam_beta2}, epsilon {args.adam_epsilon}), weight decay "
        f"{args.weight_decay}",
        "lr_scheduler_type": "linear",
        **warmup,
        "max_grad_norm": args.max_grad_norm,
        "training_steps": results.get("total_steps"),
        "mlm_probability": args.mlm_probability,
        "mixed_precision": accelerator.mixed_precision,
        "seed": args.seed,
        "trained_parameters": results.get("trained_parameters", "every parameter"),
    }
    return build_model_card(
        RunDescription(
            pipeline_tag="fill-mask",
            name=_run_name(args.output_dir),
            model_config=model_config,
            starting_model=args.model_name_or_path,
            train_data=train_data,
            eval_data=eval_data if evaluation else None,
            evaluation=evaluation,
            hyperparameters=hyperparameters,
            training_log=training_log,
            license=args.license,
        )
    )


def distillation_model_card(args, model_config, results: Mapping, training_log: Sequence[Mapping]) -> ModelCard:
    """The card of a model `run_distillation(args)` distilled. `results`: what its `results.json` holds."""
    sequences = results.get("eval_sequences")
    train_data, eval_data = document_data_sources(args, sequences, model_config.max_sequence_length)
    metrics = {"loss": ("Held-out distillation loss", results.get("eval_loss"))}
    metrics["cosine"] = ("Last layer's cosine distance to the teacher", results.get("eval_cosine"))
    layers = model_config.num_hidden_layers
    metrics[f"mse_layer_{layers}"] = ("Last layer's normalised MSE", results.get(f"eval_mse_layer_{layers}"))
    evaluation = _finite(metrics)
    hyperparameters = {
        "teacher": "the starting checkpoint with full attention, frozen"
        + (f" (windows of {results['teacher_window']} tokens)" if results.get("teacher_window") else ""),
        "learning_rate": args.learning_rate,
        "tokens_per_batch (B x N)": args.tokens_per_batch,
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "optimizer": f"AdamW, weight decay {args.weight_decay}",
        "lr_scheduler_type": "linear",
        "lr_scheduler_warmup_ratio": args.warmup_ratio,
        "max_grad_norm": args.max_grad_norm,
        "training_steps": results.get("total_steps"),
        "layer_weights": args.layer_weights,
        "cosine_weight": args.cosine_weight,
        "short_batch_every": args.short_batch_every,
        "embeddings": "trained" if args.train_embeddings else "frozen",
        "seed": args.seed,
    }
    return build_model_card(
        RunDescription(
            pipeline_tag="feature-extraction",
            name=_run_name(args.output_dir),
            model_config=model_config,
            starting_model=args.model_name_or_path,
            train_data=train_data,
            eval_data=eval_data if evaluation else None,
            evaluation=evaluation,
            hyperparameters=hyperparameters,
            training_log=training_log,
            license=args.license,
        )
    )


# ---------------------------------------------------------------------------------------------------------------------
# The card of a converted checkpoint
# ---------------------------------------------------------------------------------------------------------------------


def conversion_model_card(
    summary: Mapping, model_config, name: str, base_model: str | None, license: str = DEFAULT_LICENSE
) -> ModelCard:
    """The card of a folder `examples/convert_roberta_to_blockbert.py` wrote: the source (`base_model` only where its
    Hub id is known), the attention pattern, and how the conversion verified. `summary`: `conversion_report.json`."""
    masked_lm = summary["target_class"] == "BlockBertForMaskedLM"
    data = ModelCardData(
        model_name=name,
        base_model=base_model,
        license=license,
        library_name="transformers",
        pipeline_tag="fill-mask" if masked_lm else "feature-extraction",
        tags=["blockbert-hf", "blockbert", "blockwise-attention", "converted"],
    )
    source = f"[{base_model}](https://huggingface.co/{base_model})" if base_model else f"`{summary['source']}`"
    positions = (
        "block-relative (they restart at every block; the source's position table is kept as trained)"
        if summary.get("block_relative_positions")
        else f"the source's {summary['source_sequence_length']:,}"
        + (", new rows repeating the trained ones" if summary["extended"] else "")
    )
    rows = [
        ["source", f"{source} ({summary['source_architecture']})"],
        ["attention", summary["attention_pattern"]],
        ["N (longest input)", f"{summary['source_sequence_length']:,} -> {summary['sequence_length']:,} tokens"],
        ["positions", positions],
        [
            "tensors",
            f"{summary['tensors_copied']} copied one to one" + _listed(", initialised", summary["initialised"]),
        ],
    ]
    body = f"""
<!-- Written by blockbert-hf's examples/convert_roberta_to_blockbert.py from its conversion_report.json. -->

# {name}

This is {source} converted to BlockBERT weight for weight: the same parameters, only the attention rule changes. It
was not trained after the conversion.

{markdown_table(["", ""], rows)}
{markdown_table(["", ""], model_rows(model_config))}
## Verification

{_verification_text(summary)}

## How to use

{_usage_of_converted(model_config, name, masked_lm)}
## Citation

BlockBERT: "Blockwise Self-Attention for Long Document Understanding", Qiu et al., Findings of EMNLP 2020.

{CITATION}"""
    return assemble_card(data, body)


def _listed(label: str, names: Sequence[str]) -> str:
    return f"{label} {', '.join(f'`{name}`' for name in names)}" if names else ""


def _verification_text(summary: Mapping) -> str:
    checks = summary.get("verification")
    if checks is None:
        return "Skipped (`--skip_verification`): nothing checked that the converted weights reproduce the source."
    rows = []
    for check in checks:
        verdict = "reported" if check["tolerance"] is None else ("pass" if check["passed"] else "FAIL")
        limit = "-" if check["tolerance"] is None else f"{check['tolerance']:.0e}"
        lengths = f"{len(check['lengths'])} inputs of {min(check['lengths'])}-{max(check['lengths'])} tokens"
        rows.append([check["check"], f"{check['max_abs_diff']:.2e}", limit, verdict, lengths])
    header = ["check", "max abs difference", "limit", "verdict", "inputs"]
    return "Source and converted model on real text, float32:\n\n" + markdown_table(header, rows)


def _usage_of_converted(config, name: str, masked_lm: bool) -> str:
    model_class = "AutoModelForMaskedLM" if masked_lm else "AutoModel"
    code = (
        f"from transformers import AutoTokenizer, {model_class}\n\n"
        f'model = {model_class}.from_pretrained("path/to/{name}", trust_remote_code=True)\n'
        f'tokenizer = AutoTokenizer.from_pretrained("path/to/{name}", trust_remote_code=True)'
    )
    return (
        "The folder carries its model's code, which is not part of transformers: loading it needs "
        f"`trust_remote_code=True`. Fine-tune it with `examples/run_qa.py` or `examples/run_mlm.py`.\n\n"
        f"```python\n{code}\n```\n"
    )


__all__ = [
    "CARD_FILE",
    "CITATION",
    "DEFAULT_LICENSE",
    "DataSource",
    "RunDescription",
    "assemble_card",
    "build_model_card",
    "conversion_model_card",
    "is_hub_id",
    "lineage_base_model",
    "markdown_table",
    "model_rows",
    "mlm_model_card",
    "qa_model_card",
    "recorded_base_model",
    "write_model_card",
]
