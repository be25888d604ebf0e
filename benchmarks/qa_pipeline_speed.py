"""Seconds per question and EM/F1 of the question-answering pipeline on one fine-tuned model, run four ways: PyTorch
computing padding, PyTorch padding-free (the default), ONNX Runtime fp32 and ONNX Runtime int8.

    python benchmarks/qa_pipeline_speed.py --model_folder FINE_TUNED_QA_FOLDER --squad_file dev-v1.1.json.gz \\
        --title Sky_(United_Kingdom) --output docs/benchmarks/qa_pipeline_speed.json \\
        --markdown docs/benchmarks/qa_pipeline_speed.md

Every question of the chosen articles is answered twice, over its own paragraph and over its whole article
(paragraphs joined by blank lines, read in windows of the model's N), with the pipeline's window layout and answer
ranking from the model's config and `--batch_size` windows per forward. The ONNX folder is exported from the model
first (`examples/export_onnx.py --quantize`, verified against the eager model) unless `--onnx_folder` holds one. The
PyTorch runs take turns question by question, each question starting with the other run, so that drifts in machine
speed and the cost of running first hit them alike; then the two ONNX Runtime runs do the same (a PyTorch call right
after an ONNX Runtime one is slowed by ONNX Runtime's spinning threads).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer

from blockbert_benchmarks.measuring.machine import machine_description, recorded_command
from blockbert_benchmarks.reporting import print_and_write
from blockbert_hf import BlockBertForQuestionAnswering
from blockbert_hf.export import (
    INT8_ONNX_FILE,
    ONNX_FILE,
    QUANTIZATION_REPORT,
    OnnxBlockBertForQuestionAnswering,
    export_onnx_folder,
)
from blockbert_hf.pipeline_question_answering import ExtractiveQuestionAnsweringPipeline
from blockbert_hf.qa import load_squad_metric, read_squad_json


RUNS = ("PyTorch, padded", "PyTorch, padding-free", "ONNX Runtime fp32", "ONNX Runtime int8")
MAX_ANSWER_TOKENS = 30  # run_qa's default


def read_questions(squad_file: str, titles: list[str] | None, max_questions: int | None) -> list[dict]:
    """The questions of the chosen articles (all when `titles` is None), each with its paragraph and its article."""
    rows = read_squad_json(squad_file)
    available = list(dict.fromkeys(rows["title"]))
    titles = titles or available
    unknown = [title for title in titles if title not in available]
    if unknown:
        raise ValueError(f"{squad_file} has no article titled {', '.join(map(repr, unknown))}; it has: {available}.")
    questions = []
    for title in titles:
        article = rows.filter(lambda row, title=title: row["title"] == title)
        document = "\n\n".join(dict.fromkeys(article["context"]))
        questions += [{**row, "document": document} for row in article]
    return questions[:max_questions] if max_questions else questions


def build_pipelines(model_folder: Path, onnx_folder: Path) -> dict:
    """The four pipelines of `RUNS`, one tokenizer each (the pipeline sets its padding side)."""
    tokenizer = lambda: AutoTokenizer.from_pretrained(model_folder)  # noqa: E731
    pipelines = {}
    for name, padding_free in ((RUNS[0], False), (RUNS[1], True)):
        model = BlockBertForQuestionAnswering.from_pretrained(model_folder, padding_free=padding_free).eval()
        pipelines[name] = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer(), device=-1)
    for name, file_name in ((RUNS[2], ONNX_FILE), (RUNS[3], INT8_ONNX_FILE)):
        model = OnnxBlockBertForQuestionAnswering.from_pretrained(onnx_folder, file_name=file_name)
        pipelines[name] = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer(), device=-1)
    return pipelines


def answer_all(pipelines: dict, questions: list[dict], context_field: str, batch_size: int) -> dict:
    """Every question through every pipeline: answers and seconds. The pipelines take turns, each question starting
    with the next one, since whichever runs first on a question is slower (the others' weights have left the caches)."""
    answers = {name: [] for name in pipelines}
    seconds = dict.fromkeys(pipelines, 0.0)
    names = list(pipelines)
    for index, row in enumerate(tqdm(questions, desc=f"over the {context_field}", unit="question")):
        first = index % len(names)
        for name in names[first:] + names[:first]:
            qa = pipelines[name]
            start = time.perf_counter()
            answer = qa(
                question=row["question"],
                context=row[context_field],
                max_answer_len=MAX_ANSWER_TOKENS,
                batch_size=batch_size,
            )
            seconds[name] += time.perf_counter() - start
            answers[name].append(answer["answer"])
    metric, _ = load_squad_metric(version_2=False)
    references = [{"id": row["id"], "answers": row["answers"]} for row in questions]
    results = {}
    for name in pipelines:
        predictions = [{"id": row["id"], "prediction_text": text} for row, text in zip(questions, answers[name])]
        scores = metric.compute(predictions=predictions, references=references)
        results[name] = {
            "exact_match": round(scores["exact_match"], 2),
            "f1": round(scores["f1"], 2),
            "seconds_per_question": round(seconds[name] / len(questions), 4),
            "answers": answers[name],
        }
    return results


def answer_by_runtime(pipelines: dict, questions: list[dict], context_field: str, batch_size: int) -> dict:
    """`answer_all` for the PyTorch runs, then for the ONNX Runtime runs: a PyTorch call right after an ONNX Runtime
    call is slowed by ONNX Runtime's threads, which keep spinning for a while after a run."""
    answers = {}
    for runtime in (RUNS[:2], RUNS[2:]):
        answers.update(answer_all({name: pipelines[name] for name in runtime}, questions, context_field, batch_size))
    reference = answers[RUNS[0]]["answers"]
    for row in answers.values():
        row["same_answers_as_padded"] = sum(a == b for a, b in zip(row.pop("answers"), reference))
    return answers


def render_markdown(results: dict) -> str:
    lines = [
        "# The question-answering pipeline on PyTorch and ONNX Runtime (measured by `benchmarks/qa_pipeline_speed.py`)",
        "",
        f"Machine: {results['machine']}, {results['threads']} threads. Command: `{results['command']}`.",
        "",
        f"Model: `{results['model']}` (N = {results['max_seq_length']}, {results['attention']}); "
        f"{results['questions']} questions of {', '.join(results['titles'])}; {results['batch_size']} windows per "
        "forward. The int8 model's max difference from the eager model on the export's verification inputs: "
        f"{results['int8_max_difference']:.3g}.",
    ]
    for context_field, title in (("paragraph", "its own paragraph"), ("document", "the whole article")):
        section = results[context_field]
        padded = section[RUNS[0]]["seconds_per_question"]
        lines += [
            "",
            f"## Each question over {title}",
            "",
            "| run | EM | F1 | seconds per question | speed-up over padded | answers equal to padded |",
            "|---|---|---|---|---|---|",
        ]
        for name, row in section.items():
            lines.append(
                f"| {name} | {row['exact_match']:.1f} | {row['f1']:.1f} | {row['seconds_per_question']:.3f} | "
                f"{padded / row['seconds_per_question']:.2f}x | {row['same_answers_as_padded']}/"
                f"{results['questions']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_folder", required=True, help="a fine-tuned BlockBERT question-answering folder")
    parser.add_argument("--onnx_folder", help="its export (default: exported into MODEL_FOLDER-onnx first)")
    parser.add_argument("--squad_file", required=True, help="SQuAD-format .json(.gz) holding the test articles")
    parser.add_argument("--title", action="append", help="an article to test on (repeatable; default: all)")
    parser.add_argument("--max_questions", type=int, default=0, help="the first K questions only (0: all)")
    parser.add_argument("--batch_size", type=int, default=8, help="windows per forward")
    parser.add_argument("--output", help="write the measurements as JSON here")
    parser.add_argument("--markdown", help="write the tables as markdown here")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.max_questions < 0:
        parser.error("--batch_size must be >= 1 and --max_questions >= 0.")
    model_folder = Path(args.model_folder)
    onnx_folder = Path(args.onnx_folder or f"{model_folder}-onnx")
    try:
        questions = read_questions(args.squad_file, args.title, args.max_questions)
        if not (onnx_folder / INT8_ONNX_FILE).is_file():
            export_onnx_folder(model_folder, onnx_folder, quantize=True)
    except (OSError, ValueError) as error:
        parser.exit(1, f"error: {error}\n")
    pipelines = build_pipelines(model_folder, onnx_folder)
    config = pipelines[RUNS[1]].model.config
    int8_report = json.loads((onnx_folder / QUANTIZATION_REPORT).read_text(encoding="utf-8"))
    results = {
        "machine": machine_description(),
        "threads": torch.get_num_threads(),
        "command": recorded_command(
            ["python", "benchmarks/qa_pipeline_speed.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "model": args.model_folder,
        "max_seq_length": config.max_sequence_length,
        "attention": f"{config.attention_pattern}, n = {config.num_blocks}, heads {config.heads_per_shift}",
        "titles": list(dict.fromkeys(row["title"] for row in questions)),
        "questions": len(questions),
        "batch_size": args.batch_size,
        "int8_max_difference": max(int8_report["max_difference_per_length"].values()),
        "paragraph": answer_by_runtime(pipelines, questions, "context", args.batch_size),
        "document": answer_by_runtime(pipelines, questions, "document", args.batch_size),
    }
    print_and_write(results, render_markdown(results), args.output, args.markdown)


if __name__ == "__main__":
    main()
