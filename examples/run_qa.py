"""Fine-tune and/or evaluate an extractive QA model (BlockBertForQuestionAnswering or any
AutoModelForQuestionAnswering) on SQuAD 1.1/2.0 or MRQA, on CPU or with Accelerate.

    accelerate launch examples/run_qa.py --model_name_or_path CHECKPOINT \\
        --train_file train.json --validation_file dev.json --do_train --do_eval --output_dir outputs/qa
    python examples/run_qa.py ...            # one process
    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 examples/run_qa.py ...   # 2 CPU processes
    (`accelerate launch --cpu --num_processes 2` starts only one process unless MPI is set up)

Data: --dataset_name squad | squad_v2 | mrqa (Hub; --dataset_subset for an MRQA subset such as NewsQA), or local
--train_file / --validation_file: SQuAD-format .json/.json.gz or MRQA .jsonl/.jsonl.gz.

Defaults: windows of the model's N tokens (--max_seq_length), --doc_stride 128, 4 epochs (the paper's), linear
schedule with 10 percent warmup, batch 32, learning rate 3e-5 from the grid 1e-5, 2e-5, 3e-5, 5e-5 (pick it on the
dev set). Batches are padded per batch on the right; --group_by_length batches training windows of similar lengths
(on SQuAD about 2.5x less padding). Mixed precision: `accelerate launch --mixed_precision bf16` (or
--mixed_precision here).

Writes OUTPUT_DIR/model (the fine-tuned model, with the QA pipeline for trust_remote_code, and its Hub model card
README.md: the run's EM/F1, training loss and hyperparameters; --license sets its license),
OUTPUT_DIR/checkpoints/step_N (--checkpointing_steps), metrics.jsonl (the training loss),
OUTPUT_DIR/eval_predictions.json ({id: answer}), eval_metrics.json (SQuAD EM/F1), and for SQuAD 2.0
eval_null_odds.json. All files are written atomically. An output folder of another run (other arguments, or a
finished one) is refused before any work: --resume continues from the latest checkpoint
(--resume_from_checkpoint PATH from another), --overwrite_output_dir starts over.

To split the SQuAD v1.1 dev set into two halves of disjoint articles:
    python -m blockbert_hf.qa split-articles path/to/dev-v1.1.json.gz outputs/squad-v1.1-dev-halves
"""

import json
import logging

from transformers import HfArgumentParser

from blockbert_hf.qa import QARunConfig, run_qa
from blockbert_hf.training import HelpFormatter


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(QARunConfig, description=__doc__, formatter_class=HelpFormatter)


def main(argv=None) -> None:
    (config,) = build_parser().parse_args_into_dataclasses(args=argv)
    # run_qa logs on the main process only (and quiets the libraries elsewhere once it knows which process it is).
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    results = run_qa(config)
    if results:  # empty on the other processes
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
