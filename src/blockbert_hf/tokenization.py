"""Tokenizer helpers: a RoBERTa-style byte-level BPE tokenizer trained on a corpus, and `model_max_length = N`."""

import tempfile
from collections.abc import Iterable

from tokenizers import ByteLevelBPETokenizer
from transformers import PreTrainedTokenizerBase, RobertaTokenizer

from .configuration_blockbert import BlockBertConfig
from .saving import open_text


ROBERTA_SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0..4: bos, pad, eos, unk, mask


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
