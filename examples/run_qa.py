"""Fine-tune and/or evaluate an extractive QA model (BlockBertForQuestionAnswering or any
AutoModelForQuestionAnswering) on SQuAD 1.1/2.0 or MRQA, on CPU or with Accelerate.

    accelerate launch examples/run_qa.py --model_name_or_path CHECKPOINT \\
        --train_file train.json --validation_file dev.json --do_train --do_eval --output_dir outputs/qa
    python examples/run_qa.py ...            # one process
    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 examples/run_qa.py ...   # 2 CPU processes
    (`accelerate launch --cpu --num_processes 2` starts only one process unless MPI is set up)

Data: --dataset_name, any Hub dataset with the SQuAD columns (id, title, context, question, answers), such as
rajpurkar/squad or rajpurkar/squad_v2 (--dataset_config_name picks a configuration), or in the MRQA schema
(mrqa-workshop/mrqa; --mrqa_subset keeps one subset such as NewsQA); or a local Dataset.save_to_disk folder or file
with these columns (as Dataset.to_json or to_parquet writes them). Or --train_file / --validation_file: such a file,
a SQuAD-format .json/.json.gz or an MRQA .jsonl/.jsonl.gz. --dataset_subset of earlier versions is now --mrqa_subset.

Defaults: windows of the model's N tokens (--max_seq_length), --doc_stride 128, 4 epochs (the paper's), linear
schedule with 10 percent warmup, batch 32, learning rate 3e-5 from the grid 1e-5, 2e-5, 3e-5, 5e-5 (pick it on the
dev set; the usual settings for BERT/RoBERTa-base). A model with block-relative positions whose windows span several
blocks gets --window_layout question_prefixed_blocks by default. Batches are padded per batch on the right;
--group_by_length batches training windows of similar lengths (less padding). Mixed precision: `accelerate launch
--mixed_precision bf16` (or --mixed_precision here). --gradient_checkpointing trades compute for memory; --report_to
tensorboard logs the training loss to TensorBoard too; --push_to_hub (--hub_model_id) uploads OUTPUT_DIR/model to the
Hub at the end.

Writes OUTPUT_DIR/model (the fine-tuned model, with the QA pipeline for trust_remote_code, and its Hub model card
README.md: the run's EM/F1, training loss and hyperparameters; --license sets its license),
OUTPUT_DIR/checkpoints/step_N (--checkpointing_steps), metrics.jsonl (the training loss),
OUTPUT_DIR/eval_predictions.json ({id: answer}), eval_metrics.json (SQuAD EM/F1), and for SQuAD 2.0
eval_null_odds.json. All files are written atomically. An output folder of another run (other arguments, or a
finished one) is refused before any work: --resume continues from the latest checkpoint (skipping, with a warning, a
corrupted one; --resume_from_checkpoint PATH from another), --overwrite_output_dir starts over.

Exit status: 0 done; 1 the training loss turned NaN or infinite (the last good checkpoint stays); 2 a bad option,
input or output folder, said in one line `error: ...` that names it, before any work (before training or inference
where only the data shows it). A run refused or failed before it trained does not block its retry in the same folder.

To split the SQuAD v1.1 dev set into two halves of disjoint articles:
    python -m blockbert_hf.train.qa split-articles path/to/dev-v1.1.json.gz outputs/squad-v1.1-dev-halves
"""

import json
import logging
import sys

from transformers import HfArgumentParser

from blockbert_hf.command_line import error_line, read_negative_values, rename_options
from blockbert_hf.train.qa import QARunConfig, run_qa
from blockbert_hf.train.runs import HelpFormatter, NonFiniteLossError


# The names of earlier versions -> today's.
RENAMED_OPTIONS = {"--dataset_subset": "--mrqa_subset"}


def build_parser() -> HfArgumentParser:
    return read_negative_values(HfArgumentParser(QARunConfig, description=__doc__, formatter_class=HelpFormatter))


def main(argv=None) -> int:
    parser = build_parser()
    try:
        (config,) = parser.parse_args_into_dataclasses(args=rename_options(argv, RENAMED_OPTIONS))
    except ValueError as error:  # arguments that QARunConfig does not have
        parser.error(str(error))
    # run_qa logs on the main process only (and quiets the libraries elsewhere once it knows which process it is).
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    try:
        results = run_qa(config)
    except NonFiniteLossError as error:
        print(error_line(error), file=sys.stderr)
        return 1
    except (ValueError, OSError) as error:  # a bad option, input or output folder
        print(error_line(error), file=sys.stderr)
        return 2
    if results:  # empty on the other processes
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
