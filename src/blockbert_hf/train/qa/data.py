"""QA data as SQuAD-style rows `{id, title, context, question, answers: {text, answer_start}}`: any Hub dataset or
local file or folder with these columns, SQuAD-format `.json(.gz)` and MRQA `.jsonl(.gz)` files and MRQA-schema rows
(`load_qa_dataset`), their checks, answer re-alignment, and the article split of a SQuAD file."""

import collections
import json
import logging
import os
import re
from pathlib import Path

import datasets

from ...saving import open_text, write_json_atomically
from ..hub import HUB_DATASETS, is_hub_id


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
# Short names of earlier versions -> their Hub ids (any other Hub id is taken as it is).


def _answers(texts: list[str], starts: list[int]) -> dict:
    return {"text": list(texts), "answer_start": [int(start) for start in starts]}


def _rows_dataset(rows: list[dict], path) -> datasets.Dataset:
    if not rows:
        raise ValueError(f"{path} has no questions.")
    return datasets.Dataset.from_list(rows, features=QA_FEATURES)


def _read_json(path: str | os.PathLike):
    """The JSON document in a UTF-8 file, or a `ValueError` naming the file and where it is broken."""
    try:
        with open_text(path) as handle:
            return json.load(handle)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}.") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error}); re-encode it as UTF-8.") from None


def read_squad_json(path: str | os.PathLike) -> datasets.Dataset:
    """Rows of a SQuAD-format file (`{"version", "data": [{"title", "paragraphs": [{"context", "qas"}]}]}`, v1.1 or
    v2.0; unanswerable v2.0 questions get empty answers)."""
    data = _read_json(path)
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
    return _rows_dataset(rows, path)


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


_MRQA_RECORD = (
    "Each line after the header must be one JSON object {'context', 'qas': [{'qid', 'question', "
    "'detected_answers': [{'text', 'char_spans': [[start, end]]}]}]}."
)


def read_mrqa_jsonl(path: str | os.PathLike) -> datasets.Dataset:
    """Rows of an MRQA 2019 file (`.jsonl` or `.jsonl.gz`: a header line, then one context with its `qas` per line)."""
    rows = []
    try:
        with open_text(path) as handle:
            for line_number, line in enumerate(handle, start=1):
                if line.strip():
                    rows.extend(_mrqa_rows(line, f"{path}, line {line_number}"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error}); re-encode it as UTF-8.") from None
    return _rows_dataset(rows, path)


def _mrqa_rows(line: str, where: str) -> list[dict]:
    """The rows of one MRQA line (none for the header); errors say `where` the line is and what is wrong with it."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: invalid JSON at column {error.colno}: {error.msg}. {_MRQA_RECORD}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{where}: not an MRQA record (a JSON {type(record).__name__}). {_MRQA_RECORD}")
    if "header" in record:
        return []
    try:
        context, qas = record["context"], record["qas"]
        return [mrqa_row(context, qa["qid"], qa["question"], qa["detected_answers"]) for qa in qas]
    except KeyError as error:
        raise ValueError(f"{where}: not an MRQA record, missing field {error.args[0]!r}. {_MRQA_RECORD}") from None
    except (TypeError, IndexError) as error:
        raise ValueError(f"{where}: not an MRQA record ({type(error).__name__}: {error}). {_MRQA_RECORD}") from None


def load_qa_dataset(
    source: str, split: str = "validation", config_name: str | None = None, mrqa_subset: str | None = None
) -> datasets.Dataset:
    """A QA dataset as SQuAD-style rows, from any of:

    - a SQuAD-format file (`.json`/`.json.gz`: `{"data": [{"title", "paragraphs": [...]}]}`);
    - an MRQA 2019 file (`.jsonl`/`.jsonl.gz`: a header line, then a context with its `qas` per line);
    - rows with the SQuAD columns `id`, `title`, `context`, `question`, `answers` = {`text`, `answer_start`} (`title`
      may be left out): a `Dataset.to_json` export (`.json`/`.jsonl`, optionally `.gz`), a `.parquet` file, a
      `Dataset.save_to_disk` folder (of a `Dataset`, or of a `DatasetDict`, whose `split` is read), or a folder that
      `datasets.load_dataset` reads (`config_name` picks its configuration);
    - a Hub dataset id, e.g. `rajpurkar/squad` (the short names `squad`, `squad_v2`, `mrqa` still work), with
      `config_name` and `split` passed to `datasets.load_dataset`; rows in the MRQA schema (`qid`,
      `detected_answers`), such as `mrqa-workshop/mrqa`'s, are converted, and `mrqa_subset` keeps the rows of one
      MRQA subset ("SQuAD", "NewsQA", "TriviaQA-web", "SearchQA", "HotpotQA", "NaturalQuestionsShort").

    Rows that lack a SQuAD column are refused, naming the missing columns."""
    path = Path(source)
    if config_name is not None and (path.is_file() or (path.is_dir() and _is_saved_dataset(path))):
        raise ValueError(
            f"{source} has no configurations (a file or a Dataset.save_to_disk folder): leave out the configuration "
            f"{config_name!r}, which applies to a Hub dataset or a dataset folder that datasets.load_dataset reads."
        )
    if path.is_dir():
        saved = _is_saved_dataset(path)
        dataset = _load_saved_dataset(path, split) if saved else _load_dataset(source, config_name, split)
    elif path.exists():
        dataset = _load_file(path)
    elif source in HUB_DATASETS or is_hub_id(source):
        dataset = _load_dataset(HUB_DATASETS.get(source, source), config_name, split)
    else:
        raise ValueError(
            f"{source!r} is neither an existing file or folder nor a Hub dataset id (such as rajpurkar/squad). Pass a "
            "SQuAD-format .json(.gz), an MRQA .jsonl(.gz), a file or folder of rows with the SQuAD columns, or an id."
        )
    dataset = _as_squad_rows(dataset, source, mrqa_subset)
    check_qa_dataset(dataset, source)
    return dataset


def _is_saved_dataset(folder: Path) -> bool:
    """A `Dataset.save_to_disk` (`state.json`) or `DatasetDict.save_to_disk` (`dataset_dict.json`) folder."""
    return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()


def _load_saved_dataset(folder: Path, split: str) -> datasets.Dataset:
    dataset = datasets.load_from_disk(str(folder))
    if isinstance(dataset, datasets.DatasetDict):
        if split not in dataset:
            raise ValueError(f"{folder} has no split {split!r}; it has {sorted(dataset)}.")
        dataset = dataset[split]
    return dataset


def _load_dataset(name: str, config_name: str | None, split: str) -> datasets.Dataset:
    """`datasets.load_dataset` of a Hub id or a local dataset folder."""
    try:
        return datasets.load_dataset(name, config_name, split=split)
    except Exception as error:
        raise RuntimeError(
            f"Could not load the dataset {name!r} (configuration {config_name!r}, split {split!r}): {error}. Without "
            "access to the Hugging Face Hub, pass local files instead (SQuAD .json(.gz), MRQA .jsonl(.gz), or rows "
            "with the SQuAD columns)."
        ) from error


def _first_record(path: Path):
    """The first JSON value of a file: the whole document of a SQuAD file, the first line of a JSON-lines file."""
    try:
        with open_text(path) as handle:
            first_line = next((line for line in handle if line.strip()), "")
        return json.loads(first_line)
    except json.JSONDecodeError:
        return None  # a document over several lines: a SQuAD file (or a broken one, which read_squad_json names)
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error}); re-encode it as UTF-8.") from None


def _load_file(path: Path) -> datasets.Dataset:
    """A local file: SQuAD-format JSON, MRQA JSON lines, or rows (JSON lines or Parquet) with the SQuAD columns."""
    name = path.name.lower()
    if name.endswith(".parquet"):
        return datasets.Dataset.from_parquet(str(path))
    if not name.endswith((".json", ".json.gz", ".jsonl", ".jsonl.gz")):
        raise ValueError(
            f"{path}: unknown file type. Use SQuAD-format .json(.gz), MRQA .jsonl(.gz), or rows with the SQuAD "
            "columns as .json(l)(.gz) lines (Dataset.to_json) or .parquet."
        )
    first = _first_record(path)
    if isinstance(first, dict) and not {"header", "qas", "data"} & set(first):
        return datasets.Dataset.from_json(str(path))  # rows, as Dataset.to_json writes them (one per line)
    if name.endswith((".jsonl", ".jsonl.gz")):
        return read_mrqa_jsonl(path)
    return read_squad_json(path)


MRQA_COLUMNS = ("qid", "question", "context", "detected_answers")


def _as_squad_rows(dataset: datasets.Dataset, source: str, mrqa_subset: str | None) -> datasets.Dataset:
    """The SQuAD columns of `dataset` in `QA_FEATURES` (rows in the MRQA schema converted, `mrqa_subset` kept)."""
    columns = dataset.column_names
    is_mrqa = set(MRQA_COLUMNS) <= set(columns)
    if mrqa_subset is not None:
        if not is_mrqa or "subset" not in columns:
            raise ValueError(
                f"--mrqa_subset {mrqa_subset!r} keeps one subset of MRQA rows (columns 'subset', 'qid', "
                f"'detected_answers'), which {source} does not have (it has {columns})."
            )
        available = sorted(set(dataset["subset"]))
        if mrqa_subset not in available:
            raise ValueError(f"{source} has no MRQA subset {mrqa_subset!r}; it has {available}.")
        dataset = dataset.filter(lambda value: value == mrqa_subset, input_columns="subset")
    if is_mrqa:
        return dataset.map(
            lambda row: mrqa_row(
                row["context"], row["qid"], row["question"], row["detected_answers"], row.get("subset", "")
            ),
            remove_columns=columns,
            features=QA_FEATURES,
        )
    missing = [column for column in QA_COLUMNS if column not in columns]
    if missing:
        raise ValueError(
            f"{source} lacks the SQuAD column(s) {missing} (it has {columns}). Question answering needs 'id', "
            "'title' (may be left out), 'context', 'question' and 'answers' = {'text': [...], 'answer_start': [...]}."
        )
    _check_answers_feature(dataset, source)
    if "title" not in columns:
        dataset = dataset.add_column("title", [""] * len(dataset))
    dataset = dataset.select_columns(list(QA_FEATURES))
    return dataset.cast(QA_FEATURES) if dataset.features != QA_FEATURES else dataset


def _check_answers_feature(dataset: datasets.Dataset, name: str) -> None:
    answers_feature = dataset.features["answers"]
    if isinstance(answers_feature, datasets.List):  # a list of {text, answer_start} records
        answers_feature = answers_feature.feature
    if not isinstance(answers_feature, dict) or not {"text", "answer_start"} <= set(answers_feature):
        raise ValueError(
            f"{name}: 'answers' must be {{'text': [...], 'answer_start': [...]}} (SQuAD format), got {answers_feature}."
        )


def check_qa_dataset(dataset: datasets.Dataset, name: str = "the dataset") -> None:
    """Raises a `ValueError` that says what to fix when there are no rows, rows lack the QA columns, have empty
    contexts or questions, repeat an id (predictions are keyed by id), or when no answer's text occurs in its
    context; logs a warning with counts when only some answers cannot be found."""
    if len(dataset) == 0:
        raise ValueError(f"{name} has no questions.")
    missing = [column for column in QA_COLUMNS if column not in dataset.column_names]
    if missing:
        raise ValueError(
            f"{name} lacks the column(s) {missing} (it has {dataset.column_names}). Question answering needs 'id', "
            "'question', 'context' and 'answers' = {'text': [...], 'answer_start': [...]} (SQuAD format)."
        )
    _check_answers_feature(dataset, name)
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
    answered, lost = 0, []
    for row_id, context, answers in zip(dataset["id"], dataset["context"], dataset["answers"]):
        if answers["text"]:
            answered += 1
            if not any(text and text in context for text in answers["text"]):
                lost.append(row_id)
    _check_answers_found(name, answered, lost)


def _check_answers_found(name: str, answered: int, lost: list[str]) -> None:
    """`lost`: the ids of the `answered` questions none of whose answer texts occurs in their context. All lost is an
    error (nothing to train on: the texts or the file's encoding are wrong); some lost, a warning."""
    how_to_fix = (
        "Each answer's 'text' must be copied from its context, and 'answer_start' must be its character offset there; "
        "text that looks right but does not match usually means the file was written in another encoding than UTF-8."
    )
    if answered and len(lost) == answered:
        raise ValueError(
            f"{name}: none of the {answered} answered question(s) has an answer whose text occurs in its context "
            f"(e.g. ids {lost[:5]}). {how_to_fix}"
        )
    if lost:
        logger.warning(
            f"{name}: {len(lost)} of {answered} answered question(s) have no answer whose text occurs in their context "
            f"(e.g. ids {lost[:5]}); fine-tuning skips them. {how_to_fix}"
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


def realign_answers(dataset: datasets.Dataset, name: str = "the dataset") -> tuple[datasets.Dataset, dict[str, int]]:
    """Fixes answers whose `answer_start` does not point at their text in the context: moved to the nearest
    occurrence of the text, or dropped when the text is not in the context at all; a question that loses all its
    answers is removed. Returns the dataset and the counts (`realigned`, `dropped`, `removed_questions`). Raises a
    `ValueError` when every question that has answers would be removed."""
    marked = dataset.map(_realign_row, desc="Checking answer offsets")
    counts = {
        "realigned": int(sum(marked["_realigned"])),
        "dropped": int(sum(marked["_dropped"])),
        "removed_questions": int(sum(marked["_lost_all"])),
    }
    answered = sum(1 for answers in dataset["answers"] if answers["text"])
    if answered and counts["removed_questions"] == answered:
        _check_answers_found(name, answered, marked.filter(lambda lost: lost, input_columns="_lost_all")["id"])
    if counts["removed_questions"]:
        marked = marked.filter(lambda lost: not lost, input_columns="_lost_all")
    return marked.remove_columns(["_realigned", "_dropped", "_lost_all"]), counts


def split_squad_articles(source: str | os.PathLike, output_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Writes the first and the second half of the articles of a SQuAD-format file (article order, unchanged records)
    as two SQuAD files, `<name>.first-half.json` and `<name>.second-half.json`: disjoint articles, e.g. to fine-tune
    on one half of SQuAD dev and evaluate on the other when no train split is at hand."""
    data = _read_json(source)
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
