"""Does a blockwise masked LM read the block before? Its MLM loss on the masked tokens of block 1 with the true block 0
against another held-out sequence's block 0 (docs/pretraining.md); a difference about 0 says the heads that read
block 0 do not use it. Uses the model's own N and b (a full-attention model is split at N / 2, or --block_size).

    python experiments/block_diagnostic.py --model_path outputs/adaptation/runs/n512_n2_10-2/final_model \\
        --validation_files outputs/adaptation_corpus/held_out/wikitext2_test.jsonl.gz --max_sequences 256 \\
        --output_file outputs/adaptation/diagnostic_n512_n2_10-2.json
"""

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer, HfArgumentParser

from blockbert_experiments import option
from blockbert_hf.saving import write_json_atomically
from blockbert_hf.train.pretraining import VALIDATION_SEED, MaskingCollator, read_documents, tokenize_and_pack
from blockbert_hf.train.runs import HelpFormatter


def full_sequences(paths: Sequence[str], tokenizer, seq_len: int, boundary: str = "file", limit: int | None = None):
    """The packed held-out sequences of exactly `seq_len` tokens (a document's shorter last one is left out); with
    `limit`, that many spread evenly over them, so that they come from many documents."""
    packed = tokenize_and_pack(read_documents(list(paths), boundary), tokenizer, seq_len)
    full = packed.filter(lambda ids: len(ids) == seq_len, input_columns="input_ids")
    if limit and limit < len(full):
        full = full.select([index * len(full) // limit for index in range(limit)])
    return full


def partners(documents: Sequence[int]) -> list[int]:
    """For each sequence, the one whose block 0 replaces its own: the first from another document at or after half
    the set away (in a circle), or the one half the set away where all come from one document."""
    count, half = len(documents), len(documents) // 2
    chosen = []
    for index, document in enumerate(documents):
        candidates = [(index + half + step) % count for step in range(count)]
        chosen.append(next((other for other in candidates if documents[other] != document), candidates[0]))
    return chosen


@torch.no_grad()
def _loss_sums(model, input_ids, labels, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sequence: the summed cross-entropy over its labelled tokens, and how many there are."""
    sums, counts = [], []
    for begin in range(0, len(input_ids), batch_size):
        ids, target = input_ids[begin : begin + batch_size], labels[begin : begin + batch_size]
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float()
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, ignore_index=-100, reduction="none")
        sums.append(losses.sum(dim=1).double())
        counts.append((target != -100).sum(dim=1).double())
    return torch.cat(sums), torch.cat(counts)


def block_context_diagnostic(model, tokenizer, sequences, block_size: int | None = None, batch_size: int = 8) -> dict:
    """The MLM loss of block 1's masked tokens with the true block 0 and with another sequence's, their difference and
    its standard error over sequences (a ratio estimate). `sequences`: rows as `full_sequences` gives them; `b`:
    `block_size`, else the model's own where it is blockwise, else N / 2."""
    if len(sequences) < 2:
        raise ValueError(f"The diagnostic needs at least 2 full held-out sequences (it has {len(sequences)}).")
    lengths = {len(row["input_ids"]) for row in sequences}
    b, config = block_size, model.config
    if b is None:
        blockwise = config.attention_pattern == "blockwise" and config.num_blocks >= 2
        b = config.effective_block_size if blockwise else config.max_sequence_length // 2
    if len(lengths) != 1 or 2 * b > min(lengths):
        raise ValueError(
            f"The sequences have {sorted(lengths)} tokens; the diagnostic needs sequences of one length holding two "
            f"blocks of b = {b}."
        )
    # Masks drawn as run_mlm validates, then kept on block 1 only.
    rows = [{"input_ids": row["input_ids"], "sequence_id": row["sequence_id"]} for row in sequences]
    batch = MaskingCollator(tokenizer, VALIDATION_SEED, "block-diagnostic")(rows)
    original = torch.tensor([row["input_ids"] for row in rows])
    block_one = torch.zeros_like(original, dtype=torch.bool)
    block_one[:, b : 2 * b] = True
    masked = torch.where(block_one, batch["input_ids"], original)
    labels = batch["labels"].masked_fill(~block_one, -100)
    documents = [row["document"] for row in sequences]
    partner = torch.tensor(partners(documents))
    shuffled = masked.clone()
    shuffled[:, :b] = original[partner, :b]
    was_training = model.training
    model.eval()
    true_sums, counts = _loss_sums(model, masked, labels, batch_size)
    shuffled_sums, _ = _loss_sums(model, shuffled, labels, batch_size)
    model.train(was_training)
    total = counts.sum()
    difference = ((shuffled_sums - true_sums).sum() / total).item()
    residuals = shuffled_sums - true_sums - difference * counts
    n = len(counts)
    standard_error = math.sqrt((residuals**2).sum().item() * n / (n - 1)) / total.item()
    return {
        "sequences": n,
        "sequence_length": len(original[0]),
        "block_size": b,
        "masked_tokens": int(total.item()),
        "loss_true_block0": (true_sums.sum() / total).item(),
        "loss_shuffled_block0": (shuffled_sums.sum() / total).item(),
        "difference": difference,
        "difference_standard_error": standard_error,
        "same_document_pairs": sum(documents[i] == documents[j] for i, j in enumerate(partner.tolist())),
    }


@dataclass
class DiagnosticArguments:
    model_path: str = field(metadata={"help": "a saved BlockBertForMaskedLM folder with its tokenizer"})
    validation_files: list[str] = field(metadata={"help": "held-out .txt(.gz) / .jsonl(.gz) files"})
    document_boundary: Literal["file", "blank_line", "heading"] = option(
        "file", "where a document ends, as in run_mlm.py"
    )
    max_sequences: int | None = option(256, "the first K full held-out sequences")
    block_size: int | None = option(None, "b (default: the model's, or N / 2)")
    batch_size: int = 8
    threads: int | None = option(None, "torch CPU threads (default: torch's)")
    output_file: str | None = option(None, "write the result here as JSON")


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(DiagnosticArguments, description=__doc__, formatter_class=HelpFormatter)


def main(argv=None) -> int:
    (args,) = build_parser().parse_args_into_dataclasses(args=argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = AutoModelForMaskedLM.from_pretrained(args.model_path)
    tokenizer = AutoTokenizer.from_pretrained(args.model_path)
    seq_len = model.config.max_sequence_length
    sequences = full_sequences(
        args.validation_files, tokenizer, seq_len, args.document_boundary, limit=args.max_sequences
    )
    try:
        result = block_context_diagnostic(model, tokenizer, sequences, args.block_size, args.batch_size)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    if args.output_file:
        write_json_atomically(args.output_file, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
