"""Masked-language-model pre-training of BlockBERT, launched with Accelerate.

    accelerate launch examples/run_mlm.py --output_dir OUT \\
        --train_files a.txt.gz b.txt.gz --validation_files held_out.txt.gz --document_boundary heading \\
        --train_tokenizer_vocab_size 8192 --max_seq_length 512 \\
        --num_hidden_layers 4 --hidden_size 256 --num_attention_heads 4 --num_blocks 2 --heads_per_shift 3:1 \\
        --tokens_per_batch 16384 --per_device_train_batch_size 8 --max_train_tokens 4000000 \\
        --eval_steps 50 --checkpointing_steps 50

Data: local .txt / .txt.gz / .jsonl files (or --dataset_name for a hub dataset). --document_boundary says where
documents end: `file` (a .txt file is one document; a .jsonl record or hub row is one), `blank_line`, or `heading`
(a line matching --document_heading_regex starts one; default WikiText's ` = Title = `). Sequences are packed like
RoBERTa's DOC-SENTENCES: contiguous text up to N tokens, never across a document boundary.
Model: from scratch (--config_name and/or size flags) or --model_name_or_path (e.g. a converted checkpoint; the
blockwise flags override its config; --block_relative_positions --num_blocks 2 runs a 512-position checkpoint at
N = 1024). Tokenizer: --tokenizer_name, the model's, or trained on the fly (--train_tokenizer_vocab_size), saved with
the model. Adapting a checkpoint (docs/pretraining.md): --train_only_mlm_head trains a new MLM head on its frozen
encoder, --freeze_word_embeddings keeps its word embeddings (and the decoder tied to them); every parameter trains by
default. --eval_before_training scores the starting model as step 0.
Defaults are the paper's: AdamW (0.9, 0.999, eps 1e-8), weight decay 0.01, peak lr 2.5e-4 with linear warmup and
decay, gradient clipping 1.0, 131,072 tokens per batch (B x N, split into processes x micro-batches x accumulation).
Outputs in --output_dir: run_args.json, metrics.jsonl (+ TensorBoard), checkpoints/step_K (atomic), final_model/
(with its Hub model card README.md: validation loss and perplexity, training loss, hyperparameters; --license sets
its license), results.json. --push_to_hub (--hub_model_id) then uploads final_model/ to the Hub;
--gradient_checkpointing trades compute for memory. An output folder of another run (other arguments, or finished) is
refused before any work: pass --resume to continue from the latest checkpoint (exactly: same losses as an
uninterrupted run) or --overwrite_output_dir to start over; a corrupted latest checkpoint is skipped, with a warning,
for the one before.
Exit status: 0 done; 1 the loss turned NaN/inf (the run stops, its last checkpoint stays); 2 a bad option, input or
output folder, said in one line `error: ...` that names it, before any work (before training where only the data
shows it). A run refused or failed before it trained does not block its retry in the same folder.
Two CPU processes: `ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 examples/run_mlm.py ...`.
All logic is in `blockbert_hf.train.pretraining`.
"""

import json
import logging
import sys

from transformers import HfArgumentParser

from blockbert_hf.command_line import error_line, read_negative_values
from blockbert_hf.train.pretraining import PretrainingArguments, run_pretraining
from blockbert_hf.train.runs import HelpFormatter, NonFiniteLossError


def build_parser() -> HfArgumentParser:
    parser = HfArgumentParser(PretrainingArguments, description=__doc__, formatter_class=HelpFormatter)
    return read_negative_values(parser)


def main(argv=None) -> int:
    parser = build_parser()
    try:
        (args,) = parser.parse_args_into_dataclasses(args=argv)
    except ValueError as error:  # arguments that PretrainingArguments does not have
        parser.error(str(error))
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    try:
        results = run_pretraining(args)
    except NonFiniteLossError as error:
        print(error_line(error), file=sys.stderr)
        return 1
    except (ValueError, OSError) as error:  # a bad option, input or output folder
        print(error_line(error), file=sys.stderr)
        return 2
    if results.get("finished") and "eval_perplexity" in results:
        print(json.dumps({key: results[key] for key in ("step", "eval_loss", "eval_perplexity", "tokens_per_second")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
