"""Writes the adaptation corpus: the training and held-out text on which a converted encoder continues masked-LM
training (`experiments/adaptation.py`), with a manifest of its documents and tokens.

    python experiments/adaptation_corpus.py --data_dir DATA --output_dir outputs/adaptation_corpus

DATA holds corpus/wikitext-2/wiki.{valid,test}.tokens.gz, corpus/gutenberg/*.txt.gz and squad/dev-v1.1.json.gz.
Training text: WikiText-2 valid, the Project Gutenberg novels and the contexts of the first half of SQuAD v1.1 dev
(its articles split as `python -m blockbert_hf.qa split-articles` splits them) without the QA comparison's dev
articles; never a context of the dev articles or of the second (test) half. Held-out text: WikiText-2 test.
Every file is `.jsonl.gz`, one record per document: `examples/run_mlm.py --document_boundary file` reads it.
`manifest.json` gives each file's documents, tokens under the tokenizer (default: the installed all-MiniLM-L6-v2's)
and packed sequences at N = 512 and 1024. Logic in `blockbert_experiments.adaptation_corpus`.
"""

import json
import sys

from transformers import HfArgumentParser

from blockbert_experiments.adaptation_corpus import MANIFEST_FILE, CorpusArguments, build_corpus
from blockbert_hf.training import HelpFormatter


def build_parser() -> HfArgumentParser:
    return HfArgumentParser(CorpusArguments, description=__doc__, formatter_class=HelpFormatter)


def main(argv=None) -> int:
    (args,) = build_parser().parse_args_into_dataclasses(args=argv)
    try:
        manifest = build_corpus(args)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(manifest["totals"]))
    print(f"written: {args.output_dir}/ ({MANIFEST_FILE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
