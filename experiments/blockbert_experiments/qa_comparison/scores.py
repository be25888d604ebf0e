"""Per-question SQuAD scores and the report's statistics: article-bootstrap and per-seed t-intervals (the wider counts,
docs/long_document_decision_rule.md) of the differences between cells."""

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from blockbert_hf.train.qa.data import load_qa_dataset
from blockbert_hf.train.qa.postprocessing import normalize_answer, token_f1

from .grid import ComparisonConfig


def question_scores(predictions: Mapping[str, str], references: Sequence[tuple]) -> tuple[list[int], list[float]]:
    """SQuAD v1.1 exact match (0/1) and F1 (0..1) of each question `(id, gold answer texts)`: the best over its gold
    answers, as the official script scores them; their means (x100) are the metric's EM and F1."""
    exact, f1 = [], []
    for question_id, golds in references:
        prediction = normalize_answer(predictions[question_id])
        normalized = [normalize_answer(gold) for gold in golds]
        exact.append(max(int(prediction == gold) for gold in normalized))
        f1.append(max(token_f1(prediction.split(), gold.split()) for gold in normalized))
    return exact, f1


def ids_digest(ids: Sequence[str]) -> str:
    """Identifies the scored questions: two cells' scores pair up only where their digests match."""
    return hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()


def set_questions(path: Path) -> dict:
    """The questions of a SQuAD-format set in file order: ids, gold answers and the index of each one's article."""
    dataset = load_qa_dataset(str(path))
    titles = list(dict.fromkeys(dataset["title"]))
    return {
        "ids": list(dataset["id"]),
        "answers": [answers["text"] for answers in dataset["answers"]],
        "titles": titles,
        "article": [titles.index(title) for title in dataset["title"]],
    }


CONFIDENCE = 0.95  # of every interval here


def article_bootstrap_ratio(
    numerator: Sequence[float], denominator: Sequence[float], articles: Sequence[int], *, samples=10_000, seed=0
) -> dict:
    """The 95% interval of `sum(numerator) / sum(denominator)` over the questions (paired, in the same order) from
    `samples` resamples of whole articles with replacement: questions of one article are not independent."""
    columns = [np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)]
    groups = np.asarray(articles)
    if any(column.shape != groups.shape for column in columns) or groups.size == 0:
        sizes = ", ".join(str(column.size) for column in columns)
        raise ValueError(
            f"Need one article per question and at least one question: got {sizes} scores and {groups.size} article "
            "indices."
        )
    _, group = np.unique(groups, return_inverse=True)
    tops, bottoms = (np.bincount(group, weights=column) for column in columns)
    drawn = np.random.default_rng(seed).integers(0, len(tops), size=(samples, len(tops)))
    tail = 100 * (1 - CONFIDENCE) / 2
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample of articles the denominator scores 0 on
        low, high = np.percentile(tops[drawn].sum(axis=1) / bottoms[drawn].sum(axis=1), [tail, 100 - tail])
    return {"low": float(low), "high": float(high), "articles": len(tops)}


def paired_article_bootstrap(
    scores: Sequence[float], baseline: Sequence[float], articles: Sequence[int], *, samples=10_000, seed=0
) -> dict:
    """The mean of `scores - baseline` (the same questions, in order) with its 95% article-bootstrap interval."""
    differences = np.asarray(scores, dtype=float) - np.asarray(baseline, dtype=float)
    interval = article_bootstrap_ratio(differences, np.ones_like(differences), articles, samples=samples, seed=seed)
    return {"difference": float(differences.mean()), **interval, "questions": int(differences.size)}


def seed_t_interval(differences: Sequence[float]) -> dict | None:
    """The 95% t-interval of the mean of per-seed differences: the variation between fine-tuning seeds, which
    the article bootstrap does not see. None with fewer than two seeds."""
    seeds = len(differences)
    if seeds < 2:
        return None
    values = np.asarray(differences, dtype=float)
    quantile = float(stats.t.ppf(1 - (1 - CONFIDENCE) / 2, seeds - 1))
    half_width = quantile * float(values.std(ddof=1)) / math.sqrt(seeds)
    mean = float(values.mean())
    return {"difference": mean, "low": mean - half_width, "high": mean + half_width, "seeds": seeds, "t": quantile}


def wider_interval(bootstrap: Mapping, t_interval: Mapping | None) -> dict:
    """The wider of the article bootstrap and the seeds' t-interval, its half-width the smallest detectable effect."""
    wider = t_interval is not None and t_interval["high"] - t_interval["low"] > bootstrap["high"] - bootstrap["low"]
    chosen = t_interval if wider else bootstrap
    return {
        "difference": bootstrap["difference"],
        "low": chosen["low"],
        "high": chosen["high"],
        "from": "t over seeds" if wider else "article bootstrap",
        "smallest_detectable_effect": (chosen["high"] - chosen["low"]) / 2,
        "excludes_zero": (chosen["low"] > 0 or chosen["high"] < 0) and (wider or bootstrap["articles"] > 1),
    }


def _points(scores: Sequence[float]) -> np.ndarray:
    """Per-question scores (0..1) in points (0..100)."""
    return 100 * np.asarray(scores, dtype=float)


def _bootstrap(config: ComparisonConfig, scores: Sequence[float], baseline: Sequence[float], articles) -> dict:
    """`paired_article_bootstrap` with the report's resamples and seed, and whether its interval excludes zero (never
    over one article: its interval has no width and says nothing)."""
    interval = paired_article_bootstrap(
        scores, baseline, articles, samples=config.bootstrap_samples, seed=config.bootstrap_seed
    )
    excludes_zero = interval["articles"] > 1 and (interval["low"] > 0 or interval["high"] < 0)
    return {**interval, "excludes_zero": excludes_zero}


def _comparable(results: Mapping, other: str, baseline: str, test_set: str) -> bool:
    """Whether both cells scored the set on the same questions."""
    a, b = results[other]["scores"].get(test_set), results[baseline]["scores"].get(test_set)
    return a is not None and b is not None and a["ids_sha256"] == b["ids_sha256"]


def compare_cells(
    config: ComparisonConfig, results: Mapping[str, dict], questions: Mapping[str, dict], pairs: Sequence[tuple]
) -> dict:
    """Per `(cell, reference)` pair and set both scored on the same questions: the EM and F1 differences (points)."""
    compared: dict = {}
    for name, reference in pairs:
        for test_set in results[name]["scores"]:
            if not _comparable(results, name, reference, test_set):
                continue
            mine, theirs = results[name]["scores"][test_set], results[reference]["scores"][test_set]
            articles = questions[test_set]["article"][: len(mine["f1"])]
            compared.setdefault(name, {})[test_set] = {
                metric: _bootstrap(config, _points(mine[key]), _points(theirs[key]), articles)
                for metric, key in (("exact_match", "em"), ("f1", "f1"))
            }
    return compared


def configuration_key(results: Mapping[str, dict], name: str) -> str:
    """What a cell trains, without its name, seed and test sets: cells that differ only in the seed share it."""
    cell = {key: value for key, value in results[name]["cell"].items() if key not in ("name", "seed", "eval_sets")}
    return json.dumps(cell, sort_keys=True)


def seed_pairs(results: Mapping[str, dict]) -> list[tuple[str, str]]:
    """Pairs of cells that differ only in their seed."""
    groups: dict[str, list[str]] = {}
    for name in results:
        groups.setdefault(configuration_key(results, name), []).append(name)
    return [(names[i], names[0]) for names in groups.values() for i in range(1, len(names))]


def same_seed_pairs(results: Mapping[str, dict], baseline: str) -> list[tuple[str, str]]:
    """Each cell with another seed than the baseline's, paired with the baseline's configuration at its seed (the
    comparison at one more seed, without the seeds' own difference)."""
    if baseline not in results:
        return []
    reference = configuration_key(results, baseline)
    by_seed = {results[name]["cell"]["seed"]: name for name in results if configuration_key(results, name) == reference}
    return [
        (name, by_seed[results[name]["cell"]["seed"]])
        for name in results
        if configuration_key(results, name) != reference
        and results[name]["cell"]["seed"] != results[baseline]["cell"]["seed"]
        and results[name]["cell"]["seed"] in by_seed
    ]


def full_attention_pairs(
    results: Mapping[str, dict], already: Sequence[tuple[str, str]] = (), windows_of: int | None = None
) -> list[tuple[str, str]]:
    """Each cell but full attention with the full-attention cell of its N, seed and training set, or with `windows_of`,
    each cell above that N with full attention at that N (sliding windows); pairs in `already` left out."""
    cells = {name: results[name]["cell"] for name in results}
    full = {
        (cell["max_seq_length"], cell["seed"], cell["train_set"]): name
        for name, cell in cells.items()
        if cell["attention_pattern"] == "full"
    }
    pairs = [
        (name, full.get((windows_of or cell["max_seq_length"], cell["seed"], cell["train_set"])))
        for name, cell in cells.items()
        if (cell["max_seq_length"] > windows_of if windows_of else cell["attention_pattern"] != "full")
    ]
    return [pair for pair in pairs if pair[1] is not None and pair not in set(already)]


def _mean_f1_points(results: Mapping[str, dict], name: str, test_set: str) -> float:
    return 100 * float(np.mean(results[name]["scores"][test_set]["f1"]))


def configurations(results: Mapping[str, dict]) -> dict[str, dict[int, str]]:
    """The cells of each configuration (`configuration_key`), by seed."""
    found: dict[str, dict[int, str]] = {}
    for name in results:
        found.setdefault(configuration_key(results, name), {})[results[name]["cell"]["seed"]] = name
    return found


def _seed_spread(results: Mapping[str, dict], cells: Mapping[int, str], test_set: str) -> float | None:
    """The largest gap between the mean F1 of two seeds of a configuration; None with one seed."""
    means = [
        _mean_f1_points(results, cells[s], test_set) for s in sorted(cells) if test_set in results[cells[s]]["scores"]
    ]
    return max(means) - min(means) if len(means) > 1 else None


def seed_averaged_differences(
    config: ComparisonConfig, results: Mapping[str, dict], questions: Mapping[str, dict], pairs: Sequence[tuple]
) -> dict:
    """Each configuration's cells (by seed) against its reference's, averaged over the seeds both have, per set: both
    intervals, both seed spreads and the verdict (the README's rule); keyed by the first paired cell."""
    compared: dict = {}
    for by_seed, reference in pairs:
        seeds = sorted(set(by_seed) & set(reference))
        for test_set in results[by_seed[seeds[0]]]["scores"] if seeds else ():
            if not all(_comparable(results, by_seed[seed], reference[seed], test_set) for seed in seeds):
                continue
            mine, theirs = (
                np.mean([_points(results[cells[seed]]["scores"][test_set]["f1"]) for seed in seeds], axis=0)
                for cells in (by_seed, reference)
            )
            bootstrap = _bootstrap(config, mine, theirs, questions[test_set]["article"][: len(mine)])
            per_seed = [
                _mean_f1_points(results, by_seed[seed], test_set) - _mean_f1_points(results, reference[seed], test_set)
                for seed in seeds
            ]
            t_interval = seed_t_interval(per_seed)
            spreads = {
                side: _seed_spread(results, cells, test_set)
                for side, cells in (("configuration", by_seed), ("baseline", reference))
            }
            known = [spread for spread in spreads.values() if spread is not None]
            if not bootstrap["excludes_zero"]:
                verdict = "smaller than the interval"
            elif not known:
                verdict = "no seed spread yet"
            else:
                verdict = "resolved" if abs(bootstrap["difference"]) > max(known) else "within the seed spread"
            mean_f1 = float(np.mean(mine))
            compared.setdefault(by_seed[seeds[0]], {})[test_set] = {
                "seeds": seeds,
                "f1": bootstrap,
                "per_seed_differences": per_seed,
                "t_interval": t_interval,
                "interval": wider_interval(bootstrap, t_interval),
                "against_each_reference_seed": {
                    str(seed): mean_f1 - _mean_f1_points(results, name, test_set)
                    for seed, name in sorted(reference.items())
                    if _comparable(results, by_seed[seeds[0]], name, test_set)
                },
                "seed_spread": spreads,
                "verdict": verdict,
            }
    return compared


def seed_averaged_verdicts(config: ComparisonConfig, results: Mapping, questions: Mapping, baseline: str) -> dict:
    """Each configuration against the baseline's, as `seed_averaged_differences` gives them."""
    if baseline not in results:
        return {}
    found = configurations(results)
    reference = found[configuration_key(results, baseline)]
    pairs = [(cells, reference) for cells in found.values() if cells is not reference]
    return seed_averaged_differences(config, results, questions, pairs)


def long_arm_verdicts(config: ComparisonConfig, results: Mapping[str, dict], questions: Mapping[str, dict]) -> dict:
    """Each configuration above N = 512 against sliding windows of 512 trained on the same data, seed-averaged."""
    found = [(results[cells[min(cells)]]["cell"], cells) for cells in configurations(results).values()]
    windows_512 = {
        first["train_set"]: cells
        for first, cells in found
        if first["attention_pattern"] == "full" and first["max_seq_length"] == 512
    }
    pairs = [
        (cells, windows_512[first["train_set"]])
        for first, cells in found
        if first["max_seq_length"] > 512 and first["train_set"] in windows_512
    ]
    return seed_averaged_differences(config, results, questions, pairs)


WHOLE_ARTICLES, OWN_PARAGRAPHS = "article", "paragraph"  # a long document as context, and the question's own paragraph


def whole_article_scores(config: ComparisonConfig, results: Mapping[str, dict], questions: Mapping[str, dict]) -> dict:
    """For each cell that scored the same questions over whole articles and over their paragraphs: per window scoring
    rule, both F1 and their ratio with its interval, and the difference between the rules over whole articles."""
    if WHOLE_ARTICLES not in questions or OWN_PARAGRAPHS not in questions:
        return {}
    position = {question: index for index, question in enumerate(questions[OWN_PARAGRAPHS]["ids"])}
    measured = {}
    for name, entry in results.items():
        article, paragraph = (
            entry["scores"].get(key, {}).get("by_window_scoring") for key in (WHOLE_ARTICLES, OWN_PARAGRAPHS)
        )
        if not article or not paragraph or not article["raw"]["f1"]:
            continue
        scored = len(article["raw"]["f1"])
        same_questions = [position.get(question) for question in questions[WHOLE_ARTICLES]["ids"][:scored]]
        if len(same_questions) < scored or None in same_questions or max(same_questions) >= len(paragraph["raw"]["f1"]):
            continue  # not the same questions (or the paragraphs' evaluation was capped before them)
        articles = questions[WHOLE_ARTICLES]["article"][:scored]
        by_rule = {}
        for rule in article:
            whole = entry["sets"][WHOLE_ARTICLES]["by_window_scoring"][rule]  # as the results table shows it
            own_scores = np.asarray(paragraph[rule]["f1"], dtype=float)[same_questions]
            own = 100 * float(np.mean(own_scores))
            interval = article_bootstrap_ratio(
                article[rule]["f1"], own_scores, articles, samples=config.bootstrap_samples, seed=config.bootstrap_seed
            )
            ratio = {"ratio": whole["f1"] / own, "ratio_low": interval["low"], "ratio_high": interval["high"]}
            by_rule[rule] = {**whole, "paragraph_f1": own, **ratio}
        difference = _bootstrap(
            config, _points(article["null_relative"]["f1"]), _points(article["raw"]["f1"]), articles
        )
        measured[name] = {"by_window_scoring": by_rule, "null_relative_minus_raw": difference}
    return measured
