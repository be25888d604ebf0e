"""Seconds per question and EM/F1 of the question-answering pipeline on one fine-tuned model, run five ways: PyTorch
computing padding, PyTorch padding-free (the default), ONNX Runtime fp32, ONNX Runtime int8 (the default recipe) and
ONNX Runtime int8 with per-token activations (`--int8_activations per_token`).

    python benchmarks/qa_pipeline_speed.py --model_folder FINE_TUNED_QA_FOLDER --squad_file dev-v1.1.json.gz \\
        --title Sky_(United_Kingdom) --output results/benchmarks/qa_pipeline_speed.json \\
        --markdown results/benchmarks/qa_pipeline_speed.md

Every question of the chosen articles is answered twice, over its own paragraph and over its whole article
(paragraphs joined by blank lines, read in windows of the model's N), with the pipeline's window layout and answer
ranking from the model's config and `--batch_size` windows per forward. The ONNX folder is exported from the model
first (`examples/export_onnx.py --quantize`, verified against the eager model) unless `--onnx_folder` holds one made
with today's int8 recipe (`blockbert_hf.onnx.quantization.Int8Recipe`, as recorded in its `quantization.json`); a
folder quantized otherwise is refused; the per-token int8 model is quantized from it into a scratch folder. The
PyTorch runs take turns question by question, each question starting with the other run, so that drifts in machine
speed and the cost of running first hit them alike; then the three ONNX Runtime runs do the same (a PyTorch call
right after an ONNX Runtime one is slowed by ONNX Runtime's spinning threads). ONNX Runtime runs with its default
session options and as many threads as PyTorch.

int8 speed depends on the CPU: the results name it and whether it has VNNI (int8 dot products). Times are only
meaningful on an otherwise idle machine; EM/F1 and answer agreement do not depend on the load.
"""

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import onnxruntime
import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer

from blockbert_benchmarks.measuring.machine import machine_description, recorded_command, recorded_path
from blockbert_benchmarks.qa_pipeline import (  # noqa: F401 (read_questions: the questions this script reads)
    CONTEXTS,
    add_question_arguments,
    answer,
    onnx_pipeline,
    read_questions,
    same_answers,
    squad_scores,
)
from blockbert_benchmarks.reporting import print_and_write
from blockbert_hf import BlockBertForQuestionAnswering
from blockbert_hf.model.pipeline_question_answering import ExtractiveQuestionAnsweringPipeline
from blockbert_hf.onnx.export import INT8_ONNX_FILE, ONNX_FILE, QUANTIZATION_REPORT, export_onnx_folder, quantize_int8
from blockbert_hf.onnx.quantization import Int8Recipe, cpu_flags, cpu_has_vnni


RUNS = (
    "PyTorch, padded",
    "PyTorch, padding-free",
    "ONNX Runtime fp32",
    "ONNX Runtime int8",
    "ONNX Runtime int8, per token",
)
PER_TOKEN = Int8Recipe(activations="per_token")


def session_options() -> onnxruntime.SessionOptions:
    """ONNX Runtime's defaults (every graph optimisation) with as many intra-op threads as PyTorch uses."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    return options


def per_token_folder(onnx_folder: Path, scratch: Path) -> dict:
    """`scratch`: a copy of the exported folder's fp32 model, config and tokenizer, with its per-token int8 model
    (`PER_TOKEN`, calibrated on the verification text) as `INT8_ONNX_FILE`; returns the recipe applied."""
    for file_name in (ONNX_FILE, "config.json"):
        shutil.copyfile(onnx_folder / file_name, scratch / file_name)
    AutoTokenizer.from_pretrained(onnx_folder).save_pretrained(scratch)
    return quantize_int8(scratch, PER_TOKEN).to_dict()


def build_pipelines(model_folder: Path, onnx_folder: Path, per_token_folder: Path) -> dict:
    """The pipelines of `RUNS`, one tokenizer each (the pipeline sets its padding side)."""
    pipelines = {}
    for name, padding_free in ((RUNS[0], False), (RUNS[1], True)):
        model = BlockBertForQuestionAnswering.from_pretrained(model_folder, padding_free=padding_free).eval()
        tokenizer = AutoTokenizer.from_pretrained(model_folder)
        pipelines[name] = ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer, device=-1)
    for name, file_name in ((RUNS[2], ONNX_FILE), (RUNS[3], INT8_ONNX_FILE)):
        pipelines[name] = onnx_pipeline(onnx_folder, file_name, session_options=session_options())
    pipelines[RUNS[4]] = onnx_pipeline(per_token_folder, INT8_ONNX_FILE, session_options=session_options())
    return pipelines


def answer_all(pipelines: dict, questions: list[dict], context_field: str, batch_size: int) -> dict:
    """Every question through every pipeline: answers and seconds. The pipelines take turns, each question starting
    with the next one, since whichever runs first on a question is slower (the others' weights have left the caches)."""
    answers = {name: [] for name in pipelines}
    seconds = dict.fromkeys(pipelines, 0.0)
    names = list(pipelines)
    for index, row in enumerate(tqdm(questions, desc=f"over the {CONTEXTS[context_field]}", unit="question")):
        first = index % len(names)
        for name in names[first:] + names[:first]:
            text, elapsed = answer(pipelines[name], row, context_field, batch_size)
            answers[name].append(text)
            seconds[name] += elapsed
    results = {}
    for name in pipelines:
        per_question = round(seconds[name] / len(questions), 4)
        results[name] = {**squad_scores(questions, answers[name]), "seconds_per_question": per_question}
        results[name]["answers"] = answers[name]
    return results


def answer_by_runtime(pipelines: dict, questions: list[dict], context_field: str, batch_size: int) -> dict:
    """`answer_all` for the PyTorch runs, then for the ONNX Runtime runs: a PyTorch call right after an ONNX Runtime
    call is slowed by ONNX Runtime's threads, which keep spinning for a while after a run."""
    answers = {}
    for runtime in (RUNS[:2], RUNS[2:]):
        answers.update(answer_all({name: pipelines[name] for name in runtime}, questions, context_field, batch_size))
    reference = answers[RUNS[0]]["answers"]
    for row in answers.values():
        row["same_answers_as_padded"] = same_answers(row.pop("answers"), reference)
    return answers


def int8_description(recipe: dict) -> str:
    """What an `Int8Recipe.to_dict()` quantizes, in words."""
    bits = " in 7 bits (reduce_range)" if recipe["reduce_range"] else ""
    if recipe["activations"] == "per_block":
        activations = f"activations quantized per token and block of {recipe['block_size']} channels (MatMulNBits)"
    elif recipe["activations"] == "per_token":
        smoothing = f", smoothed with strength {recipe['smoothing']:g}" if recipe["smoothing"] is not None else ""
        activations = f"activations quantized per token{smoothing}, weights per channel{bits} (MatMulInteger)"
    else:
        weights = "per channel" if recipe["per_channel"] else "per tensor"
        activations = f"activations quantized per tensor, weights {weights}{bits} (quantize_dynamic)"
    embeddings = [] if recipe["quantize_embeddings"] else ["embeddings"]
    kept = ", ".join([*embeddings, "attention products", *recipe["fp32_modules"]])
    return f"int8 weight products, {activations}; in fp32: {kept}"


def check_int8_recipe(onnx_folder: Path) -> dict:
    """The folder's `quantization.json`, after checking that its int8 model was made with today's recipe for this
    CPU: one made otherwise (an earlier release's, or for a CPU without VNNI) would be measured under a wrong name."""
    report_file = onnx_folder / QUANTIZATION_REPORT
    report = json.loads(report_file.read_text(encoding="utf-8")) if report_file.is_file() else {}
    expected = Int8Recipe().resolved().to_dict()
    if report.get("recipe") != expected:
        raise ValueError(
            f"{onnx_folder / INT8_ONNX_FILE} was not quantized with today's recipe for this CPU ({expected}; its "
            f"{QUANTIZATION_REPORT} records {report.get('recipe')}). Export again: python examples/export_onnx.py "
            f"MODEL_FOLDER {onnx_folder} --quantize --overwrite, or leave --onnx_folder out."
        )
    return report


def render_markdown(results: dict) -> str:
    lines = [
        "# The question-answering pipeline on PyTorch and ONNX Runtime (measured by `benchmarks/qa_pipeline_speed.py`)",
        "",
        f"Machine: {results['machine']}, {results['threads']} threads; the CPU "
        f"{'has' if results['cpu_has_vnni'] else 'has no'} VNNI (int8 dot products: int8 speed depends on them). "
        f"Command: `{results['command']}`.",
        "",
        f"Model: `{results['model']}` (N = {results['max_seq_length']}, {results['attention']}); "
        f"{results['questions']} questions of {', '.join(results['titles'])}; {results['batch_size']} windows per "
        f"forward. int8: {results['int8']['description']}; max difference from the eager model on the export's "
        f"verification inputs {results['int8']['max_difference']:.3g}, the same answers as the eager model to "
        f"{results['int8']['verification_answers']} of the export's verification questions. int8, per token: "
        f"{int8_description(results['int8_per_token']['recipe'])}.",
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
    add_question_arguments(parser, "test")
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
        int8_report = check_int8_recipe(onnx_folder)
    except (OSError, ValueError) as error:
        parser.exit(1, f"error: {error}\n")
    with tempfile.TemporaryDirectory() as scratch:
        per_token_recipe = per_token_folder(onnx_folder, Path(scratch))
        pipelines = build_pipelines(model_folder, onnx_folder, Path(scratch))
        config = pipelines[RUNS[1]].model.config
        agreement = int8_report["answer_agreement"]
        recipe = int8_report["recipe"]
        results = {
            "machine": machine_description(),
            "cpu_has_vnni": cpu_has_vnni(),
            "cpu_int8_flags": sorted(flag for flag in cpu_flags() or () if "vnni" in flag or "amx" in flag),
            "threads": torch.get_num_threads(),
            "onnxruntime": onnxruntime.__version__,
            "command": recorded_command(
                ["python", "benchmarks/qa_pipeline_speed.py", *(sys.argv[1:] if argv is None else argv)]
            ),
            "model": recorded_path(args.model_folder),
            "max_seq_length": config.max_sequence_length,
            "attention": f"{config.attention_pattern}, n = {config.num_blocks}, heads {config.heads_per_shift}",
            "titles": list(dict.fromkeys(row["title"] for row in questions)),
            "questions": len(questions),
            "batch_size": args.batch_size,
            "int8": {
                "recipe": recipe,
                "description": int8_description(recipe),
                "max_difference": max(int8_report["max_difference_per_length"].values()),
                "verification_answers": f"{agreement['same_answers']}/{agreement['pairs']}",
            },
            "int8_per_token": {"recipe": per_token_recipe},
            "paragraph": answer_by_runtime(pipelines, questions, "context", args.batch_size),
            "document": answer_by_runtime(pipelines, questions, "document", args.batch_size),
        }
    print_and_write(results, render_markdown(results), args.output, args.markdown)


if __name__ == "__main__":
    main()
