"""Exports a saved BlockBERT model (any head, with its tokenizer) to ONNX, valid for every batch size and every length
up to N:

    python examples/export_onnx.py outputs/qa_model onnx_model

Writes `OUT/model.onnx` (with the config and tokenizer) only after ONNX Runtime has matched the eager model on real
tokenized text at lengths around the block boundaries and at N; prints the max difference per length as JSON. Exits
with status 1 and writes nothing when it does not match. Needs the `export` extra (onnx, onnxscript, onnxruntime).
Run the file with `blockbert_hf.export.OnnxBlockBert(OUT)(input_ids, attention_mask)`, which checks its inputs first.
"""

import json
import sys

from transformers import HfArgumentParser

from blockbert_hf.export import OnnxExportArguments, export_onnx_command
from blockbert_hf.training import HelpFormatter


def build_parser() -> HfArgumentParser:
    parser = HfArgumentParser(OnnxExportArguments, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("model_folder", help="a saved BlockBERT folder with its tokenizer")
    parser.add_argument("output_folder", help="where model.onnx is written (a new or empty folder)")
    return parser


def main(argv=None) -> int:
    args, positional = build_parser().parse_args_into_dataclasses(args=argv)
    try:
        differences = export_onnx_command(positional.model_folder, positional.output_folder, args)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"max_difference": max(differences.values()), "per_length": differences}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
