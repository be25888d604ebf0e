"""The adaptation corpus (docs/pretraining.md): WikiText-2 valid, the Project Gutenberg novels and the contexts of the
QA comparison's training articles (never its dev or test articles) for training, WikiText-2 test held out; written as
`.jsonl.gz` files that `examples/run_mlm.py` reads with `--document_boundary file`, with a `manifest.json` of their
documents, tokens and packed sequences.

    python experiments/adaptation_corpus.py --data_dir DATA --output_dir outputs/adaptation_corpus
"""

import gzip
import json
import re
import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoTokenizer, HfArgumentParser, PreTrainedTokenizerBase

from blockbert_benchmarks.measuring.machine import recorded_path
from blockbert_experiments import option
from blockbert_experiments.long_context import (
    DEFAULT_DEV_TITLES,
    hold_out_dev_articles,
    read_article_halves,
    token_counts,
)
from blockbert_experiments.minilm import installed_minilm
from blockbert_hf.saving import atomic_directory, sha256_of_file, write_json_atomically
from blockbert_hf.train.pretraining import read_documents, split_documents
from blockbert_hf.train.pretraining.data import special_token_template
from blockbert_hf.train.runs import HelpFormatter


# Where the sources lie inside the data folder.
DATA_FILES = {
    "wikitext2_valid": "corpus/wikitext-2/wiki.valid.tokens.gz",
    "wikitext2_test": "corpus/wikitext-2/wiki.test.tokens.gz",
    "gutenberg": "corpus/gutenberg",  # every *.txt.gz in it
    "squad": "squad/dev-v1.1.json.gz",
}
TRAIN_FILES = ("train/wikitext2_valid.jsonl.gz", "train/gutenberg.jsonl.gz", "train/squad_first_half.jsonl.gz")
HELD_OUT_FILE = "held_out/wikitext2_test.jsonl.gz"
MANIFEST_FILE = "manifest.json"
DOCUMENT_BOUNDARY = "file"  # how run_mlm.py reads the files: each record is one document
SEQUENCE_LENGTHS = (512, 1024)
WIKITEXT_ESCAPES = {" @-@ ": "-", " @,@ ": ",", " @.@ ": "."}
GUTENBERG_START = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE | re.MULTILINE)
GUTENBERG_END = re.compile(r"^\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE | re.MULTILINE)


@dataclass
class CorpusArguments:
    data_dir: str = field(
        metadata={
            "help": "folder holding corpus/wikitext-2/wiki.{valid,test}.tokens.gz, corpus/gutenberg/*.txt.gz and "
            "squad/dev-v1.1.json.gz"
        }
    )
    output_dir: str = option("outputs/adaptation_corpus", "train/, held_out/, manifest")
    tokenizer: str | None = option(None, "tokenizer folder the manifest counts in (default: the installed MiniLM's)")
    dev_titles: list[str] = option(
        list(DEFAULT_DEV_TITLES),
        "first-half SQuAD articles left out (the QA comparison's dev articles; add the demo's held-out article, "
        "Sky_(United_Kingdom), to keep it unseen)",
    )
    overwrite: bool = option(False, "replace an existing output_dir")


def source_paths(data_dir: str | Path) -> dict[str, list[Path]]:
    """The source files in `data_dir`; a `FileNotFoundError` names every one that is missing."""
    data_dir = Path(data_dir)
    paths = {name: [data_dir / relative] for name, relative in DATA_FILES.items() if name != "gutenberg"}
    paths["gutenberg"] = sorted((data_dir / DATA_FILES["gutenberg"]).glob("*.txt.gz"))
    missing = [str(path) for files in paths.values() for path in files if not path.is_file()]
    if not paths["gutenberg"]:
        missing.append(f"{data_dir / DATA_FILES['gutenberg']}/*.txt.gz")
    if missing:
        raise FileNotFoundError(
            f"The data folder {data_dir} lacks {', '.join(missing)}: pass the folder laid out as "
            f"{', '.join(DATA_FILES.values())}."
        )
    return paths


def wikitext_documents(path: str | Path, unknown_token: str) -> tuple[list[str], int]:
    """The articles of a tokenized WikiText file, with its escapes undone and `<unk>` as `unknown_token`; and how many
    `<unk>` there were."""
    documents, unknown = [], 0
    for document in read_documents([str(path)], "heading"):
        for escape, character in WIKITEXT_ESCAPES.items():
            document = document.replace(escape, character)
        unknown += document.count("<unk>")
        documents.append(document.replace("<unk>", unknown_token))
    return documents, unknown


def without_gutenberg_boilerplate(text: str) -> str:
    """The body of a Project Gutenberg text: what lies between its START and END markers, where it has them."""
    start, end = GUTENBERG_START.search(text), GUTENBERG_END.search(text)
    if start:
        text = text[text.index("\n", start.end()) + 1 :] if "\n" in text[start.end() :] else ""
        end = GUTENBERG_END.search(text)
    return text[: end.start()] if end else text


def novel_document(path: str | Path) -> str:
    """A novel as one document: hard-wrapped lines joined into paragraphs, as `run_mlm.py` reads a text file."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        body = without_gutenberg_boilerplate(handle.read())
    return next(split_documents(body.splitlines(), "file"), "")


def write_jsonl_gz(path: Path, documents: Iterable[str]) -> None:
    """One `{"text": ...}` record per document, its paragraphs separated by blank lines (as `split_documents` reads
    them back); gzip without a timestamp, so the same text gives the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as zipped:
        for document in documents:
            record = {"text": document.replace("\n", "\n\n")}
            zipped.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))


def file_entry(relative: str, source: str, documents: Sequence[str], tokenizer: PreTrainedTokenizerBase) -> dict:
    """A manifest entry: documents, tokens and the packed sequences at each N of `SEQUENCE_LENGTHS`."""
    counts = token_counts(documents, tokenizer)
    prefix, suffix = special_token_template(tokenizer)
    specials = len(prefix) + len(suffix)
    sequences = {str(n): sum(-(-count // (n - specials)) for count in counts) for n in SEQUENCE_LENGTHS}
    return {
        "file": relative,
        "source": source,
        "documents": len(documents),
        "tokens": sum(counts),
        "sequences": sequences,
    }


def _totals(entries: Sequence[dict]) -> dict:
    return {
        "documents": sum(entry["documents"] for entry in entries),
        "tokens": sum(entry["tokens"] for entry in entries),
        "sequences": {str(n): sum(entry["sequences"][str(n)] for entry in entries) for n in SEQUENCE_LENGTHS},
    }


def build_corpus(args: CorpusArguments) -> dict:
    """Writes the corpus into `args.output_dir` (atomically: all of it or nothing) and returns its manifest."""
    output_dir = Path(args.output_dir)
    if output_dir.exists() and any(output_dir.iterdir()) and not args.overwrite:
        raise FileExistsError(f"{output_dir} is not empty: pass --overwrite to replace it, or another --output_dir.")
    paths = source_paths(args.data_dir)
    tokenizer_path = args.tokenizer or str(installed_minilm())
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    unknown_token = tokenizer.unk_token
    wiki_valid, unknown_valid = wikitext_documents(paths["wikitext2_valid"][0], unknown_token)
    wiki_test, unknown_test = wikitext_documents(paths["wikitext2_test"][0], unknown_token)
    novels = [novel_document(path) for path in paths["gutenberg"]]
    first, second = read_article_halves(paths["squad"][0])
    squad, dev = hold_out_dev_articles(first, args.dev_titles)  # SQuAD: the first half's training articles only
    squad_contexts = ["\n".join(article.paragraphs) for article in squad]  # one document per article
    train = [
        (TRAIN_FILES[0], paths["wikitext2_valid"][0].name, wiki_valid),
        (TRAIN_FILES[1], ", ".join(path.name for path in paths["gutenberg"]), novels),
        (TRAIN_FILES[2], f"{paths['squad'][0].name}, first half without the dev articles", squad_contexts),
    ]
    held_out = [(HELD_OUT_FILE, paths["wikitext2_test"][0].name, wiki_test)]
    manifest = {
        "command": corpus_command(args),
        "document_boundary": DOCUMENT_BOUNDARY,
        "tokenizer": recorded_path(tokenizer_path),
        "train": [file_entry(*entry, tokenizer) for entry in train],
        "held_out": [file_entry(*entry, tokenizer) for entry in held_out],
        "wikitext_unknown_words": {"valid": unknown_valid, "test": unknown_test, "written_as": unknown_token},
        "squad": {
            "dev_titles": list(args.dev_titles),
            "first_half_articles": [article.title for article in squad],
            "left_out_dev_articles": [article.title for article in dev],
            "left_out_second_half_articles": len(second),
        },
        "source_sha256": {path.name: sha256_of_file(path) for files in paths.values() for path in files},
    }
    manifest["totals"] = {"train": _totals(manifest["train"]), "held_out": _totals(manifest["held_out"])}
    with atomic_directory(output_dir) as staging:
        for relative, _, documents in train + held_out:
            write_jsonl_gz(staging / relative, documents)
        write_json_atomically(staging / MANIFEST_FILE, manifest)
    return manifest


def corpus_command(args: CorpusArguments) -> str:
    """The command that writes this corpus, with the data folder as `$DATA_DIR`."""
    words = ["python", "experiments/adaptation_corpus.py", "--data_dir", "$DATA_DIR"]
    words += ["--output_dir", recorded_path(args.output_dir)]
    if args.tokenizer:
        words += ["--tokenizer", recorded_path(args.tokenizer)]
    if list(args.dev_titles) != list(DEFAULT_DEV_TITLES):
        words += ["--dev_titles", *args.dev_titles]
    return shlex.join(words).replace("'$DATA_DIR'", "$DATA_DIR")


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(CorpusArguments, description=__doc__, formatter_class=HelpFormatter)


def main(argv=None) -> int:
    (args,) = build_parser().parse_args_into_dataclasses(args=argv)
    try:
        manifest = build_corpus(args)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(manifest["totals"]))
    print(f"written: {args.output_dir}/ ({MANIFEST_FILE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
