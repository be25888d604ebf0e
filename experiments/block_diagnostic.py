"""Does a blockwise masked LM read the block before? Its MLM loss on block-1 tokens with the true block 0 against
the same block 1 after another held-out sequence's block 0 (see `blockbert_experiments.block_diagnostic`).

    python experiments/block_diagnostic.py --model_path outputs/adaptation/runs/n512_n2_10-2/final_model \\
        --validation_files outputs/adaptation_corpus/held_out/wikitext2_test.jsonl.gz --max_sequences 256 \\
        --output_file outputs/adaptation/diagnostic_n512_n2_10-2.json

A difference (shuffled minus true) about 0, against its standard error, says that the heads which read block 0 do not
use it. The model's own N and b are used (a full-attention model is split at N / 2, or --block_size). Prints the
result as JSON and writes it to --output_file if given.
"""

import json
import sys
from dataclasses import dataclass, field
from typing import Literal

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer, HfArgumentParser

from blockbert_experiments.block_diagnostic import block_context_diagnostic, full_sequences
from blockbert_hf.saving import write_json_atomically
from blockbert_hf.training import HelpFormatter


@dataclass
class DiagnosticArguments:
    model_path: str = field(metadata={"help": "a saved BlockBertForMaskedLM folder with its tokenizer"})
    validation_files: list[str] = field(metadata={"help": "held-out .txt(.gz) / .jsonl(.gz) files"})
    document_boundary: Literal["file", "blank_line", "heading"] = field(
        default="file", metadata={"help": "where a document ends, as in run_mlm.py"}
    )
    max_sequences: int | None = field(default=256, metadata={"help": "the first K full held-out sequences"})
    block_size: int | None = field(default=None, metadata={"help": "b (default: the model's, or N / 2)"})
    batch_size: int = 8
    threads: int | None = field(default=None, metadata={"help": "torch CPU threads (default: torch's)"})
    output_file: str | None = field(default=None, metadata={"help": "write the result here as JSON"})


def main(argv=None) -> int:
    (args,) = HfArgumentParser(
        DiagnosticArguments, description=__doc__, formatter_class=HelpFormatter
    ).parse_args_into_dataclasses(args=argv)
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
