"""QA post-processing and metrics: per-window logits to one answer per question (with the pipeline's `rank_answers`,
the same code the pipeline runs), and SQuAD metrics: `evaluate`'s "squad" / "squad_v2" modules when `evaluate.load`
can get them (Hub or its cache), else `SquadMetric`, written here from the official scripts' definitions."""

import collections
import logging
import re
import string

import datasets
import evaluate
import numpy as np

from ...model.pipeline_question_answering import DEFAULT_WINDOW_SCORING, WindowLogits, rank_answers


logger = logging.getLogger(__name__)


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
    window_scoring: str = DEFAULT_WINDOW_SCORING,
) -> tuple[list[dict], dict[str, list[dict]]]:
    """Turns per-window logits (aligned with `features`) into one prediction per example, with the pipeline's
    `rank_answers` (spans of different windows compared on `window_scoring`). Returns the predictions in the
    `evaluate` squad/squad_v2 format (`id`, `prediction_text`, and `no_answer_probability` for v2) and the n-best
    lists by id."""
    if len(start_logits) != len(features) or len(end_logits) != len(features):
        raise ValueError(f"Got logits for {len(start_logits)} windows but {len(features)} features.")
    windows_by_example = collections.defaultdict(list)
    if isinstance(features, datasets.Dataset):  # one conversion to Python, not one per row
        read = ("example_id", "null_index", "offset_mapping", "block_null_indices")
        features = features.select_columns([name for name in read if name in features.column_names]).to_dict()
    # Features made before blocks had their own null token: the window's null token scores every span.
    block_nulls = features.get("block_null_indices")
    for index, (example_id, null_index, offsets, start, end) in enumerate(
        zip(features["example_id"], features["null_index"], features["offset_mapping"], start_logits, end_logits)
    ):
        nulls = block_nulls[index] if block_nulls is not None else None
        windows_by_example[example_id].append(WindowLogits(start, end, offsets, null_index, nulls))
    predictions, nbest = [], {}
    for example_id, context in zip(examples["id"], examples["context"]):
        ranked = rank_answers(
            windows_by_example[example_id],
            context,
            n_best=n_best_size,
            max_answer_len=max_answer_length,
            handle_impossible_answer=version_2,
            null_score_diff_threshold=null_score_diff_threshold,
            window_scoring=window_scoring,
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


def token_f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
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
            f1 += max(token_f1(prediction.split(), gold.split()) for gold in golds)
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
                else token_f1(prediction.split(), normalize_answer(gold).split())
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
            f"evaluate.load({name!r}) is unavailable ({type(error).__name__}); using blockbert_hf.train.qa.SquadMetric."
        )
        return SquadMetric(config_name=name), f"blockbert_hf.train.qa.SquadMetric({name!r})"
