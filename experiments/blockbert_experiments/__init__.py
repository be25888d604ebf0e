"""The experiments behind the repository's reports (not part of the installed `blockbert_hf` package): `demo` (`make
demo`), `minilm` (the installed all-MiniLM-L6-v2), `long_context` (the long-context QA sets), `qa_comparison` (the
fine-tuning comparison of attention patterns and its report), `pretraining_comparison`, `adaptation`,
`weight_parts` (changed weights as bf16 parts) and `visualization`.

Each `experiments/SCRIPT.py` starts the command line (`main`) of its module here; `python experiments/SCRIPT.py` puts
`experiments/` on `sys.path`, the tests find it through pytest's `pythonpath`. `experiments/blockbert_benchmarks` links
to `benchmarks/`'s package (peak memory, timing, the machine's record).
"""
