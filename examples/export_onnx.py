"""Exports a saved BlockBERT model (any head, with its tokenizer) to ONNX, valid for every batch size and every length
up to N:

    python examples/export_onnx.py outputs/qa_model onnx_model

Writes `OUT/model.onnx` (with the config and tokenizer) only after ONNX Runtime has matched the eager model on
question/context pairs of real text (token types 0 and 1 for BERT tokenizers, every block holding text) at lengths
around the block boundaries and at N; prints the max difference per length as JSON. Exits with status 1 and writes
nothing when it does not match, or when the folder has no tokenizer files or holds a multiple-choice model (not
exportable); exits with status 2 on a bad option (a --text_file that is missing or not UTF-8 among them). Needs the
`export` extra (onnx, onnxscript, onnxruntime). Run the file with
`blockbert_hf.onnx.OnnxBlockBert(OUT)(**tokenizer(question, context, return_tensors="np"))`, which checks its
inputs first, or a question-answering model in the pipeline with
`blockbert_hf.onnx.OnnxBlockBertForQuestionAnswering.from_pretrained(OUT)` (optimum's arguments: `file_name`,
`provider`, `session_options`; `save_pretrained`). `--quantize` also writes `OUT/model_int8.onnx` (int8 weight
products with activations quantized at run time per token and block of 128 channels, `--int8_activations`;
attention's other products, the embeddings and the task head stay in fp32; `docs/export.md`) and
`OUT/quantization.json`: the recipe, its difference per length, and for a question-answering model how many of its
answers to built-in questions (over a paragraph and over it repeated to fill several windows) equal the eager model's,
with a warning, logged and in the file, when some do not.
"""

import json
import sys

from transformers import HfArgumentParser

from blockbert_hf.command_line import read_negative_values
from blockbert_hf.onnx.export import OnnxExportArguments, export_onnx_command
from blockbert_hf.saving import OutputOverwritesInputError, check_output_keeps_inputs, open_text
from blockbert_hf.train.runs import HelpFormatter


def build_parser() -> HfArgumentParser:
    parser = HfArgumentParser(OnnxExportArguments, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("model_folder", help="a saved BlockBERT folder with its tokenizer")
    parser.add_argument("output_folder", help="where model.onnx is written (a new or empty folder)")
    return read_negative_values(parser)


def check_text_file(parser: HfArgumentParser, path: str) -> None:
    """Refuses, before any work, a --text_file that cannot be read as UTF-8 text, naming it."""
    try:
        with open_text(path) as file:
            file.read()
    except UnicodeDecodeError as error:
        parser.error(f"--text_file {path} is not UTF-8 text ({error.reason} at byte {error.start}): save it as UTF-8.")
    except OSError as error:
        parser.error(f"--text_file {path} cannot be read ({error.strerror or error}).")


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args, positional = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as error:  # an option's value checked by OnnxExportArguments (e.g. --tolerance nan)
        parser.error(str(error))
    inputs = {"model_folder": positional.model_folder, "--text_file": args.text_file}
    try:
        check_output_keeps_inputs(positional.output_folder, inputs, output_name="output_folder")
    except OutputOverwritesInputError as error:  # refused with or without --overwrite
        parser.error(str(error))
    if args.text_file is not None:
        check_text_file(parser, args.text_file)
    try:
        differences = export_onnx_command(positional.model_folder, positional.output_folder, args)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"max_difference": max(differences.values()), "per_length": differences}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
