"""`make demo`: long-document question answering with BlockBERT, from real pretrained weights, on 2 CPU cores.

Converts all-MiniLM-L6-v2 to BlockBERT (N = 1024, n = 2 blocks), fine-tunes it for extractive QA on the bundled SQuAD
articles with `examples/run_qa.py`, answers a held-out article through `pipeline("question-answering")`, times full
attention against BlockBERT on the same weights, and writes `results.json` and `report.md` (docs/results.md#make-demo).
More data: `--train_file path/to/dev-v1.1.json.gz --max_train_questions 0 --num_train_epochs 3`.
"""

import json
import logging
import os
import random
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import datasets
import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer, HfArgumentParser, pipeline

from blockbert_benchmarks.measuring.machine import machine_description, recorded_command, recorded_path
from blockbert_benchmarks.measuring.memory import track_peak_memory
from blockbert_benchmarks.measuring.timing import interleaved_medians
from blockbert_benchmarks.qa_pipeline import MAX_ANSWER_TOKENS, squad_scores
from blockbert_hf import BlockBertConfig
from blockbert_hf.conversion import REPORT_FILE, with_blockwise_fields
from blockbert_hf.conversion.weights import extend_position_embeddings
from blockbert_hf.model.configuration_blockbert import parse_heads_per_shift
from blockbert_hf.model.modeling_blockbert import BlockBertForQuestionAnswering, BlockBertModel
from blockbert_hf.model.question_answering_windows import check_window_layout
from blockbert_hf.saving import (
    check_output_keeps_inputs,
    save_tokenizer,
    sha256_of_file,
    write_file_atomically,
    write_json_atomically,
)
from blockbert_hf.tokenization import match_tokenizer_to_config
from blockbert_hf.train.qa import read_squad_json
from blockbert_hf.train.runs import METRICS_FILE, RUN_ARGS_FILE, HelpFormatter, cpu_has_native_bf16, read_metrics

from . import option
from .long_context import make_example, read_articles
from .minilm import MINILM_VARIABLE, installed_minilm


REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES = REPO_ROOT / "data" / "samples"
RESULTS_KIND = "blockbert-hf demo"
# What it writes (a rerun replaces it); `reshaped` instead of `converted` where the source is a BlockBERT folder.
DEMO_OUTPUTS = ("data", "converted", "reshaped", "qa", "results.json", "report.md")
PATH_ARGUMENTS = ("output_dir", "source_model", "train_file", "held_out_file")  # recorded as `recorded_path` does
DOC_STRIDE = 128  # run_qa's default overlap of training windows: a window must be longer
MIXED_PRECISION_CHOICES = ("auto", "no", "bf16")


@dataclass
class HeldOutArticle:
    """An article the model is not trained on: its paragraphs in order, its questions (SQuAD rows over a paragraph)."""

    title: str
    paragraphs: list[str]
    questions: datasets.Dataset

    @property
    def document(self) -> str:
        return "\n\n".join(self.paragraphs)


def write_training_file(
    squad_file: str | os.PathLike,
    held_out_title: str,
    output_file: str | os.PathLike,
    max_articles: int | None = None,
    max_questions: int | None = None,
    seed: int = 0,
    paragraph_questions: bool = False,
    paragraph_negative_rate: float = 0.0,
) -> dict:
    """Writes a SQuAD file of the articles but `held_out_title`: `max_questions` (seeded) over their whole article,
    with `paragraph_questions` the others over their own paragraph (cheap), some also over another one (null)."""
    articles = [article for article in read_articles(squad_file) if article.title != held_out_title]
    articles = articles[:max_articles] if max_articles is not None else articles
    if not articles:
        raise ValueError(f"{squad_file} has no article other than {held_out_title!r} to train on.")
    chosen = {question.id for article in articles for question in article.questions}
    if max_questions is not None and max_questions < len(chosen):
        chosen = set(random.Random(seed).sample(sorted(chosen), max_questions))
    data, counts, negative_draws = [], Counter(), random.Random(seed + 1)
    for article in articles:
        whole_article, own_paragraphs, context = [], {}, None
        for question in article.questions:
            whole = question.id in chosen
            if not (whole or paragraph_questions):
                continue
            span = (0, len(article.paragraphs)) if whole else (question.paragraph, question.paragraph + 1)
            example, dropped = make_example(article, question, *span)
            counts["unplaced_answers"] += dropped
            if not example.answers:
                continue
            answers = [{"text": answer.text, "answer_start": answer.start} for answer in example.answers]
            row = {"id": question.id, "question": question.question, "answers": answers}
            if whole:
                context = example.context
                whole_article.append(row)
                counts["questions"] += 1
                continue
            own_paragraphs.setdefault(example.context, []).append(row)
            counts["paragraph_questions"] += 1
            others = [index for index in range(len(article.paragraphs)) if index != question.paragraph]
            if others and negative_draws.random() < paragraph_negative_rate:
                other = article.paragraphs[negative_draws.choice(others)]
                own_paragraphs.setdefault(other, []).append({**row, "id": f"{question.id}_other", "answers": []})
                counts["paragraph_negatives"] += 1
        paragraphs = [{"context": context, "qas": whole_article}] if whole_article else []
        paragraphs += [{"context": text, "qas": rows} for text, rows in own_paragraphs.items()]
        if paragraphs:
            data.append({"title": article.title, "paragraphs": paragraphs})
    write_json_atomically(output_file, {"version": "1.1", "data": data}, indent=None)
    counted = ("questions", "paragraph_questions", "paragraph_negatives", "unplaced_answers")
    articles = [article["title"] for article in data]
    return {"file": str(output_file), "articles": articles, **{name: counts[name] for name in counted}}


def read_held_out_article(squad_file: str | os.PathLike, title: str) -> HeldOutArticle:
    """The article called `title` in a SQuAD-format file, with an error listing the titles there when it is absent."""
    rows = read_squad_json(squad_file)
    questions = rows.filter(lambda row: row["title"] == title)
    if len(questions) == 0:
        titles = sorted(set(rows["title"]))
        raise ValueError(f"{squad_file} has no article titled {title!r}; it has: {', '.join(titles)}.")
    paragraphs = list(dict.fromkeys(questions["context"]))  # in order of appearance, each once
    return HeldOutArticle(title, paragraphs, questions)


def conversion_outcome(converted_folder: str | os.PathLike) -> dict:
    """Whether the conversion's verification passed, and its largest n = 1 difference to the source model."""
    report = json.loads((Path(converted_folder) / REPORT_FILE).read_text(encoding="utf-8"))
    checks = report.get("verification") or []
    same_as_source = [check["max_abs_diff"] for check in checks if check["check"].startswith("n=1")]
    return {
        "verified": bool(checks) and all(check["passed"] for check in checks),
        "max_abs_difference_n1": max(same_as_source) if same_as_source else None,
    }


def recorded_arguments(arguments: Mapping) -> dict:
    """The demo's options as its results record them: the paths as `recorded_path` records them."""
    return {
        key: recorded_path(value) if key in PATH_ARGUMENTS and value is not None else value
        for key, value in arguments.items()
    }


def training_outcome(run_folder: str | os.PathLike) -> dict:
    """The recipe a `run_qa` fine-tuning ran with (its `run_args.json`) and its last logged training loss."""
    run_folder = Path(run_folder)
    arguments = json.loads((run_folder / RUN_ARGS_FILE).read_text(encoding="utf-8"))
    losses = [record["loss"] for record in read_metrics(run_folder / METRICS_FILE) if "loss" in record]
    return {
        "data_file": recorded_path(arguments["train_file"]),
        **{key: arguments[key] for key in ("max_seq_length", "doc_stride", "num_train_epochs", "learning_rate")},
        "batch_size": arguments["per_device_train_batch_size"] * arguments["gradient_accumulation_steps"],
        **{key: arguments[key] for key in ("warmup_ratio", "seed")},
        **{key: arguments.get(key) for key in ("window_layout", "negative_window_rate", "mixed_precision")},
        "final_loss": round(losses[-1], 4) if losses else None,
    }


def _answer_and_score(qa, rows: datasets.Dataset, contexts: Sequence[str], what: str):
    """The pipeline's best answer to each question over its context, and their EM/F1 and time per question."""
    start, answers = time.perf_counter(), []
    for question, context in tqdm(list(zip(rows["question"], contexts)), desc=what, unit="question"):
        answers.append(qa(question=question, context=context, max_answer_len=MAX_ANSWER_TOKENS, batch_size=4))
    seconds = time.perf_counter() - start
    scores = squad_scores(list(rows), [answer["answer"] for answer in answers])
    return answers, {"questions": len(rows), **scores, "seconds_per_question": round(seconds / len(rows), 4)}


def evaluate_held_out(
    model_folder: str | os.PathLike,
    article: HeldOutArticle,
    max_document_questions: int | None = None,
    num_examples: int = 5,
) -> dict:
    """Answers the held-out questions through `pipeline("question-answering", trust_remote_code=True)`: each over its
    own paragraph, and the first `max_document_questions` over the whole article; scores and `num_examples` examples."""
    qa = pipeline("question-answering", model=str(model_folder), trust_remote_code=True)
    rows = article.questions
    own, own_scores = _answer_and_score(qa, rows, rows["context"], "over its own paragraph")
    if max_document_questions is not None:
        rows = rows.select(range(min(max_document_questions, len(rows))))
    whole, whole_scores = _answer_and_score(qa, rows, [article.document] * len(rows), "over the whole article")
    examples = []
    for index, row in enumerate(rows.select(range(min(num_examples, len(rows))))):
        answers = {"own_paragraph": own[index]["answer"], "whole_document": whole[index]["answer"]}
        examples.append({"question": row["question"], "gold": row["answers"]["text"][0], **answers})
    return {
        "title": article.title,
        "paragraphs": len(article.paragraphs),
        "document_tokens": len(qa.tokenizer(article.document, add_special_tokens=False)["input_ids"]),
        "own_paragraph": own_scores,
        "whole_document": whole_scores,
        "examples": examples,
    }


def attention_variants(model: BlockBertForQuestionAnswering) -> dict[str, dict]:
    """The configurations compared on the same weights: full attention (n = 1), and BlockBERT with n = 2 and n = 4
    (the model's own heads per shift where it has that n, else the default for that n)."""
    variants = {"full": {"num_blocks": 1, "heads_per_shift": None}}
    for num_blocks in (2, 4):
        own = model.config.attention_pattern == "blockwise" and model.config.num_blocks == num_blocks
        heads = list(model.config.heads_per_shift) if own else None
        variants[f"n{num_blocks}"] = {"num_blocks": num_blocks, "heads_per_shift": heads}
    return variants


def _label(model) -> str:
    if model.config.num_blocks == 1:
        return "full attention (n = 1)"
    return f"BlockBERT n = {model.config.num_blocks} ({':'.join(map(str, model.config.heads_per_shift))})"


def with_running_positions(model: BlockBertForQuestionAnswering) -> BlockBertForQuestionAnswering:
    """`model`, or where its positions restart at every block, a copy whose positions run on through N (repeating
    the trained rows): how full attention reads N tokens; blockwise variants compute the same."""
    config = model.config
    if not config.block_relative_positions:
        return model
    style, pad = config.position_embedding_style, config.pad_token_id
    rows = config.max_sequence_length + (pad + 1 if style == "roberta" else 0)
    state = model.state_dict()
    key = "roberta.embeddings.position_embeddings.weight"
    state[key] = extend_position_embeddings(state[key], rows, style, pad)
    running = {**config.to_dict(), "block_relative_positions": False, "max_position_embeddings": rows}
    clone = type(model)(BlockBertConfig.from_dict(running))
    clone.load_state_dict(state)
    clone.set_attn_implementation(config._attn_implementation)
    return clone.eval()


def _cost_with_kernel(trained, batch: Mapping, kernel: str, rounds: int) -> dict:
    models = {name: with_blockwise_fields(trained, **fields) for name, fields in attention_variants(trained).items()}
    for model in models.values():
        model.set_attn_implementation(kernel)
    peaks = {}
    with torch.inference_mode():
        for name, model in tqdm(models.items(), desc=f"peak memory of one forward ({kernel})", unit="model"):
            model(**batch)  # warm-up: one-time allocations are not the forward's
            with track_peak_memory("cpu") as memory:
                model(**batch)
            peaks[name] = memory.peak_bytes
        calls = {name: (lambda model=model: model(**batch)) for name, model in models.items()}
        timings = interleaved_medians(calls, repeats=rounds, warmup=1, anchor="full")
    blockwise = [name for name in models if name != "full"]
    return {
        "models": {
            name: {"label": _label(model), "median_s": round(timings[name]["median_s"], 4), "peak_bytes": peaks[name]}
            for name, model in models.items()
        },
        "time_ratio_to_full": {name: round(timings[name]["median_paired_ratio"], 3) for name in blockwise},
        "memory_ratio_to_full": {name: round(peaks[name] / peaks["full"], 3) for name in blockwise},
    }


def measure_attention_cost(
    model_folder: str | os.PathLike,
    question: str,
    document: str,
    rounds: int = 5,
    kernels: Sequence[str] = ("eager", "sdpa"),
) -> dict:
    """One forward (batch 1) over `question` + `document` cut to N tokens, for every `attention_variants` entry and
    kernel: median time over `rounds` interleaved rounds and peak memory, each with its ratio to full attention."""
    tokenizer = AutoTokenizer.from_pretrained(model_folder)
    trained = with_running_positions(BlockBertForQuestionAnswering.from_pretrained(model_folder).eval())
    length = trained.config.max_sequence_length
    batch = tokenizer(question, document, truncation="only_second", max_length=length, return_tensors="pt")
    return {
        "what": "one forward (batch 1) over a question and the first tokens of the held-out article",
        "tokens": int(batch["input_ids"].shape[1]),
        "rounds": rounds,
        "threads": torch.get_num_threads(),
        "kernels": {kernel: _cost_with_kernel(trained, batch, kernel, rounds) for kernel in kernels},
    }


def format_report(results: Mapping) -> str:
    """What the demo prints at the end: example answers, EM/F1 on the held-out questions and the cost comparison."""
    held_out, cost = results["held_out"], results["efficiency"]
    lines = [
        f"Held-out article {held_out['title']!r}: {held_out['paragraphs']} paragraphs, "
        f"{held_out['document_tokens']:,} tokens (the model reads {results['model']['max_seq_length']:,} at a time).",
        "",
    ]
    for example in held_out["examples"]:
        lines += [
            f"  Q: {example['question']}",
            f"     gold: {example['gold']!r}",
            f"     over its paragraph: {example['own_paragraph']!r}   over the whole article: "
            f"{example['whole_document']!r}",
        ]
    lines.append("")
    for name, title in (("own_paragraph", "over its own paragraph"), ("whole_document", "over the whole article")):
        scores = held_out[name]
        lines.append(
            f"  {title:<24} {scores['questions']:>4} questions  EM {scores['exact_match']:5.1f}  F1 {scores['f1']:5.1f}"
            f"  {scores['seconds_per_question']:.3f} s/question"
        )
    lines += ["", f"Same weights, {cost['what']} ({cost['tokens']:,} tokens, {cost['threads']} CPU threads):"]
    for kernel, measured in cost["kernels"].items():
        for name, model in measured["models"].items():
            time_ratio = measured["time_ratio_to_full"].get(name, 1.0)
            memory_ratio = measured["memory_ratio_to_full"].get(name, 1.0)
            lines.append(
                f"  {kernel:<6} {model['label']:<28} {model['median_s']:6.3f} s (x{time_ratio:.2f})  "
                f"peak {model['peak_bytes'] / 2**20:7,.0f} MiB (x{memory_ratio:.2f})"
            )
    return "\n".join(lines)


@dataclass
class DemoArguments:
    output_dir: str = option("outputs/demo", "everything the demo makes (replaced by a rerun)")
    source_model: str | None = option(
        None,
        "BERT/RoBERTa folder to convert (default: all-MiniLM-L6-v2), or a BlockBERT folder (e.g. the self-distilled "
        "encoder of experiments/distilled_checkpoint.py), which keeps its weights and takes the demo's N, n and heads",
    )
    train_file: str = option(
        str(SAMPLES / "squad_v1.1_dev_train_articles.json.gz"),
        "SQuAD-format file to fine-tune on (the held-out article is left out)",
    )
    held_out_file: str = option(str(SAMPLES / "squad_v1.1_dev_sample.json"), "SQuAD file with the held-out article")
    held_out_title: str = option("Sky_(United_Kingdom)", "the held-out article's title")
    max_seq_length: int = option(1024, "N of the model")
    num_blocks: int = option(2, "n of the model")
    heads_per_shift: str = option("10:2", "heads per shift of the model")
    block_relative_positions: bool = option(True, "positions restart at every block (else they run on through N)")
    window_layout: str = option("question_prefixed_blocks", "question_prefixed_blocks or question_first")
    train_window: int = option(640, "tokens per training window: more than (n - 1) blocks")
    negative_window_rate: float = option(0.1, "share of the training windows without the answer kept (null)")
    num_train_epochs: float = 2.0
    learning_rate: float = 2e-4
    per_device_train_batch_size: int = 8
    mixed_precision: str = option("auto", "auto (bf16 where the CPU computes it natively, else fp32), no or bf16")
    max_train_articles: int | None = option(None, "train on the first K articles only")
    max_train_questions: int | None = option(100, "K questions (seeded) read over their whole article (0: all)")
    paragraph_questions: bool = option(True, "also train on the other questions, each over its own paragraph")
    paragraph_negative_rate: float = option(0.25, "share of those also read over another paragraph, no answer (null)")
    max_document_questions: int = option(0, "held-out questions answered over the whole article (0: all of them)")
    timing_rounds: int = option(5, "interleaved rounds of the full-vs-blockwise timing")
    seed: int = 0


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(DemoArguments, description=__doc__, formatter_class=HelpFormatter)


def run_script(script: str, arguments: list[str], names: dict[str, Path] | None = None) -> str:
    """Runs one of the example scripts as a user would (printed first); returns the command as the results record it
    (`recorded_command`, with the folders of `names` named)."""
    words = ["python", f"examples/{script}", *arguments]
    shown = shlex.join(words)
    print(f"\n$ {shown}\n", flush=True)
    completed = subprocess.run([sys.executable, str(REPO_ROOT / "examples" / script), *arguments], check=False)
    if completed.returncode != 0:
        sys.exit(f"demo: `{shown}` failed with exit status {completed.returncode} (its messages are above).")
    return recorded_command(words, names)


def training_precision(choice: str) -> str:
    """run_qa's --mixed_precision for the demo's choice: `auto` is bf16 where the CPU computes it natively (elsewhere
    bf16 autocast is emulated, several times slower than fp32), else `no`."""
    if choice != "auto":
        return choice
    return "bf16" if cpu_has_native_bf16() else "no"


# The numeric options' ranges: the options, the test of a value, and what the message says a value must be.
OPTION_RANGES = (
    (("max_seq_length", "num_blocks", "per_device_train_batch_size"), lambda value: value >= 1, "at least 1"),
    (("timing_rounds", "max_train_articles"), lambda value: value is None or value >= 1, "at least 1"),
    (("max_document_questions", "max_train_questions"), lambda value: value is None or value >= 0, "0 (all) or more"),
    (("num_train_epochs", "learning_rate"), lambda value: value > 0, "positive"),
    (("seed",), lambda value: value >= 0, "0 or more"),
    (("negative_window_rate", "paragraph_negative_rate"), lambda value: 0 <= value <= 1, "in [0, 1]"),
)


def check_options(args: DemoArguments) -> None:
    """Every numeric option, the model shape and `--source_model`, before any work; a `ValueError` naming the
    option otherwise."""
    for names, allowed, rule in OPTION_RANGES:
        for name in names:
            value = getattr(args, name)
            if not allowed(value):
                raise ValueError(f"--{name} must be {rule}, got {f'{value:g}' if isinstance(value, float) else value}.")
    for name, parse in (("heads_per_shift", parse_heads_per_shift), ("window_layout", check_window_layout)):
        try:
            parse(getattr(args, name))
        except ValueError as error:
            raise ValueError(f"--{name}: {error}") from None
    heads, blocks, window = parse_heads_per_shift(args.heads_per_shift), args.num_blocks, args.train_window
    block_size, source = args.max_seq_length // blocks, Path(args.source_model or ".")
    if args.mixed_precision not in MIXED_PRECISION_CHOICES:
        raise ValueError(
            f"--mixed_precision {args.mixed_precision} is unknown: use {', '.join(MIXED_PRECISION_CHOICES)}."
        )
    if args.max_seq_length % blocks:
        raise ValueError(f"--max_seq_length {args.max_seq_length} is not a multiple of --num_blocks {blocks}.")
    if len(heads) != blocks or heads[0] < 1 or min(heads) < 0:
        raise ValueError(
            f"--heads_per_shift {args.heads_per_shift} has {len(heads)} shift(s), --num_blocks is {blocks}: give one "
            "head count per shift (0 to n - 1), at least one head with shift 0, e.g. 9:1:1:1 for n = 4."
        )
    if window <= DOC_STRIDE:
        raise ValueError(
            f"--train_window must be more than {DOC_STRIDE} tokens (run_qa's window overlap), got {window}."
        )
    if blocks > 1 and window <= (blocks - 1) * block_size:
        raise ValueError(
            f"--train_window {window} fits in {blocks - 1} block(s) of {block_size} tokens: the heads that read "
            f"another block would see an empty block in training. Use more than {(blocks - 1) * block_size} tokens."
        )
    if window > args.max_seq_length:
        raise ValueError(f"--train_window {window} is longer than --max_seq_length {args.max_seq_length}.")
    if args.source_model is not None and not source.is_dir():
        raise ValueError(
            f"--source_model {source} is not a model folder (missing, or a file): pass a BERT or RoBERTa model folder, "
            "or leave it out for all-MiniLM-L6-v2."
        )
    if args.source_model is not None and not (source / "config.json").is_file():
        raise ValueError(f"--source_model {source} has no config.json: pass a saved BERT or RoBERTa model folder.")
    if args.source_model is not None and is_blockbert_folder(source):
        reshaped_config(args, source)


def check_output_dir(output_dir: Path) -> None:
    """Refuses (`ValueError`) a folder the demo would overwrite: only a new or empty one, or an earlier demo's (nothing
    but `DEMO_OUTPUTS`, with its `results.json` or, where it stopped before, its data/train.json) may be replaced."""
    # Not `blockbert_hf.train.runs.check_output_dir`: that one knows a training run by its run_args.json, not a demo.
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"--output_dir {output_dir} is a file: pass a new folder (or an earlier demo's).")
    found = sorted(path.name for path in output_dir.iterdir()) if output_dir.exists() else []
    if not found:
        return
    others = [name for name in found if name not in DEMO_OUTPUTS]
    results = output_dir / "results.json"
    try:
        kind = json.loads(results.read_text(encoding="utf-8")).get("kind")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):  # absent, unreadable, not an object
        kind = None
    if others:
        reason = f"it holds {', '.join(others[:5])}{', ...' if len(others) > 5 else ''}, which the demo does not write"
    elif results.exists() and kind != RESULTS_KIND:
        reason = f"its results.json is not one the demo wrote (no kind {RESULTS_KIND!r})"
    elif not results.exists() and not (output_dir / "data" / "train.json").is_file():
        reason = "it holds neither the demo's results.json nor its data/train.json"
    else:
        return
    raise ValueError(
        f"--output_dir {output_dir} is not empty and not an earlier demo's folder ({reason}); the demo replaces what "
        "is there: pass a new or empty folder."
    )


def prepare(args: DemoArguments, output_dir: Path) -> tuple[Path, HeldOutArticle, dict]:
    """Checks the options, inputs and output folder, and writes the fine-tuning file: the source model's folder, the
    held-out article and what the training file holds. Stops the demo (exit 2) with the reason on bad input."""
    try:
        check_options(args)
        check_output_dir(output_dir)
        inputs = {f"--{name}": getattr(args, name) for name in ("source_model", "train_file", "held_out_file")}
        check_output_keeps_inputs(output_dir, inputs, output_name="--output_dir")
        source = Path(args.source_model) if args.source_model else installed_minilm()
        held_out = read_held_out_article(args.held_out_file, args.held_out_title)
        training = write_training_file(
            args.train_file, args.held_out_title, output_dir / "data" / "train.json",
            max_articles=args.max_train_articles, max_questions=args.max_train_questions or None, seed=args.seed,
            paragraph_questions=args.paragraph_questions, paragraph_negative_rate=args.paragraph_negative_rate,
        )  # fmt: skip
    except (OSError, ValueError) as error:
        print(f"demo.py: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    unplaced = training["unplaced_answers"]
    print(
        f"Fine-tuning data: {training['questions']:,} questions over their whole article and "
        f"{training['paragraph_questions']:,} over their own paragraph, of {len(training['articles'])} articles; "
        f"held out: {held_out.title!r} ({len(held_out.questions)} questions, {len(held_out.paragraphs)} paragraphs)."
        + (f" {unplaced} answer(s) not at their offset in the file were left out." if unplaced else ""),
        flush=True,
    )
    return source, held_out, training


def is_blockbert_folder(folder: Path) -> bool:
    """Whether a model folder holds a BlockBERT checkpoint (its config's model_type), rather than BERT or RoBERTa."""
    return json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type") == "blockbert"


def reshaped_config(args: DemoArguments, source: Path) -> BlockBertConfig:
    """The config of a BlockBERT source with the demo's n, heads per shift and positions; a `ValueError` where its
    position rows do not give the demo's N. Blockwise attention has no weights of its own, so the weights stay."""
    config = BlockBertConfig.from_pretrained(source)
    shape = {"num_blocks": args.num_blocks, "heads_per_shift": parse_heads_per_shift(args.heads_per_shift)}
    shape["block_relative_positions"] = args.block_relative_positions
    shape["block_size"] = args.max_seq_length // args.num_blocks if args.block_relative_positions else None
    try:
        config = BlockBertConfig.from_dict({**config.to_dict(), **shape})
    except ValueError as error:
        raise ValueError(f"--source_model {source} cannot take the demo's model shape: {error}") from None
    if config.max_sequence_length != args.max_seq_length:
        raise ValueError(
            f"--source_model {source} is a BlockBERT folder with {config.max_position_embeddings} positions, which "
            f"give N = {config.max_sequence_length}, not --max_seq_length {args.max_seq_length}: keep "
            "--block_relative_positions (blocks of at most its positions), or pass that N."
        )
    return config


def reshape(args: DemoArguments, source: Path, reshaped: Path) -> None:
    """Saves a BlockBERT source's encoder (no pooler or task head: the demo fine-tunes a QA head) and tokenizer with the
    demo's model shape (`reshaped_config`)."""
    config = reshaped_config(args, source)
    print(
        f"\nBlockBERT source {source}: its weights, with N = {config.max_sequence_length}, n = {config.num_blocks}, "
        f"heads per shift {args.heads_per_shift}, block size {config.effective_block_size}\n",
        flush=True,
    )
    BlockBertModel.from_pretrained(source, config=config, add_pooling_layer=False).save_pretrained(reshaped)
    tokenizer = AutoTokenizer.from_pretrained(source)
    save_tokenizer(match_tokenizer_to_config(tokenizer, config), reshaped)


def convert(args: DemoArguments, source: Path, converted: Path) -> str:
    """Converts the source model to BlockBERT; returns the command, as recorded."""
    if args.block_relative_positions:
        length_options = ["--block_relative_positions", "--block_size", str(args.max_seq_length // args.num_blocks)]
    else:
        length_options = ["--max_seq_length", str(args.max_seq_length)]
    shown = os.path.relpath(source)  # the printed command: relative where the source lies in the current folder
    return run_script(
        "convert_roberta_to_blockbert.py",
        [str(source) if shown.startswith("..") else shown, str(converted), "--num_blocks", str(args.num_blocks)]
        + ["--heads_per_shift", args.heads_per_shift, *length_options, "--overwrite"],
        names=None if args.source_model else {MINILM_VARIABLE: source},
    )


def fine_tune(args: DemoArguments, starting_model: Path, trained: Path, training_file: str) -> str:
    """Fine-tunes the starting model (converted or reshaped) for QA; returns the command, as recorded."""
    return run_script(
        "run_qa.py",
        ["--model_name_or_path", str(starting_model), "--train_file", training_file, "--do_train"]
        + ["--output_dir", str(trained), "--overwrite_output_dir", "--group_by_length"]
        + ["--max_seq_length", str(args.train_window), "--num_train_epochs", f"{args.num_train_epochs:g}"]
        + ["--learning_rate", f"{args.learning_rate:g}", "--per_device_train_batch_size"]
        + [str(args.per_device_train_batch_size), "--seed", str(args.seed), "--logging_steps", "10"]
        + ["--window_layout", args.window_layout, "--negative_window_rate", f"{args.negative_window_rate:g}"]
        + ["--mixed_precision", training_precision(args.mixed_precision)]
        # Without attention dropout PyTorch's SDPA runs its fused kernel; with it, an unfused one, ~3x slower on CPU.
        + ["--attention_probs_dropout_prob", "0"],
    )


def main(argv=None) -> int:
    (args,) = build_parser().parse_args_into_dataclasses(args=argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    started = time.perf_counter()
    output_dir = Path(args.output_dir)
    source, held_out, training = prepare(args, output_dir)
    trained = output_dir / "qa"
    if is_blockbert_folder(source):
        starting_model = output_dir / "reshaped"
        reshape(args, source, starting_model)
        start = {"reshaped_from": recorded_path(source), "folder": recorded_path(starting_model)}
    else:
        starting_model = output_dir / "converted"
        command = convert(args, source, starting_model)
        start = {"command": command, "folder": recorded_path(starting_model), **conversion_outcome(starting_model)}
    train_started = time.perf_counter()
    train_command = fine_tune(args, starting_model, trained, training["file"])
    train_seconds = time.perf_counter() - train_started
    model_folder = trained / "model"

    print("\nAnswering the held-out questions through pipeline('question-answering', trust_remote_code=True)")
    held_out_results = evaluate_held_out(model_folder, held_out, args.max_document_questions or None)
    print("\nFull attention against BlockBERT on the same weights and the same document")
    cost = measure_attention_cost(
        model_folder, held_out.questions[0]["question"], held_out.document, rounds=args.timing_rounds
    )
    weights = source / "model.safetensors"
    source_sha256 = sha256_of_file(weights) if weights.is_file() else None  # how the results name the source weights
    results = {
        "kind": RESULTS_KIND,
        "command": recorded_command(["python", "experiments/demo.py", *(sys.argv[1:] if argv is None else argv)]),
        "arguments": recorded_arguments(asdict(args)),
        "machine": machine_description(),
        "source_model": {"path": recorded_path(source), "sha256": source_sha256},
        "conversion": start,
        "model": {
            "folder": recorded_path(model_folder),
            **{key: getattr(args, key) for key in ("max_seq_length", "num_blocks", "heads_per_shift")},
            **{key: getattr(args, key) for key in ("block_relative_positions", "window_layout")},
        },
        "training": {
            **{key: training[key] for key in ("articles", "questions", "paragraph_questions", "paragraph_negatives")},
            **training_outcome(trained),
            "command": train_command,
            "seconds": round(train_seconds, 1),
        },
        "held_out": held_out_results,
        "efficiency": cost,
    }
    results["elapsed_seconds"] = round(time.perf_counter() - started, 1)
    results_file = write_json_atomically(output_dir / "results.json", results)
    write_file_atomically(
        output_dir / "report.md",
        f"# `make demo`, as run\n\n```bash\n{results['command']}\n```\n\nOn {results['machine']}, in "
        f"{results['elapsed_seconds'] / 60:.1f} min; every number below is in `results.json` beside this file.\n\n"
        f"```text\n{format_report(results)}\n```\n",
    )
    print("\n" + format_report(results))
    print(
        f"\nDone in {results['elapsed_seconds'] / 60:.1f} min ({torch.get_num_threads()} CPU threads)."
        f"\n  fine-tuned model: {model_folder}  (its model card: {model_folder / 'README.md'})"
        f"\n  starting model:   {starting_model}"
        f"\n  results:          {results_file}"
        f'\n  try it:           python -c "from transformers import pipeline; '
        f"qa = pipeline('question-answering', model='{model_folder}', trust_remote_code=True); "
        f"print(qa(question='Who founded Sky?', context=open('your_document.txt').read()))\""
    )
    return 0
