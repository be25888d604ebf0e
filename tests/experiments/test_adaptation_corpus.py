"""The adaptation corpus (`experiments/adaptation_corpus.py`): which text goes into training and which is held out
(never a SQuAD dev or test-half context), WikiText's escapes and Project Gutenberg's boilerplate, and a manifest whose
counts are those of the documents `run_mlm.py` reads back."""

import gzip
import json

import pytest
from conftest import load_script

from blockbert_hf.train.pretraining import read_documents


corpus = load_script("experiments/adaptation_corpus.py")


WIKI_VALID = " \n = Valid Article = \n \n The valid @-@ text , 1 @,@ 000 <unk> words . \n \n = Second = \n \n More .\n"
WIKI_TEST = " \n = Test Article = \n \n Held out heldoutword text .\n"
NOVEL = "Title page\n\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\nChapter 1\n\nIt was a dark\nnight.\n"
NOVEL += "*** END OF THE PROJECT GUTENBERG EBOOK X ***\nLicence licenceword text.\n"


def _article(title: str, word: str) -> dict:
    context = f"The {word} paragraph of {title}."
    qa = {"id": f"{title}-q", "question": f"Which {word}?", "answers": [{"text": word, "answer_start": 4}]}
    return {
        "title": title,
        "paragraphs": [{"context": context, "qas": [qa]}, {"context": f"A {word} again.", "qas": []}],
    }


def _write_gz(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(text)


@pytest.fixture
def data_dir(tmp_path):
    """A data folder laid out as the real one: 4 SQuAD articles (first half: a training and a dev article)."""
    data = tmp_path / "data"
    _write_gz(data / "corpus" / "wikitext-2" / "wiki.valid.tokens.gz", WIKI_VALID)
    _write_gz(data / "corpus" / "wikitext-2" / "wiki.test.tokens.gz", WIKI_TEST)
    _write_gz(data / "corpus" / "gutenberg" / "pg1.txt.gz", NOVEL)
    _write_gz(data / "corpus" / "gutenberg" / "pg2.txt.gz", "Another\nbook.\n")
    articles = [_article("Train_A", "trainword"), _article("Dev_B", "devword")]
    articles += [_article("Test_C", "testword"), _article("Test_D", "testword")]
    _write_gz(data / "squad" / "dev-v1.1.json.gz", json.dumps({"version": "1.1", "data": articles}))
    return data


@pytest.fixture
def tokenizer_dir(tmp_path, tokenizer):
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    return tmp_path / "tokenizer"


def test_training_text_leaves_out_the_dev_and_test_contexts(data_dir, tokenizer_dir, tmp_path, tokenizer):
    output = tmp_path / "corpus"
    args = corpus.CorpusArguments(str(data_dir), str(output), tokenizer=str(tokenizer_dir), dev_titles=["Dev_B"])
    manifest = corpus.build_corpus(args)
    train = [output / entry["file"] for entry in manifest["train"]]
    held_out = [output / entry["file"] for entry in manifest["held_out"]]
    assert [path.relative_to(output).as_posix() for path in train] == list(corpus.TRAIN_FILES)
    assert [path.relative_to(output).as_posix() for path in held_out] == [corpus.HELD_OUT_FILE]

    documents = {path.name: read_documents([str(path)], "file") for path in train + held_out}
    training_text = "\n".join(text for path in train for text in documents[path.name])
    assert "trainword" in training_text and "devword" not in training_text and "testword" not in training_text
    assert documents["squad_first_half.jsonl.gz"] == ["The trainword paragraph of Train_A.\nA trainword again."]
    assert documents["wikitext2_valid.jsonl.gz"] == [
        f"= Valid Article =\nThe valid-text , 1,000 {tokenizer.unk_token} words .",
        "= Second =\nMore .",
    ]
    assert documents["gutenberg.jsonl.gz"] == ["Chapter 1\nIt was a dark night.", "Another book."]
    assert "heldoutword" not in training_text and "heldoutword" in documents["wikitext2_test.jsonl.gz"][0]
    assert manifest["squad"]["left_out_dev_articles"] == ["Dev_B"]
    assert manifest["squad"]["left_out_second_half_articles"] == 2
    assert manifest["wikitext_unknown_words"] == {"valid": 1, "test": 0, "written_as": tokenizer.unk_token}

    # The manifest counts the documents run_mlm.py reads back, in tokens and in sequences of N tokens (N - 2 of text).
    for entry in manifest["train"] + manifest["held_out"]:
        read_back = documents[entry["file"].split("/")[-1]]
        counts = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in read_back]
        assert (entry["documents"], entry["tokens"]) == (len(read_back), sum(counts))
        assert entry["sequences"]["512"] == sum(-(-count // 510) for count in counts)
    assert manifest["totals"]["train"]["tokens"] == sum(entry["tokens"] for entry in manifest["train"])
    assert json.loads((output / corpus.MANIFEST_FILE).read_text()) == manifest
    assert manifest["command"].startswith("python experiments/adaptation_corpus.py --data_dir $DATA_DIR --output_dir")
    assert str(tmp_path) not in (output / corpus.MANIFEST_FILE).read_text()  # no machine path in what may be committed


def test_the_same_sources_give_the_same_bytes_and_an_existing_folder_is_kept(data_dir, tokenizer_dir, tmp_path):
    first = corpus.CorpusArguments(
        str(data_dir), str(tmp_path / "a"), tokenizer=str(tokenizer_dir), dev_titles=["Dev_B"]
    )
    corpus.build_corpus(first)
    corpus.build_corpus(corpus.CorpusArguments(**{**vars(first), "output_dir": str(tmp_path / "b")}))
    for relative in (*corpus.TRAIN_FILES, corpus.HELD_OUT_FILE):
        assert (tmp_path / "a" / relative).read_bytes() == (tmp_path / "b" / relative).read_bytes()
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        corpus.build_corpus(first)
    corpus.build_corpus(corpus.CorpusArguments(**{**vars(first), "overwrite": True}))


def test_the_script_names_what_is_missing_and_exits_2(data_dir, tokenizer_dir, tmp_path, capsys):
    (data_dir / "squad" / "dev-v1.1.json.gz").unlink()
    argv = ["--data_dir", str(data_dir), "--output_dir", str(tmp_path / "out"), "--tokenizer", str(tokenizer_dir)]
    assert corpus.main(argv) == 2
    error = capsys.readouterr().err
    assert "lacks" in error and "dev-v1.1.json.gz" in error
    assert not (tmp_path / "out").exists()


def test_wikitext_unknown_words_become_the_tokenizers_unknown_token(data_dir):
    documents, unknown = corpus.wikitext_documents(data_dir / "corpus" / "wikitext-2" / "wiki.valid.tokens.gz", "[UNK]")
    assert unknown == 1 and documents[0].endswith("1,000 [UNK] words .") and "<unk>" not in documents[0]


def test_gutenberg_boilerplate_is_cut_only_where_marked():
    assert corpus.without_gutenberg_boilerplate(NOVEL) == "Chapter 1\n\nIt was a dark\nnight.\n"
    assert corpus.without_gutenberg_boilerplate("Plain text.\n") == "Plain text.\n"
