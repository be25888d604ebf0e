"""Tokenizer helpers: a RoBERTa-style byte-level BPE tokenizer trained on a corpus, `model_max_length = N`, and what
`AutoTokenizer` loads for a BlockBERT folder whose tokenizer files name no class (`BlockBertTokenizer`)."""

import os
import tempfile
from collections.abc import Iterable

from tokenizers import ByteLevelBPETokenizer
from transformers import PreTrainedTokenizerBase, RobertaTokenizer

from .model.configuration_blockbert import BlockBertConfig
from .saving import open_text


ROBERTA_SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0..4: bos, pad, eos, unk, mask
SAVE_TOKENIZER_HINT = (
    "Save the model's tokenizer beside it: tokenizer = blockbert_hf.tokenization.match_tokenizer_to_config("
    "tokenizer, model.config); tokenizer.save_pretrained(folder)."
)


def special_tokens_only(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """What is wrong with `tokenizer` if it knows only its special tokens, else None.

    transformers builds such a stand-in, without an error, when a tokenizer class is loaded from a folder without its
    files (RoBERTa's has 5 tokens; BERT's turns "hello world" into `[CLS] [UNK] [UNK] [SEP]`)."""
    if set(tokenizer.get_vocab()) - set(tokenizer.all_special_tokens):
        return None
    return (
        f"the {type(tokenizer).__name__} loaded from it knows only its {len(tokenizer)} special tokens "
        f"({', '.join(tokenizer.all_special_tokens)}), the stand-in transformers builds when a folder has no "
        "tokenizer files"
    )


# Complete sets of tokenizer files, any one of which a tokenizer loads from; RoBERTa's byte-level BPE is the first two.
TOKENIZER_FILES = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("vocab.txt",), ("spiece.model",))
ROBERTA_TOKENIZER_FILES = TOKENIZER_FILES[:2]


def missing_tokenizer_files(folder: str | os.PathLike, file_sets=TOKENIZER_FILES) -> list[str] | None:
    """None when `folder` holds one of `file_sets` whole; else the files missing from the sets it holds in part
    (empty when it holds no tokenizer file at all)."""
    present = [[os.path.isfile(os.path.join(folder, name)) for name in names] for names in file_sets]
    if any(all(flags) for flags in present):
        return None
    return [
        name for names, flags in zip(file_sets, present) if any(flags) for name, here in zip(names, flags) if not here
    ]


class BlockBertTokenizer(RobertaTokenizer):
    """What `AutoTokenizer.from_pretrained` loads for a BlockBERT folder whose tokenizer files name no class (no
    `tokenizer_config.json`, or one without `tokenizer_class`): RoBERTa's byte-level BPE tokenizer, read from
    `tokenizer.json` or from `vocab.json` + `merges.txt`.

    `from_pretrained` returns a plain `RobertaTokenizer`, so what it saves names a transformers class and loads
    without this package. A folder without those files raises an `OSError` naming them, where `RobertaTokenizer` alone
    would build a stand-in that knows only the 5 special tokens. Folders whose `tokenizer_config.json` names a class
    (every tokenizer saved by transformers) load that class and never come here.
    """

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs) -> RobertaTokenizer:
        name = str(pretrained_model_name_or_path)
        if os.path.isdir(name):
            missing = missing_tokenizer_files(name, ROBERTA_TOKENIZER_FILES)
            if missing is not None:
                half = ""
                if missing:
                    other = "merges.txt" if missing[0] == "vocab.json" else "vocab.json"
                    half = f" (it has {other} but no {missing[0]})"
                raise OSError(
                    f"{name} has no tokenizer files{half}: a BlockBERT tokenizer needs tokenizer.json, or vocab.json "
                    "and merges.txt (RoBERTa's byte-level BPE vocabulary), or a tokenizer_config.json naming its "
                    f"tokenizer class. {SAVE_TOKENIZER_HINT}"
                )
        tokenizer = RobertaTokenizer.from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        problem = special_tokens_only(tokenizer)
        if problem:
            raise OSError(f"{name} has no tokenizer vocabulary: {problem}. {SAVE_TOKENIZER_HINT}")
        return tokenizer


def train_roberta_tokenizer(texts: Iterable[str], vocab_size: int, model_max_length: int) -> RobertaTokenizer:
    """Trains a byte-level BPE vocabulary on `texts` and wraps it as a `RobertaTokenizer` (pad id 1, like RoBERTa)."""
    if vocab_size <= len(ROBERTA_SPECIAL_TOKENS) + 256:
        raise ValueError(f"vocab_size={vocab_size} is too small for byte-level BPE: use at least 512.")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        texts, vocab_size=vocab_size, min_frequency=2, special_tokens=ROBERTA_SPECIAL_TOKENS, show_progress=False
    )
    with tempfile.TemporaryDirectory() as folder:
        vocab_file, merges_file = bpe.save_model(folder)
        # transformers 5 takes vocab=/merges= (the old vocab_file= is silently ignored).
        return RobertaTokenizer(vocab=vocab_file, merges=merges_file, model_max_length=model_max_length)


def match_tokenizer_to_config(tokenizer: PreTrainedTokenizerBase, config: BlockBertConfig) -> PreTrainedTokenizerBase:
    """Records the model's sequence length N in the tokenizer (a saved tokenizer has model_max_length = N) and
    checks that its special ids agree with the config."""
    if tokenizer.pad_token_id is not None and config.pad_token_id is not None:
        if tokenizer.pad_token_id != config.pad_token_id:
            raise ValueError(
                f"The tokenizer's pad id ({tokenizer.pad_token_id}) differs from config.pad_token_id "
                f"({config.pad_token_id}); positions and padding would disagree. Build the config with "
                f"pad_token_id={tokenizer.pad_token_id}."
            )
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"The tokenizer has {len(tokenizer)} tokens but config.vocab_size is {config.vocab_size}: build the config "
            f"with vocab_size >= {len(tokenizer)} or call model.resize_token_embeddings(len(tokenizer))."
        )
    tokenizer.model_max_length = config.max_sequence_length
    return tokenizer


def read_text_lines(path: str) -> list[str]:
    """Non-empty lines of a `.txt` or `.txt.gz` file."""
    with open_text(path) as handle:
        return [line.strip() for line in handle if line.strip()]
