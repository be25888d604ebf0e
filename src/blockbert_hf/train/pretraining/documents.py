"""Documents for pre-training: local `.txt` / `.txt.gz` / `.jsonl` files or a hub dataset become a list of documents.

How a document ends is the `document_boundary`:
- `"file"`: a whole `.txt` file is one document (a book); each `.jsonl` record / hub row is one document;
- `"blank_line"`: blank lines separate documents;
- `"heading"`: a line matching `document_heading_regex` starts a new document (default: WikiText's article titles
  ` = Title = `); every file also starts a new one. `.jsonl` records and hub rows are then read as lines.
Inside a document, consecutive non-blank lines are joined with spaces into paragraphs (undoing hard line wraps) and
paragraphs are joined with newlines.
"""

import functools
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence

import torch

from ...saving import open_text
from .arguments import WIKITEXT_HEADING, PretrainingArguments
from .data import VALIDATION_SEED


DOCUMENT_BOUNDARIES = ("file", "blank_line", "heading")
TEXT_SUFFIXES = (".txt", ".txt.gz", ".raw", ".raw.gz", ".tokens", ".tokens.gz")


def check_document_boundary(boundary: str) -> None:
    if boundary not in DOCUMENT_BOUNDARIES:
        raise ValueError(f"document_boundary={boundary!r} is unknown: use one of {DOCUMENT_BOUNDARIES}.")


def split_documents(lines: Iterable[str], boundary: str, heading_regex: str = WIKITEXT_HEADING) -> Iterator[str]:
    """Documents of one stream of lines (a file): paragraphs (non-blank lines joined by spaces) joined by newlines."""
    check_document_boundary(boundary)
    heading = re.compile(heading_regex) if boundary == "heading" else None
    paragraphs: list[str] = []
    current: list[str] = []

    def finish_paragraph():
        if current:
            paragraphs.append(" ".join(current))
            current.clear()

    def finish_document():
        finish_paragraph()
        text = "\n".join(paragraphs)
        paragraphs.clear()
        return text

    for raw in lines:
        for line in raw.splitlines() or [""]:  # a file line ends in "\n"; a record may hold several lines
            line = line.strip()
            if not line:
                finish_paragraph()
                if boundary == "blank_line" and paragraphs:
                    yield finish_document()
                continue
            if heading is not None and heading.match(line) and (paragraphs or current):
                yield finish_document()
            current.append(line)
    document = finish_document()
    if document:
        yield document


def _jsonl_texts(path: str, text_column: str) -> list[str]:
    texts = []
    with open_text(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number} is not a JSON record ({error}).") from error
            if not isinstance(record, dict) or text_column not in record:
                found = sorted(record) if isinstance(record, dict) else type(record).__name__
                raise ValueError(f"{path}:{number} has no field {text_column!r} (--text_column); it has {found}.")
            texts.append(record[text_column])
    return texts


def _documents_of_texts(texts: Sequence[str], boundary: str, heading_regex: str) -> list[str]:
    """Documents of records / hub rows: each text is one (`"file"`), or the texts are read as lines."""
    if boundary == "file":
        return [document for text in texts for document in split_documents([text], "file")]
    return list(split_documents(texts, boundary, heading_regex))


def read_documents(
    paths: Sequence[str], boundary: str = "file", heading_regex: str = WIKITEXT_HEADING, text_column: str = "text"
) -> list[str]:
    """Documents of local `.txt`, `.txt.gz` and `.jsonl` files (see the module docstring for `boundary`)."""
    check_document_boundary(boundary)
    documents = []
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Data file {path!r} does not exist.")
        if str(path).endswith((".jsonl", ".jsonl.gz")):
            documents.extend(_documents_of_texts(_jsonl_texts(path, text_column), boundary, heading_regex))
        elif str(path).endswith(TEXT_SUFFIXES):
            with open_text(path) as handle:
                documents.extend(split_documents(handle, boundary, heading_regex))
        else:
            raise ValueError(f"{path!r}: unsupported file type; use .txt, .txt.gz or .jsonl.")
    return documents


def load_hub_documents(
    name: str, config_name: str | None, split: str, text_column: str, boundary: str, heading_regex: str
) -> list[str]:
    """Documents of a hub dataset split: each row is a document (`"file"`), or rows are lines (otherwise)."""
    import datasets

    try:
        rows = datasets.load_dataset(name, config_name, split=split)
    except Exception as error:  # noqa: BLE001 - datasets raises many kinds; all mean "could not load"
        raise ValueError(
            f"Could not load the hub dataset {name!r} ({config_name}, split {split!r}): {error}. Without "
            "network access, pass local files with --train_files / --validation_files."
        ) from error
    return _documents_of_texts(rows[text_column], boundary, heading_regex)


def _hold_out(train: list[str], percentage: float) -> tuple[list[str], list[str]]:
    """Splits off `percentage` of the documents for validation, chosen with `VALIDATION_SEED` (not the run's seed)."""
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(VALIDATION_SEED)).tolist()
    held_out = max(1, int(len(train) * percentage / 100))
    if held_out >= len(train):
        raise ValueError(
            f"validation_split_percentage={percentage} leaves no training documents ({len(train)} in all)."
        )
    return [train[i] for i in sorted(order[held_out:])], [train[i] for i in sorted(order[:held_out])]


def load_training_data(args: PretrainingArguments) -> tuple[list[str], list[str] | None]:
    """(training documents, validation documents or None)."""
    if bool(args.train_files) == bool(args.dataset_name):
        raise ValueError(
            "Pass either --train_files (local .txt/.txt.gz/.jsonl) or --dataset_name (hub), not both or neither."
        )
    validation = None
    if args.train_files:
        read = functools.partial(
            read_documents,
            boundary=args.document_boundary,
            heading_regex=args.document_heading_regex,
            text_column=args.text_column,
        )
        train = read(args.train_files)
        validation = read(args.validation_files) if args.validation_files else None
    else:
        load = functools.partial(
            load_hub_documents,
            args.dataset_name,
            args.dataset_config_name,
            text_column=args.text_column,
            boundary=args.document_boundary,
            heading_regex=args.document_heading_regex,
        )
        train = load(split="train")
        if not args.validation_split_percentage:
            try:
                validation = load(split="validation")
            except ValueError:
                validation = None
    if not train:
        raise ValueError("The training files hold no text.")
    if validation is None and args.validation_split_percentage:
        train, validation = _hold_out(train, args.validation_split_percentage)
    return train, validation
