"""Demo on the bundled data: build a small BlockBERT, save it, reload it with `trust_remote_code`, compare outputs.

    python examples/demo.py [--output_dir outputs/demo-blockbert] [--text_file data/samples/wikitext2_test_sample.txt]

1. trains a byte-level BPE tokenizer on the text file and builds a small BlockBertForMaskedLM
   (4 layers, hidden 128, 4 heads, N = 256 tokens, n = 2 blocks of 128, heads "3:1");
2. encodes the first paragraphs of the text (right-padded batch) and runs the model;
3. saves model, code and tokenizer atomically to --output_dir;
4. in a fresh Python process in which `import blockbert_hf` fails, loads the folder with
   `AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)` and `AutoTokenizer`, and reruns the batch;
5. prints what was computed and the largest difference between the two runs.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import torch

from blockbert_hf import BlockBertConfig, BlockBertForMaskedLM
from blockbert_hf.saving import save_atomically
from blockbert_hf.tokenization import match_tokenizer_to_config, read_text_lines, train_roberta_tokenizer


REPO_ROOT = Path(__file__).resolve().parents[1]

RELOAD_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.modules["blockbert_hf"] = None  # prove that the saved folder needs no installed package
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    folder, texts_file, output_file = sys.argv[1:]
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).eval()
    texts = json.load(open(texts_file))
    batch = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    torch.save({"logits": logits, "class": type(model).__module__ + "." + type(model).__name__,
                "model_max_length": tokenizer.model_max_length}, output_file)
    """
)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="outputs/demo-blockbert")
    parser.add_argument("--text_file", default=str(REPO_ROOT / "data" / "samples" / "wikitext2_test_sample.txt"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)

    lines = read_text_lines(args.text_file)
    body = [line for line in lines if not line.startswith("=")]
    # A long paragraph (truncated to N), a medium one, and one sentence shorter than a block: a padded batch.
    paragraphs = [body[0], body[2], body[1].split(" . ")[0] + " ."]
    tokenizer = train_roberta_tokenizer(lines, vocab_size=2000, model_max_length=256)
    config = BlockBertConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=258,
        num_blocks=2,
        heads_per_shift="3:1",
    )
    match_tokenizer_to_config(tokenizer, config)
    model = BlockBertForMaskedLM(config).eval()

    batch = tokenizer(paragraphs, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    lengths = batch["attention_mask"].sum(1).tolist()
    n, b, big_n = config.num_blocks, config.block_size, config.max_sequence_length
    print(
        f"BlockBERT: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
        f"{config.num_attention_heads} heads, N = {big_n}, n = {n} blocks of b = {b}, heads per shift "
        f"{config.heads_per_shift} (shifts {config.head_shifts}), {model.num_parameters():,} parameters"
    )
    print(
        f"attention scores per head and sequence: {n} x {b} x {b} = {n * b * b:,} "
        f"instead of {big_n} x {big_n} = {big_n * big_n:,} (1/{n})"
    )
    print(
        f"batch: {len(paragraphs)} paragraphs of the bundled WikiText-2 sample, {lengths} tokens, "
        f"padded to {batch['input_ids'].shape[1]}; MLM logits {tuple(logits.shape)} (untrained weights)"
    )

    folder = save_atomically(args.output_dir, model.save_pretrained, tokenizer.save_pretrained)
    print(f"saved to {folder}: {', '.join(sorted(p.name for p in folder.iterdir()))}")

    with tempfile.TemporaryDirectory() as scratch:
        texts_file, output_file = Path(scratch) / "texts.json", Path(scratch) / "reloaded.pt"
        texts_file.write_text(json.dumps(paragraphs))
        subprocess.run(
            [sys.executable, "-c", RELOAD_SCRIPT, str(folder), str(texts_file), str(output_file)], check=True
        )
        reloaded = torch.load(output_file)
    real = batch["attention_mask"].bool()
    difference = (reloaded["logits"][real] - logits[real]).abs().max().item()
    print(
        f"reloaded without blockbert_hf via AutoModelForMaskedLM(trust_remote_code=True): {reloaded['class']}, "
        f"tokenizer model_max_length {reloaded['model_max_length']}"
    )
    print(f"max |logits(original) - logits(reloaded)| over real tokens: {difference:.2e}")
    if difference > 1e-5:
        raise SystemExit("the reloaded model computes something else")


if __name__ == "__main__":
    main()
