"""Extractive question answering: data, features, post-processing, metrics and the fine-tuning/evaluation loop that
`examples/run_qa.py` wires to its command line.

- Data: hub datasets by name (`squad`, `squad_v2`, `mrqa` with `subset=`) and local files (SQuAD-format
  `.json`/`.json.gz`, MRQA `.jsonl`/`.jsonl.gz`), all as rows `{id, title, context, question, answers: {text,
  answer_start}}`; answers whose offsets do not match the context are re-aligned or dropped (counted, never fatal).
- Features: windows of `max_seq_length` tokens overlapping by `doc_stride` (the fast tokenizer's overflow), no
  padding (batches are padded on the right by the collator, so short paragraphs cost little).
- Post-processing: `rank_answers` from `pipeline_question_answering` (the same code the pipeline runs).
- Metrics: `evaluate`'s "squad" / "squad_v2" modules when `evaluate.load` can get them (Hub or its cache), else
  `SquadMetric`, an `evaluate.Metric` written here from the official scripts' definitions (see its docstring).
"""

import argparse
import collections
import json
import logging
import math
import numbers
import os
import re
import shutil
import string
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import datasets
import evaluate
import numpy as np
import torch
import transformers
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import (
    AutoModelForQuestionAnswering,
    AutoTokenizer,
    DataCollatorWithPadding,
    get_linear_schedule_with_warmup,
)
from transformers.trainer_pt_utils import LengthGroupedSampler

from .pipeline_question_answering import (
    WindowLogits,
    check_window_room,
    context_offsets,
    default_max_seq_len,
    rank_answers,
)
from .saving import open_text, save_atomically, write_file_atomically


logger = logging.getLogger(__name__)

QA_COLUMNS = ("id", "question", "context", "answers")
QA_FEATURES = datasets.Features(
    {
        "id": datasets.Value("string"),
        "title": datasets.Value("string"),
        "context": datasets.Value("string"),
        "question": datasets.Value("string"),
        "answers": {
            "text": datasets.List(datasets.Value("string")),
            "answer_start": datasets.List(datasets.Value("int32")),
        },
    }
)
HUB_DATASETS = {"squad": "rajpurkar/squad", "squad_v2": "rajpurkar/squad_v2", "mrqa": "mrqa-workshop/mrqa"}
# Fine-tuning defaults: 4 epochs (the paper's), linear decay with 10% warmup, batch 32 and a learning rate picked on the
# dev set from this grid (the usual BERT/RoBERTa SQuAD settings; not re-checked against the paper's appendix).
LEARNING_RATE_GRID = (1e-5, 2e-5, 3e-5, 5e-5)


# ---------------------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------------------


def _answers(texts: list[str], starts: list[int]) -> dict:
    return {"text": list(texts), "answer_start": [int(start) for start in starts]}


def read_squad_json(path: str | os.PathLike) -> datasets.Dataset:
    """Rows of a SQuAD-format file (`{"version", "data": [{"title", "paragraphs": [{"context", "qas"}]}]}`, v1.1 or
    v2.0; unanswerable v2.0 questions get empty answers)."""
    with open_text(path) as handle:
        data = json.load(handle)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError(
            f"{path} is not SQuAD-format JSON: expected an object with a 'data' list of articles "
            "({'title', 'paragraphs': [{'context', 'qas': [{'id', 'question', 'answers'}]}]})."
        )
    rows = []
    for article_index, article in enumerate(data["data"]):
        try:
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"]:
                    answers = [] if qa.get("is_impossible") else qa["answers"]
                    rows.append(
                        {
                            "id": str(qa["id"]),
                            "title": article.get("title", ""),
                            "context": paragraph["context"],
                            "question": qa["question"],
                            "answers": _answers([a["text"] for a in answers], [a["answer_start"] for a in answers]),
                        }
                    )
        except (KeyError, TypeError) as error:
            raise ValueError(
                f"{path}: article {article_index} ({article.get('title', '?') if isinstance(article, dict) else '?'})"
                f" lacks a SQuAD field: {error!r}. Each paragraph needs 'context' and 'qas', each question 'id', "
                "'question' and 'answers' ([{'text', 'answer_start'}])."
            ) from error
    return datasets.Dataset.from_list(rows, features=QA_FEATURES)


def _detected_answer_spans(detected_answers) -> list[tuple[int, int]]:
    """MRQA character spans `(start, end_inclusive)` of the answers found in the context, from either form the data
    comes in: a list of `{"text", "char_spans": [[start, end], ...]}` (the .jsonl files) or a dict of lists (the Hub
    dataset, `char_spans` as `[{"start": [...], "end": [...]}]`)."""
    spans = []
    if isinstance(detected_answers, dict):
        for char_spans in detected_answers.get("char_spans", []):
            spans.extend(zip(char_spans["start"], char_spans["end"]))
    else:
        for answer in detected_answers:
            spans.extend((span[0], span[1]) for span in answer["char_spans"])
    return spans


def mrqa_row(context: str, qid: str, question: str, detected_answers, title: str = "") -> dict:
    """One MRQA question as a SQuAD-style row; answers are the detected spans (their text taken from the context)."""
    spans = sorted(set(_detected_answer_spans(detected_answers)))
    return {
        "id": str(qid),
        "title": title,
        "context": context,
        "question": question,
        "answers": _answers([context[start : end + 1] for start, end in spans], [start for start, _ in spans]),
    }


def read_mrqa_jsonl(path: str | os.PathLike) -> datasets.Dataset:
    """Rows of an MRQA 2019 file (`.jsonl` or `.jsonl.gz`: a header line, then one context with its `qas` per line)."""
    rows = []
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            record = json.loads(line)
            if "header" in record:
                continue
            try:
                for qa in record["qas"]:
                    rows.append(mrqa_row(record["context"], qa["qid"], qa["question"], qa["detected_answers"]))
            except (KeyError, TypeError, IndexError) as error:
                raise ValueError(
                    f"{path}, line {line_number}: not an MRQA record ({error!r}). Expected {{'context', 'qas': "
                    "[{'qid', 'question', 'detected_answers': [{'text', 'char_spans': [[start, end]]}]}]}."
                ) from error
    return datasets.Dataset.from_list(rows, features=QA_FEATURES)


def load_qa_dataset(source: str, split: str = "validation", subset: str | None = None) -> datasets.Dataset:
    """A QA dataset as SQuAD-style rows: a local file (`.json`/`.json.gz` SQuAD format, `.jsonl`/`.jsonl.gz` MRQA),
    or a Hub dataset by name (`squad`, `squad_v2`, `mrqa`; `subset` picks an MRQA subset such as "SQuAD",
    "NewsQA", "TriviaQA-web", "SearchQA", "HotpotQA", "NaturalQuestionsShort")."""
    path = Path(source)
    if path.exists():
        name = path.name.lower()
        if name.endswith((".json", ".json.gz")):
            dataset = read_squad_json(path)
        elif name.endswith((".jsonl", ".jsonl.gz")):
            dataset = read_mrqa_jsonl(path)
        else:
            raise ValueError(
                f"{source}: unknown file type. Use SQuAD-format .json/.json.gz or MRQA .jsonl/.jsonl.gz files."
            )
        if subset is not None:
            raise ValueError(f"subset={subset!r} applies to the Hub 'mrqa' dataset only, not to the file {source}.")
    elif source in HUB_DATASETS:
        dataset = _load_hub_dataset(source, split, subset)
    else:
        raise ValueError(
            f"{source!r} is neither an existing file nor one of the Hub datasets {sorted(HUB_DATASETS)}. "
            "Pass a SQuAD-format .json(.gz) or an MRQA .jsonl(.gz) file."
        )
    check_qa_dataset(dataset, source)
    return dataset


def _load_hub_dataset(name: str, split: str, subset: str | None) -> datasets.Dataset:
    if subset is not None and name != "mrqa":
        raise ValueError(f"subset={subset!r} applies to the Hub 'mrqa' dataset only, not to {name!r}.")
    try:
        dataset = datasets.load_dataset(HUB_DATASETS[name], split=split)
    except Exception as error:
        raise RuntimeError(
            f"Could not load the Hub dataset {HUB_DATASETS[name]!r} (split {split!r}): {error}. Without access to the "
            "Hugging Face Hub, pass local files instead (SQuAD .json(.gz) or MRQA .jsonl(.gz))."
        ) from error
    if name != "mrqa":
        return dataset
    if subset is not None:
        available = sorted(set(dataset["subset"]))
        if subset not in available:
            raise ValueError(f"MRQA split {split!r} has no subset {subset!r}; it has {available}.")
        dataset = dataset.filter(lambda value: value == subset, input_columns="subset")
    return dataset.map(
        lambda row: mrqa_row(row["context"], row["qid"], row["question"], row["detected_answers"], row["subset"]),
        remove_columns=dataset.column_names,
        features=QA_FEATURES,
    )


def check_qa_dataset(dataset: datasets.Dataset, name: str = "the dataset") -> None:
    """Raises a `ValueError` that says what to fix when rows lack the QA columns, have empty contexts or questions,
    or repeat an id (predictions are keyed by id)."""
    missing = [column for column in QA_COLUMNS if column not in dataset.column_names]
    if missing:
        raise ValueError(
            f"{name} lacks the column(s) {missing} (it has {dataset.column_names}). Question answering needs 'id', "
            "'question', 'context' and 'answers' = {'text': [...], 'answer_start': [...]} (SQuAD format)."
        )
    answers_feature = dataset.features["answers"]
    if not isinstance(answers_feature, dict) or not {"text", "answer_start"} <= set(answers_feature):
        raise ValueError(
            f"{name}: 'answers' must be {{'text': [...], 'answer_start': [...]}} (SQuAD format), got {answers_feature}."
        )
    for column in ("context", "question"):
        empty = [row_id for row_id, text in zip(dataset["id"], dataset[column]) if not text or not text.strip()]
        if empty:
            raise ValueError(
                f"{name}: {len(empty)} question(s) have an empty {column} (ids {empty[:5]}); remove or fix them."
            )
    counts = collections.Counter(dataset["id"])
    repeated = [row_id for row_id, count in counts.items() if count > 1]
    if repeated:
        raise ValueError(
            f"{name}: {len(repeated)} id(s) are used more than once (e.g. {repeated[:5]}); ids must be unique."
        )


def has_impossible_questions(dataset: datasets.Dataset) -> bool:
    """True when some question has no answer (SQuAD 2.0 style)."""
    return any(len(answers["text"]) == 0 for answers in dataset["answers"])


def _realign_row(row: dict) -> dict:
    context, texts, starts = row["context"], [], []
    realigned = dropped = 0
    for text, start in zip(row["answers"]["text"], row["answers"]["answer_start"]):
        if text and context[start : start + len(text)] == text:
            texts.append(text)
            starts.append(start)
            continue
        found = [match.start() for match in re.finditer(re.escape(text), context)] if text else []
        if found:  # the occurrence nearest to the recorded offset
            texts.append(text)
            starts.append(min(found, key=lambda position: abs(position - start)))
            realigned += 1
        else:
            dropped += 1
    return {
        "answers": _answers(texts, starts),
        "_realigned": realigned,
        "_dropped": dropped,
        "_lost_all": bool(row["answers"]["text"]) and not texts,
    }


def realign_answers(dataset: datasets.Dataset) -> tuple[datasets.Dataset, dict[str, int]]:
    """Fixes answers whose `answer_start` does not point at their text in the context: moved to the nearest
    occurrence of the text, or dropped when the text is not in the context at all; a question that loses all its
    answers is removed. Returns the dataset and the counts (`realigned`, `dropped`, `removed_questions`)."""
    marked = dataset.map(_realign_row, desc="Checking answer offsets")
    counts = {
        "realigned": int(sum(marked["_realigned"])),
        "dropped": int(sum(marked["_dropped"])),
        "removed_questions": int(sum(marked["_lost_all"])),
    }
    if counts["removed_questions"]:
        marked = marked.filter(lambda lost: not lost, input_columns="_lost_all")
    return marked.remove_columns(["_realigned", "_dropped", "_lost_all"]), counts


def split_squad_articles(source: str | os.PathLike, output_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Writes the first and the second half of the articles of a SQuAD-format file (article order, unchanged records)
    as two SQuAD files, `<name>.first-half.json` and `<name>.second-half.json`: disjoint articles, e.g. to fine-tune
    on one half of SQuAD dev and evaluate on the other when no train split is at hand."""
    with open_text(source) as handle:
        data = json.load(handle)
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list) or len(articles) < 2:
        raise ValueError(f"{source}: need a SQuAD-format file with at least two articles in 'data'.")
    stem = re.sub(r"\.json(\.gz)?$", "", Path(source).name)
    middle = len(articles) // 2
    paths = []
    for half, part in (("first-half", articles[:middle]), ("second-half", articles[middle:])):
        path = Path(output_dir) / f"{stem}.{half}.json"
        write_json_atomically(path, {"version": data.get("version", ""), "data": part}, indent=None)
        paths.append(path)
    return paths[0], paths[1]


def write_json_atomically(path: str | os.PathLike, obj, indent: int | None = 2) -> Path:
    """Writes JSON through a temporary file beside `path` (never a half-written file)."""
    write_file_atomically(path, json.dumps(obj, indent=indent, ensure_ascii=False))
    return Path(path)


# ---------------------------------------------------------------------------------------------------------------------
# Features
# ---------------------------------------------------------------------------------------------------------------------


def check_question_lengths(
    ids: Iterable[str],
    questions: Iterable[str],
    tokenizer,
    max_seq_length: int,
    doc_stride: int,
    name: str = "the data",
) -> None:
    """Raises a `ValueError` naming the questions that leave no more context room per window than `doc_stride`."""
    ids, questions = list(ids), [question.lstrip() for question in questions]
    lengths = [len(ids_) for ids_ in tokenizer(questions, add_special_tokens=False)["input_ids"]] if questions else []
    rooms = [max_seq_length - length - tokenizer.num_special_tokens_to_add(pair=True) for length in lengths]
    too_long = [(row_id, room) for row_id, room in zip(ids, rooms) if room <= doc_stride]
    if too_long:
        row_id, room = too_long[0]
        try:
            check_window_room(room, doc_stride, max_seq_length, what=f"Question {row_id!r} of {name}")
        except ValueError as error:
            raise ValueError(
                f"{len(too_long)} question(s) are too long (ids {[i for i, _ in too_long[:5]]}). {error}"
            ) from None


def _tokenize_windows(examples: dict, tokenizer, max_seq_length: int, doc_stride: int):
    # Leading spaces of a question only waste window room (some SQuAD questions have many).
    questions = [question.lstrip() for question in examples["question"]]
    # Checked here too: the tokenizers library panics (not a Python error) when a question leaves no room.
    check_question_lengths(examples["id"], questions, tokenizer, max_seq_length, doc_stride)
    return tokenizer(
        questions,
        examples["context"],
        truncation="only_second",
        max_length=max_seq_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=False,
    )


def _null_index(input_ids: list[int], tokenizer) -> int:
    cls_id = tokenizer.cls_token_id
    return input_ids.index(cls_id) if cls_id is not None and cls_id in input_ids else 0


def prepare_train_features(examples: dict, tokenizer, max_seq_length: int, doc_stride: int) -> dict:
    """Batched `datasets.map` function: windows with `start_positions`/`end_positions` of the first answer, or of the
    null (CLS) token when the answer is not inside the window or the question has none."""
    encoded = _tokenize_windows(examples, tokenizer, max_seq_length, doc_stride)
    sample_map = encoded.pop("overflow_to_sample_mapping")
    offset_mapping = encoded.pop("offset_mapping")
    start_positions, end_positions = [], []
    for index, offsets in enumerate(offset_mapping):
        null_index = _null_index(encoded["input_ids"][index], tokenizer)
        answers = examples["answers"][sample_map[index]]
        sequence_ids = encoded.sequence_ids(index)
        context_tokens = [i for i, sequence_id in enumerate(sequence_ids) if sequence_id == 1]
        start_token = end_token = null_index
        if answers["answer_start"] and context_tokens:
            start_char = answers["answer_start"][0]
            end_char = start_char + len(answers["text"][0])
            first, last = context_tokens[0], context_tokens[-1]
            if offsets[first][0] <= start_char and offsets[last][1] >= end_char:
                start_token = first
                while start_token <= last and offsets[start_token][0] <= start_char:
                    start_token += 1
                start_token -= 1
                end_token = last
                while end_token >= first and offsets[end_token][1] >= end_char:
                    end_token -= 1
                end_token += 1
        start_positions.append(start_token)
        end_positions.append(end_token)
    encoded["start_positions"] = start_positions
    encoded["end_positions"] = end_positions
    return encoded


def prepare_eval_features(examples: dict, tokenizer, max_seq_length: int, doc_stride: int) -> dict:
    """Batched `datasets.map` function: windows with their `example_id`, `null_index` and `offset_mapping` (None for
    tokens outside the context)."""
    encoded = _tokenize_windows(examples, tokenizer, max_seq_length, doc_stride)
    sample_map = encoded.pop("overflow_to_sample_mapping")
    encoded["example_id"] = [examples["id"][sample] for sample in sample_map]
    encoded["null_index"] = [_null_index(input_ids, tokenizer) for input_ids in encoded["input_ids"]]
    encoded["offset_mapping"] = [
        context_offsets(offsets, encoded.sequence_ids(index)) for index, offsets in enumerate(encoded["offset_mapping"])
    ]
    return encoded


EVAL_METADATA_COLUMNS = ("example_id", "null_index", "offset_mapping")


# ---------------------------------------------------------------------------------------------------------------------
# Post-processing and metrics
# ---------------------------------------------------------------------------------------------------------------------


def postprocess_qa_predictions(
    examples: datasets.Dataset,
    features: datasets.Dataset,
    start_logits: list[np.ndarray],
    end_logits: list[np.ndarray],
    *,
    version_2: bool,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    null_score_diff_threshold: float = 0.0,
) -> tuple[list[dict], dict[str, list[dict]]]:
    """Turns per-window logits (aligned with `features`) into one prediction per example, with the pipeline's
    `rank_answers`. Returns the predictions in the `evaluate` squad/squad_v2 format (`id`, `prediction_text`, and
    `no_answer_probability` for v2) and the n-best lists by id."""
    if len(start_logits) != len(features) or len(end_logits) != len(features):
        raise ValueError(f"Got logits for {len(start_logits)} windows but {len(features)} features.")
    windows_by_example = collections.defaultdict(list)
    for example_id, null_index, offsets, start, end in zip(
        features["example_id"], features["null_index"], features["offset_mapping"], start_logits, end_logits
    ):
        windows_by_example[example_id].append(WindowLogits(start, end, offsets, null_index))
    predictions, nbest = [], {}
    for example_id, context in zip(examples["id"], examples["context"]):
        ranked = rank_answers(
            windows_by_example[example_id],
            context,
            n_best=n_best_size,
            max_answer_len=max_answer_length,
            handle_impossible_answer=version_2,
            null_score_diff_threshold=null_score_diff_threshold,
        )
        prediction = {"id": example_id, "prediction_text": ranked.answers[0]["answer"]}
        if version_2:
            prediction["no_answer_probability"] = ranked.null_probability
        predictions.append(prediction)
        nbest[example_id] = ranked.answers
    return predictions, nbest


def squad_references(examples: datasets.Dataset) -> list[dict]:
    """References in the `evaluate` squad/squad_v2 format."""
    return [{"id": row_id, "answers": answers} for row_id, answers in zip(examples["id"], examples["answers"])]


_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD answer normalization: lower case, no punctuation, no articles (a, an, the), single spaces."""
    text = "".join(character for character in text.lower() if character not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _token_f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
    overlap = sum((collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(prediction_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _best_threshold(scores: dict, no_answer_probability: dict, has_answer: dict, predictions: dict):
    """Best score over no-answer thresholds (official SQuAD 2.0 rule): questions whose no-answer probability exceeds
    the threshold are answered with the empty string."""
    score = best_score = sum(1 for qid in scores if not has_answer[qid])
    best_threshold = 0.0
    for qid in sorted(no_answer_probability, key=lambda key: no_answer_probability[key]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            score += scores[qid]
        elif predictions[qid]:
            score -= 1
        if score > best_score:
            best_score, best_threshold = score, no_answer_probability[qid]
    return 100.0 * best_score / len(scores), best_threshold


class SquadMetric(evaluate.Metric):
    """SQuAD v1.1 (`config_name="squad"`: `exact_match`, `f1`) and v2.0 (`"squad_v2"`: `exact`, `f1`, the
    `HasAns_*`/`NoAns_*` splits and `best_*` thresholds), with the inputs and outputs of `evaluate`'s "squad" and
    "squad_v2" modules.

    Why it exists: `evaluate` ships no metric scripts; `evaluate.load("squad")` downloads them from the Hugging Face
    Hub (or reads its cache), which a machine without Hub access cannot do. This class is written from the
    definitions of the official SQuAD evaluation scripts (Rajpurkar et al.): answers normalized by
    `normalize_answer`, exact match and token-level F1 against the best gold answer, and, for v2.0, an unanswerable
    question's gold answer is the empty string. `load_squad_metric` prefers `evaluate`'s own modules when available.
    """

    def _info(self):
        prediction = {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")}
        if self.config_name == "squad_v2":
            prediction["no_answer_probability"] = datasets.Value("float32")
        elif self.config_name != "squad":
            raise ValueError(f"config_name must be 'squad' or 'squad_v2', got {self.config_name!r}.")
        return evaluate.MetricInfo(
            description="SQuAD v1.1 / v2.0 exact match and F1 (offline implementation, see SquadMetric).",
            citation="Rajpurkar et al., SQuAD (2016) and Know What You Don't Know (2018).",
            inputs_description="predictions: [{id, prediction_text[, no_answer_probability]}]; references: "
            "[{id, answers: {text, answer_start}}]",
            features=datasets.Features(
                {
                    "predictions": prediction,
                    "references": {
                        "id": datasets.Value("string"),
                        "answers": {
                            "text": datasets.List(datasets.Value("string")),
                            "answer_start": datasets.List(datasets.Value("int32")),
                        },
                    },
                }
            ),
        )

    def _compute(self, predictions, references, no_answer_threshold: float = 1.0):
        predicted = {p["id"]: p["prediction_text"] for p in predictions}
        if self.config_name == "squad":
            return self._compute_v1(predicted, references)
        no_answer_probability = {p["id"]: float(p["no_answer_probability"]) for p in predictions}
        return self._compute_v2(predicted, no_answer_probability, references, no_answer_threshold)

    @staticmethod
    def _compute_v1(predicted: dict, references) -> dict:
        exact = f1 = 0.0
        unanswerable = [reference["id"] for reference in references if not reference["answers"]["text"]]
        if unanswerable:
            raise ValueError(
                f"{len(unanswerable)} reference(s) have no answer (e.g. {unanswerable[:3]}): score SQuAD 2.0 data with "
                "config_name='squad_v2'."
            )
        for reference in references:
            prediction = normalize_answer(predicted[reference["id"]])
            golds = [normalize_answer(text) for text in reference["answers"]["text"]]
            exact += max(float(prediction == gold) for gold in golds)
            f1 += max(_token_f1(prediction.split(), gold.split()) for gold in golds)
        return {"exact_match": 100.0 * exact / len(references), "f1": 100.0 * f1 / len(references)}

    @staticmethod
    def _compute_v2(predicted: dict, no_answer_probability: dict, references, no_answer_threshold: float) -> dict:
        exact, f1, has_answer = {}, {}, {}
        for reference in references:
            qid = reference["id"]
            golds = [text for text in reference["answers"]["text"] if normalize_answer(text)] or [""]
            has_answer[qid] = bool(reference["answers"]["text"])
            prediction = normalize_answer(predicted[qid])
            exact[qid] = max(float(normalize_answer(gold) == prediction) for gold in golds)
            f1[qid] = max(
                float(normalize_answer(gold).split() == prediction.split())
                if not normalize_answer(gold) or not prediction
                else _token_f1(prediction.split(), normalize_answer(gold).split())
                for gold in golds
            )

        def thresholded(scores):
            return {
                qid: float(not has_answer[qid]) if no_answer_probability[qid] > no_answer_threshold else score
                for qid, score in scores.items()
            }

        def mean(scores, qids):
            return 100.0 * sum(scores[qid] for qid in qids) / len(qids)

        exact_thresholded, f1_thresholded = thresholded(exact), thresholded(f1)
        qids = list(exact)
        result = {"exact": mean(exact_thresholded, qids), "f1": mean(f1_thresholded, qids), "total": len(qids)}
        for name, wanted in (("HasAns", True), ("NoAns", False)):
            subset = [qid for qid in qids if has_answer[qid] == wanted]
            if subset:
                result[f"{name}_exact"] = mean(exact_thresholded, subset)
                result[f"{name}_f1"] = mean(f1_thresholded, subset)
                result[f"{name}_total"] = len(subset)
        result["best_exact"], result["best_exact_thresh"] = _best_threshold(
            exact, no_answer_probability, has_answer, predicted
        )
        result["best_f1"], result["best_f1_thresh"] = _best_threshold(f1, no_answer_probability, has_answer, predicted)
        return result


def load_squad_metric(version_2: bool) -> tuple[evaluate.EvaluationModule, str]:
    """`evaluate.load("squad" | "squad_v2")` when the Hub or its cache has the module, else `SquadMetric`; returns the
    metric and which implementation it is (recorded with the results)."""
    name = "squad_v2" if version_2 else "squad"
    try:
        return evaluate.load(name), f"evaluate.load({name!r})"
    except Exception as error:  # no Hub access and nothing cached
        logger.info(
            f"evaluate.load({name!r}) is unavailable ({type(error).__name__}); using blockbert_hf.qa.SquadMetric."
        )
        return SquadMetric(config_name=name), f"blockbert_hf.qa.SquadMetric({name!r})"


# ---------------------------------------------------------------------------------------------------------------------
# Fine-tuning and evaluation (examples/run_qa.py)
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class QARunConfig:
    """Everything `run_qa` needs; `examples/run_qa.py` fills it from its command line (same names)."""

    model_name_or_path: str
    output_dir: str
    tokenizer_name: str | None = None
    dataset_name: str | None = None
    dataset_subset: str | None = None
    train_file: str | None = None
    validation_file: str | None = None
    train_split: str = "train"
    validation_split: str = "validation"
    do_train: bool = False
    do_eval: bool = False
    version_2_with_negative: bool | None = None
    max_seq_length: int | None = None
    doc_stride: int = 128
    num_train_epochs: float = 4.0
    max_train_steps: int | None = None
    learning_rate: float = 3e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    per_device_train_batch_size: int = 32
    per_device_eval_batch_size: int = 64
    gradient_accumulation_steps: int = 1
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    n_best_size: int = 20
    max_answer_length: int = 30
    null_score_diff_threshold: float = 0.0
    seed: int = 42
    checkpointing_steps: str | None = None
    resume_from_checkpoint: str | None = None
    mixed_precision: str | None = None
    logging_steps: int = 50
    write_nbest: bool = False
    group_by_length: bool = False
    attn_implementation: str | None = None
    trust_remote_code: bool = False


def _select(dataset: datasets.Dataset, limit: int | None) -> datasets.Dataset:
    return dataset if limit is None else dataset.select(range(min(limit, len(dataset))))


def _checkpoint_every(value: str | None) -> int | str | None:
    if value is None or value == "epoch":
        return value
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"--checkpointing_steps must be a positive number of steps or 'epoch', got {value!r}.")
    return int(value)


def _latest_checkpoint(checkpoints: Path) -> Path:
    found = sorted(
        (path for path in checkpoints.glob("step_*") if path.name[5:].isdigit()), key=lambda path: int(path.name[5:])
    )
    if not found:
        raise FileNotFoundError(f"--resume_from_checkpoint latest: no step_* checkpoint in {checkpoints}.")
    return found[-1]


def save_training_state(accelerator: Accelerator, target: Path, completed_steps: int) -> None:
    """`accelerator.save_state` into a staging folder that replaces `target` only once every process has written
    its part (model, optimizer, scheduler, RNG states), so a checkpoint is complete or absent."""
    staging = target.with_name(f".{target.name}.tmp")
    if accelerator.is_main_process:
        shutil.rmtree(staging, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(staging))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        write_json_atomically(staging / "qa_training_state.json", {"completed_steps": completed_steps})
        old = target.with_name(f".{target.name}.old")
        if target.exists():
            os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


def _load_model_and_tokenizer(config: QARunConfig):
    tokenizer = AutoTokenizer.from_pretrained(
        config.tokenizer_name or config.model_name_or_path, trust_remote_code=config.trust_remote_code
    )
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"{type(tokenizer).__name__} is not a fast tokenizer: windows need its overflow and offset mapping."
        )
    tokenizer.padding_side = "right"  # BlockBERT rejects left padding; offsets assume the question comes first
    model_kwargs = {"trust_remote_code": config.trust_remote_code}
    if config.attn_implementation:
        model_kwargs["attn_implementation"] = config.attn_implementation
    model = AutoModelForQuestionAnswering.from_pretrained(config.model_name_or_path, **model_kwargs)
    return model, tokenizer


def resolve_window_lengths(model, tokenizer, max_seq_length: int | None, doc_stride: int) -> tuple[int, int]:
    """The window length (default: the model's N) and stride, checked against what the model takes."""
    model_length = default_max_seq_len(model, tokenizer)
    max_seq_length = max_seq_length or model_length
    if max_seq_length > model_length:
        raise ValueError(
            f"--max_seq_length {max_seq_length} exceeds what the model takes (N = {model_length}); use at most "
            f"{model_length}, or a checkpoint converted to a longer N."
        )
    if not 0 <= doc_stride < max_seq_length:
        raise ValueError(f"--doc_stride must be in [0, max_seq_length = {max_seq_length}), got {doc_stride}.")
    return max_seq_length, doc_stride


def _load_split(config: QARunConfig, file: str | None, split: str, limit: int | None, what: str):
    if file is None and config.dataset_name is None:
        raise ValueError(f"{what} needs --{what}_file or --dataset_name.")
    dataset = load_qa_dataset(file or config.dataset_name, split=split, subset=None if file else config.dataset_subset)
    return _select(dataset, limit)


@dataclass
class _QAData:
    train_examples: datasets.Dataset | None = None
    train_features: datasets.Dataset | None = None
    eval_examples: datasets.Dataset | None = None
    eval_features: datasets.Dataset | None = None


def _prepare_data(config: QARunConfig, tokenizer, max_seq_length: int, doc_stride: int, summary: dict, log) -> _QAData:
    data = _QAData()
    feature_kwargs = {"tokenizer": tokenizer, "max_seq_length": max_seq_length, "doc_stride": doc_stride}
    if config.do_train:
        examples = _load_split(config, config.train_file, config.train_split, config.max_train_samples, "train")
        examples, alignment = realign_answers(examples)
        log(
            f"Training answers: {alignment['realigned']} re-aligned to their text, {alignment['dropped']} dropped "
            f"(text not in the context), {alignment['removed_questions']} question(s) skipped (no answer left)."
        )
        check_question_lengths(
            examples["id"], examples["question"], tokenizer, max_seq_length, doc_stride, "the training set"
        )
        data.train_examples = examples
        data.train_features = examples.map(
            prepare_train_features,
            batched=True,
            remove_columns=examples.column_names,
            fn_kwargs=feature_kwargs,
            desc="Training windows",
        )
        summary.update(
            train_examples=len(examples), train_features=len(data.train_features), answer_alignment=alignment
        )
    if config.do_eval:
        examples = _load_split(
            config, config.validation_file, config.validation_split, config.max_eval_samples, "validation"
        )
        check_question_lengths(
            examples["id"], examples["question"], tokenizer, max_seq_length, doc_stride, "the evaluation set"
        )
        data.eval_examples = examples
        features = examples.map(
            prepare_eval_features,
            batched=True,
            remove_columns=examples.column_names,
            fn_kwargs=feature_kwargs,
            desc="Evaluation windows",
        )
        # Longest windows first: batches of similar lengths pad little (predictions are grouped by example_id, so
        # the order of windows does not matter).
        lengths = [len(input_ids) for input_ids in features["input_ids"]]
        data.eval_features = features.select(sorted(range(len(lengths)), key=lambda i: -lengths[i]))
        summary.update(eval_examples=len(examples), eval_features=len(data.eval_features))
    return data


def _train_dataloader(config: QARunConfig, features: datasets.Dataset, collator) -> tuple[DataLoader, torch.Generator]:
    """Shuffled batches, or with `group_by_length` batches of similar lengths (transformers' LengthGroupedSampler:
    random mega-batches sorted by length), which pad far less. The generator is reseeded every epoch, so a resumed
    run sees the same order."""
    generator = torch.Generator()
    if config.group_by_length:
        lengths = [len(input_ids) for input_ids in features["input_ids"]]
        sampler = LengthGroupedSampler(config.per_device_train_batch_size, lengths=lengths, generator=generator)
    else:
        sampler = torch.utils.data.RandomSampler(features, generator=generator)
    loader = DataLoader(features, sampler=sampler, collate_fn=collator, batch_size=config.per_device_train_batch_size)
    return loader, generator


def _train(config: QARunConfig, accelerator: Accelerator, model, train_dataloader, generator, summary: dict, log):
    """The training loop; returns the prepared model."""
    checkpoint_every = _checkpoint_every(config.checkpointing_steps)
    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight")
    parameter_groups = [
        {
            "params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
            "weight_decay": config.weight_decay,
        },
        {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(parameter_groups, lr=config.learning_rate)
    model, optimizer, train_dataloader = accelerator.prepare(model, optimizer, train_dataloader)
    steps_per_epoch = math.ceil(len(train_dataloader) / config.gradient_accumulation_steps)
    max_train_steps = config.max_train_steps or math.ceil(config.num_train_epochs * steps_per_epoch)
    num_epochs = math.ceil(max_train_steps / steps_per_epoch)
    # A prepared scheduler steps once per process for each optimizer step: count in those units.
    scheduler = get_linear_schedule_with_warmup(
        optimizer,
        num_warmup_steps=math.ceil(config.warmup_ratio * max_train_steps) * accelerator.num_processes,
        num_training_steps=max_train_steps * accelerator.num_processes,
    )
    scheduler = accelerator.prepare(scheduler)
    completed_steps, first_epoch, skip_batches = 0, 0, 0
    checkpoints = Path(config.output_dir) / "checkpoints"
    if config.resume_from_checkpoint:
        resume = (
            _latest_checkpoint(checkpoints)
            if config.resume_from_checkpoint == "latest"
            else Path(config.resume_from_checkpoint)
        )
        accelerator.load_state(str(resume))
        completed_steps = json.loads((resume / "qa_training_state.json").read_text())["completed_steps"]
        first_epoch = completed_steps // steps_per_epoch
        skip_batches = (completed_steps % steps_per_epoch) * config.gradient_accumulation_steps
        log(f"Resumed from {resume} after {completed_steps} steps.")
    summary.update(num_epochs=num_epochs, max_train_steps=max_train_steps, learning_rate=config.learning_rate)
    log(
        f"Training: {summary['train_features']} windows, {num_epochs} epoch(s), {max_train_steps} steps of "
        f"{config.per_device_train_batch_size} x {accelerator.num_processes} process(es) x "
        f"{config.gradient_accumulation_steps} accumulation."
    )
    progress = tqdm(
        total=max_train_steps, initial=completed_steps, desc="Training", disable=not accelerator.is_local_main_process
    )
    started = time.perf_counter()
    running_loss, running_count = 0.0, 0
    for epoch in range(first_epoch, num_epochs):
        model.train()
        generator.manual_seed(config.seed + epoch)
        batches = train_dataloader
        if epoch == first_epoch and skip_batches:
            batches = accelerator.skip_first_batches(train_dataloader, skip_batches)
        for batch in batches:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            running_loss += loss.detach().float().item()
            running_count += 1
            if not accelerator.sync_gradients:
                continue
            completed_steps += 1
            progress.update(1)
            if completed_steps % config.logging_steps == 0:
                average = running_loss / running_count
                progress.set_postfix(loss=f"{average:.4f}")
                log(f"step {completed_steps}: loss {average:.4f}, lr {scheduler.get_last_lr()[0]:.2e}")
                running_loss, running_count = 0.0, 0
            if isinstance(checkpoint_every, int) and completed_steps % checkpoint_every == 0:
                save_training_state(accelerator, checkpoints / f"step_{completed_steps}", completed_steps)
            if completed_steps >= max_train_steps:
                break
        if checkpoint_every == "epoch":
            save_training_state(accelerator, checkpoints / f"step_{completed_steps}", completed_steps)
        if completed_steps >= max_train_steps:
            break
    progress.close()
    summary.update(completed_steps=completed_steps, train_seconds=round(time.perf_counter() - started, 1))
    return model


def _eval_loop(accelerator, model, dataloader) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Start/end logits of every window, in dataset order, gathered from all processes."""
    model.eval()
    starts, ends = [], []
    for batch in tqdm(dataloader, desc="Evaluating", disable=not accelerator.is_local_main_process):
        with torch.no_grad():
            outputs = model(**batch)
        # Batches are padded per process: pad to a common length before gathering (the padding is never read).
        start = accelerator.pad_across_processes(outputs.start_logits.float(), dim=1, pad_index=-1e4)
        end = accelerator.pad_across_processes(outputs.end_logits.float(), dim=1, pad_index=-1e4)
        start, end = accelerator.gather_for_metrics((start, end))
        starts.extend(start.cpu().numpy())
        ends.extend(end.cpu().numpy())
    return starts, ends


def run_qa(config: QARunConfig) -> dict:
    """Fine-tunes (`do_train`) and/or evaluates (`do_eval`) an extractive QA model; writes the fine-tuned model to
    `output_dir/model`, checkpoints to `output_dir/checkpoints/step_N`, and `eval_predictions.json`,
    `eval_metrics.json` (and for SQuAD 2.0 `eval_null_odds.json`) to `output_dir`. Returns the metrics and a
    summary of the run."""
    if not (config.do_train or config.do_eval):
        raise ValueError("Nothing to do: pass --do_train and/or --do_eval.")
    _checkpoint_every(config.checkpointing_steps)  # a bad value fails before any work
    accelerator = Accelerator(
        mixed_precision=config.mixed_precision, gradient_accumulation_steps=config.gradient_accumulation_steps
    )
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > accelerator.num_processes:
        # Otherwise every process would run the whole job alone, each writing the same outputs.
        raise RuntimeError(
            f"Launched as {launched} processes (WORLD_SIZE) but Accelerate set up {accelerator.num_processes}. On a "
            "machine without GPUs, set ACCELERATE_USE_CPU=1: `ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu "
            "--num_processes 2 examples/run_qa.py ...` (`accelerate launch --cpu --num_processes 2` starts one process "
            "unless MPI is set up)."
        )
    set_seed(config.seed)

    def log(message: str) -> None:
        if accelerator.is_main_process:
            logger.info(message)

    if not accelerator.is_main_process:
        datasets.utils.logging.set_verbosity_error()
        transformers.utils.logging.set_verbosity_error()

    output_dir = Path(config.output_dir)
    model, tokenizer = _load_model_and_tokenizer(config)
    max_seq_length, doc_stride = resolve_window_lengths(model, tokenizer, config.max_seq_length, config.doc_stride)
    log(f"Windows of {max_seq_length} tokens overlapping by {doc_stride}; {accelerator.num_processes} process(es).")
    summary: dict = {"model": config.model_name_or_path, "max_seq_length": max_seq_length, "doc_stride": doc_stride}
    with accelerator.main_process_first():
        data = _prepare_data(config, tokenizer, max_seq_length, doc_stride, summary, log)
    version_2 = config.version_2_with_negative
    if version_2 is None:
        version_2 = any(
            has_impossible_questions(examples)
            for examples in (data.train_examples, data.eval_examples)
            if examples is not None
        )
    summary["version_2_with_negative"] = version_2
    collator = DataCollatorWithPadding(tokenizer)  # pads each batch to its longest window, on the right

    if config.do_train:
        train_dataloader, generator = _train_dataloader(config, data.train_features, collator)
        model = _train(config, accelerator, model, train_dataloader, generator, summary, log)
        accelerator.wait_for_everyone()
        state_dict = accelerator.get_state_dict(model)
        if accelerator.is_main_process:
            unwrapped = accelerator.unwrap_model(model)
            save_atomically(
                output_dir / "model",
                lambda folder: unwrapped.save_pretrained(folder, state_dict=state_dict),
                tokenizer.save_pretrained,
            )
            log(f"Saved the fine-tuned model to {output_dir / 'model'}.")
    else:
        model = accelerator.prepare(model)

    metrics: dict = {}
    if config.do_eval:
        eval_dataloader = accelerator.prepare(
            DataLoader(
                data.eval_features.remove_columns(list(EVAL_METADATA_COLUMNS)),
                collate_fn=collator,
                batch_size=config.per_device_eval_batch_size,
            )
        )
        started = time.perf_counter()
        start_logits, end_logits = _eval_loop(accelerator, model, eval_dataloader)
        summary["eval_seconds"] = round(time.perf_counter() - started, 1)
        if accelerator.is_main_process:
            metrics = _score_and_write(config, data, start_logits, end_logits, version_2, summary, log)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return {**metrics, **summary} if accelerator.is_main_process else {}


def _score_and_write(config: QARunConfig, data: _QAData, start_logits, end_logits, version_2, summary, log) -> dict:
    output_dir = Path(config.output_dir)
    predictions, nbest = postprocess_qa_predictions(
        data.eval_examples,
        data.eval_features,
        start_logits,
        end_logits,
        version_2=version_2,
        n_best_size=config.n_best_size,
        max_answer_length=config.max_answer_length,
        null_score_diff_threshold=config.null_score_diff_threshold,
    )
    metric, implementation = load_squad_metric(version_2)
    metrics = metric.compute(predictions=predictions, references=squad_references(data.eval_examples))
    # Plain numbers for JSON (the Hub modules may return numpy scalars).
    metrics = {key: int(v) if isinstance(v, numbers.Integral) else float(v) for key, v in metrics.items()}
    write_json_atomically(output_dir / "eval_predictions.json", {p["id"]: p["prediction_text"] for p in predictions})
    if version_2:
        write_json_atomically(
            output_dir / "eval_null_odds.json", {p["id"]: p["no_answer_probability"] for p in predictions}
        )
    if config.write_nbest:
        write_json_atomically(output_dir / "eval_nbest_predictions.json", nbest)
    write_json_atomically(
        output_dir / "eval_metrics.json", {**metrics, "metric_implementation": implementation, **summary}
    )
    log(f"Evaluation ({implementation}): {json.dumps(metrics)}")
    return metrics


def config_from_namespace(namespace: argparse.Namespace) -> QARunConfig:
    """The run configuration from `examples/run_qa.py`'s parsed arguments (extra arguments are an error)."""
    known = set(QARunConfig.__dataclass_fields__)
    unknown = sorted(set(vars(namespace)) - known)
    if unknown:
        raise ValueError(f"Unknown run_qa options: {unknown}")
    return QARunConfig(**vars(namespace))


def _main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m blockbert_hf.qa", description="QA data helpers.")
    commands = parser.add_subparsers(dest="command", required=True)
    split = commands.add_parser(
        "split-articles", help="Write the first and second half of a SQuAD file's articles as two SQuAD files."
    )
    split.add_argument("source", help="SQuAD-format .json or .json.gz")
    split.add_argument("output_dir")
    args = parser.parse_args(argv)
    first, second = split_squad_articles(args.source, args.output_dir)
    for path in (first, second):
        dataset = read_squad_json(path)
        print(f"{path}: {len(set(dataset['title']))} articles, {len(dataset)} questions")


if __name__ == "__main__":
    _main()
