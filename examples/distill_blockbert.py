"""Self-distillation of a converted BlockBERT into its blockwise self, launched with Accelerate.

    accelerate launch examples/distill_blockbert.py --output_dir OUT --model_name_or_path outputs/minilm-n1024 \\
        --train_files train/*.jsonl.gz --validation_files held_out.jsonl.gz --document_boundary file \\
        --tokens_per_batch 4096 --per_device_train_batch_size 4 --max_train_steps 300 --learning_rate 1e-4 \\
        --eval_steps 50 --checkpointing_steps 50

The student is --model_name_or_path as it is (blockwise, n > 1: e.g. a checkpoint made by
examples/convert_roberta_to_blockbert.py); the teacher is the same weights with full attention, frozen. The student
learns to reproduce every layer's hidden states (mean squared difference over real tokens, divided by the teacher's
variance of that layer; --layer_weights) and the last layer's direction (cosine distance; --cosine_weight), with its
embeddings frozen (--train_embeddings trains them). Where N exceeds the teacher's (N = 1024 from a 512-position
checkpoint, with block-relative positions), the teacher reads windows of its N every N/2 tokens and each token's
target comes from the window where it is most central; --short_batch_every K trains every K-th step on sequences of
the teacher's N, where its targets are exact. No MLM head is needed.
Data: as examples/run_mlm.py reads it (--train_files, --validation_files or --validation_split_percentage,
--document_boundary); sequences are packed to N within documents.
Outputs in --output_dir: run_args.json, metrics.jsonl (training loss and its parts; held-out loss, each layer's
normalised MSE and the cosine distance, at step 0 and every --eval_steps), checkpoints/step_K (atomic),
distilled_model/ (the student, its tokenizer and a model card with its lineage and held-out results), results.json.
A run resumes exactly (--resume); an output folder of another run is refused before any work.
Exit status: 0 done; 1 the loss turned NaN/inf; 2 a bad option, input or output folder, said in one line `error: ...`,
before any work. All logic is in `blockbert_hf.train.distillation`.
"""

import json
import logging
import sys

from transformers import HfArgumentParser

from blockbert_hf.command_line import error_line, read_negative_values
from blockbert_hf.train.distillation import DistillationArguments, run_distillation
from blockbert_hf.train.runs import HelpFormatter, NonFiniteLossError


def build_parser() -> HfArgumentParser:
    parser = HfArgumentParser(DistillationArguments, description=__doc__, formatter_class=HelpFormatter)
    return read_negative_values(parser)


def main(argv=None) -> int:
    parser = build_parser()
    try:
        (args,) = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as error:  # arguments that DistillationArguments does not have
        parser.error(str(error))
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    try:
        results = run_distillation(args)
    except NonFiniteLossError as error:
        print(error_line(error), file=sys.stderr)
        return 1
    except (ValueError, OSError) as error:  # a bad option, input or output folder
        print(error_line(error), file=sys.stderr)
        return 2
    if results.get("finished"):
        shown = ("step", "eval_loss", "eval_cosine", "tokens_per_second")
        print(json.dumps({key: results[key] for key in shown if key in results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
