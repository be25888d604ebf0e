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
schedule with 10% warmup, batch 32, learning rate 3e-5 from the grid 1e-5, 2e-5, 3e-5, 5e-5 (pick it on the dev set).
Batches are padded per batch on the right; --group_by_length batches training windows of similar lengths (on SQuAD
about 2.5x less padding). Mixed precision: `accelerate launch --mixed_precision bf16` (or --mixed_precision here).

Writes OUTPUT_DIR/model (the fine-tuned model, with the QA pipeline for trust_remote_code),
OUTPUT_DIR/checkpoints/step_N (--checkpointing_steps; resume with --resume_from_checkpoint latest),
OUTPUT_DIR/eval_predictions.json ({id: answer}), eval_metrics.json (SQuAD EM/F1), and for SQuAD 2.0
eval_null_odds.json. All files are written atomically.

To split the SQuAD v1.1 dev set into two halves of disjoint articles:
    python -m blockbert_hf.qa split-articles ../shared/data/squad/dev-v1.1.json.gz outputs/squad-v1.1-dev-halves
"""

import argparse
import json
import logging

from blockbert_hf.qa import LEARNING_RATE_GRID, QARunConfig, config_from_namespace, run_qa


def parse_args(argv=None) -> argparse.Namespace:
    defaults = QARunConfig(model_name_or_path="", output_dir="")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    model = parser.add_argument_group("model")
    model.add_argument("--model_name_or_path", required=True, help="A saved model folder (or Hub id).")
    model.add_argument("--tokenizer_name", help="Tokenizer folder, if not the model's.")
    model.add_argument("--attn_implementation", help="eager, sdpa, flex_attention, ... (default: the model's).")
    model.add_argument("--trust_remote_code", action="store_true", help="Allow code saved with the model.")
    data = parser.add_argument_group("data")
    data.add_argument("--dataset_name", help="Hub dataset: squad, squad_v2 or mrqa.")
    data.add_argument("--dataset_subset", help="MRQA subset, e.g. SQuAD, NewsQA, TriviaQA-web, HotpotQA.")
    data.add_argument("--train_file", help="SQuAD .json(.gz) or MRQA .jsonl(.gz) to train on.")
    data.add_argument("--validation_file", help="SQuAD .json(.gz) or MRQA .jsonl(.gz) to evaluate on.")
    data.add_argument("--train_split", default=defaults.train_split)
    data.add_argument("--validation_split", default=defaults.validation_split)
    data.add_argument("--max_train_samples", type=int, help="Use only the first N training questions.")
    data.add_argument("--max_eval_samples", type=int, help="Use only the first N evaluation questions.")
    data.add_argument(
        "--version_2_with_negative",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Allow the empty answer (SQuAD 2.0). Default: on when some question has no answer.",
    )
    windows = parser.add_argument_group("windows and answers")
    windows.add_argument("--max_seq_length", type=int, help="Tokens per window (default: the model's N).")
    windows.add_argument("--doc_stride", type=int, default=defaults.doc_stride, help="Overlap between windows.")
    windows.add_argument("--n_best_size", type=int, default=defaults.n_best_size)
    windows.add_argument("--max_answer_length", type=int, default=defaults.max_answer_length, help="In tokens.")
    windows.add_argument(
        "--null_score_diff_threshold",
        type=float,
        default=defaults.null_score_diff_threshold,
        help="SQuAD 2.0: the null answer must beat the best span by more than this.",
    )
    training = parser.add_argument_group("training")
    training.add_argument("--do_train", action="store_true")
    training.add_argument("--do_eval", action="store_true")
    training.add_argument("--output_dir", required=True)
    training.add_argument("--num_train_epochs", type=float, default=defaults.num_train_epochs)
    training.add_argument("--max_train_steps", type=int, help="Overrides --num_train_epochs.")
    training.add_argument(
        "--learning_rate",
        type=float,
        default=defaults.learning_rate,
        help=f"Pick it on the dev set from {', '.join(map(str, LEARNING_RATE_GRID))}.",
    )
    training.add_argument("--weight_decay", type=float, default=defaults.weight_decay)
    training.add_argument("--warmup_ratio", type=float, default=defaults.warmup_ratio)
    training.add_argument("--per_device_train_batch_size", type=int, default=defaults.per_device_train_batch_size)
    training.add_argument("--per_device_eval_batch_size", type=int, default=defaults.per_device_eval_batch_size)
    training.add_argument("--gradient_accumulation_steps", type=int, default=defaults.gradient_accumulation_steps)
    training.add_argument(
        "--group_by_length",
        action="store_true",
        help="Batch training windows of similar lengths (much less padding; SQuAD: about 2x faster).",
    )
    training.add_argument("--seed", type=int, default=defaults.seed)
    training.add_argument("--mixed_precision", choices=["no", "fp16", "bf16"], help="Default: accelerate's config.")
    training.add_argument("--checkpointing_steps", help="Save a checkpoint every N steps, or 'epoch'.")
    training.add_argument("--resume_from_checkpoint", help="A checkpoint folder, or 'latest' in OUTPUT_DIR.")
    training.add_argument("--logging_steps", type=int, default=defaults.logging_steps)
    training.add_argument("--write_nbest", action="store_true", help="Also write eval_nbest_predictions.json.")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    # run_qa logs on the main process only (and quiets the libraries elsewhere once it knows which process it is).
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    results = run_qa(config_from_namespace(args))
    if results:  # empty on the other processes
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
