"""Questions of SQuAD articles through the question-answering pipeline, for `benchmarks/qa_pipeline_speed.py` and
`benchmarks/int8_recipe.py`: each question with its paragraph and its whole article, one pipeline per model (PyTorch
or ONNX Runtime), and the answers' EM/F1 and agreement."""

import argparse
import time
from pathlib import Path

from transformers import AutoTokenizer

from blockbert_hf.model.pipeline_question_answering import ExtractiveQuestionAnsweringPipeline
from blockbert_hf.onnx.export import OnnxBlockBertForQuestionAnswering
from blockbert_hf.train.qa import load_squad_metric, read_squad_json


MAX_ANSWER_TOKENS = 30  # run_qa's default
# The two contexts every question is answered over: the `read_questions` field and what the results call it.
CONTEXTS = {"context": "paragraph", "document": "document"}


def add_question_arguments(parser: argparse.ArgumentParser, purpose: str) -> None:
    """The options both scripts share: the fine-tuned model and its export, the SQuAD articles `purpose` names (what
    they are used for: "test", "measure"), how many questions, and windows per forward."""
    parser.add_argument("--model_folder", required=True, help="a fine-tuned BlockBERT question-answering folder")
    parser.add_argument("--onnx_folder", help="its export (default: exported into MODEL_FOLDER-onnx first)")
    parser.add_argument("--squad_file", required=True, help="SQuAD-format .json(.gz) holding the articles")
    parser.add_argument("--title", action="append", help=f"an article to {purpose} on (repeatable; default: all)")
    parser.add_argument("--max_questions", type=int, default=0, help="the first K questions only (0: all)")
    parser.add_argument("--batch_size", type=int, default=8, help="windows per forward")


def read_questions(squad_file: str, titles: list[str] | None, max_questions: int | None) -> list[dict]:
    """The questions of the chosen articles (all when `titles` is None), each with its paragraph (`context`) and its
    article (`document`: the paragraphs joined by blank lines)."""
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


def onnx_pipeline(onnx_folder: str | Path, file_name: str, **session) -> ExtractiveQuestionAnsweringPipeline:
    """The pipeline on an exported folder's `file_name`, with its tokenizer; `session`: `provider`,
    `session_options`."""
    model = OnnxBlockBertForQuestionAnswering.from_pretrained(onnx_folder, file_name=file_name, **session)
    return ExtractiveQuestionAnsweringPipeline(model=model, tokenizer=AutoTokenizer.from_pretrained(onnx_folder))


def answer(
    qa: ExtractiveQuestionAnsweringPipeline, row: dict, context_field: str, batch_size: int
) -> tuple[str, float]:
    """One question over its `context_field`: the answer's text and the seconds it took."""
    start = time.perf_counter()
    output = qa(
        question=row["question"], context=row[context_field], max_answer_len=MAX_ANSWER_TOKENS, batch_size=batch_size
    )
    return output["answer"], time.perf_counter() - start


def squad_scores(questions: list[dict], answers: list[str]) -> dict:
    """EM and F1 (SQuAD v1.1 metric, in %) of one answer per question."""
    metric, _ = load_squad_metric(version_2=False)
    predictions = [{"id": row["id"], "prediction_text": text} for row, text in zip(questions, answers)]
    references = [{"id": row["id"], "answers": row["answers"]} for row in questions]
    scores = metric.compute(predictions=predictions, references=references)
    return {"exact_match": round(scores["exact_match"], 2), "f1": round(scores["f1"], 2)}


def same_answers(answers: list[str], reference: list[str]) -> int:
    """How many answers are the reference's, text for text."""
    return sum(a == b for a, b in zip(answers, reference))
