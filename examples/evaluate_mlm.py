"""Validation perplexity of a saved masked LM on local text files, measured exactly as `run_mlm.py` validates
(DOC-SENTENCES packing at the model's N, 15 percent masking with the fixed validation seed), e.g. to score a finished
run's `final_model/` on the same masked tokens as other runs:

    python examples/evaluate_mlm.py outputs/run/final_model --validation_files held_out.txt.gz \\
        --document_boundary heading --max_eval_sequences 256

Prints the metrics as JSON. Exits with status 1 (and says why) when the score would mean nothing: a model whose
checkpoint lacks weights of the masked LM (e.g. a sentence encoder converted without its MLM head: the head would be
random), or a loss that is NaN/inf.
"""

import json
import sys
from dataclasses import asdict

from transformers import HfArgumentParser

from blockbert_hf.command_line import read_negative_values
from blockbert_hf.train.pretraining import MLMEvaluationArguments, UnreliableScoreError, evaluate_saved_model
from blockbert_hf.train.runs import HelpFormatter


def build_parser() -> HfArgumentParser:
    parser = HfArgumentParser(MLMEvaluationArguments, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("model_path", help="a saved *ForMaskedLM folder with its tokenizer")
    return read_negative_values(parser)


def main(argv=None) -> int:
    args, positional = build_parser().parse_args_into_dataclasses(args=argv)
    try:
        metrics = evaluate_saved_model(positional.model_path, **asdict(args))
    except UnreliableScoreError as error:
        if error.metrics is not None:
            print(json.dumps(error.metrics))
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
