"""How each way of quantizing a fine-tuned question-answering model to int8 changes its answers: EM/F1 and answers equal
to the fp32 model's, over paragraphs and over whole articles, for the variants `blockbert_hf.onnx.export.quantize_int8`
was chosen from (`blockbert_hf.onnx.quantization`).

    python benchmarks/int8_recipe.py --model_folder outputs/demo/qa/model --onnx_folder outputs/demo/qa/model-onnx \\
        --squad_file data/samples/squad_v1.1_dev_sample.json --title Jacksonville,_Florida \\
        --output results/benchmarks/int8_recipe.json

Choose on a development article, not on the one the results are reported on. Every variant quantizes the same
`model.onnx` (exported from the model first, verified against the eager model, unless `--onnx_folder` holds one) into
a scratch folder; the fp32 ONNX model (equal to PyTorch within 1e-4) gives the reference answers. Then each variant's
forward over one batch of the article's windows is timed (the median of `--timing_rounds`, the variants and fp32
taking turns), to weigh accuracy against speed: accuracy does not depend on the machine's load, time does
(`benchmarks/qa_pipeline_speed.py` times the whole pipeline).
"""

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoTokenizer

from blockbert_benchmarks.measuring.machine import machine_description, recorded_command, recorded_path
from blockbert_benchmarks.qa_pipeline import (
    CONTEXTS,
    add_question_arguments,
    answer,
    read_questions,
    same_answers,
    squad_scores,
)
from blockbert_benchmarks.reporting import print_and_write
from blockbert_hf.model.pipeline_question_answering import ExtractiveQuestionAnsweringPipeline, model_window_layout
from blockbert_hf.model.question_answering_windows import tokenize_windows
from blockbert_hf.onnx.export import (
    ONNX_FILE,
    OnnxBlockBert,
    OnnxBlockBertForQuestionAnswering,
    export_onnx_folder,
    quantize_int8,
)
from blockbert_hf.onnx.quantization import DEFAULT_ORT_RECIPE, Int8Recipe, cpu_has_vnni


CHOSEN = Int8Recipe()
PER_TENSOR = Int8Recipe(activations="per_tensor")
PER_TOKEN = Int8Recipe(activations="per_token")
# From quantize_dynamic's defaults (what quantize_int8 did before) to the best per-tensor recipe one change at a time,
# with 7-bit weights (what it does on a CPU without VNNI), then per-block activations, the chosen recipe and its
# neighbours, then per-token activations with and without smoothing.
VARIANTS = {
    "per-tensor, quantize_dynamic defaults: per-tensor weights, head and embeddings in int8": DEFAULT_ORT_RECIPE,
    "per-tensor, + embeddings in fp32": dataclasses.replace(DEFAULT_ORT_RECIPE, quantize_embeddings=False),
    "per-tensor, + per-channel weights": dataclasses.replace(PER_TENSOR, fp32_modules=(), preprocess=False),
    "per-tensor, + QA head in fp32": dataclasses.replace(PER_TENSOR, preprocess=False),
    "per-tensor, + pre-processing": PER_TENSOR,
    "per-tensor, 7-bit weights (reduce_range: a CPU without VNNI)": dataclasses.replace(PER_TENSOR, reduce_range=True),
    "per-block activations, blocks of 128 (the chosen recipe)": CHOSEN,
    "per-block, blocks of 64": dataclasses.replace(CHOSEN, block_size=64),
    "per-block, blocks of 256": dataclasses.replace(CHOSEN, block_size=256),
    "per-block, QA head in int8": dataclasses.replace(CHOSEN, fp32_modules=()),
    "per-token activations (MatMulInteger), no smoothing": dataclasses.replace(PER_TOKEN, smoothing=None),
    "per-token, SmoothQuant strength 0.5": PER_TOKEN,
    "per-token, SmoothQuant strength 0.75": dataclasses.replace(PER_TOKEN, smoothing=0.75),
    "per-token, strength 0.5, 7-bit weights (a CPU without VNNI)": dataclasses.replace(PER_TOKEN, reduce_range=True),
}


def timing_batch(tokenizer, config, questions: list[dict], batch_size: int) -> dict[str, np.ndarray]:
    """`batch_size` windows of the first questions over their article, as the pipeline cuts them, padded on the
    right: the input each variant's forward is timed on."""
    layout, block_size = model_window_layout(config)
    rows = questions[:batch_size]
    windows = tokenize_windows(
        tokenizer,
        [row["question"] for row in rows],
        [row["document"] for row in rows],
        config.max_sequence_length,
        min(128, config.max_sequence_length // 8),
        layout=layout,
        block_size=block_size,
    )
    names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in windows]
    chosen = [
        {name: windows[name][index] for name in names} for index in range(min(batch_size, len(windows[names[0]])))
    ]
    batch = tokenizer.pad(chosen, padding="longest", return_tensors="np")
    return {name: np.asarray(batch[name], dtype=np.int64) for name in names}


def forward_seconds(files: dict[str, Path], batch: dict, rounds: int) -> dict[str, float | None]:
    """Median seconds of one forward of `batch` per ONNX file (`{name: path}`), the files taking turns round by round,
    each round starting with the next one, so that drifts in machine load hit them alike; None for no rounds."""
    if rounds == 0:
        return dict.fromkeys(files)
    runners = {name: OnnxBlockBert.from_pretrained(path.parent, file_name=path.name) for name, path in files.items()}
    seconds = {name: [] for name in runners}
    names = list(runners)
    for runner in runners.values():
        runner(**batch)  # untimed: the first run prepares the session
    for index in range(rounds):
        first = index % len(names)
        for name in names[first:] + names[:first]:
            start = time.perf_counter()
            runners[name](**batch)
            seconds[name].append(time.perf_counter() - start)
    return {name: round(statistics.median(times), 4) for name, times in seconds.items()}


def answer_all(qa, questions: list[dict], batch_size: int, desc: str) -> dict[str, list[str]]:
    """Every question over its paragraph and over its article: `{"paragraph": answers, "document": answers}`."""
    answers = {name: [] for name in CONTEXTS.values()}
    for field, name in CONTEXTS.items():
        for row in tqdm(questions, desc=f"{desc}, {name}", unit="question"):
            answers[name].append(answer(qa, row, field, batch_size)[0])
    return answers


def scored(questions: list[dict], answers: dict, reference: dict | None = None) -> dict:
    """EM/F1 per context, and how many answers equal `reference`'s."""
    results = {}
    for name, texts in answers.items():
        results[name] = squad_scores(questions, texts)
        if reference is not None:
            results[name]["same_answers_as_fp32"] = same_answers(texts, reference[name])
            results[name]["f1_change"] = round(results[name]["f1"] - squad_scores(questions, reference[name])["f1"], 2)
    return results


def measure_variants(onnx_folder: Path, questions: list[dict], batch_size: int, variants: dict, rounds: int) -> dict:
    """The fp32 reference and every variant's scores (`scored`), each variant quantized into a scratch folder, then
    the forward time of each (`forward_seconds`)."""
    tokenizer = AutoTokenizer.from_pretrained(onnx_folder)
    config = AutoConfig.from_pretrained(onnx_folder)

    def pipeline(folder: Path, file_name: str) -> ExtractiveQuestionAnsweringPipeline:
        model = OnnxBlockBertForQuestionAnswering.from_pretrained(folder, file_name=file_name)
        return ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)

    reference = answer_all(pipeline(onnx_folder, ONNX_FILE), questions, batch_size, "fp32")
    results = {"fp32": scored(questions, reference), "variants": []}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        for file_name in (ONNX_FILE, "config.json"):
            shutil.copyfile(onnx_folder / file_name, scratch / file_name)
        tokenizer.save_pretrained(scratch)  # the per-token recipe calibrates on text it tokenizes
        files = {"fp32": scratch / ONNX_FILE}
        for index, (name, recipe) in enumerate(variants.items()):
            files[name] = scratch / f"variant_{index}.onnx"
            applied = quantize_int8(scratch, recipe, file_name=files[name].name)
            answers = answer_all(pipeline(scratch, files[name].name), questions, batch_size, name)
            row = {"name": name, "recipe": applied.to_dict(), "chosen": recipe == CHOSEN}
            results["variants"].append({**row, **scored(questions, answers, reference)})
        batch = timing_batch(tokenizer, config, questions, batch_size)
        seconds = forward_seconds(files, batch, rounds)
    results["timing_batch"] = list(batch["input_ids"].shape)
    results["fp32"]["seconds_per_forward"] = seconds["fp32"]
    for row in results["variants"]:
        row["seconds_per_forward"] = seconds[row["name"]]
    return results


def render_markdown(results: dict) -> str:
    lines = [
        f"int8 variants on {', '.join(results['titles'])} ({results['questions']} questions); fp32 whole-article F1 "
        f"{results['fp32']['document']['f1']:.1f}, paragraph F1 {results['fp32']['paragraph']['f1']:.1f}.",
        "",
        "| variant | article F1 | change | same answers | paragraph F1 | change | same answers | forward, x fp32 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    fp32_seconds = results["fp32"]["seconds_per_forward"]
    for row in results["variants"]:
        cells = [
            f"{row[name]['f1']:.1f} | {row[name]['f1_change']:+.1f} | {row[name]['same_answers_as_fp32']}"
            for name in ("document", "paragraph")
        ]
        speed = f"{fp32_seconds / row['seconds_per_forward']:.2f}x" if fp32_seconds else ""
        lines.append(f"| {row['name']} | {' | '.join(cells)} | {speed} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_question_arguments(parser, "measure")
    parser.add_argument(
        "--timing_rounds",
        type=int,
        default=10,
        help="forwards of one batch timed per variant, median kept (0: none; only an idle machine's times mean much)",
    )
    parser.add_argument("--output", help="write the measurements as JSON here")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.max_questions < 0 or args.timing_rounds < 0:
        parser.error("--batch_size must be >= 1, --max_questions and --timing_rounds >= 0.")
    model_folder = Path(args.model_folder)
    onnx_folder = Path(args.onnx_folder or f"{model_folder}-onnx")
    try:
        questions = read_questions(args.squad_file, args.title, args.max_questions)
        if not (onnx_folder / ONNX_FILE).is_file():
            export_onnx_folder(model_folder, onnx_folder)
    except (OSError, ValueError) as error:
        parser.exit(1, f"error: {error}\n")
    results = {
        "machine": machine_description(),
        "cpu_has_vnni": cpu_has_vnni(),
        "command": recorded_command(["python", "benchmarks/int8_recipe.py", *(sys.argv[1:] if argv is None else argv)]),
        "model": recorded_path(model_folder),
        "titles": list(dict.fromkeys(row["title"] for row in questions)),
        "questions": len(questions),
        "batch_size": args.batch_size,
        "onnxruntime": onnxruntime.__version__,
        **measure_variants(onnx_folder, questions, args.batch_size, VARIANTS, args.timing_rounds),
    }
    print_and_write(results, render_markdown(results), args.output, None)


if __name__ == "__main__":
    main()
