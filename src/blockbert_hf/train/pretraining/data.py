"""Packed sequences and their masks.

- **Packing** like RoBERTa's DOC-SENTENCES (`pack_documents`): each sequence takes the next `N - 2` tokens of the
  current document between `<s>` and `</s>` (the tokenizer's own special tokens); a sequence ends early only where its
  document ends, so no sequence ever mixes two documents. (Unlike fairseq's `complete_doc`, a sentence may be cut at a
  sequence edge: every sequence but a document's last is full, so a batch holds about `B x N` real tokens.)
- **Masking** with `DataCollatorForLanguageModeling` (15 percent, 80/10/10), seeded per sequence (`MaskingCollator`):
  the mask of a sequence depends only on (seed, epoch, sequence id), not on the process count, the batch it lands in
  or a resume, so a 2-process run and a resumed run see the very same masks as a 1-process uninterrupted run.
  Validation masks use `VALIDATION_SEED` instead of the run's seed, so runs with other seeds score the same tokens.
"""

import hashlib
from collections.abc import Sequence

import torch
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase


# Which documents are held out (--validation_split_percentage) and which validation tokens are masked do not depend
# on --seed: runs that differ only in their seed are scored on the very same masked tokens.
VALIDATION_SEED = 0


def special_token_template(tokenizer: PreTrainedTokenizerBase) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after one sequence (`<s>` / `</s>`, `[CLS]` / `[SEP]`)."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return full[:start], full[start + len(plain) :]
    raise ValueError(f"Cannot tell {type(tokenizer).__name__}'s special tokens apart from the text.")


def pack_documents(
    token_ids: Sequence[Sequence[int]], seq_len: int, tokenizer: PreTrainedTokenizerBase, first_document: int = 0
) -> dict[str, list]:
    """DOC-SENTENCES packing: cuts each document's tokens into pieces of `seq_len - 2` (plus the special tokens);
    returns `input_ids` and the `document` each sequence comes from (documents are never mixed)."""
    prefix, suffix = special_token_template(tokenizer)
    content = seq_len - len(prefix) - len(suffix)
    if content < 1:
        raise ValueError(f"max_seq_length={seq_len} leaves no room for text next to the special tokens.")
    sequences, documents = [], []
    for offset, ids in enumerate(token_ids):
        for start in range(0, len(ids), content):
            sequences.append(prefix + list(ids[start : start + content]) + suffix)
            documents.append(first_document + offset)
    return {"input_ids": sequences, "document": documents}


def tokenize_and_pack(documents: Sequence[str], tokenizer: PreTrainedTokenizerBase, seq_len: int):
    """A `datasets.Dataset` of packed sequences with columns `input_ids`, `document`, `sequence_id`."""
    import datasets

    def tokenize(batch):
        encoded = tokenizer(batch["text"], add_special_tokens=False, return_attention_mask=False, verbose=False)
        return {"ids": encoded["input_ids"]}

    docs = datasets.Dataset.from_dict({"text": list(documents)})
    tokenized = docs.map(tokenize, batched=True, batch_size=64, remove_columns=["text"], desc="tokenizing")
    packed = tokenized.map(
        lambda batch, indices: pack_documents(batch["ids"], seq_len, tokenizer, first_document=indices[0]),
        batched=True,
        with_indices=True,
        remove_columns=["ids"],
        desc="packing",
    )
    return packed.map(lambda batch, indices: {"sequence_id": indices}, batched=True, with_indices=True)


def masking_seed(seed: int, epoch: int | str, sequence_id: int) -> int:
    """A 63-bit seed that depends only on (seed, epoch, sequence id)."""
    digest = hashlib.blake2b(f"{seed}/{epoch}/{sequence_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class MaskingCollator:
    """Pads packed sequences and masks them with `DataCollatorForLanguageModeling` (15 percent, 80/10/10), each
    sequence with its own generator seeded by `masking_seed(seed, epoch, sequence_id)` (see the module docstring)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, seed: int, epoch: int | str, mlm_probability: float = 0.15):
        self.mlm = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability)
        self.pad_token_id = tokenizer.pad_token_id
        self.seed, self.epoch = seed, epoch

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        input_ids, labels = [], []
        for example in examples:
            self.mlm.generator = torch.Generator().manual_seed(
                masking_seed(self.seed, self.epoch, example["sequence_id"])
            )
            masked = self.mlm([{"input_ids": example["input_ids"]}])  # one unpadded sequence: masks independent of B
            input_ids.append(masked["input_ids"][0])
            labels.append(masked["labels"][0])
        lengths = torch.tensor([len(ids) for ids in input_ids])
        return {
            "input_ids": torch.nn.utils.rnn.pad_sequence(input_ids, batch_first=True, padding_value=self.pad_token_id),
            "attention_mask": (torch.arange(int(lengths.max()))[None, :] < lengths[:, None]).long(),
            "labels": torch.nn.utils.rnn.pad_sequence(labels, batch_first=True, padding_value=-100),
        }


def validation_collator(tokenizer: PreTrainedTokenizerBase, mlm_probability: float = 0.15) -> MaskingCollator:
    """The collator of validation sequences: fixed masks, the same for every run."""
    return MaskingCollator(tokenizer, VALIDATION_SEED, "eval", mlm_probability)
