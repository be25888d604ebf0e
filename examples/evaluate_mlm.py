"""Validation perplexity of a saved masked LM on local text files, measured exactly as `run_mlm.py` validates
(DOC-SENTENCES packing at the model's N, 15% masking with the fixed validation seed), e.g. to score a finished run's
`final_model/` on the same masked tokens as other runs:

    python examples/evaluate_mlm.py outputs/run/final_model --validation_files held_out.txt.gz \\
        --document_boundary heading --max_eval_sequences 256
"""

import argparse
import json

from blockbert_hf.pretraining import WIKITEXT_HEADING, evaluate_saved_model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_path", help="a saved *ForMaskedLM folder with its tokenizer")
    parser.add_argument("--validation_files", nargs="+", required=True, help=".txt, .txt.gz or .jsonl files")
    parser.add_argument("--document_boundary", default="file", choices=["file", "blank_line", "heading"])
    parser.add_argument("--document_heading_regex", default=WIKITEXT_HEADING)
    parser.add_argument("--text_column", default="text", help="the text field of .jsonl records")
    parser.add_argument("--max_eval_sequences", type=int, help="score only the first K packed sequences")
    parser.add_argument("--batch_size", type=int, default=16)
    args = parser.parse_args(argv)
    metrics = evaluate_saved_model(
        args.model_path,
        args.validation_files,
        args.document_boundary,
        args.document_heading_regex,
        args.text_column,
        args.max_eval_sequences,
        args.batch_size,
    )
    print(json.dumps(metrics))


if __name__ == "__main__":
    main()
