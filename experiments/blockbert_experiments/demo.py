"""The steps of `make demo` (`experiments/demo.py`) that are not a run of another example script.

The demo converts real pretrained weights to BlockBERT at a long N, fine-tunes them briefly for extractive question
answering on bundled SQuAD articles (both with the repository's own scripts), then:

- `evaluate_held_out`: loads the saved folder through `pipeline("question-answering", trust_remote_code=True)` and
  answers the questions of an article it never saw, once over each question's own paragraph and once over the whole
  article (thousands of tokens, read in windows of N tokens);
- `measure_attention_cost`: with the same weights over the same document, times one forward of full attention
  against BlockBERT with n = 2 and n = 4 blocks, interleaved round by round so that ratios are same-run ratios, and
  measures each forward's peak memory.
"""

import json
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer, pipeline

from blockbert_benchmarks.measuring.machine import (  # noqa: F401 (the script records the machine and its commands)
    machine_description,
    recorded_command,
    recorded_path,
)
from blockbert_benchmarks.measuring.memory import track_peak_memory
from blockbert_benchmarks.measuring.timing import interleaved_medians
from blockbert_hf import BlockBertConfig
from blockbert_hf.conversion import REPORT_FILE, with_blockwise_fields
from blockbert_hf.conversion.weights import extend_position_embeddings
from blockbert_hf.modeling_blockbert import BlockBertForQuestionAnswering
from blockbert_hf.qa import load_squad_metric, read_squad_json
from blockbert_hf.saving import write_json_atomically
from blockbert_hf.training import METRICS_FILE, RUN_ARGS_FILE, read_metrics

from .context_filling import make_example, read_articles


# Answers longer than this many tokens are not proposed (run_qa's default, so training and demo score alike).
MAX_ANSWER_TOKENS = 30
# The demo's options that are paths: its results record them as `recorded_path` does.
PATH_ARGUMENTS = ("output_dir", "source_model", "train_file", "held_out_file")


@dataclass
class HeldOutArticle:
    """An article the model is not trained on: its paragraphs in order and its questions (SQuAD rows whose
    `context` is the question's own paragraph)."""

    title: str
    paragraphs: list[str]
    questions: datasets.Dataset

    @property
    def document(self) -> str:
        """The whole article: its paragraphs, one after the other."""
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
    """Writes the questions of `squad_file`'s articles other than `held_out_title` (the first `max_articles` of them; a
    seeded choice of `max_questions` of their questions) as a SQuAD file whose contexts are whole articles: each
    question's context is its article, paragraphs joined as `context_filling.make_example` joins them, so that
    training cuts it into windows of several blocks, as the pipeline reads a long document. With `paragraph_questions`,
    the articles' other questions are added too, each over its own paragraph: one short input a question, several
    times cheaper to train on than a window of the article, so that span extraction is learnt from many more questions
    in the same time (these inputs fill the first block only; the article windows train the heads reading another
    block). Each of those questions is also added, at `paragraph_negative_rate` (seeded), over another paragraph of its
    article with no answer (null): windows without the answer, which whole-article reading has to tell apart.
    Returns what it holds."""
    articles = [article for article in read_articles(squad_file) if article.title != held_out_title]
    if max_articles is not None:
        articles = articles[:max_articles]
    if not articles:
        raise ValueError(f"{squad_file} has no article other than {held_out_title!r} to train on.")
    chosen = {question.id for article in articles for question in article.questions}
    if max_questions is not None and max_questions < len(chosen):
        chosen = set(random.Random(seed).sample(sorted(chosen), max_questions))
    data, questions, paragraph_count, negatives, unplaced = [], 0, 0, 0, 0
    negative_draws = random.Random(seed + 1)
    for article in articles:
        whole_article, own_paragraphs, context = [], {}, None
        for question in article.questions:
            if question.id in chosen:
                example, dropped = make_example(article, question, 0, len(article.paragraphs))
            elif paragraph_questions:
                example, dropped = make_example(article, question, question.paragraph, question.paragraph + 1)
            else:
                continue
            unplaced += dropped
            if not example.answers:
                continue
            answers = [{"text": answer.text, "answer_start": answer.start} for answer in example.answers]
            row = {"id": question.id, "question": question.question, "answers": answers}
            if question.id in chosen:
                context = example.context
                whole_article.append(row)
            else:
                own_paragraphs.setdefault(example.context, []).append(row)
                others = [index for index in range(len(article.paragraphs)) if index != question.paragraph]
                if others and negative_draws.random() < paragraph_negative_rate:
                    other = article.paragraphs[negative_draws.choice(others)]
                    null_row = {"id": f"{question.id}_other", "question": question.question, "answers": []}
                    own_paragraphs.setdefault(other, []).append(null_row)
                    negatives += 1
        paragraphs = [{"context": context, "qas": whole_article}] if whole_article else []
        paragraphs += [{"context": text, "qas": rows} for text, rows in own_paragraphs.items()]
        if paragraphs:
            data.append({"title": article.title, "paragraphs": paragraphs})
            questions += len(whole_article)
            paragraph_count += sum(len(rows) for rows in own_paragraphs.values())
    paragraph_count -= negatives
    write_json_atomically(output_file, {"version": "1.1", "data": data}, indent=None)
    return {
        "file": str(output_file),
        "articles": [article["title"] for article in data],
        "questions": questions,
        "paragraph_questions": paragraph_count,
        "paragraph_negatives": negatives,
        "unplaced_answers": unplaced,
    }


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
    """Whether the conversion's verification passed and its largest n = 1 difference to the source model, from the
    `conversion_report.json` the conversion script wrote."""
    report = json.loads((Path(converted_folder) / REPORT_FILE).read_text(encoding="utf-8"))
    checks = report.get("verification") or []
    same_as_source = [check["max_abs_diff"] for check in checks if check["check"].startswith("n=1")]
    return {
        "verified": bool(checks) and all(check["passed"] for check in checks),
        "max_abs_difference_n1": max(same_as_source) if same_as_source else None,
    }


def recorded_arguments(arguments: Mapping) -> dict:
    """The demo's options as its results record them: the paths among them (`PATH_ARGUMENTS`) as `recorded_path`
    records them, relative to the repository or by name, never as folders of the machine that ran it."""
    return {
        key: recorded_path(value) if key in PATH_ARGUMENTS and value is not None else value
        for key, value in arguments.items()
    }


def training_outcome(run_folder: str | os.PathLike) -> dict:
    """The recipe a `run_qa` fine-tuning ran with (its `run_args.json`; the training file as `recorded_path` records
    it) and its last logged training loss."""
    run_folder = Path(run_folder)
    arguments = json.loads((run_folder / RUN_ARGS_FILE).read_text(encoding="utf-8"))
    losses = [record["loss"] for record in read_metrics(run_folder / METRICS_FILE) if "loss" in record]
    return {
        "data_file": recorded_path(arguments["train_file"]),
        "max_seq_length": arguments["max_seq_length"],
        "doc_stride": arguments["doc_stride"],
        "num_train_epochs": arguments["num_train_epochs"],
        "learning_rate": arguments["learning_rate"],
        "batch_size": arguments["per_device_train_batch_size"] * arguments["gradient_accumulation_steps"],
        "warmup_ratio": arguments["warmup_ratio"],
        "seed": arguments["seed"],
        "window_layout": arguments.get("window_layout"),
        "negative_window_rate": arguments.get("negative_window_rate"),
        "mixed_precision": arguments.get("mixed_precision"),
        "final_loss": round(losses[-1], 4) if losses else None,
    }


def _answer(qa, questions: Sequence[str], contexts: Sequence[str], batch_size: int, what: str) -> tuple[list, float]:
    """The pipeline's best answer to each question over its context, and the seconds it took."""
    start = time.perf_counter()
    answers = []
    for question, context in tqdm(list(zip(questions, contexts)), desc=what, unit="question"):
        answers.append(qa(question=question, context=context, max_answer_len=MAX_ANSWER_TOKENS, batch_size=batch_size))
    return answers, time.perf_counter() - start


def _score(rows: datasets.Dataset, answers: list[dict], seconds: float) -> dict:
    metric, _ = load_squad_metric(version_2=False)
    scores = metric.compute(
        predictions=[{"id": qid, "prediction_text": answer["answer"]} for qid, answer in zip(rows["id"], answers)],
        references=[{"id": qid, "answers": gold} for qid, gold in zip(rows["id"], rows["answers"])],
    )
    return {
        "questions": len(rows),
        "exact_match": round(scores["exact_match"], 2),
        "f1": round(scores["f1"], 2),
        "seconds_per_question": round(seconds / len(rows), 4),
    }


def evaluate_held_out(
    model_folder: str | os.PathLike,
    article: HeldOutArticle,
    max_document_questions: int | None = None,
    batch_size: int = 4,
    num_examples: int = 5,
) -> dict:
    """Answers the held-out questions with `pipeline("question-answering", model=model_folder,
    trust_remote_code=True)`: every question over its own paragraph (`own_paragraph`), and the first
    `max_document_questions` over the whole article (`whole_document`); EM/F1 and time per question of each, and the
    first `num_examples` questions with both predicted answers and the gold answers."""
    qa = pipeline("question-answering", model=str(model_folder), trust_remote_code=True)
    rows = article.questions
    own, own_seconds = _answer(qa, rows["question"], rows["context"], batch_size, "over its own paragraph")
    document_rows = (
        rows if max_document_questions is None else rows.select(range(min(max_document_questions, len(rows))))
    )
    whole, whole_seconds = _answer(
        qa, document_rows["question"], [article.document] * len(document_rows), batch_size, "over the whole article"
    )
    tokenizer = qa.tokenizer
    examples = [
        {
            "question": row["question"],
            "gold": row["answers"]["text"][0],
            "own_paragraph": own[index]["answer"],
            "whole_document": whole[index]["answer"],
        }
        for index, row in enumerate(document_rows.select(range(min(num_examples, len(document_rows)))))
    ]
    return {
        "title": article.title,
        "paragraphs": len(article.paragraphs),
        "document_tokens": len(tokenizer(article.document, add_special_tokens=False)["input_ids"]),
        "own_paragraph": _score(rows, own, own_seconds),
        "whole_document": _score(document_rows, whole, whole_seconds),
        "examples": examples,
    }


def attention_variants(model: BlockBertForQuestionAnswering) -> dict[str, dict]:
    """The configurations compared on the same weights: full attention (n = 1), and BlockBERT with n = 2 and n = 4
    (the model's own heads per shift where it has that n, else the default for that n)."""
    variants = {"full": {"num_blocks": 1, "heads_per_shift": None}}
    for num_blocks in (2, 4):
        own = model.config.attention_pattern == "blockwise" and model.config.num_blocks == num_blocks
        variants[f"n{num_blocks}"] = {
            "num_blocks": num_blocks,
            "heads_per_shift": list(model.config.heads_per_shift) if own else None,
        }
    return variants


def _label(config) -> str:
    if config.num_blocks == 1:
        return "full attention (n = 1)"
    return f"BlockBERT n = {config.num_blocks} ({':'.join(map(str, config.heads_per_shift))})"


def with_running_positions(model: BlockBertForQuestionAnswering) -> BlockBertForQuestionAnswering:
    """`model` itself, or where its positions restart at every block, a copy (same weights) whose positions run on
    through N over a table of N rows that repeat the trained ones, as the converter's `--max_seq_length` makes them.
    Full attention has a single block, so this is how it reads N tokens; where b is the trained row count, the rows it
    gives every token are the ones block-relative positions give, so the blockwise variants compute the same."""
    config = model.config
    if not config.block_relative_positions:
        return model
    style, pad = config.position_embedding_style, config.pad_token_id
    rows = config.max_sequence_length + (pad + 1 if style == "roberta" else 0)
    state = model.state_dict()
    key = "roberta.embeddings.position_embeddings.weight"
    state[key] = extend_position_embeddings(state[key], rows, style, pad)
    running = BlockBertConfig.from_dict(
        {**config.to_dict(), "block_relative_positions": False, "max_position_embeddings": rows}
    )
    clone = type(model)(running)
    clone.load_state_dict(state)
    clone.set_attn_implementation(config._attn_implementation)
    return clone.eval()


def _cost_with_kernel(trained, batch: Mapping, kernel: str, rounds: int) -> dict:
    models = {}
    for name, fields in attention_variants(trained).items():
        models[name] = with_blockwise_fields(trained, **fields)
        models[name].set_attn_implementation(kernel)
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
            name: {
                "label": _label(model.config),
                "median_s": round(timings[name]["median_s"], 4),
                "peak_bytes": peaks[name],
            }
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
    """One forward (batch 1) over `question` + `document` cut to the model's N tokens, for every `attention_variants`
    entry (same weights) and every attention kernel: the median time over `rounds` interleaved rounds with its
    same-run ratio to full attention, and the peak memory of the forward's tensors (`track_peak_memory`) with its
    ratio to full attention. `eager` materialises the attention scores; `sdpa` is PyTorch's fused kernel (the
    default)."""
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
