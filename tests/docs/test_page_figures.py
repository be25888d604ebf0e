"""The figures of README.md and docs/results.md are read from the files that recorded them, and the claims made
about them hold.

Every result a page reports (a speed or memory ratio, a perplexity, EM/F1, a time) is registered in `FIGURES` below,
under its page, with the results file it comes from, and must equal that file's value as formatted there. A page marks
the passages that report results with `<!-- figures -->` ... `<!-- /figures -->` (HTML comments, not rendered; inline
within a paragraph or on their own lines around a table or block): every number inside them must be a registered
figure of that page or one of the `ALLOWED` phrases, so a new figure without a source fails. Every page of the
repository that has such a region is one of `FIGURES`' pages.
"""

import configparser
import json
import os
import re

import pytest
from page_checks import (
    FIGURES_START,
    PAGES,
    REPO_ROOT,
    Figure,
    Region,
    figure_regions,
    json_key,
    markdown_cell,
    memory_ratio,
    read_page,
    text_number,
    time_ratio,
    unaccounted_numbers,
)


TRAIN_STEP = "results/benchmarks/train_step.json"
INFERENCE = "results/benchmarks/inference.json"
PRETRAINING = "results/pretraining_comparison/comparison.json"
QA_HALVES = "results/qa_squad_halves/eval_metrics.json"
DEMO = "results/demo/results.json"
DEMO_STARTS = "results/demo/starts/results.json"
QA_COMPARISON = "results/qa_comparison/results.json"
DURATIONS = "results/test_durations.json"
BLOCKWISE_512, FULL_512 = "n512_n2_10-2_seed0", "n512_full_seed0"
FULL_512_SEED_1, BLOCKWISE_512_N3, SPARSE_512 = "n512_full_seed1", "n512_n3_8-2-2_seed0", "n512_sparse_fixed"
LONG_1024, LONG_512 = "n1024_n2_10-2", "n512_full_article_seed0"
LONG_COST = "results/benchmarks/long_document_cost.json"
LONG_COST_BLOCKWISE, LONG_COST_SLIDING = "BlockBERT n = 2 (10:2)", "sliding windows, full attention"
LAYOUT_PREFIXED, LAYOUT_QUESTION_FIRST = "dev_n1024_n2_prefixed_blocks", "dev_n1024_n2_question_first"
RESULTS = "docs/results.md"
CPU_THROUGHPUT = "results/adaptation/cpu_throughput.json"
REFERENCE_RUN = "results/adaptation/reference/adaptation_results.json"
STAGE_A = "results/distillation/stage_a/results.json"
STAGE_A_CONTROL = "results/distillation/stage_a/n512_n2_10-2_prefixed_seed0/results.json"  # (f)
STAGE_A_DISTILLED = "results/distillation/stage_a/n512_n2_10-2_distilled_prefixed_seed0/results.json"  # (e)


def adaptation_run(run: str, key: str):
    return json_key("runs", run, key)


def reference(key: str):
    return adaptation_run("reference", key)


def run_steps(run: str):
    """Optimizer steps of an adaptation run, from its recorded command."""

    def steps(data) -> int:
        command = data["runs"][run]["commands"][0].split()
        return int(command[command.index("--max_train_steps") + 1])

    return steps


def reference_last_change(data) -> float:
    """How far apart the reference run's last two held-out evaluations are."""
    (_, before), (_, last) = data["runs"]["reference"]["held_out_loss_curve"][-2:]
    return before - last


PAIR_RUN = "results/adaptation/n512_pair_cpu/adaptation_results.json"
PAIR_DIAGNOSTIC = "results/adaptation/n512_pair_cpu/diagnostic_{}.json"
PAIR_FULL, PAIR_N2 = "full_n512", "n512_n2_10-2"


def pair_gap(key: str):
    """n = 2's held-out loss minus full attention's, before or after the runs."""
    return lambda data: data["runs"][PAIR_N2][key] - data["runs"][PAIR_FULL][key]


def late_fall(run: str):
    """How much a run's held-out loss fell between its third-last and second-last evaluations."""
    return lambda data: (
        data["runs"][run]["held_out_loss_curve"][-3][1] - data["runs"][run]["held_out_loss_curve"][-2][1]
    )


def late_steps(position: int):
    """The step of a pair run's evaluation at `position` (from the end), from its tokens and the batch."""
    return lambda data: (
        data["runs"][PAIR_FULL]["held_out_loss_curve"][position][0] // data["settings"]["tokens_per_batch"]
    )


QA_SPEED = "results/benchmarks/qa_pipeline_speed.json"
QA_SPEED_INTEL = "results/benchmarks/qa_pipeline_speed_intel_xeon.json"  # the same command on an Intel Xeon
QA_SPEED_AMD_AVX_VNNI = "results/benchmarks/qa_pipeline_speed_amd_epyc_avx_vnni.json"  # on an AMD EPYC with AVX-VNNI
PADDED, FP32, INT8 = "PyTorch, padded", "ONNX Runtime fp32", "ONNX Runtime int8"
INT8_PER_TOKEN_RUN = "ONNX Runtime int8, per token"


def qa_speed(context: str, run: str, key: str):
    return json_key(context, run, key)


def qa_speed_up(run: str):
    """A run's speed over whole articles relative to PyTorch's padded computation, as the benchmark's table gives it."""
    return lambda data: data["document"][PADDED]["seconds_per_question"] / data["document"][run]["seconds_per_question"]


INT8_RECIPE = "results/benchmarks/int8_recipe.json"
INT8_DEFAULTS, INT8_PER_TENSOR = "per-tensor, quantize_dynamic defaults", "per-tensor, + pre-processing"
INT8_CHOSEN, INT8_PER_TOKEN = "per-block activations, blocks of 128", "per-token, SmoothQuant strength 0.5"
INT8_UNSMOOTHED = "per-token activations (MatMulInteger), no smoothing"


def int8_variant(name_start: str, read):
    """`read(variant, fp32)` of the int8 variant whose name starts with `name_start`."""

    def figure(data):
        (variant,) = [row for row in data["variants"] if row["name"].startswith(name_start)]
        return read(variant, data["fp32"])

    return figure


def unchanged_f1(variant, fp32):
    """A variant's whole-article F1 where it equals fp32's (what "as in fp32" claims), else NaN (no match)."""
    return variant["document"]["f1"] if variant["document"]["f1"] == fp32["document"]["f1"] else float("nan")


def int8_kept(name_start: str):
    return int8_variant(name_start, lambda variant, fp32: variant["document"]["same_answers_as_fp32"])


def int8_speed_up(name_start: str):
    return int8_variant(name_start, lambda variant, fp32: fp32["seconds_per_forward"] / variant["seconds_per_forward"])


def adaptation_hours(tokens: int):
    """Hours of `run_mlm.py` training for `tokens` at the measured CPU speed."""
    return lambda data: tokens / data["tokens_per_second"] / 3600


def ratio_of(numerator, denominator):
    return lambda data: numerator(data) / denominator(data)


def comparison_f1(cell: str, test_set: str, key: str = "f1"):
    return json_key("cells", cell, "sets", test_set, key)


def recipe_value(cell: str, key: str):
    return json_key("cells", cell, "recipe", key)


def verdict_loss(cell: str):
    """How far below full attention a configuration scored over filled contexts, averaged over its seeds."""
    return lambda data: -data["seed_averaged_verdicts"][cell]["window_512"]["f1"]["difference"]


def sliding_loss(test_set: str, bound: str):
    """How far BlockBERT at N = 1024 scored below sliding windows of 512 on a set (the negated difference)."""
    return lambda data: -data["differences_to_sliding_windows"][LONG_1024][test_set]["f1"][bound]


def whole_article_ratio(rule: str):
    """The long arm's N = 512 model's whole-article F1 over its F1 on the same questions' own paragraphs."""
    return json_key("whole_articles", LONG_512, "by_window_scoring", rule, "ratio")


def long_cost_ratio(pick):
    """The least (`min`) or most (`max`) time per question of BlockBERT at N = 1024 relative to sliding windows of 512,
    over the contexts longer than one window (benchmarks/long_document_cost.py)."""

    def read(data):
        ratios = []
        for entry in data["sets"].values():
            if entry["median_context_tokens"] > 512:
                models = entry["models"]
                blockwise, sliding = models[LONG_COST_BLOCKWISE], models[LONG_COST_SLIDING]
                ratios.append(blockwise["seconds_per_question"] / sliding["seconds_per_question"])
        return pick(ratios)

    return read


def layout_run(cell: str) -> str:
    return f"results/qa_recipe/{cell}/results.json"


def recipe_dev_f1(data) -> float:
    """A layout run's dev F1 averaged over the three dev sets under its window scoring (the layout rule's measure)."""
    return sum(entry["f1"] for entry in data["sets"].values()) / len(data["sets"])


def seeds_of_each(*arms: str):
    """The number of seeds each of Stage A's `arms` ran (None, which no page shows, where they differ)."""

    def read(results):
        counts = {len(results["arms"][arm]["seeds"]) for arm in arms}
        return counts.pop() if len(counts) == 1 else None

    return read


def demo_f1_ratio(results) -> float:
    """The demo's whole-article F1 over its paragraph F1 (the same questions)."""
    return results["held_out"]["whole_document"]["f1"] / results["held_out"]["own_paragraph"]["f1"]


def demo_cost(kernel: str, model: str, ratio: str):
    return json_key("efficiency", "kernels", kernel, f"{ratio}_ratio_to_full", model)


TRAINING_MEMORY_N2 = memory_ratio((4, 1024), "blockbert-n2-sdpa", "roberta-eager")

FIGURES = {
    # The results on the model page.
    "README.md": [
        Figure("needs {}x RoBERTa's peak memory", TRAIN_STEP, TRAINING_MEMORY_N2),
        Figure("reading\n  N = {} tokens", QA_COMPARISON, json_key("cells", LONG_1024, "cell", "max_seq_length"), "{}"),
        Figure("at once scored F1 {} over whole", QA_COMPARISON, comparison_f1(LONG_1024, "article"), "{:.1f}"),
        Figure("attention {} on the same", QA_COMPARISON, comparison_f1(LONG_512, "article"), "{:.1f}"),
        Figure("on the same {} questions", QA_COMPARISON, comparison_f1(LONG_1024, "article", "questions"), "{:,}"),
        Figure("difference: {} to", QA_COMPARISON, sliding_loss("article", "low"), "{:.1f}"),
        Figure("to {} points below)", QA_COMPARISON, sliding_loss("article", "high"), "{:.1f}"),
        # Stage A's distilled arm (e) against full attention (a), in "Where it stands".
        Figure("Accuracy at N = {}:", STAGE_A_DISTILLED, json_key("cell", "max_seq_length"), "{}"),
        Figure(
            "filled to {} tokens, where full attention with the same recipe",
            STAGE_A_DISTILLED,
            json_key("cell", "max_seq_length"),
            "{}",
        ),
        Figure("n = 2 reached F1 {} on", STAGE_A, json_key("arms", "e", "f1", "window_512"), "{:.1f}"),
        Figure("on {} SQuAD questions", STAGE_A, json_key("comparisons", "a-e", "window_512", "questions"), "{:,}"),
        Figure("the same recipe scored {} (mean", STAGE_A, json_key("arms", "a", "f1", "window_512"), "{:.1f}"),
        Figure("(mean of {} seeds each", STAGE_A, seeds_of_each("a", "e"), "{}"),
        Figure("ahead by {} to", STAGE_A, lambda r: -r["comparisons"]["a-e"]["window_512"]["high"], "{:.1f}"),
        Figure("to {} points, 95%", STAGE_A, lambda r: -r["comparisons"]["a-e"]["window_512"]["low"], "{:.1f}"),
        Figure("`make demo` took {} minutes", DEMO, lambda r: r["elapsed_seconds"] / 60, "{:.1f}"),
        Figure("it scored dev F1 {} where", layout_run(LAYOUT_PREFIXED), recipe_dev_f1, "{:.1f}"),
        Figure("at the start scored {}", layout_run(LAYOUT_QUESTION_FIRST), recipe_dev_f1, "{:.1f}"),
        Figure("whole-article F1 ({} against", QA_SPEED, qa_speed("document", INT8, "f1"), "{:.1f}"),
        Figure("against {} in PyTorch", QA_SPEED, qa_speed("document", PADDED, "f1"), "{:.1f}"),
        Figure("PyTorch, {} of", QA_SPEED, qa_speed("document", INT8, "same_answers_as_padded"), "{}"),
        Figure("of {} answers", QA_SPEED, json_key("questions"), "{}"),
        Figure("pipeline at {}x PyTorch's speed in int8", QA_SPEED, qa_speed_up(INT8)),
        Figure("int8 and {}x in fp32", QA_SPEED, qa_speed_up(FP32)),
        Figure("on a {}-core AMD", QA_SPEED, json_key("threads"), "{}"),
        Figure("({}x with", QA_SPEED, qa_speed_up(INT8_PER_TOKEN_RUN)),
        Figure(
            "which changed {} answers",
            QA_SPEED,
            lambda d: d["questions"] - d["document"][INT8_PER_TOKEN_RUN]["same_answers_as_padded"],
            "{}",
        ),
        Figure("on other {}-core CPUs", QA_SPEED_INTEL, json_key("threads"), "{}"),
        Figure("fp32 ran at {}x on an AMD", QA_SPEED_AMD_AVX_VNNI, qa_speed_up(FP32)),
        Figure("AVX-VNNI and {}x on an Intel", QA_SPEED_INTEL, qa_speed_up(FP32)),
        Figure("in {} hours, BlockBERT", STAGE_A, lambda r: r["arms"]["f"]["train_hours"][0], "{:.1f}"),
        Figure("n = 2\nscored F1 {} on", STAGE_A, json_key("arms", "f", "f1", "window_512"), "{:.1f}"),
        Figure("on {} test questions", STAGE_A, json_key("comparisons", "a-f", "window_512", "questions"), "{:,}"),
        Figure(
            "filled to {} tokens, where full attention with the same epochs",
            STAGE_A_CONTROL,
            json_key("cell", "max_seq_length"),
            "{}",
        ),
        Figure("batch scored {} (mean", STAGE_A, json_key("arms", "a", "f1", "window_512"), "{:.1f}"),
        Figure("(mean of {} seeds)", STAGE_A, lambda r: len(r["arms"]["a"]["seeds"]), "{}"),
        Figure("fine-tuning added {}, which", STAGE_A, json_key("distillation_effect", "difference"), "{:.1f}"),
    ],
    # int8 on the development article and the QA pipeline's speed on two CPUs.
    "docs/benchmarks.md": [
        Figure("{} of 96 whole-article", INT8_RECIPE, int8_kept(INT8_DEFAULTS), "{}"),
        Figure("of {} whole-article answers", INT8_RECIPE, json_key("questions"), "{}"),
        Figure("{}, at", INT8_RECIPE, int8_kept(INT8_PER_TENSOR), "{}"),
        Figure(", at {}x the fp32 forward", INT8_RECIPE, int8_speed_up(INT8_PER_TENSOR)),
        Figure("whole-article F1\n{} as in fp32", INT8_RECIPE, int8_variant(INT8_CHOSEN, unchanged_f1), "{:.1f}"),
        Figure("as in fp32, {} of", INT8_RECIPE, int8_kept(INT8_CHOSEN), "{}"),
        Figure("of {} answers unchanged, but", INT8_RECIPE, json_key("questions"), "{}"),
        Figure("at only {}x the fp32", INT8_RECIPE, int8_speed_up(INT8_CHOSEN)),
        Figure("{} of 96 unchanged", INT8_RECIPE, int8_kept(INT8_PER_TOKEN), "{}"),
        Figure("of {} unchanged, at", INT8_RECIPE, json_key("questions"), "{}"),
        Figure("unchanged, at {}x (", INT8_RECIPE, int8_speed_up(INT8_PER_TOKEN)),
        Figure("x ({} of", INT8_RECIPE, int8_kept(INT8_UNSMOOTHED), "{}"),
        Figure("of {} without the smoothing", INT8_RECIPE, json_key("questions"), "{}"),
        Figure("fp32 ran the pipeline at {}x", QA_SPEED, qa_speed_up(FP32)),
        Figure("and int8 at {}x (", QA_SPEED, qa_speed_up(INT8)),
        Figure("per-token int8 at {}x", QA_SPEED, qa_speed_up(INT8_PER_TOKEN_RUN)),
        Figure("F1 {} against", QA_SPEED, qa_speed("document", INT8_PER_TOKEN_RUN, "f1"), "{:.1f}"),
        Figure("against {} in PyTorch,", QA_SPEED, qa_speed("document", PADDED, "f1"), "{:.1f}"),
        Figure(
            "{} of 108 answers unchanged",
            QA_SPEED,
            qa_speed("document", INT8_PER_TOKEN_RUN, "same_answers_as_padded"),
            "{}",
        ),
        Figure("of {} answers unchanged);", QA_SPEED, json_key("questions"), "{}"),
        Figure("gave {}x and", QA_SPEED_AMD_AVX_VNNI, qa_speed_up(FP32)),
        Figure("and {}x on an AMD", QA_SPEED_AMD_AVX_VNNI, qa_speed_up(INT8)),
        Figure(
            "where PyTorch\ntook {} s per",
            QA_SPEED_AMD_AVX_VNNI,
            qa_speed("document", PADDED, "seconds_per_question"),
            "{:.3f}",
        ),
        Figure(
            "against {} s on the one without it",
            QA_SPEED,
            qa_speed("document", PADDED, "seconds_per_question"),
            "{:.3f}",
        ),
        Figure("and {}x and", QA_SPEED_INTEL, qa_speed_up(FP32)),
        Figure("x and {}x on an Intel", QA_SPEED_INTEL, qa_speed_up(INT8)),
    ],
    # How long adapting a converted checkpoint takes on the CPU.
    "docs/pretraining.md": [
        Figure("embeddings trains at {} tokens/s", CPU_THROUGHPUT, json_key("tokens_per_second"), "{:,.0f}"),
        Figure("about {} hours per pass", CPU_THROUGHPUT, json_key("hours_per_epoch", "hours"), "{:.2f}"),
        Figure("over the {}-token corpus", CPU_THROUGHPUT, json_key("hours_per_epoch", "train_tokens"), "{:,}"),
        Figure("run takes about {} hours", CPU_THROUGHPUT, adaptation_hours(5_000_000), "{:.1f}"),
        Figure("measured over\n{} steps", CPU_THROUGHPUT, lambda d: len(d["tokens_per_second_by_step"]) - 1, "{}"),
        Figure("no`, {} training tokens", REFERENCE_RUN, reference("train_tokens"), "{:,}"),
        Figure("tokens in {} steps", REFERENCE_RUN, run_steps("reference"), "{}"),
        Figure("at\n{} tokens/s", REFERENCE_RUN, reference("tokens_per_second"), "{:,.0f}"),
        Figure("loss from {} to", REFERENCE_RUN, reference("held_out_loss_before"), "{:.2f}"),
        Figure("to {} (perplexity", REFERENCE_RUN, reference("held_out_loss"), "{:.2f}"),
        Figure("(perplexity\n{}), its", REFERENCE_RUN, reference("held_out_perplexity"), "{:,.0f}"),
        Figure("evaluations {} apart", REFERENCE_RUN, reference_last_change, "{:.2f}"),
        Figure("for {} optimizer steps", PAIR_RUN, run_steps(PAIR_FULL), "{}"),
        Figure("same {} training tokens", PAIR_RUN, adaptation_run(PAIR_FULL, "train_tokens"), "{:,}"),
        Figure("loss went from {} down", PAIR_RUN, adaptation_run(PAIR_FULL, "held_out_loss_before"), "{:.2f}"),
        Figure("down to {}, n = 2's", PAIR_RUN, adaptation_run(PAIR_FULL, "held_out_loss"), "{:.2f}"),
        Figure("2's from {} down", PAIR_RUN, adaptation_run(PAIR_N2, "held_out_loss_before"), "{:.2f}"),
        Figure("down to {}: n = 2", PAIR_RUN, adaptation_run(PAIR_N2, "held_out_loss"), "{:.2f}"),
        Figure("started\n{} nats behind", PAIR_RUN, pair_gap("held_out_loss_before"), "{:.2f}"),
        Figure("ended {} behind", PAIR_RUN, pair_gap("held_out_loss"), "{:.2f}"),
        Figure("from step {} to step", PAIR_RUN, late_steps(-3), "{}"),
        Figure("to step {} the loss", PAIR_RUN, late_steps(-2), "{}"),
        Figure("still fell {}\n(full", PAIR_RUN, late_fall(PAIR_FULL), "{:.3f}"),
        Figure("and {} (n = 2) before", PAIR_RUN, late_fall(PAIR_N2), "{:.3f}"),
        Figure("rose from {} to", PAIR_DIAGNOSTIC.format(PAIR_N2), json_key("loss_true_block0"), "{:.2f}"),
        Figure("to {}, by", PAIR_DIAGNOSTIC.format(PAIR_N2), json_key("loss_shuffled_block0"), "{:.2f}"),
        Figure("by {} (standard", PAIR_DIAGNOSTIC.format(PAIR_N2), json_key("difference"), "{:.3f}"),
        Figure("error {}), more", PAIR_DIAGNOSTIC.format(PAIR_N2), json_key("difference_standard_error"), "{:.3f}"),
        Figure("control's {} (standard", PAIR_DIAGNOSTIC.format(PAIR_FULL), json_key("difference"), "{:.3f}"),
        Figure("error {}), on", PAIR_DIAGNOSTIC.format(PAIR_FULL), json_key("difference_standard_error"), "{:.3f}"),
        Figure("on {} masked tokens", PAIR_DIAGNOSTIC.format(PAIR_N2), json_key("masked_tokens"), "{:,}"),
        Figure("tokens of {} sequences", PAIR_DIAGNOSTIC.format(PAIR_N2), json_key("sequences"), "{}"),
    ],
    RESULTS: [
        # `make demo`, as run here: its results file (results/demo).
        Figure("with N = {} tokens in", DEMO, json_key("model", "max_seq_length"), "{}"),
        Figure("tokens in {} blocks of", DEMO, json_key("model", "num_blocks"), "{}"),
        Figure("blocks of {}, checks", DEMO, lambda r: r["model"]["max_seq_length"] // r["model"]["num_blocks"], "{}"),
        Figure("for {} epochs on", DEMO, json_key("training", "num_train_epochs"), "{:g}"),
        Figure("questions of {} bundled SQuAD articles", DEMO, lambda r: len(r["training"]["articles"]), "{}"),
        Figure("articles. {} of them", DEMO, json_key("training", "questions"), "{:,}"),
        Figure("other {} read their own paragraph", DEMO, json_key("training", "paragraph_questions"), "{:,}"),
        Figure("and {} of them also another", DEMO, json_key("training", "paragraph_negatives"), "{:,}"),
        Figure("into windows of {} tokens", DEMO, json_key("training", "max_seq_length"), "{}"),
        Figure("kept at rate {} and labelled", DEMO, json_key("training", "negative_window_rate"), "{:g}"),
        Figure("asks the {} questions", DEMO, json_key("held_out", "whole_document", "questions"), "{}"),
        Figure("over {} tokens with full attention", DEMO, json_key("efficiency", "tokens"), "{:,}"),
        Figure("clone it took {} minutes", DEMO, lambda r: r["elapsed_seconds"] / 60, "{:.1f}"),
        Figure("F1 {} over the questions' own", DEMO, json_key("held_out", "own_paragraph", "f1"), "{:.1f}"),
        Figure("F1 {} over the whole", DEMO, json_key("held_out", "whole_document", "f1"), "{:.1f}"),
        Figure("article, {} of its paragraph score", DEMO, demo_f1_ratio, "{:.2f}"),
        Figure("whole {}-token article", DEMO, json_key("held_out", "document_tokens"), "{:,}"),
        Figure("n = 4 took {}x the time", DEMO, demo_cost("eager", "n4", "time")),
        Figure("and {}x the peak memory of full attention", DEMO, demo_cost("eager", "n4", "memory")),
        Figure("it took {}x the time", DEMO, demo_cost("sdpa", "n4", "time")),
        Figure("time and {}x the peak memory.", DEMO, demo_cost("sdpa", "n4", "memory")),
        # Which model the demo starts from (results/demo/starts).
        Figure(
            "scored a whole-article F1 of {} and",
            DEMO_STARTS,
            json_key("converted", "mean_whole_article_f1"),
            "{:.1f}",
        ),
        Figure(
            "and the self-distilled one {} (seed", DEMO_STARTS, json_key("distilled", "mean_whole_article_f1"), "{:.1f}"
        ),
        Figure("(seed spreads {} and", DEMO_STARTS, json_key("converted", "seed_spread"), "{:.1f}"),
        Figure("and {})", DEMO_STARTS, json_key("distilled", "seed_spread"), "{:.1f}"),
        # What the measurements show: the benchmarks (BERT-base dims, same-run ratios, docs/benchmarks.md).
        Figure("n = 2 needs {}x", TRAIN_STEP, TRAINING_MEMORY_N2),
        Figure(
            "It needs {}x the inference time", INFERENCE, time_ratio((2, 4096), "blockbert-n2-sdpa", "roberta-sdpa")
        ),
        Figure("(n = 4: {}x)", INFERENCE, time_ratio((2, 4096), "blockbert-n4-sdpa", "roberta-sdpa")),
        Figure("saves little time ({}x)", INFERENCE, time_ratio((8, 1024), "blockbert-n2-sdpa", "roberta-sdpa")),
        # The benchmarks table.
        Figure("RoBERTa-sdpa | {} (n=3", TRAIN_STEP, time_ratio((4, 1024), "blockbert-n2-sdpa", "roberta-sdpa")),
        Figure("(n=3: {})", TRAIN_STEP, time_ratio((4, 1024), "blockbert-n3-sdpa", "roberta-sdpa")),
        Figure("peak memory / RoBERTa | {} (", TRAIN_STEP, TRAINING_MEMORY_N2),
        Figure("(n=3: {};", TRAIN_STEP, memory_ratio((4, 1024), "blockbert-n3-sdpa", "roberta-eager")),
        Figure("/ RoBERTa-sdpa | {},", INFERENCE, time_ratio((8, 1024), "blockbert-n2-sdpa", "roberta-eager")),
        Figure(", {} (", INFERENCE, time_ratio((8, 1024), "blockbert-n2-sdpa", "roberta-sdpa")),
        Figure(
            "({} in a 10-round repeat)",
            "results/benchmarks/inference_8x1024_repeat/inference.json",
            time_ratio((8, 1024), "blockbert-n2-sdpa", "roberta-sdpa"),
            "{:.3f}",
        ),
        Figure("(window 512) | {} (", INFERENCE, time_ratio((2, 4096), "blockbert-n2-sdpa", "roberta-sdpa")),
        Figure("(n=4: {})", INFERENCE, time_ratio((2, 4096), "blockbert-n4-sdpa", "roberta-sdpa")),
        Figure("), {} |", INFERENCE, time_ratio((2, 4096), "blockbert-n2-sdpa", "longformer")),
        # The pre-training comparison: its setup and results.
        Figure("({} layers,", PRETRAINING, json_key("full-seed0", "model", "num_hidden_layers"), "{}"),
        Figure("hidden {},", PRETRAINING, json_key("full-seed0", "model", "hidden_size"), "{}"),
        Figure("N = {}, 6", PRETRAINING, json_key("full-seed0", "model", "max_sequence_length"), "{}"),
        Figure("{} M tokens per run", PRETRAINING, lambda runs: runs["full-seed0"]["train_tokens"] / 1e6, "{:.1f}"),
        Figure("perplexity was {} /", PRETRAINING, json_key("full-seed0", "eval_perplexity"), "{:.0f}"),
        # full-seed1 re-scored on the masks of the other runs (its logged value used other masks): only in this table.
        Figure(
            "/ {} for full attention (two seeds)",
            "results/pretraining_comparison/README.md",
            markdown_cell("full-seed1", "val. perplexity, same masks"),
            "{:.0f}",
        ),
        Figure("{} for n = 2", PRETRAINING, json_key("blockwise-n2", "eval_perplexity"), "{:.0f}"),
        Figure("and {} for n = 3", PRETRAINING, json_key("blockwise-n3", "eval_perplexity"), "{:.0f}"),
        Figure(
            "at {}x the training tokens/s",
            PRETRAINING,
            ratio_of(json_key("blockwise-n2", "tokens_per_second"), json_key("full-seed1", "tokens_per_second")),
            "{:.1f}",
        ),
        # QA: MiniLM converted to n = 2, fine-tuned on one half of SQuAD v1.1 dev, evaluated on the other.
        Figure("for {} epochs", QA_HALVES, json_key("num_epochs"), "{}"),
        Figure("EM {} /", QA_HALVES, json_key("exact_match"), "{:.1f}"),
        Figure("F1 {} on", QA_HALVES, json_key("f1"), "{:.1f}"),
        Figure("({} minutes of training", QA_HALVES, lambda metrics: metrics["train_seconds"] / 60, "{:.1f}"),
        Figure("and {} s of evaluation", QA_HALVES, json_key("eval_seconds"), "{:.0f}"),
        # The pipeline's timing is recorded in the run's README only.
        Figure(
            "over a {}-token context",
            "results/qa_squad_halves/README.md",
            text_number(r"a context of ([\d,]+) tokens"),
            "{:,.0f}",
        ),
        Figure("context in {} s", "results/qa_squad_halves/README.md", text_number(r"\*\*([\d.]+) s\*\*"), "{:.2f}"),
        # The QA comparison (results/qa_comparison) on the recipe chosen in docs/qa_recipe.
        Figure("qa_recipe/README.md): {} epochs", QA_COMPARISON, recipe_value(FULL_512, "num_train_epochs"), "{:.0f}"),
        Figure("learning rate {})", QA_COMPARISON, recipe_value(FULL_512, "learning_rate"), "{:g}"),
        Figure(
            "over contexts filled to {} tokens",
            QA_COMPARISON,
            json_key("cells", FULL_512, "sets", "window_512", "target_tokens"),
            "{}",
        ),
        Figure("full attention scored F1 {} and", QA_COMPARISON, comparison_f1(FULL_512, "window_512"), "{:.1f}"),
        Figure(" and {} with its two seeds", QA_COMPARISON, comparison_f1(FULL_512_SEED_1, "window_512"), "{:.1f}"),
        Figure("scored {} points below it", QA_COMPARISON, verdict_loss(BLOCKWISE_512), "{:.1f}"),
        Figure("(8:2:2) {} below", QA_COMPARISON, verdict_loss(BLOCKWISE_512_N3), "{:.1f}"),
        Figure("(one seed) {} below", QA_COMPARISON, verdict_loss(SPARSE_512), "{:.1f}"),
        Figure("(dev F1 {} against", layout_run(LAYOUT_PREFIXED), recipe_dev_f1, "{:.1f}"),
        Figure("against {} with the question", layout_run(LAYOUT_QUESTION_FIRST), recipe_dev_f1, "{:.1f}"),
        Figure(
            "reading {} tokens at once", QA_COMPARISON, json_key("cells", LONG_1024, "cell", "max_seq_length"), "{:,}"
        ),
        Figure(
            "BlockBERT at N = {} scored", QA_COMPARISON, json_key("cells", LONG_1024, "cell", "max_seq_length"), "{}"
        ),
        Figure("N = 1024 scored F1 {} over the", QA_COMPARISON, comparison_f1(LONG_1024, "article"), "{:.1f}"),
        Figure("over the {} questions with", QA_COMPARISON, comparison_f1(LONG_1024, "article", "questions"), "{:,}"),
        Figure("against {} for full attention", QA_COMPARISON, comparison_f1(LONG_512, "article"), "{:.1f}"),
        Figure("difference: {} to", QA_COMPARISON, sliding_loss("article", "low"), "{:.1f}"),
        Figure("to {} points below)", QA_COMPARISON, sliding_loss("article", "high"), "{:.1f}"),
        Figure("and {} against", QA_COMPARISON, comparison_f1(LONG_1024, "sweep_1024"), "{:.1f}"),
        Figure("against {} over contexts", QA_COMPARISON, comparison_f1(LONG_512, "sweep_1024"), "{:.1f}"),
        Figure("of {} tokens, taking", QA_COMPARISON, comparison_f1(LONG_1024, "sweep_1024", "target_tokens"), "{:,}"),
        Figure("taking {} to", LONG_COST, long_cost_ratio(min)),
        Figure("to {} of the time per question", LONG_COST, long_cost_ratio(max)),
        Figure("it scored {} against", QA_COMPARISON, comparison_f1(LONG_1024, "paragraph"), "{:.1f}"),
        Figure("against {} for sliding windows", QA_COMPARISON, comparison_f1(LONG_512, "paragraph"), "{:.1f}"),
        Figure("kept {} of its F1", QA_COMPARISON, whole_article_ratio("null_relative")),
        Figure("and {} when it ranked", QA_COMPARISON, whole_article_ratio("raw")),
    ],
}

# Numbers in figures regions that are not results: settings, names, the paper's figures.
ALLOWED = [
    *("n=2", "n=3", "n=4", "n = 2", "n = 3", "n = 4", "4x1024", "8x1024", "2x4096", "dropout 0.1", "window 512"),
    *("10-round", "(the paper: 0.73x)", "6-layer", "2-core", "all-MiniLM-L6-v2", "SQuAD v1.1", "2 cores"),
    *("2 CPU cores", "F1", "bf16", "float32"),
    "paper 0.73 / 0.64",  # the paper's Table 3
    *("At N = 512,", "95%", "(10:2)", "(8:2:2)", "windows of 512", "full attention at N = 512 kept"),
    "lost 0.71, 1.84 and 3.39",  # the paper's Table 4
    *("5M-token", "fp32", "at N = 512 with"),  # settings of the adaptation runs
    "int8",  # a number format
]


def page_regions(page: str) -> list[Region]:
    return figure_regions(read_page(page), page)


def figure_problem(figure: Figure, regions: list[Region], page: str) -> str | None:
    """None when the figure is in a figures region of its page and every time it is there, it shows the file's
    value."""
    expected = figure.value()
    shown = [match.group(1) for region in regions for match in figure.pattern().finditer(region.text)]
    if not shown:
        return f"{figure.text!r} is not in a figures region of {page} (expected {figure.text.format(expected)!r})"
    if any(number != expected for number in shown):
        return f"{page} shows {figure.text.format(shown[0])!r} but {figure.source} gives {expected}"
    return None


@pytest.mark.parametrize(
    ("page", "figure"),
    [
        pytest.param(
            page,
            figure,
            id=f"{page}: {figure.text}",
            marks=[pytest.mark.xfail(reason=figure.stale, strict=True)] if figure.stale else [],
        )
        for page, figures in FIGURES.items()
        for figure in figures
    ],
)
def test_figure_is_read_from_its_results_file(page, figure):
    problem = figure_problem(figure, page_regions(page), page)
    assert problem is None, problem


@pytest.mark.parametrize("page", list(FIGURES))
def test_every_number_in_a_figures_region_is_registered_or_allowed(page):
    regions = page_regions(page)
    assert regions, f"{page} has no <!-- figures --> region"
    unsourced = [problem for region in regions for problem in unaccounted_numbers(region, FIGURES[page], ALLOWED)]
    assert not unsourced, "numbers without a results file (register them in FIGURES, or ALLOWED):\n" + "\n".join(
        unsourced
    )


def test_every_page_with_a_figures_region_is_checked():
    with_regions = {page for page in PAGES if FIGURES_START in (REPO_ROOT / page).read_text(encoding="utf-8")}
    assert with_regions <= set(FIGURES), f"figures regions that nothing checks: {sorted(with_regions - set(FIGURES))}"


def test_the_figure_checks_catch_mistakes(tmp_path):
    results = tmp_path / "results.json"
    results.write_text('{"exact_match": 55.01}')
    source = os.path.relpath(results, REPO_ROOT)
    figure = Figure("EM {} on", source, json_key("exact_match"), "{:.1f}")
    regions = figure_regions("x <!-- figures -->EM 55.1 on\n12 questions<!-- /figures --> 7", "docs/x.md")
    assert figure_problem(figure, regions, "docs/x.md") == f"docs/x.md shows 'EM 55.1 on' but {source} gives 55.0"
    assert figure_problem(figure, figure_regions("EM 55.0 on", "docs/x.md"), "docs/x.md") is not None  # no region
    assert [problem.split(" (")[0] for problem in unaccounted_numbers(regions[0], [figure], [])] == ["docs/x.md:2: 12"]
    with pytest.raises(ValueError, match="docs/x.md:1: .* without its"):
        figure_regions("<!-- figures --> 1", "docs/x.md")


# ---------------------------------------------------------------------------------------------------------------------
# Claims about the figures
# ---------------------------------------------------------------------------------------------------------------------


def results_text() -> str:
    """docs/results.md with its line breaks as spaces."""
    return " ".join(read_page(RESULTS).split())


def test_the_qa_comparison_claims_about_the_gaps_at_n_512_hold():
    """docs/results.md says each gap to full attention over filled contexts has an article-bootstrap interval that
    excludes zero and exceeds both seed spreads, and that the t-interval over the two seeds' differences spans zero for
    n = 2 (not for n = 3)."""
    claim = (
        "each gap's article-bootstrap 95% interval excludes zero and each exceeds both seed spreads, but with two "
        "seeds the t-interval over per-seed differences spans zero for n = 2."
    )
    assert claim in results_text()
    verdicts = json.loads((REPO_ROOT / QA_COMPARISON).read_text())["seed_averaged_verdicts"]
    for cell in (BLOCKWISE_512, BLOCKWISE_512_N3, SPARSE_512):
        assert verdicts[cell]["window_512"]["verdict"] == "resolved", cell
        assert verdicts[cell]["window_512"]["f1"]["high"] < 0, cell
    assert verdicts[BLOCKWISE_512]["window_512"]["t_interval"]["high"] > 0
    assert verdicts[BLOCKWISE_512_N3]["window_512"]["t_interval"]["high"] < 0


def test_the_long_document_claim_that_blockwise_attention_did_not_beat_sliding_windows_holds():
    """docs/results.md says reading 1,024 tokens at once did not beat sliding windows of 512 over long documents: on
    whole articles and every sweep context longer than one window, the paired interval lies below zero."""
    assert "reading 1,024 tokens at once with blockwise attention did not beat sliding windows of 512" in results_text()
    sliding = json.loads((REPO_ROOT / QA_COMPARISON).read_text())["differences_to_sliding_windows"][LONG_1024]
    longer = ["article", *(name for name in sliding if name.startswith("sweep_") and int(name.split("_")[1]) > 512)]
    assert len(longer) >= 3
    for test_set in longer:
        assert sliding[test_set]["f1"]["high"] < 0, test_set


def test_the_readme_claims_about_int8_and_the_two_amd_cpus_hold():
    """The README says int8 does not lower the demo model's whole-article F1, and docs/benchmarks.md tells the two AMD
    EPYCs apart by AVX-VNNI, which only the earlier one has (both have AVX-512 VNNI)."""
    assert "int8 does not lower the whole-article F1" in " ".join(read_page("README.md").split())
    assert "on an AMD EPYC that also has AVX-VNNI" in " ".join(read_page("docs/benchmarks.md").split())
    speed = json.loads((REPO_ROOT / QA_SPEED).read_text())
    assert speed["document"][INT8]["f1"] >= speed["document"][PADDED]["f1"]
    earlier = json.loads((REPO_ROOT / QA_SPEED_AMD_AVX_VNNI).read_text())
    assert "avx_vnni" in earlier["cpu_int8_flags"] and "avx_vnni" not in speed["cpu_int8_flags"]
    assert "avx512_vnni" in speed["cpu_int8_flags"]


def test_the_suites_the_page_names_are_those_the_makefile_runs():
    """docs/results.md names each suite with its marker expression, as the Makefile runs it (`test` runs setup.cfg's
    default); the durations file is the command's output, not a committed figure."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    test_all = re.search(r"^test-all:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert '-m "slow or not slow"' in test_all
    assert '`make test-all`, `pytest -m "slow or not slow"`' in read_page(RESULTS)
    assert '`make test`, `pytest -m "not slow and not other_models"`' in read_page(RESULTS)
    assert not (REPO_ROOT / DURATIONS).exists() and DURATIONS in (REPO_ROOT / ".gitignore").read_text()


def test_the_default_run_the_page_states_is_the_one_setup_cfg_configures():
    setup = configparser.ConfigParser()
    setup.read(REPO_ROOT / "setup.cfg")
    addopts = setup["tool:pytest"]["addopts"]
    assert addopts.startswith("-m ")
    assert f"`make test` runs the default suite: `{addopts}` (setup.cfg)" in results_text()
