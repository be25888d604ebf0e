"""The helpers that several experiments share (not part of the installed `blockbert_hf` package): `demo` (`make demo`),
`minilm` (the installed all-MiniLM-L6-v2), `long_context` and `context_filling` (the long-context QA sets),
`qa_comparison` (the fine-tuning comparison of attention patterns and its reports) and `weight_parts` (changed weights
as bf16 parts). A script whose logic nothing else imports keeps it in `experiments/SCRIPT.py` itself.

`python experiments/SCRIPT.py` puts `experiments/` on `sys.path`, the tests find it through pytest's `pythonpath`.
`experiments/blockbert_benchmarks` links to `benchmarks/`'s package (peak memory, timing, the machine's record).
"""
